"""The bit-exact golden model: NumPy functions the hardware is checked against.

Modules:

- :mod:`.lines`: line geometry, the one place that knows byte and bit order;
- :mod:`.formats`: routes, readouts and the widths that follow from the parameters;
- :mod:`.gbinary`, :mod:`.gternary`, :mod:`.fp32`: encoding, aggregation and readouts;
- :mod:`.params`: the generator's parameter set; :mod:`.regmap`: the CSR register map;
- :mod:`.controller`: the transaction-level model of the controller top;
- :mod:`.traces`: real gradient traces (capture needs PyTorch, loading does not);
- :mod:`.runtime`: operating profiles, bindings, health monitor, reducer-capacity check;
- :mod:`.combiner`: the write-combining accumulator's exact write sequence;
- :mod:`.hooks`, :mod:`.train_check`: DDP communication hooks and the training checks
  (need PyTorch, so they are imported on demand).

Nothing here imports Amaranth or cocotb, and PyTorch only where a function needs it.
"""

from . import combiner, controller, formats, fp32, gbinary, gternary, lines, params, regmap, runtime
from .controller import ControllerModel, LineMemory, Op, Request, Response, Status
from .formats import Readout, Route
from .params import FabricParams

__all__ = [
    "combiner", "controller", "formats", "fp32", "gbinary", "gternary", "lines", "params",
    "regmap", "runtime",
    "ControllerModel", "LineMemory", "Op", "Request", "Response", "Status",
    "Readout", "Route", "FabricParams",
]
