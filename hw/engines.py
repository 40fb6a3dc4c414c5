"""The lane engines, by route: the hardware's half of the route registry.

:data:`~neuron_fabric.golden.formats.ROUTE_SPECS` says what a route computes; this module
says which lane engine computes it in hardware, under which name it is emitted and built
into the lane tiles, and which function lists its readout lines. The lane tile, the
Verilog generator and the FPGA flow take the engines from here.
"""

import dataclasses

from amaranth.lib import wiring

from ..golden.formats import Route, route_spec
from .sign_count import SignCountEngine, sign_count_lines
from .ternary_gate import TernaryGateEngine, ternary_gate_lines

__all__ = ["Engine", "ENGINES", "engine"]


@dataclasses.dataclass(frozen=True)
class Engine:
    """A route's lane engine.

    Members
    -------
    route : Route
    role : str
        The block's name: its role in the generated manifest (``nfabric_<role>_...``) and
        the suffix of its submodules in a lane tile.
    component : type
        The :class:`~amaranth.lib.wiring.Component`; it takes ``line_bits``, ``max_workers``,
        ``counter_bits`` and ``max_contributions`` and has ``i``/``o`` streams whose
        ``readout`` field is a :class:`~neuron_fabric.golden.formats.Readout`.
    lines : callable
        ``{Readout: [line, ...]}`` of the route's readouts from the engine's readout inputs:
        every readout of the route's spec is listed.
    """
    route: Route
    role: str
    component: type
    lines: object

    def __post_init__(self):
        if not (isinstance(self.component, type) and issubclass(self.component, wiring.Component)):
            raise TypeError(f"component must be a wiring.Component class, not {self.component!r}")


#: Every route's engine, in route order: one for each route of the golden registry.
ENGINES = {e.route: e for e in (
    Engine(Route.GBINARY, "sign_count", SignCountEngine, sign_count_lines),
    Engine(Route.GTERNARY, "ternary_gate", TernaryGateEngine, ternary_gate_lines),
)}


def engine(route):
    """The :class:`Engine` of ``route`` (a :class:`Route`, its encoding or its name)."""
    return ENGINES[route_spec(route).route]
