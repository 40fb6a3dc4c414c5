"""Gradient traces: capture, storage, roles and the NumPy-only loader."""

import hashlib
import json
import math
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

from neuron_fabric.host import roles
from neuron_fabric.experiments import traces as traces_api   # `traces` is the fixture

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
nn = torch.nn
workloads = pytest.importorskip("neuron_fabric.experiments.workloads")


def _capture_and_load(workload, out, options):
    return traces_api.load(traces_api.capture(workload, out, **options))


def small_options(trace):
    """The capture options stored in a trace's manifest (enough to capture it again)."""
    m = trace.manifest
    return dict(workers=m["workers"], seed=m["seed"], steps=m["steps"], **m["config"])


# ---------------------------------------------------------------------------- storage

@pytest.mark.parametrize("workload", traces_api.WORKLOADS)
def test_manifest_describes_the_arrays(traces, workload):
    trace = traces[workload]
    m = trace.manifest
    assert trace.workload == m["workload"] == workload
    assert trace.workers == m["workers"] == 4
    assert trace.steps == m["steps"] == sorted(set(trace.steps))
    assert 0 == trace.steps[0] < trace.steps[-1] < m["config"]["train_steps"]
    model = workloads.build_model(workload, **{k: v for k, v in small_options(trace).items()
                                               if k != "steps"})
    named = list(model.named_parameters())
    assert [p.name for p in trace.params] == [name for name, _ in named]
    for param, (_, tensor) in zip(trace.params, named):
        assert param.shape == tuple(tensor.shape)
        assert param.numel == tensor.numel() == math.prod(param.shape)
        grad = trace.grad(param.name)
        assert grad.dtype == np.float32
        assert grad.shape == (len(trace.steps), trace.workers, param.numel)
        assert np.isfinite(grad).all()
    assert m["role_numel"] == {role: sum(p.numel for p in trace.params if p.role == role)
                               for role in roles.ROLES}
    assert m["files"]["npz"]["bytes"] == trace.path.stat().st_size
    per_step = m["loss"]["per_step_mean"]
    assert len(per_step) == m["config"]["train_steps"]
    for entry in m["loss"]["captured"]:
        assert entry["mean"] == pytest.approx(np.mean(entry["workers"]))
        assert entry["mean"] == per_step[entry["step"]]
    assert m["final_metric"]["value"] == m["metrics"][m["final_metric"]["name"]]
    assert m["wall_seconds"]["total"] >= m["wall_seconds"]["train"] > 0


def test_digits_manifest_reports_the_split_and_accuracy(traces):
    m = traces["digits_cnn"].manifest
    data = m["data"]
    assert data["samples"] == 1797
    assert data["train_samples"] + data["test_samples"] == 1797
    assert sum(data["shard_samples"]) == data["train_samples"]
    assert m["final_metric"]["name"] == "test_accuracy"
    # Twelve steps already beat chance (0.1) by far on real digits.
    assert 0.3 < m["final_metric"]["value"] <= 1


def test_char_lm_manifest_records_the_stdlib_text(traces):
    m = traces["char_lm"].manifest
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = m["data"]["files"]
    assert [f["file"] for f in files] == sorted(workloads.STDLIB_FILES)
    for record in files:
        data = (root / record["file"]).read_bytes()[:m["config"]["bytes_per_file"]]
        assert record["bytes"] == len(data)
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert m["final_metric"]["name"] == "val_loss"
    losses = m["loss"]["per_step_mean"]
    assert losses[-1] < losses[0]   # it learns, even in a few steps
    assert math.isfinite(m["metrics"]["train_loss"])


# ---------------------------------------------------------------------------- roles

def test_roles_of_digits_cnn(traces):
    assert {p.name: p.role for p in traces["digits_cnn"].params} == {
        "features.0.weight": "backbone",
        "features.1.weight": "norm", "features.1.bias": "norm",
        "features.3.weight": "backbone",
        "features.4.weight": "norm", "features.4.bias": "norm",
        "hidden.weight": "backbone", "hidden.bias": "bias",
        "head.weight": "head", "head.bias": "head",
    }


def test_roles_of_char_lm(traces):
    got = {p.name: p.role for p in traces["char_lm"].params}
    expected = {"token.weight": "embedding", "position.weight": "embedding",
                "norm.weight": "norm", "norm.bias": "norm",
                "head.weight": "head", "head.bias": "head"}
    for layer in range(2):
        for part in ("norm1", "norm2"):
            expected |= {f"blocks.{layer}.{part}.weight": "norm",
                         f"blocks.{layer}.{part}.bias": "norm"}
        for part in ("qkv", "proj", "ff_in", "ff_out"):
            expected |= {f"blocks.{layer}.{part}.weight": "backbone",
                         f"blocks.{layer}.{part}.bias": "bias"}
    assert got == expected


