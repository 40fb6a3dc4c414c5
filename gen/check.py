"""Compile checks of generated Verilog: Icarus elaborates it, Verilator lints it with ``-Wall``
and nothing but the generated configuration (``.vlt``), with and without public signals."""

import pathlib
import subprocess

from .tools import ToolError, check_iverilog, default_verilator_root, verilator_env

__all__ = ["icarus_compile", "verilator_lint", "LINT_MODES", "CheckError"]


class CheckError(ToolError):
    """A generated file failed a compile or lint check (the tool ran and refused it)."""


def _run(args, *, cwd, env=None, what):
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode:
        raise CheckError(f"{what} failed (exit {result.returncode}):\n"
                         f"{(result.stdout + result.stderr).strip()}")
    return (result.stdout + result.stderr).strip()


def icarus_compile(verilog_file, *, module):
    """Elaborate ``module`` from ``verilog_file`` with Icarus (``-g2012``)."""
    path = pathlib.Path(verilog_file)
    check_iverilog()
    return _run(["iverilog", "-g2012", "-s", module, "-o", "/dev/null", path.name],
                cwd=path.parent, what=f"iverilog on {path.name}")


#: Verilator's lint modes: as a plain build sees the design, and with every signal public as
#: cocotb builds it. Each hides warnings the other shows: public signals count as read
#: (UNUSEDSIGNAL), and keep more vectors whole, so more of them look circular (UNOPTFLAT).
LINT_MODES = {"plain": (), "public": ("--public-flat-rw",)}


def verilator_lint(verilog_file, *, module, config, root=None):
    """``verilator --lint-only -Wall`` on ``module`` from ``verilog_file`` in each of
    :data:`LINT_MODES`, with the Verilator configuration ``config`` (the generated ``.vlt``)
    as its only waivers."""
    path = pathlib.Path(verilog_file)
    root = pathlib.Path(root) if root else default_verilator_root()
    for mode, options in LINT_MODES.items():
        _run([str(root / "bin" / "verilator"), "--lint-only", "-Wall", *options,
              str(pathlib.Path(config).resolve()), "--top-module", module, path.name],
             cwd=path.parent, env=verilator_env(root),
             what=f"verilator lint ({mode}) on {path.name}")
