"""A two-entry stream buffer that ends every path at a register, both ways."""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """A stream stage whose output ``valid`` and input ``ready`` are flip-flops: no path
    through logic crosses it from one side's handshake to the other's.

    Two entries, written in turn while one is free, read in turn; the output's payload is
    the entry the read pointer names. So the output's ``ready`` reaches the pointer and the
    two flags (three flip-flops), never the payload's flip-flops, and the input's payload
    is written by flip-flops' enables that only the input side and the flags drive.

    **Throughput**: one transfer a clock. **Latency**: 1 cycle. **Backpressure**: the input
    waits while both entries are full. The cost is two registers and a 2:1 choice a payload
    bit.

    Parameters
    ----------
    shape : shape-like
        The payload.

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        entries = Array(Signal.like(self.i.payload, name=f"entry_{k}") for k in range(2))
        write, read = Signal(), Signal()        # the entry written next, read next
        full = Signal()
        push = self.i.valid & self.i.ready
        pop = self.o.valid & self.o.ready
        m.d.comb += [self.i.ready.eq(~full),
                     self.o.payload.eq(Mux(read, entries[1], entries[0]))]
        with m.If(push):
            m.d.sync += [entries[write].eq(self.i.payload), write.eq(~write)]
        with m.If(pop):
            m.d.sync += read.eq(~read)
        # Both flags are registers: the count after this cycle's transfers.
        with m.If(push & ~pop):
            m.d.sync += [self.o.valid.eq(1), full.eq(self.o.valid)]
        with m.Elif(pop & ~push):
            m.d.sync += [full.eq(0), self.o.valid.eq(full)]
        return m
