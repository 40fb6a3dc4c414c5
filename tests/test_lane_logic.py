"""The gate-level lane helpers against integer arithmetic, exhaustively at small widths."""

import itertools
import random

import pytest
from amaranth.hdl import C, Cat, Const, Fragment, Module, Signal
from amaranth.sim import Simulator

from neuron_fabric.hw.lane_logic import (joined_equal, joined_greater, kept_compare, kept_halves,
                                         kept_tree, select_line,
                                         shared_bit_terms, step)


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


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 6, 7])
def test_kept_compare_halves_join_to_greater_and_equal(width):
    """Every pair of ``width``-bit values compares as ``>`` and ``==`` once the caller joins
    the halves."""
    m = Module()
    a, b = Signal(width), Signal(width)
    greater, equal = Signal(), Signal()
    halves = kept_compare(m, a, b, "c")
    m.d.comb += [greater.eq(joined_greater(halves)), equal.eq(joined_equal(halves))]
    got = {}

    async def bench(ctx):
        for x, y in itertools.product(range(1 << width), repeat=2):
            ctx.set(a, x)
            ctx.set(b, y)
            got[x, y] = (ctx.get(greater), ctx.get(equal))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == {(x, y): (int(x > y), int(x == y))
                   for x, y in itertools.product(range(1 << width), repeat=2)}


@pytest.mark.parametrize("width,names", [
    (2, ["c_gt0"]),                  # one gate each, the caller's the second level
    (4, ["c_gt2", "c_gt0"]),         # two leaves, joined in the caller's gate
    (5, ["c_hi0_gt0", "c_gt0"]),     # the lone top bit joins the next two in one gate
    (8, ["c_hi0_gt0", "c_lo0_gt0"]),
])
def test_kept_compare_is_a_tree_of_kept_gates(width, names):
    halves = kept_compare(Module(), Signal(width), Signal(width), "c")
    assert [greater.name for greater, _ in halves] == names
    assert all(gate.attrs["keep"] == 1 for half in halves for gate in half)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 6, 7])
def test_kept_compare_for_greater_only_joins_to_greater(width):
    """Asked for ``>`` alone, the halves still join to ``>`` for every pair of values."""
    m = Module()
    a, b = Signal(width), Signal(width)
    greater = Signal()
    halves = kept_compare(m, a, b, "c", equal=False)
    assert halves[-1][1] is None
    m.d.comb += greater.eq(joined_greater(halves))
    got = {}

    async def bench(ctx):
        for x, y in itertools.product(range(1 << width), repeat=2):
            ctx.set(a, x)
            ctx.set(b, y)
            got[x, y] = ctx.get(greater)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == {(x, y): int(x > y) for x, y in itertools.product(range(1 << width), repeat=2)}


def _kept_gates(m):
    """The names of the wires ``m`` assigns: a comparison's kept gates."""
    return sorted(statement.lhs.name for statements in Fragment.get(m, None).statements.values()
                  for statement in statements)


@pytest.mark.parametrize("width,gates,with_equal", [
    (4, ["c_eq2", "c_gt0", "c_gt2"], ["c_eq0", "c_eq2", "c_gt0", "c_gt2"]),
    # The lone top bit stands alone; the two pairs below it join in one gate.
    (5, ["c_eq2", "c_gt0", "c_gt2", "c_lo0_gt0"],
     ["c_eq0", "c_eq2", "c_gt0", "c_gt2", "c_hi0_eq0", "c_hi0_gt0"]),
])
def test_kept_compare_for_greater_only_builds_no_gate_nothing_reads(width, gates, with_equal):
    """Every kept gate of a ``>``-only tree is read by another or by the caller's join; the
    full comparison of five bits takes two more (the lowest pair's equal and the top's)."""
    for equal, expected in ((False, gates), (True, with_equal)):
        m = Module()
        kept_compare(m, Signal(width), Signal(width), "c", equal=equal)
        assert _kept_gates(m) == expected


def test_kept_compare_refuses_operands_of_different_widths():
    with pytest.raises(ValueError, match="kept_compare operands must have equal, nonzero "
                                         "widths, not 3 and 4"):
        kept_compare(Module(), Const(0, 3), Const(0, 4), "c")


def test_shared_bit_terms_join_the_lines_that_read_one_bit():
    """Lines that are one register's bits seen other ways (a slice, a concatenation, a sign
    cast) share a term per bit; a bit that is no signal's own stands alone."""
    row, other = Signal(6, name="row"), Signal(2, name="other")
    terms = [(Signal(), row[0:2]),                      # row bits 0, 1
             (Signal(), Cat(row[4], row[1])),           # row bits 4, 1
             (Signal(), row[0:2].as_signed()),          # row bits 0, 1 again
             (Signal(), ~other),                        # gates: never shared
             (Signal(), ~other),
             (Signal(), Cat(other[1], C(0, 1))),        # a bit of another input; a constant
             (Signal(), Cat(row[1] ^ row[1], row[5]))]  # a gate that is 0; row bit 5
    assert [[indices for indices, _ in bit] for bit in shared_bit_terms(terms, [row, other])] == [
        [(0, 2), (1,), (3,), (4,), (5,), (6,)],
        [(0, 1, 2), (3,), (4,), (5,), (6,)],
    ]


def test_a_code_over_shared_terms_reads_like_select_line():
    """The readout's lines in a lane tile's shape (counter bits, and sums over the same row
    bits) read through each bit's distinct terms, chosen by a code made from the one-hot
    selects (the tile's ``_code_of`` and ``choose_by_code``), bit for bit as ``select_line``
    reads them. (A zero line, no select set, is the response ring's to give.)"""
    from neuron_fabric.hw.tile_row import code_of as _code_of
    from neuron_fabric.hw.row_cells import choose_by_code, code_bits

    m = Module()
    row = Signal(10, name="row")
    lines = [row[k::5][:2] for k in range(5)] + [Cat(row[2 * k], row[2 * k + 1]) for k in range(3)]
    selects = Signal(len(lines))
    terms = [(selects[i], line) for i, line in enumerate(lines)]
    shared = shared_bit_terms(terms, [row])
    assert sum(len(bit) for bit in shared) < 2 * len(lines)
    coded, plain_out = Signal(2), Signal(2)
    bits = []
    for index, per_bit in enumerate(shared):
        key = tuple(indices for indices, _ in per_bit)
        code = Signal(code_bits(len(key)), name=f"code{index}")
        m.d.comb += code.eq(_code_of(terms, key, len(code)))
        bits.append(choose_by_code(m, code=code, sources=[bit for _, bit in per_bit],
                                   cells=None, name=f"bit{index}"))
    m.d.comb += [coded.eq(Cat(bits)), plain_out.eq(select_line(terms))]
    rng = random.Random(7)
    got = []

    async def bench(ctx):
        for chosen in [*range(len(lines))] * 4:
            ctx.set(row, rng.getrandbits(10))
            ctx.set(selects, 1 << chosen)
            got.append((ctx.get(coded), ctx.get(plain_out)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert all(by_code == plain for by_code, plain in got)
