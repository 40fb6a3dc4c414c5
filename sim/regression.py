"""``python -m neuron_fabric.sim.regression``: the cocotb regression of the emitted Verilog.

Builds the generated Verilog with each simulator, runs the cocotb test modules
(:mod:`.tb_controller` on the controller top, :mod:`.tb_blocks` on the blocks) and prints a
summary: tests, lines checked, simulated cycles and simulated cycles per second, per
simulator. Writes ``OUT/summary.json`` and ``OUT/summary.md``; builds, logs, ``results.xml``
and waves (``--waves``) go under ``OUT/<simulator>/<job>/``.

Jobs per simulator:

- ``controller``: the top of the parameter set in ``--verilog`` (default preset: the 512-bit
  top), every test of :mod:`.tb_controller`, every step of both real traces from ``--traces``;
- ``narrow``: a 128-bit top whose counters hold fewer votes than MAX_WORKERS, generated
  here, for counter saturation under a wrong NUM_WORKERS (and random traffic);
- ``blocks``: every block of the ``small`` preset side by side
  (:func:`.cocotb_bench.blocks_wrapper`), the engines against the golden functions;
- ``axi``: the AXI top (:mod:`.tb_axi`, cocotbext-axi's models): on Verilator the one beside
  the top in ``--verilog`` (``axi_<name>/``) with every step of both traces, on Icarus the
  ``small`` preset's with one step of 12 lines per worker and route.

That is the Verilator plan. Icarus runs every controller test on the 512-bit top too, the
real traces cut to two steps and 16 lines per worker and route (Icarus simulates the top
about ten times slower than Verilator), then every controller test on the 128-bit
``small`` preset with one step of each trace and two lines per worker and route, and the
``narrow`` and ``blocks`` jobs. The two simulators run side by side, one process each.

Exit status: 0 when every job passed, 1 otherwise (``results.xml`` is read, since cocotb's
runner does not fail outside pytest), 2 for bad arguments.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time

__all__ = ["Job", "jobs_for", "main"]

SIMULATORS = ("icarus", "verilator")
NARROW = dict(line_bits=128, max_workers=4, depth=8, num_windows=2, counter_bits=2)


@dataclasses.dataclass(frozen=True)
class Job:
    """One build and one cocotb run: ``manifest`` names the Verilog folder, ``role`` the block
    (``"blocks"`` for the wrapper of every block), ``test_filter`` a regex of test names."""
    name: str
    manifest: str
    role: str
    module: str
    test_filter: str | None = None
    env: tuple = ()


def jobs_for(simulator, *, top, small, narrow, seeds, full_traces=True,
             icarus_full_traces=False, axi_top=None, axi_small=None):
    """The jobs of ``simulator`` over the Verilog folders ``top``, ``small`` and ``narrow``,
    and the AXI tops' ``axi_top`` (Verilator) and ``axi_small`` (Icarus) where given.

    ``full_traces`` replays every step of both traces on Verilator's top, and
    ``icarus_full_traces`` on Icarus's; otherwise two steps of 16 lines per worker and route.
    """
    def traces(full):
        return ((("NFABRIC_TRACE_STEPS", "all"),) if full else
                (("NFABRIC_TRACE_STEPS", "2"), ("NFABRIC_TRACE_LINES", "16")))

    seeds = ",".join(str(s) for s in seeds)
    common = (("NFABRIC_SEEDS", seeds),)
    controller = "neuron_fabric.sim.tb_controller"
    blocks = "neuron_fabric.sim.tb_blocks"
    axi = "neuron_fabric.sim.tb_axi"
    if simulator == "verilator":
        return [
            Job("controller", top, "controller", controller,
                env=common + traces(full_traces)),
            Job("narrow", narrow, "controller", controller,
                test_filter="counters_saturate|random_traffic", env=common),
            Job("blocks", small, "blocks", blocks, env=common + (("NFABRIC_VECTORS", "200"),)),
        ] + ([Job("axi", axi_top, "axi_controller", axi, env=common + traces(full_traces))]
             if axi_top else [])
    axi_jobs = ([Job("axi", axi_small, "axi_controller", axi,
                     env=common + (("NFABRIC_TRACE_STEPS", "1"), ("NFABRIC_TRACE_LINES", "12")))]
                if axi_small else [])
    return axi_jobs + [
        Job("controller", top, "controller", controller,
            env=common + traces(icarus_full_traces)),
        Job("small", small, "controller", controller,
            env=common + (("NFABRIC_TRACE_STEPS", "1"), ("NFABRIC_TRACE_LINES", "2"),
                          ("NFABRIC_RANDOM_OPS", "120"))),
        Job("narrow", narrow, "controller", controller, test_filter="counters_saturate",
            env=common),
        Job("blocks", small, "blocks", blocks, env=common + (("NFABRIC_VECTORS", "12"),)),
    ]


def _log(text):
    print(text, flush=True)


def _generate(params, out, log):
    from ..gen.verilog import generate
    from .cocotb_bench import Manifest

    folder = out / params.name
    manifest = folder / "manifest.json"
    if manifest.is_file():
        # Regenerate only when the design or the generator changed since.
        root = pathlib.Path(__file__).resolve().parent.parent
        newest = max(p.stat().st_mtime for p in [*root.glob("hw/*.py"), *root.glob("gen/*.py")])
        if manifest.stat().st_mtime > newest:
            return Manifest(folder)
    log(f"sim: generating Verilog for {params.name} into {folder}")
    generate(params, folder, log=lambda line: None)
    return Manifest(folder)


def _generate_axi(params, out, log):
    from ..gen.axi import axi_folder_name, generate_axi

    folder = out / axi_folder_name(params)
    log(f"sim: generating the AXI top for {params.name} into {folder}")
    generate_axi(params, folder, log=lambda line: None)
    return folder


def _run_job(simulator, job, out, *, traces, waves, verilator_root, log):
    """Build and run one job; returns its result dict."""
    from .cocotb_bench import Manifest
    from .cocotb_run import manifest_design, run_cocotb
    from ..gen.tools import ToolError

    manifest = Manifest(job.manifest)
    work = (out / simulator / job.name).resolve()
    design = manifest_design(manifest, job.role, work)
    stats_file = work / "stats.jsonl"
    stats_file.unlink(missing_ok=True)
    env = {"NFABRIC_MANIFEST": str(manifest.folder.resolve()),
           "NFABRIC_STATS": str(stats_file), **dict(job.env)}
    if traces is not None:
        env["NFABRIC_TRACES"] = str(pathlib.Path(traces).resolve())
    result = dict(simulator=simulator, job=job.name, toplevel=design["toplevel"],
                  params=manifest.params.name, tests=0, failed=0)
    label = f"sim: {simulator}/{job.name}: "
    try:
        run = run_cocotb(simulator, **design, test_module=job.module, work=work, env=env,
                         test_filter=job.test_filter, waves=waves,
                         verilator_root=verilator_root,
                         log=lambda text: log(label + text))
    except ToolError as error:
        result["error"] = str(error)
        log(f"{label}FAILED: {error}")
        return result
    result.update(tests=run.tests, failed=run.failed, build_s=run.build_s)
    if run.error:
        result["error"] = run.error
    if not run.ran:
        log(f"{label}BUILD FAILED, see {run.build_log}")
        return result
    result["run_s"] = run.run_s
    entries = []
    if stats_file.is_file():
        entries = [json.loads(line) for line in stats_file.read_text().splitlines() if line]
    result["entries"] = entries
    for key in ("cycles", "lines", "mem_lines", "requests", "csr_reads"):
        result[key] = sum(e.get(key, 0) for e in entries)
    result["sim_wall_s"] = sum(e.get("wall", 0.0) for e in entries)
    verdict = "FAILED" if "error" in result else "ok"
    log(f"{label}{verdict}: {result['tests'] - result['failed']}/"
        f"{result['tests']} tests, {result['lines'] + result['mem_lines']} lines checked, "
        f"{result['cycles']} cycles in {result['run_s']:.1f} s"
        + (f": {result['error']}" if "error" in result else ""))
    return result


def _worker(args):
    """Run every job of one simulator; write ``OUT/<sim>/result.json``."""
    out = pathlib.Path(args.out)
    folders = json.loads(args.worker_jobs)
    jobs = jobs_for(args.worker, seeds=args.seeds, full_traces=not args.quick_traces,
                    icarus_full_traces=args.icarus_full_traces, **folders)
    results = []
    prefix = f"[{args.worker}] "
    for job in jobs:
        results.append(_run_job(args.worker, job, out, traces=args.traces, waves=args.waves,
                                verilator_root=args.verilator_root,
                                log=lambda text: _log(prefix + text)))
    (out / args.worker).mkdir(parents=True, exist_ok=True)
    (out / args.worker / "result.json").write_text(json.dumps(results, indent=1) + "\n")
    return 1 if any("error" in r for r in results) else 0


def _summary(results, wall_s):
    rows = []
    for simulator in sorted({r["simulator"] for r in results}):
        mine = [r for r in results if r["simulator"] == simulator]
        tests = sum(r["tests"] for r in mine)
        failed = sum(r["failed"] for r in mine)
        lines = sum(r.get("lines", 0) + r.get("mem_lines", 0) for r in mine)
        cycles = sum(r.get("cycles", 0) for r in mine)
        sim_wall = sum(r.get("sim_wall_s", 0.0) for r in mine)
        top = [r for r in mine if r["job"] == "controller"]
        # The top's rate under traffic: tests that only read registers idle the datapath.
        busy = [e for r in top for e in r.get("entries", ()) if e.get("requests")]
        top_rate = (sum(e["cycles"] for e in busy) / sum(e["wall"] for e in busy)
                    if busy and sum(e["wall"] for e in busy) else None)
        rows.append(dict(
            simulator=simulator, tests=tests, failed=failed, lines_checked=lines,
            cycles=cycles, cycles_per_s=cycles / sim_wall if sim_wall else 0.0,
            top=top[0]["params"] if top else None, top_cycles_per_s=top_rate,
            build_s=sum(r.get("build_s", 0.0) for r in mine),
            run_s=sum(r.get("run_s", 0.0) for r in mine),
            ok=not any("error" in r for r in mine)))
    return {"wall_s": wall_s, "simulators": rows, "jobs": results}


#: Cycles of checked random traffic the harness plays on the top for its rate.
HARNESS_CYCLES = 300_000


def _harness_rate(top, summary, out):
    """The top on the Verilator harness, without cocotb, after the simulators are done (so it
    has a core to itself): cycles per second of random traffic checked against the model,
    and of the RTL alone, each against cocotb's rate on the same top in this run."""
    from .long_regression import run as long_run

    _log(f"sim: the Verilator harness on {top.name}, {HARNESS_CYCLES:,} cycles of checked "
         f"random traffic (no cocotb)")
    try:
        tally = long_run(top, cycles=HARNESS_CYCLES, seed=1, cache=out.parent / "harness",
                         log=_log)
    except Exception as error:  # reported beside the cocotb results, not fatal to them
        return {"error": f"{type(error).__name__}: {error}"}
    cocotb = next((r["top_cycles_per_s"] for r in summary["simulators"]
                   if r["simulator"] == "verilator"), None)
    rtl = tally.cycles / tally.rtl_s
    checked = tally.cycles / (tally.rtl_s + tally.model_s)
    return {"top": top.name, "cycles": tally.cycles, "requests": tally.requests,
            "rtl_cycles_per_s": rtl, "checked_cycles_per_s": checked,
            "cocotb_cycles_per_s": cocotb,
            "ratio_rtl": rtl / cocotb if cocotb else None,
            "ratio_checked": checked / cocotb if cocotb else None}


