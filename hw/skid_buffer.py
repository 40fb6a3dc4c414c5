"""A two-register stream buffer that ends every path at a register, both ways."""

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.validate import check_int
from .lane_logic import KEEP

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """A stream stage whose output ``valid``, input ``ready`` and output payload are
    flip-flops: no path through logic crosses it from one side's handshake to the other's.

    Two registers: the head, which is the output's payload, and a spare. The head loads the
    spare, or else the input, while it is empty or being taken; the spare loads the input
    while it is free, taken or not, so its enable is a flip-flop. Only the flags (two
    flip-flops, and a group's copy of the spare's `free` flag) see a transfer. So the
    output's ``ready`` reaches the head's enables (a narrow payload's, such as a request's
    address on its way to a comparison), never the input side, and what leaves is a
    flip-flop, not a choice. The copies load a value formed once, so each is a flip-flop
    and no gate.

    **Throughput**: one transfer a clock. **Latency**: 1 cycle. **Backpressure**: the input
    waits while both registers are full. The cost is two registers and a 2:1 choice a
    payload bit.

    Parameters
    ----------
    shape : shape-like
        The payload.
    group_bits : int or None
        Payload bits that one copy of the spare's `free` flag drives; ``None``: one copy
        for the whole payload. A wide payload takes a copy a group, so that no flip-flop
        reaches every bit.

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``

    Raises
    ------
    TypeError, ValueError
        On a ``group_bits`` of the wrong type or below 1.
    """

    def __init__(self, shape, *, group_bits=None):
        if group_bits is not None:
            check_int("group_bits", group_bits, low=1)
        self.group_bits = group_bits
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        full = Signal()
        push = self.i.valid & self.i.ready
        pop = self.o.valid & self.o.ready
        m.d.comb += self.i.ready.eq(~full)
        # Both flags are registers: the count after this cycle's transfers.
        with m.If(push & ~pop):
            m.d.sync += [self.o.valid.eq(1), full.eq(self.o.valid)]
        with m.Elif(pop & ~push):
            m.d.sync += [full.eq(0), self.o.valid.eq(full)]

        # After this cycle's transfers: whether the spare is free.
        free_next = ~Mux(push & ~pop, self.o.valid, Mux(pop & ~push, 0, full))

        payload = Value.cast(self.i.payload)
        step = self.group_bits or max(len(payload), 1)
        outputs = []
        for g, low in enumerate(range(0, len(payload), step)):
            bits = payload[low:low + step]
            free = Signal(name=f"free_{g}", init=1, attrs=KEEP)
            m.d.sync += free.eq(free_next)
            head = Signal(len(bits), name=f"head_{g}")
            spare = Signal(len(bits), name=f"spare_{g}")
            with m.If(free):
                m.d.sync += spare.eq(bits)
            # The head is empty or leaves: the spare moves up if it holds one.
            with m.If(~self.o.valid | self.o.ready):
                m.d.sync += head.eq(Mux(free, bits, spare))
            outputs.append(head)
        m.d.comb += Value.cast(self.o.payload).eq(Cat(outputs))
        return m
