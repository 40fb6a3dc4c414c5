"""Training checks with real ``torch.distributed`` workers: static low-bit against the runtime.

Every arm trains one workload of :mod:`neuron_fabric.experiments.workloads` with ``workers`` real
processes (gloo backend on the CPU, one thread each), ``DistributedDataParallel`` and a
communication hook of :mod:`neuron_fabric.host.hooks`. All arms of a workload start from the
same initialisation and see the same minibatches (same seed, same steps); only the route of
the gradients differs:

- ``fp32``: the FP32 all-reduce hook (bit-identical to DDP without a hook);
- static profiles: G-Binary or G-Ternary everywhere, layer-aware variants with the head,
  embeddings, norms and biases on FP32 (with and without error feedback);
- ``runtime``: the profile-guided policy (FP32 warm-up, layer-aware routing, health monitor
  with fallback and re-admission, capacity check).

Three groups of arms: ``digits`` (the digits CNN, shards drawn at random), ``char_lm`` (the
character language model) and ``hard`` (the digits CNN with label-sorted shards, two or three
classes per worker: the setting where static sign-majority aggregation collapses, because
every class is a minority that three of the four workers vote against).

Results go to ``OUT/report.json`` (everything, per arm and per step), ``OUT/report.md`` (the
table: final accuracy or loss, gap to FP32, traffic as a share of FP32, step time relative to
FP32, the targets, and the readout lines per slot of the default device) and
``OUT/loss_curves.png``.

Command line::

    python -m neuron_fabric.experiments.train_check --out build/train [--quick] [--workers 4]
        [--seed 0] [--only ARM ...]

The workers are started with ``torch.multiprocessing`` and meet through a ``file://`` store in
a temporary folder; nothing leaves the machine.
"""

import argparse
import dataclasses
import hashlib
import json
import math
import pathlib
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..host import hooks as _hooks
from ..host import roles as _roles
from ..host import runtime as _runtime
from . import workloads as _workloads
from .workers import launch, process_group
from ..golden.validate import check_int, int_argument
from ..golden.formats import READOUT_SPECS, Readout, readout_lines_per_slot, readout_route, route_lanes
from ..golden.params import FabricParams

__all__ = ["Arm", "ARMS", "QUICK", "TARGETS", "run", "main"]

# Model settings of the checks. The digits CNN is wider than the trace capture's so that the
# head, norms and biases (kept on FP32 by the layer-aware profiles) are under 1% of the
# elements, as in the networks the low-bit routes are meant for.
DIGITS = {"channels": (32, 128), "hidden": 128, "train_steps": 150, "batch": 32, "lr": 0.02}
CHAR_LM = {"train_steps": 200}
#: The harder setting where static low-bit collapses: the same digits CNN, but every worker
#: holds two or three classes only (label-sorted shards).
HARD = {**DIGITS, "train_steps": 150}

@dataclasses.dataclass(frozen=True, kw_only=True)
class Arm:
    """One training run: ``workload`` with its ``model`` overrides, gradients routed by
    ``profile`` (a profile name; ``changes`` are applied with :meth:`Profile.replace`).
    ``group`` collects the arms compared in one table; ``reference`` names the FP32 arm.
    ``inject_nan`` is ``(step, parameter name)``: that worker-0 gradient is made NaN once.
    ``shards``: ``"iid"`` keeps the workload's random shards; ``"by_label"`` (digits only)
    sorts the training images by label before cutting them, so that each worker sees two or
    three classes, as workers that hold different users' or sites' data do.
    ``hook``: ``"auto"`` registers :func:`hooks.fp32_hook` for the plain ``fp32`` profile and a
    :class:`hooks.FabricHook` driven by a :class:`runtime.RuntimePolicy` otherwise; ``"none"``
    leaves DDP's built-in all-reduce (``profile`` must be ``fp32``); ``"fabric"`` always uses
    the policy and the routing hook. ``bucket_cap_mb`` is passed to DDP (None: its default)."""

    name: str
    group: str
    workload: str
    model: dict
    profile: str
    label: str
    changes: dict = dataclasses.field(default_factory=dict)
    inject_nan: tuple | None = None
    shards: str = "iid"
    hook: str = "auto"
    bucket_cap_mb: float | None = None

    def __post_init__(self):
        if self.hook not in ("auto", "none", "fabric"):
            raise ValueError(f"hook must be 'auto', 'none' or 'fabric', not {self.hook!r}")
        if self.hook == "none" and (self.profile != "fp32" or self.changes):
            raise ValueError(f"hook='none' runs DDP's own FP32 all-reduce and needs the fp32 "
                             f"profile unchanged, not {self.profile!r} with {self.changes!r}")
        if self.shards not in ("iid", "by_label"):
            raise ValueError(f"shards must be 'iid' or 'by_label', not {self.shards!r}")
        if self.shards == "by_label" and self.workload != "digits_cnn":
            raise ValueError(f"shards='by_label' needs the digits_cnn workload, "
                             f"not {self.workload!r}")


