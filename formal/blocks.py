"""Specifications of the blocks the controller is built from, each against a reference.

The references are written plainly, a lane at a time with integer arithmetic, and share no
code with the blocks: the G-Binary counts and the G-Ternary sums of ``docs/design.md``
("G-Binary", "G-Ternary", "Readouts"), the FP32 passthrough's byte-exact wires, and the
register map's field actions ("Register map"). ``tests/test_formal.py`` checks the
references themselves against the golden model.

Each lane engine is proven with its slot held in a register and fed back, as the
controller uses it: for every sequence of votes or codes, folds, clears, readouts, beats,
NUM_WORKERS and GATE, the slot equals the reference fold of what was accepted since the
last clear, and every output equals the reference's. That invariant is asserted every
cycle, so k-induction proves it for every depth.
"""

from amaranth.hdl import Assert, Assume, C, Cat, Cover, Elaboratable, Module, Mux, Signal
from amaranth.hdl import Value, signed

from ..golden.formats import Readout, count_limit, readout_lines_per_slot, sum_limit
from ..golden.regmap import Access
from ..hw import pair_fold, schedule, sign_count, ternary_gate
from ..hw.csr import CSRBlock, field_port, written_port
from ..hw.passthrough import Fp32Passthrough
from .rules import StreamRules, free, past, reset_at_start

__all__ = ["SignCountSpec", "TernaryGateSpec", "PairFoldSpec", "PassthroughSpec", "CSRSpec",
           "majority_reference", "gated_reference"]


def majority_reference(count, num_workers):
    """The G-Binary readout bits of a lane with ``count`` negative votes of ``num_workers``:
    ``(sign, not_tie)``, ``sign`` where ``2n > N`` and ``not_tie`` where ``2n != N``."""
    return (count << 1) > num_workers, (count << 1) != num_workers


def gated_reference(total, gate):
    """The G-Ternary ``GATED`` code of a lane with sum ``total`` at GATE ``gate``: the code
    of ``sign(S)`` where ``|S| >= GATE``, else ``00`` (a zero sum reads ``00`` at any gate)."""
    magnitude = Mux(total < 0, -total, total)
    passes = magnitude >= gate
    negative = passes & (total < 0)
    positive = passes & (total > 0)
    return Cat(negative | positive, negative)


def _engine_stream(m, engine):
    """An engine is a combinational stream stage: its output valid and ready follow."""
    free(m, engine.i.valid, engine.o.ready)
    m.d.comb += [Assert(engine.o.valid == engine.i.valid),
                 Assert(engine.i.ready == engine.o.ready)]


