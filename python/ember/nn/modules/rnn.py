"""Recurrent layers: RNN, LSTM (with projections, proj_size), GRU (multi-layer,
batch_first, bidirectional, dropout between layers, packed variable-length input), and
the single-step cells RNNCell, LSTMCell, GRUCell, with PyTorch's parameter names
(weight_ih_l0, weight_hh_l0_reverse, weight_hr_l0, ...), gate order (LSTM: i, f, g, o;
GRU: r, z, n) and initialisation U(-1/sqrt(H), 1/sqrt(H)).

The input-to-hidden products of all time steps are one linear call per layer; the
recurrence runs step by step with ops, so autograd and capture follow it. A packed input
(nn.utils.rnn.PackedSequence, sequences sorted by decreasing length) runs the step t
recurrence on its first batch_sizes[t] rows; the other rows keep their state.
"""
import math
import numbers
import warnings

from ... import cat, empty, stack, zeros
from .. import functional as F
from .. import init
from ..parameter import Parameter, _empty_parameter
from ..utils.rnn import PackedSequence
from .module import Module

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _cell_step(mode, pre, h, c, w_hh, b_hh, w_hr=None):
    """One step of a recurrence: pre = x_t W_ih^T + b_ih (precomputed); returns (h, c)."""
    gh = F.linear(h, w_hh, b_hh)
    if mode == "LSTM":
        H = c.shape[-1]
        gates = pre + gh
        i = gates.slice(-1, 0, H).sigmoid()
        f = gates.slice(-1, H, 2 * H).sigmoid()
        g = gates.slice(-1, 2 * H, 3 * H).tanh()
        o = gates.slice(-1, 3 * H, 4 * H).sigmoid()
        c = f * c + i * g
        h = o * c.tanh()
        return (F.linear(h, w_hr) if w_hr is not None else h), c
    if mode == "GRU":
        H = h.shape[-1]
        r = (pre.slice(-1, 0, H) + gh.slice(-1, 0, H)).sigmoid()
        z = (pre.slice(-1, H, 2 * H) + gh.slice(-1, H, 2 * H)).sigmoid()
        n = (pre.slice(-1, 2 * H, 3 * H) + r * gh.slice(-1, 2 * H, 3 * H)).tanh()
        return (1 - z) * n + z * h, None
    act = pre + gh
    return (act.tanh() if mode == "RNN_TANH" else act.relu()), None