class _Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.conv = nn.Conv1d(4, 4, 3)
        self.bn = nn.BatchNorm1d(4)
        self.gn = nn.GroupNorm(2, 4)
        self.ln = nn.LayerNorm(4)
        self.rms = nn.RMSNorm(4)
        self.scale = nn.Parameter(torch.ones(4))
        self.attn = nn.MultiheadAttention(4, 2)
        self.mid = nn.Linear(4, 4)
        self.out = nn.Linear(4, 3)


def test_roles_follow_the_module_tree_and_the_last_linear_is_the_head():
    assert roles.classify(_Toy()) == {
        "scale": "backbone",
        "embed.weight": "embedding",
        "conv.weight": "backbone", "conv.bias": "bias",
        "bn.weight": "norm", "bn.bias": "norm",
        "gn.weight": "norm", "gn.bias": "norm",
        "ln.weight": "norm", "ln.bias": "norm",
        "rms.weight": "norm",
        "attn.in_proj_weight": "backbone", "attn.in_proj_bias": "bias",
        "attn.out_proj.weight": "backbone", "attn.out_proj.bias": "bias",
        "mid.weight": "backbone", "mid.bias": "bias",
        "out.weight": "head", "out.bias": "head",
    }
    assert roles.ROLES == ("head", "embedding", "norm", "bias", "backbone")


def test_a_named_head_wins_over_the_last_linear():
    class Named(nn.Module):
        head_module = "classifier"

        def __init__(self):
            super().__init__()
            self.classifier = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
            self.aux = nn.Linear(4, 1)

    assert roles.find_head(Named()) == "classifier"
    assert roles.classify(Named()) == {
        "classifier.0.weight": "head", "classifier.0.bias": "head",
        "classifier.2.weight": "head", "classifier.2.bias": "head",
        "aux.weight": "backbone", "aux.bias": "bias"}


def test_a_weight_tied_to_the_head_is_a_head_parameter():
    model = _Toy()
    model.out = nn.Linear(4, 10)
    model.out.weight = model.embed.weight
    result = roles.classify(model)
    assert list(result) == [name for name, _ in model.named_parameters()]
    assert result["embed.weight"] == "head" and "out.weight" not in result


def test_roles_refuse_models_without_a_head():
    class NoHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 3)

    with pytest.raises(ValueError, match="must have a torch.nn.Linear output layer or name "
                                         "its head in the attribute 'head_module'"):
        roles.classify(NoHead())
    bad = NoHead()
    bad.head_module = "fc"
    with pytest.raises(ValueError, match=r"NoHead.head_module must be the qualified name of one "
                                         r"of its submodules \['conv'\], not 'fc'"):
        roles.classify(bad)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, not dict"):
        roles.classify({})


def test_roles_check_refuses_unknown_names():
    assert roles.check_roles(["head", "norm"]) == {"head", "norm"}
    with pytest.raises(ValueError, match=r"roles must contain only roles from .*, not \['neck'\]"):
        roles.check_roles(["head", "neck"])
    with pytest.raises(TypeError, match="not the string 'head'"):
        roles.check_roles("head")
    with pytest.raises(ValueError, match="at least one role"):
        roles.check_roles([])


# ---------------------------------------------------------------------------- buckets

@pytest.mark.parametrize("workload", traces_api.WORKLOADS)
def test_bucket_is_the_concatenation_in_parameter_order(traces, workload):
    trace = traces[workload]
    for step_index in range(len(trace.steps)):
        for worker in range(trace.workers):
            whole = trace.bucket(step_index, worker)
            parts = [trace.grad(p.name)[step_index, worker] for p in trace.params]
            assert whole.dtype == np.float32 and whole.ndim == 1
            np.testing.assert_array_equal(whole, np.concatenate(parts))
    for chosen in (("head",), ("norm", "bias"), ("backbone",)):
        parts = [trace.grad(p.name)[1, 2] for p in trace.params if p.role in chosen]
        np.testing.assert_array_equal(trace.bucket(1, 2, roles=chosen), np.concatenate(parts))
    assert sum(trace.bucket(0, 0, roles=(role,)).size for role in roles.ROLES) == \
        trace.bucket(0, 0).size


def test_bucket_without_matching_parameters_is_empty(traces):
    empty = traces["digits_cnn"].bucket(0, 0, roles=["embedding"])
    assert empty.dtype == np.float32 and empty.shape == (0,)


