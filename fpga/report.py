"""The FPGA report: ``report.json`` for machines, ``report.md`` for people, PNG plots.

Every command merges its part into one ``report.json`` (``ecp5``: the default
configuration, its blocks, gate equivalents, the board build; ``sweep``: the parameter
sweep; ``timing-model``: the measured latency and the model) and re-renders the Markdown
and the plots from the whole file, so the note always shows everything measured so far.
"""

import json
import os
import pathlib
import statistics

__all__ = ["load", "save", "markdown", "plot_sweep", "render"]


def load(out):
    path = pathlib.Path(out) / "report.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return {}


def save(out, report):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    # Written aside, then moved over: a command reading it meanwhile sees a whole file.
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _pct(n, pct):
    return f"{n:,} ({pct:.1f} %)"


def _path_text(path):
    if not path:
        return "-"
    through = [n for n in path.get("through", []) if n not in (path.get("from_signal"),
                                                             path.get("to_signal"))]
    via = f" via `{'`, `'.join(through[:4])}`" if through else ""
    return (f"`{path.get('from_signal', path['from'])}` → `{path.get('to_signal', path['to'])}`"
            f"{via}: {path['logic_levels']} logic cells, {path['logic_ns']:.2f} ns logic + "
            f"{path['routing_ns']:.2f} ns routing = {path['total_ns']:.2f} ns")


def _fmax_text(entry):
    if "fmax_median_mhz" not in entry:
        if all(s.get("not_run") for s in entry.get("seeds", [])):
            return "not run"
        return f"failed: {entry.get('error', '?')}"
    def run(s):
        return (f"{s['fmax_mhz']:.1f}" if s.get("fmax_mhz") is not None
                else "not run" if s.get("not_run")
                else "diverged" if s.get("diverged") else "failed")

    # Once a seed has failed, spares may follow it: name each value's seed.
    named = any("error" in s for s in entry["seeds"])
    seeds = ", ".join(f"{s['seed']}: {run(s)}" if named else run(s) for s in entry["seeds"])
    return f"**{entry['fmax_median_mhz']:.1f}** ({seeds})"


def _resource_row(entry):
    u = entry.get("utilization")
    if not u:
        return ["-"] * 5
    return [_pct(u["lut4"], u["lut4_pct"]), _pct(u["ff"], u["ff_pct"]), f"{u['carry_cells']:,}",
            _pct(u["bram"], u["bram_pct"]), _pct(u["mult"], u["mult_pct"])]


def _placed_or_synthesized(entry, record):
    """A grade's figures after place and route or, when it was not placed, synthesis's."""
    return entry if entry.get("utilization") else {"utilization": record.get("area")}


def _grade_label(entry):
    return f"{entry['grade']}-{entry['speed']}"


def _block_section(title, records):
    rows = []
    for role, rec in records.items():
        if "error" in rec and not rec.get("grades"):
            rows.append([role, f"`{rec['module']}`", "-", f"failed: {rec['error'][:80]}",
                         *["-"] * 5])
            continue
        for key, entry in rec["grades"].items():
            rows.append([role, f"`{rec['module']}`", _grade_label(entry), _fmax_text(entry),
                         *_resource_row(_placed_or_synthesized(entry, rec))])
    header = ["block", "module", "part", "Fmax MHz, median (seeds)", "LUT4 (% of part)",
              "FF (% of part)", "carry (CCU2C)", "DP16KD (%)", "MULT18 (%)"]
    return f"### {title}\n\n" + _table(header, rows)


def _critical_paths(records):
    lines = []
    for role, rec in records.items():
        for key, entry in rec.get("grades", {}).items():
            if entry.get("critical_path"):
                lines.append(f"- {role}, {_grade_label(entry)} (seed "
                             f"{entry['critical_path_seed']}): {_path_text(entry['critical_path'])}")
    return "\n".join(lines) or "- none: no run has been placed and routed"


