"""Reference model of the write-combining accumulator (golden/combiner.py).

The rules are checked one by one on hand-made streams; random streams over many parameter
sets check the invariant: after a flush, per address, the written deltas sum to the accepted
values (lossy mode: plus what it reports as dropped).
"""

import re

import numpy as np
import pytest

from neuron_fabric.golden import combiner as gc
from neuron_fabric.golden.combiner import Cause, CombinerParams


def exact(message):
    return "^" + re.escape(message) + "$"


def writes(result):
    return list(zip(result.addr.tolist(), result.delta.tolist(), result.cause.tolist()))


def small(**overrides):
    """4 sets x 2 ways, 8-bit addresses and values, threshold 50, max 5 updates."""
    options = dict(addr_width=8, value_width=8, sets=4, ways=2, threshold=50, max_updates=5,
                   fifo_depth=4)
    options.update(overrides)
    return CombinerParams(**options)


# ----------------------------------------------------------------------------- parameters

BAD_PARAMS = [
    ({"addr_width": "32"}, TypeError, "addr_width must be an integer, not '32'"),
    ({"addr_width": 1}, ValueError, "addr_width must be between 2 and 64, not 1"),
    ({"addr_width": 65}, ValueError, "addr_width must be between 2 and 64, not 65"),
    ({"value_width": 16.0}, TypeError, "value_width must be an integer, not 16.0"),
    ({"value_width": 33}, ValueError, "value_width must be between 2 and 32, not 33"),
    ({"acc_width": True}, TypeError, "acc_width must be an integer, not True"),
    ({"acc_width": 8}, ValueError, "acc_width must be between 16 and 64, not 8"),
    ({"acc_width": 65}, ValueError, "acc_width must be between 16 and 64, not 65"),
    ({"sets": 4.0}, TypeError, "sets must be an integer, not 4.0"),
    ({"sets": 12}, ValueError, "sets must be a power of two between 1 and 2147483648, not 12"),
    ({"sets": 0}, ValueError, "sets must be a power of two between 1 and 2147483648, not 0"),
    ({"addr_width": 4, "sets": 16}, ValueError,
     "sets must be a power of two between 1 and 8, not 16"),
    ({"ways": None}, TypeError, "ways must be an integer, not None"),
    ({"ways": 0}, ValueError, "ways must be between 1 and 64, not 0"),
    ({"threshold": 2.5}, TypeError, "threshold must be None or an integer, not 2.5"),
    ({"threshold": 0}, ValueError, "threshold must be None or between 1 and 32768, not 0"),
    ({"threshold": 32769}, ValueError,
     "threshold must be None or between 1 and 32768, not 32769"),
    ({"small_threshold": "4"}, TypeError, "small_threshold must be None or an integer, not '4'"),
    ({"small_threshold": 50}, ValueError,
     "small_threshold must be None or between 1 and 49, not 50"),
    ({"threshold": None, "small_threshold": 40000}, ValueError,
     "small_threshold must be None or between 1 and 32768, not 40000"),
    ({"lossy": 1}, TypeError, "lossy must be a bool, not 1"),
    ({"lossy": True}, ValueError, "lossy must be False when small_threshold is None, not True"),
    ({"max_updates": 1}, ValueError, "max_updates must be between 2 and 65536, not 1"),
    ({"max_updates": "255"}, TypeError, "max_updates must be an integer, not '255'"),
    ({"fifo_depth": 1}, ValueError, "fifo_depth must be between 2 and 65536, not 1"),
    ({"burst": 17}, ValueError, "burst must be between 1 and 16, not 17"),
    ({"burst": 0}, ValueError, "burst must be between 1 and 16, not 0"),
    ({"burst": 2.0}, TypeError, "burst must be an integer, not 2.0"),
]


@pytest.mark.parametrize("options,error,message", BAD_PARAMS,
                         ids=[m.split(" must")[0] + f"-{i}" for i, (_, _, m)
                              in enumerate(BAD_PARAMS)])
def test_bad_parameter_is_refused_with_its_rule(options, error, message):
    with pytest.raises(error, match=exact(message)):
        CombinerParams(**options)


