"""The controller's control plane: everything narrow (docs/design.md, "Controller").

Decode, the contribution bitmaps and statuses, the CSRs, the clearing sweep, admission by
credits, and the order of responses and memory requests all live here, one small block
beside the row of lane tiles. It decides everything a tile needs ahead of time and sends it
as four registered control words, so the wide datapath never waits and no decision is made
from across the die.
"""

from types import SimpleNamespace

from amaranth.hdl import Array, C, Cat, Module, Mux, Shape, Signal, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden.controller import Op, Status
from ..golden.formats import ROUTE_SPECS, Readout, Route
from ..golden.params import ADDR_BITS, FabricParams
from ..golden.regmap import COUNTERS, ERROR_FLAGS, register_map, window_register
from ..golden.validate import check_int
from .csr import CSRBlock, field_port, written_port
from .lane_logic import KEEP, kept, kept_halves, kept_tree
from .layouts import CSRBusSignature, encoded, readout_lines
from .schedule import (BITMAP_DISTANCES, BUFFER_STAGE, FLAGS_STAGE, FORWARD_DISTANCES,
                       STATUS_STAGE, WORDS, WRITE_BACK_STAGE, Source, fold_word_layout,
                       forward_word_layout, late_word_layout, low_threshold, read_word_layout)
from .tile_row import most_readout_lines, readout_code_bits, readout_codes
from .sign_count import majority_layout, majority_thresholds
from .ternary_gate import gate_less_one

__all__ = ["ControlPlane", "request_control_layout", "response_control_layout",
           "memory_control_layout"]

#: Rows of one LUT RAM (an ECP5 DPR16X4): a deeper memory read from LUT RAM is a tree of LUTs.
LUT_RAM_ROWS = 16


def request_control_layout(*, worker_bits):
    """The narrow part of a request: what the control plane decides from."""
    return data.StructLayout({"op": Op, "addr": ADDR_BITS, "worker": worker_bits})


def response_control_layout():
    """The narrow part of a response beat; ``from_memory``: its line is the memory's data."""
    return data.StructLayout({"status": Status, "last": 1, "from_memory": 1})


def memory_control_layout():
    """The narrow part of a memory request; its line is in the tiles' buffers."""
    return data.StructLayout({"write": 1, "addr": ADDR_BITS})


