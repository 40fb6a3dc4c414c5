"""The CSR register map as data (docs/design.md, "Register map").

One definition generates the hardware's register block, the Markdown register reference,
the constants the golden model uses and the register-access helper of the testbenches.
Registers are 32 bits on a 32-bit bus, at byte addresses that are multiples of 4. Field
actions follow amaranth-soc's names:

- ``R``: read-only. A field with ``const`` set always reads that value (identification and
  capabilities); any other R field reads a value the hardware drives (counters).
- ``W``: write-only strobe: writing 1 triggers an action for one cycle; it reads 0.
- ``RW``: read-write storage, with a reset value.
- ``RW1C``: sticky flag set by the hardware, cleared by writing 1.
- ``RW1S``: set by writing 1, cleared by the hardware (listed for completeness).
"""

import dataclasses
import enum

from .formats import GATE_BITS, ROUTE_SPECS, Readout, Route, enum_bits
from .params import ADDR_BITS, FabricParams

__all__ = ["Access", "Field", "Register", "RegisterMap", "register_map", "ID_MAGIC", "VERSION",
           "ERROR_FLAGS", "COUNTERS", "TIMING_COUNTERS", "window_register"]

#: "NFAB" in ASCII: the ID register's value.
ID_MAGIC = 0x4E46_4142
#: Register map version (major, minor): bump the major on an incompatible change.
VERSION = (1, 0)
#: Sticky error flags, in bit order of the ERRORS register.
ERROR_FLAGS = ("INVALID_CODE", "SATURATED", "DUPLICATE", "NOT_READY", "BAD_REQUEST", "BAD_CONFIG")
ERROR_DOCS = {
    "INVALID_CODE": "An accepted G-Ternary line held the invalid code 10 (counted as 0).",
    "SATURATED": "An accepted line saturated a counter or sum.",
    "DUPLICATE": "A worker wrote a slot it had already written (refused).",
    "NOT_READY": "A slot was read before all NUM_WORKERS had written it.",
    "BAD_REQUEST": "A bad request: worker id >= NUM_WORKERS, or READ_CLEAR outside a window.",
    "BAD_CONFIG": "A request hit a misconfigured window (SIZE > DEPTH, READOUT not of its "
                  "ROUTE) or NUM_WORKERS is outside 1 to MAX_WORKERS.",
}
#: Event counters, 32 bits each, wrapping, in address order from COUNTER_BASE: each route's
#: lines folded (in route order), then the rest.
COUNTERS = (tuple(spec.lines_counter for spec in ROUTE_SPECS.values())
            + ("FP32_LINES", "RESPONSES", "NOT_READY_COUNT", "DUPLICATE_COUNT",
               "BAD_REQUEST_COUNT", "INVALID_LINES", "STALL_CYCLES"))
#: Counters whose value depends on cycle timing: the transaction model cannot predict them.
TIMING_COUNTERS = ("STALL_CYCLES",)

COUNTER_BASE = 0x20
WINDOW_BASE = 0x100
WINDOW_STRIDE = 0x10


class Access(enum.Enum):
    R = "R"
    W = "W"
    RW = "RW"
    RW1C = "RW1C"
    RW1S = "RW1S"


@dataclasses.dataclass(frozen=True)
class Field:
    """A field: ``width`` bits from bit ``offset`` of its register."""
    name: str
    offset: int
    width: int
    access: Access
    reset: int = 0
    const: int | None = None
    doc: str = ""

    def __post_init__(self):
        if not (self.width >= 1 and 0 <= self.offset and self.offset + self.width <= 32):
            raise ValueError(f"field {self.name} must lie within bits [31:0], "
                             f"not [{self.offset + self.width - 1}:{self.offset}]")
        for label, value in (("reset", self.reset), ("const", self.const)):
            if value is not None and not 0 <= value < (1 << self.width):
                raise ValueError(f"field {self.name} {label} value must fit {self.width} bits, "
                                 f"not {value!r}")

    @property
    def mask(self):
        """The field's bits within its register."""
        return ((1 << self.width) - 1) << self.offset

    def get(self, value):
        """The field's value out of a register value."""
        return (value >> self.offset) & ((1 << self.width) - 1)


