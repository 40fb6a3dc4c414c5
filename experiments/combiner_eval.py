"""How much write traffic the write-combining accumulator saves, on real gradients.

Two kinds of update streams go through the reference model
(:func:`neuron_fabric.golden.combiner.run`), and every run ends each step with a flush so
that nothing stays behind (the per-address sums are checked after it):

**Real gradient traces** (``<traces>/<workload>.npz``, written by ``make traces``). At each
replayed step every worker's gradient bucket is quantized to the block's integer format
(16-bit): one scale per parameter and step, shared by all workers so that their integers add
up, ``scale = max|g| / (2**15 - 1)`` over the workers, ``q = rint(g / scale)`` (round half to
even). The largest magnitude maps to full scale, so nothing saturates. The address of element
``j`` of the bucket is ``j``. Each worker writes its bucket in address order, one 64-byte line
(32 values) per write burst, and the lines of the workers interleave at the device either in
lock step (round robin) or at random (unsynchronized workers, drawn from a generator seeded
with 0); a worker-major order (each whole bucket in turn) is replayed once for contrast. By
default two captured steps per workload are replayed (the first and the last), which keeps
the run near a minute and a half on two cores; ``--steps`` takes more.

**The seed design's six test phases**, rebuilt in :func:`seed_stream` from the descriptions in
its slides, with the seed's parameters (threshold 50, 32 sets x 4 ways, MAX_UPDATES 255,
16-entry FIFO) and the same number of input transactions as its report (1448). It is
replayed with the final flush and without it: without a flush, entries still held at the end
are never written, which is how the seed's 2.99x was counted. The dual-threshold variant
(small threshold 4) is replayed lossless and lossy.

**Throughput of the hardware block.** The seed's phases and the first ``--rtl-updates``
updates of each workload's lock-step stream (one step, 32 x 4 buffer, no threshold) run
through :class:`neuron_fabric.hw.combiner.WriteCombiner` in Amaranth's simulator, the source
offering an update every cycle and downstream always ready. The rate is the updates
accepted per cycle from the first acceptance to the last; the block's writes, after a final
flush, are checked against the model's. An update of the set of the update taken just before
it waits a cycle, so streams that hit one set back to back (the seed's phases) go below one
update a cycle; streams that walk the addresses do not.

Command line::

    python -m neuron_fabric.experiments.combiner_eval --traces build/traces --out build/combiner \\
        [--steps N] [--rtl-updates N] [--quick]

writes ``report.json``, ``report.md`` and ``reduction.png`` into ``--out``.
"""

import argparse
import dataclasses
import json
import pathlib
import sys
import time

import numpy as np

from ..golden import combiner
from . import traces as traces_module
from ..golden.validate import check_int, int_argument

__all__ = ["SEED_REPORTED", "SEED_PARAMS", "seed_stream", "quantize", "trace_stream",
           "replay", "rtl_rate", "evaluate", "main"]

#: The seed design's published figures: input and output transactions and its ratio.
SEED_REPORTED = {"updates": 1448, "writes": 484, "bytes_in": 5792, "bytes_out": 1936,
                 "reduction": 2.99}

#: The seed design's configuration, as far as its slides give it.
SEED_PARAMS = dict(sets=32, ways=4, threshold=50, max_updates=255, fifo_depth=16)

#: Buffer shapes (sets, ways) and thresholds of the sweep on real traces.
BUFFERS = ((8, 2), (32, 4), (128, 4), (256, 8), (512, 8))
THRESHOLDS = (2048, 8192, None)
QUICK_BUFFERS = ((8, 2), (32, 4), (128, 4))
QUICK_THRESHOLDS = (2048, None)

#: Updates of each workload's stream that the hardware block's throughput is measured on.
RTL_UPDATES = 4096
QUICK_RTL_UPDATES = 512

#: The single-cycle block's rate, one update a cycle, shown beside the pipelined block's.
SINGLE_CYCLE_RATE = 1.0


