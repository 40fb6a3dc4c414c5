"""Golden-model throughput, measured against a plain memory copy of the same FP32 data.

``python -m neuron_fabric.experiments.bench --out build/bench`` times, in one run and on one core
(NumPy runs these single-threaded): a copy of an FP32 gradient, G-Binary and G-Ternary
encoding of it, the aggregation of 8 workers' lines, the majority decode and the gate.
Aggregation is timed twice: into bit-planes, the form the device keeps its counters in
and reads them out (:func:`gbinary.aggregate_planes`, :func:`gternary.aggregate_planes`),
and into a byte per lane (:func:`gbinary.aggregate`, :func:`gternary.aggregate`), which adds
one unpack per plane; the readouts are timed from both forms too. Each figure is the median
of several repeats; encoders are reported as a share of the copy's bandwidth (same input
bytes), aggregation and decode in lanes per second (output lanes; aggregation also in votes,
lanes times workers). Results go to ``golden.json`` and ``golden.md`` in the output folder.

The golden model counts votes bit-sliced, carry-save adders over 64-bit words. G-Binary
runs in NumPy, a chunk of 16K words of each worker at a time in scratch rows it allocates
once per call, and its encoder also works a chunk at a time. A G-Ternary lane needs two
tallies (its codes' low bits and its -1 codes), three operations a worker's word to form
them, and a subtraction where a G-Binary lane needs one count: at 8 workers about 75
operations a word of 32 lanes against 26 a word of 64 lanes, too many passes for NumPy, so
its sum runs as one compiled loop (``golden/kernels.py``). So does the G-Ternary encoder's
compare and pack, after the pass that finds ``max|g|``.

The same run times the PyTorch twin of the lanes (:mod:`neuron_fabric.host.lanes`, what the
DDP hooks run on a bucket's device) beside the golden model on the same data and core:
encode, fold into bit-planes, readout from the planes and decode, with one torch thread
and one workspace for its temporaries, as the hooks keep one (``--no-twin`` skips it; on a
machine with CUDA, ``--cuda`` adds the same rows on the GPU).
"""

import argparse
import json
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

from ..golden import gbinary, gternary
from ..golden.formats import Readout

WORKERS = 8
MAX_WORKERS = 16


def _median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(*, elements=1 << 24, repeats=7, seed=0, twin=True, cuda=False, progress=print):
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
    counters = gbinary.aggregate_planes(binary, max_workers=MAX_WORKERS)
    sums = gternary.aggregate(ternary, max_workers=MAX_WORKERS)
    sum_lines = gternary.aggregate_planes(ternary, max_workers=MAX_WORKERS)
    t["gbinary_aggregate_planes"] = _median_seconds(
        lambda: gbinary.aggregate_planes(binary, max_workers=MAX_WORKERS), repeats)
    t["gbinary_aggregate"] = _median_seconds(
        lambda: gbinary.aggregate(binary, max_workers=MAX_WORKERS), repeats)
    t["gbinary_readout_planes"] = _median_seconds(
        lambda: gbinary.readout_planes(counters, readout=Readout.TERNARY, num_workers=WORKERS), repeats)
    t["gbinary_majority"] = _median_seconds(
        lambda: gbinary.majority(counts, num_workers=WORKERS), repeats)
    t["gternary_aggregate_planes"] = _median_seconds(
        lambda: gternary.aggregate_planes(ternary, max_workers=MAX_WORKERS), repeats)
    t["gternary_aggregate"] = _median_seconds(
        lambda: gternary.aggregate(ternary, max_workers=MAX_WORKERS), repeats)
    t["gternary_readout_planes"] = _median_seconds(
        lambda: gternary.readout_planes(sum_lines, readout=Readout.GATED, gate=2), repeats)
    t["gternary_gate"] = _median_seconds(lambda: gternary.gate(sums, gate=2), repeats)
    gbinary_sign = gbinary.readout_planes(counters, readout=Readout.SIGN, num_workers=WORKERS)
    gternary_gated = gternary.readout_planes(sum_lines, readout=Readout.GATED, gate=2)

    lanes_binary = counts.size
    lanes_ternary = sums.size
    results["copy_gb_per_s"] = 4 * elements / t["copy"] / 1e9
    results["encode_share_of_copy"] = {
        name: t["copy"] / t[key] for name, key in (
            ("gbinary", "gbinary_encode"), ("gternary", "gternary_encode"),
            ("gternary_stochastic", "gternary_encode_stochastic"))}
    results["lanes_per_s"] = {
        key: (lanes_binary if key.startswith("gbinary") else lanes_ternary) / t[key]
        for key in ("gbinary_aggregate_planes", "gbinary_aggregate", "gbinary_readout_planes",
                    "gbinary_majority", "gternary_aggregate_planes", "gternary_aggregate",
                    "gternary_readout_planes", "gternary_gate")}
    results["votes_per_s"] = {
        key: WORKERS * results["lanes_per_s"][key]
        for key in ("gbinary_aggregate_planes", "gbinary_aggregate", "gternary_aggregate_planes",
                    "gternary_aggregate")}
    if twin:
        results["twin"] = {"cpu": _twin(grad, binary, ternary, repeats, "cpu", progress)}
        if cuda:
            results["twin"]["cuda"] = _twin(grad, binary, ternary, repeats, "cuda", progress)
        results["golden_rows_s"] = {
            "gbinary_encode": t["gbinary_encode"], "gternary_encode": t["gternary_encode"],
            "gbinary_aggregate_planes": t["gbinary_aggregate_planes"],
            "gternary_aggregate_planes": t["gternary_aggregate_planes"],
            "gbinary_readout_planes": t["gbinary_readout_planes"],
            "gternary_readout_planes": t["gternary_readout_planes"],
            "gbinary_decode": _median_seconds(lambda: gbinary.decode(
                gbinary_sign, readout=Readout.SIGN, n_elements=elements), repeats),
            "gternary_decode": _median_seconds(lambda: gternary.decode(
                gternary_gated, readout=Readout.GATED, n_elements=elements), repeats)}
    results["targets"] = {
        "encode_share_of_copy": {"gbinary": 0.8, "gternary": 0.5},
        "aggregate_planes_lanes_per_s": 3e9,
        "decode_lanes_per_s": 1e9,
    }
    return results


