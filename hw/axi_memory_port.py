"""The controller's memory requests as an AXI4 manager (docs/design.md, "The AXI top")."""

from amaranth.hdl import C, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..golden.params import ADDR_BITS
from ..golden.validate import check_int
from .axi import Axi4Signature, Burst, line_size
from .layouts import mem_request_layout

__all__ = ["AxiMemoryPort"]


class AxiMemoryPort(wiring.Component):
    """AXI4 manager for the controller's memory traffic: a line per transaction.

    A memory request becomes a single-beat burst of a whole line (AxLEN 0, AxSIZE the line,
    INCR, WSTRB all ones) at byte address ``line address * line bytes``. A write's line goes
    out on W straight from the request; its address, and a read's, go to AW or AR through
    a FIFO of addresses. So the controller's memory pop waits on WREADY for a write and on
    nothing from the subordinate for a read: AWREADY and ARREADY never reach it. A write's
    address enters the FIFO as the write is offered, not as W takes it, so a subordinate
    that waits for AWVALID before WREADY (AXI allows it) gets it a cycle later. Read data
    returns on ``o_data`` in request order: every transaction has ID 0, which AXI answers in
    order. BRESP and RRESP are not looked at: the controller's memory port has no status.

    **Ordering**: AXI orders nothing between its read and write channels, and the controller
    promises that a read returns the line as the requests before it left it. So a read goes
    out only when no write waits for its B, and a write only when no read waits for its
    data: runs of reads and runs of writes each flow at one per clock, and a change of
    direction waits for the memory's answers. At most ``max_writes`` writes wait for B and
    ``max_reads`` reads for data, each counted from the moment its address enters the FIFO
    until the cycle after its answer, so the FIFO (as deep as the larger limit) never
    fills. **Latency**: WVALID follows the request's ``valid``; AWVALID and ARVALID a cycle
    after the request is offered.
    **Backpressure**: WREADY holds a write, the limits hold either; AWREADY and ARREADY
    hold the FIFO; ``o_data.ready`` is RREADY; BREADY is always high.

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
        # Writes waiting for B or reads waiting for data, never both (the rule below): one
        # count serves, with the direction it counts. A transaction counts from the moment
        # its address enters the FIFO, so the FIFO holds no more than the count.
        limit = max(self.max_writes, self.max_reads)
        addresses = m.submodules.addresses = SyncFIFO(width=1 + ADDR_BITS, depth=limit)
        waiting = Signal(range(limit + 1))
        reading = Signal()      # the transactions waiting are reads
        # Whether a write's or a read's address may enter the FIFO, registered from the
        # count after this cycle, so that the count never reaches the controller's pop.
        may_write, may_read = Signal(init=1), Signal(init=1)
        queued = Signal()       # the offered write's address is in the FIFO, its W not taken
        w_open = Signal(init=1)  # may_write | queued, registered: W may be offered

        # Requests: a write's W goes out at once, its address into the FIFO as it is
        # offered; a read's address goes into the FIFO as the controller pops it.
        write = req.payload.write
        m.d.comb += [
            axi.wdata.eq(req.payload.data), axi.wstrb.eq(-1), axi.wlast.eq(1),
            axi.wvalid.eq(req.valid & write & w_open),
            req.ready.eq(Mux(write, axi.wready & w_open, may_read)),
        ]
        wrote = axi.wvalid & axi.wready
        queue_write = req.valid & write & may_write & ~queued
        queue_read = req.valid & ~write & may_read
        queue = queue_write | queue_read
        m.d.comb += [addresses.w_en.eq(queue),
                     addresses.w_data.eq(Cat(req.payload.addr, write))]
        queued_next = (queued | queue_write) & ~wrote
        m.d.sync += queued.eq(queued_next)

        # The FIFO's head goes to AW or AR, as a single-beat burst of a whole line.
        size = line_size(self.line_bits)
        head_addr, head_write = addresses.r_data[:ADDR_BITS], addresses.r_data[ADDR_BITS]
        byte_addr = Cat(C(0, size), head_addr)
        m.d.comb += [
            axi.awid.eq(0), axi.arid.eq(0),
            axi.awaddr.eq(byte_addr), axi.awlen.eq(0), axi.awsize.eq(size),
            axi.awburst.eq(Burst.INCR), axi.awvalid.eq(addresses.r_rdy & head_write),
            axi.araddr.eq(byte_addr), axi.arlen.eq(0), axi.arsize.eq(size),
            axi.arburst.eq(Burst.INCR), axi.arvalid.eq(addresses.r_rdy & ~head_write),
            addresses.r_en.eq((axi.awvalid & axi.awready) | (axi.arvalid & axi.arready)),
        ]

        # Answers: B only counts down; read data goes up in order. An answer leaves the
        # count a cycle after it comes, from a flip-flop, so that RREADY (the controller's
        # response pop) and BVALID never reach the count's adder and the limits.
        answered = Signal()
        m.d.comb += [
            axi.bready.eq(1),
            self.o_data.valid.eq(axi.rvalid), self.o_data.payload.eq(axi.rdata),
            axi.rready.eq(self.o_data.ready),
        ]
        m.d.sync += answered.eq(axi.bvalid | (axi.rvalid & axi.rready))
        waiting_next = Signal.like(waiting)
        reading_next = Signal()
        m.d.comb += [waiting_next.eq(waiting + queue - answered),
                     reading_next.eq(Mux(queue, queue_read, reading))]
        idle = waiting_next == 0
        may_write_next = idle | (~reading_next & (waiting_next != self.max_writes))
        m.d.sync += [waiting.eq(waiting_next), reading.eq(reading_next),
                     may_write.eq(may_write_next),
                     may_read.eq(idle | (reading_next & (waiting_next != self.max_reads))),
                     w_open.eq(may_write_next | queued_next)]
        return m
