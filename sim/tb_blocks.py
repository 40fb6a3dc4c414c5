"""cocotb tests of the emitted Verilog of each block: the lane engines, the FP32 passthrough
and the CSR block, against the golden model and the register map.

The design under test is :func:`neuron_fabric.sim.cocotb_bench.blocks_wrapper` of a
generated manifest: every block side by side, its ports prefixed by its role
(``sign_count__i__payload``). The runner sets ``NFABRIC_MANIFEST`` (the folder of the
Verilog), ``NFABRIC_SEEDS`` (comma-separated; each seed is in the test's name),
``NFABRIC_VECTORS`` (input vectors per engine test, default 200) and optionally
``NFABRIC_STATS``.

The engines are combinational: each vector is applied, settles after 1 ns and is compared
in full (accumulators, flags, every line of the readout). The passthrough and the CSR block are
clocked; their inputs change on the falling edge and outputs are sampled in the read-only
phase after it.
"""

import collections
import os
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, Timer

from ..golden import gbinary, gternary
from ..golden import lines as gl
from ..golden.formats import READOUTS_BY_ROUTE, Route, count_limit, sum_limit
from ..golden.regmap import Access, register_map
from ..hw.sign_count import majority_value
from ..hw.ternary_gate import gate_less_one_value
from .cocotb_bench import CLOCK_NS, CsrBus, Manifest, Stats, Stream, Wire, record_stats

__all__ = []  # cocotb collects the tests by decorator

SEEDS = [int(s) for s in os.environ.get("NFABRIC_SEEDS", "1").split(",") if s.strip()]
VECTORS = int(os.environ.get("NFABRIC_VECTORS", "200"))


def _manifest():
    folder = os.environ.get("NFABRIC_MANIFEST")
    if not folder:
        raise RuntimeError("NFABRIC_MANIFEST must name the folder of the generated Verilog")
    return Manifest(folder)


def _engine(dut, manifest, role):
    i = Stream(dut, "i", manifest.payload(role, "i"), names=f"{role}__")
    o = Stream(dut, "o", manifest.payload(role, "o"), names=f"{role}__")
    return i, o


async def _apply(i, o, word):
    """Apply one input word; check the handshake passes through; return the output word."""
    i.payload.set(word)
    for valid, ready in ((1, 1), (0, 0)):
        i.valid.set(valid)
        o.ready.set(ready)
        await Timer(1, "ns")
        assert (o.valid.get(), i.ready.get()) == (valid, ready), \
            "a combinational stage must pass valid forward and ready back"
        if valid:
            out = o.payload.get()
    return out


def _readout_line(lines, beat):
    """Line ``beat`` of golden readout ``lines`` as an integer: what an engine's ``readout``
    output carries for that beat (0 past the readout's last line)."""
    return gl.line_to_int(lines[beat]) if beat < len(lines) else 0


def _majority_fields(num_workers, *, max_workers):
    """The ``majority`` input of a sign-count engine by the manifest's flat field names."""
    width = max_workers.bit_length()
    value = majority_value(num_workers, max_workers=max_workers)
    return {"majority.above": value & ((1 << width) - 1), "majority.below": value >> width}


def _finish(name, stats, started):
    stats.wall = time.perf_counter() - started
    record_stats(name, stats)


def _lanes(word, field, layout, lane_bits, lanes, signed=False):
    return gl.int_to_lanes(layout.get(word, field), lane_bits=lane_bits, lanes=lanes,
                           signed=signed)


