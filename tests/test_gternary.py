"""G-Ternary golden model (docs/design.md, "G-Ternary"): ternarize, encode, aggregate, readouts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_fabric.golden import gbinary, gternary, lines
from neuron_fabric.golden.formats import Readout, count_limit, default_counter_bits, sum_limit

LINE_BITS = (128, 256, 512, 1024)
PROPERTY = settings(max_examples=40, deadline=None)
CODE_OF = {0: 0b00, 1: 0b01, -1: 0b11}


# --------------------------------------------------------------------------- references

def ref_ternarize(grad, ratio):
    """Deterministic rule, element by element in float64 (exact for the values used here)."""
    flat = np.ravel(grad).astype(np.float64)
    tau = ratio * np.max(np.abs(flat)) if flat.size else 0.0
    return np.array([np.sign(g) if abs(g) >= tau else 0 for g in flat], dtype=np.int8)


def ref_pack_codes(values, line_bits):
    """Ternary values to lines through a Python integer per line."""
    lanes = line_bits // 2
    n_lines = -(-len(values) // lanes)
    out = []
    for k in range(n_lines):
        acc = 0
        for i, v in enumerate(values[k * lanes:(k + 1) * lanes]):
            acc |= CODE_OF[int(v)] << (2 * i)
        out.append(lines.int_to_line(acc, line_bits=line_bits))
    return np.array(out, dtype=np.uint8).reshape(n_lines, line_bits // 8)


def ref_aggregate(code_values, limit):
    """Step-wise saturating sum in worker order, lane by lane in plain Python.

    ``code_values`` is ``(workers, lanes)`` of -1/0/+1 and -2 (invalid, counts as 0).
    """
    workers, n_lanes = code_values.shape
    sums, saturated = [], []
    for lane in range(n_lanes):
        s, sat = 0, False
        for w in range(workers):
            v = int(code_values[w, lane])
            s += 0 if v == -2 else v
            if abs(s) > limit:
                sat = True
                s = max(-limit, min(limit, s))
        sums.append(s)
        saturated.append(sat)
    return np.array(sums), np.array(saturated)


def random_codes(rng, shape, p_invalid=0.0):
    """Random 2-bit codes (as lane values 0, 1, -1, -2) with a given share of invalid ones."""
    values = rng.integers(-1, 2, size=shape).astype(np.int8)
    values[rng.random(shape) < p_invalid] = -2
    return values


def pack(values, line_bits):
    """Lane values (..., n_lines * lanes) to lines (..., n_lines, line_bytes)."""
    packed = lines.pack_lanes(values, lane_bits=2)
    return packed.reshape(*values.shape[:-1], -1, line_bits // 8)


# --------------------------------------------------------------------------- deterministic ternarize

def test_threshold_keeps_sign_where_abs_reaches_tau():
    grad = np.array([4.0, -2.0, 1.0, -1.0, 0.5, 0.0, -4.0, -0.75], dtype=np.float32)
    # tau = 0.25 * 4 = 1
    assert gternary.ternarize(grad, ratio=0.25).tolist() == [1, -1, 1, -1, 0, 0, -1, 0]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_boundary_abs_equal_to_tau_is_kept(dtype):
    below = np.nextafter(dtype(1.0), dtype(0.0))
    grad = np.array([2.0, 1.0, -1.0, below, -below], dtype=dtype)
    got = gternary.ternarize(grad, ratio=0.5)  # tau = 1.0 exactly
    assert got.dtype == np.int8
    assert got.tolist() == [1, 1, -1, 0, 0]


def test_threshold_is_exact_whatever_the_ratio_type():
    grad = np.array([0.7, 1.0], dtype=np.float32)  # float32(0.7) is below 0.7 * 1.0
    expected = [0, 1]
    assert gternary.ternarize(grad.astype(np.float64), ratio=0.7).tolist() == expected
    assert gternary.ternarize(grad, ratio=np.float64(0.7)).tolist() == expected
    assert gternary.ternarize(grad, ratio=0.7).tolist() == expected


@pytest.mark.parametrize("seed", [0, 1, 2], ids=lambda s: f"seed{s}")
def test_ratio_zero_keeps_every_sign(seed):
    rng = np.random.default_rng(seed)
    grad = rng.standard_normal(1000).astype(np.float32)
    grad[::10] = 0.0
    grad[5::10] = -0.0
    grad[3] = 1e-45  # denormals keep their sign too
    grad[4] = -1e-45
    np.testing.assert_array_equal(gternary.ternarize(grad, ratio=0), np.sign(grad).astype(np.int8))
    np.testing.assert_array_equal(gternary.ternarize(grad, ratio=0.0), np.sign(grad).astype(np.int8))


def test_ratio_one_keeps_only_the_peak_magnitude():
    grad = np.array([3.0, -3.0, 2.9, -1.0, 0.0], dtype=np.float32)
    assert gternary.ternarize(grad, ratio=1).tolist() == [1, -1, 0, 0, 0]


@pytest.mark.parametrize("ratio", [0.0, 0.3, 1.0])
def test_all_zero_input_gives_zero(ratio):
    grad = np.array([0.0, -0.0] * 50, dtype=np.float32)
    assert not gternary.ternarize(grad, ratio=ratio).any()
    assert not gternary.ternarize(grad, ratio=ratio, rng=np.random.default_rng(0)).any()
    assert not gternary.encode(grad, ratio=ratio, line_bits=128).any()


def test_infinities_keep_their_sign_and_make_tau_infinite():
    grad = np.array([np.inf, -np.inf, 5.0, -3.0, 0.0], dtype=np.float32)
    assert gternary.ternarize(grad, ratio=0.5).tolist() == [1, -1, 0, 0, 0]
    assert gternary.ternarize(grad, ratio=0).tolist() == [1, -1, 1, -1, 0]


def test_empty_gradient():
    assert gternary.ternarize(np.zeros(0, dtype=np.float32), ratio=0.5).shape == (0,)
    assert gternary.encode(np.zeros(0, dtype=np.float32), ratio=0.5, line_bits=128).shape == (0, 16)


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("ratio", [0.0, 0.125, 0.5, 1.0])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_ternarize_matches_elementwise_reference(dtype, ratio, seed):
    grad = np.random.default_rng(seed).standard_normal((4, 50)).astype(dtype)
    got = gternary.ternarize(grad, ratio=ratio)
    assert got.shape == (200,) and got.dtype == np.int8  # flattened, C order
    np.testing.assert_array_equal(got, ref_ternarize(grad, ratio))


def test_ternarize_spans_several_internal_chunks():
    # chunks of gternary._CHUNK elements inside the golden model: 3 whole ones and a partial one
    grad = np.random.default_rng(4).standard_normal(3 * gternary._CHUNK + 1234).astype(np.float32)
    tau = 0.25 * float(np.abs(grad).max())
    expected = (np.sign(grad) * (np.abs(grad.astype(np.float64)) >= tau)).astype(np.int8)
    np.testing.assert_array_equal(gternary.ternarize(grad, ratio=0.25), expected)


# --------------------------------------------------------------------------- argument checks

@pytest.mark.parametrize("shape,index,flat", [((10,), (5,), 5), ((3, 4), (2, 1), 9)])
@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
def test_nan_is_refused_naming_nan_and_its_flat_index(shape, index, flat, stochastic):
    grad = np.ones(shape, dtype=np.float32)
    grad[index] = np.nan
    grad.reshape(-1)[-1] = np.nan
    grad.reshape(-1)[0] = np.inf
    rng = np.random.default_rng(0) if stochastic else None
    with pytest.raises(ValueError, match=rf"NaN \(first at flat index {flat}\)"):
        gternary.ternarize(grad, ratio=0.5, rng=rng)
    with pytest.raises(ValueError, match=rf"NaN \(first at flat index {flat}\)"):
        gternary.encode(grad, ratio=0.5, rng=rng)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, bool])
def test_non_float_dtype_is_a_type_error(dtype):
    with pytest.raises(TypeError, match=f"^grad must be a floating-point array, not dtype {np.dtype(dtype)}$"):
        gternary.ternarize(np.zeros(8, dtype=dtype), ratio=0.5)


@pytest.mark.parametrize("ratio", [-0.1, 1.5, 2, float("nan"), float("inf")])
def test_ratio_outside_zero_to_one_is_a_value_error(ratio):
    with pytest.raises(ValueError, match=f"^ratio must be between 0 and 1, not {ratio!r}$"):
        gternary.ternarize(np.ones(4, dtype=np.float32), ratio=ratio)


@pytest.mark.parametrize("ratio", ["0.5", True, None, [0.5]])
def test_ratio_of_wrong_type_is_a_type_error(ratio):
    with pytest.raises(TypeError, match=f"^ratio must be a real number, not {ratio!r}$".replace("[", r"\[")
                       .replace("]", r"\]")):
        gternary.ternarize(np.ones(4, dtype=np.float32), ratio=ratio)


@pytest.mark.parametrize("rng,name", [(42, "int"), (np.random.RandomState(0), "RandomState"),
                                      (np.random.PCG64(0), "PCG64")])
def test_rng_of_wrong_type_is_a_type_error(rng, name):
    message = (r"^rng must be a numpy\.random\.Generator \(for example numpy\.random\.default_rng\(seed\)\), "
               f"not {name}$")
    with pytest.raises(TypeError, match=message):
        gternary.ternarize(np.ones(4, dtype=np.float32), ratio=0, rng=rng)
    with pytest.raises(TypeError, match=message):
        gternary.encode(np.ones(4, dtype=np.float32), ratio=0, rng=rng)


@pytest.mark.parametrize("scale", [-1.0, float("inf"), float("nan")])
def test_bad_scale_is_a_value_error(scale):
    with pytest.raises(ValueError, match=f"^scale must be a finite number >= 0, not {scale!r}$"):
        gternary.ternarize(np.ones(4, dtype=np.float32), ratio=0, rng=np.random.default_rng(0), scale=scale)


# --------------------------------------------------------------------------- stochastic ternarize

def test_stochastic_is_reproducible_with_the_same_seed_and_differs_with_another():
    grad = np.random.default_rng(9).standard_normal(5000).astype(np.float32)
    a = gternary.ternarize(grad, ratio=0, rng=np.random.default_rng(123))
    b = gternary.ternarize(grad, ratio=0, rng=np.random.default_rng(123))
    c = gternary.ternarize(grad, ratio=0, rng=np.random.default_rng(124))
    np.testing.assert_array_equal(a, b)
    assert (a != c).sum() > 100
    np.testing.assert_array_equal(gternary.encode(grad, ratio=0, line_bits=256, rng=np.random.default_rng(123)),
                                  gternary.encode(grad, ratio=0, line_bits=256, rng=np.random.default_rng(123)))


@pytest.mark.parametrize("seed", [1, 2], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("scale", [None, 2.0])
@pytest.mark.parametrize("ratio", [0.0, 0.25])
def test_stochastic_keeps_element_j_when_draw_j_times_scale_is_below_its_magnitude(ratio, scale, seed):
    grad = np.random.default_rng(77).standard_normal(3 * gternary._CHUNK + 999).astype(np.float32)  # several chunks
    s = float(np.abs(grad).max()) if scale is None else scale
    draws = np.random.default_rng(seed).random(grad.size, dtype=np.float32)
    kept = draws * np.float32(s) < np.abs(grad)
    expected = (np.sign(grad) * kept * (np.abs(grad.astype(np.float64)) >= ratio * np.abs(grad).max()))
    got = gternary.ternarize(grad, ratio=ratio, rng=np.random.default_rng(seed), scale=scale)
    np.testing.assert_array_equal(got, expected.astype(np.int8))


@pytest.mark.parametrize("size", [1, 7, 1000, gternary._CHUNK + 3])
@pytest.mark.parametrize("ratio,scale", [(0.0, None), (0.5, None), (0.0, 3.0)])
def test_stochastic_takes_exactly_size_float32_draws(size, ratio, scale):
    grad = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    for function in (gternary.ternarize, gternary.encode):
        rng = np.random.default_rng(2024)
        function(grad, ratio=ratio, rng=rng, scale=scale)
        fresh = np.random.default_rng(2024)
        fresh.random(size, dtype=np.float32)
        assert rng.bit_generator.state == fresh.bit_generator.state
        assert rng.random() == fresh.random()


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("scale", [None, 1.0])
def test_stochastic_is_unbiased_for_ratio_zero(seed, scale):
    samples = 20000
    values = np.linspace(-1.0, 1.0, 21).astype(np.float32)  # the peak is 1.0, so s = 1 either way
    grad = np.repeat(values, samples)
    got = gternary.ternarize(grad, ratio=0, rng=np.random.default_rng(seed), scale=scale)
    mean = got.reshape(values.size, samples).mean(axis=1)  # E[s * t] with s = 1
    p = np.abs(values.astype(np.float64))
    # five standard errors of a mean of `samples` draws of s * t (variance p(1 - p) around g)
    tolerance = 5 * np.sqrt(p * (1 - p) / samples) + 1e-6
    assert (np.abs(mean - values) <= tolerance).all(), np.c_[values, mean, tolerance]


@pytest.mark.parametrize("scale", [1.0, 3.0, 0.1, 6.0, 1000.5])
def test_stochastic_keeps_with_probability_one_at_or_above_scale(scale):
    grad = np.concatenate([np.full(60000, scale), np.full(60000, -scale), np.full(1000, 2 * scale),
                           [np.inf, -np.inf]]).astype(np.float32)
    for seed in range(3):
        got = gternary.ternarize(grad, ratio=0, rng=np.random.default_rng(seed), scale=np.float32(scale))
        np.testing.assert_array_equal(got, np.sign(grad).astype(np.int8))


@pytest.mark.parametrize("seed", [3, 4], ids=lambda s: f"seed{s}")
def test_stochastic_keep_probability_is_exact_on_the_draw_grid(seed):
    # With s = 1 an element is kept when its draw u is strictly below |g|: P = |g| exactly for
    # |g| on the float32 draw grid. Magnitudes equal to their own draw are therefore dropped,
    # and magnitudes one step above their draw are kept.
    draws = np.random.default_rng(seed).random(5000, dtype=np.float32)
    draws[draws == 0] = 0.5  # a zero magnitude encodes as 0 whatever its draw
    sign = np.where(np.arange(draws.size) % 2, -1, 1).astype(np.float32)
    at_draw = sign * draws
    got = gternary.ternarize(at_draw, ratio=0, rng=np.random.default_rng(seed), scale=1.0)
    assert not got[draws != 0.5].any()
    above = sign * np.nextafter(draws, np.float32(2))
    got = gternary.ternarize(above, ratio=0, rng=np.random.default_rng(seed), scale=1.0)
    assert (got[draws != 0.5] == sign[draws != 0.5]).all()


def test_stochastic_keeps_the_peak_with_probability_one_when_scale_is_the_peak():
    grad = np.full(100000, -0.3, dtype=np.float32)
    got = gternary.ternarize(grad, ratio=0, rng=np.random.default_rng(5))
    assert (got == -1).all()


def test_stochastic_drops_elements_below_tau():
    grad = np.array([1.0, 0.2, -0.2, -1.0] * 1000, dtype=np.float32)
    got = gternary.ternarize(grad, ratio=0.5, rng=np.random.default_rng(0), scale=0.01)
    assert got.tolist() == [1, 0, 0, -1] * 1000


# --------------------------------------------------------------------------- encode and codes

def test_encode_hand_built_codes():
    grad = np.array([1.0, -1.0, 0.0, 2.0, -0.0, -3.0], dtype=np.float32)
    got = gternary.encode(grad, ratio=0, line_bits=128)
    assert got.shape == (1, 16)
    assert got[0, 0] == 0b01_00_11_01  # lanes 3..0: +1, 0, -1, +1
    assert got[0, 1] == 0b00_00_11_00  # lanes 7..4: pad, pad, -1, 0
    assert not got[0, 2:].any()


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_element_j_goes_to_lane_j_mod_l_of_line_j_div_l(line_bits, seed):
    rng = np.random.default_rng(seed)
    lanes = line_bits // 2
    size = 3 * lanes - 7  # the last line has padding lanes
    grad = rng.standard_normal(size).astype(np.float32)
    grad[::9] = 0.0
    got = gternary.encode(grad, ratio=0.25, line_bits=line_bits)
    values = gternary.ternarize(grad, ratio=0.25)
    np.testing.assert_array_equal(got, ref_pack_codes(values, line_bits))
    ints = [lines.line_to_int(line) for line in got]
    for j in range(size):
        assert (ints[j // lanes] >> (2 * (j % lanes))) & 3 == CODE_OF[int(values[j])]


@pytest.mark.parametrize("size", [1, 63, 65, 200])
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_padding_lanes_are_zero_code(line_bits, size):
    grad = -np.ones(size, dtype=np.float32)  # every real lane is 11
    got = gternary.encode(grad, ratio=0, line_bits=line_bits)
    lanes = line_bits // 2
    assert got.shape == (-(-size // lanes), line_bits // 8)
    values = lines.unpack_lanes(got.reshape(-1), lane_bits=2)
    assert (values[:size] == 0b11).all() and not values[size:].any()


def test_encode_spans_several_internal_chunks():
    grad = np.random.default_rng(8).standard_normal(2 * gternary._CHUNK + 333).astype(np.float32)
    for line_bits in (128, 1024):
        got = gternary.encode(grad, ratio=0.5, line_bits=line_bits)
        expected = lines.pack_lanes(lines.to_lane_grid(ref_ternarize(grad, 0.5), lanes=line_bits // 2),
                                    lane_bits=2)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(gternary.codes(got).reshape(-1)[:grad.size], ref_ternarize(grad, 0.5))


@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
@pytest.mark.parametrize("ratio", [0.0, 0.125, 0.5, 1.0])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.longdouble])
def test_encode_packs_exactly_what_ternarize_gives(dtype, ratio, stochastic):
    # The encoder compares and packs in one compiled loop (NumPy for longdouble); ternarize
    # keeps NumPy's masks. Values at and just below the threshold, signed zeros, the
    # smallest subnormals, values equal to their draw, and a size that leaves a partial
    # last word.
    rng = np.random.default_rng(int(ratio * 8) + 10 * stochastic)
    grad = np.clip(rng.standard_normal(1000 + 17), -3, 3).astype(dtype)
    grad[0] = 4.0  # the peak, and the stochastic scale: tau = ratio * 4
    tau = dtype(ratio * 4.0)
    below = np.nextafter(tau, dtype(0))
    grad[1:9] = [tau, -tau, below, -below, 0.0, -0.0, np.finfo(dtype).smallest_subnormal,
                 -np.finfo(dtype).smallest_subnormal]
    seed = 5 if stochastic else None
    if stochastic:  # kept only where the scaled draw is below |g|: not where they are equal
        scaled = np.random.default_rng(seed).random(grad.size, dtype=np.float32) * np.float32(4.0)
        grad[10:40] = scaled[10:40] * np.where(np.arange(30) % 2, 1, -1)
    draws = lambda: np.random.default_rng(seed) if stochastic else None
    expected = ref_pack_codes(gternary.ternarize(grad, ratio=ratio, rng=draws()), 128)
    np.testing.assert_array_equal(gternary.encode(grad, ratio=ratio, line_bits=128, rng=draws()), expected)


def test_encode_refuses_a_bad_line_width():
    with pytest.raises(ValueError, match=r"^line_bits must be one of \(128, 256, 512, 1024\), not 96$"):
        gternary.encode(np.ones(4, dtype=np.float32), ratio=0, line_bits=96)


def test_codes_and_invalid_lanes():
    line = np.zeros((1, 16), dtype=np.uint8)
    line[0, 0] = 0b10_11_01_00  # lanes 0..3: 00, 01, 11, 10
    assert gternary.codes(line)[0, :4].tolist() == [0, 1, -1, -2]
    assert gternary.invalid_lanes(line)[0, :4].tolist() == [False, False, False, True]
    assert gternary.invalid_lanes(line).shape == (1, 64)
    assert gternary.INVALID_CODE == 0b10


# --------------------------------------------------------------------------- aggregate

def test_invalid_code_counts_as_zero_and_is_flagged_per_worker_and_lane():
    worker_values = np.zeros((2, 64), dtype=np.int8)
    worker_values[0, :4] = [-2, 1, -1, 0]
    worker_values[1, :4] = [1, -2, 1, -1]
    sums, flags = gternary.aggregate(pack(worker_values, 128), max_workers=4, return_flags=True)
    assert sums.dtype == np.int8 and sums.shape == (1, 64)
    assert sums[0, :4].tolist() == [1, 1, 0, -1]
    assert not sums[0, 4:].any()
    invalid = flags["invalid"]
    assert invalid.shape == (2, 1, 64) and invalid.dtype == bool
    assert invalid[0, 0, :4].tolist() == [True, False, False, False]
    assert invalid[1, 0, :4].tolist() == [False, True, False, False]
    assert invalid.sum() == 2
    assert not flags["saturated"].any() and flags["saturated"].shape == (1, 64)


@PROPERTY
@given(workers=st.integers(min_value=1, max_value=20), line_bits=st.sampled_from(LINE_BITS),
       n_lines=st.integers(min_value=1, max_value=2), p_invalid=st.sampled_from([0.0, 0.05, 0.5]),
       seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_aggregate_equals_reference_sum(workers, line_bits, n_lines, p_invalid, seed):
    rng = np.random.default_rng(seed)
    values = random_codes(rng, (workers, n_lines * line_bits // 2), p_invalid)
    sums, flags = gternary.aggregate(pack(values, line_bits), max_workers=workers, return_flags=True)
    assert sums.shape == (n_lines, line_bits // 2)
    expected = np.where(values == -2, 0, values).sum(axis=0)
    np.testing.assert_array_equal(sums.reshape(-1), expected)
    np.testing.assert_array_equal(flags["invalid"].reshape(workers, -1), values == -2)
    assert not flags["saturated"].any()


@PROPERTY
@given(workers=st.integers(min_value=1, max_value=40), max_workers=st.integers(min_value=1, max_value=127),
       narrow=st.integers(min_value=0, max_value=6), line_bits=st.sampled_from((128, 256)),
       bias=st.sampled_from([0.0, 0.3, 0.8]), p_invalid=st.sampled_from([0.0, 0.1]),
       seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_aggregate_saturates_step_wise_like_the_reference(workers, max_workers, narrow, line_bits, bias,
                                                          p_invalid, seed):
    rng = np.random.default_rng(seed)
    full = default_counter_bits(max_workers)
    counter_bits = max(1, full - narrow) if narrow else None
    limit = sum_limit(max_workers, counter_bits or full)
    shape = (workers, line_bits // 2)
    # biased runs of one sign then the other reach the limit and come back
    values = np.where(rng.random(shape) < bias, np.where(np.arange(workers)[:, None] < workers // 2, 1, -1),
                      random_codes(rng, shape, p_invalid)).astype(np.int8)
    sums, flags = gternary.aggregate(pack(values, line_bits), max_workers=max_workers,
                                     counter_bits=counter_bits, return_flags=True)
    expected, saturated = ref_aggregate(values, limit)
    np.testing.assert_array_equal(sums[0], expected)
    np.testing.assert_array_equal(flags["saturated"][0], saturated)
    np.testing.assert_array_equal(gternary.aggregate(pack(values, line_bits), max_workers=max_workers,
                                                     counter_bits=counter_bits), sums)


def test_saturation_is_applied_after_each_worker_more_workers_than_max():
    # max_workers 2: sums stay in [-2, 2]
    worker_values = np.zeros((5, 64), dtype=np.int8)
    worker_values[:, 0] = [1, 1, 1, -1, -1]     # 1, 2, 2 (saturated), 1, 0   -- clipped total 1
    worker_values[:, 1] = [-1, -1, -1, 1, 1]    # -1, -2, -2 (saturated), -1, 0  -- clipped total -1
    worker_values[:, 2] = [1, 1, -1, -1, -1]    # 1, 2, 1, 0, -1: never beyond the limit
    worker_values[:, 3] = [1, 1, 1, 1, 1]       # 2, saturated
    worker_values[:, 4] = [-2, 1, 1, 1, -1]     # 0, 1, 2, 2 (saturated), 1 -- clipped total 2
    sums, flags = gternary.aggregate(pack(worker_values, 128), max_workers=2, return_flags=True)
    assert sums[0, :6].tolist() == [0, 0, -1, 2, 1, 0]
    assert flags["saturated"][0, :6].tolist() == [True, True, False, True, True, False]
    assert flags["invalid"][:, 0, 4].tolist() == [True, False, False, False, False]
    clipped = np.clip(np.where(worker_values == -2, 0, worker_values).sum(axis=0), -2, 2)
    assert (sums[0] != clipped).any()  # the case really tells step-wise from clipping the total


def test_saturation_is_applied_after_each_worker_narrow_counter():
    # max_workers 7 with a 2-bit counter: sums stay in [-3, 3]
    worker_values = np.zeros((7, 64), dtype=np.int8)
    worker_values[:, 0] = [1, 1, 1, 1, 1, -1, -1]    # 1, 2, 3, 3, 3, 2, 1 -- clipped total 3
    worker_values[:, 1] = [-1, -1, -1, -1, -1, 1, 1]  # ... -1 -- clipped total -3
    worker_values[:, 2] = [1, -1, 1, -1, 1, -1, 1]   # 1
    worker_values[:, 3] = [1, 1, 1, 0, 0, 0, 0]      # reaches the limit without passing it
    sums, flags = gternary.aggregate(pack(worker_values, 128), max_workers=7, counter_bits=2,
                                     return_flags=True)
    assert sums[0, :5].tolist() == [1, -1, 1, 3, 0]
    assert flags["saturated"][0, :5].tolist() == [True, True, False, False, False]


def test_aggregate_reaches_plus_and_minus_max_workers():
    for max_workers in (1, 5, 64, 127):
        plus = np.full((max_workers, 1, 16), 0b01010101, dtype=np.uint8)
        minus = np.full((max_workers, 1, 16), 0b11111111, dtype=np.uint8)
        assert (gternary.aggregate(plus, max_workers=max_workers) == max_workers).all()
        assert (gternary.aggregate(minus, max_workers=max_workers) == -max_workers).all()


@pytest.mark.parametrize("workers", [1, 3, 16])
def test_aggregate_spans_several_internal_chunks(workers):
    rng = np.random.default_rng(workers)
    n_lines = 2 * gbinary._CHUNK_WORDS // 8 + 3  # more than two chunks of 64-bit words
    values = random_codes(rng, (workers, n_lines * 256), 0.05)
    sums, flags = gternary.aggregate(pack(values, 512), max_workers=16, return_flags=True)
    np.testing.assert_array_equal(sums.reshape(-1), np.where(values == -2, 0, values).sum(axis=0))
    np.testing.assert_array_equal(flags["invalid"].reshape(workers, -1), values == -2)


def test_aggregate_of_no_workers_is_zero():
    sums = gternary.aggregate(np.zeros((0, 2, 16), dtype=np.uint8), max_workers=4)
    assert sums.shape == (2, 64) and not sums.any()


def test_aggregate_refuses_bad_arguments():
    good = np.zeros((2, 1, 16), dtype=np.uint8)
    with pytest.raises(ValueError, match="^max_workers must be between 1 and 127, not 0$"):
        gternary.aggregate(good, max_workers=0)
    with pytest.raises(ValueError, match="^max_workers must be between 1 and 127, not 128$"):
        gternary.aggregate(good, max_workers=128)
    with pytest.raises(ValueError, match="^counter_bits must be between 1 and 3, not 4$"):
        gternary.aggregate(good, max_workers=4, counter_bits=4)
    with pytest.raises(ValueError, match="^counter_bits must be between 1 and 3, not 0$"):
        gternary.aggregate(good, max_workers=4, counter_bits=0)
    with pytest.raises(TypeError, match="^lines must have dtype uint8, not int16$"):
        gternary.aggregate(good.astype(np.int16), max_workers=4)
    with pytest.raises(ValueError, match=r"^lines must have 3 axes, not shape \(1, 16\)$"):
        gternary.aggregate(good[0], max_workers=4)


# --------------------------------------------------------------------------- gate

def test_gate_table():
    sums = np.arange(-5, 6, dtype=np.int8)[None]
    sign = np.sign(np.arange(-5, 6))
    assert gternary.gate(sums, gate=0)[0].tolist() == sign.tolist()
    assert gternary.gate(sums, gate=1)[0].tolist() == sign.tolist()
    assert gternary.gate(sums, gate=3)[0].tolist() == [-1, -1, -1, 0, 0, 0, 0, 0, 1, 1, 1]
    assert gternary.gate(sums, gate=5)[0].tolist() == [-1] + [0] * 9 + [1]
    assert not gternary.gate(sums, gate=6).any()


def test_gate_at_the_int8_extremes():
    sums = np.array([[-128, -127, 127, 0]], dtype=np.int8)
    assert gternary.gate(sums, gate=127)[0].tolist() == [-1, -1, 1, 0]
    assert gternary.gate(sums, gate=128)[0].tolist() == [-1, 0, 0, 0]
    assert not gternary.gate(sums, gate=129).any()
    assert not gternary.gate(sums, gate=255).any()


@PROPERTY
@given(gate=st.integers(min_value=0, max_value=255), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_gate_is_sign_where_magnitude_reaches_gate(gate, seed):
    sums = np.random.default_rng(seed).integers(-128, 128, size=(2, 64)).astype(np.int8)
    got = gternary.gate(sums, gate=gate)
    assert got.dtype == np.int8 and got.shape == sums.shape
    wide = sums.astype(np.int64)
    np.testing.assert_array_equal(got, np.where(np.abs(wide) >= gate, np.sign(wide), 0))


@pytest.mark.parametrize("gate,error,message", [
    (-1, ValueError, "gate must be between 0 and 255, not -1"),
    (256, ValueError, "gate must be between 0 and 255, not 256"),
    (1.0, TypeError, "gate must be an integer, not 1.0"),
    (True, TypeError, "gate must be an integer, not True"),
])
def test_bad_gate_is_refused(gate, error, message):
    sums = np.zeros((1, 64), dtype=np.int8)
    with pytest.raises(error, match=f"^{message}$"):
        gternary.gate(sums, gate=gate)
    with pytest.raises(error, match=f"^{message}$"):
        gternary.readout(sums, readout=Readout.GATED, gate=gate, counter_bits=3)


def test_gate_refuses_sums_of_wrong_dtype():
    with pytest.raises(TypeError, match="^sums must be a 2-D numpy.ndarray of integers, not a 2-D float64 array$"):
        gternary.gate(np.zeros((1, 64), dtype=np.float64), gate=1)
    with pytest.raises(TypeError, match="^sums must be a 2-D numpy.ndarray of integers, not a 3-D int8 array$"):
        gternary.gate(np.zeros((1, 1, 64), dtype=np.int8), gate=1)


# --------------------------------------------------------------------------- readouts

def test_gated_readout_hand_built():
    sums = np.zeros((1, 64), dtype=np.int8)
    sums[0, [0, 1, 2, 3, 63]] = [3, -2, 1, -5, -2]
    got = gternary.readout(sums, readout=Readout.GATED, gate=2, counter_bits=3)
    assert got.shape == (1, 16)
    expected = np.zeros(16, dtype=np.uint8)
    expected[0] = 0b11_00_11_01   # lanes 3..0: -1, 0 (|1| < 2), -1, +1
    expected[15] = 0b11_00_00_00  # lane 63: -1
    np.testing.assert_array_equal(got[0], expected)


def test_sums_readout_hand_built_4_bit_sums():
    sums = np.zeros((1, 64), dtype=np.int8)
    sums[0, [0, 1, 31, 32, 63]] = [-1, 3, -7, 7, -4]  # 1111, 0011, 1001, 0111, 1100
    got = gternary.readout(sums, readout=Readout.SUMS, gate=0, counter_bits=3)
    assert got.shape == (2, 16)  # 3 + 1 bits, 2 a line
    expected = np.zeros((2, 16), dtype=np.uint8)
    # line 0, bits 1 and 0 of each sum; lane t at line bits 2t + 1, 2t
    expected[0, 0], expected[0, 7], expected[0, 8] = 0b00_00_11_11, 0b01_00_00_00, 0b11
    # line 1, bits 3 and 2
    expected[1, 0], expected[1, 7], expected[1, 8], expected[1, 15] = 0b11, 0b10_00_00_00, 0b01, 0b11_00_00_00
    np.testing.assert_array_equal(got, expected)


def test_sums_readout_hand_built_5_bit_sums_repeat_the_sign():
    sums = np.zeros((1, 64), dtype=np.int8)
    sums[0, [0, 1, 63]] = [-11, 9, -1]  # 1_0101, 0_1001, 1_1111
    got = gternary.readout(sums, readout=Readout.SUMS, gate=0, counter_bits=4)
    assert got.shape == (3, 16)  # 4 + 1 bits: the third line's high bits repeat bit 4
    expected = np.zeros((3, 16), dtype=np.uint8)
    expected[:, 15] = 0b11_00_00_00  # -1: every digit 11
    expected[0, 0] = 0b00_00_01_01   # bits 1, 0: 01 (lane 1), 01 (lane 0)
    expected[1, 0] = 0b00_00_10_01   # bits 3, 2: 10, 01
    expected[2, 0] = 0b00_00_00_11   # sign repeated, bit 4: 00 (9 >= 0), 11 (-11 < 0)
    np.testing.assert_array_equal(got, expected)


def sum_bit(value, j, counter_bits):
    """Bit ``j`` of a sum in ``counter_bits + 1``-bit two's complement; past it, the sign bit."""
    return ((value % (1 << (counter_bits + 1))) >> min(j, counter_bits)) & 1


