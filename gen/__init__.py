"""Verilog generation from the Amaranth blocks."""
