"""Hook cost: the hook's phase timing per route, the synthetic gradients, the timing run with
real workers on a tiny model, and the report."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from ddp_fakes import FakeBucket  # noqa: E402
from neuron_fabric.experiments import hook_cost, traffic_scale  # noqa: E402
from neuron_fabric.golden import gbinary, gternary  # noqa: E402
from neuron_fabric.host import hooks  # noqa: E402
from neuron_fabric.host.runtime import (FP32, GBINARY, GTERNARY, DeviceCaps,  # noqa: E402
                                          GTernaryOptions)

CAPS = DeviceCaps.from_params()
# The readout decodes into the bucket, scaled; write_back holds error-feedback residuals.
LOW_BIT_PHASES = {"encode", "exchange", "fold", "readout"}


class Mixed(torch.nn.Module):
    """Parameters of every role: backbone, bias, norm, embedding and head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(40, 16)
        self.body = torch.nn.Linear(16, 600)
        self.norm = torch.nn.LayerNorm(600)
        self.out = torch.nn.Linear(600, 7)


def run_bucket(hook, model, index=0, seed=0):
    params = list(model.parameters())
    rng = np.random.default_rng(seed)
    grads = [torch.from_numpy(rng.standard_normal(p.numel()).astype(np.float32)) for p in params]
    return hook.run(FakeBucket(params, grads, index)).wait()


# --------------------------------------------------------------------------- phase timing

def mixed_routes(model):
    routes = {name: GBINARY for name, _ in model.named_parameters()}
    routes.update({"body.bias": GTERNARY, "norm.weight": GTERNARY, "out.weight": FP32,
                   "out.bias": FP32})
    return routes


def test_every_route_times_each_of_its_phases(group):
    model = Mixed()
    hook = hooks.FabricHook(model, routes=mixed_routes(model), caps=CAPS)
    assert hook.phase_seconds == {}
    run_bucket(hook, model)
    seconds = hook.phase_seconds
    assert set(seconds) == {"control", FP32, GBINARY, GTERNARY}
    assert set(seconds["control"]) == {"statistics"}
    assert set(seconds[GBINARY]) == set(seconds[GTERNARY]) == LOW_BIT_PHASES
    # Part of the bucket on FP32, its slices side by side: all-reduced where they lie.
    assert set(seconds[FP32]) == {"all_reduce"}
    assert all(value > 0 for entries in seconds.values() for value in entries.values())
    assert set(hooks.PHASES) >= {phase for entries in seconds.values() for phase in entries}


def test_phase_seconds_accumulate_over_buckets_and_steps_until_reset(group):
    model = Mixed()
    hook = hooks.FabricHook(model, routes=mixed_routes(model), caps=CAPS)
    run_bucket(hook, model)
    first = {route: dict(entries) for route, entries in hook.phase_seconds.items()}
    run_bucket(hook, model, index=1, seed=1)
    hook.end_step(0.5)  # the loss all-reduce is control too
    for route, entries in first.items():
        for phase, value in entries.items():
            assert hook.phase_seconds[route][phase] > value, (route, phase)
    hook.reset_phases()
    assert hook.phase_seconds == {}
    hook.end_step(0.5)
    assert set(hook.phase_seconds) == {"control"}


def test_whole_bucket_on_fp32_is_one_all_reduce(group):
    model = Mixed()
    hook = hooks.FabricHook(model, routes=FP32, caps=CAPS)
    run_bucket(hook, model)
    assert set(hook.phase_seconds) == {"control", FP32}
    assert set(hook.phase_seconds[FP32]) == {"all_reduce"}  # written in place, no copy back


def test_stochastic_gternary_times_its_shared_maximum_as_statistics(group):
    model = Mixed()
    hook = hooks.FabricHook(model, routes=GTERNARY, caps=CAPS,
                            gternary=GTernaryOptions(stochastic=True, error_feedback=True))
    run_bucket(hook, model)
    assert set(hook.phase_seconds[GTERNARY]) == LOW_BIT_PHASES | {"statistics", "write_back"}


class GoldenDevice:
    """A device that answers as the golden model does."""

    def aggregate(self, route, lines, *, readout, gate=None):
        if route == GBINARY:
            counts = gbinary.aggregate(lines, max_workers=CAPS.max_workers,
                                       counter_bits=CAPS.counter_bits)
            return gbinary.readout(counts, readout=readout, num_workers=lines.shape[0],
                                   counter_bits=CAPS.counter_bits)
        sums = gternary.aggregate(lines, max_workers=CAPS.max_workers,
                                  counter_bits=CAPS.counter_bits)
        return gternary.readout(sums, readout=readout, gate=gate, counter_bits=CAPS.counter_bits)

    def passthrough(self, values):
        return values.copy()


