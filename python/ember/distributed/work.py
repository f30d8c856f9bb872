"""Work: the handle of a collective started with async_op=True (or by DDP's hooks), over
one or more MPI requests. Open MPI moves a non-blocking collective on only inside MPI
calls, so `progress()` tests every pending Work: DDP calls it from its gradient hooks,
which keeps all-reduces moving while the backward computes.

MPI writes into a non-blocking operation's buffers until it completes, whenever that is:
a Work holds its buffers (`keep`) and stays in `_pending` until it is seen complete, even
when its caller dropped it. At interpreter exit (before mpi4py's MPI_Finalize, which
still moves messages) `_drain` completes what is pending; a Work that cannot complete in
time has its buffers leaked on purpose, so that a late message never lands in freed
memory (that heap corruption aborted DDP jobs at exit)."""
from __future__ import annotations

import atexit
import ctypes
import time

_pending = []          # Works started and not yet seen complete, oldest first
_leaked = 0            # Works whose buffers _drain gave up on (never freed)
DRAIN_SECONDS = 30.0


class Work:
    """wait() blocks until the operation is done (then its result is in the tensors);
    is_completed() tests without blocking. start_time/end_time are time.perf_counter()
    readings: when the operation was started and when it was first seen complete.
    `keep`: the arrays MPI reads or writes until completion."""

    def __init__(self, requests=(), finish=None, mpi=None, keep=()):
        self._requests = list(requests)
        self._finish = finish              # runs once on completion (AVG's divide, copy-back)
        self._mpi = mpi
        self._keep = tuple(keep)
        self.start_time = time.perf_counter()
        self.end_time = None
        if self._requests:
            _pending.append(self)
        else:
            self._complete()

    def _complete(self):
        if self.end_time is not None:
            return
        self.end_time = time.perf_counter()
        self._requests = []
        self._keep = ()
        try:
            _pending.remove(self)
        except ValueError:
            pass
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()

    def is_completed(self):
        if self.end_time is None and self._mpi.Request.Testall(self._requests):
            self._complete()
        return self.end_time is not None

    def wait(self, timeout=None):
        """Blocks until done; with timeout (seconds or a timedelta) raises RuntimeError
        if it is not done by then."""
        if self.end_time is not None:
            return True
        if timeout is None:
            self._mpi.Request.Waitall(self._requests)
        else:
            limit = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
            deadline = time.perf_counter() + float(limit)
            while not self._mpi.Request.Testall(self._requests):
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"ember.distributed: operation not completed "
                                       f"within {limit} s")
                time.sleep(0.0005)
        self._complete()
        return True

    def result(self):
        self.wait()
        return []

    def __repr__(self):
        return f"<Work {'completed' if self.end_time is not None else 'pending'}>"


def progress():
    """Tests every pending Work once (drives Open MPI's progress engine); returns how
    many are still pending."""
    for w in list(_pending):
        w.is_completed()
    return len(_pending)


def drain(seconds=DRAIN_SECONDS):
    """Drives pending Works to completion for up to `seconds`; returns how many are
    still pending. The other ranks started the same collectives, so they complete unless
    a rank has stopped."""
    deadline = time.perf_counter() + seconds
    while progress() and time.perf_counter() < deadline:
        time.sleep(0.0005)
    return len(_pending)


def _leak(obj):
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


@atexit.register
def _drain():
    """At exit: complete the pending Works; leak the buffers of those that do not."""
    global _leaked
    if not _pending:
        return
    try:
        drain()
    except Exception:              # MPI already finalised, or failing: keep the memory
        pass
    for w in list(_pending):
        _leak(w)
        _leaked += 1
