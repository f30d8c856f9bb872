"""ember.autograd.Function ([aot-2] item 4), against torch.autograd.Function: the
examples of PyTorch's "Extending torch.autograd" notes and autograd.Function docs
(LinearFunction, MulConstant, MyCube, Exp with and without setup_context, Sinh, a sort
with a non-differentiable output, set_materialize_grads, once_differentiable), plus the
gradient-reversal and straight-through estimators real models use, run eagerly and
compiled with fullgraph=True under every backend, values and gradients equal torch's;
and the context's rules (needs_input_grad, mark_dirty, saved tensors' checks, errors)."""
import numpy as np
import pytest

import ember
from ember.capture import CaptureError, _hook, counters


def make_functions(lib):
    """The same classes written against torch or ember (lib)."""
    Function = lib.autograd.Function
    once_differentiable = lib.autograd.function.once_differentiable

    class LinearFunction(Function):
        @staticmethod
        def forward(input, weight, bias):
            output = input.mm(weight.t())
            if bias is not None:
                output += bias.unsqueeze(0).expand_as(output)
            return output

        @staticmethod
        def setup_context(ctx, inputs, output):
            input, weight, bias = inputs
            ctx.save_for_backward(input, weight, bias)

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors
            grad_input = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.mm(weight)
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output.t().mm(input)
            if bias is not None and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(0)
            return grad_input, grad_weight, grad_bias

    class LinearFunctionCtx(Function):
        """The combined form: forward(ctx, ...), bias defaulting to None."""
        @staticmethod
        def forward(ctx, input, weight, bias=None):
            ctx.save_for_backward(input, weight, bias)
            output = input.mm(weight.t())
            if bias is not None:
                output += bias.unsqueeze(0).expand_as(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors
            grad_input = grad_output.mm(weight) if ctx.needs_input_grad[0] else None
            grad_weight = grad_output.t().mm(input) if ctx.needs_input_grad[1] else None
            grad_bias = grad_output.sum(0) if bias is not None and ctx.needs_input_grad[2] \
                else None
            return grad_input, grad_weight, grad_bias

    class MulConstant(Function):
        @staticmethod
        def forward(tensor, constant):
            return tensor * constant

        @staticmethod
        def setup_context(ctx, inputs, output):
            tensor, constant = inputs
            ctx.constant = constant

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.constant, None

    class MyCube(Function):
        @staticmethod
        def forward(x):
            result = x ** 3
            dx = 3 * x ** 2
            return result, dx

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, = inputs
            result, dx = output
            ctx.save_for_backward(x, dx)

        @staticmethod
        def backward(ctx, grad_output, grad_dx):
            x, dx = ctx.saved_tensors
            result = grad_output * dx + grad_dx * 6 * x
            return result

    class Exp(Function):
        @staticmethod
        def forward(ctx, i):
            result = i.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad_output):
            result, = ctx.saved_tensors
            return grad_output * result

    class ExpSetup(Function):
        @staticmethod
        def forward(i):
            return i.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)

        @staticmethod
        def backward(ctx, grad_output):
            result, = ctx.saved_tensors
            return grad_output * result

    class Sinh(Function):
        @staticmethod
        def forward(ctx, x):
            expx = lib.exp(x)
            expnegx = lib.exp(-x)
            ctx.save_for_backward(expx, expnegx)
            return (expx - expnegx) / 2, expx, expnegx

        @staticmethod
        def backward(ctx, grad_out, _grad_out_exp, _grad_out_negexp):
            expx, expnegx = ctx.saved_tensors
            grad_input = grad_out * (expx + expnegx) / 2
            grad_input += _grad_out_exp * expx
            grad_input -= _grad_out_negexp * expnegx
            return grad_input

    class Sort(Function):
        @staticmethod
        def forward(ctx, x):
            sorted, idx = x.sort()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(x, idx)
            return sorted, idx

        @staticmethod
        def backward(ctx, g1, g2):
            x, idx = ctx.saved_tensors
            grad_input = lib.zeros_like(x)
            grad_input.index_add_(0, idx, g1)
            return grad_input

    class SimpleFunc(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(x)
            return x.clone(), x.clone()

        @staticmethod
        @once_differentiable
        def backward(ctx, g1, g2):
            x, = ctx.saved_tensors
            grad_input = lib.zeros_like(x)
            if g1 is not None:
                grad_input += g1
            if g2 is not None:
                grad_input += g2
            return grad_input

    class GradReverse(Function):
        @staticmethod
        def forward(ctx, x, alpha):
            ctx.alpha = alpha
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return g.neg() * ctx.alpha, None

    class StraightThrough(Function):
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g

    class AddInPlace(Function):
        @staticmethod
        def forward(ctx, x, y):
            x.add_(y)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g, g

    return {c.__name__: c for c in (LinearFunction, LinearFunctionCtx, MulConstant, MyCube,
                                    Exp, ExpSetup, Sinh, Sort, SimpleFunc, GradReverse,
                                    StraightThrough, AddInPlace)}


def _my_cube(F, x):
    result, dx = F["MyCube"].apply(x)
    return result


# name -> (fn(F, *inputs) -> one tensor, input shapes)
EXAMPLES = {
    "linear": (lambda F, x, w, b: F["LinearFunction"].apply(x, w, b), [(4, 3), (5, 3), (5,)]),
    "linear_ctx": (lambda F, x, w, b: F["LinearFunctionCtx"].apply(x, w, b),
                   [(4, 3), (5, 3), (5,)]),
    "linear_ctx_no_bias": (lambda F, x, w: F["LinearFunctionCtx"].apply(x, w),
                           [(4, 3), (5, 3)]),
    "mul_constant": (lambda F, x: F["MulConstant"].apply(x, 2.5), [(3, 4)]),
    "my_cube": (_my_cube, [(3, 4)]),
    "my_cube_dx_used": (lambda F, x: sum(F["MyCube"].apply(x)), [(3, 4)]),
    "exp": (lambda F, x: F["Exp"].apply(x), [(3, 4)]),
    "exp_setup_context": (lambda F, x: F["ExpSetup"].apply(x) * 2, [(3, 4)]),
    "sinh": (lambda F, x: F["Sinh"].apply(x)[0], [(3, 4)]),
    "sinh_all": (lambda F, x: sum(F["Sinh"].apply(x)), [(3, 4)]),
    "sort": (lambda F, x: F["Sort"].apply(x[0])[0] * x[1], [(2, 5)]),
    "materialize_false_one": (lambda F, x: F["SimpleFunc"].apply(x)[1] * 3, [(3,)]),
    "materialize_false_both": (lambda F, x: sum(F["SimpleFunc"].apply(x)), [(3,)]),
    "grad_reverse": (lambda F, x: F["GradReverse"].apply(x * 2, 0.5).exp(), [(3, 4)]),
    "straight_through": (lambda F, x: (F["StraightThrough"].apply(x * 3) * x), [(3, 4)]),
    "mark_dirty": (lambda F, x, y: F["AddInPlace"].apply(x * 1, y) * 2, [(3,), (3,)]),
}


def _data(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def _run(lib, F, fn, data):
    xs = [lib.tensor(d, requires_grad=True) for d in data]
    out = fn(F, *xs)
    (out * out).sum().backward()
    return out.detach().numpy(), [x.grad.numpy() if x.grad is not None else None for x in xs]


@pytest.fixture(scope="module")
def functions(torch):
    return make_functions(torch), make_functions(ember)


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    counters.clear()
    yield
    ember.compiler.reset()


def _compare(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10, atol=1e-12)
    for g, w in zip(got[1], want[1]):
        assert (g is None) == (w is None)
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_eagerly_match_torch(name, functions, torch):
    fn, shapes = EXAMPLES[name]
    tf, ef = functions
    data = _data(shapes)
    _compare(_run(ember, ef, fn, data), _run(torch, tf, fn, data))


@pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_compile_whole_and_match_torch(name, backend, functions, torch,
                                                monkeypatch):
    """fullgraph=True: the call of apply is one node of the captured graph; the AOT
    backends trace its forward into the forward graph and its backward into the
    backward graph (nothing falls back, in strict mode)."""
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    fn, shapes = EXAMPLES[name]
    tf, ef = functions
    data = _data(shapes, seed=1)
    compiled = ember.compile(lambda *xs: fn(ef, *xs), backend=backend, fullgraph=True)
    got = _run(ember, ef, lambda F, *xs: compiled(*xs), data)
    _compare(got, _run(torch, tf, fn, data))
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["unsupported"] and not counters["backend_fallback"]
    assert not counters["llvm_fallback"]


@pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")
def test_compiled_backward_is_the_custom_one():
    """The backward graph computes the class's backward, not the forward's derivative:
    a straight-through round passes the gradient as it is."""
    class Round(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g * 10

    for backend in ("aot_eager", "llvm"):
        ember.compiler.reset()
        x = ember.tensor([0.2, 1.7], requires_grad=True)
        ember.compile(lambda x: Round.apply(x).sum(), backend=backend, fullgraph=True)(x) \
            .backward()
        assert x.grad.tolist() == [10.0, 10.0]


def test_double_backward_through_my_cube(functions, torch):
    """MyCube's purpose: its backward is differentiable (create_graph)."""
    tf, ef = functions
    data = np.array([0.5, -1.5, 2.0])
    res = []
    for lib, F in ((torch, tf), (ember, ef)):
        x = lib.tensor(data, requires_grad=True)
        y = _my_cube(F, x)
        g, = lib.autograd.grad(y.sum(), x, create_graph=True)
        gg, = lib.autograd.grad(g.sum(), x)
        res.append((g.detach().numpy(), gg.numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-12)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-12)


# ------------------------------------------------------------------ the context's rules

def test_needs_input_grad_and_grad_mode_in_forward():
    seen = {}

    class F(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x, k, y):
            seen["needs"] = ctx.needs_input_grad
            seen["grad"] = ember.is_grad_enabled()
            return x * k + y

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    x, y = ember.ones(2, requires_grad=True), ember.ones(2)
    out = F.apply(x, 3, y)
    assert seen == {"needs": (True, False, False), "grad": False}
    assert out.requires_grad and out.grad_fn.name() == "FBackward"
    with ember.no_grad():
        out = F.apply(x, 3, y)
    assert seen["needs"] == (True, False, False) and not out.requires_grad


def test_mark_dirty_continues_the_inputs_history(torch):
    res = []
    for lib in (torch, ember):
        class AddOne(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.add_(1)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 3

        a = lib.tensor([1.0, 2.0], requires_grad=True)
        x = a * 2
        y = AddOne.apply(x)
        assert y is x and x.grad_fn is not None
        (y * y).sum().backward()
        res.append((x._version, x.detach().numpy(), a.grad.numpy()))
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been "
                                               "used in an in-place operation"):
            AddOne.apply(lib.ones(2, requires_grad=True))
    assert res[0][0] == res[1][0] == 2
    np.testing.assert_allclose(res[1][1], res[0][1])
    np.testing.assert_allclose(res[1][2], res[0][2])


def test_dirty_tensors_must_be_outputs():
    class Bad(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match="marked as dirty during the forward method were "
                                           "not returned"):
        Bad.apply(ember.ones(2, requires_grad=True) * 1)


def test_non_differentiable_outputs_get_materialized_zeros(torch):
    got = []
    for lib in (torch, ember):
        class ArgMax(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                a, b = x * 2, x.argmax()
                ctx.mark_non_differentiable(b)
                return a, b

            @staticmethod
            def backward(ctx, ga, gb):
                got.append((ga.tolist(), gb.tolist(), str(gb.dtype).split(".")[-1]))
                return ga * 2

        x = lib.ones(3, requires_grad=True)
        a, b = ArgMax.apply(x)
        assert a.requires_grad and not b.requires_grad
        a.sum().backward()
    assert got[0] == got[1] == ([1.0] * 3, 0, "int64")


def test_returned_input_is_a_new_tensor_sharing_memory():
    class Id(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = ember.ones(3, requires_grad=True)
    y = Id.apply(x)
    assert y is not x and y.grad_fn is not None
    assert y.untyped_storage() is x.untyped_storage() or np.shares_memory(y.numpy(),
                                                                          x.detach().numpy())
    y.sum().backward()
    assert x.grad.tolist() == [2.0] * 3


def test_saved_tensors_are_checked_and_freed(torch):
    class Square(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g

    a = ember.ones(2, requires_grad=True)
    x = a * 1
    y = Square.apply(x)
    x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*is at version "
                                           "1; expected version 0 instead"):
        y.sum().backward()
    x = ember.ones(2, requires_grad=True)
    y = Square.apply(x)
    y.sum().backward(retain_graph=True)
    y.sum().backward()                    # retained: a second backward runs
    assert x.grad.tolist() == [4.0, 4.0]
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second "
                                           "time"):
        y.sum().backward()
    with pytest.raises(TypeError, match="save_for_backward can only save variables, but "
                                        "argument 1 is of type int"):
        class SaveInt(ember.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x, 3)
                return x

        SaveInt.apply(x)


def test_gradient_count_and_type_errors_are_pytorchs(torch):
    for lib in (torch, ember):
        class TooMany(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g, g

        class TooFew(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x * y

            @staticmethod
            def backward(ctx, g):
                return g

        class ForNumber(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                return x * k

            @staticmethod
            def backward(ctx, g):
                return g, g

        class WrongShape(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.sum()

            @staticmethod
            def backward(ctx, g):
                return lib.ones(5)

        class TrailingNone(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g, None, None

        class NoBackward(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

        def x():
            return lib.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError, match=r"function TooManyBackward returned an "
                                               r"incorrect number of gradients \(expected 1, "
                                               r"got 2\)"):
            TooMany.apply(x()).sum().backward()
        with pytest.raises(RuntimeError, match=r"expected 2, got 1"):
            TooFew.apply(x(), lib.ones(2)).sum().backward()
        with pytest.raises(RuntimeError, match="returned a gradient different than None at "
                                               "position 2, but the corresponding forward "
                                               "input was not a Variable"):
            ForNumber.apply(x(), 3).sum().backward()
        with pytest.raises(RuntimeError, match=r"returned an invalid gradient at index 0 - "
                                               r"got \[5\] but expected shape compatible with "
                                               r"\[2\]"):
            WrongShape.apply(x()).backward()
        TrailingNone.apply(x()).sum().backward()
        with pytest.raises(NotImplementedError, match="You must implement either the "
                                                      "backward or vjp method"):
            NoBackward.apply(x()).sum().backward()


def test_materialize_grads_off_passes_none(torch):
    seen = []

    class Two(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            seen.append((g1, g2 is None))
            return g2 * 3

    x = ember.ones(2, requires_grad=True)
    Two.apply(x)[1].sum().backward()
    assert seen == [(None, False)] and x.grad.tolist() == [3.0, 3.0]


def test_once_differentiable(torch):
    class Square(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        @ember.autograd.function.once_differentiable
        def backward(ctx, g):
            assert not ember.is_grad_enabled()
            x, = ctx.saved_tensors
            return 2 * x * g

    x = ember.tensor([1.0, 2.0], requires_grad=True)
    g, = ember.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
    assert g.tolist() == [2.0, 4.0] and not g.requires_grad    # as torch: grad_out has none
    v = ember.ones(2, requires_grad=True)
    g, = ember.autograd.grad(Square.apply(x), x, grad_outputs=v * 1, create_graph=True)
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that "
                                           "was marked with @once_differentiable"):
        g.sum().backward()


def test_setup_context_binds_keywords_and_defaults():
    seen = []

    class Scale(ember.autograd.Function):
        @staticmethod
        def forward(x, k=2.0):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            seen.append(inputs[1])
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    x = ember.ones(2, requires_grad=True)
    Scale.apply(x).sum().backward()
    Scale.apply(x, k=5.0).sum().backward()
    assert seen == [2.0, 5.0] and x.grad.tolist() == [7.0, 7.0]


def test_legacy_instances_are_refused():
    class F(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

    with pytest.warns(DeprecationWarning):
        f = F()
    with pytest.raises(RuntimeError, match="Legacy autograd function with non-static forward"):
        f(ember.ones(2))


# ------------------------------------------------------------------ what cannot be traced

@pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_a_forward_that_needs_data_is_a_graph_break_counted(backend):
    class NumpyExp(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return ember.from_numpy(np.exp(x.detach().numpy()))

        @staticmethod
        def backward(ctx, g):
            return g

    x = ember.tensor([0.0, 1.0], requires_grad=True)
    y = ember.compile(lambda x: NumpyExp.apply(x) * x, backend=backend)(x)
    np.testing.assert_allclose(y.detach().numpy(), [0.0, np.e], rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0 + np.e], rtol=1e-6)  # x + e^x
    # a break at the apply call, which runs in CPython; `* x` is captured after it
    assert counters["stats"]["graph_breaks"] == 1
    assert counters["stats"]["frames_fallback"] == 0
    assert any("NumpyExp.apply raised" in r for r in counters["graph_break"])
    ember.compiler.reset()
    with pytest.raises(CaptureError, match="NumpyExp.apply raised"):
        ember.compile(lambda x: NumpyExp.apply(x) * x, backend=backend, fullgraph=True)(x)


@pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")
@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_a_backward_that_needs_data_runs_its_graph_eagerly(backend):
    class NumpyCos(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * ember.from_numpy(np.cos(x.detach().numpy()))

    x = ember.tensor([0.0, 1.0], requires_grad=True)
    y = ember.compile(lambda x: NumpyCos.apply(x), backend=backend)(x)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos([0.0, 1.0]), rtol=1e-6)
    assert sum(counters["backend_fallback"].values()) == 1


@pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_mark_dirty_on_a_graph_input_compiles(backend, monkeypatch):
    """The Function writes into an input of the graph: the write is an input mutation
    of the compiled graph (written back after the call), and the gradient is the class's
    backward's."""
    monkeypatch.setattr(ember.compiler.config, "strict", True)

    class Scale(ember.autograd.Function):
        @staticmethod
        def forward(ctx, buf, w):
            buf.mul_(w)
            ctx.mark_dirty(buf)
            ctx.save_for_backward(w)
            return buf

        @staticmethod
        def backward(ctx, g):
            w, = ctx.saved_tensors
            return g * 100, g.sum() * 7

    def f(buf, w):
        return Scale.apply(buf, w) * 2

    res = []
    for fn in (f, ember.compile(f, backend=backend, fullgraph=True)):
        buf, w = ember.tensor([1.0, 2.0]), ember.tensor(3.0, requires_grad=True)
        out = fn(buf, w)
        out.sum().backward()
        res.append((out.tolist(), buf.tolist(), buf._version, w.grad.item(),
                    buf.requires_grad))
    assert res[0] == res[1] == ([6.0, 12.0], [3.0, 6.0], 2, 28.0, True)
    assert counters["stats"]["unique_graphs"] == 1
