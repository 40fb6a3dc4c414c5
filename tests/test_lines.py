"""Line format (docs/design.md, "Line format"): byte order, lane order, padding, validation.

The packers are checked against an independent construction with Python big integers:
a line is ``int.from_bytes(line, "little")`` and lane ``i`` of width ``W`` is bits
``[i*W+W-1 : i*W]`` of that integer.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_fabric.golden import lines

LINE_BITS = (128, 256, 512, 1024)
LANE_BITS = (1, 2, 4, 8, 16)
PROPERTY = settings(max_examples=60, deadline=None)


# --------------------------------------------------------------------------- references

def ref_pack_row(values, lane_bits):
    """One row of lane values to bytes, through a Python integer (the normative definition)."""
    mask = (1 << lane_bits) - 1
    acc = 0
    for i, v in enumerate(values):
        acc |= (int(v) & mask) << (i * lane_bits)
    nbytes = len(values) * lane_bits // 8
    return acc.to_bytes(nbytes, "little")


def ref_unpack_row(data, lane_bits, signed):
    """One row of bytes to lane values, through a Python integer."""
    acc = int.from_bytes(bytes(data), "little")
    mask = (1 << lane_bits) - 1
    out = []
    for i in range(len(data) * 8 // lane_bits):
        v = (acc >> (i * lane_bits)) & mask
        if signed and v >> (lane_bits - 1):
            v -= 1 << lane_bits
        out.append(v)
    return out


def random_lane_values(rng, shape, lane_bits, signed):
    if signed:
        low, high = -(1 << (lane_bits - 1)), 1 << (lane_bits - 1)
        dtype = np.int16 if lane_bits == 16 else np.int8
    else:
        low, high = 0, 1 << lane_bits
        dtype = np.uint16 if lane_bits == 16 else np.uint8
    return rng.integers(low, high, size=shape).astype(dtype)


# --------------------------------------------------------------------------- byte order

@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_byte_k_holds_bits_8k_plus_7_down_to_8k(line_bits):
    for k in range(line_bits // 8):
        for b in (0, 3, 7):
            line = lines.int_to_line(1 << (8 * k + b), line_bits=line_bits)
            expected = np.zeros(line_bits // 8, dtype=np.uint8)
            expected[k] = 1 << b
            np.testing.assert_array_equal(line, expected)


@pytest.mark.parametrize("seed", [0, 1, 2], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_line_to_int_is_int_from_bytes_little(line_bits, seed):
    rng = np.random.default_rng(seed)
    line = rng.integers(0, 256, size=line_bits // 8, dtype=np.uint8)
    assert lines.line_to_int(line) == int.from_bytes(line.tobytes(), "little")
    # the least significant byte comes first
    assert lines.line_to_int(line) & 0xFF == line[0]
    assert lines.line_to_int(line) >> (line_bits - 8) == line[-1]


def test_line_to_int_accepts_bytes():
    assert lines.line_to_int(b"\x01\x02" + bytes(14)) == 0x0201


def test_line_to_int_accepts_bytearray_and_memoryview():
    raw = b"\x01\x02" + bytes(14)
    assert lines.line_to_int(bytearray(raw)) == 0x0201
    assert lines.line_to_int(memoryview(raw)) == 0x0201


@PROPERTY
@given(line_bits=st.sampled_from(LINE_BITS), data=st.data())
def test_int_to_line_and_line_to_int_round_trip(line_bits, data):
    value = data.draw(st.integers(min_value=0, max_value=(1 << line_bits) - 1))
    line = lines.int_to_line(value, line_bits=line_bits)
    assert line.dtype == np.uint8 and line.shape == (line_bits // 8,)
    assert line.tobytes() == value.to_bytes(line_bits // 8, "little")
    assert lines.line_to_int(line) == value


@pytest.mark.parametrize("value", [-1, 1 << 512, (1 << 600) + 5])
def test_int_to_line_refuses_a_value_that_does_not_fit(value):
    with pytest.raises(ValueError, match=r"value must fit in 512 unsigned bits, not -?0x"):
        lines.int_to_line(value, line_bits=512)


def test_int_to_line_top_value_fits():
    line = lines.int_to_line((1 << 128) - 1, line_bits=128)
    assert (line == 0xFF).all()


def test_int_to_line_refuses_bad_line_bits():
    with pytest.raises(ValueError, match=r"line_bits must be one of \(128, 256, 512, 1024\), not 64"):
        lines.int_to_line(0, line_bits=64)


# --------------------------------------------------------------------------- lanes

@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("lane_bits", LANE_BITS)
@pytest.mark.parametrize("seed", [0, 7], ids=lambda s: f"seed{s}")
def test_pack_lanes_matches_big_integer_reference(seed, lane_bits, signed):
    rng = np.random.default_rng(seed)
    n_lanes = 512 // lane_bits
    values = random_lane_values(rng, (3, n_lanes), lane_bits, signed)
    packed = lines.pack_lanes(values, lane_bits=lane_bits)
    assert packed.dtype == np.uint8
    assert packed.shape == (3, n_lanes * lane_bits // 8)
    for row, got in zip(values, packed):
        assert got.tobytes() == ref_pack_row(row, lane_bits)


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("lane_bits", LANE_BITS)
@pytest.mark.parametrize("seed", [0, 7], ids=lambda s: f"seed{s}")
def test_unpack_lanes_matches_big_integer_reference(seed, lane_bits, signed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(3, 64), dtype=np.uint8)
    got = lines.unpack_lanes(data, lane_bits=lane_bits, signed=signed)
    assert got.shape == (3, 64 * 8 // lane_bits)
    for row, values in zip(data, got):
        assert [int(v) for v in values] == ref_unpack_row(row, lane_bits, signed)


@pytest.mark.parametrize("signed,lane_bits,dtype", [
    (False, 1, np.uint8), (False, 2, np.uint8), (False, 4, np.uint8), (False, 8, np.uint8),
    (False, 16, np.uint16),
    (True, 1, np.int8), (True, 2, np.int8), (True, 4, np.int8), (True, 8, np.int8),
    (True, 16, np.int16),
])
def test_unpack_lanes_dtype(signed, lane_bits, dtype):
    got = lines.unpack_lanes(np.zeros((2, 16), dtype=np.uint8), lane_bits=lane_bits, signed=signed)
    assert got.dtype == dtype


@pytest.mark.parametrize("lane_bits", LANE_BITS)
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_lane_i_sits_at_bits_i_times_w(line_bits, lane_bits):
    n_lanes = line_bits // lane_bits
    mask = (1 << lane_bits) - 1
    for i in sorted({0, 1, n_lanes // 2 - 1, n_lanes // 2, n_lanes - 2, n_lanes - 1}):
        values = np.zeros(n_lanes, dtype=np.uint16)
        values[i] = mask
        packed = lines.pack_lanes(values, lane_bits=lane_bits)
        assert lines.line_to_int(packed) == mask << (i * lane_bits)
        # and a value with a distinguishable bit order: only the lane's lowest bit set
        values[i] = 1
        packed = lines.pack_lanes(values, lane_bits=lane_bits)
        assert lines.line_to_int(packed) == 1 << (i * lane_bits)


def test_two_bit_lanes_hand_built_byte():
    # lanes 0..3 of one byte: 01, 11, 00, 10 -> 0b10_00_11_01
    packed = lines.pack_lanes(np.array([1, 3, 0, 2], dtype=np.uint8), lane_bits=2)
    assert packed.tolist() == [0b10001101]
    assert lines.unpack_lanes(packed, lane_bits=2).tolist() == [1, 3, 0, 2]
    assert lines.unpack_lanes(packed, lane_bits=2, signed=True).tolist() == [1, -1, 0, -2]


def test_four_bit_and_sixteen_bit_lanes_hand_built_bytes():
    assert lines.pack_lanes(np.array([0x5, 0xA]), lane_bits=4).tolist() == [0xA5]
    assert lines.pack_lanes(np.array([0x1234]), lane_bits=16).tolist() == [0x34, 0x12]
    assert lines.pack_lanes(np.array([1, 0, 0, 0, 0, 0, 0, 1]), lane_bits=1).tolist() == [0x81]


@PROPERTY
@given(lane_bits=st.sampled_from(LANE_BITS), signed=st.booleans(),
       n_bytes=st.integers(min_value=1, max_value=40), rows=st.integers(min_value=1, max_value=3),
       seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_pack_then_unpack_round_trips(lane_bits, signed, n_bytes, rows, seed):
    if lane_bits == 16:
        n_bytes += n_bytes % 2
    n_lanes = n_bytes * 8 // lane_bits
    values = random_lane_values(np.random.default_rng(seed), (rows, n_lanes), lane_bits, signed)
    packed = lines.pack_lanes(values, lane_bits=lane_bits)
    assert packed.shape == (rows, n_bytes)
    back = lines.unpack_lanes(packed, lane_bits=lane_bits, signed=signed)
    np.testing.assert_array_equal(back, values)
    assert lines.pack_lanes(back, lane_bits=lane_bits).tobytes() == packed.tobytes()


@PROPERTY
@given(lane_bits=st.sampled_from(LANE_BITS), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_unpack_then_pack_round_trips(lane_bits, seed):
    data = np.random.default_rng(seed).integers(0, 256, size=(2, 32), dtype=np.uint8)
    for signed in (False, True):
        values = lines.unpack_lanes(data, lane_bits=lane_bits, signed=signed)
        np.testing.assert_array_equal(lines.pack_lanes(values, lane_bits=lane_bits), data)


@pytest.mark.parametrize("lane_bits", LANE_BITS)
def test_pack_lanes_keeps_leading_axes(lane_bits):
    values = random_lane_values(np.random.default_rng(3), (2, 3, 128 // lane_bits), lane_bits, False)
    packed = lines.pack_lanes(values, lane_bits=lane_bits)
    assert packed.shape == (2, 3, 16)
    np.testing.assert_array_equal(lines.unpack_lanes(packed, lane_bits=lane_bits), values)


@pytest.mark.parametrize("lane_bits", LANE_BITS)
def test_pack_lanes_masks_to_lane_width_two_complement(lane_bits):
    n_lanes = 16 // lane_bits
    values = np.full(n_lanes, -1, dtype=np.int32)
    assert lines.line_to_int(lines.pack_lanes(values, lane_bits=lane_bits)) == 0xFFFF
    too_wide = np.full(n_lanes, 1 << lane_bits, dtype=np.int32)  # only bit lane_bits set
    assert lines.line_to_int(lines.pack_lanes(too_wide, lane_bits=lane_bits)) == 0


@pytest.mark.parametrize("lane_bits,n_lanes", [(1, 7), (1, 9), (2, 3), (2, 6), (4, 1), (4, 3)])
def test_pack_lanes_refuses_lanes_that_are_not_whole_bytes(lane_bits, n_lanes):
    with pytest.raises(ValueError, match=f"^{n_lanes} lanes of {lane_bits} bits are not a whole "
                                         "number of bytes$"):
        lines.pack_lanes(np.zeros(n_lanes, dtype=np.uint8), lane_bits=lane_bits)


@pytest.mark.parametrize("lane_bits", [0, 3, 32, 64])
def test_lane_width_outside_choices_is_refused(lane_bits):
    message = rf"^lane_bits must be one of \(1, 2, 4, 8, 16\), not {lane_bits}$"
    with pytest.raises(ValueError, match=message):
        lines.pack_lanes(np.zeros(64, dtype=np.uint8), lane_bits=lane_bits)
    with pytest.raises(ValueError, match=message):
        lines.unpack_lanes(np.zeros(64, dtype=np.uint8), lane_bits=lane_bits)


# --------------------------------------------------------------------------- lane grid

@pytest.mark.parametrize("lanes", [1, 8, 64, 256, 512])
@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 1000])
def test_element_j_goes_to_lane_j_mod_l_of_line_j_div_l(size, lanes):
    flat = np.arange(1, size + 1, dtype=np.int32)
    grid = lines.to_lane_grid(flat, lanes=lanes, fill=-7)
    n_lines = -(-size // lanes)
    assert grid.shape == (n_lines, lanes)
    assert grid.dtype == flat.dtype
    for j in range(size):
        assert grid[j // lanes, j % lanes] == j + 1
    padding = grid.reshape(-1)[size:]
    assert (padding == -7).all() and padding.size == n_lines * lanes - size
    np.testing.assert_array_equal(lines.from_lane_grid(grid, n_elements=size), flat)


def test_to_lane_grid_pads_with_zero_by_default_and_flattens_c_order():
    grid = lines.to_lane_grid(np.array([[1, 2], [3, 4]], dtype=np.uint8), lanes=3)
    assert grid.tolist() == [[1, 2, 3], [4, 0, 0]]


def test_from_lane_grid_drops_padding_lanes():
    grid = np.array([[1, 2, 3], [4, 0, 0]])
    assert lines.from_lane_grid(grid, n_elements=4).tolist() == [1, 2, 3, 4]
    assert lines.from_lane_grid(grid, n_elements=0).tolist() == []
    assert lines.from_lane_grid(grid, n_elements=6).tolist() == [1, 2, 3, 4, 0, 0]


@pytest.mark.parametrize("n_elements", [-1, 7])
def test_from_lane_grid_refuses_n_elements_out_of_range(n_elements):
    with pytest.raises(ValueError, match=rf"^n_elements must be between 0 and 6 \(the lanes given\), "
                                         rf"not {n_elements}$"):
        lines.from_lane_grid(np.zeros((2, 3)), n_elements=n_elements)


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_split_lines_cuts_rows_into_lines(line_bits):
    nbytes = line_bits // 8
    data = np.arange(2 * 3 * nbytes, dtype=np.uint32).astype(np.uint8).reshape(2, 3 * nbytes)
    got = lines.split_lines(data, line_bits=line_bits)
    assert got.shape == (6, nbytes)
    np.testing.assert_array_equal(got.reshape(-1), data.reshape(-1))


def test_split_lines_refuses_partial_lines():
    with pytest.raises(ValueError, match="^20 bytes are not a whole number of 128-bit lines$"):
        lines.split_lines(np.zeros((1, 20), dtype=np.uint8), line_bits=128)


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_allowed_line_widths_are_accepted(line_bits):
    assert lines.check_line_bits(line_bits) == line_bits
    assert type(lines.check_line_bits(np.int64(line_bits))) is int
    assert lines.line_bytes(line_bits) == line_bits // 8


@pytest.mark.parametrize("line_bits", [0, 64, 100, 511, 2048, -512])
def test_bad_line_width_is_a_value_error(line_bits):
    with pytest.raises(ValueError, match=rf"^line_bits must be one of \(128, 256, 512, 1024\), "
                                         rf"not {line_bits}$"):
        lines.check_line_bits(line_bits)


@pytest.mark.parametrize("line_bits", ["512", 512.0, True, None])
def test_line_width_of_wrong_type_is_a_type_error(line_bits):
    with pytest.raises(TypeError, match=rf"^line_bits must be an integer, not {line_bits!r}$"):
        lines.check_line_bits(line_bits)


def test_check_lines_refuses_a_non_array():
    with pytest.raises(TypeError, match="^lines must be a numpy.ndarray of uint8, not list$"):
        lines.check_lines([[0] * 64])


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.float32, bool])
def test_check_lines_refuses_a_wrong_dtype(dtype):
    with pytest.raises(TypeError, match=f"^lines must have dtype uint8, not {np.dtype(dtype)}$"):
        lines.check_lines(np.zeros((1, 64), dtype=dtype))


def test_check_lines_refuses_a_wrong_number_of_axes():
    with pytest.raises(ValueError, match=r"^lines must have 2 axes, not shape \(64,\)$"):
        lines.check_lines(np.zeros(64, dtype=np.uint8))
    with pytest.raises(ValueError, match=r"^grads must have 3 axes, not shape \(2, 64\)$"):
        lines.check_lines(np.zeros((2, 64), dtype=np.uint8), name="grads", ndim=3)


def test_check_lines_refuses_a_last_axis_that_is_not_a_line():
    with pytest.raises(ValueError, match=r"^lines must have a last axis of \[16, 32, 64, 128\] bytes "
                                         r"\(one line\), not 10$"):
        lines.check_lines(np.zeros((1, 10), dtype=np.uint8))


def test_check_lines_refuses_a_line_width_that_differs_from_line_bits():
    with pytest.raises(ValueError, match=r"^lines must have 64 bytes per line \(line_bits=512\), "
                                         r"not 32$"):
        lines.check_lines(np.zeros((1, 32), dtype=np.uint8), line_bits=512)
    with pytest.raises(ValueError, match=r"^line_bits must be one of"):
        lines.check_lines(np.zeros((1, 32), dtype=np.uint8), line_bits=96)


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_check_lines_infers_the_width_and_makes_contiguous(line_bits):
    nbytes = line_bits // 8
    base = np.zeros((4, 2 * nbytes), dtype=np.uint8)
    strided = base[:, ::2]
    assert not strided.flags.c_contiguous
    got, width = lines.check_lines(strided)
    assert width == line_bits and got.flags.c_contiguous
    got, width = lines.check_lines(np.zeros((2, 3, nbytes), dtype=np.uint8), ndim=3)
    assert width == line_bits and got.shape == (2, 3, nbytes)


@pytest.mark.parametrize("n_bytes", [1, 2, 16, 64])
@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_interleave_bit_planes_puts_high_then_low_in_each_2_bit_lane(seed, n_bytes):
    rng = np.random.default_rng(seed)
    low_bits = rng.integers(0, 2, size=8 * n_bytes)
    high_bits = rng.integers(0, 2, size=8 * n_bytes)
    low = np.packbits(low_bits.astype(np.uint8), bitorder="little")
    high = np.packbits(high_bits.astype(np.uint8), bitorder="little")
    got = lines.interleave_bit_planes(low, high)
    assert got.dtype == np.uint8 and got.shape == (2 * n_bytes,)
    assert got.tobytes() == ref_pack_row(2 * high_bits + low_bits, 2)


def test_interleave_bit_planes_hand_built():
    # lane 0: high 1 low 0 -> 10; lane 1: high 0 low 1 -> 01; lane 7: 11
    got = lines.interleave_bit_planes(np.array([0b1000_0010], dtype=np.uint8),
                                      np.array([0b1000_0001], dtype=np.uint8))
    assert got.tolist() == [0b0000_0110, 0b1100_0000]


# --------------------------------------------------------------------------- bit-planes

@pytest.mark.parametrize("lane_bits,planes", [(1, 1), (1, 5), (1, 7), (2, 3), (2, 4), (4, 2), (1, 12)])
@pytest.mark.parametrize("seed", [0, 1], ids=lambda s: f"seed{s}")
def test_plane_k_holds_digit_k_of_every_value_at_its_lane(seed, lane_bits, planes):
    rng = np.random.default_rng(seed)
    n_lanes, width = 64, planes * lane_bits
    values = rng.integers(-(1 << (width - 1)), 1 << (width - 1), size=(3, n_lanes))
    got = lines.pack_planes(values, planes=planes, lane_bits=lane_bits)
    assert got.dtype == np.uint8 and got.shape == (3, planes, n_lanes * lane_bits // 8)
    mask = (1 << lane_bits) - 1
    for row in range(3):
        for k in range(planes):
            plane = int.from_bytes(got[row, k].tobytes(), "little")
            for i, value in enumerate(values[row]):
                assert (plane >> (i * lane_bits)) & mask == (int(value) >> (k * lane_bits)) & mask


def test_pack_planes_sign_extends_negative_values_and_zero_extends_the_rest():
    values = np.array([[-1, 1, -2, 0, 3, -4, 2, -3]], dtype=np.int8)  # 3-bit values, 4 planes
    got = lines.pack_planes(values, planes=4)
    # plane 3 lies past the values' width: it repeats bit 2, the sign
    assert got[0, :, 0].tolist() == [0b1001_0011, 0b0101_0101, 0b1010_0101, 0b1010_0101]
    two_bit = lines.pack_planes(np.array([[-3, 3, 0, 1]], dtype=np.int8), planes=2, lane_bits=2)
    # -3 = ...1101: digits 01, 11; 3: digits 11, 00
    assert two_bit[0, :, 0].tolist() == [0b01_00_11_01, 0b00_00_00_11]


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("lane_bits,planes", [(1, 1), (1, 3), (1, 7), (1, 8), (2, 2), (2, 3), (2, 4),
                                              (1, 9), (2, 8), (4, 3)])
def test_unpack_planes_inverts_pack_planes(lane_bits, planes, signed):
    rng = np.random.default_rng(planes * 10 + lane_bits)
    width = planes * lane_bits
    low, high = (-(1 << (width - 1)), 1 << (width - 1)) if signed else (0, 1 << width)
    values = rng.integers(low, high, size=(2, 5, 128))
    values[0, 0, :4] = [low, high - 1, 0, -1 if signed else 1]
    packed = lines.pack_planes(values, planes=planes, lane_bits=lane_bits)
    got = lines.unpack_planes(packed, lane_bits=lane_bits, signed=signed)
    wide = width > 8
    expected_dtype = {(False, False): np.uint8, (False, True): np.uint16,
                      (True, False): np.int8, (True, True): np.int16}[signed, wide]
    assert got.dtype == expected_dtype and got.shape == values.shape
    np.testing.assert_array_equal(got, values)


def test_unpack_planes_refuses_more_than_16_bits_and_a_missing_plane_axis():
    with pytest.raises(ValueError, match="^planes must hold at most 16 bits per lane, not 18$"):
        lines.unpack_planes(np.zeros((9, 4), dtype=np.uint8), lane_bits=2)
    with pytest.raises(ValueError, match=r"^planes must have a plane axis before the byte axis, "
                                         r"not shape \(4,\)$"):
        lines.unpack_planes(np.zeros(4, dtype=np.uint8))


@pytest.mark.parametrize("planes,error,message", [
    (0, ValueError, "planes must be at least 1, not 0"),
    (-1, ValueError, "planes must be at least 1, not -1"),
    (2.0, TypeError, "planes must be an integer, not 2.0"),
    (True, TypeError, "planes must be an integer, not True"),
])
def test_pack_planes_refuses_a_bad_plane_count(planes, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        lines.pack_planes(np.zeros(8, dtype=np.uint8), planes=planes)


def test_pack_planes_refuses_non_integer_values():
    with pytest.raises(TypeError, match="^values must be an integer array, not dtype float32$"):
        lines.pack_planes(np.zeros(8, dtype=np.float32), planes=2)
