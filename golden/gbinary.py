"""G-Binary: a sign bit per element, majority vote by per-lane counts (docs/design.md, "G-Binary").

A written line holds ``line_bits`` lanes; bit 1 means the element is negative. The device
keeps per lane a saturating count ``n`` of ones; with ``N`` contributions the majority is
-1 when ``2n > N``, +1 when ``2n < N`` and 0 on a tie.

The counters are computed bit-sliced, as bit-planes of ``uint64`` words (plane ``k`` holds
bit ``k`` of 64 counters a word): the workers' lines go through carry-save adders, 64 lanes
an instruction, and saturation and the majority compare work on the planes too. The planes
are the ``COUNTS`` readout (:func:`aggregate_planes`, :func:`readout_planes`); only the
functions that return a byte per lane (:func:`aggregate`, :func:`count_bits`) unpack them.

The adders run over chunks of about :data:`_CHUNK_WORDS` words of each worker, with every
intermediate row written into scratch rows allocated once per call: NumPy's cost per
operation is then the arithmetic on data in the L2 cache, not fresh memory for each result.
"""

import collections

import numpy as np

from . import lines as _lines
from .validate import check_array, check_grad, check_int
from .formats import (COUNTER_BITS_LIMIT, MAX_WORKERS_LIMIT, Readout, Route, check_counter_bits, check_max_workers,
                      check_readout, check_readout_lines, count_limit)

__all__ = ["encode", "count_bits", "aggregate", "aggregate_planes", "majority", "readout",
           "readout_planes", "parse_readout", "decode"]

# Words of each worker folded at a time: a chunk's rows, scratch rows and planes stay in the
# L2 cache between operations, and each operation is long enough that the cost of the call
# is small beside it (16K words measured faster than 4K and 8K, and no slower than 32K).
_CHUNK_WORDS = 1 << 14
_ONES = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


# Elements encoded at a time (a multiple of 8, so every chunk packs into whole bytes).
_ENCODE_CHUNK = 1 << 19


