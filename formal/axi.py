"""The AXI top's channel rules (docs/design.md, "The AXI top"), bounded, with covers.

:class:`AxiSpec` drives every input of an :class:`~neuron_fabric.hw.axi_controller.AxiController`
with arbitrary values under AXI's rules for the other side and asserts them of the top:

- *held*: on every channel, VALID stays high until READY and the payload does not change
  while it waits: assumed of the managers' channels (``s_axi`` and ``s_axil`` AW, W and AR)
  and of the memory's answers (``m_axi`` B and R), asserted of the top's (``s_axi`` and
  ``s_axil`` B and R, ``m_axi`` AW, W and AR). That no VALID waits on its READY is checked
  on the netlist (:func:`~.runner.netlist_script`).
- *bursts*: for the ``K``-th write burst (``K`` arbitrary), its B is the ``K``-th, carries its
  AWID and comes after its last W beat was taken; no B comes without a burst. For the
  ``K``-th read burst, its beats carry its ARID and RLAST is high on its ``ARLEN + 1``-th
  beat and on no other; no R beat comes without a burst.

The memory answers only what it was asked (a B after a write's AW and W, an R after an AR).
The written lines are zeros and line addresses below 16: the rules are about handshakes, and
wide values carried through the controller only slow the solver.
The registers are read at any time and not written: the configuration stays at reset
(every window off), so the requests that reach the controller go to memory or are refused
there; configuring a window through AXI4-Lite takes more steps than the bound. Covers show
a write burst of two beats and a read burst of two beats answered OKAY.
"""

import types

from amaranth.asserts import AnyConst
from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal

from ..golden.params import ADDR_BITS
from ..hw.axi import LEN_BITS, Resp, line_size
from ..hw.axi_controller import AxiController
from .rules import StreamRules, reset_at_start

__all__ = ["AxiSpec", "axi_channel", "AXI_OUTPUTS"]

#: Width of the spec's burst and beat counts: more than any depth it is checked to.
COUNT_BITS = 7

#: The top's channels whose VALID it drives: ``(prefix, channel)``.
AXI_OUTPUTS = (("s_axi", "b"), ("s_axi", "r"), ("s_axil", "b"), ("s_axil", "r"),
               ("m_axi", "aw"), ("m_axi", "w"), ("m_axi", "ar"))
#: The channels whose VALID the top takes.
AXI_INPUTS = (("s_axi", "aw"), ("s_axi", "w"), ("s_axi", "ar"), ("s_axil", "aw"),
              ("s_axil", "w"), ("s_axil", "ar"), ("m_axi", "b"), ("m_axi", "r"))


def axi_channel(top, prefix, channel):
    """One AXI channel of ``top`` as a stream: ``valid``, ``ready`` and its other signals
    joined as ``payload``."""
    start = f"{prefix}_{channel}"
    names = [name for name in top.signature.members
             if name.startswith(start) and name not in (f"{start}valid", f"{start}ready")]
    return types.SimpleNamespace(valid=getattr(top, f"{start}valid"),
                                 ready=getattr(top, f"{start}ready"),
                                 payload=Cat(getattr(top, name) for name in names),
                                 fields={name[len(start):]: getattr(top, name)
                                         for name in names})


