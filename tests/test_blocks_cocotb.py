"""The block testbenches (``sim/tb_blocks.py``) on Icarus: a short subset of the regression.

Every block of the small preset (128-bit lines) is built side by side
(:func:`neuron_fabric.sim.cocotb_bench.blocks_wrapper`) and each block's cocotb test runs on
its own, with one seed and a few vectors per lane engine. ``make sim`` runs them with more
vectors on Icarus and Verilator.
"""

import pytest

from neuron_fabric.sim.cocotb_bench import BLOCK_ROLES
from neuron_fabric.sim.cocotb_run import manifest_design, run_cocotb

#: Input vectors per lane-engine test: Icarus spends a good part of a second on each.
VECTORS = 6


@pytest.mark.parametrize("seed", [3])
@pytest.mark.parametrize("role", BLOCK_ROLES)
def test_block_matches_the_model_on_icarus(small_verilog, tmp_path, role, seed):
    # The bench names each test after its block: sign_count_folds_..., csr_block_follows_...
    run = run_cocotb("icarus", **manifest_design(small_verilog, "blocks", tmp_path),
                     test_module="neuron_fabric.sim.tb_blocks", work=tmp_path,
                     test_filter=rf"\.{role}_",
                     env={"NFABRIC_MANIFEST": str(small_verilog), "NFABRIC_SEEDS": str(seed),
                          "NFABRIC_VECTORS": str(VECTORS)})
    assert (run.tests, run.failed) == (1, 0), run.error
