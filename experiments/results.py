"""``python -m neuron_fabric.experiments.results``: the README's results table, from the reports.

Reads the JSON reports the ``make`` targets write under ``--build``:

- ``fpga/report.json`` (``make fpga-ecp5``): the 512-bit top's Fmax on both speed grades,
  its area and its latency in cycles and nanoseconds;
- ``fpga-quick/report.json`` (``make fpga-quick``): the same for the 128-bit ``small`` preset;
- ``sim/summary.json`` (``make sim``): tests, lines checked and simulation rate per simulator;
- ``sim/summary.json`` also holds the Verilator harness's rate on the top against cocotb's;
- ``train/report.json`` (``make train-check``): final accuracy or loss and device traffic of
  the FP32, static G-Binary and runtime-policy arms of each group;
- ``train-rtl/report.json`` (``make train-rtl``): steps trained with the Verilated top
  aggregating, bit-identical to the golden hooks;
- ``combiner/report.json`` (``make combiner-eval``): the write-combining accumulator's byte
  reduction;
- ``bench/golden.json`` (``make bench-golden``): golden-model throughput;
- ``bench/golden.json`` also: the PyTorch twin of the lanes against the golden model;
- ``traffic/report.json`` (``make traffic-scale``): the layer-aware profile's device traffic
  on the paper-scale parameter trees;
- ``traffic/hook_cost.json`` (``make traffic-scale``): the DDP hooks' step against the FP32
  all-reduce's.

The table is printed, and with ``--out`` written to that file too (``make results``, which
``make all`` runs, writes ``build/results.md`` and leaves the checkout alone). A row whose
report is absent reads "not measured yet" and names the ``make`` target that measures it; a
report that lacks the part a row needs, or cannot be read, says so in the row. The table
holds no date or timing of its own, so the same reports always give the same file.

With ``--readme`` (``make readme-results``), the table replaces what lies between the two
markers :data:`BEGIN` and :data:`END` in that file, and nothing else; a row whose report is
absent keeps the line the file already has, so a machine that ran only some targets does
not wipe the figures measured elsewhere.

Exit status: 0 when the table was written or printed, 2 when the README has no markers.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import sys

__all__ = ["BEGIN", "END", "SOURCES", "ROWS", "Missing", "table", "table_rows", "rewrite",
           "update_readme", "main"]

#: The markers around the table in the README.
BEGIN = "<!-- results: begin (written by `make readme-results`; edits here are lost) -->"
END = "<!-- results: end -->"


class Missing(Exception):
    """A report lacks the part a row needs; the message says which."""


@dataclasses.dataclass(frozen=True)
class Source:
    """A report: its JSON file and Markdown note under the build folder, and its target."""
    target: str
    json: str
    note: str


SOURCES = {
    "fpga": Source("fpga-ecp5", "fpga/report.json", "fpga/report.md"),
    "fpga-quick": Source("fpga-quick", "fpga-quick/report.json", "fpga-quick/report.md"),
    "sim": Source("sim", "sim/summary.json", "sim/summary.md"),
    "train": Source("train-check", "train/report.json", "train/report.md"),
    "train-rtl": Source("train-rtl", "train-rtl/report.json", "train-rtl/report.md"),
    "combiner": Source("combiner-eval", "combiner/report.json", "combiner/report.md"),
    "bench": Source("bench-golden", "bench/golden.json", "bench/golden.md"),
    "traffic": Source("traffic-scale", "traffic/report.json", "traffic/report.md"),
    "hook-cost": Source("traffic-scale", "traffic/hook_cost.json", "traffic/hook_cost.md"),
}


def _get(data, *keys):
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            raise Missing(f"no {'.'.join(str(k) for k in keys)}") from None
    return data


# ---------------------------------------------------------------------------- FPGA

def _top(report):
    return _get(report, "default", "top")


def _grade_fmax(entry):
    """``"90.8 MHz at LFE5U-85F-6 (median of 3 seeds)"`` for one grade of the top."""
    part = f"{entry.get('grade', '?')}-{entry.get('speed', '?')}"
    seeds = entry.get("seeds", [])
    if entry.get("fmax_median_mhz") is None:
        return f"did not route at {part}"
    routed = sum(1 for s in seeds if s.get("fmax_mhz") is not None)
    spread = f"median of {routed} seeds" if routed > 1 else "one seed"
    return f"{entry['fmax_median_mhz']:.1f} MHz at {part} ({spread})"


def fmax(report):
    grades = _get(_top(report), "grades")
    if not grades:
        raise Missing("no placed grade")
    return "; ".join(_grade_fmax(grades[key]) for key in sorted(grades))


def area(report):
    top = _top(report)
    placed = [entry["utilization"] for _, entry in sorted(top.get("grades", {}).items())
              if entry.get("utilization")]
    u = placed[0] if placed else _get(top, "area")
    return (f"{_get(u, 'lut4'):,} LUT4 ({_get(u, 'carry_cells'):,} CCU2C counted as two "
            f"each), {_get(u, 'ff'):,} FF, {_get(u, 'bram'):,} DP16KD")


def latency(report):
    cycles = _get(report, "timing_model", "latency", "gbinary_write")
    grades = _get(_top(report), "grades")
    clocks = [grades[key]["fmax_median_mhz"] for key in sorted(grades)
              if grades[key].get("fmax_median_mhz") is not None]
    if not clocks:
        return f"{cycles} cycles, request to response (no routed clock to give ns)"
    mhz = clocks[0]
    return f"{cycles} cycles, request to response: {1000 * cycles / mhz:.0f} ns at {mhz:.1f} MHz"


# ---------------------------------------------------------------------------- simulation

def simulator(name):
    def value(summary):
        rows = [r for r in _get(summary, "simulators") if r.get("simulator") == name]
        if not rows:
            raise Missing(f"no {name} run")
        r = rows[0]
        tests, failed = r["tests"], r["failed"]
        verdict = (f"{tests} tests passed" if not failed and r.get("ok", True)
                   else f"**{failed} of {tests} tests failed**")
        text = f"{verdict}, {r['lines_checked']:,} lines checked"
        if r.get("top_cycles_per_s"):
            text += (f"; {r['top_cycles_per_s']:,.0f} cycles/s on `{r['top']}` "
                     f"under traffic")
        return text
    return value


def harness(summary):
    h = summary.get("harness")
    if not h:
        raise Missing("no harness run")
    if "error" in h:
        return f"**failed**: {h['error']}"
    text = (f"{h['rtl_cycles_per_s']:,.0f} cycles/s on `{h['top']}` under checked random "
            f"traffic, one core")
    if h.get("ratio_rtl"):
        text += f" ({h['ratio_rtl']:.1f}x cocotb's rate in the same run)"
    return text


# ---------------------------------------------------------------------------- training

#: The arms each training row shows, with their short labels.
TRAIN_ARMS = (("fp32", "FP32"), ("gbinary", "G-Binary everywhere"),
              ("runtime", "runtime policy"))


def training(group):
    def value(report):
        rows = {row["name"]: row for row in _get(report, "rows")}
        parts = []
        for arm, label in TRAIN_ARMS:
            row = rows.get(f"{group}/{arm}")
            if row is None:
                continue
            final = (f"{100 * row['final']:.2f}%" if row["final_metric"].endswith("accuracy")
                     else f"{row['final']:.3f}")
            traffic = ("" if arm == "fp32"
                       else f" at {100 * row['device_share']:.2f}% of the device traffic")
            parts.append(f"{label} {final}{traffic}")
        if not parts:
            raise Missing(f"no arm of the {group} group")
        quick = " (quick run)" if report.get("quick") else ""
        return "; ".join(parts) + quick
    return value


def train_rtl(report):
    runs = _get(report, "runs")
    if not runs:
        raise Missing("no run")
    steps = sum(r["steps"] for r in runs)
    identical = sum(r["bit_identical_steps"] for r in runs)
    cycles = sum(r["device"]["cycles"] for r in runs)
    verdict = (f"{identical} of {steps} steps bit-identical to the golden hooks"
               if identical == steps else f"**{steps - identical} of {steps} steps differ**")
    return (f"{verdict} over {len(runs)} runs (digits CNN and character LM; G-Binary, "
            f"G-Ternary, mixed FP32 buckets); {cycles:,} cycles of the "
            f"{report['params']['line_bits']}-bit top simulated")


# ---------------------------------------------------------------------------- combiner

def combiner(report):
    rows = _get(report, "rows")

    def plain(row):
        return (row.get("small_threshold") is None and row.get("final_flush", True)
                and row.get("acc_width") == row.get("value_width"))

    parts = []
    for name in _get(report, "workloads"):
        match = [r for r in rows if r["stream"] == name and r.get("order") == "lockstep"
                 and (r["sets"], r["ways"]) == (32, 4) and r["threshold"] is None and plain(r)]
        if match:
            parts.append(f"{name} {match[0]['byte_reduction']:.2f}x")
    if not parts:
        raise Missing("no lock-step run with a 32x4 buffer and no threshold")
    text = ", ".join(parts) + " (32x4 buffer, no threshold, lock step, flush every step)"
    seed = [r for r in rows if r["stream"] == "seed phases" and plain(r)]
    if seed:
        text += f"; the seed design's phases {seed[0]['byte_reduction']:.2f}x"
    throughput = report.get("throughput", [])
    traces = [t["updates_per_cycle"] for t in throughput if t["stream"] != "seed phases"]
    seed = [t["updates_per_cycle"] for t in throughput if t["stream"] == "seed phases"]
    if traces:
        text += f"; the hardware block takes {min(traces):.3f} update a cycle on the traces"
    if seed:
        text += f" and {seed[0]:.3f} on the seed's phases" if traces else \
            f"; the hardware block takes {seed[0]:.3f} update a cycle on the seed's phases"
    return text


# ---------------------------------------------------------------------------- paper scale

#: The models the paper-scale row shows, with their short labels.
TRAFFIC_MODELS = (("resnet18_cifar100", "ResNet-18/CIFAR-100"), ("resnet18_imagenet", "ResNet-18"),
                  ("resnet50_imagenet", "ResNet-50"), ("distilbert_sst2", "DistilBERT"),
                  ("gpt2_small", "GPT-2 small"))


def traffic(report):
    models = _get(report, "models")
    parts = [f"{label} {100 * _get(models, key, 'profiles', 'layer_gbinary', 'device_share_steady'):.2f}%"
             for key, label in TRAFFIC_MODELS if key in models]
    if not parts:
        raise Missing("no model")
    return "layer-aware G-Binary device traffic, % of FP32 after warm-up: " + ", ".join(parts)


# ---------------------------------------------------------------------------- benchmark

def bench(results):
    share = _get(results, "encode_share_of_copy")
    lanes = _get(results, "lanes_per_s")
    workers = results.get("workers", "?")
    return (f"encode at {share['gbinary']:.2f}x (G-Binary) and {share['gternary']:.2f}x "
            f"(G-Ternary) a memory copy's bandwidth; {workers}-worker aggregation "
            f"{lanes['gbinary_aggregate_planes'] / 1e9:.2f} and "
            f"{lanes['gternary_aggregate_planes'] / 1e9:.2f} G lanes/s")


def twin(results):
    """The PyTorch twin of the lanes against the golden model, same data and core."""
    golden = _get(results, "golden_rows_s")
    twin_s = _get(results, "twin", "cpu")
    ratio = {key: golden[key] / twin_s[key] for key in twin_s if key in golden}

    def pair(name):
        return f"{ratio[f'gbinary_{name}']:.2f}x / {ratio[f'gternary_{name}']:.2f}x"

    return (f"speed over the golden model's, G-Binary / G-Ternary: encode {pair('encode')}, "
            f"fold into bit-planes {pair('aggregate_planes')}, readout "
            f"{pair('readout_planes')}, decode {pair('decode')}")


def hook_cost(report):
    """Our hooks' step on the target model against the FP32 all-reduce's and bf16's."""
    target = _get(report, "target")
    settings = _get(report, "models", target["model"], "settings")
    labels = (("gbinary", "G-Binary"), ("gternary", "G-Ternary"),
              ("layer_gbinary", "layer-aware G-Binary"))
    parts = [f"{label} {_get(settings, key, 'ratio_to_fp32'):.2f}x" for key, label in labels
             if key in settings]
    if not parts:
        raise Missing("no low-bit setting")
    bf16 = settings.get("bf16", {}).get("ratio_to_fp32")
    return (f"{target['model']}, {report.get('workers', '?')} gloo workers, step over the FP32 "
            f"all-reduce's: " + ", ".join(parts)
            + (f" (bf16_compress_hook {bf16:.2f}x)" if bf16 is not None else "")
            + f"; target at most {target['ratio']:g}x")


