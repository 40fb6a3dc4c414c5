"""A lane tile: one slice of the controller's wide datapath (docs/design.md, "Lane tiles").

The controller's data plane is a row of identical tiles. A tile owns ``tile_lanes`` line
bits of everything wide: its slice of the request line, the block RAM holding its lanes of
every slot, the fold of both routes, the forwarding of writes still in flight, its slice
of every readout line and its slices of the response and memory-request buffers. Lanes
never talk to each other, so nothing wide crosses from one tile to the next; the control
plane (:class:`~neuron_fabric.hw.control_plane.ControlPlane`) tells every tile the same
thing through four registered control words, on the schedule of :mod:`.schedule`.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from ..golden.validate import check_int
from ..golden.formats import Route, check_counter_bits
from ..golden.gternary import INVALID_CODE
from .engines import ENGINES
from .row_cells import check_cells, choose_by_code, code_bits
from .lane_logic import KEEP
from .layouts import check_hw_max_workers
from .pair_fold import PairCompare, PairFold, lanes_can_fill, pair_thresholds, threshold_layout
from .schedule import (COMPARE_STAGE, FLAGS_STAGE, FOLD_STAGE, FOLD_WORD_STAGE,
                       FORWARD_DISTANCES, PUSH_STAGE, READ_WORD_STAGE, fold_word_layout,
                       forward_word_layout, late_word_layout, read_word_layout)
from .tile_row import code_keys, group_lines, row_layout, row_of_sums, split_codes, sums_of_row

__all__ = ["LaneTile", "CHOICE_LAYOUT", "SELECT_BITS"]

#: Line bits per copy of a readout line's code register.
SELECT_BITS = 4

#: The fields that choose a group's row a cycle before the fold, copied per group of lanes.
CHOICE_LAYOUT = data.StructLayout({"from_ram": 1, "empty": 1})


class LaneTile(wiring.Component):
    """``tile_lanes`` line bits of the data plane: slot RAM, fold, forwarding, readout, buffers.

    **Throughput**: one word per clock, always: nothing in the tile waits. Back-to-back
    writes to one slot fold at II = 1: a write still in flight (one to three words ahead)
    is forwarded to the fold instead of the block RAM's stale row. Only a 2:1 choice sits
    in the fold loop (the previous word's sum or the rest), inside the carry cells. The
    rest is chosen a cycle before the fold, into a fabric register, as an OR: the block
    RAM's row and copies of the sums two and three words ahead, each zeroed unless it is
    the row's (one LUT4 a row bit), so the block RAM's output is one register hop from the
    fold. The sum goes to the block RAM unregistered, so the fourth word ahead has landed
    by the read; the comparisons read it registered, a cycle later.
    **Rows**: a slot whose contribution bitmap is empty has no row. The tile never clears
    one: the first write of a slot's lifetime folds onto zero, as the control plane says
    (the fold word's ``from_ram`` and ``empty``), and a reset leaves the block RAM as it
    is.
    **Latency**: the data line arrives in cycle 0 (``i_data``, the request's transfer),
    the read, forward, fold and late words one cycle before their stages (the control plane's
    registers); the row is read at :data:`~.schedule.READ_WORD_STAGE`, folded and written
    back at :data:`~.schedule.FOLD_STAGE`, compared at :data:`~.schedule.COMPARE_STAGE`,
    and the readout slice pushed into the response buffer at
    :data:`~.schedule.PUSH_STAGE`.
    **Buffers**: ``buffer_depth`` slices of responses and of memory requests; the control
    plane admits requests only when every buffer has room (credits), so a push never finds
    a buffer full, and pops them in order with ``pop_response`` and ``pop_memory``.
    **Fan-out**: every field the lanes use is copied per group of ``group_lanes`` lanes;
    the fold loop's ``from_last`` and the comparisons' thresholds per pair of
    line bits, the row's choice (:data:`CHOICE_LAYOUT`, the forward word) per group, the
    readout's codes per :data:`SELECT_BITS` line bits, all kept through synthesis, so no
    control net reaches more than one group.

    The slot RAM's read port returns don't-care on a same-row write in the same cycle: the
    tile never uses that data (it forwards the sum three words ahead), so synthesis needs
    no collision logic.

    Parameters
    ----------
    tile_lanes : int
        Line bits in the tile: an even number that ``group_lanes`` divides.
    group_lanes : int
        Line bits per copy of the control fields: an even number.
    max_workers : int
        Largest NUM_WORKERS (2 to 64).
    counter_bits : int or None
        Counter width; None gives ``ceil(log2(max_workers + 1))``.
    rows : int
        Slots in all windows (``NUM_WINDOWS * DEPTH``).
    buffer_depth : int
        Entries of the response and memory-request buffers (2 to 1024).
    cells : None or "ecp5"
        What the folds' adders are built from (:mod:`~.row_cells`): generic logic, or ECP5
        carry cells that hold the fold loop's 2:1 choice in their own LUTs. The same
        function either way.

    Members
    -------
    i_data : ``In(tile_lanes)``
        The tile's slice of ``i_req.payload.data``, taken in the transfer's cycle.
    read_word : ``In(read_word_layout(rows))``
    forward_word : ``In(forward_word_layout())``
    fold_word : ``In(fold_word_layout(...))``
    late_word : ``In(late_word_layout())``
        From the control plane's registers, one per clock (all zero for no word); the late
        word a cycle after the fold word. The forward word and the fold word's row choice
        (:data:`CHOICE_LAYOUT`) go to a register per group, the rest to the tile's own.
    pop_response, pop_memory : ``In(1)``
        The response or memory request at the head of the buffers leaves this cycle.
    i_mem_data : ``In(tile_lanes)``
        The tile's slice of the memory's read data.
    o_response : ``Out(tile_lanes)``, o_memory : ``Out(tile_lanes)``
        The slices at the heads of the buffers: a response (for a memory read, the
        memory's data, and for a zero answer 0, chosen by bits the tile keeps with each
        entry), a memory request's line.
    saturated, invalid : ``Out(1)``
        Registered: a fold three cycles ago saturated a lane, or met an invalid code (the
        lanes' flags are registered, then ORed per group, then per tile), at
        :data:`~.schedule.FLAGS_STAGE`. A lane folds at most ``max_workers`` writes a slot (one a
        worker), so only counters narrower than the default can saturate; with the default
        width no lane can fill and ``saturated`` is 0.

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range.
    """

    def __init__(self, *, tile_lanes=32, group_lanes=8, max_workers=16, counter_bits=None,
                 rows=128, buffer_depth=16, cells=None):
        self.tile_lanes = _check_even("tile_lanes", tile_lanes)
        self.group_lanes = _check_even("group_lanes", group_lanes)
        if self.tile_lanes % self.group_lanes:
            raise ValueError(f"group_lanes must divide tile_lanes ({tile_lanes}), "
                             f"not {group_lanes!r}")
        self.max_workers = check_hw_max_workers(max_workers)
        self.counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
        self.rows = check_int("rows", rows, low=1)
        self.buffer_depth = check_int("buffer_depth", buffer_depth, low=2, high=1024)
        self.cells = check_cells(cells)
        super().__init__({
            "i_data": In(self.tile_lanes),
            "read_word": In(read_word_layout(self.rows)),
            "forward_word": In(forward_word_layout()),
            "fold_word": In(fold_word_layout(max_workers=self.max_workers,
                                             counter_bits=self.counter_bits)),
            "late_word": In(late_word_layout()),
            "pop_response": In(1),
            "pop_memory": In(1),
            "i_mem_data": In(self.tile_lanes),
            "o_response": Out(self.tile_lanes),
            "o_memory": Out(self.tile_lanes),
            "saturated": Out(1),
            "invalid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        line = self._data_line(m)
        words = self._control_words(m)
        live = self._settle(m)
        rows = self._slot_rows(m, words)
        addends = self._addends(m, line, words)
        groups = [SimpleNamespace(index=g) for g in range(self.tile_lanes // self.group_lanes)]
        for group in groups:
            self._choose_row(m, group, rows)
            self._fold(m, group, words, rows, addends)
            self._compare(m, group, words, rows)
            self._readout(m, group, words)
        self._flags(m, groups, live)
        self._buffers(m, groups, words, line, live)
        return m

    def _data_line(self, m):
        """The tile's slice of the request line, ``{stage: line}``, a free-running delay from
        the transfer (cycle 0) to :data:`~.schedule.PUSH_STAGE`: the control plane knows
        which cycles carry a word."""
        line = {0: self.i_data}
        for stage in range(1, PUSH_STAGE + 1):
            line[stage] = Signal(self.tile_lanes, name=f"line_{stage}", reset_less=True)
            m.d.sync += line[stage].eq(line[stage - 1])
        return line

    def _control_words(self, m):
        """The tile's registers of the control words, and the delays that carry their fields
        on: the row to the write-back, the thresholds and the readout's fields to the
        comparisons, the buffers' fields and the late word to the buffers' push (the late
        word comes a cycle after the fold word: the control plane registers the status before
        it sends it across the die). The forward word and the fold word's row choice have a
        register per group instead (:meth:`_choose_row`). Each delay holds only the fields
        its stage reads: a copy of the whole word would keep registers that nothing reads."""
        w = SimpleNamespace()
        w.read = Signal(self.read_word.shape(), name="tile_read_word", reset_less=True,
                        attrs=KEEP)
        w.fold = Signal(self.fold_word.shape(), name="tile_fold_word", reset_less=True,
                        attrs=KEEP)
        m.d.sync += [w.read.eq(self.read_word), w.fold.eq(self.fold_word)]
        if self.saturates:
            # The engines compare the row as it comes in, at the fold.
            w.threshold_layout, w.threshold_fields = _part(w.fold, "majority", "gate_less_one")
        else:
            w.threshold_layout = threshold_layout(self.counter_bits)
            w.threshold_fields = _delay(m, "tile_thresholds", pair_thresholds(w.fold),
                                        w.threshold_layout, FOLD_WORD_STAGE, COMPARE_STAGE - 1)
        readout_layout, readout_fields = _part(w.fold, "capture", "codes")
        w.readout_layout = readout_layout
        w.readout_fields = _delay(m, "tile_readout", readout_fields, readout_layout,
                                  FOLD_WORD_STAGE, COMPARE_STAGE - 1)
        buffer_layout, buffer_fields = _part(w.fold, "push_response", "push_memory",
                                             "memory_read")
        w.pushes = _delay(m, "tile_pushes", buffer_fields, buffer_layout, FOLD_WORD_STAGE,
                          PUSH_STAGE, keep_last=True)
        w.row_at = {READ_WORD_STAGE: w.read.row}
        for stage in range(READ_WORD_STAGE + 1, FOLD_STAGE + 1):
            w.row_at[stage] = Signal.like(w.read.row, name=f"row_{stage}", reset_less=True)
            m.d.sync += w.row_at[stage].eq(w.row_at[stage - 1])
        # The late word's register is the block RAM's write enable, in the fold's cycle.
        w.late = Signal(self.late_word.shape(), name="tile_late_word", reset_less=True,
                        attrs=KEEP)
        m.d.sync += w.late.eq(self.late_word)
        w.late_at_push = _delay(m, "tile_late_word", w.late, self.late_word.shape(),
                                FOLD_STAGE, PUSH_STAGE)
        return w

    def _settle(self, m):
        """Whether the words in flight are the tile's to count: 0 for the cycles after a
        reset that the words formed before it take to leave.

        The copies of the words carry no reset (it would reach every one of them). For the
        few cycles a word formed before a reset needs to leave the tile, nothing it does may
        count: no buffer push, no flag. A row it writes is harmless: the clearing sweep that
        follows every reset empties every slot's bitmap, and an empty slot has no row. The
        count runs until the last such word's flags are out: the control plane's fold word
        clears only at the end of a reset's first cycle, so after a one-cycle reset the tile
        still loads the word formed before it once more, and its flags come out at
        FLAGS_STAGE."""
        settle = Signal(range(FLAGS_STAGE - FOLD_WORD_STAGE + 2),
                        init=FLAGS_STAGE - FOLD_WORD_STAGE + 1, attrs=KEEP)
        with m.If(settle != 0):
            m.d.sync += settle.eq(settle - 1)
        return settle == 0

    def _slot_rows(self, m, words):
        """The slot RAM, read at :data:`~.schedule.READ_WORD_STAGE` into its output register
        and written with the fold's sum at :data:`~.schedule.FOLD_STAGE`, and the rows
        around the fold, each a :func:`~.tile_row.row_layout`: ``read`` (the block RAM's
        row), ``sum`` (the fold's, combinational), ``new`` (the sum registered: the fold
        loop's, the comparisons' and the copy three words ahead's), ``ahead`` (the copies of
        the sums two and three words ahead, by distance, each zeroed unless it is the row's)
        and ``chosen`` (the row a cycle before the fold)."""
        layout = row_layout(tile_lanes=self.tile_lanes, group_lanes=self.group_lanes,
                            counter_bits=self.counter_bits)
        slots = memory.Memory(shape=unsigned(layout.size), depth=self.rows, init=[])
        m.submodules.slots = slots
        slots_rd = slots.read_port()
        slots_wr = slots.write_port()
        rows = SimpleNamespace(
            read=Signal(layout, name="row_read", reset_less=True),
            sum=Signal(layout, name="row_sum"),
            new=Signal(layout, name="row_new", reset_less=True),
            ahead={distance: Signal(layout, name=f"row_{distance}_ahead", reset_less=True)
                   for distance in FORWARD_DISTANCES},
            chosen=Signal(layout, name="row_chosen", reset_less=True))
        m.d.comb += [slots_rd.addr.eq(words.row_at[READ_WORD_STAGE]), slots_rd.en.eq(1)]
        m.d.sync += [rows.read.eq(slots_rd.data), rows.new.eq(rows.sum)]
        m.d.comb += [slots_wr.addr.eq(words.row_at[FOLD_STAGE]), slots_wr.data.eq(rows.sum),
                     slots_wr.en.eq(words.late.write_row)]
        # Where each copy is taken from as the forward word reaches the tile: the sum two
        # words ahead is being folded, the one three ahead is registered.
        rows.copied_from = {2: rows.sum, 3: rows.new}
        assert set(rows.copied_from) == set(FORWARD_DISTANCES)
        return rows

    def _choose_row(self, m, group, rows):
        """The group's row, a cycle before the fold: the forward word keeps the copy of the
        sum in flight it names and zeroes the other (as :data:`~.schedule.FORWARD_WORD_STAGE`
        ends), and the fold word's ``from_ram`` zeroes the block RAM's row unless it is the
        slot's; the row is then their OR, one LUT4 a bit, into a fabric register that
        ``empty`` zeroes. The fold takes the previous word's sum or this row. The group's
        registers of the two words are loaded from the control plane's copies: a tile-wide
        register would be a hop too late."""
        g = group.index
        forward = Signal(self.forward_word.shape(), name=f"g{g}_forward_word",
                         reset_less=True, attrs=KEEP)
        choice = Signal(CHOICE_LAYOUT, name=f"g{g}_row_choice", reset_less=True, attrs=KEEP)
        m.d.sync += [forward.eq(self.forward_word),
                     choice.from_ram.eq(self.fold_word.from_ram),
                     choice.empty.eq(self.fold_word.empty)]
        for distance, source in FORWARD_DISTANCES.items():
            # A copy's reset is one bit of the forward word (a bit a member of Source).
            with m.If(forward.source[source.value.bit_length() - 1]):
                m.d.sync += rows.ahead[distance][g].eq(rows.copied_from[distance][g])
            with m.Else():
                m.d.sync += rows.ahead[distance][g].eq(0)
        ram_row = Value.cast(rows.read[g])
        ram_row = ram_row & choice.from_ram.replicate(len(ram_row))
        with m.If(choice.empty):
            m.d.sync += rows.chosen[g].eq(0)
        with m.Else():
            row = ram_row
            for distance in FORWARD_DISTANCES:
                row = row | Value.cast(rows.ahead[distance][g])
            m.d.sync += rows.chosen[g].eq(row)

    def _addends(self, m, line, words):
        """The line's votes and codes, masked a cycle before the fold: a lane of a route that
        does not fold sees a zero vote or code, so neither a fold enable nor the route sits
        in the fold loop. A write that is refused folds too; its row is not written back,
        and the control plane drops its flags. Where no lane can saturate, each pair of line
        bits folds with one adder over its part of the row
        (:func:`~.pair_fold.pair_addend`), whose addend is worked out here
        (:meth:`_fold_adds`); otherwise the engines fold the votes and codes."""
        if not self.saturates:
            return self._fold_adds(m, line[FOLD_STAGE - 1], words.fold)
        T, fold_word = self.tile_lanes, words.fold
        votes = Signal(T, name="votes", reset_less=True)
        codes = Signal(T, name="codes", reset_less=True)
        m.d.sync += [votes.eq(line[FOLD_STAGE - 1] & fold_word.fold_gbinary.replicate(T)),
                     codes.eq(line[FOLD_STAGE - 1] & fold_word.fold_gternary.replicate(T))]
        return SimpleNamespace(votes=votes, codes=codes)

    def _fold(self, m, group, words, rows, addends):
        """The fold, at :data:`~.schedule.FOLD_STAGE`, pair by pair of line bits: the row
        (the previous word's sum or the chosen row) plus the addend, into ``rows.sum``; then
        the group's flags, registered before they are ORed.

        The fold loop's ``from_last`` has a copy per pair of line bits (one G-Ternary lane, two
        G-Binary lanes), loaded from the tile's register: a handful of loads each. Each pair
        is a :class:`~.pair_fold.PairFold`, or where a lane can fill the route engines
        (:meth:`_fold_by_engines`), whose readout tests are registered here for the
        comparisons' stage. Sets ``group.engine_tests`` where the engines fold."""
        g, G = group.index, self.group_lanes
        group.engine_tests = []   # per pair, where the engines fold
        flag_tests = []           # per pair: the lanes' flags
        for pair in range(G // 2):
            from_last = Signal(name=f"g{g}_p{pair}_from_last", reset_less=True, attrs=KEEP)
            m.d.sync += from_last.eq(words.fold.from_last)
            last, chosen = rows.new[g][pair].as_value(), rows.chosen[g][pair].as_value()
            name = f"g{g}_p{pair}_fold"
            if self.saturates:
                thresholds = Signal(words.threshold_layout, name=f"g{g}_p{pair}_thresholds",
                                    reset_less=True, attrs=KEEP)
                m.d.sync += thresholds.eq(words.threshold_fields)
                line_bits = slice(g * G + 2 * pair, g * G + 2 * pair + 2)
                result, pair_tests = self._fold_by_engines(
                    m, name, Mux(from_last, last, chosen), addends.votes[line_bits],
                    addends.codes[line_bits], thresholds)
                registered = {}
                for field in ("sign", "tie", "positive", "negative"):
                    registered[field] = Signal.like(pair_tests[field],
                                                    name=f"g{g}_p{pair}_{field}",
                                                    reset_less=True)
                    m.d.sync += registered[field].eq(pair_tests[field])
                group.engine_tests.append(registered)
                flag_tests.append(pair_tests)
            else:
                fold = m.submodules[name] = PairFold(
                    max_workers=self.max_workers, counter_bits=self.counter_bits,
                    cells=self.cells)
                lane = (g * G) // 2 + pair
                m.d.comb += [fold.addend_low.eq(addends.low[lane]),
                             fold.addend_sign.eq(addends.sign[lane]),
                             fold.addend_high.eq(addends.high[lane]),
                             fold.from_last.eq(from_last), fold.last.eq(last),
                             fold.chosen.eq(chosen)]
                result = fold.sum
            m.d.comb += rows.sum[g][pair].eq(result)

        # The lanes' flags are registered before they are ORed, off the fold's path. No
        # lane fills where the pairs fold; invalid codes were tested with the addends, a
        # cycle earlier, unless the engines test the codes they fold.
        if self.saturates:
            saturated_tests = _joined(flag_tests, "saturated")
            invalid_codes = _joined(flag_tests, "invalid")
        else:
            saturated_tests, invalid_codes = Const(0, 1), addends.invalid[g]
        saturated = Signal(len(saturated_tests), name=f"g{g}_saturated", reset_less=True)
        invalid = Signal(len(invalid_codes), name=f"g{g}_invalid", reset_less=True)
        m.d.sync += [saturated.eq(saturated_tests), invalid.eq(invalid_codes)]
        group.flags = Signal(2, name=f"g{g}_flags")  # saturated, invalid
        m.d.sync += group.flags.eq(Cat(saturated.any(), invalid.any()))

    def _compare(self, m, group, words, rows):
        """The readout's comparisons with the majority and the gate, at
        :data:`~.schedule.COMPARE_STAGE`, on the registered sum (``rows.new``): each pair's
        :class:`~.pair_fold.PairCompare`, with its own copy of the thresholds, so that only
        the pair's own nets pull its gates. A word that is not a write adds 0, so for a
        readout the sum is the row it read. Where the engines fold, their tests, registered,
        stand in. Sets ``group.row`` (the group's sums) and ``group.tests``."""
        g, G = group.index, self.group_lanes
        group.row = Value.cast(rows.new[g])
        if self.saturates:
            group.tests = group.engine_tests
            return
        group.tests = []
        for pair in range(G // 2):
            thresholds = Signal(words.threshold_layout, name=f"g{g}_p{pair}_thresholds",
                                reset_less=True, attrs=KEEP)
            m.d.sync += thresholds.eq(words.threshold_fields)
            compare = m.submodules[f"g{g}_p{pair}_compare"] = PairCompare(
                max_workers=self.max_workers, counter_bits=self.counter_bits, cells=self.cells)
            m.d.comb += [compare.row.eq(rows.new[g][pair]), compare.thresholds.eq(thresholds)]
            group.tests.append({"sign": compare.sign, "tie": compare.tie,
                                "positive": compare.positive, "negative": compare.negative})

    def _readout(self, m, group, words):
        """The readout, at :data:`~.schedule.PUSH_STAGE`: the beat's line of the group's
        kept row. Sets ``group.line``.

        The comparisons with the majority and the gate (:meth:`_compare`) are kept with the
        sum they compared; the next cycle only chooses the beat's line among the kept bits,
        by a code registered a cycle ahead. The lines that join two comparisons (not a tie,
        the gated codes) are formed there, off the comparisons' cycle.

        Each line bit chooses among its own distinct kept bits (a G-Ternary sum's bits are
        counter bits of the same row, so two readouts' lines often read one bit): eight for
        an even line bit, ten for an odd one at 16 workers. The choice is by a code, the
        index of the bit the readout and beat ask for, which arrives decoded in the fold word
        (one code a list of bits) and is registered per SELECT_BITS line bits and per list
        (kept, or synthesis would merge the copies: one select reaching a whole group's lines
        cost the most on its first hop). Decoded in each group, the codes took 78 LUT4s a
        tile, five levels deep. A zero answer is the ring's to give (its entries keep
        ``quiet``)."""
        g, G, CW, tests = group.index, self.group_lanes, self.counter_bits, group.tests
        readout = Signal(words.readout_layout, name=f"g{g}_readout_word", reset_less=True,
                         attrs=KEEP)
        m.d.sync += readout.eq(words.readout_fields)
        kept = Signal(G * CW, name=f"g{g}_kept_row", reset_less=True)
        kept_sign = Signal(G, name=f"g{g}_kept_sign", reset_less=True)
        kept_tie = Signal(G, name=f"g{g}_kept_tie", reset_less=True)
        kept_plus = Signal(G // 2, name=f"g{g}_kept_plus", reset_less=True)
        kept_minus = Signal(G // 2, name=f"g{g}_kept_minus", reset_less=True)
        with m.If(readout.capture):
            m.d.sync += [kept.eq(group.row), kept_sign.eq(_joined(tests, "sign")),
                         kept_tie.eq(_joined(tests, "tie")),
                         kept_plus.eq(_joined(tests, "positive")),
                         kept_minus.eq(_joined(tests, "negative"))]
        lines = group_lines(kept, kept_sign, kept_tie, kept_plus, kept_minus, counter_bits=CW)
        keys, shared_bits = code_keys(CW, lines, lanes=G)
        assert keys == code_keys(CW)[0], "a group's line bits choose as the fold word's codes say"
        code_of_key = dict(zip(keys, split_codes(readout.codes, keys)))
        readout_codes, readout_bits = {}, []
        for line_bit, shared in enumerate(shared_bits):
            copy, key = line_bit // SELECT_BITS, tuple(indices for indices, _ in shared)
            if (copy, key) not in readout_codes:
                number = sum(1 for c, _ in readout_codes if c == copy)
                readout_codes[copy, key] = code = Signal(
                    code_bits(len(key)), name=f"g{g}_code{copy}_{number}",
                    reset_less=True, attrs=KEEP)
                m.d.sync += code.eq(code_of_key[key])
            readout_bits.append(choose_by_code(
                m, code=readout_codes[copy, key], sources=[bit for _, bit in shared],
                cells=self.cells, name=f"g{g}_line_{line_bit}"))
        group.line = Cat(readout_bits)

    def _flags(self, m, groups, live):
        """The tile's flags at :data:`~.schedule.FLAGS_STAGE`: the groups' registered flags,
        ORed, once the words formed before a reset have left."""
        m.d.sync += [self.saturated.eq(live & Cat(group.flags[0] for group in groups).any()),
                     self.invalid.eq(live & Cat(group.flags[1] for group in groups).any())]

    def _buffers(self, m, groups, words, line, live):
        """The tile's slices of the response and memory-request buffers, pushed at
        :data:`~.schedule.PUSH_STAGE`, and the slices at their heads on the outputs.

        Each response entry keeps whether it is a memory read's and whether it is a zero
        line, so the choice of the head's line is made here (a LUT4 a bit), not by a net
        reaching every tile. Every group's slice of the entry holds its own copy of the two
        flags: the group's line bits choose by flags read beside them, not by one LUT RAM
        output reaching the whole tile's output choices."""
        G = self.group_lanes
        entry_flags = Cat(words.pushes.memory_read, words.late_at_push.quiet)
        response_heads = _ring(m, "responses", depth=self.buffer_depth,
                               push=live & words.pushes.push_response, pop=self.pop_response,
                               parts=_response_parts([group.line for group in groups],
                                                     entry_flags, G))
        memory_heads = _ring(m, "requests", depth=self.buffer_depth,
                             push=live & words.pushes.push_memory, pop=self.pop_memory,
                             parts=[line[PUSH_STAGE][group.index * G:(group.index + 1) * G]
                                    for group in groups])
        head_lines = []
        for g, (group_line, flags) in enumerate(_response_slices(response_heads, G)):
            head_lines.append(Mux(flags.from_memory, self.i_mem_data[g * G:(g + 1) * G],
                                  Mux(flags.quiet, 0, group_line)))
        m.d.comb += [
            self.o_response.eq(Cat(head_lines)),
            self.o_memory.eq(Cat(memory_heads)),
        ]

    @property
    def saturates(self):
        """Whether a lane can fill (counters narrower than the default): then the engines
        fold, with their saturation tests, instead of one adder per pair of line bits."""
        return lanes_can_fill(max_workers=self.max_workers, counter_bits=self.counter_bits)

    def _fold_adds(self, m, line, fold_word):
        """The registered addend bits of every pair of line bits
        (:func:`~.pair_fold.pair_addend`), ``low``, ``sign`` and ``high``, from the line and
        the word's route, a cycle before the fold; and ``invalid``, a list with each group of
        lanes' tests of its G-Ternary codes, a bit for every two pairs of line bits: one of
        them is invalid.

        A pair's two line bits are, in a G-Binary window, the votes of two lanes, whose
        counters sit side by side in the pair's ``2C`` row bits (low and high); in a
        G-Ternary window, the code of one lane, whose sum fills the row bits as a ``2C``-bit
        two's complement number: ``01`` adds 1, ``11`` adds -1 (every bit set), ``10``
        (invalid) and ``00`` add 0. A word that does not fold its route adds 0.
        """
        pairs = self.tile_lanes // 2
        adds = Signal(data.StructLayout({name: pairs for name in ("sign", "high")}),
                      name="adds", reset_less=True)
        # The low bit is the pair's first line bit whichever route folds, so its register
        # needs no gate: it is zeroed, where no route folds, by its synchronous reset.
        low = Signal(pairs, name="adds_low", reset_less=True)
        gbinary, gternary = fold_word.fold_gbinary, fold_word.fold_gternary
        with m.If(fold_word.fold_any):
            m.d.sync += low.eq(line[0::2])
        with m.Else():
            m.d.sync += low.eq(0)
        for t in range(pairs):
            first, second = line[2 * t], line[2 * t + 1]
            minus = gternary & first & second
            m.d.sync += [adds.sign[t].eq(minus), adds.high[t].eq((gbinary & second) | minus)]
        # Two pairs' codes are four line bits, a LUT4 that tests both; each such test is
        # zeroed, where the word folds no G-Ternary line, by its register's reset.
        invalid = []
        for g in range(self.tile_lanes // self.group_lanes):
            group_pairs = range(g * self.group_lanes // 2, (g + 1) * self.group_lanes // 2)
            tests = [Cat(line[2 * t:2 * t + 2] == INVALID_CODE
                         for t in group_pairs[k:k + 2]).any()
                     for k in range(0, len(group_pairs), 2)]
            codes = Signal(len(tests), name=f"g{g}_invalid_in_line", reset_less=True)
            with m.If(gternary):
                m.d.sync += codes.eq(Cat(tests))
            with m.Else():
                m.d.sync += codes.eq(0)
            invalid.append(codes)
        return SimpleNamespace(low=low, sign=adds.sign, high=adds.high, invalid=invalid)

    def _fold_by_engines(self, m, name, row, votes, codes, thresholds):
        """One pair's fold where a lane can fill: every route's engine
        (:data:`~.engines.ENGINES`, named ``<name>_<role>``) on the ``row``, with the pair's
        ``votes`` and ``codes``; returns the folded row and the pair's tests. Each engine
        changes the row only when its route folds, so the result is the row with both
        engines' changes (a G-Ternary row's upper bits stay 0); the engines hold a lane that
        is full, and their comparisons read the row as it came in, a readout's row."""
        CW = self.counter_bits
        built = {}
        for route, engine in ENGINES.items():
            # Each worker's vote or code folds once per slot (the contribution bitmap), so
            # an engine leaves out the saturation test of a state that cannot fill.
            built[route] = block = engine.component(
                line_bits=2, max_workers=self.max_workers, counter_bits=CW,
                max_contributions=self.max_workers)
            m.submodules[f"{name}_{engine.role}"] = block
            m.d.comb += [block.i.valid.eq(1), block.o.ready.eq(1)]
        signs, terns = built[Route.GBINARY], built[Route.GTERNARY]
        m.d.comb += [
            signs.i.payload.counts.eq(row),
            signs.i.payload.votes.eq(votes),
            signs.i.payload.fold.eq(-1),
            signs.i.payload.majority.eq(thresholds.majority),
            terns.i.payload.sums.eq(sums_of_row(row, CW)),
            terns.i.payload.codes.eq(codes),
            terns.i.payload.fold.eq(-1),
            terns.i.payload.gate_less_one.eq(thresholds.gate_less_one),
        ]
        counts = signs.o.payload.counts.as_value()
        sums = terns.o.payload.sums.as_value()
        result = counts ^ row_of_sums(sums ^ row[:CW + 1], CW)
        tests = {"sign": signs.o.payload.sign, "tie": signs.o.payload.tie,
                 "positive": terns.o.payload.positive, "negative": terns.o.payload.negative,
                 "saturated": Cat(signs.o.payload.saturated, terns.o.payload.saturated),
                 "invalid": terns.o.payload.invalid}
        return result, tests


def _response_part_layout(group_lanes, groups):
    """A response ring part: the slices of ``groups`` (one or two) groups, each a group's
    line beside its own copy of the entry's flags, laid out ``line, flags, flags, line`` so
    that with groups of eight lanes the four flag bits fill one LUT RAM of four bits between
    the two lines (five LUT RAMs a part, one more a tile of 32 lanes than one copy of the
    flags)."""
    flags = data.StructLayout({"from_memory": 1, "quiet": 1})
    fields = {"line_0": group_lanes, "flags_0": flags}
    if groups == 2:
        fields.update(flags_1=flags, line_1=group_lanes)
    return data.StructLayout(fields)


def _response_parts(group_lines, flags, group_lanes):
    """The response ring's parts, two groups' slices a part (the last alone when the
    groups are odd in number), each laid out by :func:`_response_part_layout`."""
    parts = []
    for first in range(0, len(group_lines), 2):
        pair = group_lines[first:first + 2]
        values = {}
        for index, line in enumerate(pair):
            values.update({f"line_{index}": line, f"flags_{index}": flags})
        layout = _response_part_layout(group_lanes, len(pair))
        parts.append(Cat(*(values[name] for name, _ in layout)))
    return parts


def _response_slices(heads, group_lanes):
    """``(group line, flags)`` for each group, from the heads of the parts that
    :func:`_response_parts` pushed."""
    for head in heads:
        groups = len(head) // (group_lanes + 2)
        part = data.View(_response_part_layout(group_lanes, groups), head)
        for index in range(groups):
            yield part[f"line_{index}"], part[f"flags_{index}"]


def _ring(m, name, *, depth, push, parts, pop):
    """A ring of ``depth`` entries in LUT RAM, each entry the values ``parts`` pushed
    together; returns each part's entry at the head.

    The control plane tells every tile to pop in the cycle its response or memory request
    leaves, and that decision reaches the tile through a register (``popped``): the head
    is the entry after the read pointer while a pop is pending, so no pointer logic waits
    on a net that crosses the row. The control plane never lets a ring overflow (credits)
    or pops an empty one, and keeps the levels.

    Each part is its own LUT RAM, written beside the lanes whose slice it holds. The parts
    read at one head address: copies of it a part, alike, are merged back into one by
    synthesis, and copies that it keeps (each part with its own pop register) took 582
    LUT4 in the 512-bit top (docs/fpga.md, "Lane tile"). ``popped`` stays one register a
    ring: the pop crosses the die to it from the output port.
    """
    def after(pointer):
        return Mux(pointer == depth - 1, 0, pointer + 1)

    # Every tile's pointers have the same inputs: kept, so that synthesis leaves each tile
    # its own rather than one set driving every tile's ring.
    produce = Signal(range(depth), name=f"{name}_produce", attrs=KEEP)
    consume = Signal(range(depth), name=f"{name}_consume", attrs=KEEP)
    consume_next = Signal(range(depth), name=f"{name}_consume_next", init=1 % depth, attrs=KEEP)
    popped = Signal(name=f"{name}_popped", attrs=KEEP)
    head = Signal(range(depth), name=f"{name}_head", attrs=KEEP)
    m.d.comb += head.eq(Mux(popped, consume_next, consume))
    m.d.sync += [popped.eq(pop), consume.eq(head), consume_next.eq(after(head))]
    with m.If(push):
        m.d.sync += produce.eq(after(produce))
    entries = []
    for index, part in enumerate(parts):
        part = Value.cast(part)
        storage = memory.Memory(shape=unsigned(len(part)), depth=depth, init=[])
        m.submodules[f"{name}_{index}"] = storage
        write, read = storage.write_port(), storage.read_port(domain="comb")
        m.d.comb += [write.addr.eq(produce), write.data.eq(part), write.en.eq(push),
                     read.addr.eq(head)]
        entries.append(read.data)
    return entries


def _delay(m, name, value, layout, stage, to_stage, *, keep_last=False):
    """``value`` (of ``layout``), in its stage ``stage``, delayed to ``to_stage`` by a
    register a stage, each named ``<name>_<the stage it holds>``; the last one kept through
    synthesis if ``keep_last``."""
    for later in range(stage + 1, to_stage + 1):
        delayed = Signal(layout, name=f"{name}_{later}", reset_less=True,
                         attrs=KEEP if keep_last and later == to_stage else None)
        m.d.sync += delayed.eq(value)
        value = delayed
    return value


def _part(word, *names):
    """``(layout, value)``: the struct layout of the fields ``names`` of ``word`` (a struct
    view), in that order, and those fields' bits as one value of that layout."""
    layout = data.StructLayout({name: word.shape()[name].shape for name in names})
    return layout, Cat(Value.cast(word[name]) for name in names)


def _joined(tests, field):
    """One field of every pair's tests (:meth:`LaneTile._fold`), joined in line order."""
    return Cat(pair_tests[field] for pair_tests in tests)


def _check_even(name, value):
    value = check_int(name, value, low=2)
    if value % 2:
        raise ValueError(f"{name} must be an even number, not {value!r}")
    return value
