"""G-Binary golden model (docs/design.md, "G-Binary"): encode, aggregate, majority, readouts.

References here are deliberately plain: per-element Python comparisons, ``np.unpackbits`` and a
sum for the counts, a Python big integer for each readout line, and a PyTorch sign-majority.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_fabric.golden import gbinary, lines
from neuron_fabric.golden.formats import Readout, count_limit, default_counter_bits

LINE_BITS = (128, 256, 512, 1024)
CHUNK_LANES = gbinary._CHUNK_WORDS * 64  # gbinary's internal chunk of 64-bit words
PROPERTY = settings(max_examples=40, deadline=None)


# --------------------------------------------------------------------------- references

def ref_counts(worker_lines):
    """Negative votes per lane: unpack every worker's bits and add them up."""
    return np.unpackbits(worker_lines, axis=-1, bitorder="little").sum(axis=0, dtype=np.int64)


def ref_majority(n, num_workers):
    return -1 if 2 * n > num_workers else 1 if 2 * n < num_workers else 0


def random_worker_lines(rng, workers, n_lines, line_bits, p_one=0.5):
    bits = rng.random((workers, n_lines, line_bits)) < p_one
    return np.packbits(bits, axis=-1, bitorder="little")


def line_ints(readout_lines):
    return [lines.line_to_int(line) for line in readout_lines]


# --------------------------------------------------------------------------- encode

def test_negative_elements_encode_as_one_hand_built():
    grad = np.array([1.0, -1.0, 0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45], dtype=np.float32)
    got = gbinary.encode(grad, line_bits=128)
    assert got.shape == (1, 16)
    # bits 1, 5, 7 set: -1.0, -inf and the negative denormal
    assert got[0, 0] == 0b10100010
    assert not got[0, 1:].any()


def test_plus_and_minus_zero_both_encode_as_zero():
    grad = np.array([0.0, -0.0] * 64, dtype=np.float32)
    assert np.signbit(grad[1])
    assert not gbinary.encode(grad, line_bits=128).any()


def test_infinities_encode_by_their_sign():
    grad = np.array([np.inf, -np.inf] * 64, dtype=np.float32)
    got = gbinary.encode(grad, line_bits=128)
    assert (got == 0b10101010).all()


@pytest.mark.parametrize("shape,index,flat", [((10,), (5,), 5), ((3, 4), (2, 1), 9),
                                             ((2, 2, 2), (0, 1, 0), 2)])
def test_nan_is_refused_naming_nan_and_its_flat_index(shape, index, flat):
    grad = np.ones(shape, dtype=np.float32)
    grad[index] = np.nan
    grad.reshape(-1)[-1] = np.nan  # a later NaN is not the one reported
    with pytest.raises(ValueError, match=rf"NaN \(first at flat index {flat}\)"):
        gbinary.encode(grad)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, bool, np.complex64])
def test_non_float_dtype_is_a_type_error(dtype):
    with pytest.raises(TypeError, match=f"^grad must be a floating-point array, not dtype {np.dtype(dtype)}$"):
        gbinary.encode(np.zeros(8, dtype=dtype))