#: The table: (result, source key, value function), in README order.
ROWS = (
    ("512-bit top: Fmax", "fpga", fmax),
    ("512-bit top: area", "fpga", area),
    ("512-bit top: latency", "fpga", latency),
    ("128-bit top (`small`): Fmax", "fpga-quick", fmax),
    ("128-bit top (`small`): area", "fpga-quick", area),
    ("128-bit top (`small`): latency", "fpga-quick", latency),
    ("cocotb on Verilator", "sim", simulator("verilator")),
    ("cocotb on Icarus", "sim", simulator("icarus")),
    ("Verilator harness (no cocotb)", "sim", harness),
    ("Training, digits CNN (test accuracy)", "train", training("digits")),
    ("Training, character LM (validation loss)", "train", training("char_lm")),
    ("Training, label-sorted digits (test accuracy)", "train", training("hard")),
    ("Training with the RTL in the loop", "train-rtl", train_rtl),
    ("Write combiner: bytes written, reduction", "combiner", combiner),
    ("Golden model, one core", "bench", bench),
    ("PyTorch twin of the lanes, one core", "bench", twin),
    ("Traffic at paper scale", "traffic", traffic),
    ("DDP hooks' step time", "hook-cost", hook_cost),
)


def _load(path):
    """The parsed report, None when absent, or the error text when it cannot be read."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"unreadable: {error}"


def _shown(path, relative_to):
    """``path`` as the README shows it: relative to the README's folder where possible."""
    if relative_to is None:
        return path.as_posix()
    try:
        return pathlib.Path(os.path.relpath(path, relative_to)).as_posix()
    except ValueError:  # another drive
        return path.as_posix()