@dataclasses.dataclass(frozen=True)
class Register:
    """A 32-bit register at byte ``address``."""
    name: str
    address: int
    fields: tuple
    doc: str = ""

    def __post_init__(self):
        taken = 0
        for f in self.fields:
            if taken & f.mask:
                raise ValueError(f"register {self.name}: field {f.name} overlaps another field")
            taken |= f.mask

    def field(self, name):
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}; "
                       f"its fields are {', '.join(f.name for f in self.fields)}")

    @property
    def reset(self):
        """The value the register reads after reset."""
        value = 0
        for f in self.fields:
            if f.access is Access.R and f.const is not None:
                value |= f.const << f.offset
            elif f.access in (Access.RW, Access.RW1S):
                value |= f.reset << f.offset
        return value

    def encode(self, **values):
        """A register value from field values by name; fields not named are 0."""
        word = 0
        for name, value in values.items():
            f = self.field(name)
            if not 0 <= int(value) < (1 << f.width):
                raise ValueError(f"{self.name}.{name} must fit {f.width} bits, not {value!r}")
            word |= int(value) << f.offset
        return word

    def decode(self, value):
        """Field values by name out of a register value."""
        return {f.name: f.get(value) for f in self.fields}


@dataclasses.dataclass(frozen=True)
class RegisterMap:
    """All registers of one parameter set, in address order."""
    params: FabricParams
    registers: tuple

    def __post_init__(self):
        seen = {}
        for reg in self.registers:
            if reg.address % 4:
                raise ValueError(f"register {reg.name} address must be a multiple of 4, "
                                 f"not {reg.address:#x}")
            if reg.address in seen:
                raise ValueError(f"registers {seen[reg.address]} and {reg.name} share address "
                                 f"{reg.address:#x}")
            seen[reg.address] = reg.name

    def __iter__(self):
        return iter(self.registers)

    def __getitem__(self, name):
        for reg in self.registers:
            if reg.name == name:
                return reg
        raise KeyError(f"no register named {name!r}")

    def at(self, address):
        """The register at byte ``address``, or None."""
        for reg in self.registers:
            if reg.address == address:
                return reg
        return None

    @property
    def address_bits(self):
        """Width of the CSR byte address bus."""
        return max(r.address for r in self.registers).bit_length()

    def to_markdown(self):
        """The register reference as Markdown."""
        p = self.params
        out = [
            f"# Register reference: `{p.name}`",
            "",
            "Generated from `neuron_fabric.golden.regmap`; do not edit by hand.",
            "",
            f"Parameters: LINE_BITS={p.line_bits}, MAX_WORKERS={p.max_workers}, "
            f"COUNTER_BITS={p.counter_bits}, DEPTH={p.depth}, NUM_WINDOWS={p.num_windows}.",
            "32-bit registers at byte addresses; actions as in amaranth-soc "
            "(R, W strobe, RW, RW1C write-1-to-clear).",
            "",
            "| Address | Register | Reset | Description |",
            "|---|---|---|---|",
        ]
        for reg in self.registers:
            out.append(f"| `{reg.address:#05x}` | {reg.name} | `{reg.reset:#010x}` | {reg.doc} |")
        for reg in self.registers:
            out += ["", f"## {reg.name} (`{reg.address:#05x}`)", "", reg.doc, "",
                    "| Bits | Field | Action | Reset | Description |", "|---|---|---|---|---|"]
            for f in sorted(reg.fields, key=lambda f: -f.offset):
                bits = (f"{f.offset}" if f.width == 1 else f"{f.offset + f.width - 1}:{f.offset}")
                reset = f.const if f.const is not None else f.reset
                reset = f"{reset:#x}" if reset > 9 else str(reset)
                out.append(f"| {bits} | {f.name} | {f.access.value} | {reset} | {f.doc} |")
        return "\n".join(out) + "\n"


def window_register(window, name):
    """The name of register ``name`` (BASE, SIZE, CONFIG) of window ``window``."""
    return f"WIN{window}_{name}"


