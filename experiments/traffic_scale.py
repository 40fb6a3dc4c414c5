"""Traffic of every operating profile on full-size models, without training them.

What a route costs per step depends only on which parameters it carries, how DDP cuts them
into buckets, and the line format, never on the gradient values (as long as no gradient is
non-finite and the health monitor moves nothing). So the traffic of a profile on a model too
large to train here can be counted exactly from its parameter tree
(:mod:`neuron_fabric.experiments.scale_models`):

1. the roles come from :func:`neuron_fabric.host.roles.classify` and the route of every
   parameter at every step from :class:`neuron_fabric.host.runtime.RuntimePolicy` (FP32
   warm-up, then each role's route; the health monitor is never fed, so no region falls back);
2. the buckets are DDP's: the first step one bucket of every parameter (DDP's initial layout
   when it does not look for unused parameters), later steps the rebuilt layout, computed with
   DDP's own assignment function over the parameters in reverse registration order (the order
   backward makes their gradients ready) with its caps: 1 MiB for the first bucket, 25 MiB
   for the others, or ``bucket_cap_mb`` for all;
3. each bucket is counted into a :class:`neuron_fabric.host.hooks.TrafficMeter` as
   :class:`~neuron_fabric.host.hooks.FabricHook` counts it when it runs (the ``fp32`` profile
   as :func:`~neuron_fabric.host.hooks.fp32_hook` counts it, which is the hook the training
   checks use for that arm): the all-FP32 baseline, the per-parameter control scalars, one
   FP32 all-reduce of the bucket's FP32 slices, one window per low-bit route with its lines
   written and its readout lines read back; and the loss all-reduce once per step.

``tests/test_traffic_scale.py`` checks step 3 against a :class:`FabricHook` that aggregates
real buckets, and against a count by hand.

Besides the shipped profiles, two static ones with only the head on FP32 (everything else on
G-Binary or G-Ternary, from the first step) give the configuration the traffic figure of the
first paper (3.6 to 5.4% of FP32 with the head on FP32) was quoted for.

The same command then times the hooks on the same models and buckets with real workers
(:mod:`neuron_fabric.experiments.hook_cost`, minutes: our hooks and PyTorch's on the same
buckets; ``--no-hook-cost`` skips it).

Command line::

    python -m neuron_fabric.experiments.traffic_scale --out build/traffic [--steps 1000]
        [--workers 4] [--bucket-cap-mb MB] [--models NAME ...] [--hook-steps 3]
        [--lanes torch|golden] [--no-hook-cost]

Writes ``OUT/report.json``, ``OUT/report.md`` and ``OUT/traffic.png``, and the hook cost to
``OUT/hook_cost.json`` and ``OUT/hook_cost.md``.
"""

import argparse
import dataclasses
import json
import pathlib
import sys
import time

from . import hook_cost, scale_models
from ..golden.formats import Readout
from ..host import hooks as _hooks
from ..host import roles as _roles
from ..host import runtime as _runtime
from ..golden.validate import check_int, int_argument

__all__ = ["PAPER_DEVICE_SHARE", "HEAD_FP32_VARIANTS", "profiles", "count_step",
           "measure", "run", "markdown", "plot", "write_report", "main"]

#: The first paper's device-traffic range for low-bit backbones with the head on FP32.
PAPER_DEVICE_SHARE = (0.036, 0.054)
#: The layer-aware target of the training checks (docs/training.md).
LAYER_GBINARY_TARGET = 0.04

#: Static variants with only the head on FP32: the configuration of the paper's figure.
HEAD_FP32_VARIANTS = {"gbinary_head_fp32": "gbinary", "gternary_head_fp32": "gternary"}


def profiles():
    """Name to :class:`~neuron_fabric.host.runtime.Profile`: the shipped profiles, then the
    head-on-FP32 variants of the static ones."""
    out = {name: _runtime.load_profile(name) for name in _runtime.PROFILE_NAMES}
    for name, base in HEAD_FP32_VARIANTS.items():
        out[name] = out[base].replace(
            name=name, routes={_roles.HEAD: _runtime.FP32},
            description=f"{out[base].description.rstrip('.')}, except the head on FP32.")
    return out


