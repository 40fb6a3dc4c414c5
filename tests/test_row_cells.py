"""The fold adder: its ECP5 carry-cell form proven equal to the generic one, bad choices refused."""

import random
import re
import subprocess

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from neuron_fabric.gen.verilog import yosys_binary
from neuron_fabric.hw import row_cells
from neuron_fabric.hw.lane_tile import LaneTile
from neuron_fabric.hw.row_cells import FoldAdder


class _Miter(Elaboratable):
    """Both forms of the adder on the same inputs; ``differ`` is 1 where their sums differ."""

    def __init__(self, width):
        self.width = width
        self.inputs = [Signal(width, name=name) for name in ("addend", "last", "chosen")]
        self.from_last = Signal(name="from_last")
        self.differ = Signal(name="differ")

    def elaborate(self, platform):
        m = Module()
        sums = []
        for name, cells in (("generic", None), ("ecp5", "ecp5")):
            m.submodules[name] = adder = FoldAdder(self.width, cells=cells)
            m.d.comb += [adder.addend.eq(self.inputs[0]), adder.last.eq(self.inputs[1]),
                         adder.chosen.eq(self.inputs[2]), adder.from_last.eq(self.from_last)]
            sums.append(adder.sum)
        m.d.comb += self.differ.eq(sums[0] != sums[1])
        return m


def _forms_proven_equal(width, folder):
    """Yosys's SAT solver, with Yosys's own simulation model of the CCU2C cell, on the
    miter: True when no input makes the two forms differ."""
    miter = _Miter(width)
    (folder / "miter.il").write_text(rtlil.convert(
        miter, name="miter", ports=[*miter.inputs, miter.from_last, miter.differ]))
    # The cell models are read in full (not as black boxes); ``hierarchy`` gives each CCU2C
    # instance its INIT before ``flatten`` takes the model in.
    script = ("read_rtlil miter.il; read_verilog -overwrite -noblackbox +/ecp5/cells_sim.v; "
              "hierarchy -top miter; proc; flatten; opt; sat -verify -prove differ 0 miter")
    run = subprocess.run([yosys_binary(), "-q", "-p", script], cwd=folder,
                         capture_output=True, text=True)
    return run.returncode == 0


@pytest.mark.parametrize("width", [2, 10, 12])
def test_the_carry_cell_form_equals_the_generic_adder_for_every_input(width, tmp_path):
    assert _forms_proven_equal(width, tmp_path)


def test_the_proof_finds_a_carry_cell_with_its_row_inputs_swapped(monkeypatch, tmp_path):
    # A LUT that takes the other row for each value of from_last: the proof must fail.
    monkeypatch.setattr(row_cells, "_choose_and_add_init", lambda: row_cells._lut_init(
        lambda a, b, c, d: a ^ (d if b else c)))
    assert not _forms_proven_equal(10, tmp_path)


def test_the_generic_adder_chooses_then_adds_modulo_its_width():
    adder = FoldAdder(6)
    rng = random.Random(5)
    cases = [tuple(rng.randrange(64) for _ in range(3)) + (rng.randrange(2),)
             for _ in range(200)]

    async def bench(ctx):
        for addend, last, chosen, from_last in cases:
            ctx.set(adder.addend, addend)
            ctx.set(adder.last, last)
            ctx.set(adder.chosen, chosen)
            ctx.set(adder.from_last, from_last)
            assert ctx.get(adder.sum) == ((last if from_last else chosen) + addend) % 64

    sim = Simulator(adder)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("kwargs, message", [
    (dict(width=10, cells="ice40"), "cells must be one of (None, 'ecp5'), not 'ice40'"),
    (dict(width=9, cells="ecp5"),
     "width must be even with ECP5 cells (two bits a carry cell), not 9"),
    (dict(width=0), "width"),
])
def test_bad_choices_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FoldAdder(**kwargs)


def test_the_adder_built_in_place_refuses_an_odd_width_for_carry_cells():
    with pytest.raises(ValueError, match=re.escape("width must be even with ECP5 cells")):
        row_cells.choose_and_add(Module(), addend=Signal(3), from_last=Signal(),
                                 last=Signal(3), chosen=Signal(3), cells="ecp5", name="fold")


def test_a_lane_tile_refuses_cells_it_cannot_build():
    with pytest.raises(ValueError, match="cells must be one of"):
        LaneTile(cells="gowin")


def test_an_ecp5_tile_folds_in_carry_cells():
    """The ECP5 tile's netlist: a CCU2C per two row bits; the generic tile has none."""
    tile = LaneTile(tile_lanes=4, group_lanes=2, max_workers=4, rows=4, cells="ecp5")
    row_bits = 4 * 3   # four line bits, three-bit counters
    assert rtlil.convert(tile, name="tile").count("cell \\CCU2C") == row_bits // 2
    generic = rtlil.convert(LaneTile(tile_lanes=4, group_lanes=2, max_workers=4, rows=4),
                            name="tile")
    assert "cell \\CCU2C" not in generic
