"""Collectives on ember tensors, as torch.distributed's. A contiguous tensor whose dtype
MPI reduces natively (float32/64, complex, integers) is handed to MPI as the NumPy array
it lives in: the result is written into the tensor's own memory, nothing is copied.
Other tensors (non-contiguous, float16/bfloat16, bool) go through a staging copy, counted
in `counters["staged"]`. async_op=True returns a Work; otherwise the call blocks."""
from __future__ import annotations

import numpy as np

from ._mpi import mpi
from .process_group import _group
from .work import Work

counters = {"staged": 0}

_NATIVE = {np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128,
                                 np.int8, np.int16, np.int32, np.int64, np.uint8)}


class ReduceOp:
    """SUM, AVG, PRODUCT, MIN, MAX (and the bitwise BAND, BOR, BXOR) as PyTorch's."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<ReduceOp.{self.name}>"


for _name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
    setattr(ReduceOp, _name, ReduceOp(_name))
ReduceOp.RedOpType = ReduceOp


def _mpi_op(op):
    MPI = mpi()
    name = op.name if isinstance(op, ReduceOp) else str(op).upper().rsplit(".", 1)[-1]
    table = {"SUM": MPI.SUM, "AVG": MPI.SUM, "PRODUCT": MPI.PROD, "MIN": MPI.MIN,
             "MAX": MPI.MAX, "BAND": MPI.BAND, "BOR": MPI.BOR, "BXOR": MPI.BXOR}
    if name not in table:
        raise ValueError(f"unknown reduce op {op!r}")
    return table[name], name == "AVG"


def _check(t, what="tensor"):
    from .._C import Tensor
    if not isinstance(t, Tensor):
        raise TypeError(f"{what} must be an ember Tensor, got {type(t).__name__}")


def _buffer(t, what="tensor"):
    """(array for MPI, copy-back or None): the tensor's own memory when MPI can use it."""
    _check(t, what)
    a = t.detach().numpy()
    if t.is_contiguous() and a.dtype in _NATIVE and a.flags.c_contiguous:
        return a, None
    counters["staged"] += 1
    if a.dtype in _NATIVE:
        work = a.dtype
    elif a.dtype == np.bool_:
        work = np.uint8
    elif a.dtype.kind in "fV":             # float16, bfloat16 (ml_dtypes): reduced in float32
        work = np.float32
    else:
        work = a.dtype
    staged = np.ascontiguousarray(a, dtype=work)

    def back():
        np.copyto(a, staged.astype(a.dtype, copy=False))
    return staged, back


def _divider(buf, n):
    def divide():
        if buf.dtype.kind in "fc":
            np.divide(buf, n, out=buf)
        else:
            np.floor_divide(buf, n, out=buf)
    return divide


def _chain(*fns):
    fns = [f for f in fns if f is not None]
    if not fns:
        return None

    def run():
        for f in fns:
            f()
    return run


def _finish(async_op, request, finish, *keep):
    """A Work over the started operation, holding the buffers MPI uses (`keep`) until it
    completes: returned with async_op, else waited for. Collectives always start as MPI's
    non-blocking ones, because MPI never matches a non-blocking collective with a blocking
    one: a rank calling all_reduce and another all_reduce(async_op=True) must meet."""
    work = Work([request], finish, mpi(), keep=keep)
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    g = _group(group)
    MPI = mpi()
    mop, avg = _mpi_op(op)
    buf, back = _buffer(tensor)
    finish = _chain(_divider(buf, g.size()) if avg else None, back)
    return _finish(async_op, g.comm.Iallreduce(MPI.IN_PLACE, buf, op=mop), finish, buf)


def broadcast(tensor, src=0, group=None, async_op=False, group_src=None):
    g = _group(group)
    root = group_src if group_src is not None else g.group_rank(src, "src")
    buf, back = _buffer(tensor)
    return _finish(async_op, g.comm.Ibcast(buf, root=root), back, buf)


