"""The controller with AXI at its boundary (docs/design.md, "The AXI top")."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ..golden.params import FabricParams
from .axi import WorkerFrom
from .axi_data_port import AxiDataPort
from .axi_memory_port import AxiMemoryPort
from .axi_registers import AxiLiteRegisters
from .controller import LATENCY, TILE_LANES, Controller

__all__ = ["AxiController", "AXI_PORTS"]

#: The top's AXI ports: ``(prefix, adapter, the adapter's bus)``. Each AXI signal of the bus
#: is a port ``<prefix>_<signal>`` of the top (``s_axi_awvalid``), in the adapter's direction.
AXI_PORTS = (("s_axi", "data_port", "s_axi"),
             ("m_axi", "memory_port", "m_axi"),
             ("s_axil", "registers", "s_axil"))


class AxiController(wiring.Component):
    """The :class:`~.controller.Controller` behind three AXI adapters.

    - ``s_axi_*``: AXI4 subordinate for the requests (:class:`~.axi_data_port.AxiDataPort`),
      LINE_BITS of data.
    - ``m_axi_*``: AXI4 manager for the memory traffic (:class:`~.axi_memory_port.AxiMemoryPort`).
    - ``s_axil_*``: AXI4-Lite subordinate for the registers
      (:class:`~.axi_registers.AxiLiteRegisters`), the register map as it is.

    Every port is a plain AXI signal named as AXI names it; ``clk`` and ``rst`` (synchronous,
    active high: ARESETn inverted) are the clock and reset of all three. Behaviour is the
    controller's, bit for bit; the data port adds a cycle on the way in (its item buffer),
    so that no path through logic runs between AW, AR or W and the controller's admission,
    and none on the way out: RREADY and BREADY reach the controller's response pop through
    one gate.

    Parameters
    ----------
    params : FabricParams
        The controller's configuration.
    id_width : int
        Bits of AWID and ARID on ``s_axi``.
    worker_from : WorkerFrom or str
        Where a write's worker comes from: ``"address"`` or ``"id"``
        (:class:`~.axi.WorkerFrom`).
    tile_lanes, max_reads, buffer_depth, cells
        As for :class:`~.controller.Controller`; ``max_reads`` also bounds the reads the
        memory port has in flight, and as many writes wait for B.
    max_requests : int or None
        Requests the data port leaves unanswered at most (its tag FIFO); by default the
        power of two that covers the controller's latency and the port's registers, so that
        one request a clock flows.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, params=None, id_width=4, worker_from=WorkerFrom.ADDRESS,
                 tile_lanes=TILE_LANES, max_reads=16, buffer_depth=16, cells=None,
                 max_requests=None):
        params = FabricParams() if params is None else params
        self._controller = Controller(params=params, tile_lanes=tile_lanes, max_reads=max_reads,
                                      buffer_depth=buffer_depth, cells=cells)
        self.params, self.regmap = params, self._controller.regmap
        # One request a clock keeps the controller's pipeline, the data port's item
        # buffer, the tag on its way in and the head tag busy, and the tag FIFO
        # keeps three entries back (its room is a register); beyond that, responses are
        # waiting to leave and the next request may wait too.
        item_buffer, tag_in, head_tag, kept_back = 1, 1, 1, 3
        in_flight = LATENCY + item_buffer + tag_in + head_tag + kept_back
        if max_requests is None:
            max_requests = 1 << (in_flight - 1).bit_length()
        self._adapters = {
            "data_port": AxiDataPort(params=params, id_width=id_width, worker_from=worker_from,
                                     max_requests=max_requests),
            "memory_port": AxiMemoryPort(line_bits=params.line_bits, max_writes=max_reads,
                                         max_reads=max_reads),
            "registers": AxiLiteRegisters(regmap=self.regmap),
        }
        self.worker_from = self._adapters["data_port"].worker_from
        self.address_layout = self._adapters["data_port"].address_layout
        members = {}
        for prefix, adapter, port in AXI_PORTS:
            # The bus as the adapter sees it (a subordinate's flipped): its flows are the top's.
            bus = self._adapters[adapter].signature.members[port].signature
            members.update({f"{prefix}_{name}": member
                            for name, member in bus.members.items()})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.controller = controller = self._controller
        for name, adapter in self._adapters.items():
            m.submodules[name] = adapter
        data_port, memory_port = self._adapters["data_port"], self._adapters["memory_port"]
        wiring.connect(m, data_port.o_req, controller.i_req)
        wiring.connect(m, controller.o_resp, data_port.i_resp)
        wiring.connect(m, controller.o_mem, memory_port.i_req)
        wiring.connect(m, memory_port.o_data, controller.i_mem)
        wiring.connect(m, self._adapters["registers"].csr, controller.csr)
        for prefix, adapter, port in AXI_PORTS:
            bus = getattr(self._adapters[adapter], port)
            for name, member in bus.signature.members.items():
                outer, inner = getattr(self, f"{prefix}_{name}"), getattr(bus, name)
                if member.flow is In:
                    m.d.comb += inner.eq(outer)
                else:
                    m.d.comb += outer.eq(inner)
        return m
