"""The emitted controller top as the aggregation device of the DDP hooks.

:class:`RtlDevice` plugs into :class:`neuron_fabric.host.hooks.FabricHook` (its ``device``
argument). The hook still encodes on every worker and exchanges the lines; from there the
device takes over what the hardware does. Worker 0 holds the simulated controller (a
:class:`~neuron_fabric.sim.harness.Harness` of the Verilog) and programs it over the CSR bus
the way a driver would: CONTROL.CLEAR_SLOTS, NUM_WORKERS, GATE, one window per low-bit
route with its readout, CONTROL.ENABLE. Each window's lines then go in as every worker's writes to the same slots,
``DEPTH`` slots at a time, and come back as the READ_CLEAR responses, which worker 0
broadcasts to the others. FP32 values make a round trip through the FP32 path: written to
memory beyond the windows and read back.

Anything but an OK status, or an FP32 line that does not come back byte for byte, raises
:class:`DeviceError`: the run stops rather than train on a wrong aggregate.
"""

import dataclasses
import time

import numpy as np
import torch
import torch.distributed as dist

from ..golden.controller import Op, Status
from ..golden.formats import ROUTE_SPECS, Readout, readout_lines_per_slot, route_spec
from .harness import Harness, Requests
from .manifest import Manifest
from .scenarios import Timing

__all__ = ["DeviceError", "DeviceTally", "RtlDevice"]

#: Window ``k`` serves the route encoded ``k`` from line ``(k + 1) * _WINDOW_BASE``; the FP32
#: round trips land beyond every window.
_WINDOW_BASE = 0x1000
_FP32_BASE = 0x100000


class DeviceError(RuntimeError):
    """The simulated device refused a request or returned FP32 data changed."""


@dataclasses.dataclass
class DeviceTally:
    """What the device did: lines written and read, cycles simulated, seconds in the RTL
    (the harness's clock loop) and in the driver around it (building requests, checks)."""
    lines_written: int = 0
    lines_read: int = 0
    cycles: int = 0
    rtl_s: float = 0.0
    driver_s: float = 0.0

    def as_dict(self):
        return dataclasses.asdict(self)