class AxiSpec(Elaboratable):
    """The channel rules of ``top`` (an :class:`AxiController`), as the module says."""

    def __init__(self, *, top):
        if not isinstance(top, AxiController):
            raise TypeError(f"top must be an AxiController, not {top!r}")
        self.dut = top

    def elaborate(self, platform):
        m = Module()
        m.submodules.top = dut = self.dut
        running = reset_at_start(m)
        ch = {(prefix, name): axi_channel(dut, prefix, name)
              for prefix, name in AXI_INPUTS + AXI_OUTPUTS}
        for (prefix, name) in AXI_INPUTS:
            StreamRules.drive_input(m, ch[prefix, name], name=f"{prefix}_{name}")
        for (prefix, name) in AXI_OUTPUTS:
            StreamRules.check_output(m, ch[prefix, name], name=f"{prefix}_{name}",
                                     active=running)

        def count(prefix, name, *, when=1):
            c = ch[prefix, name]
            counter = Signal(COUNT_BITS, name=f"{prefix}_{name}_count")
            m.d.sync += counter.eq(counter + (c.valid & c.ready & when))
            return counter

        # ---- The memory answers what it was asked, and nothing else.
        m_aw, m_w, m_b = count("m_axi", "aw"), count("m_axi", "w"), count("m_axi", "b")
        m_ar, m_r = count("m_axi", "ar"), count("m_axi", "r")
        m.d.comb += [Assume(~ch["m_axi", "b"].valid | ((m_aw != m_b) & (m_w != m_b))),
                     Assume(~ch["m_axi", "r"].valid | (m_ar != m_r))]

        # ---- The data port's bursts.
        aw, w, ar = ch["s_axi", "aw"], ch["s_axi", "w"], ch["s_axi", "ar"]
        b, r = ch["s_axi", "b"], ch["s_axi", "r"]
        s_aw, s_w, s_b = count("s_axi", "aw"), count("s_axi", "w"), count("s_axi", "b")
        s_ar = count("s_axi", "ar")
        s_r_bursts = count("s_axi", "r", when=r.fields["last"])

        # ---- The rules are about handshakes, not bits: the written lines are zeros and line
        # addresses below 16, so that the solver carries no wide values through the
        # controller (the memory's read data stays free: R's payload is checked held).
        aw_line = aw.fields["addr"] >> line_size(dut.params.line_bits)
        ar_line = ar.fields["addr"] >> line_size(dut.params.line_bits)
        m.d.comb += [Assume(w.fields["data"] == 0), Assume(aw_line[:ADDR_BITS] < 16),
                     Assume(ar_line[:ADDR_BITS] < 16)]

        # ---- No register writes: the configuration stays at its reset values (every
        # window off), since configuring a window through AXI4-Lite takes more steps than
        # the bound. Register reads are free.
        m.d.comb += Assume(~ch["s_axil", "aw"].valid & ~ch["s_axil", "w"].valid)

        # The K-th write burst: its B is the K-th, with its ID, after its last W beat.
        beats_owed = Signal(COUNT_BITS + LEN_BITS)    # W beats of the bursts taken so far
        tag = Signal(COUNT_BITS)
        m.d.comb += tag.eq(AnyConst(COUNT_BITS))
        aw_taken = aw.valid & aw.ready
        m.d.sync += beats_owed.eq(beats_owed + Mux(aw_taken, aw.fields["len"] + 1, 0))
        w_tagged, w_id, w_end, w_len = (Signal(), Signal.like(aw.fields["id"]),
                                        Signal.like(beats_owed), Signal(LEN_BITS))
        with m.If(aw_taken & (s_aw == tag)):
            m.d.sync += [w_tagged.eq(1), w_id.eq(aw.fields["id"]), w_len.eq(aw.fields["len"]),
                         w_end.eq(beats_owed + aw.fields["len"] + 1)]
        b_taken = b.valid & b.ready
        tagged_b = b_taken & (s_b == tag)
        with m.If(running & b_taken):
            m.d.comb += Assert(s_b != s_aw)                     # none invented
        with m.If(running & tagged_b):
            m.d.comb += [Assert(w_tagged), Assert(b.fields["id"] == w_id),
                         Assert(s_w >= w_end)]

        # The K-th read burst: its beats carry its ID, RLAST on its last one only.
        r_tagged, r_id, r_len = Signal(), Signal.like(ar.fields["id"]), Signal(LEN_BITS)
        with m.If(ar.valid & ar.ready & (s_ar == tag)):
            m.d.sync += [r_tagged.eq(1), r_id.eq(ar.fields["id"]), r_len.eq(ar.fields["len"])]
        r_taken = r.valid & r.ready
        beat = Signal(LEN_BITS + 1)                 # beats of the burst being answered
        with m.If(r_taken):
            m.d.sync += beat.eq(Mux(r.fields["last"], 0, beat + 1))
        tagged_r = r_taken & (s_r_bursts == tag)
        with m.If(running & r_taken):
            m.d.comb += Assert(s_r_bursts != s_ar)              # none invented
        with m.If(running & tagged_r):
            m.d.comb += [Assert(r_tagged), Assert(r.fields["id"] == r_id),
                         Assert(r.fields["last"] == (beat == r_len))]

        # ---- Covers: a two-beat write burst and a two-beat read burst, answered OKAY.
        m.d.comb += [
            Cover(running & tagged_b & (w_len == 1) & (b.fields["resp"] == Resp.OKAY)),
            Cover(running & tagged_r & r.fields["last"] & (r_len == 1)
                  & (r.fields["resp"] == Resp.OKAY)),
        ]
        return m
