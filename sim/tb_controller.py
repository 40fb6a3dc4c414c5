"""cocotb tests of the controller top's emitted Verilog against the golden transaction model.

The runner (:mod:`neuron_fabric.sim.regression`, or ``tests/test_cocotb_controller.py``)
builds the top named in a generated manifest and sets:

``NFABRIC_MANIFEST``
    The folder of the generated Verilog and its ``manifest.json`` (required).
``NFABRIC_TRACES``
    The folder of the captured traces (``digits_cnn.npz``/``.json``, ``char_lm.npz``/``.json``);
    the real-gradient tests need it.
``NFABRIC_SEEDS``
    Comma-separated seeds (default ``1``); every randomized test runs once per seed, and
    the seed is part of its name (``random_traffic_matches_model/seed=1``).
``NFABRIC_TRACE_STEPS``, ``NFABRIC_TRACE_LINES``
    How many captured steps of each trace to replay (default: all) and at most how many
    lines per worker and route (default: all).
``NFABRIC_WORKLOADS``
    Comma-separated traces to replay (default: every workload).
``NFABRIC_RANDOM_OPS``
    Operations of the random-traffic test (default 400).
``NFABRIC_STATS``
    A file to which every test appends one JSON line: cycles, requests, lines checked.

Every response beat, memory request and CSR read is compared bit for bit with
:class:`~neuron_fabric.golden.controller.ControllerModel` by
:class:`~neuron_fabric.sim.cocotb_bench.ControllerBench`. Every test has a timeout, so a
hung handshake fails instead of hanging.
"""

import os
import pathlib

import cocotb
import numpy as np

from ..golden import gbinary, gternary
from ..host import traces as traces_module
from ..golden.controller import Op, Request, Status
from ..golden.formats import READOUTS_BY_ROUTE, Readout, Route, count_limit
from ..golden.params import ADDR_BITS
from ..golden.regmap import ERROR_FLAGS, register_map
from . import scenarios
from .cocotb_bench import (ControllerBench, CsrRead, CsrWrite, Hold, Manifest, Reset, Timing,
                           record_stats)

__all__ = []  # cocotb collects the tests by decorator

SEEDS = [int(s) for s in os.environ.get("NFABRIC_SEEDS", "1").split(",") if s.strip()]
WORKLOADS = [w for w in os.environ.get("NFABRIC_WORKLOADS", ",".join(traces_module.WORKLOADS))
             .split(",") if w.strip()]
#: Roles kept exact: they travel as FP32 lines through the passthrough.
PROTECTED_ROLES = ("head", "embedding", "norm", "bias")
#: Roles aggregated on the low-bit routes.
LOW_BIT_ROLES = ("backbone",)
STALLS = Timing(idle=0.2, backpressure=0.25, mem_backpressure=0.25, mem_latency=(1, 8))
TRACE_TIMING = Timing(idle=0.05, backpressure=0.1, mem_backpressure=0.1, mem_latency=(1, 8))


def _manifest():
    folder = os.environ.get("NFABRIC_MANIFEST")
    if not folder:
        raise RuntimeError("NFABRIC_MANIFEST must name the folder of the generated Verilog")
    return Manifest(folder)


def _narrow_counters():
    """Whether the counters of the Verilog under test hold fewer votes than MAX_WORKERS."""
    folder = os.environ.get("NFABRIC_MANIFEST")
    if not folder:
        return False
    p = Manifest(folder).params
    return count_limit(p.counter_bits) < p.max_workers


async def _bench(dut, seed, timing=STALLS):
    bench = ControllerBench(dut, _manifest(), seed=seed, timing=timing)
    await bench.start()
    return bench


def _done(name, bench, **extra):
    record_stats(name, bench.stats, **extra)
    dut_log = bench.log
    if dut_log is not None:
        s = bench.stats
        dut_log.info(f"{name}: {s.requests} requests, {s.lines} response lines and "
                     f"{s.mem_lines} memory requests checked, {s.csr_reads} CSR reads, "
                     f"{s.cycles} cycles in {s.wall:.1f} s "
                     f"({s.cycles / max(s.wall, 1e-9):.0f} cycles/s)")


