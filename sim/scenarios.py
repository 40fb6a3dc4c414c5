"""Operation lists for the controller benches: configuration, aggregation rounds, random traffic.

Every function returns a list of :class:`~neuron_fabric.golden.controller.Request`,
:class:`CsrWrite` and :class:`CsrRead` that a bench plays in order into the hardware and the
golden model alike. Nothing here knows about a simulator.
"""

import dataclasses

import numpy as np

from ..golden import gbinary, gternary
from ..golden.controller import Op, Request
from ..golden.formats import READOUTS_BY_ROUTE, Readout, Route
from ..golden.params import ADDR_BITS
from ..golden.regmap import COUNTERS, ERROR_FLAGS, window_register

__all__ = ["Timing", "CsrWrite", "CsrRead", "Window", "configure", "read_all_registers",
           "aggregation_round", "trace_rounds", "random_traffic", "noise_lines", "request_data"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """What the bench's side of each interface does, drawn per cycle from the seed.

    ``idle``: chance that the requester holds back a request it has; ``backpressure``:
    chance that ``o_resp`` is not ready; ``mem_backpressure``: chance that ``o_mem`` is not
    ready; ``mem_latency``: read latency of the memory in cycles, drawn from ``[low, high]``.
    """
    idle: float = 0.0
    backpressure: float = 0.0
    mem_backpressure: float = 0.0
    mem_latency: tuple = (1, 1)


def noise_lines(seed):
    """The generator of the data lines that requests other than writes carry in a bench
    seeded ``seed``: apart from the timing's generator, so the same seed replays the same
    idles and backpressure whatever the lines."""
    return np.random.default_rng([seed, 1])


def request_data(request, line_bytes, noise):
    """The data line ``request`` carries on the bus: a write's own line, otherwise
    ``line_bytes`` bytes of ``noise`` (:func:`noise_lines`), which the controller must
    ignore (a tile that folded them would change the readout it answers)."""
    if request.op is Op.WRITE:
        return request.data
    return noise.integers(0, 256, line_bytes, dtype=np.uint8).tobytes()


@dataclasses.dataclass(frozen=True)
class CsrWrite:
    """Write ``value`` to the register at byte address ``addr``."""
    addr: int
    value: int


@dataclasses.dataclass(frozen=True)
class CsrRead:
    """Read the register at byte address ``addr`` (compared with the model)."""
    addr: int


@dataclasses.dataclass(frozen=True)
class Window:
    """A window's configuration: ``[base, base + size)`` with a route and a readout."""
    base: int
    size: int
    route: Route
    readout: Readout
    enabled: bool = True


def configure(regmap, *, windows, num_workers, gate=1, enable=True):
    """CSR writes that set NUM_WORKERS, GATE, every window (unused ones disabled) and ENABLE."""
    ops = [CsrWrite(regmap["NUM_WORKERS"].address, num_workers),
           CsrWrite(regmap["GATE"].address, gate)]
    for index in range(regmap.params.num_windows):
        window = windows[index] if index < len(windows) else None
        config = regmap[window_register(index, "CONFIG")]
        if window is None:
            ops.append(CsrWrite(config.address, 0))
            continue
        ops += [
            CsrWrite(regmap[window_register(index, "BASE")].address, window.base),
            CsrWrite(regmap[window_register(index, "SIZE")].address, window.size),
            CsrWrite(config.address, config.encode(EN=int(window.enabled), ROUTE=window.route,
                                                   READOUT=window.readout)),
        ]
    ops.append(CsrWrite(regmap["CONTROL"].address, regmap["CONTROL"].encode(ENABLE=int(enable))))
    return ops


def read_all_registers(regmap, *, skip=("STALL_CYCLES",)):
    """A read of every register the model predicts."""
    return [CsrRead(reg.address) for reg in regmap if reg.name not in skip]


def aggregation_round(lines, *, base, rng, read_op=Op.READ_CLEAR):
    """Every worker writes its lines to slots ``base, base + 1, ...``, interleaved at random,
    then each slot is read once.

    ``lines`` is ``(workers, n_lines, line_bytes)`` ``uint8``. The write order shuffles
    workers and slots, but a worker's writes to one slot never repeat.
    """
    workers, n_lines = lines.shape[:2]
    order = [(w, k) for w in range(workers) for k in range(n_lines)]
    order = [order[i] for i in rng.permutation(len(order))]
    ops = [Request(Op.WRITE, (base + k) % (1 << ADDR_BITS), w, lines[w, k].tobytes())
           for w, k in order]
    ops += [Request(read_op, (base + k) % (1 << ADDR_BITS)) for k in range(n_lines)]
    return ops


def trace_rounds(trace, *, regmap, step_index, rng, max_lines=None, ratio=0.5, roles=None):
    """Aggregation rounds of one captured step of a real trace through every readout.

    Each worker's bucket is encoded as G-Binary and as G-Ternary lines (``max_lines`` of
    them at most). Windows are configured in turn with each readout of each route, and a
    full round is written and read back through each. Returns the operations.
    """
    p = regmap.params
    buckets = [trace.bucket(step_index, w, roles) for w in range(trace.workers)]
    gbin = np.stack([gbinary.encode(b, line_bits=p.line_bits) for b in buckets])
    gter = np.stack([gternary.encode(b, ratio=ratio, line_bits=p.line_bits) for b in buckets])
    if max_lines is not None:
        gbin, gter = gbin[:, :max_lines], gter[:, :max_lines]
    size = min(p.depth, gbin.shape[1])
    ops = []
    for route, lines in ((Route.GBINARY, gbin), (Route.GTERNARY, gter)):
        for readout in READOUTS_BY_ROUTE[route]:
            window = Window(base=int(rng.integers(0, 1 << 20)), size=size, route=route,
                            readout=readout)
            ops += configure(regmap, windows=[window], num_workers=trace.workers,
                             gate=int(rng.integers(1, trace.workers + 1)))
            for start in range(0, lines.shape[1], size):
                ops += aggregation_round(lines[:, start:start + size], base=window.base, rng=rng)
    return ops


def random_traffic(regmap, *, rng, n_ops):
    """Seeded random traffic that reaches every status and CSR side effect.

    Mixes writes from random workers (some beyond NUM_WORKERS, some repeated), reads and
    READ_CLEARs of complete and incomplete slots, plain memory writes and reads, writes
    with invalid ternary codes, reconfiguration (including a misconfigured window and a
    NUM_WORKERS of 0), CLEAR_SLOTS, CLEAR_COUNTERS and write-1-to-clear of the flags.
    """
    p = regmap.params
    line_bytes = p.line_bits // 8
    ops = []

    def reconfigure():
        windows = []
        for index in range(p.num_windows):
            route = Route(int(rng.integers(0, 2)))
            readouts = READOUTS_BY_ROUTE[route]
            readout = readouts[int(rng.integers(0, len(readouts)))]
            if rng.random() < 0.1:  # a readout of the other route: misconfigured
                readout = READOUTS_BY_ROUTE[Route(1 - route)][0]
            size = int(rng.integers(1, p.depth + 1)) if rng.random() > 0.1 else p.depth + 1
            base = int(rng.integers(0, 64)) if rng.random() > 0.1 else (1 << ADDR_BITS) - 2
            windows.append(Window(base=base, size=size, route=route, readout=readout,
                                  enabled=rng.random() > 0.15))
        workers = int(rng.integers(1, p.max_workers + 1)) if rng.random() > 0.05 else 0
        ops.extend(configure(regmap, windows=windows, num_workers=workers,
                             gate=int(rng.integers(0, p.max_workers + 1)),
                             enable=rng.random() > 0.1))
        return workers

    workers = reconfigure()
    for _ in range(n_ops):
        roll = rng.random()
        addr = int(rng.integers(0, 80)) if rng.random() > 0.05 else int(
            rng.integers(0, 1 << ADDR_BITS))
        if roll < 0.55:
            worker = int(rng.integers(0, max(1, workers) + (rng.random() < 0.1)))
            worker = min(worker, p.max_workers - 1)
            data = rng.integers(0, 256, line_bytes, dtype=np.uint8)
            if rng.random() < 0.7:  # mostly valid ternary codes: clear the high bit of 10
                data &= ~((data & 0xAA) & ~((data & 0x55) << 1)).astype(np.uint8)
            ops.append(Request(Op.WRITE, addr, worker, data.tobytes()))
        elif roll < 0.85:
            ops.append(Request(Op.READ if rng.random() < 0.6 else Op.READ_CLEAR, addr))
        elif roll < 0.9:
            ops.append(CsrRead(regmap[COUNTERS[int(rng.integers(0, len(COUNTERS) - 1))]].address))
        elif roll < 0.93:
            ops.append(CsrWrite(regmap["ERRORS"].address, int(rng.integers(0, 1 << len(ERROR_FLAGS)))))
            ops.append(CsrRead(regmap["ERRORS"].address))
        elif roll < 0.95:
            control = regmap["CONTROL"]
            ops.append(CsrWrite(control.address, control.encode(
                ENABLE=1, CLEAR_SLOTS=int(rng.random() < 0.5), CLEAR_COUNTERS=int(rng.random() < 0.5))))
        elif roll < 0.96:
            workers = reconfigure()
        else:  # complete a slot: every worker writes it, then it is read
            for worker in rng.permutation(max(1, workers)):
                ops.append(Request(Op.WRITE, addr, int(worker) % p.max_workers,
                                   rng.integers(0, 256, line_bytes, dtype=np.uint8).tobytes()))
            ops.append(Request(Op.READ if rng.random() < 0.5 else Op.READ_CLEAR, addr))
    return ops
