"""The bit-exact golden model: the reference the hardware is checked against.

Modules:

- :mod:`.lines`: line geometry, the one place that knows byte and bit order;
- :mod:`.formats`: routes, readouts and the widths that follow from the parameters;
- :mod:`.gbinary`, :mod:`.gternary`, :mod:`.fp32`: encoding, aggregation and readouts;
- :mod:`.params`: the generator's parameter set; :mod:`.regmap`: the CSR register map;
- :mod:`.controller`: the transaction-level model of the controller top;
- :mod:`.combiner`: the write-combining accumulator's exact write sequence;
- :mod:`.validate`: the checks every public function applies to its arguments;
- :mod:`.kernels`: the loops compiled with Numba, the G-Ternary sum and encoder.

The package imports NumPy, Numba and the standard library only. The host runtime and the DDP hooks
are in :mod:`neuron_fabric.host`; workloads, traces and the training checks in
:mod:`neuron_fabric.experiments`.
"""

from . import combiner, controller, formats, fp32, gbinary, gternary, lines, params, regmap, validate
from .controller import ControllerModel, LineMemory, Op, Request, Response, Status
from .formats import Readout, Route
from .params import FabricParams

__all__ = [
    "combiner", "controller", "formats", "fp32", "gbinary", "gternary", "lines", "params",
    "regmap", "validate",
    "ControllerModel", "LineMemory", "Op", "Request", "Response", "Status",
    "Readout", "Route", "FabricParams",
]
