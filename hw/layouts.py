"""Data layouts shared by every block: lines, lanes, requests, responses and the CSR bus.

Each word that crosses a block's boundary is an :mod:`amaranth.lib.data` layout defined here
once; the words between the control plane and the lane tiles are the tile's
(:mod:`.lane_tile`). Lane ``i`` of width ``W`` sits at bits ``[i*W + W-1 : i*W]`` of a line,
which is :class:`~amaranth.lib.data.ArrayLayout` order and the order of
:mod:`neuron_fabric.golden.lines`. Widths derive from
:mod:`neuron_fabric.golden.formats`, so hardware and golden model cannot disagree on them.
Enumerations (``Op``, ``Status``, ``Route``, ``Readout``) are used as shapes as they are:
Amaranth infers their width from their members, so a field always holds every member; a value
built from answers (:func:`encoded`) follows the members' values.
"""

from amaranth.hdl import C, Cat, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..golden.controller import Op, Status
from ..golden.validate import check_int
from ..golden.formats import (READOUTS_BY_ROUTE, Readout, Route, check_max_workers,
                              readout_lines_per_slot, route_spec)
from ..golden.params import ADDR_BITS, HW_MAX_WORKERS_RANGE

__all__ = [
    "lane_layout", "state_layout", "vote_layout", "code_layout", "count_layout", "sum_layout",
    "readout_lines", "max_readout_lines", "bit_planes",
    "check_hw_max_workers", "check_engine_line_bits", "lanes_saturate", "ternary_code",
    "request_layout", "response_layout", "mem_request_layout",
    "CSRBusSignature", "encoded",
]


def lane_layout(route, line_bits):
    """A written line of ``route``: its lanes of the route's lane width."""
    spec = route_spec(route)
    return data.ArrayLayout(unsigned(spec.lane_bits), spec.lanes(line_bits))


def state_layout(route, line_bits, counter_bits):
    """A slot of ``route``: one saturating state per lane, a ``counter_bits`` count or a
    signed sum one bit wider."""
    spec = route_spec(route)
    shape = signed(counter_bits + 1) if spec.signed else unsigned(counter_bits)
    return data.ArrayLayout(shape, spec.lanes(line_bits))


def vote_layout(line_bits):
    """A G-Binary line: one sign vote per lane (1 = negative)."""
    return lane_layout(Route.GBINARY, line_bits)


def code_layout(line_bits):
    """A G-Ternary line: one 2-bit code per lane (``00`` 0, ``01`` +1, ``11`` -1, ``10`` invalid)."""
    return lane_layout(Route.GTERNARY, line_bits)


def count_layout(line_bits, counter_bits):
    """A G-Binary slot: one saturating counter of negative votes per lane."""
    return state_layout(Route.GBINARY, line_bits, counter_bits)


def sum_layout(line_bits, counter_bits):
    """A G-Ternary slot: one signed saturating sum per lane, one bit wider than a counter."""
    return state_layout(Route.GTERNARY, line_bits, counter_bits)


def readout_lines(readout, *, counter_bits):
    """Lines in one slot's readout (the golden model's rule; the same at any line width)."""
    return readout_lines_per_slot(Readout(readout), counter_bits=counter_bits)


def max_readout_lines(route, *, counter_bits):
    """The longest readout of ``route``, in lines: how many lines an engine's readout spans."""
    return max(readout_lines(r, counter_bits=counter_bits) for r in READOUTS_BY_ROUTE[Route(route)])


def bit_planes(lanes, *, planes, lane_bits=1):
    """Readout lines of bit-planes from the lanes of an ``ArrayLayout`` view, line 0 lowest.

    Line ``k`` holds bits ``[k*W + W-1 : k*W]`` (``W = lane_bits``) of every lane, lane ``i``
    at line bits ``[i*W + W-1 : i*W]``, so each lane's readout bits sit at its own place in
    every line and no line gathers lanes from elsewhere in the row. Signed lanes are
    sign-extended (two's complement) to ``planes * W`` bits, unsigned ones zero-extended:
    the order of :func:`~neuron_fabric.golden.lines.pack_planes`.
    """
    width = planes * lane_bits
    values = []
    for lane in lanes:
        value = Value.cast(lane)
        if len(value) > width:
            raise ValueError(f"planes must hold every bit of a {len(value)}-bit lane, "
                             f"not {planes} planes of {lane_bits} bits")
        fill = value[-1] if value.shape().signed else C(0, 1)
        values.append(Cat(value, fill.replicate(width - len(value))))
    return Cat(Cat(value[k * lane_bits:(k + 1) * lane_bits] for value in values)
               for k in range(planes))