def _targets(top, targets, board=None):
    rows = []
    for key, entry in top.get("grades", {}).items():
        goal = targets.get("fmax_mhz", {}).get(key)
        if goal is None:
            continue
        if "fmax_median_mhz" not in entry:
            rows.append([f"Fmax {_grade_label(entry)}", f"≥ {goal:g} MHz",
                         entry.get("error", "not run"), "not measured"])
            continue
        got = entry["fmax_median_mhz"]
        rows.append([f"Fmax {_grade_label(entry)}", f"≥ {goal:g} MHz", f"{got:.1f} MHz",
                     "met" if got >= goal else "missed"])
    entry = next(iter(top.get("grades", {}).values()), {})
    u = entry.get("utilization") or top.get("area")  # placed, else synthesis alone
    if u:
        rows.append(["logic", f"≤ {targets['lut4']:,} LUT4", f"{u['lut4']:,} LUT4",
                     "met" if u["lut4"] <= targets["lut4"] else "missed"])
        need = targets.get("bram_needed")
        if need is not None:
            rows.append(["block RAM", f"{need} DP16KD (slot rows, bitmaps)",
                         f"{u['bram']} DP16KD", "met" if u["bram"] <= need else "missed"])
    goal = targets.get("board_mhz")
    if goal is not None and board is not None:
        rows.append(_board_target_row(board, goal))
    return _table(["target", "goal", "measured", ""], rows)


def _board_target_row(board, goal):
    """The board build closes timing at a clock of at least ``goal`` MHz, or it misses."""
    label = f"board ({board['board']})" if "board" in board else "board"
    wanted = f"closes timing at ≥ {goal:g} MHz"
    if "error" in board:
        return [label, wanted, "failed", "missed"]
    met = board["meets_timing"] and board["clock_mhz"] >= goal
    return [label, wanted, f"{board['fmax_mhz']:.1f} MHz reached at a {board['clock_mhz']:g} "
            f"MHz clock", "met" if met else "missed"]


def _gates_section(gates):
    rows = [[role, f"{g['nand2_eq']:,}", f"{g['logic_nand2_eq']:,}", f"{g['ff_nand2_eq']:,}",
             f"{g['flip_flops']:,}", f"{g['sram_bits']:,}"]
            for role, g in gates.items() if "nand2_eq" in g]
    rows += [[role, f"failed: {g['error'][:80]}", "", "", "", ""]
             for role, g in gates.items() if "error" in g]
    return _table(["block", "NAND2 eq. total", "logic", "flip-flops", "flip-flop count",
                   "memory bits (SRAM, not counted)"], rows)


def _board_section(board):
    if "error" in board:
        return f"Board build failed: {board['error']}"
    u = board["utilization"]

    def used(kind):
        e = u.get(kind)
        return f"{e['used']:,} / {e['available']:,}" if e else "0"

    rows = [[board["board"], f"{board['device']}-{board['speed']} {board['package']}",
             f"{board['clock_mhz']:g}", f"{board['fmax_mhz']:.1f}",
             "yes" if board["meets_timing"] else "no", used("TRELLIS_COMB"),
             used("TRELLIS_FF"), used("DP16KD"), used("TRELLIS_IO")]]
    text = _table(["board", "part", "clock MHz (PLL)", "Fmax MHz", "closes", "LUT4 cells",
                   "FF", "DP16KD", "I/O"], rows)
    text += f"\n\nSeed {board['seed']}. Critical path: {_path_text(board.get('critical_path'))}"
    failed = board.get("failed_seeds")
    if failed:
        text += "\n\nSeeds that failed first: " + "; ".join(
            f"{f['seed']}: {f['error']}" for f in failed)
    return text


