"""Wall time of the DDP hooks on full-size models, phase by phase, against the FP32 all-reduce.

The traffic count (:mod:`neuron_fabric.experiments.traffic_scale`) says what a route saves on
the wire; this says what it costs on the host. For each model, ``workers`` real gloo processes
on this machine run DDP-like steps: the gradients are synthetic (seeded normal values, one
scale per parameter, different on every worker), laid out in DDP's buckets of a step after the
first (:func:`~neuron_fabric.host.hooks.ddp_buckets`), and each bucket is handed
to the hook as DDP hands it, in bucket order, followed by the step's loss all-reduce. Settings:

- ``fp32``: :func:`~neuron_fabric.host.hooks.fp32_hook`, the reference (DDP's own all-reduce);
- PyTorch's own compression hooks, as DDP ships them: ``fp16`` and ``bf16``
  (``fp16_compress_hook``, ``bf16_compress_hook``: the bucket all-reduced in 16 bits) and
  ``powersgd_rank1``, ``powersgd_rank4`` (``powerSGD_hook`` with its default error feedback
  and warm start, at matrix rank 1 and 4);
- ``gbinary``, ``gternary``: :class:`~neuron_fabric.host.hooks.FabricHook` with every
  parameter on G-Binary or G-Ternary;
- ``layer_gbinary``: the layer-aware profile (backbone on G-Binary, the rest on FP32).

Routes and options of the last three come from the shipped profiles through
:class:`~neuron_fabric.host.runtime.RuntimePolicy`, at the first step after the warm-up. The
settings take turns, one step each per round, so that all of them see the same background
load; the first round is a warm-up and is excluded, ``steps`` rounds are timed. Every step
starts from the same gradients, copied into the buckets as backward would write them. A step's
time is the slowest worker's, from a barrier to its last bucket and the loss; the result is
the median over the timed rounds. PowerSGD compresses from its third step on (the first two
are its plain all-reduce warm-up), so each round primes a fresh state with two untimed steps
before its timed one, and drops it after, so that its error buffers (one per bucket) are not
held while the other settings run. The phases are :attr:`FabricHook.phase_seconds
<neuron_fabric.host.hooks.FabricHook>` per step, averaged over the workers (FP32: the
all-reduces and the loss); ``other`` is a worker's step time outside them (routing, bucket
bookkeeping). The workers run one thread each, as in the training checks; with more workers
than cores they also wait for each other, which shows in ``exchange`` and ``all_reduce``.
The CPU time of each step (``getrusage``: user and kernel time, minor page faults) tells
computing from the kernel's work of mapping fresh temporaries.

Peak memory is each worker's maximum resident set over the run (``getrusage``), their sum
bounding the total, and per setting the high-water mark of its timed steps (Linux: the mark is
reset before each step through ``/proc/self/clear_refs``), which also holds what the process
keeps between steps: the gradients and the copy they are restored from, and the hooks' state.

Run by ``make traffic-scale`` (:func:`neuron_fabric.experiments.traffic_scale.main`, skipped
with ``--no-hook-cost``); writes ``OUT/hook_cost.json`` and ``OUT/hook_cost.md``.
"""

import ctypes
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

__all__ = ["SETTINGS", "STOCK", "PROFILE_SETTINGS", "TARGET_MODEL", "TARGET_RATIO",
           "TARGET_SETTINGS", "GradBucket", "Job", "plan",
           "synthetic_gradients", "measure", "run", "verdict", "markdown", "write_report"]

#: PyTorch's stock DDP hooks timed beside ours: name to (hook, PowerSGD rank or None).
STOCK = {"fp16": ("fp16_compress_hook", None), "bf16": ("bf16_compress_hook", None),
         "powersgd_rank1": ("powerSGD_hook", 1), "powersgd_rank4": ("powerSGD_hook", 4)}
