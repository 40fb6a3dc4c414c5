"""The gate-level lane helpers against integer arithmetic, exhaustively at small widths."""

import itertools
import random

import pytest
from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.sim import Simulator

from neuron_fabric.hw.lane_logic import carry_out, kept_halves, kept_tree, step


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


@pytest.mark.parametrize("terms", [1, 3, 4, 5, 16, 17])
@pytest.mark.parametrize("op", ["any", "all"])
def test_kept_tree_reduces_like_the_operator_in_levels_of_four(terms, op):
    """Patterns of up to 17 terms (all zero, all one, each with one bit set or cleared, and
    random ones) reduce as ``any``/``all`` would, through ceil(log4(terms)) levels of kept
    gates over kept terms."""
    m = Module()
    bits = Signal(terms)
    out = Signal()
    root = kept_tree(m, list(bits), op, "t")
    m.d.comb += out.eq(root)
    rng = random.Random(terms)
    full = (1 << terms) - 1
    patterns = {0, full, *(1 << i for i in range(terms)), *(full ^ (1 << i) for i in range(terms)),
                *(rng.getrandbits(terms) for _ in range(32))}
    got = {}

    async def bench(ctx):
        for pattern in sorted(patterns):
            ctx.set(bits, pattern)
            got[pattern] = ctx.get(out)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == {p: int(p != 0) if op == "any" else int(p == full) for p in patterns}
    levels = 0
    while 4 ** levels < terms:
        levels += 1
    assert root.name == (f"t_l{levels - 1}_0" if levels else "t_0")
    assert root.attrs["keep"] == 1


@pytest.mark.parametrize("terms", [1, 2, 5, 8, 9])
@pytest.mark.parametrize("op", ["any", "all"])
def test_kept_halves_reduce_like_the_operator_with_the_root_left_to_the_caller(terms, op):
    """Every pattern of up to 9 terms reduces as ``any``/``all`` would once the caller joins
    the halves; each half is a kept tree over its own terms, the first taking the odd one."""
    m = Module()
    bits = Signal(terms)
    out = Signal()
    halves = kept_halves(m, list(bits), op, "t")
    m.d.comb += out.eq(getattr(Cat(halves), op)())
    got = {}

    async def bench(ctx):
        for pattern in range(1 << terms):
            ctx.set(bits, pattern)
            got[pattern] = ctx.get(out)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    full = (1 << terms) - 1
    assert got == {p: int(p != 0) if op == "any" else int(p == full) for p in range(1 << terms)}
    sizes = [n for n in ((terms + 1) // 2, terms // 2) if n]
    assert [half.name for half in halves] == [
        kept_tree(Module(), list(Signal(n)), op, f"t_{side}").name
        for side, n in zip("ab", sizes)]
    assert all(half.attrs["keep"] == 1 for half in halves)
