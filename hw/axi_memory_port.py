"""The controller's memory requests as an AXI4 manager (docs/design.md, "The AXI top")."""

from amaranth.hdl import C, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.params import ADDR_BITS
from ..golden.validate import check_int
from .axi import Axi4Signature, Burst, line_size
from .layouts import mem_request_layout

__all__ = ["AxiMemoryPort"]


class AxiMemoryPort(wiring.Component):
    """AXI4 manager for the controller's memory traffic: a line per transaction.

    A memory request becomes a single-beat burst of a whole line (AxLEN 0, AxSIZE the line,
    INCR, WSTRB all ones) at byte address ``line address * line bytes``; a write's AW and W
    go out together or in either order, each as soon as the subordinate takes it. Read data
    returns on ``o_data`` in request order: every transaction has ID 0, which AXI answers in
    order. BRESP and RRESP are not looked at: the controller's memory port has
    no status.

    **Ordering**: AXI orders nothing between its read and write channels, and the controller
    promises that a read returns the line as the requests before it left it. So a read goes
    out only when no write waits for its B, and a write only when no read waits for its
    data: runs of reads and runs of writes each flow at one per clock, and a change of
    direction waits for the memory's answers. At most ``max_writes`` writes wait for B and
    ``max_reads`` reads for data. **Latency**: 0 cycles; AWVALID, WVALID and ARVALID follow
    the request's ``valid``. **Backpressure**: AWREADY, WREADY and ARREADY hold the request;
    ``o_data.ready`` is RREADY; BREADY is always high.

    Parameters
    ----------
    line_bits : int
        Bits per line, a power of two from 8 to 1024: the AXI data width.
    max_writes, max_reads : int
        Writes waiting for B and reads waiting for data at most (1 to 1024 each).

    Members
    -------
    i_req : ``In(stream.Signature(mem_request_layout))``
        Memory requests (the controller's ``o_mem``).
    o_data : ``Out(stream.Signature(line_bits))``
        Read data in request order (to the controller's ``i_mem``).
    m_axi : ``Out(Axi4Signature(addr_width=32 + log2(line bytes), data_width=line_bits,
    id_width=1))``
        The AXI4 manager (AWID and ARID 0).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, line_bits=512, max_writes=16, max_reads=16):
        # Any power of two AXI carries, not only the controller's line widths: the
        # formal configuration's lines are 32 bits.
        self.line_bits = check_int("line_bits", line_bits, low=8, high=1024)
        if line_bits & (line_bits - 1):
            raise ValueError(f"line_bits must be a power of two, not {line_bits!r}")
        self.max_writes = check_int("max_writes", max_writes, low=1, high=1024)
        self.max_reads = check_int("max_reads", max_reads, low=1, high=1024)
        super().__init__({
            "i_req": In(stream.Signature(mem_request_layout(line_bits=self.line_bits))),
            "o_data": Out(stream.Signature(unsigned(self.line_bits))),
            "m_axi": Out(Axi4Signature(addr_width=ADDR_BITS + line_size(self.line_bits),
                                       data_width=self.line_bits, id_width=1)),
        })

    def elaborate(self, platform):
        m = Module()
        req, axi = self.i_req, self.m_axi
        size = line_size(self.line_bits)
        # Writes waiting for B or reads waiting for data, never both (the rule below): one
        # count serves, with the direction it counts.
        waiting = Signal(range(max(self.max_writes, self.max_reads) + 1))
        reading = Signal()      # the transactions waiting are reads
        # Whether a write or a read may go out, registered from the count after this
        # cycle, so that the counter never reaches the controller's memory pop.
        may_write, may_read = Signal(init=1), Signal(init=1)
        aw_sent = Signal()      # this write's AW is taken, its W not yet
        w_sent = Signal()       # this write's W is taken, its AW not yet
        write = req.valid & req.payload.write & may_write
        byte_addr = Cat(C(0, size), req.payload.addr)

        # Requests: a write waits for both of its channels, a read for AR.
        m.d.comb += [
            axi.awid.eq(0), axi.arid.eq(0),
            axi.awaddr.eq(byte_addr), axi.awlen.eq(0), axi.awsize.eq(size),
            axi.awburst.eq(Burst.INCR), axi.awvalid.eq(write & ~aw_sent),
            axi.wdata.eq(req.payload.data), axi.wstrb.eq(-1), axi.wlast.eq(1),
            axi.wvalid.eq(write & ~w_sent),
            axi.araddr.eq(byte_addr), axi.arlen.eq(0), axi.arsize.eq(size),
            axi.arburst.eq(Burst.INCR),
            axi.arvalid.eq(req.valid & ~req.payload.write & may_read),
        ]
        aw_done = aw_sent | axi.awready
        w_done = w_sent | axi.wready
        wrote = write & aw_done & w_done
        read = axi.arvalid & axi.arready
        # The request is taken when every channel it needs is done, each a channel's ready
        # or a flag from flip-flops that says it is not needed (a read's AW and W, a
        # write's AR) or already taken: the subordinate's readies meet only at the last
        # gates before the controller's pop.
        needs_no_aw = ~req.payload.write | aw_sent
        needs_no_w = ~req.payload.write | w_sent
        needs_no_ar = req.payload.write
        may = Mux(req.payload.write, may_write, may_read)
        m.d.comb += req.ready.eq(may & (axi.awready | needs_no_aw) & (axi.wready | needs_no_w)
                                 & (axi.arready | needs_no_ar))
        with m.If(wrote):
            m.d.sync += [aw_sent.eq(0), w_sent.eq(0)]
        with m.Else():
            with m.If(axi.awvalid & axi.awready):
                m.d.sync += aw_sent.eq(1)
            with m.If(axi.wvalid & axi.wready):
                m.d.sync += w_sent.eq(1)

        # Answers: B only counts down; read data goes up in order.
        returned = axi.rvalid & axi.rready
        m.d.comb += [
            axi.bready.eq(1),
            self.o_data.valid.eq(axi.rvalid), self.o_data.payload.eq(axi.rdata),
            axi.rready.eq(self.o_data.ready),
        ]
        waiting_next = Signal.like(waiting)
        reading_next = Signal()
        m.d.comb += [waiting_next.eq(waiting + (wrote | read) - (axi.bvalid | returned)),
                     reading_next.eq(Mux(wrote | read, read, reading))]
        idle = waiting_next == 0
        m.d.sync += [waiting.eq(waiting_next), reading.eq(reading_next),
                     may_write.eq(idle | (~reading_next & (waiting_next != self.max_writes))),
                     may_read.eq(idle | (reading_next & (waiting_next != self.max_reads)))]
        return m
