"""Write-combining gradient accumulator: lossless, set-associative, with flush and burst drain.

The write sequence the block produces is defined by :mod:`neuron_fabric.golden.combiner`; this
module is its cycle-level implementation: a pipeline of admission, lookup, execute and
write-back stages that takes one update a clock, back-to-back updates to one set included.
"""

from amaranth import Array, Cat, Const, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..golden.combiner import CombinerParams

__all__ = ["update_layout", "write_layout", "entry_layout", "set_layout", "CREDIT_LOOP",
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


def set_layout(tag_width, max_updates, acc_width, ways):
    """A set's state as the pipeline carries it: its row (every way's entry), its valid bits
    and its round-robin pointer (one-hot: the victim's bit)."""
    return data.StructLayout({
        "row": data.ArrayLayout(entry_layout(tag_width, max_updates, acc_width), ways),
        "bits": ways, "ptr": ways})


BOUNDS = ("hi", "lo", "up", "down", "zero")


def bounds_layout(shape):
    """A value's bounds for the tests of a sum (see :func:`tests_layout`)."""
    return data.StructLayout({name: shape for name in BOUNDS})


def tests_layout():
    """The tests of a sum ``acc + v``: it does not fit ``acc_width`` bits, it reaches the
    threshold, the entry has merged its last value, the sum is 0."""
    return data.StructLayout({"overflows": 1, "reaches": 1, "merged_all": 1, "cancels": 1})


#: Cycles a write's room in the FIFO is held when downstream takes every write at once: the
#: update's admission, lookup and execute cycles, the write register, the FIFO's two
#: registers. The FIFO holds this many entries beyond ``fifo_depth``, so that one update a
#: clock keeps flowing even when every update writes.
CREDIT_LOOP = 8


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
        set_state = set_layout(p.tag_width, p.max_updates, p.acc_width, n_ways)
        # The value's tests as sums' bounds: |acc + v| >= T is acc >= T - v or acc <= -T - v;
        # wide enough for the sum of two values (an update and the one ahead of it).
        bound = signed(max(p.acc_width, p.value_width + 1) + 2)
        low, high = p.acc_range

        def split(addr):
            return addr[:p.set_bits], addr[p.set_bits:]

        def tests(acc, bounds, merged_all):
            """A sum's tests, ``acc + v`` against ``v``'s bounds: each comparison is the sign
            of a difference (a carry chain whose last sum bit is the answer). ``acc`` may be
            three copies of the sum, one for each pair of comparisons."""
            fit, reach, zero = acc if isinstance(acc, tuple) else (acc,) * 3

            def below(a, b):
                return (a - b)[-1]

            return Cat(
                below(bounds.hi, fit) | below(fit, bounds.lo),
                ~below(reach, bounds.up) | ~below(bounds.down, reach)
                if p.threshold is not None else Const(0),
                merged_all, ~(below(bounds.zero, zero) | below(zero, bounds.zero)))

        def outcome_of(t):
            """What the tests ``t`` mean for a hit: (keeps the entry, writes, stores the sum)."""
            t = data.View(tests_layout(), t)
            return Cat(t.overflows | ~(t.reaches | t.merged_all | t.cancels),
                       t.overflows | t.reaches | (t.merged_all & ~t.cancels), ~t.overflows)

        def copies(name, value, *, shape=1, users=None):
            """Registers of ``value``, one a way and one for the pointer (or one for each of
            ``users``), so that no select drives more than one way's bits (``keep``:
            synthesis must not merge them)."""
            users = users or [f"w{w}" for w in range(n_ways)] + ["ptr"]
            signals = [Signal(shape, name=f"{name}_{user}", attrs={"keep": 1}) for user in users]
            m.d.sync += [copy.eq(value) for copy in signals]
            return signals

        def field_copies(name, value):
            """Copies of a select that chooses a way's row: one for each way's tag, one for
            each way's count and sum, one for the rest (``"ptr"``)."""
            users = [f"w{w}_{field}" for w in range(n_ways) for field in ("tag", "sum")]
            return dict(zip(users + ["ptr"], copies(name, value, users=users + ["ptr"])))

        def choose_row(dest, sources, sel):
            """``dest`` (a row, registered) from the first of ``sources`` (``(name, row)``)
            whose select copy is high, else the last row."""
            for w in range(n_ways):
                for field, parts in (("tag", lambda e: [e.tag]),
                                     ("sum", lambda e: [e.count, e.acc])):
                    for k, (name, row) in enumerate(sources):
                        cond = sel[name][f"w{w}_{field}"] if k < len(sources) - 1 else None
                        statement = [a.eq(b) for a, b in zip(parts(dest[w]), parts(row[w]))]
                        if k == 0:
                            with m.If(cond):
                                m.d.sync += statement
                        elif cond is not None:
                            with m.Elif(cond):
                                m.d.sync += statement
                        else:
                            with m.Else():
                                m.d.sync += statement

        m.submodules.wb_fifo = fifo = SyncFIFO(width=Shape.cast(wb_layout).width,
                                                       depth=self.fifo_entries)
        mode = Signal(_Mode)
        flushing = Signal()        # mode is not RUN
        scanning = Signal()        # mode is SCAN
        scan_set = Signal(range(p.sets))
        overflow = Signal()

        # The stages' updates: a valid bit, the address and the value of each.
        def stage(name):
            return (Signal(name=f"{name}_valid"), Signal(p.addr_width, name=f"{name}_addr"),
                    Signal(signed(p.value_width), name=f"{name}_value"))

        r_valid, r_addr, r_value = stage("r")      # read
        c_valid, c_addr, c_value = stage("c")      # compare
        d_valid, d_addr, d_value = stage("d")      # decide
        x_valid, x_addr, x_value = stage("x")      # execute
        r_set, c_set, d_set, x_set = (split(a)[0] for a in (r_addr, c_addr, d_addr, x_addr))
        x_tag = split(x_addr)[1]

        # ---- the buffer --------------------------------------------------------------
        # Three memories a way hold the way's tags (in two halves) and its counts and sums,
        # read (in the read stage) from a registered address, a copy each. Valid bits and round-robin pointers
        # live in registers, so that reset empties the buffer. Each execution's result (the
        # set's new state, `x_out`) is registered (`commit`) and written in the next cycle.
        split_at = min(p.set_bits, 3)    # the valid bits are read by these bits, then the rest
        entry_bits = Shape.cast(ent_layout).width
        parts = {"tag_lo": (0, p.tag_width // 2), "tag_hi": (p.tag_width // 2, p.tag_width),
                 "sum": (p.tag_width, entry_bits)}     # bit ranges of an entry
        parts = {name: bits for name, bits in parts.items() if bits[1] > bits[0]}
        rd_set = {user: Signal(range(p.sets), name=f"rd_set_{user}", attrs={"keep": 1})
                  for user in [f"w{w}_{part}" for w in range(n_ways) for part in parts]
                  + [f"ctl{h}" for h in range(p.sets >> split_at)]}
        way_read, way_write = [], []
        for w in range(n_ways):
            ports = {}
            for part, (start, stop) in parts.items():
                memory = m.submodules[f"way{w}_{part}"] = Memory(shape=stop - start,
                                                                 depth=p.sets, init=[])
                ports[part] = (memory.read_port(domain="comb"), memory.write_port())
                m.d.comb += ports[part][0].addr.eq(rd_set[f"w{w}_{part}"])
            way_read.append(data.View(ent_layout, Cat(ports[part][0].data for part in parts)))
            way_write.append(ports)
        valid = Array(Signal(n_ways, name=f"valid_s{s}") for s in range(p.sets))
        victim_ptr = Array(Signal(n_ways, name=f"victim_s{s}", init=1) for s in range(p.sets))
        x_out = Signal(set_state)
        commit = Signal(set_state)
        # The commit's valid bit and set: a copy for each way's memories, one for the valid
        # bits and pointers.
        commit_users = [f"w{w}" for w in range(n_ways)] + ["ctl"]
        commit_valid, commit_set = ({user: Signal(shape, name=f"commit_{name}_{user}",
                                                  attrs={"keep": 1}) for user in commit_users}
                                    for name, shape in (("valid", 1), ("set", range(p.sets))))

        # ---- admission: credits for the FIFO, `ready` from a register -------------------
        room = Signal(range(self.fifo_entries + 1), init=self.fifo_entries)
        ready = Signal(init=1)
        admit = Signal()
        upd = self.i_upd.payload
        # An update of the set of the one taken just before is held a cycle (`held`), so
        # that no two updates of a set are less than two cycles apart in the pipeline.
        held_valid, held_addr, held_value = stage("held")
        clash = r_valid & (split(upd.addr)[0] == r_set)
        src_addr = Mux(held_valid, held_addr, upd.addr)
        src_value = Mux(held_valid, held_value, upd.value)
        a_set = split(src_addr)[0]
        m.d.comb += [self.i_upd.ready.eq(ready), admit.eq(self.i_upd.valid & ready)]
        m.d.sync += [held_valid.eq(admit & clash), held_addr.eq(upd.addr),
                     held_value.eq(upd.value)]
        m.d.sync += [r_valid.eq(admit & ~clash | held_valid), r_addr.eq(src_addr),
                     r_value.eq(src_value)]
        # The value's bounds for a sum: its tests are acc > high - v or acc < low - v (does
        # not fit), acc >= T - v or acc <= -T - v (reaches the threshold), acc == -v (is 0).
        r_bounds = Signal(bounds_layout(bound))
        m.d.sync += [r_bounds.hi.eq(high - src_value), r_bounds.lo.eq(low - src_value),
                     r_bounds.zero.eq(-src_value)]
        if p.threshold is not None:
            m.d.sync += [r_bounds.up.eq(p.threshold - src_value),
                         r_bounds.down.eq(-p.threshold - src_value)]
        m.d.sync += [copy.eq(Mux(scanning, scan_set, a_set)) for copy in rd_set.values()]
        # The read misses the results of the updates now in decide and execute: during the
        # read they execute and commit. Whether they are of this set is decided now.
        r_from_x = field_copies("r_from_x", d_valid & (a_set == d_set))
        r_from_commit = field_copies("r_from_commit", x_valid & (a_set == x_set))

        # ---- read -----------------------------------------------------------------------
        # The row (read from the ways' memories), the valid bits and the pointer are
        # registered for the compare stage; where the update executing or committing now is
        # of the same set, its result is registered instead (the read misses it).
        # The valid bits and the pointer are read in two steps: here, by the set's low bits,
        # one candidate for each value of the high bits, then by the high bits, in compare.
        m.d.sync += [c_valid.eq(r_valid), c_addr.eq(r_addr), c_value.eq(r_value)]
        ctl_layout = data.StructLayout({"bits": n_ways, "ptr": n_ways})
        c_candidates = [Signal(ctl_layout, name=f"c_ctl{h}") for h in range(p.sets >> split_at)]
        for h, candidate in enumerate(c_candidates):
            group = [Cat(valid[h << split_at | l], victim_ptr[h << split_at | l])
                     for l in range(1 << split_at)]
            m.d.sync += candidate.eq(Array(group)[rd_set[f"ctl{h}"][:split_at]])
        c_row = Signal(row_layout)
        c_side_ctl = Signal(ctl_layout)
        c_side_use = copies("c_side_use", r_from_x["ptr"] | r_from_commit["ptr"],
                            users=["ctl"])[0]
        # The tags are compared with the update's here, by pairs of bits; compare ANDs them.
        r_tag = split(r_addr)[1]

        def pairs(tag):
            return Cat(tag[i:i + 2] == r_tag[i:i + 2] for i in range(0, p.tag_width, 2))

        c_pairs = Signal(data.ArrayLayout(len(pairs(r_tag)), n_ways))
        choose_row(c_row, [("x", x_out.row), ("commit", commit.row), ("read", way_read)],
                   {"x": r_from_x, "commit": r_from_commit})
        for w in range(n_ways):
            with m.If(r_from_x[f"w{w}_tag"]):
                m.d.sync += c_pairs[w].eq(pairs(x_out.row[w].tag))
            with m.Elif(r_from_commit[f"w{w}_tag"]):
                m.d.sync += c_pairs[w].eq(pairs(commit.row[w].tag))
            with m.Else():
                m.d.sync += c_pairs[w].eq(pairs(way_read[w].tag))
        with m.If(r_from_x["ptr"]):
            m.d.sync += c_side_ctl.eq(Cat(x_out.bits, x_out.ptr))
        with m.Else():
            m.d.sync += c_side_ctl.eq(Cat(commit.bits, commit.ptr))
        # The update now in decide executes while this one compares, and is then the latest
        # in the set; the address is compared now for the way it may fill.
        c_from_x = field_copies("c_from_x", d_valid & (r_set == d_set))
        c_same_x = Signal()
        m.d.sync += c_same_x.eq(r_addr == d_addr)
        # The value's bounds, and the bounds less the value of the update now in decide (its
        # sum is the one this update adds to when it hits the way that one hits).
        c_bounds = Signal(bounds_layout(bound))
        c_bounds_2 = Signal(bounds_layout(bound))
        m.d.sync += c_bounds.eq(r_bounds)
        m.d.sync += [c_bounds_2[name].eq(r_bounds[name] - d_value) for name in BOUNDS]

        # ---- compare ----------------------------------------------------------------------
        c_view = Signal(set_state)
        c_ctl = Signal(ctl_layout)
        m.d.comb += [c_ctl.eq(Mux(c_side_use, c_side_ctl, Array(c_candidates)[c_set[split_at:]])),
                     c_view.row.eq(c_row), c_view.bits.eq(c_ctl.bits), c_view.ptr.eq(c_ctl.ptr)]
        c_match = Cat(c_pairs[w].all() for w in range(n_ways))

        # The value's own tests.
        def at_least(x, limit):
            return (x >= limit) | (x <= -limit)

        v = c_value
        c_big = at_least(v, p.threshold) if p.threshold is not None else Const(0)
        c_tiny = ((v > -p.small_threshold) & (v < p.small_threshold)
                  if p.small_threshold is not None else Const(0))
        c_nothing = (v == 0) | (c_tiny if p.lossy else Const(0))   # on a miss: not kept

        # The decide stage's view: the compared set, or the result of the execution under
        # way in the same set (an execution writes only its own tag, into the way it fills).
        d_view = Signal(set_state)
        d_match = Signal(n_ways)
        x_fill_snoop = Signal(n_ways, attrs={"keep": 1})    # for the views and the tests
        d_match_next = Signal(n_ways)
        choose_row(d_view.row, [("x", x_out.row), ("view", c_view.row)], {"x": c_from_x})
        from_x = c_from_x["ptr"]
        for w in range(n_ways):
            m.d.comb += d_match_next[w].eq(Mux(from_x & x_fill_snoop[w], c_same_x, c_match[w]))
        d_bits_next = Mux(from_x, x_out.bits, c_view.bits)
        m.d.sync += [d_match.eq(d_match_next), d_view.bits.eq(d_bits_next),
                     d_view.ptr.eq(Mux(from_x, x_out.ptr, c_view.ptr))]
        # The view's valid way that holds the address, if any.
        d_own = dict(zip(("count", "acc", "tests"),
                         copies("d_own", d_bits_next & d_match_next, shape=n_ways,
                                users=["count", "acc", "tests"])))
        # The update goes to the buffer; on a miss it takes a free way; it may evict.
        d_big, d_update, d_update_keep, d_update_evict = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [d_valid.eq(c_valid), d_addr.eq(c_addr), d_value.eq(c_value),
                     d_big.eq(c_big), d_update.eq(c_valid & ~c_big),
                     d_update_keep.eq(c_valid & ~c_big & ~c_nothing),
                     d_update_evict.eq(c_valid & ~c_big & ~c_nothing & ~c_tiny)]
        # The update now in decide executes while this one decides. When it has the same
        # address and goes to the buffer, this update's hit is in the way that one hits or
        # fills (if it does neither, this update misses too).

        # The tests of the sum, made on registers, one cycle ahead of their use. The way the
        # update hits holds, before its own sum, the sum of the view, or of the update ahead
        # at the same address: that one's sum when it summed into the way, its value when it
        # filled or restarted it. So: each way of the compared view against the value's
        # bounds, valid for a way that the two updates ahead leave alone; the hit's sum of
        # the update two ahead (now executing) against the bounds less its value, or its
        # value; and, in decide, the same for the update one ahead.
        # The hit way's entry before the sum: a copy for the sum, and, for each stage's
        # tests, one for each pair of compare chains.
        x_entry = Signal(ent_layout, attrs={"keep": 1})
        x_sum_c = [Signal(signed(p.acc_width), name=f"x_sum_c_{kind}", attrs={"keep": 1})
                   for kind in ("fit", "reach", "zero")]
        x_hit_data = Signal(n_ways, attrs={"keep": 1})
        x_touched = Signal(attrs={"keep": 1})     # the execution hits or fills a way
        x_hit_any = Signal()
        x_stores = Signal()                # a hit stores its sum (else the value, count 1)
        summed = x_hit_any & x_stores      # the execution sums into its way
        d_tests = Signal(data.ArrayLayout(tests_layout(), n_ways))
        for w in range(n_ways):
            entry = c_view.row[w]
            m.d.sync += d_tests[w].eq(tests(entry.acc, c_bounds, entry.count == p.max_updates - 1))
        d_follows_2 = Signal()             # the hit way is the one the update two ahead hit
        d_tests_2 = Signal(tests_layout())
        last = Const(p.max_updates == 2)   # a filled entry has merged its last value
        m.d.sync += [
            d_follows_2.eq(from_x & c_same_x & x_touched),
            d_tests_2.eq(Mux(summed,
                             tests(tuple(x_sum_c), c_bounds_2,
                                   x_entry.count == p.max_updates - 2),
                             tests(x_value, c_bounds, last))),
        ]

        # ---- decide -----------------------------------------------------------------------
        # The hit, the way to fill, eviction and the set's valid bits and pointer after the
        # execution, from registers: the view, or, in the set of the execution under way,
        # its outcome. One bit of that outcome comes late: whether its hit freed the entry
        # (`freed`). Both cases are decided, and `freed` chooses.
        x_kept_data, x_ptr_data = Signal(n_ways), Signal(n_ways)

        def decide(bits, hits, ptr):
            """The outcome for a set with valid ``bits``, valid ways that hold the address
            ``hits`` and pointer ``ptr`` (one-hot), each output a few LUTs from its inputs."""
            hit = Cat(d_update & hits[w] for w in range(n_ways))
            miss = ~hits.any()
            full = bits.all()
            lowest_free = Cat(~bits[w] & (bits[:w].all() if w else 1) for w in range(n_ways))
            take_free = miss & d_update_keep             # a miss takes the lowest free way
            evict = miss & d_update_evict & full
            fill = Cat(Mux(full, evict & ptr[w], take_free & lowest_free[w])
                       for w in range(n_ways))
            return {"hit": hit, "hit_any": hit.any(), "fill": fill, "evict": evict,
                    "changed": hit | fill, "touched": hit.any() | (take_free & ~full) | evict,
                    "through": take_free & ~d_update_evict & full,
                    "kept": Cat(bits[w] | (take_free & lowest_free[w]) for w in range(n_ways)),
                    "ptr": Mux(evict, Cat(ptr[-1], ptr[:-1]), ptr)}

        # The view alone, and the execution's outcome with its hit kept or freed (a way it
        # filled holds this address when the two addresses are equal).
        outcome = decide(d_view.bits, d_view.bits & d_match, d_view.ptr)
        x_evict, x_through, x_big = Signal(), Signal(), Signal()
        # The execution's selects, a copy for each field they choose: the tag (the filled
        # way), the count and sum (the hit or filled way), the victim (the filled way).
        x_new_tag, x_new_sum, x_victim = (Signal(n_ways, name=name, attrs={"keep": 1})
                                          for name in ("x_new_tag", "x_new_sum", "x_victim"))
        m.d.sync += [x_new_tag.eq(outcome["fill"]),
                     x_new_sum.eq(outcome["changed"])]
        m.d.sync += [x_hit_data.eq(outcome["hit"]),
                     x_hit_any.eq(outcome["hit_any"]),
                     x_fill_snoop.eq(outcome["fill"]),
                     x_touched.eq(outcome["touched"]),
                     x_evict.eq(outcome["evict"]), x_through.eq(outcome["through"]),
                     x_kept_data.eq(outcome["kept"]), x_ptr_data.eq(outcome["ptr"]),
                     x_valid.eq(d_valid), x_addr.eq(d_addr), x_value.eq(d_value),
                     x_big.eq(d_big)]

        # The hit's tests and entry: those of the update ahead's way when it has the same
        # address and touches a way, else those of the matching valid way of the view.
        alone = Signal(tests_layout())
        alone_entry = Signal(ent_layout)
        for w in range(n_ways):
            with m.If(d_own["count"][w]):
                m.d.comb += alone_entry.count.eq(d_view.row[w].count)
            with m.If(d_own["acc"][w]):
                m.d.comb += alone_entry.acc.eq(d_view.row[w].acc)
            with m.If(d_own["tests"][w]):
                m.d.comb += alone.eq(d_tests[w])
        # Only the tests against the sum of the update ahead wait for a carry chain; the
        # others' outcome is chosen from registers first.
        early = Signal(3)
        with m.If(d_follows_2):
            m.d.comb += early.eq(outcome_of(d_tests_2))
        with m.Else():
            m.d.comb += early.eq(outcome_of(alone))
        x_keeps = Signal()          # a hit leaves the entry valid
        x_pushes = Signal()         # a hit writes
        m.d.sync += Cat(x_keeps, x_pushes, x_stores).eq(early)
        # The execution's new entry for the way it hits or fills.
        total = Signal(signed(p.acc_width + 1))
        new_entry = Signal(ent_layout)
        m.d.comb += [new_entry.acc.eq(Mux(summed, total, x_value)),
                     new_entry.count.eq(Mux(summed, x_entry.count + 1, 1))]
        m.d.sync += [x_entry.eq(alone_entry), total.eq(alone_entry.acc + d_value),
                     *(copy.eq(alone_entry.acc) for copy in x_sum_c)]

        # ---- execute ------------------------------------------------------------------------
        # The hit or filled way takes the new entry; the set's new state (`x_out`) and at
        # most one write.
        x_row = Signal(row_layout)
        for w in range(n_ways):
            entry, out = x_row[w], x_out.row[w]
            m.d.comb += [
                out.tag.eq(Mux(x_new_tag[w], x_tag, entry.tag)),
                out.acc.eq(Mux(x_new_sum[w], new_entry.acc, entry.acc)),
                out.count.eq(Mux(x_new_sum[w], new_entry.count, entry.count)),
                x_out.bits[w].eq(x_kept_data[w] & ~(x_hit_data[w] & ~x_keeps)),
            ]
        m.d.comb += x_out.ptr.eq(x_ptr_data)

        # The next update's row: the view, or, in the same set, this execution's result.
        m.d.sync += x_row.eq(d_view.row)

        # ---- write-back: the set's new state, and at most one write ------------------------
        m.d.sync += [commit.eq(x_out), *(copy.eq(x_valid) for copy in commit_valid.values()),
                     *(copy.eq(x_set) for copy in commit_set.values())]
        with m.If(commit_valid["ctl"]):
            m.d.sync += [valid[commit_set["ctl"]].eq(commit.bits),
                         victim_ptr[commit_set["ctl"]].eq(commit.ptr)]
        for w in range(n_ways):
            entry = commit.row[w].as_value()
            for part, (start, stop) in parts.items():
                port = way_write[w][part][1]
                bits = entry[start:stop]
                m.d.comb += [port.addr.eq(commit_set[f"w{w}"]), port.data.eq(bits),
                             port.en.eq(commit_valid[f"w{w}"])]

        # The write: the value (bypass, written through), the hit's sum (or, when the sum
        # would overflow, the old sum) or the victim's entry; chosen in the next cycle.
        hit_push = x_hit_any & x_pushes
        push = Signal()
        m.d.comb += push.eq(x_valid & (x_big | hit_push | x_evict | x_through))
        w_valid = Signal()
        w_sum = Signal()                   # the write is the hit's
        w_evict = Signal()                 # the write is the victim's entry
        w_delta = Signal(signed(p.acc_width))
        w_victim = Signal(ent_layout)
        w_addr = Signal(p.addr_width)
        w_value = Signal(signed(p.value_width))
        w_set = w_addr[:p.set_bits]
        release = Signal()         # an execution without a write returns its room
        victim_entry = Signal(ent_layout)
        for w in range(n_ways):
            with m.If(x_victim[w]):
                m.d.comb += victim_entry.eq(x_row[w])
        # A flush's scan takes an entry when the FIFO has room for it (the same credits as
        # the updates') and writes it as a victim: its row goes down the decide and execute
        # stages (no update is in flight during a scan) and its way joins the victim's select
        # when the row reaches execute, so the write register has no second source.
        scan_room = Signal()       # the FIFO has room for one more write
        scan_push = Signal()       # the scan has an entry to write (in its last phase)
        scan_take = Signal()
        scan_sent = Signal(n_ways)     # the way taken, as the row enters decide
        x_scan = Signal()              # the victim in execute is a scanned entry
        scan_set_d, scan_set_x = Signal.like(scan_set), Signal.like(scan_set)
        m.d.comb += scan_take.eq(scanning & scan_push & scan_room)
        m.d.sync += [w_valid.eq(push | x_scan), w_sum.eq(hit_push), w_evict.eq(x_evict | x_scan),
                     w_delta.eq(Mux(x_stores, total, x_entry.acc)),
                     w_victim.eq(victim_entry), w_addr.eq(Mux(x_scan, scan_set_x, x_addr)),
                     w_value.eq(x_value)]
        m.d.sync += release.eq(x_valid & ~push)
        w_data = Signal(wb_layout)
        m.d.comb += [w_data.addr.eq(Mux(w_evict, Cat(w_set, w_victim.tag), w_addr)),
                     w_data.delta.eq(Mux(w_sum, w_delta, Mux(w_evict, w_victim.acc, w_value)))]
        with m.If(x_hit_any & ~x_stores):
            m.d.sync += overflow.eq(1)

        # ---- flush: settle, scan, drain -----------------------------------------------
        # The scan reads each set through the read stage, in phases: its number goes to the
        # read address, its row and valid bits are read, then its valid entries are written.
        scan_phase = Signal(range(3))
        # The set's valid bits, read in two steps as the updates' are.
        scan_candidates = [Signal(n_ways, name=f"scan_bits{h}") for h in range(p.sets >> split_at)]
        scan_pending = Signal(n_ways)
        first_pending = Signal(n_ways, attrs={"keep": 1})   # its lowest bit: written next
        m.d.sync += [scan_sent.eq(Mux(scan_take, first_pending, 0)), x_scan.eq(scan_sent.any()),
                     x_victim.eq(outcome["fill"] | scan_sent),
                     scan_set_d.eq(scan_set), scan_set_x.eq(scan_set_d)]

        def lowest(bits):
            return Cat(bits[w] & ~bits[:w].any() if w else bits[0] for w in range(n_ways))
        scan_clear = Signal()      # the scan is over: every valid bit is cleared
        with m.If(scan_clear):
            m.d.sync += [bits.eq(0) for bits in valid]
        m.d.sync += scan_clear.eq(0)

        def next_set():
            m.d.sync += [scan_phase.eq(0), scan_push.eq(0)]
            with m.If(scan_set == p.sets - 1):
                m.d.sync += [mode.eq(_Mode.DRAIN), scanning.eq(0), scan_clear.eq(1)]
            with m.Else():
                m.d.sync += scan_set.eq(scan_set + 1)

        in_flight = held_valid | r_valid | c_valid | d_valid | x_valid | commit_valid["ctl"] | w_valid
        # A write's room returns the cycle after it leaves the FIFO (from a register, so
        # that `o_wb.ready` reaches no adder).
        pop = Signal()
        delta = Signal(range(-2, 3))         # a table of the four events, not an adder
        with m.Switch(Cat(pop, release, admit, scan_take)):
            for events in range(16):
                with m.Case(events):
                    m.d.comb += delta.eq((events & 1) + (events >> 1 & 1)
                                         - (events >> 2 & 1) - (events >> 3 & 1))
        m.d.sync += [pop.eq(fifo.r_en & fifo.r_rdy), room.eq(room + delta)]
        # The room is 0 next when it is at most 2 and this cycle's events take all of it
        # (decided without the sum, whose carry chain would stand between `o_wb.ready` and
        # `ready`).
        gives = [~pop & ~release, pop ^ release, pop & release]       # 0, 1, 2 returned
        takes = [~admit & ~scan_take, admit ^ scan_take, admit & scan_take]
        full_next = Signal()
        m.d.comb += full_next.eq(
            (room == 0) & ((gives[0] & takes[0]) | (gives[1] & takes[1]) | (gives[2] & takes[2]))
            | (room == 1) & ((gives[0] & takes[1]) | (gives[1] & takes[2]))
            | (room == 2) & gives[0] & takes[2])
        m.d.sync += scan_room.eq(~full_next)
        with m.Switch(mode):
            with m.Case(_Mode.RUN):
                m.d.sync += ready.eq(~self.i_flush & ~full_next & ~(admit & clash))
                with m.If(self.i_flush):
                    m.d.sync += [mode.eq(_Mode.SETTLE), flushing.eq(1)]
            with m.Case(_Mode.SETTLE):
                with m.If(~in_flight):
                    m.d.sync += [mode.eq(_Mode.SCAN), scanning.eq(1), scan_set.eq(0),
                                 scan_phase.eq(0)]
            with m.Case(_Mode.SCAN):
                with m.If(scan_phase == 0):
                    m.d.sync += scan_phase.eq(1)
                    for h, candidate in enumerate(scan_candidates):
                        group = [valid[h << split_at | l] for l in range(1 << split_at)]
                        m.d.sync += candidate.eq(Array(group)[scan_set[:split_at]])
                with m.Elif(scan_phase == 1):
                    loaded = Array(scan_candidates)[scan_set[split_at:]]
                    m.d.sync += [scan_phase.eq(2), scan_pending.eq(loaded),
                                 first_pending.eq(lowest(loaded)), scan_push.eq(loaded.any())]
                with m.Elif(~scan_push):
                    next_set()
                with m.Else():
                    with m.If(scan_room):
                        rest = scan_pending & ~first_pending
                        m.d.sync += [scan_pending.eq(rest), first_pending.eq(lowest(rest)),
                                     scan_push.eq(rest.any())]
                        with m.If(~rest.any()):
                            next_set()
            with m.Case(_Mode.DRAIN):
                with m.If(~scan_sent.any() & ~x_scan & ~w_valid & (fifo.level == 0)):
                    m.d.sync += [mode.eq(_Mode.RUN), flushing.eq(0), room.eq(self.fifo_entries),
                                 ready.eq(1)]

        m.d.comb += [fifo.w_en.eq(w_valid), fifo.w_data.eq(w_data)]

        # ---- burst draining: start at `burst` entries (or during a flush), drain to empty
        # `draining` is set from the next level, so the read enable waits on no compare.
        draining = Signal()        # a burst is under way, or the FIFO holds `burst` entries
        drain_now = Signal()
        m.d.comb += drain_now.eq(draining | flushing)
        m.d.comb += [self.o_wb.valid.eq(fifo.r_rdy & drain_now),
                     self.o_wb.payload.eq(fifo.r_data),
                     fifo.r_en.eq(self.o_wb.ready & drain_now)]
        level_next = fifo.level + (fifo.w_en & fifo.w_rdy) - (fifo.r_en & fifo.r_rdy)
        m.d.sync += draining.eq((drain_now & (level_next != 0)) | (level_next >= p.burst))

        m.d.comb += [self.o_flushing.eq(flushing),
                     self.o_idle.eq((mode == _Mode.RUN) & ~in_flight & ~Cat(valid).any()
                                    & (fifo.level == 0)),
                     self.o_overflow.eq(overflow)]
        return m
