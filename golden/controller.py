"""Transaction-level model of the controller top (docs/design.md, "Controller behaviour").

The model answers requests one at a time, in order, exactly as the hardware must: every
request gets one response (one or more lines, ``last`` on the final one). It keeps the
windows, the slots with their accumulators and contribution bitmaps, the CSRs and their
side effects. The FP32 path forwards to a downstream line memory (:class:`LineMemory`).

Rules, in the order they are applied to a request:

1. A window *claims* a line address when CONTROL.ENABLE is 1, its CONFIG.EN is 1 and
   ``(addr - BASE) mod 2**ADDR_BITS < SIZE``; the lowest-numbered claiming window wins.
   The slot is ``addr - BASE``.
2. Unclaimed requests are memory traffic: WRITE and READ go downstream unchanged (byte-exact)
   and count in FP32_LINES; READ_CLEAR has no meaning there and gets BAD_REQUEST.
3. A claimed request gets BAD_REQUEST (flag BAD_CONFIG) when the window is misconfigured
   (SIZE > DEPTH, READOUT not of its ROUTE) or NUM_WORKERS is outside 1 to MAX_WORKERS.
4. WRITE: BAD_REQUEST (flag BAD_REQUEST) for a worker id >= NUM_WORKERS; DUPLICATE when the
   worker already wrote this slot; otherwise the line is folded into the slot, lane by lane,
   with saturation, and the worker's bitmap bit is set. Refused writes change nothing.
5. READ and READ_CLEAR: NOT_READY unless workers 0 to NUM_WORKERS - 1 have all written the
   slot (nothing changes); otherwise the readout of the window's READOUT with the current
   NUM_WORKERS and GATE, after which READ_CLEAR empties the slot.
6. Writing a window's BASE, SIZE or CONFIG empties that window's slots, so a slot is never
   reinterpreted under another route. CONTROL.CLEAR_SLOTS empties every slot.

Every refusal sets its sticky flag in ERRORS and counts in its counter; refused and
single-line responses carry an all-zero data line.
"""

import dataclasses
import enum

import numpy as np

from . import lines as _lines
from .validate import check_int
from .formats import READOUTS_BY_ROUTE, Readout, Route, route_spec
from .params import ADDR_BITS, FabricParams
from .regmap import COUNTERS, ERROR_FLAGS, Access, register_map, window_register

__all__ = ["Op", "Status", "Request", "Response", "LineMemory", "ControllerModel"]


class Op(enum.IntEnum):
    """Request operation (the wire encoding is the value)."""
    WRITE      = 0
    READ       = 1
    READ_CLEAR = 2


class Status(enum.IntEnum):
    """Response status (the wire encoding is the value)."""
    OK          = 0
    NOT_READY   = 1
    DUPLICATE   = 2
    BAD_REQUEST = 3


@dataclasses.dataclass(frozen=True)
class Request:
    """An upstream request: ``data`` is the written line (ignored for reads)."""
    op: Op
    addr: int
    worker: int = 0
    data: bytes = b""


@dataclasses.dataclass(frozen=True)
class Response:
    """An upstream response: one status and one or more data lines (``last`` on the final)."""
    status: Status
    lines: tuple

    @property
    def data(self):
        """All data lines joined, as bytes."""
        return b"".join(self.lines)


class LineMemory:
    """The downstream memory of the FP32 path: lines by address, unwritten lines read 0."""

    def __init__(self, *, line_bits):
        self.line_bytes = _lines.line_bytes(line_bits)
        self.lines = {}

    def write(self, addr, data):
        self.lines[addr] = bytes(data)

    def read(self, addr):
        return self.lines.get(addr, bytes(self.line_bytes))


class _Window:
    """A window's slots: accumulators (counts or sums) and contribution bitmaps."""

    def __init__(self, params):
        self.acc = np.zeros((params.depth, params.line_bits), dtype=np.int16)
        self.bitmap = [0] * params.depth

    def clear(self, slot=None):
        if slot is None:
            self.acc[:] = 0
            self.bitmap = [0] * len(self.bitmap)
        else:
            self.acc[slot] = 0
            self.bitmap[slot] = 0


