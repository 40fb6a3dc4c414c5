"""The runtime policy: profiles, bindings, health monitor with fallback and re-admission, and
the reducer-capacity check against the device's capabilities."""

import dataclasses
import math

import pytest

from neuron_fabric.host import roles, runtime
from neuron_fabric.golden.params import FabricParams
from neuron_fabric.golden.regmap import register_map
from neuron_fabric.host.runtime import (FP32, GBINARY, GTERNARY, CapacityError, DeviceCaps,
                                          HealthMonitor, HealthOptions, RegionStats,
                                          RuntimePolicy, check_capacity, load_profile)


# --------------------------------------------------------------------------- profiles

@pytest.mark.parametrize("name", runtime.PROFILE_NAMES)
def test_every_shipped_profile_loads_and_names_every_role(name):
    profile = load_profile(name)
    assert profile.name == name
    assert tuple(profile.routes) == roles.ROLES
    assert set(profile.routes.values()) <= set(runtime.ROUTES)


def test_layer_aware_profile_keeps_head_on_fp32():
    profile = load_profile("layer_gbinary")
    assert profile.routes[roles.HEAD] == FP32
    assert profile.routes[roles.BACKBONE] == GBINARY
    assert profile.low_bit_routes == (GBINARY,)


def test_profile_file_round_trip(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\nwarmup_steps = 7\n[routes]\nhead = "fp32"\n'
                    'embedding = "fp32"\nnorm = "fp32"\nbias = "gternary"\nbackbone = "gbinary"\n'
                    '[gternary]\ngate = 2\n[health]\nreadmit_after = 4\n')
    profile = load_profile(path)
    assert profile.warmup_steps == 7
    assert profile.gternary.gate == 2
    assert profile.health.enabled and profile.health.readmit_after == 4
    assert profile.low_bit_routes == (GBINARY, GTERNARY)


def test_profile_without_health_section_never_falls_back():
    assert not load_profile("gbinary").health.enabled


