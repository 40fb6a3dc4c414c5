"""The pipeline between the control plane and the lane tiles, declared once (docs/design.md,
"One word per clock").

A word enters the pipeline every clock. Its stages are numbered in cycles after the
request's transfer on ``i_req`` (cycle 0). The control plane decides, stage by stage, what
every tile needs and sends it as four control words, each leaving as soon as it is known;
the tiles meet each word with the request's data line, delayed to the stage the word
arrives in. The control plane (:mod:`.control_plane`), the tiles (:mod:`.lane_tile`), the
manifest and the design document's pipeline table (:func:`pipeline_table`) all take their
stage numbers and the words' layouts from here.
"""

import dataclasses

from amaranth.hdl import Mux, Shape, unsigned
from amaranth.lib import data, enum

from ..golden.formats import Readout
from .lane_logic import widen
from .sign_count import majority_layout
from .tile_row import readout_code_bits

__all__ = ["CLAIM_STAGE", "WINDOW_STAGE", "WORD_STAGE", "STATUS_STAGE", "WRITE_BACK_STAGE",
           "BUFFER_STAGE", "READ_WORD_STAGE", "FORWARD_WORD_STAGE", "FOLD_WORD_STAGE",
           "FOLD_STAGE", "LATE_WORD_STAGE", "COMPARE_STAGE", "PUSH_STAGE", "RESPONSE_STAGE",
           "FLAGS_STAGE",
           "LATENCY", "Source", "FORWARD_DISTANCES", "BITMAP_DISTANCES", "WORD_HOPS", "Word",
           "WORDS",
           "read_word_layout", "forward_word_layout", "fold_word_layout", "late_word_layout",
           "low_threshold", "stages", "pipeline_rows", "pipeline_table"]

# ---------------------------------------------------------------- the control plane's stages
CLAIM_STAGE = 0       #: the request is taken; each window's claim of its address is registered
WINDOW_STAGE = 1      #: the window is chosen from the claims; its row is known
WORD_STAGE = 2        #: the word is formed; the rows of the writes in flight are compared
STATUS_STAGE = 3      #: the status is decided from the row's contribution bitmap
WRITE_BACK_STAGE = 4  #: the bitmap is written back; flags and counters count the word
BUFFER_STAGE = 7      #: the response's and memory request's narrow parts enter the buffers

# ---------------------------------------------------------------- the tiles' stages
READ_WORD_STAGE = 3     #: the read word is in the tile's register; the slot row is read
FORWARD_WORD_STAGE = 4  #: the forward word is in the tile's register
FOLD_WORD_STAGE = 5     #: the fold word is in the tile's register; the row is chosen
FOLD_STAGE = 6          #: the lane groups fold; the sum is written to the block RAM
LATE_WORD_STAGE = 6     #: the late word (what the status decides) is in the tile's register
COMPARE_STAGE = 7       #: the registered sum is compared with the majority and the gate
PUSH_STAGE = 8          #: the buffers take the tile's slices (the beat's line, chosen)
RESPONSE_STAGE = 9      #: the response is at the buffers' heads, on ``o_resp``
FLAGS_STAGE = 9         #: the fold's flags leave the tile (registered per lane, group, tile)

#: Cycles from a request's transfer to its first response beat when nothing stalls.
LATENCY = RESPONSE_STAGE

# The block RAM's row passes its output register (READ_WORD_STAGE + 2) and one fabric register
# before the fold, so no block RAM output sits on the fold's path.
assert READ_WORD_STAGE + 3 == FOLD_STAGE and FORWARD_WORD_STAGE + 2 == FOLD_STAGE
# The fold word chooses the row a cycle before the fold; the late word is the block RAM's
# write enable in the fold's cycle (the sum goes to the block RAM unregistered).
assert FOLD_WORD_STAGE + 1 == FOLD_STAGE == LATE_WORD_STAGE
# The comparisons read the registered sum, off the fold's carry chain.
assert COMPARE_STAGE == FOLD_STAGE + 1 and PUSH_STAGE == COMPARE_STAGE + 1
# The buffers' heads are registered: the control plane's entry goes in a cycle before the
# tiles' slices, and both answer the cycle after the tiles' push.
assert BUFFER_STAGE == PUSH_STAGE - 1 and RESPONSE_STAGE == PUSH_STAGE + 1
# A word's flags come back three registers after its fold (per lane, per group, per tile).
assert FLAGS_STAGE == FOLD_STAGE + 3