def _arms():
    arms = []

    def add(group, workload, model, profile, label, *, suffix="", **kw):
        arms.append(Arm(name=f"{group}/{profile}{suffix}", group=group, workload=workload,
                        model=model, profile=profile, label=label, **kw))

    no_ef = {"gbinary": {"error_feedback": False}}
    for group, workload, model in (("digits", "digits_cnn", DIGITS),
                                   ("char_lm", "char_lm", CHAR_LM)):
        add(group, workload, model, "fp32", "FP32 all-reduce")
        add(group, workload, model, "gbinary", "G-Binary everywhere (static)")
        add(group, workload, model, "gternary", "G-Ternary everywhere (static)")
        add(group, workload, model, "layer_gbinary", "G-Binary backbone, rest FP32, no EF",
            changes=no_ef, suffix="-noef")
        if group == "digits":  # error feedback hurts under Adam (the language model)
            add(group, workload, model, "layer_gbinary", "G-Binary backbone, rest FP32, EF")
            add(group, workload, model, "layer_gternary", "G-Ternary backbone, rest FP32")
        add(group, workload, model, "runtime", "Runtime policy (profile-guided)")
    hard = {"shards": "by_label"}
    add("hard", "digits_cnn", HARD, "fp32", "FP32 all-reduce", **hard)
    add("hard", "digits_cnn", HARD, "gbinary", "G-Binary everywhere (static)", **hard)
    add("hard", "digits_cnn", HARD, "gbinary", "G-Binary everywhere + health monitor",
        suffix="-monitor", changes={"health": {"enabled": True}}, **hard)
    add("hard", "digits_cnn", HARD, "runtime", "Runtime policy (profile-guided)", **hard)
    return tuple(arms)


#: Every arm of the full check, in run order.
ARMS = _arms()

#: What ``--quick`` changes: fewer steps.
QUICK = {"train_steps": 40}

#: Targets checked in the report: (arm, metric, bound); the metric must be at most the bound.
TARGETS = (
    ("digits/layer_gbinary-noef", "accuracy_gap_points", 1.0),
    ("digits/layer_gbinary-noef", "device_share", 0.04),
    ("digits/layer_gbinary", "accuracy_gap_points", 1.0),
    ("digits/layer_gbinary", "device_share", 0.04),
    ("digits/gternary", "accuracy_gap_points", 0.5),
    ("digits/gternary", "device_share", 0.07),
    ("digits/layer_gternary", "accuracy_gap_points", 0.5),
    ("digits/layer_gternary", "device_share", 0.07),
    ("char_lm/runtime", "loss_gap_relative", 0.05),
    ("char_lm/layer_gbinary-noef", "loss_gap_relative", 0.05),
    ("hard/runtime", "accuracy_gap_points", 1.0),
)


# ---------------------------------------------------------------------------- one arm

