"""Verilog generation: deterministic files, a manifest that matches the ports, clean checks,
and Verilog that another flow takes in with the file list and Verilator configuration alone."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
from amaranth.hdl import Shape, Value
from amaranth.lib import wiring

from neuron_fabric.gen.axi import axi_folder_name
from neuron_fabric.gen.check import LINT_MODES, icarus_compile, verilator_lint
from neuron_fabric.gen.verilog import LINT_WAIVERS, blocks, load_manifest
from neuron_fabric.golden.params import PRESETS
from neuron_fabric.golden.regmap import register_map
from neuron_fabric.gen.tools import check_iverilog, default_verilator_root, verilator_env

SMALL = PRESETS["small"]


def run_gen(*args, cwd):
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "random"
    return subprocess.run([sys.executable, "-m", "neuron_fabric.gen", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def generated_command_line(tmp_path_factory):
    """The command line run as a user runs it, from another folder and with another hash
    seed than the session's small preset: it writes the AXI top beside the native one."""
    cwd = tmp_path_factory.mktemp("cwd")
    out = tmp_path_factory.mktemp("out")
    result = run_gen("--preset", "small", "--out", str(out), cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert f"results in {out / SMALL.name}/" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted([SMALL.name,
                                                            axi_folder_name(SMALL)])
    return out


@pytest.fixture(scope="module")
def generated(small_verilog, generated_command_line):
    """The small preset generated twice: in this process, and by the command line."""
    return [small_verilog, generated_command_line / SMALL.name]


@pytest.fixture(scope="module")
def generated_axi(small_axi_verilog, generated_command_line):
    """The small preset's AXI top generated twice: in this process, and by the command
    line beside the native top."""
    return [small_axi_verilog, generated_command_line / axi_folder_name(SMALL)]


def test_output_is_byte_identical_from_different_folders(generated):
    first, second = generated
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert len(names) == 11   # seven blocks, .f, .vlt, registers.md, manifest.json
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert str(first) not in "".join((first / n).read_text() for n in names)


def test_module_names_carry_the_parameters(generated):
    manifest = load_manifest(generated[0])
    assert manifest["top"] == f"nfabric_{SMALL.name}"
    top = (generated[0] / manifest["blocks"]["controller"]["file"]).read_text()
    assert f"module nfabric_{SMALL.name}__tile_0(" in top
    assert f"module nfabric_{SMALL.name}__control__csr_block(" in top
    assert "module \\" not in top   # no escaped identifiers: every level is a plain name
    assert "parameter " not in top
    assert [block.role for block in blocks(SMALL)][-3:] == ["lane_tile", "control_plane",
                                                            "controller"]
    tile = f"nfabric_lane_tile_t32_g8_w{SMALL.max_workers}_c{SMALL.counter_bits}_r" \
           f"{SMALL.num_windows * SMALL.depth}"
    assert manifest["blocks"]["lane_tile"]["module"] == tile
    assert manifest["blocks"]["control_plane"]["module"] == f"nfabric_control_plane_{SMALL.name}"
    assert f"module {tile}(" in (generated[0] / manifest["blocks"]["lane_tile"]["file"]).read_text()


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
    config = generated[0] / manifest["verilator_config"]
    for block in manifest["blocks"].values():
        icarus_compile(generated[0] / block["file"], module=block["module"])
        verilator_lint(generated[0] / block["file"], module=block["module"], config=config)


def test_bad_parameters_exit_with_the_rule(tmp_path):
    result = run_gen("--preset", "small", "--line-bits", "300", "--out", str(tmp_path),
                     cwd=tmp_path)
    assert result.returncode == 2
    assert "line_bits must be one of (128, 256, 512, 1024), not 300" in result.stderr
    assert not any(tmp_path.iterdir())


def test_manifest_is_valid_json_with_sorted_keys(generated):
    text = (generated[0] / "manifest.json").read_text()
    assert json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n" == text


# ---------------------------------------------------------------------------------------------
# The Verilog in another flow: Verilator and Icarus given the .f and .vlt files and nothing else
# of the project's. A testbench built from the manifest's port names resets the top, reads two
# registers and waits for `i_req.ready`, with no request sent and no output valid.


def dropin_testbench(manifest):
    """``(testbench, Verilator main, Icarus clock)``: Verilog and C++ texts around the top."""
    top = manifest["blocks"]["controller"]
    regmap = register_map(SMALL)
    ident, workers = regmap["ID"], regmap["NUM_WORKERS"]
    lines = ["module dropin_tb (input clk);"]
    for port in top["ports"]:
        name, vector = port["name"], f"[{port['width'] - 1}:0] " if port["width"] > 1 else ""
        if name == "clk":
            continue
        if port["direction"] == "input":
            start = "1'b1" if name in ("rst", "o_resp__ready", "o_mem__ready") else "0"
            lines.append(f"  reg {vector}{name} = {start};")
        else:
            lines.append(f"  wire {vector}{name};")
    connections = ", ".join(f".{port['name']}({port['name']})" for port in top["ports"])
    addr = next(port["width"] for port in top["ports"] if port["name"] == "csr__addr")
    lines += [
        "  reg [15:0] cycle = 0;",
        f"  {top['module']} dut ({connections});",
        "  always @(posedge clk) begin",
        "    cycle <= cycle + 16'd1;",
        "    if (cycle == 16'd4) rst <= 1'b0;",
        f"    if (cycle == 16'd12) begin csr__addr <= {addr}'d{ident.address}; "
        f"csr__r_stb <= 1'b1; end",
        f"    if (cycle == 16'd13) csr__addr <= {addr}'d{workers.address};",
        "    if (cycle == 16'd14) csr__r_stb <= 1'b0;",
        "    if (cycle > 16'd4 && (o_resp__valid !== 1'b0 || o_mem__valid !== 1'b0)) begin",
        '      $display("dropin: FAIL: an output is valid with no request sent");',
        "      $finish;",
        f"    end else if (cycle == 16'd15 && csr__r_data !== 32'h{ident.reset:08x}) begin",
        '      $display("dropin: FAIL: ID reads %h", csr__r_data);',
        "      $finish;",
        f"    end else if (cycle == 16'd16 && csr__r_data !== 32'h{workers.reset:08x}) begin",
        '      $display("dropin: FAIL: NUM_WORKERS reads %h", csr__r_data);',
        "      $finish;",
        "    end else if (cycle > 16'd16 && i_req__ready === 1'b1) begin",
        '      $display("dropin: ok after %0d cycles", cycle);',
        "      $finish;",
        "    end else if (cycle == 16'd1000) begin",
        '      $display("dropin: FAIL: i_req is never ready");',
        "      $finish;",
        "    end",
        "  end",
        "endmodule",
    ]
    main = "\n".join([
        '#include "verilated.h"',
        '#include "Vdropin_tb.h"',
        "",
        "int main(int argc, char** argv) {",
        "    VerilatedContext context;",
        "    context.commandArgs(argc, argv);",
        "    Vdropin_tb tb{&context};",
        "    for (int edge = 0; edge < 2200 && !context.gotFinish(); ++edge) {",
        "        tb.clk = edge & 1;",
        "        tb.eval();",
        "        context.timeInc(5);",
        "    }",
        "    tb.final();",
        "    return context.gotFinish() ? 0 : 3;",
        "}",
    ]) + "\n"
    clock = ("module dropin_clock;\n  reg clk = 1'b0;\n  always #5 clk = ~clk;\n"
             "  dropin_tb tb (.clk(clk));\nendmodule\n")
    return "\n".join(lines) + "\n", main, clock


def run(args, *, cwd, env=None, timeout=600):
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    return result.returncode, result.stdout + result.stderr


def dropin_files(folder):
    manifest = load_manifest(folder)
    return manifest, folder / manifest["file_list"], folder / manifest["verilator_config"]


def test_manifest_names_the_file_list_and_the_verilator_config(generated):
    manifest, file_list, config = dropin_files(generated[0])
    top = manifest["top"]
    assert (file_list.name, config.name) == (f"{top}.f", f"{top}.vlt")
    names = [line for line in file_list.read_text().splitlines() if not line.startswith("//")]
    assert names == [manifest["blocks"]["controller"]["file"]]
    text = config.read_text()
    assert text.startswith("`verilator_config\n")
    for rule in LINT_WAIVERS:
        assert f"// {rule}: " in text   # each rule with its reason
        for block in manifest["blocks"].values():
            assert f'lint_off -rule {rule} -file "*{block["file"]}"' in text
    assert len(re.findall(r"^lint_off ", text, re.MULTILINE)) == (len(manifest["blocks"])
                                                                   * len(LINT_WAIVERS))


def test_verilator_builds_and_runs_the_top_from_the_file_list_and_config_alone(generated,
                                                                               tmp_path):
    manifest, file_list, config = dropin_files(generated[0])
    testbench, main, _ = dropin_testbench(manifest)
    (tmp_path / "dropin_tb.v").write_text(testbench)
    (tmp_path / "dropin_main.cpp").write_text(main)
    # Verilator's default warnings, each an error; nothing of the project's but the two files.
    rc, log = run(["verilator", "--cc", "--exe", "--build", "-j", "2", "--Mdir", "obj",
                   str(config), "-F", str(file_list), "dropin_tb.v", "dropin_main.cpp",
                   "--top-module", "dropin_tb"],
                  cwd=tmp_path, env=verilator_env(default_verilator_root()))
    assert rc == 0, log[-4000:]
    assert "%Warning" not in log
    rc, log = run([str(tmp_path / "obj" / "Vdropin_tb")], cwd=tmp_path, timeout=60)
    assert rc == 0 and "dropin: ok after" in log, log


def test_icarus_elaborates_and_runs_the_top_from_the_file_list_alone(generated, tmp_path):
    check_iverilog()
    manifest, file_list, _ = dropin_files(generated[0])
    testbench, _, clock = dropin_testbench(manifest)
    (tmp_path / "dropin_tb.v").write_text(testbench)
    (tmp_path / "dropin_clock.v").write_text(clock)
    # Icarus reads the list's names from the current folder: the list's own.
    rc, log = run(["iverilog", "-o", os.devnull, "-c", file_list.name], cwd=file_list.parent)
    assert rc == 0, log
    rc, log = run(["iverilog", "-o", str(tmp_path / "dropin.vvp"), "-c", file_list.name,
                   str(tmp_path / "dropin_tb.v"), str(tmp_path / "dropin_clock.v")],
                  cwd=file_list.parent)
    assert rc == 0, log
    rc, log = run(["vvp", "-n", str(tmp_path / "dropin.vvp")], cwd=tmp_path, timeout=120)
    assert rc == 0 and "dropin: ok after" in log, log


def test_the_verilator_config_holds_every_waiver_needed_and_no_other(generated, tmp_path):
    """Each top lints clean with its configuration, and every waiver is needed by one of
    them: the small preset, and the same with counters that can fill (the tiles then hold
    the route engines, whose outputs need UNOPTFLAT under cocotb's public signals)."""
    filling = tmp_path / "filling"
    result = run_gen("--preset", "small", "--counter-bits", "2", "--no-axi",
                     "--out", str(filling), cwd=tmp_path)
    filling_name = dataclasses.replace(SMALL, counter_bits=2).name
    assert result.returncode == 0, result.stderr
    assert [p.name for p in filling.iterdir()] == [filling_name]     # no AXI top: --no-axi
    planted = tmp_path / "no_waivers.vlt"   # the configuration without its waivers
    planted.write_text("`verilator_config\n")

    def lint(vlt, options, file_list):
        return run(["verilator", "--lint-only", "-Wall", *options, str(vlt), "-F", str(file_list)],
                   cwd=tmp_path, env=verilator_env(default_verilator_root()))

    # The small preset's top lints clean with its configuration in the test above, and the
    # AXI top with its own in its generation test; the waivers it needs are among these.
    missed = set()
    for folder in (generated[0], filling / filling_name):
        _, file_list, config = dropin_files(folder)
        for mode, options in LINT_MODES.items():
            if folder != generated[0]:
                rc, log = lint(config, options, file_list)
                assert rc == 0 and "%Warning" not in log, f"{folder.name} {mode}: {log[-4000:]}"
            rc, log = lint(planted, options, file_list)
            assert rc != 0, mode
            missed |= set(re.findall(r"^%Warning-(\w+):", log, re.MULTILINE))
    assert missed == set(LINT_WAIVERS)


def test_the_axi_top_is_byte_identical_from_different_folders(generated_axi):
    """The AXI top's Verilog, file list, configuration, register reference and manifest, the
    same bytes from either folder, and clean checks."""
    from neuron_fabric.gen.axi import AXI_ROLE

    first, second = generated_axi
    names = sorted(p.name for p in first.iterdir())
    module = f"nfabric_axi_{SMALL.name}"
    assert names == sorted([f"{module}.v", f"{module}.f", f"{module}.vlt", "registers.md",
                            "manifest.json"])
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert str(first) not in "".join((first / n).read_text() for n in names)
    manifest = load_manifest(first)
    assert manifest["top"] == manifest["blocks"][AXI_ROLE]["module"] == module
    assert manifest["axi"]["worker_from"] == "address"
    config = first / manifest["verilator_config"]
    icarus_compile(first / f"{module}.v", module=module)
    verilator_lint(first / f"{module}.v", module=module, config=config)


def test_the_axi_manifest_ports_are_the_components_axi_signals(generated_axi):
    from neuron_fabric.gen.axi import AXI_ID_WIDTH
    from neuron_fabric.hw.axi_controller import AxiController

    manifest = load_manifest(generated_axi[0])
    ports = {p["name"]: (p["direction"], p["width"])
             for p in manifest["blocks"]["axi_controller"]["ports"]}
    top = AxiController(params=SMALL, id_width=AXI_ID_WIDTH)
    want = {name: ("input" if member.flow is wiring.In else "output",
                   Shape.cast(member.shape).width)
            for name, member in top.signature.members.items()}
    assert ports == {**want, "clk": ("input", 1), "rst": ("input", 1)}
    assert {"s_axi_awvalid", "m_axi_arready", "s_axil_rdata"} <= set(ports)
    fields = manifest["axi"]["data_address"]
    assert [name for name, _ in sorted(fields.items(), key=lambda f: f[1][0])] == [
        "offset", "line", "worker", "clear"]
    assert fields["line"] == [4, 32]    # 16-byte lines


def test_the_command_line_refuses_bad_parameters_and_shows_a_fault_whole(monkeypatch, capsys,
                                                                         tmp_path):
    from neuron_fabric.gen import __main__ as cli

    assert cli.main(["--preset", "small", "--max-workers", "1", "--out", str(tmp_path)]) == 2
    assert "gen: bad parameters: max_workers must be between 2 and 64, not 1" in \
        capsys.readouterr().err

    def faulty(*args, **kwargs):
        raise ValueError("a fault in the generator")

    monkeypatch.setattr(cli, "generate", faulty)
    with pytest.raises(ValueError, match="a fault in the generator"):
        cli.main(["--preset", "small", "--out", str(tmp_path)])