@pytest.mark.parametrize("line_bits", [0, 64, 500, "512"])
def test_encode_refuses_a_bad_line_width(line_bits):
    with pytest.raises((TypeError, ValueError), match="^line_bits must be"):
        gbinary.encode(np.zeros(8, dtype=np.float32), line_bits=line_bits)


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_element_j_goes_to_lane_j_mod_l_of_line_j_div_l(line_bits, seed):
    rng = np.random.default_rng(seed)
    size = 3 * line_bits - 5
    grad = rng.standard_normal(size).astype(np.float32)
    got = gbinary.encode(grad, line_bits=line_bits)
    assert got.shape == (3, line_bits // 8) and got.dtype == np.uint8
    ints = line_ints(got)
    for j in range(size):
        assert (ints[j // line_bits] >> (j % line_bits)) & 1 == (1 if grad[j] < 0 else 0)


@pytest.mark.parametrize("size", [1, 127, 129, 511, 513])
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_padding_lanes_are_zero(line_bits, size):
    grad = -np.ones(size, dtype=np.float32)  # every real lane is 1
    got = gbinary.encode(grad, line_bits=line_bits)
    n_lines = -(-size // line_bits)
    assert got.shape == (n_lines, line_bits // 8)
    bits = np.unpackbits(got.reshape(-1), bitorder="little")
    assert bits[:size].all() and not bits[size:].any()


@pytest.mark.parametrize("chunk", [8, 24, 128])
@pytest.mark.parametrize("size", [1, 7, 8, 9, 127, 129, 200, 513])
def test_encoding_does_not_depend_on_the_chunking(monkeypatch, chunk, size):
    monkeypatch.setattr(gbinary, "_ENCODE_CHUNK", chunk)
    rng = np.random.default_rng(size)
    grad = rng.standard_normal(size).astype(np.float32)
    grad[::5] = 0.0
    got = gbinary.encode(grad, line_bits=128)
    bits = np.unpackbits(got.reshape(-1), bitorder="little")
    np.testing.assert_array_equal(bits[:size], grad < 0)
    assert not bits[size:].any()
    if size > chunk:  # a NaN found in a later chunk still names its own index
        grad[-1] = np.nan
        with pytest.raises(ValueError, match=rf"NaN \(first at flat index {size - 1}\)"):
            gbinary.encode(grad, line_bits=128)


def test_empty_gradient_encodes_to_no_lines():
    assert gbinary.encode(np.zeros(0, dtype=np.float32), line_bits=256).shape == (0, 32)


def test_encode_flattens_in_c_order():
    rng = np.random.default_rng(5)
    grad = rng.standard_normal((7, 33)).astype(np.float32)
    np.testing.assert_array_equal(gbinary.encode(grad, line_bits=128),
                                  gbinary.encode(grad.ravel(), line_bits=128))
    np.testing.assert_array_equal(gbinary.encode(np.asfortranarray(grad), line_bits=128),
                                  gbinary.encode(grad.ravel(), line_bits=128))


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_float16_and_float64_encode_by_sign(dtype):
    rng = np.random.default_rng(11)
    grad = rng.standard_normal(300).astype(dtype)
    tiny = np.finfo(dtype).smallest_subnormal
    grad[:6] = [0.0, -0.0, tiny, -tiny, np.inf, -np.inf]
    got = gbinary.encode(grad, line_bits=128)
    expected_bits = np.array([1 if float(g) < 0 else 0 for g in grad], dtype=np.uint8)
    np.testing.assert_array_equal(np.unpackbits(got.reshape(-1), bitorder="little")[:300], expected_bits)


# --------------------------------------------------------------------------- aggregate

@PROPERTY
@given(workers=st.integers(min_value=1, max_value=20), line_bits=st.sampled_from(LINE_BITS),
       n_lines=st.integers(min_value=1, max_value=3),
       p_one=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]),
       seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_aggregate_equals_unpackbits_sum(workers, line_bits, n_lines, p_one, seed):
    data = random_worker_lines(np.random.default_rng(seed), workers, n_lines, line_bits, p_one)
    counts = gbinary.aggregate(data, max_workers=workers)
    assert counts.dtype == np.uint8 and counts.shape == (n_lines, line_bits)
    np.testing.assert_array_equal(counts, ref_counts(data))


@pytest.mark.parametrize("workers", range(1, 21))
def test_aggregate_every_worker_count_from_1_to_20(workers):
    rng = np.random.default_rng(1000 + workers)
    data = random_worker_lines(rng, workers, 5, 512)
    data[:, 0] = 0xFF  # line 0: every worker votes negative everywhere
    data[:, 1] = 0
    counts = gbinary.aggregate(data, max_workers=max(workers, 20))
    np.testing.assert_array_equal(counts, ref_counts(data))
    assert (counts[0] == workers).all() and (counts[1] == 0).all()


@pytest.mark.parametrize("workers", [1, 3, 7, 16, 20])
@pytest.mark.parametrize("line_bits,n_lines", [
    (512, int(2.5 * CHUNK_LANES) // 512),   # two whole chunks and a half
    (128, 2 * CHUNK_LANES // 128 + 1),      # two chunks and one line (two words)
    (1024, CHUNK_LANES // 1024),            # exactly one chunk
], ids=["512-2.5chunks", "128-2chunks+1line", "1024-1chunk"])
def test_aggregate_spans_several_internal_chunks(workers, line_bits, n_lines):
    data = random_worker_lines(np.random.default_rng(workers * 31 + line_bits), workers, n_lines, line_bits)
    counts = gbinary.aggregate(data, max_workers=20)
    np.testing.assert_array_equal(counts, ref_counts(data))


def test_aggregate_of_no_workers_is_zero():
    counts = gbinary.aggregate(np.zeros((0, 2, 16), dtype=np.uint8), max_workers=4)
    assert counts.shape == (2, 128) and not counts.any()


@pytest.mark.parametrize("max_workers,counter_bits,workers", [
    (7, 2, 7),    # counter narrower than the default
    (15, 3, 15),
    (4, None, 12),  # more workers than the counter holds
    (16, None, 40),
], ids=["mw7-c2-w7", "mw15-c3-w15", "mw4-cdefault-w12", "mw16-cdefault-w40"])
def test_aggregate_saturates_at_all_ones_of_the_counter(max_workers, counter_bits, workers):
    limit = count_limit(counter_bits or default_counter_bits(max_workers))
    # about `limit` negative votes per lane: lanes below, at and above the limit
    data = random_worker_lines(np.random.default_rng(workers), workers, 4, 512, p_one=limit / workers)
    total = ref_counts(data)
    assert (total > limit).any() and (total == limit).any() and (total < limit).any()
    counts, saturated = gbinary.aggregate(data, max_workers=max_workers, counter_bits=counter_bits,
                                          return_saturated=True)
    np.testing.assert_array_equal(counts, np.minimum(total, limit))
    assert saturated.dtype == bool
    np.testing.assert_array_equal(saturated, total > limit)
    np.testing.assert_array_equal(gbinary.aggregate(data, max_workers=max_workers,
                                                    counter_bits=counter_bits), counts)


def test_saturated_mask_is_false_when_the_count_only_reaches_the_limit():
    data = np.full((7, 1, 16), 0xFF, dtype=np.uint8)  # 7 negative votes, limit 7
    counts, saturated = gbinary.aggregate(data, max_workers=7, return_saturated=True)
    assert (counts == 7).all() and not saturated.any()
    data = np.full((8, 1, 16), 0xFF, dtype=np.uint8)
    counts, saturated = gbinary.aggregate(data, max_workers=7, return_saturated=True)
    assert (counts == 7).all() and saturated.all()


@pytest.mark.parametrize("n_words,workers", [
    (n, w) for n in (1, 3) for w in (1, 2, 5, 64, 100, 255)] + [
    (4096, 1), (4096, 6), (4096, 33), (4096 * 2 + 5, 1), (4096 * 2 + 5, 9), (4096 * 2 + 5, 20)])
def test_count_bits_counts_each_bit_position_over_rows(n_words, workers):
    rng = np.random.default_rng(n_words * 1000 + workers)
    words = rng.integers(0, 2**64, size=(workers, n_words), dtype=np.uint64, endpoint=False)
    got = gbinary.count_bits(words)
    assert got.dtype == np.uint8 and got.shape == (n_words * 64,)
    expected = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little").sum(axis=0)
    np.testing.assert_array_equal(got, expected)


def test_aggregate_takes_up_to_255_workers():
    data = np.full((255, 1, 16), 0xFF, dtype=np.uint8)
    counts, saturated = gbinary.aggregate(data, max_workers=127, return_saturated=True)
    assert (counts == 127).all() and saturated.all()
    data[::2] = 0  # 127 ones per lane: no saturation
    counts, saturated = gbinary.aggregate(data, max_workers=127, return_saturated=True)
    assert (counts == 127).all() and not saturated.any()
    with pytest.raises(ValueError, match="^lines must hold at most 255 workers' contributions, not 256$"):
        gbinary.aggregate(np.zeros((256, 1, 16), dtype=np.uint8), max_workers=127)


@pytest.mark.parametrize("max_workers,error,message", [
    (0, ValueError, "max_workers must be between 1 and 127, not 0"),
    (128, ValueError, "max_workers must be between 1 and 127, not 128"),
    (4.0, TypeError, "max_workers must be an integer, not 4.0"),
])
def test_aggregate_refuses_a_bad_max_workers(max_workers, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        gbinary.aggregate(np.zeros((2, 1, 16), dtype=np.uint8), max_workers=max_workers)


@pytest.mark.parametrize("counter_bits", [0, 4, -1])
def test_aggregate_refuses_counter_bits_out_of_range(counter_bits):
    with pytest.raises(ValueError, match=f"^counter_bits must be between 1 and 3, not {counter_bits}$"):
        gbinary.aggregate(np.zeros((2, 1, 16), dtype=np.uint8), max_workers=4, counter_bits=counter_bits)


def test_aggregate_refuses_wrong_dtype_and_axes():
    with pytest.raises(TypeError, match="^lines must have dtype uint8, not int8$"):
        gbinary.aggregate(np.zeros((2, 1, 16), dtype=np.int8), max_workers=4)
    with pytest.raises(ValueError, match=r"^lines must have 3 axes, not shape \(1, 16\)$"):
        gbinary.aggregate(np.zeros((1, 16), dtype=np.uint8), max_workers=4)
    with pytest.raises(ValueError, match="^lines must have a last axis of"):
        gbinary.aggregate(np.zeros((2, 1, 10), dtype=np.uint8), max_workers=4)


# --------------------------------------------------------------------------- majority

# Hand-computed: entry n of row N is the majority with n negative votes out of N.
MAJORITY_TABLE = {
    1: "+-",
    2: "+0-",
    3: "++--",
    4: "++0--",
    5: "+++---",
    6: "+++0---",
}


@pytest.mark.parametrize("num_workers", sorted(MAJORITY_TABLE))
def test_majority_hand_computed_table(num_workers):
    expected = [{"+": 1, "0": 0, "-": -1}[c] for c in MAJORITY_TABLE[num_workers]]
    counts = np.arange(num_workers + 1, dtype=np.uint8)[None]
    got = gbinary.majority(counts, num_workers=num_workers)
    assert got.dtype == np.int8 and got.shape == counts.shape
    assert got[0].tolist() == expected


def test_majority_rule_for_every_n_and_every_worker_count():
    counts = np.arange(256, dtype=np.uint8)[None]
    for num_workers in range(1, 128):
        got = gbinary.majority(counts, num_workers=num_workers)[0]
        assert got.tolist() == [ref_majority(n, num_workers) for n in range(256)], num_workers


def test_tie_reads_zero_only_for_even_worker_counts():
    for num_workers in range(1, 128):
        got = gbinary.majority(np.arange(num_workers + 1, dtype=np.uint8)[None], num_workers=num_workers)
        assert (got == 0).sum() == (1 if num_workers % 2 == 0 else 0)


def test_majority_refuses_bad_inputs():
    with pytest.raises(TypeError, match="^counts must be a 2-D numpy.ndarray of integers, not a 2-D float32 array$"):
        gbinary.majority(np.zeros((1, 4), dtype=np.float32), num_workers=2)
    with pytest.raises(TypeError, match="^counts must be a 2-D numpy.ndarray of integers, not a 1-D uint8 array$"):
        gbinary.majority(np.zeros(4, dtype=np.uint8), num_workers=2)
    with pytest.raises(TypeError, match="^counts must be a 2-D numpy.ndarray of integers, not a 2-D bool array$"):
        gbinary.majority(np.zeros((1, 4), dtype=bool), num_workers=2)
    with pytest.raises(TypeError, match="^counts must be a 2-D numpy.ndarray of integers, not list$"):
        gbinary.majority([[0, 1]], num_workers=2)
    for bad in (0, 128):
        with pytest.raises(ValueError, match=f"^num_workers must be between 1 and 127, not {bad}$"):
            gbinary.majority(np.zeros((1, 4), dtype=np.uint8), num_workers=bad)


# --------------------------------------------------------------------------- readouts

def test_sign_readout_hand_built():
    counts = np.zeros((1, 128), dtype=np.uint8)
    counts[0, [0, 1, 2, 9, 127]] = [3, 2, 1, 4, 4]  # N=4: negative, tie, positive, negative, negative
    got = gbinary.readout(counts, readout=Readout.SIGN, num_workers=4, counter_bits=3)
    assert got.shape == (1, 16)
    expected = np.zeros(16, dtype=np.uint8)
    expected[0], expected[1], expected[15] = 0x01, 0x02, 0x80
    np.testing.assert_array_equal(got[0], expected)


def test_tie_reads_zero_in_sign_readout():
    counts = np.full((1, 128), 3, dtype=np.uint8)
    assert not gbinary.readout(counts, readout=Readout.SIGN, num_workers=6, counter_bits=3).any()
    assert gbinary.readout(counts, readout=Readout.SIGN, num_workers=5, counter_bits=3).all()


def test_ternary_readout_hand_built():
    counts = np.full((1, 128), 2, dtype=np.uint8)  # N=4: every other lane is a tie
    counts[0, [0, 1, 3, 63, 64, 127]] = [4, 0, 3, 1, 3, 4]
    got = gbinary.readout(counts, readout=Readout.TERNARY, num_workers=4, counter_bits=3)
    assert got.shape == (2, 16)
    expected = np.zeros((2, 16), dtype=np.uint8)
    # line 0, the SIGN line: lanes 0, 3, 64 and 127 are -1
    expected[0, 0], expected[0, 8], expected[0, 15] = 0b0000_1001, 0b0000_0001, 0b1000_0000
    # line 1, not a tie: lanes 0, 1, 3 (-1, +1, -1), 63 (+1), 64 and 127 (-1)
    expected[1, 0], expected[1, 7] = 0b0000_1011, 0b1000_0000
    expected[1, 8], expected[1, 15] = 0b0000_0001, 0b1000_0000
    np.testing.assert_array_equal(got, expected)


def test_tie_reads_zero_in_ternary_readout():
    counts = np.full((1, 256), 5, dtype=np.uint8)
    assert not gbinary.readout(counts, readout=Readout.TERNARY, num_workers=10, counter_bits=4).any()


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_ternary_readout_takes_two_lines_per_slot(line_bits):
    counts = np.zeros((3, line_bits), dtype=np.uint8)  # all +1: no sign bit, no tie
    got = gbinary.readout(counts, readout=Readout.TERNARY, num_workers=3, counter_bits=2)
    assert got.shape == (6, line_bits // 8)
    assert not got[0::2].any() and (got[1::2] == 0xFF).all()


@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_ternary_readout_is_the_sign_line_and_the_not_a_tie_line(line_bits, seed):
    rng = np.random.default_rng(seed)
    num_workers = 6
    counts = rng.integers(0, num_workers + 1, size=(2, line_bits)).astype(np.uint8)
    got = gbinary.readout(counts, readout=Readout.TERNARY, num_workers=num_workers, counter_bits=3)
    ints = line_ints(got)
    for slot in range(2):
        sign, decided = ints[2 * slot], ints[2 * slot + 1]
        for i, n in enumerate(counts[slot]):
            assert (sign >> i) & 1 == int(2 * n > num_workers)
            assert (decided >> i) & 1 == int(2 * n != num_workers)
            value = ((decided >> i) & 1) * (1 - 2 * ((sign >> i) & 1))
            assert value == ref_majority(int(n), num_workers)


def test_counts_readout_hand_built():
    counts = np.zeros((1, 128), dtype=np.uint8)
    counts[0, [0, 1, 9, 127]] = [5, 7, 2, 4]  # 101, 111, 010, 100
    got = gbinary.readout(counts, readout=Readout.COUNTS, num_workers=7, counter_bits=3)
    assert got.shape == (3, 16)  # one line per counter bit
    expected = np.zeros((3, 16), dtype=np.uint8)
    expected[0, 0] = 0b0000_0011                          # bit 0: lanes 0 and 1
    expected[1, 0], expected[1, 1] = 0b0000_0010, 0b0000_0010  # bit 1: lanes 1 and 9
    expected[2, 0], expected[2, 15] = 0b0000_0011, 0b1000_0000  # bit 2: lanes 0, 1, 127
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("counter_bits", range(1, 8))
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_counts_readout_line_k_bit_i_is_bit_k_of_count_i(line_bits, counter_bits):
    rng = np.random.default_rng(line_bits + counter_bits)
    counts = rng.integers(0, count_limit(counter_bits) + 1, size=(2, line_bits)).astype(np.uint8)
    got = gbinary.readout(counts, readout=Readout.COUNTS, num_workers=127, counter_bits=counter_bits)
    assert got.shape == (2 * counter_bits, line_bits // 8)
    for slot in range(2):
        slot_lines = line_ints(got[slot * counter_bits:(slot + 1) * counter_bits])
        for k, line in enumerate(slot_lines):
            assert line == sum(((int(c) >> k) & 1) << i for i, c in enumerate(counts[slot])), \
                f"slot {slot}, line {k}"


@PROPERTY
@given(line_bits=st.sampled_from(LINE_BITS), num_workers=st.integers(min_value=1, max_value=127),
       counter_bits=st.integers(min_value=1, max_value=7),
       n_slots=st.integers(min_value=1, max_value=3), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_readouts_round_trip_through_parse_and_decode(line_bits, num_workers, counter_bits, n_slots, seed):
    top = min(num_workers, count_limit(counter_bits))  # a narrow counter saturates below N
    counts = np.random.default_rng(seed).integers(0, top + 1, size=(n_slots, line_bits)).astype(np.uint8)
    majority = np.array([[ref_majority(int(n), num_workers) for n in row] for row in counts], dtype=np.int8)
    n_elements = n_slots * line_bits - 3
    for readout, parsed, decoded in [
        (Readout.SIGN, (majority < 0).astype(np.uint8), np.where(majority < 0, -1, 1)),
        (Readout.TERNARY, majority, majority),
        (Readout.COUNTS, counts, counts),
    ]:
        out = gbinary.readout(counts, readout=readout, num_workers=num_workers, counter_bits=counter_bits)
        got = gbinary.parse_readout(out, readout=readout, line_bits=line_bits, counter_bits=counter_bits)
        assert got.dtype == parsed.dtype
        np.testing.assert_array_equal(got, parsed)
        flat = gbinary.decode(out, readout=readout, n_elements=n_elements, line_bits=line_bits,
                              counter_bits=counter_bits)
        assert flat.shape == (n_elements,)
        np.testing.assert_array_equal(flat, np.ravel(decoded)[:n_elements])


def test_parse_refuses_a_ternary_sign_bit_on_a_tie():
    out = np.zeros((4, 16), dtype=np.uint8)
    out[1] = 0xFF        # slot 0: every lane decided, all +1
    out[2, 5] = 0b0000_1000  # slot 1: lane 43's sign bit, but line 1 says it is a tie
    out[3, 5] = 0b0000_0111
    message = (r"^lines must leave a TERNARY readout's line-0 \(sign\) bit clear where its "
               r"line-1 bit is 0 \(a tie\), not set it at lane 43 of slot 1$")
    with pytest.raises(ValueError, match=message):
        gbinary.parse_readout(out, readout=Readout.TERNARY, line_bits=128)
    with pytest.raises(ValueError, match=message):
        gbinary.decode(out, readout=Readout.TERNARY, n_elements=5, line_bits=128)
    out[3, 5] |= 0b0000_1000  # decided: lane 43 reads -1
    assert gbinary.parse_readout(out, readout=Readout.TERNARY, line_bits=128)[1, 43] == -1


@pytest.mark.parametrize("readout,counter_bits,n_lines,per_slot", [
    (Readout.TERNARY, None, 3, 2), (Readout.TERNARY, None, 1, 2),
    (Readout.COUNTS, 5, 9, 5), (Readout.COUNTS, 2, 5, 2),
])
def test_parse_refuses_lines_that_are_not_whole_readouts(readout, counter_bits, n_lines, per_slot):
    with pytest.raises(ValueError, match=f"^lines must hold whole {readout.name} readouts of {per_slot} "
                                         f"lines each, not {n_lines} lines$"):
        gbinary.parse_readout(np.zeros((n_lines, 64), dtype=np.uint8), readout=readout,
                              counter_bits=counter_bits)


def test_parse_refuses_bad_arguments():
    with pytest.raises(TypeError, match="^counter_bits is required to parse a COUNTS readout$"):
        gbinary.parse_readout(np.zeros((8, 64), dtype=np.uint8), readout=Readout.COUNTS)
    with pytest.raises(ValueError, match="^counter_bits must be between 1 and 7, not 8$"):
        gbinary.parse_readout(np.zeros((8, 64), dtype=np.uint8), readout=Readout.COUNTS, counter_bits=8)
    with pytest.raises(ValueError, match="^readout must be one of SIGN, TERNARY, COUNTS for GBINARY, not Readout.GATED$"):
        gbinary.parse_readout(np.zeros((1, 64), dtype=np.uint8), readout=Readout.GATED)
    with pytest.raises(ValueError, match=r"^lines must have 64 bytes per line \(line_bits=512\), not 32$"):
        gbinary.parse_readout(np.zeros((1, 32), dtype=np.uint8), readout=Readout.SIGN)


def test_readout_refuses_bad_arguments():
    with pytest.raises(TypeError, match="^counts must be a 2-D numpy.ndarray of integers"):
        gbinary.readout(np.zeros((1, 128), dtype=np.float32), readout=Readout.SIGN, num_workers=2, counter_bits=2)
    with pytest.raises(ValueError, match="^line_bits must be one of"):
        gbinary.readout(np.zeros((1, 100), dtype=np.uint8), readout=Readout.SIGN, num_workers=2, counter_bits=2)
    with pytest.raises(ValueError, match="^readout must be one of SIGN, TERNARY, COUNTS for GBINARY, not Readout.SUMS$"):
        gbinary.readout(np.zeros((1, 128), dtype=np.uint8), readout=Readout.SUMS, num_workers=2, counter_bits=2)
    for readout in (Readout.SIGN, Readout.TERNARY):
        with pytest.raises(ValueError, match="^num_workers must be"):
            gbinary.readout(np.zeros((1, 128), dtype=np.uint8), readout=readout, num_workers=0, counter_bits=2)


def test_sign_decode_reads_a_tie_as_plus_one():
    counts = np.array([[0, 1, 2] + [0] * 125], dtype=np.uint8)
    out = gbinary.readout(counts, readout=Readout.SIGN, num_workers=2, counter_bits=2)
    got = gbinary.decode(out, readout=Readout.SIGN, n_elements=3, line_bits=128)
    assert got.dtype == np.int8 and got.tolist() == [1, 1, -1]


# --------------------------------------------------------------------------- padding, end to end

@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_padding_lanes_never_change_a_result(line_bits, seed):
    rng = np.random.default_rng(seed)
    workers, size, extra = 5, 2 * line_bits + 37, 100
    grads = rng.standard_normal((workers, size + extra)).astype(np.float32)
    padded = np.stack([gbinary.encode(g[:size], line_bits=line_bits) for g in grads])
    longer = np.stack([gbinary.encode(g, line_bits=line_bits) for g in grads])
    counts_padded = gbinary.aggregate(padded, max_workers=workers)
    counts_longer = gbinary.aggregate(longer, max_workers=workers)
    np.testing.assert_array_equal(counts_padded.reshape(-1)[:size], counts_longer.reshape(-1)[:size])
    assert not counts_padded.reshape(-1)[size:].any()  # padding lanes hold no votes
    np.testing.assert_array_equal(counts_padded.reshape(-1)[:size], (grads[:, :size] < 0).sum(axis=0))
    np.testing.assert_array_equal(
        gbinary.majority(counts_padded, num_workers=workers).reshape(-1)[:size],
        gbinary.majority(counts_longer, num_workers=workers).reshape(-1)[:size])
    bits = default_counter_bits(workers)
    for readout in Readout.SIGN, Readout.TERNARY, Readout.COUNTS:
        a = gbinary.decode(gbinary.readout(counts_padded, readout=readout, num_workers=workers, counter_bits=bits),
                           readout=readout, n_elements=size, line_bits=line_bits, counter_bits=bits)
        b = gbinary.decode(gbinary.readout(counts_longer, readout=readout, num_workers=workers, counter_bits=bits),
                           readout=readout, n_elements=size + extra, line_bits=line_bits, counter_bits=bits)
        np.testing.assert_array_equal(a, b[:size])


@PROPERTY
@given(workers=st.integers(min_value=1, max_value=20), line_bits=st.sampled_from(LINE_BITS),
       size=st.integers(min_value=1, max_value=1500), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_encode_aggregate_ternary_readout_is_the_sign_majority(workers, line_bits, size, seed):
    rng = np.random.default_rng(seed)
    grads = rng.standard_normal((workers, size)).astype(np.float32)
    grads[rng.random((workers, size)) < 0.1] = 0.0
    worker_lines = np.stack([gbinary.encode(g, line_bits=line_bits) for g in grads])
    counts = gbinary.aggregate(worker_lines, max_workers=workers)
    out = gbinary.readout(counts, readout=Readout.TERNARY, num_workers=workers,
                          counter_bits=default_counter_bits(workers))
    got = gbinary.decode(out, readout=Readout.TERNARY, n_elements=size, line_bits=line_bits)
    negative = (grads < 0).sum(axis=0)
    np.testing.assert_array_equal(got, np.sign(workers - 2 * negative))


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 7, 8, 13])
@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_matches_a_plain_torch_sign_majority(seed, workers):
    torch = pytest.importorskip("torch")
    line_bits, size = 256, 2000
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(workers, size, generator=gen)
    g[:, ::7] = 0.0
    g[:, 3::11] = -0.0
    g[0, 5], g[-1, 6] = float("-inf"), float("inf")
    # the reference: each worker votes sign(g), a zero votes +1 (it encodes as 0), the
    # majority is the sign of the sum of votes
    votes = torch.sign(g)
    votes[votes == 0] = 1
    majority = torch.sign(votes.sum(dim=0))
    assert (majority == 0).any() == (workers % 2 == 0)

    worker_lines = np.stack([gbinary.encode(row.numpy(), line_bits=line_bits) for row in g])
    counts = gbinary.aggregate(worker_lines, max_workers=workers)
    bits = default_counter_bits(workers)
    ternary = gbinary.decode(
        gbinary.readout(counts, readout=Readout.TERNARY, num_workers=workers, counter_bits=bits),
        readout=Readout.TERNARY, n_elements=size, line_bits=line_bits)
    assert torch.equal(torch.from_numpy(ternary).to(majority.dtype), majority)
    sign = gbinary.decode(
        gbinary.readout(counts, readout=Readout.SIGN, num_workers=workers, counter_bits=bits),
        readout=Readout.SIGN, n_elements=size, line_bits=line_bits)
    assert torch.equal(torch.from_numpy(sign).to(majority.dtype), torch.where(majority < 0, -1.0, 1.0))
