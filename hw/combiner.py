"""Write-combining gradient accumulator: lossless, set-associative, with flush and burst drain.

The write sequence the block produces is defined by :mod:`neuron_fabric.golden.combiner`; this
module is its cycle-level implementation.
"""

from amaranth import Array, Cat, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..golden.combiner import CombinerParams

__all__ = ["update_layout", "write_layout", "entry_layout", "WriteCombiner"]


def update_layout(addr_width, value_width):
    """Payload of an update: ``addr`` (unsigned) and ``value`` (two's complement)."""
    return data.StructLayout({"addr": unsigned(addr_width), "value": signed(value_width)})


def write_layout(addr_width, acc_width):
    """Payload of a write: ``addr`` (unsigned) and ``delta`` (two's complement)."""
    return data.StructLayout({"addr": unsigned(addr_width), "delta": signed(acc_width)})


def entry_layout(tag_width, max_updates, acc_width):
    """One buffer entry as stored in a way's memory (the valid bit is kept in registers)."""
    return data.StructLayout({"tag": unsigned(tag_width), "count": range(max_updates),
                              "acc": signed(acc_width)})


class _Mode(enum.Enum, shape=2):
    RUN = 0    # accepting updates
    SCAN = 1   # flush: writing back every valid entry, one (set, way) per cycle
    DRAIN = 2  # flush: waiting for the write-back FIFO to empty


