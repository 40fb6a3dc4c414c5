"""The G-Binary sign-count lane engine against the golden model, bit for bit."""

import numpy as np
import pytest

from neuron_fabric.golden import gbinary
from neuron_fabric.golden import lines as L
from neuron_fabric.golden.formats import READOUTS_BY_ROUTE, Route
from neuron_fabric.hw.sign_count import SignCountEngine, majority_thresholds, majority_value
from neuron_fabric.sim.amaranth_bench import evaluate_stage


def check_against_golden(engine, lines):
    """Fold every worker's line into the golden prefix counts, then read out; compare all.

    ``lines`` is ``(workers, n_lines, line_bytes)``. Step ``k`` starts from the golden counts
    of workers ``0..k-1`` and must give those of ``0..k``; the readouts of the full counts
    (every readout, N = workers) must equal the golden readout, all its lines at once.
    """
    workers, n_lines, _ = lines.shape
    cb = engine.counter_bits
    prefix = [np.zeros((n_lines, engine.line_bits), np.uint8)]
    saturated = []
    for k in range(1, workers + 1):
        counts, sat = gbinary.aggregate(lines[:k], max_workers=engine.max_workers,
                                        counter_bits=cb, return_saturated=True)
        prefix.append(counts)
        saturated.append(sat)
    majority = majority_value(workers, max_workers=engine.max_workers)
    every_lane = (1 << engine.line_bits) - 1
    inputs, expected = [], []
    for j in range(n_lines):
        for k in range(workers):
            inputs.append(dict(counts=L.lanes_to_int(prefix[k][j], lane_bits=cb),
                               votes=L.line_to_int(lines[k, j]), fold=every_lane,
                               majority=majority, readout=0, beat=0))
            expected.append(("fold", j, k, L.lanes_to_int(prefix[k + 1][j], lane_bits=cb)))
        for readout in READOUTS_BY_ROUTE[Route.GBINARY]:
            golden = gbinary.readout(prefix[-1][j:j + 1], readout=readout, num_workers=workers,
                                     counter_bits=cb)
            # Every line of the readout, one per beat; a beat past its last line reads 0.
            for beat in range(engine.readout_lines):
                inputs.append(dict(counts=L.lanes_to_int(prefix[-1][j], lane_bits=cb),
                                   votes=L.line_to_int(lines[0, j]), fold=0,
                                   majority=majority, readout=readout, beat=beat))
                want = L.line_to_int(golden[beat]) if beat < len(golden) else 0
                expected.append((f"{readout.name} line {beat}", j, None, want))
    outputs = evaluate_stage(engine, inputs)
    lane_saturated = np.zeros((n_lines, engine.line_bits), bool)
    for (what, j, k, want), got in zip(expected, outputs):
        if what == "fold":
            assert got["counts"] == want, f"line {j}, worker {k}: counts differ from golden"
            lane_saturated[j] |= L.int_to_lanes(got["saturated"], lane_bits=1, lanes=engine.line_bits) != 0
        else:
            assert got["readout"] == want, f"line {j}: {what} readout differs from golden"
            assert got["counts"] == L.lanes_to_int(prefix[-1][j], lane_bits=cb), \
                f"line {j}: a read (fold=0) changed the counts"
    np.testing.assert_array_equal(lane_saturated, np.any(saturated, axis=0),
                                  err_msg="saturated lanes differ from golden")


