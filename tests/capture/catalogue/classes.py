"""Catalogue cases: classes (super(), properties, staticmethod/classmethod, __call__,
dataclasses and NamedTuple, modules built in forward, module iteration, containers of
modules indexed and sliced)."""
from .case import Case

CASES = [
    # ------------------------------------------------------------ super()
    Case("super_zero_arg_forward", """
class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
    def forward(self, x):
        return self.lin(x)
class Child(Base):
    def forward(self, x):
        return super().forward(x).relu() + 1
fn = Child()
""", "T(2, 3)"),
    Case("super_two_arg_method", """
class Base(torch.nn.Module):
    def scale(self, x):
        return x * 2
class Child(Base):
    def scale(self, x):
        return super(Child, self).scale(x) + 1
    def forward(self, x):
        return self.scale(x)
fn = Child()
""", "T(3,)"),
    Case("super_chain_three_levels", """
class A(torch.nn.Module):
    def f(self, x):
        return x + 1
class B(A):
    def f(self, x):
        return super().f(x) * 2
class C(B):
    def f(self, x):
        return super().f(x) - 3
    def forward(self, x):
        return self.f(x)
fn = C()
""", "T(3,)"),
    Case("super_in_plain_class", """
class Base:
    def act(self, x):
        return x.tanh()
class Child(Base):
    def act(self, x):
        return super().act(x) * 2
obj = Child()
def fn(x):
    return obj.act(x)
""", "T(3,)"),
    # ------------------------------------------------------------ descriptors
    Case("property_on_module", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))
    @property
    def doubled(self):
        return self.w * 2
    def forward(self, x):
        return x * self.doubled
fn = M()
""", "T(3,)"),
    Case("property_on_plain_object", """
class Cfg:
    def __init__(self, n):
        self.n = n
    @property
    def half(self):
        return self.n // 2
cfg = Cfg(8)
def fn(x):
    return x * cfg.half
""", "T(3,)"),
    Case("staticmethod_call", """
class Ops:
    @staticmethod
    def double(t):
        return t * 2
ops = Ops()
def fn(x):
    return Ops.double(x) + ops.double(x)
""", "T(3,)"),
    Case("classmethod_call", """
class Ops:
    factor = 3
    @classmethod
    def scale(cls, t):
        return t * cls.factor
class Sub(Ops):
    factor = 5
def fn(x):
    return Ops.scale(x), Sub.scale(x)
""", "T(3,)"),
    Case("staticmethod_in_module_forward", """
class M(torch.nn.Module):
    @staticmethod
    def act(t):
        return t.sigmoid()
    @classmethod
    def name(cls):
        return cls.__name__
    def forward(self, x):
        return self.act(x), self.name()
fn = M()
""", "T(3,)"),
    Case("dunder_call_on_object", """
class Scaler:
    def __init__(self, k):
        self.k = k
    def __call__(self, t):
        return t * self.k
scaler = Scaler(4.0)
def fn(x):
    return scaler(x) + 1
""", "T(3,)"),
    Case("class_attribute_and_instance_attribute", """
class Cfg:
    depth = 2
    def __init__(self):
        self.width = 3
cfg = Cfg()
def fn(x):
    return x * Cfg.depth + cfg.width + cfg.depth
""", "T(3,)"),
    Case("bound_method_passed_around", """
class Net(torch.nn.Module):
    def act(self, t):
        return t.relu()
    def forward(self, x):
        f = self.act
        return f(x) + list(map(f, [x]))[0]
fn = Net()
""", "T(3,)"),
    # ------------------------------------------------------------ dataclasses, NamedTuple
    Case("namedtuple_input_fields", """
import collections
Pair = collections.namedtuple("Pair", ["a", "b"])
def fn(p):
    return p.a * p.b + p[0], p._fields
""", "Pair(T(3,), T(3,))"),
    Case("typing_namedtuple_input_returned", """
import typing
class Out(typing.NamedTuple):
    x: object
    y: object
def fn(o):
    return o.x + o.y, o
""", "Out(T(2,), T(2,))"),
    Case("namedtuple_unpack_and_index", """
import collections
P = collections.namedtuple("P", "u v w")
def fn(p):
    u, v, w = p
    return u + v * w, p[-1], len(p)
""", "P(T(2,), T(2,), T(2,))"),
    Case("dataclass_input_fields", """
import dataclasses
@dataclasses.dataclass
class Batch:
    x: object
    scale: float = 2.0
def fn(b):
    return b.x * b.scale
""", "Batch(T(3,))"),
    Case("dataclass_passed_to_helper", """
import dataclasses
@dataclasses.dataclass
class Batch:
    x: object
    y: object
def combine(b):
    return b.x - b.y
def fn(b):
    return combine(b) * 2, b.y
