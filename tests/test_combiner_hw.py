"""Write-combining accumulator in Amaranth's simulator (hw/combiner.py).

The block's writes are compared, in order, with the reference model's for the updates it
accepted and the flushes it took, under random valid gaps, random downstream backpressure and
flushes in the middle of traffic; the per-address sum invariant and the stream rules are
checked on the same runs. Seeds are in the test ids.
"""

import re

import numpy as np
import pytest
from amaranth import Shape
from amaranth.hdl import Fragment
from amaranth.lib import stream
from amaranth.lib.wiring import Flow
from amaranth.sim import Simulator

from neuron_fabric.golden import combiner as gc
from neuron_fabric.golden.combiner import Cause, CombinerParams
from neuron_fabric.hw.combiner import (HOLD, WriteCombiner, paced_cycles, update_layout,
                                       write_layout)


def exact(message):
    return "^" + re.escape(message) + "$"


# ----------------------------------------------------------------------------- parameters

BAD_OPTIONS = [
    {"addr_width": "32"}, {"addr_width": 1}, {"value_width": 33}, {"acc_width": 8},
    {"acc_width": True}, {"sets": 12}, {"sets": 4.0}, {"ways": 0}, {"ways": None},
    {"threshold": 0}, {"threshold": 2.5}, {"small_threshold": 50}, {"small_threshold": "4"},
    {"lossy": 1}, {"lossy": True}, {"max_updates": 1}, {"fifo_depth": 1}, {"burst": 17},
    {"burst": 2.0},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=lambda o: "-".join(map(str, o.items())))
def test_bad_parameter_is_refused_with_the_model_message(options):
    with pytest.raises((TypeError, ValueError)) as expected:
        CombinerParams(**options)
    with pytest.raises(type(expected.value), match=exact(str(expected.value))):
        WriteCombiner(**options)


def test_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        WriteCombiner(32)


def test_signature_has_the_stream_ports():
    dut = WriteCombiner(addr_width=20, value_width=8, acc_width=12)
    members = dut.signature.members
    assert members["i_upd"].flow == Flow.In
    assert members["i_upd"].signature == stream.Signature(update_layout(20, 8)).flip()
    assert members["o_wb"].flow == Flow.Out
    assert members["o_wb"].signature == stream.Signature(write_layout(20, 12))
    for name, flow in (("i_flush", Flow.In), ("o_flushing", Flow.Out), ("o_idle", Flow.Out),
                       ("o_overflow", Flow.Out)):
        assert members[name].flow == flow and Shape.cast(members[name].shape).width == 1
    assert dut.params == CombinerParams(addr_width=20, value_width=8, acc_width=12)
    Fragment.get(dut, None)   # and it elaborates


# ----------------------------------------------------------------------------- harness

class Run:
    """What a simulated run saw: accepted updates, flush points, writes, cycle numbers."""

    def __init__(self):
        self.accepted = 0
        self.flushes = []
        self.writes = []
        self.accept_cycles = []
        self.write_cycles = []
        self.valid_cycles = []
        self.overflow_cycle = None
        self.cycles = 0