def test_defaults_follow_the_seed_design():
    p = CombinerParams()
    assert (p.addr_width, p.value_width, p.acc_width) == (32, 16, 16)
    assert (p.sets, p.ways, p.entries, p.threshold, p.max_updates) == (32, 4, 128, 50, 255)
    assert (p.fifo_depth, p.burst, p.set_bits, p.tag_width) == (16, 16, 5, 27)
    assert (p.bytes_in, p.bytes_out) == (6, 6)
    assert CombinerParams(acc_width=24).bytes_out == 7
    assert p.value_range == (-32768, 32767) and p.acc_range == (-32768, 32767)


# ----------------------------------------------------------------------------- the rules

def test_large_value_bypasses_and_leaves_the_entry_alone():
    r = gc.run(small(), [1, 1, 1], [3, 50, -60])
    assert writes(r) == [(1, 50, Cause.BYPASS), (1, -60, Cause.BYPASS), (1, 3, Cause.FLUSH)]


def test_small_values_accumulate_until_the_threshold():
    r = gc.run(small(), [5] * 4 + [6], [20, 20, -5, 15, 7])
    assert writes(r) == [(5, 50, Cause.THRESHOLD), (6, 7, Cause.FLUSH)]
    r = gc.run(small(), [5, 5, 5], [-30, -19, -1])
    assert writes(r) == [(5, -50, Cause.THRESHOLD)]


def test_entry_is_written_after_max_updates():
    r = gc.run(small(max_updates=3), [2] * 7, [1] * 7)
    assert writes(r) == [(2, 3, Cause.MAX_UPDATES), (2, 3, Cause.MAX_UPDATES),
                         (2, 1, Cause.FLUSH)]


def test_zero_sums_and_zero_misses_write_nothing():
    r = gc.run(small(), [3, 3, 4, 4, 4], [7, -7, 0, 2, -2])
    assert writes(r) == []
    assert r.stats["freed_zero"] == 2 and r.stats["absorbed_zero"] == 1
    # a zero that hits still counts towards max_updates
    r = gc.run(small(max_updates=3), [3, 3, 3], [7, 0, 0])
    assert writes(r) == [(3, 7, Cause.MAX_UPDATES)]


def test_overflow_writes_the_old_sum_and_restarts_the_entry():
    p = small(threshold=None)   # no threshold: only the 8-bit sum limits accumulation
    r = gc.run(p, [9] * 4, [100, 20, 10, -128])
    assert writes(r) == [(9, 120, Cause.OVERFLOW), (9, -118, Cause.FLUSH)]
    assert r.stats["overflow_flag"]
    r = gc.run(small(threshold=None, acc_width=9), [9] * 3, [100, 20, 10])
    assert writes(r) == [(9, 130, Cause.FLUSH)] and not r.stats["overflow_flag"]


def test_misses_fill_free_ways_then_evict_round_robin():
    # set 1 holds addresses 1, 5, 9, 13 ... (4 sets); 2 ways
    r = gc.run(small(), [1, 5, 9, 13, 17, 1], [1, 2, 3, 4, 5, 6], final_flush=False)
    assert writes(r) == [(1, 1, Cause.EVICT), (5, 2, Cause.EVICT), (9, 3, Cause.EVICT),
                         (13, 4, Cause.EVICT)]
    assert r.stats["held"] == 2
    model = gc.Combiner(small())
    for a, v in zip([1, 5, 9, 13, 17, 1], [1, 2, 3, 4, 5, 6]):
        model.update(a, v)
    assert model.entries() == [(1, 0, 17, 5, 1), (1, 1, 1, 6, 1)]
    model.update(1, 1)
    assert model.entries() == [(1, 0, 17, 5, 1), (1, 1, 1, 7, 2)]


def test_freed_way_is_taken_before_evicting():
    r = gc.run(small(), [1, 5, 1, 9], [25, 2, 25, 3])
    assert writes(r) == [(1, 50, Cause.THRESHOLD), (9, 3, Cause.FLUSH), (5, 2, Cause.FLUSH)]