def table(build, *, relative_to=None, keep=None):
    """The results table (Markdown, no trailing newline) from the reports under ``build``.

    ``relative_to`` is the folder the report paths are shown relative to (the README's).
    ``keep`` maps a row's label to a line of an earlier table (:func:`table_rows`); a row
    whose report is absent takes that line as it is instead of "not measured yet".
    """
    build = pathlib.Path(build)
    keep = keep or {}
    reports = {key: _load(build / source.json) for key, source in SOURCES.items()}
    lines = ["| Result | Measured | Report |", "|---|---|---|"]
    for label, key, value in ROWS:
        source = SOURCES[key]
        report = reports[key]
        make = f"`make {source.target}`"
        if report is None and label in keep:
            lines.append(keep[label])
            continue
        if report is None:
            text = f"not measured yet ({make})"
        elif isinstance(report, str):
            text = f"{report}; run {make} again"
        else:
            try:
                text = value(report)
            except Missing as missing:
                text = f"not in the report yet ({missing}; {make})"
        lines.append(f"| {label} | {text} | `{_shown(build / source.note, relative_to)}` |")
    return "\n".join(lines)


def table_rows(text):
    """``{label: line}`` of the data rows of the table between the markers of ``text``
    (empty when the markers are missing)."""
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        return {}
    rows = {}
    for line in text[start + len(BEGIN):stop].splitlines():
        label = line.strip().strip("|").split(" | ")[0].strip()
        if line.startswith("|") and label not in ("", "Result") and not label.startswith("---"):
            rows[label] = line
    return rows