def test_bucket_and_grad_refuse_bad_arguments(traces):
    trace = traces["digits_cnn"]
    last, late = len(trace.steps) - 1, trace.steps[-1]
    with pytest.raises(ValueError, match=fr"step_index must be between 0 and {last} \(an index "
                                         fr"into Trace.steps \[0, .*, {late}\], not a training "
                                         fr"step\), not {late}"):
        trace.bucket(late, 0)
    with pytest.raises(ValueError, match="worker must be between 0 and 3, not 4"):
        trace.bucket(0, 4)
    with pytest.raises(TypeError, match="step_index must be an integer, not 1.0"):
        trace.bucket(1.0, 0)
    with pytest.raises(ValueError, match=r"roles must contain only roles from"):
        trace.bucket(0, 0, roles=["heads"])
    with pytest.raises(TypeError, match="not the string 'head'"):
        trace.bucket(0, 0, roles="head")
    with pytest.raises(ValueError, match="name must be a parameter of the digits_cnn trace"):
        trace.grad("head.weights")


def test_loaded_arrays_are_read_only(traces):
    with pytest.raises(ValueError):
        traces["digits_cnn"].grad("head.weight")[0, 0, 0] = 1.0


# ---------------------------------------------------------------------------- training

@pytest.mark.parametrize("workload", traces_api.WORKLOADS)
def test_workers_see_different_data(traces, workload):
    trace = traces[workload]
    for step_index in range(len(trace.steps)):
        buckets = [trace.bucket(step_index, worker) for worker in range(trace.workers)]
        for a in range(trace.workers):
            assert np.abs(buckets[a]).max() > 0
            for b in range(a):
                assert not np.array_equal(buckets[a], buckets[b]), (step_index, a, b)
    losses = [entry["workers"] for entry in trace.manifest["loss"]["captured"]]
    assert all(len(set(step)) == trace.workers for step in losses)


def _sgd_first_update(param, grad, config):
    # The first momentum step uses the gradient itself (the buffer starts as the gradient).
    return param - config["lr"] * (grad + config["weight_decay"] * param)


def _adam_first_update(param, grad, config):
    # After one step Adam's bias-corrected moments are g and g*g.
    return param - config["lr"] * grad / (np.abs(grad) + 1e-8)


@pytest.mark.parametrize("workload, update", [("digits_cnn", _sgd_first_update),
                                              ("char_lm", _adam_first_update)])
def test_optimizer_steps_on_the_mean_of_the_workers(traces, workload, update):
    options = small_options(traces[workload])
    options.update(train_steps=1, steps=[0])
    before = dict(workloads.build_model(workload, **{k: v for k, v in options.items()
                                                     if k != "steps"}).named_parameters())
    run = workloads.train(workload, **options)
    config = traces[workload].manifest["config"]
    checked = 0
    for name, after in run.model.named_parameters():
        p0 = before[name].detach().numpy().ravel()
        p1 = after.detach().numpy().ravel()
        per_worker = run.grads[name][0]
        mean = per_worker.sum(axis=0) / run.workers
        np.testing.assert_allclose(p1, update(p0, mean, config), rtol=0, atol=2e-6,
                                   err_msg=name)
        if np.abs(per_worker[0] - mean).max() > 1e-3 * np.abs(mean).max():
            # Worker 0's own gradient would have given a visibly different update.
            assert np.abs(p1 - update(p0, per_worker[0], config)).max() > 1e-5, name
            checked += 1
    assert checked > 0
    # The recorded step-0 gradients equal those of the longer captured run.
    for name in run.names:
        np.testing.assert_array_equal(run.grads[name][0], traces[workload].grad(name)[0])


def test_capture_with_the_manifest_reproduces_the_arrays(traces, tmp_path):
    for workload, trace in traces.items():
        again = _capture_and_load(workload, tmp_path / "same", small_options(trace))
        assert again.manifest["params"] == trace.manifest["params"]
        assert again.manifest["loss"] == trace.manifest["loss"]
        for param in trace.params:
            np.testing.assert_array_equal(again.grad(param.name), trace.grad(param.name))


def test_another_seed_gives_other_gradients(traces, tmp_path):
    trace = traces["digits_cnn"]
    options = small_options(trace) | {"seed": 1}
    other = _capture_and_load("digits_cnn", tmp_path, options)
    for param in trace.params:
        assert not np.array_equal(other.grad(param.name), trace.grad(param.name)), param.name




def test_capture_leaves_torch_settings_as_they_were(tmp_path):
    state = torch.get_rng_state()
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    workloads.train("digits_cnn", train_steps=1, steps=[0])
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == deterministic


# ---------------------------------------------------------------------------- loading

