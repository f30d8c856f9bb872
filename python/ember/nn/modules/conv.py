"""Convolution layers: Conv1d/2d/3d, ConvTranspose1d/2d/3d (the convolution ops),
with PyTorch's constructor arguments, parameter names, shapes and initialisation."""
import math

from .. import functional as F
from .. import init
from ..parameter import _empty_parameter
from .module import Module


def _ntuple(v, n, name="argument"):
    if isinstance(v, (tuple, list)):
        if len(v) != n:
            raise ValueError(f"{name} must have {n} elements, got {len(v)}")
        return tuple(v)
    return (v,) * n


def _conv_args(kernel_size, stride, padding, dilation, n):
    """A convolution's kernel_size, stride, padding (or its string) and dilation as
    n-tuples."""
    return (_ntuple(kernel_size, n, "kernel_size"), _ntuple(stride, n, "stride"),
            padding if isinstance(padding, str) else _ntuple(padding, n, "padding"),
            _ntuple(dilation, n, "dilation"))


class _ConvNd(Module):
    __constants__ = ["stride", "padding", "dilation", "groups", "padding_mode",
                     "output_padding", "in_channels", "out_channels", "kernel_size"]

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 transposed, output_padding, groups, bias, padding_mode, device=None,
                 dtype=None, nd=2):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        valid_modes = {"zeros", "reflect", "replicate", "circular"}
        if padding_mode not in valid_modes:
            raise ValueError(f"padding_mode must be one of {valid_modes}, but got "
                             f"padding_mode='{padding_mode}'")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = transposed
        self.output_padding = output_padding
        self.groups = groups
        self.padding_mode = padding_mode
        if transposed and padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        # F.pad's (left, right) pairs from the last dim back, for the non-zero modes
        if isinstance(padding, str):
            pads = []
            if padding == "same":
                for d, k in zip(dilation, kernel_size):
                    total = d * (k - 1)
                    pads = [total // 2, total - total // 2] + pads
            else:
                pads = [0, 0] * len(kernel_size)
        else:
            pads = []
            for p in padding:
                pads = [p, p] + pads
        self._reversed_padding_repeated_twice = pads
        if transposed:
            shape = (in_channels, out_channels // groups) + tuple(kernel_size)
        else:
            shape = (out_channels, in_channels // groups) + tuple(kernel_size)
        self.weight = _empty_parameter(shape, dtype, device)
        self.register_parameter("bias", _empty_parameter(out_channels, dtype, device, bias))
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _conv_forward(self, input, conv):
        if self.padding_mode != "zeros":
            return conv(F.pad(input, self._reversed_padding_repeated_twice,
                              mode=self.padding_mode), self.weight, self.bias, self.stride, 0,
                        self.dilation, self.groups)
        return conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                    self.groups)

    def extra_repr(self):
        s = "{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}"
        n = len(self.kernel_size)
        if self.padding != (0,) * n:
            s += ", padding={padding}"
        if self.dilation != (1,) * n:
            s += ", dilation={dilation}"
        if self.output_padding != (0,) * n:
            s += ", output_padding={output_padding}"
        if self.groups != 1:
            s += ", groups={groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += ", padding_mode={padding_mode}"
        return s.format(**self.__dict__)


class _Conv(_ConvNd):
    """Conv1d/2d/3d's constructor, for an _nd-d convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        n = self._nd
        super().__init__(in_channels, out_channels, *_conv_args(kernel_size, stride, padding,
                                                                dilation, n),
                         False, (0,) * n, groups, bias, padding_mode, device, dtype)


class Conv1d(_Conv):
    """1-d convolution over (N, C_in, L) (or (C_in, L)) inputs."""

    _nd = 1

    def forward(self, input):
        return self._conv_forward(input, F.conv1d)


class Conv2d(_Conv):
    """2-d convolution over (N, C_in, H, W) (or (C_in, H, W)) inputs."""

    _nd = 2

    def forward(self, input):
        return self._conv_forward(input, F.conv2d)


class _ConvTransposeNd(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        n = self._nd
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, n),
                         _ntuple(stride, n), _ntuple(padding, n), _ntuple(dilation, n), True,
                         _ntuple(output_padding, n), groups, bias, padding_mode, device, dtype)

    def _transposed_forward(self, input, output_size, conv_transpose):
        op = self._output_padding(input, output_size, len(self.kernel_size))
        return conv_transpose(input, self.weight, self.bias, self.stride, self.padding, op,
                              self.groups, self.dilation)

    def _output_padding(self, input, output_size, nd):
        """The output_padding that makes the result output_size (PyTorch's rule)."""
        if output_size is None:
            return self.output_padding
        output_size = list(output_size)
        if len(output_size) == nd + 2 or len(output_size) == nd + 1:
            output_size = output_size[-nd:]
        if len(output_size) != nd:
            raise ValueError(f"ConvTranspose{nd}D: for {input.ndim}D input, output_size must "
                             f"have {nd} or {nd + 2} elements (got {len(output_size)})")
        spatial = input.shape[-nd:]
        result = []
        for d in range(nd):
            min_size = ((spatial[d] - 1) * self.stride[d] - 2 * self.padding[d] +
                        self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            max_size = min_size + self.stride[d] - 1
            if not min_size <= output_size[d] <= max_size:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes "
                                 f"range from {min_size} to {max_size} (for an input of "
                                 f"{list(spatial)})")
            result.append(output_size[d] - min_size)
        return tuple(result)


class ConvTranspose1d(_ConvTransposeNd):
    """1-d transposed convolution (the gradient of Conv1d with respect to its input)."""

    _nd = 1

    def forward(self, input, output_size=None):
        return self._transposed_forward(input, output_size, F.conv_transpose1d)


class ConvTranspose2d(_ConvTransposeNd):
    """2-d transposed convolution (the gradient of Conv2d with respect to its input)."""

    _nd = 2

    def forward(self, input, output_size=None):
        return self._transposed_forward(input, output_size, F.conv_transpose2d)


class Conv3d(_Conv):
    """3-d convolution over (N, C_in, D, H, W) (or (C_in, D, H, W)) inputs."""

    _nd = 3

    def forward(self, input):
        return self._conv_forward(input, F.conv3d)


class ConvTranspose3d(_ConvTransposeNd):
    """3-d transposed convolution (the gradient of Conv3d with respect to its input)."""

    _nd = 3

    def forward(self, input, output_size=None):
        return self._transposed_forward(input, output_size, F.conv_transpose3d)
