"""Experiments on real training runs, each a command with a report under ``build/``.

- :mod:`.workloads`: the digits CNN and the character-level language model (PyTorch);
- :mod:`.traces`: gradient trace capture (PyTorch) and loading (NumPy);
- :mod:`.train_check`: DDP training checks, FP32 against the low-bit routes and the runtime;
- :mod:`.combiner_eval`: the write-combining accumulator's traffic on real traces;
- :mod:`.bench`: the golden model's throughput against a memory copy.
"""
