"""ember.nn.functional: the stateless forms of the layers, as torch.nn.functional.

Each function checks and normalises its arguments as PyTorch's does (ints or tuples,
'same' padding, reduction strings, deprecated size_average/reduce flags) and calls an op
of the table (ember.linear, ember.convolution, ember.layer_norm, ember.cross_entropy_loss,
...), so autograd, capture and the compiler see those ops. A few are composites written
here with ops (glu, normalize, the multi-head attention forward).
"""
import math
import warnings

import numpy as np

from .. import _C
from .. import ops as _ops

Tensor = _C.Tensor


def _O():
    return _ops.api


# ------------------------------------------------------------------ linear layers


def linear(input, weight, bias=None):
    """input @ weight^T + bias (the linear op)."""
    return _O().linear(input, weight, bias)


def bilinear(input1, input2, weight, bias=None):
    """y = x1^T W x2 + b over the last dims."""
    return _O().bilinear(input1, input2, weight, bias)


# ------------------------------------------------------------------ activations


def relu(input, inplace=False):
    return input.relu_() if inplace else input.relu()


def relu_(input):
    return input.relu_()


def _inplace(input, out, inplace):
    return input.copy_(out) if inplace else out


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _inplace(input, _O().leaky_relu(input, negative_slope), inplace)


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


def gelu(input, approximate="none"):
    """x * Phi(x) (approximate='tanh': PyTorch's tanh formula)."""
    return _O().gelu(input, approximate=approximate)


def silu(input, inplace=False):
    """x * sigmoid(x)."""
    return _inplace(input, _O().silu(input), inplace)


def mish(input, inplace=False):
    return _inplace(input, _O().mish(input), inplace)


def softplus(input, beta=1.0, threshold=20.0):
    return _O().softplus(input, beta, threshold)


def elu(input, alpha=1.0, inplace=False):
    return _inplace(input, _O().elu(input, alpha), inplace)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _inplace(input, _O().hardtanh(input, min_val, max_val), inplace)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def selu(input, inplace=False):
    return _inplace(input, _O().selu(input), inplace)


def selu_(input):
    return selu(input, True)


def celu(input, alpha=1.0, inplace=False):
    return _inplace(input, _O().celu(input, alpha), inplace)


def celu_(input, alpha=1.0):
    return celu(input, alpha, True)


def hardsigmoid(input, inplace=False):
    return _inplace(input, _O().hardsigmoid(input), inplace)


def hardswish(input, inplace=False):
    return _inplace(input, _O().hardswish(input), inplace)


def softsign(input):
    return _O().softsign(input)


def tanhshrink(input):
    return _O().tanhshrink(input)


def softshrink(input, lambd=0.5):
    return _O().softshrink(input, lambd)


def hardshrink(input, lambd=0.5):
    return _O().hardshrink(input, lambd)


def threshold(input, threshold, value, inplace=False):
    return _inplace(input, _O().threshold(input, threshold, value), inplace)


def threshold_(input, threshold, value):
    return _inplace(input, _O().threshold(input, threshold, value), True)


def prelu(input, weight):
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"prelu: Type promoting not supported. Got "
                           f"{input.dtype._torch_name} and {weight.dtype._torch_name}")
    return _O().prelu(input, weight)


def _norm_clamped(x, dim, eps):
    """||x|| over dim with the value clamped to eps but the gradient of the norm itself
    (PyTorch clamps it in place without recording)."""
    from .. import linalg
    n = linalg.vector_norm(x, 2, dim=dim)
    d = n.detach()
    return n + (d.clamp_min(eps) - d)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) over dim (broadcast first)."""
    shape = _ops.meta.broadcast_shapes("cosine_similarity", tuple(x1.shape),
                                       tuple(x2.shape))
    a, b = x1.expand(shape), x2.expand(shape)
    if not a.dtype.is_floating_point:
        a, b = a.to(_C.get_default_dtype()), b.to(_C.get_default_dtype())
    d = dim % max(len(shape), 1)
    na = _norm_clamped(a, d, eps).unsqueeze(d)
    nb = _norm_clamped(b, d, eps).unsqueeze(d)
    return ((a / na) * (b / nb)).sum(d)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dim."""
    from .. import linalg
    diff = x1 - x2 + eps
    dim = -1 if max(x1.ndim, x2.ndim) > 0 else None
    return linalg.vector_norm(diff, p, dim=dim, keepdim=keepdim)


def logsigmoid(input):
    """log(sigmoid(x)) = -softplus(-x), computed stably."""
    return -softplus(-input)


