"""The AXI4-Lite register subordinate in front of the CSR block, against the golden model's
registers, with random pauses on all five channels."""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from neuron_fabric.golden.controller import ControllerModel
from neuron_fabric.golden.params import PRESETS
from neuron_fabric.golden.regmap import Access, register_map
from neuron_fabric.hw.axi import Resp
from neuron_fabric.hw.axi_registers import AxiLiteRegisters
from neuron_fabric.hw.csr import CSRBlock

from axi_sim import Sink, Source, channel, step

SMALL = PRESETS["small"]


class RegistersBehindAxiLite(wiring.Component):
    """The adapter and a CSR block of the small preset's register map."""

    def __init__(self):
        self.regmap = register_map(SMALL)
        self.adapter = AxiLiteRegisters(regmap=self.regmap)
        self.csr = CSRBlock(regmap=self.regmap)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.adapter, m.submodules.csr = self.adapter, self.csr
        wiring.connect(m, self.adapter.csr, self.csr.bus)
        return m


def run_accesses(accesses, *, seed, pause):
    """Play ``accesses`` (``("w", addr, data, strobe)`` or ``("r", addr)``) over AXI4-Lite;
    returns the B and R beats and, for each B, the stored fields the cycle it rose."""
    dut = RegistersBehindAxiLite()
    bus, rng = dut.adapter.s_axil, np.random.default_rng(seed)
    aw = Source(bus.awvalid, bus.awready, channel(bus, "aw", ["addr"]), rng=rng, pause=pause)
    w = Source(bus.wvalid, bus.wready, channel(bus, "w", ["data", "strb"]), rng=rng, pause=pause)
    ar = Source(bus.arvalid, bus.arready, channel(bus, "ar", ["addr"]), rng=rng, pause=pause)
    b = Sink(bus.bvalid, bus.bready, channel(bus, "b", ["resp"]), rng=rng, pause=pause, name="B")
    r = Sink(bus.rvalid, bus.rready, channel(bus, "r", ["data", "resp"]), rng=rng, pause=pause,
             name="R")
    fields_at_b = []
    # One access at a time, as a simple driver would: the next waits for the answer.
    async def bench(ctx):
        for access in accesses:
            answered = (len(b.beats), len(r.beats))
            if access[0] == "w":
                aw.queue.append({"addr": access[1]})
                w.queue.append({"data": access[2], "strb": access[3]})
            else:
                ar.queue.append({"addr": access[1]})
            for _ in range(200):
                bvalid_before = ctx.get(bus.bvalid)
                await step(ctx, [aw, w, ar, b, r])
                if ctx.get(bus.bvalid) and not bvalid_before:
                    fields_at_b.append(int(ctx.get(dut.csr.fields.win0_base_addr)))
                if (len(b.beats), len(r.beats)) != answered:
                    break
            else:
                raise AssertionError(f"no answer to {access} in 200 cycles")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return b.beats, r.beats, fields_at_b


@pytest.mark.parametrize("seed", [0, 1])
def test_register_accesses_match_the_model_under_pauses(seed):
    regmap = register_map(SMALL)
    model = ControllerModel(SMALL)
    rng = np.random.default_rng(seed)
    writable = [reg for reg in regmap if any(f.access is Access.RW for f in reg.fields)]
    accesses, expected = [], []
    for reg in regmap:
        accesses.append(("r", reg.address))
        expected.append(("r", model.csr_read(reg.address)))
    for _ in range(40):
        reg = writable[int(rng.integers(len(writable)))]
        if rng.random() < 0.5:
            value = int(rng.integers(0, 1 << 32))
            accesses.append(("w", reg.address, value, 0xF))
            model.csr_write(reg.address, value)
            expected.append(("w", Resp.OKAY))
        accesses.append(("r", reg.address))
        expected.append(("r", model.csr_read(reg.address)))
    # An address with no register reads 0 and ignores a write.
    accesses += [("w", 0x80, 0x1234, 0xF), ("r", 0x80)]
    expected += [("w", Resp.OKAY), ("r", 0)]
    b, r, _ = run_accesses(accesses, seed=seed, pause=0.4)
    got_b, got_r = iter(b), iter(r)
    for index, (kind, want) in enumerate(expected):
        if kind == "w":
            assert next(got_b)["resp"] == want, f"access {index}: {accesses[index]}"
        else:
            beat = next(got_r)
            assert (beat["data"], beat["resp"]) == (want, Resp.OKAY), \
                f"access {index}: {accesses[index]} read {beat['data']:#x}, model {want:#x}"


def test_a_partial_write_strobe_writes_nothing_and_answers_slverr():
    base = register_map(SMALL)["WIN0_BASE"].address
    b, r, _ = run_accesses([("w", base, 0x55, 0xF), ("w", base, 0xAA, 0x7), ("r", base)],
                           seed=0, pause=0.0)
    assert [beat["resp"] for beat in b] == [Resp.OKAY, Resp.SLVERR]
    assert r[0]["data"] == 0x55


def test_b_rises_only_once_the_written_field_holds_its_value():
    """A manager that waits for B sees its write in effect (the controller asks a cycle
    between a register write and the next request)."""
    base = register_map(SMALL)["WIN0_BASE"].address
    values = [0x1111, 0x2222, 0x3333]
    _, _, fields_at_b = run_accesses([("w", base, v, 0xF) for v in values], seed=3, pause=0.3)
    assert fields_at_b == values


def test_a_bad_register_map_is_refused_by_name():
    with pytest.raises(TypeError, match="regmap must be a RegisterMap, not 3"):
        AxiLiteRegisters(regmap=3)