class RNNBase(Module):
    __constants__ = ["mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first",
                     "dropout", "bidirectional", "proj_size"]

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        if not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or \
                isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                          f"non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: "
                            f"{type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: "
                            f"{type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: "
                            f"{type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
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
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names = []
        self._all_weights = []
        kw = dict(dtype=dtype, device=device)
        for layer in range(num_layers):
            for d in range(dirs):
                layer_in = input_size if layer == 0 else real_hidden * dirs
                sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                params = [Parameter(empty((gate, layer_in), **kw)),
                          Parameter(empty((gate, real_hidden), **kw))]
                if bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                    params += [Parameter(empty(gate, **kw)), Parameter(empty(gate, **kw))]
                if proj_size > 0:
                    names.append(f"weight_hr{sfx}")
                    params.append(Parameter(empty((proj_size, hidden_size), **kw)))
                for n, p in zip(names, params):
                    setattr(self, n, p)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self):
        """A no-op (cuDNN's weight layout), as on PyTorch's CPU."""

    def _layer_params(self, layer, d):
        sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
        w_ih, w_hh = getattr(self, f"weight_ih{sfx}"), getattr(self, f"weight_hh{sfx}")
        b_ih = getattr(self, f"bias_ih{sfx}") if self.bias else None
        b_hh = getattr(self, f"bias_hh{sfx}") if self.bias else None
        w_hr = getattr(self, f"weight_hr{sfx}") if self.proj_size > 0 else None
        return w_ih, w_hh, b_ih, b_hh, w_hr

    # ------------------------------------------------------------ checks

    def _real_hidden(self):
        return self.proj_size if self.proj_size > 0 else self.hidden_size

    def _check_input(self, input, packed):
        w = getattr(self, self._flat_weights_names[0])
        if input.dtype is not w.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({w.dtype}). Convert input: input.to({w.dtype}), or convert "
                             f"model: model.to({input.dtype})")
        expected = 2 if packed else 3
        if input.ndim != expected:
            raise RuntimeError(f"input must have {expected} dimensions, got {input.ndim}")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")

    def _check_hidden(self, t, size, msg):
        if tuple(t.shape) != size:
            raise RuntimeError(msg.format(size, list(t.shape)))

    # ------------------------------------------------------------ forward

    def forward(self, input, hx=None):
        is_lstm = self.mode == "LSTM"
        name = {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(self.mode, self.mode)
        dirs = 2 if self.bidirectional else 1
        L = self.num_layers * dirs
        packed = isinstance(input, PackedSequence)
        if packed:
            x, batch_sizes, sorted_idx, unsorted_idx = input
            sizes = [int(v) for v in batch_sizes.tolist()]
            N = sizes[0] if sizes else 0
            batched = True
        else:
            if input.ndim not in (2, 3):
                raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D "
                                 "instead")
            batched = input.ndim == 3
            x = input if batched else input.unsqueeze(0 if self.batch_first else 1)
            if self.batch_first:
                x = x.transpose(0, 1)
            sizes, sorted_idx, unsorted_idx = None, None, None
            N = x.shape[1]
        real_hidden = self._real_hidden()
        h_size, c_size = (L, N, real_hidden), (L, N, self.hidden_size)
        if hx is None:
            self._check_input(x, packed)
            h0 = zeros(h_size, dtype=x.dtype)
            c0 = zeros(c_size, dtype=x.dtype) if is_lstm else None
        else:
            h0, c0 = (hx if is_lstm else (hx, None))
            if not packed:
                want = 3 if batched else 2
                if is_lstm and (h0.ndim != want or c0.ndim != want):
                    kind = "batched 3-D" if batched else "unbatched 2-D"
                    raise RuntimeError(f"For {kind} input, hx and cx should also be {want}-D "
                                       f"but got ({h0.ndim}-D, {c0.ndim}-D) tensors")
                if not is_lstm and h0.ndim != want:
                    kind = "batched 3-D" if batched else "unbatched 2-D"
                    raise RuntimeError(f"For {kind} input, hx should also be {want}-D but got "
                                       f"{h0.ndim}-D tensor")
                if not batched:
                    h0 = h0.unsqueeze(1)
                    c0 = c0.unsqueeze(1) if c0 is not None else None
            self._check_input(x, packed)
            if is_lstm:
                self._check_hidden(h0, h_size, "Expected hidden[0] size {}, got {}")
                self._check_hidden(c0, c_size, "Expected hidden[1] size {}, got {}")
            else:
                self._check_hidden(h0, h_size, "Expected hidden size {}, got {}")
            if sorted_idx is not None:
                h0 = h0.index_select(1, sorted_idx)
                c0 = c0.index_select(1, sorted_idx) if c0 is not None else None
        h_n, c_n = [], []
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_params(layer, d)
                k = layer * dirs + d
                h = h0.select(0, k)
                c = c0.select(0, k) if c0 is not None else None
                pre = F.linear(layer_in, w_ih, b_ih)
                run = self._run_packed if packed else self._run_padded
                out, h, c = run(pre, h, c, w_hh, b_hh, w_hr, d == 1, sizes)
                outs.append(out)
                h_n.append(h)
                if is_lstm:
                    c_n.append(c)
            layer_out = outs[0] if dirs == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_out = F.dropout(layer_out, self.dropout, True)
            layer_in = layer_out
        out = layer_in
        h_n = stack(h_n, 0)
        c_n = stack(c_n, 0) if is_lstm else None
        if packed:
            if unsorted_idx is not None:
                h_n = h_n.index_select(1, unsorted_idx)
                c_n = c_n.index_select(1, unsorted_idx) if c_n is not None else None
            out = PackedSequence(out, batch_sizes, sorted_idx, unsorted_idx)
        else:
            if self.batch_first:
                out = out.transpose(0, 1)
            if not batched:
                out = out.squeeze(0 if self.batch_first else 1)
                h_n = h_n.squeeze(1)
                c_n = c_n.squeeze(1) if c_n is not None else None
        return (out, (h_n, c_n)) if is_lstm else (out, h_n)

    def _run_padded(self, pre, h, c, w_hh, b_hh, w_hr, reverse, sizes):
        T, N = pre.shape[0], pre.shape[1]
        steps = [None] * T
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            h, c = _cell_step(self.mode, pre.select(0, t), h, c, w_hh, b_hh, w_hr)
            steps[t] = h
        out = stack(steps, 0) if T else zeros((0, N, h.shape[-1]), dtype=pre.dtype)
        return out, h, c

    def _run_packed(self, pre, h, c, w_hh, b_hh, w_hr, reverse, sizes):
        """Step t runs on the first sizes[t] rows (the sequences still running); the rows
        after them keep their state (forwards: the final one; backwards: the initial one,
        as a sequence's reverse pass starts at its last step)."""
        offsets = [0]
        for bs in sizes:
            offsets.append(offsets[-1] + bs)
        steps = [None] * len(sizes)
        for t in (range(len(sizes) - 1, -1, -1) if reverse else range(len(sizes))):
            bs = sizes[t]
            x_t = pre.slice(0, offsets[t], offsets[t + 1])
            h_new, c_new = _cell_step(self.mode, x_t, h.slice(0, 0, bs),
                                      c.slice(0, 0, bs) if c is not None else None, w_hh,
                                      b_hh, w_hr)
            steps[t] = h_new
            if bs < h.shape[0]:
                h = cat([h_new, h.slice(0, bs, h.shape[0])], 0)
                c = cat([c_new, c.slice(0, bs, c.shape[0])], 0) if c is not None else None
            else:
                h, c = h_new, c_new
        out = cat(steps, 0) if steps else pre.slice(-1, 0, h.shape[-1])
        return out, h, c

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
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


