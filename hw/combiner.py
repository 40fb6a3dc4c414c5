"""Write-combining gradient accumulator: lossless, set-associative, with flush and burst drain.

The write sequence the block produces is defined by :mod:`neuron_fabric.golden.combiner`; this
module is its cycle-level implementation: a pipeline of admission, read, compare, decide,
execute and write-back stages that takes one update a clock, and one every two clocks for
back-to-back updates to one set.
"""

from amaranth import Array, Cat, Const, Module, Mux, Shape, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..golden.combiner import CombinerParams

__all__ = ["update_layout", "write_layout", "entry_layout", "set_layout", "CREDIT_LOOP",
           "HOLD", "paced_cycles", "WriteCombiner"]


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
#: update's admission, read, compare, decide and execute cycles, the write register, the
#: FIFO's two registers. The FIFO holds this many entries beyond ``fifo_depth``, so that one
#: update a clock keeps flowing even when every update writes.
CREDIT_LOOP = 8


#: Cycles an update waits at admission when the update taken just before it is of its set.
HOLD = 1


def paced_cycles(addr, sets):
    """The cycles, counted from the first, at which updates to ``addr`` are taken when the
    source offers one every cycle and the FIFO has room: one a cycle, and :data:`HOLD`
    more after an update of the set of the update taken just before it."""
    set_of = [int(a) % sets for a in addr]
    cycles = [0] if set_of else []
    for k in range(1, len(set_of)):
        waited = k >= 2 and set_of[k - 1] == set_of[k - 2]
        cycles.append(cycles[-1] + 1 + HOLD * waited)
    return cycles


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

    Pipeline: an update taken in cycle 0 is *read* in cycle 1 (its set's row, from LUT RAM
    at a registered address, and its valid bits and pointer), *compared* in cycle 2 (every
    way's tag), *decided* in cycle 3 (hit or miss, the way to fill or the victim, the tests
    of the sum) and *executed* in cycle 4 (the new entry, the set's new state and at most
    one write, all registered); the state is written back in cycle 5. Every decision is
    made from registers: the tests that need the value alone (``T - value``,
    ``high - value``, ...) are made at admission, and each way compares its own sum with
    them, and adds the value to it, a cycle before the decision, which chooses a sum and
    adds nothing. An update whose set's state is still in flight takes it from the stage
    that holds it instead of memory (from the execute stage's result when it is read or
    compared, from the write-back register when it is read). An update of the set of the
    update taken just before it waits one cycle before its read, so that no result is
    needed in the cycle it is made: that one-cycle loop would set the clock.

    Lossless by construction: an update is accepted only when the FIFO has room for a write
    from it and from every update still in flight (credits), so a full FIFO stalls the input
    instead of dropping; an accumulation that would overflow writes the old sum back and
    restarts the entry rather than clipping (``o_overflow`` reports that this happened; it is
    a sign that ``acc_width`` is narrow, not a loss); and a flush writes back every entry and
    empties the FIFO. Values are dropped only in ``lossy`` mode, and only tiny misses
    (``|value| < small_threshold``).

    Throughput: one update per cycle while the FIFO has room (hits, misses, bypasses and
    evictions alike), except that an update of the set of the update taken just before it
    costs one cycle more. Streams that walk the address space (the gradient traces) never
    pay it; one address hammered back to back runs at half rate. The FIFO holds
    ``fifo_depth + CREDIT_LOOP`` entries, so that with downstream always ready no update
    waits for room. A flush waits for the updates in flight, then takes three cycles per
    set with no valid entry and two per set plus one per entry for the others, plus a cycle
    per FIFO-full stall, then as long as downstream takes to empty the FIFO.

    Latency: an update taken in cycle 0 is executed in cycle 4 (5 when it waited a cycle);
    its write, if any, enters the FIFO in the cycle after that. The FIFO presents writes
    only in bursts: it starts when it holds ``burst`` entries (or during a flush) and then
    keeps ``o_wb.valid`` high until it is empty, so downstream sees back-to-back writes.
    With ``burst=1`` a write is offered six cycles after its update was taken.

    Backpressure: ``o_wb`` follows the stream rules (``valid`` never waits for ``ready`` and
    is held until the transfer). ``i_upd.ready`` comes from a register: it is low in the
    cycle after an update that waits, while a flush is in progress, and while the FIFO has
    no room for one more write beside the writes of the updates in flight (an update that
    writes nothing returns its room the cycle after its execution, one that writes when its
    write leaves the FIFO).

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
    pipeline : _Pipeline
        The stages' registers, set by ``elaborate``: the formal specification
        (:mod:`neuron_fabric.formal.combiner`) states its invariants over them.

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
        pipe = self.pipeline = _Pipeline(m, self.params, self.fifo_entries)
        pipe.admit(self.i_upd, self.i_flush)
        pipe.read()
        pipe.compare()
        pipe.decide()
        pipe.execute()
        pipe.write_back()
        pipe.count_room()
        pipe.flush(self.i_flush)
        pipe.drain(self.o_wb)
        m.d.comb += [self.o_flushing.eq(pipe.flushing), self.o_idle.eq(pipe.idle),
                     self.o_overflow.eq(pipe.overflow)]
        return m