@pytest.mark.parametrize("counter_bits", range(1, 8))
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_sums_readout_line_k_holds_bits_2k_and_2k_plus_1_of_every_sum(line_bits, counter_bits):
    rng = np.random.default_rng(line_bits + counter_bits)
    limit = min(count_limit(counter_bits), 127)
    sums = rng.integers(-limit, limit + 1, size=(2, line_bits // 2)).astype(np.int8)
    sums[0, :2] = [-limit, limit]
    got = gternary.readout(sums, readout=Readout.SUMS, gate=0, counter_bits=counter_bits)
    per_slot = -(-(counter_bits + 1) // 2)
    assert got.shape == (2 * per_slot, line_bits // 8)
    for slot in range(2):
        for k in range(per_slot):
            line = lines.line_to_int(got[slot * per_slot + k])
            for t, value in enumerate(sums[slot]):
                assert (line >> (2 * t)) & 1 == sum_bit(int(value), 2 * k, counter_bits)
                assert (line >> (2 * t + 1)) & 1 == sum_bit(int(value), 2 * k + 1, counter_bits)


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_gated_readout_takes_one_line_per_slot(line_bits):
    sums = np.full((3, line_bits // 2), -4, dtype=np.int8)
    got = gternary.readout(sums, readout=Readout.GATED, gate=4, counter_bits=3)
    assert got.shape == (3, line_bits // 8) and (got == 0xFF).all()


@PROPERTY
@given(line_bits=st.sampled_from(LINE_BITS), max_workers=st.integers(min_value=1, max_value=127),
       counter_bits=st.integers(min_value=1, max_value=7),
       gate=st.integers(min_value=0, max_value=130), n_slots=st.integers(min_value=1, max_value=3),
       seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_readouts_round_trip_through_parse_and_decode(line_bits, max_workers, counter_bits, gate,
                                                      n_slots, seed):
    limit = sum_limit(max_workers, min(counter_bits, default_counter_bits(max_workers)))
    sums = np.random.default_rng(seed).integers(-limit, limit + 1,
                                                size=(n_slots, line_bits // 2)).astype(np.int8)
    wide = sums.astype(np.int64)
    gated = np.where(np.abs(wide) >= gate, np.sign(wide), 0).astype(np.int8)
    n_elements = n_slots * line_bits // 2 - 1
    for readout, expected in [(Readout.GATED, gated), (Readout.SUMS, sums)]:
        out = gternary.readout(sums, readout=readout, gate=gate, counter_bits=counter_bits)
        got = gternary.parse_readout(out, readout=readout, line_bits=line_bits, counter_bits=counter_bits)
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, expected)
        flat = gternary.decode(out, readout=readout, n_elements=n_elements, line_bits=line_bits,
                               counter_bits=counter_bits)
        np.testing.assert_array_equal(flat, expected.reshape(-1)[:n_elements])


def test_parse_refuses_an_invalid_code_in_a_gated_readout():
    out = np.zeros((1, 64), dtype=np.uint8)
    out[0, 40] = 0b10
    with pytest.raises(ValueError, match=r"invalid ternary code \(0b10\)"):
        gternary.parse_readout(out, readout=Readout.GATED)
    with pytest.raises(ValueError, match=r"invalid ternary code \(0b10\)"):
        gternary.decode(out, readout=Readout.GATED, n_elements=3)


@pytest.mark.parametrize("sign,extension", [(0, 1), (1, 0)])
def test_parse_refuses_a_sums_extension_bit_that_differs_from_the_sign(sign, extension):
    out = np.zeros((6, 16), dtype=np.uint8)  # counter_bits=4: 5-bit sums, 3 lines a slot
    out[5, 2] = (extension << 3) | (sign << 2)  # slot 1, lane 9: bits 4 and 5 of its sum
    with pytest.raises(ValueError, match=r"^lines must repeat each sum's sign bit \(bit 4\) in the "
                                         r"last line's odd bits \(sign extension\), not differ from it "
                                         r"at lane 9 of slot 1$"):
        gternary.parse_readout(out, readout=Readout.SUMS, line_bits=128, counter_bits=4)
    out[3:6, 2] = (sign << 3) | (sign << 2)  # every bit of the sum equal to the sign: 0 or -1
    assert gternary.parse_readout(out, readout=Readout.SUMS, line_bits=128,
                                  counter_bits=4)[1, 9] == -sign


@pytest.mark.parametrize("counter_bits,n_lines,lane", [(4, 3, 0), (5, 3, 17), (3, 2, 63)])
def test_parse_refuses_a_sum_of_minus_2_to_the_counter_bits(counter_bits, n_lines, lane):
    sums = np.zeros((1, 64), dtype=np.int8)
    sums[0, lane] = -(1 << counter_bits) + 1
    out = gternary.readout(sums, readout=Readout.SUMS, gate=0, counter_bits=counter_bits)
    assert out.shape == (n_lines, 16)
    assert gternary.parse_readout(out, readout=Readout.SUMS, line_bits=128,
                                  counter_bits=counter_bits)[0, lane] == sums[0, lane]
    byte, bit = divmod(2 * lane, 8)
    out[0, byte] &= ~np.uint8(1 << bit)  # bit 0 of -(2**C - 1) cleared: -2**C, no readout holds it
    top = (1 << counter_bits) - 1
    with pytest.raises(ValueError, match=rf"^lines must hold sums within \[-{top}, {top}\] for "
                                         rf"counter_bits={counter_bits}, not {-top - 1} at lane "
                                         rf"{lane} of slot 0$"):
        gternary.parse_readout(out, readout=Readout.SUMS, line_bits=128, counter_bits=counter_bits)


def test_parse_refuses_lines_that_are_not_whole_readouts():
    with pytest.raises(ValueError, match="^lines must hold whole SUMS readouts of 3 lines each, not 7 lines$"):
        gternary.parse_readout(np.zeros((7, 64), dtype=np.uint8), readout=Readout.SUMS, counter_bits=5)
    with pytest.raises(ValueError, match="^lines must hold whole SUMS readouts of 2 lines each, not 3 lines$"):
        gternary.parse_readout(np.zeros((3, 16), dtype=np.uint8), readout=Readout.SUMS, line_bits=128,
                               counter_bits=2)


def test_parse_and_readout_refuse_bad_arguments():
    with pytest.raises(TypeError, match="^counter_bits is required to parse a SUMS readout$"):
        gternary.parse_readout(np.zeros((4, 64), dtype=np.uint8), readout=Readout.SUMS)
    with pytest.raises(ValueError, match="^counter_bits must be between 1 and 7, not 0$"):
        gternary.parse_readout(np.zeros((4, 64), dtype=np.uint8), readout=Readout.SUMS, counter_bits=0)
    with pytest.raises(ValueError, match="^readout must be one of GATED, SUMS for GTERNARY, not Readout.TERNARY$"):
        gternary.parse_readout(np.zeros((2, 64), dtype=np.uint8), readout=Readout.TERNARY)
    with pytest.raises(ValueError, match="^readout must be one of GATED, SUMS for GTERNARY, not Readout.COUNTS$"):
        gternary.readout(np.zeros((1, 64), dtype=np.int8), readout=Readout.COUNTS, gate=1, counter_bits=3)
    with pytest.raises(TypeError, match="^sums must be a 2-D numpy.ndarray of integers"):
        gternary.readout(np.zeros((1, 64), dtype=np.float16), readout=Readout.SUMS, gate=1, counter_bits=3)
    with pytest.raises(ValueError, match="^line_bits must be one of"):
        gternary.readout(np.zeros((1, 100), dtype=np.int8), readout=Readout.SUMS, gate=1, counter_bits=3)


# --------------------------------------------------------------------------- end to end

@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_padding_lanes_never_change_a_result(line_bits, seed):
    rng = np.random.default_rng(seed)
    workers, size, extra = 6, 3 * (line_bits // 2) + 11, 50
    grads = rng.standard_normal((workers, size + extra)).astype(np.float32)
    padded = np.stack([gternary.encode(g[:size], ratio=0, line_bits=line_bits) for g in grads])
    longer = np.stack([gternary.encode(g, ratio=0, line_bits=line_bits) for g in grads])
    sums_padded = gternary.aggregate(padded, max_workers=workers)
    sums_longer = gternary.aggregate(longer, max_workers=workers)
    assert not sums_padded.reshape(-1)[size:].any()
    np.testing.assert_array_equal(sums_padded.reshape(-1)[:size], sums_longer.reshape(-1)[:size])
    np.testing.assert_array_equal(sums_padded.reshape(-1)[:size], np.sign(grads[:, :size]).sum(axis=0))
    bits = default_counter_bits(workers)
    for readout in Readout.GATED, Readout.SUMS:
        a = gternary.decode(gternary.readout(sums_padded, readout=readout, gate=2, counter_bits=bits),
                            readout=readout, n_elements=size, line_bits=line_bits, counter_bits=bits)
        b = gternary.decode(gternary.readout(sums_longer, readout=readout, gate=2, counter_bits=bits),
                            readout=readout, n_elements=size + extra, line_bits=line_bits, counter_bits=bits)
        np.testing.assert_array_equal(a, b[:size])


@pytest.mark.parametrize("workers", [1, 2, 5, 8])
@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_matches_a_plain_torch_ternarize_sum_and_gate(seed, ratio, workers):
    torch = pytest.importorskip("torch")
    line_bits, size = 512, 1500
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(workers, size, generator=gen)
    g[:, ::13] = 0.0
    # the reference: per worker (one bucket each) t = sign(g) where |g| >= ratio * max|g|;
    # the ratios are powers of two (or 0, 1), so tau is exact in float32 and float64 alike
    tau = ratio * g.abs().amax(dim=1, keepdim=True)
    t = torch.where(g.abs() >= tau, torch.sign(g), torch.zeros_like(g))
    total = t.sum(dim=0)

    worker_lines = np.stack([gternary.encode(row.numpy(), ratio=ratio, line_bits=line_bits) for row in g])
    sums = gternary.aggregate(worker_lines, max_workers=workers)
    bits = default_counter_bits(workers)
    got = gternary.decode(gternary.readout(sums, readout=Readout.SUMS, gate=0, counter_bits=bits),
                          readout=Readout.SUMS, n_elements=size, line_bits=line_bits, counter_bits=bits)
    assert torch.equal(torch.from_numpy(got).to(total.dtype), total)
    for gate in (0, 1, 2, 3):
        gated = torch.where(total.abs() >= gate, torch.sign(total), torch.zeros_like(total))
        got = gternary.decode(gternary.readout(sums, readout=Readout.GATED, gate=gate, counter_bits=bits),
                              readout=Readout.GATED, n_elements=size, line_bits=line_bits)
        assert torch.equal(torch.from_numpy(got).to(gated.dtype), gated), gate


def test_draws_given_as_an_array_are_the_generators_draws():
    grad = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    draws = np.random.default_rng(4).random(1000, dtype=np.float32)
    np.testing.assert_array_equal(
        gternary.encode(grad, ratio=0.0, draws=draws),
        gternary.encode(grad, ratio=0.0, rng=np.random.default_rng(4)))
    with pytest.raises(TypeError, match="rng and draws must not both be given"):
        gternary.encode(grad, ratio=0.0, rng=np.random.default_rng(4), draws=draws)
    with pytest.raises(TypeError, match="draws must be a 1-D float32 numpy.ndarray of 1000"):
        gternary.encode(grad, ratio=0.0, draws=draws[:10])
    with pytest.raises(ValueError, match=r"draws must lie in \[0, 1\)"):
        gternary.encode(grad, ratio=0.0, draws=draws + 1)
