"""The controller top (DESIGN.md section 6): windows, slots, statuses, readouts, memory port, CSRs."""

from amaranth.hdl import C, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..golden._validate import check_int
from ..golden.controller import Op, Status
from ..golden.formats import READOUTS_BY_ROUTE, Readout, Route
from ..golden.params import ADDR_BITS, FabricParams
from ..golden.regmap import COUNTERS, ERROR_FLAGS, register_map, window_register
from .csr import CSRBlock, field_port, written_port
from .layouts import (CSRBusSignature, count_layout, max_readout_lines, readout_lines,
                      request_layout, response_layout, mem_request_layout, sum_layout)
from .passthrough import Fp32Passthrough
from .sign_count import SignCountEngine
from .ternary_gate import TernaryGateEngine

__all__ = ["Controller", "LATENCY"]

#: Cycles from a request's transfer on ``i_req`` to its first response beat on ``o_resp``
#: when nothing stalls: decode, slot read, fold, respond.
LATENCY = 4


class Controller(wiring.Component):
    """The NEURON-Fabric controller: aggregation windows in front of a memory port.

    Every request gets one response, in request order (a readout spans several beats,
    ``last`` on the final one). A request inside an enabled window is aggregated into its
    slot; any other request is memory traffic and goes to ``o_mem`` byte-exact. Behaviour is
    that of :class:`~neuron_fabric.golden.controller.ControllerModel`, bit for bit.

    Pipeline (one request per stage, all stages move together):

    1. *decode*: the registered request is matched against the windows;
    2. *read*: the slot's accumulators and contribution bitmap are read from block RAM;
    3. *fold*: status, the lane engines' fold and readout, the write-back of the slot; a
       readout of ``k`` lines stays here ``k`` cycles and hands over one line per cycle
       (line 0 from the engines, the rest from a buffer loaded on the first beat);
    4. *respond*: one response beat, or the memory request.

    **Throughput**: one line per clock on the low-bit path, also for back-to-back writes to
    one slot (the fold forwards the slot it has just written instead of stalling). A
    readout of ``k`` lines holds the pipeline for ``k`` cycles.
    **Latency**: :data:`LATENCY` (4) cycles from request to response without backpressure.
    **Backpressure**: ``o_resp`` and ``o_mem`` stall the whole pipeline and, through
    ``i_req.ready``, the requester; nothing is dropped or counted twice.
    **Ordering with memory**: memory reads may be in flight while later requests enter the
    pipeline; a later response waits until every earlier read's data has been returned.
    **Clearing**: after reset, CONTROL.CLEAR_SLOTS or a write to a window register, the
    controller stops taking requests, lets the pipeline drain and writes empty slots, one
    per cycle (``DEPTH`` cycles per window), then goes on.
    **CSRs**: register values are used as they are when a request passes; change the
    configuration while no request is in flight.

    Parameters
    ----------
    params : FabricParams
        Line width, MAX_WORKERS, DEPTH, NUM_WINDOWS and counter width.
    max_reads : int
        Memory reads in flight at most (1 to 1024).
    slot_bank_bits : int or None
        Width of each block RAM bank the slot rows are split into (None: one memory).
        Narrower banks take more block RAMs and spread the row over more of the die.

    Members
    -------
    i_req : ``In(stream.Signature(request_layout))``
        Upstream requests: ``op`` (Op), ``addr`` (line address), ``worker``, ``data``.
    o_resp : ``Out(stream.Signature(response_layout))``
        Upstream responses: ``status`` (Status), ``last``, ``data``.
    o_mem : ``Out(stream.Signature(mem_request_layout))``
        Downstream memory requests: ``write``, ``addr``, ``data``.
    i_mem : ``In(stream.Signature(line_bits))``
        Downstream read data, one line per read, in order.
    csr : ``In(CSRBusSignature)``
        The register bus (:func:`~neuron_fabric.golden.regmap.register_map`).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, params=None, max_reads=16, slot_bank_bits=None):
        params = FabricParams() if params is None else params
        if not isinstance(params, FabricParams):
            raise TypeError(f"params must be a FabricParams, not {params!r}")
        self.params = params
        self.max_reads = check_int("max_reads", max_reads, low=1, high=1024)
        self.slot_bank_bits = (None if slot_bank_bits is None else
                               check_int("slot_bank_bits", slot_bank_bits, low=1))
        self.regmap = register_map(params)
        p = params
        super().__init__({
            "i_req": In(stream.Signature(request_layout(line_bits=p.line_bits,
                                                        worker_bits=p.worker_bits))),
            "o_resp": Out(stream.Signature(response_layout(line_bits=p.line_bits))),
            "o_mem": Out(stream.Signature(mem_request_layout(line_bits=p.line_bits))),
            "i_mem": In(stream.Signature(unsigned(p.line_bits))),
            "csr": In(CSRBusSignature(addr_width=self.regmap.address_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        L, MW, CW = p.line_bits, p.max_workers, p.counter_bits
        rows = p.num_windows * p.depth
        # A slot row holds a G-Binary counter per line bit, lane i at [i*CW, (i+1)*CW). The
        # G-Ternary sum of the lane whose code is line bits 2t, 2t+1 sits where G-Binary
        # lanes 2t and 2t+1 do, at [2t*CW, 2t*CW + CW + 1): whichever the route, a line
        # bit's data, its lane's state and its write-back share one part of the row, and so
        # one part of the die.
        row_bits = L * CW
        sum_bits = CW + 1

        def sums_in_row(row):
            return Cat(row[2 * CW * t:2 * CW * t + sum_bits] for t in range(L // 2))

        def row_of_sums(sums):
            return Cat(Cat(sums[t * sum_bits:(t + 1) * sum_bits], C(0, 2 * CW - sum_bits))
                       for t in range(L // 2))

        most_lines = max(max_readout_lines(route, line_bits=L, counter_bits=CW) for route in Route)

        m.submodules.csr_block = csr_block = CSRBlock(regmap=self.regmap)
        m.submodules.sign_count = sign_count = SignCountEngine(
            line_bits=L, max_workers=MW, counter_bits=CW)
        m.submodules.ternary_gate = ternary_gate = TernaryGateEngine(
            line_bits=L, max_workers=MW, counter_bits=CW)
        m.submodules.passthrough = passthrough = Fp32Passthrough(
            line_bits=L, max_reads=self.max_reads)
        if self.slot_bank_bits is None:
            slot_banks = [memory.Memory(shape=unsigned(row_bits), depth=rows, init=[])]
            m.submodules.slots = slot_banks[0]
        else:
            # Yosys would put banks this narrow in distributed RAM; they are block RAMs.
            bits = self.slot_bank_bits
            slot_banks = [memory.Memory(shape=unsigned(min(bits, row_bits - low)), depth=rows,
                                        init=[], attrs={"ram_style": "block"})
                          for low in range(0, row_bits, bits)]
            for index, bank in enumerate(slot_banks):
                m.submodules[f"slots_{index}"] = bank
        m.submodules.bitmaps = bitmaps = memory.Memory(shape=unsigned(MW), depth=rows, init=[])
        wiring.connect(m, wiring.flipped(self.csr), csr_block.bus)
        wiring.connect(m, passthrough.o_mem, wiring.flipped(self.o_mem))
        wiring.connect(m, wiring.flipped(self.i_mem), passthrough.i_mem)

        regs = csr_block.fields

        def reg(register, field):
            r = self.regmap[register]
            return getattr(regs, field_port(r, r.field(field)))

        num_workers = reg("NUM_WORKERS", "N")
        complete_mask = Signal(MW)  # workers 0 .. N-1
        m.d.comb += complete_mask.eq(Cat(num_workers > i for i in range(MW)))
        workers_ok = (num_workers >= 1) & (num_workers <= MW)

        # ------------------------------------------------------------ pipeline control
        move = Signal()            # every stage advances this cycle
        clear_busy = Signal()      # a clear is pending or running: take no requests
        request = self.i_req.payload
        stage_shape = dict(
            valid=1, op=2, worker=p.worker_bits, data=L,
            claimed=1, row=range(rows), route=1, readout=3, config_ok=1, addr=ADDR_BITS,
            # Decided before *fold*, so the wide datapath there never waits on the status:
            fold_gbinary=1, fold_gternary=1,  # a write to a well-configured window, by route
            clears=1,                         # a READ_CLEAR of a well-configured window
            reads=1,                          # a READ or READ_CLEAR of one: may read out
            to_memory=1)                      # memory traffic

        def stage(name):
            # Only ``valid`` is reset: the other fields mean nothing until it is set, and a
            # reset on each would load the reset net with thousands of flip-flops.
            return {key: Signal(shape, name=f"{name}_{key}", reset_less=key != "valid")
                    for key, shape in stage_shape.items()}

        s1 = stage("decode")
        s2 = stage("read")
        s3 = stage("fold")

        m.d.comb += self.i_req.ready.eq(move & ~clear_busy)
        with m.If(move):
            m.d.sync += [
                s1["valid"].eq(self.i_req.valid & ~clear_busy),
                s1["op"].eq(request.op), s1["worker"].eq(request.worker),
                s1["data"].eq(request.data), s1["addr"].eq(request.addr),
            ]

        # ------------------------------------------------------------ 1. decode
        # The lowest-numbered enabled window whose [BASE, BASE + SIZE) holds the address
        # (modulo 2**ADDR_BITS) claims it; its slot is the offset from BASE.
        claimed = C(0, 1)
        row, route, readout, config_ok = C(0, 1), C(0, 1), C(0, 3), C(0, 1)
        for w in reversed(range(p.num_windows)):
            offset = Signal(ADDR_BITS, name=f"win{w}_offset")
            hit = Signal(name=f"win{w}_hit")
            w_route = reg(window_register(w, "CONFIG"), "ROUTE")
            w_readout = reg(window_register(w, "CONFIG"), "READOUT")
            w_size = reg(window_register(w, "SIZE"), "SLOTS")
            readout_ok = Mux(
                w_route == Route.GBINARY,
                Cat(w_readout == r for r in READOUTS_BY_ROUTE[Route.GBINARY]).any(),
                Cat(w_readout == r for r in READOUTS_BY_ROUTE[Route.GTERNARY]).any())
            m.d.comb += [
                offset.eq(s1["addr"] - reg(window_register(w, "BASE"), "ADDR")),
                hit.eq(reg("CONTROL", "ENABLE") & reg(window_register(w, "CONFIG"), "EN")
                       & (offset < w_size)),
            ]
            slot = offset[:max(1, (p.depth - 1).bit_length())]
            claimed = hit | claimed
            row = Mux(hit, w * p.depth + slot, row)
            route = Mux(hit, w_route, route)
            readout = Mux(hit, w_readout, readout)
            config_ok = Mux(hit, (w_size <= p.depth) & readout_ok & workers_ok, config_ok)
        with m.If(move):
            m.d.sync += [s2[key].eq(s1[key]) for key in ("valid", "op", "worker", "data", "addr")]
            m.d.sync += [s2["claimed"].eq(claimed), s2["row"].eq(row), s2["route"].eq(route),
                         s2["readout"].eq(readout), s2["config_ok"].eq(config_ok)]

        # ------------------------------------------------------------ 2. read
        # The slot is read at the edge that moves the request into *fold*. The request in
        # *fold* writes its slot at that same edge, which the read does not see: when both
        # are the same row, *fold* takes the row just written (``forward``) instead.
        if len(slot_banks) == 1:   # (plain statements: Amaranth names the ports after them)
            slots_rd = slot_banks[0].read_port()
            bitmaps_rd = bitmaps.read_port()
            slots_wr = slot_banks[0].write_port()
        else:
            slots_rd = _BankedPort(m, [bank.read_port() for bank in slot_banks], row_bits)
            bitmaps_rd = bitmaps.read_port()
            slots_wr = _BankedPort(m, [bank.write_port() for bank in slot_banks], row_bits)
        bitmaps_wr = bitmaps.write_port()
        m.d.comb += [slots_rd.addr.eq(s2["row"]), bitmaps_rd.addr.eq(s2["row"]),
                     slots_rd.en.eq(move), bitmaps_rd.en.eq(move)]
        forward = Signal()
        writes_slot = Signal()     # the request in *fold* writes its slot
        to_window = s2["claimed"] & s2["config_ok"]
        with m.If(move):
            m.d.sync += [s3[key].eq(s2[key]) for key in stage_shape
                         if key not in ("fold_gbinary", "fold_gternary", "clears", "reads",
                                        "to_memory")]
            m.d.sync += [
                s3["fold_gbinary"].eq(to_window & (s2["op"] == Op.WRITE)
                                      & (s2["route"] == Route.GBINARY)),
                s3["fold_gternary"].eq(to_window & (s2["op"] == Op.WRITE)
                                       & (s2["route"] == Route.GTERNARY)),
                s3["clears"].eq(to_window & (s2["op"] == Op.READ_CLEAR)),
                s3["reads"].eq(to_window & (s2["op"] != Op.WRITE)),
                s3["to_memory"].eq(~s2["claimed"] & (s2["op"] != Op.READ_CLEAR)),
            ]
            m.d.sync += forward.eq(s3["valid"] & writes_slot & (s3["row"] == s2["row"]))

        # ------------------------------------------------------------ 3. fold
        last_row = Signal(row_bits, reset_less=True)  # the row most recently written by *fold*
        last_bitmap = Signal(MW, reset_less=True)      # (read only when ``forward`` is set)
        row_in = Signal(row_bits)
        bitmap_in = Signal(MW)
        m.d.comb += [row_in.eq(Mux(forward, last_row, slots_rd.data)),
                     bitmap_in.eq(Mux(forward, last_bitmap, bitmaps_rd.data))]

        beat = Signal(range(most_lines))  # the readout line that *fold* hands over next
        is_write = s3["op"] == Op.WRITE
        is_read_clear = s3["op"] == Op.READ_CLEAR
        is_gbinary = s3["route"] == Route.GBINARY
        worker_bit = Signal(MW)
        m.d.comb += worker_bit.eq(Cat(s3["worker"] == i for i in range(MW)))
        status = Signal(2)
        flags = {flag: Signal(name=f"flag_{flag.lower()}") for flag in ERROR_FLAGS}
        fold = Signal()            # the write is accepted (its status is OK)
        to_memory = s3["to_memory"]
        with m.If(~s3["claimed"]):
            with m.If(is_read_clear):
                m.d.comb += [status.eq(Status.BAD_REQUEST), flags["BAD_REQUEST"].eq(1)]
            with m.Else():
                m.d.comb += status.eq(Status.OK)
        with m.Elif(~s3["config_ok"]):
            m.d.comb += [status.eq(Status.BAD_REQUEST), flags["BAD_CONFIG"].eq(1)]
        with m.Elif(is_write):
            with m.If(s3["worker"] >= num_workers):
                m.d.comb += [status.eq(Status.BAD_REQUEST), flags["BAD_REQUEST"].eq(1)]
            with m.Elif((bitmap_in & worker_bit).any()):
                m.d.comb += [status.eq(Status.DUPLICATE), flags["DUPLICATE"].eq(1)]
            with m.Else():
                m.d.comb += [status.eq(Status.OK), fold.eq(1)]
        with m.Elif((bitmap_in & complete_mask) != complete_mask):
            m.d.comb += [status.eq(Status.NOT_READY), flags["NOT_READY"].eq(1)]
        with m.Else():
            m.d.comb += status.eq(Status.OK)
        read_clears = s3["clears"] & (status == Status.OK)
        m.d.comb += writes_slot.eq(fold | read_clears)

        m.d.comb += [
            sign_count.i.valid.eq(s3["valid"]),
            sign_count.i.payload.counts.eq(row_in[:L * CW]),
            sign_count.i.payload.votes.eq(s3["data"]),
            sign_count.i.payload.fold.eq(s3["fold_gbinary"]),
            sign_count.i.payload.num_workers.eq(num_workers),
            sign_count.i.payload.readout.eq(s3["readout"]),
            sign_count.o.ready.eq(1),
            ternary_gate.i.valid.eq(s3["valid"]),
            ternary_gate.i.payload.sums.eq(sums_in_row(row_in)),
            ternary_gate.i.payload.codes.eq(s3["data"]),
            ternary_gate.i.payload.fold.eq(s3["fold_gternary"]),
            ternary_gate.i.payload.gate.eq(reg("GATE", "GATE")),
            ternary_gate.i.payload.readout.eq(s3["readout"]),
            ternary_gate.o.ready.eq(1),
        ]
        # The engines fold every write to a window; a refused one is simply not written back.
        m.d.comb += [flags["SATURATED"].eq(fold & Mux(is_gbinary, sign_count.o.payload.saturated,
                                                      ternary_gate.o.payload.saturated)),
                     flags["INVALID_CODE"].eq(fold & ternary_gate.o.payload.invalid)]

        row_out = Signal(row_bits)
        bitmap_out = Signal(MW)
        with m.If(s3["clears"]):
            m.d.comb += [row_out.eq(0), bitmap_out.eq(0)]
        with m.Else():
            m.d.comb += [row_out.eq(Mux(is_gbinary, sign_count.o.payload.counts.as_value(),
                                        row_of_sums(ternary_gate.o.payload.sums.as_value()))),
                         bitmap_out.eq(bitmap_in | worker_bit)]

        # Write-back, shared with the clearing sweep (which runs only when the pipeline is empty).
        sweeping = Signal()
        sweep_row = Signal(range(rows))
        fold_writes = move & s3["valid"] & writes_slot
        m.d.comb += [
            slots_wr.addr.eq(Mux(sweeping, sweep_row, s3["row"])),
            bitmaps_wr.addr.eq(Mux(sweeping, sweep_row, s3["row"])),
            slots_wr.data.eq(Mux(sweeping, 0, row_out)),
            bitmaps_wr.data.eq(Mux(sweeping, 0, bitmap_out)),
            slots_wr.en.eq(sweeping | fold_writes),
            bitmaps_wr.en.eq(sweeping | fold_writes),
        ]
        # Loaded whenever the pipeline moves, not only on writes: ``forward`` is set only
        # after a write, and the wide register's enable then needs no status.
        with m.If(move):
            m.d.sync += [last_row.eq(row_out), last_bitmap.eq(bitmap_out)]

        # The readout's length. The pipeline behind *fold* moves on the readout's last beat,
        # decided from registered fields only (``reads``, ``readout``), never from the status:
        # a refused read also stays its readout's length, and its later beats are bubbles.
        lines = C(1, 3)
        for r in Readout:
            lines = Mux(s3["readout"] == r, readout_lines(r, line_bits=L, counter_bits=CW), lines)
        last_line = beat == lines - 1
        answers_readout = s3["claimed"] & (status == Status.OK) & ~is_write

        # ------------------------------------------------------------ 4. respond
        # A beat here may need to send a memory request (``r_send``) and to answer locally
        # (``r_answer``): a read of memory only sends (its data comes back through the
        # passthrough), a write of memory does both (acknowledged with a zero line), the rest
        # only answer. It retires when both are done, in the same cycle or not.
        r_valid = Signal()
        r_send = Signal()
        r_answer = Signal()
        r_write = Signal()
        r_quiet = Signal()             # answered with a zero line: writes and refusals
        r_last = Signal()
        r_status = Signal(2, reset_less=True)
        r_addr = Signal(ADDR_BITS, reset_less=True)
        r_data = Signal(L, reset_less=True)  # a readout line, or the written line
        reads_pending = passthrough.reads_in_flight != 0

        m.d.comb += [
            passthrough.i_req.valid.eq(r_valid & r_send),
            passthrough.i_req.payload.write.eq(r_write),
            passthrough.i_req.payload.addr.eq(r_addr),
            passthrough.i_req.payload.data.eq(r_data),
        ]
        sent = passthrough.i_req.valid & passthrough.i_req.ready
        answering = r_valid & r_answer
        answered = Signal()
        with m.If(reads_pending):  # earlier memory reads answer first, in order
            m.d.comb += [
                self.o_resp.valid.eq(passthrough.o_data.valid),
                self.o_resp.payload.status.eq(Status.OK),
                self.o_resp.payload.last.eq(1),
                self.o_resp.payload.data.eq(passthrough.o_data.payload),
                passthrough.o_data.ready.eq(self.o_resp.ready),
            ]
        with m.Else():
            m.d.comb += [
                self.o_resp.valid.eq(answering),
                self.o_resp.payload.status.eq(r_status),
                self.o_resp.payload.last.eq(r_last),
                self.o_resp.payload.data.eq(Mux(r_quiet, 0, r_data)),
                answered.eq(answering & self.o_resp.ready),
            ]
        retire = r_valid & (~r_send | sent) & (~r_answer | answered)
        take = ~r_valid | retire   # *respond* takes the next beat
        m.d.comb += move.eq(take & (~s3["valid"] | ~s3["reads"] | last_line))

        # The readout line of this beat. Line 0 comes straight from the engines on the
        # readout's first beat, which also loads lines 1 onwards into ``pending_lines``; each
        # later beat shifts them down by a line. Every bit of ``pending_lines`` takes one fixed
        # lane's readout bits or the same bit one line up, and no line-wide multiplexer
        # gathers a line from anywhere in the row (that gather kept a 128-bit top with 16
        # workers from routing).
        readout_all = Mux(is_gbinary, sign_count.o.payload.readout,
                          ternary_gate.o.payload.readout)
        pending_lines = Signal(max(1, most_lines - 1) * L, reset_less=True)
        first_beat = beat == 0
        readout_data = Mux(first_beat, readout_all[:L], pending_lines[:L])
        with m.If(take):
            m.d.sync += pending_lines.eq(Mux(first_beat, readout_all[L:], pending_lines[L:]))

        with m.If(take):
            with m.If(s3["valid"] & s3["reads"]):
                m.d.sync += beat.eq(Mux(last_line, 0, beat + 1))
            m.d.sync += [
                r_valid.eq(s3["valid"] & ((beat == 0) | answers_readout)),
                r_send.eq(to_memory),
                r_answer.eq(~to_memory | is_write),
                r_write.eq(is_write),
                r_status.eq(status),
                r_addr.eq(s3["addr"]),
                r_quiet.eq(~answers_readout),
                r_last.eq(~answers_readout | last_line),
                r_data.eq(Mux(to_memory, s3["data"], readout_data)),
            ]
        with m.Else():
            with m.If(sent):
                m.d.sync += r_send.eq(0)
            with m.If(answered):
                m.d.sync += r_answer.eq(0)

        # ------------------------------------------------------------ clearing
        # Reset, CLEAR_SLOTS and window writes mark windows to clear. Requests stop, the
        # pipeline drains, then each marked window's rows are written empty, one per cycle.
        clear_pending = Signal(p.num_windows, init=(1 << p.num_windows) - 1)
        sweep_window = Signal(range(p.num_windows))
        sweep_slot = Signal(range(p.depth))
        requested = Cat(
            regs.control_clear_slots
            | Cat(getattr(regs, written_port(self.regmap[window_register(w, name)]))
                  for name in ("BASE", "SIZE", "CONFIG")).any()
            for w in range(p.num_windows))
        drained = ~(s1["valid"] | s2["valid"] | s3["valid"])
        m.d.comb += [clear_busy.eq(clear_pending.any() | sweeping),
                     sweep_row.eq(sweep_window * p.depth + sweep_slot)]
        next_pending = Signal(p.num_windows)
        m.d.comb += next_pending.eq(clear_pending | requested)
        with m.If(sweeping):
            m.d.sync += sweep_slot.eq(sweep_slot + 1)
            with m.If(sweep_slot == p.depth - 1):
                m.d.sync += [sweeping.eq(0), sweep_slot.eq(0)]
            m.d.sync += clear_pending.eq(next_pending)
        with m.Elif(clear_pending.any() & drained):
            # Start on the lowest marked window; unmark it now, so a request that comes in
            # during its sweep marks it again.
            m.d.sync += sweeping.eq(1)
            unmarked = next_pending
            for w in reversed(range(p.num_windows)):
                with m.If(clear_pending[w]):
                    m.d.sync += sweep_window.eq(w)
            lowest = Signal(p.num_windows)
            m.d.comb += lowest.eq(clear_pending & -clear_pending)
            m.d.sync += clear_pending.eq(unmarked & ~lowest)
        with m.Else():
            m.d.sync += clear_pending.eq(next_pending)

        # ------------------------------------------------------------ flags and counters
        retiring = move & s3["valid"]
        for flag, signal in flags.items():
            m.d.comb += getattr(regs, f"errors_{flag.lower()}_set").eq(retiring & signal)
        events = {
            "GBIN_LINES": fold & is_gbinary,
            "GTERN_LINES": fold & ~is_gbinary,
            "FP32_LINES": to_memory,
            "RESPONSES": 1,
            "NOT_READY_COUNT": status == Status.NOT_READY,
            "DUPLICATE_COUNT": status == Status.DUPLICATE,
            "BAD_REQUEST_COUNT": status == Status.BAD_REQUEST,
            "INVALID_LINES": flags["INVALID_CODE"],
        }
        for name in COUNTERS:
            counter = Signal(32, name=f"count_{name.lower()}")
            if name == "STALL_CYCLES":
                event = ((self.o_resp.valid & ~self.o_resp.ready)
                         | (self.o_mem.valid & ~self.o_mem.ready))
            else:
                event = retiring & events[name]
            with m.If(regs.control_clear_counters):
                m.d.sync += counter.eq(0)
            with m.Elif(event):
                m.d.sync += counter.eq(counter + 1)
            m.d.comb += getattr(regs, f"{name.lower()}_count").eq(counter)
        return m


class _BankedPort:
    """One port standing for the same port of every slot bank: the banks share address and
    enable, and their data, lowest bank first, is the row."""

    def __init__(self, m, ports, row_bits):
        self.addr = Signal.like(ports[0].addr)
        self.en = Signal()
        self.data = Signal(row_bits)
        low = 0
        for port in ports:
            width = len(port.data)
            m.d.comb += [port.addr.eq(self.addr), port.en.eq(self.en)]
            if isinstance(port, memory.ReadPort):
                m.d.comb += self.data[low:low + width].eq(port.data)
            else:
                m.d.comb += port.data.eq(self.data[low:low + width])
            low += width
