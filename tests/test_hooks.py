"""DDP communication hooks: mixed-bucket routing (split, golden aggregation, reassembly in
place), the device's majority and gating semantics, traffic accounting, non-finite fallback
and capacity refusal.

The tests run in this process as a one-worker gloo group and hand the hook a bucket built by
hand, so that every element's expected value is known; other workers' lines are simulated
where the semantics need them. Bit-identity of the FP32 hooks with DDP's default all-reduce
needs real workers and is checked by ``test_train_smoke.py``.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from ddp_fakes import FakeBucket  # noqa: E402
from neuron_fabric.golden import gbinary, gternary  # noqa: E402
from neuron_fabric.host import hooks  # noqa: E402
from neuron_fabric.golden.params import FabricParams  # noqa: E402
from neuron_fabric.host.runtime import (FP32, GBINARY, GTERNARY, CapacityError,  # noqa: E402
                                          DeviceCaps, GBinaryOptions, GTernaryOptions)


class Net(torch.nn.Module):
    """Parameters of three roles, sized so that the low-bit streams span several lines."""

    head_module = "head"

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(30, 40)     # weight 1200 (backbone), bias 40
        self.head = torch.nn.Linear(40, 3)      # weight 120, bias 3 (head)


def grads_for(params, seed=0):
    rng = np.random.default_rng(seed)
    # Bounded away from 0 so that every element has a clear sign.
    return [torch.from_numpy((rng.choice([-1, 1], p.numel()) * rng.uniform(0.1, 2.0, p.numel()))
                             .astype(np.float32).reshape(p.shape)) for p in params]


@pytest.fixture(params=hooks.LANES)
def lanes(request):
    """The hook's lanes: the torch twin and the golden model must behave alike."""
    return request.param


def run_hook(hook, params, grads):
    bucket = FakeBucket(params, grads)
    result = hook.run(bucket).wait()
    assert result is bucket.buffer()  # written back in place
    return result.numpy().copy()


def by_name(model, names):
    """The model's parameters of ``names``, in that order: a bucket's layout."""
    params = dict(model.named_parameters())
    return [params[name] for name in names]


def slices(params):
    out, offset = [], 0
    for p in params:
        out.append(slice(offset, offset + p.numel()))
        offset += p.numel()
    return out


# --------------------------------------------------------------------------- mixed routing

def test_mixed_bucket_routes_each_slice_and_reassembles_in_place(group, lanes):
    model = Net()
    params = [model.head.bias, model.body.weight, model.head.weight, model.body.bias]
    names = ["head.bias", "body.weight", "head.weight", "body.bias"]
    routes = {"body.weight": GBINARY, "body.bias": GTERNARY, "head.weight": FP32,
              "head.bias": FP32}
    hook = hooks.FabricHook(model, lanes=lanes, routes=routes, gbinary=GBinaryOptions(dither=True),
                            gternary=GTernaryOptions(ratio=0.0, gate=1))
    grads = grads_for(params)
    got = run_hook(hook, params, grads)
    for name, part, grad in zip(names, slices(params), grads):
        g = grad.reshape(-1).numpy()
        if routes[name] == FP32:  # the mean of one worker is its own gradient, bit for bit
            np.testing.assert_array_equal(got[part], g)
        else:  # one worker: the majority (and the gated sum) is its own sign, scaled by mean|g|
            expected = np.sign(g) * np.float32(np.abs(g).astype(np.float64).mean())
            np.testing.assert_allclose(got[part], expected, rtol=1e-6)


@pytest.mark.parametrize("in_place_from", [1 << 20, 100])
def test_fp32_slices_are_averaged_where_they_lie_or_joined(group, monkeypatch, in_place_from):
    """FP32 slices apart from each other: a long run is reduced where it lies, the short
    ones joined and copied back. Two workers' mean, where the other worker's FP32 slices
    are 0 (this one-worker group's all-reduce adds nothing): half of each gradient."""
    monkeypatch.setattr(hooks, "_IN_PLACE_ELEMENTS", in_place_from)
    model = Net()
    names = ["head.bias", "body.weight", "head.weight", "body.bias"]
    params = by_name(model, names)
    routes = {"body.weight": GBINARY, "body.bias": FP32, "head.weight": FP32,
              "head.bias": FP32}
    hook = hooks.FabricHook(model, routes=routes)
    grads = grads_for(params, seed=4)
    simulate_workers(hook, [grads[1].reshape(-1).numpy()], gbinary.encode)
    got = run_hook(hook, params, grads)
    for name, part, grad in zip(names, slices(params), grads):
        if routes[name] == FP32:
            np.testing.assert_array_equal(got[part], grad.reshape(-1).numpy() / 2)
    assert hook.traffic.routes[FP32].sent == 4 * (3 + 120 + 40)
    # head.bias alone is joined when the run of head.weight and body.bias is long enough.
    joined = 3 if in_place_from <= 120 + 40 else 3 + 120 + 40
    assert hook._scratch[FP32]["joined"].numel() == joined
    assert "write_back" in hook.phase_seconds[FP32]