class WriteCombiner(wiring.Component):
    """Write-combining accumulator for small integer gradient updates.

    Updates ``(addr, value)`` come in on ``i_upd``; writes ``(addr, delta)``, to be applied by
    memory as ``mem[addr] += delta``, leave on ``o_wb``. Large values (``|value| >= threshold``)
    bypass; the others are summed in a ``sets`` x ``ways`` buffer and written back when the
    sum reaches the threshold, when an entry has merged ``max_updates`` values, when it is
    evicted (round-robin victim per set), before its sum would overflow ``acc_width`` bits, or
    on a flush. The exact rules, and hence the exact sequence of writes for a given sequence
    of accepted updates and flushes, are those of
    :class:`neuron_fabric.golden.combiner.Combiner`.

    Lossless by construction: an update is accepted only when the write it causes (at most
    one) fits into the write-back FIFO, so a full FIFO stalls the input instead of dropping;
    an accumulation that would overflow writes the old sum back and restarts the entry rather
    than clipping (``o_overflow`` reports that this happened; it is a sign that ``acc_width``
    is narrow, not a loss); and a flush writes back every entry and empties the FIFO. Values
    are dropped only in ``lossy`` mode, and only tiny misses (``|value| < small_threshold``).

    Throughput: one update per cycle while the FIFO has room (hits, misses, bypasses and
    evictions alike: the buffer is read and written in the same cycle, through asynchronous
    read ports of one memory per way). A flush takes ``sets * ways`` cycles of scanning, plus
    a cycle per FIFO-full stall, then as long as downstream takes to empty the FIFO.

    Latency: an accepted update's write, if any, enters the FIFO at the end of the cycle of
    acceptance. The FIFO presents writes only in bursts: it starts when it holds ``burst``
    entries (or during a flush) and then keeps ``o_wb.valid`` high until it is empty, so
    downstream sees back-to-back writes. With ``burst=1`` a write is offered two cycles after
    its update was accepted.

    Backpressure: ``o_wb`` follows the stream rules (``valid`` never waits for ``ready`` and
    is held until the transfer). ``i_upd.ready`` is low while a flush is in progress, and when
    the update at the head of the stream would write while the FIFO is full; it depends
    combinationally on ``i_upd.payload`` (a hit, for example, is accepted even then).

    Flush: ``i_flush`` is sampled every cycle; a flush is taken in a cycle where it is high and
    ``o_flushing`` is low. An update transferred in that same cycle comes before the flush.
    From the next cycle ``o_flushing`` is high and no update is accepted until every entry has
    been written back and the FIFO has drained; then ``o_flushing`` falls. Holding ``i_flush``
    high flushes again as soon as the previous flush ends (an empty flush writes nothing).

    Parameters
    ----------
    addr_width, value_width, acc_width, sets, ways, threshold, small_threshold, lossy,
    max_updates, fifo_depth, burst
        Keyword-only; meaning, defaults and rules as in
        :class:`~neuron_fabric.golden.combiner.CombinerParams`.

    Members
    -------
    i_upd : ``In(stream.Signature(update_layout(addr_width, value_width)))``
        Updates.
    o_wb : ``Out(stream.Signature(write_layout(addr_width, acc_width)))``
        Writes to memory.
    i_flush : ``In(1)``
        Flush request (see above).
    o_flushing : ``Out(1)``
        A flush is in progress.
    o_idle : ``Out(1)``
        No flush in progress, no entry held and the FIFO empty: every accepted update has been
        written out (or dropped in lossy mode).
    o_overflow : ``Out(1)``
        Sticky: an accumulation would have overflowed ``acc_width`` bits and was written back
        early. Cleared by reset only.

    Attributes
    ----------
    params : CombinerParams
        The validated parameters.

    Raises
    ------
    TypeError
        For a parameter of the wrong type.
    ValueError
        For a parameter out of range (message ``"<param> must be <rule>, not <value!r>"``).
    """

    def __init__(self, *, addr_width=32, value_width=16, acc_width=None, sets=32, ways=4,
                 threshold=50, small_threshold=None, lossy=False, max_updates=255,
                 fifo_depth=16, burst=None):
        try:
            self.params = CombinerParams(
                addr_width=addr_width, value_width=value_width, acc_width=acc_width,
                sets=sets, ways=ways, threshold=threshold, small_threshold=small_threshold,
                lossy=lossy, max_updates=max_updates, fifo_depth=fifo_depth, burst=burst)
        except (TypeError, ValueError):
            # A refused block was never built: no "created but never used" warning for it.
            self._MustUse__silence = True
            raise
        p = self.params
        super().__init__({
            "i_upd": In(stream.Signature(update_layout(p.addr_width, p.value_width))),
            "o_wb": Out(stream.Signature(write_layout(p.addr_width, p.acc_width))),
            "i_flush": In(1),
            "o_flushing": Out(1),
            "o_idle": Out(1),
            "o_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        n_sets, n_ways = p.sets, p.ways
        wb_layout = write_layout(p.addr_width, p.acc_width)
        ent_layout = entry_layout(p.tag_width, p.max_updates, p.acc_width)

        m.submodules.wb_fifo = fifo = SyncFIFOBuffered(width=Shape.cast(wb_layout).width,
                                                       depth=p.fifo_depth)

        mode = Signal(_Mode)
        scan_set = Signal(range(n_sets))
        scan_way = Signal(range(n_ways))
        overflow = Signal()

        upd = self.i_upd.payload
        value = upd.value
        in_tag = upd.addr[p.set_bits:]
        set_idx = Signal(range(n_sets))
        m.d.comb += set_idx.eq(Mux(mode == _Mode.RUN, upd.addr[:p.set_bits], scan_set))

        # Storage: one memory per way (tag, count, sum), read asynchronously so that an
        # update is looked up and written back in one cycle; valid bits and round-robin
        # pointers in registers, so that reset empties the buffer.
        valid = [Signal(n_sets, name=f"valid_w{w}") for w in range(n_ways)]
        victim_ptr = Array(Signal(range(n_ways), name=f"victim_s{s}") for s in range(n_sets))
        read = []
        write_ports = []
        for w in range(n_ways):
            mem = m.submodules[f"way{w}"] = Memory(shape=ent_layout, depth=n_sets, init=[])
            rp = mem.read_port(domain="comb")
            wp = mem.write_port()
            m.d.comb += [rp.addr.eq(set_idx), wp.addr.eq(set_idx)]
            read.append(rp.data)
            write_ports.append(wp)
        valid_here = Signal(n_ways)
        m.d.comb += valid_here.eq(Cat(v.bit_select(set_idx, 1) for v in valid))
        any_valid = Signal()
        m.d.comb += any_valid.eq(Cat(valid).any())

        def select(index, name):
            chosen = Signal(ent_layout, name=name)
            with m.Switch(index):
                for w in range(n_ways):
                    with m.Case(w):
                        m.d.comb += chosen.eq(read[w])
            return chosen

        hit = Signal(n_ways)
        m.d.comb += hit.eq(Cat(valid_here[w] & (read[w].tag == in_tag) for w in range(n_ways)))
        hit_way = Signal(range(n_ways))
        free_way = Signal(range(n_ways))
        for w in reversed(range(n_ways)):   # the lowest index wins
            with m.If(hit[w]):
                m.d.comb += hit_way.eq(w)
            with m.If(~valid_here[w]):
                m.d.comb += free_way.eq(w)
        victim = Signal(range(n_ways))
        m.d.comb += victim.eq(victim_ptr[set_idx])
        hit_entry = select(hit_way, "hit_entry")
        victim_entry = select(victim, "victim_entry")
        scan_entry = select(scan_way, "scan_entry")

        # Classification of the update at the head of the input stream.
        def magnitude_at_least(x, limit):
            return (x >= limit) | (x <= -limit)

        big = Signal()
        tiny = Signal()
        if p.threshold is not None:
            m.d.comb += big.eq(magnitude_at_least(value, p.threshold))
        if p.small_threshold is not None:
            m.d.comb += tiny.eq((value > -p.small_threshold) & (value < p.small_threshold))
        total = Signal(signed(p.acc_width + 1))
        m.d.comb += total.eq(hit_entry.acc + value)
        low, high = p.acc_range
        fits = (total >= low) & (total <= high)
        count = Signal(range(p.max_updates + 1))
        m.d.comb += count.eq(hit_entry.count + 1)
        reached = Signal()
        m.d.comb += reached.eq((count == p.max_updates) | (total == 0))
        if p.threshold is not None:
            with m.If(magnitude_at_least(total, p.threshold)):
                m.d.comb += reached.eq(1)

        # What this cycle does, if it commits: at most one push into the FIFO and at most one
        # entry (way `way`, set `set_idx`) written, allocated or freed.
        push = Signal()
        wb = Signal(wb_layout)
        way = Signal(range(n_ways))
        store = Signal()          # write new_entry into the way's memory
        new_entry = Signal(ent_layout)
        allocate = Signal()       # set the valid bit
        free = Signal()           # clear the valid bit
        advance_victim = Signal()
        set_overflow = Signal()
        commit = Signal()

        m.d.comb += [new_entry.tag.eq(in_tag), new_entry.count.eq(1), new_entry.acc.eq(value),
                     wb.addr.eq(upd.addr), wb.delta.eq(value)]
        with m.Switch(mode):
            with m.Case(_Mode.RUN):
                with m.If(big):
                    m.d.comb += push.eq(1)
                with m.Elif(hit.any()):
                    m.d.comb += way.eq(hit_way)
                    with m.If(~fits):
                        m.d.comb += [push.eq(1), wb.delta.eq(hit_entry.acc), store.eq(1),
                                     set_overflow.eq(1)]
                    with m.Elif(reached):
                        m.d.comb += [push.eq(total != 0), wb.delta.eq(total), free.eq(1)]
                    with m.Else():
                        m.d.comb += [store.eq(1), new_entry.count.eq(count),
                                     new_entry.acc.eq(total)]
                with m.Elif((value == 0) | (tiny & p.lossy)):
                    pass   # nothing to remember (zero), or a tiny miss dropped in lossy mode
                with m.Elif(~valid_here.all()):
                    m.d.comb += [way.eq(free_way), store.eq(1), allocate.eq(1)]
                with m.Elif(tiny):
                    m.d.comb += push.eq(1)   # written through: a tiny value never evicts
                with m.Else():
                    m.d.comb += [way.eq(victim), push.eq(1), store.eq(1), advance_victim.eq(1),
                                 wb.addr.eq(Cat(set_idx, victim_entry.tag)),
                                 wb.delta.eq(victim_entry.acc)]
                m.d.comb += [self.i_upd.ready.eq(~push | fifo.w_rdy),
                             commit.eq(self.i_upd.valid & self.i_upd.ready)]
                with m.If(self.i_flush):
                    m.d.sync += [mode.eq(_Mode.SCAN), scan_set.eq(0), scan_way.eq(0)]
            with m.Case(_Mode.SCAN):
                m.d.comb += [way.eq(scan_way), push.eq(valid_here.bit_select(scan_way, 1)),
                             free.eq(push),
                             wb.addr.eq(Cat(scan_set, scan_entry.tag)),
                             wb.delta.eq(scan_entry.acc),
                             commit.eq(~push | fifo.w_rdy)]
                with m.If(commit):
                    with m.If(scan_way == n_ways - 1):
                        m.d.sync += scan_way.eq(0)
                        with m.If(scan_set == n_sets - 1):
                            m.d.sync += mode.eq(_Mode.DRAIN)
                        with m.Else():
                            m.d.sync += scan_set.eq(scan_set + 1)
                    with m.Else():
                        m.d.sync += scan_way.eq(scan_way + 1)
            with m.Case(_Mode.DRAIN):
                with m.If(fifo.level == 0):
                    m.d.sync += mode.eq(_Mode.RUN)

        m.d.comb += [fifo.w_data.eq(wb), fifo.w_en.eq(push & commit)]
        for w in range(n_ways):
            with m.If(way == w):
                m.d.comb += [write_ports[w].data.eq(new_entry),
                             write_ports[w].en.eq(store & commit)]
                with m.If(commit & (allocate | free)):
                    m.d.sync += valid[w].bit_select(set_idx, 1).eq(allocate)
        with m.If(commit & advance_victim):
            with m.If(victim == n_ways - 1):
                m.d.sync += victim_ptr[set_idx].eq(0)
            with m.Else():
                m.d.sync += victim_ptr[set_idx].eq(victim + 1)
        with m.If(commit & set_overflow):
            m.d.sync += overflow.eq(1)

        # Burst draining: start at `burst` entries (or during a flush), then drain until empty.
        draining = Signal()
        drain_now = Signal()
        m.d.comb += drain_now.eq(draining | (fifo.level >= p.burst) | (mode != _Mode.RUN))
        m.d.comb += [self.o_wb.valid.eq(fifo.r_rdy & drain_now),
                     self.o_wb.payload.eq(fifo.r_data),
                     fifo.r_en.eq(self.o_wb.ready & drain_now)]
        level_next = fifo.level + (fifo.w_en & fifo.w_rdy) - (fifo.r_en & fifo.r_rdy)
        m.d.sync += draining.eq(drain_now & (level_next != 0))

        m.d.comb += [self.o_flushing.eq(mode != _Mode.RUN),
                     self.o_idle.eq((mode == _Mode.RUN) & ~any_valid & (fifo.level == 0)),
                     self.o_overflow.eq(overflow)]
        return m
