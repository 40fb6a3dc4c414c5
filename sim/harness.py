"""The emitted controller top, Verilated into a shared library and driven from Python.

cocotb pays two simulator callbacks and a Python loop iteration per cycle; this harness runs the
whole clock loop in C++ (``harness.cpp``) and crosses into Python once per batch of requests.
Python hands over arrays of requests and gets the responses back in order, with every memory
request the top sent; the C++ side offers the requests with seeded random idles, applies
seeded random backpressure on ``o_resp`` and ``o_mem`` and serves memory reads with a seeded
latency. Checking against the golden model stays in Python (:mod:`.long_regression`,
:mod:`.device`).

The library is built once per Verilog and options: :func:`build` keys its output folder on a
digest of the Verilog files, the Verilator configuration, ``harness.cpp``, the options and the
tool versions (:func:`~neuron_fabric.gen.tools.run_key`, the key of the FPGA flow's runs too),
so a changed input always rebuilds and an unchanged one never does.

Command line::

    python -m neuron_fabric.sim.harness build --verilog build/verilog/l512_w16_c5_d64_n2
    python -m neuron_fabric.sim.harness speed --verilog ... [--cycles 200000]
"""

import argparse
import ctypes
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from ..golden.controller import Op, Response, Status
from ..golden.formats import READOUT_SPECS
from ..gen.tools import default_verilator_root, run_key, verilator_env, verilator_version
from ..golden.regmap import register_map
from .manifest import Manifest, top_folder
from .scenarios import Timing, noise_lines

__all__ = ["HarnessError", "HARNESS_SOURCE", "BUILD_OPTIONS", "build_key", "build", "Requests", "Played",
           "Harness", "main"]

HARNESS_SOURCE = pathlib.Path(__file__).with_name("harness.cpp")
LIBRARY_NAME = "libnfharness.so"

#: Verilator options of every build: a single-threaded model without assertions, tracing or
#: X randomisation, optimised by the C++ compiler. Registers without a reset start at 0; the
#: top does not depend on what they hold before a reset: the tiles wait out the words formed
#: before it, and the sweep after it rewrites every slot (docs/design.md, "Clearing").
BUILD_OPTIONS = ("--cc", "--prefix", "Vtop", "-O3", "--x-assign", "fast", "--x-initial", "fast",
                 "--noassert", "-Wno-fatal", "--no-timing",
                 "-CFLAGS", "-fPIC -O3", "-LDFLAGS", "-shared")

# nf_play's result codes (harness.cpp).
_WATCHDOG, _STRAY_RESPONSE, _LINES_FULL = 1, 2, 3


class HarnessError(RuntimeError):
    """The harness could not be built, or the design under it stopped answering."""


# ---------------------------------------------------------------------------------- build


def _design_files(manifest):
    """The top's Verilog files (from its ``.f``) and its Verilator configuration (``.vlt``)."""
    module = manifest.block("controller")["module"]
    listing = manifest.folder / f"{module}.f"
    if not listing.is_file():
        raise HarnessError(f"{listing} does not exist; generate the Verilog with "
                           f"`python -m neuron_fabric.gen --out {manifest.folder.parent}`")
    names = [line.strip() for line in listing.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.lstrip().startswith("//")]
    sources = [manifest.folder / name for name in names]
    config = manifest.folder / f"{module}.vlt"
    return module, sources, config if config.is_file() else None


def _compiler_version():
    try:
        result = subprocess.run(["c++", "--version"], capture_output=True, text=True, timeout=30)
    except OSError as error:
        raise HarnessError(f"no C++ compiler (`c++`) on PATH: {error}; install Debian's g++ "
                           f"(`apt-get install -y g++`)") from error
    return result.stdout.splitlines()[0] if result.stdout else "unknown"