def _softmax_dim(name, ndim, stacklevel):
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def _softmax(input, dim, dtype, log):
    if dtype is not None:
        input = input.to(dtype)
    return _O().log_softmax(input, dim) if log else _O().softmax(input, dim)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """exp(x) / sum(exp(x)) along dim."""
    if dim is None:
        dim = _softmax_dim("softmax", input.ndim, _stacklevel)
    return _softmax(input, dim, dtype, False)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """x - log(sum(exp(x))) along dim."""
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim, _stacklevel)
    return _softmax(input, dim, dtype, True)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _softmax_dim("softmin", input.ndim, _stacklevel)
    return _softmax(-input, dim, dtype, False)


def glu(input, dim=-1):
    """a * sigmoid(b) for the two halves of input along dim."""
    n = input.shape[dim]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input.ndim} "
                           f"is size {n}")
    a = input.slice(dim, 0, n // 2)
    b = input.slice(dim, n // 2, n)
    return a * b.sigmoid()


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input / max(||input||_p along dim, eps)."""
    if p == 2.0:
        norm = (input * input).sum(dim, keepdim=True) ** 0.5
    else:
        norm = (input.abs() ** p).sum(dim, keepdim=True) ** (1.0 / p)
    return input / _O().maximum(norm, _O().full_like(norm, eps))


# ------------------------------------------------------------------ dropout


def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(input, p=0.5, training=True, inplace=False, generator=None):
    """Zeroes elements with probability p and scales the rest by 1/(1-p) when training
    (drawing from generator, or the default generator)."""
    _check_p(p)
    out = _O().dropout(input, p, training, generator=generator)
    return input.copy_(out) if inplace and out is not input else out


def _feature_dropout(name, batched_ndim, input, p, training, inplace, generator):
    _check_p(p)
    if not training or p == 0:
        return input
    if input.ndim not in (batched_ndim - 1, batched_ndim):
        raise RuntimeError(f"{name}: Expected {batched_ndim - 1}D or {batched_ndim}D input, "
                           f"but received a {input.ndim}D input")
    nlead = 2 if input.ndim == batched_ndim else 1
    shape = tuple(input.shape[:nlead]) + (1,) * (input.ndim - nlead)
    if p == 1:
        out = input * 0
    else:
        keep = _O().rand(shape, generator=generator, dtype=input.dtype) >= p
        out = input * keep * (1.0 / (1.0 - p))
    return input.copy_(out) if inplace else out


def dropout1d(input, p=0.5, training=True, inplace=False, generator=None):
    """Zeroes whole channels of (N, C, L) inputs."""
    return _feature_dropout("dropout1d", 3, input, p, training, inplace, generator)


def dropout2d(input, p=0.5, training=True, inplace=False, generator=None):
    """Zeroes whole channels of (N, C, H, W) inputs."""
    return _feature_dropout("dropout2d", 4, input, p, training, inplace, generator)


def dropout3d(input, p=0.5, training=True, inplace=False, generator=None):
    """Zeroes whole channels of (N, C, D, H, W) inputs."""
    return _feature_dropout("dropout3d", 5, input, p, training, inplace, generator)


# ------------------------------------------------------------------ convolution


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _O().conv1d(input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _O().conv2d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    return _O().conv_transpose1d(input, weight, bias, stride, padding, output_padding, groups,
                                 dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    return _O().conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups,
                                 dilation)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _O().conv3d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    return _O().conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups,
                                 dilation)


# ------------------------------------------------------------------ pooling


def _tuple(v, n):
    if v is None:
        return ()
    if isinstance(v, (tuple, list)):
        return tuple(v)
    return (v,) * n


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    out, idx = _O().max_pool2d_with_indices(input, _tuple(kernel_size, 2),
                                            _tuple(stride, 2), _tuple(padding, 2),
                                            _tuple(dilation, 2), ceil_mode)
    return (out, idx) if return_indices else out


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _unsqueeze_1d(name, input):
    if input.ndim not in (2, 3):
        raise RuntimeError(f"{name}: Expected 2D or 3D (batch mode) tensor for input, but got "
                           f"{list(input.shape)}")
    return input.unsqueeze(-2)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    x = _unsqueeze_1d("max_pool1d", input)
    k, s = _tuple(kernel_size, 1), _tuple(stride, 1)
    out, idx = _O().max_pool2d_with_indices(x, (1,) + k, ((1,) + s) if s else (1,) + k,
                                            (0,) + _tuple(padding, 1),
                                            (1,) + _tuple(dilation, 1), ceil_mode)
    out, idx = out.squeeze(-2), idx.squeeze(-2)
    return (out, idx) if return_indices else out


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Maximum over (kd, kh, kw) windows of (N, C, D, H, W) or (C, D, H, W) inputs; with
    return_indices, also the flat index of each maximum in its input volume."""
    out, idx = _O().max_pool3d_with_indices(input, _tuple(kernel_size, 3),
                                            _tuple(stride, 3), _tuple(padding, 3),
                                            _tuple(dilation, 3), ceil_mode)
    return (out, idx) if return_indices else out


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _O().avg_pool3d(input, _tuple(kernel_size, 3), _tuple(stride, 3),
                           _tuple(padding, 3), ceil_mode, count_include_pad, divisor_override)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _O().avg_pool2d(input, _tuple(kernel_size, 2), _tuple(stride, 2),
                           _tuple(padding, 2), ceil_mode, count_include_pad, divisor_override)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    x = _unsqueeze_1d("avg_pool1d", input)
    k, s = _tuple(kernel_size, 1), _tuple(stride, 1)
    return _O().avg_pool2d(x, (1,) + k, ((1,) + s) if s else (1,) + k,
                           (0,) + _tuple(padding, 1), ceil_mode,
                           count_include_pad, None).squeeze(-2)


def _adaptive_size(output_size, spatial):
    sizes = _tuple(output_size, len(spatial))
    return tuple(spatial[i] if s is None else s for i, s in enumerate(sizes))


def adaptive_avg_pool2d(input, output_size):
    return _O().adaptive_avg_pool2d(input, _adaptive_size(output_size, input.shape[-2:]))


def adaptive_avg_pool3d(input, output_size):
    return _O().adaptive_avg_pool3d(input, _adaptive_size(output_size, input.shape[-3:]))


def adaptive_max_pool1d(input, output_size, return_indices=False):
    if input.ndim not in (2, 3):
        raise RuntimeError(f"adaptive_max_pool1d(): Expected 2D or 3D tensor, but got: "
                           f"{list(input.shape)}")
    n = _adaptive_size(output_size, input.shape[-1:])
    out, idx = _O().adaptive_max_pool2d(input.unsqueeze(-2), (1,) + n)
    out, idx = out.squeeze(-2), idx.squeeze(-2)
    return (out, idx) if return_indices else out


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Maximum over the cells of an output_size grid (None keeps that input dimension);
    with return_indices, the flat index of each maximum in its input plane."""
    out, idx = _O().adaptive_max_pool2d(input, _adaptive_size(output_size, input.shape[-2:]))
    return (out, idx) if return_indices else out


def adaptive_max_pool3d(input, output_size, return_indices=False):
    out, idx = _O().adaptive_max_pool3d(input, _adaptive_size(output_size, input.shape[-3:]))
    return (out, idx) if return_indices else out


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=True):
    return adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=True):
    return adaptive_max_pool2d(input, output_size, True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=True):
    return adaptive_max_pool3d(input, output_size, True)


def adaptive_avg_pool1d(input, output_size):
    x = _unsqueeze_1d("adaptive_avg_pool1d", input)
    n = _adaptive_size(output_size, input.shape[-1:])
    return _O().adaptive_avg_pool2d(x, (1,) + n).squeeze(-2)


# ------------------------------------------------------------------ resampling


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool) or \
        (isinstance(x, Tensor) and x.ndim == 0 and not x.dtype.is_floating_point)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resizes (N, C, L), (N, C, H, W) or (N, C, D, H, W) inputs: modes 'nearest',
    'nearest-exact', 'area' (adaptive average pooling), 'linear' (3-d), 'bilinear' and
    'bicubic' (4-d), 'trilinear' (5-d), with PyTorch's size/scale_factor/
    recompute_scale_factor/align_corners rules and its resize ops."""
    O = _O()
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scale_factors = None
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(f"Input and output must have the same number of spatial "
                                 f"dimensions, but got input with spatial dimensions of "
                                 f"{list(input.shape[2:])} and output size of {size}. Please "
                                 f"provide input tensor in (N, C, d1, d2, ...,dK) format and "
                                 f"output size in (o1, o2, ...,oK) format.")
            if not all(_is_int(x) for x in size):
                raise TypeError(f"expected size to be one of int or Tuple[int] or Tuple[int, "
                                f"int] or Tuple[int, int, int], but got size with types "
                                f"{[type(x) for x in size]}")
            output_size = [int(x) for x in size]
        else:
            output_size = [int(size)] * dim
    elif scale_factor is not None:
        output_size = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(f"Input and scale_factor must have the same number of spatial "
                                 f"dimensions, but got input with spatial dimensions of "
                                 f"{list(input.shape[2:])} and scale_factor of shape "
                                 f"{scale_factor}. Please provide input tensor in (N, C, d1, "
                                 f"d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) "
                                 f"format.")
            scale_factors = [float(f) for f in scale_factor]
        else:
            scale_factors = [float(scale_factor)] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and output_size is None:
        recompute_scale_factor = True
    if recompute_scale_factor:
        output_size = [int(input.shape[i + 2] * scale_factors[i]) for i in range(dim)]
        scale_factors = None
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and input.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos "
                         "modes and requires a 4-D tensor as input")
    if antialias:
        raise NotImplementedError("interpolate(): antialias=True is not supported by ember")
    if output_size is None:      # the resize ops take the scales: sizes floor(n * scale)
        output_size = [int(math.floor(float(input.shape[i + 2]) * scale_factors[i]))
                       for i in range(dim)]
    scales = list(scale_factors) if scale_factors is not None else [None] * dim
    if mode in ("nearest", "nearest-exact") and dim in (1, 2, 3):
        exact = mode == "nearest-exact"
        if dim == 3:
            fn = O._upsample_nearest_exact3d if exact else O.upsample_nearest3d
            return fn(input, output_size, *scales)
        fn = O._upsample_nearest_exact2d if exact else O.upsample_nearest2d
        if dim == 2:
            return fn(input, output_size, *scales)
        return fn(input.unsqueeze(2), [1] + output_size, None, scales[0]).squeeze(2)
    if mode == "area" and dim in (1, 2, 3):
        return (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d)[dim - 1](
            input, output_size)
    if mode == "linear" and dim == 1:
        return O.upsample_bilinear2d(input.unsqueeze(2), [1] + output_size, align_corners,
                                     None, scales[0]).squeeze(2)
    if mode == "bilinear" and dim == 2:
        return O.upsample_bilinear2d(input, output_size, align_corners, *scales)
    if mode == "trilinear" and dim == 3:
        return O.upsample_trilinear3d(input, output_size, align_corners, *scales)
    if mode == "bicubic" and dim == 2:
        return O.upsample_bicubic2d(input, output_size, align_corners, *scales)
    needs = {"linear": 3, "bilinear": 4, "trilinear": 5}
    if mode in needs and input.ndim in (3, 4, 5):
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{needs[mode]}D input")
    raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                              f"{input.ndim}D) for the modes: nearest | linear | bilinear | "
                              f"bicubic | trilinear | lanczos | area | nearest-exact (got "
                              f"{mode})")


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use "
                  "nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use "
                  "nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pixel_shuffle(input, upscale_factor):
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r)."""
    return _O().pixel_shuffle(input, upscale_factor)


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W)."""
    return _O().pixel_unshuffle(input, downscale_factor)


