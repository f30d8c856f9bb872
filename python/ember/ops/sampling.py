"""Sampling an image at arbitrary points: grid_sampler (torch.grid_sampler, the op behind
nn.functional.grid_sample) and affine_grid_generator (behind nn.functional.affine_grid).

grid_sampler(input (N, C, *in), grid (N, *out, d), interpolation_mode, padding_mode,
align_corners), d = 2 (4-d input) or 3 (5-d): grid[..., 0] is the x (last, width)
coordinate, grid[..., 1] y, grid[..., 2] z, in [-1, 1]. A composite that checks its
arguments and calls the prim of its rank, grid_sampler_2d or grid_sampler_3d, whose C
kernels (csrc/kernels/grid_sample.c, on the pool in fixed chunks) compute the samples
and, in grid_sampler_2d/3d_backward, the gradients for the input and the grid (PyTorch's
names and schemas, without the output mask: both gradients are computed). Each coordinate
becomes a pixel position, (g + 1) / 2 (size - 1) with align_corners (the corner pixels'
centres at +-1), else ((g + 1) size - 1) / 2 (the corners' edges at +-1), then
padding_mode: border clips it to [0, size - 1]; reflection reflects it about the edges
(about the centres of the border pixels with align_corners, their outer edges otherwise)
and clips; zeros leaves it and reads 0 outside. Bilinear (trilinear for 5-d) takes the
2^d neighbours floor(c) and floor(c) + 1 weighted by the distances; nearest rounds half
to even (as PyTorch's nearbyint) and gives the grid a zero gradient; bicubic (4-d only)
takes the 4 x 4 neighbours floor(c) - 1 .. floor(c) + 2 with Keys' cubic convolution
weights (A = -0.75), the position itself unpadded and each neighbour's index passed
through the padding mode, as PyTorch's.

affine_grid_generator(theta (N, 2, 3) or (N, 3, 4), size, align_corners): the base grid
of normalised pixel coordinates (x, y[, z], 1) times theta^T, one batched matmul; the
base coordinates are linspace(-1, 1, n), scaled by (n - 1) / n without align_corners, 0
for a size of 1 (a composite).
"""
from __future__ import annotations

import math

from .. import _C
from ..compiler.lowerings import extern
from . import api as O
from . import meta as M
from .linalg import torch_type
from .registry import CUSTOM, op

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _grid_check(input, grid, interpolation_mode, padding_mode):
    """grid_sample.c's checks, in its order and words."""
    if input.dtype is not grid.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have same dtype, but "
                           f"input has {torch_type(input.dtype)} and grid has "
                           f"{torch_type(grid.dtype)}")
    sizes = f"input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
    if input.ndim not in (4, 5) or grid.ndim != input.ndim:
        raise RuntimeError(f"grid_sampler(): expected 4D or 5D input and grid with same number "
                           f"of dimensions, but got {sizes}")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, "
                           f"but got {sizes}")
    d = input.ndim - 2
    if grid.shape[-1] != d:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {d} in last dimension, "
                           f"but got grid with sizes {list(grid.shape)}")
    for k in range(2, input.ndim):
        if input.shape[k] <= 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial "
                               f"dimensions, but input has sizes {list(input.shape)} with "
                               f"dimension {k} being empty")
    if not input.dtype.is_floating_point or input.is_complex():
        raise NotImplementedError(f"\"grid_sampler_{d}d_cpu\" not implemented for "
                                  f"'{torch_type(input.dtype)}'")
    if interpolation_mode not in (_BILINEAR, _NEAREST, _BICUBIC) or \
            padding_mode not in (_ZEROS, _BORDER, _REFLECTION):
        raise RuntimeError(f"grid_sampler(): unknown interpolation mode {interpolation_mode} "
                           f"or padding mode {padding_mode}")
    if interpolation_mode == _BICUBIC and d == 3:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")


def _grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    _grid_check(input, grid, interpolation_mode, padding_mode)
    prim = O.grid_sampler_2d if input.ndim == 4 else O.grid_sampler_3d
    return prim(input, grid, interpolation_mode, padding_mode, align_corners)


op("grid_sampler(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, "
   "bool align_corners) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_grid_sampler,
   doc="input sampled at grid's normalised points: interpolation 0 bilinear (trilinear "
       "for 5-d), 1 nearest, 2 bicubic (4-d); padding 0 zeros, 1 border, 2 reflection.")


