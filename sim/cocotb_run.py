"""Build a design with Icarus Verilog or Verilator and run a cocotb test module against it.

Every cocotb run of the project goes through :func:`run_cocotb`: the regression
(:mod:`neuron_fabric.sim.regression`) and the pytest runners under ``tests/``. It checks that
the simulator is there (:class:`~neuron_fabric.gen.tools.ToolError` otherwise, saying
what to install), builds in ``work/sim_build`` with a 1 ns / 1 ps timescale, runs the tests
with ``work`` as their folder and reads the verdict from ``work/results.xml``.

cocotb's runner fails a run with failing tests only when it is called under pytest (and then
by ``sys.exit``); from a script it returns as if all passed. :func:`run_cocotb` behaves the
same way in both: it never raises for a failing build, simulator or test, and returns a
:class:`CocotbRun` whose ``error`` says what went wrong and which log to read.

:func:`manifest_design` gives the toplevel and the files of a block of a generated manifest,
or of every block side by side, in the form :func:`run_cocotb` takes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..gen import tools

__all__ = ["SIMULATORS", "VERILATOR_BUILD_ARGS", "CocotbRun", "run_cocotb", "manifest_design"]

#: The simulators a design can be run on.
SIMULATORS = ("icarus", "verilator")

#: Verilator options of every build: the generated Verilog is linted by the generator, so
#: its warnings do not stop the build here; ``-O1`` instead of ``verilated.mk``'s ``-Os``
#: compiles the 512-bit top in less than half the time and runs it as fast.
VERILATOR_BUILD_ARGS = ("-Wno-fatal", "-CFLAGS", "-O1")

TIMESCALE = ("1ns", "1ps")


@dataclasses.dataclass(frozen=True)
class CocotbRun:
    """The outcome of one build and run.

    Members
    -------
    simulator, toplevel : str
        What was built.
    work : Path
        The run's folder: ``sim_build/``, ``build.log``, ``run.log``, ``results.xml`` and the
        waves when recorded.
    tests, failed : int
        Counts read from ``results.xml`` (0 when there is none).
    build_s, run_s : float
        Wall-clock seconds of the build and of the run (``nan`` where not reached).
    error : str
        Empty when at least one test ran and none failed; otherwise why not, with the log
        to read.
    """

    simulator: str
    toplevel: str
    work: Path
    tests: int
    failed: int
    build_s: float
    run_s: float
    error: str

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def ran(self) -> bool:
        """Whether the build succeeded and the simulator was started."""
        return not math.isnan(self.run_s)

    @property
    def results_xml(self) -> Path:
        return self.work / "results.xml"

    @property
    def run_log(self) -> Path:
        return self.work / "run.log"

    @property
    def build_log(self) -> Path:
        return self.work / "build.log"

    def log_text(self) -> str:
        """The simulator's output of the run (empty when it did not start)."""
        try:
            return self.run_log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


def _verilator_runner():
    """cocotb's Verilator runner with ``--public-depth 1`` in place of ``--public-flat-rw``.

    cocotb builds with ``--public-flat-rw``, which makes every signal of the design visible
    through VPI and keeps Verilator from optimizing any of them away; the benches touch only
    the top's ports. On the 512-bit top that, with ``-O1``, cuts the C++ build from about 20
    to about 7 minutes on two busy cores. Waves still show every signal: tracing does not
    depend on it.
    """
    from cocotb_tools.runner import Verilator

    class PortsOnlyVerilator(Verilator):
        def _build_command(self):
            commands = super()._build_command()
            first = []
            for arg in commands[0]:
                first += ["--public-depth", "1"] if arg == "--public-flat-rw" else [arg]
            commands[0] = first
            return commands

    return PortsOnlyVerilator()


def _simulator_environment(simulator, verilator_root):
    """Check that ``simulator`` is installed; the context in which its runner must be called."""
    if simulator == "verilator":
        root = verilator_root if verilator_root is not None else tools.default_verilator_root()
        tools.verilator_version(root)
        return tools.verilator_environment(root)
    tools.check_iverilog()
    return contextlib.nullcontext()


