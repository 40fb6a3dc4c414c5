"""The lane tile's row logic, generic or from ECP5 cells: the fold adder and the readout's
choice.

A tile folds each pair of line bits with ``(from_last ? last : chosen) + addend``: the
previous word's result or the row chosen a cycle earlier, plus the line's votes or code
(docs/design.md, "Lane tiles"). Written that way, synthesis gives the choice a LUT4 per
bit and the sum a carry chain whose LUT4s use two of their four inputs. The adder can be
built from generic logic (``cells=None``: simulation, other FPGAs, ASIC flows) or from ECP5
carry cells (``cells="ecp5"``, CCU2C instances) that hold the choice in their own LUT4s.

A carry cell's sum bit is its LUT4's output XOR the carry in, and where that LUT4 gives 0
its carry out is the LUT4's value with inputs C and D at 0. With the addend bit on A,
``from_last`` on B and the two row bits on C and D, the LUT4 gives the addend XOR the
chosen row bit, and with C and D at 0 the addend: what the carry out must be where the
addend and the row bit are equal. The choice costs no LUT4 of its own.

The row the fold takes when it does not take the previous word's is chosen a cycle earlier,
as an OR of rows that are zero unless chosen (``LaneTile``): one LUT4 a bit, which synthesis
finds on its own.

A readout line's bit is one of eight or ten of its lane's kept bits, named by a code the
tile registers a cycle ahead (``choose_by_code``): pairs of bits are chosen by the code's
low bit in one LUT4 each, and the pairs, four at a time, by the next two bits. With ECP5
cells those two levels are the slices' own multiplexers (PFUMX, L6MUX21), which count no
LUT4: eight bits take four LUT4s, where an AND-OR of one-hot selects takes six.

Tests prove each ECP5 form equal to the generic one with Yosys's own models of the cells.
"""

from amaranth.hdl import C, Const, Instance, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..golden.validate import check_int
from .lane_logic import kept

__all__ = ["FoldAdder", "CodeChoice", "choose_and_add", "choose_by_code", "code_bits", "gate",
           "CELLS", "check_cells"]

#: What a tile's fold adders may be built from: ``None`` (generic logic) or ``"ecp5"``.
CELLS = (None, "ecp5")


def check_cells(cells):
    """Validate a ``cells`` choice (one of :data:`CELLS`) and return it."""
    if cells not in CELLS:
        raise ValueError(f"cells must be one of {CELLS}, not {cells!r}")
    return cells


def _lut_init(function):
    """The 16-bit INIT of an ECP5 LUT4 computing ``function(a, b, c, d)`` (bit ``8d+4c+2b+a``;
    only the result's lowest bit counts, so ``~`` may stand for NOT)."""
    return sum((function(*(index >> shift & 1 for shift in range(4))) & 1) << index
               for index in range(16))


def _choose_and_add_init():
    """A carry cell's LUT4 for ``A ^ (B ? C : D)``: the addend XOR the chosen row bit."""
    return _lut_init(lambda a, b, c, d: a ^ (c if b else d))


def _check_width(width, cells):
    """Validate an adder's width for ``cells`` (even with ECP5 cells) and return it."""
    width = check_int("width", width, low=1)
    if cells == "ecp5" and width % 2:
        raise ValueError(f"width must be even with ECP5 cells (two bits a carry cell), "
                         f"not {width!r}")
    return width


def choose_and_add(m, *, addend, from_last, last, chosen, cells, name):
    """``((from_last ? last : chosen) + addend) mod 2**len(addend)``, built in ``m`` from
    ``cells`` (its ECP5 cells are named ``<name>_cell_<k>``)."""
    width = _check_width(len(addend), check_cells(cells))
    if cells is None:
        return (Mux(from_last, last, chosen) + addend)[:width]
    total = Signal(width, name=f"{name}_sum")
    init = C(_choose_and_add_init(), 16)
    carry = C(0, 1)
    for low in range(0, width, 2):
        bits = {}
        for half, bit in enumerate((low, low + 1)):
            bits.update({f"i_A{half}": addend[bit], f"i_B{half}": from_last,
                         f"i_C{half}": last[bit], f"i_D{half}": chosen[bit],
                         f"o_S{half}": total[bit]})
        carry_out = Signal(name=f"{name}_carry_{low // 2}")
        m.submodules[f"{name}_cell_{low // 2}"] = Instance(
            "CCU2C", p_INIT0=init, p_INIT1=init, p_INJECT1_0="NO", p_INJECT1_1="NO",
            i_CIN=carry, o_COUT=carry_out, **bits)
        carry = carry_out
    return total


def gate(m, function, inputs, *, cells, name):
    """``function(*inputs)`` of up to four one-bit ``inputs`` as one gate named ``name``: a
    kept wire, or with ECP5 cells a LUT4 instance (``function`` on the bits 0 and 1 gives
    its INIT).

    Where the function of a kept gate contains another kept gate's, synthesis may read the
    other gate's output and add a level; a LUT4 instance keeps its four inputs.
    """
    if not 1 <= len(inputs) <= 4:
        raise ValueError(f"a gate takes one to four inputs, not {len(inputs)}")
    if check_cells(cells) is None:
        return kept(m, function(*inputs), name)
    padded = [*inputs, *[C(0, 1)] * (4 - len(inputs))]
    output = Signal(name=name)
    m.submodules[f"{name}_lut"] = Instance(
        "LUT4", p_INIT=C(_lut_init(lambda *bits: function(*bits[:len(inputs)])), 16),
        i_A=padded[0], i_B=padded[1], i_C=padded[2], i_D=padded[3], o_Z=output)
    return output


