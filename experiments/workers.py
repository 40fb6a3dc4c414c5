"""Gloo worker processes for the training experiments: start them, watch them, stop them.

:func:`launch` runs a function on ``workers`` spawned processes that join one gloo process
group through :func:`process_group`. A worker that fails takes the others down with it, and
the failure comes back to the caller as a :class:`WorkerError` carrying the worker's
traceback; a run that outlives its ``timeout_s`` is stopped and reported the same way. No
failure leaves a process behind or a caller waiting.

Why a worker leaves at once, without tearing its process group down or letting the
interpreter clean up: after a failure, its peers may be blocked in a collective that will
never complete, and a teardown can then wait for them forever (the parent sees the exit and
stops the peers instead); after a success, freeing a gloo group joins its threads, which may
be waiting for the GIL that the freeing thread holds (see :func:`process_group`).
"""

import contextlib
import multiprocessing.connection
import os
import pathlib
import signal
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..golden.validate import check_int

__all__ = ["WorkerError", "launch", "process_group"]

#: How often the parent looks at its workers (and calls ``poll``), in seconds.
_POLL_S = 0.2

#: Process groups of this worker, held until it exits (see :func:`process_group`).
_GROUPS_KEPT = []


class WorkerError(RuntimeError):
    """A worker process failed, was killed, or the run went past its time limit.

    ``rank`` is the worker's (``None`` for a time limit), ``details`` its traceback or what is
    known of its end.
    """

    def __init__(self, message, *, rank=None, details=""):
        super().__init__(message + (f"\n{details}" if details else ""))
        self.rank = rank
        self.details = details


@contextlib.contextmanager
def process_group(rank, workers, init_file, *, deterministic=False):
    """Join the gloo group of ``workers`` processes through the ``file://`` store ``init_file``
    (one BLAS thread per worker; ``deterministic`` asks torch for deterministic kernels).

    The group is destroyed when the block ends normally. When it raises, the group is left
    as it is: the worker is about to exit, and :func:`launch` stops its peers.

    The group's object is kept until the worker exits, so that a DDP reducer freed later in
    the worker never holds its last reference: a reducer that does frees the group with the
    GIL held, and the group's threads, which need the GIL to free their last collective's
    tensors, can then never be joined (a hang seen about once in thirty runs of a worker
    that trains three DDP copies).
    """
    torch.set_num_threads(1)
    if deterministic:
        torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=workers)
    _GROUPS_KEPT.append(dist.group.WORLD)
    yield
    dist.destroy_process_group()


def _error_file(folder, rank):
    return pathlib.Path(folder) / f"error-{rank}.txt"


def _run(rank, fn, workers, folder, args):
    """The body of worker ``rank``: ``fn``, and on any failure its traceback to a file; then
    an immediate exit, 0 or 1 (see the module's note)."""
    status = 0
    try:
        fn(rank, workers, os.path.join(folder, "store"), *args)
    except BaseException:  # noqa: BLE001 - every failure, KeyboardInterrupt included, is reported
        text = traceback.format_exc()
        _error_file(folder, rank).write_text(text, encoding="utf-8")
        sys.stderr.write(f"worker {rank} failed:\n{text}")
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _first_failure(folder, failed, exitcodes):
    """The rank and story of the worker that failed first, among the ``failed`` ranks.

    A worker that died without a traceback (a signal, a crash in native code) is the cause:
    its peers fail only once it is gone. Otherwise one failure brings the others down (their
    peer is gone, so their collectives fail too), and the oldest traceback is the cause.
    """
    for rank in failed:
        if not _error_file(folder, rank).is_file():
            code = exitcodes[rank]
            if code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = f"signal {-code}"
                return rank, f"worker {rank} was killed by {name}, with no traceback"
            return rank, f"worker {rank} ended with exit status {code}, with no traceback"
    logs = sorted(pathlib.Path(folder).glob("error-*.txt"), key=lambda p: p.stat().st_mtime_ns)
    first = logs[0]
    return int(first.stem.removeprefix("error-")), first.read_text(encoding="utf-8")


def _stop(processes, grace_s=5.0):
    """SIGTERM every live process, then SIGKILL what is left after ``grace_s``; reap all."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join()


def launch(fn, *, workers, args=(), timeout_s=None, poll=None):
    """Run ``fn(rank, workers, init_file, *args)`` on ``workers`` spawned processes.

    ``fn`` must be importable (a module-level function); it joins the group with
    :func:`process_group` on ``init_file``, a store in a fresh temporary folder. ``poll`` is
    called every fraction of a second while the workers run, and once after they end (to
    drain a queue, say). Raises :class:`WorkerError` when a worker fails (the first one's
    traceback), is killed, or when the run takes more than ``timeout_s`` seconds; every
    worker has been stopped by then.
    """
    workers = check_int("workers", workers, low=1, high=64)
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="nfab-dist-") as folder:
        processes = mp.spawn(_run, args=(fn, workers, folder, tuple(args)), nprocs=workers,
                             join=False).processes
        try:
            while True:
                if poll is not None:
                    poll()
                exitcodes = [process.exitcode for process in processes]
                failed = [rank for rank, code in enumerate(exitcodes) if code not in (None, 0)]
                if failed:
                    rank, details = _first_failure(folder, failed, exitcodes)
                    raise WorkerError(f"worker {rank} of {workers} failed", rank=rank,
                                      details=details)
                if all(code == 0 for code in exitcodes):
                    if poll is not None:  # what the workers left just before they ended
                        poll()
                    return
                if deadline is not None and time.monotonic() > deadline:
                    running = [rank for rank, code in enumerate(exitcodes) if code is None]
                    raise WorkerError(f"the workers ran past their {timeout_s} s limit; workers "
                                      f"{running} were still running and have been stopped")
                multiprocessing.connection.wait(
                    [p.sentinel for p, code in zip(processes, exitcodes) if code is None],
                    timeout=_POLL_S)
        finally:
            _stop(processes)
