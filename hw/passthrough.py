"""The FP32 passthrough: memory traffic, byte-exact both ways (docs/design.md, "FP32 passthrough")."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.validate import check_int
from .layouts import mem_request_layout

__all__ = ["Fp32Passthrough"]


class Fp32Passthrough(wiring.Component):
    """Forwards memory requests downstream and their read data upstream, unchanged.

    Lines are wires from input to output: whatever the bytes (NaN payloads, -0.0,
    denormals), they arrive byte-exact. Requests leave in the order they arrive and the
    memory answers reads in order, so read data comes back in request order. Writes get
    no answer from the memory; the controller acknowledges them itself.

    Both directions are combinational stream stages: latency 0 cycles, one line per clock,
    backpressure passes straight through. At most ``max_reads`` reads are in flight; a
    read beyond that waits (``i_req.ready`` low) until one is answered.

    Parameters
    ----------
    line_bits : int
        Bits per line: a multiple of 8 from 8 to 1024. The block is the same wires at any
        width; the controller uses it at its line width (128 to 1024), and its proofs at a
        narrower one.
    max_reads : int
        Reads in flight at most (1 to 1024): cover the memory's latency for full rate.

    Members
    -------
    i_req : ``In(stream.Signature(mem_request_layout))``
        Memory requests from the controller.
    o_mem : ``Out(stream.Signature(mem_request_layout))``
        The same requests, to the memory controller.
    i_mem : ``In(stream.Signature(line_bits))``
        Read data from the memory controller, one line per read, in order.
    o_data : ``Out(stream.Signature(line_bits))``
        The same read data, to the controller's responses.
    reads_in_flight : ``Out(range(max_reads + 1))``
        Reads sent downstream whose data has not yet left ``o_data``.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, line_bits=512, max_reads=16):
        self.line_bits = check_int("line_bits", line_bits, low=8, high=1024)
        if self.line_bits % 8:
            raise ValueError(f"line_bits must be a multiple of 8, not {line_bits!r}")
        self.max_reads = check_int("max_reads", max_reads, low=1, high=1024)
        request = mem_request_layout(line_bits=self.line_bits)
        super().__init__({
            "i_req": In(stream.Signature(request)),
            "o_mem": Out(stream.Signature(request)),
            "i_mem": In(stream.Signature(unsigned(self.line_bits))),
            "o_data": Out(stream.Signature(unsigned(self.line_bits))),
            "reads_in_flight": Out(range(self.max_reads + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        # Whether any read is in flight, and whether the most are, registered beside the
        # count: each decides a handshake, which the controller's pops wait on.
        some_reads = Signal()
        most_reads = Signal()
        room = self.i_req.payload.write | ~most_reads
        m.d.comb += [
            self.o_mem.payload.eq(self.i_req.payload),
            self.o_mem.valid.eq(self.i_req.valid & room),
            self.i_req.ready.eq(self.o_mem.ready & room),
            # Data is only taken while a read is outstanding: a stray beat waits, unanswered.
            self.o_data.payload.eq(self.i_mem.payload),
            self.o_data.valid.eq(self.i_mem.valid & some_reads),
            self.i_mem.ready.eq(self.o_data.ready & some_reads),
        ]
        issued = self.o_mem.valid & self.o_mem.ready & ~self.i_req.payload.write
        returned = self.o_data.valid & self.o_data.ready
        reads_next = Signal.like(self.reads_in_flight)
        m.d.comb += reads_next.eq(self.reads_in_flight + issued - returned)
        m.d.sync += [self.reads_in_flight.eq(reads_next), some_reads.eq(reads_next != 0),
                     most_reads.eq(reads_next == self.max_reads)]
        return m
