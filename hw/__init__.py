"""Amaranth hardware blocks of the controller datapath (imports the golden model, never the testbenches)."""
