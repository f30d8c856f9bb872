"""Catalogue cases: arithmetic, views, indexing, loops, arguments, calls, modules (the
first catalogue)."""
from .case import Case

CASES = [
    # ------------------------------------------------------------ arithmetic
    Case("arith_chain", """
def fn(x, y):
    return (x + y) * 2 - y / 3 + 1
""", "T(4, 5), T(4, 5)"),
    Case("reflected_scalars_and_pow", """
def fn(x):
    return 1 - x, 2 / (x * x + 1), -x, x ** 2, 3 ** x.sigmoid()
""", "T(6,)"),
    Case("unary_chain", """
def fn(x):
    return x.exp().sigmoid().log().tanh().relu().reciprocal()
""", "T(3, 4)"),
    Case("broadcasting_and_dtypes", """
def fn(x, b, i):
    return (x + b) * i, (i * 2).double() + x.unsqueeze(0)
""", "T(2, 3), T(3,), torch.arange(3)"),
    Case("comparisons_and_where", """
def fn(x, y):
    mask = (x > 0) & (y <= 0.5)
    return torch.where(mask, x, y * 0.1), (x == y).sum(), mask.float().mean()
""", "T(4, 4), T(4, 4)"),
    # ------------------------------------------------------------ matmul, linear
    Case("matmul_bias", """
def fn(x, w, b):
    return (x @ w + b).relu() @ w.t()
""", "T(2, 4), T(4, 4), T(4,)"),
    Case("batched_matmul_and_mT", """
def fn(a, b):
    return torch.matmul(a, b.mT).sum(-1)
""", "T(3, 2, 4), T(3, 5, 4)"),
    Case("functional_linear_and_losses", """
def fn(x, w, b, target):
    out = F.linear(x, w, b)
    return F.mse_loss(out, target), F.l1_loss(out, target, reduction="sum")
""", "T(5, 4), T(3, 4), T(3,), T(5, 3)"),
    # ------------------------------------------------------------ reductions
    Case("reductions_dims_keepdim", """
def fn(x):
    return (x.sum(), x.sum(dim=1, keepdim=True), x.mean(0), x.amax(dim=-1),
            x.sum((0, 2)), x.mean(dim=(1,), keepdim=True))
""", "T(2, 3, 4)"),
    Case("max_dim_namedtuple", """
def fn(x):
    values, indices = x.max(dim=1)
    r = x.max(-1, keepdim=True)
    return values + indices, r.values * 2, r.indices, x.argmax(0), torch.max(x)
""", "T(3, 5)"),
    # ------------------------------------------------------------ views
    Case("view_reshape", """
def fn(x):
    return x.view(4, 6).reshape(2, 2, 6).view(-1) * 2
""", "T(2, 3, 4)"),
    Case("permute_transpose_t", """
def fn(x):
    y = x.permute(2, 0, 1).transpose(1, 2)
    return y.contiguous() + 1, x[0].t() @ x[1], x.swapaxes(0, 2).mT, x[1].T
""", "T(2, 3, 4)"),
    Case("expand_unsqueeze_squeeze", """
def fn(x, v):
    e = v.unsqueeze(0).expand(3, 4)
    return x + e, x.unsqueeze(1).squeeze(1), x[:1].squeeze(0), e.expand_as(x) * x
""", "T(3, 4), T(4,)"),
    # ------------------------------------------------------------ indexing
    Case("index_ints", """
def fn(x):
    return x[0] + x[-1], x[1, 2], x[2][3]
""", "T(3, 4)"),
    Case("index_slices", """
def fn(x):
    return x[1:3, ::2], x[:, -2:], x[..., 1:] - x[..., :-1]
""", "T(4, 6)"),
    Case("index_none_ellipsis", """
def fn(x):
    return x[None], x[..., 0], x[:, None, 1], x[None, ..., None].shape[0] * x
""", "T(2, 3)"),
    Case("setitem_on_intermediate", """
def fn(x):
    y = x * 1
    y[0] = 0.0
    y[:, 1] = x[:, 0]
    return y
""", "T(3, 4)"),
    # ------------------------------------------------------------ Python values
    Case("shape_arithmetic", """
def fn(x):
    n, m = x.shape
    y = x.reshape(x.shape[0] * 2, -1)
    return y / x.size(1) + n * m + x.dim() + x.numel() + len(x)
""", "T(4, 6)"),
    Case("python_scalar_arguments", """
def fn(x, alpha, beta=0.5, flag=True):
    out = x * alpha + beta
    return out.relu() if flag else out
""", "T(5,), 2.5", "dict(flag=False)"),
    Case("constant_folding", """
def fn(x):
    k = (3 * 4 + 1) / 2 + math.sqrt(16) - abs(-2) + max(1, 7) % 4
    scale = math.exp(0) * float(int("3"))
    return x * k + scale, k
""", "T(4,)"),
    Case("dtype_conversions", """
def fn(x, i):
    return (x.double() * 2, x.to(torch.float64) + i.float(), i.long() + 1,
            (x > 0).to(torch.int32), x.type_as(i))
""", "T(4,), torch.arange(4)"),
    Case("factories_inside", """
def fn(x):
    z = torch.zeros(x.shape) + torch.ones_like(x) * 3
    return z + torch.full((x.shape[0], 1), 2.0) + torch.arange(x.shape[1]), torch.zeros_like(x)
""", "T(3, 4)"),
    # ------------------------------------------------------------ loops
    Case("loop_over_range", """
def fn(x):
    for i in range(4):
        x = x * 0.5 + i
    total = 0
    for j in range(1, 10, 3):
        total += j
    return x, total
""", "T(5,)"),
    Case("loop_over_list_of_tensors", """
def fn(xs):
    acc = xs[0]
    for t in xs[1:]:
        acc = acc + t
    out = []
    for i, t in enumerate(xs):
        out.append(t * i)
    return acc, out
""", "[T(3,), T(3,), T(3,)]"),
    Case("loop_over_tuple_zip_reversed", """
def fn(xs, ws):
    total = None
    for x, w in zip(xs, ws):
        total = x * w if total is None else total + x * w
    return total, [x.sum() for x in reversed(xs)]
""", "(T(2, 2), T(2, 2)), (T(2, 2), T(2, 2))"),
    Case("iterate_over_tensor_rows", """
def fn(x):
    rows = [r * k for k, r in enumerate(x)]
    return rows[0] + rows[-1], len(rows)
""", "T(3, 4)"),
    # ------------------------------------------------------------ containers
    Case("tuple_inputs_and_outputs", """
def fn(pair, triple):
    a, b = pair
    first, *rest = triple
    return (b, a), first * rest[0] + rest[1]
""", "(T(2,), T(2,)), (T(2,), T(2,), T(2,))"),
    Case("dict_inputs_and_outputs", """
def fn(d):
    out = {"sum": d["a"] + d["b"], "diff": d["a"] - d["b"]}
    out["scaled"] = out["sum"] * d.get("scale", 1.0)
    return out, {k: v.mean() for k, v in d.items() if k != "scale"}
""", "{'a': T(3,), 'b': T(3,), 'scale': 2.0}"),
    Case("list_outputs_and_nesting", """
def fn(x):
    return [x, [x + 1, (x * 2, {"k": x - 1})], None]
""", "T(2,)"),
    # ------------------------------------------------------------ arguments
    Case("keyword_arguments", """
def fn(x, *, scale, shift=1.0):
    return x * scale + shift
""", "T(3,)", "dict(scale=T(3,), shift=2.0)"),
    Case("default_arguments", """
def fn(x, y=None, k=3, bias=(1.0, 2.0)):
    if y is None:
        y = x
    return x * k + y + bias[1]
""", "T(3,)"),
    Case("star_args_kwargs", """
def fn(*xs, **opts):
    out = sum(xs[1:], xs[0])
    for name in sorted(opts):
        out = out * opts[name]
    return out, len(xs), tuple(opts)
""", "T(2,), T(2,), T(2,)", "dict(b=2.0, a=T(2,))"),
    Case("positional_only_and_kwonly", """
def fn(x, /, y, *, z=2):
    return x - y * z
""", "T(3,)", "dict(y=T(3,))"),
    # ------------------------------------------------------------ closures, globals
    Case("closure_over_tensor", """
def make(w, k):
    def fn(x):
        return x @ w + k
    return fn
fn = make(T(3, 3), 2)
""", "T(2, 3)"),
    Case("nested_closures", """
def outer(a):
    def middle(b):
        def fn(x):
            return x * a + b
        return fn
    return middle(a * 2)
fn = outer(T(4,))
""", "T(4,)"),
    Case("global_tensor_and_constants", """
W = T(4, 4)
B = T(4,)
SCALE = 3
ACTIVATION = "relu"
def fn(x):
    y = x @ W + B * SCALE
    return y.relu() if ACTIVATION == "relu" else y.tanh()
""", "T(2, 4)"),
    # ------------------------------------------------------------ calls
    Case("inlined_helpers", """
def helper(a, factor=2):
    return a * factor
def combine(a, b, **kw):
    return helper(a, **kw) + helper(b)
def fn(x, y):
    return combine(x, y, factor=3) - helper(helper(x))
""", "T(3,), T(3,)"),
    Case("recursion_with_constant_depth", """
def power(x, n):
    return x if n <= 1 else x * power(x, n - 1)
def fn(x):
    return power(x, 4) + power(x.t(), 2).t()
""", "T(3, 3)"),
    Case("lambdas", """
def fn(x, y):
    sq = lambda t: t * t
    lin = lambda t, a=2.0: t * a + 1
    return sq(x) + lin(y) + (lambda: x.sum())()
""", "T(3,), T(3,)"),
    Case("generator_expressions", """
def fn(xs):
    return sum(t * 2 for t in xs) + max(t.shape[0] for t in xs)
""", "[T(2,), T(2,)]"),
    Case("comprehensions", """
def fn(xs):
    doubled = [x * 2 for x in xs]
    table = {i: x.sum() for i, x in enumerate(xs)}
    pairs = [(a + b) for a in xs for b in xs[:1]]
    return doubled, table, pairs
""", "[T(2,), T(2,)]"),
    Case("isinstance_len_getattr_hasattr", """
def fn(x, xs):
    if isinstance(x, torch.Tensor) and len(xs) == 2 and not isinstance(xs, dict):
        x = getattr(x, "relu")() + xs[1]
    if hasattr(x, "shape") and type(x) is torch.Tensor:
        x = x * 2
    return x, isinstance(3, int), callable(fn)
""", "T(3,), [T(3,), T(3,)]"),
    Case("fstrings_on_constants", """
def fn(x):
    out = {}
    for i in range(3):
        out[f"layer{i}_{x.shape[0]:03d}"] = x * i
    tag = f"{'sum'!r}:{x.dim()}"
    return out, tag
""", "T(2, 2)"),
    Case("chained_comparisons_on_shapes", """
def fn(x):
    if 1 < x.dim() <= 3 and x.shape[-1] in (4, 8) and x.shape != (1, 1):
        return x.sum(-1)
    return x
""", "T(2, 4)"),
    # ------------------------------------------------------------ in-place
    Case("inplace_on_intermediates", """
def fn(x):
    y = x * 2
    y.add_(1)
    y.mul_(3).relu_()
    z = y.clone()
    z += x
    z -= 1
    return y, z
""", "T(4,)"),
    # ------------------------------------------------------------ returns
    Case("multiple_returns_and_constants", """
def fn(x):
    return x + 1, 3, "ok", None, 2.5, (x * 2, True)
""", "T(2,)"),
    # ------------------------------------------------------------ modules
    Case("module_methods", """
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = 2.0
    def act(self, x):
        return torch.relu(x) * self.scale
    def forward(self, x):
        return self.act(self.lin(x)) + x
fn = Block()
""", "T(3, 4)"),
    Case("sequential", """
fn = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2),
                         torch.nn.Sigmoid())
""", "T(5, 4)"),
    Case("module_list_iteration", """
class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
        self.acts = torch.nn.ModuleDict({"a": torch.nn.Tanh(), "b": torch.nn.LeakyReLU(0.1)})
    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + x if i % 2 else layer(x)
        return self.acts["b"](self.acts["a"](x)), len(self.layers)
fn = Stack()
""", "T(2, 4)"),
    Case("module_with_buffer_and_parameter", """
class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("shift", torch.zeros(4) + 0.5)
    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return centred * self.weight + self.shift, self.training
fn = Norm()
""", "T(3, 4)"),
    Case("module_dict_and_parameter_list", """
class Heads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = torch.nn.ModuleDict({"up": torch.nn.Linear(3, 3), "act": torch.nn.ReLU()})
        self.scales = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(3) * i)
                                              for i in range(2)])
    def forward(self, x):
        outs = {name: head(x) for name, head in self.heads.items()}
        for key in self.heads:
            x = x + outs[key]
        for p in self.scales:
            x = x * p
        return x + self.scales[-1], sorted(self.heads.keys()), "act" in self.heads
fn = Heads()
""", "T(2, 3)"),
    Case("function_calling_module_global", """
net = torch.nn.Linear(3, 2)
def fn(x):
    return F.relu(net(x)).sum(1), net.weight.shape[0], net.in_features
""", "T(4, 3)"),
]
