"""The transaction-level model of the controller top: statuses, slots, windows, CSR side effects."""

import numpy as np
import pytest

from neuron_fabric.golden import (ControllerModel, FabricParams, Op, Readout, Request, Route, Status,
                                  gbinary, gternary)
from neuron_fabric.golden.formats import readout_lines_per_slot

PARAMS = FabricParams(line_bits=128, max_workers=8, depth=8, num_windows=2)
LINE_BYTES = PARAMS.line_bits // 8
BIN_BASE, TERN_BASE = 0x100, 0x200


def write_reg(model, name, **fields):
    reg = model.regmap[name]
    model.csr_write(reg.address, reg.encode(**fields))


def read_reg(model, name):
    return model.csr_read(model.regmap[name].address)


def configure(model, *, workers=3, bin_readout=Readout.SIGN, tern_readout=Readout.GATED, gate=1,
              size=4):
    write_reg(model, "NUM_WORKERS", N=workers)
    write_reg(model, "GATE", GATE=gate)
    for window, base, route, readout in ((0, BIN_BASE, Route.GBINARY, bin_readout),
                                         (1, TERN_BASE, Route.GTERNARY, tern_readout)):
        write_reg(model, f"WIN{window}_BASE", ADDR=base)
        write_reg(model, f"WIN{window}_SIZE", SLOTS=size)
        write_reg(model, f"WIN{window}_CONFIG", EN=1, ROUTE=route, READOUT=readout)
    write_reg(model, "CONTROL", ENABLE=1)


@pytest.fixture
def model():
    m = ControllerModel(PARAMS)
    configure(m)
    return m


def random_grads(seed, workers, n=PARAMS.line_bits):
    return np.random.default_rng(seed).standard_normal((workers, n)).astype(np.float32)


def test_complete_gbinary_slot_reads_the_majority(model):
    grads = random_grads(0, 3)
    encoded = np.stack([gbinary.encode(g, line_bits=128) for g in grads])
    for worker in range(3):
        assert model.request(Op.WRITE, BIN_BASE + 2, worker, encoded[worker, 0]).status is Status.OK
    response = model.request(Op.READ, BIN_BASE + 2)
    assert response.status is Status.OK
    expected = gbinary.readout(gbinary.aggregate(encoded, max_workers=8), readout=Readout.SIGN,
                               num_workers=3, counter_bits=PARAMS.counter_bits)
    assert response.data == expected.tobytes()
    majority = np.sign(np.sign(grads).sum(axis=0))  # an independent majority of the signs
    assert (gbinary.decode(np.frombuffer(response.data, np.uint8).reshape(1, -1), readout=Readout.SIGN,
                           n_elements=128, line_bits=128) == np.where(majority < 0, -1, 1)).all()


@pytest.mark.parametrize("readout", [Readout.SIGN, Readout.TERNARY, Readout.COUNTS])
def test_gbinary_readouts_span_the_documented_number_of_lines(readout):
    m = ControllerModel(PARAMS)
    configure(m, workers=2, bin_readout=readout)
    encoded = np.stack([gbinary.encode(g, line_bits=128) for g in random_grads(1, 2)])
    for worker in range(2):
        m.request(Op.WRITE, BIN_BASE, worker, encoded[worker, 0])
    response = m.request(Op.READ, BIN_BASE)
    assert len(response.lines) == readout_lines_per_slot(readout, counter_bits=PARAMS.counter_bits)
    expected = gbinary.readout(gbinary.aggregate(encoded, max_workers=8), readout=readout,
                               num_workers=2, counter_bits=PARAMS.counter_bits)
    assert response.data == expected.tobytes()


@pytest.mark.parametrize("readout", [Readout.GATED, Readout.SUMS])
def test_gternary_readouts_match_the_golden_functions(readout):
    m = ControllerModel(PARAMS)
    configure(m, workers=4, tern_readout=readout, gate=2)
    encoded = np.stack([gternary.encode(g, ratio=0.2, line_bits=128) for g in random_grads(2, 4, 64)])
    for worker in range(4):
        m.request(Op.WRITE, TERN_BASE + 1, worker, encoded[worker, 0])
    response = m.request(Op.READ, TERN_BASE + 1)
    sums = gternary.aggregate(encoded, max_workers=8)
    expected = gternary.readout(sums, readout=readout, gate=2, counter_bits=PARAMS.counter_bits)
    assert response.status is Status.OK
    assert response.data == expected.tobytes()


