"""The G-Binary sign-count lane engine (docs/design.md, "G-Binary")."""

from amaranth.hdl import C, Cat, Module, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.formats import Readout, Route, check_counter_bits, count_limit
from .lane_logic import joined_equal, joined_greater, kept, kept_compare, read_line, step, widen
from .layouts import (bit_planes, check_engine_line_bits, check_hw_max_workers, count_layout,
                      lanes_saturate, max_readout_lines, vote_layout)

__all__ = ["SignCountEngine", "majority_layout", "majority_thresholds", "majority_value",
           "sign_count_lines"]


def majority_layout(max_workers):
    """The majority thresholds of NUM_WORKERS ``N``: a lane's majority is negative when
    ``n > above`` and positive when ``n < below``."""
    width = max_workers.bit_length()
    return data.StructLayout({"above": width, "below": width})


def majority_thresholds(num_workers, *, max_workers):
    """The value of :func:`majority_layout` for NUM_WORKERS ``N`` (1 to ``max_workers``):
    ``2n > N`` is ``n > N // 2`` and ``2n < N`` is ``n < ceil(N / 2)``, so ``above = N // 2``
    and ``below = ceil(N / 2)``. Computed once, outside the lanes."""
    width = max_workers.bit_length()
    return Cat(widen(num_workers >> 1, width)[:width],
               widen((num_workers + 1) >> 1, width)[:width])