""", "Batch(T(3,), T(3,))"),
    Case("max_namedtuple_fields_into_helper", """
def helper(r):
    return r.values * 2 + r.indices
def fn(x):
    return helper(x.max(dim=0))
""", "T(3, 4)"),
    # ------------------------------------------------------------ modules inside forward
    Case("module_constructed_in_forward", """
def fn(x):
    return nn.Softmax(dim=-1)(x), nn.ReLU()(x)
""", "T(2, 3)"),
    Case("module_constructed_in_module_forward", """
class M(torch.nn.Module):
    def forward(self, x):
        act = nn.GELU()
        return act(x) + nn.Tanh()(x)
fn = M()
""", "T(2, 3)"),
    Case("functional_module_chain_built_inline", """
def fn(x):
    for m in [nn.ReLU(), nn.Sigmoid()]:
        x = m(x)
    return x
""", "T(2, 3)"),
    # ------------------------------------------------------------ module iteration
    Case("iterate_self_parameters", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(2, 2)
        self.b = torch.nn.Linear(2, 2)
    def forward(self, x):
        total = 0
        for p in self.parameters():
            total = total + p.sum()
        return x * total
fn = M()
""", "T(2,)"),
    Case("named_parameters_names", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 3)
    def forward(self, x):
        names = []
        out = x
        for name, p in self.named_parameters():
            names.append(name)
            out = out + p.mean()
        return out, names
fn = M()
""", "T(2,)"),
    Case("children_iteration", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(3, 3)
        self.act = torch.nn.ReLU()
        self.l2 = torch.nn.Linear(3, 3)
    def forward(self, x):
        for child in self.children():
            x = child(x)
        return x
fn = M()
""", "T(2, 3)"),
    Case("modules_iteration_isinstance", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
        self.out = torch.nn.Linear(3, 1)
    def forward(self, x):
        n = 0
        for m in self.modules():
            if isinstance(m, torch.nn.Linear):
                n += 1
        return self.out(self.seq(x)) * n
fn = M()
""", "T(2, 3)"),
    Case("named_children_names", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(2, 2)
        self.second = torch.nn.Tanh()
    def forward(self, x):
        names = []
        for name, m in self.named_children():
            names.append(name)
            x = m(x)
        return x, names
fn = M()
""", "T(3, 2)"),
    Case("parameters_list_len_and_index", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
    def forward(self, x):
        ps = list(self.parameters())
        return x @ ps[0] + ps[1], len(ps)
fn = M()
""", "T(3, 2)"),
    Case("buffers_iteration", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("a", torch.ones(2))
        self.register_buffer("b", torch.ones(2) * 2)
    def forward(self, x):
        for buf in self.buffers():
            x = x * buf
        return x
fn = M()
""", "T(2,)"),
    # ------------------------------------------------------------ module containers
    Case("sequential_index_and_negative", """
seq = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
def fn(x):
    return seq[2](seq[1](seq[0](x))), seq[-1](seq[0](x)[:, :4])
""", "T(2, 3)"),
    Case("sequential_slice", """
seq = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3),
                          torch.nn.Tanh())
def fn(x):
    return seq[:2](x), seq[2:](x), len(seq[1:])
""", "T(2, 3)"),
    Case("module_list_index_and_slice", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(4)])
    def forward(self, x):
        x = self.layers[0](x)
        for layer in self.layers[1:3]:
            x = layer(x)
        return self.layers[-1](x)
fn = M()
""", "T(3, 2)"),
    Case("module_list_reversed_and_zip", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
        self.b = torch.nn.ModuleList([torch.nn.ReLU(), torch.nn.Tanh()])
    def forward(self, x):
        for lin, act in zip(self.a, reversed(self.b)):
            x = act(lin(x))
        return x
fn = M()
""", "T(3, 2)"),
    Case("module_dict_keys_values_items", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.d = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 2), "b": torch.nn.ReLU()})
    def forward(self, x):
        for m in self.d.values():
            x = m(x)
        return x, list(self.d.keys()), len(self.d)
fn = M()
""", "T(3, 2)"),
    Case("module_dict_get_by_string_key", """
class M(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.acts = torch.nn.ModuleDict({"relu": torch.nn.ReLU(), "tanh": torch.nn.Tanh()})
    def forward(self, x):
        return self.acts[self.kind](x)
fn = M("tanh")
""", "T(3,)"),
    Case("nested_sequential_indexing", """
seq = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()),
                          torch.nn.Linear(2, 1))
def fn(x):
    return seq[0][0](x), seq(x)
