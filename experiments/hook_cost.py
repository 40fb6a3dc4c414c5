"""Wall time of the DDP hooks on full-size models, phase by phase, against the FP32 all-reduce.

The traffic count (:mod:`neuron_fabric.experiments.traffic_scale`) says what a route saves on
the wire; this says what it costs on the host. For each model, ``workers`` real gloo processes
on this machine run DDP-like steps: the gradients are synthetic (seeded normal values, one
scale per parameter, different on every worker), laid out in DDP's buckets of a step after the
first (:func:`~neuron_fabric.host.hooks.ddp_buckets`), and each bucket is handed
to the hook as DDP hands it, in bucket order, followed by the step's loss all-reduce. Settings:

- ``fp32``: :func:`~neuron_fabric.host.hooks.fp32_hook`, the reference (DDP's own all-reduce);
- ``gbinary``, ``gternary``: :class:`~neuron_fabric.host.hooks.FabricHook` with every
  parameter on G-Binary or G-Ternary;
- ``layer_gbinary``: the layer-aware profile (backbone on G-Binary, the rest on FP32).

Routes and options come from the shipped profiles through
:class:`~neuron_fabric.host.runtime.RuntimePolicy`, at the first step after the warm-up. The
settings take turns, one step each per round, so that all of them see the same background
load; the first round is a warm-up and is excluded, ``steps`` rounds are timed. Every step
starts from the same gradients, copied into the buckets as backward would write them. A step's
time is the slowest worker's, from a barrier to its last bucket and the loss; the result is
the median over the timed rounds. The phases are :attr:`FabricHook.phase_seconds
<neuron_fabric.host.hooks.FabricHook>` per step, averaged over the workers (FP32: the
all-reduces and the loss); ``other`` is a worker's step time outside them (routing, bucket
bookkeeping). The workers run one thread each, as in the training checks; with more workers
than cores they also wait for each other, which shows in ``exchange`` and ``all_reduce``.
The CPU time of each step (``getrusage``: user and kernel time, minor page faults) tells
computing from the kernel's work of mapping fresh temporaries.

Peak memory is each worker's maximum resident set (``getrusage``); their sum bounds the total.

Run by ``make traffic-scale`` (:func:`neuron_fabric.experiments.traffic_scale.main`, skipped
with ``--no-hook-cost``); writes ``OUT/hook_cost.json`` and ``OUT/hook_cost.md``.
"""

import dataclasses
import json
import os
import pathlib
import resource
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..golden.validate import check_int
from ..host import hooks as _hooks
from ..host import roles as _roles
from ..host import runtime as _runtime
from .workers import launch, process_group

__all__ = ["SETTINGS", "TARGET_MODEL", "TARGET_RATIO", "GradBucket", "Job", "plan",
           "synthetic_gradients", "measure", "run", "verdict", "markdown", "write_report"]

#: The route settings timed, each a shipped profile; the all-FP32 one runs on ``fp32_hook``.
SETTINGS = ("fp32", "gbinary", "gternary", "layer_gbinary")
#: The hooks' step on this model should take under this many times the FP32 all-reduce's.
TARGET_MODEL, TARGET_RATIO = "gpt2_small", 10.0
#: Phase columns of the report: the hook's phases, then time outside them.
COLUMNS = _hooks.PHASES + ("other",)
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class GradBucket:
    """What DDP hands a communication hook: a flat buffer holding the gradients of
    ``params`` back to back, and the bucket's index."""

    def __init__(self, params, buffer, index=0):
        self._params = params
        self._buffer = buffer
        self._index = index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def index(self):
        return self._index


class _ParameterTree:
    """The part of a module the hook reads: ``named_parameters()``, here on ``meta``."""

    def __init__(self, shapes):
        self._named = [(name, torch.nn.Parameter(torch.empty(shape, device="meta")))
                       for name, shape in shapes]

    def named_parameters(self):
        return iter(self._named)


@dataclasses.dataclass
class Job:
    """Everything a worker needs to time one model, and nothing it must rebuild.

    ``shapes``: ``(name, shape)`` in registration order; ``regions``: name to role;
    ``buckets``: DDP's buckets after the first step, lists of names in buffer order;
    ``settings``: setting name to ``(profile, routes)``.
    """
    model: str
    shapes: list
    regions: dict
    buckets: list
    settings: dict
    caps: _runtime.DeviceCaps
    steps: int
    seed: int


