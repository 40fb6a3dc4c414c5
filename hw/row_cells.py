"""The lane tile's fold adder, generic or from ECP5 carry cells.

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
addend and the row bit are equal. The choice costs no LUT4 of its own. A test proves the
two forms equal with Yosys's own model of the cell.
"""

from amaranth.hdl import C, Instance, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..golden.validate import check_int

__all__ = ["FoldAdder", "choose_and_add", "CELLS", "check_cells"]

#: What a tile's fold adders may be built from: ``None`` (generic logic) or ``"ecp5"``.
CELLS = (None, "ecp5")


def check_cells(cells):
    """Validate a ``cells`` choice (one of :data:`CELLS`) and return it."""
    if cells not in CELLS:
        raise ValueError(f"cells must be one of {CELLS}, not {cells!r}")
    return cells


def _lut_init(function):
    """The 16-bit INIT of an ECP5 LUT4 computing ``function(a, b, c, d)`` (bit ``8d+4c+2b+a``)."""
    return sum(function(*(index >> shift & 1 for shift in range(4))) << index
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
