"""Traffic at model scale: the parameter trees of the full-size models, the per-step count
against a count by hand and against the hook's own meter, DDP's bucket layout, the reports."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from ddp_fakes import FakeBucket  # noqa: E402
from neuron_fabric.experiments import scale_models, traffic_scale  # noqa: E402
from neuron_fabric.golden.formats import Readout, readout_lines_per_slot  # noqa: E402
from neuron_fabric.host import hooks, roles  # noqa: E402
from neuron_fabric.host.runtime import (FP32, GBINARY, GTERNARY, DeviceCaps,  # noqa: E402
                                          load_profile)

CAPS = DeviceCaps.from_params()


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(100, 30)    # weight 3000 (backbone), bias 30 (bias)
        self.head = torch.nn.Linear(30, 10)     # weight 300 and bias 10 (head)


# --------------------------------------------------------------------------- models

# The totals the model cards quote, rounded as they quote them. DistilBERT-base's 66M is the
# encoder; the SST-2 model adds a 768 x 768 pre-classifier and the two-way classifier.
QUOTED = {"resnet18_cifar100": 11.2e6, "resnet18_imagenet": 11.7e6,
          "resnet50_imagenet": 25.6e6, "distilbert_sst2": 66e6, "gpt2_small": 124e6}


@pytest.mark.parametrize("name", scale_models.MODELS)
def test_parameter_count_is_within_one_percent_of_the_published_total(name):
    model = scale_models.build(name)
    total = scale_models.count_parameters(model)
    quoted_part = model.distilbert if name == "distilbert_sst2" else model
    assert scale_models.count_parameters(quoted_part) == pytest.approx(QUOTED[name], rel=0.01)
    if name in scale_models.PUBLISHED_PARAMETERS:
        assert total == scale_models.PUBLISHED_PARAMETERS[name]


def test_scale_models_get_the_roles_their_layers_have():
    resnet = roles.classify(scale_models.build("resnet18_imagenet"))
    assert resnet["fc.weight"] == resnet["fc.bias"] == roles.HEAD
    assert resnet["layer1.0.bn1.weight"] == resnet["layer2.0.downsample.1.bias"] == roles.NORM
    assert resnet["conv1.weight"] == resnet["layer4.1.conv2.weight"] == roles.BACKBONE
    bert = roles.classify(scale_models.build("distilbert_sst2"))
    assert bert["distilbert.embeddings.word_embeddings.weight"] == roles.EMBEDDING
    assert bert["distilbert.embeddings.LayerNorm.weight"] == roles.NORM
    assert bert["distilbert.transformer.layer.0.attention.q_lin.weight"] == roles.BACKBONE
    assert bert["distilbert.transformer.layer.5.ffn.lin2.bias"] == roles.BIAS
    assert bert["classifier.weight"] == roles.HEAD
    gpt = roles.classify(scale_models.build("gpt2_small"))
    # The tied token embedding is listed once and takes the head's role.
    assert "lm_head.weight" not in gpt and gpt["transformer.wte.weight"] == roles.HEAD
    assert gpt["transformer.wpe.weight"] == roles.EMBEDDING
    assert gpt["transformer.h.11.ln_2.weight"] == gpt["transformer.ln_f.bias"] == roles.NORM
    assert gpt["transformer.h.0.attn.c_attn.bias"] == roles.BIAS


def test_unknown_model_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="model must be one of resnet18_cifar100"):
        scale_models.build("resnet19")


# --------------------------------------------------------------------------- the count

def one_step(model, profile_name, *, world_size=4):
    profile = load_profile(profile_name)
    return traffic_scale.measure(model, profile, steps=1, world_size=world_size)["steady"]


def test_layer_gbinary_step_matches_a_count_by_hand():
    t = one_step(TwoLayer(), "layer_gbinary")
    line_bytes, workers = 512 // 8, 4
    sign_lanes = 512 // 1                   # G-Binary: one bit per element
    per_slot = readout_lines_per_slot(Readout.SIGN, counter_bits=CAPS.counter_bits)
    assert per_slot == 1
    lowbit_lines = -(-3000 // sign_lanes)   # the backbone weight
    assert lowbit_lines == 6
    fp32_lines = -(-(30 + 300 + 10) * 4 // line_bytes)  # bias and head, whole lines
    assert fp32_lines == 22
    base_lines = -(-3340 * 4 // line_bytes)
    assert base_lines == 209
    gb, fp = t["routes"][GBINARY], t["routes"][FP32]
    assert (gb["lines_written"], gb["lines_read"]) == (6, 6)
    assert (fp["lines_written"], fp["lines_read"]) == (22, 22)
    assert t["device_share"] == (2 * 6 + 2 * 22) / (2 * 209)
    # Each worker sends its lines and receives every worker's; FP32 all-reduce sends and
    # receives one buffer; 3 float64 statistics per parameter and the loss go both ways.
    collective = (6 * line_bytes * (1 + workers) + 2 * 340 * 4 + 2 * 4 * 3 * 8 + 2 * 8)
    assert collective == 4848
    assert t["collective_share"] == collective / (2 * 3340 * 4)


def test_two_line_readout_doubles_the_lines_read_back():
    profile = load_profile("layer_gbinary").replace(gbinary={"readout": "ternary"})
    t = traffic_scale.measure(TwoLayer(), profile, steps=1)["steady"]
    per_slot = readout_lines_per_slot(Readout.TERNARY, counter_bits=CAPS.counter_bits)
    assert per_slot == 2
    gb = t["routes"][GBINARY]
    assert (gb["lines_written"], gb["lines_read"]) == (6, 12)
    assert t["device_share"] == (6 + 12 + 2 * 22) / 418


def test_gternary_step_matches_a_count_by_hand():
    t = one_step(TwoLayer(), "gternary")
    ternary_lanes = 512 // 2                # G-Ternary: two bits per element
    per_slot = readout_lines_per_slot(Readout.GATED, counter_bits=CAPS.counter_bits)
    lines = -(-3340 // ternary_lanes)
    assert (lines, per_slot) == (14, 1)
    gt = t["routes"][GTERNARY]
    assert (gt["elements"], gt["lines_written"], gt["lines_read"]) == (3340, 14, 14)
    assert t["device_share"] == 28 / 418
    assert t["collective_share"] == (14 * 64 * 5 + 2 * 4 * 3 * 8 + 2 * 8) / 26720


def test_schedule_counts_the_warm_up_steps_on_fp32():
    model = TwoLayer()
    result = traffic_scale.measure(model, load_profile("runtime"), steps=100)
    assert result["steady_step"] == 10
    warm = traffic_scale.measure(model, load_profile("fp32").replace(name="warm"), steps=1)
    per_warm_step = warm["steady"]["total"]["lines_written"] * 2  # FP32: read as written
    steady = result["steady"]["total"]
    per_steady_step = steady["lines_written"] + steady["lines_read"]
    total = result["schedule"]["total"]
    assert total["lines_written"] + total["lines_read"] == 10 * per_warm_step + 90 * per_steady_step
    base = result["schedule"]["baseline"]
    assert base["lines_written"] + base["lines_read"] == 100 * 418


# --------------------------------------------------------------------------- the hook's own count

@pytest.fixture
def four_workers(monkeypatch):
    """``torch.distributed`` as four workers that all hold this process's values: enough for
    the hook to run and count; the values themselves are not checked here."""
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)

    def done(async_op):  # what an asynchronous collective returns, already complete
        if async_op:
            future = torch.futures.Future()
            future.set_result(None)
            return future
        return None

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if op == dist.ReduceOp.SUM:
            tensor.mul_(4)
        return done(async_op)

    def all_gather(tensors, tensor, group=None, async_op=False):
        for out in tensors:
            out.copy_(tensor)
        return done(async_op)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "all_gather", all_gather)


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 24)
        self.body = torch.nn.Linear(24, 700)
        self.norm = torch.nn.LayerNorm(700)
        self.out = torch.nn.Linear(700, 9)


@pytest.mark.parametrize("name, changes", [
    ("layer_gbinary", {}),
    ("gternary", {"gternary": {"stochastic": True}}),
    ("runtime", {"routes": {"bias": GTERNARY}, "gbinary": {"readout": "ternary"}}),
])
def test_count_step_equals_the_fabric_hooks_meter(four_workers, name, changes):
    model = Mixed()
    profile = load_profile(name).replace(**changes)
    classified = roles.classify(model)
    routes = {n: profile.routes[r] for n, r in classified.items()}
    params = dict(model.named_parameters())
    layout = [["out.bias", "out.weight", "norm.bias"], ["norm.weight", "body.bias", "body.weight",
                                                        "emb.weight"]]
    hook = hooks.FabricHook(model, routes=routes, gbinary=profile.gbinary,
                            gternary=profile.gternary, caps=CAPS)
    rng = np.random.default_rng(1)
    for index, names in enumerate(layout):
        grads = [torch.from_numpy(rng.standard_normal(params[n].numel()).astype(np.float32))
                 for n in names]
        hook.run(FakeBucket([params[n] for n in names], grads, index))
    hook.end_step(1.0)
    meter = hooks.TrafficMeter(line_bits=CAPS.line_bits)
    traffic_scale.count_step(meter, [[(n, params[n].numel()) for n in b] for b in layout], routes,
                             profile=profile, caps=CAPS, world_size=4)
    assert meter.summary() == hook.traffic.summary()


def test_bucket_layout_is_the_one_ddp_builds(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 200), torch.nn.LayerNorm(200),
                                    torch.nn.Linear(200, 150), torch.nn.Linear(150, 10))
        names = {id(p): n for n, p in model.named_parameters()}
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.05)
        seen = []

        def record(state, bucket):
            seen[-1].append(sorted(names[id(p)] for p in bucket.parameters()))
            future = torch.futures.Future()
            future.set_result(bucket.buffer())
            return future

        ddp.register_comm_hook(None, record)
        for _ in range(3):
            seen.append([])
            ddp(torch.randn(4, 16)).sum().backward()
    finally:
        dist.destroy_process_group()
    first, later = hooks.ddp_buckets(model, bucket_cap_mb=0.05)
    assert len(later) > 1
    assert sorted(seen[0]) == sorted(sorted(n for n, _ in b) for b in first)
    assert sorted(seen[1]) == sorted(seen[2]) == sorted(sorted(n for n, _ in b) for b in later)


# --------------------------------------------------------------------------- reports

def test_report_is_written_for_a_tiny_model(tmp_path):
    log = []
    report = traffic_scale.run({"tiny": TwoLayer()}, steps=20, log=log.append)
    paths = traffic_scale.write_report(report, tmp_path)
    data = json.loads(paths[0].read_text())
    tiny = data["models"]["tiny"]
    assert tiny["parameters"] == 3340 and tiny["head"] == "head"
    assert tiny["profiles"]["layer_gbinary"]["device_share_steady"] == 56 / 418
    assert set(tiny["profiles"]) == set(traffic_scale.profiles())
    text = paths[1].read_text()
    assert "| tiny | 100.00% |" in text and "Layer-aware G-Binary" in text
    assert paths[2].read_bytes()[:4] == b"\x89PNG"
    assert log and log[0].startswith("  tiny: 3,340 parameters")


def test_command_prints_where_the_reports_went(tmp_path, capsys):
    assert traffic_scale.main(["--out", str(tmp_path), "--steps", "30",
                               "--models", "resnet18_cifar100", "--no-hook-cost"]) == 0
    out = capsys.readouterr().out
    assert "resnet18_cifar100" in out and str(tmp_path / "report.md") in out
    assert (tmp_path / "report.json").is_file()
    assert not (tmp_path / "hook_cost.json").exists()  # timing the hooks was skipped


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "steps must be at least 1, not 0"),
    (["--workers", "65"], "workers must be between 1 and 64, not 65"),
    (["--bucket-cap-mb", "-1"], "bucket cap must be a positive number, not '-1'"),
    (["--hook-steps", "two"], "hook steps must be an integer, not 'two'"),
])
def test_the_command_line_refuses_bad_arguments(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        traffic_scale.main(["--out", str(tmp_path), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_command_line_shows_a_fault_with_its_traceback(monkeypatch, tmp_path):
    def faulty(*args, **kwargs):
        raise ValueError("a fault in the count")

    monkeypatch.setattr(traffic_scale, "run", faulty)
    with pytest.raises(ValueError, match="a fault in the count"):
        traffic_scale.main(["--out", str(tmp_path), "--models", "resnet18_cifar100",
                            "--no-hook-cost"])
