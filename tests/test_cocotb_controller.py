"""The controller top's emitted Verilog under cocotb on Icarus: a short subset of the regression.

The small preset (128-bit lines, 4 workers) is generated into a temporary folder, built with
Icarus and run with :mod:`neuron_fabric.sim.tb_controller`: reset values of every register,
one step of both real-gradient traces (the test suite's reduced captures) through a G-Binary
and a G-Ternary window and the FP32 passthrough, memory traffic outside the windows, the
write-1-to-clear flags, resets in mid traffic and long stalls of both output ports. Further
runs plant a bug in a copy of the Verilog (the majority tie rule inverted; tile 3 alone never
forwarding) and require the scoreboard to catch it. ``make sim`` runs the full regression.
"""

import re

import pytest

from neuron_fabric.golden.params import PRESETS
from neuron_fabric.sim.cocotb_run import manifest_design, run_cocotb

TESTS = ("registers_read_their_reset_values|real_gradients|requests_outside_every_window"
         "|error_flags_clear_on_writing_one|reset_in_mid_traffic|long_downstream_stalls")


def run_icarus(verilog, work, traces, *, test_filter, seed):
    """Build the top in ``verilog`` with Icarus, run the filtered tests; return
    ``(tests, failed, run.log text)``."""
    env = {"NFABRIC_MANIFEST": str(verilog), "NFABRIC_SEEDS": str(seed),
           "NFABRIC_TRACES": str(traces["digits_cnn"].path.parent),
           "NFABRIC_TRACE_STEPS": "1", "NFABRIC_TRACE_LINES": "1"}
    run = run_cocotb("icarus", **manifest_design(verilog, "controller", work),
                     test_module="neuron_fabric.sim.tb_controller", work=work, env=env,
                     test_filter=test_filter)
    assert run.ran, run.error
    return run.tests, run.failed, run.log_text()


@pytest.mark.parametrize("seed", [5])
def test_verilog_matches_the_model_on_icarus(small_verilog, tmp_path, traces, seed):
    tests, failed, log = run_icarus(small_verilog, tmp_path, traces, test_filter=TESTS,
                                    seed=seed)
    assert (tests, failed) == (7, 0), f"see {tmp_path / 'run.log'}"
    assert "lines checked" in log


def plant_inverted_tie_rule(source, target):
    """Copy the Verilog with the G-Binary majority's tie going negative (``2n >= N``).

    Each pair fold in a tile joins a G-Binary lane's comparison tree in ``<low|high>_sign``
    (``n > N // 2``) and ``<low|high>_tie`` (``2n == N``); a sign-count engine's lane ``k``
    (where counters can fill) in ``lane<k>_sign`` and ``lane<k>_tie``. The planted sign also
    takes the tie, which differs for an even N only: a tie then reads negative.
    """
    text = source.read_text(encoding="utf-8")
    planted, count = re.subn(r"assign (lane\d+|low|high)_sign = ([^;]+);",
                             r"assign \1_sign = \2 | \1_tie;", text)
    assert count >= 1, "expected the G-Binary lanes' majority comparisons"
    target.write_text(planted, encoding="utf-8")


@pytest.mark.parametrize("seed", [5])
def test_a_planted_tie_rule_bug_is_caught(small_verilog, tmp_path, traces, seed):
    import shutil

    planted = tmp_path / "planted"
    shutil.copytree(small_verilog, planted)
    top = planted / f"nfabric_{PRESETS['small'].name}.v"
    plant_inverted_tie_rule(small_verilog / top.name, top)
    tests, failed, log = run_icarus(planted, tmp_path, traces,
                                    test_filter="real_gradients", seed=seed)
    assert failed >= 1, "an inverted tie rule must fail the real-gradient replay"
    assert "the model says" in log or "data differs" in log


def plant_tile_without_forwarding(source, target, *, module, tile):
    """Copy the Verilog with one tile's lane groups never taking the previous word's sum: its
    fold takes the row chosen a cycle earlier (no copy of a sum in flight, no block RAM
    row) when the word before wrote the same slot.

    Each pair of line bits selects the forward with its own copy of ``from_last``; the
    planted tile's copies are tied to 0. The other tiles are left as they are.
    """
    text = source.read_text(encoding="utf-8")
    start = text.index(f"module {module}__tile_{tile}(")
    end = text.index("endmodule", start)
    body, count = re.subn(r"\.from_last\([^)]*\)", ".from_last(1'b0)", text[start:end])
    assert count >= 1, f"expected tile {tile}'s forward selects"
    target.write_text(text[:start] + body + text[end:], encoding="utf-8")


@pytest.mark.parametrize("seed", [5])
def test_a_planted_bug_in_one_tile_is_caught(small_verilog, tmp_path, traces, seed):
    """Only tile 3 (line bits 96 to 127 of the small preset) loses forwarded writes: the
    back-to-back writes to one slot read out wrong in those bits alone."""
    import shutil

    planted = tmp_path / "planted"
    shutil.copytree(small_verilog, planted)
    module = f"nfabric_{PRESETS['small'].name}"
    plant_tile_without_forwarding(small_verilog / f"{module}.v", planted / f"{module}.v",
                                  module=module, tile=3)
    tests, failed, log = run_icarus(planted, tmp_path, traces,
                                    test_filter="one_line_per_clock_to_one_slot", seed=seed)
    assert (tests, failed) == (1, 1), "a tile that does not forward must fail the burst test"
    assert "data differs" in log or "the model says" in log


@pytest.mark.parametrize("seed", [5])
def test_a_tile_that_folds_a_reads_line_is_caught(read_fold_bug_verilog, tmp_path, traces,
                                                   seed):
    """Every request that is not a write carries a noise line: tile 1 (line bits 32 to 63)
    adding it to the rows it reads out must fail the real-gradient replay."""
    tests, failed, log = run_icarus(read_fold_bug_verilog, tmp_path, traces,
                                    test_filter="real_gradients", seed=seed)
    assert failed >= 1, "a tile that folds a read's line must fail the real-gradient replay"
    assert "data differs" in log or "the model says" in log
