"""Sampling an image at arbitrary points: grid_sampler (torch.grid_sampler, the op behind
nn.functional.grid_sample) and affine_grid_generator (behind nn.functional.affine_grid).

Both are composites over elementwise ops, gather and matmul, so autograd differentiates
them for the input and for the grid (or theta), and tracers see only those ops.

grid_sampler(input (N, C, *in), grid (N, *out, d), interpolation_mode, padding_mode,
align_corners), d = 2 (4-d input) or 3 (5-d): grid[..., 0] is the x (last, width)
coordinate, grid[..., 1] y, grid[..., 2] z, in [-1, 1]. Each coordinate becomes a pixel
position, (g + 1) / 2 (size - 1) with align_corners (the corner pixels' centres at +-1),
else ((g + 1) size - 1) / 2 (the corners' edges at +-1), then padding_mode: border clips
it to [0, size - 1]; reflection reflects it about the edges (about the centres of the
border pixels with align_corners, their outer edges otherwise) and clips; zeros leaves it
and reads 0 outside. Bilinear (trilinear for 5-d) takes the 2^d neighbours floor(c) and
floor(c) + 1 weighted by the distances; nearest rounds half to even (as PyTorch's
nearbyint). Each neighbour is one gather over the flattened spatial dims (an out-of-range
neighbour gathers index 0 and is masked), so the input's gradient is gather's scatter-add
and the grid's flows through the weights (zero for nearest, as in PyTorch).

affine_grid_generator(theta (N, 2, 3) or (N, 3, 4), size, align_corners): the base grid
of normalised pixel coordinates (x, y[, z], 1) times theta^T, one batched matmul; the
base coordinates are linspace(-1, 1, n), scaled by (n - 1) / n without align_corners, 0
for a size of 1. Bicubic sampling (mode 2) is not implemented (NotImplementedError).
"""
from __future__ import annotations

import math

from .. import _C
from . import api as O
from .linalg import torch_type
from .registry import CUSTOM, op

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _grid_check(input, grid, interpolation_mode, padding_mode):
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
    if interpolation_mode == _BICUBIC:
        if d == 3:
            raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
        raise NotImplementedError("grid_sampler(): bicubic interpolation is not implemented "
                                  "in ember")


def _reflect(c, twice_low, twice_high):
    """c reflected into [twice_low / 2, twice_high / 2] about its ends."""
    if twice_low == twice_high:
        return c * 0
    lo = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = (c - lo).abs()
    extra = O.fmod(c, span)
    flips = (c / span).floor()
    even = O.fmod(flips, 2.0) == 0
    return O.where(even, extra + lo, span - extra + lo)


def _source(g, size, padding_mode, align_corners):
    """grid coordinates g (in [-1, 1]) as pixel positions along a dim of `size` pixels"""
    c = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
    if padding_mode == _BORDER:
        c = O.clamp(c, 0, size - 1)
    elif padding_mode == _REFLECTION:
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = O.clamp(c, 0, size - 1)
    return c


def _grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    _grid_check(input, grid, interpolation_mode, padding_mode)
    N, C = input.shape[:2]
    insp = list(input.shape[2:])                   # (D,) H, W
    outsp = list(grid.shape[1:-1])
    d = len(insp)
    Q = math.prod(outsp)
    flat = input.reshape(N, C, math.prod(insp))
    g = grid.reshape(N, Q, d)
    # coords[k]: positions along input dim (d - 1 - k): grid's component k is x, y, z
    coords = [_source(g[:, :, k], insp[d - 1 - k], padding_mode, align_corners)
              for k in range(d)]
    strides = [math.prod(insp[d - k:]) for k in range(d)]    # x: 1, y: W, z: H*W
    if interpolation_mode == _NEAREST:
        # weight c * 0 + 1: 1, with the grid in the graph and a zero gradient (PyTorch's)
        corners = [[(O.round(c.detach()), c * 0 + 1)] for c in coords]
    else:
        corners = []
        for c in coords:
            lo = c.floor()
            w1 = c - lo
            corners.append([(lo, 1 - w1), (lo + 1, w1)])
    out = None
    for pick in _product(corners):
        index = None
        valid = None
        weight = None
        for k, (pos, w) in enumerate(pick):
            size = insp[d - 1 - k]
            ok = (pos >= 0) & (pos <= size - 1)
            valid = ok if valid is None else valid & ok
            at = O.where(ok, pos, 0).to(_C.int64) * strides[k]
            index = at if index is None else index + at
            weight = w if weight is None else weight * w
        vals = flat.gather(2, index.unsqueeze(1).expand(N, C, Q))
        scale = O.where(valid, weight, 0)
        term = vals * scale.unsqueeze(1)
        out = term if out is None else out + term
    return out.reshape([N, C] + outsp)


def _product(lists):
    if not lists:
        return [()]
    return [(a,) + rest for a in lists[0] for rest in _product(lists[1:])]


op("grid_sampler(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, "
   "bool align_corners) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_grid_sampler,
   doc="input sampled at grid's normalised points: interpolation 0 bilinear (trilinear "
       "for 5-d), 1 nearest; padding 0 zeros, 1 border, 2 reflection.")
op("grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, "
   "bool align_corners) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_grid_sampler, doc="grid_sampler of a 4-d input.")
op("grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, "
   "bool align_corners) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_grid_sampler, doc="grid_sampler of a 5-d input.")


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