class RtlDevice:
    """The controller top of the Verilog in ``verilog``, serving the hook's windows.

    Parameters
    ----------
    verilog : str or Path
        The generated folder of the top; its harness library must be built already (by
        :func:`neuron_fabric.sim.harness.build` in the parent process), or ``library`` given.
    world_size, rank : int
        The process group's; only rank 0 simulates.
    seed : int
        Seed of the harness's idles and backpressure.
    timing : Timing
        The harness's idles and backpressure (the result must not depend on them).
    """

    def __init__(self, verilog, *, world_size, rank, seed=0, timing=Timing(), library=None,
                 cache="build/harness"):
        self.world_size = world_size
        self.rank = rank
        self.params = Manifest(verilog).params
        self.tally = DeviceTally()
        self.harness = None
        self._readouts = {}
        self._gate = None
        if world_size > self.params.max_workers:
            raise DeviceError(f"world_size {world_size} is more than the device's "
                              f"MAX_WORKERS {self.params.max_workers}")
        if self.params.num_windows < len(ROUTE_SPECS):
            raise DeviceError(f"the device has {self.params.num_windows} windows; a window "
                              f"per route needs {len(ROUTE_SPECS)}")
        if rank == 0:
            self.harness = Harness(verilog, seed=seed, timing=timing, library=library,
                                   cache=cache)
            # A driver's start: empty every slot, then serve.
            self.harness.csr_write("CONTROL", CLEAR_SLOTS=1)
            self.harness.csr_write("NUM_WORKERS", world_size)
            self.harness.csr_write("CONTROL", ENABLE=1)

    # ---------------------------------------------------------------- configuration

    def _program(self, route, readout, gate):
        """Set the route's window and GATE, only when they change (a CONFIG write clears)."""
        h = self.harness
        window = int(route_spec(route).route)
        base = _WINDOW_BASE * (window + 1)
        if self._readouts.get(window) != readout:
            h.csr_write(f"WIN{window}_BASE", base)
            h.csr_write(f"WIN{window}_SIZE", self.params.depth)
            h.csr_write(f"WIN{window}_CONFIG", EN=1, ROUTE=window, READOUT=int(readout))
            self._readouts[window] = readout
        if gate is not None and gate != self._gate:
            h.csr_write("GATE", gate)
            self._gate = gate
        return base

    # ---------------------------------------------------------------- the hook's calls

    def aggregate(self, route, lines, *, readout, gate=None):
        """The readout lines of ``lines`` (every worker's, ``(world, n, line_bytes)``)."""
        readout = Readout(readout)
        world, n, nbytes = lines.shape
        per_slot = readout_lines_per_slot(readout, counter_bits=self.params.counter_bits)
        out = np.empty((n * per_slot, nbytes), dtype=np.uint8)
        if self.rank == 0:
            self._aggregate(route, lines, readout, gate, per_slot, out)
        return self._broadcast(out)

    def _aggregate(self, route, lines, readout, gate, per_slot, out):
        t0 = time.perf_counter()
        h = self.harness
        base = self._program(route, readout, gate)
        world, n, nbytes = lines.shape
        depth = h.params.depth
        for start in range(0, n, depth):
            rows = min(depth, n - start)
            slots = np.arange(rows, dtype=np.uint32)
            # Every worker writes every slot, slot after slot; then each slot is read and
            # cleared, in slot order.
            writes = rows * world
            op = np.full(writes + rows, int(Op.READ_CLEAR), dtype=np.uint8)
            op[:writes] = int(Op.WRITE)
            addr = np.concatenate([np.repeat(slots, world), slots]) + np.uint32(base)
            worker = np.concatenate([np.tile(np.arange(world, dtype=np.uint8), rows),
                                     np.zeros(rows, dtype=np.uint8)])
            data = np.zeros((writes + rows, nbytes), dtype=np.uint8)
            data[:writes] = lines[:, start:start + rows].transpose(1, 0, 2).reshape(writes, nbytes)
            t1 = time.perf_counter()
            played = h.play(Requests(op=op, addr=addr, worker=worker, data=data))
            self.tally.rtl_s += time.perf_counter() - t1
            self.tally.cycles += played.cycles
            bad = np.flatnonzero(played.status != Status.OK)
            if bad.size:
                k = int(bad[0])
                raise DeviceError(f"{route} window: request {k} ({Op(int(op[k])).name} slot "
                                  f"{int(addr[k]) - base}) answered "
                                  f"{Status(int(played.status[k])).name}")
            reads = played.lines[played.first[writes]:]
            if reads.shape[0] != rows * per_slot:
                raise DeviceError(f"{route} window: {reads.shape[0]} readout lines for {rows} "
                                  f"slots, expected {rows * per_slot}")
            out[start * per_slot:(start + rows) * per_slot] = reads
            self.tally.lines_written += writes
            self.tally.lines_read += reads.shape[0]
        self.tally.driver_s += time.perf_counter() - t0

    def passthrough(self, values):
        """``values`` (float32) after a write to device memory and a read back."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        out = np.empty_like(values)
        if self.rank == 0:
            out[:] = self._round_trip(values)
        return self._broadcast(out)

    def _round_trip(self, values):
        t0 = time.perf_counter()
        h = self.harness
        nbytes = h.line_bytes
        raw = values.view(np.uint8)
        n = -(-raw.size // nbytes)
        data = np.zeros((2 * n, nbytes), dtype=np.uint8)
        data[:n].reshape(-1)[:raw.size] = raw
        op = np.concatenate([np.full(n, int(Op.WRITE)), np.full(n, int(Op.READ))]).astype(np.uint8)
        addr = np.tile(np.arange(n, dtype=np.uint32), 2) + np.uint32(_FP32_BASE)
        t1 = time.perf_counter()
        played = h.play(Requests(op=op, addr=addr, worker=np.zeros(2 * n, dtype=np.uint8),
                                 data=data))
        self.tally.rtl_s += time.perf_counter() - t1
        self.tally.cycles += played.cycles
        if np.any(played.status != Status.OK):
            k = int(np.flatnonzero(played.status != Status.OK)[0])
            raise DeviceError(f"FP32 line {k % n} answered {Status(int(played.status[k])).name}")
        back = played.lines[played.first[n]:played.first[2 * n]]
        if not np.array_equal(back, data[:n]):
            k = int(np.flatnonzero(np.any(back != data[:n], axis=1))[0])
            raise DeviceError(f"FP32 line {k} came back changed from the device's memory")
        self.tally.lines_written += n
        self.tally.lines_read += n
        self.tally.driver_s += time.perf_counter() - t0
        return back.reshape(-1)[:raw.size].view(np.float32)

    def _broadcast(self, array):
        if self.world_size > 1:
            tensor = torch.from_numpy(array)
            dist.broadcast(tensor, src=0)
        return array

    def close(self):
        if self.harness is not None:
            self.harness.close()
            self.harness = None