_ARG_NAMES = ["input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
              "bidirectional"]


def _args(args, kwargs, extra=()):
    """RNN/LSTM/GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False[, proj_size for LSTM], device=None, dtype=None)."""
    names = _ARG_NAMES + list(extra)
    if len(args) > len(names):
        raise TypeError(f"expected at most {len(names)} positional arguments, got "
                        f"{len(args)}")
    kw = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in kw:
            raise TypeError(f"got multiple values for argument '{k}'")
        kw[k] = v
    return kw


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
            kwargs.pop("nonlinearity", None)
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' "
                             "or 'relu'.")
        mode = "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(mode, **_args(args, kwargs))


class LSTM(RNNBase):
    """Long short-term memory; forward(input, (h_0, c_0)) -> (output, (h_n, c_n)); with
    proj_size > 0 the hidden state is projected to proj_size (weight_hr)."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", **_args(args, kwargs, ["proj_size"]))


class GRU(RNNBase):
    """Gated recurrent unit; forward(input, h_0) -> (output, h_n)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", **_args(args, kwargs))


# ------------------------------------------------------------------ cells


class RNNCellBase(Module):
    __constants__ = ["input_size", "hidden_size", "bias"]

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = _empty_parameter((num_chunks * hidden_size, input_size), dtype, device)
        self.weight_hh = _empty_parameter((num_chunks * hidden_size, hidden_size), dtype, device)
        for name in ("bias_ih", "bias_hh"):
            self.register_parameter(name, _empty_parameter(num_chunks * hidden_size, dtype,
                                                           device, bias))
        self.reset_parameters()

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    reset_parameters = RNNBase.reset_parameters

    def _prepare(self, name, input, hx, what="hidden"):
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D "
                             "instead")
        states = hx if isinstance(hx, tuple) else (hx,)
        for i, t in enumerate(states):
            if t is not None and t.ndim not in (1, 2):
                which = f"hx[{i}]" if isinstance(hx, tuple) else what
                raise ValueError(f"{name}: Expected {which} to be 1D or 2D, got {t.ndim}D "
                                 "instead")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        if x.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[1]} expected "
                               f"{self.input_size}")
        return x, batched

    def _state(self, t, x, batched, k=0):
        if t is None:
            return zeros((x.shape[0], self.hidden_size), dtype=x.dtype)
        t = t if batched else t.unsqueeze(0)
        if t.shape[0] != x.shape[0]:
            raise RuntimeError(f"Input batch size {x.shape[0]} doesn't match hidden{k} batch "
                               f"size {t.shape[0]}")
        if t.shape[1] != self.hidden_size:
            raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got {t.shape[1]}, "
                               f"expected {self.hidden_size}")
        return t


class RNNCell(RNNCellBase):
    """One Elman RNN step: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu)."""

    __constants__ = ["input_size", "hidden_size", "bias", "nonlinearity"]

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, batched = self._prepare("RNNCell", input, hx)
        h = self._state(hx, x, batched)
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        mode = "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"
        h, _ = _cell_step(mode, F.linear(x, self.weight_ih, self.bias_ih), h, None,
                          self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step: forward(input, (h, c)) -> (h', c')."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        x, batched = self._prepare("LSTMCell", input, hx)
        if hx is None:
            h = c = self._state(None, x, batched)
        else:
            h, c = self._state(hx[0], x, batched, 0), self._state(hx[1], x, batched, 1)
        h, c = _cell_step("LSTM", F.linear(x, self.weight_ih, self.bias_ih), h, c,
                          self.weight_hh, self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step: forward(input, h) -> h'."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        x, batched = self._prepare("GRUCell", input, hx)
        h = self._state(hx, x, batched)
        h, _ = _cell_step("GRU", F.linear(x, self.weight_ih, self.bias_ih), h, None,
                          self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)
