"""PyTorch DDP communication hooks that aggregate gradients with the golden model.

The hooks are for ``DistributedDataParallel.register_comm_hook`` and run on any
``torch.distributed`` backend that has ``all_reduce`` and ``all_gather`` for the CPU (gloo).
The low-bit routes call the same golden functions the RTL is checked against, so that a
training run sees exactly the values the device would return:

- :func:`fp32_hook`: the mean by all-reduce, computed as PyTorch's default does (divide by
  the world size, then sum), so parameters are bit-identical to a model without a hook;
- :class:`FabricHook`: routing per parameter inside each bucket. Every parameter's slice of
  the bucket goes FP32 (all-reduce), G-Binary (:mod:`~neuron_fabric.golden.gbinary`: sign
  lines, per-lane vote counts, majority readout) or G-Ternary
  (:mod:`~neuron_fabric.golden.gternary`: ternary lines, per-lane sums, gated readout); the
  slices of one route are concatenated into one stream of lines (one aggregation window)
  and the results are written back into the bucket in place.

``torch.distributed`` has no counting device in the loop, so the low-bit routes are realized
as the device would serve them: every worker encodes its lines, the lines are exchanged with
``all_gather`` (standing in for every worker writing the same window), and every worker
folds them with the golden accumulator and reads the device's readout lines, identically on
all workers. A few scalars per parameter are all-reduced beside them for the scale and the
health statistics.

Traffic (:class:`TrafficMeter`) is counted per route and per worker, in two ways:

- *collective bytes*: the bytes this worker hands to ``torch.distributed`` (``sent``) and the
  bytes it receives (``received``); for an all-gather of ``b`` bytes the worker receives
  ``world_size * b``. Control scalars are a route of their own (``"control"``);
- *device lines*: the cache lines the device would see, lines written and readout lines read
  back (:func:`~neuron_fabric.golden.formats.readout_lines_per_slot`); an FP32 slice counts its
  bytes in whole lines both ways, as it would pass through the device to memory and back.

Both are compared with a baseline that sends every element of every bucket on FP32.

Non-finite values: a low-bit slice whose gradient holds NaN or Inf on any worker goes FP32 for
that step (the golden encoders refuse NaN), is reported to the health monitor, and the caller
decides what to do with the non-finite result (the training check skips the update).
"""

import dataclasses
import math
import time

import numpy as np
import torch
import torch.distributed as dist

from ..golden import gbinary, gternary
from . import lanes as _lanes
from . import roles as _roles
from ..golden.formats import Readout, readout_lines_per_slot, route_spec
from ..golden.lines import line_bytes
from .runtime import (FP32, GBINARY, GTERNARY, LOW_BIT_ROUTES, ROUTES, DeviceCaps,
                      GBinaryOptions, GTernaryOptions, RegionStats, check_capacity)

__all__ = ["RouteTraffic", "TrafficMeter", "fp32_hook", "FabricHook", "bucket_segments",
           "ddp_buckets", "CONTROL_VALUES_PER_PARAMETER", "PHASES", "LANES"]

CONTROL = "control"
#: The float64 statistics every parameter of a bucket all-reduces each step: its non-finite
#: count, sum |p| (p = gradient plus residual) and sum g^2.
CONTROL_VALUES_PER_PARAMETER = 3
#: The phases :attr:`FabricHook.phase_seconds` times, in the order a bucket goes through them.
PHASES = ("statistics", "encode", "exchange", "fold", "device", "readout", "write_back",
          "all_reduce")


@dataclasses.dataclass
class RouteTraffic:
    """Traffic of one route, for one worker: elements carried, bytes handed to and received
    from ``torch.distributed``, device lines written and read, and the number of collectives."""

    elements: int = 0
    sent: int = 0
    received: int = 0
    lines_written: int = 0
    lines_read: int = 0
    collectives: int = 0

    @property
    def collective_bytes(self):
        return self.sent + self.received

    @property
    def device_lines(self):
        return self.lines_written + self.lines_read

    def add(self, other):
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


class TrafficMeter:
    """Per-route traffic of one worker, and the all-FP32 baseline of the same buckets.

    Members
    -------
    routes : dict
        Every route of :data:`~neuron_fabric.host.runtime.ROUTES` (``"fp32"``, ``"gbinary"``,
        ``"gternary"``) and ``"control"`` to :class:`RouteTraffic`.
    baseline : RouteTraffic
        What sending every bucket on FP32 all-reduce would have cost.
    """

    def __init__(self, *, line_bits=512):
        self.line_bits = line_bits
        self.reset()

    def reset(self):
        self.routes = {route: RouteTraffic() for route in ROUTES + (CONTROL,)}
        self.baseline = RouteTraffic()

    def fp32_lines(self, elements):
        """Lines that ``elements`` float32 values fill."""
        return -(-4 * elements // line_bytes(self.line_bits))

    def count_fp32(self, elements):
        """An FP32 all-reduce of ``elements`` values: the worker hands over one buffer and gets
        one back, whatever the world size; on the device the values would fill whole lines
        written and read back."""
        entry = self.routes[FP32]
        entry.sent += 4 * elements
        entry.received += 4 * elements
        entry.collectives += 1
        entry.elements += elements
        entry.lines_written += self.fp32_lines(elements)
        entry.lines_read += self.fp32_lines(elements)

    def count_control(self, nbytes):
        """An all-reduce of ``nbytes`` of control scalars (scales, statistics, the loss)."""
        entry = self.routes[CONTROL]
        entry.sent += nbytes
        entry.received += nbytes
        entry.collectives += 1

    def count_window(self, route, elements, *, readout, counter_bits, world_size):
        """``elements`` values of ``route`` written as lines to a window and read back with
        ``readout``: the lines they fill and the readout lines of those slots."""
        lines = -(-elements // route_spec(route).lanes(self.line_bits))
        per_slot = readout_lines_per_slot(readout, counter_bits=counter_bits)
        self.count_low_bit(route, elements, lines=lines, readout_lines=lines * per_slot,
                           world_size=world_size)

    def count_low_bit(self, route, elements, *, lines, readout_lines, world_size):
        """A low-bit exchange: ``lines`` written by this worker, ``readout_lines`` read back."""
        entry = self.routes[route]
        nbytes = lines * line_bytes(self.line_bits)
        entry.elements += elements
        entry.sent += nbytes
        entry.received += world_size * nbytes
        entry.lines_written += lines
        entry.lines_read += readout_lines
        entry.collectives += 1

    def count_baseline(self, elements):
        """A bucket of ``elements`` values, as an all-FP32 run would send it."""
        self.baseline.elements += elements
        self.baseline.sent += 4 * elements
        self.baseline.received += 4 * elements
        self.baseline.lines_written += self.fp32_lines(elements)
        self.baseline.lines_read += self.fp32_lines(elements)
        self.baseline.collectives += 1

    def summary(self):
        """A JSON-ready dict: per route, totals and shares of the FP32 baseline.

        ``device_share`` is device lines over the baseline's; ``collective_share`` is bytes
        handed to and received from ``torch.distributed`` (control included) over the
        baseline's. Both are None when nothing was counted.
        """
        total = RouteTraffic()
        for entry in self.routes.values():
            total.add(entry)
        base = self.baseline
        return {
            "routes": {route: dataclasses.asdict(entry) for route, entry in self.routes.items()},
            "total": dataclasses.asdict(total),
            "baseline": dataclasses.asdict(base),
            "device_share": total.device_lines / base.device_lines if base.device_lines else None,
            "collective_share": (total.collective_bytes / base.collective_bytes
                                 if base.collective_bytes else None),
        }


def fp32_hook(state, bucket):
    """FP32 mean of a bucket by all-reduce, as PyTorch's default: divide by the world size,
    then sum. ``state`` is a :class:`TrafficMeter` (or None to count nothing); the process
    group is the default one. Returns the all-reduce's future, which yields the buffer."""
    buffer = bucket.buffer()
    world = dist.get_world_size()
    if state is not None:
        state.count_baseline(buffer.numel())
        state.count_fp32(buffer.numel())
    buffer.div_(world)
    return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])


