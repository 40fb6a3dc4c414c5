"""DDP training with the emitted Verilog aggregating the gradients, in lockstep with the golden hooks.

Each run trains two copies of one model side by side in the same ``gloo`` workers, from the
same initialisation and on the same minibatches: one through :class:`~neuron_fabric.host.hooks.
FabricHook` with the golden accumulators, the other through the same hook with an
:class:`~neuron_fabric.sim.device.RtlDevice`, where worker 0's Verilated controller top folds
every worker's lines and answers with the readout lines (and FP32 slices make a round trip
through its FP32 path). After every step the two models' parameters must be bit-identical; the
first difference stops the run with the step, the parameter, the element and both values.

Runs: the digits CNN and the character-level language model, each with G-Binary everywhere,
G-Ternary everywhere, and the layer-aware G-Binary profile (the head, embeddings, norms and
biases on FP32: a bucket of mixed routes).

Results go to ``OUT/report.json`` and ``OUT/report.md``: per run, the loss at the start and
the end, lines written and read, cycles simulated, the harness's cycles per second, and the
wall time per step of the golden hook and the RTL hook.

Command line (``make train-rtl``)::

    python -m neuron_fabric.experiments.train_rtl --verilog build/verilog/l512_w16_c5_d64_n2 \\
        --out build/train-rtl [--workers 4] [--steps N] [--only digits/gbinary ...]
"""

import argparse
import copy
import dataclasses
import json
import pathlib
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..golden.validate import check_int
from ..host import hooks as _hooks
from ..host import roles as _roles
from ..host import runtime as _runtime
from ..sim import harness as _harness
from ..sim.device import RtlDevice
from ..sim.manifest import Manifest, top_folder
from ..sim.scenarios import Timing
from . import workloads as _workloads
from .train_check import CHAR_LM, DIGITS
from .workers import WorkerError, launch, process_group

__all__ = ["Run", "RUNS", "ParameterMismatch", "run", "main"]


@dataclasses.dataclass(frozen=True)
class Run:
    """One lockstep run: ``workload`` with ``model`` overrides, routes of ``profile``."""
    name: str
    workload: str
    model: dict
    profile: str
    steps: int


def _runs():
    runs = []
    for group, workload, model, steps in (("digits", "digits_cnn", DIGITS, 60),
                                          ("char_lm", "char_lm", CHAR_LM, 60)):
        model = {key: value for key, value in model.items() if key != "train_steps"}
        for profile in ("gbinary", "gternary", "layer_gbinary"):
            runs.append(Run(f"{group}/{profile}", workload, model, profile, steps))
    return tuple(runs)


#: Every run of ``make train-rtl``, in order.
RUNS = _runs()

#: The simulated device's surroundings: requests held back and responses and memory stalled
#: now and then, so that the lockstep also shows the result does not depend on timing.
DEVICE_TIMING = Timing(idle=0.05, backpressure=0.05, mem_backpressure=0.05, mem_latency=(1, 4))


class ParameterMismatch(AssertionError):
    """The RTL-aggregated model left the golden one: ``step``, ``parameter``, ``element``
    (flat index) and both values."""

    def __init__(self, *, run, step, parameter, element, golden, rtl):
        self.fields = {"run": run, "step": step, "parameter": parameter, "element": element,
                       "golden": golden, "rtl": rtl}
        super().__init__(
            f"{run}: parameters differ after step {step}: {parameter}[{element}] is "
            f"{rtl!r} ({np.float32(rtl).view(np.uint32):#010x}) with the RTL, "
            f"{golden!r} ({np.float32(golden).view(np.uint32):#010x}) with the golden hooks")


def _first_difference(spec, step, golden, rtl):
    """Raise :class:`ParameterMismatch` at the first parameter bit that differs."""
    for (name, a), (_, b) in zip(golden.named_parameters(), rtl.named_parameters()):
        bits_a = a.detach().reshape(-1).view(torch.int32)
        bits_b = b.detach().reshape(-1).view(torch.int32)
        if not torch.equal(bits_a, bits_b):
            k = int(torch.nonzero(bits_a != bits_b)[0])
            raise ParameterMismatch(run=spec.name, step=step, parameter=name, element=k,
                                    golden=float(a.detach().reshape(-1)[k]),
                                    rtl=float(b.detach().reshape(-1)[k]))