def rewrite(text, new_table, *, name="README"):
    """``text`` with what lies between :data:`BEGIN` and :data:`END` replaced by
    ``new_table``; everything outside the markers is kept byte for byte.

    Raises ``ValueError`` naming ``name`` when the markers are missing, repeated or out of
    order.
    """
    begins, ends = text.count(BEGIN), text.count(END)
    start, stop = text.find(BEGIN), text.find(END)
    if begins != 1 or ends != 1 or stop < start:
        raise ValueError(
            f"{name} must hold the line {BEGIN!r} once and, after it, the line {END!r} once "
            f"(found {begins} and {ends}); put the two lines where the results table belongs")
    head = text[:start + len(BEGIN)]
    return head + "\n" + new_table + "\n" + text[stop:]


def update_readme(readme, build):
    """Rewrite the table in the file ``readme`` from ``build``, keeping the line of every row
    whose report is absent; return True if the file changed."""
    readme = pathlib.Path(readme)
    old = readme.read_text(encoding="utf-8")
    new = rewrite(old, table(build, relative_to=readme.resolve().parent, keep=table_rows(old)),
                  name=str(readme))
    if new != old:
        readme.write_text(new, encoding="utf-8")
    return new != old


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.experiments.results",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=pathlib.Path, default=pathlib.Path("build"),
                        help="folder the make targets write their reports to (default: build)")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="file to write the table to, besides printing it")
    parser.add_argument("--readme", type=pathlib.Path, default=None,
                        help="file whose table to rewrite between the markers, keeping the rows "
                             "whose report is absent")
    args = parser.parse_args(argv)
    absent = sorted({SOURCES[key].target for _, key, _ in ROWS
                     if not (args.build / SOURCES[key].json).is_file()})
    if args.readme is None:
        text = table(args.build)
        print(text)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n", encoding="utf-8")
            print(f"results: table written to {args.out}")
    else:
        try:
            changed = update_readme(args.readme, args.build)
        except (OSError, ValueError) as error:
            print(f"results: {error}", file=sys.stderr)
            return 2
        print(f"results: table in {args.readme} {'rewritten' if changed else 'unchanged'} "
              f"from the reports under {args.build}/"
              + (f"; rows without a report kept as they were "
                 f"({', '.join(f'make {t}' for t in absent)})" if absent else ""))
        return 0
    if absent:
        print(f"results: not measured yet: {', '.join(f'make {t}' for t in absent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