def test_slices_fallen_to_fp32_are_averaged_beside_the_fp32_ones(group):
    """Two low-bit slices with a NaN or Inf go FP32 in an all-reduce of their own, while the
    FP32 slices' is in flight: each joins its short slices in a buffer of its own."""
    model = Net()
    names = ["body.weight", "head.bias", "head.weight", "body.bias"]
    params = by_name(model, names)
    routes = {"body.weight": FP32, "head.bias": GBINARY, "head.weight": FP32,
              "body.bias": GTERNARY}
    hook = hooks.FabricHook(model, routes=routes)
    assert hooks._IN_PLACE_ELEMENTS > 1200  # every run here is joined
    hook.world_size = 2  # the other worker adds 0: this one-worker group's all-reduce
    grads = grads_for(params, seed=7)
    grads[1].view(-1)[1] = float("nan")
    grads[3].view(-1)[7] = float("inf")
    grads[0].view(-1)[9] = float("-inf")  # an FP32 slice's is reported, and averaged
    got = run_hook(hook, params, grads)
    for name, part, grad in zip(names, slices(params), grads):
        np.testing.assert_array_equal(got[part], grad.reshape(-1).numpy() / 2, err_msg=name)
    _, stats = hook.end_step(0.0)
    assert stats["head"].nonfinite and stats["bias"].nonfinite and stats["backbone"].nonfinite
    finite = np.delete(grads[0].reshape(-1).numpy(), 9).astype(np.float64)
    assert stats["backbone"].grad_norm == pytest.approx(np.sqrt((finite ** 2).sum() / 2))


def test_routes_change_between_steps(group):
    model = Net()
    params = [model.body.weight, model.head.weight]
    hook = hooks.FabricHook(model, routes=GBINARY)
    grads = grads_for(params, seed=1)
    first = run_hook(hook, params, grads)
    assert len(np.unique(np.abs(first[:1200]))) == 1  # one scale per parameter
    hook.set_routes(FP32)
    second = run_hook(hook, params, grads)
    np.testing.assert_array_equal(second, torch.cat([g.reshape(-1) for g in grads]).numpy())


def test_error_feedback_carries_what_compression_dropped(group, lanes):
    model = Net()
    params = [model.body.weight]
    hook = hooks.FabricHook(model, lanes=lanes, routes=GBINARY,
                            gbinary=GBinaryOptions(error_feedback=True, dither=False))
    grads = grads_for(params, seed=2)
    g = grads[0].reshape(-1).numpy()
    run_hook(hook, params, grads)
    residual = hook._residual["body.weight"].numpy().copy()  # reused in place next step
    np.testing.assert_allclose(residual, g - np.sign(g) * np.abs(g).mean(), rtol=1e-5, atol=1e-6)
    # The next step compresses gradient plus residual.
    second = run_hook(hook, params, grads)
    p = g + residual
    np.testing.assert_allclose(second, np.sign(p) * np.abs(p).mean(), rtol=1e-5)


def test_segments_must_cover_the_buffer(group):
    model = Net()
    hook = hooks.FabricHook(model, routes=FP32)
    bucket = FakeBucket([model.body.weight], [torch.zeros(1201)])
    with pytest.raises(RuntimeError, match="holds 1201 elements but its parameters hold 1200"):
        hook.run(bucket)


# --------------------------------------------------------------------------- traffic

