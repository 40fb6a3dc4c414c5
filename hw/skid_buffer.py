"""A two-register stream buffer that ends every path at a register, both ways."""

from amaranth.hdl import Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """A stream stage whose output ``valid``, input ``ready`` and output payload are
    flip-flops: no path through logic crosses it from one side's handshake to the other's.

    Two registers: the head, which is the output's payload, and a spare. The head loads the
    spare, or else the input, while it is empty or being taken; the spare loads the input
    while it is free, taken or not, so its enable is a flip-flop (``full``, the input's
    ``ready`` inverted). Only the two flags see a transfer. So the output's ``ready``
    reaches the head's enables (a narrow payload's, such as a request's address on its way
    to a comparison), never the input side, and what leaves is a flip-flop, not a choice.

    **Throughput**: one transfer a clock. **Latency**: 1 cycle. **Backpressure**: the input
    waits while both registers are full. The cost is two registers and a 2:1 choice a
    payload bit.

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
        full = Signal()     # the spare holds a transfer
        push = self.i.valid & self.i.ready
        pop = self.o.valid & self.o.ready
        m.d.comb += self.i.ready.eq(~full)
        # Both flags are registers: the count after this cycle's transfers.
        with m.If(push & ~pop):
            m.d.sync += [self.o.valid.eq(1), full.eq(self.o.valid)]
        with m.Elif(pop & ~push):
            m.d.sync += [full.eq(0), self.o.valid.eq(full)]

        payload = Value.cast(self.i.payload)
        head, spare = Signal(len(payload), name="head"), Signal(len(payload), name="spare")
        with m.If(~full):
            m.d.sync += spare.eq(payload)
        # The head is empty or leaves: the spare moves up if it holds one.
        with m.If(~self.o.valid | self.o.ready):
            m.d.sync += head.eq(Mux(full, spare, payload))
        m.d.comb += self.o.payload.eq(head)
        return m