def test_a_device_call_is_timed_as_its_own_phase(group):
    model = Mixed()
    plain = hooks.FabricHook(model, routes=mixed_routes(model), caps=CAPS)
    hook = hooks.FabricHook(model, routes=mixed_routes(model), caps=CAPS, device=GoldenDevice())
    expected = run_bucket(plain, model).numpy().copy()
    np.testing.assert_array_equal(run_bucket(hook, model).numpy(), expected)
    for route in (GBINARY, GTERNARY):  # the host still folds (health) and decodes
        assert set(hook.phase_seconds[route]) == LOW_BIT_PHASES | {"device"}
    assert set(hook.phase_seconds[FP32]) == {"all_reduce", "device"}


# --------------------------------------------------------------------------- gradients

def test_synthetic_gradients_are_seeded_per_worker_with_a_scale_per_parameter():
    first = hook_cost.synthetic_gradients([3000, 5000], indices=[0, 1], seed=0, rank=0)
    again = hook_cost.synthetic_gradients([3000, 5000], indices=[0, 1], seed=0, rank=0)
    other = hook_cost.synthetic_gradients([3000, 5000], indices=[0, 1], seed=0, rank=1)
    assert first.dtype == np.float32 and first.shape == (8000,)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    # The scale belongs to the parameter: the same on every worker, whatever the bucket.
    alone = hook_cost.synthetic_gradients([5000], indices=[1], seed=0, rank=1)
    np.testing.assert_array_equal(alone, other[3000:])
    ratio = np.std(other[:3000]) / np.std(first[:3000])
    assert ratio == pytest.approx(1, rel=0.1)
    assert 1e-4 <= np.std(first[:3000]) <= 1e-1


# --------------------------------------------------------------------------- the run

@pytest.fixture(scope="module")
def tiny_report():
    """Every setting on a tiny model, 2 workers, buckets small enough to be several."""
    log = []
    report = hook_cost.run({"tiny": Mixed()}, world_size=2, steps=2, bucket_cap_mb=0.004,
                           log=log.append)
    return report, log


def test_every_setting_is_timed_on_real_workers(tiny_report):
    report, log = tiny_report
    tiny = report["models"]["tiny"]
    assert tiny["parameters"] == sum(p.numel() for p in Mixed().parameters())
    assert tiny["buckets"] > 1
    assert list(tiny["settings"]) == list(hook_cost.SETTINGS)
    for name, entry in tiny["settings"].items():
        assert entry["step_ms"] > 0 and len(entry["steps_ms"]) == 2
        assert entry["ratio_to_fp32"] == entry["step_ms"] / tiny["settings"]["fp32"]["step_ms"]
        assert entry["cpu_user_ms"] >= 0 and entry["minor_faults"] >= 0
    assert tiny["settings"]["fp32"]["ratio_to_fp32"] == 1
    assert tiny["settings"]["bf16"]["ratio_to_bf16"] == 1
    for entry in tiny["settings"].values():
        assert entry["ratio_to_bf16"] == entry["step_ms"] / tiny["settings"]["bf16"]["step_ms"]
        assert 0 < entry["peak_step_bytes"] <= max(tiny["peak_rss_bytes"])
    assert len(tiny["peak_rss_bytes"]) == 2 and min(tiny["peak_rss_bytes"]) > 0
    assert tiny["peak_rss_total_bytes"] == sum(tiny["peak_rss_bytes"])
    assert tiny["gradient_bytes_per_worker"] == 4 * tiny["parameters"]
    assert any(line.startswith("  tiny: ") for line in log)
    for name in hook_cost.SETTINGS:
        assert sum(line.startswith(f"  tiny / {name}: ") for line in log) == 1


def test_every_setting_reports_the_phases_of_its_routes(tiny_report):
    settings = tiny_report[0]["models"]["tiny"]["settings"]

    def timed(name):
        return {phase for phase, ms in settings[name]["phases_ms"].items() if ms > 0} - {"other"}

    assert timed("fp32") == {"all_reduce", "statistics"}
    for name in hook_cost.STOCK:  # PyTorch's hooks: compression and all-reduce in one phase
        assert timed(name) == {"all_reduce", "statistics"}, name
        assert set(settings[name]["phases_by_route_ms"]) == {"control", name}
    assert timed("gbinary") == timed("gternary") == LOW_BIT_PHASES | {"statistics"}
    assert timed("layer_gbinary") == LOW_BIT_PHASES | {"statistics", "all_reduce", "write_back"}
    by_route = settings["layer_gbinary"]["phases_by_route_ms"]
    assert set(by_route) == {"control", FP32, GBINARY}
    assert set(settings["gbinary"]["phases_ms"]) == set(hook_cost.COLUMNS)
    # The phases and the rest make up a worker's step.
    for entry in settings.values():
        assert sum(entry["phases_ms"].values()) == pytest.approx(entry["worker_mean_step_ms"],
                                                                 rel=1e-6)


