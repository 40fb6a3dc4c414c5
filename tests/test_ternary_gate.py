"""The G-Ternary gate lane engine against the golden model, bit for bit."""

import numpy as np
import pytest

from neuron_fabric.golden import gternary
from neuron_fabric.golden import lines as L
from neuron_fabric.golden.formats import READOUTS_BY_ROUTE, Route, sum_limit
from neuron_fabric.hw.ternary_gate import TernaryGateEngine, gate_less_one, gate_less_one_value
from neuron_fabric.sim.amaranth_bench import evaluate_stage


def check_against_golden(engine, lines, gates):
    """Fold every worker's line into the golden prefix sums, then read out; compare all.

    ``lines`` is ``(workers, n_lines, line_bytes)``. Step ``k`` starts from the golden sums
    of workers ``0..k-1`` and must give those of ``0..k``, with the golden saturation and
    invalid-code flags of that step; every readout of the full sums at each gate in
    ``gates`` must equal the golden readout, all its lines at once.
    """
    workers, n_lines, _ = lines.shape
    width = engine.counter_bits + 1
    prefix = [np.zeros((n_lines, engine.lanes), np.int8)]
    saturated = []
    for k in range(1, workers + 1):
        sums, flags = gternary.aggregate(lines[:k], max_workers=engine.max_workers,
                                         counter_bits=engine.counter_bits, return_flags=True)
        prefix.append(sums)
        saturated.append(flags["saturated"])
    invalid = gternary.invalid_lanes(lines)  # (workers, n_lines, lanes)
    inputs, expected = [], []
    for j in range(n_lines):
        for k in range(workers):
            inputs.append(dict(sums=L.lanes_to_int(prefix[k][j], lane_bits=width),
                               codes=L.line_to_int(lines[k, j]), fold=(1 << engine.lanes) - 1,
                               gate_less_one=0,
                               readout=3, beat=0))
            expected.append(("fold", j, k, L.lanes_to_int(prefix[k + 1][j], lane_bits=width)))
        for readout in READOUTS_BY_ROUTE[Route.GTERNARY]:
            for gate in gates:
                golden = gternary.readout(prefix[-1][j:j + 1], readout=readout, gate=gate,
                                          counter_bits=engine.counter_bits)
                # Every line of the readout, one per beat; a beat past its last line reads 0.
                for beat in range(engine.readout_lines):
                    inputs.append(dict(
                        sums=L.lanes_to_int(prefix[-1][j], lane_bits=width),
                        codes=L.line_to_int(lines[0, j]), fold=0, readout=readout, beat=beat,
                        gate_less_one=gate_less_one_value(gate, counter_bits=engine.counter_bits)))
                    want = L.line_to_int(golden[beat]) if beat < len(golden) else 0
                    expected.append((f"{readout.name} line {beat} gate {gate}", j, None, want))
    outputs = evaluate_stage(engine, inputs)
    lane_saturated = np.zeros((n_lines, engine.lanes), bool)
    for (what, j, k, want), got in zip(expected, outputs):
        if what == "fold":
            assert got["sums"] == want, f"line {j}, worker {k}: sums differ from golden"
            assert got["invalid"] == L.lanes_to_int(invalid[k, j], lane_bits=1), \
                f"line {j}, worker {k}: invalid lanes"
            lane_saturated[j] |= L.int_to_lanes(got["saturated"], lane_bits=1, lanes=engine.lanes) != 0
        else:
            assert got["readout"] == want, f"line {j}: {what} readout differs from golden"
            assert got["sums"] == L.lanes_to_int(prefix[-1][j], lane_bits=width), \
                f"line {j}: a read (fold=0) changed the sums"
            assert not got["invalid"] and not got["saturated"], f"line {j}: a read raised a flag"
    np.testing.assert_array_equal(lane_saturated, np.any(saturated, axis=0),
                                  err_msg="saturated lanes differ from golden")


