"""The AXI top's emitted Verilog under cocotbext-axi on Icarus and Verilator, against the
golden model (:mod:`neuron_fabric.sim.tb_axi`), on the small preset: one step of each real
trace cut to 12 lines per worker and route (two rounds of the 8-slot windows), refused bursts
and the registers over AXI4-Lite. ``make sim`` runs the 512-bit AXI top on Verilator with
every line of the traces."""

import numpy as np
import pytest

from neuron_fabric.sim.cocotb_run import manifest_design, run_cocotb
from neuron_fabric.sim.tb_axi import _chunks


def run_axi_top(simulator, verilog, work, traces, *, seed, test_filter=None):
    """Build the AXI top in ``verilog`` with ``simulator`` and run the tests of
    :mod:`neuron_fabric.sim.tb_axi`; returns ``(tests, failed, run.log text)``."""
    env = {"NFABRIC_MANIFEST": str(verilog), "NFABRIC_SEEDS": str(seed),
           "NFABRIC_TRACES": str(traces["digits_cnn"].path.parent),
           "NFABRIC_TRACE_STEPS": "1", "NFABRIC_TRACE_LINES": "12"}
    run = run_cocotb(simulator, **manifest_design(verilog, "axi_controller", work),
                     test_module="neuron_fabric.sim.tb_axi", work=work, env=env,
                     test_filter=test_filter)
    assert run.ran, run.error
    return run.tests, run.failed, run.log_text()


# Verilator builds the small AXI top in about a minute: it runs with the slow set, and
# `make sim` runs the 512-bit AXI top on it.
@pytest.mark.parametrize("simulator", ["icarus",
                                       pytest.param("verilator", marks=pytest.mark.slow)])
def test_axi_top_matches_the_model(simulator, small_axi_verilog, tmp_path, traces):
    tests, failed, log = run_axi_top(simulator, small_axi_verilog, tmp_path, traces, seed=3)
    assert (tests, failed) == (4, 0), f"see {tmp_path / 'run.log'}"
    assert "FP32 lines byte-exact" in log


@pytest.mark.slow
def test_the_512_bit_axi_top_matches_the_model_on_verilator(tmp_path_factory, traces):
    """The default preset's AXI top (a Verilator build of about 7 minutes)."""
    from neuron_fabric.gen.axi import axi_folder_name, generate_axi
    from neuron_fabric.golden.params import PRESETS

    folder = tmp_path_factory.mktemp("verilog") / axi_folder_name(PRESETS["default"])
    generate_axi(PRESETS["default"], folder, log=lambda line: None)
    work = tmp_path_factory.mktemp("axi512")
    tests, failed, log = run_axi_top("verilator", folder, work, traces, seed=1)
    assert (tests, failed) == (4, 0), f"see {work / 'run.log'}"


@pytest.mark.parametrize("line_bytes", [16, 64])
def test_the_benchs_bursts_cover_their_lines_in_order_and_never_cross_a_page(line_bytes):
    """cocotbext-axi splits a burst that crosses 4 KiB in two, and the bench expects one
    answer a burst: its runs of lines, from any first line, stay within a page."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        first, count = int(rng.integers(0, 1 << 20)), int(rng.integers(0, 40))
        runs = _chunks(rng, count, first=first)
        assert [line for s, n in runs for line in range(s, s + n)] == list(range(count))
        for s, n in runs:
            start, end = (first + s) * line_bytes, (first + s + n) * line_bytes - 1
            assert n in (1, 2, 4) and start // 4096 == end // 4096, (first, s, n)
