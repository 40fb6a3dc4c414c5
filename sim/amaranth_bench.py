"""A cycle-level bench for the controller top in Amaranth's simulator, checked against the golden model.

:func:`run` plays a list of operations (requests and CSR accesses) into a
:class:`~neuron_fabric.hw.controller.Controller`, with a seeded generator choosing upstream
idle cycles, response backpressure, memory backpressure and memory read latency. It plays
the same list into :class:`~neuron_fabric.golden.controller.ControllerModel` and returns both
sides, with the cycle of every transfer, for the tests to compare.

One testbench drives every interface each cycle: it sets the inputs, reads the settled
outputs, records the transfers that the next clock edge makes, then ticks. CSR accesses
wait until every earlier response has arrived, which makes the sequence the model sees
the same as the hardware's.
"""

import dataclasses

import numpy as np
from amaranth.sim import Simulator

from ..golden import lines as _lines
from ..golden.controller import ControllerModel, LineMemory, Request, Response, Status
from ..golden.params import FabricParams
from ..hw.controller import Controller
from .scenarios import CsrRead, CsrWrite, noise_lines, request_data

__all__ = ["Timing", "BenchResult", "run", "evaluate_stage"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """How the bench's side of each interface behaves, drawn per cycle from the seed.

    ``idle``: chance that the requester holds back a request it has; ``backpressure``:
    chance that ``o_resp`` is not ready; ``mem_backpressure``: chance that ``o_mem`` is not
    ready; ``mem_latency``: the memory's read latency in cycles, drawn from ``[low, high]``;
    ``response_stall`` and ``memory_stall``: cycles ``[start, stop)`` in which ``o_resp`` or
    ``o_mem`` is never ready.
    """
    idle: float = 0.0
    backpressure: float = 0.0
    mem_backpressure: float = 0.0
    mem_latency: tuple = (1, 1)
    response_stall: tuple = (0, 0)
    memory_stall: tuple = (0, 0)


@dataclasses.dataclass
class BenchResult:
    """What a run saw, next to what the golden model answers."""
    responses: list        # Response per request, from the hardware
    expected: list         # Response per request, from the model
    csr_reads: list        # (addr, hardware value, model value) per CsrRead
    request_cycles: list   # cycle of each request's transfer
    beat_cycles: list      # cycles of each response's beats
    memory: LineMemory     # the bench's downstream memory
    model: ControllerModel
    cycles: int


def _payload(request, params, noise):
    """The request's bus payload; a request that is not a WRITE carries a line of ``noise``
    (a generator's bytes), which the controller must ignore."""
    data = request_data(request, params.line_bits // 8, noise)
    return {"op": int(request.op), "addr": request.addr, "worker": request.worker,
            "data": _lines.line_to_int(data)}


def run(ops, *, params=None, seed=0, timing=Timing(), max_cycles=200_000, vcd=None,
        **controller):
    """Play ``ops`` (``Request``, ``CsrWrite``, ``CsrRead``) into the hardware and the model.

    ``seed`` feeds the generator of the timing choices; ``controller`` (``tile_lanes``,
    ``max_reads``, ...) goes to the :class:`Controller`. Raises ``RuntimeError`` when the
    hardware stops answering for ``max_cycles`` cycles. With ``vcd`` set, writes waves there.
    """
    params = params or FabricParams()
    rng = np.random.default_rng(seed)
    noise = noise_lines(seed)
    dut = Controller(params=params, **controller)
    model = ControllerModel(params)
    expected, model_reads = [], []
    for op in ops:
        if isinstance(op, Request):
            expected.append(model.submit(op))
        elif isinstance(op, CsrWrite):
            model.csr_write(op.addr, op.value)
        else:
            model_reads.append(model.csr_read(op.addr))

    line_bytes = params.line_bits // 8
    state = dict(cycle=0, hw_reads=[], responses=[], beats=[], req_cycles=[], beat_cycles=[])
    memory = LineMemory(line_bits=params.line_bits)

    async def bench(ctx):
        pending = list(ops)
        in_flight = 0          # requests sent, responses not complete
        read_queue = []        # (ready cycle, data) of memory reads
        idle_since = 0
        # Run until every request is answered and the last memory write has gone out.
        while pending or in_flight or read_queue or ctx.get(dut.o_mem.valid):
            cycle = state["cycle"]
            op = pending[0] if pending else None
            # A CSR access waits for every earlier response.
            if op is not None and not isinstance(op, Request) and in_flight == 0:
                pending.pop(0)
                # Memory writes may still be on their way out (a write is answered once it
                # is queued); the outputs wait while the access takes its cycles.
                for port in (dut.i_req.valid, dut.o_resp.ready, dut.o_mem.ready, dut.i_mem.valid):
                    ctx.set(port, 0)
                if isinstance(op, CsrWrite):
                    ctx.set(dut.csr.addr, op.addr)
                    ctx.set(dut.csr.w_data, op.value)
                    ctx.set(dut.csr.w_stb, 1)
                    await ctx.tick()
                    ctx.set(dut.csr.w_stb, 0)
                    await ctx.tick()  # strobes and window clears start the cycle after
                else:
                    ctx.set(dut.csr.addr, op.addr)
                    ctx.set(dut.csr.r_stb, 1)
                    await ctx.tick()
                    ctx.set(dut.csr.r_stb, 0)
                    await ctx.tick()
                    state["hw_reads"].append(ctx.get(dut.csr.r_data))
                state["cycle"] += 2
                continue

            offer = isinstance(op, Request) and rng.random() >= timing.idle
            ctx.set(dut.i_req.valid, offer)
            if offer:
                ctx.set(dut.i_req.payload, _payload(op, params, noise))
            stalled = timing.response_stall[0] <= cycle < timing.response_stall[1]
            ctx.set(dut.o_resp.ready, not stalled and rng.random() >= timing.backpressure)
            mem_stalled = timing.memory_stall[0] <= cycle < timing.memory_stall[1]
            ctx.set(dut.o_mem.ready, not mem_stalled and rng.random() >= timing.mem_backpressure)
            mem_valid = bool(read_queue) and read_queue[0][0] <= cycle
            ctx.set(dut.i_mem.valid, mem_valid)
            if mem_valid:
                ctx.set(dut.i_mem.payload, read_queue[0][1])

            if offer and ctx.get(dut.i_req.ready):
                pending.pop(0)
                in_flight += 1
                state["req_cycles"].append(cycle)
                state["beats"].append([])
                state["beat_cycles"].append([])
            if ctx.get(dut.o_resp.valid) and ctx.get(dut.o_resp.ready):
                beat = ctx.get(dut.o_resp.payload)
                index = len(state["responses"])
                if index >= len(state["beats"]):
                    raise AssertionError(f"cycle {cycle}: a response beat with no request")
                state["beats"][index].append((int(beat.status), int(beat.data)))
                state["beat_cycles"][index].append(cycle)
                if beat.last:
                    beats = state["beats"][index]
                    state["responses"].append(Response(Status(beats[0][0]), tuple(
                        data.to_bytes(line_bytes, "little") for _, data in beats)))
                    in_flight -= 1
                idle_since = cycle
            if ctx.get(dut.o_mem.valid) and ctx.get(dut.o_mem.ready):
                mreq = ctx.get(dut.o_mem.payload)
                if mreq.write:
                    memory.write(int(mreq.addr), int(mreq.data).to_bytes(line_bytes, "little"))
                else:
                    latency = int(rng.integers(timing.mem_latency[0], timing.mem_latency[1] + 1))
                    data = _lines.line_to_int(memory.read(int(mreq.addr)))
                    read_queue.append((cycle + latency, data))
            if mem_valid and ctx.get(dut.i_mem.ready):
                read_queue.pop(0)
            await ctx.tick()
            state["cycle"] += 1
            if state["cycle"] - idle_since > max_cycles:
                raise RuntimeError(f"no response for {max_cycles} cycles at cycle {cycle}: "
                                   f"{in_flight} requests unanswered")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    reads = [op.addr for op in ops if isinstance(op, CsrRead)]
    return BenchResult(
        responses=state["responses"], expected=expected,
        csr_reads=list(zip(reads, state["hw_reads"], model_reads)),
        request_cycles=state["req_cycles"], beat_cycles=state["beat_cycles"],
        memory=memory, model=model, cycles=state["cycle"])


def evaluate_stage(stage, inputs):
    """Evaluate a combinational stream stage (a lane engine) on each input payload.

    ``inputs`` is a list of ``{field: int}`` for ``stage.i.payload`` (every field given, a
    lane array as one integer). Returns, per input, ``{field: int}`` of ``stage.o.payload``.
    One simulation covers the whole list, so the design is compiled once, and each payload
    is set as one value, so the design settles once an input. The handshake (``o.valid`` and
    ``i.ready`` follow ``i.valid`` and ``o.ready``) is checked on the first payload: in a
    combinational stage it does not depend on the payload.
    """
    in_layout, out_layout = stage.i.payload.shape(), stage.o.payload.shape()
    outputs = []

    def pack(values):
        word = 0
        for name, field in in_layout:
            word |= (values[name] & ((1 << field.width) - 1)) << field.offset
        return word

    def unpack(word):
        return {name: (word >> field.offset) & ((1 << field.width) - 1)
                for name, field in out_layout}

    async def bench(ctx):
        for index, values in enumerate(inputs):
            ctx.set(stage.i.payload.as_value(), pack(values))
            if index == 0:
                for valid, ready in ((1, 1), (0, 1), (1, 0)):
                    ctx.set(stage.i.valid, valid)
                    ctx.set(stage.o.ready, ready)
                    if (ctx.get(stage.o.valid), ctx.get(stage.i.ready)) != (valid, ready):
                        raise AssertionError(f"{type(stage).__name__} breaks the handshake: "
                                             f"i.valid={valid} o.ready={ready}")
                ctx.set(stage.o.ready, 1)
            outputs.append(unpack(ctx.get(stage.o.payload.as_value())))

    sim = Simulator(stage)
    sim.add_testbench(bench)
    sim.run()
    return outputs