def seed_stream():
    """The six test phases of the seed design as one update stream.

    Returns ``(addr, value, phase)``: ``int64`` arrays, ``phase`` numbering each update's
    phase 1 to 6. Addresses are word addresses, so with 32 sets the set is ``addr % 32``. The
    slides give the phases' intent and some values (4, 100, threshold 50, 260 updates); the
    rest (round counts, the values of phases 3 to 5) are chosen here and documented, with the
    total matched to the seed's 1448 input transactions:

    1. pure accumulation: value 4 to 32 addresses (one per set), 20 rounds (640);
    2. outlier bypass: value 100 to 67 fresh addresses (67);
    3. address conflict: 6 tags in each of sets 0 to 3, value 3, 4 rounds (96);
    4. accumulation to the threshold: value 5 to 16 addresses, 16 rounds (256);
    5. full capacity: value 2 to 4 tags in all 32 sets, then a fifth tag in set 0 (129);
    6. MAX_UPDATES: 260 updates to one address, 10 then +1 and -1 alternately, so that the
       update counter, not the threshold, ends the accumulation (260; with a constant value
       of 1 the threshold of 50 would be reached after 50 updates).
    """
    phases = []
    phases.append((np.tile(np.arange(32), 20), np.full(640, 4)))
    phases.append((0x1000 + np.arange(67), np.full(67, 100)))
    conflict = (np.arange(4)[None, :] + 32 * (1 + np.arange(6))[:, None]).ravel()
    phases.append((np.tile(0x2000 + conflict, 4), np.full(96, 3)))
    phases.append((np.tile(0x3000 + np.arange(16), 16), np.full(256, 5)))
    fill = (np.arange(32)[None, :] + 32 * np.arange(4)[:, None]).ravel()
    phases.append((np.concatenate([0x4000 + fill, [0x4000 + 32 * 4]]), np.full(129, 2)))
    hammer = np.where(np.arange(260) % 2 == 1, 1, -1)
    hammer[0] = 10
    phases.append((np.full(260, 0x5000), hammer))
    addr = np.concatenate([p[0] for p in phases]).astype(np.int64)
    value = np.concatenate([p[1] for p in phases]).astype(np.int64)
    phase = np.concatenate([np.full(len(p[0]), k + 1) for k, p in enumerate(phases)])
    return addr, value, phase


def quantize(grads, *, bounds, value_width):
    """Quantize ``grads`` (``workers x elements``, float32) to signed integers.

    ``bounds`` are the parameter boundaries in the bucket (``[0, n1, n1+n2, ...]``); each
    parameter gets ``scale = max|g| / (2**(value_width-1) - 1)`` over all workers (1 for an
    all-zero parameter) and ``q = rint(g / scale)``, ``int64``. NaN is refused.
    """
    grads = np.asarray(grads, dtype=np.float32)
    if np.isnan(grads).any():
        raise ValueError("grads must not contain NaN; a NaN gradient is a training fault")
    full = (1 << (value_width - 1)) - 1
    out = np.empty(grads.shape, dtype=np.int64)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        part = grads[:, start:stop].astype(np.float64)
        peak = np.abs(part).max() if part.size else 0.0
        scale = peak / full if peak > 0 and np.isfinite(peak) else 1.0
        out[:, start:stop] = np.clip(np.rint(part / scale), -full, full)
    return out


ORDERS = ("lockstep", "random", "worker-major")


