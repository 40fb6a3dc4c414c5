"""cocotb tests of the write-combining accumulator's emitted Verilog.

The design under test is :class:`neuron_fabric.hw.combiner.WriteCombiner` converted to Verilog
with ports ``clk``, ``rst``, ``i_upd__valid``, ``i_upd__ready``, ``i_upd__payload`` (``addr`` in
the low ``addr_width`` bits, ``value`` above it), ``o_wb__valid``, ``o_wb__ready``,
``o_wb__payload`` (``addr`` low, ``delta`` above), ``i_flush``, ``o_flushing``, ``o_idle`` and
``o_overflow``. Its parameters come in the environment variable ``COMBINER_PARAMS`` (JSON of
:class:`neuron_fabric.golden.combiner.CombinerParams` keywords) and the random seed in
``COMBINER_SEED``; the runner in ``tests/test_combiner_cocotb.py`` sets both.

Every test drives updates with random gaps, random downstream backpressure and flushes,
records what the block accepted and wrote, and requires the writes to equal, in order, those
of :func:`neuron_fabric.golden.combiner.run` for the accepted updates and the flushes taken,
and to sum per address to the accepted values. Inputs change on the falling clock edge and
outputs are sampled in the read-only phase after it, so one loop iteration is one cycle.
"""

import json
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge

from neuron_fabric.golden import combiner as gc
from neuron_fabric.hw.combiner import paced_cycles

__all__ = ["matches_model_under_backpressure_and_flushes", "flows_one_update_per_cycle"]

CLOCK_NS = 10


def _params():
    return gc.CombinerParams(**json.loads(os.environ.get("COMBINER_PARAMS", "{}")))


def _rng(salt):
    return np.random.default_rng([int(os.environ.get("COMBINER_SEED", "1")), salt])


def _traffic(rng, p, n):
    """Updates over three times more addresses than entries; four hot addresses get
    positive values so that sums reach the threshold; some large values, zeros and the most
    negative value."""
    span = min(1 << p.addr_width, 3 * p.entries + 5)
    hot = rng.integers(0, span, 4)
    is_hot = rng.random(n) < 0.3
    addr = np.where(is_hot, rng.choice(hot, n), rng.integers(0, span, n))
    low, high = p.value_range
    limit = p.threshold or high
    value = rng.integers(-limit // 6, limit // 6, n, endpoint=True)
    value = np.where(is_hot, np.abs(value), value)
    big = rng.random(n) < 0.08
    value[big] = rng.integers(low, high, int(big.sum()), endpoint=True)
    value[rng.random(n) < 0.05] = 0
    value[rng.random(n) < 0.02] = low
    return addr, value


class _Port:
    """Packing of the flattened payload ports."""

    def __init__(self, p):
        self.p = p
        self.addr_mask = (1 << p.addr_width) - 1

    def pack_update(self, addr, value):
        return ((int(value) & ((1 << self.p.value_width) - 1)) << self.p.addr_width) | int(addr)

    def unpack_write(self, word):
        delta = word >> self.p.addr_width
        if delta >> (self.p.acc_width - 1):
            delta -= 1 << self.p.acc_width
        return word & self.addr_mask, delta


def _high(signal):
    """A 1-bit output as a bool; X or Z raises ``ValueError``."""
    return bool(signal.value)


async def _reset(dut):
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    dut.rst.value = 1
    dut.i_upd__valid.value = 0
    dut.i_upd__payload.value = 0
    dut.o_wb__ready.value = 0
    dut.i_flush.value = 0
    await ClockCycles(dut.clk, 2)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


async def _drive(dut, p, addr, value, rng, *, p_valid, p_ready, p_flush, flush_at=()):
    """Run the traffic to the end, then flush and wait for idle. Returns
    ``(accepted, flushes, writes, accept_cycles)``."""
    port = _Port(p)
    n = len(addr)
    i = 0
    offering = False
    final_taken = False
    pending = sorted(flush_at)
    flushes, writes, accept_cycles = [], [], []
    held = None
    for cycle in range(40 * n + 1000):
        await FallingEdge(dut.clk)
        if not offering and i < n:
            offering = bool(rng.random() < p_valid)
        dut.i_upd__valid.value = int(offering)
        if i < n:
            dut.i_upd__payload.value = port.pack_update(addr[i], value[i])
        ready = bool(rng.random() < p_ready)
        dut.o_wb__ready.value = int(ready)
        while pending and pending[0] < i:
            pending.pop(0)
        flush = (i >= n and not final_taken) or (i < n and bool(rng.random() < p_flush)) \
            or bool(pending and pending[0] == i)
        dut.i_flush.value = int(flush)
        await ReadOnly()
        if i >= n and final_taken and not flush and _high(dut.o_idle):
            break
        if offering and _high(dut.i_upd__ready):
            i += 1
            offering = False
            accept_cycles.append(cycle)
        if flush and not _high(dut.o_flushing):
            flushes.append(i)
            if pending and pending[0] == i:
                pending.pop(0)
            final_taken = final_taken or i >= n
        word = None
        if _high(dut.o_wb__valid):
            word = port.unpack_write(dut.o_wb__payload.value.to_unsigned())
        assert held is None or word == held, \
            f"cycle {cycle}: o_wb dropped valid or changed its payload before the transfer"
        held = None
        if word is not None:
            if ready:
                writes.append(word)
            else:
                held = word
    else:
        raise AssertionError(f"no idle: {i} of {n} updates accepted, {len(writes)} writes")
    return i, flushes, writes, accept_cycles


def _compare(p, addr, value, accepted, flushes, writes):
    assert accepted == len(addr)
    result = gc.run(p, addr, value, flush_after=flushes, final_flush=False)
    expected = list(zip(result.addr.tolist(), result.delta.tolist()))
    assert len(writes) == len(expected), f"{len(writes)} writes, model {len(expected)}"
    for k, (got, want) in enumerate(zip(writes, expected)):
        assert got == want, f"write {k}: block {got}, model {want}"
    gc.check_sums(addr, value, [w[0] for w in writes], [w[1] for w in writes],
                  dropped=result.dropped if p.lossy else None)
    return result


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def matches_model_under_backpressure_and_flushes(dut):
    """Random gaps, downstream ready 40 % of the time, flushes in the middle of traffic."""
    p = _params()
    rng = _rng(1)
    addr, value = _traffic(rng, p, 300)
    await _reset(dut)
    accepted, flushes, writes, _ = await _drive(dut, p, addr, value, rng, p_valid=0.6,
                                                p_ready=0.4, p_flush=0.01,
                                                flush_at=[100, 200])
    assert len(flushes) >= 3
    result = _compare(p, addr, value, accepted, flushes, writes)
    await RisingEdge(dut.clk)
    await ReadOnly()
    assert _high(dut.o_overflow) == result.stats["overflow_flag"]


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def flows_one_update_per_cycle(dut):
    """Without backpressure the block takes an update every cycle, and one cycle more after
    an update of the set of the update taken just before it."""
    p = _params()
    rng = _rng(2)
    addr, value = _traffic(rng, p, 200)
    await _reset(dut)
    accepted, flushes, writes, cycles = await _drive(dut, p, addr, value, rng, p_valid=1.0,
                                                     p_ready=1.0, p_flush=0.0)
    assert [c - cycles[0] for c in cycles] == paced_cycles(addr, p.sets), \
        "an update must be accepted in every cycle while the FIFO has room, but after its set"
    assert cycles[-1] - cycles[0] + 1 > len(addr), "the traffic has updates that wait"
    _compare(p, addr, value, accepted, flushes, writes)
