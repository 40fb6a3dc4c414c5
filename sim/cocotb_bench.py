"""Drivers, monitors, a scoreboard and a register helper for cocotb benches of the emitted Verilog.

Everything here reads the generated ``manifest.json`` (:func:`neuron_fabric.gen.verilog.generate`):
port names and widths, the bit offsets of every field of a stream payload and the register
map with its field offsets and actions. Nothing assumes a port order or a width.

The controller bench (:class:`ControllerBench`) plays a list of operations
(:class:`~neuron_fabric.golden.controller.Request`, :class:`~.scenarios.CsrWrite`,
:class:`~.scenarios.CsrRead` and the bench-only :class:`Reset` and :class:`Hold`) into the top.
One clock loop serves every interface, which keeps cocotb's cost to two simulator callbacks
per cycle:

- at the falling edge it drives the request stream (seeded random idles; a request, once
  offered, stays offered until taken), ``o_resp.ready`` and ``o_mem.ready`` (seeded random
  backpressure, or held low by :class:`Hold`) and the memory's read data (seeded latency);
- in the read-only phase after it, it samples the settled outputs and records the
  transfers the next rising edge makes.

The scoreboard asks :class:`~neuron_fabric.golden.controller.ControllerModel` for the response
of each request at the moment the top takes it, and for the memory request it implies, then
compares every response beat (status, ``last``, data) and every memory request (kind,
address, data) bit for bit as it appears. CSR accesses wait until every earlier response has
arrived, so the model and the top see the same order.
"""

import collections
import dataclasses
import json
import os
import time

import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from ..golden.controller import ControllerModel, Op, Request, Status
from ..gen.verilog import UNIT_ROLES
from ..golden.regmap import TIMING_COUNTERS
from .manifest import Manifest, Payload
from .scenarios import CsrRead, CsrWrite, Timing, noise_lines, request_data

__all__ = ["CLOCK_NS", "Manifest", "Payload", "Wire", "Stream", "CsrBus", "Timing",
           "Reset", "Hold", "Stats", "Mismatch", "ControllerBench", "record_stats",
           "BLOCK_ROLES", "BLOCKS_TOPLEVEL", "blocks_wrapper"]

CLOCK_NS = 10


# ------------------------------------------------------------------------------- signal access


class Wire:
    """One port of the design under test, with cheap reads and writes.

    Reads return an ``int`` and raise ``ValueError`` on X or Z. Writes that repeat the
    value last written are skipped, which matters for wide ports.
    """

    __slots__ = ("handle", "name", "width", "_gpi", "_last")

    def __init__(self, dut, name, width=None):
        try:
            self.handle = getattr(dut, name)
        except AttributeError:
            raise AttributeError(f"the design has no port {name!r}") from None
        self.name = name
        self.width = len(self.handle) if width is None else width
        # The simulator object behind the handle: reading its binary string directly
        # skips building a LogicArray for every sample of a 512-bit port.
        self._gpi = getattr(self.handle, "_handle", None)
        self._last = None

    def get(self):
        if self._gpi is not None:
            text = self._gpi.get_signal_val_binstr()
        else:
            text = str(self.handle.value)
        try:
            return int(text, 2)
        except ValueError:
            raise ValueError(f"{self.name} is {text!r}: an X or Z where a value is due") from None

    def set(self, value):
        value = int(value)
        if value != self._last:
            self.handle.value = value
            self._last = value

    def forget(self):
        """Write again next time (after the design was reset or the value was forced)."""
        self._last = None


class Stream:
    """The ``valid``, ``ready`` and ``payload`` wires of a stream port named ``prefix``."""

    def __init__(self, dut, prefix, payload, *, names=""):
        self.valid = Wire(dut, f"{names}{prefix}__valid")
        self.ready = Wire(dut, f"{names}{prefix}__ready")
        self.payload = Wire(dut, f"{names}{prefix}__payload")
        self.layout = payload
        if self.payload.width != payload.width:
            raise ValueError(f"{prefix}__payload is {self.payload.width} bits wide in the design "
                             f"but {payload.width} in the manifest: regenerate the Verilog")

    def wires(self):
        return (self.valid, self.ready, self.payload)


