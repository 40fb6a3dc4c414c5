"""The torch twin of the golden lanes (``neuron_fabric.host.lanes``) against the golden model:
property tests of every function on random inputs (shapes, worker counts from 1 to
MAX_WORKERS, ties, invalid codes, saturation, NaN refused, stochastic rounding from a seed),
the counter-based draws against their NumPy reference, a planted tie bug that the properties
catch, the hooks' float64 statistics, and a two-worker training through the golden and the
torch lanes, bit-identical at every step.

The CUDA tests run the same comparisons on a GPU and skip where there is none.
"""

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import worker_bodies  # noqa: E402
from ddp_fakes import FakeBucket  # noqa: E402
from neuron_fabric.golden import gbinary, gternary  # noqa: E402
from neuron_fabric.golden.formats import MAX_WORKERS_LIMIT, Readout  # noqa: E402
from neuron_fabric.host import hooks, lanes  # noqa: E402
from neuron_fabric.host.runtime import GBINARY, GTERNARY  # noqa: E402

PROPERTY = settings(max_examples=30, deadline=None)
LINE_BITS = (128, 256, 512, 1024)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device here (torch.cuda.is_available() is False); "
                                 "the twin's GPU path runs where one is")

# On the CPU the twin runs compiled loops where torch has none; every other device runs its
# torch arithmetic. Tests of those functions run both here.
KERNELS = pytest.mark.parametrize("cpu_kernels_on", [True, False],
                                  ids=["cpu-kernels", "torch-arithmetic"])


@contextlib.contextmanager
def cpu_kernels(cpu_kernels_on):
    saved = lanes.CPU_KERNELS
    lanes.CPU_KERNELS = cpu_kernels_on
    try:
        yield
    finally:
        lanes.CPU_KERNELS = saved


def same(golden, twin):
    """The twin's tensor holds the golden array's dtype, shape and bits."""
    got = twin.cpu().numpy()
    assert got.dtype == golden.dtype and got.shape == golden.shape
    np.testing.assert_array_equal(got.view(np.uint8), golden.view(np.uint8))


def refusals(golden_call, twin_call):
    """Both calls raise the same exception type with the same message, or neither raises;
    returns the golden result (None when it raised)."""
    try:
        expected = golden_call()
    except (TypeError, ValueError) as error:
        with pytest.raises(type(error)) as caught:
            twin_call()
        if type(error) is ValueError:  # a type error names the array type, which differs
            assert str(caught.value) == str(error)
        return None
    return expected, twin_call()


def gradients(draw, *, size):
    """Float32 values with the cases that decide codes: signed zeros, infinities, ties with
    the threshold, tiny and huge magnitudes."""
    special = st.sampled_from([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 0.5, -0.5, 1e-45,
                               -1e-45, 3e38, -3e38])
    values = draw(st.lists(st.one_of(special, st.floats(-10, 10, width=32)), min_size=size,
                           max_size=size))
    return np.array(values, dtype=np.float32)


# --------------------------------------------------------------------------- G-Binary

@KERNELS
@PROPERTY
@given(data=st.data(), size=st.integers(0, 1500), line_bits=st.sampled_from(LINE_BITS),
       dither=st.booleans())