def channel_shuffle(input, groups):
    """Interleaves the channels of (N, C, *) from groups."""
    return _O().channel_shuffle(input, groups)


native_channel_shuffle = channel_shuffle


# ------------------------------------------------------------------ padding


def pad(input, pad, mode="constant", value=None):
    """torch.nn.functional.pad: pad holds (before, after) pairs from the last dim back;
    modes constant (value, default 0; negative pads crop), reflect, replicate and
    circular. The pad op of the table."""
    return _O().pad(input, pad, mode, value)


# ------------------------------------------------------------------ normalisation


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _O().layer_norm(input, _tuple(normalized_shape, 1), weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    return _O().group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalises per channel (dim 1) with batch statistics when training, updating
    running_mean/running_var in place, else with the running statistics. Compiled, the
    update is part of the graph (its new values are written back after each call)."""
    if training:
        size_prods = input.shape[0]
        for n in input.shape[2:]:
            size_prods *= n
        if size_prods == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {input.shape}")
    return _O().batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                           eps, False)


def _verify_spatial_size(size):
    n = 1
    for v in size[2:]:
        n *= v
    if n == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                         f"{size}")


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalises each (sample, channel) plane over its spatial dims; with running
    statistics and use_input_stats, updates them in place (the mean over the batch of
    each sample's momentum update), as PyTorch. Compiled, the update is part of the
    graph, as batch_norm's."""
    if use_input_stats:
        _verify_spatial_size(input.shape)
    return _O().instance_norm(input, weight, bias, running_mean, running_var, use_input_stats,
                              momentum, eps, False)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta, the mean an
    average pool over the zero-padded channel dim (PyTorch's formulation)."""
    dim = input.ndim
    if dim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality                          "
                         f"input (got {dim} dimensions)")
    if input.numel() == 0:
        return input
    div = input * input
    lo, hi = size // 2, (size - 1) // 2
    if dim == 3:
        div = pad(div.unsqueeze(1), (0, 0, lo, hi))
        div = avg_pool2d(div, (size, 1), stride=1).squeeze(1)
    else:
        shape = tuple(input.shape)
        div = div.reshape(shape[0], 1, shape[1], shape[2], -1)
        div = pad(div, (0, 0, 0, 0, lo, hi))
        div = avg_pool3d(div, (size, 1, 1), stride=1).squeeze(1).reshape(shape)
    div = (div * alpha + k) ** beta
    return input / div


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) over the trailing normalized_shape dims, times weight."""
    ns = _tuple(normalized_shape, 1)
    dims = list(range(input.ndim - len(ns), input.ndim))
    if eps is None:
        eps = _eps_of(input.dtype)
    y = input * ((input * input).mean(dims, keepdim=True) + eps) ** -0.5
    return y * weight if weight is not None else y


def _eps_of(dtype):
    return float(np.finfo(dtype.numpy_dtype).eps)


# ------------------------------------------------------------------ embedding


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if padding_idx is not None:
        n = weight.shape[0]
        if padding_idx > 0:
            if padding_idx >= n:
                raise AssertionError("Padding_idx must be within num_embeddings")
        elif padding_idx < 0:
            if padding_idx < -n:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx = n + padding_idx
    else:
        padding_idx = -1
    if max_norm is not None:
        _renorm_rows(weight, input, max_norm, norm_type)
    return _O().embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)


def _renorm_rows(weight, input, max_norm, norm_type):
    """PyTorch's embedding_renorm_: rows referenced by input whose norm exceeds max_norm
    are scaled down to it, in place."""
    from ..autograd import no_grad
    w = weight.detach().numpy().astype(np.float64)
    rows = np.unique(input.detach().numpy().reshape(-1))
    norms = np.sum(np.abs(w[rows]) ** norm_type, axis=1) ** (1.0 / norm_type)
    scale = np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    if np.all(scale == 1.0):
        return
    new = w.copy()
    new[rows] *= scale[:, None]
    with no_grad():
        weight.copy_(_C.from_numpy(new.astype(weight.detach().numpy().dtype)))


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """Sums, means or maxima of bags of weight's rows (ember.embedding_bag): a 2-d input is a
    batch of equal bags (offsets must be None), a 1-d input is cut at offsets."""
    if weight.dtype is _C.int64 and input.dtype.is_floating_point:
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage "
                      "`embedding_bag(weight, input, ...)` is deprecated, and should now be "
                      "`embedding_bag(input, weight, ...)`.", stacklevel=2)
        weight, input = input, weight
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is "
                         f"not None, then it must have the same shape as the input "
                         f"({input.shape})")
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                         f"{weight.ndim}")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"if input is 2D, then offsets has to be None, as input is treated "
                             f"is a mini-batch of fixed length sequences. However, found "
                             f"offsets of type {type(offsets)}")
        offsets = _O().arange(0, input.numel(), input.shape[1], dtype=input.dtype)
        include_last_offset = False
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.ndim}")
    modes = {"sum": 0, "mean": 1, "max": 2}
    if mode not in modes:
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max":
        if scale_grad_by_freq:
            raise ValueError("max mode does not support scaling the gradient by the frequency")
        if sparse:
            raise ValueError("max mode does not support sparse weights")
    if max_norm is not None:
        _renorm_rows(weight, input, max_norm, norm_type)
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' (got "
                                  f"mode='{mode}'). Please open a feature request on GitHub.")
    return _O().embedding_bag(weight, input, offsets, scale_grad_by_freq, modes[mode], sparse,
                              per_sample_weights, include_last_offset, padding_idx)[0]


_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to "
                  "align_corners=False since 1.3.0. Please specify align_corners=True if the "
                  "old behavior is desired. See the documentation of grid_sample for details.")


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """input sampled at grid's points (normalised to [-1, 1]; ember.grid_sampler)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
        align_corners = False
    return _O().grid_sampler(input, grid, ("bilinear", "nearest", "bicubic").index(mode),
                             ("zeros", "border", "reflection").index(padding_mode),
                             align_corners)