def test_read_before_all_workers_wrote_is_not_ready_and_changes_nothing(model):
    line = gbinary.encode(random_grads(3, 1)[0], line_bits=128)[0]
    model.request(Op.WRITE, BIN_BASE, 0, line)
    before = model.slot_state(0, 0)
    for op in (Op.READ, Op.READ_CLEAR):
        response = model.request(op, BIN_BASE)
        assert response.status is Status.NOT_READY
        assert response.lines == (bytes(LINE_BYTES),)
    after = model.slot_state(0, 0)
    assert (before[0] == after[0]).all() and before[1] == after[1] == 0b1
    assert "NOT_READY" in model.error_flags()
    assert read_reg(model, "NOT_READY_COUNT") == 2


def test_duplicate_write_is_refused_and_changes_nothing(model):
    line = np.full(LINE_BYTES, 0xFF, dtype=np.uint8)
    assert model.request(Op.WRITE, BIN_BASE, 1, line).status is Status.OK
    before = model.slot_state(0, 0)
    assert model.request(Op.WRITE, BIN_BASE, 1, line).status is Status.DUPLICATE
    after = model.slot_state(0, 0)
    assert (before[0] == after[0]).all() and before[1] == after[1]
    assert model.error_flags() == {"DUPLICATE"}
    assert read_reg(model, "DUPLICATE_COUNT") == 1
    assert read_reg(model, "GBIN_LINES") == 1


def test_worker_outside_num_workers_is_a_bad_request(model):
    line = np.zeros(LINE_BYTES, dtype=np.uint8)
    assert model.request(Op.WRITE, BIN_BASE, 3, line).status is Status.BAD_REQUEST
    assert model.slot_state(0, 0)[1] == 0
    assert model.error_flags() == {"BAD_REQUEST"}


def test_read_clear_returns_the_readout_and_empties_the_slot(model):
    encoded = np.stack([gbinary.encode(g, line_bits=128) for g in random_grads(4, 3)])
    for worker in range(3):
        model.request(Op.WRITE, BIN_BASE + 3, worker, encoded[worker, 0])
    first = model.request(Op.READ_CLEAR, BIN_BASE + 3)
    assert first.status is Status.OK
    assert model.slot_state(0, 3)[1] == 0 and not model.slot_state(0, 3)[0].any()
    assert model.request(Op.READ, BIN_BASE + 3).status is Status.NOT_READY
    # The emptied slot aggregates afresh: the same contributions give the same readout.
    for worker in range(3):
        assert model.request(Op.WRITE, BIN_BASE + 3, worker, encoded[worker, 0]).status is Status.OK
    assert model.request(Op.READ, BIN_BASE + 3).data == first.data


def test_read_leaves_the_slot_for_every_worker_to_read(model):
    for worker in range(3):
        model.request(Op.WRITE, BIN_BASE, worker, np.full(LINE_BYTES, worker, dtype=np.uint8))
    responses = [model.request(Op.READ, BIN_BASE, worker) for worker in range(3)]
    assert all(r.status is Status.OK for r in responses)
    assert len({r.data for r in responses}) == 1


def test_fp32_lines_pass_through_byte_exact():
    m = ControllerModel(PARAMS)
    configure(m)
    specials = np.array([np.nan, -0.0, 1e-45, -np.inf, 3.5], dtype=np.float32)
    payload = specials.view(np.uint32).copy()
    payload[0] = 0x7FC0_1234  # a NaN with a payload
    data = np.resize(payload.view(np.uint8), LINE_BYTES)
    assert m.request(Op.WRITE, 0x42, 5, data).status is Status.OK
    response = m.request(Op.READ, 0x42, 7)
    assert response.status is Status.OK and response.data == data.tobytes()
    assert m.request(Op.READ, 0x43).data == bytes(LINE_BYTES)  # never written
    assert read_reg(m, "FP32_LINES") == 3


