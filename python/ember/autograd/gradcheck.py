"""gradcheck: analytical gradients against central finite differences (use float64)."""
from __future__ import annotations

import numpy as np

from .. import _C


def _flat_outputs(out):
    if isinstance(out, _C.Tensor):
        return [out]
    return [o for o in out if isinstance(o, _C.Tensor)]


def numerical_jacobian(fn, inputs, eps=1e-6):
    """J[k][i]: d(output k, flattened) / d(input i, flattened), by central differences."""
    from .. import no_grad
    jac = []
    with no_grad():
        base = _flat_outputs(fn(*inputs))
        for k, o in enumerate(base):
            rows = []
            for t in inputs:
                if not (isinstance(t, _C.Tensor) and t.requires_grad):
                    rows.append(None)
                    continue
                # the tensor's own (possibly strided) memory, perturbed in place
                data = t.detach().numpy()
                if any(s == 0 and n > 1 for s, n in zip(data.strides, data.shape)):
                    raise ValueError("gradcheck needs inputs whose elements don't overlap "
                                     "(no expanded dimensions)")
                j = np.zeros((o.numel(), t.numel()))
                for i, idx in enumerate(np.ndindex(*data.shape)):
                    orig = data[idx]
                    data[idx] = orig + eps
                    plus = _flat_outputs(fn(*inputs))[k].detach().numpy().astype(np.float64)
                    data[idx] = orig - eps
                    minus = _flat_outputs(fn(*inputs))[k].detach().numpy().astype(np.float64)
                    data[idx] = orig
                    j[:, i] = ((plus - minus) / (2 * eps)).reshape(-1)
                rows.append(j)
            jac.append(rows)
    return jac


def analytical_jacobian(fn, inputs):
    from .. import autograd, zeros
    outs = _flat_outputs(fn(*inputs))
    diff = [t for t in inputs if isinstance(t, _C.Tensor) and t.requires_grad]
    jac = []
    for o in outs:
        rows = [np.zeros((o.numel(), t.numel())) if isinstance(t, _C.Tensor) and
                t.requires_grad else None for t in inputs]
        if not o.requires_grad:
            jac.append(rows)
            continue
        for r in range(o.numel()):
            seed = zeros(o.shape, dtype=o.dtype)
            seed.numpy()[np.unravel_index(r, tuple(o.shape))] = 1.0
            grads = autograd.grad(o, diff, seed, retain_graph=True, allow_unused=True)
            gi = iter(grads)
            for idx, t in enumerate(inputs):
                if rows[idx] is None:
                    continue
                g = next(gi)
                if g is not None:
                    rows[idx][r, :] = g.detach().numpy().astype(np.float64).reshape(-1)
        jac.append(rows)
    return jac


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True):
    """True when fn's autograd gradients match finite differences at inputs."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    num = numerical_jacobian(fn, inputs, eps)
    ana = analytical_jacobian(fn, inputs)
    for k, (nrows, arows) in enumerate(zip(num, ana)):
        for i, (n, a) in enumerate(zip(nrows, arows)):
            if n is None:
                continue
            if not np.allclose(a, n, atol=atol, rtol=rtol):
                if raise_exception:
                    raise RuntimeError(
                        f"Jacobian mismatch for output {k} with respect to input {i},\n"
                        f"numerical:{n}\nanalytical:{a}\n")
                return False
    return True