#: The twin's rows: (key, label); each is timed on the same data as the golden row of that key.
TWIN_ROWS = (
    ("gbinary_encode", "G-Binary encode"),
    ("gternary_encode", "G-Ternary encode"),
    ("gbinary_aggregate_planes", f"G-Binary fold, {WORKERS} workers, into bit-planes"),
    ("gternary_aggregate_planes", f"G-Ternary fold, {WORKERS} workers, into bit-planes"),
    ("gbinary_readout_planes", "G-Binary TERNARY readout from bit-planes"),
    ("gternary_readout_planes", "G-Ternary GATED readout from bit-planes"),
    ("gbinary_decode", "G-Binary SIGN decode"),
    ("gternary_decode", "G-Ternary GATED decode"),
)


def _twin(grad, binary, ternary, repeats, device, progress):
    """Seconds of every row of :data:`TWIN_ROWS` for the torch twin on ``device``."""
    import torch

    from ..host import lanes

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

        def timed(fn):
            fn()
            sync()
            return _median_seconds(lambda: (fn(), sync()), repeats)

        # One workspace for every call, as the hooks keep one: after the first call of each
        # row (untimed) no temporary is fresh memory.
        ws = lanes.Workspace()
        g = torch.from_numpy(grad).to(device)
        b = torch.from_numpy(binary).to(device)
        tl = torch.from_numpy(ternary).to(device)
        counters = lanes.gbinary_aggregate_planes(b, max_workers=MAX_WORKERS)
        sums = lanes.gternary_aggregate_planes(tl, max_workers=MAX_WORKERS)
        sign = lanes.gbinary_readout_planes(counters, readout=Readout.SIGN, num_workers=WORKERS)
        gated = lanes.gternary_readout_planes(sums, readout=Readout.GATED, gate=2)
        progress(f"  twin on {device}: timing")
        return {
            "gbinary_encode": timed(lambda: lanes.gbinary_encode(g, workspace=ws)),
            "gternary_encode": timed(lambda: lanes.gternary_encode_lines(
                g, tau=lanes.gternary_threshold(g, ratio=0.5)[0], workspace=ws)),
            "gbinary_aggregate_planes": timed(
                lambda: lanes.gbinary_aggregate_planes(b, max_workers=MAX_WORKERS,
                                                       workspace=ws)),
            "gternary_aggregate_planes": timed(
                lambda: lanes.gternary_aggregate_planes(tl, max_workers=MAX_WORKERS,
                                                        workspace=ws)),
            "gbinary_readout_planes": timed(lambda: lanes.gbinary_readout_planes(
                counters, readout=Readout.TERNARY, num_workers=WORKERS)),
            "gternary_readout_planes": timed(lambda: lanes.gternary_readout_planes(
                sums, readout=Readout.GATED, gate=2, workspace=ws)),
            "gbinary_decode": timed(lambda: lanes.gbinary_decode(
                sign, readout=Readout.SIGN, n_elements=grad.size)),
            "gternary_decode": timed(lambda: lanes.gternary_decode(
                gated, readout=Readout.GATED, n_elements=grad.size)),
        }
    finally:
        torch.set_num_threads(threads)


