"""Real training workloads run as simulated data-parallel workers, for gradient traces.

Two small models learn from real data that ships on every machine (no downloads):

- ``digits_cnn``: a convolutional classifier with batch normalization on scikit-learn's
  handwritten digits (1,797 images of 8x8 pixels), with a seeded held-out test split;
- ``char_lm``: a character-level pre-norm transformer language model on the source text of a
  fixed list of Python standard-library modules.

:func:`train` runs ``workers`` replicas of one model in this process. The training data is cut
into disjoint shards, one per worker; at every step each worker draws its own minibatch from its
own shard and computes the gradient of its mean loss, exactly as one rank of a data-parallel job
would. The model is then updated with the mean of the workers' gradients (the sum in worker
order, divided by the number of workers), which is what an FP32 all-reduce hands every rank.
Buffers (batch-norm running statistics) follow worker 0, as data-parallel training that
broadcasts buffers from rank 0 does.

Everything is seeded: the model initialisation draws from PyTorch's generator seeded with
``seed`` inside a forked random state (the caller's global state is left as it was), the data
split and the minibatch sampling from ``numpy.random.Generator`` objects derived from ``seed``.
Training runs with deterministic algorithms on one thread, so two runs with the same arguments
give identical gradients on the same machine and software.
"""

import contextlib
import dataclasses
import hashlib
import pathlib
import sysconfig
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..host import roles as _roles
from ..golden.validate import check_int

__all__ = ["WORKLOADS", "STDLIB_FILES", "DigitsConfig", "CharLMConfig", "DigitsCNN",
           "CharTransformer", "Run", "check_workload", "make_config", "default_capture_steps",
           "build_model", "train", "deterministic_torch"]

WORKLOADS = ("digits_cnn", "char_lm")

#: Standard-library modules whose source text the language model reads, relative to
#: ``sysconfig.get_paths()["stdlib"]``. They exist in every supported Python version; their
#: text differs between versions, so a run records each file's byte count and SHA-256.
STDLIB_FILES = ("argparse.py", "collections/__init__.py", "dataclasses.py", "enum.py",
                "functools.py", "inspect.py", "json/decoder.py", "random.py", "textwrap.py",
                "typing.py")