def count_step(meter, buckets, routes, *, profile, caps, world_size, fp32_hook=False):
    """Count one step into ``meter`` (a :class:`~neuron_fabric.host.hooks.TrafficMeter`).

    ``buckets``: lists of ``(name, numel)``; ``routes``: parameter name to route;
    ``fp32_hook``: count as :func:`~neuron_fabric.host.hooks.fp32_hook` (whole buckets on FP32,
    no per-parameter statistics) instead of :class:`~neuron_fabric.host.hooks.FabricHook`.
    """
    for bucket in buckets:
        total = sum(numel for _, numel in bucket)
        meter.count_baseline(total)
        if fp32_hook:
            meter.count_fp32(total)
            continue
        meter.count_control(_hooks.CONTROL_VALUES_PER_PARAMETER * 8 * len(bucket))
        by_route = {route: 0 for route in _runtime.ROUTES}
        for name, numel in bucket:
            by_route[routes[name]] += numel
        if by_route[_runtime.FP32]:
            meter.count_fp32(by_route[_runtime.FP32])
        for route in _runtime.LOW_BIT_ROUTES:
            count = by_route[route]
            if not count:
                continue
            if route == _runtime.GBINARY:
                readout = profile.gbinary.device_readout
            else:
                readout = Readout.GATED
                if profile.gternary.stochastic:  # the shared maximum |g|
                    meter.count_control(8)
            meter.count_window(route, count, readout=readout, counter_bits=caps.counter_bits,
                               world_size=world_size)
    meter.count_control(8)  # the step's loss


def _scaled_add(meter, delta, times):
    for route, entry in delta.routes.items():
        for _ in range(times):
            meter.routes[route].add(entry)
    for _ in range(times):
        meter.baseline.add(delta.baseline)


def measure(model, profile, *, steps=1000, world_size=4, caps=None, bucket_cap_mb=None,
            buckets=None, roles=None):
    """Traffic of ``profile`` on ``model``: one step after the warm-up and the whole schedule
    of ``steps`` steps (warm-up included), as :meth:`TrafficMeter.summary` dicts.

    ``buckets`` and ``roles`` may be passed in to reuse them across profiles.
    """
    steps = check_int("steps", steps, low=1)
    world_size = check_int("world_size", world_size, low=1)
    caps = _runtime.DeviceCaps.from_params() if caps is None else caps
    roles = _roles.classify(model) if roles is None else roles
    first, later = (_hooks.ddp_buckets(model, bucket_cap_mb=bucket_cap_mb) if buckets is None
                    else buckets)
    policy = _runtime.RuntimePolicy(profile, roles=roles, world_size=world_size, caps=caps)
    # An all-FP32 profile runs on fp32_hook, as the training checks run their FP32 arm.
    fp32_hook = not profile.low_bit_routes

    def one(step):
        meter = _hooks.TrafficMeter(line_bits=caps.line_bits)
        count_step(meter, first if step == 0 else later, policy.routes(step), profile=profile,
                   caps=caps, world_size=world_size, fp32_hook=fp32_hook)
        return meter

    # Steps with the same layout and routes count the same; count each kind once.
    kinds = {}
    for step in range(steps):
        key = (step == 0, tuple(policy.routes(step).values()))
        if key not in kinds:
            kinds[key] = [one(step), 0]
        kinds[key][1] += 1
    schedule = _hooks.TrafficMeter(line_bits=caps.line_bits)
    for delta, times in kinds.values():
        _scaled_add(schedule, delta, times)
    steady_step = max(profile.warmup_steps, 1)
    return {"steady_step": steady_step, "steady": one(steady_step).summary(),
            "schedule": schedule.summary()}


def _role_elements(model, roles):
    out = {role: 0 for role in _roles.ROLES}
    for name, param in model.named_parameters():
        out[roles[name]] += param.numel()
    return out