def affine_grid(theta, size, align_corners=None):
    """The sampling grid (for grid_sample) of a batch of affine maps theta."""
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
        align_corners = False
    if not theta.dtype.is_floating_point:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if len(size) == 4:
        if theta.ndim != 3 or theta.shape[-2] != 2 or theta.shape[-1] != 3:
            raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                             f"{size}. Got {theta.shape}.")
        spatial = size[-2:]
    elif len(size) == 5:
        if theta.ndim != 3 or theta.shape[-2] != 3 or theta.shape[-1] != 4:
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size "
                             f"{size}. Got {theta.shape}.")
        spatial = size[-3:]
    else:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {size}.")
    if align_corners and min(spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size "
                      "grids when align_corners=True. This is not an intended use case of "
                      "affine_grid. See the documentation of affine_grid for details.",
                      stacklevel=2)
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    return _O().affine_grid_generator(theta, list(size), align_corners)


def one_hot(tensor, num_classes=-1):
    return _O().one_hot(tensor, num_classes)


# ------------------------------------------------------------------ attention


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    return _O().scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
                                             is_causal, scale=scale, enable_gqa=enable_gqa)


def _canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
    """Bool masks (True = masked out) become float masks with -inf; float masks stay."""
    if mask is None:
        return None
    if mask.dtype is not _C.bool and not mask.dtype.is_floating_point:
        raise AssertionError(f"only bool and floating types of {mask_name} are supported")
    if check_other and other_type is not None and mask.dtype is not other_type:
        warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. Use "
                      "same type for both instead.", stacklevel=3)
    if mask.dtype is _C.bool:
        zeros = _O().zeros(tuple(mask.shape), dtype=target_type)
        return _O().where(mask, -math.inf, zeros)
    return mask


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """PyTorch's multi-head attention on (L, N, E) inputs (or unbatched (L, E)): input
    projections, optional bias_k/bias_v and zero attention, masks (attn_mask bool or float,
    key_padding_mask), scaled dot products per head, output projection. Returns
    (output, weights averaged over heads or per head, or None)."""
    O = _O()
    is_batched = query.ndim == 3
    if not is_batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if key.shape[:2] != value.shape[:2]:
        raise AssertionError(f"key's sequence and batch dims {tuple(key.shape[:2])} do not "
                             f"match value's {tuple(value.shape[:2])}")
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask",
                                       attn_mask.dtype if attn_mask is not None else None,
                                       "attn_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None          # sdpa applies the causal mask itself
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, False)
        if key_padding_mask is not None:
            is_causal = False
    # input projections
    if not use_separate_proj_weight:
        w_q, w_k, w_v = (in_proj_weight.slice(0, i * embed_dim, (i + 1) * embed_dim)
                         for i in range(3))
    else:
        w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
    if in_proj_bias is not None:
        b_q, b_k, b_v = (in_proj_bias.slice(0, i * embed_dim, (i + 1) * embed_dim)
                         for i in range(3))
    else:
        b_q = b_k = b_v = None
    q, k, v = linear(query, w_q, b_q), linear(key, w_k, b_k), linear(value, w_v, b_v)
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}"
                                   f", but should be {(tgt_len, src_len)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.ndim == 3:
            if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
                raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}"
                                   f", but should be {(bsz * num_heads, tgt_len, src_len)}.")
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise AssertionError("bias cannot be added to static key/value.")
        k = _O().cat([k, bias_k.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)], 0)
        v = _O().cat([v, bias_v.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)], 0)
        if attn_mask is not None:
            attn_mask = _pad_last(attn_mask, 1)
        if key_padding_mask is not None:
            key_padding_mask = _pad_last(key_padding_mask, 1)
    q = q.reshape(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = k.reshape(k.shape[0], bsz * num_heads, head_dim).transpose(0, 1) if static_k is None \
        else static_k
    v = v.reshape(v.shape[0], bsz * num_heads, head_dim).transpose(0, 1) if static_v is None \
        else static_v
    if add_zero_attn:
        zk = O.zeros((bsz * num_heads, 1, head_dim), dtype=k.dtype)
        k, v = _O().cat([k, zk], 1), _O().cat([v, zk], 1)
        if attn_mask is not None:
            attn_mask = _pad_last(attn_mask, 1)
        if key_padding_mask is not None:
            key_padding_mask = _pad_last(key_padding_mask, 1)
    src_len = k.shape[1]
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, src_len):
            raise AssertionError(f"expecting key_padding_mask shape of {(bsz, src_len)}, but "
                                 f"got {tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.reshape(bsz, 1, 1, src_len).expand(
            bsz, num_heads, 1, src_len).reshape(bsz * num_heads, 1, src_len)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    if not training:
        dropout_p = 0.0
    if need_weights:
        scaled_q = q * (1.0 / math.sqrt(head_dim))
        scores = scaled_q.matmul(k.transpose(-2, -1))
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = softmax(scores, dim=-1)
        if dropout_p > 0.0:
            weights = dropout(weights, p=dropout_p)
        out = weights.matmul(v)
        out = out.transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, embed_dim)
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(1)
        if not is_batched:
            out, weights = out.squeeze(1), weights.squeeze(0)
        return out, weights
    if attn_mask is not None:
        if attn_mask.shape[0] == 1 and attn_mask.ndim == 3:
            attn_mask = attn_mask.unsqueeze(0)
        else:
            attn_mask = attn_mask.reshape(bsz, num_heads, -1, src_len)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, embed_dim)
    if not is_batched:
        out = out.squeeze(1)
    return out, None