def test_report_files_hold_every_setting_and_phase(tiny_report, tmp_path):
    report, _ = tiny_report
    paths = hook_cost.write_report(report, tmp_path)
    assert [p.name for p in paths] == ["hook_cost.json", "hook_cost.md"]
    assert json.loads(paths[0].read_text()) == json.loads(json.dumps(report))
    text = paths[1].read_text()
    assert "## tiny" in text and "peak resident memory" in text
    header = next(line for line in text.splitlines() if line.startswith("| setting |"))
    for phase in ("statistics", "encode", "exchange", "fold", "readout", "write_back",
                  "all_reduce"):
        assert f"| {phase} |" in header
    for name in hook_cost.SETTINGS:
        assert f"\n| {name} | " in text
    assert "Target" not in text  # the target model was not measured
    assert "no verdict" in hook_cost.verdict(report)


# --------------------------------------------------------------------------- the report

def fake_setting(step_ms, fp32_ms, **phases):
    return {"step_ms": step_ms, "ratio_to_fp32": step_ms / fp32_ms,
            "ratio_to_bf16": step_ms / (fp32_ms / 2), "phases_ms": phases,
            "cpu_user_ms": 1.0, "cpu_system_ms": 2.0, "minor_faults": 3,
            "peak_step_bytes": 2 ** 30}


def fake_report(ratios):
    settings = {"fp32": fake_setting(100.0, 100.0, all_reduce=99.0)}
    settings.update({name: fake_setting(100.0 * r, 100.0, encode=50.0, fold=10.0)
                     for name, r in ratios.items()})
    report = {"workers": 4, "steps": 3, "cores": 2, "phases": list(hook_cost.COLUMNS),
              "target": {"model": hook_cost.TARGET_MODEL, "ratio": hook_cost.TARGET_RATIO},
              "models": {hook_cost.TARGET_MODEL: {
                  "parameters": 124_439_808, "buckets": 13, "gradient_bytes_per_worker": 2 ** 29,
                  "peak_rss_bytes": [2 ** 31, 3 * 2 ** 30], "peak_rss_total_bytes": 5 * 2 ** 30,
                  "settings": settings}}}
    report["target"].update(ratios=dict(ratios),
                            met=max(ratios.values()) <= hook_cost.TARGET_RATIO)
    return report


def test_markdown_states_the_target_and_each_settings_ratio():
    text = hook_cost.markdown(fake_report({"gbinary": 12.5, "gternary": 1.5, "bf16": 0.5}))
    assert "## Target: at most 1.5x the FP32 all-reduce on gpt2_small" in text
    assert "| gbinary | 12.50 | 25.00 | no |" in text
    assert "| gternary | 1.50 | 3.00 | yes |" in text
    assert "| bf16 | 0.50 | 1.00 | yes |" not in text  # a stock hook is not held to it
    # Only the phases some setting ran get a column; a phase a setting did not run is empty.
    assert ("| setting | ms per step | x FP32 | x bf16 | encode | fold | all_reduce | "
            "CPU user |") in text
    assert "| gbinary | 1250.0 | 12.50 | 25.00 | 50.0 | 10.0 |  | 1 | 2 | 3 | 1.00 GiB |" in text
    assert "3.00 GiB per worker at most, 5.00 GiB for all" in text
    assert hook_cost.verdict(fake_report({"gbinary": 12.5})).endswith("NOT met")
    assert hook_cost.verdict(fake_report({"gbinary": 1.2})) == (
        "hook cost: gpt2_small step against the FP32 all-reduce's: gbinary 1.20x; "
        "target at most 1.5x met")


def test_command_times_the_hooks_after_the_traffic(tmp_path, capsys, monkeypatch):
    calls = []

    def fake_run(models, **kwargs):
        calls.append((list(models), kwargs))
        return {**fake_report({"gbinary": 4.0}), "seconds": 1.0}

    monkeypatch.setattr(hook_cost, "run", fake_run)
    assert traffic_scale.main(["--out", str(tmp_path), "--steps", "5", "--workers", "3",
                               "--hook-steps", "2", "--models", "resnet18_cifar100"]) == 0
    assert calls[0][0] == ["resnet18_cifar100"]
    assert calls[0][1]["world_size"] == 3 and calls[0][1]["steps"] == 2
    assert calls[0][1]["lanes"] == "torch"
    out = capsys.readouterr().out
    assert str(tmp_path / "hook_cost.md") in out and "target at most 1.5x NOT met" in out
    assert (tmp_path / "hook_cost.json").is_file() and (tmp_path / "report.json").is_file()
