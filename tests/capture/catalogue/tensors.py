"""Catalogue cases: tensors as Python values (len, device, dtype, shape arithmetic,
new_* factories), grad-mode blocks and `with` blocks inside captured code."""
from .case import Case

CASES = [
    # ------------------------------------------------------------ len, shape arithmetic
    Case("len_of_tensor_in_loop", """
def fn(x):
    out = x[0]
    for i in range(1, len(x)):
        out = out + x[i]
    return out, len(x)
""", "T(3, 2)"),
    Case("shape_tuple_arithmetic", """
def fn(x):
    b, *rest = x.shape
    flat = x.reshape(b, math.prod(rest))
    return flat * len(rest), x.shape[1:] + (1,), tuple(x.shape) * 2
""", "T(2, 3, 4)"),
    Case("shape_negative_index_and_slice", """
def fn(x):
    h, w = x.shape[-2:]
    return x.reshape(-1, h * w).sum(-1) / (h * w), x.size(-1) // 2, x.size()[0]
""", "T(2, 3, 4)"),
    Case("shape_compare_and_branch", """
def fn(x, y):
    if x.shape == y.shape:
        return x + y
    return x
""", "T(2, 3), T(2, 3)"),
    Case("shape_to_list_and_index", """
def fn(x):
    dims = list(x.shape)
    dims[0] = dims[0] * 2
    return x.reshape(dims[0], -1), dims
""", "T(2, 6)"),
    Case("view_with_computed_heads", """
def fn(x):
    b, n, d = x.shape
    heads = 2
    y = x.view(b, n, heads, d // heads).transpose(1, 2)
    return y.reshape(b, heads, -1).mean(-1)
""", "T(2, 3, 8)"),
    Case("numel_dim_ndim", """
def fn(x):
    return x * x.numel() / x.dim() + x.ndim, x.nelement()
""", "T(2, 3)"),
    # ------------------------------------------------------------ device, dtype
    Case("device_to_same_device", """
def fn(x, y):
    z = y.to(x.device)
    return x + z, str(x.device), x.device.type
""", "T(3,), T(3,)"),
    Case("factory_on_input_device", """
def fn(x):
    z = torch.zeros(x.shape, device=x.device, dtype=x.dtype)
    o = torch.ones(3, device=x.device)
    return x + z + o
""", "T(3,)"),
    Case("device_comparison", """
def fn(x, y):
    if x.device == y.device and x.device.type == "cpu":
        return x * y
    return x
""", "T(3,), T(3,)"),
    Case("dtype_equality_branches", """
def fn(x, i):
    if x.dtype == torch.float32 and i.dtype != torch.float32:
        return x + i.to(x.dtype)
    return x
""", "T(3,), torch.arange(3)"),
    Case("dtype_is_floating_point", """
def fn(x, i):
    out = []
    for t in (x, i):
        out.append(t * 2 if t.is_floating_point() else t + 1)
    return out, x.dtype.is_floating_point, i.dtype is torch.int64
""", "T(3,), torch.arange(3)"),
    Case("dtype_in_tuple", """
def fn(x):
    if x.dtype in (torch.float16, torch.float32):
        x = x.double()
    return x, x.dtype == torch.float64
""", "T(3,)"),
    Case("to_dtype_keyword_and_copy", """
def fn(x):
    return x.to(dtype=torch.float64), x.to(x.device, torch.float64), x.float().half().float()
""", "T(3,)"),
    # ------------------------------------------------------------ new_* factories
    Case("new_zeros_ones_full", """
def fn(x):
    return x.new_zeros(2, 3), x.new_ones((3,)) + x, x.new_full((2,), 7.0)
""", "T(3,)"),
    Case("new_empty_filled_and_new_tensor_shape", """
def fn(x):
    e = x.new_empty(x.shape).fill_(2.0)
    return e * x, x.new_zeros(x.shape[0], dtype=torch.int64)
""", "T(4,)"),
    Case("zeros_like_full_like_dtype", """
def fn(x):
    return torch.full_like(x, 3.0), torch.zeros_like(x, dtype=torch.float64), torch.ones_like(x) * x
""", "T(2, 2)"),
    Case("arange_from_size", """
def fn(x):
    pos = torch.arange(x.shape[-1], dtype=x.dtype, device=x.device)
    return x + pos, torch.linspace(0, 1, x.shape[0])
""", "T(3, 4)"),
    # ------------------------------------------------------------ grad mode
    Case("no_grad_block", """
def fn(x):
    y = x * 2
    with torch.no_grad():
        z = y + 1
    return y, z, z.requires_grad
""", "T(3,).requires_grad_()"),
    Case("enable_grad_inside_no_grad", """
def fn(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
    return a, b, a.requires_grad, b.requires_grad
""", "T(3,).requires_grad_()"),
    Case("set_grad_enabled_false_block", """
def fn(x):
    with torch.set_grad_enabled(False):
        a = x.exp()
    b = x.exp()
    return a, b, a.requires_grad, b.requires_grad
""", "T(3,).requires_grad_()"),
    Case("set_grad_enabled_from_flag", """
def fn(x, train=False):
    with torch.set_grad_enabled(train):
        y = x.sigmoid()
    return y, torch.is_grad_enabled()
""", "T(3,).requires_grad_()"),
    Case("no_grad_without_grad_inputs", """
def fn(x):
    with torch.no_grad():
        y = x.relu() * 2
    return y + 1
""", "T(4,)"),
    Case("is_grad_enabled_query", """
def fn(x):
    if torch.is_grad_enabled():
        return x * 2, True
    return x, False
""", "T(3,)"),
    Case("no_grad_in_module_forward", """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
    def forward(self, x):
        with torch.no_grad():
            ref = self.lin(x)
        return self.lin(x) - ref, ref.requires_grad
fn = M()
""", "T(2, 3)"),
    # ------------------------------------------------------------ with blocks
    Case("with_blocks_in_sequence", """
def fn(x):
    with torch.no_grad():
        a = x * 2
    with torch.set_grad_enabled(True):
        b = a + x
    with torch.enable_grad():
        c = b.sum()
    return a, b, c, b.requires_grad
""", "T(3,).requires_grad_()"),
    Case("nested_with_grad_blocks", """
def fn(x):
    with torch.no_grad(), torch.enable_grad():
        a = x * 2
    return a, a.requires_grad
""", "T(3,).requires_grad_()"),
    Case("with_block_returning_inside", """
def fn(x):
    with torch.no_grad():
        return x * 2 + 1
""", "T(3,)"),
    # ------------------------------------------------------------ tensor attributes
    Case("requires_grad_and_is_leaf_queries", """
def fn(x, w):
    y = x * w
    return y, w.requires_grad, y.requires_grad, x.is_leaf
""", "T(3,), T(3,).requires_grad_()"),
    Case("tensor_T_mT_and_shape_attrs", """
def fn(x):
    return x.T.shape[0] * x, x.mT @ x, x.shape.numel() if hasattr(x.shape, "numel") else 0
""", "T(3, 3)"),
    Case("tensor_size_with_dim_keyword", """
def fn(x):
    return x.new_ones(x.size(dim=1)) * x.size(0), x.stride() if False else x.is_contiguous()
""", "T(2, 5)"),
    Case("tensor_element_size_itemsize", """
def fn(x):
    return x * x.element_size(), x.dtype.itemsize
""", "T(3,)"),
    # ------------------------------------------------------------ finfo, iinfo
    Case("finfo_eps_min_max", """
def fn(x):
    fi = torch.finfo(x.dtype)
    return x.clamp(min=fi.min, max=fi.max) + fi.eps, fi.bits, fi.tiny > 0
""", "T(3)"),
    Case("finfo_masked_fill_min_softmax", """
def fn(x):
    mask = x > 0
    return x.masked_fill(mask, torch.finfo(x.dtype).min).softmax(-1)
""", "T(2, 4)"),
    Case("finfo_of_named_dtypes", """
def fn(x):
    e32 = torch.finfo(torch.float32).eps
    e64 = torch.finfo(torch.float64).eps
    return x * (e32 / e64), torch.finfo(torch.float16).max, torch.finfo(x.dtype).resolution
""", "T(3)"),
    Case("iinfo_bounds", """
def fn(x):
    ii = torch.iinfo(torch.int32)
    return x.clamp(ii.min, ii.max) + ii.bits, torch.iinfo(torch.int64).max // 2
""", "T(3)"),
    Case("iinfo_of_int_tensor_dtype", """
def fn(x):
    i = (x * 10).to(torch.int64)
    return i.clamp(max=torch.iinfo(i.dtype).max - 1) + 1, torch.iinfo(torch.uint8).max
""", "T(4)"),
    Case("finfo_iinfo_chosen_by_dtype", """
def fn(x, dtype):
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return x.to(dtype).clamp(max=info.max), info.bits
""", "T(3), torch.float64"),
    # ------------------------------------------------------------ device constants
    Case("device_constant_cpu", """
def fn(x):
    d = torch.device("cpu")
    return torch.ones(3, device=d) + x, d.type, d == x.device
""", "T(3)"),
    Case("device_constant_global", """
DEV = torch.device("cpu")
def fn(x):
    return x.to(DEV) * 2, str(DEV), x.device == DEV, DEV.index
""", "T(3)"),
    Case("device_from_string_with_index", """
def fn(x):
    d = torch.device("cpu:0")
    return x.to(d.type) + 1, d.index, d.type
""", "T(3)"),
    Case("device_strings_in_factories", """
def fn(x):
    a = torch.zeros(3, device="cpu")
    b = torch.arange(3, device=torch.device("cpu"), dtype=x.dtype)
    return x + a + b, torch.full((3,), 2.0, device=x.device.type)
""", "T(3)"),
    # ------------------------------------------------------------ max() / min() of tensors
    Case("builtin_max_min_of_two_tensors", """
def fn(x, y):
    return max(x, y), min(x, y)
""", "T(1), T(1)"),
    Case("builtin_max_of_reductions", """
def fn(x, y):
    return max(x.sum(), y.sum()) * 2
""", "T(3), T(3)"),
    Case("builtin_max_over_tensor_rows", """
def fn(x):
    return max(x), min(x)
""", "T(4)"),
    Case("builtin_min_over_a_list_of_losses", """
def fn(x, y, z):
    losses = [x.pow(2).mean(), y.abs().mean(), z.mean()]
    return min(losses) + max(*losses)
""", "T(3), T(3), T(3)"),
    # ------------------------------------------------------------ more grad-mode blocks
    Case("set_grad_enabled_true_inside_no_grad", """
def fn(x):
    with torch.no_grad():
        a = x * 2
        with torch.set_grad_enabled(True):
            b = a * x
    return b, a, b.requires_grad, a.requires_grad
""", "T(3).requires_grad_()"),
    Case("no_grad_decorated_helper", """
@torch.no_grad()
def helper(x):
    return x * 3
def fn(x):
    y = helper(x)
    return y + x, y.requires_grad
""", "T(3).requires_grad_()"),
    Case("enable_grad_decorated_helper_under_no_grad", """
@torch.enable_grad()
def helper(x):
    return x.sin()
def fn(x):
    with torch.no_grad():
        y = helper(x)
        z = x.cos()
    return y, z, y.requires_grad, z.requires_grad
""", "T(3).requires_grad_()"),
    # ------------------------------------------------------------ `with` over Python objects
    Case("user_context_manager_class", """
LOG = []
class Tag:
    def __init__(self, name):
        self.name = name
    def __enter__(self):
        LOG.append(("enter", self.name))
        return self
    def __exit__(self, *exc):
        LOG.append(("exit", self.name))
        return False
def fn(x):
    with Tag("a") as t:
        y = x * 2
    return y, t.name, len(LOG)
""", "T(3)"),
    Case("contextlib_nullcontext", """
import contextlib
def fn(x):
    with contextlib.nullcontext(5) as v:
        y = x + v
    return y
""", "T(3)"),
    Case("nested_user_context_managers", """
LOG = []
class Step:
    def __init__(self, n):
        self.n = n
    def __enter__(self):
        LOG.append(self.n)
    def __exit__(self, *exc):
        LOG.append(-self.n)
def fn(x):
    with Step(1), Step(2):
        y = x + 1
    with torch.no_grad(), Step(3):
        z = y * 2
    return y, z, list(LOG)
""", "T(3)"),
    Case("contextlib_contextmanager", """
import contextlib
LOG = []
@contextlib.contextmanager
def scope(n):
    LOG.append(n)
    yield n * 2
    LOG.append(-n)
def fn(x):
    with scope(3) as k:
        y = x * k
    return y, list(LOG)
""", "T(3)"),
    Case("contextmanager_yielding_a_tensor", """
import contextlib
@contextlib.contextmanager
def doubled(t):
    yield t * 2
def fn(x):
    with doubled(x) as d:
        y = d + 1
    return y
""", "T(3)"),
    Case("contextmanagers_nested_and_in_sequence", """
import contextlib
LOG = []
@contextlib.contextmanager
def step(name):
    LOG.append("in " + name)
    yield len(LOG)
    LOG.append("out " + name)
def fn(x):
    with step("a") as i, step("b") as j:
        y = x * i + j
    with step("c"):
        y = y.sin()
    return y, len(LOG)
""", "T(3)"),
    # ------------------------------------------------- max() / min() of a tensor and numbers
    Case("builtin_max_tensor_and_number_scales", """
def fn(x):
    s = x.sum()
    return x * max(s, 0.5), min(1.0, s) + x
""", "T(4)"),
    Case("builtin_min_max_numbers_in_place", """
def fn(x):
    y = x.clone()
    y -= min(x.max(), 0)
    y /= max(1, x.abs().sum(), 2.5)
    return y
""", "T(5)"),
    Case("builtin_max_norm_floor", """
def fn(x):
    n = x.norm()
    return x / max(n, 1e-6), x / max(1e-6, n.detach())
""", "T(2, 3)"),
    Case("builtin_max_of_float_argument_scales_parameter", """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
    def forward(self, x, s):
        return max(s, 0.5) * self.w + x * min(s, 2.0)
net = Net()
def fn(x, s):
    return net(x, s)
""", "T(3), 0.25"),
    Case("builtin_max_of_reduction_and_number_times_attribute", """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
    def forward(self, x):
        return max(x.abs().sum(), 0.5) * self.w, self.w * min(x.abs().sum(), 0.5)
net = Net()
def fn(x):
    return net(x)
""", "T(3)"),
    Case("builtin_max_min_of_tensor_and_number_returned", """
def fn(x):
    s = x.abs().sum()
    # eager returns the tensor from one and the number from the other
    return max(s, -1.0), min(s, -1.0), max(0.5, x[0], x[1])
""", "T(3)"),
    Case("builtin_max_of_tensor_and_number_scaled_by_number", """
def fn(x):
    s = x.abs().sum()
    a = max(s, 0.5) * 2
    b = min(s, 0.5) - 1
    return a, b, x * max(s, 1.0)
""", "T(3)"),
    Case("builtin_max_of_losses_requiring_grad_returned", """
def fn(x, y):
    a, b = (x * x).sum(), (y * y).mean()
    return max(a, b), min(a, b) * 0.5
""", "T(3).requires_grad_(), T(3).requires_grad_()"),
    Case("builtin_max_of_reductions_of_two_dtypes", """
def fn(x, y):
    return max(x.sum(), y.double().sum()), min(x.mean(), y.double().mean(), 0.0)
""", "T(3), T(3)"),
    Case("builtin_max_of_tensor_and_number_in_branch", """
def fn(x):
    m = max(x.abs().sum(), 0.5)
    if m > 1:
        return x * 2
    return x - 1
""", "T(3)", torch_breaks=True),
    # ------------------------------------------------- ember.tensor / as_tensor of Python data
    Case("tensor_of_a_tensor_copies_it", """
def fn(x):
    y = x * 2
    z = torch.tensor(y)
    z.add_(1)
    return z, y, torch.tensor(x.t(), dtype=torch.float64)
""", "T(2, 3)"),
    Case("tensor_of_a_parameter_detaches_it", """
lin = nn.Linear(3, 2)

def fn(x):
    w = torch.tensor(lin.weight)
    return lin(x) + (x @ w.t()), w.requires_grad
""", "T(4, 3)"),
    Case("tensor_of_a_tensor_in_a_helper", """
def snapshot(t):
    return torch.tensor(t, dtype=torch.float32)

def fn(x):
    s = snapshot(x.sum(0))
    return x - s, s
""", "T(3, 2)"),
    Case("tensor_of_python_numbers", """
def fn(x):
    return x + torch.tensor([1.0, 2.0, 3.0]), torch.tensor(2), torch.tensor(True), \\
        torch.tensor([])
""", "T(3)"),
    Case("tensor_of_sizes", """
def fn(x):
    n = x.shape[0]
    w = torch.tensor([n, 2 * n, x.shape[1]], dtype=torch.float32)
    return x * w, torch.tensor(x.shape), torch.tensor(n) * 2
""", "T(2, 3)"),
    Case("tensor_of_nested_lists", """
def fn(x):
    m = torch.tensor([[1, 2, 0], [3, 4, 1], [0, 1, 1]], dtype=x.dtype)
    b = torch.tensor(((0.5,), (1.5,), (2.5,)))
    return m @ x + b, torch.tensor([[True, False], [False, True]])
""", "T(3, 2)"),
    Case("as_tensor_of_values_and_of_a_tensor", """
def fn(x):
    a = torch.as_tensor([1, 2, 3], dtype=torch.float64)
    b = torch.as_tensor(x)
    c = torch.as_tensor(x, dtype=torch.float64)
    return a * 2, b is x, c + a, torch.as_tensor([x.shape[0], 7])
""", "T(3)"),
    Case("tensor_of_a_list_of_reductions", """
def fn(a, b):
    stats = torch.tensor([a.sum(), b.sum(), a.mean()])
    return stats * 2, torch.tensor([a.abs().max(), 1.5]) + b[:2]
""", "T(3), T(3)"),
    Case("tensor_of_nested_indexed_elements", """
def fn(x):
    return torch.tensor([[x[0], x[1]], [x[2], x[0]]]) @ x[:2]
""", "T(3)"),
    Case("tensor_of_reductions_with_dtypes", """
def fn(a, b):
    d = torch.tensor((a.sum(), b.mean()), dtype=torch.float64)
    i = torch.tensor([a.argmax(), 3, b.argmin()])
    return d + 1, i * 2, torch.tensor([a.sum(), 2], dtype=torch.float16)
""", "T(3).requires_grad_(), T(4)"),
    # ------------------------------------------------- contextmanager with try / with inside
    Case("contextmanager_try_finally", """
import contextlib
LOG = []
@contextlib.contextmanager
def scope(n):
    LOG.append(("enter", n))
    try:
        yield n * 2
    finally:
        LOG.append(("exit", n))
def fn(x):
    with scope(3) as k:
        y = x * k
    return y, len(LOG)
""", "T(3)"),
    Case("contextmanager_with_block_inside", """
import contextlib
LOG = []
@contextlib.contextmanager
def frozen():
    with torch.no_grad():
        LOG.append("no grad")
        yield torch.is_grad_enabled()
    LOG.append("grad again")
def fn(x):
    with frozen() as mode:
        y = x * 2
    return y, x * 3, mode, y.requires_grad
""", "T(3)"),
    Case("contextmanager_try_except_nested", """
import contextlib
LOG = []
@contextlib.contextmanager
def guarded(tag):
    try:
        LOG.append(tag)
        yield tag.upper()
    except KeyError:
        LOG.append("caught")
    else:
        LOG.append("clean " + tag)
def fn(x):
    with guarded("a") as a:
        with guarded("b") as b:
            y = x + len(a + b)
    return y, a + b
""", "T(3)"),
    # ------------------------------------------------- exceptions thrown into a contextmanager
    Case("contextmanager_catches_lookup_error_of_block", """
import contextlib
LOG = []
@contextlib.contextmanager
def scope():
    try:
        yield
    except KeyError as e:
        LOG.append("caught " + str(e))
    finally:
        LOG.append("finally")
def fn(x, d):
    y = x * 2
    with scope():
        y = y + d["missing"]
    return y * 2
""", "T(3), {}"),
    Case("contextmanager_finally_then_outer_except", """
import contextlib
LOG = []
@contextlib.contextmanager
def scope(tag):
    LOG.append("enter " + tag)
    try:
        yield tag
    finally:
        LOG.append("exit " + tag)
def fn(x):
    try:
        with scope("a") as t:
            x = x + 1
            raise ValueError(t)
    except ValueError as e:
        LOG.append("handled " + str(e))
        x = x * 3
    return x
""", "T(3)"),
    Case("contextmanager_swallows_raise_in_block", """
import contextlib
LOG = []
@contextlib.contextmanager
def tolerant():
    try:
        yield
    except (ValueError, IndexError) as e:
        LOG.append(type(e).__name__)
def fn(x, xs):
    with tolerant():
        x = x + 1
        raise ValueError("v")
    with tolerant():
        x = x + xs[5]
    with tolerant():
        x = x * 2
    return x
""", "T(3), [1, 2]"),
    # ------------------------------------------------- __exit__ swallowing the block's exception
    Case("exit_returning_true_swallows_raise", """
LOG = []
class Quiet:
    def __enter__(self):
        return self
    def __exit__(self, typ, value, tb):
        LOG.append((typ.__name__, str(value), tb is not None))
        return True
def fn(x):
    with Quiet():
        y = x + 1
        raise ValueError("stop")
    return y * 2
""", "T(3)"),
    Case("exit_swallows_keyerror_of_a_lookup", """
class Ignore:
    def __init__(self, *types):
        self.types = types
    def __enter__(self):
        return None
    def __exit__(self, typ, value, tb):
        return typ is not None and issubclass(typ, self.types)
def fn(x, d):
    y = x * 2
    with Ignore(KeyError):
        y = y + d["bias"]
    with Ignore(KeyError, IndexError):
        y = y + d["scale"]
    return y
""", "T(3), {'scale': 1.5}"),
    Case("contextlib_suppress_python_error", """
import contextlib
def fn(x, items):
    out = x
    with contextlib.suppress(IndexError):
        out = out + items[5]
    with contextlib.suppress(ValueError, ZeroDivisionError):
        out = out * (1 / 0)
    return out + items[0]
""", "T(3), [1.0, 2.0]"),
]
