"""The G-Binary sign-count lane engine (DESIGN.md section 3)."""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.formats import Readout, Route, check_counter_bits, count_limit, readout_lane_bits
from ..golden.lines import check_line_bits
from .lane_logic import carry_out, step, widen
from .layouts import (check_hw_max_workers, count_layout, max_readout_lines, pad_lanes,
                      ternary_code, vote_layout)

__all__ = ["SignCountEngine"]


class SignCountEngine(wiring.Component):
    """Folds one line of sign votes into a slot's saturating counters and reads a slot out.

    One G-Binary lane per line bit. Per lane, ``counts + vote`` saturates at
    ``2**counter_bits - 1`` (``saturated`` reports it). The readout is the whole readout of
    the incoming counts (a read never folds), with ``N`` = ``num_workers``:

    - ``SIGN``: bit 1 where ``2n > N`` (majority negative; a tie reads 0);
    - ``TERNARY``: code ``11`` where ``2n > N``, ``01`` where ``2n < N``, ``00`` on a tie;
    - ``COUNTS``: the counters zero-extended to 4, 8 or 16 bits.

    The engine is a combinational stream stage: latency 0 cycles, one line per clock;
    ``i.ready`` follows ``o.ready`` and ``o.valid`` follows ``i.valid``. The controller
    registers its inputs and outputs around it.

    Parameters
    ----------
    line_bits : int
        Bits per line and lanes per line: 128, 256, 512 or 1024.
    max_workers : int
        Largest NUM_WORKERS (2 to 64); sets the width of ``num_workers``.
    counter_bits : int or None
        Counter width; None gives ``ceil(log2(max_workers + 1))``.

    Members
    -------
    i : ``In(stream.Signature(...))``
        ``counts`` (the slot), ``votes`` (the written line), ``fold`` (1: add the votes,
        0: pass the counts through), ``num_workers`` and ``readout`` (a ``Readout`` value).
    o : ``Out(stream.Signature(...))``
        ``counts`` (the slot after the fold), ``saturated`` and ``readout``: every line of
        the readout, line 0 in the low bits, ``readout_lines`` lines wide; lines past the
        readout's last read 0. Handing the lines over one per beat is the controller's job.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, line_bits=512, max_workers=16, counter_bits=None):
        self.line_bits = check_line_bits(line_bits)
        self.max_workers = check_hw_max_workers(max_workers)
        self.counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
        self.readout_lines = max_readout_lines(Route.GBINARY, line_bits=self.line_bits,
                                               counter_bits=self.counter_bits)
        counts = count_layout(self.line_bits, self.counter_bits)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "counts": counts,
                "votes": vote_layout(self.line_bits),
                "fold": unsigned(1),
                "num_workers": unsigned(self.max_workers.bit_length()),
                "readout": unsigned(3),
            }))),
            "o": Out(stream.Signature(data.StructLayout({
                "counts": counts,
                "saturated": unsigned(1),
                "readout": unsigned(self.readout_lines * self.line_bits),
            }))),
        })

    def elaborate(self, platform):
        m = Module()
        limit = count_limit(self.counter_bits)
        p_in, p_out = self.i.payload, self.o.payload
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]

        # Fold: a lane counts up on a vote unless it is full (all ones, ``limit``).
        saturated = []
        for lane in range(self.line_bits):
            count, vote = p_in.counts[lane], p_in.votes[lane]
            full = count == limit
            saturated.append(p_in.fold & vote & full)
            m.d.comb += p_out.counts[lane].eq(step(count, up=p_in.fold & vote & ~full, down=0))
        m.d.comb += p_out.saturated.eq(Cat(saturated).any())

        # Majority: 2n > N is n > N // 2 and 2n < N is n < ceil(N / 2). Both thresholds are
        # computed once; each lane tests them with two short carry functions.
        width = max(self.counter_bits, len(p_in.num_workers))
        below_negative = Signal(width)   # ~(N // 2)
        below_positive = Signal(width)   # ~ceil(N / 2)
        m.d.comb += [below_negative.eq(~widen(p_in.num_workers >> 1, width)),
                     below_positive.eq(~widen((p_in.num_workers + 1) >> 1, width))]
        negative = Signal(self.line_bits)
        positive = Signal(self.line_bits)
        for lane in range(self.line_bits):
            count = widen(p_in.counts[lane], width)
            m.d.comb += [negative[lane].eq(carry_out(count, below_negative)),
                         positive[lane].eq(~carry_out(count, below_positive, carry_in=1))]
        codes = Cat(ternary_code(negative[lane], positive[lane]) for lane in range(self.line_bits))
        width = readout_lane_bits(Readout.COUNTS, self.counter_bits)
        with m.Switch(p_in.readout):
            with m.Case(Readout.SIGN):
                m.d.comb += p_out.readout.eq(negative)
            with m.Case(Readout.TERNARY):
                m.d.comb += p_out.readout.eq(codes)
            with m.Case(Readout.COUNTS):
                m.d.comb += p_out.readout.eq(pad_lanes(p_in.counts, width))
        return m

