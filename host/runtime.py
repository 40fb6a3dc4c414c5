"""The profile-guided runtime: operating profiles, bindings, health monitor, capacity check.

The communication hooks (:mod:`neuron_fabric.host.hooks`) carry out one route per parameter;
this module decides which route that is, step by step:

- an operating :class:`Profile` (a TOML file, see :func:`load_profile`) names the route of each
  parameter role (:data:`neuron_fabric.host.roles.ROLES`), the warm-up steps spent on FP32,
  the health thresholds and the options of each low-bit route (readout, scale rule, error
  feedback, ternary threshold and gate);
- :func:`bind` classifies a model's parameters from its module tree and returns the
  parameter-to-route :class:`Binding`;
- :class:`HealthMonitor` watches the global loss against its moving average, non-finite
  gradients, the sign agreement the device's counts reveal and the gradient-norm ratio, and
  moves a region (a role) to FP32 on a fault, re-admitting it after a healthy stretch;
- :func:`check_capacity` refuses low-bit routes that the device's capabilities (the CAPS
  registers: line width, worker bitmap, counter width, windows) cannot serve.

:class:`RuntimePolicy` ties them together. Every decision depends only on values that all
workers share (all-reduced statistics and the step number), so that all workers pick the
same routes and their collectives match.

Nothing here imports PyTorch, except :func:`bind`, which needs the module tree.
"""

import dataclasses
import importlib.resources
import math
import pathlib
import tomllib

from . import roles as _roles
from ..golden.validate import check_int
from ..golden.formats import GATE_MAX, READOUT_SPECS, ROUTE_SPECS, Readout, Route, sum_limit
from ..golden.lines import check_line_bits
from ..golden.params import FabricParams
from ..golden.regmap import register_map

__all__ = ["FP32", "GBINARY", "GTERNARY", "ROUTES", "LOW_BIT_ROUTES", "SCALE_RULES",
           "GBinaryOptions", "GTernaryOptions", "HealthOptions", "Profile", "PROFILE_NAMES",
           "load_profile", "profile_from_dict", "Binding", "bind", "RegionStats",
           "HealthMonitor", "DeviceCaps", "CapacityError", "check_capacity", "RuntimePolicy"]

#: The route that bypasses the device's aggregation: an ordinary FP32 all-reduce.
FP32 = "fp32"
GBINARY = ROUTE_SPECS[Route.GBINARY].name
GTERNARY = ROUTE_SPECS[Route.GTERNARY].name
#: The device's routes, by name, in CSR encoding order (the golden registry's names).
LOW_BIT_ROUTES = tuple(spec.name for spec in ROUTE_SPECS.values())
#: Route names, as profiles and reports spell them.
ROUTES = (FP32,) + LOW_BIT_ROUTES

#: How a low-bit route scales the aggregate back to a gradient:
#: ``"bucket"`` one scale per route and bucket, ``"parameter"`` one per parameter, each the
#: mean ``|g|`` over the elements and the workers (the gradient plus the error-feedback
#: residual where that is on); ``"none"`` returns the bare -1/0/+1 values.
SCALE_RULES = ("bucket", "parameter", "none")

#: Profiles shipped in ``host/profiles``, by file name.
PROFILE_NAMES = tuple(sorted(entry.name.removesuffix(".toml")
                             for entry in (importlib.resources.files(__package__) / "profiles").iterdir()
                             if entry.name.endswith(".toml")))
#: The G-Binary readouts the hooks can decode to a gradient, by name.
GBINARY_READOUTS = {READOUT_SPECS[r].name: r for r in (Readout.SIGN, Readout.TERNARY)}