def test_traffic_counts_bytes_and_device_lines_per_route(group, lanes):
    model = Net()
    params = [model.body.weight, model.body.bias, model.head.weight, model.head.bias]
    routes = {"body.weight": GBINARY, "body.bias": GTERNARY, "head.weight": FP32,
              "head.bias": FP32}
    hook = hooks.FabricHook(model, lanes=lanes, routes=routes)
    run_hook(hook, params, grads_for(params))
    t = hook.traffic.summary()
    gb, gt, fp, control = (t["routes"][r] for r in (GBINARY, GTERNARY, FP32, "control"))
    # 1200 sign bits: 3 lines of 512 written, 3 SIGN readout lines read back.
    assert (gb["elements"], gb["lines_written"], gb["lines_read"]) == (1200, 3, 3)
    assert gb["sent"] == gb["received"] == 3 * 64  # one worker: it receives its own lines
    # 40 ternary codes: one line of 256 lanes each way.
    assert (gt["elements"], gt["lines_written"], gt["lines_read"]) == (40, 1, 1)
    # 123 FP32 values: 492 bytes, 8 lines each way; all-reduce hands over and gets 492 bytes.
    assert (fp["elements"], fp["lines_written"], fp["lines_read"]) == (123, 8, 8)
    assert fp["sent"] == fp["received"] == 492
    # 4 parameters x 3 float64 control scalars.
    assert control["sent"] == 96
    base = t["baseline"]
    assert base["elements"] == 1363 and base["lines_written"] == -(-1363 * 4 // 64)
    assert t["device_share"] == pytest.approx((3 + 3 + 1 + 1 + 8 + 8) / (2 * 86))


def test_ternary_readout_costs_two_lines_per_slot(group):
    model = Net()
    hook = hooks.FabricHook(model, routes=GBINARY, gbinary=GBinaryOptions(readout="ternary"))
    run_hook(hook, [model.body.weight], grads_for([model.body.weight]))
    gb = hook.traffic.summary()["routes"][GBINARY]
    assert (gb["lines_written"], gb["lines_read"]) == (3, 6)


def test_fp32_hook_counts_one_all_reduce(group):
    meter = hooks.TrafficMeter()
    model = Net()
    bucket = FakeBucket([model.body.weight], grads_for([model.body.weight]))
    expected = bucket.buffer().clone()
    result = hooks.fp32_hook(meter, bucket).wait()
    assert torch.equal(result, expected)
    summary = meter.summary()
    assert summary["device_share"] == 1.0 and summary["collective_share"] == 1.0


# --------------------------------------------------------------------------- faults, capacity

def test_non_finite_low_bit_slice_goes_fp32_and_is_reported(group, lanes):
    model = Net()
    params = [model.body.weight, model.head.weight]
    hook = hooks.FabricHook(model, lanes=lanes, routes=GBINARY)
    grads = grads_for(params)
    grads[0].view(-1)[5] = float("nan")
    got = run_hook(hook, params, grads)
    assert np.isnan(got[5]) and np.isfinite(np.delete(got[:1200], 5)).all()
    loss, stats = hook.end_step(0.5)
    assert loss == 0.5
    assert stats["backbone"].nonfinite and stats["backbone"].route == FP32
    assert not stats["head"].nonfinite and stats["head"].route == GBINARY
    assert stats["head"].agreement == 1.0  # one worker always agrees with itself


@pytest.mark.parametrize("route", [GBINARY, GTERNARY])
def test_agreement_left_unmeasured_changes_nothing_else(group, lanes, route):
    model = Net()
    params = list(model.parameters())
    grads = grads_for(params, seed=5)
    results = []
    for agreement in (True, False):
        hook = hooks.FabricHook(model, lanes=lanes, routes=route, agreement=agreement)
        others = [grads_for(params, seed=6 + k) for k in range(2)]
        encode = gbinary.encode if route == GBINARY else (
            lambda g: gternary.encode(g, ratio=hook.gternary.ratio))
        simulate_workers(hook, [torch.cat([g.reshape(-1) for g in other]).numpy()
                                for other in others], encode)
        values = run_hook(hook, params, grads)
        _, stats = hook.end_step(0.0)
        results.append((values, {region: st.agreement for region, st in stats.items()}))
    (measured, agreement), (unmeasured, none) = results
    np.testing.assert_array_equal(unmeasured, measured)
    assert all(0.0 < value <= 1.0 for value in agreement.values())
    assert set(none) == set(agreement) and set(none.values()) == {None}


def test_hook_refuses_routes_the_device_cannot_serve(group):
    model = Net()
    caps = DeviceCaps.from_params(FabricParams(num_windows=1))
    both = {name: GBINARY if name.startswith("body") else GTERNARY
            for name, _ in model.named_parameters()}
    with pytest.raises(CapacityError, match=r"1 aggregation window\(s\)"):
        hooks.FabricHook(model, routes=both, caps=caps)
    hook = hooks.FabricHook(model, routes=FP32, caps=caps, gternary=GTernaryOptions(gate=2))
    with pytest.raises(CapacityError, match="gate 2 exceeds the 1 workers"):
        hook.set_routes(GTERNARY)
    assert set(hook.routes.values()) == {FP32}  # a refused change leaves the routes alone


def test_bad_routes_are_named(group):
    model = Net()
    with pytest.raises(ValueError, match="routes must name every parameter"):
        hooks.FabricHook(model, routes={"body.weight": FP32})
    with pytest.raises(ValueError, match=r"routes\['body.weight'\] must be one of fp32, "
                                         r"gbinary, gternary, not 'int8'"):
        hooks.FabricHook(model, routes={n: "int8" for n, _ in model.named_parameters()})


# --------------------------------------------------------------------------- majority semantics

def simulate_workers(hook, others, encode):
    """Make the one-worker hook fold ``encode(g)`` of each gradient in ``others`` beside its own
    lines, as if those workers had written the same window (the scales still come from this
    worker alone; the tests below look at the signs)."""
    hook.world_size = 1 + len(others)

    def exchange(lines, out):
        out.copy_(torch.from_numpy(np.stack([lines.numpy()] + [encode(g) for g in others])))
        done = torch.futures.Future()
        done.set_result(out)
        return done

    hook._exchange = exchange


def four_workers(seed):
    rng = np.random.default_rng(seed)
    return [(rng.choice([-1.0, 1.0], 1200) * rng.uniform(0.5, 1, 1200)).astype(np.float32)
            for _ in range(4)]


def as_param_grad(flat):
    return [torch.from_numpy(flat).reshape(40, 30)]


@pytest.mark.parametrize("readout, tie", [("ternary", 0), ("sign", 1)])
def test_gbinary_hook_takes_the_device_majority(group, readout, tie, lanes):
    model = Net()
    hook = hooks.FabricHook(model, lanes=lanes, routes=GBINARY,
                            gbinary=GBinaryOptions(readout=readout, dither=False))
    grads = four_workers(3)
    simulate_workers(hook, grads[1:], gbinary.encode)
    got = run_hook(hook, [model.body.weight], as_param_grad(grads[0]))
    negative = sum((g < 0).astype(int) for g in grads)
    assert (negative == 2).sum() > 100  # ties are common with four workers
    expected = np.where(2 * negative > 4, -1, np.where(2 * negative < 4, 1, tie))
    np.testing.assert_array_equal(np.sign(got), expected)


def test_dither_turns_sign_readout_ties_into_fair_coins(group, lanes):
    model = Net()
    hook = hooks.FabricHook(model, lanes=lanes, routes=GBINARY, gbinary=GBinaryOptions(dither=True))
    grads = four_workers(4)
    # Every worker flips with the same pattern: the dither bits of this step and bucket.
    bits = hook._dither_bits(-(-1200 // 8), 0, "cpu").numpy()
    flip = 1 - 2 * np.unpackbits(bits, bitorder="little")[:1200].astype(np.float32)
    simulate_workers(hook, grads[1:], lambda g: gbinary.encode(g * flip))
    got = np.sign(run_hook(hook, [model.body.weight], as_param_grad(grads[0])))
    negative = sum((g < 0).astype(int) for g in grads)
    decided = negative != 2
    np.testing.assert_array_equal(got[decided], np.where(negative[decided] > 2, -1, 1))
    ties = got[~decided]
    assert set(np.unique(ties)) == {-1, 1}
    assert abs(ties.mean()) < 0.2  # about as many -1 as +1, where the device reads +1


def test_gternary_hook_gates_the_device_sums(group, lanes):
    model = Net()
    hook = hooks.FabricHook(model, lanes=lanes, routes=GTERNARY, gternary=GTernaryOptions(ratio=0.0))
    hook.gternary = GTernaryOptions(ratio=0.0, gate=3)  # a one-worker job refuses gate 3
    grads = four_workers(5)
    simulate_workers(hook, grads[1:], lambda g: gternary.encode(g, ratio=0.0))
    got = run_hook(hook, [model.body.weight], as_param_grad(grads[0]))
    sums = sum(np.sign(g).astype(int) for g in grads)
    expected = np.where(np.abs(sums) >= 3, np.sign(sums), 0)
    assert (expected == 0).sum() > 100 and (expected != 0).sum() > 100
    np.testing.assert_array_equal(np.sign(got), expected)


def test_option_types_are_checked(group):
    with pytest.raises(TypeError, match="gbinary must be a GBinaryOptions, not"):
        hooks.FabricHook(Net(), routes=FP32, gbinary={"dither": False})
    with pytest.raises(ValueError, match="seed must be an integer >= 0, not -1"):
        hooks.FabricHook(Net(), routes=FP32, seed=-1)
