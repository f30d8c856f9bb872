"""Dynamic floats (capture/sym_floats.py): a float argument that changes between calls
is a graph input (a 0-d float64 tensor the compiled frame makes each call) where a
tensor operator uses it, so the frame compiles at most twice (automatic dynamic), as
torch 2.13 does with specialize_float=False; every other use specialises it (its value
guarded). Results are bit-identical to eager's, dtypes included."""
import numpy as np
import pytest

import ember
from ember.capture import _hook, counters
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

BACKENDS = ["eager", "aot_eager", "llvm"]


def compiles():
    return counters["stats"]["unique_graphs"]


def recompiles():
    return sum(counters["recompiles"].values())


def identical(got, want):
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            identical(g, w)
    elif isinstance(want, ember.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.requires_grad == want.requires_grad
        assert got.numpy().tobytes() == want.numpy().tobytes()
    else:
        assert type(got) is type(want) and got == want


def scaled(x, s):
    return x * s + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_repro_compiles_at_most_twice(backend):
    compiled = ember.compile(scaled, backend=backend)
    for i in range(12):
        x = ember.ones(3)
        identical(compiled(x, 0.1 * i), scaled(x, 0.1 * i))
    assert recompiles() == 1
    assert counters["stats"]["frames_fallback"] == 0


def test_dynamic_true_compiles_once():
    compiled = ember.compile(scaled, backend="eager", dynamic=True)
    for i in range(6):
        x = ember.ones(3)
        identical(compiled(x, 0.3 * i + 0.01), scaled(x, 0.3 * i + 0.01))
    assert recompiles() == 0


def test_dynamic_false_keeps_specialising():
    compiled = ember.compile(scaled, backend="eager", dynamic=False)
    for i in range(5):
        x = ember.ones(3)
        identical(compiled(x, 0.1 * i), scaled(x, 0.1 * i))
    assert recompiles() == 4


def test_a_dynamic_float_guards_its_type():
    compiled = ember.compile(scaled, backend="eager")
    x = ember.ones(3)
    for s in (0.5, 0.25, 0.75):
        identical(compiled(x, s), scaled(x, s))
    identical(compiled(x, 2), scaled(x, 2))          # an int: not the float entry
    identical(compiled(x, 3), scaled(x, 3))
    identical(compiled(x, 0.125), scaled(x, 0.125))
    assert recompiles() <= 3


OPS = {"add": lambda x, s: (x + s, s + x), "sub": lambda x, s: (x - s, s - x),
       "mul": lambda x, s: (x * s, s * x), "truediv": lambda x, s: (x / s, s / x),
       "pow": lambda x, s: (x ** s, s ** x)}
DTYPES = [ember.float16, ember.bfloat16, ember.float32, ember.float64, ember.int64,
          ember.int32, ember.uint8]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_dtypes_bit_identical(op, dtype):
    forward = OPS[op]
    rng = np.random.default_rng(3)
    for shape in [(5,), (), (2, 3)]:
        ember.compiler.reset()
        counters.clear()
        compiled = ember.compile(forward, backend="eager")
        base = np.abs(rng.standard_normal(shape)) * 4 + 0.5
        x = ember.tensor(base).to(dtype)
        for s in (0.37, 1.9, 0.0123, 2.5):
            identical(compiled(x, s), forward(x, s))
        assert counters["stats"]["frames_fallback"] == 0
        assert compiles() <= 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [ember.float32, ember.float64], ids=str)