def simulate(dut, addr, value, *, rng, p_valid=1.0, p_ready=1.0, p_flush=0.0, hold=None,
             flush_at=(), final_flush=True, until_idle=True, max_cycles=None, spacing=1):
    """Drive ``addr``/``value`` into ``dut`` and collect everything on its outputs.

    The source offers an update with probability ``p_valid`` per cycle and then holds it
    until it is taken; downstream is ready with probability ``p_ready`` (``hold(cycle)`` may
    force ready low); a flush is requested with probability ``p_flush`` per cycle, whenever
    the number of accepted updates is in ``flush_at`` (until one is taken), and after the
    last update when ``final_flush``. An update is offered no earlier than ``spacing`` cycles
    after the one before it was taken. The run ends at idle after the last update, or after
    ``max_cycles`` when not ``until_idle``. The stream rules of ``o_wb`` are checked on the
    way: valid, once raised, stays high with a stable payload until the transfer.
    """
    run = Run()
    n = len(addr)
    max_cycles = max_cycles or 8 * spacing * n + 300

    async def bench(ctx):
        i = 0
        offering = False
        final_taken = not final_flush
        held = None   # payload of o_wb that was valid and not taken last cycle
        pending = sorted(flush_at)
        next_offer = 0
        for cycle in range(max_cycles):
            if until_idle and i >= n and final_taken and ctx.get(dut.o_idle):
                break
            if not offering and i < n and cycle >= next_offer:
                offering = bool(rng.random() < p_valid)
            ctx.set(dut.i_upd.valid, offering)
            if i < n:
                ctx.set(dut.i_upd.payload, {"addr": int(addr[i]), "value": int(value[i])})
            ready = bool(rng.random() < p_ready) and not (hold and hold(cycle))
            ctx.set(dut.o_wb.ready, ready)
            while pending and pending[0] < i:
                pending.pop(0)
            flush = (i >= n and not final_taken) or (i < n and bool(rng.random() < p_flush)) \
                or bool(pending and pending[0] == i)
            ctx.set(dut.i_flush, flush)

            if offering and ctx.get(dut.i_upd.ready):
                i += 1
                offering = False
                next_offer = cycle + spacing
                run.accept_cycles.append(cycle)
            if flush and not ctx.get(dut.o_flushing):
                run.flushes.append(i)
                if pending and pending[0] == i:
                    pending.pop(0)
                if i >= n:
                    final_taken = True
            out_valid = ctx.get(dut.o_wb.valid)
            payload = ctx.get(dut.o_wb.payload)
            word = (int(payload.addr), int(payload.delta))
            if held is not None:
                assert out_valid and word == held, \
                    f"cycle {cycle}: o_wb dropped valid or changed payload before the transfer"
            held = None
            if out_valid:
                run.valid_cycles.append(cycle)
                if ready:
                    run.writes.append(word)
                    run.write_cycles.append(cycle)
                else:
                    held = word
            if run.overflow_cycle is None and ctx.get(dut.o_overflow):
                run.overflow_cycle = cycle
            await ctx.tick()
        else:
            if until_idle:
                raise AssertionError(f"no idle after {max_cycles} cycles: {i} of {n} updates "
                                     f"accepted, {len(run.writes)} writes seen")
            cycle = max_cycles
        run.accepted = i
        run.cycles = cycle

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return run


def check_against_model(dut, run, addr, value):
    """The writes equal the model's, in order; per address they sum to the accepted values."""
    p = dut.params
    assert run.accepted == len(addr)
    result = gc.run(p, addr, value, flush_after=run.flushes, final_flush=False)
    expected = list(zip(result.addr.tolist(), result.delta.tolist()))
    assert len(run.writes) == len(expected)
    for k, (got, want) in enumerate(zip(run.writes, expected)):
        assert got == want, f"write {k}: block {got}, model {want} ({Cause(result.cause[k])!r})"
    dropped = result.dropped if p.lossy else None
    gc.check_sums(addr, value, [w[0] for w in run.writes], [w[1] for w in run.writes],
                  dropped=dropped)
    return result


