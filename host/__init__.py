"""The host side: what runs on the workers beside the device.

- :mod:`.roles`: the role of every parameter (weights, biases, norms, embeddings, head);
- :mod:`.runtime`: operating profiles (``profiles/*.toml``), bindings of roles to routes,
  the health monitor and the reducer-capacity check (no PyTorch needed);
- :mod:`.traces`: gradient trace files, read back with NumPy alone;
- :mod:`.hooks`: DDP communication hooks that carry out one route per parameter with the
  golden model standing in for the device (needs PyTorch, so it is imported on demand).
"""

from . import roles, runtime

__all__ = ["roles", "runtime"]