def test_broadcast_and_inplace(backend, dtype):
    def forward(x, y, s):
        z = x.clone()
        z += s
        z *= s
        return z - y / s, (x * y) * s

    compiled = ember.compile(forward, backend=backend)
    x = ember.arange(6, dtype=dtype).reshape(2, 3) + 1
    y = ember.tensor(1.5, dtype=dtype)
    for s in (0.5, 1.25, 3.0, 0.1):
        identical(compiled(x, y, s), forward(x, y, s))
    assert recompiles() == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_lr_style_training_step(backend):
    def step(w, x, target, lr):
        loss = ((x @ w - target) ** 2).mean()
        (g,) = ember.autograd.grad(loss, [w])
        return w.detach() - lr * g

    compiled = ember.compile(step, backend=backend)
    ember.manual_seed(0)
    w = ember.randn(4, 1, requires_grad=True)
    x, target = ember.randn(8, 4), ember.randn(8, 1)
    for i in range(10):
        lr = 0.1 * 0.9 ** i
        got, want = compiled(w, x, target, lr), step(w, x, target, lr)
        if backend == "llvm":
            # (llvm's reductions may differ from eager's in the last bit with a
            # constant lr too: checked close, not identical)
            assert got.dtype == want.dtype and not got.requires_grad
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
        else:
            identical(got, want)
    assert recompiles() <= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_item_then_use_after_a_break(backend):
    def forward(y):
        v = y.sum().item()
        return y + v, y * v

    compiled = ember.compile(forward, backend=backend)
    for i in range(12):
        y = ember.arange(3, dtype=ember.float32) * (i + 0.5)
        identical(compiled(y), forward(y))
    assert counters["stats"]["frames_fallback"] == 0
    assert recompiles() <= 2


def scalar_result_does_not_require_grad(x, s):
    return x * s


def test_gradients_as_eager():
    compiled = ember.compile(scalar_result_does_not_require_grad, backend="aot_eager")
    for s in (0.5, 0.7, 1.3):
        x1 = ember.arange(3, dtype=ember.float32).requires_grad_()
        x2 = ember.arange(3, dtype=ember.float32).requires_grad_()
        got = compiled(x1, s)
        want = scalar_result_does_not_require_grad(x2, s)
        identical(got.detach(), want.detach())
        got.sum().backward()
        want.sum().backward()
        identical(x1.grad, x2.grad)
    assert recompiles() == 1


def branch(x, s):
    y = x * s
    if s > 0.5:
        return y + 1
    return y - 1


def as_int(x, s):
    return x * s + int(s * 10)


def dropout_p(x, s):
    ember.manual_seed(0)
    return ember.nn.functional.dropout(x * s, p=s, training=True)


def returned(x, s):
    return x * s, s


def printed(x, s):
    print(s)
    return x * s


@pytest.mark.parametrize("fn", [branch, as_int, dropout_p, returned, printed],
                         ids=lambda f: f.__name__)
def test_specialising_uses_recompile_correctly(fn, capsys):
    compiled = ember.compile(fn, backend="eager")
    values = [0.2, 0.4, 0.6, 0.8, 0.3]
    for s in values:
        x = ember.ones(4)
        want = fn(x, s)
        out = capsys.readouterr().out
        identical(compiled(x, s), want)
        assert capsys.readouterr().out == out
    assert counters["stats"]["frames_fallback"] == 0


def test_a_specialised_use_guards_the_value():
    compiled = ember.compile(branch, backend="eager")
    x = ember.ones(2)
    for s in (0.2, 0.3, 0.9, 0.4, 0.95):
        identical(compiled(x, s), branch(x, s))
    # the branch reads the value: each new value compiles again
    assert recompiles() == 4


def test_bool_tensor_specialises():
    def forward(x, s):
        return x * s

    compiled = ember.compile(forward, backend="eager")
    x = ember.tensor([True, False, True])
    for s in (0.5, 1.5, 2.5):
        identical(compiled(x, s), forward(x, s))


def test_integer_inplace_raises_as_eager():
    def forward(x, s):
        x += s
        return x

    compiled = ember.compile(forward, backend="eager")
    for s in (0.5, 1.5):
        with pytest.raises(RuntimeError):
            forward(ember.ones(2, dtype=ember.int64), s)
        with pytest.raises(RuntimeError):
            compiled(ember.ones(2, dtype=ember.int64), s)


