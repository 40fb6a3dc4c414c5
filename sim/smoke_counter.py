"""cocotb tests of the toolchain smoke counter (``smoke_counter``, written by
:mod:`neuron_fabric.sim.toolchain`).

The design is an 8-bit counter with ports ``clk``, ``rst`` (synchronous, active high),
``en`` and ``count``. The tests check counting with wrap-around, holding while ``en`` is
low, and reset. Each has a timeout so a broken simulator fails instead of hanging.
"""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

__all__ = ["counter_counts_and_wraps", "counter_holds_without_enable"]

CLOCK_NS = 10
WIDTH = 8


async def _reset(dut) -> None:
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    dut.en.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


@cocotb.test(timeout_time=20, timeout_unit="us")
async def counter_counts_and_wraps(dut):
    """With ``en`` high, ``count`` steps by one per cycle and wraps at 2**8; reset clears it."""
    await _reset(dut)
    await ReadOnly()
    assert dut.count.value.to_unsigned() == 0, "count must be 0 after reset"
    await RisingEdge(dut.clk)
    dut.en.value = 1
    cycles = 2**WIDTH + 5
    for expected in range(1, cycles + 1):
        await RisingEdge(dut.clk)
        await ReadOnly()
        got = dut.count.value.to_unsigned()
        assert got == expected % 2**WIDTH, f"cycle {expected}: count {got}"
    await RisingEdge(dut.clk)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await ReadOnly()
    assert dut.count.value.to_unsigned() == 0, "synchronous reset must clear count"


@cocotb.test(timeout_time=5, timeout_unit="us")
async def counter_holds_without_enable(dut):
    """With ``en`` low, ``count`` keeps its value."""
    await _reset(dut)
    dut.en.value = 1
    await ClockCycles(dut.clk, 7)
    dut.en.value = 0
    await RisingEdge(dut.clk)
    await ReadOnly()
    held = dut.count.value.to_unsigned()
    assert held == 7, f"count must be 7 after 7 enabled cycles, not {held}"
    for _ in range(10):
        await RisingEdge(dut.clk)
        await ReadOnly()
        assert dut.count.value.to_unsigned() == held, "count must hold while en is low"