def _train_arm(arm, *, rank, workers, seed, quick, eval_every, log):
    overrides = dict(arm.model)
    if quick:
        overrides.update(QUICK)
    data, model = _workloads._setup(arm.workload, workers=workers, seed=seed, overrides=overrides)
    if arm.shards == "by_label":
        _shard_by_label(data, workers)
    steps = data.config.train_steps
    ddp = DistributedDataParallel(model, **({} if arm.bucket_cap_mb is None
                                            else {"bucket_cap_mb": arm.bucket_cap_mb}))
    optimizer = data.optimizer(model)
    profile = _runtime.load_profile(arm.profile).replace(**arm.changes)
    caps = _runtime.DeviceCaps.from_params()
    roles = _roles.classify(model)
    binding_routes = {name: profile.routes[role] for name, role in roles.items()}
    policy, hook = None, None
    if arm.hook == "none":  # DDP's built-in reduction: the same bytes as the FP32 hook
        meter = _hooks.TrafficMeter(line_bits=caps.line_bits)
    elif arm.hook == "auto" and arm.profile == "fp32" and not arm.changes:
        meter = _hooks.TrafficMeter(line_bits=caps.line_bits)
        ddp.register_comm_hook(meter, _hooks.fp32_hook)
    else:
        policy = _runtime.RuntimePolicy(profile, roles=roles, world_size=workers, caps=caps)
        hook = _hooks.FabricHook(model, routes=policy.routes(0), regions=roles,
                                 gbinary=profile.gbinary, gternary=profile.gternary, caps=caps,
                                 seed=seed, agreement=profile.reads_agreement)
        hook.register(ddp)
        meter = hook.traffic
    params = dict(model.named_parameters())
    total_elements = sum(param.numel() for param in params.values())
    current = [0]
    if arm.inject_nan is not None and rank == 0:  # a fault on one worker, at one step
        at, name = arm.inject_nan
        params[name].register_hook(lambda grad: grad * float("nan") if current[0] == at else grad)

    losses, evals, route_log, times, skipped = [], [], [], [], []
    started = time.perf_counter()
    for step in range(steps):
        current[0] = step
        t0 = time.perf_counter()
        if policy is not None:
            routes = policy.routes(step)
            hook.set_routes(routes)
            route_log.append(sorted({f"{roles[n]}:{r}" for n, r in routes.items()}))
        optimizer.zero_grad(set_to_none=True)
        loss = data.loss(ddp, data.batch(rank))
        loss.backward()
        if hook is not None:
            global_loss, stats = hook.end_step(float(loss.detach()))
            events = policy.observe(step, loss=global_loss, stats=stats)
            if rank == 0:
                for event in events:
                    log(f"    step {step}: {event['region']} {event['event']} ({event['reason']})")
        else:
            if arm.hook == "none":  # what DDP's own all-reduce moved, counted here
                meter.count_baseline(total_elements)
                meter.count_fp32(total_elements)
            value = torch.tensor([float(loss.detach())], dtype=torch.float64)
            dist.all_reduce(value)
            meter.count_control(8)
            global_loss = float(value[0]) / workers
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()
                     if p.grad is not None)
        if finite:
            optimizer.step()
        else:
            skipped.append(step)
        times.append(time.perf_counter() - t0)
        losses.append(global_loss)
        if rank == 0 and ((step + 1) % eval_every == 0 or step + 1 == steps):
            metrics = data.evaluate(model)
            evals.append({"step": step + 1, **metrics})
            recent = np.mean(losses[-eval_every:])
            log(f"  [{arm.name}] step {step + 1:>4}/{steps}  loss {recent:.4f}"
                f"  {data.final_metric} {metrics[data.final_metric]:.4f}"
                f"  ({time.perf_counter() - started:.0f} s)")
    dist.barrier()
    if rank != 0:
        return None
    metrics = data.evaluate(model)
    digest = hashlib.sha256()
    for param in model.parameters():
        digest.update(param.detach().numpy().tobytes())
    summary = {}
    for name, role in roles.items():
        entry = summary.setdefault(role, {"route": binding_routes[name], "parameters": 0,
                                          "elements": 0})
        entry["parameters"] += 1
        entry["elements"] += params[name].numel()
    return {
        "name": arm.name, "group": arm.group, "label": arm.label, "workload": arm.workload,
        "config": dataclasses.asdict(data.config), "profile": profile.as_dict(),
        "steps": steps, "workers": workers, "seed": seed,
        "final_metric": data.final_metric, "metrics": metrics,
        "param_sha256": digest.hexdigest(),
        "losses": losses, "evals": evals, "skipped_steps": skipped,
        "events": policy.monitor.events if policy else [],
        "faults_seen": policy.monitor.faults_seen if policy else 0,
        "fault_kinds": policy.monitor.fault_kinds if policy else {},
        "lowbit_steps": sum(1 for r in route_log if any(not x.endswith(":fp32") for x in r)),
        "binding": summary,
        "traffic": meter.summary(),
        # The median resists the pauses of a shared machine and of worker 0's evaluations.
        "step_seconds": float(np.median(times[1:] if len(times) > 1 else times)),
        "wall_seconds": time.perf_counter() - started,
        "data": data.description,
    }


