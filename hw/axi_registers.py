"""The register map behind an AXI4-Lite subordinate (docs/design.md, "The AXI top")."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..golden.regmap import RegisterMap
from .axi import AxiLiteSignature, Resp
from .layouts import CSRBusSignature

__all__ = ["AxiLiteRegisters"]

#: Cycles from a strobe on the register bus to the answer: a read's data is there, a
#: written field holds its value (:class:`~.csr.CSRBlock`).
CSR_LATENCY = 2


class AxiLiteRegisters(wiring.Component):
    """AXI4-Lite subordinate in front of the controller's register bus.

    One access at a time: an address (with its data, for a write) is taken, strobed on the
    register bus the next cycle, and answered :data:`CSR_LATENCY` cycles after the strobe,
    when a read's data is there and a written field already holds its value, so a manager
    that waits for BVALID sees its write in effect. Reads and writes waiting together take
    turns. A write must strobe all four bytes: any other WSTRB writes nothing and answers
    SLVERR. Addresses without a register read 0 and ignore writes (OKAY), as on the
    register bus.

    **Throughput**: one access every ``CSR_LATENCY + 2`` cycles or so (registers are not a
    data path). **Backpressure**: BREADY and RREADY hold the answer; nothing else waits.
    Channel rules: AWREADY and WREADY rise together, only with both AWVALID and WVALID;
    BVALID and RVALID stay high until taken, their payload stable.

    Parameters
    ----------
    regmap : RegisterMap
        The register map (its address width is the bus's).

    Members
    -------
    s_axil : ``In(AxiLiteSignature(addr_width=regmap.address_bits))``
        The AXI4-Lite subordinate.
    csr : ``Out(CSRBusSignature(addr_width=regmap.address_bits))``
        The register bus, to :class:`~.csr.CSRBlock` (the controller's ``csr``).

    Raises
    ------
    TypeError
        When ``regmap`` is not a :class:`RegisterMap`.
    """

    def __init__(self, *, regmap):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"regmap must be a RegisterMap, not {regmap!r}")
        self.regmap = regmap
        width = regmap.address_bits
        super().__init__({
            "s_axil": In(AxiLiteSignature(addr_width=width)),
            "csr": Out(CSRBusSignature(addr_width=width)),
        })

    def elaborate(self, platform):
        m = Module()
        bus, csr = self.s_axil, self.csr
        addr = Signal.like(csr.addr)
        w_data = Signal(32)
        whole_word = Signal()       # the write strobed every byte
        writing_turn = Signal()     # with both waiting, whose turn it is
        writing = Signal()          # the access taken is a write
        wait = Signal(range(CSR_LATENCY))
        write_ready = bus.awvalid & bus.wvalid
        m.d.comb += [csr.addr.eq(addr), csr.w_data.eq(w_data), bus.rdata.eq(csr.r_data)]

        with m.FSM(name="access"):
            with m.State("IDLE"):
                with m.If(write_ready & (writing_turn | ~bus.arvalid)):
                    m.d.comb += [bus.awready.eq(1), bus.wready.eq(1)]
                    m.d.sync += [addr.eq(bus.awaddr), w_data.eq(bus.wdata),
                                 whole_word.eq(bus.wstrb.all()),
                                 writing.eq(1), writing_turn.eq(0)]
                    m.next = "STROBE"
                with m.Elif(bus.arvalid):
                    m.d.comb += bus.arready.eq(1)
                    m.d.sync += [addr.eq(bus.araddr), writing.eq(0), writing_turn.eq(1)]
                    m.next = "STROBE"
            with m.State("STROBE"):
                m.d.comb += [csr.w_stb.eq(writing & whole_word), csr.r_stb.eq(~writing)]
                m.d.sync += wait.eq(CSR_LATENCY - 2)
                m.next = "WAIT"
            with m.State("WAIT"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.next = "ANSWER"
            with m.State("ANSWER"):
                m.d.comb += [bus.bvalid.eq(writing), bus.rvalid.eq(~writing),
                             bus.bresp.eq(Mux(whole_word, Resp.OKAY, Resp.SLVERR)),
                             bus.rresp.eq(Resp.OKAY)]
                with m.If(Mux(writing, bus.bready, bus.rready)):
                    m.next = "IDLE"
        return m
