"""Specification of the write combiner's no-loss contract.

Every value the combiner accepts reaches its write-back FIFO: for an arbitrary address
(``AnyConst``), in every cycle, the values accepted for it equal the deltas that entered the
FIFO for it, plus what the block still holds for it (the updates in the pipeline's stages,
the write register, the buffer's entry and the entries a flush has taken and not yet
written), plus the values it dropped. A value is dropped only where it is 0 or, in lossy
mode, a tiny miss (``|v| < small_threshold``). The FIFO is Amaranth's ``SyncFIFO``, proven
against its own contract, so what enters it leaves it in order; the spec also checks, end
to end, that at every idle cycle the deltas sent on ``o_wb`` add up to the values accepted
less those dropped.

The accounting holds in every cycle, with the FIFO's credits (its room, the reservations of
the updates in flight and its level add up to its entries), so k-induction proves it for
every depth. Sums are kept modulo ``2**(acc_width + 4)``: one step changes the accounting
by less than that, so a step that loses a value breaks the equality.

Updates arrive as an arbitrary source under the stream rules, flushes at any time, and the
memory takes writes with any pattern of backpressure.
"""

from amaranth.asserts import AnyConst
from amaranth.hdl import Array, Assert, Cat, Const, Cover, Elaboratable, Module, ResetSignal
from amaranth.hdl import Mux, Signal, signed
from amaranth.lib import data

from .rules import StreamRules, free, reset_at_start

__all__ = ["CombinerSpec"]