class ControllerModel:
    """The controller top at transaction level.

    Parameters
    ----------
    params : FabricParams
        The configuration (default parameters when None).
    memory : LineMemory or None
        The downstream memory; a fresh empty one when None. A controller reset leaves it
        alone, as resetting the controller does not erase DRAM.

    Members
    -------
    regmap : RegisterMap
        The register map the CSR accessors use.
    memory : LineMemory
        The downstream memory of the FP32 path.
    """

    def __init__(self, params=None, *, memory=None):
        self.params = params or FabricParams()
        if not isinstance(self.params, FabricParams):
            raise TypeError(f"params must be a FabricParams, not {type(self.params).__name__}")
        self.regmap = register_map(self.params)
        self.memory = memory if memory is not None else LineMemory(line_bits=self.params.line_bits)
        self._line_bytes = _lines.line_bytes(self.params.line_bits)
        self._zero_line = bytes(self._line_bytes)
        self.reset()

    # ------------------------------------------------------------------ state

    def reset(self):
        """Reset: registers to their reset values, every slot empty, counters zero."""
        self._regs = {reg.name: reg.reset for reg in self.regmap
                      if any(f.access in (Access.RW, Access.RW1C, Access.RW1S) for f in reg.fields)}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._windows = [_Window(self.params) for _ in range(self.params.num_windows)]

    def _field(self, register, field):
        return self.regmap[register].field(field).get(self._regs[register])

    @property
    def num_workers(self):
        return self._field("NUM_WORKERS", "N")

    def window_config(self, window):
        """``(base, size, enabled, route, readout)`` of a window as last written."""
        cfg = self.regmap[window_register(window, "CONFIG")].decode(
            self._regs[window_register(window, "CONFIG")])
        return (self._regs[window_register(window, "BASE")],
                self._regs[window_register(window, "SIZE")],
                bool(cfg["EN"]), cfg["ROUTE"], cfg["READOUT"])

    def slot_state(self, window, slot):
        """``(accumulators, bitmap)`` of a slot: a copy of its lanes and the bitmap integer."""
        win = self._windows[window]
        lanes = route_spec(self.window_config(window)[3]).lanes(self.params.line_bits)
        return win.acc[slot, :lanes].copy(), win.bitmap[slot]

    # ------------------------------------------------------------------ CSRs

    def _register(self, addr):
        check_int("addr", addr, low=0)
        reg = self.regmap.at(addr)
        if reg is None:
            raise ValueError(f"addr must be the address of a register, not {addr:#x}")
        return reg

    def csr_read(self, addr):
        """Read the register at byte ``addr``. Unmapped addresses raise ``ValueError``.

        STALL_CYCLES depends on cycle timing and reads 0 here.
        """
        reg = self._register(addr)
        if reg.name in self.counters:
            return self.counters[reg.name] & 0xFFFF_FFFF
        value = 0
        for f in reg.fields:
            if f.access is Access.R and f.const is not None:
                value |= f.const << f.offset
            elif f.access is not Access.W:
                value |= self._regs[reg.name] & f.mask
        return value

    def csr_write(self, addr, value):
        """Write the register at byte ``addr`` with its fields' actions and side effects."""
        reg = self._register(addr)
        check_int("value", value, low=0, high=0xFFFF_FFFF)
        for f in reg.fields:
            bits = value & f.mask
            if f.access is Access.RW:
                self._regs[reg.name] = (self._regs[reg.name] & ~f.mask) | bits
            elif f.access is Access.RW1C:
                self._regs[reg.name] &= ~bits
            elif f.access is Access.RW1S:
                self._regs[reg.name] |= bits
            elif f.access is Access.W and bits:
                self._strobe(reg.name, f.name)
        if reg.name.startswith("WIN"):
            self._windows[int(reg.name[3:reg.name.index("_")])].clear()

    def _strobe(self, register, field):
        if (register, field) == ("CONTROL", "CLEAR_SLOTS"):
            for win in self._windows:
                win.clear()
        elif (register, field) == ("CONTROL", "CLEAR_COUNTERS"):
            self.counters = dict.fromkeys(COUNTERS, 0)

    def error_flags(self):
        """The sticky flags that are set, by name."""
        return {flag for flag in ERROR_FLAGS if self._field("ERRORS", flag)}

    def _flag(self, flag):
        self._regs["ERRORS"] |= self.regmap["ERRORS"].field(flag).mask

    def _count(self, counter):
        self.counters[counter] = (self.counters[counter] + 1) & 0xFFFF_FFFF

    # ------------------------------------------------------------------ requests

    def request(self, op, addr, worker=0, data=None):
        """Answer one request; returns its :class:`Response`.

        ``data`` is the written line (bytes, or a ``uint8`` array) and is required for a
        WRITE. Values a request cannot carry on the wire (an unknown op, an address of more
        than ADDR_BITS bits, a worker id wider than the worker field, a line of the wrong
        length) raise ``ValueError``: they are testbench errors, not device behaviour.
        """
        try:
            op = Op(op)
        except ValueError:
            raise ValueError(f"op must be one of {', '.join(o.name for o in Op)}, not {op!r}") from None
        check_int("addr", addr, low=0, high=(1 << ADDR_BITS) - 1)
        check_int("worker", worker, low=0, high=(1 << self.params.worker_bits) - 1)
        if op is Op.WRITE:
            if data is None:
                data = b""
            elif not isinstance(data, (bytes, bytearray, memoryview)):
                data = np.asarray(data, dtype=np.uint8).tobytes()
            data = bytes(data)
            if len(data) != self._line_bytes:
                raise ValueError(f"data must be one line of {self._line_bytes} bytes for a WRITE, "
                                 f"not {len(data)} bytes")
        response = self._answer(op, addr, worker, data)
        self._count("RESPONSES")
        return response

    def submit(self, request):
        """Answer one :class:`Request`."""
        return self.request(request.op, request.addr, request.worker, request.data)

    def run(self, requests):
        """Answer a sequence of :class:`Request` in order; returns the responses."""
        return [self.submit(r) for r in requests]

    def _single(self, status, data=None):
        return Response(Status(status), (data if data is not None else self._zero_line,))

    def _refuse(self, status, flag):
        self._flag(flag)
        self._count({Status.NOT_READY: "NOT_READY_COUNT", Status.DUPLICATE: "DUPLICATE_COUNT",
                     Status.BAD_REQUEST: "BAD_REQUEST_COUNT"}[status])
        return self._single(status)

    def _claim(self, addr):
        if not self._field("CONTROL", "ENABLE"):
            return None
        for window in range(self.params.num_windows):
            base, size, enabled, _, _ = self.window_config(window)
            offset = (addr - base) % (1 << ADDR_BITS)
            if enabled and offset < size:
                return window, offset
        return None

    def _answer(self, op, addr, worker, data):
        claim = self._claim(addr)
        if claim is None:
            if op is Op.READ_CLEAR:
                return self._refuse(Status.BAD_REQUEST, "BAD_REQUEST")
            self._count("FP32_LINES")
            if op is Op.WRITE:
                self.memory.write(addr, data)
                return self._single(Status.OK)
            return self._single(Status.OK, self.memory.read(addr))

        window, slot = claim
        _, size, _, route, readout = self.window_config(window)
        n = self.num_workers
        if (size > self.params.depth or readout not in READOUTS_BY_ROUTE[Route(route)]
                or not 1 <= n <= self.params.max_workers):
            return self._refuse(Status.BAD_REQUEST, "BAD_CONFIG")
        win = self._windows[window]
        if op is Op.WRITE:
            if worker >= n:
                return self._refuse(Status.BAD_REQUEST, "BAD_REQUEST")
            if win.bitmap[slot] >> worker & 1:
                return self._refuse(Status.DUPLICATE, "DUPLICATE")
            self._fold(win, slot, Route(route), data)
            win.bitmap[slot] |= 1 << worker
            return self._single(Status.OK)

        complete = (1 << n) - 1
        if win.bitmap[slot] & complete != complete:
            return self._refuse(Status.NOT_READY, "NOT_READY")
        lines = self._readout(win.acc[slot], Route(route), Readout(readout))
        if op is Op.READ_CLEAR:
            win.clear(slot)
        return Response(Status.OK, tuple(bytes(line) for line in lines))

    def _fold(self, win, slot, route, data):
        spec = route_spec(route)
        p = self.params
        lanes = spec.lanes(p.line_bits)
        values = _lines.unpack_lanes(np.frombuffer(data, dtype=np.uint8), lane_bits=spec.lane_bits,
                                     signed=spec.signed).astype(np.int16)
        invalid = None
        if spec.invalid_counter is not None:  # an invalid code counts as 0
            invalid = values == spec.golden.INVALID_VALUE
            values[invalid] = 0
        low, high = spec.limits(max_workers=p.max_workers, counter_bits=p.counter_bits)
        total = win.acc[slot, :lanes] + values
        saturated = ((total < low) | (total > high)).any()
        win.acc[slot, :lanes] = np.clip(total, low, high)
        self._count(spec.lines_counter)
        if invalid is not None and invalid.any():
            self._flag("INVALID_CODE")
            self._count(spec.invalid_counter)
        if saturated:
            self._flag("SATURATED")

    def _readout(self, acc, route, readout):
        spec = route_spec(route)
        p = self.params
        inputs = {"num_workers": self.num_workers, "gate": self._field("GATE", "GATE")}
        values = acc[None, :spec.lanes(p.line_bits)].astype(np.int8 if spec.signed else np.uint8)
        return spec.golden.readout(values, readout=readout, counter_bits=p.counter_bits,
                                   **{name: inputs[name] for name in spec.readout_inputs})