def trace_stream(q, *, chunk, order="lockstep", rng=None):
    """Merge the workers' quantized buckets ``q`` (``workers x elements``) into one stream.

    Each worker writes its bucket in address order, ``chunk`` elements (one line) per write
    burst. ``order`` says how the workers' lines interleave at the device:

    ``"lockstep"``
        Round robin: every worker's first line, then every worker's second line, ...
    ``"random"``
        Unsynchronized workers: each next line comes from a worker drawn at random among
        those with lines left (a uniformly random merge of the four line sequences, drawn
        from ``rng``), so workers drift apart by about the square root of the line count.
    ``"worker-major"``
        Each worker's whole bucket in turn.

    Returns ``(addr, value)``, ``int64``; the address of element ``j`` is ``j``.
    """
    workers, n = q.shape
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    if order == "worker-major":
        return np.tile(np.arange(n, dtype=np.int64), workers), q.ravel().copy()
    n_lines = -(-n // chunk)
    pad = n_lines * chunk - n
    addr = np.pad(np.arange(n, dtype=np.int64), (0, pad), constant_values=-1)
    addr = addr.reshape(n_lines, chunk)
    lines = np.pad(q, ((0, 0), (0, pad))).reshape(workers, n_lines, chunk)
    if order == "lockstep":
        who = np.tile(np.arange(workers), n_lines)
        line = np.repeat(np.arange(n_lines), workers)
    else:
        who = rng.permutation(np.repeat(np.arange(workers), n_lines))
        line = np.empty_like(who)
        for worker in range(workers):
            line[who == worker] = np.arange(n_lines)
    addr = addr[line].ravel()
    value = lines[who, line].ravel()
    keep = addr >= 0
    return addr[keep], value[keep]


def _trace_updates(trace, *, steps, value_width, chunk, order, seed=0):
    bounds = np.cumsum([0] + [p.numel for p in trace.params])
    rng = np.random.default_rng(seed)
    addrs, values, flushes = [], [], []
    total = 0
    for step_index in steps:
        grads = np.stack([trace.bucket(step_index, k) for k in range(trace.workers)])
        q = quantize(grads, bounds=bounds, value_width=value_width)
        addr, value = trace_stream(q, chunk=chunk, order=order, rng=rng)
        addrs.append(addr)
        values.append(value)
        total += addr.size
        flushes.append(total)
    return np.concatenate(addrs), np.concatenate(values), flushes


def replay(name, params, addr, value, *, flush_after=(), final_flush=True, extra=None):
    """Run one stream and return its report row (a dict)."""
    started = time.perf_counter()
    result = combiner.run(params, addr, value, flush_after=flush_after, final_flush=final_flush)
    stats = result.stats
    row = {
        "stream": name,
        "sets": params.sets, "ways": params.ways, "entries": params.entries,
        "threshold": params.threshold, "small_threshold": params.small_threshold,
        "lossy": params.lossy, "max_updates": params.max_updates,
        "value_width": params.value_width, "acc_width": params.acc_width,
        "final_flush": final_flush,
        "updates": result.transactions_in, "writes": result.transactions_out,
        "bytes_in": result.bytes_in, "bytes_out": result.bytes_out,
        "reduction": result.reduction, "byte_reduction": result.byte_reduction,
        "held_at_end": stats["held"],
        "zero_updates": int(np.count_nonzero(np.asarray(value) == 0)),
        "causes": {c.name.lower(): stats[c.name.lower()] for c in combiner.Cause},
        "freed_zero": stats["freed_zero"], "absorbed_zero": stats["absorbed_zero"],
        "dropped": stats["dropped"], "dropped_sum": stats["dropped_sum"],
        "overflow_flag": stats["overflow_flag"],
        "seconds": round(time.perf_counter() - started, 2),
    }
    if final_flush and not params.lossy:
        combiner.check_sums(addr, value, result.addr, result.delta)
        row["sums_checked"] = True
    row.update(extra or {})
    return row


def rtl_rate(params, addr, value):
    """Run ``addr``/``value`` through the hardware block in Amaranth's simulator.

    The source offers an update every cycle and downstream is always ready; after the last
    update the block is flushed. Returns a dict: ``updates``, ``cycles`` (from the first
    acceptance to the last, both counted), ``updates_per_cycle`` and ``paced_cycles`` (the
    cycles the block's admission rule predicts, :func:`~..hw.combiner.paced_cycles`). Raises
    ``AssertionError`` when the block's writes differ from the model's.
    """
    from amaranth.sim import Simulator

    from ..hw.combiner import WriteCombiner, paced_cycles

    dut = WriteCombiner(**dataclasses.asdict(params))
    addr_list = [int(a) for a in addr]
    value_list = [int(v) for v in value]
    n = len(addr_list)
    accepted, writes = [], []

    async def bench(ctx):
        ctx.set(dut.o_wb.ready, 1)
        i = 0
        flushed = False
        for cycle in range(4 * n + 20 * params.entries + 1000):
            if i < n:
                ctx.set(dut.i_upd.valid, 1)
                ctx.set(dut.i_upd.payload, {"addr": addr_list[i], "value": value_list[i]})
            else:
                ctx.set(dut.i_upd.valid, 0)
                ctx.set(dut.i_flush, not flushed)
                if not flushed and not ctx.get(dut.o_flushing):
                    flushed = True
                elif flushed and ctx.get(dut.o_idle):
                    return
            if i < n and ctx.get(dut.i_upd.ready):
                accepted.append(cycle)
                i += 1
            if ctx.get(dut.o_wb.valid):
                payload = ctx.get(dut.o_wb.payload)
                writes.append((int(payload.addr), int(payload.delta)))
            await ctx.tick()
        raise AssertionError(f"the block did not finish: {i} of {n} updates accepted")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    expected = combiner.run(params, addr, value)
    want = list(zip(expected.addr.tolist(), expected.delta.tolist()))
    if writes != want:
        first = next((k for k, (a, b) in enumerate(zip(writes, want)) if a != b),
                     min(len(writes), len(want)))
        raise AssertionError(f"the block's write {first} differs from the model's "
                             f"({len(writes)} writes, model {len(want)})")
    cycles = accepted[-1] - accepted[0] + 1
    return {"updates": n, "cycles": cycles, "updates_per_cycle": n / cycles,
            "paced_cycles": paced_cycles(addr_list, params.sets)[-1] + 1}


def _missing(traces_dir):
    missing = []
    for workload in traces_module.WORKLOADS:
        for suffix in (".npz", ".json"):
            path = traces_dir / f"{workload}{suffix}"
            if not path.is_file():
                missing.append(str(path))
    return missing


def evaluate(traces_dir, *, steps=2, quick=False, rtl_updates=None, log=print):
    """Run the whole evaluation and return the report (a dict with ``rows`` and
    ``throughput``).

    ``steps`` captured steps are replayed per workload, spread evenly from the first to the
    last; ``quick`` takes a smaller sweep (for tests). ``rtl_updates`` updates of each
    workload's stream go through the hardware block (default :data:`RTL_UPDATES`, or
    :data:`QUICK_RTL_UPDATES` with ``quick``; 0 for none). Raises ``FileNotFoundError`` naming
    the missing trace files and the command that writes them.
    """
    traces_dir = pathlib.Path(traces_dir)
    missing = _missing(traces_dir)
    if missing:
        raise FileNotFoundError(
            f"the evaluation needs the real gradient traces, and {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing; write them with `make traces` "
            f"(or `python -m neuron_fabric.experiments.traces capture --out {traces_dir}`)")
    steps = check_int("steps", steps, low=1)
    if rtl_updates is None:
        rtl_updates = QUICK_RTL_UPDATES if quick else RTL_UPDATES
    rtl_updates = check_int("rtl_updates", rtl_updates, low=0)
    buffers = QUICK_BUFFERS if quick else BUFFERS
    thresholds = QUICK_THRESHOLDS if quick else THRESHOLDS
    value_width = 16
    chunk = 512 // value_width   # one 64-byte line of int16 per worker turn
    rows = []

    addr, value, _phase = seed_stream()
    seed_params = combiner.CombinerParams(**SEED_PARAMS)
    for final in (True, False):
        rows.append(replay("seed phases", seed_params, addr, value, final_flush=final))
        log(f"combiner-eval: seed phases (final flush {final}): "
            f"{rows[-1]['reduction']:.2f}x")
    dual = combiner.CombinerParams(**SEED_PARAMS, small_threshold=4)
    rows.append(replay("seed phases", dual, addr, value))
    lossy = combiner.CombinerParams(**SEED_PARAMS, small_threshold=4, lossy=True)
    rows.append(replay("seed phases", lossy, addr, value))
    throughput = []
    if rtl_updates:
        throughput.append({"stream": "seed phases", "order": "as built", **SEED_PARAMS,
                           **rtl_rate(seed_params, addr, value)})
        log(f"combiner-eval: hardware block on the seed phases: "
            f"{throughput[-1]['updates_per_cycle']:.3f} updates per cycle")

    workloads = {}
    for workload in traces_module.WORKLOADS:
        trace = traces_module.load(traces_dir / workload)
        n = len(trace.steps)
        chosen = sorted({round(k * (n - 1) / max(steps - 1, 1)) for k in range(min(steps, n))})
        workloads[workload] = {"steps": [trace.steps[k] for k in chosen],
                               "workers": trace.workers,
                               "elements": sum(p.numel for p in trace.params)}
        for order, order_buffers in (("lockstep", buffers[:2]), ("random", buffers[1:])):
            addr, value, flushes = _trace_updates(trace, steps=chosen, value_width=value_width,
                                                  chunk=chunk, order=order)
            workloads[workload]["updates"] = int(addr.size)
            extra = {"order": order, "steps": workloads[workload]["steps"]}
            if rtl_updates and order == "lockstep":
                params = combiner.CombinerParams(sets=32, ways=4, threshold=None)
                head = slice(0, min(rtl_updates, flushes[0]))
                throughput.append({"stream": workload, "order": order, "sets": 32, "ways": 4,
                                   "threshold": None,
                                   **rtl_rate(params, addr[head], value[head])})
                log(f"combiner-eval: hardware block on {workload}, first "
                    f"{throughput[-1]['updates']} updates: "
                    f"{throughput[-1]['updates_per_cycle']:.3f} updates per cycle")
            for sets, ways in order_buffers:
                for threshold in thresholds:
                    params = combiner.CombinerParams(sets=sets, ways=ways, threshold=threshold)
                    rows.append(replay(workload, params, addr, value,
                                       flush_after=flushes[:-1], extra=extra))
                    log(f"combiner-eval: {workload}, {order}: {sets}x{ways}, threshold "
                        f"{threshold}: {rows[-1]['reduction']:.2f}x ({rows[-1]['seconds']} s)")
            if not quick and order == "random":
                params = combiner.CombinerParams(sets=512, ways=8, threshold=None,
                                                 acc_width=24)
                rows.append(replay(workload, params, addr, value, flush_after=flushes[:-1],
                                   extra=extra))
        if not quick:
            addr, value, flushes = _trace_updates(trace, steps=chosen[:1],
                                                  value_width=value_width, chunk=chunk,
                                                  order="worker-major")
            params = combiner.CombinerParams(sets=512, ways=8, threshold=8192)
            rows.append(replay(workload, params, addr, value, extra={
                "order": "worker-major", "steps": [trace.steps[chosen[0]]]}))
            log(f"combiner-eval: {workload}, worker-major: {rows[-1]['reduction']:.2f}x")
    return {"seed_reported": SEED_REPORTED, "seed_params": SEED_PARAMS,
            "quantization": "per parameter and step, scale = max|g| over the workers / "
                            "(2**15 - 1), q = rint(g / scale), int16",
            "workloads": workloads, "rows": rows, "throughput": throughput,
            "single_cycle_rate": SINGLE_CYCLE_RATE}


def _label(row):
    t = "off" if row["threshold"] is None else row["threshold"]
    extra = ""
    if row["small_threshold"] is not None:
        extra = f", small {row['small_threshold']}{' lossy' if row['lossy'] else ''}"
    if row["acc_width"] != row["value_width"]:
        extra += f", acc {row['acc_width']} bit"
    if not row["final_flush"]:
        extra += ", no final flush"
    return f"{row['sets']}x{row['ways']}", f"{t}{extra}"


def markdown(report):
    """The report as a Markdown table."""
    lines = [
        "# Write-combining accumulator: traffic on real gradients",
        "",
        f"Seed design's reported figure: {SEED_REPORTED['updates']} transactions in, "
        f"{SEED_REPORTED['writes']} out, {SEED_REPORTED['reduction']}x (no flush at the end, "
        f"inputs dropped when its FIFO is full).",
        "",
        f"Quantization: {report['quantization']}. Each update is 6 bytes (32-bit address, "
        "16-bit value); each write 6 bytes (16-bit delta), 7 with a 24-bit accumulator.",
        "",
        "Every run flushes at the end of each step and its per-address sums are checked "
        "(except the seed row without a final flush, whose held entries are never written, and "
        "the lossy row, which drops tiny misses). With four workers a step sends four updates "
        "per address, so a reduction above 4x comes from updates that need no write at all: "
        "values that quantize to 0 and sums that cancel to 0.",
        "",
        "| stream | order | buffer | threshold / variant | updates in | writes out | bytes in | "
        "bytes out | reduction (tx) | reduction (bytes) | held at end | dropped | "
        "zero updates | overflow writes |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        buffer, variant = _label(row)
        lines.append(
            f"| {row['stream']} | {row.get('order', 'as built')} | {buffer} | {variant} | "
            f"{row['updates']:,} | "
            f"{row['writes']:,} | {row['bytes_in']:,} | {row['bytes_out']:,} | "
            f"{row['reduction']:.2f}x | {row['byte_reduction']:.2f}x | {row['held_at_end']} | "
            f"{row['dropped']} | {row['zero_updates']:,} | {row['causes']['overflow']} |")
    if report.get("throughput"):
        lines += ["", "Throughput of the hardware block (Amaranth's simulator, an update offered "
                  "every cycle, downstream always ready; its writes checked against the "
                  "model's):", "",
                  "| stream | order | buffer | threshold | updates | cycles | updates per cycle "
                  "| single-cycle block |", "|---|---|---|---|---:|---:|---:|---:|"]
        for t in report["throughput"]:
            threshold = "off" if t["threshold"] is None else t["threshold"]
            lines.append(f"| {t['stream']} | {t['order']} | {t['sets']}x{t['ways']} | "
                         f"{threshold} | {t['updates']:,} | {t['cycles']:,} | "
                         f"{t['updates_per_cycle']:.3f} | {report['single_cycle_rate']:.1f} |")
    lines += ["", "Workloads replayed:", ""]
    for name, info in report["workloads"].items():
        lines.append(f"- {name}: {info['workers']} workers, {info['elements']:,} elements, "
                     f"steps {info['steps']}, {info['updates']:,} updates")
    lines.append("")
    return "\n".join(lines)


def plot(report, path):
    """Reduction against buffer entries (random worker order), one panel per workload, one
    line per threshold, with the seed's reported figure for reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["workloads"])
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        rows = [r for r in report["rows"] if r["stream"] == name
                and r.get("order") == "random" and r["acc_width"] == r["value_width"]]
        for threshold in sorted({r["threshold"] for r in rows}, key=lambda t: t or 1 << 30):
            pick = sorted((r for r in rows if r["threshold"] == threshold),
                          key=lambda r: r["entries"])
            ax.plot([r["entries"] for r in pick], [r["reduction"] for r in pick], marker="o",
                    label=f"threshold {threshold if threshold else 'off'}")
        ax.axhline(SEED_REPORTED["reduction"], color="grey", linestyle="--",
                   label="seed reported 2.99x")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("buffer entries (sets x ways)")
        ax.set_ylabel("transactions in / out")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m neuron_fabric.experiments.combiner_eval",
        description="Replay real gradient traces and the seed design's test phases through "
                    "the write-combining accumulator model and report the traffic saved.")
    parser.add_argument("--traces", type=pathlib.Path, default=pathlib.Path("build/traces"),
                        help="folder with the captured traces (default build/traces)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/combiner"),
                        help="folder for report.json, report.md, reduction.png")
    parser.add_argument("--steps", type=int_argument("steps", low=1), default=2,
                        help="captured steps replayed per workload (default 2: first, last)")
    parser.add_argument("--rtl-updates", type=int, default=None,
                        help=f"updates of each workload's stream run through the hardware block "
                             f"for its throughput (default {RTL_UPDATES}, {QUICK_RTL_UPDATES} "
                             f"with --quick; 0 for none)")
    parser.add_argument("--quick", action="store_true", help="a smaller sweep")
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (2 for bad arguments or no traces)."""
    parser = _parser()
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        report = evaluate(args.traces, steps=args.steps, quick=args.quick,
                          rtl_updates=args.rtl_updates,
                          log=lambda line: print(line, flush=True))
    except FileNotFoundError as error:
        print(f"combiner-eval: error: {error}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    report["seconds"] = round(time.perf_counter() - started, 1)
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n",
                                          encoding="utf-8")
    (args.out / "report.md").write_text(markdown(report), encoding="utf-8")
    plot(report, args.out / "reduction.png")
    print(f"combiner-eval: {len(report['rows'])} runs in {report['seconds']} s; wrote "
          f"{args.out / 'report.json'}, {args.out / 'report.md'}, {args.out / 'reduction.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
