"""Write-combining gradient accumulator: lossless, set-associative, with flush and burst drain.

The write sequence the block produces is defined by :mod:`neuron_fabric.golden.combiner`; this
module is its cycle-level implementation: a pipeline of admission, lookup, execute and
write-back stages that takes one update a clock, back-to-back updates to one set included.
"""

from amaranth import Array, Cat, Const, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..golden.combiner import CombinerParams

__all__ = ["update_layout", "write_layout", "entry_layout", "way_layout", "CREDIT_LOOP",
           "WriteCombiner"]


def update_layout(addr_width, value_width):
    """Payload of an update: ``addr`` (unsigned) and ``value`` (two's complement)."""
    return data.StructLayout({"addr": unsigned(addr_width), "value": signed(value_width)})


def write_layout(addr_width, acc_width):
    """Payload of a write: ``addr`` (unsigned) and ``delta`` (two's complement)."""
    return data.StructLayout({"addr": unsigned(addr_width), "delta": signed(acc_width)})


def entry_layout(tag_width, max_updates, acc_width):
    """One buffer entry as stored in its set's row (the valid bit is kept in registers)."""
    return data.StructLayout({"tag": unsigned(tag_width), "count": range(max_updates),
                              "acc": signed(acc_width)})


def way_layout(tag_width, max_updates, acc_width):
    """One way of a set as the execute stage sees it: the entry, its valid bit and whether its
    tag is the tag of the update being executed."""
    return data.StructLayout({"valid": 1, "match": 1,
                              "entry": entry_layout(tag_width, max_updates, acc_width)})


#: Cycles a write's room in the FIFO is held when downstream takes every write at once: the
#: update's admission, lookup and execute cycles, the write register, the FIFO's two
#: registers. The FIFO holds this many entries beyond ``fifo_depth``, so that one update a
#: clock keeps flowing even when every update writes.
CREDIT_LOOP = 6