def _check_bool(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value


def _check_real(name, value, *, low, high=math.inf, low_open=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, not {value!r}")
    value = float(value)
    if not (low < value if low_open else low <= value) or not value <= high or math.isnan(value):
        bound = f"greater than {low}" if low_open else f"at least {low}"
        rule = bound if high == math.inf else f"{bound} and at most {high}"
        raise ValueError(f"{name} must be {rule}, not {value!r}")
    return value


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class GBinaryOptions:
    """Options of the G-Binary route.

    ``readout``: ``"sign"`` (1 bit per lane read back; a tie reads as +1) or ``"ternary"``
    (2 bits, a tie reads 0). ``dither``: flip the signs of a pseudo-random half of the
    elements before encoding and flip them back after the readout (all workers use the same
    pattern, drawn from the seed, step and bucket), so that a tie under the ``"sign"`` readout
    becomes a fair coin instead of always +1; the device sees ordinary sign bits.
    ``error_feedback``: each worker keeps what its own compression dropped and adds it to
    the next gradient. ``scale``: one of :data:`SCALE_RULES`.
    """

    readout: str = "sign"
    dither: bool = True
    error_feedback: bool = False
    scale: str = "parameter"

    def __post_init__(self):
        _check_choice(f"{GBINARY}.readout", self.readout, tuple(GBINARY_READOUTS))
        _check_bool(f"{GBINARY}.dither", self.dither)
        _check_bool(f"{GBINARY}.error_feedback", self.error_feedback)
        _check_choice(f"{GBINARY}.scale", self.scale, SCALE_RULES)

    @property
    def device_readout(self):
        """The device readout (:class:`~neuron_fabric.golden.formats.Readout`)."""
        return GBINARY_READOUTS[self.readout]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GTernaryOptions:
    """Options of the G-Ternary route (docs/design.md, "G-Ternary").

    ``ratio``: threshold ``tau = ratio * max|g|`` of the worker-side ternarization.
    ``stochastic``: TernGrad-style random keeping, with the maximum ``|g|`` over all workers as
    the shared scale (one extra 4-byte all-reduce per bucket). ``gate``: the GATE register;
    the readout is ``sign(S)`` where ``|S| >= gate``. ``error_feedback`` and ``scale`` as for
    :class:`GBinaryOptions`.
    """

    ratio: float = 0.0
    stochastic: bool = False
    gate: int = 1
    error_feedback: bool = False
    scale: str = "parameter"

    def __post_init__(self):
        object.__setattr__(self, "ratio", _check_real(f"{GTERNARY}.ratio", self.ratio, low=0.0,
                                                      high=1.0))
        _check_bool(f"{GTERNARY}.stochastic", self.stochastic)
        check_int(f"{GTERNARY}.gate", self.gate, low=0, high=GATE_MAX)
        _check_bool(f"{GTERNARY}.error_feedback", self.error_feedback)
        _check_choice(f"{GTERNARY}.scale", self.scale, SCALE_RULES)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HealthOptions:
    """Thresholds of the :class:`HealthMonitor`.

    ``enabled``: False makes the monitor record statistics but never fall back.
    ``loss_decay``: decay of the loss's exponential moving average (EMA).
    ``loss_spike``, ``loss_margin``: a global loss above ``loss_spike`` times its EMA and
    more than ``loss_margin`` above it is a fault of every low-bit region (the loss cannot say
    which region caused it; the margin keeps the noise of a nearly converged minibatch loss
    from counting); a non-finite loss is one too.
    ``min_agreement``: a region whose mean sign agreement (see :class:`RegionStats`) falls
    below this is a fault; 0 disables the check. ``max_grad_norm_ratio``: a region whose
    gradient norm exceeds this many times its own EMA is a fault; 0 disables the check.
    ``settle_steps``: observations before the loss and norm checks start (the EMAs need them).
    ``readmit_after``: consecutive healthy steps on FP32 before a region returns to its
    low-bit route; it doubles with each repeated fault of the region, up to
    ``max_readmit_after``.
    """

    enabled: bool = True
    loss_decay: float = 0.9
    loss_spike: float = 1.5
    loss_margin: float = 0.25
    min_agreement: float = 0.0
    max_grad_norm_ratio: float = 0.0
    settle_steps: int = 5
    readmit_after: int = 20
    max_readmit_after: int = 160

    def __post_init__(self):
        _check_bool("health.enabled", self.enabled)
        _check_real("health.loss_decay", self.loss_decay, low=0.0, high=1.0)
        _check_real("health.loss_spike", self.loss_spike, low=1.0, low_open=True)
        _check_real("health.loss_margin", self.loss_margin, low=0.0)
        _check_real("health.min_agreement", self.min_agreement, low=0.0, high=1.0)
        _check_real("health.max_grad_norm_ratio", self.max_grad_norm_ratio, low=0.0)
        check_int("health.settle_steps", self.settle_steps, low=0)
        check_int("health.readmit_after", self.readmit_after, low=1)
        check_int("health.max_readmit_after", self.max_readmit_after, low=self.readmit_after)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Profile:
    """An operating profile: which route each parameter role takes, and how.

    Members
    -------
    name, description : str
    routes : dict
        Role (every one of :data:`~neuron_fabric.host.roles.ROLES`) to route
        (one of :data:`ROUTES`).
    warmup_steps : int
        Steps from the start that run every parameter on FP32.
    line_bits : int
        Line width the profile was calibrated for; the device must have it.
    gbinary, gternary, health
        :class:`GBinaryOptions`, :class:`GTernaryOptions`, :class:`HealthOptions`.

    Raises ``TypeError`` or ``ValueError`` naming the bad entry.
    """

    name: str
    description: str = ""
    routes: dict
    warmup_steps: int = 0
    line_bits: int = 512
    gbinary: GBinaryOptions = GBinaryOptions()
    gternary: GTernaryOptions = GTernaryOptions()
    health: HealthOptions = HealthOptions(enabled=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty string, not {self.name!r}")
        if not isinstance(self.routes, dict):
            raise TypeError(f"routes must be a table from role to route, not {self.routes!r}")
        missing = [role for role in _roles.ROLES if role not in self.routes]
        unknown = sorted(set(self.routes) - set(_roles.ROLES))
        if missing or unknown:
            raise ValueError(f"routes must name exactly the roles {_roles.ROLES}, not "
                             f"{sorted(self.routes)} (missing {missing}, unknown {unknown})")
        for role, route in self.routes.items():
            _check_choice(f"routes.{role}", route, ROUTES)
        object.__setattr__(self, "routes", {role: self.routes[role] for role in _roles.ROLES})
        check_int("warmup_steps", self.warmup_steps, low=0)
        check_line_bits(self.line_bits)
        for field, cls in _SECTIONS.items():
            if not isinstance(getattr(self, field), cls):
                raise TypeError(f"{field} must be a {cls.__name__}, "
                                f"not {getattr(self, field)!r}")

    @property
    def low_bit_routes(self):
        """The low-bit routes some role uses, in :data:`ROUTES` order."""
        return tuple(route for route in LOW_BIT_ROUTES if route in self.routes.values())

    @property
    def reads_agreement(self):
        """Whether a health rule reads the regions' sign agreement (the monitor counts its
        faults even when disabled): the hooks measure it only then
        (``FabricHook(agreement=...)``)."""
        return self.health.min_agreement > 0

    def replace(self, **changes):
        """A copy with top-level fields replaced; nested options take a dict of their fields,
        merged into the current ones (``profile.replace(gbinary={"error_feedback": True})``)."""
        for field in _SECTIONS:
            if isinstance(changes.get(field), dict):
                changes[field] = dataclasses.replace(getattr(self, field), **changes[field])
        if isinstance(changes.get("routes"), dict):
            changes["routes"] = {**self.routes, **changes["routes"]}
        return dataclasses.replace(self, **changes)

    def as_dict(self):
        return dataclasses.asdict(self)


#: The option tables of a profile: one per low-bit route, named as the route (a field of
#: :class:`Profile` each), and the health thresholds.
_SECTIONS = {GBINARY: GBinaryOptions, GTERNARY: GTernaryOptions, "health": HealthOptions}
_TOP_KEYS = ("name", "description", "routes", "warmup_steps", "line_bits") + tuple(_SECTIONS)


def profile_from_dict(data, *, source="profile"):
    """Build a :class:`Profile` from a parsed TOML table; ``source`` names it in errors."""
    if not isinstance(data, dict):
        raise TypeError(f"{source} must be a table, not {data!r}")
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise ValueError(f"{source} must hold only the keys {', '.join(_TOP_KEYS)}, "
                         f"not {', '.join(unknown)}")
    kwargs = {key: value for key, value in data.items() if key not in _SECTIONS}
    for section, cls in _SECTIONS.items():
        table = data.get(section, {})
        names = [field.name for field in dataclasses.fields(cls)]
        extra = sorted(set(table) - set(names))
        if extra:
            raise ValueError(f"{source} section [{section}] must hold only {', '.join(names)}, "
                             f"not {', '.join(extra)}")
        kwargs[section] = cls(**table)
    if "health" not in data:
        kwargs["health"] = HealthOptions(enabled=False)
    return Profile(**kwargs)


def load_profile(profile):
    """Load an operating profile: a name from :data:`PROFILE_NAMES` or a path to a TOML file.

    The file holds ``name``, ``description``, ``warmup_steps``, ``line_bits``, a ``[routes]``
    table from every role to a route, and optional ``[gbinary]``, ``[gternary]`` and
    ``[health]`` tables with the fields of the option classes (a profile without
    ``[health]`` never falls back). Raises ``ValueError`` for an unknown name, a missing file
    or a bad entry.
    """
    if isinstance(profile, str) and profile in PROFILE_NAMES:
        text = (importlib.resources.files(__package__) / "profiles" / f"{profile}.toml").read_text()
        source = f"profile {profile!r}"
    elif isinstance(profile, (str, pathlib.Path)) and str(profile).endswith(".toml"):
        path = pathlib.Path(profile)
        if not path.is_file():
            raise ValueError(f"profile must be an existing TOML file, not {str(path)!r}")
        text, source = path.read_text(), str(path)
    else:
        raise ValueError(f"profile must be one of {', '.join(PROFILE_NAMES)} or a path to a "
                         f".toml file, not {profile!r}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{source} is not valid TOML: {error}") from None
    return profile_from_dict(data, source=source)


# ---------------------------------------------------------------------------- bindings

@dataclasses.dataclass(frozen=True)
class Binding:
    """Parameters bound to routes: ``roles`` and ``routes`` map each parameter name (in
    ``named_parameters()`` order) to its role and to the route its profile gives that role;
    ``numel`` to its element count."""

    roles: dict
    routes: dict
    numel: dict

    def elements(self, route):
        """Elements bound to ``route``."""
        return sum(self.numel[name] for name, bound in self.routes.items() if bound == route)

    def summary(self):
        """Per role: parameters, elements and route."""
        out = {}
        for name, role in self.roles.items():
            entry = out.setdefault(role, {"route": self.routes[name], "parameters": 0,
                                          "elements": 0})
            entry["parameters"] += 1
            entry["elements"] += self.numel[name]
        return out


def bind(model, profile):
    """Classify ``model``'s parameters (:func:`neuron_fabric.host.roles.classify`) and bind
    each to the route that ``profile`` gives its role. Returns a :class:`Binding`."""
    if not isinstance(profile, Profile):
        raise TypeError(f"profile must be a Profile, not {profile!r}")
    roles = _roles.classify(model)
    numel = {name: int(param.numel()) for name, param in model.named_parameters()}
    return Binding(roles=roles, routes={name: profile.routes[role] for name, role in roles.items()},
                   numel=numel)


# ---------------------------------------------------------------------------- health

@dataclasses.dataclass(frozen=True, kw_only=True)
class RegionStats:
    """What the hooks observed of one region (one role) in one step, identical on all workers.

    ``nonfinite``: some worker's gradient held NaN or Inf. ``grad_norm``: the root mean over
    workers of each worker's squared gradient norm. ``agreement``: mean over the region's
    low-bit elements of ``|2n - N| / N`` (G-Binary, ``n`` the count of negative votes) or
    ``|S| / N`` (G-Ternary): 1 when all workers agree, near 0 for noise; None on FP32.
    ``route``: the route the region took.
    """

    nonfinite: bool = False
    grad_norm: float = 0.0
    agreement: float | None = None
    route: str = FP32


class HealthMonitor:
    """Online training health per region, with FP32 fallback and re-admission.

    Each region is low-bit *admitted* or in *fallback*. :meth:`observe` takes one step's
    global loss and :class:`RegionStats`; a fault moves an admitted region to fallback:

    - a non-finite loss, or a loss above ``loss_spike`` times its EMA: every region;
    - non-finite gradient elements in the region;
    - sign agreement below ``min_agreement`` (only while the region runs low-bit);
    - a gradient norm above ``max_grad_norm_ratio`` times the region's EMA.

    A region in fallback returns after ``readmit_after`` consecutive healthy steps (doubled per
    repeated fault, up to ``max_readmit_after``). The loss EMA and the norm EMAs are updated
    only with healthy values, so that a fault does not raise the bar. With ``enabled=False``
    faults are counted but nothing falls back.

    Members
    -------
    events : list of dict
        ``{"step", "region", "event": "fallback" or "readmit", "reason"}`` in order.
    """

    def __init__(self, regions, *, options):
        if not isinstance(options, HealthOptions):
            raise TypeError(f"options must be a HealthOptions, not {options!r}")
        self.options = options
        self.regions = tuple(regions)
        self.admitted = {region: True for region in self.regions}
        self.faults = {region: 0 for region in self.regions}
        self.healthy = {region: 0 for region in self.regions}
        self.norm_ema = {region: None for region in self.regions}
        self.loss_ema = None
        self.observed = 0
        self.events = []
        self.faults_seen = 0
        self.fault_kinds = {}

    def is_admitted(self, region):
        """Whether ``region`` may take its low-bit route."""
        return self.admitted.get(region, True)

    def _fault_reasons(self, loss, stats):
        o = self.options
        settled = self.observed >= o.settle_steps
        reasons = {}
        ema = self.loss_ema
        if not math.isfinite(loss):
            reasons.update({region: f"loss is {loss}" for region in self.regions})
        elif (settled and ema is not None and loss > o.loss_spike * ema
              and loss > ema + o.loss_margin):
            reasons.update({region: f"loss {loss:.4g} > {o.loss_spike:g} x EMA {ema:.4g}"
                            for region in self.regions})
        for region, st in stats.items():
            if region not in self.admitted or region in reasons:
                continue
            ema = self.norm_ema[region]
            if st.nonfinite:
                reasons[region] = "non-finite gradient"
            elif o.min_agreement and st.route != FP32 and st.agreement is None:
                raise ValueError(f"stats[{region!r}].agreement must be measured for "
                                 f"min_agreement {o.min_agreement:g} on route {st.route}: "
                                 f"build the hook with agreement=True")
            elif st.agreement is not None and st.agreement < o.min_agreement:
                reasons[region] = f"sign agreement {st.agreement:.3f} < {o.min_agreement:g}"
            elif (o.max_grad_norm_ratio and settled and ema and
                  st.grad_norm > o.max_grad_norm_ratio * ema):
                reasons[region] = (f"gradient norm {st.grad_norm:.4g} > "
                                   f"{o.max_grad_norm_ratio:g} x EMA {ema:.4g}")
        return reasons

    def observe(self, step, *, loss, stats):
        """Record one step; return the events it caused (also appended to :attr:`events`).

        ``loss`` is the global mean loss of the step; ``stats`` maps regions to
        :class:`RegionStats` (regions not listed count as healthy).
        """
        loss = float(loss)
        reasons = self._fault_reasons(loss, stats)
        new = []
        o = self.options
        for region in self.regions:
            if region in reasons:
                self.faults_seen += 1
                kind = reasons[region].split(" ")[0]
                self.fault_kinds[kind] = self.fault_kinds.get(kind, 0) + 1
                self.healthy[region] = 0
                if o.enabled and self.admitted[region]:
                    self.admitted[region] = False
                    self.faults[region] += 1
                    new.append({"step": step, "region": region, "event": "fallback",
                                "reason": reasons[region]})
                continue
            if not self.admitted[region]:
                self.healthy[region] += 1
                needed = min(o.readmit_after * 2 ** (self.faults[region] - 1), o.max_readmit_after)
                if self.healthy[region] >= needed:
                    self.admitted[region] = True
                    self.healthy[region] = 0
                    new.append({"step": step, "region": region, "event": "readmit",
                                "reason": f"{needed} healthy steps on FP32"})
        for region, st in stats.items():  # every finite value moves the averages
            if region in self.norm_ema and not st.nonfinite and math.isfinite(st.grad_norm):
                ema = self.norm_ema[region]
                self.norm_ema[region] = st.grad_norm if ema is None else \
                    o.loss_decay * ema + (1 - o.loss_decay) * st.grad_norm
        if math.isfinite(loss):
            self.loss_ema = loss if self.loss_ema is None else \
                o.loss_decay * self.loss_ema + (1 - o.loss_decay) * loss
        self.observed += 1
        self.events.extend(new)
        return new


# ---------------------------------------------------------------------------- capacity

class CapacityError(ValueError):
    """The device cannot serve the low-bit routes a job asks for."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceCaps:
    """What the runtime reads from the device's CAPS registers."""

    line_bits: int
    max_workers: int
    counter_bits: int
    num_windows: int
    depth: int

    @classmethod
    def from_params(cls, params=None):
        """The capabilities of a :class:`~neuron_fabric.golden.params.FabricParams`."""
        p = params or FabricParams()
        return cls(line_bits=p.line_bits, max_workers=p.max_workers, counter_bits=p.counter_bits,
                   num_windows=p.num_windows, depth=p.depth)

    @classmethod
    def from_registers(cls, caps0, caps1):
        """Decode the values read from the CAPS0 and CAPS1 registers."""
        regs = register_map()
        c0, c1 = regs["CAPS0"].decode(caps0), regs["CAPS1"].decode(caps1)
        return cls(line_bits=c0["LINE_BITS"], max_workers=c0["MAX_WORKERS"],
                   counter_bits=c0["COUNTER_BITS"], num_windows=c0["NUM_WINDOWS"],
                   depth=c1["DEPTH"])

    @property
    def workers_served(self):
        """Most workers whose votes the counters hold without saturating."""
        return sum_limit(self.max_workers, self.counter_bits)


def check_capacity(caps, *, world_size, routes, line_bits=512, gate=None):
    """Refuse low-bit routes that the device cannot serve for a job of ``world_size`` workers.

    ``routes`` is a collection of route names the job uses; FP32 needs nothing of the device.
    For every low-bit route the device must have the profile's ``line_bits``, a contribution
    bitmap of at least ``world_size`` workers and counters that count ``world_size`` votes
    without saturating; mixing both low-bit routes needs two windows; a G-Ternary ``gate``
    above ``world_size`` would read every lane as 0.

    Returns None when the job can run; raises :class:`CapacityError` (a ``ValueError``) that
    names the capability, the need and the ways out.
    """
    if not isinstance(caps, DeviceCaps):
        raise TypeError(f"caps must be a DeviceCaps, not {caps!r}")
    world_size = check_int("world_size", world_size, low=1)
    used = [route for route in LOW_BIT_ROUTES if route in set(routes)]
    for route in set(routes):
        _check_choice("routes", route, ROUTES)
    if not used:
        return None
    way_out = "use the fp32 profile or route these roles to fp32"
    names = "/".join(used)
    if caps.line_bits != line_bits:
        raise CapacityError(
            f"device line width {caps.line_bits} bits (CAPS0.LINE_BITS) does not match the "
            f"profile's line_bits={line_bits}: {names} cannot run; use a profile calibrated for "
            f"{caps.line_bits}-bit lines or {way_out}")
    if world_size > caps.max_workers:
        raise CapacityError(
            f"device serves at most {caps.max_workers} workers (CAPS0.MAX_WORKERS), not "
            f"{world_size}: {names} refused; run with at most {caps.max_workers} workers or "
            f"{way_out}")
    if world_size > caps.workers_served:
        raise CapacityError(
            f"device counters are {caps.counter_bits} bits (CAPS0.COUNTER_BITS) and count at "
            f"most {caps.workers_served} votes without saturating, not {world_size}: {names} "
            f"refused; run with at most {caps.workers_served} workers, use a device with wider "
            f"counters, or {way_out}")
    if len(used) > caps.num_windows:
        raise CapacityError(
            f"device has {caps.num_windows} aggregation window(s) (CAPS0.NUM_WINDOWS) but the "
            f"job routes {len(used)} low-bit kinds ({names}) at once; route one of them to fp32")
    if GTERNARY in used and gate is not None and gate > world_size:
        raise CapacityError(
            f"G-Ternary gate {gate} exceeds the {world_size} workers: every lane would read 0; "
            f"use a gate of at most {world_size}")
    return None


# ---------------------------------------------------------------------------- policy

class RuntimePolicy:
    """A profile bound to one model and job: the routes of every step and their health.

    Parameters
    ----------
    profile : Profile
    roles : dict
        Parameter name to role (``roles.classify(model)`` or :attr:`Binding.roles`).
    world_size : int
        Workers in the job.
    caps : DeviceCaps
        The device's capabilities; the constructor runs :func:`check_capacity`.

    Members
    -------
    monitor : HealthMonitor
        One region per role that the profile routes low-bit and the model has.

    Raises :class:`CapacityError` when the device cannot serve the profile's low-bit routes.
    """

    def __init__(self, profile, *, roles, world_size, caps):
        if not isinstance(profile, Profile):
            raise TypeError(f"profile must be a Profile, not {profile!r}")
        check_capacity(caps, world_size=world_size, routes=set(profile.routes.values()),
                       line_bits=profile.line_bits,
                       gate=profile.gternary.gate if GTERNARY in profile.low_bit_routes else None)
        self.profile = profile
        self.roles = dict(roles)
        self.world_size = world_size
        self.caps = caps
        present = set(self.roles.values())
        low_bit_roles = [role for role in _roles.ROLES
                         if profile.routes[role] != FP32 and role in present]
        self.monitor = HealthMonitor(low_bit_roles, options=profile.health)

    def route_of_role(self, role, step):
        """The route ``role`` takes at ``step``."""
        route = self.profile.routes[role]
        if route == FP32 or step < self.profile.warmup_steps or not self.monitor.is_admitted(role):
            return FP32
        return route

    def routes(self, step):
        """Parameter name to the route it takes at ``step``."""
        by_role = {role: self.route_of_role(role, step) for role in _roles.ROLES}
        return {name: by_role[role] for name, role in self.roles.items()}

    def observe(self, step, *, loss, stats):
        """Feed one step's global loss and per-role :class:`RegionStats` to the monitor."""
        return self.monitor.observe(step, loss=loss, stats=stats)