@pytest.mark.parametrize("text, message", [
    ('name = "x"\n[routes]\nhead = "fp32"\n', "routes must name exactly the roles"),
    ('name = "x"\n[routes]\nhead = "fp32"\nembedding = "fp32"\nnorm = "fp32"\nbias = "fp32"\n'
     'backbone = "int8"\n',
     "routes.backbone must be one of 'fp32', 'gbinary', 'gternary', not 'int8'"),
    ('name = "x"\ncolour = 1\n', "must hold only the keys"),
    ('name = "x"\n[routes]\nhead = "fp32"\nembedding = "fp32"\nnorm = "fp32"\nbias = "fp32"\n'
     'backbone = "fp32"\n[gbinary]\nreadout = "counts"\n', "gbinary.readout must be one of"),
    ('name = "x"\n[routes]\nhead = "fp32"\nembedding = "fp32"\nnorm = "fp32"\nbias = "fp32"\n'
     'backbone = "fp32"\n[health]\nloss_spike = 0.5\n', "health.loss_spike must be greater than 1"),
    ('name = "x"\n[routes]\nhead = "fp32"\nembedding = "fp32"\nnorm = "fp32"\nbias = "fp32"\n'
     'backbone = "fp32"\n[gternary]\nwidth = 3\n', "section [gternary] must hold only"),
])
def test_bad_profile_entries_are_named(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_profile(path)


def test_unknown_profile_name_lists_the_choices():
    with pytest.raises(ValueError, match="profile must be one of fp32, gbinary"):
        load_profile("fastest")


def test_option_types_are_checked():
    with pytest.raises(TypeError, match="gbinary.error_feedback must be True or False, not 1"):
        runtime.GBinaryOptions(error_feedback=1)
    with pytest.raises(ValueError, match="gternary.ratio must be at least 0.0 and at most 1.0, "
                                         "not 1.5"):
        runtime.GTernaryOptions(ratio=1.5)


def test_replace_merges_nested_options():
    profile = load_profile("layer_gbinary").replace(gbinary={"error_feedback": False},
                                                    routes={"head": GBINARY})
    assert not profile.gbinary.error_feedback
    assert profile.gbinary.readout == "sign"
    assert profile.routes["head"] == GBINARY and profile.routes["norm"] == FP32


# --------------------------------------------------------------------------- bindings

def test_binding_classifies_the_module_tree():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.body = nn.Linear(4, 8)
            self.norm = nn.LayerNorm(8)
            self.out = nn.Linear(8, 3)

    binding = runtime.bind(Net(), load_profile("layer_gbinary"))
    assert binding.roles == {"embed.weight": "embedding", "body.weight": "backbone",
                             "body.bias": "bias", "norm.weight": "norm", "norm.bias": "norm",
                             "out.weight": "head", "out.bias": "head"}
    assert binding.routes["body.weight"] == GBINARY
    assert {binding.routes[n] for n in binding.routes if n != "body.weight"} == {FP32}
    assert binding.elements(GBINARY) == 32
    assert binding.summary()["head"] == {"route": FP32, "parameters": 2, "elements": 27}


# --------------------------------------------------------------------------- health monitor

HEALTHY = RegionStats(grad_norm=1.0, agreement=0.6, route=GBINARY)
OPTIONS = HealthOptions(readmit_after=3, max_readmit_after=12, settle_steps=2, loss_spike=1.5,
                        min_agreement=0.2, max_grad_norm_ratio=4.0)


def feed(monitor, steps, *, start=0, loss=1.0, stats=None):
    events = []
    for step in range(start, start + steps):
        events += monitor.observe(step, loss=loss, stats=stats or {"backbone": HEALTHY,
                                                                   "bias": HEALTHY})
    return events


def test_injected_nan_falls_back_only_its_region_and_is_readmitted():
    monitor = HealthMonitor(["backbone", "bias"], options=OPTIONS)
    feed(monitor, 5)
    fault = {"backbone": RegionStats(nonfinite=True, grad_norm=math.nan, route=GBINARY),
             "bias": HEALTHY}
    events = monitor.observe(5, loss=1.0, stats=fault)
    assert events == [{"step": 5, "region": "backbone", "event": "fallback",
                       "reason": "non-finite gradient"}]
    assert not monitor.is_admitted("backbone") and monitor.is_admitted("bias")
    # Two healthy steps are not enough, the third re-admits.
    assert feed(monitor, 2, start=6) == []
    assert not monitor.is_admitted("backbone")
    events = feed(monitor, 1, start=8)
    assert [(e["region"], e["event"]) for e in events] == [("backbone", "readmit")]
    assert monitor.is_admitted("backbone")


def test_repeated_fault_doubles_the_healthy_stretch():
    monitor = HealthMonitor(["backbone"], options=OPTIONS)
    fault = {"backbone": RegionStats(nonfinite=True, route=GBINARY)}
    monitor.observe(0, loss=1.0, stats=fault)
    feed(monitor, 3, start=1, stats={"backbone": HEALTHY})
    assert monitor.is_admitted("backbone")
    monitor.observe(4, loss=1.0, stats=fault)
    feed(monitor, 5, start=5, stats={"backbone": HEALTHY})
    assert not monitor.is_admitted("backbone")
    feed(monitor, 1, start=10, stats={"backbone": HEALTHY})
    assert monitor.is_admitted("backbone")
    assert [e["event"] for e in monitor.events] == ["fallback", "readmit", "fallback", "readmit"]


def test_loss_spike_falls_back_every_region():
    monitor = HealthMonitor(["backbone", "bias"], options=OPTIONS)
    feed(monitor, 6, loss=1.0)
    events = monitor.observe(6, loss=1.6, stats={"backbone": HEALTHY, "bias": HEALTHY})
    assert sorted(e["region"] for e in events) == ["backbone", "bias"]
    assert "loss 1.6 > 1.5 x EMA 1" in events[0]["reason"]


def test_loss_spike_is_ignored_before_the_ema_settles():
    monitor = HealthMonitor(["backbone"], options=OPTIONS)
    monitor.observe(0, loss=1.0, stats={})
    assert monitor.observe(1, loss=5.0, stats={}) == []


def test_non_finite_loss_is_a_fault_even_before_settling():
    monitor = HealthMonitor(["backbone"], options=OPTIONS)
    assert monitor.observe(0, loss=math.inf, stats={})[0]["reason"] == "loss is inf"


def test_low_sign_agreement_and_norm_blow_up_are_faults():
    monitor = HealthMonitor(["backbone", "bias"], options=OPTIONS)
    feed(monitor, 4)
    events = monitor.observe(4, loss=1.0, stats={
        "backbone": RegionStats(grad_norm=1.0, agreement=0.1, route=GBINARY),
        "bias": RegionStats(grad_norm=9.0, agreement=0.9, route=GBINARY)})
    reasons = {e["region"]: e["reason"] for e in events}
    assert reasons["backbone"] == "sign agreement 0.100 < 0.2"
    assert reasons["bias"].startswith("gradient norm 9 > 4 x EMA 1")


def test_agreement_is_not_checked_on_fp32():
    monitor = HealthMonitor(["backbone"], options=OPTIONS)
    assert monitor.observe(0, loss=1.0, stats={"backbone": RegionStats(grad_norm=1.0)}) == []


def test_a_rule_on_agreement_refuses_statistics_without_it():
    monitor = HealthMonitor(["backbone"], options=OPTIONS)
    with pytest.raises(ValueError, match=r"stats\['backbone'\]\.agreement must be measured "
                                         r"for min_agreement 0\.2 on route gbinary"):
        monitor.observe(0, loss=1.0, stats={"backbone": RegionStats(grad_norm=1.0,
                                                                    route=GBINARY)})
    quiet = HealthMonitor(["backbone"], options=dataclasses.replace(OPTIONS, min_agreement=0.0))
    assert quiet.observe(0, loss=1.0, stats={"backbone": RegionStats(grad_norm=1.0,
                                                                     route=GBINARY)}) == []


def test_profiles_read_agreement_only_with_a_rule_on_it():
    profile = load_profile("runtime")
    assert not profile.reads_agreement  # min_agreement 0: no rule reads it
    ruled = profile.replace(health={"min_agreement": 0.3, "enabled": False})
    assert ruled.reads_agreement  # a disabled monitor still counts its faults


def test_disabled_monitor_counts_faults_but_never_falls_back():
    monitor = HealthMonitor(["backbone"], options=dataclasses.replace(OPTIONS, enabled=False))
    assert monitor.observe(0, loss=1.0, stats={"backbone": RegionStats(nonfinite=True)}) == []
    assert monitor.is_admitted("backbone") and monitor.faults_seen == 1


def test_policy_warms_up_on_fp32_then_follows_the_monitor():
    profile = load_profile("runtime").replace(warmup_steps=2, health={"readmit_after": 2,
                                                                      "settle_steps": 0})
    names = {"body.weight": "backbone", "out.weight": "head"}
    policy = RuntimePolicy(profile, roles=names, world_size=4, caps=DeviceCaps.from_params())
    assert policy.routes(0) == {"body.weight": FP32, "out.weight": FP32}
    assert policy.routes(2) == {"body.weight": GBINARY, "out.weight": FP32}
    policy.observe(2, loss=1.0, stats={"backbone": RegionStats(nonfinite=True)})
    assert policy.routes(3)["body.weight"] == FP32
    policy.observe(3, loss=1.0, stats={})
    policy.observe(4, loss=1.0, stats={})
    assert policy.routes(5)["body.weight"] == GBINARY


# --------------------------------------------------------------------------- capacity

def test_caps_decode_from_the_capability_registers():
    params = FabricParams(line_bits=256, max_workers=8, counter_bits=3, depth=32, num_windows=1)
    regs = register_map(params)
    caps = DeviceCaps.from_registers(regs["CAPS0"].reset, regs["CAPS1"].reset)
    assert caps == DeviceCaps.from_params(params)
    assert caps.workers_served == 7


def test_counter_width_refuses_more_workers_than_it_counts():
    caps = DeviceCaps.from_params(FabricParams(max_workers=4, counter_bits=2))
    check_capacity(caps, world_size=3, routes={GBINARY})
    with pytest.raises(CapacityError, match=r"counters are 2 bits \(CAPS0.COUNTER_BITS\) and "
                                            r"count at most 3 votes without saturating, not 4"):
        check_capacity(caps, world_size=4, routes={GBINARY, FP32})


def test_worker_bitmap_refuses_a_larger_job():
    caps = DeviceCaps.from_params(FabricParams(max_workers=4))
    with pytest.raises(CapacityError, match=r"serves at most 4 workers \(CAPS0.MAX_WORKERS\), "
                                            r"not 5: gternary refused"):
        check_capacity(caps, world_size=5, routes={GTERNARY})


def test_fp32_needs_nothing_of_the_device():
    caps = DeviceCaps.from_params(FabricParams(max_workers=2, counter_bits=1))
    assert check_capacity(caps, world_size=64, routes={FP32}) is None


def test_line_width_windows_and_gate_are_checked():
    caps = DeviceCaps.from_params(FabricParams(line_bits=256, num_windows=1))
    with pytest.raises(CapacityError, match="line width 256 bits"):
        check_capacity(caps, world_size=4, routes={GBINARY}, line_bits=512)
    with pytest.raises(CapacityError, match=r"1 aggregation window\(s\)"):
        check_capacity(caps, world_size=4, routes={GBINARY, GTERNARY}, line_bits=256)
    with pytest.raises(CapacityError, match="gate 5 exceeds the 4 workers"):
        check_capacity(caps, world_size=4, routes={GTERNARY}, line_bits=256, gate=5)


def test_policy_refuses_a_profile_the_device_cannot_serve():
    caps = DeviceCaps.from_params(FabricParams(max_workers=4, counter_bits=2))
    with pytest.raises(CapacityError, match="not 4"):
        RuntimePolicy(load_profile("layer_gbinary"), roles={"w": "backbone"}, world_size=4,
                      caps=caps)
    RuntimePolicy(load_profile("fp32"), roles={"w": "backbone"}, world_size=4, caps=caps)


def test_capacity_error_is_a_value_error_and_bad_inputs_are_typed():
    assert issubclass(CapacityError, ValueError)
    with pytest.raises(TypeError, match="caps must be a DeviceCaps"):
        check_capacity(FabricParams(), world_size=2, routes={GBINARY})
    with pytest.raises(ValueError, match="routes must be one of"):
        check_capacity(DeviceCaps.from_params(), world_size=2, routes={"int4"})


def test_policy_monitors_only_roles_the_model_has():
    policy = RuntimePolicy(load_profile("gbinary"), roles={"w": "backbone", "out": "head"},
                           world_size=4, caps=DeviceCaps.from_params())
    assert policy.monitor.regions == ("head", "backbone")


def test_route_names_are_the_golden_registrys():
    from neuron_fabric.golden.formats import READOUT_SPECS, ROUTE_SPECS
    assert runtime.LOW_BIT_ROUTES == tuple(spec.name for spec in ROUTE_SPECS.values())
    assert runtime.ROUTES == (FP32,) + runtime.LOW_BIT_ROUTES
    assert (GBINARY, GTERNARY) == runtime.LOW_BIT_ROUTES
    # A profile has an options table per low-bit route, named as the route.
    fields = {field.name for field in dataclasses.fields(runtime.Profile)}
    assert set(runtime.LOW_BIT_ROUTES) <= fields
    gbinary_spec = next(spec for spec in ROUTE_SPECS.values() if spec.name == GBINARY)
    for name, readout in runtime.GBINARY_READOUTS.items():
        assert READOUT_SPECS[readout].name == name
        assert READOUT_SPECS[readout] in gbinary_spec.readouts