def traffic(rng, params, n, *, span=None):
    """Updates over about three times more addresses than entries, with four hot addresses
    (positive values), small values, some large ones, zeros and the most negative value."""
    span = span or min(1 << params.addr_width, 3 * params.entries + 5)
    hot = rng.integers(0, span, 4)
    is_hot = rng.random(n) < 0.3
    addr = np.where(is_hot, rng.choice(hot, n), rng.integers(0, span, n))
    low, high = params.value_range
    limit = params.threshold or high
    value = rng.integers(-limit // 6, limit // 6, n, endpoint=True)
    value = np.where(is_hot, np.abs(value), value)   # hot sums drift up to the threshold
    value[rng.random(n) < 0.08] = rng.integers(low, high, n, endpoint=True)[:1]
    value[rng.random(n) < 0.05] = 0
    value[rng.random(n) < 0.02] = low
    return addr, value


CONFIGS = {
    "base": dict(addr_width=8, value_width=8, sets=4, ways=2, threshold=50, max_updates=5,
                 fifo_depth=4, burst=2),
    "direct-mapped": dict(addr_width=6, value_width=6, sets=8, ways=1, threshold=20,
                          max_updates=3, fifo_depth=2, burst=1),
    "one-set": dict(addr_width=7, value_width=8, sets=1, ways=3, threshold=None,
                    max_updates=16, fifo_depth=3, burst=3),
    "wide-acc": dict(addr_width=9, value_width=8, acc_width=11, sets=2, ways=4,
                     threshold=100, max_updates=12, fifo_depth=8, burst=4),
    "dual": dict(addr_width=8, value_width=8, sets=4, ways=2, threshold=60,
                 small_threshold=5, max_updates=6, fifo_depth=4, burst=4),
    "lossy": dict(addr_width=8, value_width=8, sets=4, ways=2, threshold=60,
                  small_threshold=5, lossy=True, max_updates=6, fifo_depth=4, burst=1),
}

PATTERNS = {
    "free": dict(p_valid=1.0, p_ready=1.0, p_flush=0.004),
    "stalls": dict(p_valid=0.6, p_ready=0.35, p_flush=0.01),
}


@pytest.mark.parametrize("seed", [11, 12])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("config", CONFIGS)
def test_writes_match_the_model_under_backpressure_and_flushes(config, pattern, seed):
    dut = WriteCombiner(**CONFIGS[config])
    rng = np.random.default_rng(seed)
    addr, value = traffic(rng, dut.params, 400)
    run = simulate(dut, addr, value, rng=rng, flush_at=[150, 151, 300], **PATTERNS[pattern])
    result = check_against_model(dut, run, addr, value)
    assert len(run.flushes) >= 3, "the run must flush in the middle of traffic"
    assert result.stats["held"] == 0
    assert (run.overflow_cycle is not None) == result.stats["overflow_flag"]


def test_every_write_back_cause_is_exercised():
    """The random streams of the runs above reach every rule of the model."""
    seen = set()
    for config in CONFIGS:
        params = CombinerParams(**CONFIGS[config])
        addr, value = traffic(np.random.default_rng(11), params, 400)
        seen |= {Cause(c) for c in gc.run(params, addr, value).cause}
    assert seen == set(Cause)


def paced(first, addr, params):
    """:func:`paced_cycles` from cycle ``first``."""
    return [first + cycle for cycle in paced_cycles(addr, params.sets)]


def test_one_update_per_cycle_but_after_its_own_set():
    dut = WriteCombiner(addr_width=8, value_width=8, sets=4, ways=2, threshold=50,
                        max_updates=5, fifo_depth=4, burst=1)
    rng = np.random.default_rng(5)
    addr, value = traffic(rng, dut.params, 200)
    run = simulate(dut, addr, value, rng=rng, final_flush=True)
    assert run.accept_cycles == paced(run.accept_cycles[0], addr, dut.params)
    assert len(set(np.diff(run.accept_cycles))) == 2, "both paces are seen"
    check_against_model(dut, run, addr, value)


@pytest.mark.parametrize("fifo_depth", [2, 16])
def test_one_update_per_cycle_when_every_update_writes(fifo_depth):
    # Every value bypasses, so every update holds room in the FIFO until its write leaves:
    # the FIFO's entries beyond fifo_depth cover the updates in flight.
    dut = WriteCombiner(addr_width=8, value_width=8, sets=4, ways=2, threshold=10,
                        fifo_depth=fifo_depth, burst=1)
    addr = np.arange(100) % 256
    value = np.where(np.arange(100) % 2 == 0, 20, -30)
    run = simulate(dut, addr, value, rng=np.random.default_rng(0), final_flush=True)
    assert run.accept_cycles == list(range(100))
    assert run.writes == list(zip(addr.tolist(), value.tolist()))


# Cycles from an update's acceptance to its execution, and to its write entering the FIFO.
EXECUTE = 4
ENQUEUE = EXECUTE + 1


def test_full_fifo_stalls_the_input_and_nothing_is_lost():
    # Downstream never ready during the first 100 cycles. Every update but the hits writes:
    # the block takes updates while the FIFO has room for the writes of those in flight, then
    # stalls; updates that write nothing return their room and the next ones get in.
    dut = WriteCombiner(addr_width=8, value_width=8, sets=1, ways=1, threshold=None,
                        max_updates=200, fifo_depth=2, burst=1)
    entries = dut.fifo_entries
    addr = np.concatenate([np.arange(entries) + 1, [entries] * 10, [50, 51]])
    value = np.ones(addr.size, dtype=np.int64)
    run = simulate(dut, addr, value, rng=np.random.default_rng(0),
                   hold=lambda cycle: cycle < 100)
    # the first `entries` updates write all but the first (it allocates): one entry of room
    # is left, the hits pass at the pace of their room's return, the next miss takes the
    # last entry and the one after it waits for downstream
    first_stall = entries + 11
    assert run.accept_cycles[:entries] == paced(0, addr[:entries], dut.params)
    assert run.accept_cycles[first_stall - 1] < 100
    assert run.accept_cycles[first_stall] >= 100
    assert run.write_cycles[0] == 100
    check_against_model(dut, run, addr, value)


def test_burst_draining_starts_at_burst_and_empties_the_fifo():
    dut = WriteCombiner(addr_width=8, value_width=8, sets=4, ways=1, threshold=10,
                        fifo_depth=8, burst=4)
    addr = np.arange(6)
    value = np.full(6, 20)    # every value bypasses: one FIFO entry per update
    # three entries: below the burst, nothing leaves
    run = simulate(dut, addr[:3], value[:3], rng=np.random.default_rng(0), final_flush=False,
                   until_idle=False, max_cycles=40)
    assert run.accepted == 3 and run.valid_cycles == []
    # the fourth entry starts a burst that runs until the FIFO is empty
    run = simulate(dut, addr, value, rng=np.random.default_rng(0), final_flush=False,
                   until_idle=False, max_cycles=40)
    first = run.accept_cycles[3] + ENQUEUE + 1
    assert run.valid_cycles == list(range(first, first + 6)), "one back-to-back burst"
    check_against_model(dut, run, addr, value)
    # a flush drains what is below the burst size
    run = simulate(dut, addr[:3], value[:3], rng=np.random.default_rng(0))
    assert run.writes == [(0, 20), (1, 20), (2, 20)]


def test_flush_blocks_updates_until_everything_is_written():
    dut = WriteCombiner(addr_width=8, value_width=8, sets=2, ways=2, threshold=None,
                        max_updates=100, fifo_depth=4, burst=4)
    addr = np.array([0, 1, 2, 3])
    value = np.array([1, 2, 3, 4])
    # downstream stalls for 20 cycles while the flush scans: idle waits for the last write
    run = simulate(dut, addr, value, rng=np.random.default_rng(3),
                   hold=lambda cycle: cycle < 20)
    assert run.flushes == [4]
    assert run.writes == [(0, 1), (2, 3), (1, 2), (3, 4)], "set order, then way order"
    assert run.write_cycles[0] == 20
    assert run.cycles == run.write_cycles[-1] + 2, "idle two cycles after the last write"
    check_against_model(dut, run, addr, value)


def test_overflow_is_written_back_early_and_flagged():
    dut = WriteCombiner(addr_width=4, value_width=8, sets=1, ways=1, threshold=None,
                        max_updates=100, fifo_depth=2, burst=1)
    addr = np.array([3, 3, 3, 3])
    value = np.array([100, 20, 10, -128])
    run = simulate(dut, addr, value, rng=np.random.default_rng(0))
    assert run.writes == [(3, 120), (3, -118)]
    assert run.overflow_cycle == run.accept_cycles[2] + HOLD + EXECUTE + 1
    assert run.write_cycles[0] == run.accept_cycles[2] + HOLD + ENQUEUE + 1, \
        "burst=1: offered in the cycle after the write enters the FIFO"
    check_against_model(dut, run, addr, value)


def test_idle_after_reset_and_flush_of_an_empty_buffer():
    dut = WriteCombiner(addr_width=6, value_width=6, sets=2, ways=2, threshold=20,
                        fifo_depth=2)
    seen = []

    async def bench(ctx):
        seen.append(ctx.get(dut.o_idle))
        ctx.set(dut.i_flush, 1)
        await ctx.tick()
        ctx.set(dut.i_flush, 0)
        seen.append((ctx.get(dut.o_idle), ctx.get(dut.o_flushing)))
        for _ in range(2 * 3 + 2):
            await ctx.tick()
        seen.append((ctx.get(dut.o_idle), ctx.get(dut.o_flushing)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [1, (0, 1), (1, 0)]


# ----------------------------------------------------------------------------- in flight

IN_FLIGHT_CONFIGS = {
    # two ways, three tags a set: allocations, evictions, threshold, count and cancel
    "two-way": dict(addr_width=8, value_width=8, sets=4, ways=2, threshold=40,
                    max_updates=4, fifo_depth=4, burst=1),
    # one way, no threshold, sums that overflow: each miss evicts the entry just written
    "one-way-overflow": dict(addr_width=8, value_width=8, sets=4, ways=1, threshold=None,
                             max_updates=6, fifo_depth=4, burst=1),
}


def in_flight_traffic(rng, params, n, *, sets):
    """Updates to three tags in each of ``sets`` sets, taken in turn, so that each update's
    nearest predecessor in its set is ``sets`` updates ahead; values that accumulate, cancel,
    bypass and overflow."""
    tags = rng.integers(0, 3, n)
    addr = (np.arange(n) % sets) + params.sets * tags
    limit = params.threshold or params.value_range[1]
    value = rng.integers(-limit // 3, limit // 2, n, endpoint=True)
    value[rng.random(n) < 0.1] = 0
    if params.threshold is not None:
        value[rng.random(n) < 0.05] = params.threshold
    else:
        value[rng.random(n) < 0.3] = params.value_range[1]
    return addr, value


@pytest.mark.parametrize("distance", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("config", IN_FLIGHT_CONFIGS)
def test_back_to_back_updates_see_the_one_ahead_in_their_set(config, distance):
    """Offered every cycle, each update's predecessor in its set is ``distance`` updates
    ahead. When the update is read, its predecessor is deciding (2, and 1 after its cycle
    held), executing (3), being written back (4) or in memory (5 and more; 5 wraps around
    the four sets, so that some predecessors are 1 ahead)."""
    dut = WriteCombiner(**IN_FLIGHT_CONFIGS[config])
    rng = np.random.default_rng(distance)
    addr, value = in_flight_traffic(rng, dut.params, 240, sets=distance)
    run = simulate(dut, addr, value, rng=rng)
    assert run.accept_cycles[:200] == paced(run.accept_cycles[0], addr, dut.params)[:200]
    result = check_against_model(dut, run, addr, value)
    assert {Cause.EVICT, Cause.FLUSH} <= set(result.cause.tolist())


@pytest.mark.parametrize("spacing", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("config", IN_FLIGHT_CONFIGS)
def test_spaced_updates_to_one_set_see_the_one_ahead(config, spacing):
    """One set, each update offered ``spacing`` cycles after the one before was taken: the
    cycles between them carry no update, and the state written ahead is found all the same."""
    dut = WriteCombiner(**IN_FLIGHT_CONFIGS[config])
    rng = np.random.default_rng(10 + spacing)
    addr, value = in_flight_traffic(rng, dut.params, 120, sets=1)
    run = simulate(dut, addr, value, rng=rng, spacing=spacing)
    assert np.all(np.diff(run.accept_cycles) == spacing)
    check_against_model(dut, run, addr, value)