def _timing_section(tm):
    lat = tm["latency"]
    model = tm["model"]
    text = [f"Measured in simulation ({lat['requests']} requests, no stalls): G-Binary write "
            f"**{lat['gbinary_write']}** cycles, G-Ternary write {lat['gternary_write']}, "
            f"readout {lat['readout']}, FP32 write acknowledge {lat['memory_write']} "
            f"(request transfer to first response beat); initiation interval "
            f"{lat['initiation_interval']:g} line per clock. The controller's declared "
            f"latency is {tm['declared_latency']} cycles"
            f"{' (agrees)' if tm['declared_latency'] == lat['gbinary_write'] else ' (DIFFERS)'}.",
            ""]
    loads = [f"{t:g}" for t in model["load_latencies_ns"]]
    links = list(model["links_gbps"])
    header = (["clock", "MHz", f"{model['cycles']} cycles, ns"]
              + [f"overhead @ {t} ns" for t in loads]
              + [f"lines/clk for {link} ({model['links_gbps'][link]:g} GB/s)" for link in links])
    rows = []
    for row in model["rows"]:
        rows.append([row["clock"], f"{row['clock_mhz']:g}", f"{row['datapath_ns']:.2f}"]
                    + [f"{row['overhead_pct'][t]:.2f} %" for t in loads]
                    + [f"{row['links'][link]['lines_per_clock']:.2f}"
                       + ("" if row["links"][link]["keeps_up"] else " (falls behind)")
                       for link in links])
    rows.append([f"papers ({model['paper']['cycles']} cycles, claimed)", "-", "-"]
                + [f"≤ {model['paper']['overhead_pct']} %" for _ in loads]
                + ["hidden" for _ in links])
    text.append(_table(header, rows))
    text.append("")
    implied = ", ".join(f"{mhz:g} MHz at {t} ns" for t, mhz in
                        model["paper"]["clock_mhz_implied"].items())
    ours = ", ".join(f"{mhz:g} MHz at {t} ns" for t, mhz in
                     model["clock_mhz_for_paper_overhead"].items())
    text.append(f"The papers' {model['paper']['overhead_pct']} % for {model['paper']['cycles']} "
                f"cycles needs a clock of {implied}. Our {model['cycles']} cycles stay at or "
                f"below {model['paper']['overhead_pct']} % from {ours}.")
    return "\n".join(text)


def _sweep_section(sweep):
    rows = []
    for point in sweep:
        p = point["params"]
        label = f"{p['line_bits']} / {p['max_workers']} / {p['depth']}"
        if "error" in point and not point.get("grades") and not point.get("area"):
            rows.append([label, "-", f"failed: {point['error'][:100]}", *["-"] * 6])
            continue
        placement = _placement(point)
        if not point.get("grades") and point.get("area"):
            rows.append([label, "synthesis only", "-", *_resource_row({"utilization":
                                                                      point["area"]}),
                         placement])
        for key, entry in point.get("grades", {}).items():
            rows.append([label, _grade_label(entry), _fmax_text(entry),
                         *_resource_row(_placed_or_synthesized(entry, point)), placement])
    return _table(["LINE_BITS / MAX_WORKERS / DEPTH", "part", "Fmax MHz, median (seeds)",
                   "LUT4 (%)", "FF (%)", "carry", "DP16KD (%)", "MULT18 (%)", "block RAMs"],
                  rows)


def _seed_text(default):
    seeds = ", ".join(str(s) for s in default["seeds"])
    top = default.get("top_seeds", default["seeds"])
    if top != default["seeds"]:
        seeds += f" ({', '.join(str(s) for s in top)} for the controller top)"
    if default.get("spare_seeds"):
        seeds += (f"; a seed that failed (router2 diverging counts) is replaced by the next of "
                  f"the spare seeds {', '.join(str(s) for s in default['spare_seeds'])}")
    return seeds