def _shard_by_label(data, workers):
    """Re-cut the digits training images into label-sorted shards (same images, same sizes)."""
    train = data.train_index.numpy()
    order = train[np.argsort(data.labels.numpy()[train], kind="stable")]
    data.shards = np.array_split(order, workers)
    data.queues = [np.empty(0, dtype=np.int64) for _ in range(workers)]
    data.description = {**data.description, "shards": "sorted by label",
                        "shard_labels": [sorted({int(v) for v in data.labels.numpy()[shard]})
                                         for shard in data.shards]}


def _worker(rank, workers, init_file, arm_dicts, seed, quick, eval_every, result_dir):
    def log(text):
        print(text, flush=True)

    with process_group(rank, workers, init_file, deterministic=True):
        for index, fields in enumerate(arm_dicts):
            inject = tuple(fields["inject_nan"]) if fields["inject_nan"] else None
            arm = Arm(**{**fields, "model": dict(fields["model"]), "inject_nan": inject})
            if rank == 0:
                log(f"arm {index + 1}/{len(arm_dicts)}: {arm.name}: {arm.label}")
            result = _train_arm(arm, rank=rank, workers=workers, seed=seed, quick=quick,
                                eval_every=eval_every, log=log)
            if rank == 0:
                path = pathlib.Path(result_dir) / f"{index:02d}.json"
                path.write_text(json.dumps(result))


# ---------------------------------------------------------------------------- report

def _summarize(results):
    """Per arm: the final metric, gaps to the group's FP32 arm, traffic and time shares."""
    references = {}
    for r in results:
        if r["profile"]["name"] == "fp32":
            references.setdefault(r["group"], r)
    rows = []
    for r in results:
        ref = references.get(r["group"])
        final = r["metrics"][r["final_metric"]]
        row = {"name": r["name"], "group": r["group"], "label": r["label"],
               "final_metric": r["final_metric"], "final": final,
               "device_share": r["traffic"]["device_share"],
               "collective_share": r["traffic"]["collective_share"],
               "fallbacks": sum(1 for e in r["events"] if e["event"] == "fallback"),
               "readmits": sum(1 for e in r["events"] if e["event"] == "readmit"),
               "skipped_steps": len(r["skipped_steps"])}
        if ref is not None:
            base = ref["metrics"][r["final_metric"]]
            if r["final_metric"].endswith("accuracy"):
                row["accuracy_gap_points"] = 100 * (base - final)
            else:
                row["loss_gap_relative"] = (final - base) / base
            row["step_time_relative"] = r["step_seconds"] / ref["step_seconds"]
        rows.append(row)
    return rows


def _check_targets(rows):
    by_name = {row["name"]: row for row in rows}
    out = []
    for name, metric, bound in TARGETS:
        row = by_name.get(name)
        value = None if row is None else row.get(metric)
        out.append({"arm": name, "metric": metric, "bound": bound,
                    "value": value, "met": None if value is None else bool(value <= bound)})
    return out


def _padded_lane_lines(readout, *, line_bits, counter_bits):
    """Lines per slot in the padded-lane format, the readout format the bit-planes replaced,
    kept here only for the comparison in the report: each lane's value (1-bit sign, 2-bit
    code, counter or sum) padded to 1, 2, 4, 8 or 16 bits and packed lane after lane."""
    value_bits = READOUT_SPECS[Readout(readout)].value_bits(counter_bits)
    lane_bits = next(w for w in (1, 2, 4, 8, 16) if value_bits <= w)
    return route_lanes(readout_route(readout), line_bits) * lane_bits // line_bits


