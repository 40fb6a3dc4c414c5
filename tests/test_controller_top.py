"""The controller top in Amaranth's simulator against the golden transaction model.

Every response (status and data, beat by beat), every CSR read and the downstream memory
are compared with :class:`~neuron_fabric.golden.controller.ControllerModel`. Timing choices
(upstream idles, response and memory backpressure, memory latency) come from a seeded
generator whose seed is in the test id.
"""

import collections

import numpy as np
import pytest

from neuron_fabric.golden.controller import Op, Request, Status
from neuron_fabric.golden.formats import Readout, Route, readout_lines_per_slot
from neuron_fabric.golden.params import PRESETS, FabricParams
from neuron_fabric.golden.regmap import register_map
from neuron_fabric.hw.controller import LATENCY, Controller
from neuron_fabric.sim import scenarios
from neuron_fabric.sim.amaranth_bench import Timing, run

SMALL = PRESETS["small"]  # 128-bit lines, 4 workers, 8 slots, 2 windows
STALLS = Timing(idle=0.25, backpressure=0.3, mem_backpressure=0.3, mem_latency=(1, 6))


def assert_matches_model(result, regmap):
    assert len(result.responses) == len(result.expected), "a response is missing or extra"
    for index, (got, want) in enumerate(zip(result.responses, result.expected)):
        assert got == want, f"response {index}: hardware {got} but the model says {want}"
    for addr, got, want in result.csr_reads:
        assert got == want, f"CSR {regmap.at(addr).name}: hardware {got:#x}, model {want:#x}"
    assert result.memory.lines == result.model.memory.lines, "downstream memory differs"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_traffic_matches_model_under_stalls(seed):
    regmap = register_map(SMALL)
    ops = scenarios.random_traffic(regmap, rng=np.random.default_rng(seed), n_ops=250)
    ops += scenarios.read_all_registers(regmap)
    result = run(ops, params=SMALL, seed=seed, timing=STALLS)
    assert_matches_model(result, regmap)
    statuses = collections.Counter(r.status for r in result.expected)
    assert set(statuses) == set(Status), f"the traffic must reach every status, not {statuses}"


def test_random_traffic_with_three_windows_and_wide_workers():
    params = FabricParams(line_bits=256, max_workers=7, depth=5, num_windows=3)
    regmap = register_map(params)
    ops = scenarios.random_traffic(regmap, rng=np.random.default_rng(7), n_ops=200)
    ops += scenarios.read_all_registers(regmap)
    assert_matches_model(run(ops, params=params, seed=7, timing=STALLS), regmap)


def test_random_traffic_with_counters_that_fill():
    """Two-bit counters for four workers: the tiles hold the route engines, which saturate
    and flag it as the model does."""
    params = FabricParams(line_bits=128, max_workers=4, depth=8, num_windows=2, counter_bits=2)
    regmap = register_map(params)
    ops = scenarios.random_traffic(regmap, rng=np.random.default_rng(11), n_ops=600)
    ops += scenarios.read_all_registers(regmap)
    result = run(ops, params=params, seed=11, timing=STALLS)
    assert_matches_model(result, regmap)


@pytest.mark.parametrize("tile_lanes,group_lanes", [(8, 2), (16, 16), (64, 16), (128, 8)])
def test_every_tile_width_behaves_the_same(tile_lanes, group_lanes):
    """Sixteen tiles of 8 lanes, eight of 16 in one group (a ring part of one group's
    slice), two of 64 or one of 128: the same answers at every stall."""
    regmap = register_map(SMALL)
    ops = scenarios.random_traffic(regmap, rng=np.random.default_rng(5), n_ops=250)
    result = run(ops, params=SMALL, seed=5, timing=STALLS, tile_lanes=tile_lanes,
                 group_lanes=group_lanes)
    assert_matches_model(result, regmap)


def test_a_response_port_stalled_longer_than_the_buffer_loses_nothing():
    """o_resp is not ready for 200 cycles under a burst of writes and readouts: admission
    stops when the buffer's credits are spent, and every response comes out afterwards."""
    regmap = register_map(SMALL)
    ops = burst_ops(regmap, np.random.default_rng(8), rounds=30)
    depth = 16
    result = run(ops, params=SMALL, seed=8, buffer_depth=depth,
                 timing=Timing(response_stall=(0, 200), mem_latency=(1, 3)))
    assert_matches_model(result, regmap)
    taken = [cycle for cycle in result.request_cycles if cycle < 200]
    assert 0 < len(taken) <= depth, f"{len(taken)} requests taken while o_resp was stalled"
    assert result.beat_cycles[0][0] >= 200


