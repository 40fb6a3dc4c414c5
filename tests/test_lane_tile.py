"""A lane tile driven alone in the Amaranth simulator, its control words sent on the schedule
(hw/schedule.py) as the control plane sends them: forwarding at every distance, rows emptied
at every distance, the settle after a reset, and its buffers' rings."""

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module, Signal, Value
from amaranth.sim import Simulator

from neuron_fabric.golden.formats import Readout
from neuron_fabric.hw.lane_tile import LaneTile
from neuron_fabric.hw.schedule import (FLAGS_STAGE, FORWARD_DISTANCES, FOLD_WORD_STAGE,
                                       FORWARD_WORD_STAGE, LATE_WORD_STAGE, PUSH_STAGE,
                                       READ_WORD_STAGE, Source)
from neuron_fabric.hw.tile_row import readout_codes

LANES, GROUP, WORKERS, ROWS, DEPTH = 8, 4, 4, 4, 4
COUNTER_BITS = 3   # the default width at 4 workers: no lane fills


def _word(*, row=0, data=0, fold=None, late=None, forward=Source.NONE):
    """A word as the tile's four control words and data line: ``fold`` and ``late`` are
    ``{field: value}`` (0 elsewhere)."""
    return {"data": data, "row": row, "source": forward.value, "fold": fold or {},
            "late": late or {}}


class _Bench:
    """The tile and a testbench that issues one word a cycle (None: no word), each of its
    parts at the cycle the schedule sets: the data line at 0, each control word a cycle
    before it is in the tile's register. ``reset_at``: cycles at which ``rst`` is high."""

    def __init__(self, *, reset_at=()):
        self.tile = LaneTile(tile_lanes=LANES, group_lanes=GROUP, max_workers=WORKERS,
                             rows=ROWS, buffer_depth=DEPTH)
        self.m = Module()
        self.m.domains.sync = self.domain = ClockDomain("sync")
        self.m.submodules.tile = self.tile
        # The readout's codes, decoded as the control plane decodes them.
        self.readout, self.beat = Signal(Readout), Signal(range(COUNTER_BITS))
        self.codes = Signal(len(self.tile.fold_word.codes))
        self.m.d.comb += self.codes.eq(readout_codes(self.readout, self.beat,
                                                     counter_bits=COUNTER_BITS))
        self.reset_at = set(reset_at)

    async def codes_of(self, ctx, readout, beat):
        ctx.set(self.readout, readout)
        ctx.set(self.beat, beat)
        return ctx.get(self.codes)

    async def drive(self, ctx, words, *, watch=None, pops=()):
        """Issue ``words`` from cycle 0 and run until they have all left; ``watch(ctx,
        cycle)`` is called in every cycle before the clock edge. ``pops``: cycles at which
        the memory ring's head is popped."""
        tile = self.tile
        cycles = len(words) + FLAGS_STAGE + 2
        for cycle in range(cycles):
            def issued(stage):
                # A word formed before a reset is gone from the control plane's registers
                # once the reset's cycle is over.
                index = cycle - stage
                if any(index < reset < cycle for reset in self.reset_at):
                    return None
                return words[index] if 0 <= index < len(words) and words[index] else None
            word = issued(0)
            ctx.set(tile.i_data, word["data"] if word else 0)
            word = issued(READ_WORD_STAGE - 1)
            ctx.set(tile.read_word.row, word["row"] if word else 0)
            word = issued(FORWARD_WORD_STAGE - 1)
            ctx.set(tile.forward_word.source, word["source"] if word else 0)
            for port, key, stage in ((tile.fold_word, "fold", FOLD_WORD_STAGE),
                                     (tile.late_word, "late", LATE_WORD_STAGE)):
                word = issued(stage - 1)
                for name, _ in port.shape():
                    ctx.set(Value.cast(getattr(port, name)), word[key].get(name, 0) if word else 0)
            ctx.set(tile.pop_memory, cycle in pops)
            ctx.set(self.domain.rst, cycle in self.reset_at)
            if watch is not None:
                watch(ctx, cycle)
            await ctx.tick()

    def run(self, bench):
        sim = Simulator(self.m)
        sim.add_clock(1e-6)
        sim.add_testbench(bench)
        sim.run()


def _bits(values):
    """A line's integer from its bits, line bit 0 first."""
    return sum(int(bit) << i for i, bit in enumerate(values))


