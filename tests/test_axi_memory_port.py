"""The AXI4 memory manager: every request once, byte-exact, read data in order and as the
requests before it left the memory, against a memory that applies a write only when it
answers B and reads a line only when it answers R, with random latency and pauses."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from neuron_fabric.hw.axi import Burst, line_size
from neuron_fabric.hw.axi_memory_port import AxiMemoryPort

from axi_sim import Sink, Source, channel, step

LINE_BITS = 128


class WAfterAw(Sink):
    """A W channel whose WREADY waits for the beat's AW to be taken, as AXI allows."""

    def __init__(self, *args, aw, **kwargs):
        super().__init__(*args, **kwargs)
        self.aw = aw

    def drive(self, ctx):
        ctx.set(self.ready, self.rng.random() >= self.pause and len(self.aw.beats) > len(self.beats))


def run_requests(requests, *, seed, pause, latency=(1, 12), max_writes=4, max_reads=4,
                 w_after_aw=False):
    """Play ``requests`` (``(write, addr, data)``) into the port against the slow memory
    (one ID: writes land in order, reads answer in order, each with its own latency);
    returns the read data given back, the memory, and the most writes and reads that
    waited at once. With ``w_after_aw``, the memory takes no W beat before its AW."""
    dut = AxiMemoryPort(line_bits=LINE_BITS, max_writes=max_writes, max_reads=max_reads)
    axi, rng = dut.m_axi, np.random.default_rng(seed)
    size = line_size(LINE_BITS)
    req = Source(dut.i_req.valid, dut.i_req.ready, {"payload": dut.i_req.payload}, rng=rng,
                 pause=pause)
    req.queue.extend({"payload": {"write": w, "addr": a, "data": d}} for w, a, d in requests)
    data = Sink(dut.o_data.valid, dut.o_data.ready, {"line": dut.o_data.payload}, rng=rng,
                pause=pause, name="o_data")
    aw = Sink(axi.awvalid, axi.awready, channel(axi, "aw", ["addr", "len", "size", "burst"]),
              rng=rng, pause=pause, name="AW")
    w_channel = channel(axi, "w", ["data", "strb", "last"])
    if w_after_aw:
        w = WAfterAw(axi.wvalid, axi.wready, w_channel, rng=rng, pause=pause, name="W", aw=aw)
    else:
        w = Sink(axi.wvalid, axi.wready, w_channel, rng=rng, pause=pause, name="W")
    ar = Sink(axi.arvalid, axi.arready, channel(axi, "ar", ["addr", "len", "size", "burst"]),
              rng=rng, pause=pause, name="AR")
    b = Source(axi.bvalid, axi.bready, channel(axi, "b", ["resp"]), rng=rng, pause=pause)
    r = Source(axi.rvalid, axi.rready, channel(axi, "r", ["data", "resp", "last"]), rng=rng,
               pause=pause)
    memory, events, most = {}, [], {"writes": 0, "reads": 0}
    reads = sum(1 for write, _, _ in requests if not write)
    writes = len(requests) - reads

    async def bench(ctx):
        cycle, paired, last_read = 0, 0, 0
        while (req.queue or req.holding or len(data.beats) < reads or paired < writes
               or events or not b.idle):
            assert cycle < 20_000, "the requests did not finish in 20,000 cycles"
            await step(ctx, [req, data, aw, w, ar, b, r])
            cycle += 1
            for beat in aw.beats[paired:]:
                assert (beat["len"], beat["size"], beat["burst"]) == (0, size, Burst.INCR)
            for beat in ar.beats[last_read:]:
                assert (beat["len"], beat["size"], beat["burst"]) == (0, size, Burst.INCR)
                events.append((max([cycle + int(rng.integers(*latency))]
                                   + [e[0] for e in events if e[2] == "r"]),
                               len(events) + cycle * 1000, "r", beat["addr"]))
            last_read = len(ar.beats)
            while paired < min(len(aw.beats), len(w.beats)):
                beat = w.beats[paired]
                assert (beat["strb"], beat["last"]) == ((1 << LINE_BITS // 8) - 1, 1)
                events.append((max([cycle + int(rng.integers(*latency))]
                                   + [e[0] for e in events if e[2] == "w"]),
                               len(events) + cycle * 1000, "w",
                               (aw.beats[paired]["addr"], beat["data"])))
                paired += 1
            most["writes"] = max(most["writes"], sum(e[2] == "w" for e in events))
            most["reads"] = max(most["reads"], sum(e[2] == "r" for e in events))
            # Writes land when B is answered, reads look when R is: in time order, then in
            # the order they came.
            for event in sorted(e for e in events if e[0] <= cycle):
                events.remove(event)
                _, _, kind, what = event
                if kind == "w":
                    memory[what[0]] = what[1]
                    b.queue.append({"resp": 0})
                else:
                    r.queue.append({"data": memory.get(what, 0), "resp": 0, "last": 1})

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return [beat["line"] for beat in data.beats], memory, most


def expected(requests):
    memory, returned = {}, []
    for write, addr, data in requests:
        byte_addr = addr << line_size(LINE_BITS)
        if write:
            memory[byte_addr] = data
        else:
            returned.append(memory.get(byte_addr, 0))
    return returned, memory


@pytest.mark.parametrize("w_after_aw", [False, True], ids=["w_any_time", "w_after_aw"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reads_return_what_the_requests_before_them_wrote(seed, w_after_aw):
    """Few addresses, reads and writes mixed: a read overtaking a write, or a write
    overtaking a read, of the same line would return the wrong line. A memory that takes
    W only after its AW would hang a port that sent AW only once W was taken."""
    rng = np.random.default_rng(seed)
    requests = [(int(rng.random() < 0.5), int(rng.integers(0, 6)),
                 int.from_bytes(rng.bytes(LINE_BITS // 8), "little")) for _ in range(150)]
    returned, memory, most = run_requests(requests, seed=seed, pause=0.3, w_after_aw=w_after_aw)
    assert (returned, memory) == expected(requests)


def test_runs_of_writes_and_of_reads_overlap_up_to_their_limits():
    rng = np.random.default_rng(9)
    requests = ([(1, k, int(rng.integers(1 << 60))) for k in range(40)]
                + [(0, k, 0) for k in range(40)])
    returned, memory, most = run_requests(requests, seed=9, pause=0.0, latency=(8, 9))
    assert (returned, memory) == expected(requests)
    assert most == {"writes": 4, "reads": 4}


@pytest.mark.parametrize("write", [1, 0], ids=["writes", "reads"])
def test_the_controllers_pop_waits_on_wready_only_never_on_awready_or_arready(write):
    """With AWREADY and ARREADY low, writes still leave on W (WREADY high) and reads are
    still popped, one a clock, up to the limit, their addresses kept for AW and AR; then
    the port waits for the memory. Released, the addresses go out in order."""
    limit = 4
    dut = AxiMemoryPort(line_bits=LINE_BITS, max_writes=limit, max_reads=limit)
    axi, req = dut.m_axi, dut.i_req
    taken, addresses = [], []

    async def bench(ctx):
        ctx.set(axi.wready, 1)
        for k in range(2 * limit):
            ctx.set(req.valid, 1)
            ctx.set(req.payload.write, write)
            ctx.set(req.payload.addr, 10 + k)
            # The pop is decided with no AW or AR taken: their readies are low throughout.
            taken.append(ctx.get(req.ready))
            if taken[-1]:
                assert ctx.get(axi.wvalid) == write
            await ctx.tick()
        ctx.set(req.valid, 0)
        ctx.set(axi.awready, 1)
        ctx.set(axi.arready, 1)
        for _ in range(2 * limit):
            valid = axi.awvalid if write else axi.arvalid
            if ctx.get(valid):
                address = axi.awaddr if write else axi.araddr
                addresses.append(ctx.get(address) >> line_size(LINE_BITS))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # A request a clock until the limit, then none: the count of those waiting holds them.
    assert taken == [1] * limit + [0] * limit
    assert addresses == [10 + k for k in range(limit)]


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(line_bits=96), ValueError, "line_bits must be a power of two, not 96"),
    (dict(line_bits=4), ValueError, "line_bits must be between 8 and 1024, not 4"),
    (dict(max_writes=0), ValueError, "max_writes must be between 1 and 1024, not 0"),
    (dict(max_reads=2.0), TypeError, "max_reads must be an integer, not 2.0"),
])
def test_bad_parameters_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error) as info:
        AxiMemoryPort(**kwargs)
    assert str(info.value) == message