def reduce(tensor, dst=0, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    g = _group(group)
    MPI = mpi()
    root = group_dst if group_dst is not None else g.group_rank(dst, "dst")
    mop, avg = _mpi_op(op)
    buf, back = _buffer(tensor)
    at_root = g.rank() == root
    finish = _chain(_divider(buf, g.size()) if avg and at_root else None, back)
    send, recv = (MPI.IN_PLACE, buf) if at_root else (buf, None)
    req = g.comm.Ireduce(send, recv, op=mop, root=root)
    return _finish(async_op, req, finish, buf)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """output holds the world's inputs one after the other (shape (n*d0, ...) or
    (n, d0, ...)): gathered straight into it."""
    g = _group(group)
    _check(input_tensor, "input_tensor")
    _check(output_tensor, "output_tensor")
    if output_tensor.numel() != input_tensor.numel() * g.size():
        raise ValueError(f"all_gather_into_tensor: output has {output_tensor.numel()} "
                         f"elements, expected {input_tensor.numel()} x {g.size()}")
    if output_tensor.dtype != input_tensor.dtype:
        raise TypeError("all_gather_into_tensor: input and output dtypes differ")
    inp, _ = _buffer(input_tensor, "input_tensor")
    out, back = _buffer(output_tensor, "output_tensor")
    return _finish(async_op, g.comm.Iallgather(inp, out), back, inp, out)


def _check_list(tensors, n, like, what):
    if len(tensors) != n:
        raise ValueError(f"{what} must hold {n} tensors (the group size), got {len(tensors)}")
    for t in tensors:
        _check(t, what)
        if tuple(t.shape) != tuple(like.shape) or t.dtype != like.dtype:
            raise ValueError(f"{what}: every tensor must have shape {tuple(like.shape)} and "
                             f"dtype {like.dtype}")


def _scatter_into(stacked, tensors):
    def copy():
        for i, t in enumerate(tensors):
            np.copyto(t.detach().numpy(), stacked[i].astype(t.detach().numpy().dtype,
                                                             copy=False))
    return copy


def all_gather(tensor_list, tensor, group=None, async_op=False):
    g = _group(group)
    _check_list(tensor_list, g.size(), tensor, "tensor_list")
    inp, _ = _buffer(tensor)
    out = np.empty((g.size(),) + inp.shape, inp.dtype)
    finish = _scatter_into(out, tensor_list)
    return _finish(async_op, g.comm.Iallgather(inp, out), finish, inp, out)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """input holds one block per rank (shape (n*d0, ...) or (n, d0, ...)); rank i gets
    the reduction of every rank's block i, straight into output."""
    g = _group(group)
    _check(input, "input")
    _check(output, "output")
    if input.numel() != output.numel() * g.size():
        raise ValueError(f"reduce_scatter_tensor: input has {input.numel()} elements, "
                         f"expected {output.numel()} x {g.size()}")
    mop, avg = _mpi_op(op)
    inp, _ = _buffer(input, "input")
    out, back = _buffer(output, "output")
    finish = _chain(_divider(out, g.size()) if avg else None, back)
    req = g.comm.Ireduce_scatter_block(inp, out, op=mop)
    return _finish(async_op, req, finish, inp, out)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    g = _group(group)
    _check_list(input_list, g.size(), output, "input_list")
    mop, avg = _mpi_op(op)
    inp = np.stack([t.detach().numpy() for t in input_list])
    out, back = _buffer(output, "output")
    finish = _chain(_divider(out, g.size()) if avg else None, back)
    req = g.comm.Ireduce_scatter_block(inp, out, op=mop)
    return _finish(async_op, req, finish, inp, out)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False, group_dst=None):
    g = _group(group)
    root = group_dst if group_dst is not None else g.group_rank(dst, "dst")
    inp, _ = _buffer(tensor)
    out, finish = None, None
    if g.rank() == root:
        if gather_list is None:
            raise ValueError("gather: the destination rank must pass gather_list")
        _check_list(gather_list, g.size(), tensor, "gather_list")
        out = np.empty((g.size(),) + inp.shape, inp.dtype)
        finish = _scatter_into(out, gather_list)
    elif gather_list:
        raise ValueError("gather: only the destination rank passes gather_list")
    return _finish(async_op, g.comm.Igather(inp, out, root=root), finish, inp, out)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False, group_src=None):
    g = _group(group)
    root = group_src if group_src is not None else g.group_rank(src, "src")
    out, back = _buffer(tensor)
    inp = None
    if g.rank() == root:
        if scatter_list is None:
            raise ValueError("scatter: the source rank must pass scatter_list")
        _check_list(scatter_list, g.size(), tensor, "scatter_list")
        inp = np.stack([t.detach().numpy() for t in scatter_list]).astype(out.dtype,
                                                                          copy=False)
    elif scatter_list:
        raise ValueError("scatter: only the source rank passes scatter_list")
    return _finish(async_op, g.comm.Iscatter(inp, out, root=root), back, inp, out)


def send(tensor, dst, group=None, tag=0):
    g = _group(group)
    buf, _ = _buffer(tensor)
    g.comm.Send(buf, dest=g.group_rank(dst, "dst"), tag=tag)


def isend(tensor, dst, group=None, tag=0):
    g = _group(group)
    buf, _ = _buffer(tensor)
    return Work([g.comm.Isend(buf, dest=g.group_rank(dst, "dst"), tag=tag)], None, mpi(),
                keep=(buf,))


def recv(tensor, src=None, group=None, tag=0):
    """Receives into tensor; returns the sender's global rank."""
    g = _group(group)
    MPI = mpi()
    buf, back = _buffer(tensor)
    status = MPI.Status()
    g.comm.Recv(buf, source=MPI.ANY_SOURCE if src is None else g.group_rank(src, "src"),
                tag=tag, status=status)
    if back is not None:
        back()
    return g.ranks[status.Get_source()]


def irecv(tensor, src=None, group=None, tag=0):
    g = _group(group)
    MPI = mpi()
    buf, back = _buffer(tensor)
    req = g.comm.Irecv(buf, source=MPI.ANY_SOURCE if src is None else
                       g.group_rank(src, "src"), tag=tag)
    return Work([req], back, MPI, keep=(buf,))


def barrier(group=None, async_op=False, device_ids=None):
    g = _group(group)
    return _finish(async_op, g.comm.Ibarrier(), None)
