"""Data layouts shared by every block: lines, lanes, requests, responses and the CSR bus.

Each wide word is an :mod:`amaranth.lib.data` layout defined here once. Lane ``i`` of width
``W`` sits at bits ``[i*W + W-1 : i*W]`` of a line, which is :class:`~amaranth.lib.data.ArrayLayout`
order and the order of :mod:`neuron_fabric.golden.lines`. Widths derive from
:mod:`neuron_fabric.golden.formats`, so hardware and golden model cannot disagree on them.
"""

from amaranth.hdl import C, Cat, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..golden.formats import (READOUTS_BY_ROUTE, Readout, Route, check_max_workers,
                              readout_lines_per_slot)
from ..golden.params import ADDR_BITS, HW_MAX_WORKERS_RANGE

__all__ = [
    "vote_layout", "code_layout", "count_layout", "sum_layout",
    "readout_lines", "max_readout_lines",
    "check_hw_max_workers", "pad_lanes", "ternary_code", "OP_BITS", "STATUS_BITS",
    "request_layout", "response_layout", "mem_request_layout",
    "CSRBusSignature",
]

#: Width of the request's operation field (golden ``Op`` values).
OP_BITS = 2
#: Width of the response's status field (golden ``Status`` values).
STATUS_BITS = 2


def vote_layout(line_bits):
    """A G-Binary line: one sign vote per lane (1 = negative)."""
    return data.ArrayLayout(unsigned(1), line_bits)


def code_layout(line_bits):
    """A G-Ternary line: one 2-bit code per lane (``00`` 0, ``01`` +1, ``11`` -1, ``10`` invalid)."""
    return data.ArrayLayout(unsigned(2), line_bits // 2)


def count_layout(line_bits, counter_bits):
    """A G-Binary slot: one saturating counter of negative votes per lane."""
    return data.ArrayLayout(unsigned(counter_bits), line_bits)


def sum_layout(line_bits, counter_bits):
    """A G-Ternary slot: one signed saturating sum per lane, one bit wider than a counter."""
    return data.ArrayLayout(signed(counter_bits + 1), line_bits // 2)


def readout_lines(readout, *, line_bits, counter_bits):
    """Lines in one slot's readout (the golden model's rule)."""
    return readout_lines_per_slot(Readout(readout), line_bits=line_bits, counter_bits=counter_bits)


def max_readout_lines(route, *, line_bits, counter_bits):
    """The longest readout of ``route``, in lines: how many lines an engine's readout spans."""
    return max(readout_lines(r, line_bits=line_bits, counter_bits=counter_bits)
               for r in READOUTS_BY_ROUTE[Route(route)])


def request_layout(*, line_bits, worker_bits):
    """An upstream request: operation, line address, worker id and the written line."""
    return data.StructLayout({
        "op": unsigned(OP_BITS),
        "addr": unsigned(ADDR_BITS),
        "worker": unsigned(worker_bits),
        "data": unsigned(line_bits),
    })


def response_layout(*, line_bits):
    """An upstream response beat: status, ``last`` on a readout's final line, and a line."""
    return data.StructLayout({
        "status": unsigned(STATUS_BITS),
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
    returns ``r_data`` on the next cycle; a write strobe ``w_stb`` writes ``w_data`` at once.
    Accesses never wait. Unmapped addresses read 0 and ignore writes.
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


def pad_lanes(lanes, lane_bits):
    """The lanes of an ``ArrayLayout`` view, each widened to ``lane_bits`` bits, concatenated.

    Signed lanes are sign-extended (two's complement), unsigned ones zero-extended: the
    padding of the wide readouts.
    """
    out = []
    for lane in lanes:
        value = Value.cast(lane)
        fill = value[-1] if value.shape().signed else C(0, 1)
        out.append(Cat(value, fill.replicate(lane_bits - len(value))))
    return Cat(out)


def ternary_code(negative, positive):
    """The 2-bit code of a lane: ``11`` for -1, ``01`` for +1, ``00`` for 0."""
    return Cat(negative | positive, negative)
