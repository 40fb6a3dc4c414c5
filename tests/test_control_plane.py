"""The control plane driven alone in the Amaranth simulator: the words it sends the tiles on
the schedule (hw/schedule.py) for writes in flight at every distance, the statuses it
decides, the tiles' flags it keeps, its settle after a reset and after a register write, and
its buffers' credits."""

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from neuron_fabric.golden.controller import Op, Status
from neuron_fabric.golden.formats import Readout, Route
from neuron_fabric.golden.params import PRESETS
from neuron_fabric.hw.control_plane import ControlPlane
from neuron_fabric.hw.schedule import (FLAGS_STAGE, FOLD_WORD_STAGE, FORWARD_DISTANCES,
                                       FORWARD_WORD_STAGE, READ_WORD_STAGE, WINDOW_STAGE,
                                       Source)
from neuron_fabric.sim import scenarios

SMALL = PRESETS["small"]
DEPTH = 16


class _Bench:
    """The control plane under a testbench that takes requests, reads responses and the
    words sent to the tiles, cycle by cycle."""

    def __init__(self, *, buffer_depth=DEPTH):
        self.dut = ControlPlane(params=SMALL, buffer_depth=buffer_depth)
        self.m = Module()
        self.m.domains.sync = self.domain = ClockDomain("sync")
        self.m.submodules.control = self.dut
        self.regmap = self.dut.regmap
        self.cycle = 0
        self.sent = {}        # cycle: (forward source, fold word's row choice) at the tiles

        self.responses = []   # (cycle, status) of each response taken from o_resp

    async def tick(self, ctx):
        """A clock edge, after sampling what the control plane sends in this cycle."""
        dut = self.dut
        fold = dut.fold_words[0]
        self.sent[self.cycle] = (Source(ctx.get(dut.forward_words[0].source)),
                                 {name: ctx.get(getattr(fold, name))
                                  for name in ("from_last", "from_ram", "empty")})
        if ctx.get(dut.o_resp.valid) and ctx.get(dut.o_resp.ready):
            self.responses.append((self.cycle, Status(ctx.get(dut.o_resp.payload.status))))
        await ctx.tick()
        self.cycle += 1

    async def csr_write(self, ctx, addr, value):
        ctx.set(self.dut.csr.addr, addr)
        ctx.set(self.dut.csr.w_data, value)
        ctx.set(self.dut.csr.w_stb, 1)
        await self.tick(ctx)
        ctx.set(self.dut.csr.w_stb, 0)
        await self.tick(ctx)

    async def csr_read(self, ctx, name):
        ctx.set(self.dut.csr.addr, self.regmap[name].address)
        ctx.set(self.dut.csr.r_stb, 1)
        await self.tick(ctx)
        ctx.set(self.dut.csr.r_stb, 0)
        await self.tick(ctx)
        return ctx.get(self.dut.csr.r_data)

    async def configure(self, ctx, *, num_workers=SMALL.max_workers):
        """Window 0, G-Binary SIGN, over addresses 0 .. DEPTH - 1; waits out the clearing
        sweep."""
        window = scenarios.Window(base=0, size=SMALL.depth, route=Route.GBINARY,
                                  readout=Readout.SIGN)
        for op in scenarios.configure(self.regmap, windows=[window], num_workers=num_workers):
            await self.csr_write(ctx, op.addr, op.value)
        while not ctx.get(self.dut.i_req.ready):
            await self.tick(ctx)

    async def offer(self, ctx, op, addr, worker=0):
        """Offer a request until it is taken; the cycle of its transfer."""
        ctx.set(self.dut.i_req.valid, 1)
        ctx.set(self.dut.i_req.payload.op, op)
        ctx.set(self.dut.i_req.payload.addr, addr)
        ctx.set(self.dut.i_req.payload.worker, worker)
        while not ctx.get(self.dut.i_req.ready):
            await self.tick(ctx)
        taken = self.cycle
        await self.tick(ctx)
        ctx.set(self.dut.i_req.valid, 0)
        return taken

    def run(self, bench):
        sim = Simulator(self.m)
        sim.add_clock(1e-6)
        sim.add_testbench(bench)
        sim.run()


def _write_at_distance(distance, *, cleared=False):
    """Worker 0 writes slot 0 (and with ``cleared`` reads and empties it, NUM_WORKERS 1);
    ``distance - 1`` writes to other slots follow, then worker 1 writes slot 0, then
    worker 0 again: the transfer cycles, the words sent for each, and the statuses."""
    bench = _Bench()
    taken = []

    async def testbench(ctx):
        ctx.set(bench.dut.o_resp.ready, 1)
        ctx.set(bench.dut.o_mem.ready, 1)
        await bench.configure(ctx, num_workers=1 if cleared else SMALL.max_workers)
        taken.append(await bench.offer(ctx, Op.WRITE, 0, worker=0))
        if cleared:
            taken.append(await bench.offer(ctx, Op.READ_CLEAR, 0, worker=0))
        for k in range(distance - 1):
            taken.append(await bench.offer(ctx, Op.WRITE, 1 + k % (SMALL.depth - 1), worker=0))
        taken.append(await bench.offer(ctx, Op.WRITE, 0, worker=int(not cleared)))
        taken.append(await bench.offer(ctx, Op.WRITE, 0, worker=0))
        for _ in range(FLAGS_STAGE + 4):
            await bench.tick(ctx)

    bench.run(testbench)
    return taken, bench


