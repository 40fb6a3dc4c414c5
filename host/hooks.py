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
import time

import numpy as np
import torch
import torch.distributed as dist

from ..golden import gbinary, gternary
from . import roles as _roles
from ..golden.formats import Readout, readout_lines_per_slot, route_spec
from ..golden.lines import line_bytes
from .runtime import (FP32, GBINARY, GTERNARY, LOW_BIT_ROUTES, ROUTES, DeviceCaps,
                      GBinaryOptions, GTernaryOptions, RegionStats, check_capacity)

__all__ = ["RouteTraffic", "TrafficMeter", "fp32_hook", "FabricHook", "bucket_segments",
           "ddp_buckets", "CONTROL_VALUES_PER_PARAMETER", "PHASES"]

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
        counter width and worker range are used by the golden accumulators, and low-bit routes
        it cannot serve are refused at construction and in :meth:`set_routes`.
    seed : int
        Seed of the tie-breaking dither and the stochastic ternarization.
    device : object or None
        Where the low-bit windows are folded and read out. None: the golden accumulators, on
        every worker. Otherwise an object with ``aggregate(route, lines, *, readout, gate=None)``
        that takes every worker's lines, stacked ``(world, n_lines, line_bytes)``, and returns
        the readout lines the device answers with (the same on every worker), and
        ``passthrough(values)`` that returns a float32 array as it reads back after a round
        trip through the device's FP32 path; :class:`neuron_fabric.sim.device.RtlDevice` runs
        the emitted Verilog. The per-lane counts behind the health statistics are always
        folded on the host.

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
        and lines, the dither included), ``exchange`` (the all-gather, waiting for the slowest
        worker included), ``fold`` (the golden accumulator and the agreement it gives),
        ``readout`` (the readout lines and their decoding; ``device`` instead of the golden
        readout when a device is set), ``write_back`` (scaling, error-feedback residuals and
        the writes into the bucket), and G-Ternary's shared maximum under ``statistics``.
        ``"fp32"`` holds ``all_reduce`` (``device`` for the round trip through a device) and,
        for a bucket only partly on FP32, ``write_back``. Timing costs a few calls of
        ``time.perf_counter`` per route and bucket.

    Per step: run forward and backward (DDP calls the hook per bucket), then call
    :meth:`end_step` with the local loss; it returns the global loss and the
    :class:`~neuron_fabric.host.runtime.RegionStats` of every region.

    Raises ``TypeError``/``ValueError`` for bad options and
    :class:`~neuron_fabric.host.runtime.CapacityError` for routes the device cannot serve.
    """

    def __init__(self, model, *, routes, regions=None, gbinary=None, gternary=None, caps=None,
                 seed=0, device=None):
        self.device = device
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

    # -------------------------------------------------------------------- per step

    def end_step(self, loss):
        """Close a step: all-reduce the local ``loss`` (a float or 0-d tensor) to the global
        mean and return ``(loss, {region: RegionStats})`` for the buckets of this step."""
        started = time.perf_counter()
        value = torch.tensor([float(loss)], dtype=torch.float64)
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

    def run(self, bucket):
        """Aggregate one bucket in place; returns a completed future of its buffer."""
        started = time.perf_counter()
        buffer = bucket.buffer()
        segments = bucket_segments(bucket, self._names)
        self.traffic.count_baseline(buffer.numel())
        flat = buffer.detach().numpy()
        routes = [self.routes[name] for name, _, _ in segments]

        local = np.zeros((len(segments), CONTROL_VALUES_PER_PARAMETER), dtype=np.float64)
        compressed = {}
        for index, (name, offset, numel) in enumerate(segments):
            grad = flat[offset:offset + numel]
            sumsq = np.dot(grad, grad)
            # A finite sum of squares has no NaN or Inf behind it; count only otherwise.
            bad = 0
            if not np.isfinite(sumsq):
                finite = np.isfinite(grad)
                bad = numel - int(np.count_nonzero(finite))
            local[index, 0] = bad
            safe = grad if not bad else np.where(finite, grad, 0)
            local[index, 2] = float(sumsq if not bad else np.dot(safe, safe))
            if routes[index] != FP32:
                p = safe + self._residual[name] if name in self._residual else safe
                compressed[index] = p
                local[index, 1] = float(np.abs(p).sum(dtype=np.float64))
        own_l1 = local[:, 1].copy()  # the all-reduce below sums the column in place
        control = torch.from_numpy(local)
        dist.all_reduce(control)
        self.traffic.count_control(control.numel() * 8)
        totals = control.numpy()
        self._phase(CONTROL, "statistics", started)

        groups = {route: [] for route in ROUTES}
        for index, route in enumerate(routes):
            if route != FP32 and totals[index, 0] > 0:
                route = FP32  # a non-finite gradient somewhere: this step goes exact
                self._residual.pop(segments[index][0], None)
            groups[route].append(index)
            name = segments[index][0]
            acc = self._regions.setdefault(self.regions[name], _RegionAccumulator())
            acc.nonfinite |= bool(totals[index, 0] > 0)
            acc.sumsq += float(totals[index, 2])
            if route != FP32:
                acc.route = route

        if groups[FP32]:
            self._fp32(buffer, segments, groups[FP32])
        for route in LOW_BIT_ROUTES:
            if groups[route]:
                self._low_bit(route, flat, segments, groups[route], compressed, totals,
                              own_l1, bucket.index())
        future = torch.futures.Future()
        future.set_result(buffer)
        return future

    # -------------------------------------------------------------------- routes

    def _fp32(self, buffer, segments, indices):
        world = self.world_size
        started = time.perf_counter()
        if len(indices) == len(segments):  # the whole bucket: exactly the default all-reduce
            buffer.div_(world)
            dist.all_reduce(buffer)
            self._phase(FP32, "all_reduce", started)
            self._through_device(buffer)
            self.traffic.count_fp32(buffer.numel())
            return
        slices = [buffer[segments[i][1]:segments[i][1] + segments[i][2]] for i in indices]
        joined = torch.cat(slices)
        joined.div_(world)
        dist.all_reduce(joined)
        self._phase(FP32, "all_reduce", started)
        self._through_device(joined)
        self.traffic.count_fp32(joined.numel())
        started = time.perf_counter()
        start = 0
        for piece in slices:
            piece.copy_(joined[start:start + piece.numel()])
            start += piece.numel()
        self._phase(FP32, "write_back", started)

    def _through_device(self, tensor):
        """The reduced FP32 values as workers read them back through the device's FP32 path."""
        if self.device is not None:
            started = time.perf_counter()
            tensor.copy_(torch.from_numpy(self.device.passthrough(tensor.detach().numpy())))
            self._phase(FP32, "device", started)

    def _dither(self, count, bucket_index, route):
        """A ``float32`` +-1 pattern shared by all workers (same seed, step and bucket)."""
        rng = np.random.default_rng([self.seed, self.step, bucket_index, ROUTES.index(route)])
        flip = rng.integers(0, 2, size=count, dtype=np.int8).astype(np.float32)
        flip *= -2  # 1 - 2 * bit, in place: exact in float32
        flip += 1
        return flip

    def _exchange(self, lines):
        """Every worker's lines, stacked ``(world, n_lines, line_bytes)`` in rank order."""
        mine = torch.from_numpy(np.ascontiguousarray(lines))
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(gathered, mine)
        return torch.stack(gathered).numpy()

    def _window(self, route, lines, *, readout, count, tick, **readout_args):
        """One aggregation window of ``route``: every worker's ``lines`` exchanged, folded on
        the host (the per-lane values behind the statistics) and read out, by the golden
        readout (``readout_args`` are its own) or by the device. Returns the per-lane counts
        or sums, the ``count`` decoded values and the time the last phase ended."""
        module, caps = route_spec(route).golden, self.caps
        gathered = self._exchange(lines)
        tick = self._phase(route, "exchange", tick)
        acc = module.aggregate(gathered, max_workers=caps.max_workers,
                               counter_bits=caps.counter_bits)
        tick = self._phase(route, "fold", tick)
        if self.device is None:
            readout_lines = module.readout(acc, readout=readout, counter_bits=caps.counter_bits,
                                           **readout_args)
        else:  # the device call stands for the golden readout; it is timed on its own
            readout_lines = self.device.aggregate(route, gathered, readout=readout,
                                                  gate=readout_args.get("gate"))
            tick = self._phase(route, "device", tick)
        values = module.decode(readout_lines, readout=readout, n_elements=count,
                               line_bits=self.line_bits,
                               counter_bits=caps.counter_bits).astype(np.float32)
        return acc, values, self._phase(route, "readout", tick)

    def _low_bit(self, route, flat, segments, indices, compressed, totals, own_l1, bucket_index):
        tick = time.perf_counter()
        sizes = [segments[i][2] for i in indices]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        p = np.concatenate([compressed[i] for i in indices]).astype(np.float32, copy=False)
        count = p.size
        world, caps = self.world_size, self.caps
        tick = self._phase(route, "encode", tick)
        if route == GBINARY:
            options = self.gbinary
            flip = self._dither(count, bucket_index, route) if options.dither else None
            signal = p * flip if flip is not None else p
            lines = gbinary.encode(signal, line_bits=self.line_bits)
            tick = self._phase(route, "encode", tick)
            readout = options.device_readout
            counts, values, tick = self._window(route, lines, readout=readout, count=count,
                                                tick=tick, num_workers=world)
            if flip is not None:
                values *= flip
            tick = self._phase(route, "readout", tick)
            agreement = counts.reshape(-1)[:count].astype(np.float32)  # |2n - world| / world
            agreement *= 2
            agreement -= world
            np.abs(agreement, out=agreement)
            agreement /= world
            tick = self._phase(route, "fold", tick)
            # This worker's own compressed values, for error feedback: sign, with 0 as +1
            # (1 - 2 * [p < 0], in place: several times faster than np.where with scalars).
            own = None
            if options.error_feedback:
                own = (p < 0).astype(np.float32)
                own *= -2
                own += 1
        else:
            options = self.gternary
            rng, shared = None, None
            if options.stochastic:
                peak = torch.tensor([float(np.abs(p).max()) if count else 0.0], dtype=torch.float64)
                dist.all_reduce(peak, op=dist.ReduceOp.MAX)
                self.traffic.count_control(8)
                shared = float(peak[0])
                rng = np.random.default_rng([self.seed, self.rank, self.step, bucket_index])
                tick = self._phase(route, "statistics", tick)
            lines = gternary.encode(p, ratio=options.ratio, line_bits=self.line_bits, rng=rng,
                                    scale=shared)
            tick = self._phase(route, "encode", tick)
            own = None
            if options.error_feedback:  # the same codes again: same seed, same draws
                rng = None if rng is None else np.random.default_rng(
                    [self.seed, self.rank, self.step, bucket_index])
                own = gternary.ternarize(p, ratio=options.ratio, rng=rng, scale=shared)
                tick = self._phase(route, "write_back", tick)
            readout = Readout.GATED
            sums, values, tick = self._window(route, lines, readout=readout, count=count,
                                              tick=tick, gate=options.gate)
            agreement = sums.reshape(-1)[:count].astype(np.float32)  # |sum| / world
            np.abs(agreement, out=agreement)
            agreement /= world
            tick = self._phase(route, "fold", tick)
            own = None if own is None else own.astype(np.float32)
        self.traffic.count_window(route, count, readout=readout, counter_bits=caps.counter_bits,
                                  world_size=world)

        # Scale the -1/0/+1 aggregate by the workers' mean |p|: a lane the device reads as 0
        # (a tie, or a sum under the gate) moves nothing, a decided lane moves by the mean.
        l1 = np.array([totals[i, 1] for i in indices]) / world
        if options.scale == "parameter":
            scales = (l1 / np.maximum(sizes, 1)).astype(np.float32)
        elif options.scale == "bucket":
            scales = np.full(len(indices), l1.sum() / max(count, 1), dtype=np.float32)
        else:
            scales = np.ones(len(indices), dtype=np.float32)
        agreement_sums = np.add.reduceat(agreement, starts)
        for k, index in enumerate(indices):
            name, offset, numel = segments[index]
            start = starts[k]
            np.multiply(values[start:start + numel], scales[k], out=flat[offset:offset + numel])
            if own is not None:  # what this worker's own compression dropped
                mine = own[start:start + numel]
                # sum |p| of this slice, as the statistics summed it before the all-reduce
                local_scale = float(own_l1[index]) / max(int(np.count_nonzero(mine)), 1)
                residual = mine * np.float32(local_scale)
                self._residual[name] = np.subtract(p[start:start + numel], residual, out=residual)
            acc = self._regions[self.regions[name]]
            acc.agreement += float(agreement_sums[k])
            acc.agreement_elements += numel
        self._phase(route, "write_back", tick)


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
