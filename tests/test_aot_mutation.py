"""AOT functionalization: in-place writes through views of intermediates (ember.aot.
functionalize). Every pattern runs under aot_eager and llvm (strict: nothing may fall back)
in float32 and float64, without and with inputs that require grad; outputs and .grad must
equal eager's."""
import numpy as np
import pytest

import ember
from ember.aot import trace_joint
from ember.aot.trace import TraceError
from ember.capture import counters

F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-12)
DTYPES = [(ember.float32, F32), (ember.float64, F64)]
BACKENDS = ["aot_eager", "llvm"]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    ember.compiler.reset()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    yield
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    assert not counters["backend_fallback"], dict(counters["backend_fallback"])
    assert not counters["unsupported"], dict(counters["unsupported"])
    ember.compiler.reset()


# ------------------------------------------------------------------ the patterns

def setitem_column(x, z):
    y = x * 1
    y[:, 0] = 5.0
    return y * z


def setitem_tensor_value(x, z):
    y = x * 1
    y[1, 1:] = z[0, :3]
    return y


def mask_assign(x, z):
    y = x * 1
    y[y > 0] = 0
    return y + z


def mask_assign_tensor_value(x, z):
    y = x * 1
    y[z > 0] = z[0, 0] * 3
    return y


IDX = ember.tensor([2, 0])


def index_tensor_assign(x, z):
    y = x * 1
    y[IDX] = z[:2] * 2
    return y


def index_list_assign(x, z):
    y = x * 1
    y[:, [3, 1]] = z[:, :2]
    return y


def select_add_(x, z):
    y = x * 1
    y[0].add_(1)
    return y * z


def select_mul_by_tensor(x, z):
    y = x * 1
    y[1].mul_(z[2])
    return y


def transpose_mul_(x, z):
    y = x * 1
    y.t().mul_(2)
    return y + z


def flat_view_zero_(x, z):
    y = x * 1
    y.view(-1).zero_()
    return y + z


def strided_slice_fill_(x, z):
    y = x * 1
    y[1:, ::2].fill_(3)
    return y * z


def chain_copy_(x, z):
    y = x * 1
    y[0][1:].copy_(z[1, :3])
    return y


def view_of_view_chain(x, z):
    y = x * 1
    y.view(2, 6).t()[1:, 0].mul_(z[0, 0])
    return y


def view_read_after_base_write(x, z):
    y = x * 1
    v = y[0]
    y.mul_(2)
    return v * z[0]


def view_read_after_other_view_write(x, z):
    y = x * 1
    col = y[:, 1]
    y[1].add_(z[1])
    return col, y


def repeated_writes(x, z):
    y = x.sin()
    y[0] *= 2
    y[0] *= z[0]
    y[:, 2] += y[:, 1]
    return y


def pad_by_slice_assignment(x, z):
    out = ember.zeros(x.shape[0] + 2, x.shape[1], dtype=x.dtype)
    out[1:-1] = x
    return out * 1


def pad_1d(x, z):
    out = ember.zeros(x.shape[1] + 2, dtype=x.dtype)
    out[1:-1] = x[0]
    return out + 0


def expand_row_write(x, z):
    r = x.sum(0) * 1
    e = r.expand(3, 4)
    e[0].mul_(2)        # writes r through an expand: no inverse, an index scatter
    return r * z[0]


def mixed_dtype_write(x, z):
    y = x * 1
    y[0].add_(z[0].double())       # promoted, then cast back into y's dtype
    return y


def broadcast_operand_write(x, z):
    y = x * 1
    y[:, 1:3].add_(z[0, 1:3])
    return y * z


PATTERNS = [setitem_column, setitem_tensor_value, mask_assign, mask_assign_tensor_value,
            index_tensor_assign, index_list_assign, select_add_, select_mul_by_tensor,
            transpose_mul_, flat_view_zero_, strided_slice_fill_, chain_copy_, view_of_view_chain,
            view_read_after_base_write, view_read_after_other_view_write, repeated_writes,
            pad_by_slice_assignment, pad_1d, expand_row_write, mixed_dtype_write,
            broadcast_operand_write]