class SignCountSpec(Elaboratable):
    """:class:`~neuron_fabric.hw.sign_count.SignCountEngine` against the reference counts.

    ``max_contributions`` is the engine's own parameter: when given, the spec gives a lane at
    most that many votes between clears (an assumption on the inputs, as the controller's
    contribution bitmap guarantees) and the engine builds no saturation test.
    """

    def __init__(self, *, line_bits, max_workers, counter_bits=None, max_contributions=None):
        self.engine = sign_count.SignCountEngine(line_bits=line_bits, max_workers=max_workers,
                                                 counter_bits=counter_bits,
                                                 max_contributions=max_contributions)
        self.max_contributions = max_contributions

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        running = reset_at_start(m)
        p_in, p_out = engine.i.payload, engine.o.payload
        MW, CW, L = engine.max_workers, engine.counter_bits, engine.line_bits
        limit = count_limit(CW)
        _engine_stream(m, engine)

        clear = Signal()
        num_workers = Signal(range(MW + 1))
        free(m, clear, num_workers, p_in.votes, p_in.fold, p_in.readout, p_in.beat)
        m.d.comb += [Assume((num_workers >= 1) & (num_workers <= MW)),
                     p_in.majority.eq(sign_count.majority_thresholds(num_workers,
                                                                     max_workers=MW))]

        # The slot, as the controller holds it: the engine's counts, or empty after a clear.
        slot = Signal.like(p_in.counts)
        m.d.comb += p_in.counts.eq(slot)
        m.d.sync += slot.eq(Mux(clear, 0, p_out.counts.as_value()))

        expected_line = Signal(L)
        for lane in range(L):
            count = Signal(range(limit + 1), name=f"count_{lane}")
            votes = p_in.fold[lane] & p_in.votes[lane]
            full = count == limit
            if self.max_contributions is not None:
                m.d.comb += Assume(~votes | (count < self.max_contributions))
            m.d.sync += count.eq(Mux(clear, 0, Mux(votes & ~full, count + 1, count)))
            sign, not_tie = majority_reference(count, num_workers)
            lines = {Readout.SIGN: [sign], Readout.TERNARY: [sign, not_tie],
                     Readout.COUNTS: [count[k] for k in range(CW)]}
            bit = C(0, 1)
            for readout, readout_bits in lines.items():
                for beat, value in enumerate(readout_bits):
                    bit = Mux((p_in.readout == readout) & (p_in.beat == beat), value, bit)
            m.d.comb += expected_line[lane].eq(bit)
            with m.If(running):
                m.d.comb += [Assert(p_in.counts[lane] == count),
                             Assert(p_out.saturated[lane] == (votes & full)),
                             Assert(p_out.sign[lane] == sign),
                             Assert(p_out.not_tie[lane] == not_tie),
                             Assert(p_out.tie[lane] == ~not_tie)]
        with m.If(running):
            m.d.comb += Assert(p_out.readout == expected_line)
        # Reachable: a tie after two votes, a negative majority, and a full counter
        # that meets a vote where counters can fill.
        m.d.comb += [Cover(running & (p_in.counts[0] == 2) & p_out.tie[0]),
                     Cover(running & (p_in.counts[1] == 2) & p_out.sign[1])]
        if engine.saturates:
            m.d.comb += Cover(running & p_out.saturated[0])
        return m


