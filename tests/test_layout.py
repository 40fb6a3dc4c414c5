"""The package layout keeps its promises: the golden model is NumPy and the standard library."""

import pkgutil
import subprocess
import sys

import neuron_fabric.golden


def test_the_golden_model_imports_numpy_and_the_standard_library_only():
    modules = [f"neuron_fabric.golden.{m.name}" for m in pkgutil.iter_modules(neuron_fabric.golden.__path__)]
    assert "neuron_fabric.golden.gbinary" in modules
    # A fresh interpreter, so that nothing another test imported is counted.
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "third_party = sorted({m.split('.')[0] for m in sys.modules}\n"
        "                     - set(sys.stdlib_module_names) - {'numpy', 'neuron_fabric'})\n"
        "print(' '.join(third_party))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    foreign = [m for m in result.stdout.split() if not m.startswith("_")]
    assert foreign == [], f"the golden model imports {foreign}; it may import NumPy only"