def _tiles_text(default):
    """The datapath's tiling, in words (nothing for a report from before the tiles)."""
    lanes = default.get("tile_lanes")
    if not lanes:
        return ""
    others = [_variant(top) for top in default.get("other_tops", [])]
    also = (f"; the top is also measured with {'; '.join(others)} (the table by TILE_LANES "
            f"and floorplan)" if others else "")
    pinned = default.get("top", {}).get("floorplan_rows")
    placed = (f", its block RAMs {_placement(default['top'])}"
              if pinned and _has_block_rams(default["top"]) else "")
    return (f"The datapath is a row of {default['params']['line_bits'] // lanes} lane tiles of "
            f"{lanes} line bits each (TILE_LANES {lanes}){placed}{also}. ")


def _engines_text(default):
    """What width the lane engines were measured at, as a paragraph (none at LINE_BITS)."""
    bits, line_bits = default.get("engine_bits"), default["params"]["line_bits"]
    if not bits or bits == line_bits:
        return []
    return [f"The lane engines (`sign_count`, `ternary_gate`) at {bits} line bits, one lane "
            f"tile's share of the line: lanes never meet, so the {line_bits}-bit engine is "
            f"{line_bits / bits:g} of them side by side, with the area to match "
            f"(`--engine-bits {line_bits}` places and routes it whole). Their gate "
            f"equivalents below are at the same width.", ""]


def _has_block_rams(top):
    """Whether a top has block RAMs (assumed when its cells were not counted)."""
    return top.get("cells", {}).get("dp16kd") != 0


def _placement(top):
    """How a top's block RAMs were placed, in words."""
    rows = top.get("floorplan_rows")
    if not _has_block_rams(top):
        return "none to place"
    return f"pinned over {rows} row{'s' if rows > 1 else ''}" if rows else "placed by nextpnr"


def _variant(top):
    return f"TILE_LANES {top['tile_lanes']} with its block RAMs {_placement(top)}"


def _median_seconds(entry):
    """The median place-and-route seconds of a grade's routed seeds, or None."""
    seconds = [s["seconds"] for s in entry.get("seeds", [])
               if s.get("fmax_mhz") is not None and s.get("seconds") is not None]
    return statistics.median(seconds) if seconds else None


def _tile_lanes_section(tops):
    """The controller top at each TILE_LANES and floorplan measured: Fmax, area, place and
    route time."""
    rows = []
    for top in sorted(tops, key=lambda t: (t["tile_lanes"], t.get("floorplan_rows") or 0)):
        lanes, placement = top["tile_lanes"], _placement(top)
        if "error" in top and not top.get("grades"):
            rows.append([lanes, placement, "-", f"failed: {top['error'][:80]}", *["-"] * 4])
            continue
        for entry in top["grades"].values():
            u = _placed_or_synthesized(entry, top)["utilization"]
            seconds = _median_seconds(entry)
            rows.append([lanes, placement, _grade_label(entry), _fmax_text(entry),
                         _pct(u["lut4"], u["lut4_pct"]) if u else "-",
                         _pct(u["ff"], u["ff_pct"]) if u else "-",
                         _pct(u["bram"], u["bram_pct"]) if u else "-",
                         "-" if seconds is None else f"{seconds:,.0f}"])
    return _table(["TILE_LANES", "block RAMs", "part", "Fmax MHz, median (seeds)",
                   "LUT4 (% of part)", "FF (% of part)", "DP16KD (%)",
                   "place and route, s (median)"], rows)


#: What the AXI adapters may cost against the native top: Fmax within this fraction of the
#: native top's median at each grade, and at most this fraction more LUT4.
AXI_COST_LIMITS = {"fmax": 0.05, "lut4": 0.05}


