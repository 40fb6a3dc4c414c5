"""Verilog generation: deterministic files, a manifest that matches the ports, clean checks."""

import json
import os
import subprocess
import sys

import pytest
from amaranth.hdl import Value
from amaranth.lib import wiring

from neuron_fabric.gen.check import icarus_compile, verilator_lint
from neuron_fabric.gen.verilog import blocks, load_manifest
from neuron_fabric.golden.params import PRESETS
from neuron_fabric.golden.regmap import register_map

SMALL = PRESETS["small"]


def run_gen(*args, cwd):
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "random"
    return subprocess.run([sys.executable, "-m", "neuron_fabric.gen", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The small preset generated twice, from two different folders into two others."""
    outs = []
    for run in ("first", "second"):
        cwd = tmp_path_factory.mktemp(f"cwd_{run}")
        out = tmp_path_factory.mktemp(f"out_{run}")
        result = run_gen("--preset", "small", "--out", str(out), cwd=cwd)
        assert result.returncode == 0, result.stderr
        assert f"results in {out / SMALL.name}/" in result.stdout
        outs.append(out / SMALL.name)
    return outs


def test_output_is_byte_identical_from_different_folders(generated):
    first, second = generated
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert len(names) == 9   # seven blocks, registers.md, manifest.json
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert str(first) not in "".join((first / n).read_text() for n in names)


def test_module_names_carry_the_parameters(generated):
    manifest = load_manifest(generated[0])
    assert manifest["top"] == f"nfabric_{SMALL.name}"
    top = (generated[0] / manifest["blocks"]["controller"]["file"]).read_text()
    assert f"module nfabric_{SMALL.name}__tile_0(" in top
    assert f"module nfabric_{SMALL.name}__tile_0__g0_fold_sign_count(" in top
    assert "module \\" not in top   # no escaped identifiers: every level is a plain name
    assert "parameter " not in top
    assert [block.role for block in blocks(SMALL)][-3:] == ["lane_tile", "control_plane",
                                                            "controller"]
    tile = f"nfabric_lane_tile_t32_g8_w{SMALL.max_workers}_c{SMALL.counter_bits}_r" \
           f"{SMALL.num_windows * SMALL.depth}"
    assert manifest["blocks"]["lane_tile"]["module"] == tile
    assert manifest["blocks"]["control_plane"]["module"] == f"nfabric_control_plane_{SMALL.name}"
    assert f"module {tile}__g0_fold_sign_count(" in (
        generated[0] / manifest["blocks"]["lane_tile"]["file"]).read_text()


def test_manifest_ports_match_the_components(generated):
    manifest = load_manifest(generated[0])
    for block in blocks(SMALL):
        entry = manifest["blocks"][block.role]
        ports = {p["name"]: (p["direction"], p["width"]) for p in entry["ports"]}
        for path, member, value in block.component.signature.flatten(block.component):
            name = "__".join(map(str, path))
            direction = "input" if member.flow is wiring.In else "output"
            assert ports.pop(name) == (direction, len(Value.cast(value))), f"{block.role}: {name}"
        assert set(ports) <= {"clk", "rst"}, f"{block.role}: unexpected ports {ports}"
    request = manifest["blocks"]["controller"]["payloads"]["i_req__payload"]
    assert request["op"] == [0, 2] and request["addr"] == [2, 32]
    assert request["data"] == [34 + SMALL.worker_bits, SMALL.line_bits]
    assert manifest["params"] == SMALL.as_dict()
    assert manifest["registers"]["CONTROL"]["fields"]["ENABLE"] == [0, 1, "RW"]
    assert manifest["tools"]["amaranth"]


def test_register_reference_comes_from_the_register_map(generated):
    assert (generated[0] / "registers.md").read_text() == register_map(SMALL).to_markdown()


def test_every_file_compiles_with_icarus_and_lints_with_verilator(generated):
    manifest = load_manifest(generated[0])
    for block in manifest["blocks"].values():
        icarus_compile(generated[0] / block["file"], module=block["module"])
        verilator_lint(generated[0] / block["file"], module=block["module"])


def test_bad_parameters_exit_with_the_rule(tmp_path):
    result = run_gen("--preset", "small", "--line-bits", "300", "--out", str(tmp_path),
                     cwd=tmp_path)
    assert result.returncode == 2
    assert "line_bits must be one of (128, 256, 512, 1024), not 300" in result.stderr
    assert not any(tmp_path.iterdir())


def test_manifest_is_valid_json_with_sorted_keys(generated):
    text = (generated[0] / "manifest.json").read_text()
    assert json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n" == text