@cocotb.test(timeout_time=1, timeout_unit="sec")
@cocotb.parametrize(seed=SEEDS)
async def sign_count_folds_and_reads_out_like_the_model(dut, seed):
    """Random counts (full and tie values favoured), votes, fold, NUM_WORKERS, readout and
    beat: the folded counters, the saturation flag and the beat's readout line match the
    model."""
    manifest = _manifest()
    p = manifest.params
    i, o = _engine(dut, manifest, "sign_count")
    rng = np.random.default_rng([seed, 1])
    L, CW, MW = p.line_bits, p.counter_bits, p.max_workers
    limit = count_limit(CW)
    stats, started = Stats(), time.perf_counter()
    for n in range(VECTORS):
        num_workers = int(rng.integers(1, MW + 1))
        counts = rng.integers(0, limit + 1, L)
        special = rng.random(L) < 0.3
        counts[special] = rng.choice([limit, num_workers // 2, (num_workers + 1) // 2, 0],
                                     int(special.sum()))
        counts = np.minimum(counts, limit)
        votes = rng.integers(0, 2, L)
        fold = (rng.random(L) < 0.7).astype(int)  # a bit per lane
        readouts = READOUTS_BY_ROUTE[Route.GBINARY]
        readout = readouts[n % len(readouts)]
        beat = int(rng.integers(0, max(2, CW)))
        word = i.layout.pack(counts=gl.lanes_to_int(counts, lane_bits=CW),
                             votes=gl.lanes_to_int(votes, lane_bits=1),
                             fold=gl.lanes_to_int(fold, lane_bits=1),
                             readout=int(readout), beat=beat,
                             **_majority_fields(num_workers, max_workers=MW))
        out = await _apply(i, o, word)
        want_counts = np.minimum(counts + fold * votes, limit)
        got_counts = _lanes(out, "counts", o.layout, CW, L)
        assert np.array_equal(got_counts, want_counts), \
            f"vector {n}: folded counts differ at lanes {np.flatnonzero(got_counts != want_counts)[:8]}"
        want_sat = gl.lanes_to_int(fold & votes & (counts == limit), lane_bits=1)
        assert o.layout.get(out, "saturated") == want_sat, f"vector {n}: saturated lanes"
        lines = gbinary.readout(counts[None].astype(np.uint8), readout=readout,
                                num_workers=num_workers, counter_bits=CW)
        want = _readout_line(lines, beat)
        got = o.layout.get(out, "readout")
        assert got == want, f"vector {n}: {readout.name} line {beat} with " \
                            f"N={num_workers} differs (bits {bin(got ^ want).count('1')} wrong)"
        stats.lines += 2
        stats.requests += 1
    _finish(f"sign_count_folds_and_reads_out_like_the_model/seed={seed}", stats, started)


@cocotb.test(timeout_time=1, timeout_unit="sec")
@cocotb.parametrize(seed=SEEDS)
async def ternary_gate_folds_and_reads_out_like_the_model(dut, seed):
    """Random sums (limits favoured), codes with invalid ``10`` among them, fold, GATE,
    readout and beat: sums, both flags and the beat's readout line match the model."""
    manifest = _manifest()
    p = manifest.params
    i, o = _engine(dut, manifest, "ternary_gate")
    rng = np.random.default_rng([seed, 2])
    lanes, CW = p.line_bits // 2, p.counter_bits
    limit = sum_limit(p.max_workers, CW)
    value_of = np.array([0, 1, 0, -1])
    stats, started = Stats(), time.perf_counter()
    for n in range(VECTORS):
        sums = rng.integers(-limit, limit + 1, lanes)
        special = rng.random(lanes) < 0.3
        sums[special] = rng.choice([limit, -limit, 0], int(special.sum()))
        codes = rng.choice([0, 1, 3, 2], lanes, p=[0.3, 0.3, 0.3, 0.1] if n % 2 else
                           [0.34, 0.33, 0.33, 0.0])
        fold = (rng.random(lanes) < 0.7).astype(int)  # a bit per lane
        gate = int(rng.choice([0, 1, int(rng.integers(0, limit + 2)), 255]))
        readouts = READOUTS_BY_ROUTE[Route.GTERNARY]
        readout = readouts[n % len(readouts)]
        beat = int(rng.integers(0, max(2, (CW + 2) // 2)))
        word = i.layout.pack(sums=gl.lanes_to_int(sums, lane_bits=CW + 1),
                             codes=gl.lanes_to_int(codes, lane_bits=2),
                             fold=gl.lanes_to_int(fold, lane_bits=1),
                             gate_less_one=gate_less_one_value(gate, counter_bits=CW),
                             readout=int(readout), beat=beat)
        out = await _apply(i, o, word)
        total = sums + fold * value_of[codes]
        want_sums = np.clip(total, -limit, limit)
        got_sums = _lanes(out, "sums", o.layout, CW + 1, lanes, signed=True)
        assert np.array_equal(got_sums, want_sums), \
            f"vector {n}: folded sums differ at lanes {np.flatnonzero(got_sums != want_sums)[:8]}"
        assert o.layout.get(out, "saturated") == gl.lanes_to_int(np.abs(total) > limit, lane_bits=1), \
            f"vector {n}: saturated lanes"
        assert o.layout.get(out, "invalid") == gl.lanes_to_int(fold & (codes == 2), lane_bits=1), \
            f"vector {n}: invalid lanes"
        lines = gternary.readout(sums[None].astype(np.int8), readout=readout, gate=gate,
                                 counter_bits=CW)
        assert o.layout.get(out, "readout") == _readout_line(lines, beat), \
            f"vector {n}: {readout.name} line {beat} with GATE={gate} differs"
        stats.lines += 2
        stats.requests += 1
    _finish(f"ternary_gate_folds_and_reads_out_like_the_model/seed={seed}", stats, started)


async def _clock(dut):
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test(timeout_time=2, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def passthrough_keeps_bytes_and_order_under_backpressure(dut, seed):
    """Writes and reads with random idles, memory backpressure and read latency: requests
    leave unchanged and in order, read data returns unchanged and in order, and no more
    than ``max_reads`` reads are ever in flight."""
    manifest = _manifest()
    p, max_reads = manifest.params, manifest.data["max_reads"]
    names = "passthrough__"
    req = Stream(dut, "i_req", manifest.payload("passthrough", "i_req"), names=names)
    mem = Stream(dut, "o_mem", manifest.payload("passthrough", "o_mem"), names=names)
    rdata = Stream(dut, "i_mem", manifest.payload("passthrough", "i_mem"), names=names)
    odata = Stream(dut, "o_data", manifest.payload("passthrough", "o_data"), names=names)
    in_flight = Wire(dut, f"{names}reads_in_flight")
    rng = np.random.default_rng([seed, 3])
    await _clock(dut)
    for wire in (req.valid, mem.ready, rdata.valid, odata.ready):
        wire.set(0)
    n = 300
    sent = [dict(write=int(rng.random() < 0.4), addr=int(rng.integers(0, 1 << 32)),
                 data=int.from_bytes(rng.bytes(p.line_bits // 8), "little")) for _ in range(n)]
    words = [req.layout.pack(**r) for r in sent]
    out, returned, answers = [], collections.deque(), []
    k, cycle, outstanding = 0, 0, 0
    stats, started = Stats(), time.perf_counter()
    reads = sum(1 for r in sent if not r["write"])
    while (k < n or len(answers) < reads) and cycle < 40 * n:
        offer = k < n and rng.random() < 0.8
        req.valid.set(offer)
        if offer:
            req.payload.set(words[k])
        # Long memory stalls now and then, so that reads pile up to the limit.
        mem_ready = (cycle // 50) % 3 != 1 and rng.random() < 0.7
        mem.ready.set(mem_ready)
        give = bool(returned) and returned[0][0] <= cycle
        rdata.valid.set(give)
        if give:
            rdata.payload.set(returned[0][1])
        take = rng.random() < 0.7
        odata.ready.set(take)
        await ReadOnly()
        assert in_flight.get() == outstanding <= max_reads, \
            f"cycle {cycle}: reads_in_flight {in_flight.get()}, expected {outstanding}"
        if mem_ready and mem.valid.get():
            out.append(mem.payload.get())
            if not mem.layout.get(out[-1], "write"):
                outstanding += 1
                returned.append((cycle + int(rng.integers(1, 20)),
                                 int.from_bytes(rng.bytes(p.line_bits // 8), "little")))
        if offer and req.ready.get():
            k += 1
        if take and odata.valid.get():
            assert give, f"cycle {cycle}: o_data valid without read data"
            answers.append(odata.payload.get())
            expected_data = returned.popleft()[1]
            assert answers[-1] == expected_data, f"cycle {cycle}: read data changed"
            outstanding -= 1
        elif give and rdata.ready.get():
            raise AssertionError(f"cycle {cycle}: read data taken but not passed on")
        cycle += 1
        await FallingEdge(dut.clk)
    assert out == words, "memory requests must leave unchanged and in order"
    assert len(answers) == reads
    stats.cycles, stats.requests, stats.lines = cycle, n, n + reads
    _finish(f"passthrough_keeps_bytes_and_order_under_backpressure/seed={seed}", stats, started)


@cocotb.test(timeout_time=2, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def csr_block_follows_the_register_map(dut, seed):
    """Every register through the bus: constants, RW storage (masked to its fields and
    reset values), W strobes that pulse once, RW1C flags (a set beats a clear in the same
    cycle), hardware-driven R fields, the ``_written`` pulses, and unmapped addresses."""
    manifest = _manifest()
    regmap = register_map(manifest.params)
    names = "csr_block__"
    rng = np.random.default_rng([seed, 4])
    await _clock(dut)
    csr = CsrBus(dut, manifest.registers, names=names, bus="bus")
    csr.idle()
    stats, started = Stats(), time.perf_counter()
    inputs = {}  # port name -> Wire for R fields and RW1C set inputs
    for reg in regmap:
        for f in reg.fields:
            port = f"{reg.name}_{f.name}".lower()
            if f.access is Access.R and f.const is None:
                inputs[port] = Wire(dut, f"{names}fields__{port}")
            elif f.access is Access.RW1C:
                inputs[port + "_set"] = Wire(dut, f"{names}fields__{port}_set")
    for wire in inputs.values():
        wire.set(0)
    await FallingEdge(dut.clk)

    async def check(reg, want):
        got = await csr.read(reg.address)
        stats.csr_reads += 1
        assert got == want, f"{reg.name} reads {got:#010x}, the register map says {want:#010x}"

    for reg in regmap:
        await check(reg, reg.reset)
    for reg in regmap:
        value = int(rng.integers(0, 1 << 32))
        stored = sum(f.mask for f in reg.fields if f.access is Access.RW)
        strobes = [f for f in reg.fields if f.access is Access.W]
        written = getattr(dut, f"{names}fields__{reg.name.lower()}_written", None)
        csr.addr.set(reg.address)
        csr.w_data.set(value)
        csr.w_stb.set(1)
        await FallingEdge(dut.clk)
        csr.w_stb.set(0)
        await ReadOnly()
        for f in strobes:
            pulse = Wire(dut, f"{names}fields__{reg.name}_{f.name}".lower())
            assert pulse.get() == f.get(value), f"{reg.name}.{f.name} must pulse on a write of 1"
        if written is not None:
            assert int(written.value) == 1, f"{reg.name}_written must pulse after a write"
        await FallingEdge(dut.clk)
        for f in strobes:
            pulse = Wire(dut, f"{names}fields__{reg.name}_{f.name}".lower())
            assert pulse.get() == 0, f"{reg.name}.{f.name} must pulse for one cycle only"
        want = (reg.reset & ~stored) | (value & stored)
        want &= ~sum(f.mask for f in reg.fields if f.access is Access.RW1C)
        await check(reg, want)
    # Hardware-driven fields read what the hardware drives.
    for reg in regmap:
        driven = [f for f in reg.fields if f.access is Access.R and f.const is None]
        if not driven:
            continue
        value = 0
        for f in driven:
            v = int(rng.integers(0, 1 << f.width))
            inputs[f"{reg.name}_{f.name}".lower()].set(v)
            value |= v << f.offset
        await FallingEdge(dut.clk)
        await check(reg, value)
    # Sticky flags: set by the hardware, kept, cleared by writing 1; set wins over clear.
    errors = regmap["ERRORS"]
    for f in errors.fields:
        flag = inputs[f"errors_{f.name}_set".lower()]
        flag.set(1)
        await FallingEdge(dut.clk)
        flag.set(0)
        await check(errors, f.mask)
        await csr.write(errors.address, 0xFFFF_FFFF & ~f.mask)
        await check(errors, f.mask)
        flag.set(1)
        await csr.write(errors.address, f.mask)  # the set in the same cycle wins
        flag.set(0)
        await check(errors, f.mask)
        await csr.write(errors.address, f.mask)
        await check(errors, 0)
    # Addresses that are not registers read 0 and ignore writes.
    mapped = {reg.address for reg in regmap}
    width = manifest.ports("csr_block")["bus__addr"][1]
    for addr in [a for a in range(0, 1 << width, 4) if a not in mapped][:16]:
        await csr.write(addr, 0xFFFF_FFFF)
        got = await csr.read(addr)
        assert got == 0, f"unmapped address {addr:#x} reads {got:#x}"
    stats.cycles = csr.cycles
    _finish(f"csr_block_follows_the_register_map/seed={seed}", stats, started)
