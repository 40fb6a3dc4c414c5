"""The CSR block, generated from the register map data (docs/design.md, "Register map")."""

from amaranth.asserts import Initial
from amaranth.hdl import Assert, C, Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..golden.regmap import Access, RegisterMap
from .lane_logic import KEEP, kept_tree
from .layouts import CSRBusSignature

__all__ = ["CSRBlock", "field_port"]


def field_port(register, field):
    """The name of the port of ``register``'s ``field`` (``"control_enable"``)."""
    return f"{register.name}_{field.name}".lower()


def written_port(register):
    """The name of the pulse that follows a write to ``register`` (``"win0_base_written"``)."""
    return f"{register.name}_written".lower()


class CSRBlock(wiring.Component):
    """32-bit registers with the actions of a :class:`~neuron_fabric.golden.regmap.RegisterMap`.

    Each field becomes a port of ``fields``, named ``<register>_<field>`` in lower case:

    - ``RW``: an output holding the stored value (reset to the field's reset value), which
      takes a write the cycle after its strobe;
    - ``W``: an output that pulses for one cycle, the cycle after a write of 1;
    - ``RW1C``: an input ``..._set``: a sticky flag set by the hardware, cleared by writing
      1 (a set in the same cycle as the clear wins, so no event is lost), and an output
      holding the flag (for a status pin or an interrupt);
    - ``RW1S``: an output set by writing 1, and an input ``..._clear`` for the hardware;
    - ``R`` with a constant: no port, the constant is read;
    - ``R`` otherwise: an input whose value is read (counters).

    Every register with a stored field also has an output ``<register>_written`` that pulses
    the cycle after a write to it, for side effects (a window write empties the window).

    The bus (``bus``, :class:`~.layouts.CSRBusSignature`) never waits: a read returns data
    two cycles after ``r_stb`` (the register's value the cycle after it), one read per
    cycle. A write's pulses, flag clears and ``_written`` come in the cycle after ``w_stb``;
    a stored field holds the written value from the cycle after that, and a read strobed
    after the write's strobe returns it. Byte addresses that are not a register read 0 and
    ignore writes.

    Parameters
    ----------
    regmap : RegisterMap
        The register map.

    Members
    -------
    bus : ``In(CSRBusSignature(addr_width=regmap.address_bits))``
    fields : ``Out(wiring.Signature(...))``
        One port per field as listed above.

    Raises
    ------
    TypeError
        When ``regmap`` is not a :class:`RegisterMap`.
    """

    def __init__(self, *, regmap):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"regmap must be a RegisterMap, not {regmap!r}")
        self.regmap = regmap
        members = {}
        for reg in regmap:
            stored = False
            for f in reg.fields:
                name = field_port(reg, f)
                if f.access in (Access.RW, Access.RW1S):
                    members[name] = Out(f.width, init=f.reset)
                    stored = True
                if f.access is Access.W:
                    members[name] = Out(1)
                elif f.access is Access.RW1C:
                    members[name] = Out(1)
                    members[name + "_set"] = In(1)
                    stored = True
                elif f.access is Access.RW1S:
                    members[name + "_clear"] = In(1)
                elif f.access is Access.R and f.const is None:
                    members[name] = In(f.width)
            if stored:
                members[written_port(reg)] = Out(1)
        super().__init__({
            "bus": In(CSRBusSignature(addr_width=regmap.address_bits)),
            "fields": Out(wiring.Signature(members)),
        })

    def elaborate(self, platform):
        m = Module()
        bus, ports = self.bus, self.fields
        # A read takes two cycles: the first registers each register's address match, the
        # second ORs every register's bits gated by its match, a tree of kept four-input
        # gates (``kept_tree``). The address's decode and the OR would not fit one cycle
        # (the registers sit all over the controller); indexing a table by the address would
        # build a mux tree over every word the address can reach (0 where no register is),
        # and an OR left to synthesis a chain of LUTs.
        readers = [[] for _ in range(32)]   # per bit: (register selected, the bit's value)
        reading = Signal()
        m.d.sync += reading.eq(bus.r_stb)
        # A stored (RW) field takes a write a cycle after the strobe, from its register's
        # address match and the data, registered: the decode and the fields it loads (the
        # field beside its logic, its read-back copy beside the read tree) would not fit one
        # cycle either. The field and its copy each load from a match register of their own.
        # Pulses, flags and side effects keep the strobe's cycle.
        stored_data = Signal(32, name="w_data_stored", reset_less=True)
        m.d.sync += stored_data.eq(bus.w_data)
        for reg in self.regmap:
            addressed = bus.addr == reg.address
            selected = Signal(name=f"{reg.name.lower()}_read")
            m.d.sync += selected.eq(bus.r_stb & addressed)
            write = bus.w_stb & addressed
            stores = None
            if any(f.access is Access.RW for f in reg.fields):
                stores = {copy: Signal(name=f"{reg.name.lower()}_store_{copy}", attrs=KEEP)
                          for copy in ("field", "readback")}
                m.d.sync += [store.eq(write) for store in stores.values()]
            value = [(f, self._field(m, platform, reg, f, write, stores, stored_data))
                     for f in reg.fields]  # (field, what it reads) pairs
            if hasattr(ports, written_port(reg)):
                m.d.sync += getattr(ports, written_port(reg)).eq(write)
            for f, v in value:
                if v is None:       # a write-only field reads 0
                    continue
                for bit in range(min(f.width, 32 - f.offset)):
                    if isinstance(v, int):   # a constant field: its ones read as the match
                        if v >> bit & 1:
                            readers[f.offset + bit].append((selected, C(1, 1)))
                    else:
                        readers[f.offset + bit].append((selected, Value.cast(v)[bit]))
        read = _read_tree(m, readers)
        with m.If(reading):
            m.d.sync += bus.r_data.eq(read)
        return m

    def _field(self, m, platform, reg, f, write, stores, stored_data):
        """Drive field ``f`` of register ``reg`` by its access rule; returns what a read
        of it shows (a signal, or the constant of a constant field)."""
        ports, bus = self.fields, self.bus
        port = getattr(ports, field_port(reg, f), None)
        bits = bus.w_data[f.offset:f.offset + f.width]
        if f.access is Access.RW:
            # The read tree has a copy of its own, kept through synthesis: the field itself
            # drives logic across the control plane, and the copy can sit by the tree.
            readback = Signal.like(port, name=f"{field_port(reg, f)}_readback", attrs=KEEP)
            stored = stored_data[f.offset:f.offset + f.width]
            with m.If(stores["field"]):
                m.d.sync += port.eq(stored)
            with m.If(stores["readback"]):
                m.d.sync += readback.eq(stored)
            if platform == "formal":
                # The copies are loaded together, so they never differ once reset has set
                # them: the invariant that lets induction see it.
                with m.If(~Initial()):
                    m.d.comb += [Assert(readback == port),
                                 Assert(stores["readback"] == stores["field"])]
            return readback
        if f.access is Access.W:
            m.d.sync += port.eq(write & bits)
            return None
        if f.access is Access.RW1C:
            with m.If(getattr(ports, field_port(reg, f) + "_set")):
                m.d.sync += port.eq(1)
            with m.Elif(write & bits):
                m.d.sync += port.eq(0)
            return port
        if f.access is Access.RW1S:
            with m.If(write & bits):
                m.d.sync += port.eq(1)
            with m.Elif(getattr(ports, field_port(reg, f) + "_clear")):
                m.d.sync += port.eq(0)
            return port
        return f.const if f.const is not None else port


def _read_tree(m, readers):
    """The read data: for each bit, the OR of its registers' bits gated by their matches,
    two registers' bits to a leaf (four inputs, one LUT), then a tree of kept gates."""
    return Cat(kept_tree(m, [Cat(s & v for s, v in terms[i:i + 2]).any()
                             for i in range(0, len(terms), 2)], "any", f"read_{bit}")
               if terms else C(0, 1)
               for bit, terms in enumerate(readers))
