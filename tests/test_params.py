"""Parameters and the widths that follow from them (golden/params.py, formats.py, validate.py).

Every validation message is checked in full: ``"<param> must be <rule>, not <value!r>"``.
"""

import dataclasses
import math
import re

import numpy as np
import pytest

from neuron_fabric.golden import formats, validate
from neuron_fabric.golden.formats import Readout, Route
from neuron_fabric.golden.params import ADDR_BITS, HW_MAX_WORKERS_RANGE, PRESETS, FabricParams

LINE_BITS = (128, 256, 512, 1024)


def exact(message):
    """A pytest ``match`` pattern for exactly this message."""
    return "^" + re.escape(message) + "$"


# --------------------------------------------------------------------------- widths

@pytest.mark.parametrize("max_workers", range(1, 128))
def test_default_counter_bits_is_ceil_log2_of_max_workers_plus_one(max_workers):
    bits = formats.default_counter_bits(max_workers)
    assert bits == math.ceil(math.log2(max_workers + 1))
    # the narrowest counter that holds max_workers
    assert (1 << bits) - 1 >= max_workers > (1 << (bits - 1)) - 1
    assert formats.check_counter_bits(None, max_workers=max_workers) == bits


@pytest.mark.parametrize("max_workers,bits", [(1, 1), (2, 2), (3, 2), (4, 3), (7, 3), (8, 4),
                                              (15, 4), (16, 5), (31, 5), (32, 6), (63, 6),
                                              (64, 7), (127, 7)])
def test_default_counter_bits_hand_table(max_workers, bits):
    assert formats.default_counter_bits(max_workers) == bits


@pytest.mark.parametrize("max_workers", [0, -1, 128, 255])
def test_max_workers_outside_1_to_127_is_refused(max_workers):
    with pytest.raises(ValueError, match=exact(f"max_workers must be between 1 and 127, not {max_workers}")):
        formats.default_counter_bits(max_workers)
    with pytest.raises(ValueError, match=exact(f"max_workers must be between 1 and 127, not {max_workers}")):
        formats.check_max_workers(max_workers)


@pytest.mark.parametrize("max_workers", [16.0, "16", True, None])
def test_max_workers_of_wrong_type_is_refused(max_workers):
    with pytest.raises(TypeError, match=exact(f"max_workers must be an integer, not {max_workers!r}")):
        formats.check_max_workers(max_workers)


@pytest.mark.parametrize("max_workers", [1, 5, 16, 64, 127])
def test_counter_bits_from_one_to_default_is_accepted(max_workers):
    full = formats.default_counter_bits(max_workers)
    for bits in range(1, full + 1):
        assert formats.check_counter_bits(bits, max_workers=max_workers) == bits
    for bits in (0, full + 1):
        with pytest.raises(ValueError, match=exact(f"counter_bits must be between 1 and {full}, not {bits}")):
            formats.check_counter_bits(bits, max_workers=max_workers)


@pytest.mark.parametrize("bits", [3.0, "3", False])
def test_counter_bits_of_wrong_type_is_refused(bits):
    with pytest.raises(TypeError, match=exact(f"counter_bits must be an integer, not {bits!r}")):
        formats.check_counter_bits(bits, max_workers=16)


@pytest.mark.parametrize("bits", range(1, 17))
def test_count_limit_is_all_ones(bits):
    assert formats.count_limit(bits) == 2**bits - 1


@pytest.mark.parametrize("max_workers", [1, 2, 5, 16, 64, 100, 127])
def test_sum_limit_is_max_workers_with_the_default_counter(max_workers):
    bits = formats.default_counter_bits(max_workers)
    assert formats.sum_limit(max_workers, bits) == max_workers
    for narrow in range(1, bits):
        assert formats.sum_limit(max_workers, narrow) == 2**narrow - 1


@pytest.mark.parametrize("line_bits", LINE_BITS)
def test_route_lanes(line_bits):
    assert formats.route_lanes(Route.GBINARY, line_bits) == line_bits
    assert formats.route_lanes(Route.GTERNARY, line_bits) == line_bits // 2
    assert formats.route_lanes(0, line_bits) == line_bits  # the CSR encoding works too


def test_readout_lines_per_slot_at_512_bits_and_16_workers():
    bits = formats.default_counter_bits(16)
    got = {r.name: formats.readout_lines_per_slot(r, counter_bits=bits) for r in Readout}
    assert got == {"SIGN": 1, "TERNARY": 2, "COUNTS": 5, "GATED": 1, "SUMS": 3}