def _words(plan, codes):
    """The tile's words for ``plan``, a list of ``("write", row, line)``, ``("clear", row,
    None)`` (a READ_CLEAR that empties the row; the tile only sees it in the words after),
    ``("read", row, beat)`` (a COUNTS beat, ``codes[beat]`` its codes) or None, each told
    where its row comes from as the control plane tells it: the previous word's sum if it
    wrote the row (``from_last``), an empty row if it emptied it (``empty``), else the copy
    of the nearest write two or three words ahead (:data:`~.schedule.FORWARD_DISTANCES`,
    none if that one emptied the row), else the block RAM's row if the row's last write
    was not a clear (``from_ram``)."""
    words = []
    for index, step in enumerate(plan):
        if step is None:
            words.append(None)
            continue
        kind, row, value = step

        def writer(distance):
            """The kind of the word ``distance`` words ahead if it wrote or emptied the row."""
            ahead = plan[index - distance] if index >= distance else None
            return ahead[0] if ahead and ahead[0] in ("write", "clear") and ahead[1] == row \
                else None
        nearest = next((distance for distance in FORWARD_DISTANCES if writer(distance)), None)
        source = Source.NONE
        if nearest is not None and writer(nearest) == "write":
            source = FORWARD_DISTANCES[nearest]
        landed = [writer(distance) for distance in range(max(FORWARD_DISTANCES) + 1, index + 1)]
        in_flight = any(writer(distance) for distance in range(1, max(FORWARD_DISTANCES) + 1))
        fold = {"from_last": int(writer(1) == "write"), "empty": int(writer(1) == "clear"),
                "from_ram": int(not in_flight and next(filter(None, landed), None) == "write")}
        if kind == "write":
            fold.update(fold_gbinary=1, fold_any=1, capture=1)
            words.append(_word(row=row, data=value, forward=source, fold=fold,
                               late={"write_row": 1, "quiet": 1}))
        elif kind == "clear":
            words.append(_word(row=row, forward=source, fold=fold))
        else:
            fold.update(capture=int(value == 0), codes=codes[value], push_response=1)
            words.append(_word(row=row, forward=source, fold=fold))
    return words


def _fold_and_read(plan):
    """Run ``plan`` (writes, clears and None, see :func:`_words`), then read out every row it
    wrote, each COUNTS beat; the response lines, and the lines the rows' counts (since their
    last clear) should give."""
    bench = _Bench()
    rows = sorted({step[1] for step in plan if step is not None})
    plan = plan + [("read", row, beat) for row in rows for beat in range(COUNTER_BITS)]
    responses = []

    async def testbench(ctx):
        codes = [await bench.codes_of(ctx, Readout.COUNTS, beat) for beat in range(COUNTER_BITS)]
        words = _words(plan, codes)
        # Each response is popped as it reaches the head, a cycle after its push.
        due = {index + PUSH_STAGE + 1 for index, word in enumerate(words)
               if word and word["fold"].get("push_response")}

        def collect(ctx, cycle):
            ctx.set(bench.tile.pop_response, cycle in due)
            if cycle in due:
                responses.append(ctx.get(bench.tile.o_response))
        await bench.drive(ctx, words, watch=collect)

    bench.run(testbench)
    counts = {row: np.zeros(LANES, dtype=int) for row in rows}
    for step in plan:
        if step and step[0] == "write":
            counts[step[1]] = counts[step[1]] + [(step[2] >> i) & 1 for i in range(LANES)]
        elif step and step[0] == "clear":
            counts[step[1]] = np.zeros(LANES, dtype=int)
    want = [_bits((counts[row] >> beat) & 1) for row in rows for beat in range(COUNTER_BITS)]
    return responses, want


@pytest.mark.parametrize("distance", range(1, 7))
def test_a_second_write_to_a_row_folds_onto_the_first_at_every_distance(distance):
    """A row takes a write, then another ``distance`` words later (other rows' writes
    between): the second folds onto the first's sum whether it is the previous word's, in
    flight (two or three words ahead) or in the block RAM. A third write, and every row's
    counts read back, check that nothing else moved."""
    rng = np.random.default_rng(distance)
    line = lambda: int(rng.integers(0, 1 << LANES))   # noqa: E731
    between = [("write", 1 + k % (ROWS - 1), line()) for k in range(distance - 1)]
    plan = [("write", 0, line()), *between, ("write", 0, line()), None, ("write", 0, line())]
    responses, want = _fold_and_read(plan)
    assert responses == want