def test_fold_and_readouts_match_golden_on_real_gradients(traces):
    """Four lines spread over each bucket of each step of both workloads, in one simulation
    (both traces have the same workers)."""
    engine = SignCountEngine(line_bits=512, max_workers=16)
    lines = []
    for trace in traces.values():
        for step_index in range(len(trace.steps)):
            buckets = [trace.bucket(step_index, w) for w in range(trace.workers)]
            encoded = np.stack([gbinary.encode(b, line_bits=512) for b in buckets])
            lines.append(encoded[:, :: max(1, encoded.shape[1] // 4)][:, :4])
    check_against_golden(engine, np.concatenate(lines, axis=1))


@pytest.mark.parametrize("line_bits,max_workers,counter_bits,workers,seed", [
    (128, 4, None, 4, 0),
    (256, 8, None, 7, 1),     # odd N: no ties
    (256, 8, 2, 8, 2),        # a 2-bit counter under 8 workers saturates
    (128, 64, None, 6, 3),
])
def test_random_lines_match_golden(line_bits, max_workers, counter_bits, workers, seed):
    rng = np.random.default_rng(seed)
    engine = SignCountEngine(line_bits=line_bits, max_workers=max_workers,
                             counter_bits=counter_bits)
    # Biased votes so that counts cover 0, ties and full majorities.
    bias = rng.random((1, 3, line_bits))
    votes = rng.random((workers, 3, line_bits)) < bias
    lines = L.pack_lanes(votes.astype(np.uint8), lane_bits=1)
    check_against_golden(engine, lines)



@pytest.mark.parametrize("max_workers,counter_bits,max_contributions,saturates", [
    (16, None, 16, False),   # the controller's lanes: a vote a worker, 5-bit counters
    (16, None, 31, False),   # as many votes as the counter holds
    (16, None, 32, True),
    (16, None, None, True),  # any number of votes
    (16, 4, 16, True),       # a 4-bit counter fills at 15
])
def test_saturation_is_built_only_where_a_counter_can_fill(max_workers, counter_bits,
                                                           max_contributions, saturates):
    """A lane given no more votes than its counter holds never saturates: the engine leaves
    the test out, and still folds and reads out as the golden model does up to that many."""
    engine = SignCountEngine(line_bits=128, max_workers=max_workers, counter_bits=counter_bits,
                             max_contributions=max_contributions)
    assert engine.saturates is saturates
    if not saturates:
        # Every worker votes -1 on the first lanes: their counters reach max_workers.
        rng = np.random.default_rng(max_workers)
        votes = rng.random((max_workers, 2, 128)) < 0.5
        votes[:, :, :8] = True
        check_against_golden(engine, L.pack_lanes(votes.astype(np.uint8), lane_bits=1))

def test_saturation_is_reported_only_when_a_counter_would_overflow():
    engine = SignCountEngine(line_bits=128, max_workers=8, counter_bits=2)
    full = L.lanes_to_int(np.full(128, 3), lane_bits=2)
    one_vote = L.line_to_int(L.pack_lanes(np.eye(1, 128, 7, dtype=np.uint8), lane_bits=1)[0])
    out = evaluate_stage(engine, [
        dict(counts=full, votes=one_vote, fold=(1 << 128) - 1, majority=0, readout=0, beat=0),
        dict(counts=full, votes=0, fold=(1 << 128) - 1, majority=0, readout=0, beat=0),
        dict(counts=full, votes=one_vote, fold=0, majority=0, readout=0, beat=0),
    ])
    assert [o["saturated"] for o in out] == [1 << 7, 0, 0]
    assert all(o["counts"] == full for o in out)


def test_each_lane_folds_only_when_its_own_fold_bit_is_set():
    """``fold`` is a bit per lane: a lane adds its vote, and may saturate, only when set."""
    engine = SignCountEngine(line_bits=64, max_workers=8, counter_bits=2)
    rng = np.random.default_rng(4)
    inputs, expected = [], []
    for _ in range(16):
        counts, votes, fold = rng.integers(0, 4, 64), rng.integers(0, 2, 64), rng.integers(0, 2, 64)
        inputs.append(dict(counts=L.lanes_to_int(counts, lane_bits=2),
                           votes=L.lanes_to_int(votes, lane_bits=1),
                           fold=L.lanes_to_int(fold, lane_bits=1), majority=0, readout=0, beat=0))
        expected.append((np.minimum(counts + fold * votes, 3), fold & votes & (counts == 3)))
    for (counts, saturated), got in zip(expected, evaluate_stage(engine, inputs)):
        assert got["counts"] == L.lanes_to_int(counts, lane_bits=2)
        assert got["saturated"] == L.lanes_to_int(saturated, lane_bits=1)


@pytest.mark.parametrize("line_bits,max_workers,counter_bits,seed", [
    (2, 4, None, 0),      # the narrowest tile: one G-Ternary lane's worth of bits
    (16, 16, None, 1),
    (48, 64, None, 2),    # 7 counter bits: 7 COUNTS lines
    (96, 8, 1, 3),        # a 1-bit counter: COUNTS is 1 line, TERNARY still 2
])
def test_a_tile_of_lanes_reads_out_its_part_of_every_line(line_bits, max_workers, counter_bits,
                                                          seed):
    """An engine for a tile of lanes gives, line for line, the bits its lanes have in the
    whole line's readout: the golden readout of 128 lanes whose first lanes are the tile's."""
    engine = SignCountEngine(line_bits=line_bits, max_workers=max_workers,
                             counter_bits=counter_bits)
    cb = engine.counter_bits
    assert engine.readout_lines == max(2, cb)
    assert len(engine.o.payload.readout) == line_bits
    rng = np.random.default_rng(seed)
    inputs, expected = [], []
    for n in range(24):
        num_workers = int(rng.integers(1, max_workers + 1))
        counts = np.zeros((1, 128), np.uint8)
        counts[0, :line_bits] = rng.integers(0, min(num_workers, 2**cb - 1) + 1, line_bits)
        readout = READOUTS_BY_ROUTE[Route.GBINARY][n % 3]
        golden = gbinary.readout(counts, readout=readout, num_workers=num_workers, counter_bits=cb)
        for beat, line in enumerate(golden):
            inputs.append(dict(counts=L.lanes_to_int(counts[0, :line_bits], lane_bits=cb),
                               votes=0, fold=0, readout=readout, beat=beat,
                               majority=majority_value(num_workers, max_workers=max_workers)))
            expected.append((readout.name, beat, num_workers,
                             L.line_to_int(line) & ((1 << line_bits) - 1)))
    for (name, beat, num_workers, want), got in zip(expected, evaluate_stage(engine, inputs)):
        assert got["readout"] == want, \
            f"{name} line {beat} of a {line_bits}-bit tile, N={num_workers}"


@pytest.mark.parametrize("max_workers", [2, 16, 64])
def test_majority_thresholds_in_hardware_equal_their_integer_form(max_workers):
    """The control plane computes the thresholds that testbenches feed engines directly."""
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator
    num_workers = Signal(7)
    thresholds = Signal(2 * max_workers.bit_length())
    m = Module()
    m.d.comb += thresholds.eq(majority_thresholds(num_workers, max_workers=max_workers))
    got = {}

    async def bench(ctx):
        for n in range(1, max_workers + 1):
            ctx.set(num_workers, n)
            got[n] = ctx.get(thresholds)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == {n: majority_value(n, max_workers=max_workers) for n in got}


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(line_bits=101), ValueError, "line_bits must be an even integer of at least 2, not 101"),
    (dict(line_bits=0), ValueError, "line_bits must be an even integer of at least 2, not 0"),
    (dict(line_bits=-2), ValueError, "line_bits must be an even integer of at least 2, not -2"),
    (dict(line_bits="512"), TypeError, "line_bits must be an integer, not '512'"),
    (dict(line_bits=16.0), TypeError, "line_bits must be an integer, not 16.0"),
    (dict(max_workers=1), ValueError, "max_workers must be between 2 and 64, not 1"),
    (dict(max_workers=65), ValueError, "max_workers must be between 2 and 64, not 65"),
    (dict(max_workers=16, counter_bits=6), ValueError, "counter_bits must be between 1 and 5, not 6"),
    (dict(counter_bits=0), ValueError, "counter_bits must be between 1 and 5, not 0"),
    (dict(max_contributions=0), ValueError, "max_contributions must be at least 1, not 0"),
    (dict(max_contributions=2.0), TypeError, "max_contributions must be an integer, not 2.0"),
])
def test_bad_parameters_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error) as info:
        SignCountEngine(**kwargs)
    assert str(info.value) == message
