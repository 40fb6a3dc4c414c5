"""The G-Ternary gate lane engine (docs/design.md, "G-Ternary")."""

from amaranth.hdl import C, Cat, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.formats import Readout, Route, check_counter_bits, sum_limit
from ..golden.gternary import INVALID_CODE, MINUS_CODE, PLUS_CODE
from .lane_logic import joined_greater, kept, kept_compare, read_line, step
from .layouts import (bit_planes, check_engine_line_bits, check_hw_max_workers, code_layout,
                      lanes_saturate, max_readout_lines, readout_lines, sum_layout,
                      ternary_code)

__all__ = ["TernaryGateEngine", "gate_less_one", "gate_less_one_value", "ternary_gate_lines"]


def gate_less_one(gate, *, counter_bits):
    """The ``gate_less_one`` input of :class:`TernaryGateEngine` for the GATE register ``g``:
    ``max(g, 1) - 1`` (a zero sum reads ``00`` at any gate), clamped to
    ``2**counter_bits - 1`` so that it fits ``counter_bits`` bits: no ``|S|`` is above that,
    so the clamp changes no answer. Computed once, outside the lanes."""
    largest = (1 << counter_bits) - 1
    return Mux(gate == 0, 0, Mux(gate > largest, largest, gate - 1))[:counter_bits]


def gate_less_one_value(gate, *, counter_bits):
    """:func:`gate_less_one` of the integer ``gate`` (for testbenches)."""
    return 0 if gate == 0 else min(gate - 1, (1 << counter_bits) - 1)