class _Mode(enum.Enum, shape=2):
    RUN = 0     # accepting updates
    SETTLE = 1  # flush: the updates in flight finish
    SCAN = 2    # flush: writing back every valid entry, one a cycle
    DRAIN = 3   # flush: waiting for the write-back FIFO to empty


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

    Pipeline: an accepted update is *looked up* in the next cycle (its set's row, read from
    memory with a registered read, and its set's valid bits and round-robin pointer, sampled
    when it was accepted; every way's tag compared with its tag) and *executed* in the cycle
    after: the hit or miss, the sum, the threshold, count and overflow tests and the victim.
    The result is registered and written back (row, valid bits, pointer) in the cycle after
    that. Nothing waits for a result: the execute stage takes its own result for the next
    update when both are in one set (distance 1), and the lookup stage takes the registered
    results of the two executions whose write-back its read missed (distances 2 and 3)
    instead of memory. The tests that need the value alone (bypass, zero, tiny,
    ``T - value``, ``high - value``, ...) are made during the lookup, and each way compares
    its own sum with them, so the loop from one execution to the next is a comparison and
    a choice.

    Lossless by construction: an update is accepted only when the FIFO has room for a write
    from it and from every update still in flight (credits), so a full FIFO stalls the input
    instead of dropping; an accumulation that would overflow writes the old sum back and
    restarts the entry rather than clipping (``o_overflow`` reports that this happened; it is
    a sign that ``acc_width`` is narrow, not a loss); and a flush writes back every entry and
    empties the FIFO. Values are dropped only in ``lossy`` mode, and only tiny misses
    (``|value| < small_threshold``).

    Throughput: one update per cycle while the FIFO has room (hits, misses, bypasses and
    evictions alike, to one set or one address back to back). The FIFO holds ``fifo_depth +
    CREDIT_LOOP`` entries, so that with downstream always ready no update waits. A flush
    waits for the updates in flight (at most four cycles), then takes two cycles per set with
    no valid entry and one per set plus one per entry for the others, plus a cycle per
    FIFO-full stall, then as long as downstream takes to empty the FIFO.

    Latency: an accepted update is executed two cycles after the cycle of acceptance; its
    write, if any, enters the FIFO in the cycle after that. The FIFO presents writes only in
    bursts: it starts when it holds ``burst`` entries (or during a flush) and then keeps
    ``o_wb.valid`` high until it is empty, so downstream sees back-to-back writes. With
    ``burst=1`` a write is offered five cycles after its update was accepted.

    Backpressure: ``o_wb`` follows the stream rules (``valid`` never waits for ``ready`` and
    is held until the transfer). ``i_upd.ready`` comes from a register and does not depend
    on the payload: it is low while a flush is in progress, and while the FIFO has no room
    for one more write beside the writes of the updates in flight (an update that writes
    nothing returns its room the cycle after its execution, one that writes when its write
    leaves the FIFO).

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
        No flush in progress, no update in flight, no entry held and the FIFO empty: every
        accepted update has been written out (or dropped in lossy mode).
    o_overflow : ``Out(1)``
        Sticky: an accumulation would have overflowed ``acc_width`` bits and was written back
        early. Cleared by reset only.

    Attributes
    ----------
    params : CombinerParams
        The validated parameters.
    fifo_entries : int
        Entries of the write-back FIFO, ``fifo_depth + CREDIT_LOOP``.

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
        self.fifo_entries = p.fifo_depth + CREDIT_LOOP
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
        n_ways = p.ways
        wb_layout = write_layout(p.addr_width, p.acc_width)
        ent_layout = entry_layout(p.tag_width, p.max_updates, p.acc_width)
        row_layout = data.ArrayLayout(ent_layout, n_ways)
        view_layout = data.StructLayout({
            "ways": data.ArrayLayout(way_layout(p.tag_width, p.max_updates, p.acc_width),
                                     n_ways),
            "ptr": range(n_ways)})
        # The value's tests as sums' bounds: |acc + v| >= T is acc >= T - v or acc <= -T - v.
        bound = signed(max(p.acc_width, p.value_width + 1, p.threshold
                           and (p.threshold.bit_length() + 1) or 0) + 2)

        def split(addr):
            return addr[:p.set_bits], addr[p.set_bits:]

        m.submodules.wb_fifo = fifo = SyncFIFOBuffered(width=Shape.cast(wb_layout).width,
                                                       depth=self.fifo_entries)
        # One row a set holds every way's entry; read with a registered read, written whole
        # by each execution. Valid bits and round-robin pointers live in registers, so that
        # reset empties the buffer.
        m.submodules.rows = rows = Memory(shape=row_layout, depth=p.sets, init=[])
        row_read = rows.read_port(transparent_for=())
        row_write = rows.write_port()
        valid = Array(Signal(n_ways, name=f"valid_s{s}") for s in range(p.sets))
        victim_ptr = Array(Signal(range(n_ways), name=f"victim_s{s}") for s in range(p.sets))

        mode = Signal(_Mode)
        scan_set = Signal(range(p.sets))
        overflow = Signal()

        # ---- admission: credits for the FIFO, `ready` from a register -------------------
        room = Signal(range(self.fifo_entries + 1), init=self.fifo_entries)
        ready = Signal(init=1)
        admit = Signal()
        upd = self.i_upd.payload
        in_set, in_tag = split(upd.addr)
        m.d.comb += [self.i_upd.ready.eq(ready), admit.eq(self.i_upd.valid & ready),
                     row_read.addr.eq(Mux(mode == _Mode.RUN, in_set, scan_set))]

        # ---- lookup -------------------------------------------------------------------
        l_valid = Signal()
        l_addr = Signal(p.addr_width)
        l_value = Signal(signed(p.value_width))
        l_bits = Signal(n_ways)             # the set's valid bits when it was accepted
        l_ptr = Signal(range(n_ways))
        m.d.sync += [l_valid.eq(admit), l_addr.eq(upd.addr), l_value.eq(upd.value),
                     l_bits.eq(valid[in_set]), l_ptr.eq(victim_ptr[in_set])]
        l_set, l_tag = split(l_addr)

        # An execution's result is registered (`commit`) and written to the row memory, the
        # valid bits and the pointer a cycle later, at the edge where the next update's row
        # is read; the result before it (`older`) was written at the edge where the row of
        # the update in lookup was read. Neither is in what that update read.
        result_layout = data.StructLayout({"set": range(p.sets), "bits": n_ways,
                                           "ptr": range(n_ways), "row": row_layout})
        commit, older = Signal(result_layout), Signal(result_layout)
        commit_valid, older_valid = Signal(), Signal()

        # Where the update in lookup finds its set, decided when it was accepted (compares of
        # registers and inputs, registered; copies a way keep each select's fan-out small):
        # - forward: the update just ahead of it, executing while it is looked up, is in the
        #   same set (same_addr: and has the same address);
        # - from_commit: the update two ahead, in execute at acceptance, is in the same set;
        # - from_older: the update three ahead, committing at acceptance, is in the same set.
        x_valid = Signal()
        x_addr = Signal(p.addr_width)
        x_set, x_tag = split(x_addr)

        def copies(name, value):
            signals = [Signal(name=f"{name}_w{w}", attrs={"keep": 1}) for w in range(n_ways)]
            signals.append(Signal(name=f"{name}_ptr", attrs={"keep": 1}))
            m.d.sync += [copy.eq(value) for copy in signals]
            return signals

        forward = copies("forward", l_valid & (in_set == l_set))
        from_commit = copies("from_commit", x_valid & (in_set == x_set))
        from_older = copies("from_older", commit_valid & (in_set == commit.set))
        same_addr = Signal()
        m.d.sync += same_addr.eq(upd.addr == l_addr)

        l_view = Signal(view_layout)
        for w in range(n_ways):
            entry = Mux(from_commit[w], commit.row[w],
                        Mux(from_older[w], older.row[w], row_read.data[w]))
            bit = Mux(from_commit[w], commit.bits[w], Mux(from_older[w], older.bits[w], l_bits[w]))
            m.d.comb += [l_view.ways[w].entry.eq(entry), l_view.ways[w].valid.eq(bit),
                         l_view.ways[w].match.eq(l_view.ways[w].entry.tag == l_tag)]
        m.d.comb += l_view.ptr.eq(Mux(from_commit[-1], commit.ptr,
                                      Mux(from_older[-1], older.ptr, l_ptr)))

        # The value's own tests, ready for the execute stage.
        def at_least(x, limit):
            return (x >= limit) | (x <= -limit)

        v = l_value
        low, high = p.acc_range
        l_big = at_least(v, p.threshold) if p.threshold is not None else Const(0)
        l_tiny = ((v > -p.small_threshold) & (v < p.small_threshold)
                  if p.small_threshold is not None else Const(0))
        l_nothing = (v == 0) | (l_tiny if p.lossy else Const(0))   # on a miss: not kept

        # ---- execute ------------------------------------------------------------------
        x_value = Signal(signed(p.value_width))
        x_big = Signal()           # bypass
        x_keep = Signal()          # a miss takes a free way
        x_evict = Signal()         # a miss in a full set evicts (else it is written through)
        x_neg = Signal(bound)      # -v: the sum is 0
        x_hi = Signal(bound)       # high - v, low - v: the sum fits acc_width bits
        x_lo = Signal(bound)
        x_up = Signal(bound)       # T - v, -T - v: the sum reaches the threshold
        x_down = Signal(bound)
        x_view = Signal(view_layout)
        m.d.sync += [x_valid.eq(l_valid), x_addr.eq(l_addr), x_value.eq(v), x_big.eq(l_big),
                     x_keep.eq(~l_nothing), x_evict.eq(~l_nothing & ~l_tiny),
                     x_neg.eq(-v), x_hi.eq(high - v), x_lo.eq(low - v)]
        if p.threshold is not None:
            m.d.sync += [x_up.eq(p.threshold - v), x_down.eq(-p.threshold - v)]

        ways = x_view.ways
        update = Signal()          # executing an update that does not bypass
        m.d.sync += update.eq(l_valid & ~l_big)
        hit = Cat(way.valid & way.match for way in ways)
        free = Cat(~way.valid for way in ways)
        miss = update & ~hit.any()
        full = ~free.any()
        lowest_free = Signal(n_ways)
        for w in range(n_ways):
            m.d.comb += lowest_free[w].eq(free[w] & ~free[:w].any() if w else free[0])
        victim = Cat(x_view.ptr == w for w in range(n_ways))
        evict = Signal()
        through = Signal()
        alloc = Signal(n_ways)
        m.d.comb += [evict.eq(miss & x_evict & full),
                     through.eq(miss & x_keep & ~x_evict & full),
                     alloc.eq(Mux(full, Mux(evict, victim, 0),
                                  Mux(miss & x_keep, lowest_free, 0)))]

        # Each way's outcome when the update hits it: its sum against the value's bounds.
        out_row = Signal(row_layout)     # the set's row after the execution
        out_bits = Signal(n_ways)
        out_ptr = Signal(range(n_ways))
        hit_push = Signal(n_ways)
        hit_delta = Signal(data.ArrayLayout(signed(p.acc_width), n_ways))
        hit_overflow = Signal(n_ways)
        keeps = Signal(n_ways)           # a hit leaves the entry valid
        sums = []                        # a hit stores its sum (else the value, count 1)
        for w, way in enumerate(ways):
            acc, count = way.entry.acc, way.entry.count
            total = acc + x_value
            overflows = (acc > x_hi) | (acc < x_lo)
            reaches = (acc >= x_up) | (acc <= x_down) if p.threshold is not None else Const(0)
            merged_all = count == p.max_updates - 1
            cancels = acc == x_neg
            hit_here = update & hit[w]
            sums.append((hit_here & ~overflows, total, count + 1))
            out = out_row[w]
            m.d.comb += [
                keeps[w].eq(overflows | ~(reaches | merged_all | cancels)),
                out.tag.eq(Mux(alloc[w], x_tag, way.entry.tag)),
                out.acc.eq(Mux(hit_here & ~overflows, total,
                               Mux(hit_here | alloc[w], x_value, acc))),
                out.count.eq(Mux(hit_here & ~overflows, count + 1,
                                 Mux(hit_here | alloc[w], 1, count))),
                out_bits[w].eq(Mux(hit_here, keeps[w], way.valid | alloc[w])),
                hit_push[w].eq(hit_here & (overflows | reaches | (merged_all & ~cancels))),
                hit_overflow[w].eq(hit_here & overflows),
                hit_delta[w].eq(Mux(overflows, acc, total)),
            ]
        m.d.comb += out_ptr.eq(Mux(evict & (x_view.ptr != n_ways - 1), x_view.ptr + 1,
                                   Mux(evict, 0, x_view.ptr)))

        # The execution's result, committed in the next cycle.
        m.d.sync += [commit_valid.eq(x_valid), commit.set.eq(x_set), commit.row.eq(out_row),
                     commit.bits.eq(out_bits), commit.ptr.eq(out_ptr),
                     older_valid.eq(commit_valid), older.eq(commit)]
        with m.If(commit_valid):
            m.d.sync += [valid[commit.set].eq(commit.bits),
                         victim_ptr[commit.set].eq(commit.ptr)]
        m.d.comb += [row_write.addr.eq(commit.set), row_write.data.eq(commit.row),
                     row_write.en.eq(commit_valid)]

        # The next update's view. From the lookup stage, or, in the same set, this execution's
        # result: a way it changes is loaded with the change, a way it leaves alone holds its
        # register (the clock enable does the choice, so the loop is a sum, a comparison and
        # a two-way choice). Tags are compared in the lookup stage, against the next update's
        # tag; the only tag an execution writes is its own, so the next update matches a way
        # this one filled exactly when their addresses are equal.
        for w, way in enumerate(ways):
            fwd = forward[w]
            stores_sum, total, count_next = sums[w]
            hit_here = update & hit[w]
            with m.If(~fwd):
                m.d.sync += [way.valid.eq(l_view.ways[w].valid),
                             way.entry.eq(l_view.ways[w].entry)]
            with m.Elif(hit_here):
                m.d.sync += [way.valid.eq(keeps[w]),
                             way.entry.acc.eq(Mux(stores_sum, total, x_value)),
                             way.entry.count.eq(Mux(stores_sum, count_next, 1))]
            with m.Elif(alloc[w]):
                m.d.sync += [way.valid.eq(1), way.entry.tag.eq(x_tag),
                             way.entry.acc.eq(x_value), way.entry.count.eq(1)]
            m.d.sync += way.match.eq(Mux(fwd & alloc[w], same_addr, l_view.ways[w].match))
        m.d.sync += x_view.ptr.eq(Mux(forward[-1], out_ptr, l_view.ptr))

        # ---- write register: at most one write an execution, chosen in the next cycle ----
        push = Signal()
        m.d.comb += push.eq(x_valid & (x_big | hit_push.any() | evict | through))
        w_valid = Signal()
        w_hit = Signal(n_ways)             # the write is way w's sum (else as chosen below)
        w_evict = Signal()                 # the write is the victim's entry
        w_deltas = Signal.like(hit_delta)
        w_victim = Signal(ent_layout)
        w_addr = Signal(p.addr_width)
        w_value = Signal(signed(p.value_width))
        w_set = w_addr[:p.set_bits]
        release = Signal()         # an execution without a write returns its room
        victim_entry = Signal(ent_layout)
        with m.Switch(x_view.ptr):
            for w in range(n_ways):
                with m.Case(w):
                    m.d.comb += victim_entry.eq(ways[w].entry)
        m.d.sync += [w_valid.eq(push), w_hit.eq(hit_push), w_evict.eq(evict),
                     w_deltas.eq(hit_delta), w_victim.eq(victim_entry), w_addr.eq(x_addr),
                     w_value.eq(x_value), release.eq(x_valid & ~push)]
        w_data = Signal(wb_layout)
        m.d.comb += [w_data.addr.eq(Mux(w_evict, Cat(w_set, w_victim.tag), w_addr)),
                     w_data.delta.eq(Mux(w_evict, w_victim.acc, w_value))]
        for w in range(n_ways):
            with m.If(w_hit[w]):
                m.d.comb += w_data.delta.eq(w_deltas[w])
        with m.If(hit_overflow.any()):
            m.d.sync += overflow.eq(1)

        # ---- flush: settle, scan, drain -----------------------------------------------
        scan_loaded = Signal()     # the row of scan_set is on the read port
        scan_pending = Signal(n_ways)
        scan_push = Signal()
        scan_wb = Signal(wb_layout)
        first_pending = Signal(n_ways)
        for w in range(n_ways):
            m.d.comb += first_pending[w].eq(scan_pending[w] & ~scan_pending[:w].any()
                                            if w else scan_pending[0])
        scan_clear = Signal()      # the scan is over: every valid bit is cleared
        with m.If(scan_clear):
            m.d.sync += [bits.eq(0) for bits in valid]
        m.d.sync += scan_clear.eq(0)

        def next_set():
            m.d.sync += scan_loaded.eq(0)
            with m.If(scan_set == p.sets - 1):
                m.d.sync += [mode.eq(_Mode.DRAIN), scan_clear.eq(1)]
            with m.Else():
                m.d.sync += scan_set.eq(scan_set + 1)

        pop = fifo.r_en & fifo.r_rdy
        room_next = room - admit + pop + release
        m.d.sync += room.eq(room_next)
        with m.Switch(mode):
            with m.Case(_Mode.RUN):
                m.d.sync += ready.eq(~self.i_flush & (room_next != 0))
                with m.If(self.i_flush):
                    m.d.sync += mode.eq(_Mode.SETTLE)
            with m.Case(_Mode.SETTLE):
                with m.If(~l_valid & ~x_valid & ~commit_valid & ~w_valid):
                    m.d.sync += [mode.eq(_Mode.SCAN), scan_set.eq(0), scan_loaded.eq(0)]
            with m.Case(_Mode.SCAN):
                # A set's valid bits are read with its row and tested a cycle later.
                with m.If(~scan_loaded):
                    m.d.sync += [scan_loaded.eq(1), scan_pending.eq(valid[scan_set])]
                with m.Elif(scan_pending == 0):
                    next_set()
                with m.Else():
                    m.d.comb += [scan_push.eq(1), scan_wb.delta.eq(0)]
                    for w in range(n_ways):
                        with m.If(first_pending[w]):
                            m.d.comb += [scan_wb.addr.eq(Cat(scan_set, row_read.data[w].tag)),
                                         scan_wb.delta.eq(row_read.data[w].acc)]
                    with m.If(fifo.w_rdy):
                        m.d.sync += scan_pending.eq(scan_pending & ~first_pending)
                        with m.If((scan_pending & ~first_pending) == 0):
                            next_set()
            with m.Case(_Mode.DRAIN):
                with m.If(fifo.level == 0):
                    m.d.sync += [mode.eq(_Mode.RUN), room.eq(self.fifo_entries), ready.eq(1)]

        m.d.comb += [fifo.w_en.eq(Mux(mode == _Mode.SCAN, scan_push, w_valid)),
                     fifo.w_data.eq(Mux(mode == _Mode.SCAN, scan_wb, w_data))]

        # ---- burst draining: start at `burst` entries (or during a flush), drain to empty
        draining = Signal()
        drain_now = Signal()
        m.d.comb += drain_now.eq(draining | (fifo.level >= p.burst) | (mode != _Mode.RUN))
        m.d.comb += [self.o_wb.valid.eq(fifo.r_rdy & drain_now),
                     self.o_wb.payload.eq(fifo.r_data),
                     fifo.r_en.eq(self.o_wb.ready & drain_now)]
        level_next = fifo.level + (fifo.w_en & fifo.w_rdy) - (fifo.r_en & fifo.r_rdy)
        m.d.sync += draining.eq(drain_now & (level_next != 0))

        in_flight = l_valid | x_valid | commit_valid | w_valid
        m.d.comb += [self.o_flushing.eq(mode != _Mode.RUN),
                     self.o_idle.eq((mode == _Mode.RUN) & ~in_flight & ~Cat(valid).any()
                                    & (fifo.level == 0)),
                     self.o_overflow.eq(overflow)]
        return m
