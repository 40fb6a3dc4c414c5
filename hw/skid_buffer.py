"""A two-entry stream buffer that ends every path at a register, both ways."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """A stream stage whose output (``valid`` and ``payload``) and input ``ready`` are
    flip-flops: no path through logic crosses it in either direction.

    The output register takes the input while the output is empty or taken; a transfer that
    comes while the output waits goes into a second entry (the skid), and the input is not
    ready while that entry is full.

    **Throughput**: one transfer a clock. **Latency**: 1 cycle. **Backpressure**: the input
    waits while both entries are full; the cost is a register and a 2:1 choice a payload bit.

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
        skid = Signal.like(self.i.payload)
        skid_valid = Signal()
        m.d.comb += self.i.ready.eq(~skid_valid)
        with m.If(~self.o.valid | self.o.ready):
            m.d.sync += [self.o.valid.eq(skid_valid | self.i.valid),
                         self.o.payload.eq(Mux(skid_valid, skid, self.i.payload)),
                         skid_valid.eq(0)]
        with m.Elif(self.i.valid & ~skid_valid):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