class ControlPlane(wiring.Component):
    """Decides, in order, what each request does, and keeps responses in request order.

    One word enters the pipeline per clock: a request, a later line of a readout, a row of
    the clearing sweep, or nothing. The stages (cycles after the request's transfer, as
    :mod:`.schedule` declares them), each a method of its own, in this order:

    0. claim: the request's address is compared with every window's bounds (END
       registered from the CSRs a cycle earlier), and whether each window claims it is
       registered;
    1. the window is chosen from the registered claims (a readout's later lines and the
       clearing sweep's rows take the place of requests here); the read word (the row)
       leaves for the tiles;
    2. word: the word is formed; its row's bitmap is read; the forward word leaves, saying
       whether a write two or three words ahead, still in flight, has the row;
    3. status: from the bitmap (forwarded from the three words ahead); the fold word
       leaves (nothing in it waits on the status but the row's choice: the previous
       word's sum, the block RAM's row, or none), with the readout's line codes decoded as
       the word entered the stage;
    4. the bitmap is written back; flags and counters count the word; the late word (what
       the status decides), registered here first, leaves; the response's status is
       formed from the tests' registered answers;
    7. the word's response and memory request enter the buffers, whose heads are
       registered, so they reach the outputs with the tiles' slices, which enter the
       tiles' buffers at stage 8. Their credits decide admission.

    **Admission**: by credits. ``i_req.ready`` is high while the response and memory
    buffers have room for everything in flight and the longest readout; a readout of ``k``
    lines takes ``k`` words, so ``i_req.ready`` drops for the ``k - 1`` cycles after it.
    The clearing sweep also closes admission. Nothing inside waits on the outputs.

    Parameters
    ----------
    params : FabricParams
    buffer_depth : int
        Entries of the response and memory-request buffers.
    word_copies : int
        Copies of the control words' registers, each for its own group of tiles.

    Members
    -------
    i_req : ``In(stream.Signature(request_control_layout(...)))``
    csr : ``In(CSRBusSignature)``
    read_words, forward_words, fold_words, late_words : ``Out(...).array(word_copies)``
        The tiles' control words (registered; see :mod:`~neuron_fabric.hw.lane_tile`), one
        copy per group of tiles: a copy's register is free to sit between the control
        plane's logic and its tiles, so no single register drives the whole row.
    o_resp : ``Out(stream.Signature(response_control_layout()))``
        The response beat at the head of the buffer.
    o_mem : ``Out(stream.Signature(memory_control_layout()))``
        The memory request at the head of the buffer.
    saturated, invalid : ``In(1)``
        The tiles' flags, ORed; each cycle's value belongs to one word's fold, at the tiles'
        :data:`~.schedule.FLAGS_STAGE`. Only an accepted write's flags set ERRORS and count
        in INVALID_LINES: a refused write folds in the tiles too, and is not written back.
    stalled : ``In(1)``
        An output is stalled this cycle (counted in STALL_CYCLES).
    """

    def __init__(self, *, params, buffer_depth=16, word_copies=1):
        if not isinstance(params, FabricParams):
            raise TypeError(f"params must be a FabricParams, not {params!r}")
        self.params = params
        self.buffer_depth = buffer_depth
        self.word_copies = check_int("word_copies", word_copies, low=1)
        self.regmap = register_map(params)
        p = params
        self.rows = p.num_windows * p.depth
        self.readout_lines = most_readout_lines(p.counter_bits)
        if buffer_depth < self.readout_lines + 1:
            raise ValueError(f"buffer_depth must be at least {self.readout_lines + 1} (the "
                             f"longest readout and one more), not {buffer_depth!r}")
        super().__init__({
            "i_req": In(stream.Signature(request_control_layout(worker_bits=p.worker_bits))),
            "csr": In(CSRBusSignature(addr_width=self.regmap.address_bits)),
            "read_words": Out(read_word_layout(self.rows)).array(self.word_copies),
            "forward_words": Out(forward_word_layout()).array(self.word_copies),
            "fold_words": Out(fold_word_layout(max_workers=p.max_workers,
                                               counter_bits=p.counter_bits)
                              ).array(self.word_copies),
            "late_words": Out(late_word_layout()).array(self.word_copies),
            "o_resp": Out(stream.Signature(response_control_layout())),
            "o_mem": Out(stream.Signature(memory_control_layout())),
            "saturated": In(1),
            "invalid": In(1),
            "stalled": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        regs = self._registers(m)
        claim = self._claim(m, regs)
        beats = self._beats(m, claim)
        sweep = self._sweep(m, regs, claim, beats)
        word = self._word(m, claim, beats, sweep)
        flight = self._in_flight(m, word)
        self._read_and_forward_words(m, word, flight)
        bitmap_read = self._bitmap_read(m, word)
        status = self._status(m, regs, word, flight, bitmap_read)
        self._fold_and_late_words(m, regs, word, flight, status)
        self._send_words(m, word)
        self._write_back(m, word, flight, status)
        at_buffers = self._entries(m, word, status)
        self._buffers(m, at_buffers)
        self._credits(m, claim, beats, sweep, word, status)
        self._counters(m, regs, word, status)
        return m

    # ---------------------------------------------------------------- registers

    def _registers(self, m):
        """The CSR block on the bus; its fields, with ``reg(register, field)`` to name one,
        and the facts of NUM_WORKERS every stage uses, registered."""
        p = self.params
        m.submodules.csr_block = csr_block = CSRBlock(regmap=self.regmap)
        wiring.connect(m, wiring.flipped(self.csr), csr_block.bus)
        regs = csr_block.fields

        def reg(register, field):
            r = self.regmap[register]
            return getattr(regs, field_port(r, r.field(field)))

        num_workers = reg("NUM_WORKERS", "N")
        # Workers 0 .. N-1, registered: NUM_WORKERS changes only between requests, and the
        # comparisons with it would otherwise start every test of a bitmap.
        complete_mask = Signal(p.max_workers, reset_less=True)
        m.d.sync += complete_mask.eq(Cat(num_workers > i for i in range(p.max_workers)))
        return SimpleNamespace(fields=regs, reg=reg, num_workers=num_workers,
                               complete_mask=complete_mask,
                               workers_ok=(num_workers >= 1) & (num_workers <= p.max_workers))

    def _lines_of(self, readout):
        lines = C(1, range(self.readout_lines + 1))
        for r in Readout:
            lines = Mux(readout == r, readout_lines(r, counter_bits=self.params.counter_bits),
                        lines)
        return lines

    # ---------------------------------------------------------------- 0, 1: claim

    def _claim(self, m, regs):
        """Stages 0 and 1: which window claims the request, its slot and what the window's
        configuration implies, as the request's fields at stage 1 (``q_*``).

        The lowest-numbered enabled window whose [BASE, BASE + SIZE) holds the address
        (modulo 2**ADDR_BITS) claims it; its slot is the offset from BASE. What a window's
        registers imply is worked out ahead, from the CSRs, and registered; the address is
        compared with BASE and BASE + SIZE in the transfer's cycle; cycle 1 only combines."""
        p, reg, most_lines = self.params, regs.reg, self.readout_lines
        slot_bits = max(1, (p.depth - 1).bit_length())
        request = self.i_req.payload
        admit = self.i_req.valid & self.i_req.ready
        q_valid = Signal()
        q_reads = Signal()      # a READ or READ_CLEAR is at stage 1
        q_op = Signal(Shape.cast(Op), reset_less=True)
        q_addr = Signal(ADDR_BITS, reset_less=True)
        q_worker = Signal(p.worker_bits, reset_less=True)
        m.d.sync += [q_valid.eq(admit), q_reads.eq(admit & (request.op != Op.WRITE)),
                     q_op.eq(request.op), q_addr.eq(request.addr), q_worker.eq(request.worker)]
        claimed = C(0, 1)
        row, config_ok, lines = C(0, 1), C(0, 1), C(1, 1)
        route, readout = C(0, Shape.cast(Route)), C(0, Shape.cast(Readout))
        multi = C(0, 1)   # the claiming window reads out more than one line
        for w in reversed(range(p.num_windows)):
            base = reg(window_register(w, "BASE"), "ADDR")
            size = reg(window_register(w, "SIZE"), "SLOTS")
            w_route = reg(window_register(w, "CONFIG"), "ROUTE")
            w_readout = reg(window_register(w, "CONFIG"), "READOUT")
            readout_ok = Cat((w_route == spec.route)
                             & Cat(w_readout == r.readout for r in spec.readouts).any()
                             for spec in ROUTE_SPECS.values()).any()
            # The window's standing facts, a cycle behind its registers.
            end = Signal(ADDR_BITS + 1, name=f"win{w}_end", reset_less=True)
            good = Signal(name=f"win{w}_config_ok")
            w_lines = Signal(range(most_lines + 1), name=f"win{w}_lines", reset_less=True)
            w_multi = Signal(name=f"win{w}_multi", reset_less=True)
            w_good = (size <= p.depth) & readout_ok & regs.workers_ok
            m.d.sync += [end.eq(base + size),
                         good.eq(w_good), w_lines.eq(self._lines_of(w_readout)),
                         w_multi.eq(w_good & (self._lines_of(w_readout) > 1))]
            # The request against it, registered at the transfer: whether the window claims
            # the address, so that cycle 1's choices (the row the bitmaps' block RAM reads,
            # admission's multi-line test) start from registers. [BASE, END) wraps past
            # 2**ADDR_BITS when END carries out. A write of BASE or SIZE closes admission
            # (the clearing sweep), so END, a cycle behind, is never stale here; the
            # enables are the registers' own, as ENABLE's write does not close it.
            above = request.addr >= base
            below = request.addr < end[:ADDR_BITS]
            hit = Signal(name=f"win{w}_hit")
            slot = Signal(slot_bits, name=f"win{w}_slot", reset_less=True)
            m.d.sync += [hit.eq(reg("CONTROL", "ENABLE") & reg(window_register(w, "CONFIG"), "EN")
                                & Mux(end[ADDR_BITS], above | below, above & below)),
                         slot.eq(request.addr[:slot_bits] - base[:slot_bits])]
            claimed = hit | claimed
            row = Mux(hit, w * p.depth + slot, row)
            route = Mux(hit, w_route, route)
            readout = Mux(hit, w_readout, readout)
            config_ok = Mux(hit, good, config_ok)
            lines = Mux(hit, w_lines, lines)
            multi = Mux(hit, w_multi, multi)
        q_claimed, q_row, q_config_ok = Signal(), Signal(range(self.rows)), Signal()
        q_route, q_readout = Signal(Shape.cast(Route)), Signal(Shape.cast(Readout))
        q_window_lines = Signal(range(most_lines + 1))
        m.d.comb += [q_claimed.eq(claimed), q_row.eq(row), q_route.eq(route),
                     q_readout.eq(readout), q_config_ok.eq(config_ok), q_window_lines.eq(lines)]
        # A readout of k lines: the k - 1 words after it carry its later lines.
        q_lines = Signal(range(most_lines + 1))
        m.d.comb += q_lines.eq(Mux(q_claimed & q_config_ok & (q_op != Op.WRITE), q_window_lines, 1))
        return SimpleNamespace(valid=q_valid, op=q_op, addr=q_addr, worker=q_worker,
                               claimed=q_claimed, row=q_row, route=q_route, readout=q_readout,
                               config_ok=q_config_ok, lines=q_lines,
                               # The same fact, from the windows' standing facts and
                               # flip-flops only: admission waits on it.
                               multi=q_reads & multi)

    def _beats(self, m, claim):
        """Stage 1: the later lines of a readout, one word each after it (``left``: still to
        issue; ``next``: the next one's number; ``lines``: the readout's)."""
        most_lines = self.readout_lines
        beats_left = Signal(range(most_lines))     # later lines still to issue
        left_next = Signal.like(beats_left)         # and after this cycle
        next_beat = Signal(range(max(2, most_lines)))
        read_lines = Signal(range(most_lines + 1))
        m.d.comb += left_next.eq(beats_left)
        with m.If(claim.multi):
            m.d.comb += left_next.eq(claim.lines - 1)
            m.d.sync += [next_beat.eq(1), read_lines.eq(claim.lines)]
        with m.Elif(beats_left != 0):
            m.d.comb += left_next.eq(beats_left - 1)
            m.d.sync += next_beat.eq(next_beat + 1)
        m.d.sync += beats_left.eq(left_next)
        return SimpleNamespace(left=beats_left, left_next=left_next, next=next_beat,
                               lines=read_lines)

    def _sweep(self, m, regs, claim, beats):
        """Stage 1: the clearing sweep. Reset, CLEAR_SLOTS and window writes mark windows to
        clear. Admission closes; once the words in front are formed, each marked window's
        rows get an empty row, one word per cycle, behind every request taken before."""
        p = self.params
        clear_pending = Signal(p.num_windows, init=(1 << p.num_windows) - 1)
        sweeping = Signal()
        sweep_window = Signal(range(p.num_windows))
        sweep_slot = Signal(range(p.depth))
        requested = Cat(
            regs.fields.control_clear_slots
            | Cat(getattr(regs.fields, written_port(self.regmap[window_register(w, name)]))
                  for name in ("BASE", "SIZE", "CONFIG")).any()
            for w in range(p.num_windows))
        # The marks and the flag after this cycle.
        pending_next = Signal(p.num_windows)
        sweeping_next = Signal()
        marked = clear_pending | requested
        m.d.comb += [pending_next.eq(marked), sweeping_next.eq(sweeping)]
        with m.If(sweeping):
            m.d.sync += sweep_slot.eq(sweep_slot + 1)
            with m.If(sweep_slot == p.depth - 1):
                m.d.comb += sweeping_next.eq(0)
                m.d.sync += sweep_slot.eq(0)
        with m.Elif(clear_pending.any() & ~claim.valid & (beats.left == 0)):
            # Start on the lowest marked window; unmark it now, so a request that comes in
            # during its sweep marks it again.
            for w in reversed(range(p.num_windows)):
                with m.If(clear_pending[w]):
                    m.d.sync += sweep_window.eq(w)
            lowest = Signal(p.num_windows)
            m.d.comb += [lowest.eq(clear_pending & -clear_pending),
                         sweeping_next.eq(1), pending_next.eq(marked & ~lowest)]
        m.d.sync += [clear_pending.eq(pending_next), sweeping.eq(sweeping_next)]
        return SimpleNamespace(pending=clear_pending, sweeping=sweeping,
                               busy_next=pending_next.any() | sweeping_next,
                               row=sweep_window * p.depth + sweep_slot)

    # ---------------------------------------------------------------- 2: word

    def _word(self, m, claim, beats, sweep):
        """Stage 2: the word formed from the request, a later line of a readout or a row of
        the sweep (``d``), and its copy a stage later (``s``, the status stage's); ``row``:
        the word's row a cycle earlier, as the read word and the bitmaps' read take it;
        ``codes``: the readout's line codes (:func:`~.tile_row.readout_codes`) as the word
        enters the status stage."""
        p, most_lines = self.params, self.readout_lines
        word_shape = dict(
            request=1, beat_word=1, sweep=1, op=Shape.cast(Op), addr=ADDR_BITS,
            worker=p.worker_bits, claimed=1, row=range(self.rows), route=Shape.cast(Route),
            readout=Shape.cast(Readout), config_ok=1,
            beat=range(max(2, most_lines)), last_beat=1, lines=range(most_lines + 1))

        def stage(name):
            return {key: Signal(shape, name=f"{name}_{key}",
                                reset_less=key not in ("request", "beat_word", "sweep"))
                    for key, shape in word_shape.items()}

        d, s = stage("word"), stage("status")
        # A readout's later lines follow it directly and keep its route and readout.
        with m.If(claim.valid):
            m.d.sync += [d["route"].eq(claim.route), d["readout"].eq(claim.readout)]
        word_row = Signal(range(self.rows))
        m.d.comb += word_row.eq(Mux(sweep.sweeping, sweep.row, claim.row))
        m.d.sync += [
            d["request"].eq(claim.valid), d["beat_word"].eq(beats.left != 0),
            d["sweep"].eq(sweep.sweeping),
            d["op"].eq(claim.op), d["addr"].eq(claim.addr), d["worker"].eq(claim.worker),
            d["claimed"].eq(claim.claimed), d["config_ok"].eq(claim.config_ok),
            d["lines"].eq(claim.lines), d["row"].eq(word_row),
            d["beat"].eq(beats.next), d["last_beat"].eq(beats.next == beats.lines - 1),
        ]
        m.d.sync += [s[key].eq(d[key]) for key in word_shape]
        # Which kept bit each tile's line bit gives for the readout and beat (the fold word's
        # codes), decoded here once for every tile, as the word enters the status stage.
        codes = Signal(readout_code_bits(p.counter_bits), name="status_codes", reset_less=True)
        m.d.sync += codes.eq(readout_codes(d["readout"], Mux(d["beat_word"], d["beat"], 0),
                                           counter_bits=p.counter_bits))
        return SimpleNamespace(d=d, s=s, row=word_row, codes=codes)

    def _in_flight(self, m, word):
        """The writes in flight, by distance (:data:`~.schedule.BITMAP_DISTANCES`): ``w1``
        one word ahead of the status stage (stage 4), ``w2`` two words ahead (stage 5),
        ``w3`` three (stage 6); ``writes``: the word writes its row back; ``clears``: with an
        empty bitmap. ``w1``'s are loaded by the write-back (:meth:`_write_back`)."""
        p, d, s = self.params, word.d, word.s
        w1_writes, w2_writes, w3_writes = Signal(), Signal(), Signal()
        w1_clears, w2_clears, w3_clears = (Signal(name=f"w{k}_clears", reset_less=True)
                                           for k in (1, 2, 3))
        w1_row, w2_row = (Signal(range(self.rows), name=f"w{k}_row", reset_less=True)
                          for k in (1, 2))
        w1_worker, w2_worker = (Signal(p.worker_bits, name=f"w{k}_worker", reset_less=True)
                                for k in (1, 2))
        w1_bitmap, w2_bitmap, w3_bitmap = (Signal(p.max_workers, name=f"w{k}_bitmap",
                                                  reset_less=True) for k in (1, 2, 3))
        m.d.sync += [w2_writes.eq(w1_writes), w2_clears.eq(w1_clears), w2_row.eq(w1_row),
                     w2_worker.eq(w1_worker), w2_bitmap.eq(w1_bitmap),
                     w3_writes.eq(w2_writes), w3_clears.eq(w2_clears), w3_bitmap.eq(w2_bitmap)]
        # Whether the word (in the word stage) has the row of the word one, two or three
        # words ahead of it: the writes two and three ahead choose the tiles' forwarding now;
        # all three are registered for the status stage, so that it only combines, with
        # whether they are the same worker's.
        has_row_of = [ahead == d["row"] for ahead in (s["row"], w1_row, w2_row)]
        same_row, same_worker = Signal(3), Signal(3)
        m.d.sync += [same_row.eq(Cat(has_row_of)),
                     same_worker.eq(Cat(ahead == d["worker"]
                                        for ahead in (s["worker"], w1_worker, w2_worker)))]
        from_w1, from_w2, from_w3 = (
            kept(m, writes & same, f"from_w{k}")
            for k, writes, same in zip((1, 2, 3), (w1_writes, w2_writes, w3_writes), same_row))
        assert BITMAP_DISTANCES == (1, 2, 3)
        return SimpleNamespace(
            writes=[w1_writes, w2_writes, w3_writes], clears=[w1_clears, w2_clears, w3_clears],
            row=[w1_row, w2_row], worker=[w1_worker, w2_worker],
            bitmap=[w1_bitmap, w2_bitmap, w3_bitmap], has_row_of=has_row_of,
            same_worker=same_worker, hit=[from_w1, from_w2, from_w3])

    def _read_and_forward_words(self, m, word, flight):
        """The read word (stage 1: the row) and the forward word (stage 2). The tiles read
        the row a cycle after the read word leaves; a write two or three words ahead of this
        word is not in their block RAM by then, so they copy its sum instead: the nearest
        write's (:data:`~.schedule.FORWARD_DISTANCES`), chosen here, unless it emptied the
        slot (a READ_CLEAR, a row of the sweep), whose row is empty. The write one word ahead
        is the status stage's to see (the fold word's ``from_last`` and ``empty``)."""
        read_word = Signal.like(self.read_words[0], name="read_word_next")
        m.d.comb += read_word.row.eq(word.row)
        forward_word = Signal.like(self.forward_words[0], name="forward_word_next")
        # The word is in the word stage: the write ``k`` words ahead is ``w{k - 1}``, nearest
        # first.
        choose = m.If
        for distance, source in FORWARD_DISTANCES.items():
            ahead = distance - 2
            with choose(flight.writes[ahead] & flight.has_row_of[distance - 1]):
                m.d.comb += forward_word.source.eq(Mux(flight.clears[ahead], Source.NONE,
                                                       source))
            choose = m.Elif
        with m.Else():
            m.d.comb += forward_word.source.eq(Source.NONE)
        word.read_word, word.forward_word = read_word, forward_word

    def _bitmap_read(self, m, word):
        """The row's contribution bitmap, read as the word enters the word stage, its read
        data registered (in a block RAM, its output register), in time for the status stage.
        Asked for by name where the rows outnumber one LUT RAM's: a few kilobits (fewer than
        16 workers) would otherwise become LUT RAM, whose read is then a tree of LUTs after
        the row's address, not a clocked output. Sets ``word.bitmaps_wr``, the write port."""
        MW, rows = self.params.max_workers, self.rows
        bitmaps = memory.Memory(shape=unsigned(MW), depth=rows, init=[],
                                attrs={"ram_style": "block"} if rows > LUT_RAM_ROWS else None)
        m.submodules.bitmaps = bitmaps
        bitmaps_rd = bitmaps.read_port()
        word.bitmaps_wr = bitmaps.write_port()
        bitmap_read = Signal(MW, reset_less=True)
        m.d.comb += [bitmaps_rd.addr.eq(word.row), bitmaps_rd.en.eq(1)]
        m.d.sync += bitmap_read.eq(bitmaps_rd.data)
        return bitmap_read

    # ---------------------------------------------------------------- 3: status

    def _status(self, m, regs, word, flight, bitmap_read):
        """Stage 3: the word's status, from the part the request alone decides and the
        answers of the bitmap's tests (:meth:`_decided`, :meth:`_bitmap_tests`), and what
        follows from it: the flags the control plane raises, whether the word writes its row
        back, whether it answers, and whether it is an accepted write."""
        s = word.s
        st = self._decided(m, regs, word)
        st.is_write = s["op"] == Op.WRITE
        st.is_read_clear = s["op"] == Op.READ_CLEAR
        self._bitmap_tests(m, regs, flight, bitmap_read, st)
        # The status: the tests' answers join the decided part, which is OK (encoded 0)
        # whenever a test decides.
        status = Signal(Shape.cast(Status))
        m.d.comb += status.eq(st.decided_status | encoded(
            {Status.NOT_READY: st.not_ready, Status.DUPLICATE: st.is_duplicate},
            none=Status.OK))
        # The folds' flags come from the tiles; the rest are decided here.
        fold_flags = {flag for spec in ROUTE_SPECS.values() for flag in spec.flags}
        flags = {flag: Signal(name=f"flag_{flag.lower()}") for flag in ERROR_FLAGS
                 if flag not in fold_flags}
        m.d.comb += [flags["BAD_REQUEST"].eq(st.decided_flags[0]),
                     flags["BAD_CONFIG"].eq(st.decided_flags[1]),
                     flags["DUPLICATE"].eq(st.is_duplicate),
                     flags["NOT_READY"].eq(st.not_ready)]
        st.flags = flags
        st.request = s["request"]
        st.to_memory = ~s["claimed"] & (s["op"] != Op.READ_CLEAR)
        st.accepted_write = st.asks_duplicate & ~st.is_duplicate
        st.answers_readout = st.asks_complete & ~st.not_ready
        read_clears = st.asks_read_clear & ~st.not_ready
        # A readout's later lines answer only when its first did.
        readout_answered = Signal()
        with m.If(st.request):
            m.d.sync += readout_answered.eq(st.answers_readout)
        st.readout_answered = readout_answered
        st.beat_answers = s["beat_word"] & readout_answered
        st.writes_row = st.accepted_write | read_clears | s["sweep"]
        return st

    def _decided(self, m, regs, word):
        """What the status needs besides the bitmap, worked out as the word enters the
        stage: a refusal the request alone decides, or which of the bitmap's two tests
        decides it. The stage then only meets the tests' answers with these."""
        MW, d = self.params.max_workers, word.d
        worker_bit = Signal(MW, reset_less=True)
        full_mask = Signal(MW, reset_less=True)
        m.d.sync += [worker_bit.eq(Cat(d["worker"] == i for i in range(MW))),
                     full_mask.eq(regs.complete_mask)]
        decided_status = Signal(Shape.cast(Status), reset_less=True)  # OK when a test decides
        decided_flags = Signal(2, reset_less=True)                    # BAD_REQUEST, BAD_CONFIG
        asks_duplicate = Signal()   # a request to write a window: refused if a duplicate
        asks_complete = Signal()    # a request to read a window: refused unless complete
        asks_read_clear = Signal()  # ... and to clear it
        d_read_clear = d["op"] == Op.READ_CLEAR
        m.d.sync += [asks_duplicate.eq(0), asks_complete.eq(0), asks_read_clear.eq(0)]
        with m.If(~d["claimed"]):
            m.d.sync += [decided_status.eq(Mux(d_read_clear, Status.BAD_REQUEST, Status.OK)),
                         decided_flags.eq(Cat(d_read_clear, 0))]
        with m.Elif(~d["config_ok"]):
            m.d.sync += [decided_status.eq(Status.BAD_REQUEST), decided_flags.eq(0b10)]
        with m.Elif(d["op"] == Op.WRITE):
            bad_worker = d["worker"] >= regs.num_workers
            m.d.sync += [decided_status.eq(Mux(bad_worker, Status.BAD_REQUEST, Status.OK)),
                         decided_flags.eq(Cat(bad_worker, 0)),
                         asks_duplicate.eq(d["request"] & ~bad_worker)]
        with m.Else():
            m.d.sync += [decided_status.eq(Status.OK), decided_flags.eq(0),
                         asks_complete.eq(d["request"]),
                         asks_read_clear.eq(d["request"] & d_read_clear)]
        return SimpleNamespace(worker_bit=worker_bit, full_mask=full_mask,
                               decided_status=decided_status, decided_flags=decided_flags,
                               asks_duplicate=asks_duplicate, asks_complete=asks_complete,
                               asks_read_clear=asks_read_clear)

    def _bitmap_tests(self, m, regs, flight, bitmap_read, st):
        """The bitmap's two tests, asked only where they decide, so that each answer is
        already the refusal: ``st.is_duplicate`` and ``st.not_ready``. The block RAM's read
        data, the farthest and latest of their inputs, meets the rest in the last two gates
        before each answer; ``st.bitmap_in`` is the bitmap the word writes back on."""
        MW = self.params.max_workers
        (from_w1, from_w2, from_w3), (w1_bitmap, w2_bitmap, w3_bitmap) = flight.hit, flight.bitmap
        st.bitmap_in = bitmap_in = Signal(MW)
        m.d.comb += bitmap_in.eq(Mux(from_w1, w1_bitmap, Mux(from_w2, w2_bitmap,
                                                             Mux(from_w3, w3_bitmap, bitmap_read))))

        def wrote(bitmap):
            return [(bitmap[i:i + 2] & st.worker_bit[i:i + 2]).any() for i in range(0, MW, 2)]

        def done(bitmap, mask):
            return [(bitmap[i:i + 2] | ~mask[i:i + 2]).all() for i in range(0, MW, 2)]

        # Whether the worker wrote the slot, asked of the writes in flight by worker number:
        # a fold of the row by the same worker nearer than any clear of it; else, if none is
        # cleared, the block RAM's bit.
        folded_here, none_cleared = C(0, 1), C(1, 1)
        for hit, clears, same in zip(flight.hit, flight.clears, flight.same_worker):
            folded_here = folded_here | (none_cleared & hit & ~clears & same)
            none_cleared = none_cleared & ~(hit & clears)
        folded_here = kept(m, st.asks_duplicate & folded_here, "in_flight_wrote")
        ram_decides_duplicate = kept(m, st.asks_duplicate & none_cleared,
                                     "ram_decides_duplicate")
        st.is_duplicate = kept(m, folded_here | (ram_decides_duplicate & Cat(
            kept_halves(m, wrote(bitmap_read), "any", "bitmap_wrote")).any()), "is_duplicate")
        # Whether every worker did, a fact of a bitmap alone: the bitmaps that will be two and
        # three words ahead of the word are tested as it enters the stage, against the mask it
        # will use; the one a word ahead, now; the nearest write's answer is taken.
        farther_complete = Signal(2, reset_less=True)
        m.d.sync += farther_complete.eq(Cat(
            kept_tree(m, done(bitmap, regs.complete_mask), "all", f"w{k}_complete")
            for k, bitmap in ((2, w1_bitmap), (3, w2_bitmap))))
        farther = kept(m, Mux(from_w2, farther_complete[0], farther_complete[1]),
                       "farther_complete")
        nearest = Cat(kept_halves(m, done(w1_bitmap, st.full_mask), "all", "w1_complete")).all()
        in_flight = kept(m, from_w1 | from_w2 | from_w3, "in_flight")
        # The tiles' row is the block RAM's where no write in flight has it and the slot is
        # not empty: an empty slot has no row (the tiles never clear one).
        st.from_ram = kept(m, ~in_flight & Cat(kept_halves(
            m, [bitmap_read[i:i + 2].any() for i in range(0, MW, 2)], "any", "bitmap_used")
        ).any(), "from_ram")
        in_flight_not_ready = kept(m, st.asks_complete & in_flight
                                   & ~Mux(from_w1, nearest, farther), "in_flight_not_ready")
        ram_decides_complete = kept(m, st.asks_complete & ~in_flight, "ram_decides_complete")
        st.not_ready = kept(m, in_flight_not_ready | (ram_decides_complete & ~Cat(
            kept_halves(m, done(bitmap_read, st.full_mask), "all", "bitmap_complete")).all()),
            "not_ready")

    def _fold_and_late_words(self, m, regs, word, flight, st):
        """The fold word (stage 3) and the late word (registered at stage 3, so it leaves at
        stage 4). The fold word waits on no status but the row's choice: every write to a
        window folds as if accepted. The late word says a cycle later whether the sum is
        written back; a refused write's flags are dropped (:meth:`_counters`). A READ_CLEAR
        and the sweep write no row: the bitmap they empty says the slot has none."""
        p, s = self.params, word.s
        gbinary = s["route"] == Route.GBINARY
        writes_window = st.request & s["claimed"] & st.is_write
        fold_word = Signal.like(self.fold_words[0], name="fold_word_next")
        majority = data.View(majority_layout(p.max_workers),
                             majority_thresholds(regs.num_workers, max_workers=p.max_workers))
        gate_threshold = gate_less_one(regs.reg("GATE", "GATE"), counter_bits=p.counter_bits)
        m.d.comb += [
            fold_word.fold_gbinary.eq(writes_window & gbinary),
            fold_word.fold_gternary.eq(writes_window & ~gbinary),
            fold_word.fold_any.eq(writes_window),
            fold_word.from_last.eq(flight.hit[0] & ~flight.clears[0]),
            fold_word.from_ram.eq(st.from_ram),
            fold_word.empty.eq(flight.hit[0] & flight.clears[0]),
            fold_word.capture.eq(~s["beat_word"]),
            fold_word.codes.eq(word.codes),
            fold_word.majority.eq(majority),
            fold_word.gate_less_one.eq(gate_threshold),
            fold_word.low_threshold.eq(low_threshold(s["readout"], majority, gate_threshold)),
            fold_word.push_response.eq(st.request | st.beat_answers),
            fold_word.push_memory.eq(st.request & st.to_memory),
            fold_word.memory_read.eq(st.request & st.to_memory & ~st.is_write),
        ]
        # The status is registered here, beside the logic that makes it, before its copies
        # cross the die: the late word leaves a cycle after the fold word.
        late_word = Signal.like(self.late_words[0], name="late_word_status")
        m.d.sync += [late_word.write_row.eq(st.accepted_write),
                     late_word.quiet.eq(~st.beat_answers & ~st.answers_readout)]
        word.fold_word, word.late_word = fold_word, late_word

    def _send_words(self, m, word):
        """The control words' copies, one register each for its own group of tiles, kept
        through synthesis, so that each can sit between the control plane and its tiles."""
        words = {"read_word": (word.read_word, self.read_words),
                 "forward_word": (word.forward_word, self.forward_words),
                 "fold_word": (word.fold_word, self.fold_words),
                 "late_word": (word.late_word, self.late_words)}
        assert list(words) == [w.name for w in WORDS]
        for name, (value, ports) in words.items():
            for index, port in enumerate(ports):
                copy = Signal.like(value, name=f"{name}_{index}", attrs=KEEP)
                m.d.sync += copy.eq(value)
                m.d.comb += port.eq(copy)

    # ---------------------------------------------------------------- 4: write-back

    def _write_back(self, m, word, flight, st):
        """Stage 4: the bitmap written back, the write ``w1`` in flight. The new bitmap waits
        on no status: whether it is written (and forwarded) at all is ``w1_writes``; a
        READ_CLEAR that empties the slot writes an empty bitmap."""
        s = word.s
        w1_writes, w1_clears, w1_row, w1_bitmap = (flight.writes[0], flight.clears[0],
                                                   flight.row[0], flight.bitmap[0])
        m.d.sync += [w1_writes.eq(st.writes_row), w1_clears.eq(st.is_read_clear | s["sweep"]),
                     w1_row.eq(s["row"]), flight.worker[0].eq(s["worker"])]
        m.d.sync += w1_bitmap.eq(Mux(st.is_read_clear | s["sweep"], 0,
                                     st.bitmap_in | st.worker_bit))
        m.d.comb += [word.bitmaps_wr.addr.eq(w1_row), word.bitmaps_wr.data.eq(w1_bitmap),
                     word.bitmaps_wr.en.eq(w1_writes)]

    def _entries(self, m, word, st):
        """Stages 4 to 7: the narrow part of the word's response and memory request, delayed
        to enter the buffers at :data:`~.schedule.BUFFER_STAGE`: a buffer's head is
        registered, a cycle behind the tiles' heads, so the two meet at the outputs. The
        status joins its entry a cycle later, from the tests' answers registered as they are
        made: nothing waits on it before the buffers."""
        s = word.s
        entry = data.StructLayout({
            "push_response": 1, "push_memory": 1,
            "response": response_control_layout(), "memory": memory_control_layout()})
        entries = [Signal(entry, name=f"entry_{stage}")
                   for stage in range(WRITE_BACK_STAGE, BUFFER_STAGE + 1)]
        answered = Signal(Shape.cast(Status), name="answered")  # decided by the request
        answers = Signal(2, name="answers")                      # NOT_READY, DUPLICATE
        beat_answered = Signal()
        m.d.sync += [answered.eq(st.decided_status), answers.eq(Cat(st.not_ready, st.is_duplicate)),
                     beat_answered.eq(st.beat_answers)]
        m.d.sync += [
            entries[0].push_response.eq(st.request | st.beat_answers),
            entries[0].push_memory.eq(st.request & st.to_memory),
            entries[0].response.last.eq(Mux(s["beat_word"], s["last_beat"],
                                            ~st.answers_readout | (s["lines"] == 1))),
            entries[0].response.from_memory.eq(st.request & st.to_memory & ~st.is_write),
            entries[0].memory.write.eq(st.is_write),
            entries[0].memory.addr.eq(s["addr"]),
        ]
        m.d.sync += [later.eq(earlier) for earlier, later in zip(entries, entries[1:])]
        m.d.sync += entries[1].response.status.eq(Mux(beat_answered, Status.OK,
                                                       answered | answers))
        return entries[-1]

    # ---------------------------------------------------------------- 7: buffers, credits

    def _buffers(self, m, at_buffers):
        """Stage 7: the response and memory-request buffers. Registered heads: whether an
        output is valid, and whether its response waits for the memory's data or its request
        for room for a read, leave flip-flops, so the pops the outputs decide are a gate or
        two from registers before they cross to the tiles."""
        D = self.buffer_depth
        m.submodules.responses = responses = fifo.SyncFIFOBuffered(
            width=response_control_layout().size, depth=D)
        m.submodules.requests = requests = fifo.SyncFIFOBuffered(
            width=memory_control_layout().size, depth=D)
        m.d.comb += [
            responses.w_en.eq(at_buffers.push_response),
            responses.w_data.eq(at_buffers.response),
            self.o_resp.valid.eq(responses.r_rdy),
            self.o_resp.payload.eq(responses.r_data),
            responses.r_en.eq(self.o_resp.ready),
            requests.w_en.eq(at_buffers.push_memory),
            requests.w_data.eq(at_buffers.memory),
            self.o_mem.valid.eq(requests.r_rdy),
            self.o_mem.payload.eq(requests.r_data),
            requests.r_en.eq(self.o_mem.ready),
        ]

    def _credits(self, m, claim, beats, sweep, word, st):
        """Admission, by credits: ``i_req.ready``.

        A request's response lines and its memory request are counted from the word stage,
        where its line count is registered, so the window claim never reaches the counters;
        admission adds the requests of the two cycles before it (a request just taken is
        single-line, or ready would be low). The status stage hands back what a word will
        not use; a pop hands back what it used, seen a cycle late, so neither port's ready
        reaches ``i_req.ready``. Everything admission asks but the claim stage's multi-line
        test is answered a cycle ahead and registered, twice: with a request at the claim
        stage and without. In its cycle admission only picks one answer and adds that test,
        two LUT levels from flip-flops, as an AXI adapter's item buffer needs them."""
        D, most_lines, d, s = self.buffer_depth, self.readout_lines, word.d, word.s
        response_used = Signal(range(D + 1))
        memory_used = Signal(range(D + 1))
        response_added = Mux(d["request"], d["lines"], 0)
        m.d.sync += [
            response_used.eq(response_used + response_added
                             - (s["beat_word"] & ~st.readout_answered)
                             - (self.o_resp.valid & self.o_resp.ready)),
            memory_used.eq(memory_used + d["request"] - (st.request & ~st.to_memory)
                           - (self.o_mem.valid & self.o_mem.ready)),
        ]
        # A cycle ahead, against the counts before this cycle's hand-backs: response_room[k]
        # says k more lines fit beside the longest readout; memory_room[k], k more requests.
        response_room = _room(response_used, response_added, most_lines, D - most_lines,
                              most_lines + 2)
        memory_room = _room(memory_used, d["request"], 1, D - 1, 3)
        # What the word stage adds next cycle: the request now at the claim stage.
        response_next = Mux(claim.valid, claim.lines, 0)
        # A register write's side effects (a window's clear, a field's new value) reach the
        # request stage the cycle after its strobe: admission waits that cycle, so a request
        # taken after a write always sees it, as the transaction model applies it at once.
        open_next = ~sweep.busy_next & ~self.csr.w_stb & (beats.left_next < 2)
        behind_request, behind_none = Signal(), Signal()
        for answer, request in ((behind_request, 1), (behind_none, 0)):
            m.d.sync += answer.eq(open_next
                                  & Array(response_room)[response_next + request]
                                  & Array(memory_room)[claim.valid + request])
        m.d.comb += self.i_req.ready.eq(Mux(claim.valid, behind_request, behind_none)
                                        & ~claim.multi)

    # ---------------------------------------------------------------- 4: flags, counters

    def _counters(self, m, regs, word, st):
        """Stage 4: ERRORS and the event counters. A request's flags and counts follow its
        status by a cycle. The tests' answers are registered as they are (no gate between
        them and the register), and the counters' events are formed from the registers: the
        block RAM's tests end the status cycle. The tiles' flags come back at
        :data:`~.schedule.FLAGS_STAGE` and count only for an accepted write."""
        fields, s = regs.fields, word.s
        # Which of the words in flight were accepted writes, up to the tiles' FLAGS_STAGE.
        accepted = Signal(FLAGS_STAGE - STATUS_STAGE, name="accepted_writes")
        m.d.sync += accepted.eq(Cat(st.accepted_write, accepted[:-1]))
        fold_saturated, fold_invalid = Signal(), Signal()
        m.d.comb += [fold_saturated.eq(self.saturated & accepted[-1]),
                     fold_invalid.eq(self.invalid & accepted[-1])]
        w1 = {name: Signal(name=f"w1_{name}") for name in
              ("request", "asks_duplicate", "duplicate", "not_ready", "to_memory",
               "bad_request")}
        w1_route = Signal.like(s["route"], name="w1_route")
        m.d.sync += [w1["request"].eq(st.request), w1["asks_duplicate"].eq(st.asks_duplicate),
                     w1["duplicate"].eq(st.is_duplicate), w1["not_ready"].eq(st.not_ready),
                     w1["to_memory"].eq(st.to_memory),
                     w1["bad_request"].eq(st.decided_status == Status.BAD_REQUEST),
                     w1_route.eq(s["route"])]
        w1_request = w1["request"]
        events = {
            **{spec.lines_counter: w1["asks_duplicate"] & ~w1["duplicate"]
               & (w1_route == spec.route) for spec in ROUTE_SPECS.values()},
            "FP32_LINES": w1["to_memory"],
            "RESPONSES": 1,
            "NOT_READY_COUNT": w1["not_ready"],
            "DUPLICATE_COUNT": w1["duplicate"],
            "BAD_REQUEST_COUNT": w1["bad_request"],
        }
        w1_flags = Signal(len(st.flags))
        m.d.sync += w1_flags.eq(Cat(st.flags.values()))
        for flag, bit in zip(st.flags, w1_flags):
            m.d.comb += getattr(fields, f"errors_{flag.lower()}_set").eq(w1_request & bit)
        m.d.comb += [fields.errors_saturated_set.eq(fold_saturated),
                     fields.errors_invalid_code_set.eq(fold_invalid)]
        invalid_counters = {spec.invalid_counter for spec in ROUTE_SPECS.values()} - {None}
        for name in COUNTERS:
            counter = Signal(32, name=f"count_{name.lower()}")
            if name == "STALL_CYCLES":
                event = self.stalled
            elif name in invalid_counters:
                event = fold_invalid
            else:
                event = w1_request & events[name]
            with m.If(fields.control_clear_counters):
                m.d.sync += counter.eq(0)
            with m.Elif(event):
                m.d.sync += counter.eq(counter + 1)
            m.d.comb += getattr(fields, f"{name.lower()}_count").eq(counter)


def _room(used, added, most_added, limit, amounts):
    """``amounts`` bits: bit ``k`` says ``k`` more fit beside ``added`` (at most
    ``most_added``), with ``used`` of ``limit`` taken. Each count is compared with constants
    only, and ``added`` picks among the answers."""
    fits = [used <= limit - j if j <= limit else C(0, 1)
            for j in range(most_added + amounts)]
    return Cat(Array(fits[k:k + most_added + 1])[added] for k in range(amounts))
