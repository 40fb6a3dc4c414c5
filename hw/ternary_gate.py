"""The G-Ternary gate lane engine (DESIGN.md section 4)."""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.formats import Readout, Route, check_counter_bits, readout_lane_bits, sum_limit
from ..golden.lines import check_line_bits
from .lane_logic import carry_out, step, widen
from .layouts import (check_hw_max_workers, code_layout, max_readout_lines, pad_lanes,
                      sum_layout, ternary_code)

__all__ = ["TernaryGateEngine"]

#: The invalid code, ``10``: counts as 0 and is reported.
INVALID_CODE = 0b10


class TernaryGateEngine(wiring.Component):
    """Folds one line of ternary codes into a slot's signed saturating sums and reads it out.

    ``line_bits // 2`` lanes of 2-bit codes (``00`` 0, ``01`` +1, ``11`` -1, ``10``
    invalid). Per lane, ``S + code`` saturates in ``[-limit, +limit]`` with
    ``limit = min(max_workers, 2**counter_bits - 1)`` (``saturated`` reports it). An
    invalid code adds 0 and raises ``invalid``. The readout is the whole readout of the
    incoming sums (a read never folds):

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
        an invalid code) and ``readout``: every line of the readout, line 0 in the low
        bits, ``readout_lines`` lines wide; lines past the readout's last read 0.

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

        # GATED: |S| >= g with g = max(GATE, 1), since a zero sum reads 00 at any gate. With
        # x = S's low bits, inverted when S < 0, |S| = x + sign; so |S| >= g is the carry out
        # of x + ~(g - 1) + sign, one carry function per lane against a threshold computed
        # once. g is clamped to 2**C + 1 (beyond any |S|) so that g - 1 fits C + 1 bits.
        cw = self.counter_bits
        gate = p_in.gate
        gate_less_one = Signal(cw + 1)
        m.d.comb += gate_less_one.eq(Mux(gate == 0, 0, Mux(gate > (1 << cw) + 1, 1 << cw, gate - 1)))
        below_gate = Signal(cw + 1)
        m.d.comb += below_gate.eq(~gate_less_one)

        up = Signal(self.lanes)        # the lane adds +1
        down = Signal(self.lanes)      # the lane adds -1
        invalid = Signal(self.lanes)
        saturated = Signal(self.lanes)
        negative = Signal(self.lanes)  # GATED reads -1
        positive = Signal(self.lanes)  # GATED reads +1
        for lane in range(self.lanes):
            code, total = p_in.codes[lane], p_in.sums[lane]
            top, bottom = total == limit, total == -limit
            sign = total[-1]
            magnitude = widen(total[:cw] ^ sign.replicate(cw), cw + 1)
            gated = carry_out(magnitude, below_gate, carry_in=sign)
            m.d.comb += [
                up[lane].eq(p_in.fold & (code == 0b01)),
                down[lane].eq(p_in.fold & (code == 0b11)),
                invalid[lane].eq(p_in.fold & (code == INVALID_CODE)),
                saturated[lane].eq(up[lane] & top | down[lane] & bottom),
                negative[lane].eq(gated & sign),
                positive[lane].eq(gated & ~sign),
                p_out.sums[lane].eq(step(total, up=up[lane] & ~top, down=down[lane] & ~bottom)),
            ]
        m.d.comb += [p_out.saturated.eq(saturated.any()), p_out.invalid.eq(invalid.any())]

        codes = Cat(ternary_code(negative[lane], positive[lane]) for lane in range(self.lanes))
        width = readout_lane_bits(Readout.SUMS, self.counter_bits)
        with m.Switch(p_in.readout):
            with m.Case(Readout.GATED):
                m.d.comb += p_out.readout.eq(codes)
            with m.Case(Readout.SUMS):
                m.d.comb += p_out.readout.eq(pad_lanes(p_in.sums, width))
        return m