class _Stage:
    """An update's registers in one stage of the pipeline: valid bit, address, value."""

    def __init__(self, name, p):
        self.valid = Signal(name=f"{name}_valid")
        self.addr = Signal(p.addr_width, name=f"{name}_addr")
        self.value = Signal(signed(p.value_width), name=f"{name}_value")
        self.set, self.tag = _split(self.addr, p)

    def load(self, valid, addr, value):
        return [self.valid.eq(valid), self.addr.eq(addr), self.value.eq(value)]

    def follow(self, stage):
        return self.load(stage.valid, stage.addr, stage.value)


def _split(addr, p):
    """An address's set (its low bits) and tag (the rest)."""
    return addr[:p.set_bits], addr[p.set_bits:]


def _below(a, b):
    """``a < b`` as the sign of ``a - b``: a carry chain whose last bit is the answer."""
    return (a - b)[-1]


def _tests(p, acc, bounds, merged_all):
    """The tests of a sum ``acc + v`` made against ``v``'s bounds, so that no adder stands
    before them (see :func:`tests_layout`). ``acc`` may be three copies of the entry's sum,
    one for each pair of comparisons."""
    fit, reach, zero = acc if isinstance(acc, tuple) else (acc,) * 3
    reaches = (~_below(reach, bounds.up) | ~_below(bounds.down, reach)
               if p.threshold is not None else Const(0))
    return Cat(_below(bounds.hi, fit) | _below(fit, bounds.lo), reaches, merged_all,
               ~(_below(bounds.zero, zero) | _below(zero, bounds.zero)))


def _outcome_of(tests):
    """What ``tests`` mean for a hit: (keeps the entry, writes, stores the sum)."""
    t = data.View(tests_layout(), tests)
    return Cat(t.overflows | ~(t.reaches | t.merged_all | t.cancels),
               t.overflows | t.reaches | (t.merged_all & ~t.cancels), ~t.overflows)


def _lowest(bits):
    """The lowest set bit of ``bits``, one-hot."""
    return Cat(bits[w] & ~bits[:w].any() if w else bits[0] for w in range(len(bits)))