def majority_value(num_workers, *, max_workers):
    """:func:`majority_thresholds` of the integer ``num_workers``, as the integer a
    ``majority`` input holds (for testbenches)."""
    width = max_workers.bit_length()
    return (num_workers // 2) | ((num_workers + 1) // 2) << width


class SignCountEngine(wiring.Component):
    """Folds one line of sign votes into a slot's saturating counters and reads a slot out.

    One G-Binary lane per line bit. Per lane, ``counts + vote`` saturates at
    ``2**counter_bits - 1`` (``saturated`` reports it, a bit per lane). The readout is line ``beat`` of the
    readout of the incoming counts (a read never folds), with the majority of ``N`` given by
    its thresholds (:func:`majority_thresholds`); every line holds lane ``i`` at bit ``i``:

    - ``SIGN``, 1 line: bit 1 where ``2n > N`` (majority negative; a tie reads 0);
    - ``TERNARY``, 2 lines: the ``SIGN`` line, then bit 1 where ``2n != N`` (not a tie);
    - ``COUNTS``, ``counter_bits`` lines: line ``k`` holds bit ``k`` of every counter.

    The engine is a combinational stream stage: latency 0 cycles, one line per clock;
    ``i.ready`` follows ``o.ready`` and ``o.valid`` follows ``i.valid``. The controller
    registers its inputs and outputs around it.

    Parameters
    ----------
    line_bits : int
        Bits per line and lanes per line: any even number from 2 (a whole line, 128 to 1024,
        or one tile's share of it).
    max_workers : int
        Largest NUM_WORKERS (2 to 64); sets the width of ``num_workers``.
    counter_bits : int or None
        Counter width; None gives ``ceil(log2(max_workers + 1))``.
    max_contributions : int or None
        Most votes a lane is given between clears; None (the default) for any number. When
        a counter holds that many (the controller folds one vote a worker, so a
        default-width counter does), no lane can saturate and the engine builds no test
        for it: ``saturates`` is False and ``o.saturated`` is 0.

    Members
    -------
    saturates : bool
        Whether a lane's counter can saturate (see ``max_contributions``).
    i : ``In(stream.Signature(...))``
        ``counts`` (the slot), ``votes`` (the written line), ``fold`` (a bit per lane;
        1: add the lane's vote, 0: pass its count through), ``majority`` (:func:`majority_layout`), ``readout`` (a
        ``Readout`` value) and ``beat`` (which line of it).
    o : ``Out(stream.Signature(...))``
        ``counts`` (the slot after the fold), ``saturated`` (a bit per lane: its vote met a
        full counter) and ``readout``: line ``beat``
        of the readout; a beat past the readout's last line reads 0. ``sign`` and
        ``not_tie`` are the lines that compare the incoming counts with the majority (the
        ``SIGN`` line and ``TERNARY`` line 1), whatever the readout and beat; ``tie``: bit 1
        where ``2n == N`` (``not_tie`` inverted, for a user that keeps the comparisons and
        reads the lines a cycle later).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, line_bits=512, max_workers=16, counter_bits=None,
                 max_contributions=None):
        self.line_bits = check_engine_line_bits(line_bits)
        self.max_workers = check_hw_max_workers(max_workers)
        self.counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
        self.saturates = lanes_saturate(max_contributions,
                                        limit=count_limit(self.counter_bits))
        self.readout_lines = max_readout_lines(Route.GBINARY, counter_bits=self.counter_bits)
        counts = count_layout(self.line_bits, self.counter_bits)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "counts": counts,
                "votes": vote_layout(self.line_bits),
                "fold": unsigned(self.line_bits),
                "majority": majority_layout(self.max_workers),
                "readout": Readout,
                "beat": range(max(2, self.readout_lines)),
            }))),
            "o": Out(stream.Signature(data.StructLayout({
                "counts": counts,
                "saturated": unsigned(self.line_bits),
                "readout": unsigned(self.line_bits),
                "sign": unsigned(self.line_bits),
                "tie": unsigned(self.line_bits),
                "not_tie": unsigned(self.line_bits),
            }))),
        })

    def elaborate(self, platform):
        m = Module()
        limit = count_limit(self.counter_bits)
        p_in, p_out = self.i.payload, self.o.payload
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]

        # Fold: a lane counts up on a vote unless it is full (all ones, ``limit``). A lane
        # that cannot fill needs no test: it is wide, and it sits in the controller's fold loop.
        saturated = []
        for lane in range(self.line_bits):
            count, vote = p_in.counts[lane], p_in.votes[lane]
            full = (count == limit) if self.saturates else C(0, 1)
            fold = p_in.fold[lane]
            saturated.append(fold & vote & full)
            m.d.comb += p_out.counts[lane].eq(step(count, up=fold & vote & ~full, down=0))
        m.d.comb += p_out.saturated.eq(Cat(saturated))

        # Majority: 2n > N is n > N // 2, and a tie (2n == N) is n == N // 2 with N even,
        # one comparison tree a lane (``kept_compare``) whose halves meet in each answer's
        # gate. Where a counter holds MAX_WORKERS, N // 2 < 2**(C-1): the counter's top bit
        # alone says n is above it, and the tree compares the bits below.
        above = p_in.majority.above
        odd = Signal()   # ceil(N / 2) - N // 2 is N's low bit
        m.d.comb += odd.eq(above[0] ^ p_in.majority.below[0])
        CW = self.counter_bits
        narrow = count_limit(CW) >= self.max_workers
        width = CW - 1 if narrow else max(CW, len(above))
        sign = Signal(self.line_bits)
        tie = Signal(self.line_bits)
        for lane in range(self.line_bits):
            count = p_in.counts[lane]
            top = count[CW - 1] if narrow else C(0, 1)
            halves = kept_compare(m, widen(count, width)[:width], widen(above, width)[:width],
                                  f"lane{lane}_majority")
            m.d.comb += [sign[lane].eq(kept(m, top | joined_greater(halves), f"lane{lane}_sign")),
                         tie[lane].eq(kept(m, ~top & joined_equal(halves) & ~odd,
                                           f"lane{lane}_tie"))]
        m.d.comb += [p_out.sign.eq(sign), p_out.tie.eq(tie), p_out.not_tie.eq(~tie)]
        read_line(m, p_in, p_out, sign_count_lines(p_out.sign, p_out.not_tie, p_in.counts,
                                                   counter_bits=self.counter_bits))
        return m


def sign_count_lines(sign, not_tie, counts, *, counter_bits):
    """``{Readout: [line, ...]}`` of the G-Binary readouts, from the ``SIGN`` and not-a-tie
    lines and the counters (an ``ArrayLayout`` view): the one place that says which line
    each beat of each readout is."""
    line_bits = len(Value.cast(sign))
    planes = bit_planes(counts, planes=counter_bits)
    return {
        Readout.SIGN: [sign],
        Readout.TERNARY: [sign, not_tie],
        Readout.COUNTS: [planes[k * line_bits:(k + 1) * line_bits] for k in range(counter_bits)],
    }