def taken_before_refusal(lines, room):
    """How many requests the credit rule takes in order while nothing drains: each is taken
    while the lines already taken leave ``room`` for the longest readout."""
    taken, used = 0, 0
    for n in lines:
        if used > room:
            break
        taken, used = taken + 1, used + n
    return taken


@pytest.mark.parametrize("readout", [Readout.COUNTS, Readout.TERNARY])
def test_response_credits_fill_the_buffer_to_its_last_entry_and_no_further(readout):
    """o_resp stalls while single-line writes come back to back, then a readout (the longest,
    or one of two lines) and more writes: each is taken exactly while the buffer still holds
    the longest readout, counting the requests of the two cycles before, and every response
    comes out afterwards.

    With 0 .. 3 writes in front of the slot's own, the readout is taken with room to
    spare, taken into the buffer's last entries, or refused by one entry or by two; the
    writes after it meet the edge with the readout one or two cycles ahead."""
    regmap = register_map(SMALL)
    depth = 8
    most = readout_lines_per_slot(Readout.COUNTS, counter_bits=SMALL.counter_bits)
    assert depth - most == SMALL.max_workers + 1
    window = scenarios.Window(base=0, size=2, route=Route.GBINARY, readout=readout)
    rng = np.random.default_rng(9)
    for extra in range(4):
        ops = scenarios.configure(regmap, windows=[window], num_workers=SMALL.max_workers)
        requests = [Request(Op.WRITE, 1, w % SMALL.max_workers, rng.bytes(16))
                    for w in range(extra)]
        requests += [Request(Op.WRITE, 0, w, rng.bytes(16)) for w in range(SMALL.max_workers)]
        requests += [Request(Op.READ_CLEAR, 0)] + [Request(Op.WRITE, 1, 0, rng.bytes(16))] * 3
        result = run(ops + requests, params=SMALL, buffer_depth=depth, max_cycles=2_000,
                     timing=Timing(response_stall=(0, 300)))
        assert_matches_model(result, regmap)
        lines = [len(r.lines) for r in result.expected]
        assert lines[SMALL.max_workers + extra] == readout_lines_per_slot(
            readout, counter_bits=SMALL.counter_bits)
        taken = sum(cycle < 300 for cycle in result.request_cycles)
        assert taken == taken_before_refusal(lines, depth - most), (
            f"{extra} writes in front: {taken} requests taken while o_resp was stalled, "
            f"the credit rule takes {taken_before_refusal(lines, depth - most)}")


def test_memory_credits_fill_the_request_buffer_to_its_last_entry_and_no_further():
    """o_mem stalls under FP32 writes offered back to back: exactly ``buffer_depth`` are
    taken, and downstream memory loses none. From 16 entries the response buffer lets
    them in on consecutive cycles, so the last credit is tested with writes taken one and
    two cycles before it still on their way."""
    regmap = register_map(SMALL)
    rng = np.random.default_rng(11)
    for depth in (4, 16, 24):
        ops = scenarios.configure(regmap, windows=[], num_workers=SMALL.max_workers)
        ops += [Request(Op.WRITE, 100 + i, 0, rng.bytes(16)) for i in range(2 * depth)]
        result = run(ops, params=SMALL, buffer_depth=depth, max_cycles=2_000,
                     timing=Timing(memory_stall=(0, 300)))
        assert_matches_model(result, regmap)
        taken = sum(cycle < 300 for cycle in result.request_cycles)
        assert taken == depth, f"{taken} FP32 writes taken while o_mem was stalled, not {depth}"
        if depth >= 16:
            assert np.all(np.diff(result.request_cycles[:depth]) == 1), "not taken back to back"