class Source(enum.Enum, shape=2):
    """Which result in flight a word's row is copied from, a cycle before the row is chosen.

    A word reads its row at :data:`READ_WORD_STAGE`, and the block RAM holds a fold's sum
    from the cycle after :data:`FOLD_STAGE`, so the sums of the writes one, two and three
    words ahead are still in flight. One word ahead is the fold loop's own choice
    (``from_last``); two and three ahead are copied into registers of their own, each
    zeroed unless this member names it, so that the row is chosen by an OR (the fold
    word's ``from_ram`` zeroes the block RAM's). A bit a member, so each copy's reset is one
    bit of the word.
    """
    NONE = 0
    TWO_AHEAD = 1
    THREE_AHEAD = 2


#: The results in flight that a word's row may be copied from, by distance in words, the
#: nearest first. One word ahead is the fold loop's own choice.
FORWARD_DISTANCES = {2: Source.TWO_AHEAD, 3: Source.THREE_AHEAD}
assert list(FORWARD_DISTANCES) == list(range(2, FOLD_STAGE - READ_WORD_STAGE + 1))
assert set(FORWARD_DISTANCES.values()) | {Source.NONE} == set(Source)

#: The contribution bitmaps' writes in flight at the status stage, by distance in words: a
#: word reads its bitmap at :data:`WINDOW_STAGE` (its block RAM's output registered once
#: more) and the bitmaps are written back at :data:`WRITE_BACK_STAGE`. They are the tiles'
#: distances too: what a word's bitmap does not yet show, its row does not either.
BITMAP_DISTANCES = tuple(range(1, WRITE_BACK_STAGE - WINDOW_STAGE + 1))
assert STATUS_STAGE == WINDOW_STAGE + 2
assert BITMAP_DISTANCES == tuple(range(1, FOLD_STAGE - READ_WORD_STAGE + 1))


def read_word_layout(rows):
    """What a tile needs first: the row its block RAM reads."""
    return data.StructLayout({"row": range(rows)})


def forward_word_layout():
    """Which sum in flight the row is copied from (:class:`Source`), if any."""
    # A plain field, not an enum view: Yosys does not see a register's keep through the
    # view's named alias, and would merge every group's copy.
    return data.StructLayout({"source": unsigned(Shape.cast(Source).width)})


def fold_word_layout(*, max_workers, counter_bits):
    """What a tile does with the row: choose it, fold, read out, buffer.

    The row is the previous word's sum (``from_last``), or else the OR of the block RAM's
    row (where ``from_ram``) and the copies the forward word kept, which are zero unless
    the nearest write in flight to the row is theirs; ``empty`` zeroes it all: the nearest
    write in flight emptied the slot (a READ_CLEAR, a row of the clearing sweep). A slot
    whose bitmap is empty has no row: the tiles never clear one, and the first write of a
    slot's lifetime folds onto zero (``from_ram`` is 0).

    Nothing else in it waits on the request's status (whether a write is accepted, a slot
    complete): a word folds as if its sum will be written back, and the late word
    (:func:`late_word_layout`) says a cycle later whether it is. The readout's
    thresholds arrive computed (``majority`` from NUM_WORKERS, ``gate_less_one`` from
    GATE), so no tile repeats that arithmetic; ``low_threshold`` is the one a pair of line
    bits compares its low ``C`` row bits with, chosen by the readout's route
    (:func:`low_threshold`). ``codes`` says which kept bit each line bit gives for the
    readout and beat the word answers (:func:`~.tile_row.readout_codes`), worked out once
    for every tile.
    """
    return data.StructLayout({
        "fold_gbinary": 1,    # add the line's votes (a write to a G-Binary window)
        "fold_gternary": 1,   # add the line's codes (a write to a G-Ternary window)
        "fold_any": 1,        # either: the addends' reset, sent so no tile ORs the two
        "from_last": 1,       # the previous word wrote this row: fold its sum
        "from_ram": 1,        # no write in flight has the row, and the slot is not empty
        "empty": 1,           # the previous word emptied the slot: fold an empty row
        "capture": 1,         # keep this word's readout (not a later beat)
        "codes": unsigned(readout_code_bits(counter_bits)),  # the beat's line, coded
        "majority": majority_layout(max_workers),
        "gate_less_one": unsigned(counter_bits),
        "low_threshold": unsigned(counter_bits),
        "push_response": 1,   # this word answers a beat
        "memory_read": 1,     # the answer is a memory read's: its line comes from the memory
        "push_memory": 1,     # this word is a memory request (its line goes downstream)
    })


def late_word_layout():
    """What the request's status decides, a cycle after the fold word: whether the tile's
    sum is written back, and whether the answer is a zero line."""
    return data.StructLayout({
        "write_row": 1,       # write the sum back (an accepted write)
        "quiet": 1,           # answer with a zero line (a refusal, a write's answer)
    })


