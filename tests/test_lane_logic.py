"""The gate-level lane helpers against integer arithmetic, exhaustively at small widths."""

import itertools

import pytest
from amaranth.hdl import Const, Module, Signal
from amaranth.sim import Simulator

from neuron_fabric.hw.lane_logic import carry_out, step


def evaluate(expression_of, inputs, widths):
    """Value of ``expression_of(*signals)`` for each tuple in ``inputs``."""
    signals = [Signal(w) for w in widths]
    out = Signal(len(expression_of(*signals)))
    results = []

    async def bench(ctx):
        for values in inputs:
            for s, v in zip(signals, values):
                ctx.set(s, v)
            results.append(ctx.get(out))

    m = Module()
    m.d.comb += out.eq(expression_of(*signals))
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return results


def test_step_counts_up_and_down_with_wraparound():
    width = 4
    inputs = [(v, u, d) for v in range(16) for u, d in ((0, 0), (1, 0), (0, 1))]
    got = evaluate(lambda v, u, d: step(v, up=u, down=d), inputs, (width, 1, 1))
    assert got == [(v + u - d) % 16 for v, u, d in inputs]


@pytest.mark.parametrize("carry_in", [0, 1])
def test_carry_out_is_the_adders_carry(carry_in):
    inputs = list(itertools.product(range(16), range(16)))
    got = evaluate(lambda a, b: carry_out(a, b, carry_in=carry_in), inputs, (4, 4))
    assert got == [int(a + b + carry_in >= 16) for a, b in inputs]


def test_carry_out_refuses_operands_of_different_widths():
    with pytest.raises(ValueError, match="carry_out operands must have equal widths, not 3 and 4"):
        carry_out(Const(0, 3), Const(0, 4))
