"""A block RAM floorplan for the controller top on the ECP5-85F parts.

nextpnr-ecp5 takes a ``BEL`` attribute on a DP16KD cell (``X4/Y46/EBR0``) as a placement
constraint. :func:`pin_block_rams` sets it on every lane tile's block RAM of a synthesized
netlist: each tile's banks side by side, the tiles in order along the block RAM rows nearest
the middle of the die. The control plane's block RAM (the bitmaps) is left to nextpnr, which
puts it at a free site beside the control plane's logic: pinned in the middle of the first
row, it sat 12 to 16 columns from the logic that reads it, and that net (3.1 to 3.8 ns)
started the worst paths of two of three seeds at speed 6 (``docs/fpga.md``).
"""

import json
import pathlib
import re

__all__ = ["EBR_ROWS", "EBR_COLUMNS", "TILES_PER_ROW", "ebr_site", "check_rows", "default_rows",
           "block_ram_groups", "layout", "pin_block_rams"]

#: The rows (Y) of the 85k parts' 208 block RAM sites, 52 to a row, and the columns (X) of a
#: row, west to east. Read from nextpnr's chip database by placing 208 unconstrained DP16KD
#: and listing their ``NEXTPNR_BEL``; the centre spine lies between columns 64 and 69.
EBR_ROWS = (22, 46, 70, 82)
EBR_COLUMNS = tuple(start + 2 * k for start in (4, 13, 22, 31, 40, 49, 58, 69, 78, 87, 96, 105, 114)
                    for k in range(4))

#: The rows a floorplan of so many rows uses: the middle of the die first.
_ROWS_BY_COUNT = {1: (46,), 2: (46, 70), 3: (46, 70, 22), 4: (46, 70, 22, 82)}

#: Lane tiles to a block RAM row in the default floorplan: four 32-lane tiles' block RAMs
#: span about 45 columns, so with the rows 24 apart each tile's logic has a squarish region
#: beside its block RAMs. On the 512-bit top this beat two rows of eight (``docs/fpga.md``).
TILES_PER_ROW = 4

_TILE = re.compile(r"(?:^|\.)tile_(\d+)\.")


def ebr_site(row, index):
    """The BEL name of the ``index``-th block RAM site (west to east) of row ``row``."""
    if row not in EBR_ROWS:
        raise ValueError(f"row {row} holds no block RAM on the 85k parts (rows: {EBR_ROWS})")
    if not 0 <= index < len(EBR_COLUMNS):
        raise ValueError(f"site {index} is past the {len(EBR_COLUMNS)} sites of a row")
    return f"X{EBR_COLUMNS[index]}/Y{row}/EBR{index % 4}"


def check_rows(rows):
    """Refuse a number of block RAM rows that a floorplan cannot use."""
    if rows not in _ROWS_BY_COUNT:
        raise ValueError(f"a floorplan spreads the block RAMs over 1 to {len(EBR_ROWS)} rows "
                         f"(the 85k parts have {len(EBR_ROWS)}), not {rows}")


def default_rows(tiles):
    """The block RAM rows of the default floorplan for ``tiles`` lane tiles."""
    return min(len(EBR_ROWS), max(1, -(-tiles // TILES_PER_ROW)))


def _natural(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def block_ram_groups(cells):
    """``(tiles, control)``: the DP16KD cell names of each lane tile, in tile order, and the
    rest (the control plane's), from a module's ``cells`` (Yosys JSON)."""
    tiles, control = {}, []
    for name in sorted((n for n, c in cells.items() if c["type"] == "DP16KD"), key=_natural):
        match = _TILE.search(name)
        if match:
            tiles.setdefault(int(match.group(1)), []).append(name)
        else:
            control.append(name)
    return [tiles[t] for t in sorted(tiles)], control


def layout(tiles, *, rows=2):
    """``{cell: BEL}``: ``tiles`` (lists of cell names, in order) spread over the ``rows`` block
    RAM rows nearest the middle, each tile's cells side by side and every row centred."""
    check_rows(rows)
    per_row = -(-len(tiles) // rows)
    placed = {}
    for r, row in enumerate(_ROWS_BY_COUNT[rows]):
        groups = tiles[r * per_row:(r + 1) * per_row]
        names = [name for group in groups for name in group]
        if len(names) > len(EBR_COLUMNS):
            raise ValueError(f"{len(names)} block RAMs do not fit the {len(EBR_COLUMNS)} sites "
                             f"of a row: use more rows than {rows}")
        start = (len(EBR_COLUMNS) - len(names)) // 2
        placed.update((name, ebr_site(row, start + i)) for i, name in enumerate(names))
    return placed


def pin_block_rams(path, *, rows=2):
    """Set the ``BEL`` of every lane tile's DP16KD in the top module of the netlist at
    ``path`` (Yosys JSON, rewritten in place) to :func:`layout`'s site; the control plane's
    are left to nextpnr. Returns ``{cell: BEL}``."""
    path = pathlib.Path(path)
    netlist = json.loads(path.read_text(encoding="utf-8"))
    tops = [m for m in netlist["modules"].values() if m.get("attributes", {}).get("top")]
    if len(tops) != 1:
        raise ValueError(f"{path}: expected one top module, found {len(tops)}")
    cells = tops[0]["cells"]
    tiles, _ = block_ram_groups(cells)
    placed = layout(tiles, rows=rows)
    for name, bel in placed.items():
        cells[name].setdefault("attributes", {})["BEL"] = bel
    path.write_text(json.dumps(netlist), encoding="utf-8")
    return placed