def _readout_lines_table(params=None):
    """Readout lines per slot, padded-lane format against bit-planes, for ``params``
    (default: the default device, 512-bit lines and 16 workers)."""
    params = FabricParams() if params is None else params
    rows = []
    for readout in Readout:
        padded = _padded_lane_lines(readout, line_bits=params.line_bits,
                                    counter_bits=params.counter_bits)
        planes = readout_lines_per_slot(readout, counter_bits=params.counter_bits)
        rows.append({"readout": readout.name, "padded_lane_lines": padded,
                     "bit_plane_lines": planes, "saved_lines": padded - planes})
    return {"line_bits": params.line_bits, "max_workers": params.max_workers,
            "counter_bits": params.counter_bits, "rows": rows}


def _readout_lines_markdown(table):
    lines = [f"## Readout lines per slot ({table['line_bits']}-bit lines, "
             f"{table['max_workers']} workers, {table['counter_bits']}-bit counters)", "",
             "| readout | padded-lane format | bit-planes | saved |", "|---|---:|---:|---:|"]
    for row in table["rows"]:
        saved = row["saved_lines"]
        share = f" ({100 * saved / row['padded_lane_lines']:.0f}%)" if saved else ""
        lines.append(f"| {row['readout']} | {row['padded_lane_lines']} | "
                     f"{row['bit_plane_lines']} | {saved}{share} |")
    lines += ["", "Padded-lane format: the previous readout format, each lane's counter or sum "
              "padded to 4, 8 or 16 bits and packed lane after lane. Bit-planes: every line keeps "
              "each lane at its own bits, line k holding bit k of every counter (two bits of every "
              "sum for G-Ternary).", ""]
    return lines


def _fmt_share(value):
    return "n/a" if value is None else f"{100 * value:.2f}%"