#: Our route settings, each a shipped profile; the all-FP32 one runs on ``fp32_hook``.
PROFILE_SETTINGS = ("fp32", "gbinary", "gternary", "layer_gbinary")
#: Every setting timed, in the report's order.
SETTINGS = ("fp32",) + tuple(STOCK) + PROFILE_SETTINGS[1:]
#: The low-bit settings held to the target: each step at most this many times the FP32
#: all-reduce's on this model.
TARGET_MODEL, TARGET_RATIO = "gpt2_small", 1.5
TARGET_SETTINGS = ("gbinary", "gternary", "layer_gbinary")
#: Steps PowerSGD runs as a plain all-reduce before it compresses (its minimum with error
#: feedback and warm start).
POWERSGD_START = 2
#: Phase columns of the report: the hook's phases, then time outside them.
COLUMNS = _hooks.PHASES + ("other",)
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class GradBucket:
    """What DDP hands a communication hook: a flat buffer holding the gradients of
    ``params`` back to back, the bucket's index and whether it is the step's last."""

    def __init__(self, params, buffer, index=0, last=True):
        self._params = params
        self._buffer = buffer
        self._index = index
        self._last = last

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def index(self):
        return self._index

    def is_last(self):
        return self._last

    def gradients(self):
        """Each parameter's gradient: a view of the buffer in the parameter's shape."""
        views, offset = [], 0
        for param in self._params:
            views.append(self._buffer[offset:offset + param.numel()].view(param.shape))
            offset += param.numel()
        return views


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
    ``settings``: setting name to ``(profile, routes)`` for ours, to ``(None, stock hook
    name, PowerSGD rank)`` for PyTorch's; ``lanes``: the lanes of our hooks.
    """
    model: str
    shapes: list
    regions: dict
    buckets: list
    settings: dict
    caps: _runtime.DeviceCaps
    steps: int
    seed: int
    lanes: str = "torch"


def default_settings():
    """Every setting of :data:`SETTINGS`: a :class:`~neuron_fabric.host.runtime.Profile` for
    ours, the entry of :data:`STOCK` for PyTorch's."""
    return {name: STOCK[name] if name in STOCK else _runtime.load_profile(name)
            for name in SETTINGS}


def plan(model_name, model, *, settings=None, world_size=4, caps=None, bucket_cap_mb=None,
         steps=3, seed=0, lanes="torch"):
    """A :class:`Job` for ``model`` (any module, ``meta`` included).

    ``settings``: name to :class:`~neuron_fabric.host.runtime.Profile`, or to a ``(hook name,
    rank)`` entry of :data:`STOCK` (default: :func:`default_settings`).
    """

    caps = _runtime.DeviceCaps.from_params() if caps is None else caps
    if settings is None:
        settings = default_settings()
    if lanes not in _hooks.LANES:
        raise ValueError(f"lanes must be one of {', '.join(map(repr, _hooks.LANES))}, "
                         f"not {lanes!r}")
    regions = _roles.classify(model)
    _, later = _hooks.ddp_buckets(model, bucket_cap_mb=bucket_cap_mb)
    chosen = {}
    for name, profile in settings.items():
        if isinstance(profile, tuple):
            chosen[name] = (None,) + profile
            continue
        policy = _runtime.RuntimePolicy(profile, roles=regions, world_size=world_size, caps=caps)
        chosen[name] = (profile, policy.routes(max(profile.warmup_steps, 1)))
    return Job(model=model_name,
               shapes=[(name, tuple(param.shape)) for name, param in model.named_parameters()],
               regions=regions, buckets=[[name for name, _ in bucket] for bucket in later],
               settings=chosen, caps=caps, steps=check_int("steps", steps, low=1),
               seed=check_int("seed", seed, low=0), lanes=lanes)


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


def _stock_step(name, hook, state, buckets, *, one_at_a_time=False):
    """A stock DDP hook on every bucket, then the loss; returns the step's phase seconds (its
    compression, all-reduce and decompression count as ``all_reduce``). ``one_at_a_time``
    waits for each bucket before the next: PowerSGD issues collectives from its futures'
    callbacks, which under gloo run on other threads, so buckets in flight together could
    issue them in a different order on each worker."""
    started = time.perf_counter()
    futures = []
    for bucket in buckets:
        futures.append(hook(state, bucket))
        if one_at_a_time:
            futures[-1].wait()
    for future in futures:
        future.wait()
    reduced = time.perf_counter()
    dist.all_reduce(torch.zeros(1, dtype=torch.float64))  # the step's loss
    return {name: {"all_reduce": reduced - started},
            _hooks.CONTROL: {"statistics": time.perf_counter() - reduced}}


