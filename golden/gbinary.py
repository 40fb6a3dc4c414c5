"""G-Binary: one sign bit per element, majority vote by per-lane counting (DESIGN.md section 3).

A written line holds ``line_bits`` lanes; bit 1 means the element is negative. The device
keeps per lane a saturating count ``n`` of ones; with ``N`` contributions the majority is
-1 when ``2n > N``, +1 when ``2n < N`` and 0 on a tie.
"""

import numpy as np

from . import lines as _lines
from ._validate import check_array, check_grad, check_int
from .formats import (COUNTER_BITS_LIMIT, MAX_WORKERS_LIMIT, Readout, Route, check_counter_bits, check_max_workers,
                      check_readout, check_readout_lines, count_limit)

__all__ = ["encode", "count_bits", "aggregate", "majority", "readout", "parse_readout", "decode"]

# Words of 64 lanes processed at a time, so that the bit-planes stay in cache.
_CHUNK_WORDS = 4096


def encode(grad, *, line_bits=512):
    """Pack the signs of a gradient into G-Binary lines.

    Bit ``j`` is 1 when element ``j`` is **< 0**; ``+0.0`` and ``-0.0`` both encode as 0,
    ``-inf`` as 1 and ``+inf`` as 0. The tensor is flattened in C order; padding lanes of the
    last line are 0 (the neutral code).

    Returns ``uint8`` lines of shape ``(ceil(size / line_bits), line_bits // 8)``.

    Raises ``TypeError`` for a non-floating-point array and ``ValueError`` for NaN or an
    unsupported ``line_bits``.
    """
    nbytes = _lines.line_bytes(line_bits)
    flat = check_grad(grad)
    n_lines = -(-flat.size // line_bits)
    out = np.zeros(n_lines * nbytes, dtype=np.uint8)
    # packbits pads the final partial byte with zero bits, the neutral code.
    packed = np.packbits(flat < 0, bitorder="little")
    out[:packed.size] = packed
    return out.reshape(n_lines, nbytes)


def _count_ones(words):
    """Exact per-lane count of set bits over workers, bit-sliced.

    ``words`` is ``(workers, n_words)`` of ``uint64`` (64 lanes a word). Numbers are held as
    bit-planes; pairs of them are added by ripple-carry adders vectorized over all pairs at
    once, halving the worker axis each level. The final planes are unpacked to one byte per
    lane and combined on a ``uint64`` view (8 lanes an operation; counts stay below 256, so
    no bit crosses into the next lane). Returns ``uint8`` counts, 64 per word, in lane order.
    """
    planes = words[None]  # (bits, numbers, words): each worker is a 1-bit number
    while planes.shape[1] > 1:
        if planes.shape[1] % 2:
            planes = np.concatenate([planes, np.zeros_like(planes[:, :1])], axis=1)
        a, b = planes[:, 0::2], planes[:, 1::2]
        out = np.empty((planes.shape[0] + 1,) + a.shape[1:], dtype=np.uint64)
        np.bitwise_xor(a[0], b[0], out=out[0])
        carry = a[0] & b[0]
        for k in range(1, planes.shape[0]):
            half = a[k] ^ b[k]
            np.bitwise_xor(half, carry, out=out[k])
            carry &= half
            carry |= a[k] & b[k]
        out[-1] = carry
        planes = out
    bits = np.unpackbits(planes[:, 0].view(np.uint8), axis=-1, bitorder="little").view(np.uint64)
    counts = bits[-1]
    for k in range(bits.shape[0] - 2, -1, -1):
        counts <<= np.uint64(1)
        counts |= bits[k]
    return counts.view(np.uint8)


def count_bits(words):
    """Per bit position, how many of the ``workers`` rows of ``words`` have it set.

    ``words`` is ``(workers, n_words)`` ``uint64`` with at most 255 rows; returns ``uint8``
    counts, 64 per word, in lane (bit) order. Worked in chunks so the planes stay in cache.
    """
    total = np.zeros(words.shape[1] * 64, dtype=np.uint8)
    if words.shape[0]:
        for start in range(0, words.shape[1], _CHUNK_WORDS):
            chunk = words[:, start:start + _CHUNK_WORDS]
            total[start * 64:(start + chunk.shape[1]) * 64] = _count_ones(chunk)
    return total


def aggregate(lines, *, max_workers, counter_bits=None, return_saturated=False):
    """Count the negative votes per lane over workers, saturating.

    ``lines`` is ``(workers, n_lines, line_bytes)`` ``uint8``: worker ``w``'s G-Binary lines.
    Counters are ``counter_bits`` wide (default ``ceil(log2(max_workers + 1))``) and saturate
    at ``2**counter_bits - 1``; with no more workers than that they never saturate. Since
    every increment is non-negative, saturating per step equals clipping the total.

    Returns ``uint8`` counts ``(n_lines, line_bits)``; with ``return_saturated=True`` also a
    boolean mask of the lanes that saturated.
    """
    lines, line_bits = _lines.check_lines(lines, ndim=3)
    check_max_workers(max_workers)
    counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
    workers, n_lines, nbytes = lines.shape
    if workers > 255:
        raise ValueError(f"lines must hold at most 255 workers' contributions, not {workers}")
    words = lines.reshape(workers, n_lines * nbytes).view(np.uint64)
    total = count_bits(words).reshape(n_lines, line_bits)
    limit = count_limit(counter_bits)
    counts = np.minimum(total, limit) if workers > limit else total
    if return_saturated:
        return counts, total > limit
    return counts


def _check_counts(counts):
    return check_array(counts, name="counts", dtype=np.uint8, ndim=2)


def majority(counts, *, num_workers):
    """Majority sign per lane: -1 when ``2n > N``, +1 when ``2n < N``, 0 on a tie.

    ``counts`` is the ``uint8`` output of :func:`aggregate`; ``num_workers`` is ``N``, the
    number of contributions (the NUM_WORKERS register). Returns ``int8`` of the same shape.
    """
    counts = _check_counts(counts)
    num_workers = check_int("num_workers", num_workers, low=1, high=MAX_WORKERS_LIMIT)
    # 2n > N is n > N // 2 and 2n < N is n < ceil(N / 2): two byte compares, no widening.
    negative = counts > np.uint8(num_workers // 2)
    positive = counts < np.uint8((num_workers + 1) // 2)
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

    ``counts`` is ``(n_slots, line_bits)`` ``uint8``, each at most ``2**counter_bits - 1``;
    returns ``(n_slots * k, line_bits // 8)`` ``uint8`` where ``k`` lines make one slot's
    readout (:func:`~neuron_fabric.golden.formats.readout_lines_per_slot`).
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