def test_tiny_miss_never_evicts_and_is_written_through():
    p = small(small_threshold=4)
    r = gc.run(p, [1, 5, 9, 1, 13], [10, 11, 3, 2, 12])
    assert writes(r) == [(9, 3, Cause.THROUGH), (1, 12, Cause.EVICT), (13, 12, Cause.FLUSH),
                         (5, 11, Cause.FLUSH)]
    # a tiny value still takes a free way and merges on a hit
    r = gc.run(p, [2, 2], [3, 1])
    assert writes(r) == [(2, 4, Cause.FLUSH)]


def test_lossy_mode_drops_tiny_misses_and_reports_them():
    p = small(small_threshold=4, lossy=True)
    r = gc.run(p, [2, 2, 3, 3], [3, 9, 9, 3])
    assert writes(r) == [(2, 9, Cause.FLUSH), (3, 12, Cause.FLUSH)]
    assert r.stats["dropped"] == 1 and r.stats["dropped_sum"] == 3
    assert r.dropped[0].tolist() == [2] and r.dropped[1].tolist() == [3]


def test_flush_writes_in_set_then_way_order_and_keeps_pointers():
    p = small()
    r = gc.run(p, [1, 5, 9, 2, 0], [1, 2, 3, 4, 5], flush_after=[5, 5])
    assert writes(r) == [(1, 1, Cause.EVICT), (0, 5, Cause.FLUSH), (9, 3, Cause.FLUSH),
                         (5, 2, Cause.FLUSH), (2, 4, Cause.FLUSH)]
    assert r.flush_ends.tolist() == [5, 5, 5]
    # the set-1 pointer moved to way 1, and a flush does not reset it
    r = gc.run(p, [1, 5, 9, 13, 17, 21], [1, 2, 3, 4, 5, 6], flush_after=[3])
    assert [w[:2] for w in writes(r)][:3] == [(1, 1), (9, 3), (5, 2)]
    # 13 and 17 take the free ways; 21 evicts way 1 (17), where the pointer was left
    assert [w[:2] for w in writes(r)][3:] == [(17, 5), (13, 4), (21, 6)]


def test_without_a_final_flush_entries_stay_held():
    r = gc.run(small(), [1, 2, 3], [1, 1, 1], final_flush=False)
    assert r.transactions_out == 0 and r.stats["held"] == 3
    assert r.reduction == float("inf")


def test_traffic_accounting():
    r = gc.run(small(acc_width=16, max_updates=16), [1] * 10, [5] * 10)
    assert (r.transactions_in, r.transactions_out) == (10, 1)
    assert (r.bytes_in, r.bytes_out) == (20, 3)
    assert r.reduction == 10 and r.byte_reduction == pytest.approx(20 / 3)


# ----------------------------------------------------------------------------- invariant

