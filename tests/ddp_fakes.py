"""Stand-ins for what DDP hands a communication hook, shared by the hook tests."""

from neuron_fabric.experiments.hook_cost import GradBucket


class FakeBucket(GradBucket):
    """What DDP hands a hook: a flat buffer holding the parameters' gradients back to back."""

    def __init__(self, params, grads, index=0):
        import torch

        super().__init__(params, torch.cat([g.reshape(-1) for g in grads]).clone(), index)