def bucket_segments(bucket, names):
    """``[(name, offset, numel)]`` of the parameters in a bucket, in buffer order.

    ``names`` maps ``id(parameter)`` to its name. DDP lays the gradients of
    ``bucket.parameters()`` out back to back in ``bucket.buffer()``; a mismatch raises
    ``RuntimeError`` instead of routing the wrong elements.
    """
    segments, offset = [], 0
    for param in bucket.parameters():
        numel = param.numel()
        segments.append((names[id(param)], offset, numel))
        offset += numel
    if offset != bucket.buffer().numel():
        raise RuntimeError(f"bucket {bucket.index()} holds {bucket.buffer().numel()} elements but "
                           f"its parameters hold {offset}; cannot route its slices")
    return segments


#: How :class:`FabricHook` computes the low-bit lanes: ``"torch"``, the PyTorch twin of the
#: golden model (:mod:`~neuron_fabric.host.lanes`) on the bucket's own device, or
#: ``"golden"``, the golden model itself (NumPy, CPU buckets only). Bit for bit the same.
LANES = ("torch", "golden")
# Lanes of a chunk of the torch lanes (about four million): each chunk's temporaries, its
# bit-planes and the index of its decode stay a few tens of MiB, whatever the bucket, and
# each operation is long beside the cost of its call (with a million lanes a chunk the fold
# of GPT-2 small's buckets took twice as long).
_CHUNK_LANES = 1 << 22
# Elements of a chunk of the statistics: its magnitudes, in float32 scratch (256 KiB), stay in
# the L2 cache while they are summed and squared, so each element is read from memory once.
# torch sums float32 pairwise, within about 1e-7 of the float64 sum over this many (BLAS's
# dot product was 4e-6 off); chunk by chunk the sums add up in float64.
_STAT_CHUNK = 1 << 16

# Elements of a chunk of the pass over a low-bit route's stream (:meth:`FabricHook._stream_pass`):
# the chunk (2 MiB of float32) stays in the cache while its sums, its ``p`` and its G-Binary
# lines are made, so each element is read from memory once. Each torch call costs a few
# microseconds: with chunks of 128K elements the calls took as long as the memory saved
# (G-Binary's pass on GPT-2 small 450 to 690 ms a step, against 360 to 490 with these).
_PASS_CHUNK = 1 << 19

# Elements of a run of adjacent FP32 slices that is all-reduced where it lies: shorter runs are
# joined into one buffer for one collective. Joining GPT-2 small's token and position
# embeddings (39 million elements) and copying them back cost more CPU time than the
# layer-aware route's whole G-Binary fold.
_IN_PLACE_ELEMENTS = 1 << 20


@dataclasses.dataclass
class _FP32Pending:
    """FP32 slices in flight: the tensors being all-reduced (the joined short runs last,
    when there are some), the short runs to copy back into, and the collectives' works."""
    reduced: list
    short: list
    works: list


@dataclasses.dataclass
class _Encoded:
    """A worker's lines of a route's stream and what their readout needs: the readout the
    device gives, and for G-Binary the dither's bits (``flip``) and the lines before the
    dither (``own``, for the residuals)."""

    readout: Readout
    lines: torch.Tensor
    flip: torch.Tensor = None
    own: torch.Tensor = None


class _Pass:
    """What the pass over a route's stream made: the stream ``p``, and where the pass made
    them, the G-Binary ``lines``, the dither ``flip`` and this worker's signs before the
    dither ``own`` (the torch lanes), and G-Ternary's ``peak`` (``max |p|``)."""

    def __init__(self, stream):
        self.stream = stream
        self.lines = self.flip = self.own = self.peak = None


class _RegionAccumulator:
    def __init__(self):
        self.nonfinite = False
        self.sumsq = 0.0
        self.agreement = 0.0
        self.agreement_elements = 0
        self.route = FP32


