"""Worker functions for the process tests: importable by name, as spawned workers need."""

import os
import signal
import threading
import time

import torch
import torch.distributed as dist

from neuron_fabric.experiments.workers import process_group


def sum_ranks(rank, workers, init_file, messages):
    """Every worker adds its rank; worker 0 sends the total, just before it ends."""
    with process_group(rank, workers, init_file):
        total = torch.tensor([float(rank)])
        dist.all_reduce(total)
        if rank == 0:
            messages.put(int(total.item()))


def one_fails_while_the_others_wait(rank, workers, init_file, failing):
    """Worker ``failing`` raises; the others wait in a collective it will never join."""
    with process_group(rank, workers, init_file):
        if rank == failing:
            raise ValueError(f"worker {rank} found a bad gradient")
        dist.barrier()


def all_fail_after_a_collective(rank, workers, init_file):
    """Every worker raises at the same point, just after a collective (as a mismatch does)."""
    with process_group(rank, workers, init_file):
        dist.barrier()
        raise ValueError(f"worker {rank} stops")


def one_is_killed(rank, workers, init_file):
    """Worker 1 dies of SIGKILL: no traceback, only its end."""
    with process_group(rank, workers, init_file):
        if rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()


def one_never_ends(rank, workers, init_file):
    """Worker 1 sleeps long past any limit; the others wait for it in a collective."""
    with process_group(rank, workers, init_file):
        if rank == 1:
            time.sleep(3600)
        dist.barrier()


def fails_with_a_thread_that_never_ends(rank, workers, init_file):
    """Worker 0 raises while a thread of its own still runs: an interpreter that shut down
    normally would wait for that thread forever, as it can wait for a process group's."""
    with process_group(rank, workers, init_file):
        if rank == 0:
            threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
            raise ValueError("worker 0 stops with a thread running")
        dist.barrier()
