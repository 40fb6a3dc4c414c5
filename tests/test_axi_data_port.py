"""The AXI4 data subordinate against a scripted controller: the requests it makes of the
controller, and the B and R beats it makes of the controller's answers, under random
pauses on all seven channels (five AXI, two streams).

The scripted controller answers a write OK, DUPLICATE the second time a worker writes a
line, BAD_REQUEST for worker 3; a read of line ``a`` NOT_READY when ``a % 7 == 0``, else
``1 + a % 3`` lines of data made from the address and the op. The expected requests and
beats are computed here from the AXI transactions alone, by the rules of the docstring of
:class:`~neuron_fabric.hw.axi_data_port.AxiDataPort`.
"""

import itertools

import numpy as np
import pytest
from amaranth.sim import Simulator

from neuron_fabric.golden.controller import Op, Status
from neuron_fabric.golden.params import PRESETS, FabricParams
from neuron_fabric.hw.axi import FIXED_BEATS, Burst, Resp, WorkerFrom, line_size
from neuron_fabric.hw.axi_data_port import AxiDataPort

from axi_sim import Sink, Source, channel, step

SMALL = PRESETS["small"]    # 128-bit lines, 4 workers (2-bit ids)
ID_WIDTH = 4
LINE_BYTES = SMALL.line_bits // 8
ALL_BYTES = (1 << LINE_BYTES) - 1


def read_answer(op, addr):
    """The scripted controller's answer to a read: ``(status, lines)``."""
    if addr % 7 == 0:
        return Status.NOT_READY, [0]
    return Status.OK, [(addr * 1000 + j) * 3 + int(op) for j in range(1 + addr % 3)]


class Burst_:
    """One AXI burst as the test makes it."""

    def __init__(self, *, write, axid, line, worker, length, burst, size, offset, clear,
                 strobes=()):
        self.write, self.id, self.line, self.worker = write, axid, line, worker
        self.length, self.burst, self.size, self.offset = length, burst, size, offset
        self.clear, self.strobes = clear, list(strobes)

    @property
    def refused(self):
        return (self.size != line_size(SMALL.line_bits) or self.offset != 0
                or self.burst not in (Burst.INCR, Burst.FIXED) or (self.write and self.clear)
                or (self.burst == Burst.FIXED and self.length > FIXED_BEATS))

    def address(self, layout):
        fields = {"offset": self.offset, "line": self.line, "clear": self.clear}
        if "worker" in dict(layout):
            fields["worker"] = self.worker
        return sum(value << layout[name].offset for name, value in fields.items())

    def lines(self):
        """The line address of each request the burst makes of the controller."""
        if self.write:
            return [self.line + (k if self.burst == Burst.INCR else 0)
                    for k in range(self.length)]
        return [self.line + k for k in range(self.length)] if self.burst == Burst.INCR \
            else [self.line]


def random_bursts(rng, *, write, count, worker_from):
    bursts = []
    for _ in range(count):
        length = int(rng.choice([1, 1, 2, 3, 4]))
        burst = Burst.FIXED if rng.random() < 0.25 else Burst.INCR
        size, offset, clear = line_size(SMALL.line_bits), 0, int(rng.random() < 0.3)
        if write:
            clear = int(rng.random() < 0.05)
        bad = rng.random()
        if bad < 0.04:
            size -= 1
        elif bad < 0.08:
            burst = Burst.WRAP
        elif bad < 0.1:
            offset = 4
        elif bad < 0.13 and burst == Burst.FIXED:
            length = FIXED_BEATS + 1        # longer than AXI4 allows
        axid = int(rng.integers(1 << ID_WIDTH))
        worker = (int(rng.integers(SMALL.max_workers)) if worker_from is WorkerFrom.ADDRESS
                  else axid >> (ID_WIDTH - SMALL.worker_bits))
        strobes = [ALL_BYTES if rng.random() < 0.93 else int(rng.integers(ALL_BYTES))
                   for _ in range(length)]
        bursts.append(Burst_(write=write, axid=axid, line=int(rng.integers(1, 12)),
                             worker=worker, length=length, burst=burst, size=size,
                             offset=offset, clear=clear, strobes=strobes))
    return bursts


