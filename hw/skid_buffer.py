"""A two-entry stream buffer that ends every path at a register, both ways."""

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.validate import check_int
from .lane_logic import KEEP

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """A stream stage whose output ``valid`` and input ``ready`` are flip-flops: no path
    through logic crosses it from one side's handshake to the other's.

    Two entries, written in turn, read in turn; the output's payload is the entry the read
    pointer names. The entry the write pointer names loads the input's payload while one
    is free, taken or not, so its enable is a flip-flop; only the pointers and the flags
    (four flip-flops, and a group's copies of the entries' enables and the read pointer)
    see a transfer. So the output's ``ready`` reaches the read pointer and the flags, never
    the payload's flip-flops, and the input's ``valid`` never reaches them either. The
    copies load values formed once, so each is a flip-flop and no gate.

    With ``registered_output`` the output's payload is a register of its own, the head,
    and the second entry a spare: the head loads the spare, or else the input, while it is
    empty or being taken, and the spare loads the input while it is free. Then the output's
    ``ready`` reaches the head's enables (a narrow payload's, such as a request's address
    on its way to a comparison), and what leaves is a flip-flop, not a choice.

    **Throughput**: one transfer a clock. **Latency**: 1 cycle. **Backpressure**: the input
    waits while both entries are full. The cost is two registers and a 2:1 choice a payload
    bit.

    Parameters
    ----------
    shape : shape-like
        The payload.
    group_bits : int or None
        Payload bits whose entries' enables and output choice one group's copies drive;
        ``None``: one group for the whole payload. A wide payload takes copies a group, so
        that no flip-flop reaches every bit.
    registered_output : bool
        The output's payload from a head register (``True``) or chosen between the two
        entries (``False``, default).

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``

    Raises
    ------
    TypeError, ValueError
        On a ``group_bits`` of the wrong type or below 1, or a ``registered_output`` that
        is not a bool.
    """

    def __init__(self, shape, *, group_bits=None, registered_output=False):
        if group_bits is not None:
            check_int("group_bits", group_bits, low=1)
        if not isinstance(registered_output, bool):
            raise TypeError(f"registered_output must be a bool, not {registered_output!r}")
        self.group_bits = group_bits
        self.registered_output = registered_output
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

        # After this cycle's transfers: whether the entry written next is free.
        free_next = ~Mux(push & ~pop, self.o.valid, Mux(pop & ~push, 0, full))

        payload = Value.cast(self.i.payload)
        step = self.group_bits or max(len(payload), 1)
        groups = [payload[low:low + step] for low in range(0, len(payload), step)]
        if self.registered_output:
            outputs = self._head_and_spare(m, groups, free_next)
        else:
            outputs = self._two_entries(m, groups, free_next, push, pop)
        m.d.comb += Value.cast(self.o.payload).eq(Cat(outputs))
        return m

    def _head_and_spare(self, m, groups, free_next):
        # A group's copy of the free flag loads the value formed once: a flip-flop, no gate.
        outputs = []
        for g, bits in enumerate(groups):
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
        return outputs

    def _two_entries(self, m, groups, free_next, push, pop):
        # The entry written next and the one read next, each moved by its side's transfer.
        write, read = Signal(), Signal()
        with m.If(push):
            m.d.sync += write.eq(~write)
        with m.If(pop):
            m.d.sync += read.eq(~read)
        # Which entry loads the input after this cycle's transfers. A group's copies (of
        # the entries' enables and the read pointer) load values formed once, here: each is
        # a flip-flop, no gate.
        write_next = write ^ push
        load_next = [free_next & ~write_next, free_next & write_next]
        outputs = []
        for g, bits in enumerate(groups):
            loads = [Signal(name=f"load_{k}_{g}", init=k == 0, attrs=KEEP) for k in range(2)]
            read_copy = Signal(name=f"read_{g}", attrs=KEEP)
            with m.If(pop):
                m.d.sync += read_copy.eq(~read)
            entries = [Signal(len(bits), name=f"entry_{k}_{g}") for k in range(2)]
            for load, entry, after in zip(loads, entries, load_next):
                m.d.sync += load.eq(after)
                with m.If(load):
                    m.d.sync += entry.eq(bits)
            outputs.append(Mux(read_copy, entries[1], entries[0]))
        return outputs