def test_a_worker_writes_a_slot_again_while_its_clear_is_in_flight():
    """A slot's last writer writes it again 1 to 4 words after its READ_CLEAR, while the clear
    is still on its way to the block RAM (or just there): the write is accepted, not a
    duplicate, whether the worker's bit comes from the block RAM or from a write in flight."""
    params = FabricParams(line_bits=128, max_workers=4, depth=8, num_windows=1)
    regmap = register_map(params)
    rng = np.random.default_rng(12)
    # A one-line readout, so that the write again can follow the READ_CLEAR directly.
    window = scenarios.Window(base=0, size=8, route=Route.GBINARY, readout=Readout.SIGN)
    ops = scenarios.configure(regmap, windows=[window], num_workers=params.max_workers)
    again = []
    for gap in range(4):       # words between the clear and the write again
        for spread in (0, 4):  # the slot's writes back to back, or apart
            for worker in range(params.max_workers):
                ops.append(Request(Op.WRITE, 0, worker, rng.bytes(16)))
                ops += [Request(Op.WRITE, 1 + i, worker, rng.bytes(16)) for i in range(spread)]
            ops.append(Request(Op.READ_CLEAR, 0))
            ops += [Request(Op.WRITE, 5 + i, 0, rng.bytes(16)) for i in range(gap)]
            again.append(len([op for op in ops if isinstance(op, Request)]))
            ops.append(Request(Op.WRITE, 0, params.max_workers - 1, rng.bytes(16)))
            ops += [Request(Op.WRITE, 0, w, rng.bytes(16)) for w in range(params.max_workers - 1)]
            ops.append(Request(Op.READ_CLEAR, 0))
    result = run(ops, params=params, seed=12)
    assert_matches_model(result, regmap)
    assert all(result.expected[i].status is Status.OK for i in again)


@pytest.mark.parametrize("route,readout", [(Route.GBINARY, Readout.COUNTS),
                                           (Route.GTERNARY, Readout.SUMS)])
def test_writes_to_one_slot_at_every_in_flight_distance(route, readout):
    """Workers write slot 0 with d - 1 writes to other slots between them, d = 1 to 6: every
    distance at which a write is still in flight when the next one reads its row (and one
    beyond). Raw readouts show any vote a forward lost."""
    params = FabricParams(line_bits=128, max_workers=8, depth=8, num_windows=1)
    regmap = register_map(params)
    rng = np.random.default_rng(int(route))
    window = scenarios.Window(base=0, size=8, route=route, readout=readout)
    ops = scenarios.configure(regmap, windows=[window], num_workers=params.max_workers)
    for distance in range(1, 7):
        for worker in range(params.max_workers):
            # Slot 0, then one write to each of slots 1 .. distance - 1.
            ops += [Request(Op.WRITE, slot, worker, rng.bytes(16)) for slot in range(distance)]
        ops += [Request(Op.READ_CLEAR, slot) for slot in range(distance)]
    result = run(ops, params=params, seed=2)
    assert_matches_model(result, regmap)
    reads = [r for op, r in zip([o for o in ops if isinstance(o, Request)], result.expected)
             if op.op is Op.READ_CLEAR and op.addr == 0]
    assert all(r.status is Status.OK for r in reads), "slot 0 must complete at every distance"


@pytest.mark.parametrize("workload", ["digits_cnn", "char_lm"])
def test_real_gradients_through_every_readout(traces, workload):
    """Four workers' real buckets, interleaved, through each readout of both routes."""
    regmap = register_map(SMALL)
    rng = np.random.default_rng(11)
    ops = scenarios.trace_rounds(traces[workload], regmap=regmap, step_index=1, rng=rng,
                                 max_lines=8)
    ops += scenarios.read_all_registers(regmap)
    result = run(ops, params=SMALL, seed=11, timing=STALLS)
    assert_matches_model(result, regmap)
    readouts = [r for r in result.expected if len(r.lines) > 1]
    assert readouts, "multi-line readouts must be exercised"


