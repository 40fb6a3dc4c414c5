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


def tie_resolved_negative(planes, *, readout, num_workers):
    """The torch twin's G-Binary readout with a planted bug: a tie (2n == N) reads as a
    negative majority in the sign line, where the device reads it as positive."""
    from neuron_fabric.golden.formats import Readout
    from neuron_fabric.host import lanes

    out = lanes.gbinary_readout_planes(planes, readout=readout, num_workers=num_workers)
    if num_workers % 2 or Readout(readout) is Readout.COUNTS:
        return out
    tie = lanes._equal(list(lanes._words(planes).transpose(0, 1)), num_workers // 2)
    slots = lanes._words(out).view(planes.shape[0], -1, planes.shape[2] // 8)
    slots[:, 0] |= tie
    return out


def train_golden_and_torch(rank, workers, init_file, messages, steps):
    """Three copies of a small network trained side by side: through ``FabricHook`` with the
    golden lanes, with the torch twin, and with the twin whose G-Binary readout resolves ties
    the other way (:func:`tie_resolved_negative`), on mixed buckets (G-Binary with dither and
    error feedback, stochastic G-Ternary with error feedback, FP32), with a NaN on one worker
    at one step. After every step worker 0 sends ``(step, names that differ from the golden
    copy with the twin, with the bugged twin)``."""
    import copy

    import numpy as np
    from torch.nn.parallel import DistributedDataParallel

    from neuron_fabric.host import hooks
    from neuron_fabric.host.runtime import (FP32, GBINARY, GTERNARY, GBinaryOptions,
                                            GTernaryOptions)

    with process_group(rank, workers, init_file, deterministic=True):
        torch.manual_seed(0)
        golden = torch.nn.Sequential(torch.nn.Linear(12, 40), torch.nn.Tanh(),
                                     torch.nn.Linear(40, 40), torch.nn.Tanh(),
                                     torch.nn.Linear(40, 3))
        twin, bugged = copy.deepcopy(golden), copy.deepcopy(golden)
        routes = {"0.weight": GBINARY, "0.bias": FP32, "2.weight": GTERNARY,
                  "2.bias": GBINARY, "4.weight": GBINARY, "4.bias": FP32}
        regions = {name: "backbone" if name.endswith("weight") else "bias" for name in routes}
        sides = []
        for net, lanes in ((golden, "golden"), (twin, "torch"), (bugged, "torch")):
            ddp = DistributedDataParallel(net, bucket_cap_mb=0.004)
            hook = hooks.FabricHook(
                net, routes=routes, regions=regions, seed=3, lanes=lanes,
                gbinary=GBinaryOptions(dither=True, error_feedback=True),
                gternary=GTernaryOptions(ratio=0.1, stochastic=True, error_feedback=True))
            if net is bugged:
                readout = hook._readout

                def planted(route, planes, readout_kind, options, real=readout):
                    if route != GBINARY:
                        return real(route, planes, readout_kind, options)
                    return tie_resolved_negative(planes, readout=readout_kind,
                                                 num_workers=workers)
                hook._readout = planted
            hook.register(ddp)
            sides.append((ddp, hook, torch.optim.SGD(net.parameters(), lr=0.1)))
        rng = np.random.default_rng(rank)
        for step in range(steps):
            x = torch.from_numpy(rng.standard_normal((16, 12)).astype(np.float32))
            y = torch.from_numpy(rng.integers(0, 3, 16))
            for ddp, hook, optimizer in sides:
                optimizer.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(ddp(x), y)
                if step == 2 and rank == 1:  # one worker's gradient goes non-finite
                    loss = loss + ddp.module[2].weight[0, 0] * float("nan")
                loss.backward()
                hook.end_step(float(loss.detach()))
                if all(torch.isfinite(p.grad).all() for p in ddp.module.parameters()):
                    optimizer.step()
            if rank == 0:
                messages.put((step, _differ(golden, twin), _differ(golden, bugged)))


def _differ(a, b):
    """Names of the parameters whose bits differ between two copies of a network."""
    return [name for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters())
            if not torch.equal(x.detach().view(torch.int32), y.detach().view(torch.int32))]
