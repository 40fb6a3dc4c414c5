"""The fold of one pair of line bits, both routes in one adder (docs/design.md, "Inside a group
of lanes").

This is the lane tiles' datapath wherever no lane can fill (counters of the default width).
A pair of line bits is two G-Binary lanes or one G-Ternary lane, and either way its slot row
is ``2C`` bits: two ``C``-bit counters side by side, or one ``2C``-bit two's complement sum.
So either route's fold is the row plus an addend, one carry chain (:class:`PairFold`), and
the readout's comparisons are three trees on the registered sum that serve both routes
(:class:`PairCompare`). The route engines (:mod:`.sign_count`, :mod:`.ternary_gate`) say
the same arithmetic a route at a time, with saturation; the tiles use them where a lane can
fill.
"""

from amaranth.hdl import Cat, Const, Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..golden.formats import check_counter_bits, count_limit, sum_limit
from .lane_logic import joined_equal, joined_greater, kept, kept_compare
from .layouts import check_hw_max_workers, lanes_saturate
from .row_cells import check_cells, choose_and_add, gate

__all__ = ["PairFold", "PairCompare", "threshold_layout", "pair_thresholds", "pair_addend", "plus_test",
           "lanes_can_fill"]


def lanes_can_fill(*, max_workers, counter_bits):
    """Whether a lane folding one vote or code a worker can fill its counter or sum: only
    with counters narrower than the default. Then the route engines fold, with their
    saturation tests, and a :class:`PairFold` cannot."""
    return any(lanes_saturate(max_workers, limit=limit)
               for limit in (count_limit(counter_bits), sum_limit(max_workers, counter_bits)))


def threshold_layout(counter_bits):
    """A pair's copy of the thresholds: ``low`` (the fold word's ``low_threshold``) and
    ``odd`` (NUM_WORKERS is odd)."""
    return data.StructLayout({"low": counter_bits, "odd": 1})


def pair_thresholds(fold_word):
    """The value of :func:`threshold_layout` from a fold word (:mod:`.schedule`)."""
    majority = fold_word.majority
    return Cat(fold_word.low_threshold, majority.above[0] ^ majority.below[0])


def pair_addend(low, sign, high, counter_bits):
    """The ``2C``-bit addend of a pair from its three distinct bits, worked out a cycle
    before the fold: ``low`` at bit 0, ``high`` at bit ``C``, ``sign`` at every other bit.

    In a G-Binary window ``sign`` is 0 and the two counters add their votes; the low counter
    never carries into the high one, as it holds at most MAX_WORKERS. In a G-Ternary window
    ``low`` is the code's first bit, and ``sign`` and ``high`` are set for a -1 (``11``): the
    sum is sign-extended over the pair's bits and a -1 sets them all.
    """
    C = counter_bits
    return Cat(low, sign.replicate(C - 1), high, sign.replicate(C - 1))


def plus_test(sign, greater, equal, lower):
    """The G-Ternary +1 test from the sum's sign and the low tree's halves
    (:func:`~.lane_logic.kept_compare`): the sum is positive and its low bits exceed the
    threshold."""
    return ~sign & (greater | equal & lower)


class PairFold(wiring.Component):
    """``sum = (from_last ? last : chosen) + pair_addend(...)``, combinationally.

    Parameters
    ----------
    max_workers : int
        Largest NUM_WORKERS (2 to 64).
    counter_bits : int or None
        Counter width; None gives ``ceil(log2(max_workers + 1))``. No lane may be able to
        fill (:func:`lanes_can_fill`).
    cells : None or "ecp5"
        What the adder is built from (:mod:`.row_cells`).

    Members
    -------
    addend_low, addend_sign, addend_high : ``In(1)``
        The addend's bits (:func:`pair_addend`); a -1 sets all three.
    from_last : ``In(1)``
        1: fold onto ``last`` (the previous word's sum), 0: onto ``chosen``.
    last, chosen : ``In(2 * counter_bits)``
    sum : ``Out(2 * counter_bits)``

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range, or counters that can fill.
    """

    def __init__(self, *, max_workers=16, counter_bits=None, cells=None):
        self.max_workers, self.counter_bits = _check_pair(max_workers, counter_bits)
        self.cells = check_cells(cells)
        row = 2 * self.counter_bits
        super().__init__({
            "addend_low": In(1),
            "addend_sign": In(1),
            "addend_high": In(1),
            "from_last": In(1),
            "last": In(row),
            "chosen": In(row),
            "sum": Out(row),
        })

    def elaborate(self, platform):
        m = Module()
        addend = pair_addend(self.addend_low, self.addend_sign, self.addend_high,
                             self.counter_bits)
        m.d.comb += self.sum.eq(choose_and_add(m, addend=addend, from_last=self.from_last,
                                               last=self.last, chosen=self.chosen,
                                               cells=self.cells, name="fold"))
        return m


