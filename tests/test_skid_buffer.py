"""The skid buffer: every transfer through, in order, one a clock, with both of its outputs'
handshake signals and its output payload held in flip-flops."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from neuron_fabric.hw.skid_buffer import SkidBuffer

from axi_sim import Sink, Source, step


def run(dut, values, *, seed, pause):
    rng = np.random.default_rng(seed)
    source = Source(dut.i.valid, dut.i.ready, {"payload": dut.i.payload}, rng=rng,
                    pause=pause)
    sink = Sink(dut.o.valid, dut.o.ready, {"payload": dut.o.payload}, rng=rng, pause=pause,
                name="o")
    source.queue.extend({"payload": v} for v in values)
    cycles = 0

    async def bench(ctx):
        nonlocal cycles
        while len(sink.beats) < len(values):
            assert cycles < 10 * len(values) + 10, "the buffer stopped passing transfers"
            await step(ctx, [source, sink])
            cycles += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return [beat["payload"] for beat in sink.beats], cycles


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_transfer_goes_through_in_order_under_random_pauses(seed):
    values = [int(v) for v in np.random.default_rng(seed).integers(1 << 12, size=300)]
    got, _ = run(SkidBuffer(12), values, seed=seed, pause=0.4)
    assert got == values


def test_one_transfer_a_clock_without_pauses():
    values = list(range(100))
    got, cycles = run(SkidBuffer(8), values, seed=0, pause=0.0)
    assert got == values
    assert cycles <= len(values) + 2


def test_input_ready_and_output_valid_wait_on_no_logic():
    """Within a cycle, the output's ready moves nothing on the input side, and the input's
    valid and payload move nothing on the output side."""
    dut = SkidBuffer(8)

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 5)
        ctx.set(dut.o.ready, 0)
        for _ in range(3):
            await ctx.tick()
        assert (ctx.get(dut.o.valid), ctx.get(dut.i.ready)) == (1, 0)  # head and spare full
        ctx.set(dut.o.ready, 1)
        assert ctx.get(dut.i.ready) == 0
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.i.payload, 9)
        assert (ctx.get(dut.o.valid), ctx.get(dut.o.payload)) == (1, 5)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_the_head_moves_only_at_a_clock():
    """Neither the output's ready nor the input's payload moves
    the output's payload within a cycle; a pop loads the spare into it at the clock."""
    dut = SkidBuffer(8)

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.o.ready, 0)
        for value in (5, 6, 7):
            ctx.set(dut.i.payload, value)
            await ctx.tick()
        assert (ctx.get(dut.o.valid), ctx.get(dut.i.ready)) == (1, 0)  # head 5, spare 6
        ctx.set(dut.i.valid, 0)
        for ready, payload in ((1, 9), (0, 3), (1, 4)):
            ctx.set(dut.o.ready, ready)
            ctx.set(dut.i.payload, payload)
            assert ctx.get(dut.o.payload) == 5
        await ctx.tick()
        assert (ctx.get(dut.o.valid), ctx.get(dut.o.payload)) == (1, 6)
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