def _stock(name, hook_name, rank, job, buckets):
    """``(prime, step)`` of a stock hook: ``prime`` sets up its state for a round (PowerSGD:
    a fresh state, stepped through its plain warm-up) and returns the step to time."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if rank is None:
        hook = getattr(default_hooks, hook_name)
        return None, lambda: _stock_step(name, hook, None, buckets)

    def prime(restore):
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                            start_powerSGD_iter=POWERSGD_START,
                                            random_seed=job.seed)
        for _ in range(POWERSGD_START):
            restore()
            _stock_step(name, powerSGD_hook.powerSGD_hook, state, buckets, one_at_a_time=True)
        return lambda: _stock_step(name, powerSGD_hook.powerSGD_hook, state, buckets,
                                   one_at_a_time=True)

    return prime, None


def _release_freed():
    """Hand the heap that earlier steps freed back to the system (glibc's ``malloc_trim``;
    nothing elsewhere), so that a setting's resident set holds what is live, not what
    another setting left free behind it."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak():
    """Reset this process's resident-set high-water mark (Linux); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _peak_bytes():
    """This process's resident-set high-water mark since the last reset (Linux), or None."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _time_settings(job, tree, buckets, masters):
    """Round by round, one step of every setting; the first round is a warm-up.

    Interleaving the settings exposes them all to the same background load. Returns, per
    setting, this worker's step seconds (warm-up first) and, summed over the timed rounds,
    its phase seconds, CPU use (user and kernel seconds, minor page faults) and the highest
    resident set of its timed steps.
    """
    steps, primes = {}, {}
    for name, entry in job.settings.items():
        profile = entry[0]
        if profile is None:
            primes[name], steps[name] = _stock(name, entry[1], entry[2], job, buckets)
        elif profile.low_bit_routes:
            hook = _hooks.FabricHook(tree, routes=entry[1], regions=job.regions,
                                     gbinary=profile.gbinary, gternary=profile.gternary,
                                     caps=job.caps, seed=job.seed,
                                     agreement=profile.reads_agreement, lanes=job.lanes)
            steps[name] = lambda hook=hook: _fabric_step(hook, buckets)
        else:
            steps[name] = lambda: _fp32_step(buckets)
    records = {name: ([], {}, {"user_s": 0.0, "system_s": 0.0, "minor_faults": 0,
                               "peak_bytes": None})
               for name in steps}

    def restore():  # what backward would have written
        for bucket, master in zip(buckets, masters):
            np.copyto(bucket.buffer().numpy(), master)

    for round_index in range(job.steps + 1):
        for name in steps:
            step = steps[name]
            if primes.get(name) is not None:
                step = primes[name](restore)
            restore()
            dist.barrier()
            _release_freed()
            tracked = _reset_peak()
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            phases = step()
            finished = time.perf_counter()
            after = resource.getrusage(resource.RUSAGE_SELF)
            peak = _peak_bytes() if tracked else None
            del step  # a primed PowerSGD state goes with it
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
            if peak is not None:
                cpu["peak_bytes"] = max(cpu["peak_bytes"] or 0, peak)
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
                                      torch.from_numpy(master.copy()), index,
                                      last=index == len(job.buckets) - 1))
        gradient_bytes = sum(master.nbytes for master in masters)
        records = _time_settings(job, tree, buckets, masters)
        everyone = [None] * workers
        dist.all_gather_object(everyone, records)
        # The resets of the high-water mark reset the kernel's maximum resident set as well:
        # the process's peak is the highest of its settings' marks and what came after.
        own = max([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]
                  + [record[2]["peak_bytes"] or 0 for record in records.values()])
        peak = [None] * workers
        dist.all_gather_object(peak, own)
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
    peaks = [record["peak_bytes"] for _, _, record in everyone]
    return {"step_ms": 1e3 * statistics.median(timed), "steps_ms": [1e3 * s for s in timed],
            "warmup_ms": 1e3 * step_max[0], "worker_mean_step_ms": mean_step,
            "phases_ms": totals, "phases_by_route_ms": per_route,
            "cpu_user_ms": 1e3 * cpu["user_s"], "cpu_system_ms": 1e3 * cpu["system_s"],
            "minor_faults": cpu["minor_faults"],
            "peak_step_bytes": None if None in peaks else max(peaks)}


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
            bucket_cap_mb=None, lanes="torch", log=print):
    """Time every setting on ``model`` with ``world_size`` workers; returns the model's entry
    of the report (step times, ratios to ``fp32`` and ``bf16``, phases, peak memory)."""
    world_size = check_int("world_size", world_size, low=1, high=64)
    job = plan(model_name, model, settings=settings, world_size=world_size, caps=caps,
               bucket_cap_mb=bucket_cap_mb, steps=steps, seed=seed, lanes=lanes)
    started = time.perf_counter()
    parameters = sum(int(np.prod(shape)) for _, shape in job.shapes)
    log(f"  {model_name}: {parameters:,} parameters in {len(job.buckets)} buckets, "
        f"{len(job.settings)} settings, {job.steps + 1} rounds on {world_size} workers")
    result = _spawn(job, world_size, log)
    log(f"  {model_name}: done in {time.perf_counter() - started:.1f} s")
    for reference in ("fp32", "bf16"):
        base = result["settings"].get(reference)
        for entry in result["settings"].values():
            entry[f"ratio_to_{reference}"] = entry["step_ms"] / base["step_ms"] if base else None
    return {"parameters": parameters, "buckets": len(job.buckets), **result,
            "peak_rss_total_bytes": sum(result["peak_rss_bytes"])}