def expected_traffic(writes, reads, rng_lines):
    """``(write requests, read requests, B beats, R beats)`` the rules give."""
    seen = set()
    write_requests, b_beats = [], []
    for k, burst in enumerate(writes):
        statuses = []
        for beat, (line, strobe) in enumerate(zip(burst.lines(), burst.strobes)):
            if burst.refused or strobe != ALL_BYTES:
                statuses.append(Status.BAD_REQUEST)
                continue
            write_requests.append((Op.WRITE, line, burst.worker, rng_lines[k][beat]))
            if burst.worker == 3:
                statuses.append(Status.BAD_REQUEST)
            elif (line, burst.worker) in seen:
                statuses.append(Status.DUPLICATE)
            else:
                seen.add((line, burst.worker))
                statuses.append(Status.OK)
        errors = [s for s in statuses if s != Status.OK]
        b_beats.append({"id": burst.id, "resp": Resp.SLVERR if errors else Resp.OKAY,
                        "user": errors[0] if errors else Status.OK})
    read_requests, r_beats = [], []
    for burst in reads:
        op = Op.READ_CLEAR if burst.clear else Op.READ
        beats = []  # (status, data, cut); None for a padding beat's zeros
        if burst.refused:
            beats = [(Status.BAD_REQUEST, None, False)] * burst.length
        else:
            owed = 1 if burst.burst == Burst.INCR else burst.length
            for line in burst.lines():
                read_requests.append((op, line))
                status, lines = read_answer(op, line)
                mine = [(status, data, False) for data in lines[:owed]]
                if len(lines) > owed:
                    mine[-1] = (status, mine[-1][1], True)
                beats += mine + [(Status.BAD_REQUEST, None, False)] * (owed - len(mine))
        for index, (status, data, cut) in enumerate(beats):
            r_beats.append({"id": burst.id, "data": data, "user": status,
                            "resp": Resp.SLVERR if cut or status != Status.OK else Resp.OKAY,
                            "last": int(index == len(beats) - 1)})
    return write_requests, read_requests, b_beats, r_beats


def meaningful(request):
    """What the controller reads of a request: a read's worker and line are ignored."""
    if request["op"] == Op.WRITE:
        return request
    return {"op": request["op"], "addr": request["addr"]}


def run_bursts(dut, writes, reads, lines, *, seed, pause):
    axi, rng = dut.s_axi, np.random.default_rng(seed)
    layout = dut.address_layout
    aw = Source(axi.awvalid, axi.awready, channel(axi, "aw", ["id", "addr", "len", "size",
                                                              "burst"]), rng=rng, pause=pause)
    w = Source(axi.wvalid, axi.wready, channel(axi, "w", ["data", "strb", "last"]), rng=rng,
               pause=pause)
    ar = Source(axi.arvalid, axi.arready, channel(axi, "ar", ["id", "addr", "len", "size",
                                                              "burst"]), rng=rng, pause=pause)
    b = Sink(axi.bvalid, axi.bready, channel(axi, "b", ["id", "resp", "user"]), rng=rng,
             pause=pause, name="B")
    r = Sink(axi.rvalid, axi.rready, channel(axi, "r", ["id", "data", "resp", "user", "last"]),
             rng=rng, pause=pause, name="R")
    req = Sink(dut.o_req.valid, dut.o_req.ready,
               {name: getattr(dut.o_req.payload, name)
                for name in ("op", "addr", "worker", "data")}, rng=rng, pause=pause,
               name="o_req", held=meaningful)
    resp = Source(dut.i_resp.valid, dut.i_resp.ready, {"payload": dut.i_resp.payload},
                  rng=rng, pause=pause)
    for k, burst in enumerate(writes):
        aw.queue.append({"id": burst.id, "addr": burst.address(layout), "len": burst.length - 1,
                         "size": burst.size, "burst": burst.burst})
        w.queue.extend({"data": lines[k][beat], "strb": burst.strobes[beat],
                        "last": int(beat == burst.length - 1)} for beat in range(burst.length))
    for burst in reads:
        ar.queue.append({"id": burst.id, "addr": burst.address(layout), "len": burst.length - 1,
                         "size": burst.size, "burst": burst.burst})
    total_r = sum(burst.length for burst in reads)
    seen = set()

    async def bench(ctx):
        taken = 0
        for cycle in range(20_000):
            if len(b.beats) == len(writes) and len(r.beats) == total_r:
                break
            await step(ctx, [aw, w, ar, b, r, req, resp])
            for request in req.beats[taken:]:   # the scripted controller answers
                op, addr, worker = Op(request["op"]), request["addr"], request["worker"]
                if op is Op.WRITE:
                    status = (Status.BAD_REQUEST if worker == 3 else
                              Status.DUPLICATE if (addr, worker) in seen else Status.OK)
                    seen.add((addr, worker))
                    answer = [0]
                else:
                    status, answer = read_answer(op, addr)
                resp.queue.extend({"payload": {"status": status, "data": data,
                                               "last": int(j == len(answer) - 1)}}
                                  for j, data in enumerate(answer))
            taken = len(req.beats)
        else:
            raise AssertionError(f"{len(b.beats)} of {len(writes)} B and {len(r.beats)} of "
                                 f"{total_r} R beats after 20,000 cycles")
        for _ in range(20):   # nothing more comes
            await step(ctx, [aw, w, ar, b, r, req, resp])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return req.beats, b.beats, r.beats