def test_read_clear_outside_any_window_is_a_bad_request(model):
    assert model.request(Op.READ_CLEAR, 0x42).status is Status.BAD_REQUEST
    assert "BAD_REQUEST" in model.error_flags()
    assert read_reg(model, "FP32_LINES") == 0


def test_disabled_controller_passes_window_addresses_through_to_memory(model):
    write_reg(model, "CONTROL", ENABLE=0)
    line = np.arange(LINE_BYTES, dtype=np.uint8)
    assert model.request(Op.WRITE, BIN_BASE, 7, line).status is Status.OK
    assert model.request(Op.READ, BIN_BASE).data == line.tobytes()
    assert model.slot_state(0, 0)[1] == 0


def test_addresses_past_the_window_size_are_memory_traffic(model):
    line = np.ones(LINE_BYTES, dtype=np.uint8)
    model.request(Op.WRITE, BIN_BASE + 4, 0, line)  # size is 4: slot 4 is outside
    assert model.memory.read(BIN_BASE + 4) == line.tobytes()
    assert model.request(Op.WRITE, BIN_BASE - 1, 0, line).status is Status.OK
    assert read_reg(model, "GBIN_LINES") == 0 and read_reg(model, "FP32_LINES") == 2


def test_lowest_numbered_window_wins_an_overlap(model):
    write_reg(model, "WIN1_BASE", ADDR=BIN_BASE)
    line = np.full(LINE_BYTES, 0xFF, dtype=np.uint8)
    model.request(Op.WRITE, BIN_BASE, 0, line)
    assert model.slot_state(0, 0)[1] == 1 and model.slot_state(1, 0)[1] == 0


def test_window_wraps_around_the_address_space():
    m = ControllerModel(PARAMS)
    configure(m)
    write_reg(m, "WIN0_BASE", ADDR=0xFFFF_FFFE)
    write_reg(m, "WIN0_CONFIG", EN=1, ROUTE=Route.GBINARY, READOUT=Readout.SIGN)
    m.request(Op.WRITE, 1, 0, np.zeros(LINE_BYTES, np.uint8))  # slot 3 of the window
    assert m.slot_state(0, 3)[1] == 1


@pytest.mark.parametrize("register, fields, why", [
    ("WIN0_SIZE", {"SLOTS": PARAMS.depth + 1}, "size beyond depth"),
    ("WIN0_CONFIG", {"EN": 1, "ROUTE": Route.GBINARY, "READOUT": Readout.GATED}, "readout of the other route"),
    ("WIN0_CONFIG", {"EN": 1, "ROUTE": Route.GBINARY, "READOUT": 7}, "readout code out of range"),
    ("NUM_WORKERS", {"N": 0}, "no workers"),
    ("NUM_WORKERS", {"N": PARAMS.max_workers + 1}, "more workers than the bitmap"),
])
def test_misconfiguration_refuses_window_requests(model, register, fields, why):
    write_reg(model, register, **fields)
    for op in Op:
        data = np.zeros(LINE_BYTES, np.uint8) if op is Op.WRITE else None
        assert model.request(op, BIN_BASE, 0, data).status is Status.BAD_REQUEST, why
    assert model.error_flags() == {"BAD_CONFIG"}
    assert read_reg(model, "BAD_REQUEST_COUNT") == 3


def test_writing_a_window_register_empties_its_slots(model):
    model.request(Op.WRITE, BIN_BASE, 0, np.full(LINE_BYTES, 0xFF, np.uint8))
    model.request(Op.WRITE, TERN_BASE, 0, np.full(LINE_BYTES, 0x55, np.uint8))
    write_reg(model, "WIN0_CONFIG", EN=1, ROUTE=Route.GBINARY, READOUT=Readout.COUNTS)
    assert model.slot_state(0, 0)[1] == 0 and not model.slot_state(0, 0)[0].any()
    assert model.slot_state(1, 0)[1] == 1  # the other window keeps its slots


def test_clear_slots_empties_every_window(model):
    model.request(Op.WRITE, BIN_BASE, 0, np.full(LINE_BYTES, 0xFF, np.uint8))
    model.request(Op.WRITE, TERN_BASE + 2, 1, np.full(LINE_BYTES, 0x55, np.uint8))
    write_reg(model, "CONTROL", ENABLE=1, CLEAR_SLOTS=1)
    assert model.slot_state(0, 0)[1] == 0 and model.slot_state(1, 2)[1] == 0
    assert not model.slot_state(1, 2)[0].any()
    assert read_reg(model, "CONTROL") == model.regmap["CONTROL"].encode(ENABLE=1)  # strobe reads 0
    assert read_reg(model, "GBIN_LINES") == 1  # counters survive