def _pad_last(t, n):
    """t with n zeros appended along its last dim."""
    z = _O().zeros(tuple(t.shape[:-1]) + (n,), dtype=t.dtype)
    return _O().cat([t, z], -1)


# ------------------------------------------------------------------ losses

_REDUCTION = {"none": 0, "mean": 1, "sum": 2}


def _legacy_reduction(size_average, reduce, emit_warning=True):
    """Maps the deprecated size_average/reduce flags to a reduction string."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        ret = "mean"
    elif reduce:
        ret = "sum"
    else:
        ret = "none"
    if emit_warning:
        warnings.warn(f"size_average and reduce args will be deprecated, please use "
                      f"reduction='{ret}' instead.", stacklevel=3)
    return ret


def _enum(reduction, size_average=None, reduce=None):
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    if reduction not in _REDUCTION:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return _REDUCTION[reduction]


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _check_tensors(name, input, target):
    if not isinstance(input, Tensor) or not isinstance(target, Tensor):
        raise TypeError(f"{name}(): input and target must be Tensors")


def _warn_size(input, target, stacklevel=4):
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input "
                      f"size ({input.shape}). This will likely lead to incorrect results due "
                      "to broadcasting. Please ensure they have the same size.",
                      stacklevel=stacklevel)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """The connectionist temporal classification loss (ember.ctc_loss): log_probs (T, N, C)
    or (T, C), targets padded (N, S) or concatenated, lengths as tensors or int lists."""
    if reduction not in _REDUCTION:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return _O().ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
                         _REDUCTION[reduction], zero_infinity)


def _pointwise_loss(name, mean_by_weight, input, target, size_average, reduce, reduction,
                    weight, *extra):
    """The loss op; with weight, the unreduced loss times weight, reduced ('mean' divides
    by the weights' sum for mse/l1, by the count for huber, as PyTorch)."""
    _check_tensors(name, input, target)
    _warn_size(input, target)
    r = _enum(reduction, size_average, reduce)
    if weight is None:
        return getattr(_O(), name)(input, target, r, *extra)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = getattr(_O(), name)(input, target, 0, *extra) * weight
    if r == 1 and mean_by_weight:
        return loss.sum() / weight.sum()
    return _reduce(loss, {0: "none", 1: "mean", 2: "sum"}[r])


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean (or sum, or none) of (input - target) ** 2, optionally weighted."""
    return _pointwise_loss("mse_loss", True, input, target, size_average, reduce, reduction,
                           weight)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean (or sum, or none) of |input - target|, optionally weighted."""
    return _pointwise_loss("l1_loss", True, input, target, size_average, reduce, reduction,
                           weight)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta."""
    return _pointwise_loss("smooth_l1_loss", False, input, target, size_average, reduce,
                           reduction, None, beta)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    return _pointwise_loss("huber_loss", False, input, target, None, None, reduction, weight,
                           delta)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-w (t log x + (1 - t) log(1 - x)); input holds probabilities."""
    r = _enum(reduction, size_average, reduce)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input "
                         f"size ({input.shape}) is deprecated. Please ensure they have the same "
                         "size.")
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        weight = weight.expand(tuple(input.shape))
    return _O().binary_cross_entropy(input, target, weight, r)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Sigmoid and binary cross entropy in one stable formula; pos_weight weighs the
    positive term."""
    r = _enum(reduction, size_average, reduce)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({target.shape}) must be the same as input size "
                         f"({input.shape})")
    return _O().binary_cross_entropy_with_logits(input, target, weight, pos_weight, r)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """target * (log target - input) (input holds log-probabilities); 'batchmean' divides
    the sum by the batch size."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns "
                      "with the KL div math definition.'mean' will be changed to behave the "
                      "same as 'batchmean' in the next major release.", stacklevel=2)
    if reduction == "batchmean":
        loss = _O().kl_div(input, target, 2, log_target=log_target)
        return loss / input.shape[0] if input.ndim else loss
    return _O().kl_div(input, target, _enum(reduction), log_target=log_target)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """-weight[t] * input[n, t] (input holds log-probabilities, class dim 1)."""
    return _O().nll_loss(input, target, weight, _enum(reduction, size_average, reduce),
                         ignore_index)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """log_softmax over dim 1 (or 0 unbatched) and the negative log-likelihood of class
    indices, or of class probabilities when target has input's shape."""
    return _O().cross_entropy_loss(input, target, weight,
                                   _enum(reduction, size_average, reduce), ignore_index,
                                   label_smoothing)


