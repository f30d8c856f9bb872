"""Catalogue cases: closures and cells written and read, nested functions, lambdas,
generators consumed inside the frame, recursion on Python values, exceptions raised and
caught on Python values, `assert` on Python values."""
from .case import Case

CASES = [
    # ------------------------------------------------------------ closures and cells
    Case("closure_cell_written_by_inner", """
def fn(x):
    count = 0
    def bump(t):
        nonlocal count
        count += 1
        return t * count
    a = bump(x)
    b = bump(x)
    return a + b, count
""", "T(3,)"),
    Case("closure_reads_later_assignment", """
def fn(x):
    def get():
        return scale * x
    scale = 3.0
    first = get()
    scale = 4.0
    return first, get()
""", "T(3,)"),
    Case("closure_factory_inside", """
def fn(x):
    def make(k):
        def inner(t):
            return t * k
        return inner
    double, triple = make(2), make(3)
    return double(x) + triple(x)
""", "T(3,)"),
    Case("closure_over_tensor_inside", """
def fn(x, y):
    def add_y(t):
        return t + y
    return add_y(x), add_y(x * 2)
""", "T(3,), T(3,)"),
    Case("closure_list_accumulator", """
def fn(x):
    seen = []
    def record(t):
        seen.append(t.sum())
        return t
    record(x)
    record(x * 2)
    return seen, len(seen)
""", "T(3,)"),
    Case("nested_nonlocal_two_levels", """
def fn(x):
    total = 0
    def outer():
        def inner():
            nonlocal total
            total += 2
        inner()
        inner()
    outer()
    return x * total
""", "T(3,)"),
    Case("closure_default_argument_capture", """
def fn(x):
    fs = [lambda t, i=i: t * i for i in range(3)]
    return [f(x) for f in fs]
""", "T(2,)"),
    Case("closure_late_binding_loop", """
def fn(x):
    fs = [lambda t: t * i for i in range(3)]
    return [f(x) for f in fs]
""", "T(2,)"),
    # ------------------------------------------------------------ nested functions, lambdas
    Case("nested_function_with_defaults_and_kwargs", """
def fn(x):
    def affine(t, *, w=2.0, b=0.0):
        return t * w + b
    return affine(x), affine(x, b=1.0), affine(x, w=0.5, b=-1.0)
""", "T(3,)"),
    Case("nested_function_varargs", """
def fn(x, y):
    def total(*ts, scale=1.0):
        out = ts[0]
        for t in ts[1:]:
            out = out + t
        return out * scale
    return total(x, y), total(x, y, x, scale=0.5)
""", "T(3,), T(3,)"),
    Case("lambda_immediately_called_and_stored", """
def fn(x):
    ops = {"sq": lambda t: t * t, "neg": lambda t: -t}
    return ops["sq"](x) + ops["neg"](x), (lambda a, b=1: a + b)(x)
""", "T(3,)"),
    Case("lambda_returning_lambda", """
def fn(x):
    adder = lambda k: (lambda t: t + k)
    return adder(1)(x) * adder(2)(x)
""", "T(3,)"),
    Case("function_passed_as_argument", """
def apply_twice(f, t):
    return f(f(t))
def fn(x):
    return apply_twice(torch.sigmoid, x), apply_twice(lambda t: t * 2, x)
""", "T(3,)"),
    Case("higher_order_compose", """
def compose(*fs):
    def run(t):
        for f in reversed(fs):
            t = f(t)
        return t
    return run
def fn(x):
    return compose(torch.relu, lambda t: t - 1, torch.tanh)(x)
""", "T(4,)"),
    # ------------------------------------------------------------ generators
    Case("generator_function_consumed_by_list", """
def gen(xs):
    for t in xs:
        yield t * 2
def fn(xs):
    return list(gen(xs))
""", "[T(2,), T(2,)]"),
    Case("generator_function_in_for_loop", """
def pairs(n):
    for i in range(n):
        yield i, i * i
def fn(x):
    for i, sq in pairs(3):
        x = x + i * sq
    return x
""", "T(2,)"),
    Case("generator_expression_into_tuple_and_sum", """
def fn(xs):
    sq = tuple(t * t for t in xs)
    return sq, sum(t.sum() for t in xs)
""", "[T(2,), T(2,)]"),
    Case("generator_with_yield_from", """
def inner(t):
    yield t
    yield t + 1
def outer(t):
    yield from inner(t)
    yield t * 3
def fn(x):
    return [v for v in outer(x)]
""", "T(2,)"),
    Case("generator_next_calls", """
def counter():
    yield 1
    yield 2
def fn(x):
    g = counter()
    a = next(g)
    b = next(g)
    return x * a + b
""", "T(2,)"),
    Case("generator_expression_filtered", """
def fn(xs):
    return [t for t in (u * 2 for u in xs) if t.shape[0] == 2]
""", "[T(2,), T(3,), T(2,)]"),
    # ------------------------------------------------------------ recursion
    Case("recursion_factorial_python", """
def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)
def fn(x):
    return x * fact(5)
""", "T(2,)"),
    Case("recursion_over_nested_lists", """
def flatten(v):
    if isinstance(v, (list, tuple)):
        out = []
        for item in v:
            out.extend(flatten(item))
        return out
    return [v]
def fn(nested):
    leaves = flatten(nested)
    return sum(leaves[1:], leaves[0]), len(leaves)
""", "[T(2,), (T(2,), [T(2,)])]"),
    Case("recursion_fibonacci_memo_dict", """
def fib(n, memo):
    if n in memo:
        return memo[n]
    memo[n] = fib(n - 1, memo) + fib(n - 2, memo)
    return memo[n]
def fn(x):
    return x * fib(10, {0: 0, 1: 1})
""", "T(2,)"),
    Case("recursion_mutual", """
def is_even(n):
    return True if n == 0 else is_odd(n - 1)
def is_odd(n):
    return False if n == 0 else is_even(n - 1)
def fn(x):
    return x * 2 if is_even(6) else x
""", "T(2,)"),
    Case("recursion_tree_map_on_dict", """
def tree_map(f, v):
    if isinstance(v, dict):
        return {k: tree_map(f, u) for k, u in v.items()}
    if isinstance(v, list):
        return [tree_map(f, u) for u in v]
    return f(v)
def fn(d):
    return tree_map(lambda t: t * 2, d)
""", "{'a': T(2,), 'b': [T(2,), T(2,)]}"),
    # ------------------------------------------------------------ exceptions
    Case("try_except_keyerror_on_dict", """
def fn(x):
    d = {"a": 1}
    try:
        k = d["b"]
    except KeyError:
        k = 5
    return x * k
""", "T(2,)"),
    Case("try_except_raise_and_catch", """
def check(n):
    if n < 0:
        raise ValueError("negative")
    return n
def fn(x):
    try:
        k = check(-1)
    except ValueError:
        k = 2
    return x * k
""", "T(2,)"),
    Case("try_except_else_finally", """
def fn(x):
    log = []
    try:
        y = x * 2
    except RuntimeError:
        y = x
    else:
        log.append("else")
    finally:
        log.append("finally")
    return y, log
""", "T(2,)"),
    Case("try_except_index_error", """
def fn(x):
    xs = [1, 2]
    try:
        v = xs[5]
    except IndexError as e:
        v = len(str(e)) > 0
    return x * v
""", "T(2,)"),
    Case("try_except_tuple_of_types", """
def fn(x):
    try:
        int("nope")
    except (TypeError, ValueError):
        x = x + 1
    return x
""", "T(2,)"),
    Case("exception_attribute_args", """
def fn(x):
    try:
        raise ValueError(3)
    except ValueError as e:
        k = e.args[0]
    return x * k
""", "T(2,)"),
    Case("try_nested_reraise_to_outer", """
def fn(x):
    try:
        try:
            raise ValueError(1)
        except KeyError:
            k = 1
    except ValueError:
        k = 2
    return x * k
""", "T(2,)"),
    Case("try_finally_on_exception_path", """
def fn(x):
    log = []
    try:
        try:
            {}["a"]
        finally:
            log.append("fin")
    except KeyError as e:
        log.append(str(e))
    return x * len(log), log
""", "T(2,)"),
    Case("next_stop_iteration_caught", """
def fn(x):
    it = iter([1, 2])
    try:
        next(it)
        next(it)
        next(it)
    except StopIteration:
        return x * 2
    return x * 0
""", "T(2,)"),
    # ------------------------------------------------------------ assert
    Case("assert_on_python_values", """
def fn(x):
    assert x.dim() == 2, "needs a matrix"
    assert isinstance(x, torch.Tensor)
    n = x.shape[0]
    assert n > 0 and n < 100, f"bad size {n}"
    return x * n
""", "T(2, 3)"),
    Case("assert_on_container_contents", """
def fn(xs):
    assert len(xs) == 2
    assert all(t.shape == (3,) for t in xs)
    return xs[0] + xs[1]
""", "[T(3,), T(3,)]"),
    Case("assert_in_helper", """
def check(shape):
    assert len(shape) == 2, shape
    return shape
def fn(x):
    r, c = check(x.shape)
    return x.reshape(c, r)
""", "T(2, 3)"),
]
