"""What the aggregation datapath costs a CXL load: latency exposed per line and throughput needed.

Two regimes bound the cost of putting the datapath between the CXL.mem transaction layer
and the DRAM controller:

- **All misses, latency bound**: every line is a last-level-cache miss served one after
  another, so each one pays the CXL load latency plus the datapath's latency. The exposed
  overhead per line is ``t_datapath / t_load``, with ``t_datapath = cycles / f``.
- **Bandwidth bound**: lines arrive back to back at the link's rate. The datapath hides
  behind the link when it accepts lines at least as fast as they arrive: it needs
  ``bandwidth / (line_bytes * f)`` lines per clock, and it takes one (II = 1).

The datapath's latency in cycles is measured by simulating the controller top (:func:`measure_latency`);
the clock comes from place and route.
"""

import dataclasses

import numpy as np

__all__ = ["LINK_BANDWIDTHS_GBPS", "LOAD_LATENCIES_NS", "PAPER", "CXL_LINE_BYTES",
           "measure_latency", "exposed_overhead", "lines_per_clock", "model"]

#: Per-direction CXL bandwidth, GB/s (1e9 bytes): PCIe 5.0 x8 and x16 after protocol overhead.
LINK_BANDWIDTHS_GBPS = {"x8": 36.0, "x16": 64.0}
#: CXL load-to-use latencies spanned, ns: a direct-attached device to one behind a switch.
LOAD_LATENCIES_NS = (150.0, 200.0, 250.0, 300.0, 400.0)
#: The papers' claim: a five-cycle datapath, at most 1.67 % exposed in the all-misses regime.
PAPER = {"cycles": 5, "overhead_pct": 1.67}
#: A CXL.mem transfer moves one 64-byte cache line.
CXL_LINE_BYTES = 64


def exposed_overhead(*, cycles, clock_mhz, load_ns):
    """Exposed overhead (percent) of ``cycles`` at ``clock_mhz`` on a load of ``load_ns``."""
    if clock_mhz <= 0 or load_ns <= 0:
        raise ValueError(f"clock_mhz and load_ns must be positive, not {clock_mhz!r}, "
                         f"{load_ns!r}")
    return 100.0 * (cycles * 1e3 / clock_mhz) / load_ns


def lines_per_clock(*, bandwidth_gbps, line_bytes, clock_mhz):
    """Datapath lines per clock needed to keep up with ``bandwidth_gbps`` (GB/s, 1e9 bytes)."""
    if clock_mhz <= 0 or line_bytes <= 0:
        raise ValueError(f"clock_mhz and line_bytes must be positive, not {clock_mhz!r}, "
                         f"{line_bytes!r}")
    return bandwidth_gbps * 1e9 / (line_bytes * clock_mhz * 1e6)


@dataclasses.dataclass(frozen=True)
class Latency:
    """Latencies measured in simulation, cycles from request transfer to first response beat."""
    gbinary_write: int
    gternary_write: int
    readout: int
    memory_write: int
    initiation_interval: float
    requests: int

    def as_dict(self):
        return dataclasses.asdict(self)