@pytest.mark.parametrize("worker_from", list(WorkerFrom))
@pytest.mark.parametrize("seed,pause", [(0, 0.3), (1, 0.3), (2, 0.0)])
def test_bursts_become_requests_and_answers_become_beats(seed, pause, worker_from):
    """With pauses, and without: then each answer follows the one before at once, as a
    padding run ends too."""
    rng = np.random.default_rng(seed)
    dut = AxiDataPort(params=SMALL, id_width=ID_WIDTH, worker_from=worker_from, max_requests=8)
    writes = random_bursts(rng, write=True, count=60, worker_from=worker_from)
    reads = random_bursts(rng, write=False, count=60, worker_from=worker_from)
    lines = [[int.from_bytes(rng.bytes(LINE_BYTES), "little") for _ in range(b.length)]
             for b in writes]
    want_writes, want_reads, want_b, want_r = expected_traffic(writes, reads, lines)
    requests, b_beats, r_beats = run_bursts(dut, writes, reads, lines, seed=seed, pause=pause)
    got_writes = [(Op(q["op"]), q["addr"], q["worker"], q["data"]) for q in requests
                  if q["op"] == Op.WRITE]
    got_reads = [(Op(q["op"]), q["addr"]) for q in requests if q["op"] != Op.WRITE]
    assert got_writes == want_writes
    assert got_reads == want_reads
    assert b_beats == [{**beat, "user": int(beat["user"])} for beat in want_b]
    assert len(r_beats) == len(want_r)
    for index, (got, want) in enumerate(zip(r_beats, want_r)):
        want = {**want, "user": int(want["user"]), "data": want["data"] or 0}
        assert got == want, f"R beat {index}"
    # Every kind of answer was reached.
    assert {beat["resp"] for beat in b_beats} == {Resp.OKAY, Resp.SLVERR}
    assert {int(beat["user"]) for beat in want_r} == {int(s) for s in Status
                                                      if s != Status.DUPLICATE}
    assert any(w["data"] is None for w in want_r) and any(
        w["resp"] == Resp.SLVERR and w["user"] == Status.OK for w in want_r)


