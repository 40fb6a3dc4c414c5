"""The one way the project builds and runs a cocotb test module (``sim/cocotb_run.py``).

A tiny counter on Icarus stands in for the emitted Verilog: its build takes a second.
"""

import json
import textwrap

import pytest

from neuron_fabric.sim.cocotb_bench import BLOCK_ROLES, BLOCKS_TOPLEVEL
from neuron_fabric.sim.cocotb_run import manifest_design, run_cocotb
from neuron_fabric.gen.tools import ToolError

COUNTER = textwrap.dedent("""\
    module counter (input wire clk, input wire rst, output reg [3:0] count);
        always @(posedge clk)
            if (rst) count <= 4'd0;
            else count <= count + 4'd1;
    endmodule
    """)

# One test passes, one fails, one reads an option from the environment.
COUNTER_TESTS = textwrap.dedent("""\
    import os

    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import ClockCycles, ReadOnly

    async def count_after(dut, cycles):
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        await ClockCycles(dut.clk, 2)
        dut.rst.value = 0
        await ClockCycles(dut.clk, cycles)
        await ReadOnly()
        return dut.count.value.to_unsigned()

    @cocotb.test(timeout_time=5, timeout_unit="us")
    async def counter_counts(dut):
        assert await count_after(dut, 3) == 3

    @cocotb.test(timeout_time=5, timeout_unit="us")
    async def counter_is_expected_to_be_wrong(dut):
        assert await count_after(dut, 3) == 4

    @cocotb.test(timeout_time=5, timeout_unit="us")
    async def counter_counts_as_the_environment_says(dut):
        assert await count_after(dut, 2) == int(os.environ["EXPECTED_COUNT"])
    """)


@pytest.fixture
def counter(tmp_path, monkeypatch):
    """The counter's Verilog, with its test module importable as ``counter_tests``."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "counter_tests.py").write_text(COUNTER_TESTS)
    monkeypatch.syspath_prepend(str(modules))
    source = tmp_path / "counter.v"
    source.write_text(COUNTER)
    return source


def run_counter(source, work, **options):
    return run_cocotb("icarus", toplevel="counter", sources=[source],
                      test_module="counter_tests", work=work, **options)


def test_passing_tests_give_a_clean_run(counter, tmp_path):
    lines = []
    run = run_counter(counter, tmp_path / "run", test_filter="counter_counts$", log=lines.append)
    assert run.ok and run.ran, run.error
    assert (run.tests, run.failed) == (1, 0)
    assert run.results_xml.is_file() and run.build_log.is_file()
    assert "counter_counts" in run.log_text()
    assert lines[0].startswith("building counter with icarus in ")
    assert lines[1].startswith("built in ")


def test_the_environment_reaches_the_tests(counter, tmp_path):
    run = run_counter(counter, tmp_path / "run", test_filter="as_the_environment_says",
                      env={"EXPECTED_COUNT": "2"})
    assert (run.tests, run.failed) == (1, 0), run.error


@pytest.mark.parametrize("under_pytest", [True, False], ids=["under-pytest", "as-a-script"])
def test_failing_tests_are_reported_under_pytest_and_from_a_script(counter, tmp_path,
                                                                   monkeypatch, under_pytest):
    # cocotb's runner exits under pytest and returns quietly from a script; the verdict
    # must not depend on which.
    if not under_pytest:
        monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    run = run_counter(counter, tmp_path / "run",
                      test_filter="counter_(counts|is_expected_to_be_wrong)$")
    assert run.ran and not run.ok
    assert (run.tests, run.failed) == (2, 1)
    assert run.error.startswith("1 of 2 cocotb tests failed")
    assert str(run.run_log) in run.error


def test_a_run_of_no_tests_fails(counter, tmp_path):
    run = run_counter(counter, tmp_path / "run", test_filter="no_such_test")
    assert not run.ok
    assert run.tests == 0
    assert "0 of 0 cocotb tests failed" in run.error


def test_a_build_error_names_the_build_log(counter, tmp_path):
    counter.write_text(COUNTER.replace("endmodule", ""))
    run = run_counter(counter, tmp_path / "run")
    assert not run.ran and not run.ok
    assert run.error.startswith("build failed") and str(run.build_log) in run.error
    assert run.tests == 0


def test_an_unknown_simulator_is_refused(counter, tmp_path):
    with pytest.raises(ValueError, match=r"^simulator must be one of icarus, verilator, "
                                         r"not 'ghdl'$"):
        run_cocotb("ghdl", toplevel="counter", sources=[counter], test_module="counter_tests",
                   work=tmp_path)


def test_a_missing_icarus_says_how_to_install_it(counter, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolError, match=r"iverilog and vvp not found on PATH.*"
                                             r"run `make iverilog`"):
        run_counter(counter, tmp_path / "run")


def test_a_missing_verilator_says_how_to_relocate_it(counter, tmp_path):
    with pytest.raises(ToolError, match=r"no-verilator/bin/verilator is missing.*"
                                             r"relocate-verilator"):
        run_cocotb("verilator", toplevel="counter", sources=[counter],
                   test_module="counter_tests", work=tmp_path / "run",
                   verilator_root=tmp_path / "no-verilator")


def fake_manifest(folder):
    """A manifest of a controller and of every block, each a module ``<role>_m`` in
    ``<role>.v`` with one input and one output."""
    ports = [dict(name="clk", direction="input", width=1),
             dict(name="x", direction="input", width=3),
             dict(name="y", direction="output", width=1)]
    blocks = {role: dict(module=f"{role}_m", file=f"{role}.v", ports=ports, payloads={})
              for role in ("controller", *BLOCK_ROLES)}
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(dict(
        name="fake", params={}, blocks=blocks, registers=[], verilator_config="fake.vlt")))
    return folder


def test_a_manifest_block_is_its_module_and_file(tmp_path):
    folder = fake_manifest(tmp_path / "verilog")
    design = manifest_design(folder, "controller", tmp_path / "work")
    assert design == dict(toplevel="controller_m", sources=[folder / "controller.v"],
                          verilator_config=folder / "fake.vlt")


def test_the_blocks_design_wraps_every_block(tmp_path):
    folder = fake_manifest(tmp_path / "verilog")
    design = manifest_design(folder, "blocks", tmp_path / "work")
    wrapper = tmp_path / "work" / f"{BLOCKS_TOPLEVEL}.v"
    assert design["toplevel"] == BLOCKS_TOPLEVEL
    assert design["sources"] == [*(folder / f"{role}.v" for role in BLOCK_ROLES), wrapper]
    text = wrapper.read_text()
    for role in BLOCK_ROLES:
        assert f"  {role}_m {role} (" in text and f"input wire [2:0] {role}__x;" in text