def build_key(verilog, *, verilator_root=None):
    """The key a harness build is kept under (:func:`~neuron_fabric.gen.tools.run_key`, as the
    FPGA flow keys its runs): the Verilog files of the top, its Verilator configuration,
    ``harness.cpp``, the Verilator command line (:data:`BUILD_OPTIONS` and the top's name) and
    the versions of Verilator and the C++ compiler. Returns the digest."""
    manifest = verilog if isinstance(verilog, Manifest) else Manifest(verilog)
    module, sources, config = _design_files(manifest)
    root = pathlib.Path(verilator_root) if verilator_root else default_verilator_root()
    inputs = {"harness.cpp": HARNESS_SOURCE, **{path.name: path for path in sources}}
    if config:
        inputs[config.name] = config
    key = run_key(["verilator", *BUILD_OPTIONS, "--top-module", module],
                  versions={"verilator": verilator_version(root), "c++": _compiler_version()},
                  inputs=inputs)
    return key["digest"]


def build(verilog, *, cache="build/harness", verilator_root=None, jobs=None, log=print):
    """Build (or find) the harness library for the Verilog in folder ``verilog``.

    Returns the path of the shared library. ``cache`` holds one folder per
    :func:`build_key`; a build goes to a temporary folder and is renamed into place when
    complete, so an interrupted build never leaves a library that looks finished.
    """
    manifest = verilog if isinstance(verilog, Manifest) else Manifest(verilog)
    module, sources, config = _design_files(manifest)
    root = pathlib.Path(verilator_root) if verilator_root else default_verilator_root()
    cache = pathlib.Path(cache)
    key = build_key(manifest, verilator_root=root)
    folder = cache / f"{manifest.data['name']}-{key[:16]}"
    library = folder / LIBRARY_NAME
    if library.is_file():
        return library
    cache.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    command = [str(root / "bin" / "verilator"), *BUILD_OPTIONS, "--top-module", module,
               "--Mdir", str(staging / "obj"), "--build", "-j", str(jobs or os.cpu_count() or 1),
               "--exe", str(HARNESS_SOURCE.resolve()), "-o", str((staging / LIBRARY_NAME).resolve()),
               *(str(path.resolve()) for path in sources)]
    if config:
        command.append(str(config.resolve()))
    log(f"harness: Verilating {module} into {folder} (first time: about a minute)")
    started = time.perf_counter()
    result = subprocess.run(command, env=verilator_env(root), capture_output=True, text=True)
    if result.returncode != 0 or not (staging / LIBRARY_NAME).is_file():
        (staging / "build.log").write_text(result.stdout + result.stderr, encoding="utf-8")
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise HarnessError(f"Verilator could not build the harness for {module} (exit status "
                           f"{result.returncode}); full log in {staging / 'build.log'}:\n{tail}")
    (staging / "build.log").write_text(result.stdout + result.stderr, encoding="utf-8")
    shutil.rmtree(staging / "obj", ignore_errors=True)
    try:
        staging.rename(folder)
    except OSError:  # another process finished the same build first
        shutil.rmtree(staging, ignore_errors=True)
    log(f"harness: built in {time.perf_counter() - started:.0f} s")
    return library


# ---------------------------------------------------------------------------------- driving


@dataclasses.dataclass
class Requests:
    """A batch of requests as arrays: ``op``, ``addr``, ``worker`` (one per request) and
    ``data`` (``(n, line_bytes)`` uint8; the top must ignore the rows of requests that are
    not writes)."""
    op: np.ndarray
    addr: np.ndarray
    worker: np.ndarray
    data: np.ndarray

    @classmethod
    def of(cls, requests, line_bytes, *, noise=None):
        """A batch from a sequence of :class:`~neuron_fabric.golden.controller.Request`; a
        request that is not a write carries a line of ``noise`` (a NumPy generator's bytes;
        zeros where None)."""
        n = len(requests)
        data = (np.zeros((n, line_bytes), dtype=np.uint8) if noise is None
                else noise.integers(0, 256, size=(n, line_bytes), dtype=np.uint8))
        for i, request in enumerate(requests):
            if request.op is Op.WRITE:
                data[i] = np.frombuffer(request.data, dtype=np.uint8)
        return cls(op=np.fromiter((r.op for r in requests), dtype=np.uint8, count=n),
                   addr=np.fromiter((r.addr for r in requests), dtype=np.uint32, count=n),
                   worker=np.fromiter((r.worker for r in requests), dtype=np.uint8, count=n),
                   data=data)

    def __len__(self):
        return len(self.op)