def register_map(params=None):
    """The register map of ``params`` (default parameters when None)."""
    p = params or FabricParams()
    R, W, RW, RW1C = Access.R, Access.W, Access.RW, Access.RW1C
    routes = ", ".join(f"{r.value} = {r.name}" for r in Route)
    readouts = ", ".join(f"{r.value} = {r.name}" for r in Readout)
    regs = [
        Register("ID", 0x00, (Field("MAGIC", 0, 32, R, const=ID_MAGIC, doc='"NFAB"'),),
                 "Identification."),
        Register("VERSION", 0x04, (
            Field("MINOR", 0, 8, R, const=VERSION[1], doc="Compatible changes."),
            Field("MAJOR", 8, 8, R, const=VERSION[0], doc="Incompatible changes."),
        ), "Register map version."),
        Register("CAPS0", 0x08, (
            Field("LINE_BITS", 0, 12, R, const=p.line_bits, doc="Bits per line."),
            Field("COUNTER_BITS", 12, 4, R, const=p.counter_bits,
                  doc="Counter width: at most 2**COUNTER_BITS - 1 workers without saturation."),
            Field("MAX_WORKERS", 16, 8, R, const=p.max_workers,
                  doc="Width of the contribution bitmap: worker ids 0 to MAX_WORKERS - 1."),
            Field("NUM_WINDOWS", 24, 4, R, const=p.num_windows, doc="Aggregation windows."),
        ), "Capabilities the runtime checks before admitting a low-bit job."),
        Register("CAPS1", 0x0C, (
            Field("DEPTH", 0, 17, R, const=p.depth, doc="Slots per window."),
            Field("ADDR_BITS", 24, 8, R, const=ADDR_BITS, doc="Width of a line address."),
        ), "Capabilities, continued."),
        Register("CONTROL", 0x10, (
            Field("ENABLE", 0, 1, RW, reset=0,
                  doc="1: windows claim their addresses. 0: every request is plain memory traffic."),
            Field("CLEAR_SLOTS", 1, 1, W, doc="Write 1: empty every slot of every window."),
            Field("CLEAR_COUNTERS", 2, 1, W, doc="Write 1: zero every event counter."),
        ), "Global control."),
        Register("NUM_WORKERS", 0x14, (
            Field("N", 0, 7, RW, reset=p.workers_served,
                  doc="Contributions that complete a slot: workers 0 to N - 1. "
                      "Must be 1 to MAX_WORKERS, else window requests get BAD_REQUEST."),
        ), "Workers taking part in the aggregation."),
        Register("GATE", 0x18, (
            Field("GATE", 0, GATE_BITS, RW, reset=1,
                  doc="G-Ternary GATED readout: sign(S) where |S| >= GATE, else 0."),
        ), "G-Ternary gate."),
        Register("ERRORS", 0x1C, tuple(
            Field(flag, bit, 1, RW1C, doc=ERROR_DOCS[flag]) for bit, flag in enumerate(ERROR_FLAGS)
        ), "Sticky error flags, write 1 to clear."),
    ]
    counter_docs = {
        **{spec.lines_counter: f"{spec.label} lines accumulated." for spec in ROUTE_SPECS.values()},
        "FP32_LINES": "Requests passed through to memory.",
        "RESPONSES": "Requests answered (a multi-line readout counts once).",
        "NOT_READY_COUNT": "NOT_READY responses.",
        "DUPLICATE_COUNT": "DUPLICATE responses.",
        "BAD_REQUEST_COUNT": "BAD_REQUEST responses.",
        "INVALID_LINES": "Accepted G-Ternary lines holding at least one invalid code.",
        "STALL_CYCLES": "Cycles a response or a memory request waited on backpressure.",
    }
    for index, name in enumerate(COUNTERS):
        regs.append(Register(name, COUNTER_BASE + 4 * index,
                             (Field("COUNT", 0, 32, R, doc="Wraps at 2**32."),),
                             counter_docs[name]))
    for w in range(p.num_windows):
        base = WINDOW_BASE + WINDOW_STRIDE * w
        regs += [
            Register(window_register(w, "BASE"), base, (
                Field("ADDR", 0, ADDR_BITS, RW, doc="First line address of the window."),
            ), f"Window {w}: base line address. Writing it empties the window's slots."),
            Register(window_register(w, "SIZE"), base + 4, (
                Field("SLOTS", 0, 17, RW, doc="Lines (slots) in the window; at most DEPTH."),
            ), f"Window {w}: size in slots. Writing it empties the window's slots."),
            Register(window_register(w, "CONFIG"), base + 8, (
                Field("EN", 0, 1, RW, doc="1: the window claims [BASE, BASE + SIZE)."),
                Field("ROUTE", 1, enum_bits(Route), RW, doc=f"Route: {routes}."),
                Field("READOUT", 4, enum_bits(Readout), RW,
                      doc=f"Readout: {readouts}; must belong to the route."),
            ), f"Window {w}: configuration. Writing it empties the window's slots."),
        ]
    return RegisterMap(p, tuple(regs))