def test_fp32_lines_pass_through_byte_exact():
    """NaN payloads, -0.0, denormals and infinities written and read back unchanged."""
    regmap = register_map(SMALL)
    special = np.array([np.nan, -0.0, 1e-45, -np.inf, np.inf, 0.0, -1.5, 3.4e38] * 2,
                       dtype=np.float32)
    special.view(np.uint32)[0] = 0x7FC0_1234  # a NaN with a payload
    lines = [special[i:i + 4].tobytes() for i in range(0, 16, 4)]  # 128-bit lines
    lines.append(np.random.default_rng(0).bytes(16))
    window = scenarios.Window(base=0, size=8, route=Route.GBINARY, readout=Readout.SIGN)
    ops = scenarios.configure(regmap, windows=[window], num_workers=2)
    ops += [Request(Op.WRITE, 1000 + i, 0, line) for i, line in enumerate(lines)]
    ops += [Request(Op.READ, 1000 + i) for i in range(len(lines))]
    result = run(ops, params=SMALL, seed=5, timing=STALLS)
    assert_matches_model(result, regmap)
    assert [r.data for r in result.responses[-len(lines):]] == lines


def burst_ops(regmap, rng, rounds):
    """Back-to-back writes of every worker to one slot, then a READ_CLEAR, ``rounds`` times."""
    p = regmap.params
    window = scenarios.Window(base=64, size=1, route=Route.GBINARY, readout=Readout.SIGN)
    ops = scenarios.configure(regmap, windows=[window], num_workers=p.max_workers)
    for _ in range(rounds):
        for worker in range(p.max_workers):
            ops.append(Request(Op.WRITE, 64, worker, rng.bytes(p.line_bits // 8)))
        ops.append(Request(Op.READ_CLEAR, 64))
    return ops


def test_one_line_per_clock_to_one_slot_and_fixed_latency():
    """The default 512-bit top: 3 rounds of 16 workers writing one slot back to back (its
    simulator takes a minute to build; each round, a few seconds).

    Without stalls every request is taken on consecutive cycles (II = 1) and every
    response comes exactly LATENCY cycles after its request.
    """
    params = PRESETS["default"]
    regmap = register_map(params)
    ops = burst_ops(regmap, np.random.default_rng(3), rounds=3)
    result = run(ops, params=params, seed=3)
    assert_matches_model(result, regmap)
    cycles = np.array(result.request_cycles)
    assert np.all(np.diff(cycles) == 1), f"requests were not taken every cycle: {cycles}"
    latency = {beats[0] - sent for sent, beats in zip(result.request_cycles, result.beat_cycles)}
    assert latency == {LATENCY}, f"latency must be {LATENCY} cycles, not {sorted(latency)}"
    # The majority over all 16 workers is exact: forwarding lost no vote.
    reads = [r for r in result.responses if len(r.lines) == 1 and r.data != bytes(64)]
    assert len(reads) >= 2


def test_bursts_with_stalls_lose_and_repeat_nothing():
    regmap = register_map(SMALL)
    ops = burst_ops(regmap, np.random.default_rng(4), rounds=12)
    result = run(ops, params=SMALL, seed=4, timing=STALLS)
    assert_matches_model(result, regmap)
    assert result.model.counters["GBIN_LINES"] == 12 * SMALL.max_workers


def test_flags_are_sticky_and_cleared_by_writing_one():
    regmap = register_map(SMALL)
    errors = regmap["ERRORS"]
    window = scenarios.Window(base=0, size=2, route=Route.GBINARY, readout=Readout.SIGN)
    ops = scenarios.configure(regmap, windows=[window], num_workers=2)
    ops += [Request(Op.READ, 0), Request(Op.WRITE, 0, 0, bytes(16)),
            Request(Op.WRITE, 0, 0, bytes(16)), Request(Op.READ_CLEAR, 500)]
    ops += [scenarios.CsrRead(errors.address),
            scenarios.CsrWrite(errors.address, 0),  # writing 0 clears nothing
            scenarios.CsrRead(errors.address),
            scenarios.CsrWrite(errors.address, errors.encode(NOT_READY=1, DUPLICATE=1)),
            scenarios.CsrRead(errors.address),
            scenarios.CsrWrite(errors.address, 0xFFFF_FFFF),
            scenarios.CsrRead(errors.address)]
    result = run(ops, params=SMALL, seed=0)
    assert_matches_model(result, regmap)
    values = [errors.decode(got) for _, got, _ in result.csr_reads]
    assert values[0] == values[1] == dict(values[1], NOT_READY=1, DUPLICATE=1, BAD_REQUEST=1)
    assert values[2]["NOT_READY"] == values[2]["DUPLICATE"] == 0 and values[2]["BAD_REQUEST"]
    assert not any(values[3].values())


def test_registers_read_their_reset_values():
    regmap = register_map(SMALL)
    result = run(scenarios.read_all_registers(regmap, skip=()), params=SMALL)
    for addr, got, _ in result.csr_reads:
        assert got == regmap.at(addr).reset, f"{regmap.at(addr).name} after reset"


def test_clear_slots_and_window_writes_empty_slots():
    regmap = register_map(SMALL)
    control = regmap["CONTROL"]
    window = scenarios.Window(base=8, size=4, route=Route.GTERNARY, readout=Readout.SUMS)
    ops = scenarios.configure(regmap, windows=[window], num_workers=1)
    ops += [Request(Op.WRITE, 8, 0, bytes([1] * 16)), Request(Op.WRITE, 9, 0, bytes([1] * 16)),
            scenarios.CsrWrite(control.address, control.encode(ENABLE=1, CLEAR_SLOTS=1)),
            Request(Op.READ, 8), Request(Op.WRITE, 8, 0, bytes([3] * 16)), Request(Op.READ, 8)]
    ops += scenarios.configure(regmap, windows=[window], num_workers=1)
    ops += [Request(Op.READ, 8), Request(Op.READ, 9)]
    result = run(ops, params=SMALL, seed=1, timing=STALLS)
    assert_matches_model(result, regmap)
    assert [r.status for r in result.responses[-2:]] == [Status.NOT_READY] * 2


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(params="default"), TypeError, "params must be a FabricParams, not 'default'"),
    (dict(max_reads=0), ValueError, "max_reads must be between 1 and 1024, not 0"),
    (dict(max_reads=True), TypeError, "max_reads must be an integer, not True"),
    (dict(tile_lanes=48), ValueError, "tile_lanes must be an even divisor of line_bits (512), not 48"),
    (dict(tile_lanes=1), ValueError, "tile_lanes must be between 2 and 512, not 1"),
    (dict(tile_lanes="32"), TypeError, "tile_lanes must be an integer, not '32'"),
    (dict(group_lanes=3), ValueError, "group_lanes must be an even number, not 3"),
    (dict(group_lanes=24), ValueError, "group_lanes must divide tile_lanes (32), not 24"),
    (dict(buffer_depth=4), ValueError,
     "buffer_depth must be at least 6 (the longest readout and one more), not 4"),
])
def test_bad_parameters_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error) as info:
        Controller(**kwargs)
    assert str(info.value) == message


