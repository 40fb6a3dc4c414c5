"""Real gradient traces: capture them from training runs, load them with NumPy alone.

A trace is what the workers of a data-parallel job hand to the reduction at chosen training
steps. :func:`capture` trains one workload of :mod:`neuron_fabric.experiments.workloads` as ``workers``
simulated workers on disjoint shards of real data and writes two files into ``out_dir``:

``<workload>.npz`` (the gradients) and ``<workload>.json`` (the manifest), in the format
:mod:`neuron_fabric.host.traces` describes; for the language model the manifest's data
source lists the standard-library files with byte counts and SHA-256.

The manifest holds everything needed to capture the same trace again
(``capture(m["workload"], d, workers=m["workers"], seed=m["seed"], steps=m["steps"],
**m["config"])``); on the same machine and software that gives identical arrays.

:func:`load` reads a trace back as a :class:`Trace` (both are
:mod:`neuron_fabric.host.traces`'s, where the file format is read with NumPy alone). This
module imports PyTorch only inside :func:`capture`.

Command line::

    python -m neuron_fabric.experiments.traces capture --out build/traces \\
        [--workload NAME ...] [--workers K] [--seed S] [--train-steps N]
"""

import argparse
import dataclasses
import json
import math
import os
import pathlib
import platform
import sys
import time

import numpy as np

from ..golden.validate import check_int
from ..host.roles import ROLES
from ..host.traces import FORMAT, WORKLOADS, Param, Trace, check_workload, load, trace_paths

__all__ = ["WORKLOADS", "FORMAT", "Param", "Trace", "capture", "load", "main"]


def _size(nbytes):
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _versions():
    import sklearn
    import torch

    return {"python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "scikit-learn": sklearn.__version__}


def capture(workload, out_dir, *, workers=4, steps=None, seed=0, log=None, **overrides):
    """Train ``workload`` and write its gradient trace into ``out_dir``.

    Parameters
    ----------
    workload : str
        One of :data:`WORKLOADS`.
    out_dir : str or pathlib.Path
        Folder for ``<workload>.npz`` and ``<workload>.json`` (created when missing; existing
        files of the same name are replaced).
    workers : int
        Number of simulated data-parallel workers, at least 1.
    steps : sequence of int or None
        Training steps to capture; ``None`` takes six steps spread from the first to the last.
    seed : int
        Seed of initialisation, data split and sampling, at least 0.
    log : callable or None
        Called with a line of text per captured step.
    **overrides
        Configuration fields of the workload (``workloads.DigitsConfig`` or
        ``workloads.CharLMConfig``), for example ``train_steps=20`` for a quick trace.

    Returns the path of the ``.npz`` file. Raises ``ValueError`` for an unknown workload,
    ``workers < 1`` and other bad values, and ``TypeError`` for an unknown option; nothing is
    trained or written then.
    """
    check_workload(workload)
    workers = check_int("workers", workers, low=1)
    seed = check_int("seed", seed, low=0)
    from . import workloads

    started = time.perf_counter()
    run = workloads.train(workload, workers=workers, seed=seed, steps=steps, log=log,
                          **overrides)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    npz_path, json_path = trace_paths(out_dir / workload)

    partial = npz_path.with_name(npz_path.name + ".partial")
    with open(partial, "wb") as handle:
        np.savez(handle, **run.grads)
    os.replace(partial, npz_path)

    step_losses = run.losses.mean(axis=1)
    shapes = {name: tuple(param.shape) for name, param in run.model.named_parameters()}
    params = [{"name": name, "role": run.roles[name], "shape": list(shapes[name]),
               "numel": math.prod(shapes[name])} for name in run.names]
    manifest = {
        "format": FORMAT,
        "workload": workload,
        "seed": seed,
        "workers": workers,
        "steps": run.steps,
        "layout": "one float32 array per parameter, (n_steps, n_workers, numel), each "
                  "gradient flattened in C order; keys and order as model.named_parameters()",
        "aggregation": "the optimizer steps on the mean of the workers' gradients: their sum "
                       "in worker order divided by the number of workers",
        "optimizer": run.optimizer,
        "config": dataclasses.asdict(run.config),
        "params": params,
        "role_numel": {role: sum(p["numel"] for p in params if p["role"] == role)
                       for role in ROLES},
        "loss": {
            "per_step_mean": [float(value) for value in step_losses],
            "captured": [{"step": step, "mean": float(step_losses[step]),
                          "workers": [float(value) for value in run.losses[step]]}
                         for step in run.steps],
        },
        "metrics": run.metrics,
        "final_metric": {"name": run.final_metric, "value": run.metrics[run.final_metric]},
        "data": run.data,
        "software": _versions(),
        "wall_seconds": {"train": run.seconds, "total": time.perf_counter() - started},
        "files": {"npz": {"name": npz_path.name, "bytes": npz_path.stat().st_size}},
    }
    partial = json_path.with_name(json_path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
        handle.write("\n")
    os.replace(partial, json_path)
    return npz_path


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m neuron_fabric.experiments.traces",
        description="Capture real gradient traces of simulated data-parallel training.")
    commands = parser.add_subparsers(dest="command", required=True)
    cap = commands.add_parser(
        "capture", help="train the workloads and write <workload>.npz and <workload>.json",
        description="Train each workload as K simulated workers on disjoint data shards and "
                    "write every worker's gradients at the captured steps.")
    cap.add_argument("--out", required=True, type=pathlib.Path,
                     help="folder for the trace files (created when missing)")
    cap.add_argument("--workload", action="extend", nargs="+", metavar="NAME",
                     help=f"workloads to capture (default: all of {', '.join(WORKLOADS)})")
    cap.add_argument("--workers", type=int, default=4, help="simulated workers (default 4)")
    cap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    cap.add_argument("--train-steps", type=int, default=None, metavar="N",
                     help="training steps per workload (default: the workload's own)")
    cap.set_defaults(command_parser=cap)
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (2 for bad arguments)."""
    args = _parser().parse_args(argv)
    parser = args.command_parser
    chosen = list(dict.fromkeys(args.workload or WORKLOADS))
    try:
        for workload in chosen:
            check_workload(workload)
        check_int("workers", args.workers, low=1)
        check_int("seed", args.seed, low=0)
        if args.train_steps is not None:
            check_int("train steps", args.train_steps, low=1)
    except (TypeError, ValueError) as error:
        parser.error(f"{error} (see --help)")
    overrides = {} if args.train_steps is None else {"train_steps": args.train_steps}

    def say(line):
        print(line, flush=True)

    started = time.perf_counter()
    written = []
    for workload in chosen:
        say(f"traces: {workload}: training on {args.workers} workers (seed {args.seed})")
        npz_path = capture(workload, args.out, workers=args.workers, seed=args.seed, log=say,
                           **overrides)
        json_path = npz_path.with_suffix(".json")
        with open(json_path, encoding="utf-8") as handle:
            final = json.load(handle)["final_metric"]
        say(f"traces: {workload}: {final['name']} {final['value']:.4f}")
        written += [npz_path, json_path]
    total = sum(path.stat().st_size for path in written)
    say(f"traces: wrote {len(written)} files ({_size(total)}) in "
        f"{time.perf_counter() - started:.1f} s:")
    for path in written:
        say(f"  {path}  {_size(path.stat().st_size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