# ------------------------------------------------------------------ unfold / fold


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """The sliding blocks of (N, C, H, W) as columns, (N, C*kh*kw, L) (the im2col op)."""
    if input.ndim != 4 and input.ndim != 3:
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported "
                                  f"(got {input.ndim}D)")
    return _O().im2col(input, _tuple(kernel_size, 2), _tuple(dilation, 2), _tuple(padding, 2),
                       _tuple(stride, 2))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The adjoint of unfold: columns (N, C*kh*kw, L) summed back into (N, C, *output_size)
    (index_put with accumulate)."""
    from ..ops import nn_ops
    if input.ndim not in (2, 3):
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input "
                                  f"Tensors are supported (got {input.ndim}D)")
    k = _tuple(kernel_size, 2)
    size = _tuple(output_size, 2)
    C = input.shape[-2] // (k[0] * k[1])
    shape = ((input.shape[0], C) if input.ndim == 3 else (C,)) + tuple(size)
    return nn_ops._col2im(input, shape, k, _tuple(dilation, 2), _tuple(padding, 2),
                          _tuple(stride, 2))


# ------------------------------------------------------------------ more losses (composites)


def _resolve(size_average, reduce, reduction):
    if size_average is not None or reduce is not None:
        return _legacy_reduction(size_average, reduce)
    return reduction


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -target * (input1 - input2) + margin)."""
    if input1.ndim != input2.ndim or input1.ndim != target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same "
                           f"dimension but got sizes: input1: {list(input1.shape)}, input2: "
                           f"{list(input2.shape)}, target: {list(target.shape)} ")
    loss = (-target * (input1 - input2) + margin).clamp_min(0)
    return _reduce(loss, _resolve(size_average, reduce, reduction))


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """input where target is 1, max(0, margin - input) where it is -1."""
    zeros = input * 0
    margin_part = _O().where(target != 1, (margin - input).clamp_min(0), zeros)
    self_part = _O().where(target != -1, input, zeros)
    return _reduce(margin_part + self_part, _resolve(size_average, reduce, reduction))


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-target * input))."""
    loss = softplus(-target * input, 1.0, 1e30)     # no linear branch: log1p(exp(.))
    return _reduce(loss, _resolve(size_average, reduce, reduction))


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1
    (the squared magnitudes get 1e-12, as PyTorch's)."""
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"cosine_embedding_loss : All input tensors should have same "
                           f"dimension but got sizes: input1: {list(input1.shape)}, input2: "
                           f"{list(input2.shape)}, target: {list(target.shape)} ")
    d = input1.ndim - 1
    prod = (input1 * input2).sum(d)
    mag1 = (input1 * input1).sum(d) + 1e-12
    mag2 = (input2 * input2).sum(d) + 1e-12
    cos = prod / (mag1 * mag2).sqrt()
    zeros = cos * 0
    pos = _O().where(target == 1, 1 - cos, zeros)
    neg = _O().where(target == -1, (cos - margin).clamp_min(0), zeros)
    return _reduce(pos + neg, _resolve(size_average, reduce, reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the p-norm distance
    (swap: the smaller of d(a, n) and d(p, n))."""
    if not (anchor.ndim == positive.ndim == negative.ndim):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {anchor.ndim}D, "
                           f"positive {positive.ndim}D, and negative {negative.ndim}D inputs")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = _O().minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    loss = (margin + d_pos - d_neg).clamp_min(0)
    return _reduce(loss, _resolve(size_average, reduce, reduction))


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """exp(input) - target * input (log_input), or input - target * log(input + eps); full
    adds Stirling's term target log target - target + log(2 pi target) / 2 where target > 1."""
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        safe = _O().where(target > 1, target, target * 0 + 1)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + _O().where(target > 1, stirling, stirling * 0)
    return _reduce(loss, _resolve(size_average, reduce, reduction))


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """(log(max(var, eps)) + (input - target)^2 / max(var, eps)) / 2 (+ log(2 pi) / 2 with
    full); var clamped without recording the clamp, as PyTorch."""
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = _O().full((), float(var), dtype=input.dtype)
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1) \
                and var.ndim != 0:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    d = var.detach()
    var = var + (d.clamp_min(eps) - d)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """-(target log sigmoid(x) + (1 - target) log sigmoid(-x)), averaged over the classes."""
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(dim=input.ndim - 1) / input.shape[-1]
    return _reduce(loss, _resolve(size_average, reduce, reduction))
