"""Parameter trees of the models the traffic figures are quoted for, built without downloads.

The traffic of a route depends only on how many elements each parameter has and which role
:func:`neuron_fabric.host.roles.classify` gives it, so these modules reproduce the published
architectures' parameter trees (shapes, module types, registration order and the usual names)
and nothing else: they have no ``forward`` and load no weights.

- ``resnet18_cifar100``: ResNet-18 with the CIFAR stem (3x3 stride-1 first convolution, no
  max-pool) and a 100-class head;
- ``resnet18_imagenet``, ``resnet50_imagenet``: the ImageNet ResNets (1000 classes);
- ``distilbert_sst2``: DistilBERT-base (uncased vocabulary) with the two-class sequence
  classification head (``pre_classifier`` then ``classifier``);
- ``gpt2_small``: GPT-2 small with the language-model head tied to the token embedding.

Names follow the common implementations (``layer1.0.bn1.weight``, ``fc.weight``;
``distilbert.transformer.layer.0.attention.q_lin.weight``; ``transformer.h.0.attn.c_attn.weight``,
``lm_head``). GPT-2's projections are ``Linear`` layers here where the common implementation
has a transposed ``Conv1D``; the element counts and the roles are the same.

:func:`build` constructs on the ``meta`` device by default: no memory is allocated and no
initializer runs, so even GPT-2 builds in well under a second, and ``named_parameters()``,
``numel()`` and the module types (all that classification and counting read) are intact.
"""

import torch
from torch import nn

__all__ = ["MODELS", "PUBLISHED_PARAMETERS", "ResNet", "DistilBertClassifier", "GPT2LMHead",
           "build", "count_parameters"]

#: Published total parameter counts (what model cards and papers quote), for the checks.
PUBLISHED_PARAMETERS = {
    "resnet18_imagenet": 11_689_512,
    "resnet50_imagenet": 25_557_032,
    "distilbert_sst2": 66_955_010,
    "gpt2_small": 124_439_808,
}


# ---------------------------------------------------------------------------- ResNet

class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)


def _downsample(inplanes, outplanes, stride):
    # The projection shortcut exists only where the shape changes, as in the original.
    if stride == 1 and inplanes == outplanes:
        return None
    return nn.Sequential(nn.Conv2d(inplanes, outplanes, 1, stride=stride, bias=False),
                         nn.BatchNorm2d(outplanes))


class ResNet(nn.Module):
    """A ResNet parameter tree: ``block`` is ``"basic"`` or ``"bottleneck"``, ``layers`` the
    blocks per stage, ``stem`` ``"imagenet"`` (7x7 stride 2 and max-pool) or ``"cifar"``
    (3x3 stride 1, no pool)."""

    def __init__(self, *, block, layers, num_classes, stem="imagenet"):
        super().__init__()
        kind = {"basic": _BasicBlock, "bottleneck": _Bottleneck}[block]
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        else:
            self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        inplanes = 64
        for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), layers), start=1):
            blocks = []
            for index in range(count):
                stride = 2 if stage > 1 and index == 0 else 1
                blocks.append(kind(inplanes, planes, stride))
                inplanes = planes * kind.expansion
            setattr(self, f"layer{stage}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)


# ---------------------------------------------------------------------------- DistilBERT

class _DistilBertEmbeddings(nn.Module):
    def __init__(self, *, vocab, positions, dim):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(positions, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(0.1)


class _DistilBertAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        self.q_lin = nn.Linear(dim, dim)
        self.k_lin = nn.Linear(dim, dim)
        self.v_lin = nn.Linear(dim, dim)
        self.out_lin = nn.Linear(dim, dim)


class _DistilBertFFN(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        self.lin1 = nn.Linear(dim, hidden)
        self.lin2 = nn.Linear(hidden, dim)
        self.activation = nn.GELU()


class _DistilBertLayer(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.attention = _DistilBertAttention(dim)
        self.sa_layer_norm = nn.LayerNorm(dim, eps=1e-12)
        self.ffn = _DistilBertFFN(dim, hidden)
        self.output_layer_norm = nn.LayerNorm(dim, eps=1e-12)


class _DistilBertTransformer(nn.Module):
    def __init__(self, *, layers, dim, hidden):
        super().__init__()
        self.layer = nn.ModuleList(_DistilBertLayer(dim, hidden) for _ in range(layers))


class _DistilBert(nn.Module):
    def __init__(self, *, vocab, positions, layers, dim, hidden):
        super().__init__()
        self.embeddings = _DistilBertEmbeddings(vocab=vocab, positions=positions, dim=dim)
        self.transformer = _DistilBertTransformer(layers=layers, dim=dim, hidden=hidden)


class DistilBertClassifier(nn.Module):
    """DistilBERT-base with the sequence-classification head: the encoder under ``distilbert``,
    then ``pre_classifier`` (dim x dim) and ``classifier`` (dim x labels)."""

    def __init__(self, *, num_labels=2, vocab=30522, positions=512, layers=6, dim=768,
                 hidden=3072):
        super().__init__()
        self.distilbert = _DistilBert(vocab=vocab, positions=positions, layers=layers, dim=dim,
                                      hidden=hidden)
        self.pre_classifier = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, num_labels)
        self.dropout = nn.Dropout(0.2)


# ---------------------------------------------------------------------------- GPT-2

class _GPT2Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)


class _GPT2MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)
        self.act = nn.GELU(approximate="tanh")


class _GPT2Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = _GPT2Attention(dim)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = _GPT2MLP(dim)


class _GPT2Model(nn.Module):
    def __init__(self, *, vocab, positions, layers, dim):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(positions, dim)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(_GPT2Block(dim) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)


class GPT2LMHead(nn.Module):
    """GPT-2 (small by default) with ``lm_head`` tied to ``transformer.wte``: the tied matrix
    appears once in ``named_parameters()``, as ``transformer.wte.weight``."""

    def __init__(self, *, vocab=50257, positions=1024, layers=12, dim=768):
        super().__init__()
        self.transformer = _GPT2Model(vocab=vocab, positions=positions, layers=layers, dim=dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight


# ---------------------------------------------------------------------------- registry

_FACTORIES = {
    "resnet18_cifar100": lambda: ResNet(block="basic", layers=(2, 2, 2, 2), num_classes=100,
                                        stem="cifar"),
    "resnet18_imagenet": lambda: ResNet(block="basic", layers=(2, 2, 2, 2), num_classes=1000),
    "resnet50_imagenet": lambda: ResNet(block="bottleneck", layers=(3, 4, 6, 3),
                                        num_classes=1000),
    "distilbert_sst2": lambda: DistilBertClassifier(num_labels=2),
    "gpt2_small": lambda: GPT2LMHead(),
}

#: Model names, in report order.
MODELS = tuple(_FACTORIES)


def build(name, *, device="meta"):
    """Construct the named model (one of :data:`MODELS`) on ``device``.

    Raises ``ValueError`` for an unknown name.
    """
    if name not in _FACTORIES:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, not {name!r}")
    with torch.device(device):
        return _FACTORIES[name]()


def count_parameters(model):
    """Elements of ``model``'s parameters, each shared parameter once."""
    return sum(param.numel() for param in model.parameters())
