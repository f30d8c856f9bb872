"""Tensor repr, laid out as PyTorch lays it out (4 decimals, scientific notation when the
magnitudes call for it, summarised above 1000 elements, dtype shown when not implied)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _C


@dataclass
class PrintOptions:
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: bool | None = None


PRINT_OPTS = PrintOptions()


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """Same options as torch.set_printoptions."""
    if profile == "default":
        PRINT_OPTS.__init__()
    elif profile == "short":
        PRINT_OPTS.__init__(precision=2, threshold=1000, edgeitems=2, linewidth=80)
    elif profile == "full":
        PRINT_OPTS.__init__(precision=4, threshold=math.inf, edgeitems=3, linewidth=80)
    for name, value in (("precision", precision), ("threshold", threshold),
                        ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            setattr(PRINT_OPTS, name, value)
    PRINT_OPTS.sci_mode = sci_mode


class _Formatter:
    def __init__(self, values: np.ndarray, floating: bool):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        p = PRINT_OPTS.precision
        if not floating:
            for v in values.ravel().tolist():
                self.max_width = max(self.max_width, len(str(v)))
            return
        vals = values.ravel().astype(np.float64)
        finite = vals[np.isfinite(vals) & (vals != 0)]
        if finite.size == 0:
            return
        absval = np.abs(finite)
        lo, hi = absval.min(), absval.max()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if self.int_mode:
            if hi / lo > 1000.0 or hi > 1.0e8:
                self.sci_mode = True
                widths = [len(f"{v:.{p}e}") for v in finite.tolist()]
            else:
                widths = [len(f"{v:.0f}") + 1 for v in finite.tolist()]
        else:
            if hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4:
                self.sci_mode = True
                widths = [len(f"{v:.{p}e}") for v in finite.tolist()]
            else:
                widths = [len(f"{v:.{p}f}") for v in finite.tolist()]
        self.max_width = max(self.max_width, *widths)
        if PRINT_OPTS.sci_mode is not None:
            self.sci_mode = PRINT_OPTS.sci_mode

    def width(self):
        return self.max_width

    def format(self, value) -> str:
        p = PRINT_OPTS.precision
        if self.floating:
            if self.sci_mode:
                ret = f"{value:{self.max_width}.{p}e}"
            elif self.int_mode:
                ret = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    ret += "."
            else:
                ret = f"{value:.{p}f}"
        else:
            ret = str(value)
        return (self.max_width - len(ret)) * " " + ret


class _ComplexFormatter:
    """Real and imaginary parts each laid out by a formatter of their own, as PyTorch
    prints complex tensors: `1.0000+2.0000j`, `-0.5000-3.0000j`."""

    def __init__(self, values: np.ndarray):
        self.real = _Formatter(values.real, True)
        self.imag = _Formatter(values.imag, True)

    def width(self):
        return self.real.width() + self.imag.width() + 1

    def format(self, value) -> str:
        value = complex(value)
        real = self.real.format(value.real)
        imag = (self.imag.format(value.imag) + "j").lstrip()
        return real + imag if imag[0] in "+-" else real + "+" + imag


def _summarized(a: np.ndarray) -> np.ndarray:
    e = PRINT_OPTS.edgeitems
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * e:
        a = np.concatenate([a[:e], a[-e:]])
    if a.ndim == 1:
        return a
    return np.stack([_summarized(x) for x in a])


def _vector_str(a, indent, summarize, fmt):
    element_length = fmt.width() + 2
    per_line = max(1, int(math.floor((PRINT_OPTS.linewidth - indent) / element_length)))
    e = PRINT_OPTS.edgeitems
    if summarize and a.shape[0] > 2 * e:
        data = ([fmt.format(v) for v in a[:e].tolist()] + [" ..."] +
                [fmt.format(v) for v in a[-e:].tolist()])
    else:
        data = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _str_with_formatter(a, indent, summarize, fmt):
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector_str(a, indent, summarize, fmt)
    e = PRINT_OPTS.edgeitems
    if summarize and a.shape[0] > 2 * e:
        slices = ([_str_with_formatter(a[i], indent + 1, summarize, fmt) for i in range(e)] +
                  ["..."] +
                  [_str_with_formatter(a[i], indent + 1, summarize, fmt)
                   for i in range(a.shape[0] - e, a.shape[0])])
    else:
        slices = [_str_with_formatter(a[i], indent + 1, summarize, fmt)
                  for i in range(a.shape[0])]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _data_str(t, indent):
    a = t.detach().numpy()
    if a.dtype == np.float16:
        a = a.astype(np.float32)
    summarize = a.size > PRINT_OPTS.threshold
    if t.dtype.is_complex:
        fmt = _ComplexFormatter(_summarized(a) if summarize else a)
        return _str_with_formatter(a, indent, summarize, fmt)
    fmt = _Formatter(_summarized(a) if summarize else a, t.dtype.is_floating_point)
    return _str_with_formatter(a, indent, summarize, fmt)


def _add_suffixes(text, suffixes, indent):
    parts = [text]
    last_line_len = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > PRINT_OPTS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line_len += len(suffix) + 2
    parts.append(")")
    return "".join(parts)


def tensor_repr(t) -> str:
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    default_complex = _C.complex128 if _C.get_default_dtype() is _C.float64 else _C.complex64
    implied = t.dtype in (_C.get_default_dtype(), default_complex, _C.int64, _C.bool)
    if t.is_meta:
        text = "..."
        suffixes.append("device='meta'")
        suffixes.append("size=" + str(tuple(t.shape)))
        if t.dtype is not _C.get_default_dtype():
            suffixes.append(f"dtype={t.dtype}")
    elif t.numel() == 0:
        if t.ndim != 1:
            suffixes.append("size=" + str(tuple(t.shape)))
        if t.dtype is not _C.get_default_dtype():
            suffixes.append(f"dtype={t.dtype}")
        text = "[]"
    else:
        if not implied:
            suffixes.append(f"dtype={t.dtype}")
        text = _data_str(t, indent)
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + text, suffixes, indent)