class FabricHook:
    """Routing of every parameter inside DDP buckets to FP32, G-Binary or G-Ternary.

    Parameters
    ----------
    model : torch.nn.Module
        The module wrapped by DDP (not the wrapper): names come from its
        ``named_parameters()``.
    routes : str or dict
        One route of :data:`~neuron_fabric.host.runtime.ROUTES` for every parameter, or a
        dict from every parameter name to its route; change it between steps with
        :meth:`set_routes`.
    regions : dict or None
        Parameter name to the region whose health statistics it feeds; None uses the roles of
        :func:`neuron_fabric.host.roles.classify`.
    gbinary, gternary : GBinaryOptions, GTernaryOptions
        Options of the low-bit routes.
    caps : DeviceCaps or None
        The device (default: :class:`~neuron_fabric.golden.params.FabricParams` defaults); its
        counter width and worker range are used by the accumulators, and low-bit routes
        it cannot serve are refused at construction and in :meth:`set_routes`.
    seed : int
        Seed of the tie-breaking dither and the stochastic ternarization.
    device : object or None
        Where the low-bit windows are read out. None: the accumulators of ``lanes``, on every
        worker. Otherwise an object with ``aggregate(route, lines, *, readout, gate=None)``
        that takes every worker's lines, a NumPy array ``(world, n_lines, line_bytes)``, and
        returns the readout lines the device answers with (the same on every worker), and
        ``passthrough(values)`` that returns a float32 array as it reads back after a round
        trip through the device's FP32 path; :class:`neuron_fabric.sim.device.RtlDevice` runs
        the emitted Verilog on the host. The per-lane counts behind the health statistics are
        folded by ``lanes`` where ``agreement`` asks for them.
    agreement : bool
        Measure each low-bit region's sign agreement (:class:`RegionStats`'s ``agreement``;
        None when False). Only a health rule reads it (``HealthOptions.min_agreement``, which
        refuses statistics without it): pass ``profile.reads_agreement``. On the CPU it costs
        about a fifth of a G-Ternary step's CPU time and a tenth of a G-Binary one's.
    lanes : str
        One of :data:`LANES`: ``"torch"`` (default) computes the lanes with the PyTorch twin
        of the golden model on the bucket's device, CPU or CUDA, with no round trip through
        the host; ``"golden"`` with the golden model in NumPy (CPU buckets only). Both give
        the same parameters bit for bit.

    Members
    -------
    traffic : TrafficMeter
    step : int
        Steps completed (:meth:`end_step` advances it).
    phase_seconds : dict
        Wall seconds spent so far, ``{route: {phase: seconds}}``, a phase of :data:`PHASES`
        present once it has run; :meth:`reset_phases` clears it. ``"control"`` holds
        ``statistics``: the per-parameter sums and the control all-reduce of every bucket and
        the loss all-reduce of :meth:`end_step`. A low-bit route holds ``encode`` (its stream
        and lines, the dither included; with the torch lanes G-Binary's pass over the stream,
        which takes its slices' sums too), ``exchange`` (the all-gather, waiting for the slowest
        worker included), ``fold`` (the accumulator's bit-planes and the agreement they give),
        ``readout`` (the readout lines and their decoding into the bucket, scaled; ``device``
        instead of the readout when a device is set), ``write_back`` (the error-feedback
        residuals), and G-Ternary's shared maximum under ``statistics``. ``"fp32"`` holds
        ``all_reduce`` (its start, and the wait for it after the bucket's low-bit routes ran
        while it was in flight; ``device`` for the round trip through a device) and, for
        FP32 slices apart from each other and short, ``write_back``. Timing costs a few
        calls of ``time.perf_counter`` per route and chunk; on a CUDA bucket the phases are
        the host's view (kernels run asynchronously).

    Per step: run forward and backward (DDP calls the hook per bucket), then call
    :meth:`end_step` with the local loss; it returns the global loss and the
    :class:`~neuron_fabric.host.runtime.RegionStats` of every region.

    Random draws (the G-Binary dither and the stochastic G-Ternary keep) come from
    :func:`~neuron_fabric.host.lanes.counter_words`, a counter-based hash of the seed, the
    step, the bucket and the route (and the worker's rank for the G-Ternary draws), made on
    the bucket's device; both ``lanes`` take the same draws.

    Scratch: the lines, every worker's lines, the stream of a route's slices and the FP32
    slices are kept per route, sized for the largest bucket, and reused from bucket to bucket
    and step to step; the torch lanes work a chunk of lanes at a time, so no temporary grows
    with the bucket.

    Raises ``TypeError``/``ValueError`` for bad options and
    :class:`~neuron_fabric.host.runtime.CapacityError` for routes the device cannot serve.
    """

    def __init__(self, model, *, routes, regions=None, gbinary=None, gternary=None, caps=None,
                 seed=0, device=None, agreement=True, lanes="torch"):
        self.device = device
        if not isinstance(agreement, bool):
            raise TypeError(f"agreement must be a bool, not {agreement!r}")
        self.agreement = agreement
        self.gbinary = GBinaryOptions() if gbinary is None else gbinary
        self.gternary = GTernaryOptions() if gternary is None else gternary
        if not isinstance(self.gbinary, GBinaryOptions):
            raise TypeError(f"gbinary must be a GBinaryOptions, not {gbinary!r}")
        if not isinstance(self.gternary, GTernaryOptions):
            raise TypeError(f"gternary must be a GTernaryOptions, not {gternary!r}")
        self.caps = DeviceCaps.from_params() if caps is None else caps
        if not isinstance(self.caps, DeviceCaps):
            raise TypeError(f"caps must be a DeviceCaps, not {caps!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, not {seed!r}")
        if lanes not in LANES:
            raise ValueError(f"lanes must be one of {', '.join(map(repr, LANES))}, not {lanes!r}")
        self.lanes = lanes
        self.seed = seed
        self.line_bits = self.caps.line_bits
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        named = list(model.named_parameters())
        self._names = {id(param): name for name, param in named}
        self._all_names = [name for name, _ in named]
        self.regions = dict(regions) if regions is not None else _roles.classify(model)
        missing = [name for name in self._all_names if name not in self.regions]
        if missing:
            raise ValueError(f"regions must name every parameter, not miss {missing}")
        self.routes = {}
        self._residual = {}
        self._regions = {}
        self._scratch = {}
        self._workspace = _lanes.Workspace()
        self._bucket_device = torch.device("cpu")
        self.set_routes(routes)
        self.traffic = TrafficMeter(line_bits=self.line_bits)
        self.step = 0
        self.reset_phases()

    # -------------------------------------------------------------------- set-up

    def set_routes(self, routes):
        """Set the route of every parameter (a route name, or a dict name -> route)."""
        if isinstance(routes, str):
            routes = {name: routes for name in self._all_names}
        if not isinstance(routes, dict):
            raise TypeError(f"routes must be a route name or a dict from parameter name to "
                            f"route, not {routes!r}")
        missing = [name for name in self._all_names if name not in routes]
        if missing:
            raise ValueError(f"routes must name every parameter, not miss {missing}")
        for name, route in routes.items():
            if route not in ROUTES:
                raise ValueError(f"routes[{name!r}] must be one of {', '.join(ROUTES)}, "
                                 f"not {route!r}")
        used = set(routes.values())
        check_capacity(self.caps, world_size=self.world_size, routes=used,
                       line_bits=self.line_bits,
                       gate=self.gternary.gate if GTERNARY in used else None)
        for name, route in routes.items():  # a residual belongs to the route that made it
            if self.routes.get(name) != route:
                self._residual.pop(name, None)
        self.routes = dict(routes)

    def reset_phases(self):
        """Forget the phase timings (:attr:`phase_seconds`)."""
        self.phase_seconds = {}

    def _phase(self, route, phase, since):
        """Add the time from ``since`` to now to ``(route, phase)``; returns now."""
        now = time.perf_counter()
        per_route = self.phase_seconds.setdefault(route, {})
        per_route[phase] = per_route.get(phase, 0.0) + (now - since)
        return now

    def register(self, ddp_model):
        """Register this hook on a ``DistributedDataParallel`` model."""
        ddp_model.register_comm_hook(self, FabricHook._hook)

    @staticmethod
    def _hook(state, bucket):
        return state.run(bucket)

    def _buffer(self, key, name, shape, dtype, device):
        """Scratch ``name`` of ``key`` (a route, or the statistics) as a tensor of ``shape``:
        a view of a flat buffer kept from bucket to bucket and from step to step, grown when
        a bucket needs more. A bucket's scratch is done with when the hook returns, so the
        hook keeps the scratch of its largest bucket, not of every bucket."""
        numel = math.prod(shape)
        slot = self._scratch.setdefault(key, {})
        held = slot.get(name)
        if held is None or held.dtype != dtype or held.device != device or held.numel() < numel:
            slot[name] = None  # the old buffer goes before the new one comes
            held = slot[name] = torch.empty(max(numel, 1), dtype=dtype, device=device)
        return held[:numel].view(shape)

    # -------------------------------------------------------------------- per step

    def end_step(self, loss):
        """Close a step: all-reduce the local ``loss`` (a float or 0-d tensor) to the global
        mean and return ``(loss, {region: RegionStats})`` for the buckets of this step."""
        started = time.perf_counter()
        value = torch.tensor([float(loss)], dtype=torch.float64, device=self._control_device)
        dist.all_reduce(value)
        self.traffic.count_control(8)
        self._phase(CONTROL, "statistics", started)
        stats = {region: RegionStats(nonfinite=acc.nonfinite,
                                     grad_norm=float(np.sqrt(acc.sumsq / self.world_size)),
                                     agreement=(acc.agreement / acc.agreement_elements
                                                if acc.agreement_elements else None),
                                     route=acc.route)
                 for region, acc in self._regions.items()}
        self._regions = {}
        self.step += 1
        return float(value[0]) / self.world_size, stats

    @property
    def _control_device(self):
        """Where the control scalars go through the collectives: the device of the buckets
        (NCCL takes CUDA tensors only), the CPU before the first bucket."""
        return self._bucket_device

    def _sums(self, x, sumsq=None, l1=None):
        """Add ``x``'s sum of squares to ``sumsq`` and its sum of ``|x|`` to ``l1`` (0-d
        float64 views, either may be None), chunk by chunk: the chunk's magnitudes into a
        float32 scratch (one pass over ``x``), summed, squared and summed there (its squares
        alone for the sum of squares alone), each chunk's sums added in float64. Where a
        chunk's float32 sums are not finite (a square beyond float32's range, about 1.8e19
        in magnitude, or a NaN or Inf in ``x``), the whole of ``x`` is summed again in
        float64 (:meth:`_wide_sums`), so a large finite gradient gives a finite sum."""
        scratch = self._buffer(("statistics",), "magnitude", (_STAT_CHUNK,), torch.float32,
                               x.device)
        n_chunks = -(-x.numel() // _STAT_CHUNK)
        parts = self._buffer(("statistics",), "parts", (n_chunks, 2), torch.float32, x.device)
        parts.zero_()
        for k, start in enumerate(range(0, x.numel(), _STAT_CHUNK)):
            piece = x[start:start + _STAT_CHUNK]
            if l1 is None:  # the square of x is the square of |x|
                torch.sum(torch.mul(piece, piece, out=scratch[:piece.numel()]), dim=0,
                          out=parts[k, 0])
                continue
            magnitude = torch.abs(piece, out=scratch[:piece.numel()])
            torch.sum(magnitude, dim=0, out=parts[k, 1])
            if sumsq is not None:  # squared in place and summed pairwise, as the sum above
                torch.sum(magnitude.mul_(magnitude), dim=0, out=parts[k, 0])
        if not n_chunks:
            return
        totals = parts.to(torch.float64).sum(0)
        if not bool(torch.isfinite(totals).all()):
            self._wide_sums(x, sumsq, l1)
            return
        if sumsq is not None:
            sumsq += totals[0]
        if l1 is not None:
            l1 += totals[1]

    def _wide_sums(self, x, sumsq=None, l1=None):
        """:meth:`_sums` of ``x`` in float64 throughout: widened into float64 scratch."""
        scratch = self._buffer(("statistics",), "float64", (_STAT_CHUNK,), torch.float64,
                               x.device)
        for start in range(0, x.numel(), _STAT_CHUNK):
            piece = x[start:start + _STAT_CHUNK]
            wide = scratch[:piece.numel()]
            wide.copy_(piece)
            if sumsq is not None:
                sumsq += torch.dot(wide, wide)
            if l1 is not None:
                l1 += wide.abs_().sum()

    def run(self, bucket):
        """Aggregate one bucket in place; returns a completed future of its buffer.

        The stages: the FP32 slices' statistics, then their all-reduce, which runs while the
        rest computes; the low-bit routes' statistics in one pass over each route's stream;
        the control all-reduce of every slice's statistics, after which a slice with a NaN
        or Inf on any worker goes FP32 for this step; the low-bit routes; the wait for the
        FP32 values."""
        started = time.perf_counter()
        buffer = bucket.buffer()
        segments = bucket_segments(bucket, self._names)
        self.traffic.count_baseline(buffer.numel())
        if self.lanes == "golden" and buffer.device.type != "cpu":
            raise ValueError(f"lanes='golden' computes on the host and takes CPU buckets, not a "
                             f"bucket on {buffer.device}; use lanes='torch'")
        flat = buffer.detach().view(-1)
        self._bucket_device = flat.device
        routes = [self.routes[name] for name, _, _ in segments]
        local = torch.zeros((len(segments), CONTROL_VALUES_PER_PARAMETER), dtype=torch.float64,
                            device=flat.device)

        exact = [index for index, route in enumerate(routes) if route == FP32]
        self._fp32_statistics(flat, segments, exact, local)
        self._phase(CONTROL, "statistics", started)
        pending = [self._fp32_start(buffer, segments, exact)] if exact else []
        planned = {route: [i for i, r in enumerate(routes) if r == route]
                   for route in LOW_BIT_ROUTES}
        passes, safe = self._low_bit_statistics(flat, segments, planned, local, bucket.index())
        started = time.perf_counter()
        own_l1 = local[:, 1].tolist()  # the all-reduce below sums the column in place
        dist.all_reduce(local)
        self.traffic.count_control(local.numel() * 8)
        totals = local.tolist()
        self._phase(CONTROL, "statistics", started)

        groups = self._route_groups(segments, routes, totals)
        fallen = [index for index in groups[FP32] if routes[index] != FP32]
        if fallen:
            pending.append(self._fp32_start(buffer, segments, fallen, scratch="fallen"))
        for route in LOW_BIT_ROUTES:
            if groups[route]:
                done = passes[route]
                if groups[route] != planned[route]:  # some slices left for FP32: the rest
                    done = _Pass(self._stream(flat, segments, groups[route], safe, None, None,
                                              route))
                self._low_bit(route, flat, segments, groups[route], done, totals, own_l1,
                              bucket.index())
        for job in pending:
            self._fp32_finish(job)
        future = torch.futures.Future()
        future.set_result(buffer)
        return future

    def _fp32_statistics(self, flat, segments, indices, local):
        """The FP32 slices' sums of squares into ``local``, and where one is not finite, the
        count of its NaN and Inf and its sum of squares without them."""
        for index in indices:
            _, offset, numel = segments[index]
            self._sums(flat[offset:offset + numel], sumsq=local[index, 2])
        for index, sumsq in zip(indices, local[indices, 2].tolist()):
            if not math.isfinite(sumsq):  # a NaN or Inf behind the float64 sum
                _, offset, numel = segments[index]
                self._finite_part(flat[offset:offset + numel], index, local)

    def _finite_part(self, grad, index, local):
        """A slice's gradient with its NaN and Inf set to 0: their count into ``local``'s
        column 0, its sum of squares into column 2 in place of the non-finite one."""
        finite = torch.isfinite(grad)
        local[index, 0] = grad.numel() - int(finite.sum())
        safe = torch.where(finite, grad, torch.zeros((), dtype=grad.dtype, device=grad.device))
        local[index, 2] = 0.0
        self._sums(safe, sumsq=local[index, 2])
        return safe

    def _low_bit_statistics(self, flat, segments, planned, local, bucket_index):
        """Each low-bit route's slices' statistics into ``local``, in one pass over its
        stream, which also encodes the G-Binary lines (:meth:`_stream_pass`); where a slice
        holds a NaN or Inf, the stream again without them. Returns the passes by route and
        the slices made finite, by index."""
        passes = {}
        for route, indices in planned.items():
            if indices:
                started = time.perf_counter()
                passes[route] = self._stream_pass(route, flat, segments, indices, local,
                                                  bucket_index)
                encoded = passes[route].lines is not None
                self._phase(route if encoded else CONTROL,
                            "encode" if encoded else "statistics", started)
        sumsq = local[:, 2].tolist()
        safe = {}
        for route, indices in planned.items():
            for index in indices:
                if not math.isfinite(sumsq[index]):  # a NaN or Inf behind the float64 sum
                    _, offset, numel = segments[index]
                    safe[index] = self._finite_part(flat[offset:offset + numel], index, local)
            if any(index in safe for index in indices):  # the stream again, without NaN or Inf
                started = time.perf_counter()
                local[indices, 1:] = 0.0
                for index in indices:
                    name, offset, numel = segments[index]
                    self._sums(safe.get(index, flat[offset:offset + numel]),
                               sumsq=local[index, 2],
                               l1=None if name in self._residual else local[index, 1])
                passes[route] = _Pass(self._stream(flat, segments, indices, safe, local,
                                                   bucket_index, route))
                self._phase(CONTROL, "statistics", started)
        return passes, safe

    def _route_groups(self, segments, routes, totals):
        """Each slice's route this step, from every worker's statistics ``totals``: a
        low-bit slice with a NaN or Inf on any worker goes FP32 (and loses its residual).
        Adds the statistics to each slice's region. Returns the slices' indices by route."""
        groups = {route: [] for route in ROUTES}
        for index, route in enumerate(routes):
            name = segments[index][0]
            nonfinite = totals[index][0] > 0
            if route != FP32 and nonfinite:
                route = FP32  # a non-finite gradient somewhere: this step goes exact
                self._residual.pop(name, None)
            groups[route].append(index)
            acc = self._regions.setdefault(self.regions[name], _RegionAccumulator())
            acc.nonfinite |= bool(nonfinite)
            acc.sumsq += float(totals[index][2])
            if route != FP32:
                acc.route = route
        return groups

    def _stream_pass(self, route, flat, segments, indices, local, bucket_index):
        """One pass over a route's slices, a chunk of its stream at a time (:data:`_PASS_CHUNK`
        elements): each slice's sum of squares of the gradient and sum ``|p|`` of ``p`` =
        gradient plus residual into ``local``, ``p`` into the stream (the bucket itself where
        the slices lie back to back and nothing is added), G-Ternary's ``max |p|``, and with
        the torch lanes the G-Binary lines, so that each element is read from memory once.
        Where a slice's float32 sums are not finite, its sums are taken again in float64
        (:meth:`_wide_sums`), as :meth:`_sums` does. Returns a :class:`_Pass`."""
        first, last = segments[indices[0]], segments[indices[-1]]
        contiguous = all(segments[a][1] + segments[a][2] == segments[b][1]
                         for a, b in zip(indices, indices[1:]))
        added = [segments[i][0] in self._residual for i in indices]
        count = sum(segments[i][2] for i in indices)
        device = flat.device
        viewing = contiguous and not any(added)
        if viewing:
            stream = flat[first[1]:last[1] + last[2]]
        else:
            stream = self._buffer(route, "stream", (count,), torch.float32, device)
        done = _Pass(stream)
        if route == GBINARY and self.lanes == "torch":
            self._gbinary_line_buffers(done, count, bucket_index, device)
        bounds, start = [], 0
        for index in indices:
            bounds.append((start, start + segments[index][2]))
            start += segments[index][2]
        n_chunks = -(-count // _PASS_CHUNK)
        # Per piece (a slice's part of a chunk): sum g^2, sum |p| and max |p| in float32.
        parts = self._buffer(("statistics",), "pass_parts", (n_chunks + len(indices), 3),
                             torch.float32, device)
        magnitude = self._buffer(("statistics",), "magnitude", (_PASS_CHUNK,), torch.float32,
                                 device)
        owners, k = [], 0
        for c0 in range(0, count, _PASS_CHUNK):
            c1 = min(c0 + _PASS_CHUNK, count)
            while bounds[k][1] <= c0:
                k += 1
            for j in range(k, len(indices)):
                a, b = max(bounds[j][0], c0), min(bounds[j][1], c1)
                if a >= b:
                    if bounds[j][0] >= c1:
                        break
                    continue
                name, offset = segments[indices[j]][:2]
                grad = flat[offset + a - bounds[j][0]:offset + b - bounds[j][0]]
                residual = (self._residual[name][a - bounds[j][0]:b - bounds[j][0]]
                            if added[j] else None)
                self._pass_piece(route, grad, residual, None if viewing else stream[a:b],
                                 parts[len(owners)], magnitude[:b - a])
                owners.append(j)
            if done.lines is not None:
                self._pass_encode(done, stream, c0, c1)
        if owners:
            self._pass_sums(route, done, parts[:len(owners)], owners, flat, segments, indices,
                            bounds, added, local)
        return done

    def _gbinary_line_buffers(self, done, count, bucket_index, device):
        """The G-Binary lines of ``count`` elements, with their dither and undithered bits,
        into ``done``: for the pass to encode (the torch lanes), or the encode after it."""
        options, nbytes = self.gbinary, line_bytes(self.line_bits)
        n_lines = -(-count // self.line_bits)
        done.lines = self._buffer(GBINARY, "lines", (n_lines, nbytes), torch.uint8, device)
        if options.dither:
            done.flip = self._dither_bits(n_lines * nbytes, bucket_index, device)
        if options.error_feedback:
            done.own = self._buffer(GBINARY, "own", (n_lines * nbytes,), torch.uint8, device)

    @staticmethod
    def _pass_piece(route, grad, residual, copy, part, magnitude):
        """One slice's part of a chunk: ``part`` gets its sum ``g^2``, sum ``|p|`` and (for
        G-Ternary) max ``|p|``; ``p`` goes to ``copy`` (None where the stream is the bucket).
        With a ``residual``, ``p`` = ``grad + residual`` and ``copy`` is where it goes.
        ``magnitude`` is float32 scratch of the piece's length. A square is the same float
        of ``g`` as of ``|g|``."""
        if residual is not None:
            torch.sum(torch.mul(grad, grad, out=magnitude), dim=0, out=part[0])
            torch.add(grad, residual, out=copy)
            torch.abs(copy, out=magnitude)
            torch.sum(magnitude, dim=0, out=part[1])
            if route == GTERNARY:
                torch.amax(magnitude, dim=0, out=part[2])
        else:
            if copy is not None:
                copy.copy_(grad)
            torch.abs(grad, out=magnitude)
            torch.sum(magnitude, dim=0, out=part[1])
            if route == GTERNARY:
                torch.amax(magnitude, dim=0, out=part[2])
            torch.sum(magnitude.mul_(magnitude), dim=0, out=part[0])

    def _pass_encode(self, done, stream, c0, c1):
        """The G-Binary lines of the stream's elements ``c0`` to ``c1``, while they are in
        the cache (a chunk starts on a line: :data:`_PASS_CHUNK` is a multiple of any
        LINE_BITS)."""
        nbytes = line_bytes(self.line_bits)
        l0, l1 = c0 // self.line_bits, -(-c1 // self.line_bits)
        _lanes.gbinary_encode(
            stream[c0:c1], line_bits=self.line_bits, out=done.lines[l0:l1],
            dither=None if done.flip is None else done.flip[c0 // 8:],
            undithered=None if done.own is None else done.own[l0 * nbytes:l1 * nbytes],
            workspace=self._workspace, nan_check=False)  # NaN: encoded again

    def _pass_sums(self, route, done, used, owners, flat, segments, indices, bounds, added,
                   local):
        """The pieces' float32 sums added up per slice in float64 into ``local``, taken
        again in float64 where they are not finite, and G-Ternary's peak into ``done``."""
        device = used.device
        owner = torch.tensor(owners, dtype=torch.int64, device=device)
        sums = torch.zeros((len(indices), 2), dtype=torch.float64, device=device)
        sums.index_add_(0, owner, used[:, :2].to(torch.float64))
        if route == GTERNARY:
            done.peak = float(used[:, 2].max())
        for j, (sumsq, l1) in enumerate(sums.tolist()):
            name, offset, numel = segments[indices[j]]
            if not (math.isfinite(sumsq) and math.isfinite(l1)):  # float32 overflow, or NaN
                sums[j] = 0.0
                self._wide_sums(flat[offset:offset + numel], sumsq=sums[j, 0],
                                l1=None if added[j] else sums[j, 1])
                if added[j]:
                    self._wide_sums(done.stream[bounds[j][0]:bounds[j][1]], l1=sums[j, 1])
        local[indices, 2] += sums[:, 0]
        local[indices, 1] += sums[:, 1]

    def _stream(self, flat, segments, indices, safe, local, bucket_index, route):
        """The values a route compresses, ``p`` = gradient plus residual, slice after slice:
        the bucket itself where the slices lie back to back and nothing is added, else a
        scratch stream kept per route (``bucket_index`` None: a fresh one). Adds
        sum ``|p|`` of slices with a residual to ``local`` (when given). For a stream
        rebuilt without some slices, or without a slice's NaN or Inf (:meth:`_stream_pass`
        makes the stream of a step where all are finite)."""
        first, last = segments[indices[0]], segments[indices[-1]]
        contiguous = all(segments[a][1] + segments[a][2] == segments[b][1]
                         for a, b in zip(indices, indices[1:]))
        if contiguous and not any(i in safe or segments[i][0] in self._residual
                                  for i in indices):
            return flat[first[1]:last[1] + last[2]]
        count = sum(segments[i][2] for i in indices)
        stream = (torch.empty(count, dtype=torch.float32, device=flat.device)
                  if bucket_index is None else
                  self._buffer(route, "stream", (count,), torch.float32, flat.device))
        start = 0
        for index in indices:
            name, offset, numel = segments[index]
            grad = safe.get(index, flat[offset:offset + numel])
            piece = stream[start:start + numel]
            if name in self._residual:
                torch.add(grad, self._residual[name], out=piece)
                if local is not None:
                    self._sums(piece, l1=local[index, 1])
            else:
                piece.copy_(grad)
            start += numel
        return stream

    # -------------------------------------------------------------------- routes

    def _fp32_start(self, buffer, segments, indices, scratch="joined"):
        """Start averaging the FP32 slices of a bucket over the workers; returns what
        :meth:`_fp32_finish` completes. A run of adjacent slices of at least
        :data:`_IN_PLACE_ELEMENTS`, or the only run, is reduced where it lies (a bucket all on
        FP32: exactly the default all-reduce); the shorter ones are joined into one buffer,
        so that they cost one collective, and copied back when it is done (``scratch``
        names that buffer: one for each all-reduce in flight)."""
        started = time.perf_counter()
        flat = buffer.view(-1)
        runs = []  # (offset, numel) of adjacent FP32 slices
        for index in indices:
            _, offset, numel = segments[index]
            if runs and sum(runs[-1]) == offset:
                runs[-1] = (runs[-1][0], runs[-1][1] + numel)
            else:
                runs.append((offset, numel))
        in_place = [n >= _IN_PLACE_ELEMENTS or len(runs) == 1 for _, n in runs]
        reduced = [flat[a:a + n] for (a, n), kept in zip(runs, in_place) if kept]
        short = [flat[a:a + n] for (a, n), kept in zip(runs, in_place) if not kept]
        if short:
            joined = self._buffer(FP32, scratch, (sum(s.numel() for s in short),),
                                  buffer.dtype, buffer.device)
            reduced.append(torch.cat(short, out=joined))
        works = []
        for tensor in reduced:
            tensor.div_(self.world_size)
            works.append(dist.all_reduce(tensor, async_op=True))
        self._phase(FP32, "all_reduce", started)
        return _FP32Pending(reduced, short, works)

    def _fp32_finish(self, pending):
        """Wait for :meth:`_fp32_start`'s all-reduce; then the device's round trip and the
        short slices' copy back."""
        started = time.perf_counter()
        for work in pending.works:
            work.wait()
        started = self._phase(FP32, "all_reduce", started)
        for tensor in pending.reduced:
            self._through_device(tensor)
            self.traffic.count_fp32(tensor.numel())
        if pending.short:
            started = time.perf_counter()
            joined, start = pending.reduced[-1], 0
            for piece in pending.short:
                piece.copy_(joined[start:start + piece.numel()])
                start += piece.numel()
            self._phase(FP32, "write_back", started)

    def _through_device(self, tensor):
        """The reduced FP32 values as workers read them back through the device's FP32 path
        (a device on the host: the values go there and back)."""
        if self.device is not None:
            started = time.perf_counter()
            values = self.device.passthrough(tensor.detach().cpu().numpy())
            tensor.copy_(torch.from_numpy(values).to(tensor.device))
            self._phase(FP32, "device", started)

    def _dither_bits(self, n_bytes, bucket_index, device):
        """``n_bytes`` of dither bits shared by all workers (same seed, step and bucket): bit
        ``j % 8`` of byte ``j // 8`` set flips element ``j``'s sign."""
        key = (self.seed, self.step, bucket_index, ROUTES.index(GBINARY), 0)
        return _lanes.counter_words(key, -(-n_bytes // 8), device=device).view(
            torch.uint8)[:n_bytes]

    def _draws_key(self, bucket_index):
        """Key of this worker's G-Ternary draws (seed, step, bucket, route and rank)."""
        return (self.seed, self.step, bucket_index, ROUTES.index(GTERNARY), 1 + self.rank)

    def _exchange(self, lines, out):
        """Start gathering every worker's lines into ``out``, ``(world, n_lines,
        line_bytes)`` in rank order on the lines' device; returns what to ``wait()`` for.
        ``lines`` must not change until then."""
        return dist.all_gather(list(out.unbind(0)), lines, async_op=True)

    def _chunks(self, route, n_lines):
        """Line ranges the torch lanes work on (the golden lanes: all lines at once)."""
        per_line = route_spec(route).lanes(self.line_bits)
        step = n_lines if self.lanes == "golden" else max(1, _CHUNK_LANES // per_line)
        return [(start, min(start + step, n_lines)) for start in range(0, n_lines, step)]

    def _low_bit(self, route, flat, segments, indices, done, totals, own_l1, bucket_index):
        """A low-bit route's slices of a bucket: encode them, exchange every worker's lines,
        fold and read them out chunk by chunk, and decode straight into the bucket, each
        parameter times its scale."""
        tick = time.perf_counter()
        options = self.gbinary if route == GBINARY else self.gternary
        sizes = [segments[i][2] for i in indices]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64).tolist()
        scales = self._scales(options, [totals[i][1] for i in indices], sizes)
        encoded, tick = self._encode_route(route, options, done, bucket_index, tick)
        gathered = self._buffer(route, "gathered", (self.world_size,) + tuple(
            encoded.lines.shape), torch.uint8, flat.device)
        exchange = self._exchange(encoded.lines, gathered)
        tick = self._phase(route, "exchange", tick)
        if options.error_feedback:  # what this worker's own compression drops, for next
            # step, while the lines are on their way
            self._residuals(route, done.stream, segments, indices, starts,
                            encoded.own if route == GBINARY else encoded.lines, own_l1)
            tick = self._phase(route, "write_back", tick)
        exchange.wait()
        tick = self._phase(route, "exchange", tick)
        pieces = [(segments[i][1], start, size, float(scale))
                  for i, start, size, scale in zip(indices, starts, sizes, scales)]
        agreement, tick = self._aggregate_into(route, options, encoded, gathered, flat, pieces,
                                               done.stream.numel(), tick)
        self.traffic.count_window(route, done.stream.numel(), readout=encoded.readout,
                                  counter_bits=self.caps.counter_bits,
                                  world_size=self.world_size)
        for k, index in enumerate(indices if agreement is not None else ()):
            name, _, numel = segments[index]
            acc = self._regions[self.regions[name]]
            # |2n - N| / N (G-Binary, n the count of negative votes) or |S| / N (G-Ternary),
            # summed over the slice's lanes exactly, divided once
            acc.agreement += agreement[k] / self.world_size
            acc.agreement_elements += numel
        self._phase(route, "readout", tick)

    def _scales(self, options, own_l1, sizes):
        """Each slice's scale of the -1/0/+1 aggregate, the workers' mean ``|p|``: a lane the
        device reads as 0 (a tie, or a sum under the gate) moves nothing, a decided lane
        moves by the mean (``own_l1``: this worker's sum ``|p|`` a slice)."""
        l1 = np.array(own_l1) / self.world_size
        if options.scale == "parameter":
            return (l1 / np.maximum(sizes, 1)).astype(np.float32)
        if options.scale == "bucket":
            return np.full(len(sizes), l1.sum() / max(sum(sizes), 1), dtype=np.float32)
        return np.ones(len(sizes), dtype=np.float32)

    def _encode_route(self, route, options, done, bucket_index, tick):
        """This worker's lines of the route's stream (G-Binary's, when the pass made them,
        as it made them), as an :class:`_Encoded`; and the time after it."""
        stream = done.stream
        n_lines = -(-stream.numel() // route_spec(route).lanes(self.line_bits))
        nbytes = line_bytes(self.line_bits)
        device = stream.device
        if route == GBINARY:
            if done.lines is None:  # the golden lanes: encoded here, not by the pass
                self._gbinary_line_buffers(done, stream.numel(), bucket_index, device)
                self._encode_gbinary(stream, done.flip, done.lines,
                                     self._chunks(route, n_lines), own=done.own)
            encoded = _Encoded(options.device_readout, done.lines, done.flip, done.own)
            return encoded, self._phase(route, "encode", tick)
        encoded = _Encoded(Readout.GATED, self._buffer(route, "lines", (n_lines, nbytes),
                                                       torch.uint8, device))
        if done.peak is not None:
            peak = done.peak
            tau = _lanes.gternary_tau(peak, ratio=options.ratio, dtype=stream.dtype)
        else:
            tau, peak = _lanes.gternary_threshold(stream, ratio=options.ratio)
        shared = None
        if options.stochastic:
            maximum = torch.tensor([peak], dtype=torch.float64, device=self._control_device)
            dist.all_reduce(maximum, op=dist.ReduceOp.MAX)
            self.traffic.count_control(8)
            shared = float(maximum[0])
            tick = self._phase(route, "statistics", tick)
        self._encode_gternary(stream, tau, shared, options, bucket_index, encoded.lines,
                              self._chunks(route, n_lines))
        return encoded, self._phase(route, "encode", tick)

    def _aggregate_into(self, route, options, encoded, gathered, flat, pieces, count, tick):
        """Every worker's lines ``gathered`` folded (or aggregated by the device), read out
        and decoded into ``flat``, a chunk of lines at a time. ``pieces``: per slice, its
        offset in the bucket, its first lane in the stream, its size and its scale. Returns
        each slice's agreement sum (None unless :attr:`agreement`) and the time after it."""
        world, device = self.world_size, flat.device
        per_line, nbytes = route_spec(route).lanes(self.line_bits), gathered.shape[2]
        device_lines = None
        if self.device is not None:
            device_lines = torch.from_numpy(self.device.aggregate(
                route, gathered.cpu().numpy(), readout=encoded.readout,
                gate=options.gate if route == GTERNARY else None)).to(device)
            tick = self._phase(route, "device", tick)
        per_slot = readout_lines_per_slot(encoded.readout, counter_bits=self.caps.counter_bits)
        agreement = torch.zeros(len(pieces), dtype=torch.int64, device=device)
        for c0, c1 in self._chunks(route, gathered.shape[1]):
            e0, e1 = c0 * per_line, min(c1 * per_line, count)  # the chunk's lanes
            inside = [k for k, (_, a, n, _) in enumerate(pieces) if a < e1 and a + n > e0]
            lo = [max(pieces[k][1], e0) for k in inside]  # each slice's lanes in the chunk
            hi = [min(pieces[k][1] + pieces[k][2], e1) for k in inside]
            planes = (self._fold(route, gathered[:, c0:c1])
                      if self.agreement or device_lines is None else None)
            if inside and self.agreement:
                sums = _agreement_sums(route, planes, world, [a - e0 for a in lo],
                                       [b - e0 for b in hi], self._workspace,
                                       rows=gathered[:, c0:c1])
                agreement.index_add_(0, torch.tensor(inside, device=device), sums)
            tick = self._phase(route, "fold", tick)
            readout_lines = (device_lines[c0 * per_slot:c1 * per_slot] if device_lines is not None
                             else self._readout(route, planes, encoded.readout, options))
            destinations = [(a - e0, flat[pieces[k][0] + a - pieces[k][1]:
                                          pieces[k][0] + b - pieces[k][1]], pieces[k][3])
                            for k, a, b in zip(inside, lo, hi)]
            self._decode(route, encoded.readout, readout_lines, encoded.flip, c0 * nbytes,
                         c1 * nbytes, destinations, count - e0)
            tick = self._phase(route, "readout", tick)
        return (agreement.tolist() if self.agreement else None), tick

    # -------------------------------------------------------------------- lanes

    def _encode_gbinary(self, stream, flip, lines, chunks, own=None):
        """``stream``'s lines (dithered by ``flip``), and into ``own`` (when given) its signs
        before the dither, for the residuals."""
        if self.lanes == "golden":
            if own is not None:
                own.copy_(torch.from_numpy(gbinary.encode(stream.numpy(),
                                                          line_bits=self.line_bits)).view(-1))
            signal = stream.numpy()
            if flip is not None:  # 1 - 2 * bit, a float32 +-1 a lane, in place: exact
                signs = np.unpackbits(flip.numpy(), bitorder="little")[:signal.size].astype(
                    np.float32)
                signs *= -2
                signs += 1
                signal = signal * signs
            lines.copy_(torch.from_numpy(gbinary.encode(signal, line_bits=self.line_bits)))
            return
        per_line, nbytes = self.line_bits, lines.shape[1]
        for c0, c1 in chunks:
            _lanes.gbinary_encode(
                stream[c0 * per_line:c1 * per_line], line_bits=self.line_bits,
                dither=None if flip is None else flip[c0 * nbytes:c1 * nbytes],
                out=lines[c0:c1], workspace=self._workspace,
                undithered=None if own is None else own[c0 * nbytes:c1 * nbytes],
                nan_check=False)  # the statistics found every slice finite

    def _encode_gternary(self, stream, tau, shared, options, bucket_index, lines, chunks):
        key = self._draws_key(bucket_index)
        if self.lanes == "golden":
            draws = (_lanes.uniform_draws(key, stream.numel()).numpy()
                     if options.stochastic else None)
            lines.copy_(torch.from_numpy(gternary.encode(
                stream.numpy(), ratio=options.ratio, line_bits=self.line_bits, draws=draws,
                scale=shared)))
            return
        per_line = self.line_bits // 2
        for c0, c1 in chunks:
            piece = stream[c0 * per_line:c1 * per_line]
            draws = (_lanes.uniform_draws(key, piece.numel(), first=c0 * per_line,
                                          device=stream.device)
                     if options.stochastic else None)
            _lanes.gternary_encode_lines(piece, tau=tau, line_bits=self.line_bits, draws=draws,
                                         scale=shared, out=lines[c0:c1],
                                         workspace=self._workspace)

    def _fold(self, route, gathered):
        """The accumulator's bit-planes of every worker's lines (``COUNTS`` or ``SUMS``)."""
        caps = self.caps
        if self.lanes == "golden":
            module = route_spec(route).golden
            return torch.from_numpy(module.aggregate_planes(
                gathered.numpy(), max_workers=caps.max_workers, counter_bits=caps.counter_bits))
        fold = (_lanes.gbinary_aggregate_planes if route == GBINARY
                else _lanes.gternary_aggregate_planes)
        per_slot = (caps.counter_bits if route == GBINARY else
                    readout_lines_per_slot(Readout.SUMS, counter_bits=caps.counter_bits))
        out = self._workspace.take("fold", (gathered.shape[1], per_slot, gathered.shape[2]),
                                   torch.uint8, gathered.device)
        return fold(gathered, max_workers=caps.max_workers, counter_bits=caps.counter_bits,
                    out=out, workspace=self._workspace)

    def _readout(self, route, planes, readout, options):
        if route == GBINARY:
            args = {"num_workers": self.world_size}
        else:
            args = {"gate": options.gate}
        if self.lanes == "golden":
            module = route_spec(route).golden
            return torch.from_numpy(module.readout_planes(planes.numpy(), readout=readout,
                                                          **args))
        per_slot = readout_lines_per_slot(readout, counter_bits=self.caps.counter_bits)
        out = self._workspace.take("readout", (planes.shape[0] * per_slot, planes.shape[2]),
                                   torch.uint8, planes.device)
        if route == GBINARY:
            return _lanes.gbinary_readout_planes(planes, readout=readout, out=out, **args)
        return _lanes.gternary_readout_planes(planes, readout=readout, out=out,
                                              workspace=self._workspace, **args)

    def _decode(self, route, readout, readout_lines, flip, b0, b1, pieces, remaining):
        """The readout lines of a chunk decoded into the bucket, piece by piece: ``(start in
        the chunk's lanes, destination, scale)``. ``flip``'s bytes ``b0:b1`` are the chunk's
        dither; ``remaining`` the stream's elements from the chunk's first on."""
        if self.lanes == "golden":
            module = route_spec(route).golden
            n = min(remaining, readout_lines.shape[0] // readout_lines_per_slot(
                readout, counter_bits=self.caps.counter_bits) * route_spec(route).lanes(
                    self.line_bits))
            values = module.decode(readout_lines.numpy(), readout=readout, n_elements=n,
                                   line_bits=self.line_bits,
                                   counter_bits=self.caps.counter_bits).astype(np.float32)
            if flip is not None:
                signs = np.unpackbits(flip[b0:b1].numpy(), bitorder="little")[:n].astype(
                    np.float32)
                signs *= -2
                signs += 1
                values *= signs
            for start, out, scale in pieces:
                np.multiply(values[start:start + out.numel()], np.float32(scale), out=out.numpy())
            return
        zeros = None
        if route == GBINARY:
            slots = readout_lines.reshape(-1, 2 if readout is Readout.TERNARY else 1,
                                          readout_lines.shape[1])
            data = slots[:, 0].reshape(-1)
            if readout is Readout.TERNARY:
                zeros = slots[:, 1].reshape(-1)
            if flip is not None:
                data = torch.bitwise_xor(data, flip[b0:b1], out=self._workspace.take(
                    "dithered", data.numel(), torch.uint8, data.device))
        else:
            data = readout_lines.reshape(-1)
        _lanes.scaled_values_into(data, route=route, pieces=pieces, zeros=zeros,
                                  workspace=self._workspace)

    def _residuals(self, route, stream, segments, indices, starts, lines, own_l1):
        """This worker's residuals: ``p`` less its own compressed values, each scaled by its
        own mean ``|p|`` over its non-zero codes (sum ``|p|`` as the statistics summed it).
        ``lines``: G-Ternary, this worker's lines; G-Binary, the signs of ``p`` before the
        dither, a bit each (1: below 0), so that 0 counts as +1. The own values are decoded
        from them straight into the residual, which then takes ``p`` less them."""
        if route == GTERNARY:
            nonzero = _lanes.range_sums(
                (_lanes._words(lines).reshape(1, -1) & _lanes._EVEN), [1],
                [2 * s for s in starts], [2 * (s + segments[i][2])
                                          for s, i in zip(starts, indices)]).tolist()
        for k, index in enumerate(indices):
            name, _, numel = segments[index]
            p = stream[starts[k]:starts[k] + numel]
            held = self._residual.get(name)
            residual = held if held is not None and held.shape == p.shape else torch.empty_like(p)
            if route == GBINARY:  # own values: sign, with 0 as +1
                scale = float(np.float32(own_l1[index] / max(numel, 1)))
            else:
                scale = float(np.float32(own_l1[index] / max(nonzero[k], 1)))
            _lanes.scaled_values_into(lines.reshape(-1), route=route,
                                      pieces=[(starts[k], residual, scale)],
                                      workspace=self._workspace)
            torch.sub(p, residual, out=residual)
            self._residual[name] = residual


def _agreement_sums(route, planes, world, starts, stops, workspace, rows=None):
    """Per lane range, ``sum |2n - N|`` (G-Binary: ``planes`` the counters' bit-planes) or
    ``sum |S|`` (G-Ternary: the sums' ``SUMS`` lines) over its lanes, exact integers from
    population counts of the planes: no per-lane values are formed. G-Binary with ``rows``,
    every worker's lines of the same lanes, counts fewer words where workers are few."""
    words = _lanes._words(planes)  # (lines, planes or digit lines, words)
    n_lines, per_slot, per_line = words.shape
    device = planes.device
    if route == GBINARY and rows is not None and world <= 2 * min(
            per_slot, world.bit_length()) + 1:
        # A lane's max(n, N - n) is the number of workers that voted as the majority reads
        # (a tie reads positive: N - n = N / 2 of them), so sum |2n - N| = 2 sum max - N L
        # = N L - 2 sum_w popcount(row_w xor negative).
        used = min(per_slot, world.bit_length())
        counts = [words[:, k] for k in range(used)]
        negative = _lanes._greater(counts, world // 2, out=workspace.take(
            "negative", (n_lines, per_line), torch.int64, device))
        streams = workspace.take("streams", (world, n_lines, per_line), torch.int64, device)
        torch.bitwise_xor(_lanes._words(rows), negative, out=streams)
        sums = _lanes.range_sums(streams.view(world, -1), [-2] * world, starts, stops,
                                 workspace=workspace, in_place=True)
        return sums + world * (torch.tensor(stops, device=device)
                               - torch.tensor(starts, device=device))
    if route == GBINARY:
        used = min(per_slot, world.bit_length())
        counts = [words[:, k] for k in range(used)]
        streams = workspace.take("streams", (2 * used + 1, n_lines, per_line), torch.int64,
                                 device)
        upper = _lanes._greater(counts, (world - 1) // 2, out=streams[2 * used])  # 2n >= N
        lower = workspace.take("lower", (n_lines, per_line), torch.int64, device)
        torch.bitwise_not(upper, out=lower)
        for k, count in enumerate(counts):
            torch.bitwise_and(count, upper, out=streams[k])
            torch.bitwise_and(count, lower, out=streams[used + k])
        weights = ([2 << k for k in range(used)] + [-(2 << k) for k in range(used)]
                   + [-2 * world])
        sums = _lanes.range_sums(streams.view(2 * used + 1, -1), weights, starts, stops,
                                 workspace=workspace, in_place=True)
        # sum over G (2n - N) + sum over ~G (N - 2n) = 2 sum_G n - 2 sum_~G n - N (|G| - |~G|)
        return sums + world * (torch.tensor(stops, device=device)
                               - torch.tensor(starts, device=device))
    return _sum_magnitudes(words, world, starts, stops, workspace)


# Masks of the field sums below: 2-bit fields to 4-bit, 4-bit to 8-bit, 8-bit to 16-bit.
_FIELDS_2 = 0x3333_3333_3333_3333
_FIELDS_4 = 0x0F0F_0F0F_0F0F_0F0F
_FIELDS_8 = 0x00FF_00FF_00FF_00FF
_SUM_16 = 0x0001_0001_0001_0001


def _sum_magnitudes(digits, world, starts, stops, workspace):
    """Per lane range, ``sum |S|`` of G-Ternary sums held as ``SUMS`` lines ``digits``
    (``int64`` words ``(lines, k, words)``), from the lines themselves.

    ``|S| = (S xor s) + [S < 0]`` for ``s`` the sign repeated over every bit, below
    ``2**width`` with ``width`` the bits ``world`` workers' sums reach. A ``SUMS`` line
    holds two bits of every sum, a 2-bit field a lane: xored with the sign at both bits,
    the field is a digit of ``S xor s``, worth ``4**d`` on line ``d``. The fields of a word
    are added up as a population count adds its bits (2-bit fields into 4, into 8, into
    16, then one multiplication sums a word), each line shifted to its weight once its
    fields have room: about 10 operations a line and word, where a population count of
    each bit of ``|S|`` took 15 a bit."""
    n_lines, per_slot, per_line = digits.shape
    device = digits.device
    width = min(2 * per_slot - 1, world.bit_length())
    n_digits = -(-width // 2)
    n = n_lines * per_line
    take = workspace.take
    sign = take("sign", n, torch.int64, device).view(n_lines, per_line)
    torch.bitwise_right_shift(digits[:, per_slot - 1], 1, out=sign)  # the sum's top bit
    sign &= _lanes._EVEN
    both = take("sign_both", (n_lines, per_line), torch.int64, device)
    torch.mul(sign, 3, out=both)
    # Bytes hold at most 4 * 4**n_digits (four lanes of digits, plus the signs) while that
    # is below 256; beyond, every line goes on to 16-bit fields before it is weighted.
    wide = 4 ** (n_digits + 1) > 255
    acc = take("magnitude_sum", (n_lines, per_line), torch.int64, device)
    field = take("magnitude_field", (n_lines, per_line), torch.int64, device)
    spare = take("magnitude_spare", (n_lines, per_line), torch.int64, device)

    def to_bytes(x):
        """2-bit fields of ``x`` summed into bytes, in place."""
        torch.bitwise_right_shift(x, 2, out=spare)
        spare.bitwise_and_(_FIELDS_2)
        x &= _FIELDS_2
        x += spare
        torch.bitwise_right_shift(x, 4, out=spare)
        x += spare
        x &= _FIELDS_4
        return x

    def to_shorts(x):
        torch.bitwise_right_shift(x, 8, out=spare)
        spare.bitwise_and_(_FIELDS_8)
        x &= _FIELDS_8
        x += spare
        return x

    acc.copy_(sign)
    to_bytes(acc)
    if wide:
        to_shorts(acc)
    for d in range(n_digits):
        torch.bitwise_xor(digits[:, d], both, out=field)
        to_bytes(field)
        if wide:
            to_shorts(field)
        if d:
            field <<= 2 * d
        acc += field
    if not wide:
        to_shorts(acc)
    acc *= _SUM_16
    acc >>= 48  # the sum of the four 16-bit fields, below 2**15

    def words_at(index):
        """The bits of ``|S| - [S < 0]`` and the sign, lane by lane at the even bits, of the
        words at ``index``: the streams whose weighted counts ``acc`` holds."""
        lines = digits[index // per_line, :, index % per_line].T  # (k, len(index))
        sign_words = (lines[per_slot - 1] >> 1) & _lanes._EVEN
        bits = [((lines[j // 2] >> (j % 2)) ^ sign_words) & _lanes._EVEN for j in range(width)]
        return torch.stack(bits + [sign_words])

    weights = [1 << j for j in range(width)] + [1]
    return _lanes.word_range_sums(acc.view(-1), words_at, weights, [2 * s for s in starts],
                                  [2 * s for s in stops])


def ddp_buckets(model, *, bucket_cap_mb=None):
    """DDP's bucket layouts for ``model``: ``(first_step, later_steps)``, each a list of
    buckets, each a list of ``(name, numel)``.

    ``bucket_cap_mb`` None is DDP's default (25 MiB, first rebuilt bucket 1 MiB). Works on
    ``meta`` parameters.
    """
    named = [(name, param) for name, param in model.named_parameters() if param.requires_grad]
    if bucket_cap_mb is None:
        caps = [dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * 1024 * 1024]
    else:
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) \
                or not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be a positive number, not {bucket_cap_mb!r}")
        caps = [int(bucket_cap_mb * 1024 * 1024)]
    first = [[(name, param.numel()) for name, param in named]]
    ready = named[::-1]
    indices, _ = dist._compute_bucket_assignment_by_size(
        [param for _, param in ready], caps, [False] * len(ready))
    later = [[(ready[i][0], ready[i][1].numel()) for i in bucket] for bucket in indices]
    return first, later