# ----------------------------------------------------------------------------------- CSRs


class CsrBus:
    """Register access by name, generated from the manifest's register map.

    ``read`` and ``write`` are coroutines that own the bus for their cycles; call them at a
    falling edge (they return at one). A read takes two cycles (the address's match is
    registered, then ``r_data``); a write takes two: its strobe, then one cycle for the side
    effects that start the cycle after (window clears, CLEAR_SLOTS, CLEAR_COUNTERS), at
    whose end the stored fields take the value.
    """

    def __init__(self, dut, registers, *, names="", bus="csr", clock=None):
        self.registers = registers
        self.clk = clock if clock is not None else dut.clk
        self.addr = Wire(dut, f"{names}{bus}__addr")
        self.r_stb = Wire(dut, f"{names}{bus}__r_stb")
        self.r_data = Wire(dut, f"{names}{bus}__r_data")
        self.w_stb = Wire(dut, f"{names}{bus}__w_stb")
        self.w_data = Wire(dut, f"{names}{bus}__w_data")
        self.by_address = {reg["address"]: name for name, reg in registers.items()}
        self.cycles = 0

    def idle(self):
        self.r_stb.set(0)
        self.w_stb.set(0)

    def address(self, name):
        try:
            return self.registers[name]["address"]
        except KeyError:
            raise KeyError(f"no register named {name!r}") from None

    def encode(self, name, **fields):
        """A value of register ``name`` from field values; fields not named are 0."""
        spec = self.registers[name]["fields"]
        word = 0
        for field, value in fields.items():
            offset, width, _ = spec[field]
            if not 0 <= int(value) < (1 << width):
                raise ValueError(f"{name}.{field} must fit {width} bits, not {value!r}")
            word |= int(value) << offset
        return word

    def decode(self, name, value):
        """``{field: value}`` of a value of register ``name``."""
        return {field: (value >> offset) & ((1 << width) - 1)
                for field, (offset, width, _) in self.registers[name]["fields"].items()}

    def _addr(self, register):
        return register if isinstance(register, int) else self.address(register)

    async def read(self, register):
        """Read ``register`` (a name or a byte address); returns the value."""
        self.addr.set(self._addr(register))
        self.r_stb.set(1)
        await FallingEdge(self.clk)
        self.r_stb.set(0)
        await FallingEdge(self.clk)
        self.cycles += 2
        return self.r_data.get()

    async def write(self, register, value=None, **fields):
        """Write ``value`` (or the value of ``fields``) to ``register`` (a name or an address)."""
        if value is None:
            value = self.encode(register, **fields)
        self.addr.set(self._addr(register))
        self.w_data.set(value)
        self.w_stb.set(1)
        await FallingEdge(self.clk)
        self.w_stb.set(0)
        await FallingEdge(self.clk)
        self.cycles += 2


# --------------------------------------------------------------------------------- controller


@dataclasses.dataclass(frozen=True)
class Reset:
    """Assert ``rst`` for ``cycles`` cycles now, with requests in flight.

    Defined outcome: requests the top took before the reset and has not fully answered
    get no response (their slot effects are gone with the slots); memory requests the top
    sent downstream before the reset stay done, those it had not sent are never sent;
    memory read data not yet returned is dropped by the memory side, which is reset with
    the device. After the reset every register holds its reset value, every slot is empty,
    every counter is 0, and traffic goes on as on a fresh device over the same memory.
    """
    cycles: int = 2


@dataclasses.dataclass(frozen=True)
class Hold:
    """Hold ``o_resp.ready`` (``responses``) and/or ``o_mem.ready`` (``memory``) low for
    ``cycles`` cycles while traffic continues: a long downstream stall."""
    cycles: int
    responses: bool = False
    memory: bool = True