def test_loading_needs_neither_torch_nor_sklearn(traces):
    path = traces["char_lm"].path
    script = (
        "import sys\n"
        "from neuron_fabric.experiments import traces\n"
        f"t = traces.load({str(path)!r})\n"
        "b = t.bucket(len(t.steps) - 1, t.workers - 1, roles=('backbone',))\n"
        "print(b.size, sorted(m for m in ('torch', 'sklearn') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()
    backbone = sum(p.numel for p in traces["char_lm"].params if p.role == "backbone")
    assert out == [str(backbone), "[]"]


def test_load_accepts_either_file_or_the_stem(traces):
    path = traces["digits_cnn"].path
    for form in (path, path.with_suffix(".json"), path.with_suffix(""), str(path)):
        assert traces_api.load(form).steps == traces["digits_cnn"].steps


def test_load_refuses_missing_and_inconsistent_files(traces, tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.npz does not exist; capture it with"):
        traces_api.load(tmp_path / "nothing.npz")
    source = traces["digits_cnn"].path
    shutil.copy(source, tmp_path / "d.npz")
    manifest = json.loads(source.with_suffix(".json").read_text())
    manifest["params"][0]["numel"] += 1
    (tmp_path / "d.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="parameter 'features.0.weight' must be float32 of shape"):
        traces_api.load(tmp_path / "d.npz")
    manifest["params"] = manifest["params"][1:]
    (tmp_path / "d.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"only in the archive: \['features.0.weight'\]"):
        traces_api.load(tmp_path / "d.npz")
    manifest["format"] = 99
    (tmp_path / "d.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="manifest of format 1, not 99"):
        traces_api.load(tmp_path / "d.npz")


# ---------------------------------------------------------------------------- arguments

def test_capture_refuses_bad_arguments_before_training(tmp_path):
    out = tmp_path / "never"
    with pytest.raises(ValueError, match="workload must be one of digits_cnn, char_lm, "
                                         "not 'mnist'"):
        traces_api.capture("mnist", out)
    with pytest.raises(ValueError, match="workers must be at least 1, not 0"):
        traces_api.capture("digits_cnn", out, workers=0)
    with pytest.raises(TypeError, match="workers must be an integer, not 2.5"):
        traces_api.capture("digits_cnn", out, workers=2.5)
    with pytest.raises(ValueError, match="seed must be at least 0, not -1"):
        traces_api.capture("digits_cnn", out, seed=-1)
    with pytest.raises(TypeError, match="digits_cnn has no option depth; its options are "
                                        "train_steps, batch"):
        traces_api.capture("digits_cnn", out, depth=3)
    with pytest.raises(ValueError, match=r"steps must be distinct training steps from 0 to 9 "
                                         r"\(train_steps=10\), not \[0, 10\]"):
        traces_api.capture("digits_cnn", out, train_steps=10, steps=[0, 10])
    with pytest.raises(ValueError, match="steps must be distinct"):
        traces_api.capture("digits_cnn", out, train_steps=10, steps=[3, 3])
    with pytest.raises(ValueError, match="workers=200 leaves shards of 7 images, fewer than "
                                         "the 16 one minibatch needs"):
        traces_api.capture("digits_cnn", out, workers=200, batch=16)
    with pytest.raises(ValueError, match="d_model must be a multiple of heads=3, not 32"):
        traces_api.capture("char_lm", out, d_model=32, heads=3)
    with pytest.raises(ValueError, match="'no_such_module.py' is not there"):
        traces_api.capture("char_lm", out, files=["no_such_module.py"])
    assert not out.exists()


def test_traces_module_does_not_import_torch_at_module_level():
    source = pathlib.Path(traces_api.__file__).read_text()
    top_level = [line for line in source.splitlines()
                 if line.startswith(("import ", "from "))]
    assert not [line for line in top_level if "torch" in line or "workloads" in line
                or "sklearn" in line]
    assert traces_api.WORKLOADS == workloads.WORKLOADS


@pytest.mark.parametrize("argv, message", [
    (["--workload", "mnist"], "workload must be one of digits_cnn, char_lm, not 'mnist'"),
    (["--workers", "0"], "workers must be at least 1, not 0"),
    (["--seed", "-2"], "seed must be at least 0, not -2"),
    (["--train-steps", "0"], "train steps must be at least 1, not 0"),
])
def test_command_line_refuses_bad_arguments(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        traces_api.main(["capture", "--out", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_command_line_reports_progress_and_files(tmp_path, capsys):
    out = tmp_path / "out"
    assert traces_api.main(["capture", "--out", str(out), "--workload", "digits_cnn",
                        "--workers", "2", "--seed", "5", "--train-steps", "3"]) == 0
    text = capsys.readouterr().out
    assert "traces: digits_cnn: training on 2 workers (seed 5)" in text
    assert "step 0/3" in text and "step 2/3" in text and "(captured 3/3)" in text
    assert "traces: digits_cnn: test_accuracy " in text
    for name in ("digits_cnn.npz", "digits_cnn.json"):
        assert f"{out / name}  " in text
    trace = traces_api.load(out / "digits_cnn.npz")
    assert (trace.workers, trace.steps, trace.manifest["seed"]) == (2, [0, 1, 2], 5)