def plan(model_name, model, *, settings=None, world_size=4, caps=None, bucket_cap_mb=None,
         steps=3, seed=0):
    """A :class:`Job` for ``model`` (any module, ``meta`` included).

    ``settings``: name to :class:`~neuron_fabric.host.runtime.Profile` (default: the shipped
    profiles named in :data:`SETTINGS`).
    """

    caps = _runtime.DeviceCaps.from_params() if caps is None else caps
    if settings is None:
        settings = {name: _runtime.load_profile(name) for name in SETTINGS}
    regions = _roles.classify(model)
    _, later = _hooks.ddp_buckets(model, bucket_cap_mb=bucket_cap_mb)
    chosen = {}
    for name, profile in settings.items():
        policy = _runtime.RuntimePolicy(profile, roles=regions, world_size=world_size, caps=caps)
        chosen[name] = (profile, policy.routes(max(profile.warmup_steps, 1)))
    return Job(model=model_name,
               shapes=[(name, tuple(param.shape)) for name, param in model.named_parameters()],
               regions=regions, buckets=[[name for name, _ in bucket] for bucket in later],
               settings=chosen, caps=caps, steps=check_int("steps", steps, low=1),
               seed=check_int("seed", seed, low=0))


def synthetic_gradients(numels, *, indices, seed, rank):
    """One bucket's gradients, flat ``float32``: per parameter ``numel`` normal values times a
    scale between 1e-4 and 1e-1. The scale depends on the seed and the parameter's index in
    registration order (``indices``), not on the bucket layout; the values also on the
    worker."""
    out = np.empty(sum(numels), dtype=np.float32)
    offset = 0
    for numel, index in zip(numels, indices):
        scale = 10.0 ** np.random.default_rng([seed, index]).uniform(-4.0, -1.0)
        part = out[offset:offset + numel]
        np.random.default_rng([seed, rank, index]).standard_normal(out=part, dtype=np.float32)
        part *= np.float32(scale)
        offset += numel
    return out


def _add_phase(phases, route, phase, seconds):
    per_route = phases.setdefault(route, {})
    per_route[phase] = per_route.get(phase, 0.0) + seconds


def _fp32_step(buckets):
    """``fp32_hook`` on every bucket, then the loss; returns the step's phase seconds."""
    started = time.perf_counter()
    futures = [_hooks.fp32_hook(None, bucket) for bucket in buckets]
    for future in futures:
        future.wait()
    reduced = time.perf_counter()
    dist.all_reduce(torch.zeros(1, dtype=torch.float64))  # the step's loss
    return {_runtime.FP32: {"all_reduce": reduced - started},
            _hooks.CONTROL: {"statistics": time.perf_counter() - reduced}}


def _fabric_step(hook, buckets):
    """Every bucket through ``hook`` in DDP's order, then the loss; returns the phases."""
    hook.reset_phases()
    for bucket in buckets:  # the hook writes into the bucket and returns it
        hook.run(bucket).wait()
    hook.end_step(0.0)
    return hook.phase_seconds


def _time_settings(job, tree, buckets, masters):
    """Round by round, one step of every setting; the first round is a warm-up.

    Interleaving the settings exposes them all to the same background load. Returns, per
    setting, this worker's step seconds (warm-up first) and, summed over the timed rounds,
    its phase seconds and CPU use (user and kernel seconds, minor page faults).
    """
    steps = {}
    for name, (profile, routes) in job.settings.items():
        if profile.low_bit_routes:
            hook = _hooks.FabricHook(tree, routes=routes, regions=job.regions,
                                     gbinary=profile.gbinary, gternary=profile.gternary,
                                     caps=job.caps, seed=job.seed)
            steps[name] = lambda hook=hook: _fabric_step(hook, buckets)
        else:
            steps[name] = lambda: _fp32_step(buckets)
    records = {name: ([], {}, {"user_s": 0.0, "system_s": 0.0, "minor_faults": 0})
               for name in steps}
    for round_index in range(job.steps + 1):
        for name, step in steps.items():
            for bucket, master in zip(buckets, masters):  # what backward would have written
                np.copyto(bucket.buffer().numpy(), master)
            dist.barrier()
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            phases = step()
            finished = time.perf_counter()
            after = resource.getrusage(resource.RUSAGE_SELF)
            seconds, totals, cpu = records[name]
            seconds.append(finished - started)
            if round_index == 0:
                continue
            for route, entries in phases.items():
                for phase, value in entries.items():
                    _add_phase(totals, route, phase, value)
            cpu["user_s"] += after.ru_utime - before.ru_utime
            cpu["system_s"] += after.ru_stime - before.ru_stime
            cpu["minor_faults"] += after.ru_minflt - before.ru_minflt
    return records


