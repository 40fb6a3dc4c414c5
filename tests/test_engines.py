"""The hardware's route registry: an engine per route, and widths and encodings taken from the
golden enums."""

import enum

import pytest
from amaranth.hdl import Module, Shape, Signal, Value
from amaranth.sim import Simulator

from neuron_fabric.golden.controller import Op, Status
from neuron_fabric.golden.formats import READOUTS_BY_ROUTE, ROUTE_SPECS, Readout, Route, enum_bits
from neuron_fabric.golden.params import FabricParams
from neuron_fabric.golden.regmap import register_map
from neuron_fabric.hw.control_plane import ControlPlane
from neuron_fabric.hw.engines import ENGINES, engine
from neuron_fabric.hw.layouts import (encoded, lane_layout, request_layout,
                                      response_layout, ternary_code)
from neuron_fabric.golden import gternary

SMALL = FabricParams(line_bits=128, max_workers=4, depth=8, num_windows=2)


def test_every_registered_route_has_an_engine():
    assert list(ENGINES) == list(ROUTE_SPECS)
    for route, spec in ROUTE_SPECS.items():
        assert engine(route) is ENGINES[route]
        assert engine(spec.name) is ENGINES[route]
    assert len({e.role for e in ENGINES.values()}) == len(ENGINES)


def test_engine_must_be_a_component_class():
    from neuron_fabric.hw.engines import Engine
    with pytest.raises(TypeError, match="component must be a wiring.Component class, not 3"):
        Engine(Route.GBINARY, "x", 3, None)


@pytest.mark.parametrize("route", list(Route))
def test_an_engine_lists_a_line_for_every_readout_of_its_route(route):
    e = ENGINES[route]
    block = e.component(line_bits=8, max_workers=4)
    assert block.i.payload.shape()["readout"].width == enum_bits(Readout)
    lane_bits = ROUTE_SPECS[route].lane_bits
    assert lane_layout(route, 8).elem_shape.width == lane_bits
    assert lane_layout(route, 8).length == 8 // lane_bits


@pytest.mark.parametrize("route", list(Route))
def test_engine_readout_lines_cover_the_routes_readouts(route):
    from amaranth.hdl import Signal
    from amaranth.lib import data
    from neuron_fabric.hw.layouts import state_layout
    state = data.View(state_layout(route, 8, 3), Signal(state_layout(route, 8, 3).size))
    lines = (Signal(8), Signal(8), state) if route is Route.GBINARY else (Signal(8), state)
    assert set(ENGINES[route].lines(*lines, counter_bits=3)) == set(READOUTS_BY_ROUTE[route])


def test_hardware_fields_are_as_wide_as_the_golden_enums():
    assert request_layout(line_bits=128, worker_bits=2)["op"].width == enum_bits(Op)
    assert response_layout(line_bits=128)["status"].width == enum_bits(Status)
    plane = ControlPlane(params=SMALL)
    assert plane.i_req.payload.shape()["op"].width == enum_bits(Op)
    assert plane.o_resp.payload.shape()["status"].width == enum_bits(Status)
    # The CSR fields the control plane reads the route and readout from have the same widths.
    config = register_map(SMALL)["WIN0_CONFIG"]
    assert config.field("ROUTE").width == Shape.cast(Route).width
    assert config.field("READOUT").width == Shape.cast(Readout).width
    for enum in (Op, Status, Route, Readout):
        assert Shape.cast(enum).width == enum_bits(enum)


def test_ternary_code_bits_are_the_golden_codes():
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator
    negative, positive = Signal(), Signal()
    code = Signal(2)
    m = Module()
    m.d.comb += code.eq(ternary_code(negative, positive))
    sim = Simulator(m)
    seen = {}

    async def bench(ctx):
        for n, p in ((1, 0), (0, 1), (0, 0)):
            ctx.set(negative, n)
            ctx.set(positive, p)
            seen[n, p] = ctx.get(code)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {(1, 0): gternary.MINUS_CODE, (0, 1): gternary.PLUS_CODE,
                    (0, 0): gternary.ZERO_CODE}


class _Shuffled(enum.Enum):
    """An enumeration whose values are not in the order of its members."""
    NONE = 0
    LAST = 1
    FIRST = 6
    MIDDLE = 2


def _value_of(value, inputs):
    """``value`` with each signal of ``inputs`` (``[(signal, int)]``) set, by simulation."""
    m = Module()
    out = Signal(len(Value.cast(value)))
    m.d.comb += out.eq(value)
    got = []

    async def bench(ctx):
        for signal, number in inputs:
            ctx.set(signal, number)
        got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return got[0]


@pytest.mark.parametrize("enumeration, none", [(Status, Status.OK), (_Shuffled, _Shuffled.NONE)])
def test_an_encoded_answer_reads_as_its_members_value(enumeration, none):
    answers = {member: Signal(name=member.name) for member in enumeration if member is not none}
    value = encoded(answers, none=none)
    assert len(value) == max(member.value for member in enumeration).bit_length()
    assert _value_of(value, []) == none.value
    for member, answer in answers.items():
        assert _value_of(value, [(answer, 1)]) == member.value, member


def test_the_status_answers_of_the_control_plane_are_the_golden_encodings():
    # The control plane ORs the tests' answers into a decided status that is OK when a test
    # decides: right only while OK is the encoding of no answer.
    not_ready, duplicate = Signal(), Signal()
    status = encoded({Status.NOT_READY: not_ready, Status.DUPLICATE: duplicate}, none=Status.OK)
    assert _value_of(status, [(not_ready, 1)]) == Status.NOT_READY
    assert _value_of(status, [(duplicate, 1)]) == Status.DUPLICATE
    assert _value_of(status, []) == Status.OK == 0


def test_encoded_refuses_a_none_that_is_not_encoded_zero_and_foreign_members():
    with pytest.raises(ValueError, match=r"none must be the member encoded 0, not "
                                         r"<_Shuffled.LAST: 1>"):
        encoded({_Shuffled.FIRST: Signal()}, none=_Shuffled.LAST)
    with pytest.raises(ValueError, match="answers must name members of Status"):
        encoded({_Shuffled.FIRST: Signal()}, none=Status.OK)
