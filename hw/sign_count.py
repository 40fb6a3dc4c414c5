"""The G-Binary sign-count lane engine (DESIGN.md section 3)."""

from amaranth.hdl import C, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.formats import Readout, Route, check_counter_bits, count_limit, readout_lane_bits
from ..golden.lines import check_line_bits
from .layouts import (check_hw_max_workers, count_layout, max_readout_lines, pad_lanes,
                      ternary_code, vote_layout)

__all__ = ["SignCountEngine"]


class SignCountEngine(wiring.Component):
    """Folds one line of sign votes into a slot's saturating counters and reads a slot out.

    One G-Binary lane per line bit. Per lane, ``counts + vote`` saturates at
    ``2**counter_bits - 1`` (``saturated`` reports it). The readout is computed from the
    incoming counts (a read never folds), with ``N`` = ``num_workers``:

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
        ``counts`` (the slot after the fold), ``saturated`` and ``readout`` (the readout
        lines, concatenated, line 0 in the low bits; unused lines read 0).

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

        saturated = []
        for lane in range(self.line_bits):
            count, vote = p_in.counts[lane], p_in.votes[lane]
            full = count == limit
            saturated.append(p_in.fold & vote & full)
            m.d.comb += p_out.counts[lane].eq(Mux(p_in.fold & vote & ~full, count + 1, count))
        m.d.comb += p_out.saturated.eq(Cat(saturated).any())

        # Majority per lane: compare 2n with N once, share it between SIGN and TERNARY.
        # Named signals, so that each lane's slice refers to one comparator.
        negative = Signal(self.line_bits)
        positive = Signal(self.line_bits)
        for lane in range(self.line_bits):
            twice = Cat(C(0, 1), p_in.counts[lane])
            m.d.comb += [negative[lane].eq(twice > p_in.num_workers),
                         positive[lane].eq(twice < p_in.num_workers)]
        with m.Switch(p_in.readout):
            with m.Case(Readout.SIGN):
                m.d.comb += p_out.readout.eq(negative)
            with m.Case(Readout.TERNARY):
                m.d.comb += p_out.readout.eq(Cat(ternary_code(negative[lane], positive[lane])
                                                 for lane in range(self.line_bits)))
            with m.Case(Readout.COUNTS):
                width = readout_lane_bits(Readout.COUNTS, self.counter_bits)
                m.d.comb += p_out.readout.eq(pad_lanes(p_in.counts, width))
        return m

