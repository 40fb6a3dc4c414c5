"""Routes, readouts and the widths that follow from the parameters (docs/design.md, "Readouts").

Kept apart from the arithmetic so that the register map, the transaction model and the
hardware all derive lane counts, counter widths and readout sizes from one definition.

Each route is a registered :class:`RouteSpec` in :data:`ROUTE_SPECS`, each readout a
:class:`ReadoutSpec` of its route: everything the other layers need to know about a route
(its names, its lanes, its readouts and their sizes, its counters and flags, the golden
module that computes it) is written there once, and the register map, the transaction
model, the hardware and the host runtime look it up. Where a route's arithmetic differs (the
hooks' encoders, the control plane's choice of fold) they test which route it is.
"""

import dataclasses
import enum
import importlib
import typing

from .validate import check_int

__all__ = [
    "MAX_WORKERS_LIMIT",
    "COUNTER_BITS_LIMIT",
    "Route",
    "Readout",
    "ReadoutSpec",
    "RouteSpec",
    "ROUTE_SPECS",
    "READOUT_SPECS",
    "READOUTS_BY_ROUTE",
    "GATE_BITS",
    "GATE_MAX",
    "enum_bits",
    "route_spec",
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


#: Width of the GATE register: a G-Ternary gate is 0 to :data:`GATE_MAX`.
GATE_BITS = 8
GATE_MAX = (1 << GATE_BITS) - 1


def enum_bits(members):
    """Bits that hold every value of an enumeration of non-negative integers (at least 1):
    the width of its CSR field and of its wire, as ``amaranth.hdl.Shape.cast`` infers it."""
    return max(1, max(int(member) for member in members).bit_length())


@dataclasses.dataclass(frozen=True)
class ReadoutSpec:
    """One readout kind of a route.

    ``lines`` gives the lines one slot's readout takes from the counter width (the count
    does not depend on the line width: every line holds one plane of every lane);
    ``value_bits`` the bits of each lane's value the readout carries.
    """
    readout: Readout
    lines: typing.Callable[[int], int]
    value_bits: typing.Callable[[int], int]

    @property
    def name(self):
        """The readout's name as profiles and reports spell it (``"sign"``)."""
        return self.readout.name.lower()


@dataclasses.dataclass(frozen=True)
class RouteSpec:
    """One route: how a window of this route folds written lines and reads slots back.

    Members
    -------
    route : Route
        The CSR encoding.
    name : str
        How profiles, hooks, reports and the runtime spell it (``"gbinary"``).
    label : str
        How people read it (``"G-Binary"``).
    lane_bits : int
        Bits per lane of a written line; a line holds ``line_bits // lane_bits`` lanes.
    signed : bool
        A lane's state is a signed sum (else an unsigned count of ones).
    readouts : tuple of ReadoutSpec
        The readouts a window of this route offers, the first the default.
    lines_counter : str
        The event counter of lines folded (a register of the register map).
    flags : tuple of str
        The sticky error flags a fold of this route can raise.
    invalid_counter : str or None
        The counter of lines holding an invalid code, for a route that has one.
    model : str
        The golden module that computes the route (:mod:`.gbinary`, :mod:`.gternary`); every
        such module has ``encode``, ``aggregate``, ``aggregate_planes``, ``readout``,
        ``readout_planes``, ``parse_readout`` and ``decode``, whose ``readout`` takes the
        keyword arguments named by ``readout_inputs`` besides ``readout`` and
        ``counter_bits``.
    readout_inputs : tuple of str
        What the route's readout needs of the registers: ``"num_workers"``, ``"gate"``.
    """
    route: Route
    name: str
    label: str
    lane_bits: int
    signed: bool
    readouts: tuple
    lines_counter: str
    flags: tuple
    invalid_counter: str | None
    model: str
    readout_inputs: tuple

    def lanes(self, line_bits):
        """Lanes per written line."""
        return line_bits // self.lane_bits

    def limits(self, *, max_workers, counter_bits):
        """``(low, high)``: a lane's state saturates within these bounds."""
        if self.signed:
            limit = sum_limit(max_workers, counter_bits)
            return -limit, limit
        return 0, count_limit(counter_bits)

    @property
    def golden(self):
        """The golden module of the route (imported on first use: it imports this one)."""
        return importlib.import_module(f"{__package__}.{self.model}")


def _sum_lines(counter_bits):
    return (counter_bits + 2) // 2  # ceil((counter_bits + 1) / 2): two bits of each sum a line


#: The registry: every route with its readouts, in CSR encoding order.
ROUTE_SPECS = {spec.route: spec for spec in (
    RouteSpec(
        route=Route.GBINARY, name="gbinary", label="G-Binary", lane_bits=1, signed=False,
        readouts=(ReadoutSpec(Readout.SIGN, lines=lambda c: 1, value_bits=lambda c: 1),
                  ReadoutSpec(Readout.TERNARY, lines=lambda c: 2, value_bits=lambda c: 2),
                  ReadoutSpec(Readout.COUNTS, lines=lambda c: c, value_bits=lambda c: c)),
        lines_counter="GBIN_LINES", flags=("SATURATED",), invalid_counter=None,
        model="gbinary", readout_inputs=("num_workers",)),
    RouteSpec(
        route=Route.GTERNARY, name="gternary", label="G-Ternary", lane_bits=2, signed=True,
        readouts=(ReadoutSpec(Readout.GATED, lines=lambda c: 1, value_bits=lambda c: 2),
                  ReadoutSpec(Readout.SUMS, lines=_sum_lines, value_bits=lambda c: c + 1)),
        lines_counter="GTERN_LINES", flags=("INVALID_CODE", "SATURATED"),
        invalid_counter="INVALID_LINES", model="gternary", readout_inputs=("gate",)),
)}
#: Every readout's spec, by readout.
READOUT_SPECS = {r.readout: r for spec in ROUTE_SPECS.values() for r in spec.readouts}
#: The readouts of each route, in its spec's order.
READOUTS_BY_ROUTE = {route: tuple(r.readout for r in spec.readouts)
                     for route, spec in ROUTE_SPECS.items()}


def route_spec(route):
    """The :class:`RouteSpec` of a route: a :class:`Route`, its CSR encoding or its name."""
    if isinstance(route, str):
        for spec in ROUTE_SPECS.values():
            if spec.name == route:
                return spec
        raise ValueError(f"route must be one of {', '.join(s.name for s in ROUTE_SPECS.values())}, "
                         f"not {route!r}")
    return ROUTE_SPECS[Route(route)]


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

    ``max_workers`` with the default counter width (docs/design.md, "G-Ternary"); a narrower
    counter lowers it to ``2**counter_bits - 1``.
    """
    return min(max_workers, count_limit(counter_bits))


def route_lanes(route, line_bits):
    """Lanes per written line: ``line_bits`` for G-Binary, ``line_bits // 2`` for G-Ternary."""
    return route_spec(route).lanes(line_bits)


def readout_route(readout):
    """The route a readout belongs to."""
    readout = Readout(readout)
    for route, readouts in READOUTS_BY_ROUTE.items():
        if readout in readouts:
            return route
    raise AssertionError(readout)  # every Readout is registered with its route


def readout_lines_per_slot(readout, *, counter_bits):
    """How many response lines one slot's readout takes (``last`` is set on the final one).

    ``SIGN`` and ``GATED`` take 1 line, ``TERNARY`` 2, ``COUNTS`` ``counter_bits`` (one
    bit-plane per counter bit) and ``SUMS`` ``ceil((counter_bits + 1) / 2)`` (a sum is one bit
    wider than a counter and a line holds two of its bits per lane). The count does not
    depend on the line width: every line holds one plane of every lane.
    """
    readout = Readout(readout)
    counter_bits = check_int("counter_bits", counter_bits, low=1)
    return READOUT_SPECS[readout].lines(counter_bits)


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
