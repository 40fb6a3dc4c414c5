"""A lane tile's readout comparisons for one pair of line bits, against the golden model.

The pair's three comparison trees serve both routes: the low tree compares the low row bits
with the threshold the control plane chooses for the readout. Every count a G-Binary lane
can hold at every NUM_WORKERS, and every G-Ternary sum at every gate up to past the largest
sum, is checked bit for bit against the golden majority and gate.
"""

import numpy as np
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from neuron_fabric.golden import gbinary, gternary
from neuron_fabric.golden.formats import Readout
from neuron_fabric.hw import lane_tile, schedule
from neuron_fabric.hw.sign_count import majority_thresholds
from neuron_fabric.hw.ternary_gate import gate_less_one

MAX_WORKERS, COUNTER_BITS = 16, 5


def _pair_bench():
    """A pair's tests driven from NUM_WORKERS, GATE and the readout, as the tile gets them."""
    m = Module()
    ports = {"row": Signal(2 * COUNTER_BITS), "readout": Signal(Readout),
             "num_workers": Signal(range(MAX_WORKERS + 1)), "gate": Signal(8)}
    word = Signal(schedule.fold_word_layout(max_workers=MAX_WORKERS,
                                             counter_bits=COUNTER_BITS))
    threshold = gate_less_one(ports["gate"], counter_bits=COUNTER_BITS)
    m.d.comb += [word.majority.eq(majority_thresholds(ports["num_workers"],
                                                      max_workers=MAX_WORKERS)),
                 word.gate_less_one.eq(threshold),
                 word.low_threshold.eq(schedule.low_threshold(ports["readout"], word.majority,
                                                               threshold))]
    layout, fields = lane_tile._pair_thresholds(word, COUNTER_BITS)
    thresholds = Signal(layout)
    m.d.comb += thresholds.eq(fields)
    tests = lane_tile._pair_tests(m, ports["row"], thresholds, COUNTER_BITS, "pair")
    return m, ports, tests


def _run(cases):
    """``[(inputs, {field: got})]`` for each ``{port: value}`` of ``cases``."""
    m, ports, tests = _pair_bench()
    results = []

    async def bench(ctx):
        for case in cases:
            for name, value in case.items():
                ctx.set(ports[name], value)
            results.append((case, {name: ctx.get(value) for name, value in tests.items()}))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return results


def test_the_low_tree_gives_the_majority_for_gbinary_readouts():
    cases = [dict(row=low | high << COUNTER_BITS, readout=readout, num_workers=n,
                  gate=3)
             for n in range(1, MAX_WORKERS + 1)
             for low in range(n + 1) for high in range(n + 1)
             for readout in ((Readout.SIGN, Readout.TERNARY)[(low + high) % 2],)]
    for case, got in _run(cases):
        n = case["num_workers"]
        counts = np.uint8([[case["row"] & (1 << COUNTER_BITS) - 1, case["row"] >> COUNTER_BITS]])
        majority = gbinary.majority(counts, num_workers=n)[0].tolist()
        expected_sign = sum((vote == -1) << lane for lane, vote in enumerate(majority))
        expected_tie = sum((vote == 0) << lane for lane, vote in enumerate(majority))
        assert (got["sign"], got["tie"]) == (expected_sign, expected_tie), case


def test_the_low_tree_gives_the_gate_for_gated_readouts():
    limit = (1 << COUNTER_BITS) - 1
    cases = [dict(row=total & ((1 << 2 * COUNTER_BITS) - 1), readout=Readout.GATED,
                  num_workers=n, gate=gate)
             for gate in range(limit + 3) for total in range(-MAX_WORKERS, MAX_WORKERS + 1)
             for n in (MAX_WORKERS, 5)]
    for case, got in _run(cases):
        total = case["row"] - (case["row"] >> COUNTER_BITS and 1 << 2 * COUNTER_BITS)
        gated = int(gternary.gate(np.int8([[total]]), gate=case["gate"])[0, 0])
        assert (got["positive"], got["negative"]) == (gated == 1, gated == -1), case