def measure_latency(params=None, *, rounds=4, seed=0):
    """Simulate the controller top with back-to-back bursts and return a :class:`Latency`.

    Every worker writes one G-Binary slot and one G-Ternary slot back to back, a READ_CLEAR
    reads each, and a few memory writes follow, ``rounds`` times, with no idle cycle and no
    backpressure. Each figure is the one latency seen by every request of its kind; a spread
    means the pipeline is not fixed-latency and raises ``RuntimeError``.
    """
    from ..golden.controller import Op, Request
    from ..golden.formats import Readout, Route
    from ..golden.params import FabricParams
    from ..golden.regmap import register_map
    from ..sim import scenarios
    from ..sim.amaranth_bench import run

    params = params or FabricParams()
    regmap = register_map(params)
    rng = np.random.default_rng(seed)
    line_bytes = params.line_bits // 8
    windows = [scenarios.Window(base=64, size=1, route=Route.GBINARY, readout=Readout.SIGN)]
    if params.num_windows > 1:
        windows.append(scenarios.Window(base=128, size=1, route=Route.GTERNARY,
                                        readout=Readout.GATED))
    ops = scenarios.configure(regmap, windows=windows, num_workers=params.max_workers)
    kinds = []
    for r in range(rounds):
        for window, kind in zip(windows, ("gbinary_write", "gternary_write")):
            for worker in range(params.max_workers):
                data = rng.bytes(line_bytes)
                if kind == "gternary_write":  # only valid codes: 00, 01, 11
                    codes = rng.choice([0b00, 0b01, 0b11], size=params.line_bits // 2)
                    data = int(np.sum(codes.astype(object) << (2 * np.arange(codes.size))
                                      .astype(object))).to_bytes(line_bytes, "little")
                ops.append(Request(Op.WRITE, window.base, worker, data))
                kinds.append(kind)
            ops.append(Request(Op.READ_CLEAR, window.base))
            kinds.append("readout")
        for k in range(4):
            ops.append(Request(Op.WRITE, 4096 + 8 * r + k, 0, rng.bytes(line_bytes)))
            kinds.append("memory_write")
    result = run(ops, params=params, seed=seed)
    for index, (got, want) in enumerate(zip(result.responses, result.expected)):
        if got != want:
            raise RuntimeError(f"response {index} differs from the golden model: {got} != {want}")
    seen = {}
    for kind, sent, beats in zip(kinds, result.request_cycles, result.beat_cycles):
        seen.setdefault(kind, set()).add(beats[0] - sent)
    for kind, values in seen.items():
        if len(values) != 1:
            raise RuntimeError(f"{kind} latency is not fixed: {sorted(values)} cycles")
    # Initiation interval over the write bursts: cycles per request while requests flow.
    cycles = np.array(result.request_cycles)
    writes = [i for i, k in enumerate(kinds[1:], 1)
              if k.endswith("_write") and kinds[i - 1] == k]
    ii = float(np.mean(cycles[writes] - cycles[[i - 1 for i in writes]])) if writes else 1.0
    seen = {kind: values.pop() for kind, values in seen.items()}
    return Latency(gbinary_write=seen["gbinary_write"],
                   gternary_write=seen.get("gternary_write", seen["gbinary_write"]),
                   readout=seen["readout"], memory_write=seen["memory_write"],
                   initiation_interval=ii, requests=len(kinds))


def model(*, cycles, clocks_mhz, line_bits=512, load_ns=LOAD_LATENCIES_NS,
          bandwidths=LINK_BANDWIDTHS_GBPS, ii=1.0):
    """The timing model for a datapath of ``cycles`` at each clock of ``clocks_mhz``.

    ``clocks_mhz`` maps a label (``"LFE5U-85F speed 6"``, ``"ASIC 1 GHz"``) to a clock.
    Returns a dict: per clock, the datapath time, the exposed overhead at each load latency,
    and per link the lines per clock needed (and whether II = ``ii`` keeps up); plus the
    papers' figure and the clock at which ``cycles`` would match it at each latency.
    """
    line_bytes = line_bits // 8
    rows = []
    for label, mhz in clocks_mhz.items():
        row = {"clock": label, "clock_mhz": round(mhz, 2),
               "datapath_ns": round(cycles * 1e3 / mhz, 3),
               "overhead_pct": {f"{t:g}": round(exposed_overhead(cycles=cycles, clock_mhz=mhz,
                                                                load_ns=t), 3)
                                for t in load_ns},
               "links": {}}
        for link, gbps in bandwidths.items():
            need = lines_per_clock(bandwidth_gbps=gbps, line_bytes=line_bytes, clock_mhz=mhz)
            row["links"][link] = {"bandwidth_gbps": gbps, "lines_per_clock": round(need, 3),
                                  "keeps_up": need <= 1.0 / ii,
                                  "datapath_gbps": round(line_bytes * mhz * 1e6 / ii / 1e9, 2)}
        rows.append(row)
    paper_clock = {f"{t:g}": round(PAPER["cycles"] * 1e3 / (PAPER["overhead_pct"] / 100 * t), 1)
                   for t in load_ns}
    match_clock = {f"{t:g}": round(cycles * 1e3 / (PAPER["overhead_pct"] / 100 * t), 1)
                   for t in load_ns}
    return {
        "cycles": cycles, "line_bits": line_bits, "initiation_interval": ii,
        "load_latencies_ns": list(load_ns), "links_gbps": dict(bandwidths),
        "rows": rows,
        "paper": dict(PAPER, clock_mhz_implied=paper_clock),
        "clock_mhz_for_paper_overhead": match_clock,
    }
