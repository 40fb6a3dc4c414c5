"""The package layout keeps its promises: the golden model is NumPy, Numba and the standard library."""

import ast
import pathlib
import subprocess
import sys

import neuron_fabric.golden

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
