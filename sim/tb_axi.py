"""cocotb tests of the AXI top's emitted Verilog, driven by cocotbext-axi, against the golden
transaction model.

``AxiMaster`` drives the data port (``s_axi``), ``AxiLiteMaster`` the registers (``s_axil``)
and ``AxiRam`` answers the memory port (``m_axi``); every channel of all three pauses at
random (their pause generators, seeded), which on the memory's side is its latency. Each
AXI transaction is fed to :class:`~neuron_fabric.golden.controller.ControllerModel` when it
is started, beat by beat, in the order the port takes them (AW order for writes, AR order
for reads), and its answer is compared with the model's bit for bit: BRESP and BUSER, and
every R beat's data, RRESP and RUSER. Writes and reads that touch the same slot or line are
started in separate phases, each waited for: AXI orders nothing between its read and write
channels.

The runner (``tests/test_axi_cocotb.py`` or :mod:`neuron_fabric.sim.regression`) sets:

``NFABRIC_MANIFEST``
    The folder of the generated AXI top and its ``manifest.json`` (required).
``NFABRIC_TRACES``
    The folder of the captured traces (for the real-gradient test).
``NFABRIC_SEEDS``, ``NFABRIC_TRACE_STEPS``, ``NFABRIC_TRACE_LINES``, ``NFABRIC_WORKLOADS``
    As for :mod:`.tb_controller`.
"""

import os
import pathlib
import time
import warnings

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import (AxiBurstType, AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster, AxiRam,
                           AxiResp)

from ..host import traces as traces_module
from ..golden import gbinary, gternary
from ..golden.controller import ControllerModel, Op, Status
from ..golden.formats import READOUTS_BY_ROUTE, Route, readout_lines_per_slot
from ..golden.regmap import TIMING_COUNTERS, register_map
from ..hw.axi import FIXED_BEATS
from . import scenarios
from .cocotb_bench import Stats, record_stats
from .manifest import Manifest
from .tb_controller import LOW_BIT_ROLES, PROTECTED_ROLES, _fp32_lines, _trace_steps

__all__ = []  # cocotb collects the tests by decorator

SEEDS = [int(s) for s in os.environ.get("NFABRIC_SEEDS", "1").split(",") if s.strip()]
WORKLOADS = [w for w in os.environ.get("NFABRIC_WORKLOADS", ",".join(traces_module.WORKLOADS))
             .split(",") if w.strip()]
#: Chance that a channel pauses in a cycle: the data port's manager, the memory.
PAUSE = 0.2
MEMORY_PAUSE = 0.3
#: The memory's size in bytes: every line the tests send to memory lies below it.
MEMORY_BYTES = 1 << 26
#: First FP32 line of each worker's region (the worker's index above it, 2**16 lines apart).
FP32_BASE = 1 << 18


async def _answer(event):
    """The answer cocotbext-axi hands back through a transaction's event."""
    await event.wait()
    with warnings.catch_warnings():   # cocotb 2 keeps Event.data, deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        return event.data


def _pauses(rng, chance):
    while True:
        yield bool(rng.random() < chance)