def _worker(rank, workers, init_file, job, messages):
    with process_group(rank, workers, init_file):
        tree = _ParameterTree(job.shapes)
        params = dict(tree.named_parameters())
        order = {name: index for index, (name, _) in enumerate(job.shapes)}
        buckets, masters = [], []
        for index, names in enumerate(job.buckets):
            master = synthetic_gradients([params[name].numel() for name in names],
                                         indices=[order[name] for name in names],
                                         seed=job.seed, rank=rank)
            masters.append(master)
            buckets.append(GradBucket([params[name] for name in names],
                                      torch.from_numpy(master.copy()), index))
        gradient_bytes = sum(master.nbytes for master in masters)
        records = _time_settings(job, tree, buckets, masters)
        everyone = [None] * workers
        dist.all_gather_object(everyone, records)
        peak = [None] * workers
        dist.all_gather_object(peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        if rank == 0:
            results = {name: _summarize([worker[name] for worker in everyone], steps=job.steps)
                       for name in job.settings}
            fp32 = results.get("fp32")
            for name, result in results.items():
                ratio = ("" if fp32 is None or name == "fp32" else
                         f" ({result['step_ms'] / fp32['step_ms']:.2f}x FP32)")
                messages.put(("log", f"  {job.model} / {name}: {result['step_ms']:.1f} ms per "
                                     f"step{ratio}"))
            messages.put(("result", {"gradient_bytes_per_worker": gradient_bytes,
                                     "peak_rss_bytes": peak, "settings": results}))


def _summarize(everyone, *, steps):
    """Per-step times (slowest worker), per-phase and CPU means from every worker's record."""
    step_max = [max(seconds[step] for seconds, _, _ in everyone) for step in range(steps + 1)]
    timed = step_max[1:]
    per_route = {}
    for _, phases, _ in everyone:
        for route, entries in phases.items():
            for phase, value in entries.items():
                _add_phase(per_route, route, phase, 1e3 * value / steps / len(everyone))
    totals = {phase: sum(entries.get(phase, 0.0) for entries in per_route.values())
              for phase in _hooks.PHASES}
    mean_step = 1e3 * statistics.fmean(statistics.fmean(seconds[1:])
                                       for seconds, _, _ in everyone)
    totals["other"] = max(mean_step - sum(totals.values()), 0.0)
    # Per worker and step: CPU time in user and kernel mode (page faults are kernel time).
    cpu = {key: statistics.fmean(record[key] for _, _, record in everyone) / steps
           for key in ("user_s", "system_s", "minor_faults")}
    return {"step_ms": 1e3 * statistics.median(timed), "steps_ms": [1e3 * s for s in timed],
            "warmup_ms": 1e3 * step_max[0], "worker_mean_step_ms": mean_step,
            "phases_ms": totals, "phases_by_route_ms": per_route,
            "cpu_user_ms": 1e3 * cpu["user_s"], "cpu_system_ms": 1e3 * cpu["system_s"],
            "minor_faults": cpu["minor_faults"]}


def _spawn(job, workers, log):
    """Run ``job`` on ``workers`` processes; returns rank 0's result, logging as it comes."""
    context_mp = mp.get_context("spawn")
    messages = context_mp.SimpleQueue()
    saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    result = None

    def drain():
        nonlocal result
        while not messages.empty():
            kind, payload = messages.get()
            if kind == "log":
                log(payload)
            else:
                result = payload

    # One BLAS thread per worker: the workers already outnumber the cores.
    os.environ.update({name: "1" for name in _THREAD_VARIABLES})
    try:
        launch(_worker, workers=workers, args=(job, messages), poll=drain)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if result is None:
        raise RuntimeError(f"the workers timing {job.model} ended without a result")
    return result


def measure(model_name, model, *, settings=None, world_size=4, steps=3, seed=0, caps=None,
            bucket_cap_mb=None, log=print):
    """Time every setting on ``model`` with ``world_size`` workers; returns the model's entry
    of the report (step times, ratios to ``fp32``, phases, peak memory)."""
    world_size = check_int("world_size", world_size, low=1, high=64)
    job = plan(model_name, model, settings=settings, world_size=world_size, caps=caps,
               bucket_cap_mb=bucket_cap_mb, steps=steps, seed=seed)
    started = time.perf_counter()
    parameters = sum(int(np.prod(shape)) for _, shape in job.shapes)
    log(f"  {model_name}: {parameters:,} parameters in {len(job.buckets)} buckets, "
        f"{len(job.settings)} settings, {job.steps + 1} rounds on {world_size} workers")
    result = _spawn(job, world_size, log)
    log(f"  {model_name}: done in {time.perf_counter() - started:.1f} s")
    fp32 = result["settings"].get("fp32")
    for entry in result["settings"].values():
        entry["ratio_to_fp32"] = entry["step_ms"] / fp32["step_ms"] if fp32 else None
    return {"parameters": parameters, "buckets": len(job.buckets), **result,
            "peak_rss_total_bytes": sum(result["peak_rss_bytes"])}


def run(models, *, settings=None, world_size=4, steps=3, seed=0, caps=None, bucket_cap_mb=None,
        log=print):
    """Time every setting on every model (name to module); returns the JSON-ready report."""
    caps = _runtime.DeviceCaps.from_params() if caps is None else caps
    if settings is None:
        settings = {name: _runtime.load_profile(name) for name in SETTINGS}
    started = time.perf_counter()
    report = {"workers": world_size, "steps": steps, "seed": seed, "bucket_cap_mb": bucket_cap_mb,
              "cores": os.cpu_count(), "caps": dataclasses.asdict(caps),
              "target": {"model": TARGET_MODEL, "ratio": TARGET_RATIO},
              "settings": {name: profile.description for name, profile in settings.items()},
              "phases": list(COLUMNS), "models": {}}
    for model_name, model in models.items():
        report["models"][model_name] = measure(
            model_name, model, settings=settings, world_size=world_size, steps=steps, seed=seed,
            caps=caps, bucket_cap_mb=bucket_cap_mb, log=log)
    target = report["models"].get(TARGET_MODEL, {}).get("settings", {})
    if "fp32" in target:
        ratios = {name: entry["ratio_to_fp32"] for name, entry in target.items()
                  if name != "fp32"}
        report["target"].update(ratios=ratios, met=all(r < TARGET_RATIO for r in ratios.values()))
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def verdict(report):
    """One line: the target model's ratios to the FP32 all-reduce against the target."""
    target = report["target"]
    if "ratios" not in target:
        return (f"hook cost: {target['model']} not measured with fp32; no verdict on the "
                f"{target['ratio']:g}x target")
    ratios = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in target["ratios"].items())
    return (f"hook cost: {target['model']} step against the FP32 all-reduce's: {ratios}; "
            f"target under {target['ratio']:g}x {'met' if target['met'] else 'NOT met'}")


