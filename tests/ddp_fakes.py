"""Stand-ins for what DDP hands a communication hook, shared by the hook tests."""


class FakeBucket:
    """What DDP hands a hook: a flat buffer holding the parameters' gradients back to back."""

    def __init__(self, params, grads, index=0):
        import torch

        self._params = params
        self._buffer = torch.cat([g.reshape(-1) for g in grads]).clone()
        self._index = index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def index(self):
        return self._index
