"""The FP32 passthrough: byte-exact, in order, bounded reads in flight, under backpressure."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from neuron_fabric.hw.passthrough import Fp32Passthrough


@pytest.mark.parametrize("seed", [0, 1])
def test_lines_pass_byte_exact_in_order_under_backpressure(seed):
    rng = np.random.default_rng(seed)
    dut = Fp32Passthrough(line_bits=128, max_reads=3)
    requests = [(int(rng.random() < 0.5), int(rng.integers(0, 1 << 32)),
                 int.from_bytes(rng.bytes(16), "little")) for _ in range(120)]
    sent, returned, memory_queue = [], [], []
    most_in_flight = 0

    async def bench(ctx):
        nonlocal most_in_flight
        pending = list(requests)
        reads = sum(1 for w, _, _ in requests if not w)
        for _ in range(5000):
            if not pending and len(returned) == reads:
                break
            offer = bool(pending) and rng.random() < 0.8
            ctx.set(dut.i_req.valid, offer)
            if offer:
                write, addr, data = pending[0]
                ctx.set(dut.i_req.payload, {"write": write, "addr": addr, "data": data})
            ctx.set(dut.o_mem.ready, rng.random() < 0.7)
            ctx.set(dut.o_data.ready, rng.random() < 0.7)
            answer = bool(memory_queue) and rng.random() < 0.6
            ctx.set(dut.i_mem.valid, answer)
            if answer:
                ctx.set(dut.i_mem.payload, memory_queue[0])
            most_in_flight = max(most_in_flight, ctx.get(dut.reads_in_flight))
            if offer and ctx.get(dut.i_req.ready):
                assert ctx.get(dut.o_mem.valid) and ctx.get(dut.o_mem.ready)
                pending.pop(0)
            if ctx.get(dut.o_mem.valid) and ctx.get(dut.o_mem.ready):
                m = ctx.get(dut.o_mem.payload)
                sent.append((int(m.write), int(m.addr), int(m.data)))
                if not m.write:
                    memory_queue.append(int(m.addr) * 3 + 1)  # the "memory" answers f(addr)
            if answer and ctx.get(dut.i_mem.ready):
                assert ctx.get(dut.o_data.valid) and ctx.get(dut.o_data.ready)
                returned.append(ctx.get(dut.o_data.payload))
                memory_queue.pop(0)
            await ctx.tick()
        else:
            raise AssertionError(f"{len(pending)} requests and {reads - len(returned)} reads' "
                                 f"data still pending after 5000 cycles")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert sent == requests
    assert returned == [addr * 3 + 1 for w, addr, _ in requests if not w]
    assert most_in_flight == 3  # the limit is reached and never passed


def test_read_data_without_a_read_in_flight_is_not_taken():
    dut = Fp32Passthrough(line_bits=128)

    async def bench(ctx):
        ctx.set(dut.i_mem.valid, 1)
        ctx.set(dut.o_data.ready, 1)
        assert not ctx.get(dut.i_mem.ready) and not ctx.get(dut.o_data.valid)
        await ctx.tick()
        assert ctx.get(dut.reads_in_flight) == 0
        # One read goes out; its data is taken the cycle after, and a beat after it is not.
        ctx.set(dut.i_mem.valid, 0)
        ctx.set(dut.i_req.valid, 1)
        ctx.set(dut.i_req.payload, {"write": 0, "addr": 7, "data": 0})
        ctx.set(dut.o_mem.ready, 1)
        await ctx.tick()
        ctx.set(dut.i_req.valid, 0)
        ctx.set(dut.i_mem.valid, 1)
        assert ctx.get(dut.i_mem.ready) and ctx.get(dut.o_data.valid)
        await ctx.tick()
        assert not ctx.get(dut.i_mem.ready) and not ctx.get(dut.o_data.valid)
        assert ctx.get(dut.reads_in_flight) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(line_bits=36), ValueError, "line_bits must be a multiple of 8, not 36"),
    (dict(line_bits=2048), ValueError, "line_bits must be between 8 and 1024, not 2048"),
    (dict(max_reads=0), ValueError, "max_reads must be between 1 and 1024, not 0"),
    (dict(max_reads="8"), TypeError, "max_reads must be an integer, not '8'"),
])
def test_bad_parameters_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error) as info:
        Fp32Passthrough(**kwargs)
    assert str(info.value) == message