def run(models=None, *, profile_set=None, steps=1000, world_size=4, caps=None,
        bucket_cap_mb=None, log=print):
    """Measure every profile on every model; returns the JSON-ready report.

    ``models``: name to ``torch.nn.Module`` (default: every model of
    :mod:`~neuron_fabric.experiments.scale_models`, built on ``meta``); ``profile_set``: name
    to Profile (default :func:`profiles`).
    """
    caps = _runtime.DeviceCaps.from_params() if caps is None else caps
    if models is None:
        models = {name: scale_models.build(name) for name in scale_models.MODELS}
    profile_set = profiles() if profile_set is None else profile_set
    report = {
        "steps": steps, "workers": world_size, "bucket_cap_mb": bucket_cap_mb,
        "caps": dataclasses.asdict(caps), "paper_device_share": list(PAPER_DEVICE_SHARE),
        "layer_gbinary_target": LAYER_GBINARY_TARGET,
        "profiles": {name: p.as_dict() for name, p in profile_set.items()},
        "models": {},
    }
    for model_name, model in models.items():
        started = time.perf_counter()
        roles = _roles.classify(model)
        buckets = _hooks.ddp_buckets(model, bucket_cap_mb=bucket_cap_mb)
        total = scale_models.count_parameters(model)
        entry = {
            "parameters": total,
            "published_parameters": scale_models.PUBLISHED_PARAMETERS.get(model_name),
            "head": _roles.find_head(model),
            "role_elements": _role_elements(model, roles),
            "roles": roles,
            "buckets": {"first_step": len(buckets[0]), "later_steps": len(buckets[1])},
            "profiles": {},
        }
        for profile_name, profile in profile_set.items():
            result = measure(model, profile, steps=steps, world_size=world_size, caps=caps,
                             buckets=buckets, roles=roles)
            entry["profiles"][profile_name] = {
                "warmup_steps": profile.warmup_steps,
                "device_share_steady": result["steady"]["device_share"],
                "collective_share_steady": result["steady"]["collective_share"],
                "device_share_schedule": result["schedule"]["device_share"],
                "collective_share_schedule": result["schedule"]["collective_share"],
                **result,
            }
        report["models"][model_name] = entry
        layer = entry["profiles"].get("layer_gbinary")
        note = (f", layer_gbinary {100 * layer['device_share_steady']:.2f}% of FP32 device "
                f"traffic" if layer else "")
        log(f"  {model_name}: {total:,} parameters, {len(buckets[1])} buckets, "
            f"{len(profile_set)} profiles{note} ({time.perf_counter() - started:.1f} s)")
    return report


def _pct(value):
    return "n/a" if value is None else f"{100 * value:.2f}%"


def _fp32_roles(entry, profile):
    """Roles the profile keeps on FP32 that the model has, with their share of elements."""
    return {role: elements / entry["parameters"] for role, elements in entry["role_elements"].items()
            if elements and profile["routes"][role] == _runtime.FP32}


def markdown(report):
    profile_names = list(report["profiles"])
    low, high = report["paper_device_share"]
    lines = ["# Traffic of the operating profiles at model scale", "",
             f"{report['workers']} workers, DDP buckets "
             f"{'default (1 MiB first, 25 MiB)' if report['bucket_cap_mb'] is None else str(report['bucket_cap_mb']) + ' MiB'}, "
             f"{report['caps']['line_bits']}-bit lines, {report['steps']} steps per schedule "
             f"(warm-up included); no health-monitor fallbacks. Each cell: one step after the "
             f"warm-up / the mean over the schedule, as a share of the all-FP32 run.", ""]
    header = "| model | " + " | ".join(profile_names) + " |"
    rule = "|---|" + "---:|" * len(profile_names)
    for title, key in (("Device traffic (lines written and read back)", "device_share"),
                       ("Collective bytes (sent and received, control included)",
                        "collective_share")):
        lines += [f"## {title}", "", header, rule]
        for model_name, entry in report["models"].items():
            cells = []
            for name in profile_names:
                p = entry["profiles"][name]
                steady, schedule = p[f"{key}_steady"], p[f"{key}_schedule"]
                # Equal to the shown precision: the warm-up and the first step change nothing.
                cells.append(_pct(steady) if _pct(steady) == _pct(schedule) else
                             f"{_pct(steady)} / {_pct(schedule)}")
            lines.append(f"| {model_name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Parameter roles", "",
              "| model | parameters | published | head module | "
              + " | ".join(_roles.ROLES) + " |",
              "|---|---:|---:|---|" + "---:|" * len(_roles.ROLES)]
    for model_name, entry in report["models"].items():
        published = entry["published_parameters"]
        shares = [_pct(entry["role_elements"][role] / entry["parameters"])
                  for role in _roles.ROLES]
        lines.append(f"| {model_name} | {entry['parameters']:,} | "
                     f"{'' if published is None else f'{published:,}'} | `{entry['head']}` | "
                     + " | ".join(shares) + " |")
    lines.append("")
    if "layer_gbinary" in report["profiles"]:
        target = report["layer_gbinary_target"]
        profile = report["profiles"]["layer_gbinary"]
        lines += [f"## Layer-aware G-Binary against the {100 * target:.0f}% target", "",
                  "| model | device traffic | at most the target | roles on FP32 (share of "
                  "parameters) |", "|---|---:|---|---|"]
        for model_name, entry in report["models"].items():
            share = entry["profiles"]["layer_gbinary"]["device_share_steady"]
            fp32 = ", ".join(f"{role} {100 * s:.2f}%" for role, s in
                             sorted(_fp32_roles(entry, profile).items(), key=lambda kv: -kv[1]))
            lines.append(f"| {model_name} | {_pct(share)} | {'yes' if share <= target else 'no'} "
                         f"| {fp32} |")
        lines.append("")
    lines += [f"The first paper quotes {100 * low:.1f} to {100 * high:.1f}% of the FP32 device "
              f"traffic with the head on FP32 and the rest low-bit (the `*_head_fp32` columns). "
              "Device traffic counts the cache lines each worker writes and reads back, FP32 "
              "values in whole 64-byte lines both ways; collective bytes are what each worker "
              "hands to and receives from torch.distributed, where the low-bit lines are "
              "all-gathered (every worker receives every worker's lines).", ""]
    return "\n".join(lines)


