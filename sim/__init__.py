"""Simulation of the emitted Verilog: cocotb testbenches (one test module per block), the one
way to build and run them with Icarus Verilog or Verilator
(:func:`neuron_fabric.sim.cocotb_run.run_cocotb`, used by the regression and the pytest
runners under ``tests/``), and the smoke test of both simulators
(:mod:`neuron_fabric.sim.toolchain`; the tools themselves are found by
:mod:`neuron_fabric.gen.tools`)."""