@pytest.mark.parametrize("bits", range(1, 17))
def test_readout_lines_per_slot_is_one_line_per_bit_plane(bits):
    def per_slot(readout):
        return formats.readout_lines_per_slot(readout, counter_bits=bits)
    assert per_slot(Readout.SIGN) == 1
    assert per_slot(Readout.TERNARY) == 2      # the sign plane and the not-a-tie plane
    assert per_slot(Readout.COUNTS) == bits    # a plane per counter bit
    assert per_slot(Readout.GATED) == 1
    assert per_slot(Readout.SUMS) == math.ceil((bits + 1) / 2)  # 2 bits of each sum per line
    assert per_slot(int(Readout.COUNTS)) == bits  # the CSR encoding works too


@pytest.mark.parametrize("bits,error,message", [
    (0, ValueError, "counter_bits must be at least 1, not 0"),
    (2.0, TypeError, "counter_bits must be an integer, not 2.0"),
])
def test_readout_lines_per_slot_refuses_a_bad_counter_width(bits, error, message):
    with pytest.raises(error, match=exact(message)):
        formats.readout_lines_per_slot(Readout.COUNTS, counter_bits=bits)


def test_route_and_readout_csr_encodings():
    assert [(r.name, int(r)) for r in Route] == [("GBINARY", 0), ("GTERNARY", 1)]
    assert [(r.name, int(r)) for r in Readout] == [("SIGN", 0), ("TERNARY", 1), ("COUNTS", 2),
                                                   ("GATED", 3), ("SUMS", 4)]


def test_readout_route():
    for readout in (Readout.SIGN, Readout.TERNARY, Readout.COUNTS):
        assert formats.readout_route(readout) is Route.GBINARY
    for readout in (Readout.GATED, Readout.SUMS):
        assert formats.readout_route(readout) is Route.GTERNARY
    assert set(formats.READOUTS_BY_ROUTE[Route.GBINARY]) | set(formats.READOUTS_BY_ROUTE[Route.GTERNARY]) \
        == set(Readout)


def test_check_readout_accepts_members_and_their_encodings():
    for readout in Readout:
        assert formats.check_readout(readout) is readout
        assert formats.check_readout(int(readout)) is readout
        assert formats.check_readout(readout, route=formats.readout_route(readout)) is readout


@pytest.mark.parametrize("readout", [5, -1, "SIGN"])
def test_check_readout_refuses_an_unknown_readout(readout):
    with pytest.raises(ValueError, match=exact(
            f"readout must be one of SIGN, TERNARY, COUNTS, GATED, SUMS, not {readout!r}")):
        formats.check_readout(readout)


def test_check_readout_refuses_a_readout_of_the_other_route():
    with pytest.raises(ValueError, match=exact("readout must be one of GATED, SUMS for GTERNARY, not Readout.SIGN")):
        formats.check_readout(Readout.SIGN, route=Route.GTERNARY)
    with pytest.raises(ValueError, match=exact(
            "readout must be one of SIGN, TERNARY, COUNTS for GBINARY, not Readout.SUMS")):
        formats.check_readout(Readout.SUMS, route=Route.GBINARY)


def test_check_readout_lines_groups_whole_readouts():
    lines = np.arange(5 * 2 * 64, dtype=np.uint32).astype(np.uint8).reshape(10, 64)
    slots = formats.check_readout_lines(lines, readout=Readout.COUNTS, counter_bits=5)
    assert slots.shape == (2, 5, 64)
    np.testing.assert_array_equal(slots.reshape(-1), lines.reshape(-1))


def test_check_readout_lines_refuses_partial_readouts():
    with pytest.raises(ValueError, match=exact(
            "lines must hold whole COUNTS readouts of 5 lines each, not 7 lines")):
        formats.check_readout_lines(np.zeros((7, 64), dtype=np.uint8), readout=Readout.COUNTS,
                                    counter_bits=5)


# --------------------------------------------------------------------------- FabricParams

def test_fabric_params_defaults():
    p = FabricParams()
    assert (p.line_bits, p.max_workers, p.depth, p.num_windows, p.counter_bits) == (512, 16, 64, 2, 5)
    assert p.name == "l512_w16_c5_d64_n2"
    assert p.as_dict() == {"line_bits": 512, "max_workers": 16, "depth": 64, "num_windows": 2,
                           "counter_bits": 5}
    assert p.worker_bits == 4
    assert p.workers_served == 16


def test_fabric_params_is_frozen():
    p = FabricParams()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.line_bits = 256  # type: ignore[misc]