""", "T(3, 2)"),
    Case("module_attribute_python_values", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sizes = [2, 3]
        self.cfg = {"scale": 0.5}
        self.name = "m"
    def forward(self, x):
        return x * self.cfg["scale"] + sum(self.sizes), self.name.upper()
fn = M()
""", "T(3,)"),
    Case("module_calls_submodule_method", """
class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
    def project(self, x):
        return self.lin(x) * 2
class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
    def forward(self, x):
        return self.inner.project(x) + self.inner(x) if False else self.inner.project(x)
    def extra(self):
        return 1
fn = Outer()
""", "T(3, 2)"),
    # ------------------------------------------------------------ objects made inside
    Case("dataclass_constructed_and_used", """
import dataclasses
@dataclasses.dataclass
class Out:
    value: object
    scale: float = 1.0
def fn(x):
    o = Out(x * 2, scale=0.5)
    return o.value * o.scale, o.scale
""", "T(3)"),
    Case("dataclass_constructed_and_returned", """
import dataclasses
@dataclasses.dataclass
class Result:
    logits: object
    loss: object
    n: int = 0
def fn(x):
    logits = x.softmax(-1)
    return Result(logits, logits.sum(), n=len(x))
""", "T(2, 3)"),
    Case("namedtuple_constructed_and_returned", """
import collections
Pair = collections.namedtuple("Pair", ["a", "b"])
def fn(x):
    p = Pair(x + 1, x - 1)
    return Pair(p.b, p.a), p._fields
""", "T(3)"),
    Case("plain_object_with_method_and_property", """
class Acc:
    def __init__(self, start):
        self.total = start
        self.count = 0
    def add(self, v):
        self.total = self.total + v
        self.count += 1
        return self
    @property
    def mean(self):
        return self.total / self.count
def fn(x, y):
    a = Acc(x * 0).add(x).add(y)
    return a.mean, a.count
""", "T(3), T(3)"),
    Case("object_made_inside_stored_in_an_input_list", """
class Record:
    def __init__(self, t, tag):
        self.t = t
        self.tag = tag
def fn(x, out):
    out.append(Record(x.exp(), "exp"))
    return x + 1
""", "T(3), []"),
    Case("classmethod_factory_and_staticmethod", """
class Cfg:
    scale = 3.0
    def __init__(self, k):
        self.k = k
    @classmethod
    def make(cls, k):
        return cls(k * cls.scale)
    @staticmethod
    def twice(v):
        return v * 2
def fn(x):
    c = Cfg.make(2)
    return x * c.k + Cfg.twice(x), c.k, isinstance(c, Cfg)
""", "T(3)"),
    Case("subclass_object_with_super_init", """
class Base:
    def __init__(self, w):
        self.w = w
    def apply(self, x):
        return x * self.w
class Shifted(Base):
    def __init__(self, w, b):
        super().__init__(w)
        self.b = b
    def apply(self, x):
        return super().apply(x) + self.b
def fn(x):
    m = Shifted(2.0, x.mean())
    return m.apply(x), type(m).__name__
""", "T(3)"),
    # ------------------------------------------------- frozen dataclasses, __setattr__, __slots__
    Case("frozen_dataclass_constructed_in_forward", """
import dataclasses
@dataclasses.dataclass(frozen=True)
class Out:
    value: torch.Tensor
    scale: float = 1.0
def fn(x):
    o = Out(x * 2, 0.5)
    return o.value * o.scale + 1, o.scale
""", "T(3)"),
    Case("frozen_dataclass_returned", """
import dataclasses
@dataclasses.dataclass(frozen=True)
class Pair:
    a: torch.Tensor
    b: torch.Tensor
def fn(x):
    p = Pair(x.sin(), x.cos())
    q = dataclasses.replace(p, b=p.b * 2) if False else Pair(p.a, p.b * 2)
    return q, p.a + q.b
""", "T(3)"),
    Case("own_setattr_logs_writes", """
class Recorder:
    def __init__(self):
        object.__setattr__(self, "names", [])
    def __setattr__(self, name, value):
        self.names.append(name)
        object.__setattr__(self, name, value)
def fn(x):
    r = Recorder()
    r.a = x + 1
    r.b = 2
    r.a = r.a * r.b
    return r.a, list(r.names)
""", "T(3)"),
    Case("slots_object_made_and_mutated", """
class Acc:
    __slots__ = ("total", "n")
    def __init__(self):
        self.total = 0
        self.n = 0
    def add(self, v):
        self.total = self.total + v
        self.n += 1
def fn(x):
    acc = Acc()
    for row in x:
        acc.add(row)
    return acc.total / acc.n, acc.n
""", "T(4, 3)"),
    Case("object_made_mutated_and_stored", """
class Box:
    def __init__(self, v):
        self.v = v
        self.hits = 0
def fn(x, store):
    b = Box(x * 2)
    b.hits += 1
    b.v = b.v + 1
    b.extra = b.hits * 3
    store.append(b)
    return b.v.sum(), len(store)
""", "T(3), []"),
]
