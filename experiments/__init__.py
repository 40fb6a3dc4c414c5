"""Experiments on real training runs, each a command with a report under ``build/``.

- :mod:`.workloads`: the digits CNN and the character-level language model (PyTorch);
- :mod:`.workers`: the gloo worker processes the training experiments run on;
- :mod:`.traces`: gradient trace capture (PyTorch; the files are read by
  :mod:`neuron_fabric.host.traces`);
- :mod:`.train_check`: DDP training checks, FP32 against the low-bit routes and the runtime;
- :mod:`.train_rtl`: DDP training with the Verilated top folding the low-bit buckets, in
  lockstep with the golden hooks;
- :mod:`.combiner_eval`: the write-combining accumulator's traffic on real traces;
- :mod:`.scale_models`: the parameter trees of the paper-scale models, built without downloads;
- :mod:`.traffic_scale`: every profile's traffic on those models, counted as the hooks count it;
- :mod:`.hook_cost`: the hooks' step time on the same buckets with real workers;
- :mod:`.bench`: the golden model's throughput against a memory copy;
- :mod:`.results`: the results table, from the reports the other commands write.
"""