def _axi_cost_rows(native, axi):
    """The AXI top against the native top, grade by grade: Fmax medians, LUT4, FF."""
    rows = []
    for key, entry in axi.get("grades", {}).items():
        base = native.get("grades", {}).get(key, {})
        mine, theirs = entry.get("fmax_median_mhz"), base.get("fmax_median_mhz")
        if mine and theirs:
            ratio = mine / theirs - 1
            rows.append([f"Fmax {_grade_label(entry)}", f"{theirs:.1f} MHz", f"{mine:.1f} MHz",
                         f"{ratio:+.1%}",
                         "met" if ratio >= -AXI_COST_LIMITS["fmax"] else "missed"])
    u = next((e.get("utilization") for e in axi.get("grades", {}).values()
              if e.get("utilization")), None) or axi.get("area")
    v = next((e.get("utilization") for e in native.get("grades", {}).values()
              if e.get("utilization")), None) or native.get("area")
    if u and v:
        for kind, limit in (("lut4", AXI_COST_LIMITS["lut4"]), ("ff", None)):
            extra = u[kind] - v[kind]
            rows.append([kind.upper(), f"{v[kind]:,}", f"{u[kind]:,}",
                         f"{extra:+,} ({extra / v[kind]:+.1%})",
                         "-" if limit is None else
                         "met" if extra <= limit * v[kind] else "missed"])
    return rows


def _axi_section(d):
    axi = d["axi_top"]
    limits = AXI_COST_LIMITS
    out = ["## AXI top", "",
           "The controller behind its three AXI adapters (AXI4 data subordinate, AXI4 memory "
           "manager, AXI4-Lite registers), built and measured as the native top (same seeds, "
           "floorplan and flow). The adapters' cost is the difference; the targets are Fmax "
           f"within {limits['fmax']:.0%} of the native top's median at each grade and at "
           f"most {limits['lut4']:.0%} more LUT4.", "",
           _block_section("Place and route", {"axi_controller": axi}), "",
           "Critical path (median seed):", "", _critical_paths({"axi_controller": axi}), ""]
    rows = _axi_cost_rows(d.get("top", {}), axi)
    if rows:
        out += ["Against the native top:", "",
                _table(["", "native top", "AXI top", "difference", "target"], rows), ""]
    return out


def markdown(report):
    """The Markdown note for ``report`` (whatever parts it holds)."""
    out = ["# ECP5 implementation report", ""]
    if "default" in report:
        d = report["default"]
        p = d["params"]
        out += [f"Configuration `{d['name']}`: LINE_BITS {p['line_bits']}, MAX_WORKERS "
                f"{p['max_workers']}, counters {p['counter_bits']} bits, DEPTH {p['depth']}, "
                f"{p['num_windows']} windows; both routes, FP32 passthrough and CSRs. "
                f"{_tiles_text(d)}"
                f"Out of context, every port registered, placed by nextpnr's HeAP placer and "
                f"routed by router2 with its alternative weights; Fmax is the median over seeds "
                f"{_seed_text(d)}; utilization from the median seed's "
                f"synthesis. LUT4 counts include the two LUT4s in each carry cell; FF excludes "
                f"the port registers. Tools: {d['tools']}.", ""]
        out += ["## Controller top", "", _block_section("Place and route", {"controller": d["top"]}),
                "", "Critical path (median seed):", "", _critical_paths({"controller": d["top"]}),
                "", "Targets:", "", _targets(d["top"], d["targets"], d.get("board")), ""]
        if d["top"].get("memory"):
            out += [d["top"]["memory"], ""]
        if d.get("other_tops"):
            out += ["### By TILE_LANES and floorplan", "",
                    "The controller top with each tile width and block RAM floorplan "
                    "measured (the same seeds); "
                    "place and route is the median over the routed seeds of the seconds one "
                    "nextpnr run took.", "",
                    _tile_lanes_section([d["top"], *d["other_tops"]]), ""]
        if d.get("axi_top"):
            out += _axi_section(d)
        if d.get("blocks"):
            out += ["## Blocks", "", *_engines_text(d),
                    _block_section("Each block out of context", d["blocks"]),
                    "", "Critical paths:", "", _critical_paths(d["blocks"]), ""]
        if d.get("gates"):
            out += ["## Gate equivalents", "",
                    "Yosys, technology independent: flattened, flip-flops legalized to plain D "
                    "flip-flops, mapped to two-input CMOS gates (`abc -g cmos2`); NAND2 "
                    "equivalents = transistors / 4. Memories are left to SRAM macros and "
                    "reported as bits.", "", _gates_section(d["gates"]), ""]
        if d.get("board"):
            out += ["## Board build", "", _board_section(d["board"]), ""]
    if "timing_model" in report:
        out += ["## Timing model", "", _timing_section(report["timing_model"]), ""]
    if report.get("sweep"):
        lanes = sorted({point["tile_lanes"] for point in report["sweep"]
                        if point.get("tile_lanes")})
        tiles = (f"; TILE_LANES {' or '.join(str(t) for t in lanes)}" if lanes else "")
        spares = report.get("sweep_spare_seeds")
        spare_text = (f" (spare seeds {', '.join(str(s) for s in spares)} replace one that "
                      f"fails)" if spares else "")
        out += ["## Sweep", "", f"Seeds {', '.join(str(s) for s in report['sweep_seeds'])}"
                f"{spare_text}; "
                f"the controller top, every port registered, placed by nextpnr's HeAP "
                f"placer{tiles}.", "",
                _sweep_section(report["sweep"]), ""]
        if report.get("sweep_plot"):
            out += [f"![area and Fmax]({pathlib.Path(report['sweep_plot']).name})", ""]
    return "\n".join(out)