class TernaryGateEngine(wiring.Component):
    """Folds one line of ternary codes into a slot's signed saturating sums and reads it out.

    ``line_bits // 2`` lanes of 2-bit codes (``00`` 0, ``01`` +1, ``11`` -1, ``10``
    invalid). Per lane, ``S + code`` saturates in ``[-limit, +limit]`` with
    ``limit = min(max_workers, 2**counter_bits - 1)`` (``saturated`` reports it, a bit per
    lane). An invalid code adds 0 and raises the lane's ``invalid`` bit. The readout is line ``beat`` of the readout
    of the incoming sums (a read never folds); every line holds lane ``t`` at bits ``2t``
    and ``2t + 1``, where its code arrives:

    - ``GATED``, 1 line: the code of ``sign(S)`` where ``|S| >= gate``, else ``00``;
    - ``SUMS``, ``ceil((counter_bits + 1) / 2)`` lines: line ``k`` holds bits ``2k`` and
      ``2k + 1`` of every sum (two's complement; a last line past the sign bit repeats it).

    The engine is a combinational stream stage: latency 0 cycles, one line per clock;
    ``i.ready`` follows ``o.ready`` and ``o.valid`` follows ``i.valid``. The controller
    registers its inputs and outputs around it.

    Parameters
    ----------
    line_bits : int
        Bits per line: any even number from 2 (a whole line, 128 to 1024, or one tile's
        share of it); half as many lanes.
    max_workers : int
        Largest NUM_WORKERS (2 to 64): bounds the sums.
    counter_bits : int or None
        Counter width (a sum is one bit wider); None gives ``ceil(log2(max_workers + 1))``.
    max_contributions : int or None
        Most codes a lane is given between clears; None (the default) for any number. When
        ``limit`` is at least that many (the controller folds one code a worker, and with
        a default-width counter ``limit`` is ``max_workers``), no sum can saturate and the
        engine builds no test for it: ``saturates`` is False and ``o.saturated`` is 0.

    Members
    -------
    saturates : bool
        Whether a lane's sum can saturate (see ``max_contributions``).
    i : ``In(stream.Signature(...))``
        ``sums`` (the slot), ``codes`` (the written line), ``fold`` (a bit per lane;
        1: add the lane's code, 0: pass its sum through), ``gate_less_one`` (:func:`gate_less_one` of GATE),
        ``readout`` and ``beat`` (which line of it).
    o : ``Out(stream.Signature(...))``
        ``sums`` (the slot after the fold), ``saturated`` and ``invalid`` (a bit per lane:
        its code met a full sum, or was invalid) and ``readout``: line ``beat`` of the
        readout; a beat past the readout's last line reads 0. ``gated`` is the ``GATED``
        line of the incoming sums, whatever the readout and beat; ``positive`` and
        ``negative``, a bit per lane, are where it reads +1 and -1 (for a user that keeps
        the comparisons and reads the line a cycle later).

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
                                        limit=sum_limit(self.max_workers, self.counter_bits))
        self.lanes = self.line_bits // 2
        self.readout_lines = max_readout_lines(Route.GTERNARY, counter_bits=self.counter_bits)
        sums = sum_layout(self.line_bits, self.counter_bits)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "sums": sums,
                "codes": code_layout(self.line_bits),
                "fold": unsigned(self.lanes),
                "gate_less_one": unsigned(self.counter_bits),
                "readout": Readout,
                "beat": range(max(2, self.readout_lines)),
            }))),
            "o": Out(stream.Signature(data.StructLayout({
                "sums": sums,
                "saturated": unsigned(self.lanes),
                "invalid": unsigned(self.lanes),
                "readout": unsigned(self.line_bits),
                "gated": unsigned(self.line_bits),
                "positive": unsigned(self.lanes),
                "negative": unsigned(self.lanes),
            }))),
        })

    def elaborate(self, platform):
        m = Module()
        limit = sum_limit(self.max_workers, self.counter_bits)
        p_in, p_out = self.i.payload, self.o.payload
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]

        # GATED: |S| >= g with g = max(GATE, 1), that is |S| > t with t = ``gate_less_one``,
        # computed outside. With x = S's low C bits: S >= 0 is x, so +1 where x > t; S < 0
        # is x - 2**C, so -1 where x <= 2**C - 1 - t = ~t. Two comparisons of C bits per
        # lane (``kept_compare``), each joined with the sign in its answer's gate.
        cw = self.counter_bits
        threshold = p_in.gate_less_one

        up = Signal(self.lanes)        # the lane adds +1
        down = Signal(self.lanes)      # the lane adds -1
        invalid = Signal(self.lanes)
        saturated = Signal(self.lanes)
        negative = Signal(self.lanes)  # GATED reads -1
        positive = Signal(self.lanes)  # GATED reads +1
        for lane in range(self.lanes):
            code, total = p_in.codes[lane], p_in.sums[lane]
            top, bottom = ((total == limit, total == -limit) if self.saturates
                           else (C(0, 1), C(0, 1)))
            sign, low = total[-1], total[:cw]
            above = kept_compare(m, low, threshold, f"lane{lane}_above", equal=False)
            within = kept_compare(m, low, ~threshold, f"lane{lane}_within", equal=False)
            m.d.comb += [
                up[lane].eq(p_in.fold[lane] & (code == PLUS_CODE)),
                down[lane].eq(p_in.fold[lane] & (code == MINUS_CODE)),
                invalid[lane].eq(p_in.fold[lane] & (code == INVALID_CODE)),
                saturated[lane].eq(up[lane] & top | down[lane] & bottom),
                negative[lane].eq(kept(m, sign & ~joined_greater(within), f"lane{lane}_negative")),
                positive[lane].eq(kept(m, ~sign & joined_greater(above), f"lane{lane}_positive")),
                p_out.sums[lane].eq(step(total, up=up[lane] & ~top, down=down[lane] & ~bottom)),
            ]
        m.d.comb += [p_out.saturated.eq(saturated), p_out.invalid.eq(invalid),
                     p_out.positive.eq(positive), p_out.negative.eq(negative)]

        codes = Cat(ternary_code(negative[lane], positive[lane]) for lane in range(self.lanes))
        m.d.comb += p_out.gated.eq(codes)
        read_line(m, p_in, p_out, ternary_gate_lines(p_out.gated, p_in.sums,
                                                     counter_bits=self.counter_bits))
        return m


def ternary_gate_lines(gated, sums, *, counter_bits):
    """``{Readout: [line, ...]}`` of the G-Ternary readouts, from the ``GATED`` line and the
    sums (an ``ArrayLayout`` view): the one place that says which line each beat of each
    readout is."""
    line_bits = len(Value.cast(gated))
    sum_lines = readout_lines(Readout.SUMS, counter_bits=counter_bits)
    planes = bit_planes(sums, planes=sum_lines, lane_bits=2)
    return {
        Readout.GATED: [gated],
        Readout.SUMS: [planes[k * line_bits:(k + 1) * line_bits] for k in range(sum_lines)],
    }