def request_layout(*, line_bits, worker_bits):
    """An upstream request: operation, line address, worker id and the written line."""
    return data.StructLayout({
        "op": Op,
        "addr": unsigned(ADDR_BITS),
        "worker": unsigned(worker_bits),
        "data": unsigned(line_bits),
    })


def response_layout(*, line_bits):
    """An upstream response beat: status, ``last`` on a readout's final line, and a line."""
    return data.StructLayout({
        "status": Status,
        "last": unsigned(1),
        "data": unsigned(line_bits),
    })


def mem_request_layout(*, line_bits):
    """A downstream memory request: a write (with its line) or a read."""
    return data.StructLayout({
        "write": unsigned(1),
        "addr": unsigned(ADDR_BITS),
        "data": unsigned(line_bits),
    })


class CSRBusSignature(wiring.Signature):
    """A 32-bit register bus in the style of amaranth-soc's CSR bus, from the initiator's side.

    ``addr`` is a byte address (a multiple of 4 for a register). A read strobe ``r_stb``
    returns ``r_data`` two cycles later (reads may follow each other every cycle); a write
    strobe ``w_stb`` writes ``w_data`` (a stored field holds it two cycles after the strobe;
    see :class:`~.csr.CSRBlock`). Accesses never wait. Unmapped addresses read
    0 and ignore writes.
    """

    def __init__(self, *, addr_width):
        self.addr_width = addr_width
        super().__init__({
            "addr": Out(addr_width),
            "r_stb": Out(1),
            "r_data": In(32),
            "w_stb": Out(1),
            "w_data": Out(32),
        })

    def __eq__(self, other):
        return isinstance(other, CSRBusSignature) and other.addr_width == self.addr_width

    def __repr__(self):
        return f"CSRBusSignature(addr_width={self.addr_width})"


def check_hw_max_workers(max_workers):
    """Validate MAX_WORKERS against the hardware's range (the bitmap has a bit per worker)."""
    low, high = HW_MAX_WORKERS_RANGE
    return check_max_workers(max_workers, low=low, high=high)


def check_engine_line_bits(line_bits):
    """Validate a lane engine's width: any even number of line bits from 2 (a tile's share of
    a line, whole G-Ternary lanes), and return it."""
    line_bits = check_int("line_bits", line_bits)
    if line_bits < 2 or line_bits % 2:
        raise ValueError(f"line_bits must be an even integer of at least 2, not {line_bits!r}")
    return line_bits


def ternary_code(negative, positive):
    """The 2-bit code of a lane: ``11`` for -1, ``01`` for +1, ``00`` for 0 (the golden
    model's codes: the low bit says non-zero, the high bit negative)."""
    return Cat(negative | positive, negative)


def lanes_saturate(max_contributions, *, limit):
    """Validate a lane engine's ``max_contributions`` (None, or an integer of at least 1) and
    say whether its lanes can saturate at ``limit`` (a count's or a sum's largest magnitude):
    a lane given at most ``max_contributions`` votes or codes between clears never passes
    ``limit`` when that is no more than ``limit``; None means any number."""
    if max_contributions is None:
        return True
    return check_int("max_contributions", max_contributions, low=1) > limit


def encoded(answers, *, none):
    """The encoding of the member of an enumeration that ``answers`` (``{member: one-bit
    value}``, at most one set at a time) names, and ``none``'s where none is set: each bit of
    the encoding is the OR of the answers whose member has that bit. The wires follow the
    members' values, whatever they are.

    Raises ``ValueError`` when ``none`` is not encoded 0 (the bits of no answer) or an answer
    names a member of another enumeration.
    """
    enum = type(none)
    if none.value != 0:
        raise ValueError(f"none must be the member encoded 0, not {none!r}")
    if any(type(member) is not enum for member in answers):
        raise ValueError(f"answers must name members of {enum.__name__}, not "
                         f"{list(answers)!r}")
    width = max(member.value for member in enum).bit_length()
    bits = []
    for bit in range(width):
        chosen = [Value.cast(answer) for member, answer in answers.items()
                  if member.value >> bit & 1]
        bits.append(Cat(chosen).any() if len(chosen) > 1 else chosen[0] if chosen else C(0, 1))
    return Cat(bits)