@pytest.mark.parametrize("distance", range(1, 7))
def test_a_write_in_flight_is_forwarded_at_every_distance(distance):
    """Worker 1's write of slot 0 comes ``distance`` words after worker 0's: the tiles are
    told to fold onto the previous word's sum (one word ahead), onto the copy of the sum in
    flight (two or three), or onto the block RAM's row; worker 0's first write, of an empty
    slot, onto none; worker 0's repeat right after is refused as a duplicate whichever
    bitmap, in flight or stored, holds its bit."""
    taken, bench = _write_at_distance(distance)
    assert taken == list(range(taken[0], taken[0] + len(taken))), "taken back to back"

    def told(index):
        source, _ = bench.sent[taken[index] + FORWARD_WORD_STAGE - 1]
        _, choice = bench.sent[taken[index] + FOLD_WORD_STAGE - 1]
        return source, choice
    assert told(0) == (Source.NONE, {"from_last": 0, "from_ram": 0, "empty": 0})
    assert told(-2) == (FORWARD_DISTANCES.get(distance, Source.NONE),
                        {"from_last": int(distance == 1), "from_ram": int(distance > 3),
                         "empty": 0})
    # The repeat follows the second write: forwarded from it (one word ahead).
    assert told(-1)[1]["from_last"] == 1
    statuses = [status for _, status in bench.responses]
    assert statuses == [Status.OK] * (len(taken) - 1) + [Status.DUPLICATE]


@pytest.mark.parametrize("distance", range(1, 7))
def test_a_write_after_a_read_clear_folds_onto_an_empty_row_at_every_distance(distance):
    """A slot is written and emptied by a READ_CLEAR (NUM_WORKERS 1); a write of it
    ``distance`` words later is told to fold onto an empty row: the READ_CLEAR is the
    previous word (``empty``, which wins over the write two ahead), in flight (no copy) or
    landed (its bitmap is empty: not the block RAM's row, which the tiles never clear)."""
    taken, bench = _write_at_distance(distance, cleared=True)
    second = taken[-2]
    source, _ = bench.sent[second + FORWARD_WORD_STAGE - 1]
    _, choice = bench.sent[second + FOLD_WORD_STAGE - 1]
    assert source == (Source.TWO_AHEAD if distance == 1 else Source.NONE)
    assert choice == {"from_last": 0, "from_ram": 0, "empty": int(distance == 1)}
    statuses = [status for _, status in bench.responses]
    assert statuses == [Status.OK] * (len(taken) - 1) + [Status.DUPLICATE]


def test_each_status_is_decided_as_the_model_decides_it():
    """A READ_CLEAR outside every window, a worker at or above NUM_WORKERS, a read of a slot
    not every worker wrote, and of one they all did, each get their status in order."""
    bench = _Bench()

    async def testbench(ctx):
        ctx.set(bench.dut.o_resp.ready, 1)
        ctx.set(bench.dut.o_mem.ready, 1)
        await bench.configure(ctx, num_workers=2)
        await bench.offer(ctx, Op.READ_CLEAR, 100)
        await bench.offer(ctx, Op.WRITE, 2, worker=2)
        await bench.offer(ctx, Op.WRITE, 2, worker=0)
        await bench.offer(ctx, Op.READ, 2)
        await bench.offer(ctx, Op.WRITE, 2, worker=1)
        await bench.offer(ctx, Op.READ_CLEAR, 2)
        await bench.offer(ctx, Op.READ, 2)
        for _ in range(FLAGS_STAGE + 4):
            await bench.tick(ctx)

    bench.run(testbench)
    assert [status for _, status in bench.responses] == [
        Status.BAD_REQUEST, Status.BAD_REQUEST, Status.OK, Status.NOT_READY, Status.OK,
        Status.OK, Status.NOT_READY]


def _invalid_flag(*, refused, at, reset_after=None):
    """ERRORS.INVALID_CODE after a write whose tiles' ``invalid`` comes back ``at`` cycles
    after its transfer; ``refused``: the write is a duplicate; ``reset_after``: a one-cycle
    reset that many cycles after the transfer (then the window is set up again)."""
    bench = _Bench()
    errors = []

    async def testbench(ctx):
        ctx.set(bench.dut.o_resp.ready, 1)
        ctx.set(bench.dut.o_mem.ready, 1)
        await bench.configure(ctx)
        if refused:
            await bench.offer(ctx, Op.WRITE, 0, worker=0)
            for _ in range(FLAGS_STAGE + 2):   # its own flags' cycle is not this test's
                await bench.tick(ctx)
        taken = await bench.offer(ctx, Op.WRITE, 0, worker=0)
        while bench.cycle < taken + FLAGS_STAGE + 2:
            ctx.set(bench.dut.invalid, bench.cycle == taken + at)
            resets = reset_after is not None and bench.cycle == taken + reset_after
            ctx.set(bench.domain.rst, resets)
            await bench.tick(ctx)
        ctx.set(bench.dut.invalid, 0)
        errors.append(await bench.csr_read(ctx, "ERRORS"))

    bench.run(testbench)
    return errors[0] >> bench.regmap["ERRORS"].field("INVALID_CODE").offset & 1


