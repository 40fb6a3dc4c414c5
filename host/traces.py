"""Gradient trace files: what the workers of a data-parallel job hand to the reduction at
chosen training steps, read back with NumPy alone.

A trace is two files, written by :func:`neuron_fabric.experiments.traces.capture`:

``<workload>.npz``
    One ``float32`` array per parameter, keyed by its name in ``model.named_parameters()``,
    of shape ``(n_steps, n_workers, numel)``: worker ``k``'s gradient of the parameter at the
    ``i``-th captured step, flattened in C order.
``<workload>.json``
    The manifest: workload, seed, workers, captured steps, the full configuration, the
    parameters in ``named_parameters()`` order with role, shape and numel, every training
    step's loss, the final metrics, the data source, software versions, wall time and file
    sizes.

:func:`load` reads a trace back as a :class:`Trace`; the experiments and the cocotb regression
of the controller (which replays them through the Verilog) both read them here.
"""

import dataclasses
import json
import math
import pathlib

import numpy as np

from ..golden.validate import check_int
from .roles import ROLES, check_roles

__all__ = ["WORKLOADS", "FORMAT", "check_workload", "Param", "Trace", "trace_paths", "load"]

#: Workloads that :func:`~neuron_fabric.experiments.traces.capture` knows (the same tuple as
#: ``experiments.workloads.WORKLOADS``, repeated here so that it is available without PyTorch).
WORKLOADS = ("digits_cnn", "char_lm")

#: Version of the file layout written into every manifest; :func:`load` refuses others.
FORMAT = 1


def check_workload(workload):
    """``workload``, when it is one of :data:`WORKLOADS`; ``ValueError`` otherwise."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, not {workload!r}")
    return workload


@dataclasses.dataclass(frozen=True)
class Param:
    """One traced parameter: its ``name`` in ``named_parameters()``, ``role`` (one of
    :data:`neuron_fabric.host.roles.ROLES`), ``shape`` (tuple) and ``numel``."""

    name: str
    role: str
    shape: tuple
    numel: int


class Trace:
    """A loaded gradient trace (see :func:`load`).

    Members
    -------
    workload : str
        Name of the workload.
    workers : int
        Number of workers.
    steps : list of int
        The captured training steps; ``step_index`` arguments index this list.
    params : list of Param
        The parameters in ``model.named_parameters()`` order.
    manifest : dict
        The manifest as read from the JSON file.
    path : pathlib.Path
        The ``.npz`` file it was loaded from.
    """

    def __init__(self, *, manifest, grads, path):
        self.path = pathlib.Path(path)
        self.manifest = manifest
        self.workload = manifest["workload"]
        self.workers = int(manifest["workers"])
        self.steps = [int(step) for step in manifest["steps"]]
        self.params = [Param(p["name"], p["role"], tuple(p["shape"]), int(p["numel"]))
                       for p in manifest["params"]]
        self._grads = grads
        self._index = {param.name: param for param in self.params}

    def __repr__(self):
        total = sum(param.numel for param in self.params)
        return (f"<Trace {self.workload}: {len(self.params)} parameters ({total} elements), "
                f"{self.workers} workers, steps {self.steps}>")

    def grad(self, name):
        """Return the gradients of parameter ``name``: a read-only ``float32`` array
        ``(n_steps, n_workers, numel)``. Raises ``ValueError`` for an unknown name."""
        if name not in self._index:
            raise ValueError(f"name must be a parameter of the {self.workload} trace "
                             f"({', '.join(self._index)}), not {name!r}")
        return self._grads[name]

    def select(self, roles=None):
        """Return the parameters whose role is in ``roles`` (all when ``None``), in order.

        Raises ``TypeError`` for a single string and ``ValueError`` for an unknown role.
        """
        if roles is None:
            return list(self.params)
        chosen = check_roles(roles)
        return [param for param in self.params if param.role in chosen]

    def bucket(self, step_index, worker, roles=None):
        """Return what one worker's gradient bucket holds at one captured step.

        The result is a new 1-D ``float32`` array: the flat gradients of the parameters in
        parameter order, concatenated, restricted to ``roles`` when given (an empty array when
        no parameter has those roles). ``step_index`` indexes :attr:`steps` (it is not a
        training step number); ``worker`` counts from 0.

        Raises ``TypeError`` for non-integer indices or a single-string ``roles`` and
        ``ValueError`` for an index out of range or an unknown role.
        """
        n_steps = len(self.steps)
        step_index = check_int("step_index", step_index)
        if not 0 <= step_index < n_steps:
            raise ValueError(
                f"step_index must be between 0 and {n_steps - 1} (an index into Trace.steps "
                f"{self.steps}, not a training step), not {step_index!r}")
        worker = check_int("worker", worker, low=0, high=self.workers - 1)
        chosen = self.select(roles)
        if not chosen:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([self._grads[param.name][step_index, worker] for param in chosen])


def trace_paths(path):
    """The ``.npz`` and ``.json`` files of the trace at ``path`` (either file or their stem)."""
    path = pathlib.Path(path)
    if path.suffix in (".npz", ".json"):
        path = path.with_suffix("")
    return path.with_name(path.name + ".npz"), path.with_name(path.name + ".json")


def load(path):
    """Load the trace stored at ``path`` (the ``.npz`` or the ``.json`` file, or their common
    stem) and return a :class:`Trace` whose arrays are read-only.

    Raises ``FileNotFoundError`` when a file is missing and ``ValueError`` when the manifest
    has another format version or does not describe the arrays (names, order, shapes, dtype).
    """
    npz_path, json_path = trace_paths(path)
    for name in (npz_path, json_path):
        if not name.is_file():
            raise FileNotFoundError(
                f"trace file {name} does not exist; capture it with "
                f"`python -m neuron_fabric.experiments.traces capture --out {name.parent}`")
    with open(json_path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{json_path} must be a trace manifest of format {FORMAT}, not "
                         f"{manifest.get('format')!r}; capture the trace again")
    with np.load(npz_path, allow_pickle=False) as archive:
        grads = {key: archive[key] for key in archive.files}
    names = [param["name"] for param in manifest["params"]]
    if sorted(names) != sorted(grads):
        raise ValueError(f"{npz_path} must hold exactly the parameters its manifest lists; "
                         f"only in the manifest: {sorted(set(names) - set(grads))}, only in "
                         f"the archive: {sorted(set(grads) - set(names))}")
    expected_rows = (len(manifest["steps"]), manifest["workers"])
    for param in manifest["params"]:
        array = grads[param["name"]]
        expected = (*expected_rows, param["numel"])
        if array.dtype != np.float32 or array.shape != expected or \
                math.prod(param["shape"]) != param["numel"] or param["role"] not in ROLES:
            raise ValueError(
                f"{npz_path}: parameter {param['name']!r} must be float32 of shape {expected} "
                f"with role in {ROLES} as its manifest says, not {array.dtype} {array.shape} "
                f"with role {param['role']!r}; capture the trace again")
        array.setflags(write=False)
    return Trace(manifest=manifest, grads=grads, path=npz_path)