def test_clear_counters_zeroes_every_counter(model):
    model.request(Op.WRITE, BIN_BASE, 0, np.zeros(LINE_BYTES, np.uint8))
    model.request(Op.READ, 0x9)
    write_reg(model, "CONTROL", ENABLE=1, CLEAR_COUNTERS=1)
    assert all(value == 0 for value in model.counters.values())
    assert model.slot_state(0, 0)[1] == 1  # slots survive


def test_invalid_ternary_code_counts_as_zero_and_sets_the_flag():
    m = ControllerModel(PARAMS)
    configure(m, workers=2, tern_readout=Readout.SUMS)
    invalid = np.full(LINE_BYTES, 0b10_01_10_11, dtype=np.uint8)  # lanes: -1, invalid, +1, invalid
    m.request(Op.WRITE, TERN_BASE, 0, invalid)
    m.request(Op.WRITE, TERN_BASE, 1, invalid)
    sums = m.slot_state(1, 0)[0]
    assert list(sums[:4]) == [-2, 0, 2, 0]
    assert m.error_flags() == {"INVALID_CODE"}
    assert read_reg(m, "INVALID_LINES") == 2


def test_narrow_counters_saturate_and_set_the_flag():
    params = FabricParams(line_bits=128, max_workers=8, depth=2, num_windows=1, counter_bits=2)
    m = ControllerModel(params)
    write_reg(m, "NUM_WORKERS", N=5)  # more than 2**2 - 1 = 3: a misconfiguration
    write_reg(m, "WIN0_SIZE", SLOTS=1)
    write_reg(m, "WIN0_CONFIG", EN=1, ROUTE=Route.GBINARY, READOUT=Readout.COUNTS)
    write_reg(m, "CONTROL", ENABLE=1)
    ones = np.full(16, 0xFF, np.uint8)
    for worker in range(3):
        m.request(Op.WRITE, 0, worker, ones)
    assert "SATURATED" not in m.error_flags()
    m.request(Op.WRITE, 0, 3, ones)
    assert "SATURATED" in m.error_flags()
    assert (m.slot_state(0, 0)[0] == 3).all()


def test_error_flags_are_write_one_to_clear(model):
    model.request(Op.READ_CLEAR, 0x9)
    model.request(Op.READ, BIN_BASE)
    errors = model.regmap["ERRORS"]
    assert model.error_flags() == {"BAD_REQUEST", "NOT_READY"}
    model.csr_write(errors.address, errors.encode(NOT_READY=1, DUPLICATE=1))
    assert model.error_flags() == {"BAD_REQUEST"}
    model.csr_write(errors.address, 0)
    assert model.error_flags() == {"BAD_REQUEST"}


def test_read_only_registers_ignore_writes(model):
    for name in ("ID", "CAPS0", "GBIN_LINES"):
        before = read_reg(model, name)
        model.csr_write(model.regmap[name].address, 0xFFFF_FFFF)
        assert read_reg(model, name) == before


def test_capabilities_report_the_parameters():
    params = FabricParams(line_bits=256, max_workers=32, depth=100, num_windows=3, counter_bits=4)
    m = ControllerModel(params)
    caps0 = m.regmap["CAPS0"].decode(read_reg(m, "CAPS0"))
    assert caps0 == {"LINE_BITS": 256, "COUNTER_BITS": 4, "MAX_WORKERS": 32, "NUM_WINDOWS": 3}
    assert m.regmap["CAPS1"].decode(read_reg(m, "CAPS1"))["DEPTH"] == 100
    assert read_reg(m, "ID") == 0x4E464142
    assert read_reg(m, "NUM_WORKERS") == 15  # reset: the most the 4-bit counters serve