# ------------------------------------------------------------------------------ register map


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def registers_read_their_reset_values(dut):
    """Every register, counters included, reads its reset value after reset."""
    bench = await _bench(dut, 0)
    regmap = register_map(bench.params)
    await bench.play(scenarios.read_all_registers(regmap, skip=()))
    for name, spec in bench.manifest.registers.items():
        got = await bench.csr.read(name)
        assert got == regmap[name].reset, f"{name} reads {got:#x} after reset, " \
                                          f"not {regmap[name].reset:#x}"
    _done("registers_read_their_reset_values", bench)


# ------------------------------------------------------------------------------ random traffic


@cocotb.test(timeout_time=20, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def random_traffic_matches_model(dut, seed):
    """Seeded random requests and CSR accesses reaching every status and side effect,
    under random idles and backpressure on all three streams."""
    bench = await _bench(dut, seed)
    regmap = register_map(bench.params)
    ops = scenarios.random_traffic(regmap, rng=np.random.default_rng(seed),
                                   n_ops=int(os.environ.get("NFABRIC_RANDOM_OPS", "400")))
    ops += scenarios.read_all_registers(regmap)
    await bench.play(ops)
    assert set(bench.stats.statuses) == set(Status), \
        f"the traffic must reach every status, not {dict(bench.stats.statuses)}"
    _done(f"random_traffic_matches_model/seed={seed}", bench)



# ------------------------------------------------------------------------------ real gradients


def _fp32_lines(values, line_bytes):
    """A float32 array as whole lines of bytes, zero-padded at the end."""
    raw = np.ascontiguousarray(values, dtype=np.float32).tobytes()
    raw += bytes(-len(raw) % line_bytes)
    return [raw[k:k + line_bytes] for k in range(0, len(raw), line_bytes)]


def trace_replay(trace, *, regmap, step_index, rng, gbinary_readout, gternary_readout,
                 max_lines=None, fp32_base=1 << 24, ratio=0.5):
    """One captured step of a real trace as the workers would send it.

    Window 0 takes every worker's G-Binary lines of the low-bit parameters, window 1 their
    G-Ternary lines; each worker's protected parameters go through the passthrough as FP32
    lines to its own memory region. Rounds of at most DEPTH slots per window: the workers'
    writes to both windows and their FP32 writes interleave at random, then every slot is
    read with READ_CLEAR and the FP32 lines of the round are read back. Returns
    ``(ops, fp32_reads)`` where ``fp32_reads`` maps the index of each FP32 read in ``ops``
    to the bytes written there.
    """
    p = regmap.params
    line_bytes = p.line_bits // 8
    workers = trace.workers
    low = [trace.bucket(step_index, w, LOW_BIT_ROLES) for w in range(workers)]
    gbin = np.stack([gbinary.encode(b, line_bits=p.line_bits) for b in low])
    gter = np.stack([gternary.encode(b, ratio=ratio, line_bits=p.line_bits) for b in low])
    fp32 = [_fp32_lines(trace.bucket(step_index, w, PROTECTED_ROLES), line_bytes)
            for w in range(workers)]
    if max_lines is not None:
        gbin, gter = gbin[:, :max_lines], gter[:, :max_lines]
        fp32 = [lines[:max_lines] for lines in fp32]
    size = [min(p.depth, gbin.shape[1]), min(p.depth, gter.shape[1])]
    bases = [int(rng.integers(0, 1 << 16)) * p.depth, 0]
    bases[1] = bases[0] + p.depth + int(rng.integers(0, 1 << 10))
    windows = [scenarios.Window(bases[0], size[0], Route.GBINARY, gbinary_readout),
               scenarios.Window(bases[1], size[1], Route.GTERNARY, gternary_readout)]
    ops = scenarios.configure(regmap, windows=windows, num_workers=workers,
                              gate=int(rng.integers(1, workers + 1)))
    rounds = max(-(-gbin.shape[1] // size[0]), -(-gter.shape[1] // size[1]))
    fp32_per_round = [-(-len(lines) // rounds) for lines in fp32]
    fp32_reads = {}
    for r in range(rounds):
        writes, reads = [], []
        for window, lines in enumerate((gbin, gter)):
            chunk = lines[:, r * size[window]:(r + 1) * size[window]]
            for w in range(workers):
                writes += [Request(Op.WRITE, bases[window] + k, w, chunk[w, k].tobytes())
                           for k in range(chunk.shape[1])]
            reads += [Request(Op.READ_CLEAR, bases[window] + k) for k in range(chunk.shape[1])]
        region = []
        for w in range(workers):
            first = r * fp32_per_round[w]
            for k, line in enumerate(fp32[w][first:first + fp32_per_round[w]], start=first):
                addr = fp32_base + (w << 16) + k
                writes.append(Request(Op.WRITE, addr, w, line))
                region.append((addr, line))
        # A worker's writes to one slot never repeat; their order across workers and slots
        # is random, as it is on a real link.
        writes = [writes[i] for i in rng.permutation(len(writes))]
        order = rng.permutation(len(reads) + len(region))
        ops += writes
        for i in order:
            if i < len(reads):
                ops.append(reads[i])
            else:
                addr, line = region[i - len(reads)]
                fp32_reads[len(ops)] = line
                ops.append(Request(Op.READ, addr))
    return ops, fp32_reads


def _trace_steps(trace):
    limit = os.environ.get("NFABRIC_TRACE_STEPS", "all")
    steps = list(range(len(trace.steps)))
    if limit != "all":
        count = max(1, min(len(steps), int(limit)))
        steps = [steps[round(i * (len(steps) - 1) / max(1, count - 1))] for i in range(count)]
        steps = sorted(set(steps))
    return steps


async def _real_gradients(dut, workload, seed):
    folder = os.environ.get("NFABRIC_TRACES")
    if not folder:
        raise RuntimeError("NFABRIC_TRACES must name the folder of the captured traces "
                           "(`make traces` writes build/traces)")
    trace = traces_module.load(pathlib.Path(folder) / workload)
    max_lines = os.environ.get("NFABRIC_TRACE_LINES")
    max_lines = int(max_lines) if max_lines else None
    bench = await _bench(dut, seed, TRACE_TIMING)
    regmap = register_map(bench.params)
    rng = np.random.default_rng(seed)
    gbin_readouts = READOUTS_BY_ROUTE[Route.GBINARY]
    gter_readouts = READOUTS_BY_ROUTE[Route.GTERNARY]
    readouts_seen = set()
    fp32_checked = 0
    steps = _trace_steps(trace)
    for n, step in enumerate(steps):
        gb, gt = gbin_readouts[n % len(gbin_readouts)], gter_readouts[n % len(gter_readouts)]
        ops, fp32_reads = trace_replay(trace, regmap=regmap, step_index=step, rng=rng,
                                       gbinary_readout=gb, gternary_readout=gt,
                                       max_lines=max_lines)
        stats, responses = await bench.play(ops)
        # The scoreboard compared every beat with the model; the FP32 lines are also
        # compared here with the bytes the workers wrote, independently of the model.
        requests = [i for i, op in enumerate(ops) if isinstance(op, Request)]
        position = {op_index: k for k, op_index in enumerate(requests)}
        for op_index, line in fp32_reads.items():
            status, lines = responses[position[op_index]]
            assert status is Status.OK and lines == [int.from_bytes(line, "little")], \
                f"step {trace.steps[step]}: FP32 line {op_index} did not come back byte-exact"
            fp32_checked += 1
        readouts_seen |= {gb, gt}
        if bench.log is not None:
            bench.log.info(f"{workload} step {trace.steps[step]}: {stats.requests} requests, "
                           f"{stats.lines} lines checked, {stats.cycles} cycles, "
                           f"{stats.cycles / max(stats.wall, 1e-9):.0f} cycles/s")
    await bench.play(scenarios.read_all_registers(regmap))
    counters = bench.model.counters
    assert counters["GBIN_LINES"] and counters["GTERN_LINES"] and counters["FP32_LINES"]
    if len(steps) >= len(gbin_readouts):
        assert readouts_seen == set(Readout), f"readouts exercised: {sorted(readouts_seen)}"
    _done(f"real_gradients/workload={workload},seed={seed}", bench,
          workload=workload, steps=[trace.steps[s] for s in steps], fp32_lines=fp32_checked)


@cocotb.test(timeout_time=1000, timeout_unit="ms")
@cocotb.parametrize(workload=WORKLOADS, seed=SEEDS)
async def real_gradients(dut, workload, seed):
    """Captured gradients of several workers and steps: low-bit lines into a G-Binary and a
    G-Ternary window, protected parameters as FP32 lines read back byte-exact."""
    await _real_gradients(dut, workload, seed)


# ------------------------------------------------------------------------------ faults


def _lines(rng, n, line_bytes):
    return [rng.bytes(line_bytes) for _ in range(n)]


def _valid_ternary(rng, line_bytes):
    data = np.frombuffer(rng.bytes(line_bytes), dtype=np.uint8)
    return (data & ~((data & 0xAA) & ~((data & 0x55) << 1)).astype(np.uint8)).tobytes()


@cocotb.test(timeout_time=5, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def duplicate_writes_are_refused_and_change_nothing(dut, seed):
    bench = await _bench(dut, seed)
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(seed)
    n = min(p.max_workers, 4)
    ops = scenarios.configure(regmap, windows=[
        scenarios.Window(16, 4, Route.GBINARY, Readout.COUNTS),
        scenarios.Window(32, 4, Route.GTERNARY, Readout.SUMS)], num_workers=n)
    for base, ternary in ((16, False), (32, True)):
        for slot in range(4):
            for w in range(n):
                line = _valid_ternary(rng, p.line_bits // 8) if ternary else rng.bytes(p.line_bits // 8)
                ops.append(Request(Op.WRITE, base + slot, w, line))
                ops.append(Request(Op.WRITE, base + slot, w, rng.bytes(p.line_bits // 8)))
            ops.append(Request(Op.READ, base + slot))
            ops.append(Request(Op.WRITE, base + slot, 0, rng.bytes(p.line_bits // 8)))
            ops.append(Request(Op.READ_CLEAR, base + slot))
    ops += scenarios.read_all_registers(regmap)
    await bench.play(ops)
    assert bench.stats.statuses[Status.DUPLICATE] == 8 * n + 8
    _done(f"duplicate_writes_are_refused_and_change_nothing/seed={seed}", bench)


@cocotb.test(timeout_time=5, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def reads_before_completion_get_not_ready(dut, seed):
    bench = await _bench(dut, seed)
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(seed)
    n = min(p.max_workers, 4)
    ops = scenarios.configure(regmap, windows=[
        scenarios.Window(0, 2, Route.GBINARY, Readout.SIGN),
        scenarios.Window(8, 2, Route.GTERNARY, Readout.GATED)], num_workers=n)
    for base in (0, 8):
        for w in range(n):
            ops += [Request(Op.READ, base), Request(Op.READ_CLEAR, base)]
            ops.append(Request(Op.WRITE, base, w, _valid_ternary(rng, p.line_bits // 8)))
        ops += [Request(Op.READ, base), Request(Op.READ_CLEAR, base), Request(Op.READ, base)]
    ops += scenarios.read_all_registers(regmap)
    await bench.play(ops)
    assert bench.stats.statuses[Status.NOT_READY] == 2 * (2 * n + 1)
    _done(f"reads_before_completion_get_not_ready/seed={seed}", bench)


@cocotb.test(timeout_time=5, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def invalid_ternary_codes_count_as_zero_and_are_flagged(dut, seed):
    bench = await _bench(dut, seed)
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(seed)
    n = min(p.max_workers, 3)
    lb = p.line_bits // 8
    ops = scenarios.configure(regmap, windows=[
        scenarios.Window(40, 3, Route.GTERNARY, Readout.SUMS)], num_workers=n)
    for slot, kind in enumerate(("all-invalid", "some-invalid", "valid")):
        for w in range(n):
            if kind == "all-invalid":
                line = bytes([0xAA]) * lb
            elif kind == "some-invalid":
                line = rng.bytes(lb)
            else:
                line = _valid_ternary(rng, lb)
            ops.append(Request(Op.WRITE, 40 + slot, w, line))
        ops.append(Request(Op.READ_CLEAR, 40 + slot))
    ops += scenarios.read_all_registers(regmap)
    await bench.play(ops)
    assert bench.model.counters["INVALID_LINES"] >= n
    assert "INVALID_CODE" in bench.model.error_flags()
    _done(f"invalid_ternary_codes_count_as_zero_and_are_flagged/seed={seed}", bench)


@cocotb.test(timeout_time=5, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def requests_outside_every_window_go_to_memory(dut, seed):
    """FP32 lines (NaN payloads, -0.0, denormals, infinities, random bytes) written and read
    back byte-exact; READ_CLEAR outside a window is refused; with ENABLE low, addresses of
    a configured window are plain memory; a window at the top of the address space wraps."""
    bench = await _bench(dut, seed)
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(seed)
    lb = p.line_bits // 8
    special = np.array([np.nan, -0.0, 1e-45, -np.inf, np.inf, 0.0, -1.5, 3.4e38],
                       dtype=np.float32)
    special.view(np.uint32)[0] = 0x7FC0_1234
    lines = [np.resize(np.roll(special, k), lb // 4).astype(np.float32).tobytes()
             for k in range(4)] + _lines(rng, 4, lb)
    top = (1 << ADDR_BITS) - 2
    ops = scenarios.configure(regmap, windows=[
        scenarios.Window(top, 4, Route.GBINARY, Readout.SIGN)], num_workers=2)
    addrs = [1000 + k for k in range(len(lines) - 2)] + [top - 1, 5000]
    ops += [Request(Op.WRITE, a, 1, line) for a, line in zip(addrs, lines)]
    ops += [Request(Op.READ, a) for a in addrs] + [Request(Op.READ_CLEAR, 1000),
                                                   Request(Op.READ, 77_777)]
    ops += [Request(Op.WRITE, top + 1, 0, lines[0]), Request(Op.WRITE, 1, 1, lines[1]),
            Request(Op.READ, 1)]  # 1 is slot 3 of the wrapping window
    ops += [CsrWrite(regmap["CONTROL"].address, 0),
            Request(Op.WRITE, top, 0, lines[2]), Request(Op.READ, top),
            Request(Op.READ_CLEAR, top)]
    ops += scenarios.read_all_registers(regmap)
    stats, responses = await bench.play(ops)
    assert bench.memory[top] == int.from_bytes(lines[2], "little")
    assert bench.model.counters["BAD_REQUEST_COUNT"] == 2
    _done(f"requests_outside_every_window_go_to_memory/seed={seed}", bench)


@cocotb.test(timeout_time=5, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def error_flags_clear_on_writing_one(dut, seed):
    """Each sticky flag is set by its event, survives writes of 0 and of other bits, and is
    cleared only by writing 1 to it; a misconfigured window sets BAD_CONFIG."""
    bench = await _bench(dut, seed)
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(seed)
    lb = p.line_bits // 8
    errors = regmap["ERRORS"]
    ops = scenarios.configure(regmap, windows=[
        scenarios.Window(0, 2, Route.GTERNARY, Readout.GATED),
        scenarios.Window(8, p.depth + 1, Route.GBINARY, Readout.SIGN)], num_workers=2)
    ops += [Request(Op.READ, 0), Request(Op.WRITE, 0, 0, bytes([0xAA]) * lb),
            Request(Op.WRITE, 0, 0, bytes(lb)), Request(Op.WRITE, 0, 3, bytes(lb)),
            Request(Op.WRITE, 8, 0, bytes(lb)), Request(Op.READ_CLEAR, 500)]
    ops.append(CsrRead(errors.address))
    for flag in rng.permutation(len(ERROR_FLAGS)):
        name = ERROR_FLAGS[int(flag)]
        ops += [CsrWrite(errors.address, 0), CsrRead(errors.address),
                CsrWrite(errors.address, errors.encode(**{name: 1})), CsrRead(errors.address)]
    ops += [Request(Op.WRITE, 1, 0, bytes(lb)), Request(Op.WRITE, 1, 0, bytes(lb)),
            CsrRead(errors.address), CsrWrite(errors.address, 0xFFFF_FFFF),
            CsrRead(errors.address)]
    await bench.play(ops)
    assert bench.model.error_flags() == set()
    _done(f"error_flags_clear_on_writing_one/seed={seed}", bench)


@cocotb.test(timeout_time=10, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def reset_in_mid_traffic_recovers_clean(dut, seed):
    """``rst`` is asserted while requests, responses and memory reads are in flight.

    Requests taken before the reset and not fully answered get no response; memory
    requests sent before it stay done; afterwards every register reads its reset value,
    every slot is empty (reads get NOT_READY), the counters are 0, and traffic matches a
    fresh model over the same memory. Anything extra, lost after the reset, duplicated or
    corrupted fails the scoreboard.
    """
    bench = await _bench(dut, seed)
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(seed)
    lb = p.line_bits // 8
    n = min(p.max_workers, 4)
    windows = [scenarios.Window(0, 4, Route.GBINARY, Readout.TERNARY),
               scenarios.Window(4, 4, Route.GTERNARY, Readout.SUMS)]
    total_lost = 0
    for cut in range(3):
        ops = scenarios.configure(regmap, windows=windows, num_workers=n)
        for slot in range(8):
            ops += [Request(Op.WRITE, slot, w, _valid_ternary(rng, lb)) for w in range(n)]
        ops += [Request(Op.WRITE, 100 + k, 0, rng.bytes(lb)) for k in range(6)]
        ops += [Request(Op.READ, 100 + k) for k in range(6)]
        ops += [Request(Op.READ, slot) for slot in range(8)]
        at = int(rng.integers(len(ops) // 3, len(ops) - 4))
        ops.insert(at, Reset(cycles=1 + cut))
        # After the reset: registers at reset values, slots empty, the old memory intact.
        after = scenarios.read_all_registers(regmap)
        after += scenarios.configure(regmap, windows=windows, num_workers=n)
        after += [Request(Op.READ, slot) for slot in range(8)]
        after += [Request(Op.READ, 100 + k) for k in range(6)]
        after += [Request(Op.WRITE, 0, w, rng.bytes(lb)) for w in range(n)]
        after += [Request(Op.READ_CLEAR, 0)] + scenarios.read_all_registers(regmap)
        stats, responses = await bench.play(ops + after)
        total_lost += stats.lost
        tail = responses[-(8 + 6 + n + 1):]
        assert [s for s, _ in tail[:8]] == [Status.NOT_READY] * 8, \
            "slots must be empty after a reset"
    assert bench.stats.resets == 3
    _done(f"reset_in_mid_traffic_recovers_clean/seed={seed}", bench, lost=total_lost)


@cocotb.test(timeout_time=20, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def long_downstream_stalls_lose_nothing(dut, seed):
    """The memory port, then the response port, then both, stall for thousands of cycles
    in the middle of mixed traffic; everything arrives once, in order, unchanged."""
    bench = await _bench(dut, seed)
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(seed)
    lb = p.line_bits // 8
    n = min(p.max_workers, 4)
    ops = scenarios.configure(regmap, windows=[
        scenarios.Window(0, 4, Route.GBINARY, Readout.COUNTS)], num_workers=n)
    for k, hold in enumerate((Hold(3000, responses=False, memory=True),
                              Hold(3000, responses=True, memory=False),
                              Hold(2000, responses=True, memory=True))):
        burst = [Request(Op.WRITE, 200 + 40 * k + i, 1, rng.bytes(lb)) for i in range(20)]
        burst += [Request(Op.WRITE, slot, w, rng.bytes(lb)) for slot in range(4)
                  for w in range(n)]
        burst += [Request(Op.READ, 200 + 40 * k + i) for i in range(20)]
        burst += [Request(Op.READ_CLEAR, slot) for slot in range(4)]
        burst = [burst[i] for i in rng.permutation(len(burst))]
        # Writes before reads of the same slot or line: restore that order.
        burst.sort(key=lambda r: r.op != Op.WRITE)
        ops += burst[:10] + [hold] + burst[10:]
    ops += scenarios.read_all_registers(regmap, skip=())
    await bench.play(ops, timing=Timing(idle=0.1, backpressure=0.1, mem_backpressure=0.1,
                                        mem_latency=(1, 30)))
    stall = await bench.csr.read("STALL_CYCLES")
    assert stall >= 2000, f"STALL_CYCLES must count the stalls, not read {stall}"
    _done(f"long_downstream_stalls_lose_nothing/seed={seed}", bench)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def one_line_per_clock_to_one_slot_at_fixed_latency(dut):
    """Without stalls, every worker writes one slot back to back: a request is taken every
    cycle (II = 1) and each response follows its request by the manifest's latency."""
    bench = await _bench(dut, 3, Timing())
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(3)
    ops = scenarios.configure(regmap, windows=[
        scenarios.Window(64, 1, Route.GBINARY, Readout.SIGN)], num_workers=p.max_workers)
    await bench.play(ops)
    ops = []
    for _ in range(6):
        ops += [Request(Op.WRITE, 64, w, rng.bytes(p.line_bits // 8))
                for w in range(p.max_workers)]
        ops.append(Request(Op.READ_CLEAR, 64))
    bench.timeline = []
    await bench.play(ops)
    taken = [t for kind, t in bench.timeline if kind == "request"]
    first = [t for kind, t in bench.timeline if kind == "response"]
    assert np.all(np.diff(taken) == 1), f"requests were not taken every cycle: {taken}"
    latency = {b - a for a, b in zip(taken, first)}
    want = bench.manifest.data["latency_cycles"]
    assert latency == {want}, f"latency must be {want} cycles, not {sorted(latency)}"
    _done("one_line_per_clock_to_one_slot_at_fixed_latency", bench)


@cocotb.test(timeout_time=5, timeout_unit="ms", skip=not _narrow_counters())
@cocotb.parametrize(seed=SEEDS)
async def counters_saturate_under_a_wrong_num_workers(dut, seed):
    """Counters narrower than MAX_WORKERS, and NUM_WORKERS set above what they hold: every
    lane saturates at 2**COUNTER_BITS - 1 (sums at -limit and +limit), the flag is set, and
    the readouts are those of the saturated values."""
    bench = await _bench(dut, seed)
    p, regmap, rng = bench.params, register_map(bench.params), np.random.default_rng(seed)
    lb = p.line_bits // 8
    caps = bench.csr.decode("CAPS0", await bench.csr.read("CAPS0"))
    assert caps["COUNTER_BITS"] == p.counter_bits and caps["MAX_WORKERS"] == p.max_workers
    n = p.max_workers  # more votes than the counters hold: a wrong NUM_WORKERS
    ops = []
    for route, readouts in READOUTS_BY_ROUTE.items():
        for readout in readouts:
            ops += scenarios.configure(regmap, windows=[
                scenarios.Window(0, 3, route, readout)], num_workers=n)
            for w in range(n):
                ones = bytes([0xFF]) * lb
                plus = bytes([0x55]) * lb
                ops.append(Request(Op.WRITE, 0, w, ones))  # all -1 (votes and codes)
                ops.append(Request(Op.WRITE, 1, w, plus if route == Route.GTERNARY
                                   else bytes(lb)))
                ops.append(Request(Op.WRITE, 2, w, _valid_ternary(rng, lb)))
            ops += [Request(Op.READ, 0), Request(Op.READ, 1), Request(Op.READ_CLEAR, 2)]
            ops += [CsrRead(regmap["ERRORS"].address),
                    CsrWrite(regmap["ERRORS"].address, 0xFFFF_FFFF)]
    ops += scenarios.read_all_registers(regmap)
    await bench.play(ops)
    # Each ERRORS read above, compared bit for bit, had SATURATED set; the last write cleared it.
    assert "SATURATED" not in bench.model.error_flags()
    _done(f"counters_saturate_under_a_wrong_num_workers/seed={seed}", bench)
