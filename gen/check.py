"""Compile checks of generated Verilog: Icarus elaborates it, Verilator lints it."""

import pathlib
import subprocess

from ..sim.toolchain import check_iverilog, default_verilator_root, verilator_env

__all__ = ["LINT_WAIVERS", "icarus_compile", "verilator_lint", "CheckError"]

#: Verilator warnings switched off, each with the reason. Everything else is an error.
LINT_WAIVERS = {
    "WIDTHEXPAND": "Yosys compares and assigns operands of different widths without explicit "
                   "casts (`addr == 3'h4` on a 9-bit bus); Verilog zero-extends them as intended.",
    "WIDTHTRUNC": "Yosys writes a reduction as `!vector` (true when every bit is 0), which "
                  "Verilator reads as a 1-bit operator given a vector.",
    "CASEOVERLAP": "Yosys writes priority logic as `casez` whose first matching item wins; the "
                   "overlap is that priority, as Verilog defines it.",
    "UNOPTFLAT": "Yosys names the bits of an engine's output vector after the port, and some "
                 "of them feed others (the readout chooses among the SIGN and GATED lines); "
                 "no bit depends on itself, so no loop is there.",
}


class CheckError(RuntimeError):
    """A generated file failed a compile or lint check."""


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


def verilator_lint(verilog_file, *, module, root=None):
    """``verilator --lint-only`` on ``module`` (Verilator's default warnings, :data:`LINT_WAIVERS` off)."""
    path = pathlib.Path(verilog_file)
    root = pathlib.Path(root) if root else default_verilator_root()
    waivers = [f"-Wno-{name}" for name in LINT_WAIVERS]
    return _run([str(root / "bin" / "verilator"), "--lint-only", *waivers,
                 "--top-module", module, path.name],
                cwd=path.parent, env=verilator_env(root), what=f"verilator lint on {path.name}")
