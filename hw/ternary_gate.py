"""The G-Ternary gate lane engine (DESIGN.md section 4)."""

from amaranth.hdl import C, Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.formats import Readout, Route, check_counter_bits, readout_lane_bits, sum_limit
from ..golden.lines import check_line_bits
from .layouts import (check_hw_max_workers, code_layout, max_readout_lines, pad_lanes, sum_layout,
                      ternary_code)

__all__ = ["TernaryGateEngine"]

#: The invalid code, ``10``: counts as 0 and is reported.
INVALID_CODE = 0b10


class TernaryGateEngine(wiring.Component):
    """Folds one line of ternary codes into a slot's signed saturating sums and reads it out.

    ``line_bits // 2`` lanes of 2-bit codes (``00`` 0, ``01`` +1, ``11`` -1, ``10``
    invalid). Per lane, ``S + code`` saturates in ``[-limit, +limit]`` with
    ``limit = min(max_workers, 2**counter_bits - 1)`` (``saturated`` reports it). An
    invalid code adds 0 and raises ``invalid``. The readout is computed from the incoming
    sums (a read never folds):

    - ``GATED``: the code of ``sign(S)`` where ``|S| >= gate``, else ``00``;
    - ``SUMS``: the sums sign-extended to 4, 8 or 16 bits.

    The engine is a combinational stream stage: latency 0 cycles, one line per clock;
    ``i.ready`` follows ``o.ready`` and ``o.valid`` follows ``i.valid``. The controller
    registers its inputs and outputs around it.

    Parameters
    ----------
    line_bits : int
        Bits per line: 128, 256, 512 or 1024 (half as many lanes).
    max_workers : int
        Largest NUM_WORKERS (2 to 64): bounds the sums.
    counter_bits : int or None
        Counter width (a sum is one bit wider); None gives ``ceil(log2(max_workers + 1))``.

    Members
    -------
    i : ``In(stream.Signature(...))``
        ``sums`` (the slot), ``codes`` (the written line), ``fold`` (1: add the codes,
        0: pass the sums through), ``gate`` (the GATE register) and ``readout``.
    o : ``Out(stream.Signature(...))``
        ``sums`` (the slot after the fold), ``saturated``, ``invalid`` (a folded line held
        an invalid code) and ``readout`` (the readout lines, concatenated, line 0 in the low
        bits; unused lines read 0).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, line_bits=512, max_workers=16, counter_bits=None):
        self.line_bits = check_line_bits(line_bits)
        self.max_workers = check_hw_max_workers(max_workers)
        self.counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
        self.lanes = self.line_bits // 2
        self.readout_lines = max_readout_lines(Route.GTERNARY, line_bits=self.line_bits,
                                               counter_bits=self.counter_bits)
        sums = sum_layout(self.line_bits, self.counter_bits)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "sums": sums,
                "codes": code_layout(self.line_bits),
                "fold": unsigned(1),
                "gate": unsigned(8),
                "readout": unsigned(3),
            }))),
            "o": Out(stream.Signature(data.StructLayout({
                "sums": sums,
                "saturated": unsigned(1),
                "invalid": unsigned(1),
                "readout": unsigned(self.readout_lines * self.line_bits),
            }))),
        })

    def elaborate(self, platform):
        m = Module()
        limit = sum_limit(self.max_workers, self.counter_bits)
        p_in, p_out = self.i.payload, self.o.payload
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]

        up = Signal(self.lanes)        # the lane adds +1
        down = Signal(self.lanes)      # the lane adds -1
        invalid = Signal(self.lanes)
        saturated = Signal(self.lanes)
        negative = Signal(self.lanes)  # GATED reads -1
        positive = Signal(self.lanes)  # GATED reads +1
        gate = Cat(p_in.gate, C(0, 1)).as_signed()  # compared with signed sums
        for lane in range(self.lanes):
            code, total = p_in.codes[lane], p_in.sums[lane]
            top, bottom = total == limit, total == -limit
            m.d.comb += [
                up[lane].eq(p_in.fold & (code == 0b01)),
                down[lane].eq(p_in.fold & (code == 0b11)),
                invalid[lane].eq(p_in.fold & (code == INVALID_CODE)),
                saturated[lane].eq(up[lane] & top | down[lane] & bottom),
                negative[lane].eq((total < 0) & (-total >= gate)),
                positive[lane].eq((total > 0) & (total >= gate)),
            ]
            with m.If(up[lane] & ~top):
                m.d.comb += p_out.sums[lane].eq(total + 1)
            with m.Elif(down[lane] & ~bottom):
                m.d.comb += p_out.sums[lane].eq(total - 1)
            with m.Else():
                m.d.comb += p_out.sums[lane].eq(total)
        m.d.comb += [p_out.saturated.eq(saturated.any()), p_out.invalid.eq(invalid.any())]

        with m.Switch(p_in.readout):
            with m.Case(Readout.GATED):
                m.d.comb += p_out.readout.eq(Cat(ternary_code(negative[lane], positive[lane])
                                                 for lane in range(self.lanes)))
            with m.Case(Readout.SUMS):
                width = readout_lane_bits(Readout.SUMS, self.counter_bits)
                m.d.comb += p_out.readout.eq(pad_lanes(p_in.sums, width))
        return m