class _Pipeline:
    """The combiner's registers and stages. An update taken in cycle 0 is *read* in cycle 1
    (its set's row from the ways' memories), *compared* in cycle 2 (every way's tag), has its
    outcome *decided* in cycle 3 (hit or miss, the way to fill, the sum's tests) and is
    *executed* in cycle 4 (the new entry; the set's new state and the write registered);
    the state is written back in cycle 5. Each stage method drives the registers of the
    stage after it and reads the results still in flight where its set's state is older
    than theirs."""

    def __init__(self, m, p, fifo_entries):
        self.m, self.p, self.fifo_entries = m, p, fifo_entries
        ways = p.ways
        self.ent_layout = entry_layout(p.tag_width, p.max_updates, p.acc_width)
        self.row_layout = data.ArrayLayout(self.ent_layout, ways)
        self.ctl_layout = data.StructLayout({"bits": ways, "ptr": ways})
        self.state_layout = set_layout(p.tag_width, p.max_updates, p.acc_width, ways)
        # A value's bounds: wide enough for a bound less a second value (the update ahead).
        self.bound_shape = signed(max(p.acc_width, p.value_width + 1) + 2)
        # The valid bits and pointers are read by the set's low `split_at` bits (one
        # candidate for each value of the others), then by the others, a cycle later.
        self.split_at = min(p.set_bits, 3)
        self.groups = p.sets >> self.split_at

        # The update in each stage.
        self.held, self.r, self.c, self.d, self.x = (
            _Stage(name, p) for name in ("held", "r", "c", "d", "x"))

        self._declare_buffer(m, p, ways)
        self._declare_stages(p, ways)
        self._declare_results(p, ways)
        self._declare_flush(m, p, ways, fifo_entries)

    def _declare_buffer(self, m, p, ways):
        """The buffer: each way's entries in LUT RAM, in three memories (the tag's halves,
        the count and sum), read from registered addresses, a copy each; the valid bits and
        round-robin pointers in registers, so that reset empties the buffer."""
        entry_bits = Shape.cast(self.ent_layout).width
        parts = {"tag_lo": (0, p.tag_width // 2), "tag_hi": (p.tag_width // 2, p.tag_width),
                 "sum": (p.tag_width, entry_bits)}
        self.parts = {name: bits for name, bits in parts.items() if bits[1] > bits[0]}
        self.rd_set = {user: Signal(range(p.sets), name=f"rd_set_{user}", attrs={"keep": 1})
                       for user in [f"w{w}_{part}" for w in range(ways) for part in self.parts]
                       + [f"ctl{h}" for h in range(self.groups)]}
        self.way_read, self.way_write, self.memories = [], [], []
        for w in range(ways):
            ports, memories = {}, {}
            for part, (start, stop) in self.parts.items():
                memory = memories[part] = m.submodules[f"way{w}_{part}"] = Memory(
                    shape=stop - start, depth=p.sets, init=[])
                ports[part] = (memory.read_port(domain="comb"), memory.write_port())
                m.d.comb += ports[part][0].addr.eq(self.rd_set[f"w{w}_{part}"])
            self.memories.append(memories)
            self.way_read.append(data.View(self.ent_layout,
                                           Cat(ports[part][0].data for part in self.parts)))
            self.way_write.append(ports)
        self.valid = Array(Signal(ways, name=f"valid_s{s}") for s in range(p.sets))
        self.victim_ptr = Array(Signal(ways, name=f"victim_s{s}", init=1)
                                for s in range(p.sets))

    def _declare_stages(self, p, ways):
        """The registers of admission, read and compare."""
        # Admission.
        self.room = Signal(range(self.fifo_entries + 1), init=self.fifo_entries)
        self.ready = Signal(init=1)
        self.taken = Signal()
        self.clash = Signal()      # the update taken is of the set of the one taken before
        self.r_bounds = Signal(bounds_layout(self.bound_shape))
        # Read.
        self.r_from_x = self.r_from_commit = None     # selects, registered at admission
        self.c_candidates = [Signal(self.ctl_layout, name=f"c_ctl{h}")
                             for h in range(self.groups)]
        self.c_row = Signal(self.row_layout)
        self.c_side_ctl = Signal(self.ctl_layout)
        self.c_pairs = Signal(data.ArrayLayout((p.tag_width + 1) // 2, ways))
        self.c_same_x = Signal()    # of the address of the update two ahead
        self.c_bounds = Signal(bounds_layout(self.bound_shape))
        self.c_bounds_2 = Signal(bounds_layout(self.bound_shape))    # less that one's value
        # Compare.
        self.c_view = Signal(self.state_layout)
        self.d_view = Signal(self.state_layout)
        self.d_match = Signal(ways)
        self.d_big, self.d_update, self.d_keep, self.d_evict = (
            Signal(name=f"d_{name}") for name in ("big", "update", "keep", "evict"))
        self.d_tests = Signal(data.ArrayLayout(tests_layout(), ways))
        self.d_follows_2 = Signal()    # the hit is in the way the update two ahead touched
        self.d_tests_2 = Signal(tests_layout())
        # The sum of each way's entry with the value, and of the way the update two ahead
        # touched, a cycle ahead of the choice: decide chooses a sum, it does not add.
        sum_shape = signed(p.acc_width + 1)
        self.d_sums = Signal(data.ArrayLayout(sum_shape, ways))
        self.d_sum_2 = Signal(sum_shape)

    def _declare_results(self, p, ways):
        """The registers of decide and execute: the outcome, the set's new state and the
        write."""
        # Decide: the outcome, a copy of each select for each field it chooses.
        self.x_hit = Signal(ways, attrs={"keep": 1})
        self.x_hit_any = Signal()
        self.x_fill = Signal(ways, attrs={"keep": 1})     # for compare's view
        self.x_new_tag, self.x_new_sum, self.x_victim = (
            Signal(ways, name=name, attrs={"keep": 1})
            for name in ("x_new_tag", "x_new_sum", "x_victim"))
        self.x_touched = Signal(attrs={"keep": 1})        # hits or fills a way
        self.x_evict, self.x_through, self.x_big = Signal(), Signal(), Signal()
        self.x_kept, self.x_ptr = Signal(ways), Signal(ways)
        self.x_keeps = Signal()      # a hit leaves the entry valid
        self.x_pushes = Signal()     # a hit writes
        self.x_stores = Signal()     # a hit stores its sum (else the value, count 1)
        self.x_entry = Signal(self.ent_layout, attrs={"keep": 1})    # the hit's, before
        self.x_sum_c = tuple(Signal(signed(p.acc_width), name=f"x_sum_c_{kind}",
                                    attrs={"keep": 1}) for kind in ("fit", "reach", "zero"))
        self.x_total = Signal(signed(p.acc_width + 1))
        self.x_row = Signal(self.row_layout)
        self.summed = self.x_hit_any & self.x_stores      # the execution sums into its way
        # Execute.
        self.new_entry = Signal(self.ent_layout)
        self.x_out = Signal(self.state_layout)     # the set's state after the execution
        self.commit = Signal(self.state_layout)
        users = [f"w{w}" for w in range(ways)] + ["ctl"]
        self.commit_valid, self.commit_set = (
            {user: Signal(shape, name=f"commit_{name}_{user}", attrs={"keep": 1})
             for user in users}
            for name, shape in (("valid", 1), ("set", range(p.sets))))
        self.w_valid = Signal()
        self.w_sum = Signal()       # the write is the hit's sum
        self.w_evict = Signal()     # the write is the victim's entry
        self.w_delta = Signal(signed(p.acc_width))
        self.w_victim = Signal(self.ent_layout)
        self.w_addr = Signal(p.addr_width)
        self.w_value = Signal(signed(p.value_width))
        self.release = Signal()     # an execution without a write returns its room
        self.overflow = Signal()

    def _declare_flush(self, m, p, ways, fifo_entries):
        """The flush's registers, the FIFO and the block's state."""
        self.mode = Signal(_Mode)
        self.flushing = Signal()    # mode is not RUN
        self.scanning = Signal()    # mode is SCAN
        self.scan_set = Signal(range(p.sets))
        self.scan_phase = Signal(range(3))
        self.scan_candidates = [Signal(ways, name=f"scan_bits{h}")
                                for h in range(self.groups)]
        self.scan_pending = Signal(ways)
        self.first_pending = Signal(ways, attrs={"keep": 1})    # written next
        self.scan_push = Signal()   # the scan has an entry to write
        self.scan_room = Signal()   # the FIFO has room for one more write
        self.scan_take = Signal()
        self.scan_sent = Signal(ways)      # the way taken, as its row enters decide
        self.x_scan = Signal()             # the victim in execute is a scanned entry
        self.scan_set_d = Signal.like(self.scan_set)
        self.scan_set_x = Signal.like(self.scan_set)
        self.scan_clear = Signal()         # the scan is over: every valid bit is cleared
        # Drain.
        wb_layout = write_layout(p.addr_width, p.acc_width)
        self.fifo = m.submodules.wb_fifo = SyncFIFO(width=Shape.cast(wb_layout).width,
                                                    depth=fifo_entries)
        self.w_data = Signal(wb_layout)
        self.pop = Signal()
        self.in_flight = Cat(self.held.valid, self.r.valid, self.c.valid, self.d.valid,
                             self.x.valid, self.commit_valid["ctl"], self.w_valid).any()
        self.idle = ((self.mode == _Mode.RUN) & ~self.in_flight & ~Cat(self.valid).any()
                     & (self.fifo.level == 0))

    # -- tools -----------------------------------------------------------------------------

    def copies(self, name, value, *, shape=1, users=None):
        """Registers of ``value``, one for each way and one for the pointer (or one for each
        of ``users``), so that no select drives more than one way's bits (``keep``: synthesis
        must not merge them)."""
        users = users or [f"w{w}" for w in range(self.p.ways)] + ["ptr"]
        signals = [Signal(shape, name=f"{name}_{user}", attrs={"keep": 1}) for user in users]
        self.m.d.sync += [copy.eq(value) for copy in signals]
        return signals

    def field_copies(self, name, value):
        """Copies of a select that chooses rows: one for each way's tag, one for each way's
        count and sum, one for the rest (``"ptr"``)."""
        users = [f"w{w}_{field}" for w in range(self.p.ways) for field in ("tag", "sum")]
        return dict(zip(users + ["ptr"], self.copies(name, value, users=users + ["ptr"])))

    def choose_row(self, dest, sources, selects):
        """Register into ``dest`` the first of ``sources`` (``(name, row)``) whose copy of
        ``selects[name]`` is high, else the last."""
        m = self.m
        for w in range(self.p.ways):
            for field, parts in (("tag", lambda e: [e.tag]), ("sum", lambda e: [e.count, e.acc])):
                *chosen, (_, otherwise) = sources
                for k, (name, row) in enumerate(chosen):
                    with (m.If if k == 0 else m.Elif)(selects[name][f"w{w}_{field}"]):
                        m.d.sync += [a.eq(b) for a, b in zip(parts(dest[w]), parts(row[w]))]
                with m.Else():
                    m.d.sync += [a.eq(b) for a, b in zip(parts(dest[w]), parts(otherwise[w]))]

    # -- stages ----------------------------------------------------------------------------

    def admit(self, i_upd, i_flush):
        """Take an update when ``ready`` (a register: the FIFO has room for a write from it
        and from every update in flight, and no flush is under way). An update of the set of
        the one taken just before waits a cycle (``held``), so that two updates of a set are
        never less than two cycles apart and no result is needed in the cycle it is made.
        Registered for the read: the address of the set to read, the value's bounds and
        whether the updates now deciding and executing are of this set."""
        m, p, upd = self.m, self.p, i_upd.payload
        held, r = self.held, self.r
        m.d.comb += [i_upd.ready.eq(self.ready), self.taken.eq(i_upd.valid & self.ready),
                     self.clash.eq(r.valid & (_split(upd.addr, p)[0] == r.set))]
        m.d.sync += held.load(self.taken & self.clash, upd.addr, upd.value)
        addr = Mux(held.valid, held.addr, upd.addr)
        value = Mux(held.valid, held.value, upd.value)
        m.d.sync += r.load(self.taken & ~self.clash | held.valid, addr, value)
        # A sum acc + v does not fit when acc > high - v or acc < low - v, reaches the
        # threshold when acc >= T - v or acc <= -T - v, is 0 when acc == -v.
        low, high = p.acc_range
        m.d.sync += [self.r_bounds.hi.eq(high - value), self.r_bounds.lo.eq(low - value),
                     self.r_bounds.zero.eq(-value)]
        if p.threshold is not None:
            m.d.sync += [self.r_bounds.up.eq(p.threshold - value),
                         self.r_bounds.down.eq(-p.threshold - value)]
        a_set = _split(addr, p)[0]
        m.d.sync += [copy.eq(Mux(self.scanning, self.scan_set, a_set))
                     for copy in self.rd_set.values()]
        # During the read, the update now deciding executes and the one executing commits:
        # the read misses their results.
        self.r_from_x = self.field_copies("r_from_x", self.d.valid & (a_set == self.d.set))
        self.r_from_commit = self.field_copies("r_from_commit",
                                               self.x.valid & (a_set == self.x.set))

    def read(self):
        """Register the set's row, its valid bits and pointer (first step) and every way's
        tag compared with the update's by pairs of bits: from memory, or from the result of
        the update executing or committing now when it is of the same set."""
        m, p, r, c = self.m, self.p, self.r, self.c
        m.d.sync += c.follow(r)
        for h, candidate in enumerate(self.c_candidates):
            group = [Cat(self.valid[h << self.split_at | low],
                         self.victim_ptr[h << self.split_at | low])
                     for low in range(1 << self.split_at)]
            m.d.sync += candidate.eq(Array(group)[self.rd_set[f"ctl{h}"][:self.split_at]])
        sources = [("x", self.x_out.row), ("commit", self.commit.row), ("read", self.way_read)]
        selects = {"x": self.r_from_x, "commit": self.r_from_commit}
        self.choose_row(self.c_row, sources, selects)

        def pairs(tag):
            return Cat(tag[i:i + 2] == r.tag[i:i + 2] for i in range(0, p.tag_width, 2))

        for w in range(p.ways):
            with m.If(self.r_from_x[f"w{w}_tag"]):
                m.d.sync += self.c_pairs[w].eq(pairs(self.x_out.row[w].tag))
            with m.Elif(self.r_from_commit[f"w{w}_tag"]):
                m.d.sync += self.c_pairs[w].eq(pairs(self.commit.row[w].tag))
            with m.Else():
                m.d.sync += self.c_pairs[w].eq(pairs(self.way_read[w].tag))
        with m.If(self.r_from_x["ptr"]):
            m.d.sync += self.c_side_ctl.eq(Cat(self.x_out.bits, self.x_out.ptr))
        with m.Else():
            m.d.sync += self.c_side_ctl.eq(Cat(self.commit.bits, self.commit.ptr))
        self.c_side_use = self.copies("c_side_use", self.r_from_x["ptr"]
                                      | self.r_from_commit["ptr"], users=["ctl"])[0]
        # The update now deciding executes while this one compares.
        self.c_from_x = self.field_copies("c_from_x", self.d.valid & (r.set == self.d.set))
        m.d.sync += [self.c_same_x.eq(r.addr == self.d.addr), self.c_bounds.eq(self.r_bounds)]
        m.d.sync += [self.c_bounds_2[name].eq(self.r_bounds[name] - self.d.value)
                     for name in BOUNDS]

    def compare(self):
        """The set's view (row, valid bits, pointer) and its ways that hold the address,
        from compare's registers or, when the update executing now is of the same set, from
        its result; the value's class; the tests of each way's sum with the value and the
        sum itself, and the same for the executing update's sum when this update hits the
        way it touched."""
        m, p, c, d = self.m, self.p, self.c, self.d
        ctl = Signal(self.ctl_layout, name="c_ctl")
        m.d.comb += ctl.eq(Mux(self.c_side_use, self.c_side_ctl,
                               Array(self.c_candidates)[c.set[self.split_at:]]))
        m.d.comb += [self.c_view.row.eq(self.c_row), self.c_view.bits.eq(ctl.bits),
                     self.c_view.ptr.eq(ctl.ptr)]
        match = Cat(self.c_pairs[w].all() for w in range(p.ways))
        # The view for decide; an execution writes only its own tag, into the way it fills.
        self.choose_row(self.d_view.row, [("x", self.x_out.row), ("view", self.c_view.row)],
                        {"x": self.c_from_x})
        from_x = self.c_from_x["ptr"]
        match_next = Cat(Mux(from_x & self.x_fill[w], self.c_same_x, match[w])
                         for w in range(p.ways))
        bits_next = Mux(from_x, self.x_out.bits, self.c_view.bits)
        m.d.sync += [self.d_match.eq(match_next), self.d_view.bits.eq(bits_next),
                     self.d_view.ptr.eq(Mux(from_x, self.x_out.ptr, self.c_view.ptr))]
        self.d_own = dict(zip(("count", "acc", "tests"),
                              self.copies("d_own", bits_next & match_next, shape=p.ways,
                                          users=["count", "acc", "tests"])))
        # The value's class: large values bypass; zero (and, lossy, tiny) misses keep
        # nothing; tiny misses do not evict.
        v = c.value
        big = (v >= p.threshold) | (v <= -p.threshold) if p.threshold is not None else Const(0)
        tiny = ((v > -p.small_threshold) & (v < p.small_threshold)
                if p.small_threshold is not None else Const(0))
        nothing = (v == 0) | (tiny if p.lossy else Const(0))
        m.d.sync += d.follow(c)
        m.d.sync += [self.d_big.eq(big), self.d_update.eq(c.valid & ~big),
                     self.d_keep.eq(c.valid & ~big & ~nothing),
                     self.d_evict.eq(c.valid & ~big & ~nothing & ~tiny)]
        # The tests of the sum, a cycle ahead of their use: each way of the view; and the
        # way the update two ahead (executing now) touched, which holds its sum (when it
        # summed) or its value (when it filled or restarted the entry).
        for w in range(p.ways):
            entry = self.c_view.row[w]
            m.d.sync += [self.d_tests[w].eq(_tests(p, entry.acc, self.c_bounds,
                                                   entry.count == p.max_updates - 1)),
                         self.d_sums[w].eq(entry.acc + c.value)]
        m.d.sync += self.d_sum_2.eq(self.new_entry.acc + c.value)
        last = Const(p.max_updates == 2)   # a filled entry has merged its last value
        m.d.sync += [
            self.d_follows_2.eq(from_x & self.c_same_x & self.x_touched),
            self.d_tests_2.eq(Mux(self.summed,
                                  _tests(p, self.x_sum_c, self.c_bounds_2,
                                         self.x_entry.count == p.max_updates - 2),
                                  _tests(p, self.x.value, self.c_bounds, last))),
        ]

    def decide(self):
        """The outcome, from registers only: the hit, or on a miss the lowest free way or
        the victim (round robin), the set's valid bits and pointer after it, what the hit's
        tests mean, the hit's entry and its sum (chosen among the sums compare made)."""
        m, p, d, view = self.m, self.p, self.d, self.d_view
        hit = Cat(self.d_update & view.bits[w] & self.d_match[w] for w in range(p.ways))
        miss = ~(view.bits & self.d_match).any()
        full = view.bits.all()
        lowest_free = _lowest(~view.bits)
        take_free = miss & self.d_keep
        evict = miss & self.d_evict & full
        fill = Cat(Mux(full, evict & view.ptr[w], take_free & lowest_free[w])
                   for w in range(p.ways))
        m.d.sync += self.x.follow(d)
        m.d.sync += [self.x_hit.eq(hit), self.x_hit_any.eq(hit.any()),
                     self.x_fill.eq(fill), self.x_new_tag.eq(fill), self.x_new_sum.eq(hit | fill),
                     self.x_victim.eq(fill | self.scan_sent),
                     self.x_touched.eq(hit.any() | (take_free & ~full) | evict),
                     self.x_evict.eq(evict), self.x_through.eq(take_free & ~self.d_evict & full),
                     self.x_kept.eq(view.bits | Mux(take_free, lowest_free, 0)),
                     self.x_ptr.eq(Mux(evict, view.ptr.rotate_left(1), view.ptr)),
                     self.x_big.eq(self.d_big)]
        # The hit's entry, tests and sum: those of the view's matching way, or, when the
        # update two ahead touched that way, the tests and sum made against its result.
        entry, tests = Signal(self.ent_layout), Signal(tests_layout())
        total = Signal.like(self.x_total)
        for w in range(p.ways):
            with m.If(self.d_own["count"][w]):
                m.d.comb += entry.count.eq(view.row[w].count)
            with m.If(self.d_own["acc"][w]):
                m.d.comb += [entry.acc.eq(view.row[w].acc), total.eq(self.d_sums[w])]
            with m.If(self.d_own["tests"][w]):
                m.d.comb += tests.eq(self.d_tests[w])
        m.d.sync += Cat(self.x_keeps, self.x_pushes, self.x_stores).eq(
            Mux(self.d_follows_2, _outcome_of(self.d_tests_2), _outcome_of(tests)))
        m.d.sync += [self.x_entry.eq(entry),
                     self.x_total.eq(Mux(self.d_follows_2, self.d_sum_2, total)),
                     *(copy.eq(entry.acc) for copy in self.x_sum_c),
                     self.x_row.eq(view.row)]

    def execute(self):
        """The hit or filled way takes the new entry: the set's new state (``x_out``),
        registered for the write-back, and at most one write, registered for the FIFO: the
        value (bypass, written through), the hit's sum (or the old sum, when the new one
        would overflow) or the victim's entry (an eviction's, or a flush's)."""
        m, p, x = self.m, self.p, self.x
        new = self.new_entry
        m.d.comb += [new.acc.eq(Mux(self.summed, self.x_total, x.value)),
                     new.count.eq(Mux(self.summed, self.x_entry.count + 1, 1))]
        for w in range(p.ways):
            entry, out = self.x_row[w], self.x_out.row[w]
            m.d.comb += [
                out.tag.eq(Mux(self.x_new_tag[w], x.tag, entry.tag)),
                out.acc.eq(Mux(self.x_new_sum[w], new.acc, entry.acc)),
                out.count.eq(Mux(self.x_new_sum[w], new.count, entry.count)),
                self.x_out.bits[w].eq(self.x_kept[w] & ~(self.x_hit[w] & ~self.x_keeps)),
            ]
        m.d.comb += self.x_out.ptr.eq(self.x_ptr)
        m.d.sync += [self.commit.eq(self.x_out),
                     *(copy.eq(x.valid) for copy in self.commit_valid.values()),
                     *(copy.eq(x.set) for copy in self.commit_set.values())]

        hit_push = self.x_hit_any & self.x_pushes
        push = x.valid & (self.x_big | hit_push | self.x_evict | self.x_through)
        victim = Signal(self.ent_layout)
        for w in range(p.ways):
            with m.If(self.x_victim[w]):
                m.d.comb += victim.eq(self.x_row[w])
        m.d.sync += [self.w_valid.eq(push | self.x_scan), self.w_sum.eq(hit_push),
                     self.w_evict.eq(self.x_evict | self.x_scan),
                     self.w_delta.eq(Mux(self.x_stores, self.x_total, self.x_entry.acc)),
                     self.w_victim.eq(victim),
                     self.w_addr.eq(Mux(self.x_scan, self.scan_set_x, x.addr)),
                     self.w_value.eq(x.value), self.release.eq(x.valid & ~push)]
        with m.If(self.x_hit_any & ~self.x_stores):
            m.d.sync += self.overflow.eq(1)
        w_set = self.w_addr[:p.set_bits]
        m.d.comb += [
            self.w_data.addr.eq(Mux(self.w_evict, Cat(w_set, self.w_victim.tag), self.w_addr)),
            self.w_data.delta.eq(Mux(self.w_sum, self.w_delta,
                                     Mux(self.w_evict, self.w_victim.acc, self.w_value)))]

    def write_back(self):
        """The set's new state into the ways' memories and the valid and pointer registers;
        the scan's end clears every valid bit."""
        m = self.m
        with m.If(self.commit_valid["ctl"]):
            m.d.sync += [self.valid[self.commit_set["ctl"]].eq(self.commit.bits),
                         self.victim_ptr[self.commit_set["ctl"]].eq(self.commit.ptr)]
        with m.If(self.scan_clear):
            m.d.sync += [bits.eq(0) for bits in self.valid]
        for w in range(self.p.ways):
            entry = self.commit.row[w].as_value()
            for part, (start, stop) in self.parts.items():
                port = self.way_write[w][part][1]
                m.d.comb += [port.addr.eq(self.commit_set[f"w{w}"]),
                             port.data.eq(entry[start:stop]),
                             port.en.eq(self.commit_valid[f"w{w}"])]

    def count_room(self):
        """The FIFO's room for writes not yet reserved: taken by each update admitted and
        each entry a scan takes, returned when a write leaves the FIFO (a cycle later, from
        a register, so that ``o_wb.ready`` reaches no adder) or an execution writes nothing.
        Whether the room is 0 next is decided without the sum, whose carry chain would
        stand between ``o_wb.ready`` and ``ready``."""
        m, room = self.m, self.room
        events = Cat(self.pop, self.release, self.taken, self.scan_take)
        delta = Signal(range(-2, 3))     # a table of the four events, not an adder
        with m.Switch(events):
            for case in range(16):
                with m.Case(case):
                    m.d.comb += delta.eq((case & 1) + (case >> 1 & 1)
                                         - (case >> 2 & 1) - (case >> 3 & 1))
        m.d.sync += [self.pop.eq(self.fifo.r_en & self.fifo.r_rdy), room.eq(room + delta)]
        gives = [~self.pop & ~self.release, self.pop ^ self.release, self.pop & self.release]
        takes = [~self.taken & ~self.scan_take, self.taken ^ self.scan_take,
                 self.taken & self.scan_take]
        self.full_next = Signal()
        m.d.comb += self.full_next.eq(
            (room == 0) & ((gives[0] & takes[0]) | (gives[1] & takes[1]) | (gives[2] & takes[2]))
            | (room == 1) & ((gives[0] & takes[1]) | (gives[1] & takes[2]))
            | (room == 2) & gives[0] & takes[2])
        m.d.sync += self.scan_room.eq(~self.full_next)

    def flush(self, i_flush):
        """Run, then on a flush: settle (the updates in flight finish), scan (every valid
        entry is written as a victim, a set at a time, when the FIFO has room) and drain
        (the FIFO empties). The scan reads a set through the read stage in phases: its
        number goes to the read address, its valid bits are read, then its entries are
        taken, one a cycle; an entry taken goes down decide and execute to the write."""
        m, p = self.m, self.p
        m.d.comb += self.scan_take.eq(self.scanning & self.scan_push & self.scan_room)
        m.d.sync += [self.scan_sent.eq(Mux(self.scan_take, self.first_pending, 0)),
                     self.x_scan.eq(self.scan_sent.any()),
                     self.scan_set_d.eq(self.scan_set), self.scan_set_x.eq(self.scan_set_d),
                     self.scan_clear.eq(0)]

        def next_set():
            m.d.sync += [self.scan_phase.eq(0), self.scan_push.eq(0)]
            with m.If(self.scan_set == p.sets - 1):
                m.d.sync += [self.mode.eq(_Mode.DRAIN), self.scanning.eq(0),
                             self.scan_clear.eq(1)]
            with m.Else():
                m.d.sync += self.scan_set.eq(self.scan_set + 1)

        with m.Switch(self.mode):
            with m.Case(_Mode.RUN):
                m.d.sync += self.ready.eq(~i_flush & ~self.full_next
                                          & ~(self.taken & self.clash))
                with m.If(i_flush):
                    m.d.sync += [self.mode.eq(_Mode.SETTLE), self.flushing.eq(1)]
            with m.Case(_Mode.SETTLE):
                with m.If(~self.in_flight):
                    m.d.sync += [self.mode.eq(_Mode.SCAN), self.scanning.eq(1),
                                 self.scan_set.eq(0), self.scan_phase.eq(0)]
            with m.Case(_Mode.SCAN):
                with m.If(self.scan_phase == 0):
                    m.d.sync += self.scan_phase.eq(1)
                    for h, candidate in enumerate(self.scan_candidates):
                        group = [self.valid[h << self.split_at | low]
                                 for low in range(1 << self.split_at)]
                        m.d.sync += candidate.eq(Array(group)[self.scan_set[:self.split_at]])
                with m.Elif(self.scan_phase == 1):
                    loaded = Array(self.scan_candidates)[self.scan_set[self.split_at:]]
                    m.d.sync += [self.scan_phase.eq(2), self.scan_pending.eq(loaded),
                                 self.first_pending.eq(_lowest(loaded)),
                                 self.scan_push.eq(loaded.any())]
                with m.Elif(~self.scan_push):
                    next_set()
                with m.Elif(self.scan_room):
                    rest = self.scan_pending & ~self.first_pending
                    m.d.sync += [self.scan_pending.eq(rest), self.first_pending.eq(_lowest(rest)),
                                 self.scan_push.eq(rest.any())]
                    with m.If(~rest.any()):
                        next_set()
            with m.Case(_Mode.DRAIN):
                scan_done = ~self.scan_sent.any() & ~self.x_scan & ~self.w_valid
                with m.If(scan_done & (self.fifo.level == 0)):
                    m.d.sync += [self.mode.eq(_Mode.RUN), self.flushing.eq(0),
                                 self.room.eq(self.fifo_entries), self.ready.eq(1)]

    def drain(self, o_wb):
        """Writes enter the FIFO from the write register and leave in bursts: a burst starts
        when the FIFO holds ``burst`` entries (or during a flush) and runs until it is empty.
        ``draining`` is registered from the next level, so the read enable waits on no
        comparison."""
        m, fifo = self.m, self.fifo
        draining = Signal()
        drain_now = draining | self.flushing
        m.d.comb += [fifo.w_en.eq(self.w_valid), fifo.w_data.eq(self.w_data),
                     o_wb.valid.eq(fifo.r_rdy & drain_now), o_wb.payload.eq(fifo.r_data),
                     fifo.r_en.eq(o_wb.ready & drain_now)]
        level_next = fifo.level + (fifo.w_en & fifo.w_rdy) - (fifo.r_en & fifo.r_rdy)
        m.d.sync += draining.eq((drain_now & (level_next != 0)) | (level_next >= self.p.burst))