@dataclasses.dataclass
class Played:
    """What one :meth:`Harness.play` did.

    ``status[i]`` and ``lines[first[i]:first[i + 1]]`` are the response to request ``i`` for
    ``i < answered``; ``taken`` requests entered the top; ``memory`` lists the memory requests
    in the order they left (``write``, ``addr``, ``data``); ``cycles`` were simulated.
    """
    taken: int
    answered: int
    status: np.ndarray
    first: np.ndarray
    lines: np.ndarray
    cycles: int
    memory: tuple

    def response(self, index):
        """Response ``index`` as the golden model's :class:`Response`."""
        rows = self.lines[self.first[index]:self.first[index + 1]]
        return Response(Status(int(self.status[index])), tuple(row.tobytes() for row in rows))


def _max_response_lines(params):
    return max(1, max(spec.lines(params.counter_bits) for spec in READOUT_SPECS.values()))


_u8p = ctypes.POINTER(ctypes.c_uint8)
_u32p = ctypes.POINTER(ctypes.c_uint32)
_i64p = ctypes.POINTER(ctypes.c_int64)


def _pointer(array, kind):
    return array.ctypes.data_as(kind)


def _bind(library):
    lib = ctypes.CDLL(str(library))
    handle = ctypes.c_void_p
    signatures = {
        "nf_create": ([ctypes.c_uint64], handle),
        "nf_destroy": ([handle], None),
        "nf_layout": ([handle, ctypes.c_int, ctypes.POINTER(ctypes.c_int32)], None),
        "nf_pipeline": ([handle, ctypes.c_int], None),
        "nf_timing": ([handle, ctypes.c_double, ctypes.c_double, ctypes.c_double, ctypes.c_int,
                       ctypes.c_int], None),
        "nf_cycles": ([handle], ctypes.c_uint64),
        "nf_reset": ([handle, ctypes.c_int], None),
        "nf_idle": ([handle, ctypes.c_int], None),
        "nf_csr_write": ([handle, ctypes.c_uint32, ctypes.c_uint32], None),
        "nf_csr_read": ([handle, ctypes.c_uint32], ctypes.c_uint32),
        "nf_mem_peek": ([handle, ctypes.c_uint32, _u8p], ctypes.c_int),
        "nf_mem_size": ([handle], ctypes.c_int64),
        "nf_mem_addresses": ([handle, _u32p], None),
        "nf_mem_clear": ([handle], None),
        "nf_log_size": ([handle], ctypes.c_int64),
        "nf_log_take": ([handle, _u8p, _u32p, _u8p], None),
        "nf_play": ([handle, ctypes.c_int64, _u8p, _u32p, _u8p, _u8p, _u8p, _i64p, _u8p,
                     ctypes.c_int64, ctypes.c_int, ctypes.c_uint64, _i64p], ctypes.c_int),
    }
    for name, (args, result) in signatures.items():
        function = getattr(lib, name)
        function.argtypes = args
        function.restype = result
    return lib