def derived(x, a, b):
    c = a * 0.5 + b - 3
    return x * c + (a - b) / 4, x / (a * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_arithmetic_on_dynamic_floats_stays_dynamic(backend):
    compiled = ember.compile(derived, backend=backend)
    x = ember.arange(4, dtype=ember.float32) + 1
    for i in range(10):
        a, b = 0.1 * i + 0.3, 1.7 - 0.13 * i
        identical(compiled(x, a, b), derived(x, a, b))
    assert recompiles() == 1


def divides_by_the_float(x, s):
    return x * (1.0 / s)


def test_division_by_a_dynamic_float_specialises():
    # Python raises ZeroDivisionError where a tensor division gives inf
    compiled = ember.compile(divides_by_the_float, backend="eager")
    x = ember.ones(2)
    for s in (0.5, 0.25, 2.0):
        identical(compiled(x, s), divides_by_the_float(x, s))
    with pytest.raises(ZeroDivisionError):
        compiled(x, 0.0)


def derived_returned(x, s):
    t = s * 3
    return x + t, t


def test_a_derived_value_read_specialises():
    compiled = ember.compile(derived_returned, backend="eager")
    x = ember.ones(2)
    for s in (0.5, 0.25, 2.0, 0.75):
        identical(compiled(x, s), derived_returned(x, s))


METHOD_OPS = {
    "neg": lambda x, s: (x * -s, -s * x, x + (-s) * 2, x * +s),
    "methods": lambda x, s: (x.mul(s), x.add(s), x.sub(s), x.div(s), x.true_divide(s),
                             x.multiply(s), x.divide(s), x.subtract(s)),
    "pow_method": lambda x, s: (x.pow(s), ember.pow(x, s)),
    "functions": lambda x, s: (ember.mul(x, s), ember.add(x, s), ember.sub(x, s),
                               ember.div(x, s), ember.mul(s, x)),
    "division": lambda x, s: (x / s, s / x, x / -s),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(METHOD_OPS))
def test_negation_methods_and_functions_stay_dynamic_bit_identical(op, dtype):
    """-s, x.mul(s), x.add(s), x.div(s), x.pow(s), ember.mul(x, s), x / s, s / x: the
    0-d float64 graph input, eager's bits in every dtype, compiled at most twice over
    five values (automatic dynamic: not once per value)."""
    forward = METHOD_OPS[op]
    rng = np.random.default_rng(5)
    for shape in [(4,), (), (2, 3)]:
        ember.compiler.reset()
        counters.clear()
        compiled = ember.compile(forward, backend="eager")
        x = ember.tensor(np.abs(rng.standard_normal(shape)) * 4 + 0.5).to(dtype)
        for s in (0.37, 1.9, 0.0123, 2.5, 0.71):
            identical(compiled(x, s), forward(x, s))
        assert counters["stats"]["frames_fallback"] == 0
        assert compiles() <= 2, dict(counters["recompiles"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_methods_stay_dynamic(backend):
    def forward(x, s):
        z = x.clone()
        z.mul_(s)
        z.add_(-s)
        z.div_(s)
        z.sub_(s)
        return z

    compiled = ember.compile(forward, backend=backend)
    x = ember.arange(6, dtype=ember.float32).reshape(2, 3) + 1
    for s in (0.5, 1.25, 3.0, 0.1, 0.3):
        identical(compiled(x, s), forward(x, s))
    assert recompiles() == 1


def test_method_with_keywords_specialises_as_eager():
    def forward(x, s):
        return x.add(x, alpha=s), x.div(s, rounding_mode="floor")

    compiled = ember.compile(forward, backend="eager")
    x = ember.arange(4, dtype=ember.float32) + 0.5
    for s in (0.5, 1.5, 2.5):
        identical(compiled(x, s), forward(x, s))
    assert counters["stats"]["frames_fallback"] == 0


def clamped(x, s):
    return max(s, 0.5) * x + min(0.25, s, 2.0) * x, x * max(s, float("nan"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_min_of_a_dynamic_float_and_floats_stay_dynamic(backend):
    """max(s, 0.5) of a dynamic float and float constants is a derived float (the
    where chain over float64, CPython's order: a NaN first is kept, ties keep the
    earlier item), so new values of s do not compile again."""
    compiled = ember.compile(clamped, backend=backend)
    x = ember.arange(4, dtype=ember.float32) + 1
    for s in (0.1, 0.7, 3.0, 0.5, -0.0, 0.3, 1.9, float("nan")):
        identical(compiled(x, s), clamped(x, s))
    assert recompiles() == 1
    assert counters["stats"]["frames_fallback"] == 0


def max_with_int(x, s):
    return max(s, 1) * x


def test_max_of_a_dynamic_float_and_an_int_specialises():
    # max(s, 1) is the int 1 or the float s by the data: its value is read
    compiled = ember.compile(max_with_int, backend="eager")
    x = ember.arange(3)
    for s in (0.5, 1.5, 2.5, 0.25):
        identical(compiled(x, s), max_with_int(x, s))