def test_gbinary_encode_matches_golden(cpu_kernels_on, data, size, line_bits, dither):
    grad = gradients(data.draw, size=size)
    bits = np.random.default_rng(size).integers(0, 256, -(-size // 8) + 1, dtype=np.uint8)
    flip = 1 - 2 * np.unpackbits(bits, bitorder="little")[:size].astype(np.float32)
    golden = gbinary.encode(grad * flip if dither else grad, line_bits=line_bits)
    plain = gbinary.encode(grad, line_bits=line_bits)
    undithered = torch.full((plain.size,), 0xA5, dtype=torch.uint8)
    with cpu_kernels(cpu_kernels_on):
        twin = lanes.gbinary_encode(torch.from_numpy(grad), line_bits=line_bits,
                                    dither=torch.from_numpy(bits) if dither else None,
                                    undithered=undithered)
    same(golden, twin)
    same(plain.reshape(-1), undithered)  # the lines before the dither, for the residuals


def test_gbinary_encode_refuses_what_the_golden_model_refuses():
    grad = np.array([1.0, np.nan, -2.0], dtype=np.float32)
    refusals(lambda: gbinary.encode(grad), lambda: lanes.gbinary_encode(torch.from_numpy(grad)))
    refusals(lambda: gbinary.encode(np.arange(4)),
             lambda: lanes.gbinary_encode(torch.arange(4)))
    refusals(lambda: gbinary.encode(np.ones(4, np.float32), line_bits=100),
             lambda: lanes.gbinary_encode(torch.ones(4), line_bits=100))


def worker_lines(draw, *, workers, lanes_per_line, n_lines, nbytes):
    """Every worker's random lines, some copies of one another (so ties and unanimity are
    common), as ``(workers, n_lines, nbytes)`` uint8."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (n_lines, nbytes), dtype=np.uint8)
    out = rng.integers(0, 256, (workers, n_lines, nbytes), dtype=np.uint8)
    same_as_base = rng.random(workers) < 0.4
    out[same_as_base] = base
    return out


def some_lines_of_more(draw, lines):
    """``lines`` as a tensor, or, as the hooks fold a bucket a chunk at a time, as a slice
    ``[:, a:b]`` of every worker's longer lines: not contiguous, but read in place."""
    before, after = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    workers, n_lines, nbytes = lines.shape
    more = np.random.default_rng(before + 3 * after).integers(
        0, 256, (workers, before + n_lines + after, nbytes), dtype=np.uint8)
    more[:, before:before + n_lines] = lines
    return torch.from_numpy(more)[:, before:before + n_lines]


def folds(golden_fold, twin_fold, draw, lines, **options):
    """Both folds of ``lines`` (the twin's of a slice of longer lines), through
    :func:`refusals`."""
    return refusals(lambda: golden_fold(lines, **options),
                    lambda: twin_fold(some_lines_of_more(draw, lines), **options))


@PROPERTY
@given(data=st.data(), workers=st.integers(0, MAX_WORKERS_LIMIT + 3),
       line_bits=st.sampled_from(LINE_BITS), n_lines=st.integers(0, 3),
       max_workers=st.integers(1, MAX_WORKERS_LIMIT), narrow=st.integers(0, 4))
def test_gbinary_fold_and_every_readout_match_golden(data, workers, line_bits, n_lines,
                                                     max_workers, narrow):
    lines = worker_lines(data.draw, workers=workers, lanes_per_line=line_bits, n_lines=n_lines,
                         nbytes=line_bits // 8)
    counter_bits = max(1, max_workers.bit_length() - narrow)  # narrow counters saturate
    result = folds(gbinary.aggregate_planes, lanes.gbinary_aggregate_planes, data.draw, lines,
                   max_workers=max_workers, counter_bits=counter_bits)
    if result is None:
        return
    golden, twin = result
    same(golden, twin)
    num_workers = data.draw(st.integers(1, MAX_WORKERS_LIMIT))
    for readout in (Readout.SIGN, Readout.TERNARY, Readout.COUNTS):
        expected = gbinary.readout_planes(golden, readout=readout, num_workers=num_workers)
        got = lanes.gbinary_readout_planes(twin, readout=readout, num_workers=num_workers)
        same(expected, got)
        n = data.draw(st.integers(0, n_lines * line_bits))
        same(gbinary.decode(expected, readout=readout, n_elements=n, line_bits=line_bits,
                            counter_bits=counter_bits),
             lanes.gbinary_decode(got, readout=readout, n_elements=n, line_bits=line_bits,
                                  counter_bits=counter_bits))


def test_gbinary_parse_refuses_a_sign_bit_on_a_tie():
    lines = np.zeros((2, 64), dtype=np.uint8)
    lines[0, 3] = 1  # sign set, lane 24 not decided: no readout gives that
    refusals(lambda: gbinary.decode(lines, readout=Readout.TERNARY, n_elements=512),
             lambda: lanes.gbinary_decode(torch.from_numpy(lines), readout=Readout.TERNARY,
                                          n_elements=512))
    refusals(lambda: gbinary.decode(lines[:1], readout=Readout.TERNARY, n_elements=512),
             lambda: lanes.gbinary_decode(torch.from_numpy(lines[:1]), readout=Readout.TERNARY,
                                          n_elements=512))


def check_gbinary_readout(readout_planes, lines, num_workers, readout):
    """A readout of the twin's counters equals the golden readout of the golden counters."""
    golden = gbinary.aggregate_planes(lines, max_workers=MAX_WORKERS_LIMIT)
    twin = lanes.gbinary_aggregate_planes(torch.from_numpy(lines),
                                          max_workers=MAX_WORKERS_LIMIT)
    same(gbinary.readout_planes(golden, readout=readout, num_workers=num_workers),
         readout_planes(twin, readout=readout, num_workers=num_workers))


@PROPERTY
@given(data=st.data(), workers=st.sampled_from([2, 4, 6]),
       readout=st.sampled_from([Readout.SIGN, Readout.TERNARY]))
def test_ties_read_as_the_golden_model_reads_them(data, workers, readout):
    lines = worker_lines(data.draw, workers=workers, lanes_per_line=512, n_lines=2, nbytes=64)
    check_gbinary_readout(lanes.gbinary_readout_planes, lines, workers, readout)


def test_a_tie_resolved_the_other_way_is_caught():
    """The planted bug of the two-worker training (a tie reads negative) fails the property."""

    @settings(max_examples=20, deadline=None, database=None)
    @given(data=st.data(), workers=st.sampled_from([2, 4, 6]))
    def prop(data, workers):
        lines = worker_lines(data.draw, workers=workers, lanes_per_line=512, n_lines=2,
                             nbytes=64)
        check_gbinary_readout(worker_bodies.tie_resolved_negative, lines, workers, Readout.SIGN)

    with pytest.raises(AssertionError):
        prop()


# --------------------------------------------------------------------------- G-Ternary

@KERNELS
@PROPERTY
@given(data=st.data(), size=st.integers(0, 1500), line_bits=st.sampled_from(LINE_BITS),
       ratio=st.sampled_from([0.0, 0.05, 0.5, 1.0]), dtype=st.sampled_from(["<f2", "<f4", "<f8"]))
def test_gternary_encode_matches_golden(cpu_kernels_on, data, size, line_bits, ratio, dtype):
    with np.errstate(over="ignore"):  # 3e38 is inf in float16
        grad = gradients(data.draw, size=size).astype(dtype)
    with cpu_kernels(cpu_kernels_on):
        result = refusals(lambda: gternary.encode(grad, ratio=ratio, line_bits=line_bits),
                          lambda: lanes.gternary_encode(torch.from_numpy(grad), ratio=ratio,
                                                        line_bits=line_bits))
    if result is not None:
        same(*result)


@KERNELS
@PROPERTY
@given(data=st.data(), size=st.integers(0, 1200), seed=st.integers(0, 2 ** 32 - 1),
       ratio=st.sampled_from([0.0, 0.1]), scale=st.sampled_from([None, 0.0, 2.0, 1e30]),
       dtype=st.sampled_from(["<f2", "<f4", "<f8"]))
def test_stochastic_rounding_from_a_seed_matches_golden(cpu_kernels_on, data, size, seed, ratio,
                                                        scale, dtype):
    with np.errstate(over="ignore"):  # 3e38 is inf in float16
        grad = gradients(data.draw, size=size).astype(dtype)
    grad[~np.isfinite(grad)] = 1.0 if scale is None else grad[~np.isfinite(grad)]
    draws = np.random.default_rng(seed).random(size, dtype=np.float32)  # the golden bits
    with cpu_kernels(cpu_kernels_on):
        result = refusals(
            lambda: gternary.encode(grad, ratio=ratio, rng=np.random.default_rng(seed),
                                    scale=scale),
            lambda: lanes.gternary_encode(torch.from_numpy(grad), ratio=ratio,
                                          draws=torch.from_numpy(draws), scale=scale))
    if result is not None:
        same(*result)
        same(gternary.encode(grad, ratio=ratio, draws=draws, scale=scale), result[1])


def test_gternary_encode_refuses_what_the_golden_model_refuses():
    grad = np.array([1.0, -np.nan, 3.0], dtype=np.float32)
    refusals(lambda: gternary.encode(grad, ratio=0.1),
             lambda: lanes.gternary_encode(torch.from_numpy(grad), ratio=0.1))
    for ratio in (-0.1, 1.5, True, "0.1"):
        refusals(lambda: gternary.encode(np.ones(3, np.float32), ratio=ratio),
                 lambda: lanes.gternary_encode(torch.ones(3), ratio=ratio))
    infinite = np.array([np.inf, 1.0], dtype=np.float32)
    draws = np.zeros(2, dtype=np.float32)
    for scale in (None, -1.0, np.inf, "2"):
        refusals(lambda: gternary.encode(infinite, ratio=0.0, draws=draws, scale=scale),
                 lambda: lanes.gternary_encode(torch.from_numpy(infinite), ratio=0.0,
                                               draws=torch.from_numpy(draws), scale=scale))


@KERNELS
@PROPERTY
@given(data=st.data(), workers=st.integers(0, 40), line_bits=st.sampled_from(LINE_BITS),
       n_lines=st.integers(0, 3), max_workers=st.integers(1, MAX_WORKERS_LIMIT),
       narrow=st.integers(0, 5), invalid=st.booleans())
def test_gternary_fold_and_every_readout_match_golden(cpu_kernels_on, data, workers, line_bits,
                                                      n_lines, max_workers, narrow, invalid):
    lines = worker_lines(data.draw, workers=workers, lanes_per_line=line_bits // 2,
                         n_lines=n_lines, nbytes=line_bits // 8)
    if not invalid:  # 10 (invalid) to 00 in every lane: valid codes only
        high, low = lines & 0xAA, lines & 0x55
        lines = (low | (high & (low << 1))).astype(np.uint8)
    counter_bits = max(1, max_workers.bit_length() - narrow)  # narrow counters saturate
    with cpu_kernels(cpu_kernels_on):
        result = folds(gternary.aggregate_planes, lanes.gternary_aggregate_planes, data.draw,
                       lines, max_workers=max_workers, counter_bits=counter_bits)
    if result is None:
        return
    golden, twin = result
    same(golden, twin)
    gate = data.draw(st.integers(0, 255))
    for readout in (Readout.GATED, Readout.SUMS):
        expected = gternary.readout_planes(golden, readout=readout, gate=gate)
        got = lanes.gternary_readout_planes(twin, readout=readout, gate=gate)
        same(expected, got)
        n = data.draw(st.integers(0, n_lines * line_bits // 2))
        same(gternary.decode(expected, readout=readout, n_elements=n, line_bits=line_bits,
                             counter_bits=counter_bits),
             lanes.gternary_decode(got, readout=readout, n_elements=n, line_bits=line_bits,
                                   counter_bits=counter_bits))


@PROPERTY
@given(data=st.data(), counter_bits=st.integers(1, 7), readout=st.sampled_from(
    [Readout.GATED, Readout.SUMS]), invalid=st.booleans())
def test_gternary_parse_refuses_what_the_golden_model_refuses(data, counter_bits, readout,
                                                              invalid):
    per_slot = 1 if readout is Readout.GATED else (counter_bits + 2) // 2
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    lines = np.random.default_rng(seed).integers(0, 256, (per_slot * 2, 32), dtype=np.uint8)
    if not invalid:  # 10 (invalid) to 00 in every lane: both must accept and agree
        high, low = lines & 0xAA, lines & 0x55
        lines = (low | (high & (low << 1))).astype(np.uint8)
    result = refusals(
        lambda: gternary.decode(lines, readout=readout, n_elements=256, line_bits=256,
                                counter_bits=counter_bits),
        lambda: lanes.gternary_decode(torch.from_numpy(lines), readout=readout, n_elements=256,
                                      line_bits=256, counter_bits=counter_bits))
    if result is not None:
        same(*result)


# --------------------------------------------------------------------------- the hooks' helpers

@KERNELS
def test_an_out_the_twin_cannot_write_whole_is_refused(cpu_kernels_on):
    lines = torch.zeros((3, 2, 64), dtype=torch.uint8)  # 3 workers, 2 lines of 512 bits
    grad = torch.linspace(-1, 1, 512)
    calls = {
        "G-Binary fold": (lambda out: lanes.gbinary_aggregate_planes(
            lines, max_workers=4, counter_bits=3, out=out), (2, 3, 64)),
        "G-Ternary fold": (lambda out: lanes.gternary_aggregate_planes(
            lines, max_workers=4, counter_bits=3, out=out), (2, 2, 64)),
        "G-Binary encode": (lambda out: lanes.gbinary_encode(grad, out=out), (1, 64)),
        "G-Ternary codes": (lambda out: lanes.gternary_encode_lines(grad, tau=0.5, out=out),
                            (2, 64)),
    }
    with cpu_kernels(cpu_kernels_on):
        for name, (call, shape) in calls.items():
            wide = torch.zeros(shape[:-1] + (2 * shape[-1],), dtype=torch.uint8)
            for out in (wide[..., ::2], torch.zeros(shape[:-1] + (32,), dtype=torch.uint8),
                        torch.zeros(shape, dtype=torch.int8)):
                with pytest.raises(ValueError, match="out must be a contiguous uint8 tensor"):
                    call(out)
            given = torch.full(shape, 0xA5, dtype=torch.uint8)
            assert call(given) is given, name


@KERNELS
@PROPERTY
@given(data=st.data(), n_words=st.integers(1, 6), streams=st.integers(1, 3))
def test_range_sums_count_the_bits_of_each_range(cpu_kernels_on, data, n_words, streams):
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    words = rng.integers(0, 2 ** 63, (streams, n_words), dtype=np.int64) * rng.choice([1, -1])
    weights = [int(w) for w in rng.integers(-5, 6, streams)]
    bounds = sorted(data.draw(st.lists(st.integers(0, 64 * n_words), min_size=2, max_size=8)))
    starts, stops = bounds[:-1], bounds[1:]
    bits = np.unpackbits(words.view(np.uint8), bitorder="little").reshape(streams, -1).astype(
        np.int64)
    expected = [int(sum(w * bits[s, a:b].sum() for s, w in enumerate(weights)))
                for a, b in zip(starts, stops)]
    with cpu_kernels(cpu_kernels_on):
        got = lanes.range_sums(torch.from_numpy(words), weights, starts, stops)
    assert got.tolist() == expected


@PROPERTY
@given(seed=st.integers(0, 2 ** 32 - 1), n_words=st.integers(1, 40))
def test_both_population_counts_count_every_bit(seed, n_words):
    # Words of every density, all ones and the sign bit included.
    rng = np.random.default_rng(seed)
    words = rng.integers(-2 ** 63, 2 ** 63, (2, n_words), dtype=np.int64)
    words &= rng.integers(-2 ** 63, 2 ** 63, (2, n_words), dtype=np.int64)
    words[0, 0], words[1, 0] = -1, -2 ** 63
    expected = np.unpackbits(words.view(np.uint8), bitorder="little").reshape(
        2, n_words, 64).sum(axis=2)
    for count in (lanes._popcount_, lanes._popcount_swar_):
        got = torch.from_numpy(words.copy())
        assert count(got, torch.empty_like(got)).tolist() == expected.tolist(), count.__name__


@PROPERTY
@given(data=st.data(), route=st.sampled_from([GBINARY, GTERNARY]), count=st.integers(1, 300))
def test_scaled_values_are_numpy_products(data, route, count):
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    per_byte = 8 if route == GBINARY else 4
    raw = rng.integers(0, 256, -(-count // per_byte) + 2, dtype=np.uint8)
    if route == GTERNARY:  # codes a readout gives: no 10
        raw = (raw & 0x55) | ((raw & 0xAA) & ((raw & 0x55) << 1))
        values = gternary.codes(raw).astype(np.float32)
    else:
        values = (1 - 2 * np.unpackbits(raw, bitorder="little").astype(np.int8)).astype(
            np.float32)
    start = data.draw(st.integers(0, 7))
    size = data.draw(st.integers(0, count))
    scale = data.draw(st.sampled_from([0.0, 1.5, 3e-8, np.inf]))
    out = torch.full((size,), 7.0)
    lanes.scaled_values_into(torch.from_numpy(raw), route=route, pieces=[(start, out, scale)])
    with np.errstate(invalid="ignore"):     # a 0 code times an infinite scale is NaN
        expected = values[start:start + size] * np.float32(scale)
    np.testing.assert_array_equal(out.numpy().view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("workers, max_workers", [(1, 16), (2, 16), (3, 16), (4, 16), (5, 16),
                                                 (8, 16), (9, 16), (16, 16), (40, 127),
                                                 (127, 127)])
def test_agreement_sums_are_the_per_lane_sums(workers, max_workers):
    rng = np.random.default_rng(workers)
    lines = rng.integers(0, 256, (workers, 6, 64), dtype=np.uint8)
    lines[workers // 2:, :2] = 0x55  # +1 from half the workers: large sums
    starts, stops = [0, 100, 777, 1500, 3000], [100, 777, 1500, 3000, 3072]
    workspace = lanes.Workspace()
    counts = gbinary.aggregate(lines, max_workers=max_workers).reshape(-1).astype(int)
    expected = [int(np.abs(2 * counts[a:b] - workers).sum()) for a, b in zip(starts, stops)]
    planes = lanes.gbinary_aggregate_planes(torch.from_numpy(lines), max_workers=max_workers)
    for rows in (None, torch.from_numpy(lines)):  # from the planes, or the workers' votes
        got = hooks._agreement_sums(GBINARY, planes, workers, starts, stops, workspace,
                                    rows=rows)
        assert got.tolist() == expected
    sums = gternary.aggregate(lines, max_workers=max_workers).reshape(-1).astype(int)
    starts, stops = [0, 50, 700, 1535], [50, 700, 1535, 1536]
    planes = lanes.gternary_aggregate_planes(torch.from_numpy(lines), max_workers=max_workers)
    got = hooks._agreement_sums(GTERNARY, planes, workers, starts, stops, workspace)
    assert got.tolist() == [int(np.abs(sums[a:b]).sum()) for a, b in zip(starts, stops)]


def test_counter_draws_match_their_numpy_reference():
    key = (7, 3, 1, 2, 0)
    got = lanes.counter_words(key, 1000, first=5).numpy().view(np.uint64)
    np.testing.assert_array_equal(got, lanes.counter_words_numpy(key, 1005)[5:])
    draws = lanes.uniform_draws(key, 2001).numpy()
    np.testing.assert_array_equal(draws, lanes.uniform_draws_numpy(key, 2001))
    assert draws.min() >= 0 and draws.max() < 1 and abs(draws.mean() - 0.5) < 0.03
    np.testing.assert_array_equal(lanes.uniform_draws(key, 100, first=40).numpy(), draws[40:140])


# --------------------------------------------------------------------------- statistics

class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(64))


def test_sum_of_squares_of_a_large_finite_gradient_is_finite(group):
    """A gradient of 1e20 squares beyond float32's range; in float64 its norm is finite, so
    the health monitor does not read it as non-finite, and the slice stays low-bit."""
    model = Wide()
    hook = hooks.FabricHook(model, routes=GBINARY, regions={"weight": "backbone"})
    grad = torch.full((64,), 1e20)
    grad[::2] = -1e20
    hook.run(FakeBucket([model.weight], [grad])).wait()
    _, stats = hook.end_step(0.0)
    assert not stats["backbone"].nonfinite and stats["backbone"].route == GBINARY
    assert stats["backbone"].grad_norm == pytest.approx(8e20)


@pytest.mark.parametrize("size", [0, 1, 1000, 3 * hooks._STAT_CHUNK + 17])
def test_statistics_are_the_float64_sums(group, size):
    """Chunk by chunk in float32, added up in float64: within 1e-6 of the float64 sums."""
    hook = hooks.FabricHook(Wide(), routes=GBINARY, regions={"weight": "backbone"})
    x = torch.from_numpy(np.random.default_rng(size).standard_normal(size).astype(np.float32))
    x[::7] *= 1e3
    sumsq, l1 = torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
    hook._sums(x, sumsq=sumsq, l1=l1)
    wide = x.numpy().astype(np.float64)
    assert float(sumsq) == pytest.approx(float(wide @ wide), rel=1e-6, abs=0)
    assert float(l1) == pytest.approx(float(np.abs(wide).sum()), rel=1e-6, abs=0)


class Slices(torch.nn.Module):
    """Parameters whose slices start and stop inside the pass's chunks and lines."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.zeros(1500))
        self.b = torch.nn.Parameter(torch.zeros(700))
        self.c = torch.nn.Parameter(torch.zeros(3001))
        self.d = torch.nn.Parameter(torch.zeros(1))


@pytest.mark.parametrize("route", [GBINARY, GTERNARY])
@pytest.mark.parametrize("layout", ["back_to_back", "gaps_and_residuals"])
def test_the_pass_over_a_stream_makes_what_the_separate_passes_make(group, monkeypatch, route,
                                                                   layout):
    """The pass over a route's stream, a chunk at a time: p = g + residual, the float64 sums
    of g^2 and |p| per slice, G-Ternary's max |p|, and the G-Binary lines (dithered, and
    this worker's signs before the dither) as the twin encodes the whole stream."""
    from neuron_fabric.host.runtime import FP32, GBinaryOptions

    monkeypatch.setattr(hooks, "_PASS_CHUNK", 1024)  # many chunks, slices across them
    model = Slices()
    names = ["a", "b", "c", "d"]
    routes = {name: route for name in names}
    if layout == "gaps_and_residuals":
        routes["b"] = FP32
    hook = hooks.FabricHook(model, routes=routes, regions={name: "backbone" for name in names},
                            gbinary=GBinaryOptions(dither=True, error_feedback=True))
    rng = np.random.default_rng(3)
    params = [getattr(model, name) for name in names]
    grads = [torch.from_numpy(rng.standard_normal(p.numel()).astype(np.float32)) for p in params]
    grads[2][::5] = 0.0
    bucket = FakeBucket(params, grads)
    flat = bucket.buffer()
    segments = hooks.bucket_segments(bucket, hook._names)
    indices = [i for i, name in enumerate(names) if routes[name] == route]
    if layout == "gaps_and_residuals":
        for i in indices[::2]:
            hook._residual[names[i]] = torch.from_numpy(
                rng.standard_normal(params[i].numel()).astype(np.float32))
    local = torch.zeros((len(names), hooks.CONTROL_VALUES_PER_PARAMETER), dtype=torch.float64)
    done = hook._stream_pass(route, flat, segments, indices, local, bucket_index=0)

    p = [grads[i] + hook._residual[names[i]] if names[i] in hook._residual else grads[i]
         for i in indices]
    stream = torch.cat(p)
    assert torch.equal(done.stream, stream)
    for k, i in enumerate(indices):
        g = grads[i].numpy().astype(np.float64)
        assert float(local[i, 2]) == pytest.approx(float(g @ g), rel=1e-6, abs=0)
        assert float(local[i, 1]) == pytest.approx(float(np.abs(p[k].numpy().astype(np.float64))
                                                         .sum()), rel=1e-6, abs=0)
    assert not local[[i for i in range(len(names)) if i not in indices]].any()
    if route == GTERNARY:
        assert done.peak == float(stream.abs().max()) and done.lines is None
        return
    same(gbinary.encode(stream.numpy()), done.own.view(-1, 64))
    flip = np.unpackbits(done.flip.numpy(), bitorder="little")[:stream.numel()]
    same(gbinary.encode(stream.numpy() * (1 - 2 * flip.astype(np.float32))), done.lines)


# --------------------------------------------------------------------------- training

@pytest.fixture(scope="module")
def lockstep():
    """Steps of the two-worker training through the golden, torch and bugged torch lanes."""
    import torch.multiprocessing as mp

    from neuron_fabric.experiments.workers import launch

    queue = mp.get_context("spawn").SimpleQueue()
    steps = []

    def drain():
        while not queue.empty():
            steps.append(queue.get())

    launch(worker_bodies.train_golden_and_torch, workers=2, args=(queue, 5), poll=drain,
           timeout_s=300)
    return steps


def test_training_through_the_torch_lanes_is_bit_identical_to_the_golden_lanes(lockstep):
    assert [step for step, _, _ in lockstep] == list(range(5))
    assert all(twin == [] for _, twin, _ in lockstep), lockstep


def test_training_catches_a_tie_resolved_the_other_way(lockstep):
    assert lockstep[0][2], "the bugged twin trained bit-identical to the golden lanes"


# --------------------------------------------------------------------------- CUDA

@CUDA
def test_the_twin_on_cuda_matches_golden():
    rng = np.random.default_rng(0)
    grad = rng.standard_normal(5000).astype(np.float32)
    cuda = torch.from_numpy(grad).cuda()
    same(gbinary.encode(grad), lanes.gbinary_encode(cuda))
    same(gternary.encode(grad, ratio=0.05), lanes.gternary_encode(cuda, ratio=0.05))
    draws = rng.random(5000, dtype=np.float32)
    same(gternary.encode(grad, ratio=0.0, draws=draws),
         lanes.gternary_encode(cuda, ratio=0.0, draws=torch.from_numpy(draws).cuda()))
    for module, fold, read, readouts, arg in (
            (gbinary, lanes.gbinary_aggregate_planes, lanes.gbinary_readout_planes,
             (Readout.SIGN, Readout.TERNARY), {"num_workers": 4}),
            (gternary, lanes.gternary_aggregate_planes, lanes.gternary_readout_planes,
             (Readout.GATED,), {"gate": 2})):
        lines = rng.integers(0, 256, (4, 7, 64), dtype=np.uint8)
        golden = module.aggregate_planes(lines, max_workers=16)
        twin = fold(torch.from_numpy(lines).cuda(), max_workers=16)
        same(golden, twin)
        for readout in readouts:
            same(module.readout_planes(golden, readout=readout, **arg),
                 read(twin, readout=readout, **arg))
    key = (1, 2, 3)
    np.testing.assert_array_equal(lanes.counter_words(key, 999, device="cuda").cpu().numpy()
                                  .view(np.uint64), lanes.counter_words_numpy(key, 999))


@CUDA
def test_the_hook_runs_on_a_cuda_bucket_as_on_the_cpu(group):
    model = Wide()
    grad = torch.from_numpy(np.random.default_rng(1).standard_normal(64).astype(np.float32))
    results = []
    for device in ("cpu", "cuda"):
        hook = hooks.FabricHook(model, routes=GBINARY, regions={"weight": "backbone"})
        bucket = FakeBucket([model.weight], [grad.to(device)])
        results.append(hook.run(bucket).wait().cpu())
    assert torch.equal(results[0].view(torch.int32), results[1].view(torch.int32))


