"""The DataLoader's iterator over worker processes (num_workers > 0).

Tasks go round-robin to the workers' index queues, at most prefetch_factor per worker
ahead of what has been yielded; results come back on one queue and are yielded in task
order (in_order=True: so the batches equal the single-process loader's) or as they
arrive. Each payload is unpickled as soon as it arrives, mapping its tensors' shared
memory (_shared). A worker's exception is raised here, when its batch's turn comes,
with the worker's traceback in the message. While waiting, the iterator checks every
STATUS_INTERVAL that the workers are alive (RuntimeError naming the pids of dead ones)
and honours timeout. Workers stop when the iterator is exhausted (unless persistent),
garbage collected or the interpreter exits: each is sent None and joined, and
terminated if it does not exit in SHUTDOWN_TIMEOUT.

Persistent workers live as long as the DataLoader: each new epoch resets the iterator,
which sends every worker Resume and discards what the previous epoch left in flight
until each worker has acknowledged.
"""
from __future__ import annotations

import itertools
import multiprocessing
import queue
import time
import weakref

from . import _shared
from ._worker import ExceptionWrapper, IterableStop, LoaderWatch, Resume, worker_loop

STATUS_INTERVAL = 0.25
SHUTDOWN_TIMEOUT = 5.0


def context_of(multiprocessing_context):
    """The multiprocessing context object a DataLoader's argument names."""
    if multiprocessing_context is None:
        return multiprocessing.get_context()
    if isinstance(multiprocessing_context, str):
        methods = multiprocessing.get_all_start_methods()
        if multiprocessing_context not in methods:
            raise ValueError("multiprocessing_context option should specify a valid start "
                             f"method in {methods!r}, but got "
                             f"multiprocessing_context={multiprocessing_context!r}")
        return multiprocessing.get_context(multiprocessing_context)
    if not isinstance(multiprocessing_context, multiprocessing.context.BaseContext):
        raise TypeError("multiprocessing_context option should be a valid context object or "
                        "a string specifying the start method, but got "
                        f"multiprocessing_context={multiprocessing_context}")
    return multiprocessing_context