class TernaryGateSpec(Elaboratable):
    """:class:`~neuron_fabric.hw.ternary_gate.TernaryGateEngine` against the reference sums.

    ``max_contributions`` as for :class:`SignCountSpec`: codes a lane is given at most."""

    #: Width of the GATE the spec tries: every gate up to past the largest sum.
    GATE_BITS = 8

    def __init__(self, *, line_bits, max_workers, counter_bits=None, max_contributions=None):
        self.engine = ternary_gate.TernaryGateEngine(
            line_bits=line_bits, max_workers=max_workers, counter_bits=counter_bits,
            max_contributions=max_contributions)
        self.max_contributions = max_contributions

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        running = reset_at_start(m)
        p_in, p_out = engine.i.payload, engine.o.payload
        MW, CW, lanes = engine.max_workers, engine.counter_bits, engine.lanes
        limit = sum_limit(MW, CW)
        sum_lines = readout_lines_per_slot(Readout.SUMS, counter_bits=CW)
        _engine_stream(m, engine)

        clear = Signal()
        gate = Signal(self.GATE_BITS)
        free(m, clear, gate, p_in.codes, p_in.fold, p_in.readout, p_in.beat)
        m.d.comb += p_in.gate_less_one.eq(ternary_gate.gate_less_one(gate, counter_bits=CW))

        slot = Signal.like(p_in.sums)
        m.d.comb += p_in.sums.eq(slot)
        m.d.sync += slot.eq(Mux(clear, 0, p_out.sums.as_value()))

        expected_line = Signal(engine.line_bits)
        for lane in range(lanes):
            total = Signal(signed(CW + 1), name=f"sum_{lane}")
            code, fold = p_in.codes[lane], p_in.fold[lane]
            step = Mux(~fold, 0, Mux(code == 0b01, 1, Mux(code == 0b11, -1, 0)))
            saturates = ((step == 1) & (total == limit)) | ((step == -1) & (total == -limit))
            # The reference's own invariants: a sum stays within its limit, and within the
            # codes given since the clear when their number is bounded.
            magnitude = Mux(total < 0, -total, total)
            m.d.comb += Assert(magnitude <= limit)
            if self.max_contributions is not None:
                given = Signal(range(self.max_contributions + 1), name=f"given_{lane}")
                counted = fold & ((code == 0b01) | (code == 0b11))
                m.d.sync += given.eq(Mux(clear, 0, given + counted))
                m.d.comb += [Assume(~counted | (given < self.max_contributions)),
                             Assert(magnitude <= given)]
            m.d.sync += total.eq(Mux(clear, 0, Mux(saturates, total, total + step)))
            gated = gated_reference(total, gate)
            lines = {Readout.GATED: [gated],
                     Readout.SUMS: [Cat(total[2 * k] if 2 * k <= CW else total[-1],
                                        total[2 * k + 1] if 2 * k + 1 <= CW else total[-1])
                                    for k in range(sum_lines)]}
            bits = C(0, 2)
            for readout, readout_bits in lines.items():
                for beat, value in enumerate(readout_bits):
                    bits = Mux((p_in.readout == readout) & (p_in.beat == beat), value, bits)
            m.d.comb += expected_line[2 * lane:2 * lane + 2].eq(bits)
            with m.If(running):
                m.d.comb += [Assert(p_in.sums[lane] == total),
                             Assert(p_out.saturated[lane] == saturates),
                             Assert(p_out.invalid[lane] == (fold & (code == 0b10))),
                             Assert(p_out.gated[2 * lane:2 * lane + 2] == gated),
                             Assert(p_out.negative[lane] == gated[1]),
                             Assert(p_out.positive[lane] == (gated == 0b01))]
        with m.If(running):
            m.d.comb += Assert(p_out.readout == expected_line)
        # Reachable: a negative sum that passes the gate, a positive one that does not,
        # an invalid code, and a full sum that meets a code where sums can fill.
        m.d.comb += [Cover(running & (p_in.sums[0] == -2) & p_out.negative[0] & (gate == 2)),
                     Cover(running & (p_in.sums[1] == 1) & (gate == 2) & ~p_out.positive[1]),
                     Cover(running & p_out.invalid[0])]
        if engine.saturates:
            m.d.comb += Cover(running & p_out.saturated[0])
        return m