def test_a_read_right_after_padding_beats_loses_no_line():
    """Padding beats (a refused read's; a FIXED read's beyond its readout) followed at
    once by reads whose answers wait: each answer goes out whole, in order."""
    line_bytes = line_size(SMALL.line_bits)
    make = dict(worker=0, offset=0, clear=0)
    reads = [Burst_(write=False, axid=1, line=3, length=2, burst=Burst.INCR,
                    size=line_bytes - 1, **make),
             Burst_(write=False, axid=2, line=5, length=1, burst=Burst.INCR,
                    size=line_bytes, **make),
             Burst_(write=False, axid=3, line=7, length=3, burst=Burst.FIXED,
                    size=line_bytes, **make),
             Burst_(write=False, axid=4, line=4, length=1, burst=Burst.INCR,
                    size=line_bytes, **make)]
    dut = AxiDataPort(params=SMALL, id_width=ID_WIDTH, max_requests=8)
    *_, want_r = expected_traffic([], reads, [])
    _, _, r_beats = run_bursts(dut, [], reads, [], seed=0, pause=0.0)
    assert r_beats == [{**want, "user": int(want["user"]), "data": want["data"] or 0}
                       for want in want_r]


def test_one_request_a_clock_without_pauses():
    """Single-beat bursts of both kinds, back to back: a request every cycle."""
    rng = np.random.default_rng(4)
    dut = AxiDataPort(params=SMALL, id_width=ID_WIDTH, max_requests=32)
    make = dict(worker=0, length=1, burst=Burst.INCR, size=line_size(SMALL.line_bits),
                offset=0, clear=0)
    writes = [Burst_(write=True, axid=k % 16, line=100 + k, strobes=[ALL_BYTES], **make)
              for k in range(40)]
    reads = [Burst_(write=False, axid=k % 16, line=1 + k, **make) for k in range(40)]
    lines = [[int(rng.integers(1 << 60))] for _ in writes]
    requests, _, _ = run_bursts(dut, writes, reads, lines, seed=4, pause=0.0)
    assert len(requests) == 80
    # Turns alternate while both wait.
    ops = [Op(q["op"]) for q in requests[:20]]
    assert ops == [Op.WRITE, Op.READ] * 10 or ops == [Op.READ, Op.WRITE] * 10


def test_the_controllers_ready_moves_only_wready_within_a_cycle():
    """Write and read bursts waiting on every channel, the controller's ``ready`` toggled
    within each cycle: AWREADY, ARREADY and the request's ``valid`` and payload do not
    follow it (it reaches only the item buffer's registers); WREADY does, as the admission
    of the write whose line is the W beat."""
    dut = AxiDataPort(params=SMALL, id_width=ID_WIDTH, max_requests=16)
    axi, req = dut.s_axi, dut.o_req
    make = dict(worker=1, length=3, burst=Burst.INCR, size=line_size(SMALL.line_bits),
                offset=0, clear=0)
    write = Burst_(write=True, axid=2, line=5, strobes=[ALL_BYTES] * 3, **make)
    read = Burst_(write=False, axid=3, line=9, **make)
    watched = [axi.awready, axi.arready, req.valid, req.payload.as_value()]
    seen, wready = [], []

    async def bench(ctx):
        for name, value in {"awvalid": 1, "awaddr": write.address(dut.address_layout),
                            "awlen": 2, "awsize": write.size, "awburst": write.burst,
                            "awid": write.id, "wvalid": 1, "wstrb": ALL_BYTES,
                            "wdata": 0x1234, "arvalid": 1,
                            "araddr": read.address(dut.address_layout), "arlen": 2,
                            "arsize": read.size, "arburst": read.burst, "arid": read.id,
                            }.items():
            ctx.set(getattr(axi, name), value)
        for cycle in range(16):
            answers, beats = [], []
            for ready in (0, 1, 0):
                ctx.set(req.ready, ready)
                answers.append([ctx.get(signal) for signal in watched])
                beats.append(ctx.get(axi.wready))
            assert answers[0] == answers[1] == answers[2], f"cycle {cycle}: {answers}"
            assert beats[0] == beats[2] == 0, f"cycle {cycle}: WREADY without admission"
            seen.append(answers[0])
            wready.append(beats[1])
            ctx.set(req.ready, cycle % 3 != 0)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # Not vacuous: requests were offered, and W beats and both bursts taken.
    assert sum(answer[2] for answer in seen) >= 4
    assert any(wready)
    assert any(answer[0] for answer in seen) and any(answer[1] for answer in seen)


