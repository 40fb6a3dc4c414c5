"""The formal proofs: the quick subset holds, its covers are reached, its planted bugs are
caught, and the proofs' references agree with the golden model."""

import json

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from neuron_fabric.formal import __main__ as formal_main
from neuron_fabric.formal.blocks import gated_reference, majority_reference
from neuron_fabric.formal.bugs import BUGS, planted
from neuron_fabric.formal.catalogue import all_proofs
from neuron_fabric.formal.runner import Proof, sby_text
from neuron_fabric.golden import gbinary, gternary
from neuron_fabric.hw import sign_count


def evaluate(inputs, outputs, cases):
    """The values of ``outputs`` (combinational functions of ``inputs``) for each case."""
    m = Module()
    results = [Signal(len(out), name=f"out_{k}") for k, out in enumerate(outputs)]
    m.d.comb += [r.eq(out) for r, out in zip(results, outputs)]
    seen = []

    async def bench(ctx):
        for case in cases:
            for signal, value in zip(inputs, case):
                ctx.set(signal, value)
            seen.append(tuple(ctx.get(r) for r in results))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return seen


def test_the_majority_reference_is_the_golden_majority():
    count, workers = Signal(7), Signal(7)
    sign, not_tie = majority_reference(count, workers)
    cases = [(n, w) for w in range(1, 65) for n in range(w + 1)]
    got = evaluate([count, workers], [sign, not_tie], cases)
    want = np.concatenate([
        gbinary.majority(np.array([[n for n, workers in cases if workers == w]], dtype=np.uint8),
                         num_workers=w)[0] for w in range(1, 65)])
    assert [s for s, _ in got] == [int(v == -1) for v in want]
    assert [t for _, t in got] == [int(v != 0) for v in want]


def test_the_gate_reference_is_the_golden_gate():
    total, gate = Signal(signed(8)), Signal(8)
    cases = [(s, g) for g in range(0, 256, 3) for s in range(-64, 65)]
    got = evaluate([total, gate], [gated_reference(total, gate)], cases)
    want = [int(gternary.gate(np.array([[s]], dtype=np.int8), gate=g)[0, 0]) for s, g in cases]
    assert [code for (code,) in got] == [{0: 0b00, 1: 0b01, -1: 0b11}[v] for v in want]


def test_planting_a_bug_replaces_one_name_and_puts_it_back():
    shipped = sign_count.majority_thresholds
    with planted(BUGS["tie_rule"]):
        assert sign_count.majority_thresholds is not shipped
    assert sign_count.majority_thresholds is shipped


@pytest.mark.parametrize("name", sorted(BUGS))
def test_every_planted_bug_replaces_names_the_hardware_still_has(name):
    """Planting needs every name a bug replaces to exist, so a name the hardware renames
    fails here at once, not deep in `make formal`."""
    with planted(BUGS[name]):
        pass


def test_every_planted_bug_has_a_proof_that_must_catch_it():
    caught = {p.bug for p in all_proofs() if p.bug is not None}
    assert caught == set(BUGS)
    assert all(p.expect == "fail" for p in all_proofs() if p.bug is not None)


def test_a_proof_refuses_an_unknown_mode_or_bug():
    with pytest.raises(ValueError, match="mode must be one of"):
        Proof("x", "g", "c", "sometimes", 1, lambda: None)
    with pytest.raises(ValueError, match="bug must be one of"):
        Proof("x", "g", "c", "bmc", 1, lambda: None, bug="no_such_bug")
    # Skipping steps would weaken a proof meant to pass.
    with pytest.raises(ValueError, match="only a bounded check of a planted bug skips"):
        Proof("x", "g", "c", "bmc", 10, lambda: None, skip=5)
    with pytest.raises(ValueError, match="skip must be below the depth"):
        Proof("x", "g", "c", "bmc", 10, lambda: None, bug="tie_rule", skip=10)
    assert "skip 9" in sby_text(Proof("x", "g", "c", "bmc", 10, lambda: None,
                                      bug="tie_rule", skip=9))