def _train(spec, *, rank, workers, seed, verilog, library, log):
    data, model = _workloads._setup(spec.workload, workers=workers, seed=seed,
                                    overrides={**spec.model, "train_steps": spec.steps})
    twin = copy.deepcopy(model)
    params = Manifest(verilog).params
    caps = _runtime.DeviceCaps.from_params(params)
    profile = _runtime.load_profile(spec.profile)
    roles = _roles.classify(model)
    routes = {name: profile.routes[role] for name, role in roles.items()}
    device = RtlDevice(verilog, world_size=workers, rank=rank, seed=seed, library=library,
                       timing=DEVICE_TIMING)
    sides = []
    for net, dev in ((model, None), (twin, device)):
        ddp = DistributedDataParallel(net)
        hook = _hooks.FabricHook(net, routes=routes, regions=roles, gbinary=profile.gbinary,
                                 gternary=profile.gternary, caps=caps, seed=seed, device=dev)
        hook.register(ddp)
        sides.append((ddp, hook, data.optimizer(net)))

    losses, times = [], [[], []]
    started = time.perf_counter()
    for step in range(spec.steps):
        batch = data.batch(rank)
        for k, (ddp, hook, optimizer) in enumerate(sides):
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = data.loss(ddp, batch)
            loss.backward()
            global_loss, _ = hook.end_step(float(loss.detach()))
            optimizer.step()
            times[k].append(time.perf_counter() - t0)
        losses.append(global_loss)
        _first_difference(spec, step, model, twin)
        if rank == 0 and ((step + 1) % 10 == 0 or step + 1 == spec.steps):
            log(f"  [{spec.name}] step {step + 1:>3}/{spec.steps}  loss {global_loss:.4f}  "
                f"bit-identical  ({device.tally.cycles:,} cycles, "
                f"{time.perf_counter() - started:.0f} s)")
    dist.barrier()
    device.close()
    if rank != 0:
        return None
    tally = device.tally
    return {
        "name": spec.name, "workload": spec.workload, "profile": spec.profile,
        "steps": spec.steps, "workers": workers, "seed": seed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "routes": sorted(set(routes.values())),
        "loss_first": float(np.mean(losses[:5])), "loss_last": float(np.mean(losses[-5:])),
        "losses": losses, "bit_identical_steps": spec.steps,
        "device": tally.as_dict(),
        "cycles_per_second": tally.cycles / tally.rtl_s if tally.rtl_s else None,
        # The median resists the pauses of a shared machine.
        "golden_step_s": float(np.median(times[0][1:])),
        "rtl_step_s": float(np.median(times[1][1:])),
        "wall_s": time.perf_counter() - started,
    }


def _worker(rank, workers, init_file, spec_dicts, seed, verilog, library, result_dir):
    def log(text):
        print(text, flush=True)

    with process_group(rank, workers, init_file, deterministic=True):
        for index, fields in enumerate(spec_dicts):
            spec = Run(**fields)
            if rank == 0:
                log(f"run {index + 1}/{len(spec_dicts)}: {spec.name} ({spec.steps} steps, "
                    f"{workers} workers)")
            try:
                result = _train(spec, rank=rank, workers=workers, seed=seed, verilog=verilog,
                                library=library, log=log)
            except ParameterMismatch as error:
                # Every worker sees the same parameters, so each writes what it found: the
                # first to fail takes the others down, and its file is the one that counts.
                path = pathlib.Path(result_dir) / f"mismatch-{rank}.json"
                path.write_text(json.dumps(error.fields, indent=2) + "\n")
                raise
            if rank == 0:
                (pathlib.Path(result_dir) / f"{index:02d}.json").write_text(json.dumps(result))


