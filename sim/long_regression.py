"""A long seeded random regression of the controller top on the Verilator harness.

Millions of cycles of the traffic :func:`~neuron_fabric.sim.scenarios.random_traffic` makes
(writes from random workers, duplicates, early reads, invalid ternary codes, plain memory
traffic, reconfiguration and CSR side effects), played in bursts with random idles and
backpressure, with resets among them, some with responses in flight. Every response is
compared with :class:`~neuron_fabric.golden.controller.ControllerModel` as it comes back,
status and every line, and so is every memory request the top sends; a CSR read is compared
with the model's register. The time spent in the RTL (the harness's clock loop) and in the
Python model is reported apart.

Command line (``make sim-long``)::

    python -m neuron_fabric.sim.long_regression --verilog build/verilog/l512_w16_c5_d64_n2 \\
        --out build/sim-long [--cycles 2000000] [--seed 0]
"""

import argparse
import dataclasses
import json
import pathlib
import sys
import time

import numpy as np

from ..golden.controller import ControllerModel, Op, Request
from ..golden.regmap import TIMING_COUNTERS
from .harness import Harness, HarnessError
from .manifest import Manifest, top_folder
from .scenarios import CsrRead, CsrWrite, Timing, random_traffic

__all__ = ["Mismatch", "Tally", "run", "main"]


class Mismatch(AssertionError):
    """The top and the golden model disagree."""


@dataclasses.dataclass
class Tally:
    """Totals of a run: cycles, requests, response lines and memory requests compared, CSR
    reads compared, resets (and responses lost to them), and seconds spent building or
    loading the harness, in the RTL and in the model."""
    cycles: int = 0
    requests: int = 0
    lines: int = 0
    memory: int = 0
    csr_reads: int = 0
    resets: int = 0
    lost: int = 0
    bursts: int = 0
    setup_s: float = 0.0
    rtl_s: float = 0.0
    model_s: float = 0.0


def _where(index, request):
    return f"request {index} ({request.op.name} addr {request.addr:#x} worker {request.worker})"


def _check_burst(model, burst, played, tally, first_index):
    """Feed the taken requests to the model in order and compare what came back."""
    started = time.perf_counter()
    expected_memory = []
    fp32 = model.counters["FP32_LINES"]
    for k in range(played.taken):
        request = burst[k]
        want = model.submit(request)
        if model.counters["FP32_LINES"] != fp32:
            fp32 = model.counters["FP32_LINES"]
            expected_memory.append((int(request.op is Op.WRITE), request.addr, request.data))
        if k >= played.answered:
            continue
        got = played.response(k)
        where = _where(first_index + k, request)
        if got.status != want.status:
            raise Mismatch(f"{where}: status {got.status.name}, the model says {want.status.name}")
        if len(got.lines) != len(want.lines):
            raise Mismatch(f"{where}: {len(got.lines)} lines, the model says {len(want.lines)}")
        for beat, (a, b) in enumerate(zip(got.lines, want.lines)):
            if a != b:
                byte = next(i for i in range(len(a)) if a[i] != b[i])
                raise Mismatch(f"{where}, line {beat}: byte {byte} is {a[byte]:#04x}, the model "
                               f"says {b[byte]:#04x}")
        tally.lines += len(got.lines)
    write, addr, data = played.memory
    if len(write) != len(expected_memory) and not played.taken > played.answered:
        raise Mismatch(f"burst at request {first_index}: the top sent {len(write)} memory "
                       f"requests, the model implies {len(expected_memory)}")
    for k in range(min(len(write), len(expected_memory))):
        want_write, want_addr, want_data = expected_memory[k]
        if (int(write[k]), int(addr[k])) != (want_write, want_addr) or (
                want_write and data[k].tobytes() != want_data):
            raise Mismatch(f"burst at request {first_index}, memory request {k}: "
                           f"{'write' if write[k] else 'read'} {int(addr[k]):#x}, the model says "
                           f"{'write' if want_write else 'read'} {want_addr:#x}"
                           + (" (data differs)" if want_write and int(addr[k]) == want_addr else ""))
    tally.requests += played.taken
    tally.memory += len(write)
    tally.model_s += time.perf_counter() - started