def _sampler_meta(entry, args):
    input, grid, mode, padding_mode = args[:4]
    _grid_check(input, grid, mode, padding_mode)
    return M.meta_tensor(tuple(input.shape[:2]) + tuple(grid.shape[1:-1]), input.dtype)


def _sampler_backward_meta(entry, args):
    grad, input, grid, mode, padding_mode = args[:5]
    _grid_check(input, grid, mode, padding_mode)
    want = tuple(input.shape[:2]) + tuple(grid.shape[1:-1])
    if tuple(grad.shape) != want or grad.dtype is not input.dtype:
        raise RuntimeError(f"grid_sampler backward: expected grad_output of shape "
                           f"{list(want)} and input's dtype, got {list(grad.shape)}")
    return (M.meta_tensor(tuple(input.shape), input.dtype),
            M.meta_tensor(tuple(grid.shape), grid.dtype))


def _sampler_backward_of(d):
    def backward(grads, out, input, grid, interpolation_mode, padding_mode, align_corners):
        g = grads[0] if isinstance(grads, (tuple, list)) else grads
        if g is None:
            return None, None, None, None, None
        prim = O.grid_sampler_2d_backward if d == 2 else O.grid_sampler_3d_backward
        gx, gg = prim(g, input, grid, interpolation_mode, padding_mode, align_corners)
        return gx, gg, None, None, None
    return backward


for _d in (2, 3):
    op(f"grid_sampler_{_d}d(Tensor input, Tensor grid, int interpolation_mode, "
       f"int padding_mode, bool align_corners) -> Tensor", CUSTOM, "grid_sampler", prim=True,
       lower=extern, method=False, meta=_sampler_meta, backward=_sampler_backward_of(_d),
       doc=f"grid_sampler of a {_d + 2}-d input (csrc/kernels/grid_sample.c: in double, "
           f"points on the pool).")
    op(f"grid_sampler_{_d}d_backward(Tensor grad_output, Tensor input, Tensor grid, "
       f"int interpolation_mode, int padding_mode, bool align_corners) -> (Tensor, Tensor)",
       CUSTOM, "grid_sampler_backward", prim=True, lower=extern, method=False,
       meta=_sampler_backward_meta,
       doc=f"The gradients of grid_sampler_{_d}d for its input and its grid (PyTorch's "
           f"op without the output mask).")


def _base_coords(n, align_corners, dtype):
    if n <= 1:
        return O.zeros((max(n, 0),), dtype=dtype)
    r = O.linspace(-1.0, 1.0, n, dtype=dtype)
    return r if align_corners else r * ((n - 1) / n)


def _affine_grid(theta, size, align_corners):
    size = [int(s) for s in size]
    if not theta.dtype.is_floating_point:     # (torch's op computes integer grids)
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    d = len(size) - 2
    if d not in (2, 3) or theta.ndim != 3 or list(theta.shape[1:]) != [d, d + 1] or \
            theta.shape[0] != size[0]:
        raise RuntimeError(f"affine_grid_generator(): expected theta of shape "
                           f"[{size[0] if size else 'N'}, {d}, {d + 1}] for size {size}, "
                           f"got {list(theta.shape)}")
    N, sp = size[0], size[2:]                    # (D,) H, W
    axes = [_base_coords(n, align_corners, theta.dtype) for n in reversed(sp)]   # x, y, z
    shape = sp + [1]
    parts = []
    for k, a in enumerate(axes):              # x varies along the last dim, y the one before
        view = [1] * d + [1]
        view[d - 1 - k] = sp[d - 1 - k]
        parts.append(a.reshape(view).expand(shape))
    parts.append(O.ones(shape, dtype=theta.dtype))
    base = O.cat(parts, -1).reshape(1, math.prod(sp), d + 1)
    out = base.expand(N, math.prod(sp), d + 1).matmul(theta.transpose(1, 2))
    return out.reshape([N] + sp + [d])


op("affine_grid_generator(Tensor theta, SymInt[] size, bool align_corners) -> Tensor", CUSTOM,
   "python", composite=True, method=False, impl=_affine_grid,
   doc="The sampling grid of the affine maps theta ((N, 2, 3) or (N, 3, 4)) for an output of "
       "size [N, C, (D,) H, W], in grid_sampler's normalised coordinates.")