def test_the_deep_covers_are_asked_for_by_the_deep_cover_proof():
    from neuron_fabric.formal.catalogue import _controller_block
    from neuron_fabric.formal.controller import ControllerSpec
    with pytest.raises(TypeError, match="deep_covers must be a bool, not 2"):
        ControllerSpec(controller=_controller_block(), checks=(), deep_covers=2)
    proofs = {p.name: p for p in all_proofs()}
    assert proofs["controller_deep_cover"].spec().deep_covers
    assert not proofs["controller_contract_cover"].spec().deep_covers


def test_the_readouts_deep_check_its_cover_and_its_bug_share_one_environment():
    """The second lifetime's readouts are checked, covered and shown to catch a bug on the
    same one-tile configuration with window traffic, to the depth that reaches them."""
    from neuron_fabric.formal.catalogue import (_controller_block, DEEP_BUFFER_DEPTH,
                                                DEEP_DEPTH, PROOF_TILE_LANES)
    from neuron_fabric.formal.controller import ControllerSpec
    with pytest.raises(TypeError, match="window_traffic must be a bool, not 'yes'"):
        ControllerSpec(controller=_controller_block(), checks=(), window_traffic="yes")
    proofs = {p.name: p for p in all_proofs()}
    lifetimes = [proofs[name] for name in ("controller_aggregation_deep",
                                           "controller_aggregation_deep_cover",
                                           "bug_clear_folded_onto")]
    for proof in lifetimes:
        spec = proof.spec()
        assert spec.window_traffic and spec.checks == {"handshake", "aggregation"}
        assert spec.dut.params.line_bits == PROOF_TILE_LANES
        assert spec.dut.buffer_depth == DEEP_BUFFER_DEPTH
        assert proof.depth == DEEP_DEPTH and proof.config.startswith(lifetimes[0].config)
    assert [p.mode for p in lifetimes] == ["bmc", "cover", "bmc"]
    assert lifetimes[1].spec().deep_covers and lifetimes[2].bug == "clear_folded_onto"
    assert not proofs["controller_aggregation"].spec().window_traffic


def test_the_saturating_proofs_run_on_tiles_whose_lanes_fill():
    """The saturating configuration's tiles fold with the route engines, the others' with
    the pair adders, so the top's saturation is checked only where it can happen."""
    from neuron_fabric.formal.catalogue import PROOF_PARAMS, SATURATING
    from neuron_fabric.hw.pair_fold import lanes_can_fill
    proofs = {p.name: p for p in all_proofs()}
    for name in ("controller_aggregation_saturating", "controller_registers_saturating",
                 "controller_cover_saturating", "bug_saturation_dropped"):
        params = proofs[name].spec().dut.params
        assert params == SATURATING
        assert lanes_can_fill(max_workers=params.max_workers, counter_bits=params.counter_bits)
    assert not lanes_can_fill(max_workers=PROOF_PARAMS.max_workers,
                              counter_bits=PROOF_PARAMS.counter_bits)


def test_the_quick_proofs_hold_reach_their_covers_and_catch_their_bugs(tmp_path):
    """`make formal --quick`: every block unbounded, a short bounded check of the top, and the
    block-level planted bugs, each answering as expected with its traces."""
    assert formal_main.main(["--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {row["name"]: row for row in report["proofs"]}
    assert {p.name for p in all_proofs() if p.quick} == set(rows)
    for name, row in rows.items():
        assert row["ok"], f"{name}: {row['status']}, expected {row['expect']}"
        if row["mode"] == "prove":
            assert row["depth"] == "unbounded"
        if row["mode"] == "cover" or row["bug"]:
            assert row["traces"], f"{name} left no trace"
    assert (tmp_path / "report.md").read_text().count("| ") > len(rows)
