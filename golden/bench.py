"""Golden-model throughput, measured against a plain memory copy of the same FP32 data.

``python -m neuron_fabric.golden.bench --out build/bench`` times, in one run and on one core
(NumPy runs these single-threaded): a copy of an FP32 gradient, G-Binary and G-Ternary
encoding of it, the aggregation of 8 workers' lines, the majority decode and the gate. Each
figure is the median of several repeats; encoders are reported as a share of the copy's
bandwidth (same input bytes), aggregation and decode in lanes per second (output lanes;
aggregation also in votes, lanes times workers). Results go to ``golden.json`` and
``golden.md`` in the output folder.
"""

import argparse
import json
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

from . import gbinary, gternary

WORKERS = 8
MAX_WORKERS = 16


def _median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(*, elements=1 << 24, repeats=7, seed=0, progress=print):
    """Measure and return the results as a dict (see the module docstring)."""
    rng = np.random.default_rng(seed)
    grad = rng.standard_normal(elements, dtype=np.float32)
    target = np.empty_like(grad)
    results = {"elements": elements, "repeats": repeats, "workers": WORKERS, "seed": seed,
               "numpy": np.__version__, "python": platform.python_version(),
               "machine": platform.machine(), "timings_s": {}}
    t = results["timings_s"]

    progress(f"bench: {elements:,} FP32 elements ({4 * elements / 2**20:.0f} MiB), "
             f"median of {repeats}")
    t["copy"] = _median_seconds(lambda: np.copyto(target, grad), repeats)
    progress(f"  copy                {4 * elements / t['copy'] / 1e9:6.2f} GB/s")
    t["gbinary_encode"] = _median_seconds(lambda: gbinary.encode(grad), repeats)
    t["gternary_encode"] = _median_seconds(lambda: gternary.encode(grad, ratio=0.5), repeats)
    t["gternary_encode_stochastic"] = _median_seconds(
        lambda: gternary.encode(grad, ratio=0.0, rng=np.random.default_rng(seed)), repeats)

    # Eight workers' lines from independent gradients: encoding is not part of these timings.
    binary = np.stack([gbinary.encode(rng.standard_normal(elements, dtype=np.float32))
                       for _ in range(WORKERS)])
    ternary = np.stack([gternary.encode(rng.standard_normal(elements, dtype=np.float32), ratio=0.5)
                        for _ in range(WORKERS)])
    progress("  worker lines ready; timing aggregation")
    counts = gbinary.aggregate(binary, max_workers=MAX_WORKERS)
    sums = gternary.aggregate(ternary, max_workers=MAX_WORKERS)
    t["gbinary_aggregate"] = _median_seconds(
        lambda: gbinary.aggregate(binary, max_workers=MAX_WORKERS), repeats)
    t["gbinary_majority"] = _median_seconds(
        lambda: gbinary.majority(counts, num_workers=WORKERS), repeats)
    t["gternary_aggregate"] = _median_seconds(
        lambda: gternary.aggregate(ternary, max_workers=MAX_WORKERS), repeats)
    t["gternary_gate"] = _median_seconds(lambda: gternary.gate(sums, gate=2), repeats)

    lanes_binary = counts.size
    lanes_ternary = sums.size
    results["copy_gb_per_s"] = 4 * elements / t["copy"] / 1e9
    results["encode_share_of_copy"] = {
        name: t["copy"] / t[key] for name, key in (
            ("gbinary", "gbinary_encode"), ("gternary", "gternary_encode"),
            ("gternary_stochastic", "gternary_encode_stochastic"))}
    results["lanes_per_s"] = {
        "gbinary_aggregate": lanes_binary / t["gbinary_aggregate"],
        "gbinary_majority": lanes_binary / t["gbinary_majority"],
        "gternary_aggregate": lanes_ternary / t["gternary_aggregate"],
        "gternary_gate": lanes_ternary / t["gternary_gate"],
    }
    results["votes_per_s"] = {
        "gbinary_aggregate": WORKERS * lanes_binary / t["gbinary_aggregate"],
        "gternary_aggregate": WORKERS * lanes_ternary / t["gternary_aggregate"],
    }
    results["targets"] = {
        "encode_share_of_copy": 0.5,
        "aggregate_and_decode_lanes_per_s": 1e9,
    }
    return results


def to_markdown(results):
    """The results as a Markdown table, with the targets beside them."""
    share = results["encode_share_of_copy"]
    lanes = results["lanes_per_s"]
    votes = results["votes_per_s"]
    mark = lambda ok: "meets" if ok else "**below**"
    rows = [
        "| Operation | Throughput | Relative to copy | Target |",
        "|---|---|---|---|",
        f"| FP32 copy | {results['copy_gb_per_s']:.2f} GB/s | 1.00 | |",
    ]
    for name, label in (("gbinary", "G-Binary encode"), ("gternary", "G-Ternary encode"),
                        ("gternary_stochastic", "G-Ternary encode, stochastic")):
        gbps = share[name] * results["copy_gb_per_s"]
        target = f">= 0.50 ({mark(share[name] >= 0.5)})" if name != "gternary_stochastic" else ""
        rows.append(f"| {label} | {gbps:.2f} GB/s of FP32 in | {share[name]:.2f} | {target} |")
    for key, label in (("gbinary_aggregate", f"G-Binary aggregate, {WORKERS} workers"),
                       ("gbinary_majority", "G-Binary majority decode"),
                       ("gternary_aggregate", f"G-Ternary aggregate, {WORKERS} workers"),
                       ("gternary_gate", "G-Ternary gate")):
        extra = f" ({votes[key] / 1e9:.2f} G votes/s)" if key in votes else ""
        target = (f">= 1 G lanes/s ({mark(lanes[key] >= 1e9)})"
                  if key in ("gbinary_aggregate", "gbinary_majority") else "")
        rows.append(f"| {label} | {lanes[key] / 1e9:.2f} G lanes/s{extra} | | {target} |")
    head = (f"Golden-model throughput: {results['elements']:,} elements, median of "
            f"{results['repeats']}, one core, NumPy {results['numpy']}.\n\n")
    return head + "\n".join(rows) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.golden.bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/bench"),
                        help="output folder (default: build/bench)")
    parser.add_argument("--elements", type=int, default=1 << 24,
                        help="FP32 elements per gradient (default: 2**24)")
    parser.add_argument("--repeats", type=int, default=7, help="repeats per timing (default: 7)")
    args = parser.parse_args(argv)
    if args.elements < 4096:
        parser.error(f"--elements must be at least 4096, not {args.elements}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    results = run(elements=args.elements, repeats=args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "golden.json").write_text(json.dumps(results, indent=2) + "\n")
    table = to_markdown(results)
    (args.out / "golden.md").write_text(table)
    print()
    print(table)
    print(f"bench: results in {args.out / 'golden.json'} and {args.out / 'golden.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