def _describe(name, setting):
    if isinstance(setting, tuple):
        hook, rank = setting
        return f"PyTorch's {hook}" + (f", matrix rank {rank}" if rank else "")
    return setting.description


def run(models, *, settings=None, world_size=4, steps=3, seed=0, caps=None, bucket_cap_mb=None,
        lanes="torch", log=print):
    """Time every setting on every model (name to module); returns the JSON-ready report."""
    caps = _runtime.DeviceCaps.from_params() if caps is None else caps
    if settings is None:
        settings = default_settings()
    started = time.perf_counter()
    report = {"workers": world_size, "steps": steps, "seed": seed, "bucket_cap_mb": bucket_cap_mb,
              "cores": os.cpu_count(), "caps": dataclasses.asdict(caps), "lanes": lanes,
              "load_average": list(os.getloadavg()),
              "target": {"model": TARGET_MODEL, "ratio": TARGET_RATIO},
              "settings": {name: _describe(name, value) for name, value in settings.items()},
              "phases": list(COLUMNS), "models": {}}
    for model_name, model in models.items():
        report["models"][model_name] = measure(
            model_name, model, settings=settings, world_size=world_size, steps=steps, seed=seed,
            caps=caps, bucket_cap_mb=bucket_cap_mb, lanes=lanes, log=log)
    report["load_average_after"] = list(os.getloadavg())
    target = report["models"].get(TARGET_MODEL, {}).get("settings", {})
    if "fp32" in target:
        ratios = {name: entry["ratio_to_fp32"] for name, entry in target.items()
                  if name in TARGET_SETTINGS}
        report["target"].update(ratios=ratios,
                                met=all(r <= TARGET_RATIO for r in ratios.values()))
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
            f"target at most {target['ratio']:g}x {'met' if target['met'] else 'NOT met'}")


def _gib(nbytes):
    return f"{nbytes / 2 ** 30:.2f} GiB"


def _ratio(value):
    return "" if value is None else f"{value:.2f}"


def markdown(report):
    load = report.get("load_average")
    lines = ["# Hook cost at model scale", "",
             f"{report['workers']} gloo workers on {report['cores']} cores, one thread each; "
             f"our hooks with the {report.get('lanes', 'torch')} lanes; synthetic gradients in "
             f"DDP's buckets; per setting one warm-up step and {report['steps']} timed steps, "
             f"the settings taking turns. **ms per step**: the slowest worker's step (every "
             f"bucket through the hook, then the loss), median over the timed steps; **x FP32**, "
             f"**x bf16**: over `fp32_hook`'s and `bf16_compress_hook`'s, in the same run. "
             f"Phases: ms per step, mean over the workers, summed over the routes (a stock "
             f"hook's compression and all-reduce count as `all_reduce`); `other` is a worker's "
             f"step outside the phases. CPU: ms per step and worker in user and kernel mode, and "
             f"minor page faults (the kernel time is mostly the faults of fresh temporaries). "
             f"**peak**: the highest resident set of a worker during the setting's steps."
             + (f" Load average {load[0]:.1f} at the start." if load else ""), ""]
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
                  "| setting | ms per step | x FP32 | x bf16 | " + " | ".join(phases)
                  + " | CPU user | CPU kernel | page faults | peak |",
                  "|---|---:|---:|---:|" + "---:|" * (len(phases) + 4)]
        for name, s in entry["settings"].items():
            cells = [f"{s['phases_ms'].get(p, 0.0):.1f}" if s["phases_ms"].get(p, 0.0) else ""
                     for p in phases]
            cells += [f"{s['cpu_user_ms']:.0f}", f"{s['cpu_system_ms']:.0f}",
                      f"{s['minor_faults']:,.0f}",
                      "" if s.get("peak_step_bytes") is None else _gib(s["peak_step_bytes"])]
            lines.append(f"| {name} | {s['step_ms']:.1f} | {_ratio(s['ratio_to_fp32'])} | "
                         f"{_ratio(s.get('ratio_to_bf16'))} | " + " | ".join(cells) + " |")
        lines.append("")
    target = report["target"]
    entry = report["models"].get(target["model"])
    if entry is not None and entry["settings"].get("fp32"):
        lines += [f"## Target: at most {target['ratio']:g}x the FP32 all-reduce on "
                  f"{target['model']}", "", "| setting | x FP32 | x bf16 | within the target |",
                  "|---|---:|---:|---|"]
        for name, s in entry["settings"].items():
            if name not in TARGET_SETTINGS:
                continue
            lines.append(f"| {name} | {s['ratio_to_fp32']:.2f} | "
                         f"{_ratio(s.get('ratio_to_bf16'))} | "
                         f"{'yes' if s['ratio_to_fp32'] <= target['ratio'] else 'no'} |")
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
