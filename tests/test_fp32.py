"""FP32 path (docs/design.md, "FP32 passthrough"): byte-exact identity, whatever the bytes are."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_fabric.golden import fp32, lines

LINE_BITS = (128, 256, 512, 1024)

# Bit patterns that a conversion through any other type would change or merge.
SPECIAL_BITS = {
    "quiet-nan": 0x7FC00000,
    "signalling-nan": 0x7F800001,
    "nan-payload": 0x7FA5A5A5,
    "negative-nan": 0xFFC00001,
    "all-ones-nan": 0xFFFFFFFF,
    "max-payload-nan": 0x7FFFFFFF,
    "minus-zero": 0x80000000,
    "plus-zero": 0x00000000,
    "smallest-denormal": 0x00000001,
    "negative-largest-denormal": 0x807FFFFF,
    "plus-inf": 0x7F800000,
    "minus-inf": 0xFF800000,
    "one": 0x3F800000,
}


def special_tensor():
    return np.array(list(SPECIAL_BITS.values()), dtype=np.uint32).view(np.float32)


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_special_bit_patterns_pass_byte_exact(line_bits):
    tensor = special_tensor()
    raw = np.array(list(SPECIAL_BITS.values()), dtype="<u4").tobytes()
    out = fp32.to_lines(tensor, line_bits=line_bits)
    assert out.dtype == np.uint8 and out.shape[1] == line_bits // 8
    assert out.reshape(-1)[:len(raw)].tobytes() == raw
    back = fp32.from_lines(fp32.identity(out), n_elements=tensor.size, line_bits=line_bits)
    assert back.dtype == np.float32
    assert back.view(np.uint32).tolist() == list(SPECIAL_BITS.values())


@pytest.mark.parametrize("name", sorted(SPECIAL_BITS))
def test_each_special_value_round_trips_alone(name):
    value = np.array([SPECIAL_BITS[name]], dtype=np.uint32).view(np.float32)
    back = fp32.from_lines(fp32.to_lines(value, line_bits=128), n_elements=1, line_bits=128)
    assert back.view(np.uint32)[0] == SPECIAL_BITS[name]


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_value_j_is_little_endian_at_lane_j_mod_f_of_line_j_div_f(line_bits):
    per_line = line_bits // 32
    size = 2 * per_line + 3
    bits = np.random.default_rng(line_bits).integers(0, 2**32, size=size, dtype=np.uint64).astype(np.uint32)
    out = fp32.to_lines(bits.view(np.float32), line_bits=line_bits)
    assert out.shape == (3, line_bits // 8)
    ints = [lines.line_to_int(line) for line in out]
    for j in range(size):
        assert (ints[j // per_line] >> (32 * (j % per_line))) & 0xFFFFFFFF == bits[j]


@pytest.mark.parametrize("size", [1, 3, 15, 17, 31])
@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_padding_bytes_are_zero(line_bits, size):
    tensor = np.full(size, np.uint32(0xFFFFFFFF)).astype(np.uint32).view(np.float32)  # all-ones NaN
    out = fp32.to_lines(tensor, line_bits=line_bits)
    per_line = line_bits // 32
    assert out.shape == (-(-size // per_line), line_bits // 8)
    flat = out.reshape(-1)
    assert (flat[:4 * size] == 0xFF).all() and not flat[4 * size:].any()


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_from_lines_drops_padding(line_bits):
    tensor = np.arange(1, 6, dtype=np.float32)
    out = fp32.to_lines(tensor, line_bits=line_bits)
    back = fp32.from_lines(out, n_elements=5, line_bits=line_bits)
    assert back.tolist() == [1, 2, 3, 4, 5]
    assert fp32.from_lines(out, n_elements=0, line_bits=line_bits).shape == (0,)
    with pytest.raises(ValueError, match="^n_elements must be between 0 and"):
        fp32.from_lines(out, n_elements=out.size // 4 + 1, line_bits=line_bits)


def test_multi_dimensional_tensor_flattens_in_c_order():
    tensor = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = fp32.to_lines(tensor, line_bits=128)
    assert fp32.from_lines(out, n_elements=12, line_bits=128).tolist() == list(range(12))
    fortran = np.asfortranarray(tensor)
    np.testing.assert_array_equal(fp32.to_lines(fortran, line_bits=128), out)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.uint32, np.dtype(">f4")])
def test_non_float32_is_refused(dtype):
    with pytest.raises(TypeError, match=f"^tensor must have dtype float32 for the FP32 path, not {np.dtype(dtype)}$"):
        fp32.to_lines(np.zeros(4, dtype=dtype))


def test_python_floats_are_refused_rather_than_converted():
    with pytest.raises(TypeError, match="not float64$"):
        fp32.to_lines([1.0, -0.0])


def test_bad_line_width_is_refused():
    with pytest.raises(ValueError, match=r"^line_bits must be one of \(128, 256, 512, 1024\), not 64$"):
        fp32.to_lines(np.zeros(4, dtype=np.float32), line_bits=64)
    with pytest.raises(ValueError, match=r"^lines must have 64 bytes per line \(line_bits=512\), not 16$"):
        fp32.from_lines(np.zeros((1, 16), dtype=np.uint8), n_elements=1)


def test_identity_returns_the_same_bytes_as_a_copy():
    data = np.random.default_rng(3).integers(0, 256, size=(4, 64), dtype=np.uint8)
    out = fp32.identity(data)
    assert out.tobytes() == data.tobytes()
    assert not np.shares_memory(out, data)
    out[0, 0] ^= 0xFF
    assert out[0, 0] != data[0, 0]


def test_from_lines_returns_a_copy():
    out = fp32.to_lines(special_tensor(), line_bits=512)
    back = fp32.from_lines(out, n_elements=3, line_bits=512)
    assert not np.shares_memory(back, out)


def test_identity_refuses_what_is_not_a_batch_of_lines():
    with pytest.raises(TypeError, match="^lines must have dtype uint8, not float32$"):
        fp32.identity(np.zeros((1, 16), dtype=np.float32))
    with pytest.raises(ValueError, match="^lines must have a last axis of"):
        fp32.identity(np.zeros((1, 20), dtype=np.uint8))


@settings(max_examples=60, deadline=None)
@given(line_bits=st.sampled_from(LINE_BITS),
       bits=st.lists(st.integers(min_value=0, max_value=2**32 - 1), min_size=0, max_size=80))
def test_any_bit_pattern_round_trips(line_bits, bits):
    tensor = np.array(bits, dtype=np.uint32).view(np.float32)
    out = fp32.identity(fp32.to_lines(tensor, line_bits=line_bits))
    assert out.reshape(-1)[:4 * len(bits)].tobytes() == np.array(bits, dtype="<u4").tobytes()
    back = fp32.from_lines(out, n_elements=len(bits), line_bits=line_bits)
    assert back.view(np.uint32).tolist() == bits
