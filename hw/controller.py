"""The controller top (docs/design.md, "Controller"): a control plane and a row of lane tiles."""

from amaranth.hdl import Cat, Module, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.validate import check_int
from ..golden.params import FabricParams
from .control_plane import ControlPlane
from .lane_tile import LaneTile
from .schedule import LATENCY
from .layouts import CSRBusSignature, mem_request_layout, request_layout, response_layout
from .passthrough import Fp32Passthrough

__all__ = ["Controller", "LATENCY", "TILE_LANES", "GROUP_LANES"]

#: The default line bits per lane tile: a tile's slot row (32 lanes of 5-bit counters at 16
#: workers) fills five 36-bit block RAMs.
TILE_LANES = 32
#: The default line bits per copy of a tile's control fields.
GROUP_LANES = 8
#: Tiles fed by one copy of the control plane's words.
TILES_PER_WORD_COPY = 4


class Controller(wiring.Component):
    """The NEURON-Fabric controller: aggregation windows in front of a memory port.

    Every request gets one response, in request order (a readout spans several beats,
    ``last`` on the final one). A request inside an enabled window is aggregated into its
    slot; any other request is memory traffic and goes to ``o_mem`` byte-exact. Behaviour is
    that of :class:`~neuron_fabric.golden.controller.ControllerModel`, bit for bit.

    The datapath is a row of ``line_bits // tile_lanes`` identical
    :class:`~neuron_fabric.hw.lane_tile.LaneTile` s, each holding its lanes of every slot in
    its own block RAM, fed by one narrow
    :class:`~neuron_fabric.hw.control_plane.ControlPlane` through registered control words.
    Only the tiles' sticky SATURATED and INVALID_CODE flags are combined, from registers.

    **Throughput**: one line per clock, also for back-to-back writes to one slot (writes in
    flight are forwarded). A readout of ``k`` lines takes ``k`` cycles of ``i_req``.
    **Latency**: :data:`LATENCY` cycles from request to first response beat.
    **Backpressure**: ``o_resp`` and ``o_mem`` drain buffers of ``buffer_depth`` entries;
    the pipeline never stops, and ``i_req.ready`` admits a request only when the buffers
    have room for it. Memory reads in flight while later requests answer locally: their
    responses wait in the buffer, in order. Nothing is dropped or counted twice.
    **Clearing**: after reset, CONTROL.CLEAR_SLOTS or a write to a window register, the
    controller stops taking requests and writes empty slots, one per cycle (``DEPTH``
    cycles per window), behind the requests taken before; then it goes on.
    **CSRs**: register values are used as they are when a request passes; change the
    configuration while no request is in flight (nor taken in the write's cycle).
    ``i_req.ready`` is low in the cycle after a CSR write, so a request taken later sees it. Flags and counters follow a response by at
    most two cycles.

    Parameters
    ----------
    params : FabricParams
        Line width, MAX_WORKERS, DEPTH, NUM_WINDOWS and counter width.
    tile_lanes : int
        Line bits per lane tile: an even divisor of ``line_bits``.
    group_lanes : int
        Line bits per copy of the tiles' control fields: an even divisor of ``tile_lanes``.
    max_reads : int
        Memory reads in flight at most (1 to 1024).
    buffer_depth : int
        Entries of the response and memory-request buffers: at least the longest readout
        plus one; ``LATENCY`` plus the longest readout keeps II = 1 without backpressure.
    cells : None or "ecp5"
        What the tiles' fold adders are built from (:mod:`~.row_cells`): generic logic,
        or ECP5 carry cells (CCU2C instances) for ECP5 builds.

    Members
    -------
    i_req : ``In(stream.Signature(request_layout))``
        Upstream requests: ``op`` (Op), ``addr`` (line address), ``worker``, ``data``.
    o_resp : ``Out(stream.Signature(response_layout))``
        Upstream responses: ``status`` (Status), ``last``, ``data``.
    o_mem : ``Out(stream.Signature(mem_request_layout))``
        Downstream memory requests: ``write``, ``addr``, ``data``.
    i_mem : ``In(stream.Signature(line_bits))``
        Downstream read data, one line per read, in order.
    csr : ``In(CSRBusSignature)``
        The register bus (:func:`~neuron_fabric.golden.regmap.register_map`).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, params=None, tile_lanes=TILE_LANES, group_lanes=GROUP_LANES,
                 max_reads=16, buffer_depth=16, cells=None):
        params = FabricParams() if params is None else params
        if not isinstance(params, FabricParams):
            raise TypeError(f"params must be a FabricParams, not {params!r}")
        self.params = params
        self.tile_lanes = check_int("tile_lanes", tile_lanes, low=2, high=params.line_bits)
        if params.line_bits % self.tile_lanes or self.tile_lanes % 2:
            raise ValueError(f"tile_lanes must be an even divisor of line_bits "
                             f"({params.line_bits}), not {tile_lanes!r}")
        self.group_lanes = group_lanes
        self.max_reads = check_int("max_reads", max_reads, low=1, high=1024)
        self.buffer_depth = check_int("buffer_depth", buffer_depth, low=2, high=1024)
        # Built here so that their parameter checks run before the signature exists.
        tiles = params.line_bits // self.tile_lanes
        self._control = ControlPlane(params=params, buffer_depth=self.buffer_depth,
                                     word_copies=-(-tiles // TILES_PER_WORD_COPY))
        self.regmap = self._control.regmap
        self._tiles = [
            LaneTile(tile_lanes=self.tile_lanes, group_lanes=group_lanes,
                     max_workers=params.max_workers, counter_bits=params.counter_bits,
                     rows=self._control.rows, buffer_depth=self.buffer_depth,
                     cells=cells)
            for _ in range(tiles)]
        p = params
        super().__init__({
            "i_req": In(stream.Signature(request_layout(line_bits=p.line_bits,
                                                        worker_bits=p.worker_bits))),
            "o_resp": Out(stream.Signature(response_layout(line_bits=p.line_bits))),
            "o_mem": Out(stream.Signature(mem_request_layout(line_bits=p.line_bits))),
            "i_mem": In(stream.Signature(unsigned(p.line_bits))),
            "csr": In(CSRBusSignature(addr_width=self.regmap.address_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        p, T = self.params, self.tile_lanes
        m.submodules.control = control = self._control
        m.submodules.passthrough = passthrough = Fp32Passthrough(
            line_bits=p.line_bits, max_reads=self.max_reads)
        tiles = self._tiles
        for index, tile in enumerate(tiles):
            m.submodules[f"tile_{index}"] = tile

        def lanes(value, index):
            return value[index * T:(index + 1) * T]

        wiring.connect(m, wiring.flipped(self.csr), control.csr)
        request = self.i_req.payload
        m.d.comb += [
            control.i_req.valid.eq(self.i_req.valid),
            control.i_req.payload.op.eq(request.op),
            control.i_req.payload.addr.eq(request.addr),
            control.i_req.payload.worker.eq(request.worker),
            self.i_req.ready.eq(control.i_req.ready),
        ]
        for index, tile in enumerate(tiles):
            copy = index // TILES_PER_WORD_COPY
            m.d.comb += [tile.i_data.eq(lanes(request.data, index)),
                         tile.read_word.eq(control.read_words[copy]),
                         tile.forward_word.eq(control.forward_words[copy]),
                         tile.fold_word.eq(control.fold_words[copy]),
                         tile.late_word.eq(control.late_words[copy])]

        # Memory requests: the narrow part from the control plane, the line from the tiles.
        m.d.comb += [
            passthrough.i_req.valid.eq(control.o_mem.valid),
            passthrough.i_req.payload.write.eq(control.o_mem.payload.write),
            passthrough.i_req.payload.addr.eq(control.o_mem.payload.addr),
            passthrough.i_req.payload.data.eq(Cat(tile.o_memory for tile in tiles)),
            control.o_mem.ready.eq(passthrough.i_req.ready),
        ]
        wiring.connect(m, passthrough.o_mem, wiring.flipped(self.o_mem))
        wiring.connect(m, wiring.flipped(self.i_mem), passthrough.i_mem)
        popped_memory = control.o_mem.valid & passthrough.i_req.ready

        # Responses: the head's status from the control plane, its line from the tiles
        # (which pass the memory's data for a memory read).
        head = control.o_resp
        from_memory = head.payload.from_memory
        m.d.comb += [
            self.o_resp.valid.eq(head.valid & (~from_memory | passthrough.o_data.valid)),
            self.o_resp.payload.status.eq(head.payload.status),
            self.o_resp.payload.last.eq(head.payload.last),
            self.o_resp.payload.data.eq(Cat(tile.o_response for tile in tiles)),
            head.ready.eq(self.o_resp.ready & (~from_memory | passthrough.o_data.valid)),
            passthrough.o_data.ready.eq(self.o_resp.ready & head.valid & from_memory),
        ]
        popped_response = self.o_resp.valid & self.o_resp.ready
        for index, tile in enumerate(tiles):
            m.d.comb += [tile.pop_response.eq(popped_response),
                         tile.pop_memory.eq(popped_memory),
                         tile.i_mem_data.eq(lanes(passthrough.o_data.payload, index))]

        # The tiles' sticky flags (registered in each tile, after a register per group).
        m.d.comb += [control.saturated.eq(Cat(tile.saturated for tile in tiles).any()),
                     control.invalid.eq(Cat(tile.invalid for tile in tiles).any())]
        m.d.comb += control.stalled.eq((self.o_resp.valid & ~self.o_resp.ready)
                                       | (self.o_mem.valid & ~self.o_mem.ready))
        return m
