"""Bit-sliced aggregation (golden ``gbinary`` and ``gternary``) against plain per-lane references.

The golden model counts votes with carry-save adders over 64-bit words and keeps counters and
sums as bit-planes. These tests check it, for every worker count from 1 to MAX_WORKERS and
every counter width, against references that work lane by lane the obvious way: G-Binary
counts are the workers' unpacked bits added up and clipped; G-Ternary sums are folded worker
after worker with the clip after every step, so the order of the workers counts. The data
are drawn from seeded generators; the seed is in the test id.
"""

import numpy as np
import pytest

from neuron_fabric.golden import gbinary, gternary, kernels, lines
from neuron_fabric.golden.formats import (MAX_WORKERS_LIMIT, Readout, count_limit, default_counter_bits,
                                          readout_lines_per_slot, sum_limit)

LINE_BITS = (128, 256, 512, 1024)
WORKER_COUNTS = range(1, MAX_WORKERS_LIMIT + 1)


# --------------------------------------------------------------------------- references

def ref_counts(worker_lines, limit):
    """Negative votes per lane, clipped at ``limit``, and the lanes that went past it."""
    total = np.unpackbits(worker_lines, axis=-1, bitorder="little").sum(axis=0, dtype=np.int64)
    return np.minimum(total, limit), total > limit


def ref_sums(values, limit):
    """Step-wise saturating sums of ``(workers, ...)`` lane values (-2 is invalid, counts 0)."""
    sums = np.zeros(values.shape[1:], dtype=np.int64)
    saturated = np.zeros(values.shape[1:], dtype=bool)
    for value in values:
        sums += np.where(value == -2, 0, value)
        saturated |= np.abs(sums) > limit
        np.clip(sums, -limit, limit, out=sums)
    return sums, saturated


def ref_majority(counts, num_workers):
    return np.where(2 * counts > num_workers, -1, np.where(2 * counts < num_workers, 1, 0))


