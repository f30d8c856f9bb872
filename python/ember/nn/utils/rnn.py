"""Variable-length sequences for the recurrent layers, as torch.nn.utils.rnn:
PackedSequence (the time steps of a batch of sequences sorted by decreasing length, packed
step after step: batch_sizes[t] sequences are still running at step t), pack_padded_sequence,
pad_packed_sequence, pad_sequence, pack_sequence and their inverses.

Packing and unpacking are differentiable: they gather and scatter rows with index ops."""
from __future__ import annotations

from collections import namedtuple

from ... import _C

Tensor = _C.Tensor

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence",
           "pad_packed_sequence", "pad_sequence", "unpad_sequence", "pack_sequence",
           "unpack_sequence"]


def _O():
    from ...ops import api
    return api


def _to_dtype(name, dtype):
    """PackedSequence.<name>(): the sequence with its data converted to dtype."""
    def method(self):
        return self.to(dtype=dtype)
    method.__name__, method.__qualname__ = name, f"PackedSequence.{name}"
    return method


class PackedSequence(namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices",
                                                   "unsorted_indices"])):
    """(data, batch_sizes, sorted_indices, unsorted_indices): data holds the steps of the
    sequences (sorted by decreasing length) one step after another; batch_sizes (int64)
    how many sequences each step has; sorted_indices the order the batch was sorted into
    (None when it already was), unsorted_indices its inverse. Made by
    pack_padded_sequence / pack_sequence, taken by RNN, LSTM and GRU."""

    __slots__ = ()

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def cpu(self, *args, **kwargs):
        return self

    double = _to_dtype("double", _C.float64)
    float = _to_dtype("float", _C.float32)
    half = _to_dtype("half", _C.float16)
    long = _to_dtype("long", _C.int64)
    int = _to_dtype("int", _C.int32)
    short = _to_dtype("short", _C.int16)
    char = _to_dtype("char", _C.int8)
    byte = _to_dtype("byte", _C.uint8)

    @property
    def is_cuda(self):
        return False

    def is_pinned(self):
        return False


def invert_permutation(permutation):
    """The inverse permutation (None for None)."""
    if permutation is None:
        return None
    O = _O()
    n = permutation.numel()
    return O.zeros(n, dtype=permutation.dtype).scatter(0, permutation,
                                                       O.arange(n, dtype=permutation.dtype))


def _lengths_list(lengths):
    if isinstance(lengths, Tensor):
        return [int(v) for v in lengths.to(_C.int64).tolist()]
    return [int(v) for v in lengths]


def _batch_sizes(lengths):
    """batch_sizes[t]: how many of the (decreasing) lengths exceed t."""
    T = lengths[0] if lengths else 0
    return [sum(1 for n in lengths if n > t) for t in range(T)]


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs a padded batch (T, B, *) (or (B, T, *) with batch_first) of sequences of the
    given lengths. With enforce_sorted the lengths must decrease; otherwise the batch is
    sorted first (sorted_indices records the order)."""
    from ... import tensor
    O = _O()
    if isinstance(lengths, Tensor):
        lengths = lengths.to(_C.int64)
    else:
        lengths = tensor(list(lengths), dtype=_C.int64)
    sorted_indices = None
    if not enforce_sorted:
        lengths, sorted_indices = O.sort(lengths, descending=True, stable=True)
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    ls = _lengths_list(lengths)
    if any(n <= 0 for n in ls):
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if any(a < b for a, b in zip(ls, ls[1:])):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                           "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                           "pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.")
    if batch_first:
        input = input.transpose(0, 1)
    sizes = _batch_sizes(ls)
    T, B = input.shape[0], input.shape[1]
    rows = [t * B + b for t, bs in enumerate(sizes) for b in range(bs)]
    flat = input.reshape((T * B,) + tuple(input.shape[2:]))
    data = flat.index_select(0, tensor(rows, dtype=_C.int64))
    return PackedSequence(data, tensor(sizes, dtype=_C.int64), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded (T, B, *) or (B, T, *), lengths), the
    batch back in its original order."""
    from ... import tensor
    O = _O()
    sizes = _lengths_list(sequence.batch_sizes)
    T = len(sizes)
    if total_length is not None:
        if total_length < T:
            raise ValueError(f"Expected total_length to be at least the length of the "
                             f"longest sequence in input, but got total_length={total_length} "
                             f"and max sequence length being {T}")
        T = total_length
    B = sizes[0] if sizes else 0
    data = sequence.data
    rows = [t * B + b for t, bs in enumerate(sizes) for b in range(bs)]
    tail = tuple(data.shape[1:])
    out = O.full((T * B,) + tail, padding_value, dtype=data.dtype)
    out = out.index_put((tensor(rows, dtype=_C.int64),), data)
    out = out.reshape((T, B) + tail)
    lengths = [sum(1 for bs in sizes if bs > b) for b in range(B)]
    lengths = tensor(lengths, dtype=_C.int64)
    if batch_first:
        out = out.transpose(0, 1)
    if sequence.unsorted_indices is not None:
        out = out.index_select(0 if batch_first else 1, sequence.unsorted_indices)
        lengths = lengths[sequence.unsorted_indices]
    return out, lengths


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stacks tensors of shape (L_i, *) into (L_max, B, *) (or (B, L_max, *)), padding with
    padding_value on the right (or the left)."""
    O = _O()
    if isinstance(sequences, Tensor):
        sequences = sequences.unbind(0)
    try:
        sequences = tuple(sequences)
    except TypeError:
        raise RuntimeError(f"pad_sequence: Expected iterable for input sequences, but got arg "
                           f"of type: {type(sequences)}") from None
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    L = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        extra = L - s.shape[0]
        if extra:
            fill = O.full((extra,) + tuple(s.shape[1:]), padding_value, dtype=s.dtype)
            s = O.cat([s, fill] if padding_side == "right" else [fill, s], 0)
        padded.append(s)
    return O.stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The sequences of a padded batch, each cut to its length."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [seq[:int(n)] for seq, n in zip(padded_sequences, _lengths_list(lengths))]


def pack_sequence(sequences, enforce_sorted=True):
    """Packs a list of tensors (L_i, *) (decreasing lengths unless enforce_sorted=False)."""
    from ... import tensor
    lengths = tensor([s.shape[0] for s in sequences], dtype=_C.int64)
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences a PackedSequence holds, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