@pytest.mark.parametrize("max_workers", range(HW_MAX_WORKERS_RANGE[0], HW_MAX_WORKERS_RANGE[1] + 1))
def test_fabric_params_derived_widths(max_workers):
    p = FabricParams(max_workers=max_workers)
    assert p.counter_bits == math.ceil(math.log2(max_workers + 1))
    assert p.worker_bits == max(1, math.ceil(math.log2(max_workers)))
    assert 2**p.worker_bits >= max_workers
    assert p.workers_served == max_workers
    narrow = FabricParams(max_workers=max_workers, counter_bits=1)
    assert narrow.counter_bits == 1 and narrow.workers_served == 1


def test_fabric_params_narrow_counter_caps_workers_served():
    p = FabricParams(max_workers=16, counter_bits=3)
    assert p.workers_served == 7
    assert p.name == "l512_w16_c3_d64_n2"


@pytest.mark.parametrize("kwargs", [
    dict(line_bits=128), dict(line_bits=1024), dict(max_workers=2), dict(max_workers=64),
    dict(depth=1), dict(depth=65536), dict(num_windows=1), dict(num_windows=8),
    dict(max_workers=64, counter_bits=7), dict(counter_bits=1),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_fabric_params_accepts_the_bounds(kwargs):
    p = FabricParams(**kwargs)
    for key, value in kwargs.items():
        assert getattr(p, key) == value


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(line_bits="512"), TypeError, "line_bits must be an integer, not '512'"),
    (dict(line_bits=512.0), TypeError, "line_bits must be an integer, not 512.0"),
    (dict(line_bits=True), TypeError, "line_bits must be an integer, not True"),
    (dict(line_bits=500), ValueError, "line_bits must be one of (128, 256, 512, 1024), not 500"),
    (dict(line_bits=64), ValueError, "line_bits must be one of (128, 256, 512, 1024), not 64"),
    (dict(max_workers=16.0), TypeError, "max_workers must be an integer, not 16.0"),
    (dict(max_workers=None), TypeError, "max_workers must be an integer, not None"),
    (dict(max_workers=1), ValueError, "max_workers must be between 2 and 64, not 1"),
    (dict(max_workers=65), ValueError, "max_workers must be between 2 and 64, not 65"),
    (dict(max_workers=127), ValueError, "max_workers must be between 2 and 64, not 127"),
    (dict(depth="64"), TypeError, "depth must be an integer, not '64'"),
    (dict(depth=0), ValueError, "depth must be between 1 and 65536, not 0"),
    (dict(depth=65537), ValueError, "depth must be between 1 and 65536, not 65537"),
    (dict(num_windows=None), TypeError, "num_windows must be an integer, not None"),
    (dict(num_windows=0), ValueError, "num_windows must be between 1 and 8, not 0"),
    (dict(num_windows=9), ValueError, "num_windows must be between 1 and 8, not 9"),
    (dict(counter_bits=4.0), TypeError, "counter_bits must be an integer, not 4.0"),
    (dict(counter_bits=0), ValueError, "counter_bits must be between 1 and 5, not 0"),
    (dict(counter_bits=6), ValueError, "counter_bits must be between 1 and 5, not 6"),
    (dict(max_workers=4, counter_bits=4), ValueError, "counter_bits must be between 1 and 3, not 4"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_fabric_params_bad_parameter_is_refused_with_its_rule(kwargs, error, message):
    with pytest.raises(error, match=exact(message)):
        FabricParams(**kwargs)


def test_fabric_params_replace_works_out_a_derived_counter_width_again():
    wide = dataclasses.replace(FabricParams(), max_workers=64)
    assert wide.counter_bits == 7 and wide == FabricParams(max_workers=64)
    narrow = dataclasses.replace(PRESETS["small"], max_workers=16, line_bits=512)
    assert narrow.counter_bits == 5 and narrow.name == "l512_w16_c5_d8_n2"
    assert dataclasses.replace(wide, max_workers=4).counter_bits == 3


def test_fabric_params_replace_keeps_a_given_counter_width():
    given = FabricParams(max_workers=16, counter_bits=3)
    assert dataclasses.replace(given, max_workers=64).counter_bits == 3
    assert dataclasses.replace(FabricParams(), counter_bits=2).counter_bits == 2
    chosen = dataclasses.replace(FabricParams(), counter_bits=2)
    assert dataclasses.replace(chosen, max_workers=64).counter_bits == 2
    with pytest.raises(ValueError, match=exact("counter_bits must be between 1 and 3, not 5")):
        dataclasses.replace(FabricParams(counter_bits=5), max_workers=4)


def test_fabric_params_presets():
    assert PRESETS["default"] == FabricParams()
    small = PRESETS["small"]
    assert (small.line_bits, small.max_workers, small.depth, small.num_windows, small.counter_bits) \
        == (128, 4, 8, 2, 3)
    assert ADDR_BITS == 32


# --------------------------------------------------------------------------- _validate

def test_check_int_messages():
    assert validate.check_int("x", np.int16(3), low=0, high=5) == 3
    assert type(validate.check_int("x", np.int16(3))) is int
    with pytest.raises(ValueError, match=exact("x must be at least 2, not 1")):
        validate.check_int("x", 1, low=2)
    with pytest.raises(ValueError, match=exact("x must be at most 2, not 3")):
        validate.check_int("x", 3, high=2)
    with pytest.raises(ValueError, match=exact("x must be between 0 and 2, not -1")):
        validate.check_int("x", -1, low=0, high=2)
    with pytest.raises(TypeError, match=exact("x must be an integer, not 1.5")):
        validate.check_int("x", 1.5)
    with pytest.raises(TypeError, match=exact("x must be an integer, not np.True_")):
        validate.check_int("x", np.True_)


def test_check_array_messages():
    good = np.zeros((2, 3), dtype=np.uint8)
    assert validate.check_array(good, name="counts", dtype=np.uint8, ndim=2) is good
    with pytest.raises(TypeError, match=exact("counts must be a 2-D numpy.ndarray of uint8, "
                                              "not a 2-D int64 array")):
        validate.check_array(good.astype(np.int64), name="counts", dtype=np.uint8, ndim=2)
    with pytest.raises(TypeError, match=exact("counts must be a 2-D numpy.ndarray of uint8, "
                                              "not a 1-D uint8 array")):
        validate.check_array(good[0], name="counts", dtype=np.uint8, ndim=2)
    with pytest.raises(TypeError, match=exact("counts must be a 2-D numpy.ndarray of uint8, not list")):
        validate.check_array([[0]], name="counts", dtype=np.uint8, ndim=2)


def test_check_grad_messages():
    with pytest.raises(TypeError, match=exact("grad must be a floating-point array, not dtype int32")):
        validate.check_grad(np.zeros(3, dtype=np.int32))
    grad = np.zeros((2, 3), dtype=np.float32)
    grad[1, 1] = np.nan
    with pytest.raises(ValueError, match=exact(
            "grad must not contain NaN (first at flat index 4); "
            "a NaN gradient is a fault for the health monitor, not a value to encode")):
        validate.check_grad(grad)
    assert validate.check_grad(np.zeros((2, 3))).shape == (6,)


def test_check_generator_messages():
    rng = np.random.default_rng(0)
    assert validate.check_generator(rng) is rng
    with pytest.raises(TypeError, match=exact(
            "rng must be a numpy.random.Generator (for example numpy.random.default_rng(seed)), "
            "not RandomState")):
        validate.check_generator(np.random.RandomState(0))


# ------------------------------------------------------------------ the route registry

def test_every_readout_is_registered_with_exactly_one_route():
    registered = [r.readout for spec in formats.ROUTE_SPECS.values() for r in spec.readouts]
    assert sorted(registered) == sorted(Readout)
    assert list(formats.ROUTE_SPECS) == list(Route)
    assert all(spec.route is route for route, spec in formats.ROUTE_SPECS.items())


def test_route_names_are_unique_and_look_up_their_spec():
    names = [spec.name for spec in formats.ROUTE_SPECS.values()]
    assert len(set(names)) == len(names)
    for spec in formats.ROUTE_SPECS.values():
        assert formats.route_spec(spec.name) is spec
        assert formats.route_spec(int(spec.route)) is spec
    with pytest.raises(ValueError, match=exact("route must be one of gbinary, gternary, not 'fp32'")):
        formats.route_spec("fp32")


@pytest.mark.parametrize("route", list(Route))
def test_each_route_names_a_golden_module_with_the_common_functions(route):
    spec = formats.ROUTE_SPECS[route]
    for name in ("encode", "aggregate", "aggregate_planes", "readout", "readout_planes",
                 "parse_readout", "decode"):
        assert callable(getattr(spec.golden, name)), (spec.model, name)


@pytest.mark.parametrize("route", list(Route))
def test_a_routes_lanes_are_what_its_encoder_fills(route):
    spec = formats.ROUTE_SPECS[route]
    lanes = spec.lanes(128)
    grad = -np.ones(lanes + 1, dtype=np.float32)  # one lane past a line: two lines
    kwargs = {"ratio": 0.0} if route is Route.GTERNARY else {}
    assert spec.golden.encode(grad, line_bits=128, **kwargs).shape == (2, 16)
    assert spec.golden.encode(grad[:lanes], line_bits=128, **kwargs).shape == (1, 16)


def test_enum_bits_is_the_width_that_holds_every_member():
    assert formats.enum_bits(Route) == 1
    assert formats.enum_bits(Readout) == 3
    assert formats.GATE_MAX == 2**formats.GATE_BITS - 1