class PairCompare(wiring.Component):
    """The readout's comparisons on a pair's row, combinationally: the tile gives it the
    registered sum, a cycle after the fold, so no comparison sits after the carry chain.

    The comparisons answer for the route the readout uses; the other route's answers are
    don't-care. The low ``C`` bits are the low G-Binary counter and the G-Ternary sum's low
    bits, so one tree compares them with ``thresholds.low``: ``N // 2`` for ``SIGN`` and
    ``TERNARY``, ``GATE - 1`` (clamped) for ``GATED`` (:func:`~.schedule.low_threshold`).
    Its "greater" is the low lane's sign, or with the sum's sign clear the ``+1``. The high
    lane's tree compares the ``C - 1`` bits below its top bit (a counter of the default
    width holds MAX_WORKERS, so ``N // 2 < 2**(C-1)`` and the top bit alone says above), and
    the ``-1`` tree the low bits with the threshold's complement. Each answer is one kept
    gate after its tree.

    Parameters
    ----------
    max_workers, counter_bits, cells
        As :class:`PairFold`'s (``cells`` builds the ``+1`` gate).

    Members
    -------
    row : ``In(2 * counter_bits)``
    thresholds : ``In(threshold_layout(counter_bits))``
    sign, tie : ``Out(2)``
        A bit per G-Binary lane: ``2n > N``, ``2n == N``.
    positive, negative : ``Out(1)``
        The G-Ternary lane's ``GATED`` code: ``|S| >= GATE`` with ``S`` positive, negative.
    """

    def __init__(self, *, max_workers=16, counter_bits=None, cells=None):
        self.max_workers, self.counter_bits = _check_pair(max_workers, counter_bits)
        self.cells = check_cells(cells)
        super().__init__({
            "row": In(2 * self.counter_bits),
            "thresholds": In(threshold_layout(self.counter_bits)),
            "sign": Out(2),
            "tie": Out(2),
            "positive": Out(1),
            "negative": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        C, row = self.counter_bits, self.row
        low, high, sign = row[:C], row[C:2 * C], row[C]
        top, threshold, odd = high[C - 1], self.thresholds.low, self.thresholds.odd
        first = kept_compare(m, low, threshold, "low")
        second = kept_compare(m, high[:C - 1], threshold[:C - 1], "high")
        within = kept_compare(m, low, ~threshold, "within", equal=False)
        # The +1 is the low tree's root with the sum's sign as a fourth input: left to
        # synthesis, it read the kept low sign, a level more after the tree.
        (greater, equal), *rest = first
        positive = gate(m, plus_test, [sign, greater, equal, rest[0][0] if rest else Const(0, 1)],
                        cells=self.cells, name="positive")
        m.d.comb += [
            self.sign.eq(Cat(kept(m, joined_greater(first), "low_sign"),
                             kept(m, top | joined_greater(second), "high_sign"))),
            self.tie.eq(Cat(kept(m, joined_equal(first) & ~odd, "low_tie"),
                            kept(m, ~top & joined_equal(second) & ~odd, "high_tie"))),
            self.positive.eq(positive),
            self.negative.eq(kept(m, sign & ~joined_greater(within), "negative")),
        ]
        return m


def _check_pair(max_workers, counter_bits):
    """``(max_workers, counter_bits)`` validated for a pair of line bits whose lanes cannot
    fill."""
    max_workers = check_hw_max_workers(max_workers)
    counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
    if lanes_can_fill(max_workers=max_workers, counter_bits=counter_bits):
        raise ValueError(f"counter_bits must hold {max_workers} workers' votes and sums "
                         f"in a pair fold (the route engines fold counters that can "
                         f"fill), not {counter_bits!r}")
    return max_workers, counter_bits