def random_stream(rng, params, n):
    """Updates over a few times more addresses than entries, mostly small values."""
    span = min(1 << params.addr_width, 4 * params.entries + 3)
    addr = rng.integers(0, span, n)
    low, high = params.value_range
    limit = params.threshold or high
    value = rng.integers(-limit, limit, n, endpoint=True)
    value = np.where(rng.random(n) < 0.7, value // 8, value)
    value[rng.random(n) < 0.05] = 0
    value[rng.random(n) < 0.02] = low
    return addr, np.clip(value, low, high)


PARAM_SETS = {
    "seed": dict(),
    "tiny": dict(addr_width=6, value_width=4, sets=1, ways=1, threshold=None, max_updates=2),
    "narrow-acc": dict(addr_width=10, value_width=8, sets=8, ways=2, threshold=None,
                       max_updates=40),
    "wide-acc": dict(addr_width=12, value_width=8, acc_width=12, sets=4, ways=3,
                     threshold=128, max_updates=7),
    "dual": dict(addr_width=10, value_width=8, sets=4, ways=4, threshold=64,
                 small_threshold=6, max_updates=9),
    "lossy": dict(addr_width=10, value_width=8, sets=4, ways=4, threshold=64,
                  small_threshold=6, lossy=True, max_updates=9),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", PARAM_SETS)
def test_flushed_writes_sum_to_the_accepted_values(name, seed):
    params = CombinerParams(**PARAM_SETS[name])
    rng = np.random.default_rng(seed)
    addr, value = random_stream(rng, params, 3000)
    points = np.sort(rng.integers(0, addr.size, 4)).tolist()
    r = gc.run(params, addr, value, flush_after=points)
    assert r.stats["held"] == 0
    assert np.all(r.delta != 0)
    low, high = params.acc_range
    assert r.delta.min() >= low and r.delta.max() <= high
    dropped = r.dropped if params.lossy else None
    gc.check_sums(addr, value, r.addr, r.delta, dropped=dropped)
    if not params.lossy:
        assert r.stats["dropped"] == 0
    # each flush point is a barrier: the prefix is complete there too
    k = points[1]
    prefix = gc.run(params, addr[:k], value[:k], flush_after=points[:1])
    end = r.flush_ends[1]
    assert writes(prefix) == writes(r)[:end]
    # every cause that the parameters allow shows up in these streams
    seen = {Cause(c) for c in np.unique(r.cause)}
    assert Cause.FLUSH in seen and Cause.EVICT in seen


def test_check_sums_names_the_first_bad_address():
    with pytest.raises(AssertionError, match=r"^address 7: written deltas differ from the "
                                             r"accepted values by -2 \(1 addresses differ\)$"):
        gc.check_sums([7, 8], [3, 4], [7, 8], [1, 4])


def test_run_refuses_bad_streams():
    p = small()
    with pytest.raises(ValueError, match=exact(
            "addr must be between 0 and 255 (addr_width 8), not 256 at index 1")):
        gc.run(p, [1, 256], [1, 1])
    with pytest.raises(ValueError, match=exact(
            "value must be between -128 and 127 (value_width 8), not 128 at index 0; "
            "quantize with saturation first")):
        gc.run(p, [1], [128])
    with pytest.raises(TypeError, match=exact("value must be a 1-D integer array, not "
                                              "1-D float64")):
        gc.run(p, [1], [1.0])
    with pytest.raises(ValueError, match=exact("addr and value must have the same length, "
                                               "not 2 and 1")):
        gc.run(p, [1, 2], [1])
    with pytest.raises(ValueError, match=exact("flush_after must be between 0 and 1, not 2")):
        gc.run(p, [1], [1], flush_after=[2])
    with pytest.raises(ValueError, match=exact("flush_after must be non-decreasing, "
                                               "not [1, 0]")):
        gc.run(p, [1], [1], flush_after=[1, 0])
    with pytest.raises(TypeError, match=exact("params must be a CombinerParams, not {}")):
        gc.run({}, [1], [1])


# ----------------------------------------------------------------------------- evaluation

def test_seed_stream_has_the_six_phases_and_the_reported_size():
    from neuron_fabric.experiments import combiner_eval

    addr, value, phase = combiner_eval.seed_stream()
    assert addr.size == value.size == combiner_eval.SEED_REPORTED["updates"] == 1448
    assert np.bincount(phase).tolist() == [0, 640, 67, 96, 256, 129, 260]
    params = CombinerParams(**combiner_eval.SEED_PARAMS)
    r = gc.run(params, addr, value)
    by_phase = {k: set(r.cause[np.isin(r.addr, addr[phase == k])].tolist())
                for k in range(1, 7)}
    assert by_phase[2] == {Cause.BYPASS}
    assert Cause.THRESHOLD in by_phase[1] and Cause.THRESHOLD in by_phase[4]
    assert Cause.EVICT in by_phase[3] and Cause.EVICT in by_phase[5]
    assert by_phase[6] == {Cause.MAX_UPDATES, Cause.FLUSH}
    gc.check_sums(addr, value, r.addr, r.delta)


def test_quantization_shares_one_scale_per_parameter_across_workers():
    from neuron_fabric.experiments import combiner_eval

    grads = np.array([[0.5, -1.0, 0.0005, 0.0], [0.25, 0.5, -0.002, 0.0]], dtype=np.float32)
    q = combiner_eval.quantize(grads, bounds=[0, 2, 4], value_width=8)
    assert q.tolist() == [[64, -127, 32, 0], [32, 64, -127, 0]]
    with pytest.raises(ValueError, match="must not contain NaN"):
        combiner_eval.quantize(np.array([[np.nan]], dtype=np.float32), bounds=[0, 1],
                               value_width=8)


@pytest.mark.parametrize("order", ["lockstep", "random", "worker-major"])
def test_worker_orders_keep_every_update_once(order):
    from neuron_fabric.experiments import combiner_eval

    q = np.arange(3 * 70).reshape(3, 70)
    addr, value = combiner_eval.trace_stream(q, chunk=32, order=order,
                                             rng=np.random.default_rng(0))
    assert addr.size == 210
    pairs = sorted(zip(addr.tolist(), value.tolist()))
    assert pairs == sorted((j, int(q[k, j])) for k in range(3) for j in range(70))
    if order == "lockstep":
        assert addr[:32].tolist() == addr[32:64].tolist() == list(range(32))
    if order != "worker-major":   # each worker's lines stay in address order
        for k in range(3):
            mine = addr[(value >= 70 * k) & (value < 70 * (k + 1))]
            assert mine.tolist() == list(range(70))


def test_evaluation_says_what_it_needs_without_traces(tmp_path, capsys):
    from neuron_fabric.experiments import combiner_eval

    assert combiner_eval.main(["--traces", str(tmp_path / "none"),
                               "--out", str(tmp_path / "out")]) == 2
    message = capsys.readouterr().err
    assert "needs the real gradient traces" in message
    assert str(tmp_path / "none" / "digits_cnn.npz") in message
    assert "make traces" in message
    assert not (tmp_path / "out").exists()


def test_evaluation_refuses_a_bad_step_count_before_reading_traces(tmp_path, capsys):
    from neuron_fabric.experiments import combiner_eval

    with pytest.raises(SystemExit) as exit_info:
        combiner_eval.main(["--traces", str(tmp_path), "--steps", "0"])
    assert exit_info.value.code == 2
    assert "steps must be at least 1, not 0" in capsys.readouterr().err


def test_evaluation_writes_its_report(traces, tmp_path, capsys, monkeypatch):
    from neuron_fabric.experiments import combiner_eval

    monkeypatch.setattr(combiner_eval, "QUICK_BUFFERS", ((8, 2), (32, 4)))
    monkeypatch.setattr(combiner_eval, "QUICK_THRESHOLDS", (None,))
    folder = next(iter(traces.values())).path.parent
    assert combiner_eval.main(["--traces", str(folder), "--out", str(tmp_path),
                               "--steps", "1", "--quick"]) == 0
    import json

    report = json.loads((tmp_path / "report.json").read_text())
    markdown = (tmp_path / "report.md").read_text()
    assert (tmp_path / "reduction.png").stat().st_size > 1000
    assert "2.99x" in markdown and "| seed phases |" in markdown
    streams = {row["stream"] for row in report["rows"]}
    assert streams == {"seed phases", "digits_cnn", "char_lm"}
    for row in report["rows"]:
        assert row["bytes_in"] == 6 * row["updates"]
        if row["final_flush"] and not row["lossy"]:
            assert row["sums_checked"] and row["held_at_end"] == 0
    no_flush = [r for r in report["rows"] if not r["final_flush"]]
    assert no_flush and no_flush[0]["held_at_end"] > 0
    # the hardware block's rate on the seed's phases and a head of each lock-step stream
    assert {t["stream"] for t in report["throughput"]} == streams
    for t in report["throughput"]:
        assert t["cycles"] == t["paced_cycles"] >= t["updates"] > 0
        if t["stream"] != "seed phases":     # a stream that walks the addresses never waits
            assert t["updates_per_cycle"] == 1.0
    assert "updates per cycle" in markdown
    assert "wrote" in capsys.readouterr().out
