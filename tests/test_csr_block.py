"""The CSR block generated from register map data: every field action, cycle by cycle."""

import pytest
from amaranth.sim import Simulator

from neuron_fabric.golden.params import FabricParams
from neuron_fabric.golden.regmap import Access, Field, Register, RegisterMap, register_map
from neuron_fabric.hw.csr import CSRBlock


def small_map():
    return RegisterMap(FabricParams(), (
        Register("ID", 0x0, (Field("MAGIC", 0, 16, Access.R, const=0xBEEF),)),
        Register("CTRL", 0x4, (Field("MODE", 0, 3, Access.RW, reset=5),
                               Field("GO", 4, 1, Access.W),
                               Field("ARM", 8, 1, Access.RW1S))),
        Register("FLAGS", 0x8, (Field("A", 0, 1, Access.RW1C), Field("B", 3, 1, Access.RW1C))),
        Register("LEVEL", 0xC, (Field("COUNT", 4, 12, Access.R),)),
    ))


def simulate(block, body):
    sim = Simulator(block)
    sim.add_clock(1e-8)
    sim.add_testbench(body)
    sim.run()


async def write(ctx, bus, addr, value):
    ctx.set(bus.addr, addr)
    ctx.set(bus.w_data, value)
    ctx.set(bus.w_stb, 1)
    await ctx.tick()
    ctx.set(bus.w_stb, 0)


async def read(ctx, bus, addr):
    ctx.set(bus.addr, addr)
    ctx.set(bus.r_stb, 1)
    await ctx.tick()
    ctx.set(bus.r_stb, 0)
    await ctx.tick()
    return ctx.get(bus.r_data)


def test_every_field_action():
    block = CSRBlock(regmap=small_map())
    f, bus = block.fields, block.bus

    async def body(ctx):
        assert await read(ctx, bus, 0x0) == 0xBEEF
        assert await read(ctx, bus, 0x4) == 5             # RW reset value
        assert ctx.get(f.ctrl_mode) == 5
        await write(ctx, bus, 0x4, 0x12)                 # MODE=2, GO=1
        assert ctx.get(f.ctrl_go) == 1 and ctx.get(f.ctrl_written) == 1  # pulses now ...
        assert ctx.get(f.ctrl_mode) == 5                  # ... the stored field a cycle later
        await ctx.tick()
        assert ctx.get(f.ctrl_go) == 0 and ctx.get(f.ctrl_written) == 0  # ... for one cycle
        assert ctx.get(f.ctrl_mode) == 2
        assert await read(ctx, bus, 0x4) == 0x2           # W reads 0
        await write(ctx, bus, 0x4, 0x3)
        assert await read(ctx, bus, 0x4) == 0x3           # a read strobed next returns it
        await write(ctx, bus, 0x4, 0x2)
        await write(ctx, bus, 0x4, 0x100 | 0x2)          # ARM set by writing 1
        assert ctx.get(f.ctrl_arm) == 1
        ctx.set(f.ctrl_arm_clear, 1)                      # ... cleared by the hardware
        await ctx.tick()
        ctx.set(f.ctrl_arm_clear, 0)
        assert ctx.get(f.ctrl_arm) == 0

        ctx.set(f.flags_a_set, 1)
        ctx.set(f.flags_b_set, 1)
        await ctx.tick()
        ctx.set(f.flags_a_set, 0)
        ctx.set(f.flags_b_set, 0)
        assert await read(ctx, bus, 0x8) == 0b1001
        await write(ctx, bus, 0x8, 0)                     # writing 0 clears nothing
        assert await read(ctx, bus, 0x8) == 0b1001
        ctx.set(f.flags_a_set, 1)                         # set and clear together: set wins
        await write(ctx, bus, 0x8, 0b1001)
        ctx.set(f.flags_a_set, 0)
        assert await read(ctx, bus, 0x8) == 0b0001

        ctx.set(f.level_count, 0xABC)
        assert await read(ctx, bus, 0xC) == 0xABC0        # R input at its offset
        await write(ctx, bus, 0xC, 0xFFFF_FFFF)           # R ignores writes
        assert await read(ctx, bus, 0x6) == 0             # not a register: reads 0
        await write(ctx, bus, 0x5, 0x7)                   # unaligned writes are ignored
        await ctx.tick()
        assert ctx.get(f.ctrl_mode) == 2

    simulate(block, body)


def test_read_data_arrives_two_cycles_after_the_strobe_one_read_a_cycle():
    block = CSRBlock(regmap=small_map())
    bus = block.bus

    async def body(ctx):
        ctx.set(bus.addr, 0x0)
        ctx.set(bus.r_stb, 1)
        assert ctx.get(bus.r_data) == 0
        await ctx.tick()
        ctx.set(bus.addr, 0x4)                 # a second read, the next cycle
        assert ctx.get(bus.r_data) == 0        # the first is not back yet
        await ctx.tick()
        ctx.set(bus.r_stb, 0)
        assert ctx.get(bus.r_data) == 0xBEEF   # ID, two cycles after its strobe
        await ctx.tick()
        assert ctx.get(bus.r_data) == 5        # CTRL, the cycle after
        await ctx.tick()
        assert ctx.get(bus.r_data) == 5        # held until the next read

    simulate(block, body)


def test_ports_follow_the_register_map():
    regmap = register_map(FabricParams(num_windows=3))
    members = CSRBlock(regmap=regmap).fields.signature.members
    assert "win2_config_readout" in members and "win2_base_written" in members
    assert "errors_saturated_set" in members and "stall_cycles_count" in members
    assert "id_magic" not in members  # constants need no port


def test_a_regmap_is_required():
    with pytest.raises(TypeError, match=r"^regmap must be a RegisterMap, not \{\}$"):
        CSRBlock(regmap={})