class PairFoldSpec(Elaboratable):
    """:class:`~neuron_fabric.hw.pair_fold.PairFold` and
    :class:`~neuron_fabric.hw.pair_fold.PairCompare` against the reference fold and
    readouts. The blocks hold no state, so one step proves them for every input.

    The sum is the chosen row plus the addend, modulo ``2**(2C)``, for every row and every
    addend the tile forms (a -1 has every addend bit set). The comparisons are asserted on
    the sums a readout can find: two G-Binary counts of at most NUM_WORKERS for ``SIGN`` and
    ``TERNARY``, a G-Ternary sum within MAX_WORKERS of 0 for ``GATED``; their thresholds
    come from NUM_WORKERS, GATE and the readout as the control plane computes them.
    """

    #: Width of the GATE the spec tries: every gate up to past the largest sum.
    GATE_BITS = 8

    def __init__(self, *, max_workers, counter_bits=None):
        self.fold = pair_fold.PairFold(max_workers=max_workers, counter_bits=counter_bits)
        self.compare = pair_fold.PairCompare(max_workers=max_workers, counter_bits=counter_bits)

    def elaborate(self, platform):
        m = Module()
        m.submodules.fold = fold = self.fold
        m.submodules.compare = compare = self.compare
        MW, C = fold.max_workers, fold.counter_bits
        num_workers = Signal(range(MW + 1))
        gate = Signal(self.GATE_BITS)
        readout = Signal(Readout)
        low, sign, high = fold.addend_low, fold.addend_sign, fold.addend_high
        free(m, num_workers, gate, readout, low, sign, high, fold.from_last, fold.last,
             fold.chosen)
        m.d.comb += [Assume((num_workers >= 1) & (num_workers <= MW)),
                     Assume(~sign | (low & high))]
        word = Signal(schedule.fold_word_layout(max_workers=MW, counter_bits=C))
        threshold = ternary_gate.gate_less_one(gate, counter_bits=C)
        m.d.comb += [
            word.majority.eq(sign_count.majority_thresholds(num_workers, max_workers=MW)),
            word.gate_less_one.eq(threshold),
            word.low_threshold.eq(schedule.low_threshold(readout, word.majority, threshold)),
            compare.thresholds.eq(pair_fold.pair_thresholds(word)),
        ]

        row = Mux(fold.from_last, fold.last, fold.chosen)
        step = Mux(sign, (1 << 2 * C) - 1, low + (high << C))
        total = Signal(2 * C)
        # The tile compares the sum it registered; here, the sum as it leaves the adder.
        m.d.comb += [total.eq(row + step), Assert(fold.sum == total),
                     compare.row.eq(fold.sum)]

        counts = [total[:C], total[C:]]
        majority_read = (readout == Readout.SIGN) | (readout == Readout.TERNARY)
        with m.If(majority_read & (counts[0] <= num_workers) & (counts[1] <= num_workers)):
            for lane, count in enumerate(counts):
                negative, not_tie = majority_reference(count, num_workers)
                m.d.comb += [Assert(compare.sign[lane] == negative),
                             Assert(compare.tie[lane] == ~not_tie)]
        signed_total = total.as_signed()
        with m.If((readout == Readout.GATED) & (signed_total >= -MW) & (signed_total <= MW)):
            gated = gated_reference(signed_total, gate)
            m.d.comb += [Assert(compare.positive == (gated == 0b01)),
                         Assert(compare.negative == gated[1])]
        # Reachable: a tie in the low lane, a negative majority in the high one, a negative
        # sum that passes the gate and a positive one that does not.
        m.d.comb += [
            Cover(majority_read & (num_workers == 4) & (counts[0] == 2) & compare.tie[0]),
            Cover(majority_read & (counts[1] == 2) & (num_workers == 3) & compare.sign[1]),
            Cover((readout == Readout.GATED) & (signed_total == -2) & (gate == 2)
                  & compare.negative),
            Cover((readout == Readout.GATED) & (signed_total == 1) & (gate == 2)
                  & ~compare.positive),
        ]
        return m


class PassthroughSpec(Elaboratable):
    """:class:`~neuron_fabric.hw.passthrough.Fp32Passthrough`: lines byte-exact both ways,
    requests and data in order, every transfer rule, at most ``max_reads`` reads in flight
    and no data taken while none is."""

    def __init__(self, *, line_bits, max_reads):
        self.block = Fp32Passthrough(line_bits=line_bits, max_reads=max_reads)

    def elaborate(self, platform):
        m = Module()
        m.submodules.passthrough = dut = self.block
        running = reset_at_start(m)
        StreamRules.drive_input(m, dut.i_req, name="i_req")
        StreamRules.drive_input(m, dut.i_mem, name="i_mem")
        StreamRules.check_output(m, dut.o_mem, name="o_mem", active=running)
        StreamRules.check_output(m, dut.o_data, name="o_data", active=running)

        requested = dut.i_req.valid & dut.i_req.ready
        sent = dut.o_mem.valid & dut.o_mem.ready
        read_sent = sent & ~dut.o_mem.payload.write
        answered = dut.o_data.valid & dut.o_data.ready
        outstanding = Signal(range(dut.max_reads + 2))
        m.d.sync += outstanding.eq(outstanding + read_sent - answered)
        with m.If(running):
            m.d.comb += [
                Assert(Value.cast(dut.o_mem.payload) == Value.cast(dut.i_req.payload)),
                Assert(dut.o_data.payload == dut.i_mem.payload),
                Assert(requested == sent),
                Assert(answered == (dut.i_mem.valid & dut.i_mem.ready)),
                Assert(dut.reads_in_flight == outstanding),
                Assert(outstanding <= dut.max_reads),
                Assert(~answered | (outstanding != 0)),
            ]
        m.d.comb += [Cover(running & (outstanding == dut.max_reads) & dut.i_req.valid
                           & ~dut.i_req.payload.write),
                     Cover(running & read_sent & answered)]
        return m