def code_bits(count):
    """The bits of a code that names one of ``count`` sources (:func:`choose_by_code`): at
    least one."""
    return max(1, (count - 1).bit_length())


def choose_by_code(m, *, code, sources, cells, name):
    """``sources[code]``: one bit of up to 16 one-bit ``sources``, chosen by ``code``
    (``ceil(log2(len(sources)))`` bits), built in ``m`` from ``cells``; a code past the last
    source gives 0 or one of the sources.

    Pairs of sources are chosen by ``code[0]`` in kept wires, a LUT4 each where the pair is
    a function of at most three bits; up to four pairs by ``code[1]`` and ``code[2]``, as
    multiplexers (with ECP5 cells a PFUMX for two pairs and an L6MUX21 for four, named
    ``<name>_pfumx_<k>`` and ``<name>_l6mux``); a ninth to sixteenth source the same way,
    chosen from the first eight by ``code[3]`` in a kept wire.
    """
    sources = [Value.cast(source) for source in sources]
    code = Value.cast(code)
    check_cells(cells)
    if not 1 <= len(sources) <= 16 or any(len(source) != 1 for source in sources):
        raise ValueError(f"choose_by_code takes 1 to 16 one-bit sources, not "
                         f"{[len(source) for source in sources]}")
    needed = code_bits(len(sources))
    if len(code) < needed:
        raise ValueError(f"a code for {len(sources)} sources needs {needed} bits, not "
                         f"{len(code)}")
    if len(sources) == 1:
        return sources[0]

    def eight(chunk, label):
        pairs = [kept(m, Mux(code[0], chunk[k + 1] if k + 1 < len(chunk) else Const(0, 1),
                             chunk[k]), f"{name}_{label}pair_{k // 2}")
                 for k in range(0, len(chunk), 2)]
        if len(pairs) == 1:
            return pairs[0]
        pairs += [Const(0, 1)] * (-len(pairs) % 2)
        halves = []
        for k in range(0, len(pairs), 2):
            if cells == "ecp5" and not isinstance(pairs[k + 1], Const):
                half = Signal(name=f"{name}_{label}half_{k // 2}")
                m.submodules[f"{name}_{label}pfumx_{k // 2}"] = Instance(
                    "PFUMX", i_C0=code[1], i_ALUT=pairs[k + 1], i_BLUT=pairs[k], o_Z=half)
            else:
                half = Mux(code[1], pairs[k + 1], pairs[k])
            halves.append(half)
        if len(halves) == 1:
            return halves[0]
        if cells == "ecp5" and all(isinstance(half, Signal) for half in halves):
            both = Signal(name=f"{name}_{label}quarter")
            m.submodules[f"{name}_{label}l6mux"] = Instance(
                "L6MUX21", i_SD=code[2], i_D1=halves[1], i_D0=halves[0], o_Z=both)
            return both
        return Mux(code[2], halves[1], halves[0])

    low = eight(sources[:8], "")
    if len(sources) <= 8:
        return low
    high = eight(sources[8:], "high_")
    return kept(m, Mux(code[3], high, low), f"{name}_chosen")


class FoldAdder(wiring.Component):
    """``sum = ((from_last ? last : chosen) + addend) mod 2**width``, combinationally
    (:func:`choose_and_add` as a component of its own).

    Parameters
    ----------
    width : int
        Bits of the rows, the addend and the sum; even with ECP5 cells (two a carry cell).
    cells : None or "ecp5"

    Members
    -------
    addend, last, chosen : ``In(width)``
    from_last : ``In(1)``
    sum : ``Out(width)``
    """

    def __init__(self, width, *, cells=None):
        self.cells = check_cells(cells)
        self.width = _check_width(width, cells)
        super().__init__({
            "addend": In(width), "from_last": In(1), "last": In(width), "chosen": In(width),
            "sum": Out(width),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.sum.eq(choose_and_add(m, addend=self.addend, from_last=self.from_last,
                                               last=self.last, chosen=self.chosen,
                                               cells=self.cells, name="fold"))
        return m


class CodeChoice(wiring.Component):
    """``chosen = sources[code]`` (:func:`choose_by_code` as a component of its own).

    Parameters
    ----------
    count : int
        Sources, 1 to 16.
    cells : None or "ecp5"

    Members
    -------
    sources : ``In(count)``
    code : ``In(ceil(log2(count)))`` (at least 1)
    chosen : ``Out(1)``
    """

    def __init__(self, count, *, cells=None):
        self.cells = check_cells(cells)
        self.count = check_int("count", count, low=1, high=16)
        super().__init__({"sources": In(count), "code": In(code_bits(count)),
                          "chosen": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.chosen.eq(choose_by_code(
            m, code=self.code, sources=list(self.sources), cells=self.cells, name="choice"))
        return m