def test_fold_and_readouts_match_golden_on_real_gradients(traces):
    """Four lines spread over each bucket of each step of both workloads, in one simulation
    (both traces have the same workers)."""
    engine = TernaryGateEngine(line_bits=512, max_workers=16)
    lines = []
    for trace in traces.values():
        for step_index in range(len(trace.steps)):
            buckets = [trace.bucket(step_index, w) for w in range(trace.workers)]
            encoded = np.stack([gternary.encode(b, ratio=0.3, line_bits=512) for b in buckets])
            lines.append(encoded[:, :: max(1, encoded.shape[1] // 4)][:, :4])
    check_against_golden(engine, np.concatenate(lines, axis=1), gates=(0, 1, 2, 3, 4, 5))


@pytest.mark.parametrize("line_bits,max_workers,counter_bits,workers,seed", [
    (128, 4, None, 4, 0),
    (256, 8, None, 8, 1),
    (256, 8, 2, 8, 2),       # sums limited to [-3, 3]: saturation in worker order
    (128, 64, None, 5, 3),
])
def test_random_lines_with_invalid_codes_match_golden(line_bits, max_workers, counter_bits,
                                                      workers, seed):
    rng = np.random.default_rng(seed)
    engine = TernaryGateEngine(line_bits=line_bits, max_workers=max_workers,
                               counter_bits=counter_bits)
    # Lanes biased towards +1 or -1 so sums reach their limits; a few invalid codes (10).
    bias = rng.choice([1, 3], size=(1, 3, line_bits // 2))
    codes = np.where(rng.random((workers, 3, line_bits // 2)) < 0.7, bias,
                     rng.choice([0, 1, 3], size=(workers, 3, line_bits // 2)))
    codes[rng.random(codes.shape) < 0.01] = 2
    lines = L.pack_lanes(codes.astype(np.uint8), lane_bits=2)
    check_against_golden(engine, lines, gates=(0, 1, workers // 2, workers, 255))



@pytest.mark.parametrize("max_workers,counter_bits,max_contributions,saturates", [
    (16, None, 16, False),   # the controller's lanes: a code a worker, sums in [-16, 16]
    (16, None, 17, True),    # one code more than the limit
    (16, None, None, True),  # any number of codes
    (8, 2, 8, True),         # 3-bit sums in [-3, 3]
    (3, 2, 3, False),
])
def test_saturation_is_built_only_where_a_sum_can_pass_its_limit(max_workers, counter_bits,
                                                                 max_contributions, saturates):
    """A lane given no more codes than its limit never saturates: the engine leaves the test
    out, and still folds, flags invalid codes and reads out as the golden model does."""
    engine = TernaryGateEngine(line_bits=128, max_workers=max_workers,
                               counter_bits=counter_bits, max_contributions=max_contributions)
    assert engine.saturates is saturates
    if not saturates:
        # Every worker sends +1 on lanes 0-3 and -1 on lanes 4-7: the sums reach both limits.
        rng = np.random.default_rng(max_workers)
        codes = rng.choice([0, 1, 2, 3], p=[0.3, 0.3, 0.1, 0.3], size=(max_workers, 2, 64))
        codes[:, :, :4], codes[:, :, 4:8] = 1, 3
        check_against_golden(engine, L.pack_lanes(codes.astype(np.uint8), lane_bits=2),
                             gates=(0, 1, max_workers))

def test_each_lane_folds_only_when_its_own_fold_bit_is_set():
    """``fold`` is a bit per lane: a lane adds its code, and may flag it, only when set."""
    engine = TernaryGateEngine(line_bits=64, max_workers=8, counter_bits=2)
    rng = np.random.default_rng(4)
    value_of = np.array([0, 1, 0, -1])
    inputs, expected = [], []
    for _ in range(16):
        sums = rng.integers(-3, 4, 32)
        codes, fold = rng.integers(0, 4, 32), rng.integers(0, 2, 32)
        inputs.append(dict(sums=L.lanes_to_int(sums, lane_bits=3),
                           codes=L.lanes_to_int(codes, lane_bits=2),
                           fold=L.lanes_to_int(fold, lane_bits=1), gate_less_one=0, readout=3,
                           beat=0))
        total = sums + fold * value_of[codes]
        expected.append((np.clip(total, -3, 3), np.abs(total) > 3, fold & (codes == 2)))
    for (sums, saturated, invalid), got in zip(expected, evaluate_stage(engine, inputs)):
        assert got["sums"] == L.lanes_to_int(sums, lane_bits=3)
        assert got["saturated"] == L.lanes_to_int(saturated, lane_bits=1)
        assert got["invalid"] == L.lanes_to_int(invalid, lane_bits=1)


@pytest.mark.parametrize("line_bits,max_workers,counter_bits,seed", [
    (2, 4, None, 0),      # the narrowest tile: one lane
    (16, 16, None, 1),    # 6-bit sums: 3 SUMS lines, no extension bit
    (48, 8, None, 2),     # 5-bit sums: the last SUMS line repeats the sign
    (96, 64, 2, 3),       # 3-bit sums in 2 lines
])
def test_a_tile_of_lanes_reads_out_its_part_of_every_line(line_bits, max_workers, counter_bits,
                                                          seed):
    """An engine for a tile of lanes gives, line for line, the bits its lanes have in the
    whole line's readout: the golden readout of 64 lanes whose first lanes are the tile's."""
    engine = TernaryGateEngine(line_bits=line_bits, max_workers=max_workers,
                               counter_bits=counter_bits)
    cb, lanes = engine.counter_bits, line_bits // 2
    assert engine.readout_lines == (cb + 2) // 2
    assert len(engine.o.payload.readout) == line_bits
    limit = sum_limit(max_workers, cb)
    rng = np.random.default_rng(seed)
    inputs, expected = [], []
    for n in range(24):
        sums = np.zeros((1, 64), np.int8)
        sums[0, :lanes] = rng.integers(-limit, limit + 1, lanes)
        gate = int(rng.integers(0, limit + 2))
        readout = READOUTS_BY_ROUTE[Route.GTERNARY][n % 2]
        golden = gternary.readout(sums, readout=readout, gate=gate, counter_bits=cb)
        for beat, line in enumerate(golden):
            inputs.append(dict(sums=L.lanes_to_int(sums[0, :lanes], lane_bits=cb + 1), codes=0,
                               fold=0, readout=readout, beat=beat,
                               gate_less_one=gate_less_one_value(gate, counter_bits=cb)))
            expected.append((readout.name, beat, gate, L.line_to_int(line) & ((1 << line_bits) - 1)))
    for (name, beat, gate, want), got in zip(expected, evaluate_stage(engine, inputs)):
        assert got["readout"] == want, f"{name} line {beat} of a {line_bits}-bit tile, GATE={gate}"


@pytest.mark.parametrize("counter_bits", [1, 3, 5, 7])
def test_gate_threshold_in_hardware_equals_its_integer_form(counter_bits):
    """The control plane computes the threshold that testbenches feed engines directly."""
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator
    gate = Signal(8)
    threshold = Signal(counter_bits + 1)
    m = Module()
    m.d.comb += threshold.eq(gate_less_one(gate, counter_bits=counter_bits))
    got = {}

    async def bench(ctx):
        for g in range(256):
            ctx.set(gate, g)
            got[g] = ctx.get(threshold)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == {g: gate_less_one_value(g, counter_bits=counter_bits) for g in range(256)}


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(line_bits=63), ValueError, "line_bits must be an even integer of at least 2, not 63"),
    (dict(line_bits=0), ValueError, "line_bits must be an even integer of at least 2, not 0"),
    (dict(line_bits=None), TypeError, "line_bits must be an integer, not None"),
    (dict(max_workers=1.5), TypeError, "max_workers must be an integer, not 1.5"),
    (dict(max_workers=100), ValueError, "max_workers must be between 2 and 64, not 100"),
    (dict(max_workers=4, counter_bits=4), ValueError, "counter_bits must be between 1 and 3, not 4"),
])
def test_bad_parameters_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error) as info:
        TernaryGateEngine(**kwargs)
    assert str(info.value) == message
