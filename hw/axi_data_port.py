"""The controller's requests and responses behind an AXI4 subordinate (docs/design.md,
"The AXI top")."""

from amaranth.hdl import Cat, Module, Mux, Shape, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..golden.controller import Op, Status
from ..golden.params import ADDR_BITS, FabricParams
from ..golden.validate import check_int
from .axi import (FIXED_BEATS, LEN_BITS, Axi4Signature, Burst, Resp, WorkerFrom,
                  data_address_layout, line_size, status_resp)
from .lane_logic import KEEP
from .layouts import request_layout, response_layout
from .skid_buffer import SkidBuffer

__all__ = ["AxiDataPort", "tag_layout", "item_layout", "burst_layout", "ZERO_GROUP_BITS",
           "PAGE_BITS"]

#: Line bits that one copy of the padding flag drives.
ZERO_GROUP_BITS = 64
#: AXI keeps an INCR burst within a page of ``2**PAGE_BITS`` bytes (4 KB).
PAGE_BITS = 12
#: Bits of the R beats one item owes, less one: a FIXED read's, at most FIXED_BEATS.
BEATS_BITS = (FIXED_BEATS - 1).bit_length()


def tag_layout(*, id_width):
    """What the response side must know of each request, in request order: whether it is a
    read, its burst's ID, whether the controller answers it (``native``; a refused beat or
    burst is answered here), whether it ends its burst, ``beats``: the R beats it owes,
    less one (only a FIXED read owes more than one), and whether that is ``one`` beat."""
    return data.StructLayout({
        "read": unsigned(1),
        "id": unsigned(id_width),
        "native": unsigned(1),
        "last": unsigned(1),
        "beats": unsigned(BEATS_BITS),
        "one": unsigned(1),
    })


def item_layout(*, params, id_width):
    """An item on its way from the bursts to the controller: the request's narrow fields
    (a write's line is its W beat) and its tag."""
    return data.StructLayout({
        "op": Op, "addr": unsigned(ADDR_BITS), "worker": unsigned(params.worker_bits),
        "tag": tag_layout(id_width=id_width),
    })


