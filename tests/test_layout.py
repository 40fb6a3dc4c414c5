"""The package layout keeps its promises: the golden model is NumPy, Numba and the standard
library, and the folders import downward only, late imports (inside functions) included."""

import ast
import importlib
import pathlib
import subprocess
import sys
import tomllib

import pytest

import neuron_fabric.golden

#: The folders of the import root, and the folders each one may import: every edge points
#: down. The golden model stands alone; the host runtime and the hardware sit on it side by
#: side; the Verilog generator on the hardware (it also finds the tools every flow runs); the
#: simulation on the generated Verilog and on the host (its device serves the hooks, its
#: benches replay the host's traces); the FPGA flow on the simulation (its timing model runs
#: the Amaranth bench); the proofs on the hardware (and the generator's tools); the experiments on whatever they measure.
LAYERS = {
    "golden": set(),
    "host": {"golden"},
    "hw": {"golden"},
    "gen": {"golden", "hw"},
    "sim": {"golden", "host", "hw", "gen"},
    "fpga": {"golden", "hw", "gen", "sim"},
    "formal": {"golden", "hw", "gen"},
    "experiments": {"golden", "host", "hw", "gen", "sim"},
}

# What the golden model may import besides the standard library and itself: NumPy for its
# arrays, Numba (and its llvmlite) for the loops it compiles (golden/kernels.py).
ALLOWED = {"numpy", "numba", "llvmlite"}


def imported_packages(path):
    """The top-level packages a module's absolute imports name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_golden_model_imports_numpy_numba_and_the_standard_library_only():
    modules = sorted(pathlib.Path(neuron_fabric.golden.__file__).parent.glob("*.py"))
    assert any(module.name == "gbinary.py" for module in modules)
    foreign = {module.name: sorted(imported_packages(module) - set(sys.stdlib_module_names) - ALLOWED
                                   - {"neuron_fabric"})
               for module in modules}
    foreign = {name: packages for name, packages in foreign.items() if packages}
    assert foreign == {}, f"golden modules import {foreign}; they may import {sorted(ALLOWED)} only"


def test_importing_the_golden_model_leaves_numba_until_a_kernel_runs():
    # A fresh interpreter, so that nothing another test imported is counted.
    script = (
        "import sys, numpy as np\n"
        "import neuron_fabric.golden as golden\n"
        "print('numba' in sys.modules)\n"
        "golden.gternary.encode(np.ones(8, dtype=np.float32), ratio=0)\n"
        "print('numba' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"]


def _folder(name):
    return pathlib.Path(importlib.import_module(f"neuron_fabric.{name}").__file__).parent


def module_imports(path, folder):
    """``[(module, line, late)]``: every module of the import root that the file at ``path``
    (a module of ``folder``) imports, as ``"folder.module"`` (``"folder"`` for a package),
    absolute or relative, at the top or inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    late = {id(node) for function in ast.walk(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module.split(".")
            else:
                base = ["neuron_fabric", folder][:3 - node.level]
                base += node.module.split(".") if node.module else []
            # ``from . import x`` and ``from .. import golden`` name modules in the aliases.
            names = [".".join(base + ([alias.name] if len(base) < 3 else []))
                     for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "neuron_fabric" and len(parts) > 1:
                found.append((".".join(parts[1:3]), node.lineno, id(node) in late))
    return found


def _all_imports():
    for folder in LAYERS:
        for path in sorted(_folder(folder).glob("*.py")):
            yield folder, path, module_imports(path, folder)


def test_every_folder_of_the_import_root_has_a_layer():
    pyproject = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert set(declared["packages"]) - {"neuron_fabric"} == {f"neuron_fabric.{name}"
                                                            for name in LAYERS}


def test_folders_import_only_the_folders_below_them():
    wrong = []
    for folder, path, imports in _all_imports():
        for module, line, late in imports:
            target = module.split(".")[0]
            if target != folder and target not in LAYERS[folder]:
                wrong.append(f"{folder}/{path.name}:{line} imports {module}"
                             + (" (inside a function)" if late else ""))
    assert wrong == [], ("imports against the layers (tests/test_layout.py, LAYERS):\n"
                         + "\n".join(wrong))


def test_modules_import_each_other_without_a_cycle():
    graph = {}
    for folder, path, imports in _all_imports():
        if path.stem == "__init__":
            continue
        graph[f"{folder}.{path.stem}"] = {module for module, _, _ in imports if "." in module}
    graph = {name: {target for target in targets if target in graph and target != name}
             for name, targets in graph.items()}
    done, stack = set(), []

    def visit(name):
        if name in stack:
            return stack[stack.index(name):] + [name]
        if name in done:
            return None
        stack.append(name)
        for target in sorted(graph[name]):
            cycle = visit(target)
            if cycle:
                return cycle
        stack.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = visit(name)
        assert cycle is None, f"modules import each other in a circle: {' -> '.join(cycle)}"


@pytest.mark.parametrize("source, folder, expected", [
    ("from ..sim.toolchain import x", "gen", [("sim.toolchain", 1, False)]),
    ("from .. import golden", "hw", [("golden", 1, False)]),
    ("from . import tools", "gen", [("gen.tools", 1, False)]),
    ("def f():\n    from .check import x", "gen", [("gen.check", 2, True)]),
    ("import neuron_fabric.sim.harness as h", "experiments", [("sim.harness", 1, False)]),
    ("from neuron_fabric.golden import combiner", "sim", [("golden.combiner", 1, False)]),
    ("import numpy", "golden", []),
])
def test_imports_are_read_whatever_their_form(tmp_path, source, folder, expected):
    path = tmp_path / "module.py"
    path.write_text(source + "\n")
    assert module_imports(path, folder) == expected