@dataclasses.dataclass
class Stats:
    """What a run did: simulated cycles, requests, response beats and memory requests
    compared, CSR reads compared, and the wall time of the clock loop."""
    cycles: int = 0
    requests: int = 0
    lines: int = 0
    mem_lines: int = 0
    csr_reads: int = 0
    resets: int = 0
    lost: int = 0
    wall: float = 0.0
    statuses: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def merge(self, other):
        for name in ("cycles", "requests", "lines", "mem_lines", "csr_reads", "resets", "lost",
                     "wall"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.statuses.update(other.statuses)
        return self

    def as_dict(self):
        out = dataclasses.asdict(self)
        out["statuses"] = {Status(k).name: v for k, v in self.statuses.items()}
        return out


class Mismatch(AssertionError):
    """The design and the golden model disagree."""


def _first_difference(got, want, line_bytes):
    a = got.to_bytes(line_bytes, "little")
    b = want.to_bytes(line_bytes, "little")
    k = next(i for i in range(line_bytes) if a[i] != b[i])
    return f"first difference at byte {k}: design {a[k]:#04x}, model {b[k]:#04x}"


class ControllerBench:
    """The controller top under cocotb, checked against the golden model as it runs.

    Parameters
    ----------
    dut :
        The cocotb handle of the top.
    manifest : Manifest
        The manifest of the Verilog under test.
    seed : int
        Seed of every timing choice, and of the noise lines that requests other than
        writes carry.
    timing : Timing
        Idles and backpressure.
    watchdog : int
        Cycles without a transfer, while something is owed, after which the bench fails.

    Members
    -------
    model : ControllerModel
        The golden model, fed in the order the top takes requests.
    memory : dict
        The downstream memory as the top wrote it: ``{line address: int}``.
    csr : CsrBus
        Register access by name.
    stats : Stats
        Totals over every :meth:`play`.
    """

    def __init__(self, dut, manifest, *, seed=0, timing=Timing(), watchdog=20_000):
        self.dut = dut
        self.manifest = manifest
        self.params = p = manifest.params
        self.line_bytes = p.line_bits // 8
        self.rng = np.random.default_rng(seed)
        self.noise = noise_lines(seed)
        self.timing = timing
        self.watchdog = watchdog
        self.clk = dut.clk
        self.rst = Wire(dut, "rst")
        ports = manifest.ports("controller")
        for name in ("i_req__payload", "o_resp__payload", "o_mem__payload", "i_mem__payload"):
            if name not in ports:
                raise KeyError(f"the top {manifest.block('controller')['module']} has no port "
                               f"{name}; its ports are {', '.join(ports)}")
        self.req = Stream(dut, "i_req", manifest.payload("controller", "i_req"))
        self.resp = Stream(dut, "o_resp", manifest.payload("controller", "o_resp"))
        self.mem_req = Stream(dut, "o_mem", manifest.payload("controller", "o_mem"))
        self.mem_data = Stream(dut, "i_mem", manifest.payload("controller", "i_mem"))
        self.csr = CsrBus(dut, manifest.registers)
        self.model = ControllerModel(p)
        self.memory = {}
        self.stats = Stats()
        self.log = getattr(dut, "_log", None)
        #: Set to a list to record ``("request", cycle)`` for each request taken and
        #: ``("response", cycle)`` for each response's first beat.
        self.timeline = None
        self._clock = None

    # -------------------------------------------------------------- set-up

    def _wires(self):
        for stream in (self.req, self.resp, self.mem_req, self.mem_data):
            yield from stream.wires()
        yield from (self.csr.addr, self.csr.r_stb, self.csr.w_stb, self.csr.w_data, self.rst)

    def _drive_idle(self):
        self.req.valid.set(0)
        self.resp.ready.set(0)
        self.mem_req.ready.set(0)
        self.mem_data.valid.set(0)
        self.csr.idle()

    async def start(self, *, reset_cycles=2):
        """Start the clock, reset, and wait for the clearing sweep that follows reset."""
        if self._clock is None:
            self._clock = Clock(self.clk, CLOCK_NS, unit="ns")
            self._clock.start()
        self.req.payload.set(0)
        self.mem_data.payload.set(0)
        self.csr.addr.set(0)
        self.csr.w_data.set(0)
        self._drive_idle()
        await self._reset(reset_cycles)

    async def _reset(self, cycles):
        self.rst.set(1)
        await ClockCycles(self.clk, cycles)
        await FallingEdge(self.clk)
        self.rst.set(0)
        self.stats.cycles += cycles + 1
        # The sweep empties NUM_WINDOWS * DEPTH rows; requests are simply held off until it
        # ends (the loop sees i_req.ready low), so nothing else waits here.

    # -------------------------------------------------------------- play

    def _request_word(self, request):
        data = request_data(request, self.line_bytes, self.noise)
        return self.req.layout.pack(op=int(request.op), addr=request.addr,
                                    worker=request.worker,
                                    data=int.from_bytes(data, "little"))

    async def play(self, ops, *, timing=None, check_memory=True):
        """Play ``ops`` and check everything against the model; returns this run's
        :class:`Stats` and the list of responses ``(status, [line ints])`` in order.

        Raises :class:`Mismatch` at the first difference, naming the operation, the beat
        and the first differing byte, and ``AssertionError`` when the top stops
        answering for ``watchdog`` cycles.
        """
        timing = timing or self.timing
        rng = self.rng
        p_idle, p_bp, p_mbp = timing.idle, timing.backpressure, timing.mem_backpressure
        lat_lo, lat_hi = timing.mem_latency
        req, resp, mem_req, mem_data, csr = self.req, self.resp, self.mem_req, self.mem_data, self.csr
        r_lay, m_lay = resp.layout, mem_req.layout
        st_off, st_w = r_lay.fields["status"]
        last_off = r_lay.fields["last"][0]
        d_off, d_w = r_lay.fields["data"]
        d_mask = (1 << d_w) - 1
        m_write_off = m_lay.fields["write"][0]
        m_addr_off, m_addr_w = m_lay.fields["addr"]
        m_d_off, m_d_w = m_lay.fields["data"]
        model = self.model
        line_bytes = self.line_bytes
        stats = Stats()
        started = time.perf_counter()
        falling, read_only = FallingEdge(self.clk), ReadOnly()

        ops = collections.deque(ops)
        expected = collections.deque()   # (op index, request, status, [line ints])
        beat = 0                         # beats of expected[0] already seen
        expected_mem = collections.deque()  # (write, addr, data int)
        read_queue = collections.deque()  # [due cycle, data int]
        responses = []
        current = []
        offering = None                  # (op index, request) held on i_req
        index = 0
        cycle = 0
        quiet = 0
        hold_resp = hold_mem = 0

        while ops or offering is not None or expected or read_queue or expected_mem:
            op = ops[0] if ops else None
            if offering is None and op is not None and not isinstance(op, Request):
                if isinstance(op, (CsrRead, CsrWrite)):
                    if expected or read_queue or expected_mem:
                        pass  # wait for every earlier answer, then access the registers
                    else:
                        ops.popleft()
                        index += 1
                        req.valid.set(0)
                        resp.ready.set(0)
                        mem_req.ready.set(0)
                        mem_data.valid.set(0)
                        before = csr.cycles
                        if isinstance(op, CsrWrite):
                            model.csr_write(op.addr, op.value)
                            await csr.write(op.addr, op.value)
                        else:
                            got = await csr.read(op.addr)
                            name = csr.by_address.get(op.addr, f"{op.addr:#x}")
                            if name not in TIMING_COUNTERS:
                                want = model.csr_read(op.addr)
                                if got != want:
                                    raise Mismatch(f"operation {index - 1}: CSR {name} reads "
                                                   f"{got:#010x}, the model says {want:#010x}")
                                stats.csr_reads += 1
                        cycle += csr.cycles - before
                        quiet = 0
                        continue
                elif isinstance(op, Reset):
                    ops.popleft()
                    index += 1
                    stats.lost += len(expected)
                    expected.clear()
                    expected_mem.clear()
                    read_queue.clear()
                    current = []
                    beat = 0
                    self._drive_idle()
                    await self._reset(op.cycles)
                    cycle += op.cycles + 1
                    model.reset()
                    model.memory.lines = {addr: value.to_bytes(line_bytes, "little")
                                          for addr, value in self.memory.items()}
                    stats.resets += 1
                    continue
                elif isinstance(op, Hold):
                    ops.popleft()
                    index += 1
                    if op.responses:
                        hold_resp = op.cycles
                    if op.memory:
                        hold_mem = op.cycles
                    continue
                else:
                    raise TypeError(f"operation {index}: {op!r} is not a Request, CsrRead, "
                                    f"CsrWrite, Reset or Hold")

            # ---------------- drive (falling edge)
            if offering is None and isinstance(op, Request) and rng.random() >= p_idle:
                offering = (index, ops.popleft())
                index += 1
                req.payload.set(self._request_word(offering[1]))
            req.valid.set(offering is not None)
            resp_ready = hold_resp == 0 and rng.random() >= p_bp
            mem_ready = hold_mem == 0 and rng.random() >= p_mbp
            hold_resp = max(0, hold_resp - 1)
            hold_mem = max(0, hold_mem - 1)
            resp.ready.set(resp_ready)
            mem_req.ready.set(mem_ready)
            data_valid = bool(read_queue) and read_queue[0][0] <= cycle
            mem_data.valid.set(data_valid)
            if data_valid:
                mem_data.payload.set(read_queue[0][1])

            # ---------------- sample (settled, before the next rising edge)
            await read_only
            moved = False
            if offering is not None and req.ready.get():
                at, request = offering
                offering = None
                fp32 = model.counters["FP32_LINES"]
                answer = model.submit(request)
                if model.counters["FP32_LINES"] != fp32:
                    if request.op is Op.WRITE:
                        expected_mem.append((1, request.addr,
                                             int.from_bytes(request.data, "little")))
                    else:
                        expected_mem.append((0, request.addr, 0))
                expected.append((at, request, answer.status,
                                 [int.from_bytes(line, "little") for line in answer.lines]))
                stats.requests += 1
                if self.timeline is not None:
                    self.timeline.append(("request", cycle))
                moved = True
            if resp_ready and resp.valid.get():
                word = resp.payload.get()
                if not expected:
                    raise Mismatch(f"cycle {cycle}: a response beat with no request owed "
                                   f"(status {Status((word >> st_off) & 3).name})")
                at, request, status, lines = expected[0]
                got_status = (word >> st_off) & ((1 << st_w) - 1)
                got_last = (word >> last_off) & 1
                got_data = (word >> d_off) & d_mask
                last = beat == len(lines) - 1
                if got_status != status or got_data != lines[beat] or got_last != last:
                    where = (f"operation {at} ({request.op.name} addr {request.addr:#x} worker "
                             f"{request.worker}), beat {beat} of {len(lines)}, cycle {cycle}")
                    if got_status != status:
                        raise Mismatch(f"{where}: status {Status(got_status).name}, the model "
                                       f"says {status.name}")
                    if got_data != lines[beat]:
                        raise Mismatch(f"{where}: data differs; "
                                       f"{_first_difference(got_data, lines[beat], line_bytes)}")
                    raise Mismatch(f"{where}: last is {got_last}, the model says {int(last)}")
                if beat == 0 and self.timeline is not None:
                    self.timeline.append(("response", cycle))
                current.append(got_data)
                stats.lines += 1
                beat += 1
                if last:
                    expected.popleft()
                    responses.append((status, current))
                    stats.statuses[status] += 1
                    current = []
                    beat = 0
                moved = True
            if mem_ready and mem_req.valid.get():
                word = mem_req.payload.get()
                write = (word >> m_write_off) & 1
                addr = (word >> m_addr_off) & ((1 << m_addr_w) - 1)
                data = (word >> m_d_off) & ((1 << m_d_w) - 1)
                if not expected_mem:
                    raise Mismatch(f"cycle {cycle}: a memory {'write' if write else 'read'} of "
                                   f"{addr:#x} that no request asked for")
                want_write, want_addr, want_data = expected_mem.popleft()
                if (write, addr) != (want_write, want_addr) or (write and data != want_data):
                    raise Mismatch(
                        f"cycle {cycle}: memory request {'write' if write else 'read'} "
                        f"{addr:#x}, the model says {'write' if want_write else 'read'} "
                        f"{want_addr:#x}" + (f"; {_first_difference(data, want_data, line_bytes)}"
                                             if write and addr == want_addr else ""))
                if write:
                    self.memory[addr] = data
                else:
                    due = cycle + int(rng.integers(lat_lo, lat_hi + 1))
                    read_queue.append((due, self.memory.get(addr, 0)))
                stats.mem_lines += 1
                moved = True
            if data_valid and mem_data.ready.get():
                read_queue.popleft()
                moved = True

            cycle += 1
            quiet = 0 if moved else quiet + 1
            if quiet > self.watchdog and (expected or offering is not None):
                raise AssertionError(
                    f"cycle {cycle}: no transfer for {self.watchdog} cycles with "
                    f"{len(expected)} responses owed and "
                    f"{'a request' if offering else 'no request'} waiting on i_req")
            await falling

        self._drive_idle()
        if check_memory:
            want = {addr: int.from_bytes(line, "little")
                    for addr, line in model.memory.lines.items()}
            if self.memory != want:
                bad = sorted(set(self.memory.items()) ^ set(want.items()))[:4]
                raise Mismatch(f"downstream memory differs from the model's at {bad}")
        stats.cycles = cycle
        stats.wall = time.perf_counter() - started
        self.stats.merge(stats)
        return stats, responses


def record_stats(test, stats, **extra):
    """Append one JSON line for ``test`` to ``$NFABRIC_STATS`` (the regression's tally)."""
    path = os.environ.get("NFABRIC_STATS")
    if not path:
        return
    entry = {"test": test, **stats.as_dict(), **extra}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


# ------------------------------------------------------------------------------ block wrapper

#: Blocks the block testbenches check, by manifest role: the generator's standalone blocks.
BLOCK_ROLES = UNIT_ROLES
BLOCKS_TOPLEVEL = "nfabric_blocks"


def blocks_wrapper(manifest, roles=BLOCK_ROLES, *, module=BLOCKS_TOPLEVEL):
    """Verilog of a module that holds one instance of each block of ``roles``.

    Every port of block ``role`` appears at the top as ``<role>__<port>``; ``clk`` and
    ``rst`` are shared. One build of this module serves every block testbench, so a
    simulator that compiles slowly compiles once. Returns the text.
    """
    ports, body = ["clk", "rst"], []
    decls = ["  input wire clk;", "  input wire rst;"]
    for role in roles:
        entry = manifest.block(role)
        connections = []
        for port in entry["ports"]:
            name, width = port["name"], port["width"]
            if name in ("clk", "rst"):
                connections.append(f".{name}({name})")
                continue
            top = f"{role}__{name}"
            ports.append(top)
            kind = "input wire" if port["direction"] == "input" else "output wire"
            span = f"[{width - 1}:0] " if width > 1 else ""
            decls.append(f"  {kind} {span}{top};")
            connections.append(f".{name}({top})")
        body.append(f"  {entry['module']} {role} (\n    " + ",\n    ".join(connections)
                    + "\n  );")
    return (f"// Every block of {manifest.data['name']} side by side, ports prefixed by role.\n"
            f"// Generated by neuron_fabric.sim.cocotb_bench.blocks_wrapper; do not edit.\n"
            f"module {module}({', '.join(ports)});\n" + "\n".join(decls) + "\n"
            + "\n".join(body) + "\nendmodule\n")