@pytest.mark.parametrize("at", [FLAGS_STAGE - 1, FLAGS_STAGE, FLAGS_STAGE + 1])
def test_the_tiles_flags_count_at_the_flags_stage_for_an_accepted_write_only(at):
    assert _invalid_flag(refused=False, at=at) == (at == FLAGS_STAGE)
    assert _invalid_flag(refused=True, at=at) == 0


@pytest.mark.parametrize("reset_after", range(1, FLAGS_STAGE))
def test_a_write_in_flight_at_a_reset_counts_no_flag_after_it(reset_after):
    """The record of accepted writes in flight is cleared by a reset: the tiles' flags of a
    word formed before it never reach ERRORS."""
    assert _invalid_flag(refused=False, at=FLAGS_STAGE, reset_after=reset_after) == 0


def test_after_a_reset_requests_wait_for_the_sweep_of_every_window():
    """A reset marks every window to clear: ``i_req.ready`` stays low for a sweep word a row
    (NUM_WINDOWS * DEPTH, the read words naming every row in turn), then rises."""
    bench = _Bench()
    ready, rows_read = [], []

    async def testbench(ctx):
        for _ in range(SMALL.num_windows * SMALL.depth + 8):
            ready.append(ctx.get(bench.dut.i_req.ready))
            rows_read.append(ctx.get(bench.dut.read_words[0].row))
            await bench.tick(ctx)

    bench.run(testbench)
    rows = list(range(SMALL.num_windows * SMALL.depth))
    firsts = [rows_read.index(row) for row in rows]
    assert firsts == sorted(firsts), "the sweep names the rows in turn"
    # The sweep's words take the window stage in the cycles a request's would; the read word
    # leaves it for the tiles.
    last_sweep = firsts[-1] - (READ_WORD_STAGE - 1 - WINDOW_STAGE)
    assert ready.index(1) + WINDOW_STAGE > last_sweep, "a request taken during the sweep"
    assert all(ready[ready.index(1):])


def test_a_register_write_closes_admission_for_the_cycle_after_its_strobe():
    """A written field reaches the request stage a cycle after the strobe: ``i_req.ready`` is
    low in that cycle only (NUM_WORKERS rewritten, which marks no window to clear)."""
    bench = _Bench()
    ready = []

    async def testbench(ctx):
        await bench.configure(ctx)
        ctx.set(bench.dut.csr.addr, bench.regmap["NUM_WORKERS"].address)
        ctx.set(bench.dut.csr.w_data, SMALL.max_workers)
        ctx.set(bench.dut.csr.w_stb, 1)
        for _ in range(4):
            ready.append(ctx.get(bench.dut.i_req.ready))
            await bench.tick(ctx)
            ctx.set(bench.dut.csr.w_stb, 0)

    bench.run(testbench)
    assert ready == [1, 0, 1, 1]


@pytest.mark.parametrize("stalled", ["o_resp", "o_mem"])
def test_credits_fill_each_buffer_to_its_last_entry_and_no_further(stalled):
    """With one output stalled, FP32 writes offered back to back are taken while the
    buffer has room (the response buffer keeps room for the longest readout beside them),
    and once it drains every one comes out."""
    bench = _Bench(buffer_depth=8)
    taken = []

    async def testbench(ctx):
        ctx.set(bench.dut.o_resp.ready, 1)
        ctx.set(bench.dut.o_mem.ready, 1)
        await bench.configure(ctx)
        ctx.set(getattr(bench.dut, stalled).ready, 0)
        ctx.set(bench.dut.i_req.valid, 1)
        ctx.set(bench.dut.i_req.payload.op, Op.WRITE)
        ctx.set(bench.dut.i_req.payload.addr, 100)
        for _ in range(40):
            if ctx.get(bench.dut.i_req.ready):
                taken.append(bench.cycle)
            await bench.tick(ctx)
        ctx.set(bench.dut.i_req.valid, 0)
        ctx.set(getattr(bench.dut, stalled).ready, 1)
        for _ in range(40):
            await bench.tick(ctx)

    bench.run(testbench)
    # A request is taken while the lines before it leave room for the longest readout.
    room = 8 - bench.dut.readout_lines + 1 if stalled == "o_resp" else 8
    assert len(taken) == room
    assert len(bench.responses) == room