def _inputs(dtype, requires_grad, seed=0):
    g = np.random.default_rng(seed)
    return [ember.tensor(g.standard_normal(s), dtype=dtype, requires_grad=requires_grad)
            for s in ((3, 4), (3, 4))]


def _outs(r):
    return list(r) if isinstance(r, tuple) else [r]


def _tangents(outs, seed=1):
    g = np.random.default_rng(seed)
    return [ember.tensor(g.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in outs]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("fn", PATTERNS, ids=lambda f: f.__name__)
def test_pattern_forward_matches_eager(fn, dtype, tol, backend):
    want = _outs(fn(*_inputs(dtype, False)))
    got = _outs(ember.compile(fn, backend=backend, fullgraph=True)(*_inputs(dtype, False)))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), **tol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("fn", PATTERNS, ids=lambda f: f.__name__)
def test_pattern_with_grad_matches_eager(fn, dtype, tol, backend):
    xs = _inputs(dtype, True)
    want = _outs(fn(*xs))
    tangents = _tangents(want)
    ember.autograd.backward(want, tangents)
    want_grads = [None if x.grad is None else x.grad.numpy().copy() for x in xs]
    ys = _inputs(dtype, True)
    got = _outs(ember.compile(fn, backend=backend, fullgraph=True)(*ys))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), **tol)
    ember.autograd.backward(got, tangents)
    for y, w in zip(ys, want_grads):
        if w is None:
            assert y.grad is None
        else:
            np.testing.assert_allclose(y.grad.numpy(), w, **tol)


# ------------------------------------------------------------------ the graphs themselves

def _targets(graph):
    return [n.target.entry.name for n in graph.nodes
            if n.op == "call_function" and hasattr(n.target, "entry")]


def test_writes_through_views_become_scatters_of_the_base():
    j = trace_joint(view_of_view_chain, _inputs(ember.float32, False))
    names = _targets(j.graph)
    assert not any(n.endswith("_") for n in names), names      # no in-place op left
    assert "slice_scatter" in names
    out = next(n for n in j.graph.nodes if n.op == "output").args[0][0]
    # the output is the rewritten base, not the product y = x * 1 the write went into
    assert out.target.entry.name != "mul"


def test_stale_view_is_regenerated_from_the_new_base():
    j = trace_joint(view_read_after_base_write, _inputs(ember.float64, False))
    out = next(n for n in j.graph.nodes if n.op == "output").args[0][0]
    v = out.args[0]                           # v * z[0]: v regenerated after y.mul_(2)
    assert v.target.entry.name == "select"
    assert v.args[0].target.entry.name == "mul" and v.args[0].args[1] == 2


# ------------------------------------------------------------------ writes into inputs

def test_write_into_a_graph_input_is_a_new_value_returned_last():
    """[aot-2]: a write into a graph input used to be a TraceError; the new value is now
    an extra forward output (tests/test_aot_input_mutation.py runs them)."""
    def f(x):
        x.mul_(2)
        return x + 1

    j = trace_joint(f, [ember.ones(3)])
    assert [(m.index, m.writes, m.differentiable) for m in j.mutations] == [(0, 1, False)]
    outs = next(n for n in j.graph.nodes if n.op == "output").args[0]
    assert j.num_forward_outputs == 2 and outs[1].target.entry.name == "mul"
    assert not any(n.endswith("_") for n in _targets(j.graph))


def test_write_into_a_view_of_a_graph_input_rewrites_the_input():
    def f(x):
        x[0].add_(1)
        return x * 1

    j = trace_joint(f, [ember.ones(3, 2)])
    assert [(m.index, m.writes) for m in j.mutations] == [(0, 1)]
    assert "select_scatter" in _targets(j.graph)

    def g(x):
        x.t()[1] = 0.0
        return x

    j = trace_joint(g, [ember.ones(3, 2)])
    assert [(m.index, m.writes) for m in j.mutations] == [(0, 1)]
    # the output is the input itself: made again from it at run time, no graph output
    assert [(a.position, a.index, a.steps) for a in j.output_aliases] == [(0, 0, ())]
    assert j.num_forward_outputs == 1
