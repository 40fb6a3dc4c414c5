"""The controller's requests and responses behind an AXI4 subordinate (docs/design.md,
"The AXI top")."""

from amaranth.hdl import Cat, Module, Mux, Shape, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..golden.controller import Op, Status
from ..golden.params import FabricParams
from ..golden.validate import check_int
from .axi import (LEN_BITS, Axi4Signature, Burst, Resp, WorkerFrom, data_address_layout,
                  line_size, status_resp)
from .lane_logic import KEEP
from .layouts import request_layout, response_layout

__all__ = ["AxiDataPort", "tag_layout", "ZERO_GROUP_BITS"]

#: Line bits whose padding zeros one copy of the padding flag drives.
ZERO_GROUP_BITS = 64


def tag_layout(*, id_width):
    """What the response side must know of each request, in request order: whether it is a
    read, its burst's ID, whether the controller answers it (``native``; a refused beat or
    burst is answered here), whether it ends its burst, and ``beats``: the R beats it owes,
    less one."""
    return data.StructLayout({
        "read": unsigned(1),
        "id": unsigned(id_width),
        "native": unsigned(1),
        "last": unsigned(1),
        "beats": unsigned(LEN_BITS),
    })


class AxiDataPort(wiring.Component):
    """AXI4 subordinate in front of the controller's request and response streams.

    **Writes**: a burst of ``AWLEN + 1`` whole lines is that many WRITE requests, at
    consecutive line addresses (INCR) or at one (FIXED), one a W beat. The worker is
    ``worker_from`` the address (each worker's alias of the address space) or the top bits
    of AWID. One B a burst: OKAY when every beat was answered OK, else SLVERR, with the
    first status other than OK in BUSER.
    **Reads**: an INCR burst of ``ARLEN + 1`` beats is that many READ requests at
    consecutive line addresses, a beat each; a FIXED burst is one READ at its address whose
    readout lines are the beats (how a readout of several lines is read). The ``clear``
    alias of the address makes them READ_CLEAR. RRESP is OKAY for an OK line, SLVERR for
    any other status, which RUSER carries (a refused line is all zeros). A readout longer
    than the beats left for it is cut, its last beat sent SLVERR; one shorter is padded
    with SLVERR beats (RUSER BAD_REQUEST, data zero).
    **Refused here**, never reaching the controller, answered SLVERR with BAD_REQUEST in
    xUSER: a burst that is not whole lines (AxSIZE), not INCR or FIXED, not at a line's
    first byte, or a write at the ``clear`` alias; a W beat whose WSTRB is not all ones. A
    refused read burst's beats are zero lines, after a cycle.

    **Throughput**: one request a clock; when reads and writes both wait they take turns.
    **Latency**: none on the way in (W data are the request's line); answers leave as the
    controller gives them. **Order**: responses leave in the order the requests were taken,
    whatever their IDs (AXI asks it only of one ID), so a stalled R holds B behind it and
    the reverse. At most ``max_requests`` requests are unanswered.
    Channel rules, each a line of logic below: xREADY of AW and AR only while no burst of
    theirs is held; WREADY only for a beat that is taken; BVALID, RVALID and their payloads
    held until taken; one B a write burst, with its last beat; RLAST on a read burst's last
    beat.

    Parameters
    ----------
    params : FabricParams
        Line width (the AXI data width) and worker id width.
    id_width : int
        Bits of AWID and ARID (1 to 32).
    worker_from : WorkerFrom or str
        ``"address"`` (default) or ``"id"``; with ``"id"``, ``id_width`` must hold a worker id.
    max_requests : int
        Requests in flight in the controller at most (a power of two, 4 to 1024); cover
        its latency and buffers for one request a clock.

    Members
    -------
    s_axi : ``In(Axi4Signature(...))``
        The AXI4 subordinate; its address is :func:`~.axi.data_address_layout`, BUSER and
        RUSER a :class:`Status`.
    o_req : ``Out(stream.Signature(request_layout))``
        Requests to the controller.
    i_resp : ``In(stream.Signature(response_layout))``
        The controller's responses.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, params=None, id_width=4, worker_from=WorkerFrom.ADDRESS,
                 max_requests=32):
        params = FabricParams() if params is None else params
        if not isinstance(params, FabricParams):
            raise TypeError(f"params must be a FabricParams, not {params!r}")
        self.params = params
        self.id_width = check_int("id_width", id_width, low=1, high=32)
        try:
            self.worker_from = WorkerFrom(worker_from)
        except ValueError:
            raise ValueError(f"worker_from must be one of "
                             f"{', '.join(repr(w.value) for w in WorkerFrom)}, "
                             f"not {worker_from!r}") from None
        if self.worker_from is WorkerFrom.ID and id_width < params.worker_bits:
            raise ValueError(f"id_width must be at least the worker id's {params.worker_bits} "
                             f"bits when the worker comes from the ID, not {id_width!r}")
        self.max_requests = check_int("max_requests", max_requests, low=4, high=1024)
        if max_requests & (max_requests - 1):
            raise ValueError(f"max_requests must be a power of two, not {max_requests!r}")
        self.address_layout = data_address_layout(
            line_bits=params.line_bits, worker_bits=params.worker_bits,
            worker_from=self.worker_from)
        super().__init__({
            "s_axi": In(Axi4Signature(addr_width=self.address_layout.size,
                                      data_width=params.line_bits, id_width=self.id_width,
                                      user_width=Shape.cast(Status).width)),
            "o_req": Out(stream.Signature(request_layout(line_bits=params.line_bits,
                                                         worker_bits=params.worker_bits))),
            "i_resp": In(stream.Signature(response_layout(line_bits=params.line_bits))),
        })

    def _worker(self, address, axid):
        if self.worker_from is WorkerFrom.ADDRESS:
            return address.worker
        return axid[self.id_width - self.params.worker_bits:]

    def _refused(self, address, size, burst):
        """Whether an address phase is not one the controller can take."""
        return ((size != line_size(self.params.line_bits))
                | ~((burst == Burst.INCR) | (burst == Burst.FIXED))
                | (address.offset != 0))

    def elaborate(self, platform):
        m = Module()
        axi, req, resp = self.s_axi, self.o_req, self.i_resp
        # The head tag is a register (the buffered FIFO's): the answer side decodes it into
        # the controller's response pop, which must start at flip-flops, not a LUT RAM read.
        tags = m.submodules.tags = SyncFIFOBuffered(
            width=tag_layout(id_width=self.id_width).size, depth=self.max_requests)
        command = data.StructLayout({
            "line": unsigned(32), "worker": unsigned(self.params.worker_bits),
            "id": unsigned(self.id_width), "left": unsigned(LEN_BITS),
            "len": unsigned(LEN_BITS), "fixed": unsigned(1), "refused": unsigned(1),
            "clear": unsigned(1)})

        # ---- Address phases: a burst is held until its last request is taken.
        aw, ar = Signal(command), Signal(command)
        aw_held, ar_held = Signal(), Signal()
        aw_address = data.View(self.address_layout, axi.awaddr)
        ar_address = data.View(self.address_layout, axi.araddr)

        # ---- Items: a W beat of the held write burst, or a request of the held read burst.
        w_item = Signal(tag_layout(id_width=self.id_width))
        r_item = Signal(tag_layout(id_width=self.id_width))
        r_per_beat = ~ar.fixed & ~ar.refused
        m.d.comb += [
            w_item.read.eq(0), w_item.id.eq(aw.id),
            w_item.native.eq(~aw.refused & axi.wstrb.all()),
            w_item.last.eq(aw.left == 0), w_item.beats.eq(0),
            r_item.read.eq(1), r_item.id.eq(ar.id), r_item.native.eq(~ar.refused),
            r_item.last.eq(~r_per_beat | (ar.left == 0)),
            r_item.beats.eq(Mux(r_per_beat, 0, ar.len)),
        ]
        w_waiting = aw_held & axi.wvalid
        r_waiting = ar_held

        # ---- Turns: the item offered stays offered until taken (stream rule), then the
        # other side has the turn.
        writes_turn = Signal()
        grant_write = w_waiting & (writes_turn | ~r_waiting)
        item = Mux(grant_write, w_item, r_item)
        item_native = Mux(grant_write, w_item.native, r_item.native)
        offered = (w_waiting | r_waiting) & tags.w_rdy
        m.d.comb += [
            req.valid.eq(offered & item_native),
            req.payload.op.eq(Mux(grant_write, Op.WRITE,
                                  Mux(ar.clear, Op.READ_CLEAR, Op.READ))),
            req.payload.addr.eq(Mux(grant_write, aw.line, ar.line)),
            req.payload.worker.eq(aw.worker),
            req.payload.data.eq(axi.wdata),
        ]
        taken = offered & (~item_native | req.ready)
        m.d.comb += [tags.w_en.eq(taken), tags.w_data.eq(item),
                     axi.wready.eq(taken & grant_write)]
        with m.If(w_waiting | r_waiting):
            m.d.sync += writes_turn.eq(grant_write ^ taken)
        write_taken = taken & grant_write
        read_taken = taken & ~grant_write

        # AW and AR are taken while no burst of theirs is held, or as its last item goes.
        m.d.comb += [axi.awready.eq(~aw_held | (write_taken & w_item.last)),
                     axi.arready.eq(~ar_held | (read_taken & r_item.last))]
        with m.If(write_taken):
            m.d.sync += aw.left.eq(aw.left - 1)
            with m.If(~aw.fixed):
                m.d.sync += aw.line.eq(aw.line + 1)
            with m.If(w_item.last):
                m.d.sync += aw_held.eq(0)
        with m.If(axi.awvalid & axi.awready):
            m.d.sync += [
                aw_held.eq(1),
                aw.line.eq(aw_address.line), aw.worker.eq(self._worker(aw_address, axi.awid)),
                aw.id.eq(axi.awid), aw.left.eq(axi.awlen), aw.len.eq(axi.awlen),
                aw.fixed.eq(axi.awburst == Burst.FIXED),
                aw.refused.eq(self._refused(aw_address, axi.awsize, axi.awburst)
                              | aw_address.clear),
            ]
        with m.If(read_taken):
            m.d.sync += [ar.left.eq(ar.left - 1), ar.line.eq(ar.line + 1)]
            with m.If(r_item.last):
                m.d.sync += ar_held.eq(0)
        with m.If(axi.arvalid & axi.arready):
            m.d.sync += [
                ar_held.eq(1),
                ar.line.eq(ar_address.line), ar.id.eq(axi.arid),
                ar.left.eq(axi.arlen), ar.len.eq(axi.arlen), ar.clear.eq(ar_address.clear),
                ar.fixed.eq(axi.arburst == Burst.FIXED),
                ar.refused.eq(self._refused(ar_address, axi.arsize, axi.arburst)),
            ]

        # ---- Answers, in request order: the head tag says where the next one goes.
        head = data.View(tag_layout(id_width=self.id_width), tags.r_data)
        sent = Signal(LEN_BITS)     # R beats of the head's request sent
        padding = Signal()          # no line of the controller's left for the head's beats
        draining = Signal()         # its beats are all sent: drop the rest of its readout
        first_error = Signal(Status)  # of the write burst so far
        final = sent == head.beats
        pop = Signal()
        m.d.comb += tags.r_en.eq(pop)

        # A padding beat carries zeros, not whatever line waits at the controller's output
        # (another request's): its data is gated by copies of the padding flag, a register
        # each per 64 bits, so no one net reaches every line bit.
        zeroed = Cat(Signal(name=f"padding_{g}", attrs=KEEP)
                     for g in range(-(-self.params.line_bits // ZERO_GROUP_BITS)))
        padding_next = Signal()
        m.d.comb += padding_next.eq(padding)
        m.d.sync += [padding.eq(padding_next), zeroed.eq(padding_next.replicate(len(zeroed)))]
        m.d.comb += axi.rdata.eq(Cat(
            resp.payload.data[g * ZERO_GROUP_BITS:(g + 1) * ZERO_GROUP_BITS]
            & ~zeroed[g].replicate(min(ZERO_GROUP_BITS,
                                       self.params.line_bits - g * ZERO_GROUP_BITS))
            for g in range(len(zeroed))))

        with m.If(tags.r_rdy & head.read & draining):
            m.d.comb += resp.ready.eq(1)
            with m.If(resp.valid & resp.payload.last):
                m.d.comb += pop.eq(1)
                m.d.sync += [draining.eq(0), sent.eq(0)]
        with m.Elif(tags.r_rdy & head.read & ~head.native & ~padding):
            # A refused burst: a cycle to raise the padding flag, then its beats.
            m.d.comb += padding_next.eq(1)
        with m.Elif(tags.r_rdy & head.read):
            status = Mux(padding, Status.BAD_REQUEST, resp.payload.status)
            cut = ~padding & final & ~resp.payload.last
            m.d.comb += [
                axi.rvalid.eq(padding | resp.valid),
                axi.rid.eq(head.id),
                axi.ruser.eq(status),
                axi.rresp.eq(Mux(cut, Resp.SLVERR, status_resp(status))),
                axi.rlast.eq(head.last & final),
                resp.ready.eq(~padding & axi.rready),
            ]
            with m.If(axi.rvalid & axi.rready):
                m.d.sync += sent.eq(sent + 1)
                with m.If(~padding & resp.payload.last & ~final):
                    m.d.comb += padding_next.eq(1)
                with m.If(final):
                    m.d.comb += [padding_next.eq(0), pop.eq(~cut)]
                    m.d.sync += [sent.eq(0), draining.eq(cut)]
        with m.Elif(tags.r_rdy):
            status = Mux(head.native, resp.payload.status, Status.BAD_REQUEST)
            burst_status = Mux(first_error != Status.OK, first_error, status)
            answered = ~head.native | resp.valid
            m.d.comb += [
                axi.bvalid.eq(answered & head.last),
                axi.bid.eq(head.id),
                axi.buser.eq(burst_status),
                axi.bresp.eq(status_resp(burst_status)),
                resp.ready.eq(head.native & (~head.last | axi.bready)),
            ]
            with m.If(answered & (~head.last | axi.bready)):
                m.d.comb += pop.eq(1)
                m.d.sync += first_error.eq(Mux(head.last, Status.OK, burst_status))
        return m
