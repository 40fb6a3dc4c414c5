"""NEURON-Fabric: near-memory low-bit gradient aggregation.

The subpackages are the repository's top-level folders:

- :mod:`neuron_fabric.golden`: the bit-exact reference model (NumPy, and Numba for two loops);
- :mod:`neuron_fabric.host`: the host runtime and the DDP communication hooks;
- :mod:`neuron_fabric.experiments`: workloads, traces, training checks and benchmarks;
- :mod:`neuron_fabric.hw`: Amaranth hardware blocks;
- :mod:`neuron_fabric.gen`: Verilog generation;
- :mod:`neuron_fabric.sim`: cocotb testbenches for the emitted Verilog;
- :mod:`neuron_fabric.fpga`: ECP5 synthesis and place-and-route flows.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("neuron-fabric")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
