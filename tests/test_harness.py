"""The Verilator harness without cocotb, and training with the RTL in the loop.

Builds the small preset's top into a shared library (about 30 s), checks it against the
golden model on seeded random traffic, trains a few steps with the RTL aggregating, and shows
that a bug planted in the Verilog stops both (and that a tile folding the noise lines reads
carry stops the regression).
"""

import shutil

import numpy as np
import pytest

from neuron_fabric.golden.controller import ControllerModel, Op, Request
from neuron_fabric.sim import harness as harness_module
from neuron_fabric.sim.harness import Harness, HarnessError, Requests
from neuron_fabric.sim.scenarios import Timing


@pytest.fixture(scope="session")
def harness_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("harness")


@pytest.fixture(scope="session")
def small_library(small_verilog, harness_cache):
    return harness_module.build(small_verilog, cache=harness_cache, log=lambda line: None)


@pytest.fixture(scope="session")
def tie_bug_verilog(tmp_path_factory):
    """The small preset's Verilog generated with a wrong tie rule: with an even NUM_WORKERS a
    tie reads as a negative majority (``above`` one too low)."""
    from amaranth.hdl import Cat

    from neuron_fabric.gen.verilog import generate
    from neuron_fabric.golden.params import PRESETS
    from neuron_fabric.hw import control_plane
    from neuron_fabric.hw.lane_logic import widen

    def wrong(num_workers, *, max_workers):
        width = max_workers.bit_length()
        return Cat(widen((num_workers - 1) >> 1, width)[:width],
                   widen((num_workers + 1) >> 1, width)[:width])

    folder = tmp_path_factory.mktemp("tie_bug") / PRESETS["small"].name
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(control_plane, "majority_thresholds", wrong)
        generate(PRESETS["small"], folder, log=lambda line: None)
    return folder


def _round(harness, model, rng, *, workers, readout=2):
    """Configure window 0 for G-Binary and write and read one full window, on both."""
    p = harness.params
    regs = harness.regmap
    for name, fields in (("NUM_WORKERS", {"value": workers}), ("WIN0_BASE", {"value": 40}),
                         ("WIN0_SIZE", {"value": p.depth}),
                         ("WIN0_CONFIG", {"EN": 1, "ROUTE": 0, "READOUT": readout}),
                         ("CONTROL", {"ENABLE": 1})):
        value = fields["value"] if "value" in fields else regs[name].encode(**fields)
        harness.csr_write(name, value)
        model.csr_write(regs[name].address, value)
    requests = [Request(Op.WRITE, 40 + s, w, rng.integers(0, 256, harness.line_bytes,
                                                         dtype=np.uint8).tobytes())
                for s in range(p.depth) for w in range(workers)]
    requests += [Request(Op.READ_CLEAR, 40 + s) for s in range(p.depth)]
    return requests


def test_harness_answers_as_the_model_under_backpressure(small_verilog, small_library):
    rng = np.random.default_rng(0)
    with Harness(small_verilog, library=small_library, seed=1,
                 timing=Timing(idle=0.3, backpressure=0.5, mem_backpressure=0.5,
                               mem_latency=(1, 6))) as harness:
        model = ControllerModel(harness.params)
        requests = _round(harness, model, rng, workers=harness.params.max_workers)
        # FP32 traffic beside the window: a write and a read back of the same line.
        line = rng.integers(0, 256, harness.line_bytes, dtype=np.uint8).tobytes()
        requests += [Request(Op.WRITE, 5000, 0, line), Request(Op.READ, 5000)]
        played = harness.play(requests)
        assert played.taken == played.answered == len(requests)
        want = model.run(requests)
        assert [played.response(i) for i in range(len(requests))] == want
        assert played.response(len(requests) - 1).lines == (line,)
        assert harness.memory() == {5000: line}
        write, addr, data = played.memory
        assert write.tolist() == [1, 0] and addr.tolist() == [5000, 5000]
        assert harness.cycles > played.cycles > len(requests)


def test_reset_with_responses_in_flight_loses_them(small_verilog, small_library):
    rng = np.random.default_rng(1)
    with Harness(small_verilog, library=small_library) as harness:
        model = ControllerModel(harness.params)
        requests = _round(harness, model, rng, workers=2)
        played = harness.play(requests, reset_after=2)
        assert played.taken == len(requests)
        assert played.answered < played.taken
        # After the reset every register is back to its reset value.
        assert harness.csr_read("NUM_WORKERS") == ControllerModel(harness.params).csr_read(
            harness.regmap["NUM_WORKERS"].address)


def test_long_regression_matches_the_model(small_verilog, small_library, harness_cache):
    from neuron_fabric.sim import long_regression

    tally = long_regression.run(small_verilog, cycles=40_000, seed=3, log=lambda line: None,
                                cache=harness_cache)
    assert tally.cycles >= 40_000
    assert tally.requests > 1_000 and tally.lines > 1_000 and tally.csr_reads > 50
    assert tally.resets >= 1


def test_long_regression_stops_at_a_planted_bug(tie_bug_verilog, harness_cache):
    from neuron_fabric.sim import long_regression

    with pytest.raises(long_regression.Mismatch, match=r"request \d+ \(READ"):
        long_regression.run(tie_bug_verilog, cycles=200_000, seed=3, log=lambda line: None,
                            cache=harness_cache)


