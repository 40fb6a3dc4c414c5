"""A tile's row and what its readout reads of it (docs/design.md, "Inside a group of lanes").

A pair of line bits owns ``2C`` bits of its tile's row: two G-Binary counters side by side
(low, high), or one G-Ternary sum sign-extended over them. A group of lanes keeps the row it
folded and its comparisons, and each of its line bits chooses the bit the readout and beat
ask for among the kept bits it can give, by a code. The control plane decodes those codes
once for every tile (:func:`readout_codes`) and sends them in the fold word; the tiles read
them with the lists of bits they index (:func:`code_keys`), worked out here once for both.
"""

import functools

from amaranth.hdl import Cat, Const, Signal, Value
from amaranth.lib import data

from ..golden.formats import Readout, Route
from .engines import ENGINES
from .lane_logic import readout_terms, shared_bit_terms
from .layouts import count_layout, max_readout_lines, sum_layout, ternary_code
from .row_cells import code_bits

__all__ = ["pair_layout", "row_layout", "group_lines", "code_keys", "readout_code_bits",
           "readout_codes", "split_codes", "code_of", "most_readout_lines", "sums_of_row",
           "row_of_sums"]


def pair_layout(counter_bits):
    """A pair of line bits' part of the row: the low and the high G-Binary counter, or the
    G-Ternary sum in both, two's complement over ``2C`` bits (:func:`sums_of_row`)."""
    return data.StructLayout({"low": counter_bits, "high": counter_bits})


def row_layout(*, tile_lanes, group_lanes, counter_bits):
    """A tile's row: its groups of lanes, each an array of pairs (:func:`pair_layout`)."""
    return data.ArrayLayout(data.ArrayLayout(pair_layout(counter_bits), group_lanes // 2),
                            tile_lanes // group_lanes)


def group_lines(kept, kept_sign, kept_tie, kept_plus, kept_minus, *, counter_bits):
    """``{Readout: [line, ...]}`` of a group of lanes from its kept row and comparisons."""
    lanes, CW = len(kept_sign), counter_bits
    gated = Cat(ternary_code(kept_minus[t], kept_plus[t]) for t in range(lanes // 2))
    return {
        **ENGINES[Route.GBINARY].lines(kept_sign, ~kept_tie,
                                       data.View(count_layout(lanes, CW), kept),
                                       counter_bits=CW),
        **ENGINES[Route.GTERNARY].lines(gated,
                                        data.View(sum_layout(lanes, CW), sums_of_row(kept, CW)),
                                        counter_bits=CW),
    }


def _group_inputs(lanes, counter_bits):
    """Fresh signals in the shapes of a group's kept row and comparisons (the arguments of
    :func:`group_lines` but ``counter_bits``)."""
    return (Signal(lanes * counter_bits), Signal(lanes), Signal(lanes), Signal(lanes // 2),
            Signal(lanes // 2))


@functools.cache
def _sharing(counter_bits, lanes):
    """For each line bit of a group of ``lanes`` lanes, the lists of the indices of the
    readout's terms that read one kept bit (:func:`~.lane_logic.shared_bit_terms`), worked
    out once for each shape on fresh signals: every group's lines are built alike."""
    inputs = _group_inputs(lanes, counter_bits)
    terms = readout_terms(Signal(Readout), Signal(1),
                          group_lines(*inputs, counter_bits=counter_bits))
    return tuple(tuple(indices for indices, _ in bit) for bit in shared_bit_terms(terms, inputs))


def _readout_terms(readout, beat, *, counter_bits, lines=None, lanes=2):
    """The readout's terms (:func:`~.lane_logic.readout_terms`) over a group's lines (of
    ``lanes`` lanes), and the distinct lists of term indices its line bits choose among, in
    the order they first appear (:func:`_sharing`): ``(terms, shared, keys)``. A group of
    two lanes stands for any (its lines' pattern repeats every two lanes) where ``lines``
    is not given."""
    if lines is None:
        lines = group_lines(*_group_inputs(lanes, counter_bits), counter_bits=counter_bits)
    terms = readout_terms(readout, beat, lines)
    shared = [[(indices, Value.cast(terms[indices[0]][1])[bit]) for indices in groups]
              for bit, groups in enumerate(_sharing(counter_bits, lanes))]
    keys = []
    for bit in shared:
        key = tuple(indices for indices, _ in bit)
        if key not in keys:
            keys.append(key)
    return terms, shared, keys


def code_keys(counter_bits, lines=None, lanes=2):
    """The distinct lists of term indices the line bits of a group (``lines`` of ``lanes``
    lanes, or any group) choose among (:func:`_readout_terms`); the line bits, each a list
    of its terms' indices and its kept bit."""
    _, shared, keys = _readout_terms(Signal(Readout), Signal(1), counter_bits=counter_bits,
                                     lines=lines, lanes=lanes)
    return keys, shared


def readout_code_bits(counter_bits):
    """Bits of :func:`readout_codes` at ``counter_bits``."""
    keys, _ = code_keys(counter_bits)
    return sum(code_bits(len(key)) for key in keys)


def readout_codes(readout, beat, *, counter_bits):
    """For each distinct list of kept bits a line bit chooses among (two at any counter
    width: an even and an odd line bit's), the position of the bit that ``readout``'s line
    ``beat`` gives, one code after the other; 0 where none does (a zero line). The control
    plane sends them, so no tile repeats the decoding."""
    terms, _, keys = _readout_terms(readout, beat, counter_bits=counter_bits)
    return Cat(code_of(terms, key, code_bits(len(key))) for key in keys)


def split_codes(codes, keys):
    """The codes of ``keys``, in order, from their concatenation ``codes``."""
    parts, low = [], 0
    for key in keys:
        parts.append(codes[low:low + code_bits(len(key))])
        low += code_bits(len(key))
    return parts


def code_of(terms, key, width):
    """The code of a line bit whose distinct bits ``key`` lists (the indices of the terms
    that read each, :func:`~.lane_logic.shared_bit_terms`): the position of the bit whose
    term's select (one-hot, from ``terms``) is set; 0 where none is."""
    return Cat(Cat(terms[index][0] for position, indices in enumerate(key)
                   if position >> bit & 1 for index in indices).any()
               for bit in range(width))


def most_readout_lines(counter_bits):
    """The longest readout of either route, in lines: how many lines a tile keeps."""
    return max(max_readout_lines(route, counter_bits=counter_bits) for route in Route)


def sums_of_row(row, counter_bits):
    """The G-Ternary sums in a row slice: lane ``t`` at bits ``[2t*C, 2t*C + C + 1)``.

    A sum sits where the G-Binary counters of its two line bits do, so a line bit's data,
    its lane's state and its readout bits share one part of the tile whichever the route.
    """
    C = counter_bits
    return Cat(row[2 * C * t:2 * C * t + C + 1] for t in range(len(row) // (2 * C)))


def row_of_sums(sums, counter_bits):
    """The row slice holding ``sums`` (the inverse of :func:`sums_of_row`, zero elsewhere)."""
    C = counter_bits
    return Cat(Cat(sums[t * (C + 1):(t + 1) * (C + 1)], Const(0, C - 1))
               for t in range(len(sums) // (C + 1)))