def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    percent = FuncFormatter(lambda value, _: f"{value:g}")
    names = [n for n in report["profiles"] if n != _runtime.FP32]  # FP32 is 100% by definition
    models = list(report["models"])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / max(len(names), 1)
    for ax, key, title in ((axes[0], "device_share_steady", "device traffic"),
                           (axes[1], "collective_share_steady", "collective bytes")):
        for k, name in enumerate(names):
            values = [100 * report["models"][m]["profiles"][name][key] for m in models]
            ax.bar([i + (k - (len(names) - 1) / 2) * width for i in range(len(models))], values,
                   width, label=name)
        if key.startswith("device"):
            low, high = report["paper_device_share"]
            ax.axhspan(100 * low, 100 * high, color="grey", alpha=0.25,
                       label="paper, head on FP32")
        ax.set_xticks(range(len(models)), models, rotation=20, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(percent)
        ax.yaxis.set_minor_formatter(percent)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_ylabel(f"{title}, % of FP32 (log scale)")
        ax.set_title(f"{title} per step after warm-up, {report['workers']} workers")
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(report, out):
    """Write ``report.json``, ``report.md`` and ``traffic.png`` under ``out``; returns the paths."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / "report.json", out / "report.md", out / "traffic.png")
    paths[0].write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    plot(report, paths[2])
    return paths


def _bucket_cap(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"bucket cap must be a positive number, not {text!r}")
    return value


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m neuron_fabric.experiments.traffic_scale",
        description="Count the device traffic and collective bytes of every operating profile "
                    "on full-size models, as the DDP hooks count them.")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/traffic"),
                        help="folder for report.json, report.md, traffic.png")
    parser.add_argument("--steps", type=int_argument("steps", low=1), default=1000,
                        help="steps in the schedule, warm-up included (default 1000)")
    parser.add_argument("--workers", type=int_argument("workers", low=1, high=64), default=4,
                        help="workers (default 4)")
    parser.add_argument("--bucket-cap-mb", type=_bucket_cap, default=None,
                        help="DDP bucket cap in MiB (default: DDP's own, 25 with a 1 MiB first)")
    parser.add_argument("--models", nargs="+", choices=scale_models.MODELS,
                        default=list(scale_models.MODELS), help="models (default: all)")
    parser.add_argument("--hook-steps", type=int_argument("hook steps", low=1), default=3,
                        help="timed steps per setting of the hook cost, after one warm-up "
                             "(default 3)")
    parser.add_argument("--lanes", choices=_hooks.LANES, default="torch",
                        help="lanes of our hooks in the hook cost: the torch twin (default) or "
                             "the golden model")
    parser.add_argument("--no-hook-cost", action="store_true",
                        help="count the traffic only; do not time the hooks with real workers")
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"traffic-scale: {len(args.models)} models, {len(profiles())} profiles, "
          f"{args.steps} steps, {args.workers} workers", flush=True)
    models = {name: scale_models.build(name) for name in args.models}
    report = run(models, steps=args.steps, world_size=args.workers,
                 bucket_cap_mb=args.bucket_cap_mb, log=lambda line: print(line, flush=True))
    report["seconds"] = round(time.perf_counter() - started, 1)
    paths = write_report(report, args.out)
    print(f"traffic-scale: traffic counted in {report['seconds']} s; wrote "
          f"{', '.join(str(p) for p in paths)}", flush=True)
    if not args.no_hook_cost:
        print(f"traffic-scale: hook cost, {args.workers} workers, {len(hook_cost.SETTINGS)} "
              f"settings, 1 warm-up and {args.hook_steps} timed steps each (minutes; "
              f"--no-hook-cost skips it)", flush=True)
        costs = hook_cost.run(models, world_size=args.workers, steps=args.hook_steps,
                              lanes=args.lanes, bucket_cap_mb=args.bucket_cap_mb,
                              log=lambda line: print(line, flush=True))
        paths = hook_cost.write_report(costs, args.out)
        print(f"traffic-scale: hook cost measured in {costs['seconds']} s; wrote "
              f"{', '.join(str(p) for p in paths)}")
        print(hook_cost.verdict(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