@pytest.mark.parametrize("distance", range(1, 7))
def test_a_write_after_a_clear_folds_onto_an_empty_row_at_every_distance(distance):
    """A row takes two writes and is emptied at once; a write ``distance`` words later (other
    rows' writes between) folds onto an empty row, whether the clear is the previous word
    (with a write of the row two words ahead), in flight or landed: the block RAM still
    holds the old sum, which the tile never clears."""
    rng = np.random.default_rng(10 + distance)
    line = lambda: int(rng.integers(0, 1 << LANES))   # noqa: E731
    between = [("write", 1 + k % (ROWS - 1), line()) for k in range(distance - 1)]
    plan = [("write", 0, line()), ("write", 0, line()), ("clear", 0, None), *between,
            ("write", 0, line()), ("write", 0, line())]
    responses, want = _fold_and_read(plan)
    assert responses == want


def test_idle_cycles_and_back_to_back_writes_mix():
    rng = np.random.default_rng(7)
    plan = [None if rng.random() < 0.3 else ("write", int(rng.integers(0, 2)),
                                              int(rng.integers(0, 1 << LANES)))
            for _ in range(12)]
    responses, want = _fold_and_read(plan)
    assert responses == want


def _reset_in_flight(before):
    """A word issued ``before`` cycles ahead of a one-cycle reset and one issued the cycle
    after it, each a G-Ternary write of an invalid code pushed into the memory ring: the
    cycles in which ``invalid`` is high, the line at the ring's head at the end, and the
    second word's issue cycle."""
    reset = FLAGS_STAGE + 3   # the latest ``before`` the tests ask for
    assert 0 < before <= reset, f"before must be 1 to {reset}, not {before}"
    bench = _Bench(reset_at={reset})
    fold = {"fold_gternary": 1, "fold_any": 1, "push_memory": 1}
    late = {"write_row": 1, "quiet": 1}
    after = reset + 1
    words = [None] * (after + 1)
    words[reset - before] = _word(row=0, data=0xA2, fold=fold, late=late)
    words[after] = _word(row=1, data=0x52, fold=fold, late=late)
    seen, head = [], []

    async def testbench(ctx):
        def watch(ctx, cycle):
            if ctx.get(bench.tile.invalid):
                seen.append(cycle)
        await bench.drive(ctx, words, watch=watch)
        head.append(ctx.get(bench.tile.o_memory))

    bench.run(testbench)
    return seen, head[0], after


def test_an_invalid_code_raises_the_flag_at_the_flags_stage():
    # The first word's flag is out before the reset.
    before = FLAGS_STAGE + 3
    seen, head, issued = _reset_in_flight(before)
    assert seen == [issued - 1 - before + FLAGS_STAGE, issued + FLAGS_STAGE] and head == 0x52


@pytest.mark.parametrize("before", range(1, FLAGS_STAGE + 1))
def test_a_word_in_flight_at_a_reset_pushes_and_flags_nothing_after_it(before):
    """The tile's copies of the words carry no reset: for the cycles after a reset that a
    word formed before it takes to leave (to its flags at FLAGS_STAGE), nothing it does
    counts. The first word after the reset counts in full."""
    seen, head, issued = _reset_in_flight(before)
    assert [cycle for cycle in seen if cycle >= issued] == [issued + FLAGS_STAGE]
    assert head == 0x52, "the memory ring's first entry is the first word after the reset"


def test_the_memory_ring_hands_out_its_entries_in_order_across_its_wrap():
    """Lines pushed into the memory ring leave in order, popped at random cycles, the ring
    never holding more than its depth (the control plane's credits)."""
    rng = np.random.default_rng(3)
    bench = _Bench()
    words, pops, pushed, arrivals, cycle = [], set(), [], [], 0
    while len(pushed) < 3 * DEPTH:
        # A push is at the head from the cycle after PUSH_STAGE; a word is issued only
        # while the ring has room for it beside the words in flight.
        if len(pushed) - len(pops) < DEPTH and rng.random() < 0.7:
            line = int(rng.integers(0, 1 << LANES))
            words.append(_word(data=line, fold={"push_memory": 1}))
            pushed.append(line)
            arrivals.append(cycle + PUSH_STAGE + 1)
        else:
            words.append(None)
        ready = sum(arrival <= cycle for arrival in arrivals) - len(pops)
        if ready and rng.random() < 0.5:
            pops.add(cycle)
        cycle += 1
    popped = []

    async def testbench(ctx):
        def watch(ctx, cycle):
            if cycle in pops:
                popped.append(ctx.get(bench.tile.o_memory))
        await bench.drive(ctx, words, watch=watch, pops=pops)

    bench.run(testbench)
    assert len(pops) > DEPTH, "the ring wraps"
    assert popped == pushed[:len(popped)] and len(popped) == len(pops)