def gbinary_cases(workers):
    """``(max_workers, counter_bits)``: every counter width, the default one, and a narrow one
    that more workers than it holds must saturate."""
    cases = [(MAX_WORKERS_LIMIT, bits) for bits in range(1, default_counter_bits(MAX_WORKERS_LIMIT) + 1)]
    cases.append((workers, None))
    cases.append((max(1, workers // 2), None))
    return cases


def ternary_values(rng, workers, n_lanes):
    """Lane values: random ones; runs of one sign then the other (to reach a bound and come
    back); lanes of one sign only (which climb past a bound and stay); zeros; and invalid
    codes (-2)."""
    values = rng.integers(-1, 2, size=(workers, n_lanes)).astype(np.int8)
    runs = np.where(np.arange(workers)[:, None] < rng.integers(0, workers + 1, size=n_lanes), 1, -1)
    runs *= np.where(rng.random(n_lanes) < 0.5, 1, -1)
    biased = rng.random((workers, n_lanes)) < rng.choice([0.0, 0.5, 0.9], size=n_lanes)
    values = np.where(biased, runs, values).astype(np.int8)
    # whole words (32 lanes) of them, so that some words need no in-order fold at all
    one_sided = np.repeat(rng.random(-(-n_lanes // 32)) < 0.25, 32)[:n_lanes]
    values[:, one_sided] = np.abs(values[:, one_sided]) * np.where(rng.random(one_sided.sum()) < 0.5, 1, -1)
    values[rng.random((workers, n_lanes)) < 0.05] = -2
    return values


def pack_codes(values, line_bits):
    return lines.pack_lanes(values, lane_bits=2).reshape(values.shape[0], -1, line_bits // 8)


# --------------------------------------------------------------------------- G-Binary

@pytest.mark.parametrize("workers", WORKER_COUNTS, ids=lambda w: f"w{w}")
def test_gbinary_counts_match_the_per_lane_reference_for_every_worker_count(workers):
    rng = np.random.default_rng(workers)
    line_bits = LINE_BITS[workers % len(LINE_BITS)]
    for max_workers, counter_bits in gbinary_cases(workers):
        width = counter_bits or default_counter_bits(max_workers)
        limit = count_limit(width)
        # lanes all ones and all zeros, and random lanes around the limit
        p_one = np.clip(rng.normal(limit / workers, 0.3, size=(1, 3, line_bits)), 0, 1)
        data = np.packbits(rng.random((workers, 3, line_bits)) < p_one, axis=-1, bitorder="little")
        data[:, 0, :2] = [0xFF, 0x00]
        expected, over = ref_counts(data, limit)

        counts, saturated = gbinary.aggregate(data, max_workers=max_workers, counter_bits=counter_bits,
                                              return_saturated=True)
        assert counts.dtype == np.uint8 and saturated.dtype == bool
        np.testing.assert_array_equal(counts, expected)
        np.testing.assert_array_equal(saturated, over)

        planes, saturated = gbinary.aggregate_planes(data, max_workers=max_workers,
                                                     counter_bits=counter_bits, return_saturated=True)
        assert planes.shape == (3, width, line_bits // 8) and planes.dtype == np.uint8
        np.testing.assert_array_equal(planes, lines.pack_planes(expected, planes=width))
        np.testing.assert_array_equal(saturated, over)
        for num_workers in {1, workers, min(workers + 1, MAX_WORKERS_LIMIT), 2 * (workers // 2) or 2}:
            for readout in (Readout.SIGN, Readout.TERNARY, Readout.COUNTS):
                np.testing.assert_array_equal(
                    gbinary.readout_planes(planes, readout=readout, num_workers=num_workers),
                    gbinary.readout(counts, readout=readout, num_workers=num_workers, counter_bits=width))
            np.testing.assert_array_equal(gbinary.majority(counts, num_workers=num_workers),
                                          ref_majority(expected, num_workers))


@pytest.mark.parametrize("seed", range(3), ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("workers", [1, 2, 3, 7, 8, 31, 32, 64, 127, 128, 200, 255])
def test_count_bits_matches_unpackbits_sum_past_max_workers(workers, seed):
    rng = np.random.default_rng(seed * 1000 + workers)
    n_words = int(rng.integers(1, 40))
    words = rng.integers(0, 2**64, size=(workers, n_words), dtype=np.uint64, endpoint=False)
    words[:, 0] = np.uint64(2**64 - 1)  # every row set: the count reaches the rows
    expected = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little").sum(axis=0)
    np.testing.assert_array_equal(gbinary.count_bits(words), expected)


def test_count_bits_refuses_counts_that_do_not_fit_a_byte():
    with pytest.raises(ValueError, match=r"^words must have at most 255 rows \(counts fit a byte\), not 256$"):
        gbinary.count_bits(np.zeros((256, 2), dtype=np.uint64))


def test_gbinary_saturation_spans_chunks_and_the_last_partial_chunk():
    rng = np.random.default_rng(11)
    n_lines = 2 * gbinary._CHUNK_WORDS // 2 + 5  # 128-bit lines: two chunks and a bit
    data = np.packbits(rng.random((9, n_lines, 128)) < 0.8, axis=-1, bitorder="little")
    expected, over = ref_counts(data, 7)
    assert over[-1].any() and over[0].any()
    counts, saturated = gbinary.aggregate(data, max_workers=7, return_saturated=True)
    np.testing.assert_array_equal(counts, expected)
    np.testing.assert_array_equal(saturated, over)
    planes, saturated = gbinary.aggregate_planes(data, max_workers=7, return_saturated=True)
    np.testing.assert_array_equal(planes, lines.pack_planes(expected, planes=3))
    np.testing.assert_array_equal(saturated, over)


# --------------------------------------------------------------------------- G-Ternary

def gternary_cases(workers):
    """``(max_workers, counter_bits)``: every counter width (limit ``2**bits - 1``), the default
    width (limit ``max_workers``: no saturation), and fewer max_workers than workers."""
    cases = [(MAX_WORKERS_LIMIT, bits) for bits in range(1, default_counter_bits(MAX_WORKERS_LIMIT) + 1)]
    cases.append((workers, None))
    cases.append((max(1, workers // 3), None))
    return cases


@pytest.mark.parametrize("workers", WORKER_COUNTS, ids=lambda w: f"w{w}")
def test_gternary_sums_match_the_step_wise_reference_for_every_worker_count(workers):
    rng = np.random.default_rng(10_000 + workers)
    line_bits = LINE_BITS[workers % len(LINE_BITS)]
    n_lines = 2
    values = ternary_values(rng, workers, n_lines * line_bits // 2)
    data = pack_codes(values, line_bits)
    for max_workers, counter_bits in gternary_cases(workers):
        width = counter_bits or default_counter_bits(max_workers)
        limit = sum_limit(max_workers, width)
        expected, over = ref_sums(values, limit)
        expected, over = expected.reshape(n_lines, -1), over.reshape(n_lines, -1)

        sums, flags = gternary.aggregate(data, max_workers=max_workers, counter_bits=counter_bits,
                                         return_flags=True)
        assert sums.dtype == np.int8
        np.testing.assert_array_equal(sums, expected)
        np.testing.assert_array_equal(flags["saturated"], over)
        np.testing.assert_array_equal(flags["invalid"], (values == -2).reshape(workers, n_lines, -1))

        planes, saturated = gternary.aggregate_planes(data, max_workers=max_workers,
                                                      counter_bits=counter_bits, return_saturated=True)
        per_slot = readout_lines_per_slot(Readout.SUMS, counter_bits=width)
        assert planes.shape == (n_lines, per_slot, line_bits // 8)
        np.testing.assert_array_equal(planes, lines.pack_planes(expected, planes=per_slot, lane_bits=2))
        np.testing.assert_array_equal(saturated, over)
        given = np.full_like(planes, 0xA5)  # written whole, in place
        assert gternary.aggregate_planes(data, max_workers=max_workers, counter_bits=counter_bits,
                                         out=given) is given
        np.testing.assert_array_equal(given, planes)
        for gate in {0, 1, 2, limit, limit + 1, int(rng.integers(0, 256))}:
            np.testing.assert_array_equal(
                gternary.readout_planes(planes, readout=Readout.GATED, gate=gate),
                gternary.readout(sums, readout=Readout.GATED, gate=gate, counter_bits=width))
        np.testing.assert_array_equal(gternary.readout_planes(planes, readout=Readout.SUMS, gate=0),
                                      gternary.readout(sums, readout=Readout.SUMS, gate=0, counter_bits=width))


def test_gternary_keeps_the_order_of_the_workers_where_it_matters():
    # limit 3 (2-bit counter). Lane 0 climbs to +3, saturates, then falls: clipping the total
    # would give +3, the device gives +1. Lane 1 mirrors it. Lane 5 (same word) and lane 40
    # (next word) saturate without mixed signs; lane 2 never leaves the range.
    values = np.zeros((7, 64), dtype=np.int8)
    values[:, 0] = [1, 1, 1, 1, 1, -1, -1]
    values[:, 1] = -values[:, 0]
    values[:, 2] = [1, -1, 1, -1, 1, -1, 1]
    values[:, 5] = [1, 1, 1, 1, 0, -2, 1]
    values[:, 40] = [-1] * 7
    data = pack_codes(values, 128)
    expected, over = ref_sums(values, 3)
    assert expected[[0, 1, 2, 5, 40]].tolist() == [1, -1, 1, 3, -3]
    assert over[[0, 1, 2, 5, 40]].tolist() == [True, True, False, True, True]
    assert (np.clip(values.sum(axis=0), -3, 3) != expected).any()  # order matters here
    for fold in (lambda: gternary.aggregate(data, max_workers=7, counter_bits=2, return_flags=True),
                 lambda: gternary.aggregate_planes(data, max_workers=7, counter_bits=2,
                                                   return_saturated=True)):
        got, flags = fold()
        saturated = flags["saturated"] if isinstance(flags, dict) else flags
        if got.ndim == 3:
            got = lines.unpack_planes(got, lane_bits=2, signed=True)
        np.testing.assert_array_equal(got[0], expected)
        np.testing.assert_array_equal(saturated[0], over)


def test_gternary_one_sided_lanes_stop_at_a_limit_that_is_not_all_ones():
    # max_workers 5 with its 3-bit counter: the limit is 5 (0b101), not the counter's 7.
    values = np.zeros((8, 64), dtype=np.int8)
    values[:6, 0] = 1       # 6 (0b110) votes up: stops at 5
    values[:, 1] = -1       # 8 votes down: stops at -5
    values[:, 2] = [1, 1, 1, 1, 1, 1, 1, -2]  # 7 (0b111) up and an invalid code
    values[:5, 3] = 1       # exactly the limit: no saturation
    expected, over = ref_sums(values, 5)
    assert expected[:4].tolist() == [5, -5, 5, 5] and over[:4].tolist() == [True, True, True, False]
    data = pack_codes(values, 128)
    sums, flags = gternary.aggregate(data, max_workers=5, return_flags=True)
    np.testing.assert_array_equal(sums[0], expected)
    np.testing.assert_array_equal(flags["saturated"][0], over)
    planes, saturated = gternary.aggregate_planes(data, max_workers=5, return_saturated=True)
    np.testing.assert_array_equal(lines.unpack_planes(planes, lane_bits=2, signed=True)[0], expected)
    np.testing.assert_array_equal(saturated[0], over)


def test_gternary_planes_refuse_an_out_they_cannot_fill():
    data = pack_codes(np.ones((3, 512), dtype=np.int8), 512)  # two lines a worker
    planes = gternary.aggregate_planes(data, max_workers=4)
    for out in (planes[:, :1].copy(), planes.astype(np.int8), planes[::-1], list(planes)):
        with pytest.raises(ValueError, match="out must be a C-contiguous uint8"):
            gternary.aggregate_planes(data, max_workers=4, out=out)


def test_gternary_codes_refuse_an_out_without_room():
    grad = np.linspace(-1, 1, 100, dtype=np.float32)
    for out in (np.zeros(24, np.uint8), np.zeros(33, np.uint8), np.zeros(32, np.int8),
                np.zeros((4, 8), np.uint8), np.zeros(64, np.uint8)[::2]):
        with pytest.raises(ValueError, match="out must be C-contiguous uint8 bytes"):
            gternary.codes_into(grad, 0.5, None, out)
    out = np.full(40, 0xA5, np.uint8)  # four words for 100 codes, one spare
    gternary.codes_into(grad, np.float32(0.5), None, out)
    np.testing.assert_array_equal(out[:32], gternary.encode(grad, ratio=0.5, line_bits=128)
                                  .reshape(-1)[:32])
    assert not out[32:].any()


def test_gternary_invalid_codes_count_as_zero_without_saturation():
    # Fewer workers than the limit: the fast path, where invalid codes must cancel out.
    rng = np.random.default_rng(5)
    values = rng.integers(-2, 2, size=(5, 512)).astype(np.int8)  # a quarter invalid
    values[:, 0] = -2
    expected, over = ref_sums(values, 16)
    assert not over.any()
    data = pack_codes(values, 256)
    np.testing.assert_array_equal(gternary.aggregate(data, max_workers=16).reshape(-1), expected)
    planes = gternary.aggregate_planes(data, max_workers=16)
    np.testing.assert_array_equal(lines.unpack_planes(planes, lane_bits=2, signed=True).reshape(-1),
                                  expected)


def test_gternary_saturation_spans_chunks_and_the_last_partial_chunk():
    rng = np.random.default_rng(12)
    n_lines = 2 * gbinary._CHUNK_WORDS // 2 + 3  # 128-bit lines: two chunks and a bit
    values = ternary_values(rng, 6, n_lines * 64)
    expected, over = ref_sums(values, 3)
    assert over[-64:].any() and over[:64].any()
    data = pack_codes(values, 128)
    sums, flags = gternary.aggregate(data, max_workers=3, return_flags=True)
    np.testing.assert_array_equal(sums.reshape(-1), expected)
    np.testing.assert_array_equal(flags["saturated"].reshape(-1), over)
    planes, saturated = gternary.aggregate_planes(data, max_workers=3, return_saturated=True)
    np.testing.assert_array_equal(planes.reshape(n_lines, -1, 16),
                                  lines.pack_planes(expected.reshape(n_lines, 64), planes=2, lane_bits=2))
    np.testing.assert_array_equal(saturated.reshape(-1), over)


# --------------------------------------------------------------------------- chunk boundaries

# (chunk words, lines): chunks of one word (smaller than a line: one line a chunk), of words
# that do not divide the lines, and a last partial chunk; one line; no lines.
CHUNKINGS = [(1, 3), (3, 5), (8, 7), (24, 7), (16, 1), (8, 0)]


@pytest.mark.parametrize("chunk_words,n_lines", CHUNKINGS, ids=lambda x: str(x))
def test_gbinary_counts_do_not_depend_on_the_chunking(monkeypatch, chunk_words, n_lines):
    monkeypatch.setattr(gbinary, "_CHUNK_WORDS", chunk_words)
    rng = np.random.default_rng(chunk_words * 100 + n_lines)
    for workers in (1, 2, 3, 4, 8, 9, 17, 64):
        line_bits = LINE_BITS[workers % 2]  # 128 and 256: two and four words a line
        for max_workers, counter_bits in ((workers, None), (MAX_WORKERS_LIMIT, 2)):
            width = counter_bits or default_counter_bits(max_workers)
            data = np.packbits(rng.random((workers, n_lines, line_bits)) < rng.random(),
                               axis=-1, bitorder="little")
            expected, over = ref_counts(data, count_limit(width))
            counts, saturated = gbinary.aggregate(data, max_workers=max_workers, counter_bits=counter_bits,
                                                  return_saturated=True)
            np.testing.assert_array_equal(counts, expected)
            np.testing.assert_array_equal(saturated, over)
            planes, saturated = gbinary.aggregate_planes(data, max_workers=max_workers,
                                                         counter_bits=counter_bits, return_saturated=True)
            assert planes.shape == (n_lines, width, line_bits // 8)
            np.testing.assert_array_equal(planes, lines.pack_planes(expected, planes=width))
            np.testing.assert_array_equal(saturated, over)


@pytest.mark.parametrize("chunk_words,n_lines", CHUNKINGS, ids=lambda x: str(x))
def test_gternary_sums_do_not_depend_on_the_chunking(monkeypatch, chunk_words, n_lines):
    monkeypatch.setattr(gbinary, "_CHUNK_WORDS", chunk_words)
    rng = np.random.default_rng(chunk_words * 100 + n_lines + 1)
    # Worker counts whose sums take 1 to 7 planes (the digit lines' odd and even tops), each
    # without saturation and with a narrow counter that saturates.
    for workers in (1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 64, 127):
        line_bits = LINE_BITS[workers % 2]
        values = ternary_values(rng, workers, n_lines * line_bits // 2)
        data = pack_codes(values, line_bits).reshape(workers, n_lines, line_bits // 8)
        for max_workers, counter_bits in ((workers, None), (MAX_WORKERS_LIMIT, 7), (max(1, workers // 3), None)):
            width = counter_bits or default_counter_bits(max_workers)
            limit = sum_limit(max_workers, width)
            expected, over = ref_sums(values, limit)
            expected, over = expected.reshape(n_lines, line_bits // 2), over.reshape(n_lines, line_bits // 2)
            sums, flags = gternary.aggregate(data, max_workers=max_workers, counter_bits=counter_bits,
                                             return_flags=True)
            np.testing.assert_array_equal(sums, expected)
            np.testing.assert_array_equal(flags["saturated"], over)
            planes, saturated = gternary.aggregate_planes(data, max_workers=max_workers,
                                                          counter_bits=counter_bits, return_saturated=True)
            per_slot = readout_lines_per_slot(Readout.SUMS, counter_bits=width)
            assert planes.shape == (n_lines, per_slot, line_bits // 8)
            np.testing.assert_array_equal(planes, lines.pack_planes(expected, planes=per_slot, lane_bits=2))
            np.testing.assert_array_equal(saturated, over)


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_gternary_sums_span_the_kernels_blocks_and_groups_of_eight(line_bits):
    # Two whole blocks of the compiled sum and a partial third, for worker counts that fill
    # groups of eight, leave one short, and need two and three groups.
    per_line = line_bits // 64
    n_lines = 2 * (kernels._BLOCK_WORDS // per_line) + 3
    rng = np.random.default_rng(line_bits)
    for workers in (1, 7, 8, 9, 17, 24):
        values = ternary_values(rng, workers, n_lines * line_bits // 2)
        expected, _ = ref_sums(values, workers)
        planes = gternary.aggregate_planes(pack_codes(values, line_bits), max_workers=workers)
        per_slot = readout_lines_per_slot(Readout.SUMS, counter_bits=default_counter_bits(workers))
        np.testing.assert_array_equal(
            planes, lines.pack_planes(expected.reshape(n_lines, -1), planes=per_slot, lane_bits=2))


def test_gternary_sums_reach_both_bounds_of_every_width_without_saturation():
    # All +1 and all -1 lanes beside each other: the top digit and sign of every plane count.
    for workers in range(1, MAX_WORKERS_LIMIT + 1):
        values = np.zeros((workers, 64), dtype=np.int8)
        values[:, 0], values[:, 1] = 1, -1
        values[:-1, 2], values[:-1, 3] = 1, -1  # one short of the bound
        values[:, 4] = -2
        expected, _ = ref_sums(values, workers)
        planes = gternary.aggregate_planes(pack_codes(values, 128), max_workers=workers)
        per_slot = readout_lines_per_slot(Readout.SUMS, counter_bits=default_counter_bits(workers))
        np.testing.assert_array_equal(planes[0], lines.pack_planes(expected, planes=per_slot, lane_bits=2))


# --------------------------------------------------------------------------- unpacking planes

@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("n_planes", range(1, 9))
def test_bit_planes_to_bytes_is_the_inverse_of_pack_planes(n_planes, signed):
    rng = np.random.default_rng(n_planes)
    low, high = (-(1 << (n_planes - 1)), 1 << (n_planes - 1)) if signed else (0, 1 << n_planes)
    n_bytes = 2 * lines._UNPACK_BYTES + 13  # whole sub-chunks, then a tail that is not whole words
    values = rng.integers(low, high, size=8 * n_bytes).astype(np.int8 if signed else np.uint8)
    planes = lines.pack_planes(values, planes=n_planes)
    out = np.empty(8 * n_bytes, dtype=np.uint8)
    lines.bit_planes_to_bytes(planes, out, signed=signed)
    np.testing.assert_array_equal(out.view(values.dtype), values)


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("lane_bits", [2, 4])
def test_unpack_lanes_table_matches_shifting_each_lane_out(lane_bits, signed):
    data = np.arange(256, dtype=np.uint8).reshape(4, 64)
    got = lines.unpack_lanes(data, lane_bits=lane_bits, signed=signed)
    per_byte = 8 // lane_bits
    fields = [(int(b) >> (lane_bits * k)) & ((1 << lane_bits) - 1) for b in data.reshape(-1) for k in range(per_byte)]
    if signed:
        fields = [f - (1 << lane_bits) if f >> (lane_bits - 1) else f for f in fields]
    assert got.dtype == (np.int8 if signed else np.uint8) and got.shape == (4, 64 * per_byte)
    assert got.reshape(-1).tolist() == fields


# --------------------------------------------------------------------------- any integer dtype

@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int16, np.int32, np.int64, np.uint64])
def test_counts_of_any_integer_dtype_give_the_same_results(dtype):
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 8, size=(2, 256)).astype(np.uint8)
    wide = counts.astype(dtype)
    np.testing.assert_array_equal(gbinary.majority(wide, num_workers=7), gbinary.majority(counts, num_workers=7))
    for readout in (Readout.SIGN, Readout.TERNARY, Readout.COUNTS):
        np.testing.assert_array_equal(
            gbinary.readout(wide, readout=readout, num_workers=6, counter_bits=3),
            gbinary.readout(counts, readout=readout, num_workers=6, counter_bits=3))


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64])
def test_sums_of_any_signed_integer_dtype_give_the_same_results(dtype):
    rng = np.random.default_rng(4)
    sums = rng.integers(-7, 8, size=(2, 128)).astype(np.int8)
    sums[0, :2] = [-7, 7]
    wide = sums.astype(dtype)
    for gate in (0, 3, 7, 8, 200):
        np.testing.assert_array_equal(gternary.gate(wide, gate=gate), gternary.gate(sums, gate=gate))
    for readout in (Readout.GATED, Readout.SUMS):
        np.testing.assert_array_equal(gternary.readout(wide, readout=readout, gate=3, counter_bits=3),
                                      gternary.readout(sums, readout=readout, gate=3, counter_bits=3))


def test_sums_in_an_unsigned_dtype_are_read_as_their_values():
    sums = np.array([[0, 1, 5, 127]], dtype=np.uint16)
    assert gternary.gate(sums, gate=2).tolist() == [[0, 0, 1, 1]]


def test_a_value_out_of_range_is_the_error_not_the_dtype():
    counts = np.zeros((2, 128), dtype=np.int64)
    counts[1, 9] = 256
    with pytest.raises(ValueError, match=r"^counts must be between 0 and 255, not 256 \(lane 9 of slot 1\)$"):
        gbinary.majority(counts, num_workers=3)
    counts[1, 9], counts[0, 3] = 0, -1
    with pytest.raises(ValueError, match=r"^counts must be between 0 and 255, not -1 \(lane 3 of slot 0\)$"):
        gbinary.readout(counts, readout=Readout.SIGN, num_workers=3, counter_bits=2)
    counts[0, 3] = 4
    with pytest.raises(ValueError, match="^counts must be at most 3 for counter_bits=2, not 4$"):
        gbinary.readout(counts, readout=Readout.COUNTS, num_workers=3, counter_bits=2)
    sums = np.zeros((1, 64), dtype=np.int32)
    sums[0, 7] = -129
    with pytest.raises(ValueError, match=r"^sums must be between -128 and 127, not -129 \(lane 7 of slot 0\)$"):
        gternary.gate(sums, gate=1)
    sums[0, 7] = 8
    with pytest.raises(ValueError, match=r"^sums must lie within \[-7, 7\] for counter_bits=3"):
        gternary.readout(sums, readout=Readout.SUMS, gate=1, counter_bits=3)


def test_readout_planes_refuses_what_aggregate_planes_never_returns():
    with pytest.raises(TypeError, match="^planes must be a 3-D numpy.ndarray of uint8, not a 2-D uint8 array$"):
        gbinary.readout_planes(np.zeros((3, 16), dtype=np.uint8), readout=Readout.SIGN, num_workers=2)
    with pytest.raises(TypeError, match="^planes must be a 3-D numpy.ndarray of uint8, not a 3-D int8 array$"):
        gternary.readout_planes(np.zeros((1, 2, 16), dtype=np.int8), readout=Readout.GATED, gate=1)
    with pytest.raises(ValueError, match="^readout must be one of SIGN, TERNARY, COUNTS for GBINARY"):
        gbinary.readout_planes(np.zeros((1, 3, 16), dtype=np.uint8), readout=Readout.GATED, num_workers=2)
    with pytest.raises(ValueError, match="^readout must be one of GATED, SUMS for GTERNARY"):
        gternary.readout_planes(np.zeros((1, 2, 16), dtype=np.uint8), readout=Readout.SIGN, gate=1)
    with pytest.raises(ValueError, match="^line_bits must be one of"):
        gbinary.readout_planes(np.zeros((1, 3, 10), dtype=np.uint8), readout=Readout.SIGN, num_workers=2)
    with pytest.raises(ValueError, match="^num_workers must be between 1 and 127, not 0$"):
        gbinary.readout_planes(np.zeros((1, 3, 16), dtype=np.uint8), readout=Readout.SIGN, num_workers=0)
    with pytest.raises(ValueError, match="^gate must be between 0 and 255, not 256$"):
        gternary.readout_planes(np.zeros((1, 2, 16), dtype=np.uint8), readout=Readout.GATED, gate=256)


@pytest.mark.parametrize("out", [np.zeros((5, 3, 8), dtype=np.uint64),
                                 np.zeros((4, 5, 8), dtype=np.uint64),
                                 np.zeros((4, 3, 4), dtype=np.uint64),
                                 np.zeros((4, 3, 16), dtype=np.uint64)[:, :, :8]],
                         ids=["more lines than words", "five digit lines", "other line width",
                              "not contiguous"])
def test_the_compiled_sum_is_never_handed_lines_it_would_write_out_of_bounds(out):
    # Numba does not check array bounds, so the call into the kernel checks the shapes.
    words = np.zeros((3, 4, 8), dtype=np.uint64)
    with pytest.raises(ValueError, match=r"^cannot sum lines 0\.\.\+\d of \(3, 4, 8\) words into"):
        gternary._fast_sums(words, 0, out, streaming=True)