def burst_layout(*, params, id_width):
    """The burst held: where its next item goes, the items ``left`` after it (less one),
    and whether it is the ``final`` one; ``per_beat``: an item a beat (a write, an INCR or
    refused read), else one item for all the beats (a FIXED read), and then ``left`` keeps
    the burst's AxLEN (the beats that item owes, less one)."""
    return data.StructLayout({
        "line": unsigned(ADDR_BITS), "worker": unsigned(params.worker_bits),
        "id": unsigned(id_width), "left": unsigned(LEN_BITS), "final": unsigned(1),
        "write": unsigned(1), "clear": unsigned(1), "fixed": unsigned(1), "per_beat": unsigned(1),
        "refused": unsigned(1)})


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
    first byte, a FIXED burst of more than 16 beats (AXI4 allows no more), or a write at
    the ``clear`` alias; a W beat whose WSTRB is not all ones. A refused read burst's beats
    are zero lines, the first two cycles after its turn comes (a cycle raises the padding
    flag, one loads its copies), the rest a clock each.

    **Throughput**: one request a clock (a refused single-beat read, one in three; a read
    after padding beats waits a cycle for the copies to fall); AW and AR take turns at the
    one burst held (writes and reads waiting alike alternate by burst).
    **Latency**: one cycle, a :class:`~.skid_buffer.SkidBuffer`: items wait in it between
    the bursts and the join with W, so W and the controller's admission reach no burst
    counter, and the request's narrow fields leave from its head register; a write's line
    is its W beat, held in the W channel until the controller takes it (WREADY is the
    admission of a write's item). Responses go out as the controller offers them, with no
    buffer: the controller's response ``ready`` is one LUT4 of RREADY, BREADY and two flags
    registered a cycle ahead (taken as R takes it, as B does, or with both whatever they
    do), so the controller's response pop is as near flip-flops as on the native top. R's
    data is the controller's line, zeroed for a padding beat. **Order**:
    responses leave in the order the requests were taken, whatever their IDs (AXI asks it
    only of one ID), so a stalled R holds B behind it and the reverse. A write burst's
    items wait at the item buffer's head for their W beats, reads behind them too. At most
    ``max_requests - 1`` requests are unanswered. An INCR burst's line address counts
    within its 4 KB page, as AXI keeps a burst inside one.
    Channel rules, each a line of logic below: AWREADY and ARREADY only while no burst is
    held or as its last item leaves; WREADY only for a beat that is taken; BVALID, RVALID
    and their payloads from the controller's response and the head tag, held until
    taken; one B a write burst, with its last beat; RLAST on a read burst's last beat.

    Parameters
    ----------
    params : FabricParams
        Line width (the AXI data width) and worker id width.
    id_width : int
        Bits of AWID and ARID (1 to 32).
    worker_from : WorkerFrom or str
        ``"address"`` (default) or ``"id"``; with ``"id"``, ``id_width`` must hold a worker id.
    max_requests : int
        Entries of the tag FIFO (a power of two, 4 to 1024): one fewer requests are
        unanswered at most, and the join waits while fewer than three are free a cycle
        before. For one request a clock, cover the controller's latency, this port's two
        buffers, the tag on its way in, the head tag and those three entries.

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

    def _refused(self, address, size, burst, length):
        """Whether an address phase is not one the controller can take (or AXI4 allows:
        a FIXED burst of more than FIXED_BEATS beats)."""
        # AxLEN is the beats less one, so more than FIXED_BEATS (a power of two) sets a bit
        # above its low BEATS_BITS: a test of a few bits, not a comparison's carry chain.
        too_long = (burst == Burst.FIXED) & (length[BEATS_BITS:] != 0)
        return ((size != line_size(self.params.line_bits))
                | ~((burst == Burst.INCR) | (burst == Burst.FIXED))
                | (address.offset != 0) | too_long)

    def elaborate(self, platform):
        m = Module()
        # Tags wait in a FIFO, then in a head register loaded from its LUT RAM, so that
        # the answer side reads its head from flip-flops (see `_answers`).
        tags = m.submodules.tags = SyncFIFO(
            width=tag_layout(id_width=self.id_width).size, depth=self.max_requests - 1)
        # Items wait in a skid buffer between the bursts and the join with W, so no path
        # runs from W or the controller's admission into the burst counters. Its head is a
        # register, so the request's narrow fields leave from flip-flops, as on the native
        # top; its line is the W beat itself, held in the W channel until the controller
        # takes it, so no buffer holds a line.
        item = item_layout(params=self.params, id_width=self.id_width)
        m.submodules.items = items = SkidBuffer(item)
        self._bursts(m, items.i)
        head_valid = Signal()   # the answer side's head tag is loaded
        self._join(m, items.o, self.o_req, tags, head_valid)
        self._answers(m, self.i_resp, tags, head_valid)
        return m

    def _bursts(self, m, items):
        """Address phases: AW and AR take turns at the one burst held, which makes an item
        a clock (a W beat's request, a read's request, or a refused burst's answer)."""
        axi = self.s_axi
        burst = Signal(burst_layout(params=self.params, id_width=self.id_width))
        held = Signal()
        reads_turn = Signal()       # with AW and AR both waiting, whose turn it is
        aw_address = data.View(self.address_layout, axi.awaddr)
        ar_address = data.View(self.address_layout, axi.araddr)

        emitted = held & items.ready
        # A burst is taken while none is held, or as the last item of the one held goes.
        taking = ~held | (emitted & burst.final)
        pick_write = axi.awvalid & (~axi.arvalid | ~reads_turn)
        m.d.comb += [axi.awready.eq(taking & pick_write),
                     axi.arready.eq(taking & axi.arvalid & ~pick_write)]

        payload = items.payload
        m.d.comb += [
            items.valid.eq(held),
            payload.op.eq(Mux(burst.write, Op.WRITE, Mux(burst.clear, Op.READ_CLEAR, Op.READ))),
            payload.addr.eq(burst.line),
            payload.worker.eq(burst.worker),
            payload.tag.read.eq(~burst.write),
            payload.tag.id.eq(burst.id),
            payload.tag.native.eq(~burst.refused),
            payload.tag.last.eq(burst.final),
            payload.tag.beats.eq(Mux(burst.per_beat, 0, burst.left[:BEATS_BITS])),
            payload.tag.one.eq(burst.per_beat | (burst.left == 0)),
        ]
        # The line goes up within its 4 KB page: AXI keeps an INCR burst inside one.
        page_lines = PAGE_BITS - line_size(self.params.line_bits)
        with m.If(emitted):
            m.d.sync += [burst.left.eq(burst.left - 1), burst.final.eq(burst.left == 1)]
            with m.If(burst.per_beat & ~burst.fixed):
                m.d.sync += burst.line[:page_lines].eq(burst.line[:page_lines] + 1)
            with m.If(burst.final):
                m.d.sync += held.eq(0)
        with m.If(axi.awvalid & axi.awready):
            refused = (self._refused(aw_address, axi.awsize, axi.awburst, axi.awlen)
                       | aw_address.clear)
            m.d.sync += [
                held.eq(1), reads_turn.eq(1),
                burst.line.eq(aw_address.line), burst.worker.eq(self._worker(aw_address, axi.awid)),
                burst.id.eq(axi.awid), burst.left.eq(axi.awlen),
                burst.final.eq(axi.awlen == 0), burst.write.eq(1), burst.clear.eq(0),
                burst.fixed.eq(axi.awburst == Burst.FIXED), burst.per_beat.eq(1),
                burst.refused.eq(refused),
            ]
        with m.If(axi.arvalid & axi.arready):
            refused = self._refused(ar_address, axi.arsize, axi.arburst, axi.arlen)
            per_beat = (axi.arburst != Burst.FIXED) | refused
            m.d.sync += [
                held.eq(1), reads_turn.eq(0),
                burst.line.eq(ar_address.line), burst.id.eq(axi.arid),
                burst.left.eq(axi.arlen),
                burst.final.eq(~per_beat | (axi.arlen == 0)), burst.write.eq(0),
                burst.clear.eq(ar_address.clear), burst.fixed.eq(0),
                burst.per_beat.eq(per_beat), burst.refused.eq(refused),
            ]

    def _join(self, m, items, req, tags, head_valid):
        """An item leaves for the controller (a write with its W beat) or, refused, goes
        straight to the answers; either way its tag goes in, in order, a cycle later. An
        item leaves only while the tag FIFO has room and the controller admits, refused or
        not, so that its W beat's WSTRB reaches what goes in, never whether it goes."""
        axi = self.s_axi
        head = items.payload
        native = head.tag.native & (head.tag.read | axi.wstrb.all())
        # Room for a tag, from a register, so that the tags' level never reaches the join:
        # room for three a cycle ago (a tag at most goes in a clock, and one may be on its
        # way), or room kept while no tag went in. It stays while an item waits, and so does
        # the request's `valid`.
        tag_room = Signal()
        joinable = items.valid & (head.tag.read | axi.wvalid) & tag_room
        advance = joinable & req.ready
        # The tags' level (the FIFO's and the head's) is one of its last four: matched on the
        # FIFO's level and the head's flag, so that no adder forms it.
        last = self.max_requests - 1    # the FIFO's entries
        near_full = (tags.level.matches(*range(last - 2, last + 1))
                     | (head_valid & (tags.level == last - 3)))
        m.d.sync += tag_room.eq(~near_full | (tag_room & ~advance))
        m.d.comb += [
            req.valid.eq(joinable & native),
            req.payload.op.eq(head.op), req.payload.addr.eq(head.addr),
            req.payload.worker.eq(head.worker), req.payload.data.eq(axi.wdata),
            items.ready.eq(advance),
            axi.wready.eq(advance & ~head.tag.read),
        ]
        # The tag goes in a cycle later, from registers: the controller's admission reaches
        # their enables, never the FIFO's level.
        tag = Signal.like(head.tag)
        pushed = Signal()
        m.d.sync += pushed.eq(advance)
        with m.If(advance):
            m.d.sync += [tag.eq(head.tag), tag.native.eq(native)]
        m.d.comb += [tags.w_en.eq(pushed), tags.w_data.eq(tag)]

    def _answers(self, m, resp, tags, head_valid):
        axi = self.s_axi
        layout = tag_layout(id_width=self.id_width)
        # ---- Answers, in request order: the head tag says where the next one goes. It is
        # a register loaded from the FIFO's LUT RAM while empty or as its request is done.
        head = Signal(layout)
        incoming = data.View(layout, tags.r_data)
        pop = Signal()              # the head's request is done
        load = ~head_valid | pop
        m.d.comb += tags.r_en.eq(load)
        with m.If(load):
            m.d.sync += [head.eq(incoming), head_valid.eq(tags.r_rdy)]

        sent = Signal(BEATS_BITS)   # R beats of the head's request sent
        # Whether the next beat is the head's last, from flip-flops: the tag's `one` before
        # its first beat, then the count's comparison, registered as each beat goes.
        first = Signal(init=1)      # no beat of the head's request sent yet
        next_final = Signal()       # with a beat sent: the next is the last
        padding = Signal()          # no line of the controller's left for the head's beats
        draining = Signal()         # its beats are all sent: drop the rest of its readout
        first_error = Signal(Status)  # of the write burst so far
        final = Mux(first, head.one, next_final)
        padding_next, draining_next = Signal(), Signal()
        m.d.comb += [padding_next.eq(padding), draining_next.eq(draining)]
        m.d.sync += [padding.eq(padding_next), draining.eq(draining_next)]

        # Whether the controller's response is taken, from two flags that say it of the head
        # and the state after this cycle: it is taken as R takes it (``by_r``: a read's
        # line), as B does (``by_b``: a write burst's last beat), or, with both, whatever R
        # and B do (a drained readout's line, a write burst's beat before its last). So the
        # controller's response pop, which reaches every lane tile, is one LUT4 of RREADY,
        # BREADY and two flip-flops, and its line needs no buffer here.
        by_r, by_b = Signal(), Signal()
        with m.If(load):
            native, read = tags.r_rdy & incoming.native, incoming.read
            # A head loaded as a padding run ends waits a cycle for the copies (below).
            m.d.sync += [by_r.eq(native & Mux(read, ~padding, ~incoming.last)),
                         by_b.eq(native & ~read)]
        with m.Elif(head.read):
            m.d.sync += [by_r.eq(draining_next | (head.native & ~padding_next)),
                         by_b.eq(draining_next)]
        m.d.comb += resp.ready.eq((by_r & by_b) | (by_r & axi.rready) | (by_b & axi.bready))

        # R's and B's payloads are the head's whatever their VALID, so no gate stands
        # between them and their registers; a VALID says which one counts.
        r_status = Mux(padding, Status.BAD_REQUEST, resp.payload.status)
        cut = ~padding & final & ~resp.payload.last     # a readout longer than its beats
        b_status = Mux(head.native, resp.payload.status, Status.BAD_REQUEST)
        burst_status = Mux(first_error != Status.OK, first_error, b_status)
        m.d.comb += [
            axi.rid.eq(head.id), axi.ruser.eq(r_status), axi.rlast.eq(head.last & final),
            axi.rresp.eq(Mux(cut, Resp.SLVERR, status_resp(r_status))),
            axi.bid.eq(head.id), axi.buser.eq(burst_status),
            axi.bresp.eq(status_resp(burst_status)),
        ]

        # A padding beat carries zeros, not whatever line the controller offers (another
        # request's). Each group of ZERO_GROUP_BITS line bits has its own copy of the
        # padding flag, loaded from the flag's flip-flop, so no one net reaches every bit
        # and no logic stands before the copies. They follow the flag a cycle late, so R
        # waits a cycle after each change of the flag (``steady``: it did not change).
        groups = range(-(-self.params.line_bits // ZERO_GROUP_BITS))
        zeroed = Cat(Signal(name=f"padding_{g}", attrs=KEEP) for g in groups)
        steady = Signal(init=1)
        m.d.sync += [zeroed.eq(padding.replicate(len(zeroed))),
                     steady.eq(padding_next == padding)]
        for g in groups:
            bits = slice(g * ZERO_GROUP_BITS, (g + 1) * ZERO_GROUP_BITS)
            m.d.comb += axi.rdata[bits].eq(Mux(zeroed[g], 0, resp.payload.data[bits]))

        with m.If(head_valid & head.read & draining):
            with m.If(resp.valid & resp.payload.last):
                m.d.comb += [pop.eq(1), draining_next.eq(0)]
                m.d.sync += [sent.eq(0), first.eq(1)]
        with m.Elif(head_valid & head.read & ~head.native & ~padding):
            # A refused beat: a cycle to raise the padding flag, one for its copies, then
            # the beat.
            m.d.comb += padding_next.eq(1)
        with m.Elif(head_valid & head.read):
            # A beat goes with the padding copies agreeing with the flag.
            m.d.comb += axi.rvalid.eq(steady & (padding | resp.valid))
            with m.If(axi.rvalid & axi.rready):
                m.d.sync += [sent.eq(sent + 1), first.eq(0),
                             next_final.eq(sent + 1 == head.beats)]
                with m.If(~padding & resp.payload.last & ~final):
                    m.d.comb += padding_next.eq(1)
                with m.If(final):
                    m.d.comb += [padding_next.eq(0), pop.eq(~cut), draining_next.eq(cut)]
                    m.d.sync += [sent.eq(0), first.eq(1)]
        with m.Elif(head_valid):
            answered = ~head.native | resp.valid
            m.d.comb += axi.bvalid.eq(answered & head.last)
            with m.If(answered & (~head.last | axi.bready)):
                m.d.comb += pop.eq(1)
                m.d.sync += first_error.eq(Mux(head.last, Status.OK, burst_status))