class CSRSpec(Elaboratable):
    """:class:`~neuron_fabric.hw.csr.CSRBlock` against a reference of its register map.

    For every register and field, cycle by cycle as ``docs/design.md`` ("Register map")
    times them: a stored (RW) field holds a write's value from two cycles after its strobe;
    a W field and ``_written`` pulse the cycle after; an RW1C flag is set by the hardware and
    cleared by writing 1 (a set wins); an RW1S field is set by writing 1 and cleared by the
    hardware; a read returns, two cycles after its strobe, the register's value the cycle
    after it, and 0 where no register is.
    """

    def __init__(self, *, regmap):
        self.block = CSRBlock(regmap=regmap)
        self.regmap = regmap

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = dut = self.block
        running = reset_at_start(m)
        bus, ports = dut.bus, dut.fields
        free(m, bus.addr, bus.w_stb, bus.w_data, bus.r_stb)

        # The write seen by the reference, a cycle late, as the stored fields take it.
        write_addr = past(m, bus.addr, name="write_addr")
        write_data = past(m, bus.w_data, name="write_data")
        wrote = past(m, bus.w_stb, name="wrote")
        read_addr = past(m, bus.addr, name="read_addr")
        read = past(m, bus.r_stb, name="read")

        value_now = C(0, 32)      # the addressed register's value now, for reads
        for reg in self.regmap:
            fields = []
            written = wrote & (write_addr == reg.address)
            for f in reg.fields:
                name = field_port(reg, f)
                bits = write_data[f.offset:f.offset + f.width]
                port = getattr(ports, name, None)
                if f.access is Access.RW:
                    stored = Signal(f.width, init=f.reset, name=f"ref_{name}")
                    with m.If(written):
                        m.d.sync += stored.eq(bits)
                    fields.append((f, stored))
                    with m.If(running):
                        m.d.comb += Assert(port == stored)
                elif f.access is Access.W:
                    with m.If(running):
                        m.d.comb += Assert(port == (written & bits))
                    fields.append((f, C(0, f.width)))
                elif f.access is Access.RW1C:
                    setter = getattr(ports, name + "_set")
                    free(m, setter)
                    flag = Signal(name=f"ref_{name}")
                    m.d.sync += flag.eq(Mux(setter, 1, Mux(bus.w_stb
                                                         & (bus.addr == reg.address)
                                                         & bus.w_data[f.offset], 0, flag)))
                    fields.append((f, flag))
                    with m.If(running):
                        m.d.comb += Assert(port == flag)
                elif f.access is Access.RW1S:
                    clearer = getattr(ports, name + "_clear")
                    free(m, clearer)
                    flag = Signal(name=f"ref_{name}")
                    m.d.sync += flag.eq(Mux(bus.w_stb & (bus.addr == reg.address)
                                            & bus.w_data[f.offset], 1, Mux(clearer, 0, flag)))
                    fields.append((f, flag))
                    with m.If(running):
                        m.d.comb += Assert(port == flag)
                elif f.const is not None:
                    fields.append((f, C(f.const, f.width)))
                else:
                    free(m, port)
                    fields.append((f, port))
            if hasattr(ports, written_port(reg)):
                with m.If(running):
                    m.d.comb += Assert(getattr(ports, written_port(reg)) == written)
            word = C(0, 32)
            for f, v in fields:
                word = word | (Value.cast(v)[:min(f.width, 32 - f.offset)] << f.offset)[:32]
            value_now = Mux(read_addr == reg.address, word, value_now)
        expected = past(m, value_now, name="expected_read")
        read_answered = past(m, read, name="read_answered")
        with m.If(running & read_answered):
            m.d.comb += Assert(bus.r_data == expected)
        m.d.comb += [Cover(running & read_answered & (bus.r_data != 0)),
                     Cover(running & wrote & read)]
        return m