def test_reset_restores_registers_and_slots_but_not_memory(model):
    model.request(Op.WRITE, BIN_BASE, 0, np.zeros(LINE_BYTES, np.uint8))
    model.request(Op.WRITE, 0x9, 0, np.full(LINE_BYTES, 7, np.uint8))
    model.reset()
    assert read_reg(model, "CONTROL") == 0 and read_reg(model, "RESPONSES") == 0
    assert model.slot_state(0, 0)[1] == 0
    assert model.memory.read(0x9) == bytes([7]) * LINE_BYTES


def test_every_request_counts_one_response(model):
    model.request(Op.WRITE, BIN_BASE, 0, np.zeros(LINE_BYTES, np.uint8))
    model.request(Op.READ, BIN_BASE)
    model.request(Op.READ, 0x5)
    model.request(Op.READ_CLEAR, 0x5)
    assert read_reg(model, "RESPONSES") == 4


@pytest.mark.parametrize("kwargs, message", [
    ({"op": 3, "addr": 0}, "op must be one of WRITE, READ, READ_CLEAR, not 3"),
    ({"op": Op.READ, "addr": 1 << 32}, "addr must be between 0 and 4294967295"),
    ({"op": Op.READ, "addr": 0, "worker": 8}, "worker must be between 0 and 7"),
    ({"op": Op.WRITE, "addr": 0, "data": b"\x00" * 3}, "data must be one line of 16 bytes"),
    ({"op": Op.WRITE, "addr": 0}, "data must be one line of 16 bytes"),
])
def test_requests_the_wire_cannot_carry_are_refused_with_a_clear_error(model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        model.request(**kwargs)


def test_unmapped_csr_address_is_a_clear_error(model):
    with pytest.raises(ValueError, match="addr must be the address of a register, not 0x1004"):
        model.csr_read(0x1004)
    with pytest.raises(ValueError, match="value must be between 0 and 4294967295"):
        model.csr_write(0x10, 1 << 32)


def test_params_must_be_fabric_params():
    with pytest.raises(TypeError, match="params must be a FabricParams, not dict"):
        ControllerModel({"line_bits": 512})


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_interleaved_traffic_matches_bulk_aggregation(seed):
    """Workers write random slots of both windows in random order, with duplicates and early
    reads mixed in; every completed slot must read what the bulk golden functions compute."""
    rng = np.random.default_rng(seed)
    workers, slots = 5, 4
    m = ControllerModel(PARAMS)
    configure(m, workers=workers, bin_readout=Readout.COUNTS, tern_readout=Readout.SUMS, size=slots)
    binary = rng.integers(0, 256, (workers, slots, LINE_BYTES), dtype=np.uint8)
    ternary = gternary.encode(rng.standard_normal(workers * slots * 64), ratio=0.1,
                              line_bits=128).reshape(workers, slots, LINE_BYTES)
    pending = [(w, s, kind) for w in range(workers) for s in range(slots) for kind in (0, 1)]
    rng.shuffle(pending)
    bases, data = (BIN_BASE, TERN_BASE), (binary, ternary)
    written = []
    for w, s, kind in pending:
        if written and rng.random() < 0.3:  # resend an earlier line: refused
            v, t, k = written[rng.integers(len(written))]
            assert m.request(Op.WRITE, bases[k] + t, v, data[k][v, t]).status is Status.DUPLICATE
        if rng.random() < 0.2:
            done = all((v, s, kind) in written for v in range(workers))
            expected = Status.OK if done else Status.NOT_READY
            assert m.request(Op.READ, bases[kind] + s).status is expected
        assert m.request(Op.WRITE, bases[kind] + s, w, data[kind][w, s]).status is Status.OK
        written.append((w, s, kind))
    counts = gbinary.aggregate(binary, max_workers=8)
    sums = gternary.aggregate(ternary, max_workers=8)
    for s in range(slots):
        assert m.request(Op.READ, BIN_BASE + s).data == gbinary.readout(
            counts[s:s + 1], readout=Readout.COUNTS, num_workers=workers,
            counter_bits=PARAMS.counter_bits).tobytes()
        assert m.submit(Request(Op.READ_CLEAR, TERN_BASE + s)).data == gternary.readout(
            sums[s:s + 1], readout=Readout.SUMS, gate=1, counter_bits=PARAMS.counter_bits).tobytes()
    assert read_reg(m, "GBIN_LINES") == read_reg(m, "GTERN_LINES") == workers * slots