class Harness:
    """The controller top of the Verilog in folder ``verilog``, in this process.

    Parameters
    ----------
    verilog : str, Path or Manifest
        The generated folder (``manifest.json`` and the Verilog).
    seed : int
        Seed of the idles, backpressure and memory latency, and of the noise lines that
        requests other than writes carry (:meth:`play`).
    timing : Timing
        The chances of idles and backpressure, and the memory latency range.
    library : Path or None
        A library :func:`build` made; built (or found in ``cache``) when None.
    watchdog : int
        Cycles without a transfer, while a response is owed, after which :meth:`play` raises.

    The harness starts reset. Registers are reached by name (:meth:`csr_write`,
    :meth:`csr_read`) with the golden register map's fields.
    """

    def __init__(self, verilog, *, seed=0, timing=Timing(), library=None, cache="build/harness",
                 watchdog=20_000, log=print):
        self.manifest = verilog if isinstance(verilog, Manifest) else Manifest(verilog)
        self.params = p = self.manifest.params
        self.line_bytes = p.line_bits // 8
        self.regmap = register_map(p)
        self.watchdog = watchdog
        self.library = pathlib.Path(library) if library else build(self.manifest, cache=cache,
                                                                    log=log)
        self._lib = _bind(self.library)
        self._handle = self._lib.nf_create(seed)
        self._noise = noise_lines(seed)
        request = self.manifest.payload("controller", "i_req").fields
        response = self.manifest.payload("controller", "o_resp").fields
        memory = self.manifest.payload("controller", "o_mem").fields
        order = [request["op"], request["addr"], request["worker"], request["data"],
                 response["status"], response["last"], response["data"],
                 memory["write"], memory["addr"], memory["data"]]
        fields = (ctypes.c_int32 * 20)(*[value for pair in order for value in pair])
        self._lib.nf_layout(self._handle, p.line_bits, fields)
        self._lib.nf_pipeline(self._handle, self.manifest.data["pipeline"]["stages"]["response"])
        self.set_timing(timing)
        self._max_lines = _max_response_lines(p)
        self.reset()

    def close(self):
        if getattr(self, "_handle", None):
            self._lib.nf_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -------------------------------------------------------------- control

    def set_timing(self, timing):
        low, high = timing.mem_latency
        for name in ("idle", "backpressure", "mem_backpressure"):
            value = getattr(timing, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"timing.{name} must be in [0, 1), not {value!r}")
        if not 1 <= low <= high:
            raise ValueError(f"timing.mem_latency must be (low, high) with 1 <= low <= high, "
                             f"not {timing.mem_latency!r}")
        self.timing = timing
        self._lib.nf_timing(self._handle, timing.idle, timing.backpressure,
                            timing.mem_backpressure, low, high)

    @property
    def cycles(self):
        """Cycles simulated since the harness was made."""
        return int(self._lib.nf_cycles(self._handle))

    def reset(self, cycles=2):
        """Hold ``rst`` for ``cycles`` cycles; the slots clear in the sweep that follows (the
        top holds requests off until it ends)."""
        self._lib.nf_reset(self._handle, int(cycles))

    def idle(self, cycles):
        self._lib.nf_idle(self._handle, int(cycles))

    def _address(self, register):
        return register if isinstance(register, int) else self.regmap[register].address

    def csr_write(self, register, value=None, **fields):
        """Write ``register`` (a name or a byte address), with ``value`` or named fields."""
        if value is None:
            value = self.regmap[register].encode(**fields)
        self._lib.nf_csr_write(self._handle, self._address(register), int(value))

    def csr_read(self, register):
        return int(self._lib.nf_csr_read(self._handle, self._address(register)))

    # -------------------------------------------------------------- memory

    def memory(self):
        """The downstream memory as the top wrote it: ``{line address: bytes}``."""
        count = int(self._lib.nf_mem_size(self._handle))
        addresses = np.zeros(count, dtype=np.uint32)
        self._lib.nf_mem_addresses(self._handle, _pointer(addresses, _u32p))
        line = np.zeros(self.line_bytes, dtype=np.uint8)
        out = {}
        for addr in addresses.tolist():
            self._lib.nf_mem_peek(self._handle, addr, _pointer(line, _u8p))
            out[addr] = line.tobytes()
        return out

    def clear_memory(self):
        self._lib.nf_mem_clear(self._handle)

    # -------------------------------------------------------------- traffic

    def play(self, requests, *, reset_after=0):
        """Play a batch (a :class:`Requests` or a sequence of golden ``Request``) and return
        :class:`Played`.

        With ``reset_after``, the reset is held for that many cycles as soon as the last
        request is taken, with its responses still owed (they are lost, as on the device).
        Raises :class:`HarnessError` when the top stops answering or answers what was not
        asked.
        """
        if not isinstance(requests, Requests):
            requests = Requests.of(list(requests), self.line_bytes, noise=self._noise)
        n = len(requests)
        op = np.ascontiguousarray(requests.op, dtype=np.uint8)
        addr = np.ascontiguousarray(requests.addr, dtype=np.uint32)
        worker = np.ascontiguousarray(requests.worker, dtype=np.uint8)
        data = np.ascontiguousarray(requests.data, dtype=np.uint8)
        if data.shape != (n, self.line_bytes):
            raise ValueError(f"requests.data must be ({n}, {self.line_bytes}) bytes, not "
                             f"{data.shape}")
        capacity = max(1, n * self._max_lines)
        status = np.zeros(max(n, 1), dtype=np.uint8)
        first = np.zeros(n + 1, dtype=np.int64)
        lines = np.zeros((capacity, self.line_bytes), dtype=np.uint8)
        counts = np.zeros(5, dtype=np.int64)
        code = self._lib.nf_play(self._handle, n, _pointer(op, _u8p), _pointer(addr, _u32p),
                                 _pointer(worker, _u8p), _pointer(data, _u8p),
                                 _pointer(status, _u8p), _pointer(first, _i64p),
                                 _pointer(lines, _u8p), capacity, int(reset_after),
                                 self.watchdog, _pointer(counts, _i64p))
        taken, answered, beats, cycles, _ = (int(v) for v in counts)
        log = self._take_log()
        if code == _WATCHDOG:
            raise HarnessError(f"no transfer for {self.watchdog} cycles with "
                               f"{taken - answered} responses owed ({taken} of {n} requests "
                               f"taken, {answered} answered)")
        if code == _STRAY_RESPONSE:
            raise HarnessError(f"a response beat arrived with no request owed, after "
                               f"{answered} complete responses")
        if code == _LINES_FULL:
            raise HarnessError(f"the responses to {n} requests hold more than {capacity} lines, "
                               f"more than any readout has")
        return Played(taken=taken, answered=answered, status=status[:n], first=first[:answered + 1],
                      lines=lines[:beats], cycles=cycles, memory=log)

    def _take_log(self):
        count = int(self._lib.nf_log_size(self._handle))
        write = np.zeros(count, dtype=np.uint8)
        addr = np.zeros(count, dtype=np.uint32)
        data = np.zeros((count, self.line_bytes), dtype=np.uint8)
        if count:
            self._lib.nf_log_take(self._handle, _pointer(write, _u8p), _pointer(addr, _u32p),
                                  _pointer(data, _u8p))
        return write, addr, data