def low_threshold(readout, majority, gate_less_one):
    """The fold word's ``low_threshold``: the threshold a pair of line bits compares its low
    ``C`` row bits with. The low G-Binary lane's counter is compared with ``N // 2``
    (``majority.above``) for a ``SIGN`` or ``TERNARY`` readout, the G-Ternary sum's low bits
    with ``gate_less_one`` for ``GATED``. A readout uses one route's comparisons, so one tree
    a pair serves both."""
    width = len(gate_less_one)
    return Mux(readout == Readout.GATED, gate_less_one, widen(majority.above, width)[:width])


#: Registers between a word leaving the control plane's logic and the tile's logic: its copy
#: per group of tiles, then the tile's own.
WORD_HOPS = 2


@dataclasses.dataclass(frozen=True)
class Word:
    """A control word: in the tile's own register at stage ``arrives``, so it leaves the
    control plane's logic (into its copies' registers) at ``sent``."""
    name: str
    arrives: int
    contents: str

    @property
    def sent(self):
        return self.arrives - WORD_HOPS


#: The four control words, in the order they leave the control plane.
WORDS = (
    Word("read_word", READ_WORD_STAGE, "the row"),
    Word("forward_word", FORWARD_WORD_STAGE, "which sum in flight to copy"),
    Word("fold_word", FOLD_WORD_STAGE, "what to do with the row, with the readout's line codes"),
    Word("late_word", LATE_WORD_STAGE, "what the status decides"),
)


def stages():
    """Every named stage, ``{name: cycle}``: what the manifest publishes."""
    return {
        "claim": CLAIM_STAGE, "window": WINDOW_STAGE, "word": WORD_STAGE,
        "status": STATUS_STAGE, "write_back": WRITE_BACK_STAGE, "buffer": BUFFER_STAGE,
        "read_word": READ_WORD_STAGE, "forward_word": FORWARD_WORD_STAGE,
        "fold_word": FOLD_WORD_STAGE, "fold": FOLD_STAGE, "late_word": LATE_WORD_STAGE,
        "compare": COMPARE_STAGE, "push": PUSH_STAGE, "response": RESPONSE_STAGE,
        "flags": FLAGS_STAGE,
    }


def pipeline_rows():
    """``[(cycle, control plane, tiles)]``: what happens in each cycle, the rows of the design
    document's pipeline table, from the stages above."""
    control = {
        CLAIM_STAGE: ["request taken; address compared with each window's bounds, each "
                      "window's claim registered"],
        WINDOW_STAGE: ["window chosen from the registered claims; bitmap read"],
        WORD_STAGE: ["word formed; rows of the writes in flight compared"],
        STATUS_STAGE: ["status from the bitmap (block RAM output register)"],
        WRITE_BACK_STAGE: ["bitmap written back; flags and counters; the response's status "
                           "formed from the tests' registered answers"],
        BUFFER_STAGE: ["response and memory request queued (a buffer with a registered head)"],
    }
    tiles = {
        CLAIM_STAGE: ["the data line is taken"],
        READ_WORD_STAGE: ["row address to the block RAM"],
        FORWARD_WORD_STAGE: ["the sums two and three words ahead copied, each zeroed unless "
                             "the row is its"],
        FOLD_WORD_STAGE: ["block RAM output register; the row chosen (an OR of the block "
                          "RAM's and the copies) into a fabric register; the addends worked "
                          "out"],
        FOLD_STAGE: ["the groups fold; the sum written to the block RAM and registered"],
        COMPARE_STAGE: ["the sum compared with the majority and the gate, and kept"],
        PUSH_STAGE: ["the beat's line chosen and queued"],
        RESPONSE_STAGE: ["response at `o_resp`"],
    }
    for word in WORDS:
        name = word.name.replace("_", " ")
        control.setdefault(word.sent, []).append(f"{name} sent ({word.contents})")
        tiles.setdefault(word.arrives, []).insert(0, f"{name} in the tile")
    return [(cycle, "; ".join(control.get(cycle, [])), "; ".join(tiles.get(cycle, [])))
            for cycle in range(CLAIM_STAGE, RESPONSE_STAGE + 1)]


def pipeline_table():
    """The design document's pipeline table, in Markdown."""
    lines = ["| cycle | control plane | tiles |", "|---|---|---|"]
    for row in pipeline_rows():
        lines.append("|" + "|".join(f" {cell} " if cell != "" else " " for cell in row) + "|")
    return "\n".join(lines) + "\n"