def encode(grad, *, line_bits=512):
    """Pack the signs of a gradient into G-Binary lines.

    Bit ``j`` is 1 when element ``j`` is **< 0**; ``+0.0`` and ``-0.0`` both encode as 0,
    ``-inf`` as 1 and ``+inf`` as 0. The tensor is flattened in C order; padding lanes of the
    last line are 0 (the neutral code).

    Returns ``uint8`` lines of shape ``(ceil(size / line_bits), line_bits // 8)``.

    Raises ``TypeError`` for a non-floating-point array and ``ValueError`` for NaN or an
    unsupported ``line_bits``.

    Built as a loop over chunks: each chunk is read from memory once, checked for NaN and
    compared into a reused mask while it is in cache, and packed. That measured about 1.5
    times as fast as checking, comparing and packing the whole tensor in turn, which reads
    it twice and writes and reads a mask as large as the data.
    """
    nbytes = _lines.line_bytes(line_bits)
    flat = check_grad(grad, nan_check=False)
    n_lines = -(-flat.size // line_bits)
    out = np.empty(n_lines * nbytes, dtype=np.uint8)
    out[flat.size // 8:] = 0  # the padding lanes (packbits pads the partial byte with zeros)
    mask = np.empty(min(_ENCODE_CHUNK, flat.size), dtype=bool)
    for start in range(0, flat.size, _ENCODE_CHUNK):
        chunk = flat[start:start + _ENCODE_CHUNK]
        if np.isnan(chunk.min()):  # min() propagates NaN
            check_grad(flat)  # raises, naming the first NaN
        negative = np.less(chunk, 0, out=mask[:chunk.size])
        packed = np.packbits(negative, bitorder="little")
        out[start // 8:start // 8 + packed.size] = packed
    return out.reshape(n_lines, nbytes)


def _count_rows(rows, planes, spare, *, writable=False):
    """Add ``rows`` up bit by bit: bit ``k`` of every position's count goes to ``planes[k]``.

    ``rows`` is a sequence of equally shaped ``uint64`` arrays (64 counters a word);
    ``planes`` holds at least ``len(rows).bit_length()`` writable arrays of that shape, all
    overwritten (least significant first); ``spare`` is a list of free scratch arrays of that
    shape, borrowed and given back (``len(rows) + 2`` are always enough). The rows are only
    read unless ``writable``, when they are scratch as well and get overwritten.

    A carry-save tree: a full adder takes three rows of one weight and gives one sum row of
    that weight and one carry row of the next, in five bitwise operations over whole words;
    the last two rows of a weight meet in a half adder, whose sum is the plane. Results go
    into scratch arrays, the adder's own inputs where they are scratch, and a weight's last
    sum and a lone carry straight into their planes: no array is allocated and no row copied.
    """
    column = collections.deque((row, writable) for row in rows)
    for k, plane in enumerate(planes):
        if len(column) == 1 and column[0][0] is plane:  # a lone carry, already in place
            column.clear()
            continue
        carries = []
        while len(column) >= 3:
            (a, a_free), (b, b_free), (c, c_free) = column.popleft(), column.popleft(), column.popleft()
            last = not column
            partial = spare.pop()
            np.bitwise_xor(a, b, partial)
            carry = _carry_row(k, planes, last and not carries, a, a_free, spare)
            np.bitwise_and(a, b, carry)
            both = b if b_free else spare.pop()
            np.bitwise_and(partial, c, both)
            np.bitwise_or(carry, both, carry)  # majority(a, b, c)
            spare.append(both)
            total = plane if last else c if c_free else partial
            np.bitwise_xor(partial, c, total)
            if total is not partial:
                spare.append(partial)
            if c_free and total is not c:
                spare.append(c)
            if not last:
                column.append((total, True))
            carries.append((carry, True))
            if last:
                break
        else:
            if len(column) == 2:
                (a, a_free), (b, b_free) = column
                np.bitwise_xor(a, b, plane)
                carry = _carry_row(k, planes, not carries, a, a_free, spare)
                np.bitwise_and(a, b, carry)
                if b_free:
                    spare.append(b)
                carries.append((carry, True))
            elif column:
                (a, a_free), = column
                np.copyto(plane, a)
                if a_free:
                    spare.append(a)
            else:
                plane[...] = 0
        column = collections.deque(carries)


def _carry_row(k, planes, only_carry, a, a_free, spare):
    """Where an adder of weight ``2**k`` puts its carry: straight into the next plane when it
    is that weight's only row, else over its input ``a`` if that is scratch, else a spare."""
    if only_carry and k + 1 < len(planes):
        if a_free:
            spare.append(a)  # read before the carry is written, and free after
        return planes[k + 1]
    return a if a_free else spare.pop()


def _greater(planes, value):
    """Mask of the unsigned numbers held as ``planes`` that exceed the constant ``value``.

    ``number > value`` is the carry out of ``number + (2**n - 1 - value)`` over the ``n``
    planes: with a constant addend each carry is one operation, ``plane | carry`` where the
    addend's bit is 1 and ``plane & carry`` where it is 0.
    """
    n = len(planes)
    if value < 0 or value >> n:  # below every number, or beyond every number
        return np.full_like(planes[0], _ONES if value < 0 else 0)
    addend = (1 << n) - 1 - value
    carry = None  # None: no carry anywhere yet
    for k, plane in enumerate(planes):
        if addend >> k & 1:
            carry = plane.copy() if carry is None else np.bitwise_or(carry, plane, out=carry)
        elif carry is not None:
            carry &= plane
    return carry if carry is not None else np.zeros_like(planes[0])


def _equal(planes, value):
    """Mask of the unsigned numbers held as ``planes`` that equal the constant ``value``."""
    if value < 0 or value >> len(planes):
        return np.zeros_like(planes[0])
    equal = np.full_like(planes[0], _ONES)
    for k, plane in enumerate(planes):
        if value >> k & 1:
            equal &= plane
        else:
            equal &= ~plane
    return equal


def _swap_lines(src, dst):
    """Copy ``(a, b, words)`` lines into ``(b, a, words)``: ``dst[j, i] = src[i, j]``.

    Each line is moved as one opaque item, so the copy runs line by line rather than word by
    word (about twice as fast as a plain transposed copy of the words).
    """
    item = np.dtype((np.void, src.shape[-1] * src.itemsize))
    dst.view(item).reshape(dst.shape[:2])[...] = src.view(item).reshape(src.shape[:2]).T
    return dst


def _line_chunks(n_lines, words_per_line):
    """Slices of whole lines, about :data:`_CHUNK_WORDS` words of each worker at a time."""
    step = max(1, _CHUNK_WORDS // words_per_line)
    return [slice(start, min(start + step, n_lines)) for start in range(0, n_lines, step)]


def _chunk_rows(words, chunk):
    """Every worker's words of a chunk of lines, as ``(workers, n_words)`` (a view)."""
    rows = words[:, chunk]
    return rows.reshape(rows.shape[0], -1)


def _scratch(n_rows, chunks, words_per_line):
    """Scratch rows for the largest chunk: ``(n_rows, words)`` ``uint64``, sliced per chunk."""
    longest = max((chunk.stop - chunk.start for chunk in chunks), default=0)
    return np.empty((n_rows, longest * words_per_line), dtype=np.uint64)


def _word_rows(lines):
    """``(workers, n_lines, line_bytes)`` lines as ``(workers, n_lines, words)`` ``uint64``.

    Every operation on the words is bitwise and the same at every bit, so the order of the
    bytes in a word does not matter: a plane's bytes land where its lanes' bytes were.
    """
    workers, n_lines, nbytes = lines.shape
    return lines.reshape(workers, n_lines * nbytes).view(np.uint64).reshape(workers, n_lines, nbytes // 8)


def _fold(rows, planes, spare, counter_bits):
    """Count ``rows`` (one per worker) into the ``counter_bits`` arrays ``planes``, saturating.

    Counts above ``2**counter_bits - 1`` read all ones: a bit of any plane above the
    counter's is ORed into every counter plane. ``spare`` is scratch for :func:`_count_rows`
    (``len(rows) + 2`` arrays). Returns the mask of the counters that saturated (one of the
    spare arrays), or None when no count can.
    """
    width = max(1, len(rows).bit_length())
    if width <= counter_bits:
        _count_rows(rows, planes[:width], spare)
        for plane in planes[width:]:
            plane[...] = 0
        return None
    high = [spare.pop() for _ in range(width - counter_bits)]
    _count_rows(rows, list(planes) + high, spare)
    over = high[0]
    for plane in high[1:]:
        over |= plane
    for plane in planes:
        plane |= over
    return over


def count_bits(words):
    """Per bit position, how many of the ``workers`` rows of ``words`` have it set.

    ``words`` is ``(workers, n_words)`` ``uint64`` with at most 255 rows; returns ``uint8``
    counts, 64 per word, in lane (bit) order: counted bit-sliced (:func:`_count_rows`) a
    chunk at a time, so the planes stay in cache, and unpacked to a byte per position.
    """
    workers, n_words = words.shape
    if workers > 255:
        raise ValueError(f"words must have at most 255 rows (counts fit a byte), not {workers}")
    total = np.zeros(n_words * 64, dtype=np.uint8)
    if workers:
        width = workers.bit_length()
        size = min(n_words, _CHUNK_WORDS)
        scratch = np.empty((workers + 2 + width, size), dtype=np.uint64)
        for start in range(0, n_words, _CHUNK_WORDS):
            stop = min(start + _CHUNK_WORDS, n_words)
            planes = scratch[:width, :stop - start]
            _count_rows(list(words[:, start:stop]), list(planes),
                        [row[:stop - start] for row in scratch[width:]])
            _lines.bit_planes_to_bytes(planes.view(np.uint8).reshape(width, -1),
                                       total[start * 64:stop * 64])
    return total


def _check_workers(lines, max_workers, counter_bits):
    lines, line_bits = _lines.check_lines(lines, ndim=3)
    check_max_workers(max_workers)
    counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
    if lines.shape[0] > 255:
        raise ValueError(f"lines must hold at most 255 workers' contributions, not {lines.shape[0]}")
    return lines, line_bits, counter_bits


def aggregate(lines, *, max_workers, counter_bits=None, return_saturated=False):
    """Count the negative votes per lane over workers, saturating.

    ``lines`` is ``(workers, n_lines, line_bytes)`` ``uint8``: worker ``w``'s G-Binary lines.
    Counters are ``counter_bits`` wide (default ``ceil(log2(max_workers + 1))``) and saturate
    at ``2**counter_bits - 1``; with no more workers than that they never saturate. Since
    every increment is non-negative, saturating per step equals clipping the total.

    Returns ``uint8`` counts ``(n_lines, line_bits)``; with ``return_saturated=True`` also a
    boolean mask of the lanes that saturated. These are the counters of
    :func:`aggregate_planes`, unpacked to a byte per lane.
    """
    lines, line_bits, counter_bits = _check_workers(lines, max_workers, counter_bits)
    workers, n_lines, nbytes = lines.shape
    counts = np.zeros((n_lines, line_bits), dtype=np.uint8)
    saturated = np.zeros((n_lines, line_bits), dtype=bool) if return_saturated else None
    if not workers:
        return (counts, saturated) if return_saturated else counts
    words = _word_rows(lines)
    # Only the planes a count can reach are counted and unpacked; the higher ones are zero.
    used = min(counter_bits, workers.bit_length())
    chunks = _line_chunks(n_lines, nbytes // 8)
    scratch = _scratch(used + workers + 2 + workers.bit_length(), chunks, nbytes // 8)
    for chunk in chunks:
        rows = _chunk_rows(words, chunk)
        planes = scratch[:used, :rows.shape[1]]
        over = _fold(list(rows), list(planes), list(scratch[used:, :rows.shape[1]]), used)
        _lines.bit_planes_to_bytes(planes.view(np.uint8).reshape(used, -1), counts[chunk].reshape(-1))
        if saturated is not None and over is not None:
            saturated[chunk] = np.unpackbits(over.view(np.uint8), axis=-1,
                                             bitorder="little").view(bool).reshape(-1, line_bits)
    return (counts, saturated) if return_saturated else counts


def aggregate_planes(lines, *, max_workers, counter_bits=None, return_saturated=False):
    """The counters of :func:`aggregate` as the device keeps them: bit-planes, never unpacked.

    Same arguments and rules as :func:`aggregate`. Returns ``uint8``
    ``(n_lines, counter_bits, line_bytes)``: entry ``[j, k]`` is a line holding bit ``k`` of
    every counter of line ``j``, lane ``i`` at bit ``i``. That is each slot's ``COUNTS``
    readout, so ``.reshape(-1, line_bytes)`` gives the readout lines, and
    :func:`readout_planes` derives the other readouts from it. With
    ``return_saturated=True`` also the boolean mask ``(n_lines, line_bits)`` of the lanes
    that saturated, as :func:`aggregate` gives it.
    """
    lines, line_bits, counter_bits = _check_workers(lines, max_workers, counter_bits)
    workers, n_lines, nbytes = lines.shape
    out = np.zeros((n_lines, counter_bits, nbytes), dtype=np.uint8)
    saturated = np.zeros((n_lines, line_bits), dtype=bool) if return_saturated else None
    if workers:
        words, lines_out = _word_rows(lines), out.view(np.uint64)
        # Planes no count reaches stay as the zeros they start as.
        used = min(counter_bits, workers.bit_length())
        chunks = _line_chunks(n_lines, nbytes // 8)
        scratch = _scratch(used + workers + 2 + workers.bit_length(), chunks, nbytes // 8)
        for chunk in chunks:
            # Counted into contiguous planes, then moved to their lines in one copy: adders
            # writing straight into the interleaved lines run at half the speed.
            rows = _chunk_rows(words, chunk)
            planes = scratch[:used, :rows.shape[1]]
            over = _fold(list(rows), list(planes), list(scratch[used:, :rows.shape[1]]), used)
            _swap_lines(planes.reshape(used, -1, nbytes // 8), lines_out[chunk, :used])
            if saturated is not None and over is not None:
                saturated[chunk] = np.unpackbits(over.view(np.uint8), axis=-1,
                                                 bitorder="little").view(bool).reshape(-1, line_bits)
    return (out, saturated) if return_saturated else out


def _check_values(values, *, name, low, high):
    """Validate a 2-D array of lane values of any integer dtype, each within ``[low, high]``.

    Counts and sums come from :func:`aggregate` as ``uint8``/``int8``, but any integer array
    holding the same values is accepted: the range is the rule, not the dtype.
    """
    if (not isinstance(values, np.ndarray) or values.ndim != 2
            or not np.issubdtype(values.dtype, np.integer)):
        got = (f"a {values.ndim}-D {values.dtype} array" if isinstance(values, np.ndarray)
               else type(values).__name__)
        raise TypeError(f"{name} must be a 2-D numpy.ndarray of integers, not {got}")
    info = np.iinfo(values.dtype)
    if values.size and (info.min < low or info.max > high):
        bad = (values < low) | (values > high)
        if bad.any():
            slot, lane = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{name} must be between {low} and {high}, not {int(values[slot, lane])} "
                             f"(lane {lane} of slot {slot})")
    return values


def _check_counts(counts):
    return _check_values(counts, name="counts", low=0, high=255)


def majority(counts, *, num_workers):
    """Majority sign per lane: -1 when ``2n > N``, +1 when ``2n < N``, 0 on a tie.

    ``counts`` is the output of :func:`aggregate` (``uint8``, or any integer array with
    values from 0 to 255); ``num_workers`` is ``N``, the number of contributions (the
    NUM_WORKERS register). Returns ``int8`` of the same shape.
    """
    counts = _check_counts(counts)
    num_workers = check_int("num_workers", num_workers, low=1, high=MAX_WORKERS_LIMIT)
    # 2n > N is n > N // 2 and 2n < N is n < ceil(N / 2): two compares, no widening.
    negative = counts > num_workers // 2
    positive = counts < (num_workers + 1) // 2
    return positive.view(np.int8) - negative.view(np.int8)


def readout(counts, *, readout, num_workers, counter_bits):
    """The exact readout lines a complete slot returns, slot after slot.

    Every line keeps lane ``i`` at bit ``i``; with ``N`` = ``num_workers``:

    - ``SIGN``, 1 line: bit ``i`` is 1 where the majority is negative (``2n > N``); a tie
      reads 0.
    - ``TERNARY``, 2 lines: line 0 is the ``SIGN`` line, line 1 has bit ``i`` set where lane
      ``i`` is not a tie (``2n != N``). The value is ``line1 * (1 - 2 * line0)``.
    - ``COUNTS``, ``counter_bits`` lines: line ``k`` holds bit ``k`` of every counter
      (bit-planes, least significant first).

    ``counts`` is ``(n_slots, line_bits)`` of any integer dtype (``uint8`` from
    :func:`aggregate`), each from 0 to ``2**counter_bits - 1``; returns
    ``(n_slots * k, line_bits // 8)`` ``uint8`` where ``k`` lines make one slot's readout
    (:func:`~neuron_fabric.golden.formats.readout_lines_per_slot`).
    """
    counts = _check_counts(counts)
    readout = _check_readout(readout)
    line_bits = _lines.check_line_bits(counts.shape[1])
    counter_bits = check_int("counter_bits", counter_bits, low=1, high=COUNTER_BITS_LIMIT)
    if counts.size and counts.max() > count_limit(counter_bits):
        raise ValueError(f"counts must be at most {count_limit(counter_bits)} for "
                         f"counter_bits={counter_bits}, not {int(counts.max())}")
    if readout is Readout.COUNTS:
        planes = _lines.pack_planes(counts, planes=counter_bits)
    else:
        values = majority(counts, num_workers=num_workers)
        bits = [values < 0] if readout is Readout.SIGN else [values < 0, values != 0]
        planes = _lines.pack_lanes(np.stack(bits, axis=1), lane_bits=1)
    return planes.reshape(-1, _lines.line_bytes(line_bits))


def readout_planes(planes, *, readout, num_workers):
    """The readout lines of complete slots, from counters held as bit-planes, bit-sliced.

    ``planes`` is ``(n_slots, counter_bits, line_bytes)`` ``uint8`` as
    :func:`aggregate_planes` returns it. Gives exactly what :func:`readout` gives for the
    same counters, without a byte per lane: ``SIGN`` and ``TERNARY`` compare every counter
    with ``N // 2`` on the planes, 64 lanes an operation, and ``COUNTS`` is the planes.
    """
    check_array(planes, name="planes", dtype=np.uint8, ndim=3)
    readout = _check_readout(readout)
    n_slots, counter_bits, nbytes = planes.shape
    line_bits = _lines.check_line_bits(8 * nbytes)
    check_int("counter_bits (planes.shape[1])", counter_bits, low=1, high=COUNTER_BITS_LIMIT)
    num_workers = check_int("num_workers", num_workers, low=1, high=MAX_WORKERS_LIMIT)
    if readout is Readout.COUNTS:
        return planes.reshape(-1, nbytes).copy()
    words = np.empty((counter_bits, n_slots, nbytes // 8), dtype=np.uint64)  # plane-major
    _swap_lines(np.ascontiguousarray(planes).view(np.uint64), words)
    negative = _greater(list(words), num_workers // 2)  # 2n > N is n > N // 2
    if readout is Readout.SIGN:
        out = negative[:, None]
    else:  # a tie (2n == N) needs N even; with N odd every lane is decided
        decided = (~_equal(list(words), num_workers // 2) if num_workers % 2 == 0
                   else np.full_like(negative, _ONES))
        out = np.empty((n_slots, 2) + negative.shape[1:], dtype=np.uint64)
        _swap_lines(np.stack([negative, decided]), out)
    return out.view(np.uint8).reshape(-1, line_bits // 8)


def parse_readout(lines, *, readout, line_bits=512, counter_bits=None):
    """Inverse of :func:`readout`: lane values per slot, ``(n_slots, line_bits)``.

    ``SIGN`` gives the bit (``uint8``, 1 = majority negative), ``TERNARY`` the majority as
    ``int8`` -1/0/+1, ``COUNTS`` the ``uint8`` counts (``counter_bits`` is then required).

    Raises ``ValueError`` for lines that are not whole readouts, and for a ``TERNARY``
    readout with a line-0 (sign) bit set where line 1 says the lane is a tie, which no
    readout produces.
    """
    lines, line_bits = _lines.check_lines(lines, line_bits=line_bits)
    readout = _check_readout(readout)
    if readout is Readout.COUNTS:
        if counter_bits is None:
            raise TypeError("counter_bits is required to parse a COUNTS readout")
        counter_bits = check_int("counter_bits", counter_bits, low=1, high=COUNTER_BITS_LIMIT)
        slots = check_readout_lines(lines, readout=readout, counter_bits=counter_bits)
        return _lines.unpack_planes(slots)
    slots = check_readout_lines(lines, readout=readout, counter_bits=1)  # only COUNTS depends on it
    negative = _lines.unpack_lanes(slots[:, 0], lane_bits=1)
    if readout is Readout.SIGN:
        return negative
    decided = _lines.unpack_lanes(slots[:, 1], lane_bits=1)
    if (negative > decided).any():
        slot, lane = (int(x) for x in np.argwhere(negative > decided)[0])
        raise ValueError(
            "lines must leave a TERNARY readout's line-0 (sign) bit clear where its line-1 bit "
            f"is 0 (a tie), not set it at lane {lane} of slot {slot}")
    return decided.view(np.int8) - 2 * negative.view(np.int8)


def decode(lines, *, readout, n_elements, line_bits=512, counter_bits=None):
    """A readout back to a flat tensor of ``n_elements``, padding lanes dropped.

    ``SIGN`` decodes to ``int8`` -1/+1 (a tie cannot be told from +1), ``TERNARY`` to ``int8``
    -1/0/+1, ``COUNTS`` to ``uint8`` counts. Raises as :func:`parse_readout`.
    """
    values = parse_readout(lines, readout=readout, line_bits=line_bits, counter_bits=counter_bits)
    if _check_readout(readout) is Readout.SIGN:
        values = (1 - 2 * values.astype(np.int8)).astype(np.int8)
    return _lines.from_lane_grid(values, n_elements=n_elements)


def _check_readout(readout):
    return check_readout(readout, route=Route.GBINARY)