# ---------------------------------------------------------------------------------- command


def _speed(args):
    """Cycles per second on random aggregation traffic with idles and backpressure."""
    harness = Harness(top_folder(args.verilog), seed=args.seed,
                      timing=Timing(idle=0.1, backpressure=0.1, mem_backpressure=0.1,
                                    mem_latency=(1, 4)))
    p = harness.params
    rng = np.random.default_rng(args.seed)
    harness.csr_write("NUM_WORKERS", p.max_workers)
    harness.csr_write("WIN0_BASE", 0)
    harness.csr_write("WIN0_SIZE", p.depth)
    harness.csr_write("WIN0_CONFIG", EN=1, ROUTE=0, READOUT=0)
    harness.csr_write("CONTROL", ENABLE=1)
    slots, workers = p.depth, p.max_workers
    n = slots * (workers + 1)
    op = np.concatenate([np.zeros(slots * workers), np.full(slots, Op.READ_CLEAR)]).astype(np.uint8)
    addr = np.concatenate([np.repeat(np.arange(slots), workers), np.arange(slots)])
    worker = np.concatenate([np.tile(np.arange(workers), slots), np.zeros(slots)])
    done, started = 0, time.perf_counter()
    while done < args.cycles:
        data = rng.integers(0, 256, size=(n, harness.line_bytes), dtype=np.uint8)
        played = harness.play(Requests(op, addr, worker, data))
        done += played.cycles
    wall = time.perf_counter() - started
    print(f"harness: {done:,} cycles in {wall:.2f} s: {done / wall:,.0f} cycles/s "
          f"({p.line_bits}-bit top, {workers} workers, 10% idles and backpressure)")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.sim.harness",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="build (or find) the harness library")
    make.add_argument("--verilog", required=True,
                      help="generated folder of the top, or the folder holding the default's")
    make.add_argument("--cache", default="build/harness")
    speed = commands.add_parser("speed", help="cycles per second on random traffic")
    speed.add_argument("--verilog", required=True)
    speed.add_argument("--cycles", type=int, default=200_000)
    speed.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build(top_folder(args.verilog), cache=args.cache))
        else:
            _speed(args)
    except HarnessError as error:
        print(f"harness: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