def _check_positive_float(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be greater than 0, not {value!r}")


def _check_fraction(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {value!r}")
    if not 0 < value < 1:
        raise ValueError(f"{name} must be between 0 and 1 (exclusive), not {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DigitsConfig:
    """Configuration of ``digits_cnn``.

    ``batch`` is the minibatch of one worker; ``channels`` the output channels of the two 3x3
    convolutions (each followed by batch normalization and ReLU, then a 2x2 max-pool);
    ``hidden`` the width of the hidden linear layer before the 10-way head. Optimizer: SGD with
    ``momentum`` and ``weight_decay``, learning rate ``lr``. ``test_fraction`` of the images
    are held out for the test accuracy.
    """

    train_steps: int = 150
    batch: int = 32
    channels: tuple = (16, 32)
    hidden: int = 64
    lr: float = 0.02
    momentum: float = 0.9
    weight_decay: float = 0.0
    test_fraction: float = 0.2

    def __post_init__(self):
        check_int("train_steps", self.train_steps, low=1)
        check_int("batch", self.batch, low=1)
        object.__setattr__(self, "channels", tuple(self.channels))
        if len(self.channels) != 2:
            raise ValueError(f"channels must be two channel counts, not {self.channels!r}")
        for index, count in enumerate(self.channels):
            check_int(f"channels[{index}]", count, low=1)
        check_int("hidden", self.hidden, low=1)
        _check_positive_float("lr", self.lr)
        if isinstance(self.momentum, bool) or not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be at least 0 and below 1, not {self.momentum!r}")
        if isinstance(self.weight_decay, bool) or not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be at least 0, not {self.weight_decay!r}")
        _check_fraction("test_fraction", self.test_fraction)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CharLMConfig:
    """Configuration of ``char_lm``.

    ``batch`` windows of ``context`` characters per worker and step; the model has ``layers``
    pre-norm blocks of width ``d_model`` with ``heads`` causal attention heads and a feed-forward
    layer ``ff_mult`` times wider. Optimizer: Adam with learning rate ``lr``. The text is the
    first ``bytes_per_file`` bytes of each of ``files`` (paths relative to the standard library);
    the last ``val_fraction`` of each file is held out, and the losses are evaluated on up to
    ``eval_windows`` fixed windows of the training and of the held-out text.
    """

    train_steps: int = 250
    batch: int = 8
    context: int = 64
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    ff_mult: int = 4
    lr: float = 3e-3
    files: tuple = STDLIB_FILES
    bytes_per_file: int = 24576
    val_fraction: float = 0.1
    eval_windows: int = 64

    def __post_init__(self):
        for name in ("train_steps", "batch", "context", "d_model", "heads", "layers", "ff_mult",
                     "eval_windows"):
            check_int(name, getattr(self, name), low=1)
        check_int("bytes_per_file", self.bytes_per_file, low=64)
        if self.d_model % self.heads:
            raise ValueError(f"d_model must be a multiple of heads={self.heads}, "
                             f"not {self.d_model!r}")
        _check_positive_float("lr", self.lr)
        _check_fraction("val_fraction", self.val_fraction)
        if isinstance(self.files, str):
            raise TypeError(f"files must be a sequence of paths, not the string {self.files!r}")
        object.__setattr__(self, "files", tuple(sorted(self.files)))
        if not self.files:
            raise ValueError("files must name at least one standard-library file, not ()")


_CONFIGS = {"digits_cnn": DigitsConfig, "char_lm": CharLMConfig}


def check_workload(workload):
    """Return ``workload`` when it is one of :data:`WORKLOADS`; raise ``ValueError`` otherwise."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, not {workload!r}")
    return workload


def make_config(workload, **overrides):
    """Return the default configuration of ``workload`` with ``overrides`` applied.

    Raises ``ValueError`` for an unknown workload or a bad value and ``TypeError`` for an option
    the workload does not have (the message lists the options it has).
    """
    cls = _CONFIGS[check_workload(workload)]
    fields = [field.name for field in dataclasses.fields(cls)]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise TypeError(f"{workload} has no option {', '.join(unknown)}; "
                        f"its options are {', '.join(fields)}")
    return cls(**overrides)


def default_capture_steps(train_steps, *, count=6):
    """Return ``count`` training steps spread evenly from step 0 to the last step, distinct."""
    check_int("train_steps", train_steps, low=1)
    check_int("count", count, low=1)
    return sorted({int(round(s)) for s in np.linspace(0, train_steps - 1, count)})


def _check_capture_steps(steps, train_steps):
    rule = f"distinct training steps from 0 to {train_steps - 1}"
    try:
        values = list(steps)
    except TypeError:
        raise TypeError(f"steps must be a sequence of {rule}, not {steps!r}") from None
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"steps must be a sequence of {rule}, not {steps!r}")
    values = [int(value) for value in values]
    if not values or len(set(values)) != len(values) or \
            min(values) < 0 or max(values) >= train_steps:
        raise ValueError(f"steps must be {rule} (train_steps={train_steps}), not {steps!r}; "
                         "raise train_steps or choose other steps")
    return sorted(values)


@contextlib.contextmanager
def deterministic_torch(*, threads=1):
    """Run the body with PyTorch's deterministic algorithms on ``threads`` threads.

    Both are process-wide settings; the previous ones are restored on exit.
    """
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    previous_threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


# ---------------------------------------------------------------------------- models

class DigitsCNN(nn.Module):
    """Two 3x3 convolutions with batch normalization, a hidden linear layer and a 10-way head.

    Input ``(batch, 1, 8, 8)`` pixel intensities scaled to [0, 1]; output ``(batch, 10)`` logits.
    The convolutions have no bias (batch normalization supplies the shift).
    """

    head_module = "head"

    def __init__(self, *, channels=(16, 32), hidden=64, classes=10):
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1, bias=False), nn.BatchNorm2d(c1), nn.ReLU(),
            nn.Conv2d(c1, c2, 3, padding=1, bias=False), nn.BatchNorm2d(c2), nn.ReLU(),
            nn.MaxPool2d(2))
        self.hidden = nn.Linear(c2 * 4 * 4, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        x = self.features(x).flatten(1)
        return self.head(F.relu(self.hidden(x)))


class _Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a GELU feed-forward layer."""

    def __init__(self, *, d_model, heads, ff_mult):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff_in = nn.Linear(d_model, ff_mult * d_model)
        self.ff_out = nn.Linear(ff_mult * d_model, d_model)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.ff_out(F.gelu(self.ff_in(self.norm2(x))))


class CharTransformer(nn.Module):
    """Character language model: token and position embeddings, pre-norm blocks, a final
    LayerNorm and a linear head over the vocabulary.

    Input ``(batch, length)`` token indices with ``length <= context``; output
    ``(batch, length, vocab)`` logits for the next token at every position.
    """

    head_module = "head"

    def __init__(self, *, vocab, context, d_model, heads, layers, ff_mult):
        super().__init__()
        self.token = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(_Block(d_model=d_model, heads=heads, ff_mult=ff_mult)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        for embedding in (self.token, self.position):
            nn.init.normal_(embedding.weight, std=0.02)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


# ---------------------------------------------------------------------------- data

def _shard(indices, workers, *, minimum, what):
    shards = np.array_split(indices, workers)
    smallest = min(len(shard) for shard in shards)
    if smallest < minimum:
        raise ValueError(
            f"workers={workers} leaves shards of {smallest} {what}, fewer than the {minimum} one "
            "minibatch needs; use fewer workers or a smaller batch")
    return shards


class _Digits:
    name = "digits_cnn"
    final_metric = "test_accuracy"

    def __init__(self, config, *, workers, seed):
        from sklearn.datasets import load_digits

        self.config = config
        digits = load_digits()
        images = torch.from_numpy((digits.images / 16.0).astype(np.float32)).unsqueeze(1)
        labels = torch.from_numpy(digits.target.astype(np.int64))
        split_seq, *worker_seqs = np.random.SeedSequence(seed).spawn(workers + 1)
        order = np.random.default_rng(split_seq).permutation(len(labels))
        n_test = int(round(config.test_fraction * len(labels)))
        test, trainset = order[:n_test], order[n_test:]
        self.images, self.labels = images, labels
        self.test = torch.from_numpy(np.sort(test))
        self.train_index = torch.from_numpy(np.sort(trainset))
        self.shards = _shard(trainset, workers, minimum=config.batch, what="images")
        self.rngs = [np.random.default_rng(seq) for seq in worker_seqs]
        self.queues = [np.empty(0, dtype=np.int64) for _ in range(workers)]
        self.description = {
            "source": "sklearn.datasets.load_digits (handwritten digits, 8x8 pixels, 10 classes)",
            "samples": int(len(labels)),
            "train_samples": int(len(trainset)),
            "test_samples": int(n_test),
            "shard_samples": [int(len(shard)) for shard in self.shards],
            "pixel_scale": "intensity / 16",
        }

    def build_model(self):
        return DigitsCNN(channels=self.config.channels, hidden=self.config.hidden)

    def optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=self.config.lr,
                               momentum=self.config.momentum,
                               weight_decay=self.config.weight_decay)

    def batch(self, worker):
        """The next minibatch of ``worker``: epochs over its shard, reshuffled each epoch."""
        size = self.config.batch
        if len(self.queues[worker]) < size:
            self.queues[worker] = self.rngs[worker].permutation(self.shards[worker])
        chosen, self.queues[worker] = self.queues[worker][:size], self.queues[worker][size:]
        chosen = torch.from_numpy(chosen)
        return self.images[chosen], self.labels[chosen]

    def loss(self, model, batch):
        images, labels = batch
        return F.cross_entropy(model(images), labels)

    @torch.no_grad()
    def evaluate(self, model):
        model.eval()
        try:
            metrics = {}
            for split, index in (("train", self.train_index), ("test", self.test)):
                logits = model(self.images[index])
                labels = self.labels[index]
                metrics[f"{split}_loss"] = float(F.cross_entropy(logits, labels))
                metrics[f"{split}_accuracy"] = float((logits.argmax(1) == labels).float().mean())
        finally:
            model.train()
        return metrics


def _read_stdlib(files, bytes_per_file):
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    texts, records = [], []
    for name in files:
        path = root / name
        if not path.is_file():
            raise ValueError(
                f"files must name source files of the standard library under {root}, "
                f"but {name!r} is not there; choose files that exist in this Python")
        with open(path, "rb") as handle:
            data = handle.read(bytes_per_file)
        texts.append(data)
        records.append({"file": name, "bytes": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    return root, texts, records


class _CharLM:
    name = "char_lm"
    final_metric = "val_loss"

    def __init__(self, config, *, workers, seed):
        import platform

        self.config = config
        root, texts, records = _read_stdlib(config.files, config.bytes_per_file)
        corpus = np.frombuffer(b"".join(texts), dtype=np.uint8)
        alphabet = np.unique(corpus)
        lookup = np.zeros(256, dtype=np.int64)
        lookup[alphabet] = np.arange(len(alphabet))
        train_parts, val_parts = [], []
        for data in texts:
            tokens = lookup[np.frombuffer(data, dtype=np.uint8)]
            cut = len(tokens) - int(round(config.val_fraction * len(tokens)))
            train_parts.append(tokens[:cut])
            val_parts.append(tokens[cut:])
        train_tokens = np.concatenate(train_parts)
        val_tokens = np.concatenate(val_parts)
        window = config.context + 1
        if len(val_tokens) < window:
            raise ValueError(
                f"val_fraction={config.val_fraction} of {config.bytes_per_file} bytes per file "
                f"holds out {len(val_tokens)} characters, fewer than one window of "
                f"context+1={window}; raise bytes_per_file or val_fraction")
        self.vocab = len(alphabet)
        self.train_tokens = torch.from_numpy(train_tokens)
        shards = _shard(np.arange(len(train_tokens)), workers, minimum=window,
                        what="characters")
        self.shards = [(int(shard[0]), int(shard[-1]) + 1) for shard in shards]
        worker_seqs = np.random.SeedSequence(seed).spawn(workers + 1)[1:]
        self.rngs = [np.random.default_rng(seq) for seq in worker_seqs]
        self.offsets = torch.arange(window)
        self.eval_train = self._fixed_windows(train_tokens)
        self.eval_val = self._fixed_windows(val_tokens)
        self.description = {
            "source": "Python standard-library source text, read as bytes; one token per byte "
                      "value that occurs in the text",
            "python": platform.python_version(),
            "stdlib": str(root),
            "files": records,
            "bytes": int(len(corpus)),
            "vocab": int(self.vocab),
            "train_characters": int(len(train_tokens)),
            "val_characters": int(len(val_tokens)),
            "split": f"the last {config.val_fraction} of each file is held out",
            "shard_characters": [stop - start for start, stop in self.shards],
            "eval_windows": {"train": int(len(self.eval_train)), "val": int(len(self.eval_val))},
        }

    def _fixed_windows(self, tokens):
        """Up to ``eval_windows`` windows at evenly spaced positions over all of ``tokens``."""
        window = self.config.context + 1
        count = min(self.config.eval_windows, len(tokens) // window)
        starts = np.linspace(0, len(tokens) - window, count).astype(np.int64)
        return torch.from_numpy(tokens[starts[:, None] + np.arange(window)])

    def build_model(self):
        c = self.config
        return CharTransformer(vocab=self.vocab, context=c.context, d_model=c.d_model,
                               heads=c.heads, layers=c.layers, ff_mult=c.ff_mult)

    def optimizer(self, model):
        return torch.optim.Adam(model.parameters(), lr=self.config.lr)

    def batch(self, worker):
        """``batch`` windows at random positions inside the worker's own shard."""
        start, stop = self.shards[worker]
        window = self.config.context + 1
        starts = self.rngs[worker].integers(start, stop - window + 1, size=self.config.batch)
        return self.train_tokens[torch.from_numpy(starts)[:, None] + self.offsets]

    def loss(self, model, windows):
        logits = model(windows[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))

    @torch.no_grad()
    def evaluate(self, model):
        model.eval()
        try:
            return {"train_loss": float(self.loss(model, self.eval_train)),
                    "val_loss": float(self.loss(model, self.eval_val))}
        finally:
            model.train()


_WORKLOAD_TYPES = {"digits_cnn": _Digits, "char_lm": _CharLM}


def _setup(workload, *, workers, seed, overrides):
    check_workload(workload)
    workers = check_int("workers", workers, low=1)
    seed = check_int("seed", seed, low=0)
    config = make_config(workload, **overrides)
    data = _WORKLOAD_TYPES[workload](config, workers=workers, seed=seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = data.build_model()
    return data, model


def build_model(workload, *, workers=4, seed=0, **overrides):
    """Return the freshly initialised model that :func:`train` starts from with these arguments."""
    return _setup(workload, workers=workers, seed=seed, overrides=overrides)[1]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run:
    """What :func:`train` returns.

    Members
    -------
    workload, workers, seed, config
        The arguments of the run.
    model : torch.nn.Module
        The trained model.
    names : list of str
        Parameter names in ``model.named_parameters()`` order.
    roles : dict
        Parameter name to role (:func:`neuron_fabric.host.roles.classify`).
    steps : list of int
        The captured training steps.
    grads : dict
        Parameter name to a ``float32`` array ``(len(steps), workers, numel)``: every worker's
        gradient of its own minibatch loss at each captured step, flattened in C order.
    losses : numpy.ndarray
        ``(config.train_steps, workers)`` ``float64``: each worker's minibatch loss per step.
    metrics : dict
        Final evaluation of the trained model.
    final_metric : str
        The key of ``metrics`` that sums the run up (``test_accuracy`` or ``val_loss``).
    optimizer : str
        Class name of the optimizer (its settings are in ``config``).
    data : dict
        Description of the data source and of the shards.
    seconds : float
        Wall time of the run, set-up included.
    """

    workload: str
    workers: int
    seed: int
    config: object
    model: object
    names: list
    roles: dict
    steps: list
    grads: dict
    losses: np.ndarray
    metrics: dict
    final_metric: str
    optimizer: str
    data: dict
    seconds: float


def train(workload, *, workers=4, seed=0, steps=None, log=None, **overrides):
    """Train ``workload`` as ``workers`` simulated data-parallel workers and capture gradients.

    Parameters
    ----------
    workload : str
        One of :data:`WORKLOADS`.
    workers : int
        Number of simulated workers (at least 1); the training data is cut into that many
        disjoint shards.
    seed : int
        Seed of the initialisation, the data split and the minibatch sampling (at least 0).
    steps : sequence of int or None
        Training steps (counted from 0, before that step's update) at which every worker's
        gradient is recorded; ``None`` records :func:`default_capture_steps`.
    log : callable or None
        Called with one line of text per captured step.
    **overrides
        Fields of :class:`DigitsConfig` or :class:`CharLMConfig` (for example a smaller
        ``train_steps`` or ``d_model``).

    Returns a :class:`Run`. Raises ``ValueError`` for an unknown workload, ``workers < 1``, a
    negative seed, steps outside the run or a configuration the data cannot serve, and
    ``TypeError`` for an unknown option or a value of the wrong type.
    """
    started = time.perf_counter()
    data, model = _setup(workload, workers=workers, seed=seed, overrides=overrides)
    config = data.config
    train_steps = config.train_steps
    steps = default_capture_steps(train_steps) if steps is None else \
        _check_capture_steps(steps, train_steps)
    named = list(model.named_parameters())
    names = [name for name, _ in named]
    params = [param for _, param in named]
    grads = {name: np.zeros((len(steps), workers, param.numel()), dtype=np.float32)
             for name, param in named}
    slot = {step: index for index, step in enumerate(steps)}
    losses = np.zeros((train_steps, workers), dtype=np.float64)
    buffers = list(model.buffers())

    with deterministic_torch():
        optimizer = data.optimizer(model)
        model.train()
        for step in range(train_steps):
            totals = [None] * len(params)
            kept = None
            for worker in range(workers):
                model.zero_grad(set_to_none=True)
                loss = data.loss(model, data.batch(worker))
                loss.backward()
                losses[step, worker] = float(loss.detach())
                if worker == 0:
                    kept = [buffer.detach().clone() for buffer in buffers]
                else:
                    with torch.no_grad():
                        for buffer, value in zip(buffers, kept):
                            buffer.copy_(value)
                for index, param in enumerate(params):
                    grad = param.grad if param.grad is not None else torch.zeros_like(param)
                    if step in slot:
                        grads[names[index]][slot[step], worker] = grad.reshape(-1).numpy()
                    if totals[index] is None:
                        totals[index] = grad.detach().clone()
                    else:
                        totals[index] += grad
            for param, total in zip(params, totals):
                param.grad = total.div_(workers)
            optimizer.step()
            if step in slot and log is not None:
                log(f"  step {step:>{len(str(train_steps))}}/{train_steps}: mean loss "
                    f"{losses[step].mean():.4f} over {workers} workers "
                    f"(captured {slot[step] + 1}/{len(steps)})")
        model.zero_grad(set_to_none=True)
        metrics = data.evaluate(model)

    return Run(workload=workload, workers=workers, seed=seed, config=config, model=model,
               names=names, roles=_roles.classify(model), steps=steps, grads=grads,
               losses=losses, metrics=metrics, final_metric=data.final_metric,
               optimizer=type(optimizer).__name__, data=data.description,
               seconds=time.perf_counter() - started)