def _shutdown(workers, index_queues, data_queue):
    """Stops the workers (None, join, terminate what does not exit) and closes queues.
    A module function, so a finalizer can run it without the iterator."""
    for q in index_queues:
        try:
            q.put(None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + SHUTDOWN_TIMEOUT
    for w in workers:
        w.join(timeout=max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.is_alive():
            w.terminate()
            w.join(timeout=SHUTDOWN_TIMEOUT)
    for q in (*index_queues, data_queue):
        q.cancel_join_thread()
        q.close()


class MultiProcessingIter:
    """The iterator of a DataLoader with num_workers > 0."""

    def __init__(self, loader):
        from ... import randint
        self._loader = loader
        self._num_workers = loader.num_workers
        self._prefetch = loader.prefetch_factor
        self._in_order = loader.in_order
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self._iterable = loader._iterable
        ctx = context_of(loader.multiprocessing_context)
        # as PyTorch: one draw from the loader's generator seeds every worker
        self._base_seed = int(randint(0, 2 ** 63 - 1, (), generator=loader.generator).item())
        self._data_queue = ctx.Queue()
        self._index_queues = []
        self._workers = []
        try:
            for wid in range(self._num_workers):
                iq = ctx.Queue()
                iq.cancel_join_thread()
                w = ctx.Process(
                    target=worker_loop, daemon=True,
                    args=(loader.dataset, self._iterable, iq, self._data_queue,
                          loader._auto_collation, loader.collate_fn, loader.drop_last,
                          self._base_seed, loader.worker_init_fn, wid, self._num_workers,
                          LoaderWatch()))
                w.start()
                self._index_queues.append(iq)
                self._workers.append(w)
        except BaseException:
            _shutdown(self._workers, self._index_queues, self._data_queue)
            raise
        self._finalizer = weakref.finalize(self, _shutdown, self._workers,
                                           self._index_queues, self._data_queue)
        self._epoch = 0
        self.bytes_received = 0      # pickled payloads (tensor data travels beside them)
        self._reset(first=True)

    # ---------------------------------------------------------------- state

    def _reset(self, first=False):
        loader = self._loader
        self._sampler_iter = None if self._iterable else iter(loader._index_sampler)
        self._send_idx = 0           # next task number
        self._rcvd_idx = 0           # next task to yield (in order)
        self._tasks = {}             # task -> worker, while not yielded
        self._results = {}           # task -> data that arrived early
        self._outstanding = 0
        self._per_worker = [0] * self._num_workers
        self._active = [True] * self._num_workers
        self._cycle = itertools.cycle(range(self._num_workers))
        self._sampler_done = False
        if not first:                # a persistent worker set: start a new epoch
            self._epoch += 1
            waiting = set(range(self._num_workers))
            for q in self._index_queues:
                q.put(Resume(self._epoch))
            while waiting:
                wid, task, payload = self._get_message()
                if isinstance(task, Resume) and task.epoch == self._epoch:
                    waiting.discard(wid)
                elif payload is not None:
                    _shared.loads(payload)      # a stale batch: map and drop it
        for _ in range(self._prefetch * self._num_workers):
            self._try_put_index()

    def _next_index(self):
        if self._iterable:
            return self._loader.batch_size
        return next(self._sampler_iter)

    def _try_put_index(self):
        if self._sampler_done:
            return
        cap = self._prefetch * self._num_workers
        for _ in range(self._num_workers):
            wid = next(self._cycle)
            if self._active[wid] and (self._in_order or self._per_worker[wid] <
                                      max(1, cap // sum(self._active))):
                break
        else:
            return                   # no worker may take more (the index is not drawn)
        try:
            index = self._next_index()
        except StopIteration:
            self._sampler_done = True
            return
        self._index_queues[wid].put((self._send_idx, index))
        self._tasks[self._send_idx] = wid
        self._per_worker[wid] += 1
        self._outstanding += 1
        self._send_idx += 1

    # ---------------------------------------------------------------- receiving

    def _check_workers(self):
        dead = [w for wid, w in enumerate(self._workers)
                if (self._active[wid] or self._persistent) and not w.is_alive()]
        if dead:
            pids = ", ".join(str(w.pid) for w in dead)
            codes = ", ".join(str(w.exitcode) for w in dead)
            self._shutdown_workers()
            raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly "
                               f"(exit code(s) {codes})")

    def _get_message(self):
        start = time.monotonic()
        while True:
            wait = STATUS_INTERVAL
            if self._timeout > 0:
                left = self._timeout - (time.monotonic() - start)
                if left <= 0:
                    self._shutdown_workers()
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
                wait = min(wait, left)
            try:
                return self._data_queue.get(timeout=wait)
            except queue.Empty:
                self._check_workers()

    def _receive(self):
        """One batch message: (task, data), data unpickled (tensors mapped)."""
        wid, task, payload = self._get_message()
        if isinstance(task, Resume):
            return None, None
        self.bytes_received += len(payload)
        data = _shared.loads(payload)
        self._outstanding -= 1
        if isinstance(data, IterableStop):
            self._active[data.worker_id] = False
            if not self._persistent:
                self._index_queues[data.worker_id].put(None)
            self._try_put_index()
            return None, None
        return task, data

    def _deliver(self, task, data):
        wid = self._tasks.pop(task)
        self._per_worker[wid] -= 1
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        return data

    def __next__(self):
        if not self._finalizer.alive:
            raise StopIteration
        while True:
            while self._rcvd_idx < self._send_idx:
                if self._rcvd_idx in self._results or \
                        (self._rcvd_idx in self._tasks and
                         self._active[self._tasks[self._rcvd_idx]]):
                    break
                self._tasks.pop(self._rcvd_idx, None)     # its worker ran dry
                self._rcvd_idx += 1
            else:
                if not self._persistent:
                    self._shutdown_workers()
                raise StopIteration
            if self._rcvd_idx in self._results:
                task = self._rcvd_idx
                self._rcvd_idx += 1
                return self._deliver(task, self._results.pop(task))
            task, data = self._receive()
            if task is None:
                continue
            if task == self._rcvd_idx:
                self._rcvd_idx += 1
                return self._deliver(task, data)
            if not self._in_order:
                return self._deliver(task, data)
            self._results[task] = data

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    # ---------------------------------------------------------------- shutdown

    def _shutdown_workers(self):
        self._finalizer()

    @property
    def alive(self):
        """Whether the workers are running (not shut down)."""
        return self._finalizer.alive

    @property
    def worker_pids(self):
        return [w.pid for w in self._workers]
