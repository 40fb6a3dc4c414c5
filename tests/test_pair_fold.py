"""The fold of a pair of line bits and its comparisons (:mod:`neuron_fabric.hw.pair_fold`), the
lane tiles' datapath, against the golden model.

A pair's adder folds two G-Binary lanes or one G-Ternary lane, and its three comparison trees
serve both routes: the low tree compares the low row bits with the threshold the control plane
chooses for the readout. Folds of every worker count are checked against the golden counts and
sums; every count a G-Binary lane can hold at every NUM_WORKERS, and every G-Ternary sum at
every gate up to past the largest sum, against the golden majority and gate.
"""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from neuron_fabric.golden import gbinary, gternary
from neuron_fabric.golden.formats import Readout
from neuron_fabric.hw import schedule
from neuron_fabric.hw.pair_fold import PairCompare, PairFold, pair_thresholds
from neuron_fabric.hw.sign_count import majority_thresholds
from neuron_fabric.hw.ternary_gate import gate_less_one

MAX_WORKERS, COUNTER_BITS = 16, 5
ROW_MASK = (1 << 2 * COUNTER_BITS) - 1


def _pair_bench():
    """A pair fold driven from NUM_WORKERS, GATE and the readout, as the tile drives it."""
    m = Module()
    ports = {"readout": Signal(Readout), "num_workers": Signal(range(MAX_WORKERS + 1)),
             "gate": Signal(8)}
    word = Signal(schedule.fold_word_layout(max_workers=MAX_WORKERS,
                                             counter_bits=COUNTER_BITS))
    threshold = gate_less_one(ports["gate"], counter_bits=COUNTER_BITS)
    m.d.comb += [word.majority.eq(majority_thresholds(ports["num_workers"],
                                                      max_workers=MAX_WORKERS)),
                 word.gate_less_one.eq(threshold),
                 word.low_threshold.eq(schedule.low_threshold(ports["readout"], word.majority,
                                                               threshold))]
    m.submodules.fold = fold = PairFold(max_workers=MAX_WORKERS, counter_bits=COUNTER_BITS)
    # The tile compares the sum a cycle later, registered; here, as it leaves the adder.
    m.submodules.compare = compare = PairCompare(max_workers=MAX_WORKERS,
                                                 counter_bits=COUNTER_BITS)
    m.d.comb += [compare.row.eq(fold.sum), compare.thresholds.eq(pair_thresholds(word))]
    ports.update(row=fold.chosen, last=fold.last, from_last=fold.from_last,
                 addend_low=fold.addend_low, addend_sign=fold.addend_sign,
                 addend_high=fold.addend_high)
    outputs = {"sum": fold.sum, **{name: getattr(compare, name)
                                   for name in ("sign", "tie", "positive", "negative")}}
    return m, ports, outputs


def _run(cases):
    """``[(inputs, {output: got})]`` for each ``{port: value}`` of ``cases``."""
    m, ports, outputs = _pair_bench()
    results = []

    async def bench(ctx):
        for case in cases:
            for name, value in case.items():
                ctx.set(ports[name], value)
            results.append((case, {name: ctx.get(value) for name, value in outputs.items()}))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return results


def _addend(first, second, *, ternary):
    """The addend's ports for a pair's two line bits: two votes, or a code (``01`` +1,
    ``11`` -1, ``10`` invalid adds 0), as the tile works them out."""
    minus = int(ternary and first and second)
    return {"addend_low": first, "addend_sign": minus,
            "addend_high": minus or int(not ternary and second)}


def _fold_workers(bits, *, ternary):
    """The pair's row after folding each worker's two line bits in turn, the first onto a
    zero row and each later one onto the previous sum, as back-to-back writes fold."""
    results = []
    for workers in bits:
        m, ports, outputs = _pair_bench()
        got = []

        async def bench(ctx, workers=workers):
            ctx.set(ports["row"], 0)
            for index, (first, second) in enumerate(workers):
                ctx.set(ports["from_last"], index > 0)
                for port, value in _addend(first, second, ternary=ternary).items():
                    ctx.set(ports[port], value)
                if index:
                    ctx.set(ports["last"], got[-1])
                got.append(ctx.get(outputs["sum"]))

        sim = Simulator(m)
        sim.add_testbench(bench)
        sim.run()
        results.append(got[-1])
    return results


def _golden_lines(workers):
    """Each worker's 128-bit line holding its two bits in line bits 0 and 1."""
    lines = np.zeros((len(workers), 1, 16), dtype=np.uint8)
    for index, (first, second) in enumerate(workers):
        lines[index, 0, 0] = first | second << 1
    return lines


def test_gbinary_votes_fold_into_two_counters_like_the_model():
    rng = np.random.default_rng(7)
    workers = [rng.integers(0, 2, size=(n, 2)).tolist()
               for n in range(1, MAX_WORKERS + 1) for _ in range(3)]
    for bits, row in zip(workers, _fold_workers(workers, ternary=False)):
        counts = gbinary.aggregate(_golden_lines(bits), max_workers=MAX_WORKERS)[0, :2]
        assert row == int(counts[0]) | int(counts[1]) << COUNTER_BITS, bits


def test_gternary_codes_fold_into_one_sum_like_the_model():
    rng = np.random.default_rng(11)
    # Codes 00, 01, 10 (invalid: adds 0) and 11, every worker count.
    workers = [rng.integers(0, 2, size=(n, 2)).tolist()
               for n in range(1, MAX_WORKERS + 1) for _ in range(4)]
    for bits, row in zip(workers, _fold_workers(workers, ternary=True)):
        total = int(gternary.aggregate(_golden_lines(bits), max_workers=MAX_WORKERS)[0, 0])
        assert row == total & ROW_MASK, bits


def test_the_fold_takes_the_last_result_or_the_chosen_row():
    cases = [dict(row=chosen, last=last, from_last=from_last, addend_low=1)
             for chosen, last in ((3, 9), (17, 0), (0, 33)) for from_last in (0, 1)]
    for case, got in _run(cases):
        taken = case["last"] if case["from_last"] else case["row"]
        assert got["sum"] == taken + 1, case


def test_a_pair_fold_refuses_counters_that_can_fill():
    with pytest.raises(ValueError, match="counter_bits must hold 16 workers' votes and sums "
                                         "in a pair fold"):
        PairFold(max_workers=16, counter_bits=3)
    with pytest.raises(ValueError, match="counter_bits must hold 16 workers' votes"):
        PairCompare(max_workers=16, counter_bits=3)


def test_the_low_tree_gives_the_majority_for_gbinary_readouts():
    cases = [dict(row=low | high << COUNTER_BITS, readout=readout, num_workers=n,
                  gate=3, from_last=0)
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
    cases = [dict(row=total & ROW_MASK, readout=Readout.GATED, num_workers=n, gate=gate,
                  from_last=0)
             for gate in range(limit + 3) for total in range(-MAX_WORKERS, MAX_WORKERS + 1)
             for n in (MAX_WORKERS, 5)]
    for case, got in _run(cases):
        total = case["row"] - (case["row"] >> COUNTER_BITS and 1 << 2 * COUNTER_BITS)
        gated = int(gternary.gate(np.int8([[total]]), gate=case["gate"])[0, 0])
        assert (got["positive"], got["negative"]) == (gated == 1, gated == -1), case

