"""Recurrent layers: RNN, LSTM, GRU (multi-layer, batch_first, bidirectional, dropout
between layers), with PyTorch's parameter names (weight_ih_l0, weight_hh_l0_reverse, ...),
gate order (LSTM: i, f, g, o; GRU: r, z, n) and initialisation U(-1/sqrt(H), 1/sqrt(H)).

The input-to-hidden products of all time steps are one linear call per layer; the
recurrence runs step by step with ops, so autograd and capture follow it.
"""
import math
import warnings

from ... import empty, zeros
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


class RNNBase(Module):
    __constants__ = ["mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first",
                     "dropout", "bidirectional"]

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        if not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1 or \
                isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError("hidden_size must be a positive integer")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than or equal to 1")
        if proj_size:
            raise NotImplementedError("LSTM proj_size is not supported")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                          f"non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        gate = _GATES[mode] * hidden_size
        dirs = 2 if bidirectional else 1
        self._flat_weights_names = []
        kw = dict(dtype=dtype, device=device)
        for layer in range(num_layers):
            for d in range(dirs):
                layer_in = input_size if layer == 0 else hidden_size * dirs
                sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                params = [Parameter(empty((gate, layer_in), **kw)),
                          Parameter(empty((gate, hidden_size), **kw))]
                if bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                    params += [Parameter(empty(gate, **kw)), Parameter(empty(gate, **kw))]
                for n, p in zip(names, params):
                    setattr(self, n, p)
                self._flat_weights_names.extend(names)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in self._flat_weights_names[i:i + (4 if self.bias
                                                                             else 2)]]
                for i in range(0, len(self._flat_weights_names), 4 if self.bias else 2)]

    def _layer_params(self, layer, d):
        sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
        w_ih, w_hh = getattr(self, f"weight_ih{sfx}"), getattr(self, f"weight_hh{sfx}")
        b_ih = getattr(self, f"bias_ih{sfx}") if self.bias else None
        b_hh = getattr(self, f"bias_hh{sfx}") if self.bias else None
        return w_ih, w_hh, b_ih, b_hh

    def _cell(self, pre, h, c, w_hh, b_hh):
        """One step: pre = x_t W_ih^T + b_ih (precomputed); returns (h, c)."""
        H = self.hidden_size
        gh = F.linear(h, w_hh, b_hh)
        if self.mode == "LSTM":
            gates = pre + gh
            i = gates.slice(-1, 0, H).sigmoid()
            f = gates.slice(-1, H, 2 * H).sigmoid()
            g = gates.slice(-1, 2 * H, 3 * H).tanh()
            o = gates.slice(-1, 3 * H, 4 * H).sigmoid()
            c = f * c + i * g
            return o * c.tanh(), c
        if self.mode == "GRU":
            r = (pre.slice(-1, 0, H) + gh.slice(-1, 0, H)).sigmoid()
            z = (pre.slice(-1, H, 2 * H) + gh.slice(-1, H, 2 * H)).sigmoid()
            n = (pre.slice(-1, 2 * H, 3 * H) + r * gh.slice(-1, 2 * H, 3 * H)).tanh()
            return (1 - z) * n + z * h, None
        act = pre + gh
        return (act.tanh() if self.mode == "RNN_TANH" else act.relu()), None

    def forward(self, input, hx=None):
        is_lstm = self.mode == "LSTM"
        batched = input.ndim == 3
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got "
                             f"{input.ndim}D instead")
        x = input if batched else input.unsqueeze(1)
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {x.shape[-1]}")
        L, N = x.shape[0], x.shape[1]
        dirs = 2 if self.bidirectional else 1
        H = self.hidden_size
        if hx is None:
            h0 = zeros((self.num_layers * dirs, N, H), dtype=x.dtype)
            c0 = zeros((self.num_layers * dirs, N, H), dtype=x.dtype) if is_lstm else None
        else:
            h0, c0 = (hx if is_lstm else (hx, None))
            if not batched:
                h0 = h0.unsqueeze(1)
                c0 = c0.unsqueeze(1) if c0 is not None else None
            expected = (self.num_layers * dirs, N, H)
            for name, t in (("hidden", h0), ("cell", c0)):
                if t is not None and tuple(t.shape) != expected:
                    raise RuntimeError(f"Expected {name} size {expected}, got "
                                       f"{list(t.shape)}")
        h_n, c_n = [], []
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                w_ih, w_hh, b_ih, b_hh = self._layer_params(layer, d)
                pre = F.linear(layer_in, w_ih, b_ih)
                k = layer * dirs + d
                h = h0.select(0, k)
                c = c0.select(0, k) if c0 is not None else None
                steps = [None] * L
                order = range(L - 1, -1, -1) if d == 1 else range(L)
                for t in order:
                    h, c = self._cell(pre.select(0, t), h, c, w_hh, b_hh)
                    steps[t] = h
                outs.append(F._stack(steps, 0) if L else zeros((0, N, H), dtype=x.dtype))
                h_n.append(h)
                if is_lstm:
                    c_n.append(c)
            layer_out = outs[0] if dirs == 1 else F._cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_out = F.dropout(layer_out, self.dropout, True)
            layer_in = layer_out
        out = layer_in
        h_n = F._stack(h_n, 0)
        c_n = F._stack(c_n, 0) if is_lstm else None
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        if not batched:
            out = out.squeeze(1)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if c_n is not None else None
        return (out, (h_n, c_n)) if is_lstm else (out, h_n)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


def _args(mode_default, args, kwargs):
    """RNN/LSTM/GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False)."""
    names = ["input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
             "bidirectional"]
    kw = dict(zip(names, args))
    kw.update(kwargs)
    return kw


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu)."""

    def __init__(self, *args, **kwargs):
        kw = _args("RNN_TANH", args, kwargs)
        nonlinearity = kw.pop("nonlinearity", "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             "'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", **kw)


class LSTM(RNNBase):
    """Long short-term memory; forward(input, (h_0, c_0)) -> (output, (h_n, c_n))."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", **_args("LSTM", args, kwargs))


class GRU(RNNBase):
    """Gated recurrent unit; forward(input, h_0) -> (output, h_n)."""

    def __init__(self, *args, **kwargs):
        super().__init__("GRU", **_args("GRU", args, kwargs))
