"""What runs in a DataLoader worker process: WorkerInfo / get_worker_info, the fetchers,
and the worker loop.

The loop, as PyTorch's: seed (random, ember and NumPy from base_seed + id), set one
thread, publish WorkerInfo, run worker_init_fn, then take tasks from this worker's
index queue until told to stop: (task, indices) -> (worker id, task, payload) on the
shared result queue. The payload is the batch pickled here by `_shared.dumps` (tensors by
shared memory), or an ExceptionWrapper carrying the worker's traceback, or
IterableStop when an IterableDataset replica is exhausted. Pickling happens in this loop,
not in the queue's feeder thread, so a batch that cannot be pickled is reported like
any other error. The worker also stops when the loader's process dies (LoaderWatch:
not through the parent pid alone, since under forkserver the parent is the fork server,
which outlives a killed loader while its children hold its pipe).
"""
from __future__ import annotations

import os
import queue
import random
import sys
import traceback

STATUS_INTERVAL = 0.25       # seconds between checks that the parent is alive


class WorkerInfo:
    """Which worker this process is: id, num_workers, seed and its copy of the dataset.
    Read-only once made."""

    __initialized = False

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)
        self.__keys = tuple(kwargs)
        self.__initialized = True

    def __setattr__(self, key, val):
        if self.__initialized:
            raise RuntimeError(f"Cannot assign attributes to {self.__class__.__name__} "
                               "objects")
        return super().__setattr__(key, val)

    def __repr__(self):
        items = ", ".join(f"{k}={getattr(self, k)}" for k in self.__keys)
        return f"{self.__class__.__name__}({items})"


_worker_info = None


def get_worker_info():
    """The WorkerInfo of this DataLoader worker process, or None in the main process."""
    return _worker_info


class KeyErrorMessage(str):
    """A KeyError's message printed as is (KeyError prints the repr of its argument)."""

    def __repr__(self):
        return self


class ExceptionWrapper:
    """An exception in a worker, sent to the parent with its formatted traceback and
    raised there again (same type when it takes one message, else RuntimeError)."""

    def __init__(self, exc_info=None, where="in background"):
        if exc_info is None:
            exc_info = sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def __reduce__(self):
        try:                        # the type must be importable where it is raised
            import pickle
            pickle.dumps(self.exc_type)
            exc_type = self.exc_type
        except Exception:  # noqa: BLE001 - an unpicklable type becomes RuntimeError
            exc_type = RuntimeError
        return (_rebuild_exception, (exc_type, self.exc_type.__name__, self.exc_msg,
                                     self.where))

    def reraise(self):
        msg = f"Caught {self.type_name} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = KeyErrorMessage(msg)
        try:
            exception = self.exc_type(msg)
        except Exception:  # noqa: BLE001 - a type that does not take one message
            raise RuntimeError(msg) from None
        raise exception

    @property
    def type_name(self):
        return getattr(self, "_type_name", self.exc_type.__name__)


def _rebuild_exception(exc_type, type_name, exc_msg, where):
    w = ExceptionWrapper.__new__(ExceptionWrapper)
    w.exc_type, w._type_name, w.exc_msg, w.where = exc_type, type_name, exc_msg, where
    return w


class IterableStop:
    """An IterableDataset replica in worker `worker_id` is exhausted."""

    def __init__(self, worker_id):
        self.worker_id = worker_id


class Resume:
    """Parent -> persistent worker: a new epoch starts (acknowledged with itself)."""

    def __init__(self, epoch):
        self.epoch = epoch


# ------------------------------------------------------------------ fetchers

class MapFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn

    def fetch(self, index):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        getitems = getattr(self.dataset, "__getitems__", None)
        data = getitems(index) if callable(getitems) else [self.dataset[i] for i in index]
        return self.collate_fn(data)


class IterableFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.iterator = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.ended = False

    def fetch(self, batch_size):
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.iterator))
        batch = []
        for _ in range(batch_size):
            try:
                batch.append(next(self.iterator))
            except StopIteration:
                self.ended = True
                break
        if not batch or (self.drop_last and len(batch) < batch_size):
            raise StopIteration
        return self.collate_fn(batch)


def _process_stat(pid):
    """(state, start time) of process pid from /proc, or None if there is no such
    process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


class LoaderWatch:
    """Tells a worker whether the process that runs its DataLoader is still alive: the
    same pid with the same start time, not a zombie (where /proc exists), else the
    worker's parent pid unchanged."""

    def __init__(self):
        self.pid = os.getpid()
        stat = _process_stat(self.pid)
        self.start = None if stat is None else stat[1]

    def alive(self):
        if self.start is None:
            return os.getppid() == self.ppid
        stat = _process_stat(self.pid)
        return stat is not None and stat[0] != b"Z" and stat[1] == self.start

    def in_worker(self):
        self.ppid = os.getppid()
        return self


def _seed_all(seed, base_seed, worker_id):
    from ... import manual_seed
    random.seed(seed)
    manual_seed(seed)
    import numpy as np
    np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))


def worker_loop(dataset, iterable, index_queue, data_queue, auto_collation, collate_fn,
                drop_last, base_seed, init_fn, worker_id, num_workers, watch):
    """The body of worker process worker_id (see the module docstring)."""
    global _worker_info
    watch.in_worker()
    from ... import set_num_threads
    from . import _shared
    try:
        set_num_threads(1)
        seed = base_seed + worker_id
        _seed_all(seed, base_seed, worker_id)
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed,
                                  dataset=dataset)
        make = IterableFetcher if iterable else MapFetcher
        init_exception = None
        fetcher = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = make(dataset, auto_collation, collate_fn, drop_last)
        except Exception:  # noqa: BLE001 - reported to the parent
            init_exception = ExceptionWrapper(where=f"in DataLoader worker process "
                                                    f"{worker_id}")
        ended = False
        while watch.alive():
            try:
                r = index_queue.get(timeout=STATUS_INTERVAL)
            except queue.Empty:
                continue
            if r is None:
                break
            if isinstance(r, Resume):
                data_queue.put((worker_id, r, None))
                ended = False
                if init_exception is None:
                    try:
                        fetcher = make(dataset, auto_collation, collate_fn, drop_last)
                    except Exception:  # noqa: BLE001 - reported to the parent
                        init_exception = ExceptionWrapper(
                            where=f"in DataLoader worker process {worker_id}")
                continue
            if ended:
                continue
            task, index = r
            if init_exception is not None:
                data, init_exception = init_exception, None
            else:
                try:
                    data = fetcher.fetch(index)
                except StopIteration:
                    if not iterable:
                        data = ExceptionWrapper(where=f"in DataLoader worker process "
                                                      f"{worker_id}")
                    else:
                        data, ended = IterableStop(worker_id), True
                except Exception:  # noqa: BLE001 - reported to the parent
                    data = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
            try:
                payload = _shared.dumps(data)
            except Exception:  # noqa: BLE001 - a batch that cannot be pickled
                payload = _shared.dumps(ExceptionWrapper(
                    where=f"in DataLoader worker process {worker_id} (sending the batch)"))
            data_queue.put((worker_id, task, payload))
            del data, payload, r, index
    except KeyboardInterrupt:
        pass
    # the parent may stop reading: never block exiting on unsent results
    data_queue.cancel_join_thread()
    data_queue.close()