class CombinerSpec(Elaboratable):
    """The no-loss contract of ``combiner`` (a :class:`~neuron_fabric.hw.combiner.WriteCombiner`),
    with the stream rules on both ports and covers that show values summed, evicted and
    flushed before the combiner is idle again. ``end_to_end`` adds the check at the ports
    (see the module's text), which holds to a depth, not by induction."""

    def __init__(self, combiner, *, end_to_end=False):
        self.combiner = combiner
        self.end_to_end = end_to_end

    def elaborate(self, platform):
        m = Module()
        dut = self.combiner
        # Elaborated here, so that the spec reads the pipeline's registers.
        m.submodules.dut = dut.elaborate(platform)
        dut._MustUse__silence = True
        pipe, p = dut.pipeline, dut.params
        running = reset_at_start(m)
        StreamRules.drive_input(m, dut.i_upd, name="upd", active=running)
        StreamRules.check_output(m, dut.o_wb, name="wb", active=running)
        free(m, dut.i_flush)

        tracked = Signal(p.addr_width)
        m.d.comb += tracked.eq(AnyConst(p.addr_width))
        sum_shape = signed(p.acc_width + 4)

        def amount(matches, value):
            return Mux(matches, value, 0).as_signed()

        # The three sums: accepted, entered the FIFO, sent on o_wb.
        accepted, entered, written = (Signal(sum_shape, name=n)
                                      for n in ("accepted", "entered", "written"))
        live = ~ResetSignal()     # a transfer in a reset cycle is undone by the reset
        upd, wb, fifo = dut.i_upd.payload, dut.o_wb.payload, pipe.fifo
        in_data = pipe.w_data       # what the FIFO's write port takes
        m.d.sync += [
            accepted.eq(accepted + amount(dut.i_upd.valid & dut.i_upd.ready & live
                                          & (upd.addr == tracked), upd.value)),
            entered.eq(entered + amount(fifo.w_en & fifo.w_rdy & live
                                        & (in_data.addr == tracked), in_data.delta)),
            written.eq(written + amount(dut.o_wb.valid & dut.o_wb.ready & live
                                        & (wb.addr == tracked), wb.delta)),
        ]

        # A value that leaves no trace: a miss that keeps nothing. Only a zero may, or in
        # lossy mode a tiny value (|v| < small_threshold).
        x = pipe.x
        vanishes = (x.valid & ~pipe.x_big & ~pipe.x_hit_any & ~pipe.x_fill.any()
                    & ~pipe.x_through)
        may_vanish = x.value == 0
        if p.lossy:
            may_vanish |= (x.value > -p.small_threshold) & (x.value < p.small_threshold)
        dropped = Signal(sum_shape)
        m.d.sync += dropped.eq(dropped + amount(vanishes & live & (x.addr == tracked), x.value))

        held = self._held(m, pipe, p, tracked, amount)
        with m.If(running):
            m.d.comb += [
                Assert((accepted - entered - dropped)[:len(held)] == held[:len(held)]),
                Assert(~(vanishes & (x.addr == tracked)) | may_vanish),
                Assert(self._credits(pipe) == pipe.fifo_entries),
                Assert(~pipe.w_valid | fifo.w_rdy),
                Assert(~pipe.ready | (pipe.room != 0)),
            ]
            facts = self._modes(pipe) + self._separated(pipe)
            bits, ptr, rows = self._set_state(m, pipe, p, tracked[:p.set_bits])
            tags = [data.View(pipe.ent_layout, row).tag for row in rows]
            facts += [(ptr != 0) & ((ptr & (ptr - 1)) == 0)]
            facts += [~(bits[i] & bits[j] & (tags[i] == tags[j]))
                      for i in range(p.ways) for j in range(i + 1, p.ways)]
            for k, fact in enumerate(facts):
                holds = Signal(name=f"fact_{k}")    # named, to read in a trace
                m.d.comb += [holds.eq(fact), Assert(holds)]
            with m.If(dut.o_idle & self.end_to_end):
                m.d.comb += Assert(written[:] == (accepted - dropped)[:len(written)])

        # Covers: each way a value of the tracked address leaves, and the block idle again
        # after a flush wrote it back, with every value accounted for.
        ours = pipe.w_valid & (pipe.w_data.addr == tracked) & running
        flushed = Signal()
        with m.If(ours & pipe.flushing):
            m.d.sync += flushed.eq(1)
        m.d.comb += [
            Cover(ours & pipe.w_sum),                          # a hit's sum written
            Cover(ours & pipe.w_evict & ~pipe.flushing),       # evicted by a miss
            Cover(ours & pipe.flushing),                       # written by a flush
            Cover(running & dut.o_overflow),                   # a sum would overflow
            Cover(running & dut.o_idle & flushed & (written != 0)
                  & (written[:] == (accepted - dropped)[:len(written)])),
        ]
        if p.lossy:
            m.d.comb += Cover(running & vanishes & (x.addr == tracked) & (x.value != 0))
        return m

    @staticmethod
    def _modes(pipe):
        """What each mode allows: updates are taken only in RUN, none is in flight once a
        flush scans, and only a scan sends entries down the victim path."""
        mode, Mode = pipe.mode, pipe.mode.shape()
        run, scan, drain = (mode == Mode.RUN), (mode == Mode.SCAN), (mode == Mode.DRAIN)
        in_stages = Cat(pipe.held.valid, pipe.r.valid, pipe.c.valid, pipe.d.valid,
                        pipe.x.valid).any()
        scanned = pipe.scan_sent.any() | pipe.x_scan
        return [
            pipe.flushing == ~run,
            pipe.scanning == scan,
            ~pipe.ready | run,
            ~pipe.ready | ~pipe.held.valid,
            ~(scan | drain) | ~in_stages,
            ~scanned | scan | drain,
            (pipe.scan_sent & (pipe.scan_sent - 1)) == 0,
            ~scan | (pipe.scan_phase <= 2),
            # A scan's end clears every valid bit as the drain starts.
            ~pipe.scan_clear | drain,
            ~drain | pipe.scan_clear | ~Cat(pipe.valid).any(),
            # The scan's entries left in its set, and the first of them, written next.
            (pipe.scan_pending == 0) | scan & (pipe.scan_phase == 2),
            pipe.scan_push == pipe.scan_pending.any(),
            ~(scan & (pipe.scan_phase == 2))
            | ((pipe.scan_pending & ~pipe.valid[pipe.scan_set]) == 0),
            ~(scan & (pipe.scan_phase == 1))
            | (Array(pipe.scan_candidates)[pipe.scan_set[pipe.split_at:]]
               == pipe.valid[pipe.scan_set]),
            pipe.first_pending == (pipe.scan_pending & -pipe.scan_pending)[:len(pipe.scan_pending)],
            ~pipe.held.valid | pipe.c.valid & (pipe.c.set == pipe.held.set) & ~pipe.r.valid,
        ]

    @staticmethod
    def _credits(pipe):
        """The FIFO's room plus every reservation not yet returned: the updates in the
        stages, the entries a flush has taken, the write register, the FIFO's level and the
        returns not yet added to the room."""
        terms = [pipe.room, pipe.held.valid, pipe.r.valid, pipe.c.valid, pipe.d.valid,
                 pipe.x.valid, pipe.scan_sent.any(), pipe.x_scan, pipe.w_valid,
                 pipe.fifo.level, pipe.release, pipe.pop]
        total = Const(0, 8)
        for term in terms:
            total = total + term
        return total

    @staticmethod
    def _set_state(m, pipe, p, a_set):
        """The valid bits and each way's entry of set ``a_set`` as the next update of it
        will see them: the write-back's when it writes this set, else the buffer's."""
        commits = pipe.commit_valid["ctl"] & (pipe.commit_set["ctl"] == a_set)
        bits = Mux(commits, pipe.commit.bits, pipe.valid[a_set])
        ptr = Mux(commits, pipe.commit.ptr, pipe.victim_ptr[a_set])
        rows = []
        for w in range(p.ways):
            ports = []
            for part in pipe.parts:
                port = pipe.memories[w][part].read_port(domain="comb")
                m.d.comb += port.addr.eq(a_set)
                ports.append(port.data)
            stored = Cat(ports)
            rows.append(Mux(commits, pipe.commit.row[w].as_value(), stored))
        return bits, ptr, rows

    @staticmethod
    def _separated(pipe):
        """Two updates of one set are never in adjacent stages (the hold), and the
        write-back's copies of its valid bit and set agree."""
        stages = [(pipe.r.valid, pipe.r.set), (pipe.c.valid, pipe.c.set),
                  (pipe.d.valid, pipe.d.set), (pipe.x.valid, pipe.x.set),
                  (pipe.commit_valid["ctl"], pipe.commit_set["ctl"])]
        facts = [~(va & vb & (sa == sb)) for (va, sa), (vb, sb) in zip(stages, stages[1:])]
        facts += [copy == pipe.commit_valid["ctl"] for copy in pipe.commit_valid.values()]
        facts += [copy == pipe.commit_set["ctl"] for copy in pipe.commit_set.values()]
        return facts

    @staticmethod
    def _held(m, pipe, p, tracked, amount):
        """What the block holds for ``tracked``: the values of the updates in the stages,
        the write register's delta, the buffer entry of the address (its set's state after
        the write-back in flight) unless a flush has taken it, and the entries a flush has
        taken that are on their way to the write register."""
        a_set, a_tag = tracked[:p.set_bits], tracked[p.set_bits:]
        terms = {f"stage_{stage.valid.name[:-6]}": amount(stage.valid & (stage.addr == tracked),
                                                          stage.value)
                 for stage in (pipe.held, pipe.r, pipe.c, pipe.d, pipe.x)}
        terms["write"] = amount(pipe.w_valid & (pipe.w_data.addr == tracked), pipe.w_data.delta)

        bits, _, rows = CombinerSpec._set_state(m, pipe, p, a_set)
        mode, Mode = pipe.mode, pipe.mode.shape()
        for w in range(p.ways):
            entry = data.View(pipe.ent_layout, rows[w])
            scan_left = ((a_set > pipe.scan_set)
                         | (a_set == pipe.scan_set) & ((pipe.scan_phase < 2)
                                                       | pipe.scan_pending[w]))
            still_held = ((mode == Mode.RUN) | (mode == Mode.SETTLE)
                          | (mode == Mode.SCAN) & scan_left)
            terms[f"way{w}"] = amount(bits[w] & (entry.tag == a_tag) & still_held, entry.acc)

        # A flush's entries in flight: in decide (as the scan sent them) and in execute.
        for w in range(p.ways):
            sent = data.View(pipe.ent_layout, pipe.d_view.row[w].as_value())
            terms[f"scan_d{w}"] = amount(pipe.scan_sent[w] & (pipe.scan_set_d == a_set)
                                         & (sent.tag == a_tag), sent.acc)
            victim = data.View(pipe.ent_layout, pipe.x_row[w].as_value())
            terms[f"scan_x{w}"] = amount(pipe.x_scan & pipe.x_victim[w]
                                         & (pipe.scan_set_x == a_set)
                                         & (victim.tag == a_tag), victim.acc)
        shape = signed(p.acc_width + 4)
        total = Const(0, shape)
        for name, term in terms.items():
            named = Signal(shape, name=f"held_{name}")    # named, to read in a trace
            m.d.comb += named.eq(term)
            total = (total + named)[:len(named)].as_signed()
        return total