def run_cocotb(simulator: str, *, toplevel: str, sources: Sequence[Path | str],
               test_module: str, work: Path | str, env: Mapping[str, str] | None = None,
               test_filter: str | None = None, waves: bool = False,
               verilator_config: Path | str | None = None, build_args: Sequence[str] = (),
               verilator_root: Path | str | None = None,
               log: Callable[[str], None] = lambda line: None) -> CocotbRun:
    """Build ``sources`` with ``simulator`` and run the cocotb tests of ``test_module``.

    Parameters
    ----------
    simulator : ``"icarus"`` or ``"verilator"``
    toplevel : str
        The Verilog module to simulate.
    sources : list of paths
        The Verilog files.
    test_module : str
        The cocotb test module, importable by the simulator's Python
        (``"neuron_fabric.sim.tb_blocks"``).
    work : path
        Folder of the build, the logs, ``results.xml`` and the waves; made if missing.
    env : mapping
        Environment variables of the test run (how the testbenches take their options).
    test_filter : str
        Regular expression searched in each test's full name; only matching tests run.
    waves : bool
        Record waves (Icarus: FST, Verilator: VCD) in ``work``.
    verilator_config : path
        A Verilator configuration file (lint waivers) built before ``sources``; Icarus
        ignores it.
    build_args : list of str
        Simulator options after :data:`VERILATOR_BUILD_ARGS` (Verilator) or alone (Icarus).
    verilator_root : path
        The relocated Verilator; default
        :func:`~neuron_fabric.gen.tools.default_verilator_root`.
    log : callable
        Receives a line when the build starts and when it ends.

    Returns
    -------
    CocotbRun
        Never raises for a failing build, simulator or test: ``error`` says so.

    Raises
    ------
    ValueError
        If ``simulator`` is not one of :data:`SIMULATORS`.
    ToolError
        If the simulator is not installed; the message says how to install it.
    """
    if simulator not in SIMULATORS:
        raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, not {simulator!r}")
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    sources = [Path(source) for source in sources]
    if simulator == "verilator":
        if verilator_config is not None:
            sources.insert(0, Path(verilator_config))
        build_args = [*VERILATOR_BUILD_ARGS, *build_args]
    results_xml = work / "results.xml"
    results_xml.unlink(missing_ok=True)
    nan = float("nan")

    def outcome(error="", *, build_s=nan, run_s=nan, tests=0, failed=0):
        return CocotbRun(simulator, toplevel, work, tests, failed, build_s, run_s, error)

    with _simulator_environment(simulator, verilator_root):
        runner = _verilator_runner() if simulator == "verilator" else get_runner(simulator)
        log(f"building {toplevel} with {simulator} in {work}")
        started = time.perf_counter()
        try:
            # Icarus skips a build whose output is newer than every source, which misses a
            # source replaced by an older file, so it builds every time; Verilator's make
            # decides for itself what to compile again.
            runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=work / "sim_build",
                         always=True, build_args=list(build_args), waves=waves,
                         timescale=TIMESCALE, log_file=work / "build.log")
        except (RuntimeError, SystemExit) as error:
            return outcome(f"build failed: {error}; see {work / 'build.log'}",
                           build_s=time.perf_counter() - started)
        build_s = time.perf_counter() - started
        log(f"built in {build_s:.1f} s; running tests")
        started = time.perf_counter()
        run_error = ""
        try:
            runner.test(test_module=test_module, hdl_toplevel=toplevel,
                        hdl_toplevel_lang="verilog", test_dir=work,
                        results_xml=str(results_xml), test_filter=test_filter,
                        timescale=TIMESCALE, log_file=work / "run.log",
                        extra_env=dict(env or {}), waves=waves)
        except (RuntimeError, SystemExit) as error:
            # Under pytest the runner exits on failing tests; results.xml says which.
            run_error = f"the simulator stopped ({type(error).__name__}: {error})"
        run_s = time.perf_counter() - started

    if not results_xml.is_file():
        return outcome(f"{run_error or 'the simulator did not finish'}: no {results_xml}; "
                       f"see {work / 'run.log'}", build_s=build_s, run_s=run_s)
    try:
        tests, failed = get_results(results_xml)
    except RuntimeError as error:
        return outcome(f"{error}; see {work / 'run.log'}", build_s=build_s, run_s=run_s)
    error = ""
    if failed or tests == 0:
        error = (f"{failed} of {tests} cocotb tests failed (a run of no tests fails too); "
                 f"see {work / 'run.log'}")
    elif run_error:
        error = f"{run_error} after its tests passed; see {work / 'run.log'}"
    return outcome(error, build_s=build_s, run_s=run_s, tests=tests, failed=failed)


def manifest_design(manifest, role: str, work: Path | str) -> dict:
    """``toplevel``, ``sources`` and ``verilator_config`` of block ``role`` of ``manifest``
    (a :class:`~neuron_fabric.sim.cocotb_bench.Manifest` or its folder), as keywords of
    :func:`run_cocotb`.

    ``role="blocks"`` is every block of :data:`~neuron_fabric.sim.cocotb_bench.BLOCK_ROLES`
    side by side (:func:`~neuron_fabric.sim.cocotb_bench.blocks_wrapper`); the wrapper's
    Verilog is written into ``work``.
    """
    from .cocotb_bench import BLOCK_ROLES, BLOCKS_TOPLEVEL, Manifest, blocks_wrapper

    if not isinstance(manifest, Manifest):
        manifest = Manifest(manifest)
    config = manifest.data.get("verilator_config")
    design = dict(verilator_config=manifest.folder / config if config else None)
    if role != "blocks":
        return dict(design, toplevel=manifest.block(role)["module"],
                    sources=[manifest.source(role)])
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    wrapper = work / f"{BLOCKS_TOPLEVEL}.v"
    wrapper.write_text(blocks_wrapper(manifest), encoding="utf-8")
    return dict(design, toplevel=BLOCKS_TOPLEVEL,
                sources=[*(manifest.source(role) for role in BLOCK_ROLES), wrapper])