def test_the_controllers_response_ready_follows_r_or_b_only_as_they_take_its_line():
    """Answers waiting for R and B, RREADY, BREADY and the controller's response ``valid``
    toggled within each cycle: the response's ``ready`` never follows its ``valid`` (it is
    formed from flip-flops and the two readies), and it follows RREADY only while R offers the
    controller's line, BREADY only while B answers a write burst's last beat, so a response
    is taken exactly as the beat that carries it is."""
    dut = AxiDataPort(params=SMALL, id_width=ID_WIDTH, max_requests=16)
    axi, req, resp = dut.s_axi, dut.o_req, dut.i_resp
    make = dict(worker=1, length=4, burst=Burst.INCR, size=line_size(SMALL.line_bits),
                offset=0, clear=0)
    write = Burst_(write=True, axid=2, line=5, strobes=[ALL_BYTES] * 4, **make)
    read = Burst_(write=False, axid=3, line=9, **make)
    follows = {"always": 0, "rready": 0, "bready": 0}

    async def bench(ctx):
        for name, value in {"awvalid": 1, "awaddr": write.address(dut.address_layout),
                            "awlen": 3, "awsize": write.size, "awburst": write.burst,
                            "awid": write.id, "wvalid": 1, "wstrb": ALL_BYTES,
                            "arvalid": 1, "araddr": read.address(dut.address_layout),
                            "arlen": 3, "arsize": read.size, "arburst": read.burst,
                            "arid": read.id}.items():
            ctx.set(getattr(axi, name), value)
        ctx.set(req.ready, 1)
        # Every request answered OK with one line, a cycle after it is taken.
        ctx.set(resp.payload.last, 1)
        owed = 0
        for cycle in range(40):
            ready = {}
            for valid, rready, bready in itertools.product((0, 1), repeat=3):
                ctx.set(resp.valid, valid)
                ctx.set(axi.rready, rready)
                ctx.set(axi.bready, bready)
                ready[valid, rready, bready] = (ctx.get(resp.ready), ctx.get(axi.rvalid),
                                                ctx.get(axi.bvalid))
            for (valid, rready, bready), (taken, _, _) in ready.items():
                assert taken == ready[0, rready, bready][0], f"cycle {cycle}: follows valid"
            by_r = ready[1, 0, 0][0] != ready[1, 1, 0][0]
            by_b = ready[1, 0, 0][0] != ready[1, 0, 1][0]
            assert not (by_r and by_b), f"cycle {cycle}: follows both readies"
            if by_r:
                assert ready[1, 1, 0] == (1, 1, 0) and ready[1, 0, 0][0] == 0, f"cycle {cycle}"
                follows["rready"] += 1
            elif by_b:
                assert ready[1, 0, 1][0] == ready[1, 0, 1][2] == 1, f"cycle {cycle}"
                assert ready[1, 0, 0][0] == 0, f"cycle {cycle}"
                follows["bready"] += 1
            elif ready[1, 0, 0][0]:
                assert not any(ready[1, 0, 0][1:]), f"cycle {cycle}: a beat taken unasked"
                follows["always"] += 1
            ctx.set(resp.valid, owed > 0)
            ctx.set(axi.rready, cycle % 4 != 0)
            ctx.set(axi.bready, cycle % 3 != 0)
            owed += ctx.get(req.valid) - (owed > 0 and ctx.get(resp.ready))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # Not vacuous: R's lines, B's last beats and a write burst's earlier beats all seen.
    assert all(follows.values()), follows


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(params=3), TypeError, "params must be a FabricParams, not 3"),
    (dict(id_width=0), ValueError, "id_width must be between 1 and 32, not 0"),
    (dict(worker_from="port"), ValueError,
     "worker_from must be one of 'address', 'id', not 'port'"),
    (dict(params=FabricParams(max_workers=16), id_width=3, worker_from="id"), ValueError,
     "id_width must be at least the worker id's 4 bits when the worker comes from the ID, "
     "not 3"),
    (dict(max_requests=24), ValueError, "max_requests must be a power of two, not 24"),
    (dict(max_requests=2), ValueError, "max_requests must be between 4 and 1024, not 2"),
])
def test_bad_parameters_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error) as info:
        AxiDataPort(**kwargs)
    assert str(info.value) == message
