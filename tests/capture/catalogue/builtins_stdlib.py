"""Catalogue cases: functional builtins and the standard library on Python values (map,
filter, zip, enumerate, range, any/all, functools, itertools, operator, math),
introspection builtins, identity tests, str methods and formatting, imports in functions."""
from .case import Case

CASES = [
    # ------------------------------------------------------------ functional builtins
    Case("map_over_tensors", """
def fn(xs):
    return list(map(lambda t: t * 2, xs)), tuple(map(torch.relu, xs))
""", "[T(3,), T(3,)]"),
    Case("map_two_iterables", """
def fn(xs, ys):
    return list(map(lambda a, b: a * b, xs, ys))
""", "[T(2,), T(2,)], (T(2,), T(2,))"),
    Case("map_builtin_over_constants", """
def fn(x):
    sizes = list(map(int, ["1", "2", "3"]))
    return x * sum(sizes), list(map(abs, [-1, 2, -3]))
""", "T(2,)"),
    Case("filter_lambda_and_none", """
def fn(x):
    evens = list(filter(lambda i: i % 2 == 0, range(7)))
    truthy = list(filter(None, [0, 1, "", "a", None, 2]))
    return x * len(evens) + sum(evens), truthy
""", "T(2,)"),
    Case("filter_tensors_by_shape", """
def fn(xs):
    big = [t for t in filter(lambda t: t.shape[0] > 2, xs)]
    return sum(big), len(big)
""", "[T(3,), T(2,), T(3,)]"),
    Case("zip_strict_lengths_and_unzip", """
def fn(xs):
    pairs = list(zip(range(3), xs))
    idx, ts = zip(*pairs)
    return ts[1] * idx[2], idx
""", "[T(2,), T(2,), T(2,)]"),
    Case("zip_three_and_short", """
def fn(x):
    total = 0
    for a, b, c in zip([1, 2, 3], (4, 5), "xyz"):
        total += a * b
    return x * total
""", "T(2,)"),
    Case("enumerate_start", """
def fn(xs):
    return [t * i for i, t in enumerate(xs, start=1)], list(enumerate("ab", 5))
""", "[T(2,), T(2,)]"),
    Case("range_arithmetic_and_len", """
def fn(x):
    r = range(2, 20, 3)
    return x * len(r) + r[2] + r[-1], list(r[1:3]), 8 in r, 9 in r
""", "T(2,)"),
    Case("range_reversed_negative_step", """
def fn(x):
    for i in range(5, 0, -2):
        x = x + i
    return x, list(reversed(range(3)))
""", "T(2,)"),
    Case("any_all_on_values", """
def fn(x):
    flags = [x.dim() == 2, x.shape[0] > 10]
    if any(flags) and not all(flags):
        x = x * 2
    return x, any([]), all([])
""", "T(2, 3)"),
    Case("any_all_generator", """
def fn(xs):
    if all(t.shape == xs[0].shape for t in xs) and any(t.dim() == 1 for t in xs):
        return sum(xs)
    return xs[0]
""", "[T(3,), T(3,)]"),
    Case("min_max_sum_on_values", """
def fn(x):
    vals = [3, -1, 4]
    return x * min(vals) + max(vals) + sum(vals, 10), min(2, 5, 1), max("ab", "b")
""", "T(2,)"),
    Case("min_max_with_key", """
def fn(xs):
    longest = max(xs, key=lambda t: t.shape[0])
    shortest = min(xs, key=len)
    return longest * 2, shortest
""", "[T(2,), T(4,), T(3,)]"),
    Case("divmod_round_pow_abs", """
def fn(x):
    q, r = divmod(17, 5)
    return x * q + r + round(2.567, 2) + pow(2, 5) + abs(-1.5), round(7.5), pow(3, 2, 5)
""", "T(2,)"),
    Case("int_float_bool_str_conversions", """
def fn(x):
    return x * int(3.9) + float("1.5") + bool([0]), str(12), int("ff", 16)
""", "T(2,)"),
    Case("chr_ord_hex_bin", """
def fn(x):
    return x * ord("a"), chr(98), hex(255), bin(5), oct(8)
""", "T(2,)"),
    # ------------------------------------------------------------ functools, itertools
    Case("functools_reduce_tensors", """
import functools
def fn(xs):
    return (functools.reduce(lambda a, b: a * b, xs),
            functools.reduce(lambda a, b: a + b, [1, 2, 3], 10))
""", "[T(2,), T(2,), T(2,)]"),
    Case("functools_reduce_operator", """
import functools, operator
def fn(x):
    n = functools.reduce(operator.mul, x.shape, 1)
    return x.reshape(n) * n
""", "T(2, 3)"),
    Case("functools_partial_call", """
import functools
def scale(t, factor, shift=0.0):
    return t * factor + shift
def fn(x):
    double = functools.partial(scale, factor=2.0)
    add = functools.partial(scale, x, 1.0)
    return double(x), double(x, shift=1.0), add(shift=3.0)
""", "T(2,)"),
    Case("functools_partial_of_torch_fn", """
import functools
def fn(x):
    sm = functools.partial(torch.softmax, dim=-1)
    return sm(x)
""", "T(2, 3)"),
    Case("itertools_chain", """
import itertools
def fn(xs, ys):
    return [t * 2 for t in itertools.chain(xs, ys)], sum(itertools.chain([1], (2, 3)))
""", "[T(2,)], (T(2,), T(2,))"),
    Case("itertools_islice", """
import itertools
def fn(xs):
    return ([t + 1 for t in itertools.islice(xs, 1, None)],
            list(itertools.islice(range(10), 2, 8, 3)))
""", "[T(2,), T(2,), T(2,)]"),
    Case("itertools_product", """
import itertools
def fn(x):
    total = 0
    for a, b in itertools.product([1, 2], [10, 20]):
        total += a * b
    return x * total, list(itertools.product("ab", repeat=2))
""", "T(2,)"),
    Case("itertools_chain_from_iterable", """
import itertools
def fn(x):
    flat = list(itertools.chain.from_iterable([[1, 2], [3]]))
    return x * sum(flat), flat
""", "T(2,)"),
    Case("itertools_accumulate_and_count", """
import itertools
def fn(x):
    acc = list(itertools.accumulate([1, 2, 3, 4]))
    return x * acc[-1], acc
""", "T(2,)"),
    Case("itertools_zip_longest_repeat", """
import itertools
def fn(x):
    pairs = list(itertools.zip_longest([1, 2, 3], [4], fillvalue=0))
    return x * sum(a * b for a, b in pairs), list(itertools.repeat(2, 3))
""", "T(2,)"),
    # ------------------------------------------------------------ operator, math
    Case("operator_functions_on_tensors", """
import operator
def fn(x, y):
    return operator.add(x, y), operator.mul(x, 2), operator.neg(y), operator.truediv(x, 4)
""", "T(3,), T(3,)"),
    Case("operator_getitem_itemgetter", """
import operator
def fn(xs):
    get = operator.itemgetter(1)
    return operator.getitem(xs, 0) + get(xs), operator.itemgetter(0, 2)(xs)
""", "[T(2,), T(2,), T(2,)]"),
    Case("operator_attrgetter", """
import operator
def fn(x):
    ndim = operator.attrgetter("ndim")
    return x * ndim(x)
""", "T(2, 2)"),
    Case("operator_on_constants", """
import operator
def fn(x):
    k = operator.floordiv(7, 2) + operator.mod(7, 3) + operator.pow(2, 3) - operator.sub(5, 1)
    return x * k, operator.eq(1, 1), operator.not_(0), operator.contains([1, 2], 2)
""", "T(2,)"),
    Case("operator_comparisons_on_tensors", """
import operator
def fn(x, y):
    return operator.lt(x, y), operator.ge(x, 0.0), operator.and_(x > 0, y > 0)
""", "T(4,), T(4,)"),
    Case("math_functions_on_constants", """
def fn(x):
    k = math.log(math.e) + math.cos(0) + math.floor(2.7) + math.ceil(2.1) + math.hypot(3, 4)
    return x * k + math.pi, math.isclose(0.1 + 0.2, 0.3), math.gcd(12, 18)
""", "T(2,)"),
    Case("math_on_sizes", """
def fn(x):
    d = x.shape[-1]
    return x / math.sqrt(d) * math.log2(d), math.prod(x.shape), math.isqrt(d * d)
""", "T(2, 16)"),
    Case("math_inf_nan_checks", """
def fn(x):
    lo = -math.inf
    return (x.clamp(min=lo, max=math.inf), math.isinf(lo), math.isnan(float("nan")),
            math.isfinite(1.0))
""", "T(3,)"),
    Case("math_trig_constants", """
def fn(x):
    return x * math.sin(math.pi / 6) + math.atan2(1, 1) + math.degrees(math.radians(90)) + math.tau
""", "T(3,)"),
    # ------------------------------------------------------------ introspection
    Case("isinstance_tuple_of_types", """
def fn(x, k):
    if isinstance(k, (int, float)) and not isinstance(k, bool):
        x = x * k
    return x, isinstance(x, (list, torch.Tensor)), isinstance("a", str)
""", "T(2,), 3"),
    Case("issubclass_builtins_and_modules", """
def fn(x):
    a = issubclass(bool, int)
    b = issubclass(torch.nn.Linear, torch.nn.Module)
    c = issubclass(int, (str, float))
    return x * a + b, c
""", "T(2,)"),
    Case("type_comparisons", """
def fn(x, k):
    if type(k) is int:
        x = x + k
    if type(x) == torch.Tensor:
        x = x * 2
    return x, type(k) is float, type([]) is list
""", "T(2,), 3"),
    Case("type_name", """
def fn(x, k):
    return x * len(type(k).__name__), type(k).__name__
""", "T(2,), 3"),
    Case("callable_builtin", """
def helper(t):
    return t
def fn(x):
    return x * callable(helper) + callable(len) + callable(3), callable(torch.relu), callable(x)
""", "T(2,)"),
    Case("getattr_default_on_object", """
class Cfg:
    scale = 2.0
cfg = Cfg()
def fn(x):
    return x * getattr(cfg, "scale") + getattr(cfg, "shift", 1.0)
""", "T(2,)"),
    Case("hasattr_on_module_and_tensor", """
lin = torch.nn.Linear(2, 2)
def fn(x):
    if hasattr(lin, "weight") and not hasattr(lin, "nothing"):
        x = lin(x)
    return x, hasattr(x, "shape")
""", "T(3, 2)"),
    Case("setattr_on_object", """
class Box:
    pass
box = Box()
box.k = 1
def fn(x):
    setattr(box, "k", 5)
    return x * box.k + getattr(box, "k")
""", "T(2,)"),
    Case("identity_tests", """
def fn(x, y, opt=None):
    same = x is x
    z = x if opt is None else opt
    w = z
    return z * same + (w is z), opt is None, y is not None
""", "T(2,), T(2,)"),
    Case("identity_of_singletons", """
def fn(x, flag=True):
    if flag is True and ... is Ellipsis:
        x = x + 1
    return x, flag is not False, NotImplemented is NotImplemented
""", "T(2,)"),
    # ------------------------------------------------------------ strings
    Case("str_methods", """
def fn(x):
    name = "Layer_One"
    parts = name.lower().split("_")
    return x * len(parts), "-".join(parts), name.upper(), name.replace("One", "2")
""", "T(2,)"),
    Case("str_predicates", """
def fn(x):
    s = "conv1.weight"
    if s.startswith("conv") and s.endswith("weight") and "1" in s:
        x = x * 2
    return x, s.isidentifier(), "12".isdigit(), s.find("."), s.count("o")
""", "T(2,)"),
    Case("str_strip_partition_split", """
def fn(x):
    s = "  a.b.c  "
    head, _, tail = s.strip().partition(".")
    return x * len(tail), head, s.strip().rsplit(".", 1), s.lstrip(), s.rstrip()
""", "T(2,)"),
    Case("str_format_method", """
def fn(x):
    tag = "{}_{:.2f}_{name}".format(3, 1.23456, name="w")
    return x * len(tag), tag, "{:>5}".format("a"), "%d-%s" % (4, "b")
""", "T(2,)"),
    Case("fstring_on_sizes", """
def fn(x):
    n, m = x.shape
    key = f"{n}x{m}"
    return {key: x.sum(), f"{n * m:04d}": x.mean(), f"{m / n:.3f}": x.max()}
""", "T(2, 3)"),
    Case("fstring_conversions", """
def fn(x):
    v = "q"
    return x * 2, f"{v!r}{v!s}{v!a}", f"{3.14159:.2f}", f"{255:#x}"
""", "T(2,)"),
    Case("str_concat_and_repeat", """
def fn(x):
    s = "ab" + "cd"
    s += "e"
    return x * len(s * 2), s[1:3], s[::-1], s[-1]
""", "T(2,)"),
    Case("str_compare_and_dict_keys", """
def fn(d):
    out = []
    for k in d:
        if k < "m":
            out.append(d[k] * 2)
    return out
""", "{'a': T(2,), 'z': T(2,), 'c': T(2,)}"),
    Case("str_join_generator", """
def fn(x):
    names = ",".join(str(i) for i in range(4))
    return x * len(names), names, " ".join(["a", "b"]).title()
""", "T(2,)"),
    # ------------------------------------------------------------ imports
    Case("import_inside_function", """
def fn(x):
    import math as m
    return x * m.sqrt(4)
""", "T(2,)"),
    Case("from_import_inside_function", """
def fn(x):
    from math import sqrt, pi
    from operator import mul
    return mul(x, sqrt(pi))
""", "T(2,)"),
    Case("import_functools_itertools_inside", """
def fn(xs):
    import functools
    import itertools
    return functools.reduce(lambda a, b: a + b, itertools.chain(xs, xs))
""", "[T(2,), T(2,)]"),
]