def _markdown(report):
    lines = [f"# Training checks: {report['workers']} gloo workers, seed {report['seed']}"
             + (" (quick)" if report["quick"] else ""), ""]
    titles = {"digits": "Digits CNN (sklearn handwritten digits), test accuracy",
              "char_lm": "Character language model (stdlib source text), validation loss",
              "hard": "Harder setting: digits CNN with label-sorted shards "
                      "(2-3 classes per worker), test accuracy"}
    for group in dict.fromkeys(row["group"] for row in report["rows"]):
        lines += [f"## {titles.get(group, group)}", "",
                  "| arm | final | gap to FP32 | device traffic | collective bytes | step time | "
                  "region fallbacks / re-admissions |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for row in report["rows"]:
            if row["group"] != group:
                continue
            if row["final_metric"].endswith("accuracy"):
                final = f"{100 * row['final']:.2f}%"
                gap = row.get("accuracy_gap_points")
                gap = "n/a" if gap is None else f"{gap:+.2f} pt"
            else:
                final = f"{row['final']:.4f}"
                gap = row.get("loss_gap_relative")
                gap = "n/a" if gap is None else f"{100 * gap:+.2f}%"
            rel = row.get("step_time_relative")
            lines.append(f"| {row['label']} | {final} | {gap} | "
                         f"{_fmt_share(row['device_share'])} | "
                         f"{_fmt_share(row['collective_share'])} | "
                         f"{'n/a' if rel is None else f'{rel:.2f}x'} | "
                         f"{row['fallbacks']} / {row['readmits']} |")
        lines.append("")
    lines += _readout_lines_markdown(report["readout_lines"])
    lines += ["## Targets", "", "| arm | metric | value | bound | met |", "|---|---|---:|---:|---|"]
    for t in report["targets"]:
        points = t["metric"] == "accuracy_gap_points"
        value = ("n/a" if t["value"] is None else
                 f"{t['value']:.3f}" if points else f"{100 * t['value']:.2f}%")
        bound = f"{t['bound']:.1f}" if points else f"{100 * t['bound']:.0f}%"
        lines.append(f"| {t['arm']} | {t['metric']} | {value} | {bound} | "
                     f"{'n/a' if t['met'] is None else 'yes' if t['met'] else 'NO'} |")
    lines += ["", "Gap to FP32: accuracy points below FP32 (positive is worse) or relative loss "
              "above FP32. Device traffic: cache lines written and read back per worker over the "
              "lines an all-FP32 run would move. Collective bytes: bytes handed to and received "
              "from torch.distributed (the low-bit lines are all-gathered, so each worker "
              "receives every worker's lines) plus the control scalars, over the FP32 "
              "all-reduce's. Step time: median wall time per step relative to the FP32 arm (the "
              "low-bit routes run the golden model in NumPy on the CPU, so they are slower "
              "here; this is not a device measurement, and on a shared machine it varies by tens "
              "of percent between runs). Region fallbacks / re-admissions: health-monitor events, "
              "one per region (parameter role) moved.", ""]
    return "\n".join(lines)


def _plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(r["group"] for r in report["arms"]))
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
    for ax, group in zip(axes[0], groups):
        for r in report["arms"]:
            if r["group"] != group:
                continue
            losses = np.array(r["losses"], dtype=np.float64)
            smooth, ema = [], None
            for value in losses:
                ema = value if ema is None or not math.isfinite(ema) else 0.9 * ema + 0.1 * value
                smooth.append(ema)
            ax.plot(np.arange(1, len(smooth) + 1), smooth, label=r["label"], linewidth=1.2)
        ax.set_title(group)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (EMA 0.9)")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(out, *, arms=None, workers=4, seed=0, quick=False, only=None, eval_every=None,
        log=print):
    """Run ``arms`` (default :data:`ARMS`; with ``only``, those whose name or group it lists)
    and write ``report.json``, ``report.md`` and ``loss_curves.png`` into ``out``.

    ``quick`` shortens every arm to :data:`QUICK`; ``eval_every`` is the evaluation interval
    in steps (default 25, 10 when quick). Returns the report dict. Raises ``ValueError`` when
    nothing is selected.
    """
    workers = check_int("workers", workers, low=1, high=64)
    seed = check_int("seed", seed, low=0)
    arms = ARMS if arms is None else tuple(arms)
    for arm in arms:
        if not isinstance(arm, Arm):
            raise TypeError(f"arms must hold Arm objects, not {arm!r}")
    arms = [arm for arm in arms if only is None or arm.name in only or arm.group in only]
    if not arms:
        raise ValueError(f"only must name arms or groups of {[a.name for a in ARMS]}, "
                         f"not {only!r}")
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    eval_every = eval_every or (10 if quick else 25)
    started = time.perf_counter()
    log(f"train-check: {len(arms)} arms, {workers} gloo workers, seed {seed}"
        + (", quick" if quick else ""))
    with tempfile.TemporaryDirectory(prefix="nfab-results-") as result_dir:
        arm_dicts = [dataclasses.asdict(arm) for arm in arms]
        launch(_worker, workers=workers,
               args=(arm_dicts, seed, quick, eval_every, result_dir))
        results = [json.loads(path.read_text())
                   for path in sorted(pathlib.Path(result_dir).glob("*.json"))]
    rows = _summarize(results)
    report = {"workers": workers, "seed": seed, "quick": quick,
              "torch": torch.__version__, "python": sys.version.split()[0],
              "wall_seconds": time.perf_counter() - started,
              "rows": rows, "targets": _check_targets(rows),
              "readout_lines": _readout_lines_table(), "arms": results}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(_markdown(report))
    _plot(report, out / "loss_curves.png")
    log(f"train-check: done in {report['wall_seconds']:.0f} s; results in {out}/report.json, "
        f"{out}/report.md and {out}/loss_curves.png")
    return report


# ---------------------------------------------------------------------------- command line

def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m neuron_fabric.experiments.train_check",
        description="Train real workloads with gloo workers and DDP communication hooks: FP32, "
                    "static G-Binary/G-Ternary and the profile-guided runtime.")
    parser.add_argument("--out", default="build/train", help="output folder (default build/train)")
    parser.add_argument("--workers", type=int_argument("workers", low=1, high=64), default=4,
                        help="worker processes (default 4)")
    parser.add_argument("--seed", type=int_argument("seed", low=0), default=0,
                        help="seed of every arm (default 0)")
    parser.add_argument("--quick", action="store_true",
                        help=f"short runs ({QUICK['train_steps']} steps) to try the pipeline")
    names = list(dict.fromkeys([a.group for a in ARMS] + [a.name for a in ARMS]))
    parser.add_argument("--only", nargs="+", metavar="ARM", choices=names,
                        help="run only these arms or groups: " + ", ".join(names))
    args = parser.parse_args(argv)
    run(args.out, workers=args.workers, seed=args.seed, quick=args.quick, only=args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