def run(verilog, *, cycles, seed=0, cache="build/harness", log=print, progress_every=10.0):
    """Play random traffic until ``cycles`` cycles are simulated; returns the :class:`Tally`.

    Raises :class:`Mismatch` at the first difference, naming the request, line and byte.
    """
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    harness = Harness(verilog, seed=seed, cache=cache, log=log)
    setup_s = time.perf_counter() - started
    p = harness.params
    model = ControllerModel(p)
    regmap = harness.regmap
    timing_counters = {regmap[name].address for name in TIMING_COUNTERS}
    tally = Tally(setup_s=setup_s)
    index = 0
    started = last_report = time.perf_counter()
    while tally.cycles < cycles:
        harness.set_timing(Timing(idle=float(rng.choice([0.0, 0.1, 0.5])),
                                  backpressure=float(rng.choice([0.0, 0.2, 0.6])),
                                  mem_backpressure=float(rng.choice([0.0, 0.2, 0.6])),
                                  mem_latency=(1, int(rng.integers(1, 9)))))
        ops = random_traffic(regmap, rng=rng, n_ops=int(rng.integers(200, 2000)))
        k = 0
        while k < len(ops):
            op = ops[k]
            if isinstance(op, (CsrRead, CsrWrite)):
                before = harness.cycles
                if isinstance(op, CsrWrite):
                    model.csr_write(op.addr, op.value)
                    harness.csr_write(op.addr, op.value)
                else:
                    got = harness.csr_read(op.addr)
                    if op.addr not in timing_counters:
                        want = model.csr_read(op.addr)
                        if got != want:
                            raise Mismatch(f"CSR {op.addr:#x} reads {got:#010x}, the model says "
                                           f"{want:#010x} (after request {index})")
                        tally.csr_reads += 1
                tally.cycles += harness.cycles - before
                k += 1
                continue
            end = k
            while end < len(ops) and isinstance(ops[end], Request):
                end += 1
            burst = ops[k:end]
            # Now and then a reset lands with the burst's responses still in flight.
            reset_after = int(rng.integers(1, 4)) if rng.random() < 0.03 else 0
            t0 = time.perf_counter()
            played = harness.play(burst, reset_after=reset_after)   # reads carry noise lines
            tally.rtl_s += time.perf_counter() - t0
            tally.cycles += played.cycles
            tally.bursts += 1
            _check_burst(model, burst, played, tally, index)
            index += len(burst)
            if reset_after:
                tally.resets += 1
                tally.lost += played.taken - played.answered
                model.reset()
                model.memory.lines = harness.memory()
            k = end
        now = time.perf_counter()
        if now - last_report >= progress_every:
            last_report = now
            log(f"sim-long: {tally.cycles:,} of {cycles:,} cycles, {tally.requests:,} requests, "
                f"{tally.resets} resets, {tally.cycles / (now - started):,.0f} cycles/s")
    return tally


def _markdown(tally, params, wall, seed):
    rate = tally.cycles / tally.rtl_s if tally.rtl_s else 0.0
    return "\n".join([
        f"# Long random regression on the Verilator harness ({params.line_bits}-bit top, "
        f"{params.max_workers} workers, seed {seed})",
        "",
        "Every response line, memory request and CSR read compared with the golden model.",
        "",
        "| | |", "|---|---|",
        f"| Cycles simulated | {tally.cycles:,} |",
        f"| Requests (bursts) | {tally.requests:,} ({tally.bursts:,}) |",
        f"| Response lines compared | {tally.lines:,} |",
        f"| Memory requests compared | {tally.memory:,} |",
        f"| CSR reads compared | {tally.csr_reads:,} |",
        f"| Resets with responses in flight (responses lost) | {tally.resets} ({tally.lost}) |",
        f"| Wall time | {wall:.1f} s |",
        f"| Building or loading the harness | {tally.setup_s:.1f} s |",
        f"| In the RTL (harness clock loop) | {tally.rtl_s:.1f} s, {rate:,.0f} cycles/s |",
        f"| In the golden model and the checks | {tally.model_s:.1f} s |",
        f"| Making the traffic, packing requests, CSR accesses | "
        f"{wall - tally.setup_s - tally.rtl_s - tally.model_s:.1f} s |",
        "",
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.sim.long_regression",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--verilog", required=True,
                        help="generated folder of the top, or the folder holding the default's")
    parser.add_argument("--out", default="build/sim-long")
    parser.add_argument("--cycles", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    verilog = top_folder(args.verilog)
    started = time.perf_counter()
    try:
        tally = run(verilog, cycles=args.cycles, seed=args.seed)
    except (Mismatch, HarnessError) as error:
        print(f"sim-long: FAILED: {error}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - started
    params = Manifest(verilog).params
    (out / "report.json").write_text(json.dumps({"seed": args.seed, "wall_s": wall,
                                                 **dataclasses.asdict(tally)}, indent=2) + "\n")
    (out / "report.md").write_text(_markdown(tally, params, wall, args.seed), encoding="utf-8")
    print(f"sim-long: passed, {tally.cycles:,} cycles in {wall:.0f} s; report in "
          f"{out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