def plot_sweep(sweep, path):
    """Area (LUT4, FF, DP16KD) and Fmax against LINE_BITS, one line per MAX_WORKERS and part."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in sweep if p.get("area")]
    if not points:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    depth_default = min(p["params"]["depth"] for p in points)
    fmax, area = {}, {}
    for point in points:
        prm = point["params"]
        if prm["depth"] != depth_default:
            continue
        area.setdefault(prm["max_workers"], []).append((prm["line_bits"], point["area"]))
        for key, entry in point.get("grades", {}).items():
            if "fmax_median_mhz" in entry:
                fmax.setdefault((prm["max_workers"], key), []).append(
                    (prm["line_bits"], entry["fmax_median_mhz"]))
    for (workers, key), values in sorted(fmax.items()):
        values.sort()
        axes[0].plot([v[0] for v in values], [v[1] for v in values],
                     "-" if key == "s6" else "--", marker="o", label=f"W={workers}, {key}")
    for workers, values in sorted(area.items()):
        values.sort(key=lambda v: v[0])
        x = [v[0] for v in values]
        axes[1].plot(x, [v[1]["lut4"] for v in values], marker="o", label=f"W={workers}")
        axes[2].plot(x, [v[1]["ff"] for v in values], marker="o", label=f"W={workers}")
    axes[0].set_title("Fmax (median over seeds)")
    axes[0].set_ylabel("MHz")
    axes[1].set_title("LUT4 (incl. carry)")
    axes[2].set_title("flip-flops (without port registers)")
    for ax in axes:
        ax.set_xlabel("LINE_BITS")
        ax.set_xscale("log", base=2)
        ax.set_xticks([128, 256, 512], ["128", "256", "512"])
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(f"Controller top on ECP5-85F (DEPTH {depth_default}); s6 = LFE5U-85F-6, "
                 f"s8 = LFE5UM5G-85F-8")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def render(out, report):
    """Write ``report.json``, ``report.md`` and the plot into ``out``; return their paths."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    if report.get("sweep"):
        plot = plot_sweep(report["sweep"], out / "sweep.png")
        if plot:
            report["sweep_plot"] = plot
            paths.append(pathlib.Path(plot))
    paths.insert(0, save(out, report))
    md = out / "report.md"
    md.write_text(markdown(report), encoding="utf-8")
    paths.insert(1, md)
    return paths
