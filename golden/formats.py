"""Routes, readouts and the widths that follow from the parameters (DESIGN.md sections 3-4).

Kept apart from the arithmetic so that the register map, the transaction model and the
hardware all derive lane counts, counter widths and readout sizes from one definition.
"""

import enum

from .validate import check_int

__all__ = [
    "MAX_WORKERS_LIMIT",
    "COUNTER_BITS_LIMIT",
    "Route",
    "Readout",
    "READOUTS_BY_ROUTE",
    "check_max_workers",
    "check_counter_bits",
    "default_counter_bits",
    "count_limit",
    "sum_limit",
    "route_lanes",
    "readout_route",
    "check_readout",
    "check_readout_lines",
    "readout_lines_per_slot",
]

# Counts fit ``uint8`` and sums fit ``int8`` up to this many workers. The hardware's own
# range (2 to 64) is narrower and is checked by :class:`~neuron_fabric.golden.params.FabricParams`.
MAX_WORKERS_LIMIT = 127
#: The widest counter: ``ceil(log2(MAX_WORKERS_LIMIT + 1))``.
COUNTER_BITS_LIMIT = MAX_WORKERS_LIMIT.bit_length()


class Route(enum.IntEnum):
    """How a window aggregates the lines written to it (the CSR encoding is the value)."""
    GBINARY  = 0  #: 1 sign bit per lane, per-lane count of negative votes
    GTERNARY = 1  #: 2-bit ternary code per lane, per-lane signed sum


class Readout(enum.IntEnum):
    """What a read of a complete slot returns (the CSR encoding is the value).

    Every readout line keeps G-Binary lane ``i`` at line bit ``i`` and G-Ternary lane ``t``
    at line bits ``2t`` and ``2t + 1``, where the lane's written bits arrive; a wide value
    is spread over several lines as bit-planes, least significant first.
    """
    SIGN    = 0  #: G-Binary, 1 line: 1 = majority negative, ties read 0
    TERNARY = 1  #: G-Binary, 2 lines: the SIGN line, then 1 where the lane is not a tie
    COUNTS  = 2  #: G-Binary, C lines: line k holds bit k of every counter
    GATED   = 3  #: G-Ternary, 1 line: 2-bit code of sign(S) where |S| >= GATE, else 0
    SUMS    = 4  #: G-Ternary, ceil((C+1)/2) lines: line k holds bits 2k, 2k+1 of every sum


READOUTS_BY_ROUTE = {
    Route.GBINARY:  (Readout.SIGN, Readout.TERNARY, Readout.COUNTS),
    Route.GTERNARY: (Readout.GATED, Readout.SUMS),
}


def check_max_workers(max_workers, *, low=1, high=MAX_WORKERS_LIMIT):
    """Validate ``max_workers`` against ``[low, high]`` and return it."""
    return check_int("max_workers", max_workers, low=low, high=high)


def default_counter_bits(max_workers):
    """``ceil(log2(max_workers + 1))``: the counter width that never saturates."""
    return check_max_workers(max_workers).bit_length()


def check_counter_bits(counter_bits, *, max_workers):
    """Validate a counter width for ``max_workers``; ``None`` selects the default width.

    A narrower counter than the default saves area but saturates when more than
    ``2**counter_bits - 1`` workers contribute; the capability registers report it so that
    the runtime can refuse such a job.
    """
    full = default_counter_bits(max_workers)
    if counter_bits is None:
        return full
    return check_int("counter_bits", counter_bits, low=1, high=full)


def count_limit(counter_bits):
    """Largest G-Binary count: counters saturate here."""
    return (1 << counter_bits) - 1


def sum_limit(max_workers, counter_bits):
    """Largest G-Ternary sum magnitude: sums saturate in ``[-limit, +limit]``.

    ``max_workers`` with the default counter width (DESIGN.md section 4); a narrower
    counter lowers it to ``2**counter_bits - 1``.
    """
    return min(max_workers, count_limit(counter_bits))


def route_lanes(route, line_bits):
    """Lanes per written line: ``line_bits`` for G-Binary, ``line_bits // 2`` for G-Ternary."""
    return line_bits if Route(route) is Route.GBINARY else line_bits // 2


def readout_route(readout):
    """The route a readout belongs to."""
    readout = Readout(readout)
    for route, readouts in READOUTS_BY_ROUTE.items():
        if readout in readouts:
            return route
    raise AssertionError(readout)  # every Readout is listed above


def readout_lines_per_slot(readout, *, counter_bits):
    """How many response lines one slot's readout takes (``last`` is set on the final one).

    ``SIGN`` and ``GATED`` take 1 line, ``TERNARY`` 2, ``COUNTS`` ``counter_bits`` (one
    bit-plane per counter bit) and ``SUMS`` ``ceil((counter_bits + 1) / 2)`` (a sum is one bit
    wider than a counter and a line holds two of its bits per lane). The count does not
    depend on the line width: every line holds one plane of every lane.
    """
    readout = Readout(readout)
    counter_bits = check_int("counter_bits", counter_bits, low=1)
    if readout in (Readout.SIGN, Readout.GATED):
        return 1
    if readout is Readout.TERNARY:
        return 2
    if readout is Readout.COUNTS:
        return counter_bits
    return (counter_bits + 2) // 2  # SUMS: ceil((counter_bits + 1) / 2)


def check_readout(readout, *, route=None):
    """Validate a readout (and, given ``route``, that the route offers it); return it."""
    try:
        readout = Readout(readout)
    except ValueError:
        raise ValueError(
            f"readout must be one of {', '.join(r.name for r in Readout)}, not {readout!r}") from None
    if route is not None and readout not in READOUTS_BY_ROUTE[Route(route)]:
        allowed = ", ".join(r.name for r in READOUTS_BY_ROUTE[Route(route)])
        raise ValueError(f"readout must be one of {allowed} for {Route(route).name}, "
                         f"not Readout.{readout.name}")
    return readout


def check_readout_lines(lines, *, readout, counter_bits):
    """Group readout lines by slot, checking that they hold whole readouts.

    ``lines`` is ``(n_lines, line_bytes)``; returns ``(n_slots, lines_per_slot, line_bytes)``.
    """
    per_slot = readout_lines_per_slot(readout, counter_bits=counter_bits)
    if lines.shape[0] % per_slot:
        raise ValueError(
            f"lines must hold whole {Readout(readout).name} readouts of {per_slot} lines each, "
            f"not {lines.shape[0]} lines")
    return lines.reshape(lines.shape[0] // per_slot, per_slot, lines.shape[1])
