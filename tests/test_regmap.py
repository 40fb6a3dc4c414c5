"""The CSR register map as data: layout rules, encodings and the generated reference."""

import pytest

from neuron_fabric.golden import FabricParams
from neuron_fabric.golden.regmap import (COUNTERS, ERROR_FLAGS, Access, Field, Register, RegisterMap,
                                         register_map)


@pytest.mark.parametrize("params", [FabricParams(), FabricParams(line_bits=1024, max_workers=64,
                                                                 depth=65536, num_windows=8)],
                         ids=["default", "widest"])
def test_every_register_is_word_aligned_and_unique(params):
    regmap = register_map(params)
    addresses = [reg.address for reg in regmap]
    assert len(set(addresses)) == len(addresses)
    assert all(a % 4 == 0 for a in addresses)
    assert addresses == sorted(addresses)
    # Capabilities hold the parameters at their widest.
    caps = regmap["CAPS0"]
    assert caps.decode(caps.reset) == {"LINE_BITS": params.line_bits,
                                       "COUNTER_BITS": params.counter_bits,
                                       "MAX_WORKERS": params.max_workers,
                                       "NUM_WINDOWS": params.num_windows}
    assert regmap["CAPS1"].decode(regmap["CAPS1"].reset)["DEPTH"] == params.depth


def test_window_registers_exist_for_each_window():
    regmap = register_map(FabricParams(num_windows=3))
    names = {reg.name for reg in regmap}
    for w in range(3):
        assert {f"WIN{w}_BASE", f"WIN{w}_SIZE", f"WIN{w}_CONFIG"} <= names
    assert "WIN3_BASE" not in names


def test_error_flags_are_write_one_to_clear_bits_in_order():
    errors = register_map()["ERRORS"]
    assert [f.name for f in errors.fields] == list(ERROR_FLAGS)
    assert all(f.access is Access.RW1C and f.width == 1 and f.offset == i
               for i, f in enumerate(errors.fields))


def test_counters_are_read_only_and_consecutive():
    regmap = register_map()
    addresses = [regmap[name].address for name in COUNTERS]
    assert addresses == list(range(addresses[0], addresses[0] + 4 * len(COUNTERS), 4))
    assert all(regmap[name].fields[0].access is Access.R for name in COUNTERS)


def test_encode_and_decode_are_inverse():
    config = register_map()["WIN0_CONFIG"]
    value = config.encode(EN=1, ROUTE=1, READOUT=4)
    assert value == 0b100_0011
    assert config.decode(value) == {"EN": 1, "ROUTE": 1, "READOUT": 4}


def test_encode_refuses_a_value_wider_than_its_field():
    with pytest.raises(ValueError, match="WIN0_CONFIG.READOUT must fit 3 bits, not 8"):
        register_map()["WIN0_CONFIG"].encode(READOUT=8)


def test_unknown_field_and_register_names_are_clear_errors():
    regmap = register_map()
    with pytest.raises(KeyError, match="register CONTROL has no field 'ENABLED'"):
        regmap["CONTROL"].field("ENABLED")
    with pytest.raises(KeyError, match="no register named 'CTRL'"):
        regmap["CTRL"]


def test_overlapping_fields_are_refused():
    with pytest.raises(ValueError, match="field B overlaps another field"):
        Register("X", 0, (Field("A", 0, 4, Access.RW), Field("B", 3, 2, Access.RW)))


def test_field_outside_the_word_is_refused():
    with pytest.raises(ValueError, match=r"field A must lie within bits \[31:0\], not \[32:30\]"):
        Field("A", 30, 3, Access.RW)


def test_reset_value_wider_than_the_field_is_refused():
    with pytest.raises(ValueError, match="field A reset value must fit 2 bits, not 4"):
        Field("A", 0, 2, Access.RW, reset=4)


def test_shared_and_unaligned_addresses_are_refused():
    a = Register("A", 0, (Field("F", 0, 1, Access.RW),))
    with pytest.raises(ValueError, match="registers A and B share address 0x0"):
        RegisterMap(FabricParams(), (a, Register("B", 0, (Field("F", 0, 1, Access.RW),))))
    with pytest.raises(ValueError, match="register C address must be a multiple of 4, not 0x2"):
        RegisterMap(FabricParams(), (Register("C", 2, (Field("F", 0, 1, Access.RW),)),))


def test_reset_value_counts_constants_and_storage_but_not_strobes_or_flags():
    reg = Register("X", 0, (Field("C", 0, 4, Access.R, const=5), Field("S", 4, 4, Access.RW, reset=3),
                            Field("W", 8, 1, Access.W), Field("F", 9, 1, Access.RW1C)))
    assert reg.reset == 0x35


def test_markdown_reference_lists_every_register_and_field():
    regmap = register_map()
    text = regmap.to_markdown()
    for reg in regmap:
        assert f"| {reg.name} |" in text
        assert f"## {reg.name} (`{reg.address:#05x}`)" in text
        for f in reg.fields:
            assert f"| {f.name} | {f.access.value} |" in text
    assert "`0x4e464142`" in text  # the ID register's reset value


def test_enum_fields_are_as_wide_as_their_enums():
    from neuron_fabric.golden.formats import GATE_MAX, Readout, Route, enum_bits
    config = register_map()["WIN0_CONFIG"]
    assert config.field("ROUTE").width == enum_bits(Route)
    assert config.field("READOUT").width == enum_bits(Readout)
    assert (1 << register_map()["GATE"].field("GATE").width) - 1 == GATE_MAX


def test_every_routes_counters_and_flags_are_registers():
    from neuron_fabric.golden.formats import ROUTE_SPECS
    for spec in ROUTE_SPECS.values():
        assert spec.lines_counter in COUNTERS
        assert spec.invalid_counter is None or spec.invalid_counter in COUNTERS
        assert set(spec.flags) <= set(ERROR_FLAGS)
    # The counters of folded lines come first, in route order.
    assert COUNTERS[:len(ROUTE_SPECS)] == tuple(s.lines_counter for s in ROUTE_SPECS.values())