# Table rows after the encoders: (key, label, target in lanes per second or None).
_LANE_ROWS = (
    ("gbinary_aggregate_planes", f"G-Binary aggregate, {WORKERS} workers, into bit-planes", 3e9),
    ("gbinary_aggregate", f"G-Binary aggregate, {WORKERS} workers, a byte per lane", None),
    ("gbinary_readout_planes", "G-Binary TERNARY readout from bit-planes", 1e9),
    ("gbinary_majority", "G-Binary majority decode, a byte per lane", 1e9),
    ("gternary_aggregate_planes", f"G-Ternary aggregate, {WORKERS} workers, into bit-planes", 3e9),
    ("gternary_aggregate", f"G-Ternary aggregate, {WORKERS} workers, a byte per lane", None),
    ("gternary_readout_planes", "G-Ternary GATED readout from bit-planes", None),
    ("gternary_gate", "G-Ternary gate, a byte per lane", None),
)


def to_markdown(results):
    """The results as a Markdown table, with the targets beside them."""
    share = results["encode_share_of_copy"]
    lanes = results["lanes_per_s"]
    votes = results["votes_per_s"]
    encode_targets = results["targets"]["encode_share_of_copy"]
    mark = lambda ok: "meets" if ok else "**below**"
    rows = [
        "| Operation | Throughput | Relative to copy | Target |",
        "|---|---|---|---|",
        f"| FP32 copy | {results['copy_gb_per_s']:.2f} GB/s | 1.00 | |",
    ]
    for name, label in (("gbinary", "G-Binary encode"), ("gternary", "G-Ternary encode"),
                        ("gternary_stochastic", "G-Ternary encode, stochastic")):
        gbps = share[name] * results["copy_gb_per_s"]
        bound = encode_targets.get(name)
        target = f">= {bound:.2f} ({mark(share[name] >= bound)})" if bound else ""
        rows.append(f"| {label} | {gbps:.2f} GB/s of FP32 in | {share[name]:.2f} | {target} |")
    for key, label, bound in _LANE_ROWS:
        extra = f" ({votes[key] / 1e9:.2f} G votes/s)" if key in votes else ""
        target = f">= {bound / 1e9:g} G lanes/s ({mark(lanes[key] >= bound)})" if bound else ""
        rows.append(f"| {label} | {lanes[key] / 1e9:.2f} G lanes/s{extra} | | {target} |")
    head = (f"Golden-model throughput: {results['elements']:,} elements, median of "
            f"{results['repeats']}, one core, NumPy {results['numpy']}.\n\n")
    foot = ("\nBit-planes: the counters (G-Binary) and sums (G-Ternary) as the device holds and reads "
            "them out, one line per bit (COUNTS) or per two bits (SUMS) of every lane. A byte per "
            "lane: the same values unpacked, one unpack of the whole output per plane. Both are "
            "counted bit-sliced: G-Binary in NumPy, a chunk of 16K words of each worker at a time "
            "in reused scratch rows; G-Ternary, which takes two tallies and a subtraction where "
            "G-Binary takes one count, in one loop compiled with Numba.\n")
    return head + "\n".join(rows) + "\n" + foot + _twin_markdown(results)


def _twin_markdown(results):
    """The twin's rows beside the golden model's, in elements (lanes) per second."""
    if "twin" not in results:
        return ""
    devices = list(results["twin"])
    golden = results["golden_rows_s"]
    n = results["elements"]
    rows = ["", "PyTorch twin (`neuron_fabric.host.lanes`) beside the golden model, same data, "
                "one thread, G elements (lanes) per second; the ratio is the golden model's "
                "time over the twin's:", "",
            "| Operation | golden | " + " | ".join(f"twin, {d}" for d in devices) + " |",
            "|---|---:|" + "---:|" * len(devices)]
    for key, label in TWIN_ROWS:
        count = n if "encode" in key or "decode" in key else _row_lanes(key, results)
        cells = [f"{count / golden[key] / 1e9:.2f}"]
        for device in devices:
            seconds = results["twin"][device][key]
            cells.append(f"{count / seconds / 1e9:.2f} ({golden[key] / seconds:.2f}x)")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _row_lanes(key, results):
    """Output lanes of a fold or readout row (as the golden rows count them)."""
    return results["lanes_per_s"][key] * results["timings_s"][key]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.experiments.bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/bench"),
                        help="output folder (default: build/bench)")
    parser.add_argument("--elements", type=int, default=1 << 24,
                        help="FP32 elements per gradient (default: 2**24)")
    parser.add_argument("--repeats", type=int, default=7, help="repeats per timing (default: 7)")
    parser.add_argument("--no-twin", action="store_true",
                        help="time the golden model only, not the PyTorch twin beside it")
    parser.add_argument("--cuda", action="store_true",
                        help="also time the twin on the GPU (needs CUDA)")
    args = parser.parse_args(argv)
    if args.elements < 4096:
        parser.error(f"--elements must be at least 4096, not {args.elements}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    results = run(elements=args.elements, repeats=args.repeats, twin=not args.no_twin,
                  cuda=args.cuda)
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