def test_a_request_right_after_a_register_write_waits_a_cycle_and_sees_the_write():
    """A READ_CLEAR offered the cycle after CONTROL.ENABLE is written 0 is held one cycle by
    ``i_req.ready`` and then taken as memory traffic (BAD_REQUEST), as the model answers it;
    taken at once, it would meet the window still enabled (NOT_READY)."""
    from amaranth.sim import Simulator

    regmap = register_map(SMALL)
    dut = Controller(params=SMALL)
    window = scenarios.Window(base=0, size=1, route=Route.GBINARY, readout=Readout.SIGN)
    writes = scenarios.configure(regmap, windows=[window], num_workers=1)
    control = regmap["CONTROL"]
    seen = {}

    async def bench(ctx):
        async def write(addr, value):
            ctx.set(dut.csr.addr, addr)
            ctx.set(dut.csr.w_data, value)
            ctx.set(dut.csr.w_stb, 1)
            await ctx.tick()
            ctx.set(dut.csr.w_stb, 0)

        for op in writes:
            await write(op.addr, op.value)
        while not ctx.get(dut.i_req.ready):      # the windows' clearing sweep
            await ctx.tick()
        await write(control.address, control.encode(ENABLE=0))
        ctx.set(dut.i_req.valid, 1)
        ctx.set(dut.i_req.payload.op, Op.READ_CLEAR)
        ctx.set(dut.i_req.payload.addr, 0)
        seen["ready after the write"] = ctx.get(dut.i_req.ready)
        while not ctx.get(dut.i_req.ready):
            await ctx.tick()
        await ctx.tick()
        ctx.set(dut.i_req.valid, 0)
        ctx.set(dut.o_resp.ready, 1)
        while not ctx.get(dut.o_resp.valid):
            await ctx.tick()
        seen["status"] = Status(ctx.get(dut.o_resp.payload.status))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {"ready after the write": 0, "status": Status.BAD_REQUEST}
