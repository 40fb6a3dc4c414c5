"""Parameter roles: which part of a model each parameter belongs to.

The runtime routes a gradient by its parameter's role (for example the head and the norms on
FP32, the backbone on a low-bit route), so the role is decided once, from the module tree, by
:func:`classify`. The role names are plain strings so that traces and profiles can store them.

This module imports PyTorch only inside :func:`classify`; the constants are usable without it.
"""

__all__ = ["HEAD", "EMBEDDING", "NORM", "BIAS", "BACKBONE", "ROLES", "HEAD_ATTRIBUTE",
           "check_roles", "find_head", "classify"]

HEAD = "head"
EMBEDDING = "embedding"
NORM = "norm"
BIAS = "bias"
BACKBONE = "backbone"

#: Every role, in priority order: when one parameter is shared by several modules (tied
#: weights), the first role in this tuple that any of its owners gives it wins, so a weight
#: tied between an embedding and the head is a head parameter.
ROLES = (HEAD, EMBEDDING, NORM, BIAS, BACKBONE)

#: A model may name its output layer by setting this attribute to the submodule's qualified
#: name (as in ``model.named_modules()``), for example ``head_module = "classifier.2"``.
HEAD_ATTRIBUTE = "head_module"


def check_roles(roles, *, name="roles"):
    """Validate a collection of role names and return it as a ``frozenset``.

    Raises ``TypeError`` when ``roles`` is a single string or not iterable, and ``ValueError``
    for an unknown role or an empty collection.
    """
    if isinstance(roles, str):
        raise TypeError(f"{name} must be a collection of role names such as ({roles!r},), "
                        f"not the string {roles!r}")
    try:
        chosen = frozenset(roles)
    except TypeError:
        raise TypeError(f"{name} must be a collection of role names from {ROLES}, "
                        f"not {roles!r}") from None
    unknown = sorted(str(role) for role in chosen if role not in ROLES)
    if unknown:
        raise ValueError(f"{name} must contain only roles from {ROLES}, not {unknown}")
    if not chosen:
        raise ValueError(f"{name} must name at least one role from {ROLES}, not an empty "
                         "collection; pass None to select every role")
    return chosen


def _norm_types(nn):
    names = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
             "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
             "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
             "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d",
             "LayerNorm", "GroupNorm", "RMSNorm")
    return tuple(getattr(nn, name) for name in names if hasattr(nn, name))


def find_head(model):
    """Return the qualified name of ``model``'s output layer.

    The head is, in order of precedence:

    1. the submodule named by the model's ``head_module`` attribute (:data:`HEAD_ATTRIBUTE`),
       when the model sets it;
    2. otherwise the last ``torch.nn.Linear`` in registration order (``model.named_modules()``),
       which is the output layer of the usual classifier and language-model layouts.

    Raises ``ValueError`` when the named submodule does not exist or the model has no
    ``Linear`` layer and names no head.
    """
    from torch import nn

    modules = dict(model.named_modules())
    named = getattr(model, HEAD_ATTRIBUTE, None)
    if named is not None:
        if not isinstance(named, str) or named not in modules or named == "":
            choices = [name for name in modules if name]
            raise ValueError(
                f"{type(model).__name__}.{HEAD_ATTRIBUTE} must be the qualified name of one of "
                f"its submodules {choices}, not {named!r}")
        return named
    linears = [name for name, module in modules.items() if isinstance(module, nn.Linear)]
    if not linears:
        raise ValueError(
            f"model {type(model).__name__} must have a torch.nn.Linear output layer or name its "
            f"head in the attribute {HEAD_ATTRIBUTE!r}; it has neither")
    return linears[-1]


def classify(model):
    """Map every parameter of ``model`` to its role.

    Returns a dict from each name of ``model.named_parameters()`` (in that order) to one of
    :data:`ROLES`, decided from the module that owns the parameter:

    - every parameter of the head (see :func:`find_head`), weight and bias alike: ``"head"``;
    - parameters of ``torch.nn.Embedding`` and ``torch.nn.EmbeddingBag``: ``"embedding"``;
    - parameters of normalization layers (``BatchNorm*``, ``SyncBatchNorm``, ``InstanceNorm*``,
      ``LayerNorm``, ``GroupNorm``, ``RMSNorm``): ``"norm"``;
    - any other parameter whose own name is ``bias`` or ends in ``_bias``: ``"bias"``;
    - everything else (weights of linear, convolution and attention layers, free-standing
      parameters): ``"backbone"``.

    A parameter shared by several modules takes the highest-priority role of its owners, in the
    order of :data:`ROLES`. Raises ``TypeError`` when ``model`` is not a ``torch.nn.Module``.
    """
    from torch import nn

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    head = find_head(model)
    norm_types = _norm_types(nn)
    embedding_types = (nn.Embedding, nn.EmbeddingBag)
    priority = {role: rank for rank, role in enumerate(ROLES)}

    best = {}   # id(parameter) -> role
    for module_name, module in model.named_modules():
        in_head = module_name == head or module_name.startswith(head + ".")
        for local, param in module.named_parameters(recurse=False):
            if in_head:
                role = HEAD
            elif isinstance(module, embedding_types):
                role = EMBEDDING
            elif isinstance(module, norm_types):
                role = NORM
            elif local == "bias" or local.endswith("_bias"):
                role = BIAS
            else:
                role = BACKBONE
            key = id(param)
            if key not in best or priority[role] < priority[best[key]]:
                best[key] = role
    return {name: best[id(param)] for name, param in model.named_parameters()}