def test_long_regression_stops_at_a_tile_that_folds_a_reads_line(read_fold_bug_verilog,
                                                                 harness_cache):
    """Requests other than writes carry noise lines; one tile adding them to its rows is
    caught at a readout."""
    from neuron_fabric.sim import long_regression

    with pytest.raises(long_regression.Mismatch, match=r"request \d+ \(READ"):
        long_regression.run(read_fold_bug_verilog, cycles=200_000, seed=3,
                            log=lambda line: None, cache=harness_cache)


def test_bad_input_is_refused(small_verilog, small_library, tmp_path):
    with Harness(small_verilog, library=small_library) as harness:
        with pytest.raises(ValueError, match="timing.backpressure"):
            harness.set_timing(Timing(backpressure=1.0))
        with pytest.raises(ValueError, match="mem_latency"):
            harness.set_timing(Timing(mem_latency=(0, 2)))
        with pytest.raises(ValueError, match="requests.data"):
            harness.play(Requests(op=np.zeros(2, np.uint8), addr=np.zeros(2, np.uint32),
                                  worker=np.zeros(2, np.uint8), data=np.zeros((2, 3), np.uint8)))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        harness_module.build(empty, cache=tmp_path)


def test_build_key_follows_every_input(small_verilog, tmp_path):
    copy = tmp_path / small_verilog.name
    shutil.copytree(small_verilog, copy)
    key = harness_module.build_key(copy)
    assert harness_module.build_key(copy) == key
    config = next(copy.glob("*.vlt"))
    config.write_text(config.read_text() + "// changed\n")
    changed = harness_module.build_key(copy)
    assert changed != key
    top = copy / f"{next(copy.glob('*.f')).stem}.v"
    top.write_text(top.read_text() + "\n")
    assert harness_module.build_key(copy) not in (key, changed)


def test_play_reports_a_design_that_stops_answering(small_verilog, small_library):
    with Harness(small_verilog, library=small_library, watchdog=200,
                 timing=Timing(backpressure=0.999)) as harness:
        requests = [Request(Op.WRITE, 7000 + k, 0, bytes(harness.line_bytes)) for k in range(64)]
        with pytest.raises(HarnessError, match="no transfer for 200 cycles"):
            harness.play(requests)


# ------------------------------------------------------------------------------ RTL in the loop


def test_training_with_the_rtl_is_bit_identical(small_verilog, small_library, tmp_path):
    from neuron_fabric.experiments import train_rtl

    report = train_rtl.run(tmp_path, verilog=small_verilog, workers=2, steps=3,
                           only=["digits/layer_gbinary", "char_lm/gternary"],
                           library=small_library, log=lambda line: None)
    assert [r["name"] for r in report["runs"]] == ["digits/layer_gbinary", "char_lm/gternary"]
    for r in report["runs"]:
        assert r["bit_identical_steps"] == 3
        assert r["device"]["cycles"] > 0 and r["device"]["lines_read"] > 0
    assert "fp32" in report["runs"][0]["routes"]  # the mixed bucket took the FP32 path too
    assert (tmp_path / "report.md").read_text().count("3 of 3") == 2


def test_training_stops_at_a_planted_bug(tie_bug_verilog, harness_cache, tmp_path):
    from neuron_fabric.experiments import train_rtl

    with pytest.raises(train_rtl.ParameterMismatch) as caught:
        train_rtl.run(tmp_path, verilog=tie_bug_verilog, workers=2, steps=3,
                      only=["digits/gbinary"], cache=harness_cache, log=lambda line: None)
    fields = caught.value.fields
    assert fields["run"] == "digits/gbinary" and fields["step"] == 0
    assert fields["golden"] != fields["rtl"]
    assert f"{fields['parameter']}[{fields['element']}]" in str(caught.value)
    assert (tmp_path / "mismatch.json").is_file()


def test_a_one_cycle_reset_drops_the_flags_of_words_in_flight(small_verilog, small_library):
    """A G-Ternary write with invalid codes, followed by 0 to 7 plain memory writes, then a
    one-cycle reset: whatever stage the write has reached, neither INVALID_LINES nor ERRORS
    may count it afterwards (the reset empties every counter and flag)."""
    with Harness(small_verilog, library=small_library) as harness:
        p = harness.params
        invalid = bytes([0b10101010]) * harness.line_bytes  # every lane holds code 10
        for behind in range(8):
            harness.csr_write("NUM_WORKERS", 1)
            harness.csr_write("WIN0_SIZE", p.depth)
            harness.csr_write("WIN0_CONFIG", EN=1, ROUTE=1, READOUT=3)
            harness.csr_write("CONTROL", ENABLE=1)
            requests = [Request(Op.WRITE, 0, 0, invalid)]
            requests += [Request(Op.WRITE, 1000 + k, 0, invalid) for k in range(behind)]
            harness.play(requests, reset_after=1)
            harness.idle(4 * p.depth * p.num_windows)  # past the clearing sweep
            assert (behind, harness.csr_read("INVALID_LINES"), harness.csr_read("ERRORS")) == (
                behind, 0, 0)