def _markdown(report):
    rows = ["| Run | Steps | Loss (first 5 → last 5) | Bit-identical steps | Lines written / read "
            "| Cycles | Harness cycles/s | Golden hook ms/step | RTL hook ms/step | Ratio |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        d = r["device"]
        rows.append(
            f"| {r['name']} | {r['steps']} | {r['loss_first']:.3f} → {r['loss_last']:.3f} | "
            f"{r['bit_identical_steps']} of {r['steps']} | {d['lines_written']:,} / "
            f"{d['lines_read']:,} | {d['cycles']:,} | {r['cycles_per_second']:,.0f} | "
            f"{1e3 * r['golden_step_s']:.0f} | {1e3 * r['rtl_step_s']:.0f} | "
            f"{r['rtl_step_s'] / r['golden_step_s']:.1f}x |")
    p = report["params"]
    return "\n".join([
        f"# Training with the RTL in the loop ({p['line_bits']}-bit top, {p['max_workers']} "
        f"workers max, {report['workers']} gloo workers)",
        "",
        "Two copies of each model train in lockstep on the same minibatches: one aggregated by "
        "the golden hooks, one by the Verilated controller top (worker 0 simulates it; FP32 "
        "slices make a round trip through its FP32 path). Their parameters are compared bit "
        "for bit after every step.",
        "",
        *rows,
        "",
        f"Verilog: `{report['verilog']}`. Total wall time {report['wall_s']:.0f} s "
        f"(harness build {report['build_s']:.0f} s).",
        "",
    ])


def run(out, *, verilog, workers=4, seed=0, steps=None, only=None, library=None,
        cache="build/harness", log=print):
    """Run the lockstep runs (all of :data:`RUNS`, or those named in ``only``), write the
    report and return it. ``library`` is a harness library of ``verilog`` already built;
    otherwise it is built (or found) in ``cache``. Raises :class:`ParameterMismatch` (its message has the step,
    parameter, element and values) when the RTL run leaves the golden one."""
    workers = check_int("workers", workers, low=1, high=64)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    specs = list(RUNS)
    if only:
        unknown = sorted(set(only) - {s.name for s in specs})
        if unknown:
            raise ValueError(f"unknown runs {unknown}; the runs are "
                             f"{', '.join(s.name for s in specs)}")
        specs = [s for s in specs if s.name in only]
    if steps is not None:
        specs = [dataclasses.replace(s, steps=check_int("steps", steps, low=2)) for s in specs]
    started = time.perf_counter()
    manifest = Manifest(verilog)
    if workers > manifest.params.max_workers:
        raise ValueError(f"workers must be at most the device's MAX_WORKERS "
                         f"{manifest.params.max_workers}, not {workers}")
    if library is None:  # once, here, before the workers start
        library = _harness.build(manifest, cache=cache, log=log)
    build_s = time.perf_counter() - started
    results_dir = out / "runs"
    results_dir.mkdir(exist_ok=True)
    for stale in results_dir.glob("*.json"):
        stale.unlink()
    (out / "mismatch.json").unlink(missing_ok=True)
    try:
        launch(_worker, workers=workers,
               args=([dataclasses.asdict(s) for s in specs], seed, str(verilog), str(library),
                     str(results_dir)))
    except WorkerError as error:
        mismatch = results_dir / f"mismatch-{error.rank}.json"
        if mismatch.is_file():
            fields = json.loads(mismatch.read_text())
            (out / "mismatch.json").write_text(mismatch.read_text())
            raise ParameterMismatch(**fields) from None
        raise
    runs = [json.loads(path.read_text()) for path in sorted(results_dir.glob("[0-9]*.json"))]
    report = {"verilog": str(verilog), "params": manifest.params.as_dict(),
              "workers": workers, "seed": seed, "runs": runs,
              "build_s": build_s, "wall_s": time.perf_counter() - started}
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(_markdown(report), encoding="utf-8")
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.experiments.train_rtl",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--verilog", required=True,
                        help="generated folder of the top, or the folder holding the default's")
    parser.add_argument("--out", default="build/train-rtl")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="steps of every run")
    parser.add_argument("--only", nargs="*", help="run names (digits/gbinary ...)")
    args = parser.parse_args(argv)
    try:
        run(args.out, verilog=top_folder(args.verilog), workers=args.workers, seed=args.seed,
            steps=args.steps, only=args.only)
    except ParameterMismatch as error:
        print(f"train-rtl: STOPPED: {error}", file=sys.stderr)
        return 1
    print(f"train-rtl: every step bit-identical; report in {pathlib.Path(args.out) / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