def _rate(value):
    return "-" if value is None else f"{value:,.0f}"


def _markdown(summary):
    out = ["# cocotb regression of the emitted Verilog", "",
           f"Wall time: {summary['wall_s']:.0f} s (simulators side by side).", "",
           "| Simulator | Tests | Failed | Lines checked | Simulated cycles | Cycles/s (all) "
           "| Cycles/s (top, under traffic) | Build s | Run s |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in summary["simulators"]:
        out.append(f"| {r['simulator']} | {r['tests']} | {r['failed']} | {r['lines_checked']:,} "
                   f"| {r['cycles']:,} | {r['cycles_per_s']:,.0f} | "
                   f"{_rate(r['top_cycles_per_s'])} ({r['top']}) | {r['build_s']:.0f} | "
                   f"{r['run_s']:.0f} |")
    out += ["", "| Simulator | Job | Top | Tests | Failed | Lines | Cycles | Build s | Run s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in summary["jobs"]:
        out.append(f"| {r['simulator']} | {r['job']} | {r['toplevel']} | {r['tests']} | "
                   f"{r['failed']} | {r.get('lines', 0) + r.get('mem_lines', 0):,} | "
                   f"{r.get('cycles', 0):,} | {r.get('build_s', 0):.0f} | {r.get('run_s', 0):.0f} |")
    h = summary.get("harness")
    if h and "error" in h:
        out += ["", f"Verilator harness (no cocotb): failed: {h['error']}"]
    elif h:
        ratio = (lambda v: "-" if v is None else f"{v:.1f}x")
        out += ["", f"Verilator harness (no cocotb) on {h['top']}, random traffic with idles and "
                f"backpressure, every response checked against the golden model, one core: "
                f"{h['cycles']:,} cycles; {h['rtl_cycles_per_s']:,.0f} cycles/s in the RTL alone "
                f"({ratio(h['ratio_rtl'])} cocotb's rate on the same top), "
                f"{h['checked_cycles_per_s']:,.0f} cycles/s with the model's checks "
                f"({ratio(h['ratio_checked'])})."]
    return "\n".join(out) + "\n"


def _parser():
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.sim.regression",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verilog", type=pathlib.Path, default=pathlib.Path("build/verilog"),
                        help="folder written by `python -m neuron_fabric.gen` (default: %(default)s)")
    parser.add_argument("--name", default=None,
                        help="parameter set under --verilog (default: the default preset's)")
    parser.add_argument("--traces", type=pathlib.Path, default=pathlib.Path("build/traces"),
                        help="captured traces (default: %(default)s)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/sim"),
                        help="builds, logs, waves and the summary (default: %(default)s)")
    parser.add_argument("--simulators", nargs="+", choices=SIMULATORS, default=list(SIMULATORS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1],
                        help="seeds of the randomized tests (default: 1)")
    parser.add_argument("--waves", action="store_true", help="record waves (or WAVES=1)")
    parser.add_argument("--quick-traces", action="store_true",
                        help="replay 2 steps of 16 lines per worker on Verilator, not every line")
    parser.add_argument("--icarus-full-traces", action="store_true",
                        help="replay every step of both traces on Icarus's top too, not 2 "
                             "steps of 16 lines per worker (about 15 minutes)")
    parser.add_argument("--verilator-root", type=pathlib.Path, default=None)
    parser.add_argument("--worker", choices=SIMULATORS, help=argparse.SUPPRESS)
    parser.add_argument("--worker-jobs", help=argparse.SUPPRESS)
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    args.waves = args.waves or os.environ.get("WAVES", "") not in ("", "0")
    if args.worker:
        return _worker(args)

    from ..golden.params import PRESETS, FabricParams
    from .cocotb_bench import Manifest

    started = time.perf_counter()
    name = args.name or PRESETS["default"].name
    top = args.verilog / name
    if not (top / "manifest.json").is_file():
        print(f"sim: {top / 'manifest.json'} does not exist; run `make verilog` (or "
              f"`python -m neuron_fabric.gen --out {args.verilog}`) first", file=sys.stderr)
        return 2
    for workload in ("digits_cnn", "char_lm"):
        if not (args.traces / f"{workload}.npz").is_file():
            print(f"sim: {args.traces / workload}.npz does not exist; run `make traces` first",
                  file=sys.stderr)
            return 2
    Manifest(top)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    generated = out / "verilog"
    small = _generate(PRESETS["small"], generated, _log).folder
    narrow = _generate(FabricParams(**NARROW), generated, _log).folder
    folders = dict(top=str(top.resolve()), small=str(small.resolve()),
                   narrow=str(narrow.resolve()),
                   axi_small=str(_generate_axi(PRESETS["small"], generated, _log).resolve()))
    from ..gen.axi import axi_folder_name

    axi_top = args.verilog / axi_folder_name(Manifest(top).params)
    if (axi_top / "manifest.json").is_file():
        folders["axi_top"] = str(axi_top.resolve())
    else:
        _log(f"sim: no AXI top in {axi_top}; `make verilog` writes it")
    _log(f"sim: simulators {', '.join(args.simulators)} side by side; logs under {out}/")
    children = []
    for simulator in args.simulators:
        command = [sys.executable, "-m", "neuron_fabric.sim.regression", "--worker", simulator,
                   "--worker-jobs", json.dumps(folders), "--out", str(out),
                   "--traces", str(args.traces), "--seeds", *map(str, args.seeds)]
        if args.waves:
            command.append("--waves")
        if args.quick_traces:
            command.append("--quick-traces")
        if args.icarus_full_traces:
            command.append("--icarus-full-traces")
        if args.verilator_root:
            command += ["--verilator-root", str(args.verilator_root)]
        (out / simulator).mkdir(parents=True, exist_ok=True)
        (out / simulator / "result.json").unlink(missing_ok=True)
        children.append((simulator, subprocess.Popen(command)))
    for _, child in children:
        child.wait()
    results = []
    for simulator, child in children:
        path = out / simulator / "result.json"
        if path.is_file():
            results += json.loads(path.read_text())
        else:
            results.append(dict(simulator=simulator, job="all", toplevel="-", params="-",
                                tests=0, failed=0, error=f"the {simulator} run crashed "
                                f"(exit {child.returncode})"))
    summary = _summary(results, time.perf_counter() - started)
    if "verilator" in args.simulators:
        summary["harness"] = _harness_rate(top, summary, out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "summary.md").write_text(_markdown(summary))
    _log("")
    _log(f"{'simulator':<10} {'tests':>6} {'failed':>6} {'lines checked':>14} {'cycles':>10} "
         f"{'cycles/s':>9} {'top cycles/s':>13}")
    for r in summary["simulators"]:
        _log(f"{r['simulator']:<10} {r['tests']:>6} {r['failed']:>6} {r['lines_checked']:>14,} "
             f"{r['cycles']:>10,} {r['cycles_per_s']:>9,.0f} {_rate(r['top_cycles_per_s']):>13}")
    failed = [f"{r['simulator']}/{r['job']}: {r['error']}" for r in results if "error" in r]
    if "error" in summary.get("harness", {}):
        failed.append(f"harness: {summary['harness']['error']}")
    _log(f"sim: {'FAILED' if failed else 'all passed'} in {summary['wall_s']:.0f} s; "
         f"summary in {out / 'summary.md'} and {out / 'summary.json'}")
    for line in failed:
        _log(f"sim:   {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