def _gib(nbytes):
    return f"{nbytes / 2 ** 30:.2f} GiB"


def markdown(report):
    lines = ["# Hook cost at model scale", "",
             f"{report['workers']} gloo workers on {report['cores']} cores, one thread each; "
             f"synthetic gradients in DDP's buckets; per setting one warm-up step and "
             f"{report['steps']} timed steps. **ms per step**: the slowest worker's step "
             f"(every bucket through the hook, then the loss), median over the timed steps; "
             f"**x FP32**: over `fp32_hook`'s. Phases: ms per step, mean over the workers, "
             f"summed over the routes; `other` is a worker's step outside the phases. CPU: "
             f"ms per step and worker in user and kernel mode, and minor page faults (the "
             f"kernel time is mostly the faults of fresh temporaries).", ""]
    phases = [p for p in report["phases"]
              if any(e["phases_ms"].get(p, 0.0) > 0 for m in report["models"].values()
                     for e in m["settings"].values())]
    for model_name, entry in report["models"].items():
        peak = entry["peak_rss_bytes"]
        lines += [f"## {model_name}", "",
                  f"{entry['parameters']:,} parameters in {entry['buckets']} buckets; "
                  f"gradients {_gib(entry['gradient_bytes_per_worker'])} per worker; peak "
                  f"resident memory {_gib(max(peak))} per worker at most, "
                  f"{_gib(entry['peak_rss_total_bytes'])} for all.", "",
                  "| setting | ms per step | x FP32 | " + " | ".join(phases)
                  + " | CPU user | CPU kernel | page faults |",
                  "|---|---:|---:|" + "---:|" * (len(phases) + 3)]
        for name, s in entry["settings"].items():
            ratio = "" if s["ratio_to_fp32"] is None else f"{s['ratio_to_fp32']:.2f}"
            cells = [f"{s['phases_ms'].get(p, 0.0):.1f}" if s["phases_ms"].get(p, 0.0) else ""
                     for p in phases]
            cells += [f"{s['cpu_user_ms']:.0f}", f"{s['cpu_system_ms']:.0f}",
                      f"{s['minor_faults']:,.0f}"]
            lines.append(f"| {name} | {s['step_ms']:.1f} | {ratio} | " + " | ".join(cells) + " |")
        lines.append("")
    target = report["target"]
    entry = report["models"].get(target["model"])
    if entry is not None and entry["settings"].get("fp32"):
        lines += [f"## Target: under {target['ratio']:g}x the FP32 all-reduce on "
                  f"{target['model']}", "", "| setting | x FP32 | under the target |",
                  "|---|---:|---|"]
        for name, s in entry["settings"].items():
            if name == "fp32":
                continue
            lines.append(f"| {name} | {s['ratio_to_fp32']:.2f} | "
                         f"{'yes' if s['ratio_to_fp32'] < target['ratio'] else 'no'} |")
        lines.append("")
    return "\n".join(lines)


def write_report(report, out):
    """Write ``hook_cost.json`` and ``hook_cost.md`` under ``out``; returns the paths."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / "hook_cost.json", out / "hook_cost.md")
    paths[0].write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    return paths