class AxiBench:
    """The AXI top under cocotbext-axi's models, with the golden model beside it."""

    def __init__(self, dut, seed):
        folder = os.environ.get("NFABRIC_MANIFEST")
        if not folder:
            raise RuntimeError("NFABRIC_MANIFEST must name the folder of the generated AXI top")
        self.dut, self.manifest = dut, Manifest(folder)
        self.params = self.manifest.params
        self.regmap = register_map(self.params)
        self.model = ControllerModel(self.params)
        self.line_bytes = self.params.line_bits // 8
        axi = self.manifest.data["axi"]
        self.address_fields = {name: offset for name, (offset, _) in
                               axi["data_address"].items()}
        self.worker_from = axi["worker_from"]
        self.axi = AxiMaster(AxiBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEMORY_BYTES)
        rng = np.random.default_rng([seed, 2])
        for channel in (self.axi.write_if.aw_channel, self.axi.write_if.w_channel,
                        self.axi.write_if.b_channel, self.axi.read_if.ar_channel,
                        self.axi.read_if.r_channel, self.axil.write_if.aw_channel,
                        self.axil.write_if.w_channel, self.axil.read_if.r_channel):
            channel.set_pause_generator(_pauses(rng, PAUSE))
        for channel in (self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                        self.ram.write_if.b_channel, self.ram.read_if.ar_channel,
                        self.ram.read_if.r_channel):
            channel.set_pause_generator(_pauses(rng, MEMORY_PAUSE))
        self.pending = []   # (what, event, expected answer)
        self.checked = {"bursts": 0, "fixed": 0, "lines": 0}

    async def start(self):
        self.started = (int(get_sim_time("ns") // 10), time.perf_counter())
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    # -------------------------------------------------------------------- addresses

    def address(self, line, *, worker=0, clear=False):
        """The data port's byte address of ``line`` (the manifest's address fields)."""
        addr = line << self.address_fields["line"]
        if "worker" in self.address_fields:
            addr |= worker << self.address_fields["worker"]
        return addr | int(clear) << self.address_fields["clear"]

    # -------------------------------------------------------------------- registers

    async def csr_write(self, addr, value):
        self.model.csr_write(addr, value)
        answer = await self.axil.write(addr, value.to_bytes(4, "little"))
        assert answer.resp == AxiResp.OKAY, f"register {addr:#x}: {answer.resp!r}"

    async def csr_check_all(self):
        """Every register read over AXI4-Lite equals the model's (timing counters aside)."""
        for reg in self.regmap:
            got = await self.axil.read_dword(reg.address)
            if reg.name not in TIMING_COUNTERS:
                want = self.model.csr_read(reg.address)
                assert got == want, f"{reg.name} reads {got:#x}, the model says {want:#x}"

    async def configure(self, **kwargs):
        for op in scenarios.configure(self.regmap, **kwargs):
            await self.csr_write(op.addr, op.value)

    # -------------------------------------------------------------------- data port

    def write(self, worker, line, lines, *, awid=None):
        """Start an INCR burst of ``lines`` (bytes each) from ``line`` by ``worker``."""
        statuses = [self.model.request(Op.WRITE, line + k, worker, data).status
                    for k, data in enumerate(lines)]
        axid = awid
        if self.worker_from == "id":
            axid = worker << (self.manifest.data["axi"]["id_width"] - self.params.worker_bits)
        event = self.axi.init_write(self.address(line, worker=worker), b"".join(lines),
                                    awid=axid)
        errors = [s for s in statuses if s is not Status.OK]
        self.pending.append((f"write of {len(lines)} lines at {line} by worker {worker}", event,
                             ("B", AxiResp.SLVERR if errors else AxiResp.OKAY,
                              [int(errors[0] if errors else Status.OK)])))

    def read(self, line, count=1, *, clear=False, lines_per_request=1):
        """Start a read of ``count`` lines: INCR over ``count`` line addresses, one line
        each; or, with ``lines_per_request`` > 1, a FIXED burst of that many beats at
        ``line`` (one readout of several lines)."""
        op = Op.READ_CLEAR if clear else Op.READ
        if lines_per_request > 1:
            answers = [self.model.request(op, line)]
            burst, length = AxiBurstType.FIXED, lines_per_request
        else:
            answers = [self.model.request(op, line + k) for k in range(count)]
            burst, length = AxiBurstType.INCR, count
        beats = [(r.status, data) for r in answers for data in r.lines]
        assert len(beats) == length, "the test reads each readout whole"
        event = self.axi.init_read(self.address(line, clear=clear), length * self.line_bytes,
                                   burst=burst)
        self.checked["fixed"] += burst == AxiBurstType.FIXED
        errors = [s for s, _ in beats if s is not Status.OK]
        self.pending.append((f"{op.name} of {length} lines at {line}", event,
                             ("R", AxiResp.SLVERR if errors else AxiResp.OKAY,
                              [int(s) for s, _ in beats], b"".join(d for _, d in beats))))
        return answers

    async def settle(self):
        """Wait for every transaction started and compare each answer with the model's."""
        for what, event, want in self.pending:
            got = await _answer(event)
            if want[0] == "B":
                assert (got.resp, got.user) == want[1:], \
                    f"{what}: B {got.resp!r} {got.user}, the model says {want[1]!r} {want[2]}"
            else:
                assert got.user == want[2], f"{what}: RUSER {got.user}, the model says {want[2]}"
                assert got.resp == want[1], f"{what}: RRESP {got.resp!r}, the model {want[1]!r}"
                if got.data != want[3]:
                    first = next(k for k in range(len(want[3])) if got.data[k] != want[3][k])
                    raise AssertionError(f"{what}: data differs from byte {first} (beat "
                                         f"{first // self.line_bytes}) on")
                self.checked["lines"] += len(want[2])
            self.checked["bursts"] += 1
        self.pending = []

    def check_memory(self):
        """Every line the model's memory holds is in the AxiRam, byte for byte."""
        for line, data in self.model.memory.lines.items():
            got = self.ram.read(line * self.line_bytes, self.line_bytes)
            assert got == data, f"memory line {line} differs from the model's"

    def log_done(self, name):
        """Log what was checked and add it to the regression's tally."""
        cycles = int(get_sim_time("ns") // 10) - self.started[0]
        wall = time.perf_counter() - self.started[1]
        self.dut._log.info(f"{name}: {self.checked['bursts']} bursts and "
                           f"{self.checked['lines']} read lines checked against the model, "
                           f"{cycles} cycles")
        record_stats(name, Stats(cycles=cycles, requests=self.checked["bursts"],
                                 lines=self.checked["lines"], wall=wall))


def _chunks(rng, count, *, first=0, longest=4):
    """Split ``range(count)`` into runs of 1 to ``longest`` lines, each aligned to its own
    length (a power of two) at line ``first + start``, so that no burst crosses a 4 KiB
    boundary (cocotbext-axi would split it in two)."""
    out, start = [], 0
    while start < count:
        length = int(rng.choice([1, 2, 4][:longest.bit_length()]))
        while (first + start) % length or start + length > count:
            length //= 2
        out.append((start, length))
        start += length
    return out


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def registers_read_their_reset_values_over_axi_lite(dut):
    bench = AxiBench(dut, 0)
    await bench.start()
    await bench.csr_check_all()
    # A partial strobe writes nothing and answers SLVERR.
    base = bench.regmap["WIN0_BASE"].address
    answer = await bench.axil.write(base, b"\x12\x34")
    assert answer.resp == AxiResp.SLVERR
    await bench.csr_check_all()
    bench.log_done("registers_read_their_reset_values_over_axi_lite")


async def _real_gradients(dut, workload, seed):
    folder = os.environ.get("NFABRIC_TRACES")
    if not folder:
        raise RuntimeError("NFABRIC_TRACES must name the folder of the captured traces")
    trace = traces_module.load(pathlib.Path(folder) / workload)
    max_lines = os.environ.get("NFABRIC_TRACE_LINES")
    max_lines = int(max_lines) if max_lines else None
    bench = AxiBench(dut, seed)
    await bench.start()
    p, rng = bench.params, np.random.default_rng(seed)
    workers = trace.workers
    gb_readouts, gt_readouts = READOUTS_BY_ROUTE[Route.GBINARY], READOUTS_BY_ROUTE[Route.GTERNARY]
    fp32_checked, rounds_done, readouts_seen = 0, 0, set()
    # cocotbext-axi splits a FIXED burst at a 4 KiB boundary as if its address moved (AXI
    # keeps a FIXED burst at one address): each window starts a page and leaves its longest
    # readout's lines below the page's end, so every readout is one burst.
    page_lines = 4096 // bench.line_bytes
    longest = [max(readout_lines_per_slot(r, counter_bits=p.counter_bits) for r in readouts)
               for readouts in (gb_readouts, gt_readouts)]
    stride = max(page_lines, p.depth)   # a page's first line and a window's
    for step in _trace_steps(trace):
        low = [trace.bucket(step, w, LOW_BIT_ROLES) for w in range(workers)]
        routed = [np.stack([gbinary.encode(b, line_bits=p.line_bits) for b in low]),
                  np.stack([gternary.encode(b, ratio=0.5, line_bits=p.line_bits) for b in low])]
        fp32 = [_fp32_lines(trace.bucket(step, w, PROTECTED_ROLES), bench.line_bytes)
                for w in range(workers)]
        if max_lines is not None:
            routed = [lines[:, :max_lines] for lines in routed]
            fp32 = [lines[:max_lines] for lines in fp32]
        size = [min(p.depth, lines.shape[1], page_lines - most + 1)
                for lines, most in zip(routed, longest)]
        base0 = int(rng.integers(1, FP32_BASE // stride - 16)) * stride
        bases = [base0, base0 + stride * int(rng.integers(1, 16))]
        rounds = max(-(-lines.shape[1] // s) for lines, s in zip(routed, size))
        fp32_round = [-(-len(lines) // rounds) for lines in fp32]
        for r in range(rounds):
            # Each round under the next readouts, the first ones of several lines.
            readouts = [gb_readouts[(1 + rounds_done) % len(gb_readouts)],
                        gt_readouts[(1 + rounds_done) % len(gt_readouts)]]
            rounds_done += 1
            windows = [scenarios.Window(bases[0], size[0], Route.GBINARY, readouts[0]),
                       scenarios.Window(bases[1], size[1], Route.GTERNARY, readouts[1])]
            await bench.configure(windows=windows, num_workers=workers,
                                  gate=int(rng.integers(1, workers + 1)))
            per_slot = [readout_lines_per_slot(r, counter_bits=p.counter_bits)
                        for r in readouts]
            readouts_seen.update(readouts)
            chunks = [lines[:, r * s:(r + 1) * s] for lines, s in zip(routed, size)]
            # Every worker but the last writes its lines and its FP32 lines, as bursts of
            # 1 to 4 lines in a random order, all in flight at once under rotating IDs.
            def bursts(ws):
                out = []
                for w in ws:
                    for window, chunk in enumerate(chunks):
                        out += [(w, bases[window] + s, [chunk[w, s + k].tobytes()
                                                        for k in range(length)])
                                for s, length in _chunks(rng, chunk.shape[1],
                                                         first=bases[window])]
                return out

            first = bursts(range(workers - 1))
            fp32_lines = []
            for w in range(workers):
                start = r * fp32_round[w]
                mine = fp32[w][start:start + fp32_round[w]]
                region = FP32_BASE + (w << 16) + start
                fp32_lines += [(region + k, line) for k, line in enumerate(mine)]
                first += [(w, region + s, mine[s:s + length])
                          for s, length in _chunks(rng, len(mine), first=region)]
            for index in rng.permutation(len(first)):
                bench.write(*first[index])
            await bench.settle()
            # Early reads: the slots are not complete yet.
            for window, chunk in enumerate(chunks):
                for s in rng.choice(chunk.shape[1], size=min(2, chunk.shape[1]), replace=False):
                    bench.read(bases[window] + int(s), clear=bool(rng.random() < 0.5))
            await bench.settle()
            # The last worker completes every slot; worker 0 writes one slot again.
            for burst in bursts([workers - 1]):
                bench.write(*burst)
            again = next(k for k, chunk in enumerate(chunks) if chunk.shape[1])
            bench.write(0, bases[again], [chunks[again][0, 0].tobytes()])
            await bench.settle()
            # Readouts: one line a slot as INCR bursts, several as a FIXED burst a slot;
            # clear every slot. The FP32 lines come back as INCR bursts too.
            for window, chunk in enumerate(chunks):
                for s, length in _chunks(rng, chunk.shape[1], first=bases[window]):
                    if per_slot[window] == 1:
                        bench.read(bases[window] + s, length, clear=True)
                    else:
                        for k in range(length):
                            bench.read(bases[window] + s + k, clear=True,
                                       lines_per_request=per_slot[window])
            for w in range(workers):
                start = r * fp32_round[w]
                count = len(fp32[w][start:start + fp32_round[w]])
                region = FP32_BASE + (w << 16) + start
                for s, length in _chunks(rng, count, first=region):
                    bench.read(region + s, length)
            pending_fp32 = [event for what, event, _ in bench.pending
                            if what.startswith("READ of")]
            await bench.settle()
            # The FP32 lines, also against what the workers wrote, apart from the model.
            got = {}
            for event in pending_fp32:
                answer = await _answer(event)
                line = answer.address >> bench.address_fields["line"]
                for k in range(len(answer.data) // bench.line_bytes):
                    got[line + k] = answer.data[k * bench.line_bytes:(k + 1) * bench.line_bytes]
            for line, data in fp32_lines:
                assert got[line] == data, f"FP32 line {line} did not come back byte-exact"
                fp32_checked += 1
        bench.dut._log.info(f"{workload} step {trace.steps[step]}: {bench.checked}")
    await bench.csr_check_all()
    bench.check_memory()
    assert bench.model.counters["GBIN_LINES"] and bench.model.counters["GTERN_LINES"]
    assert bench.model.counters["DUPLICATE_COUNT"] and bench.model.counters["NOT_READY_COUNT"]
    assert fp32_checked, "no FP32 line went through the memory"
    assert bench.checked["fixed"], "no readout of several lines was read"
    bench.log_done(f"real_gradients_over_axi/workload={workload},seed={seed}: "
                   f"{fp32_checked} FP32 lines byte-exact, readouts "
                   f"{', '.join(sorted(r.name for r in readouts_seen))};")


@cocotb.test(timeout_time=200, timeout_unit="ms")
@cocotb.parametrize(workload=WORKLOADS, seed=SEEDS)
async def real_gradients_over_axi(dut, workload, seed):
    """Captured gradients of several workers: low-bit lines into a G-Binary and a G-Ternary
    window as write bursts under rotating IDs, early reads, a duplicate, readouts (FIXED
    bursts for those of several lines), and FP32 lines through the AxiRam and back."""
    await _real_gradients(dut, workload, seed)


@cocotb.test(timeout_time=5, timeout_unit="ms")
@cocotb.parametrize(seed=SEEDS)
async def bursts_the_controller_cannot_take_are_refused(dut, seed):
    """Part of a line written (WSTRB not all ones), narrow and unaligned bursts, a FIXED
    burst too long: SLVERR with BAD_REQUEST in xUSER; nothing reaches the controller or the
    memory."""
    bench = AxiBench(dut, seed)
    await bench.start()
    rng = np.random.default_rng(seed)
    line = FP32_BASE + 5
    whole = rng.bytes(bench.line_bytes)
    bench.write(0, line, [whole])
    await bench.settle()
    responses = await bench.axil.read_dword(bench.regmap["RESPONSES"].address)
    bad = int(Status.BAD_REQUEST)
    answer = await bench.axi.write(bench.address(line) + 4, rng.bytes(8))
    assert (answer.resp, answer.user) == (AxiResp.SLVERR, [bad])
    answer = await bench.axi.write(bench.address(line), rng.bytes(bench.line_bytes),
                                   size=2)
    assert answer.resp == AxiResp.SLVERR and set(answer.user) == {bad}
    answer = await bench.axi.read(bench.address(line), 8, size=3)
    assert answer.resp == AxiResp.SLVERR and set(answer.user) == {bad}
    # A FIXED burst longer than AXI4 allows: every beat refused, its data zero.
    beats = FIXED_BEATS + 1
    answer = await bench.axi.read(bench.address(line), beats * bench.line_bytes,
                                  burst=AxiBurstType.FIXED)
    assert answer.resp == AxiResp.SLVERR and set(answer.user) == {bad}
    assert len(answer.user) == beats and answer.data == bytes(beats * bench.line_bytes)
    answer = await bench.axi.write(bench.address(line, clear=True), whole)
    assert (answer.resp, answer.user) == (AxiResp.SLVERR, [bad])
    # The line is as it was, and the controller saw none of it.
    bench.read(line)
    await bench.settle()
    assert await bench.axil.read_dword(bench.regmap["RESPONSES"].address) == responses + 1
    bench.check_memory()
    bench.log_done(f"bursts_the_controller_cannot_take_are_refused/seed={seed}")
