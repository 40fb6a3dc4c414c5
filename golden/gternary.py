"""G-Ternary: 2-bit codes per element, gated per-lane sums (DESIGN.md section 4).

A written line holds ``line_bits // 2`` lanes of 2-bit codes: ``00`` = 0, ``01`` = +1,
``11`` = -1 and ``10`` invalid. The codes are 2-bit two's complement, which is how this
module packs and parses them (``10`` reads as -2, the invalid marker). The device keeps
per lane a signed saturating sum ``S``; the gated readout is ``sign(S)`` where
``|S| >= GATE`` and 0 elsewhere.
"""

import numpy as np

from . import lines as _lines
from ._validate import check_array, check_generator, check_grad, check_int
from .gbinary import count_bits
from .formats import (COUNTER_BITS_LIMIT, Readout, Route, check_counter_bits, count_limit, check_max_workers, check_readout,
                      check_readout_lines, readout_lines_per_slot, sum_limit)

__all__ = ["INVALID_CODE", "encode", "ternarize", "codes", "invalid_lanes", "aggregate", "gate",
           "readout", "parse_readout", "decode"]

INVALID_CODE = 0b10
LANE_BITS = 2


def ternarize(grad, *, ratio, rng=None, scale=None):
    """The worker-side ternary value of each element: ``int8`` -1, 0 or +1, flattened.

    Deterministic (``rng=None``): ``t = sign(g)`` where ``|g| >= tau`` and 0 elsewhere, with
    ``tau = ratio * max|g|`` over the whole tensor (the bucket). ``ratio = 0`` keeps every
    non-zero sign.

    Stochastic (``rng`` a ``numpy.random.Generator``), TernGrad style: elements below
    ``tau`` are still 0; every other element keeps its sign with probability
    ``min(1, |g| / s)``, where ``s`` is ``scale`` (shared by all workers, as TernGrad shares
    the maximum) or ``max|g|`` when ``scale`` is None. ``ratio = 0`` makes it unbiased:
    ``E[s * t] = g`` for ``|g| <= s``. Exactly ``grad.size`` float32 uniform draws are taken
    from ``rng`` in element order, so a seed reproduces the codes.

    ``+-0.0`` encode as 0, ``+-inf`` keep their sign (and make ``tau`` infinite, so only
    infinite elements survive the threshold). NaN raises ``ValueError``.
    """
    flat, tau, draws = _prepare(grad, ratio, rng, scale)
    values = np.empty(flat.size, dtype=np.int8)
    for start in range(0, flat.size, _CHUNK):
        stop = min(start + _CHUNK, flat.size)
        positive, negative = _signs(flat[start:stop], tau, None if draws is None else draws[start:stop])
        np.subtract(positive.view(np.int8), negative.view(np.int8), out=values[start:stop])
    return values


# Elements per chunk: a chunk's float32 data and its masks stay in cache between passes.
_CHUNK = 1 << 18


def _prepare(grad, ratio, rng, scale):
    """Validate the arguments; return the flat gradient, ``tau`` and the scaled draws."""
    flat = check_grad(grad, nan_check=False)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating, np.integer)):
        raise TypeError(f"ratio must be a real number, not {ratio!r}")
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio must be between 0 and 1, not {ratio!r}")
    if rng is not None:
        check_generator(rng)
    if flat.size == 0:
        return flat, 0.0, None
    high, low = _max_min(flat)
    if np.isnan(high) or np.isnan(low):
        check_grad(flat)  # raises, naming the first NaN
    peak = max(high, -low)
    draws = None
    if rng is not None:
        if scale is None:
            if not np.isfinite(peak):
                raise ValueError("grad must be finite in stochastic mode without a scale: the "
                                 "default scale max|g| is infinite; pass a finite scale")
            scale = peak
        elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)):
            raise TypeError(f"scale must be a real number, not {scale!r}")
        elif not np.isfinite(scale) or scale < 0:
            raise ValueError(f"scale must be a finite number >= 0, not {scale!r}")
        # An element is kept when u * s < |g|, u uniform in [0, 1): probability min(1, |g| / s).
        draws = rng.random(flat.size, dtype=np.float32)
        draws *= np.float32(scale)
    return flat, _exact_threshold(ratio * peak, flat.dtype), draws


def _max_min(flat):
    """``(max, min)`` in one read of the data: the chunk is still in cache for the second."""
    high, low = -np.inf, np.inf
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start:start + _CHUNK]
        chunk_high, chunk_low = float(chunk.max()), float(chunk.min())
        if np.isnan(chunk_high) or np.isnan(chunk_low):  # Python's max() would drop a NaN
            return np.nan, np.nan
        high, low = max(high, chunk_high), min(low, chunk_low)
    return high, low


def _exact_threshold(tau, dtype):
    """The smallest value of ``dtype`` that is >= ``tau`` (computed in float64).

    For an array of ``dtype``, ``x >= result`` then holds exactly when ``x >= tau`` does;
    comparing with ``tau`` itself would first round it to ``dtype`` and could let through
    elements just below it.
    """
    rounded = dtype.type(tau)
    if float(rounded) < tau:
        rounded = np.nextafter(rounded, dtype.type(np.inf))
    return rounded


def _signs(chunk, tau, draws):
    """Masks of the elements that encode as +1 and as -1."""
    if tau > 0:  # tau is exact in the chunk's dtype (see _exact_threshold)
        positive, negative = chunk >= tau, chunk <= -tau
    else:  # |g| >= 0 holds everywhere; sign(0) is still 0
        positive, negative = chunk > 0, chunk < 0
    if draws is not None:
        kept = draws < np.abs(chunk)
        positive &= kept
        negative &= kept
    return positive, negative


def encode(grad, *, ratio, line_bits=512, rng=None, scale=None):
    """Ternarize a gradient (see :func:`ternarize`) and pack it into G-Ternary lines.

    Element ``j`` goes to lane ``j mod L`` of line ``j div L`` with ``L = line_bits // 2``;
    padding lanes are ``00``. Returns ``uint8`` lines ``(ceil(size / L), line_bits // 8)``.
    """
    nbytes = _lines.line_bytes(line_bits)
    flat, tau, draws = _prepare(grad, ratio, rng, scale)
    lanes = line_bits // 2
    n_lines = -(-flat.size // lanes)
    out = np.zeros(n_lines * nbytes, dtype=np.uint8)
    for start in range(0, flat.size, _CHUNK):  # _CHUNK is a multiple of 8 elements
        stop = min(start + _CHUNK, flat.size)
        positive, negative = _signs(flat[start:stop], tau, None if draws is None else draws[start:stop])
        minus = np.packbits(negative, bitorder="little")
        nonzero = np.packbits(positive, bitorder="little") | minus  # a code's low bit
        packed = _lines.interleave_bit_planes(nonzero, minus)
        out[start // 4:start // 4 + packed.size] = packed
    return out.reshape(n_lines, nbytes)


def codes(lines):
    """The lane values of G-Ternary lines: ``int8`` -1, 0, +1, and -2 for the invalid code."""
    return _lines.unpack_lanes(lines, lane_bits=LANE_BITS, signed=True)


def invalid_lanes(lines):
    """Boolean mask of the lanes holding the invalid code ``10``, shape ``(..., lanes)``."""
    return codes(lines) == -2


def aggregate(lines, *, max_workers, counter_bits=None, return_flags=False):
    """Sum the ternary values per lane over workers, saturating, in worker order.

    ``lines`` is ``(workers, n_lines, line_bytes)`` ``uint8``. An invalid code counts as 0.
    Sums saturate in ``[-limit, +limit]`` with ``limit = max_workers`` (or
    ``2**counter_bits - 1`` for a narrower counter). Saturation is applied after each
    worker's line, as the hardware folds lines in arrival order: with mixed signs that can
    differ from clipping the total.

    Returns ``int8`` sums ``(n_lines, line_bits // 2)``; with ``return_flags=True`` also a
    dict of boolean masks: ``"saturated"`` per lane, ``"invalid"`` per worker and lane.
    """
    lines, _ = _lines.check_lines(lines, ndim=3)
    check_max_workers(max_workers)
    counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
    limit = sum_limit(max_workers, counter_bits)
    workers, n_lines, nbytes = lines.shape
    if workers <= limit:  # no partial sum can leave the range: count +1s and -1s
        sums = _count_codes(lines)
        saturated = np.zeros_like(sums, dtype=bool)
    else:
        values = codes(lines)
        values[values == -2] = 0
        sums = np.zeros(values.shape[1:], dtype=np.int16)
        saturated = np.zeros(values.shape[1:], dtype=bool)
        for contribution in values:
            sums += contribution
            saturated |= np.abs(sums) > limit
            np.clip(sums, -limit, limit, out=sums)
        sums = sums.astype(np.int8)
    if return_flags:
        return sums, {"saturated": saturated, "invalid": invalid_lanes(lines)}
    return sums


# The low bit of every 2-bit code in a 64-bit word.
_LOW_BITS = np.uint64(0x5555_5555_5555_5555)


def _count_codes(lines):
    """Per-lane (count of +1) - (count of -1) over workers, with the bit-sliced counter.

    A code's low bit says non-zero and its high bit negative, so +1 is ``low & ~high``,
    -1 is ``low & high`` and the invalid ``10`` is neither. Counting set bits per bit
    position and keeping the even positions gives the counts per ternary lane.
    """
    workers, n_lines, nbytes = lines.shape
    words = lines.reshape(workers, n_lines * nbytes).view(np.uint64)
    low = words & _LOW_BITS
    minus = (words >> np.uint64(1)) & low
    plus = low ^ minus
    n_bits = words.shape[1] * 64
    return (count_bits(plus)[:n_bits:2].view(np.int8)
            - count_bits(minus)[:n_bits:2].view(np.int8)).reshape(n_lines, nbytes * 4)


def _check_sums(sums):
    return check_array(sums, name="sums", dtype=np.int8, ndim=2)


def _gated(sums, threshold):
    threshold = max(threshold, 1)  # |S| >= 0 passes everything, and sign(0) is 0 anyway
    if threshold > 128:  # beyond any int8 magnitude
        return np.zeros_like(sums)
    positive = sums >= np.int16(threshold)
    negative = sums <= np.int16(-threshold)
    return positive.view(np.int8) - negative.view(np.int8)


def gate(sums, *, gate):
    """``sign(S)`` where ``|S| >= gate``, else 0; ``int8`` of the same shape.

    ``gate`` is the GATE register: an integer from 0 to 255 (0 and 1 both pass every
    non-zero sum).
    """
    return _gated(_check_sums(sums), check_int("gate", gate, low=0, high=255))


def readout(sums, *, readout, gate, counter_bits):
    """The exact readout lines a complete slot returns, slot after slot.

    Every line keeps lane ``t`` at bits ``2t`` and ``2t + 1``, where its code arrives:

    - ``GATED``, 1 line: the 2-bit code of the gated value (``sign(S)`` where
      ``|S| >= gate``, else 0).
    - ``SUMS``, ``ceil((counter_bits + 1) / 2)`` lines: ``S`` in two's complement with
      ``counter_bits + 1`` bits; line ``k`` holds bit ``2k`` of lane ``t``'s sum at line bit
      ``2t`` and bit ``2k + 1`` at line bit ``2t + 1``. When ``counter_bits + 1`` is odd, the
      last line's bit ``2t + 1`` repeats the sign bit (sign extension).

    ``sums`` is ``(n_slots, line_bits // 2)`` ``int8`` within ``+-(2**counter_bits - 1)``;
    returns ``(n_slots * k, line_bits // 8)`` ``uint8`` where ``k`` lines make one slot's
    readout (:func:`~neuron_fabric.golden.formats.readout_lines_per_slot`).
    """
    sums = _check_sums(sums)
    readout = _check_readout(readout)
    line_bits = _lines.check_line_bits(2 * sums.shape[1])
    counter_bits = check_int("counter_bits", counter_bits, low=1, high=COUNTER_BITS_LIMIT)
    limit = count_limit(counter_bits)
    if sums.size and max(int(sums.max()), -int(sums.min())) > limit:
        raise ValueError(f"sums must lie within [-{limit}, {limit}] for counter_bits={counter_bits}, "
                         f"not reach {max(int(sums.max()), -int(sums.min()))} in magnitude")
    if readout is Readout.GATED:
        gated = _gated(sums, check_int("gate", gate, low=0, high=255))
        return _lines.pack_lanes(gated, lane_bits=LANE_BITS)
    planes = _lines.pack_planes(sums, lane_bits=LANE_BITS,
                                planes=readout_lines_per_slot(readout, counter_bits=counter_bits))
    return planes.reshape(-1, _lines.line_bytes(line_bits))


def parse_readout(lines, *, readout, line_bits=512, counter_bits=None):
    """Inverse of :func:`readout`: ``int8`` lane values per slot, ``(n_slots, line_bits // 2)``.

    ``SUMS`` needs ``counter_bits``. Raises ``ValueError`` for lines that are not whole
    readouts and for what the device never produces: an invalid code in a ``GATED``
    readout; in a ``SUMS`` readout, a last-line sign extension bit that differs from the
    sign, or a sum beyond ``+-(2**counter_bits - 1)``.
    """
    lines, line_bits = _lines.check_lines(lines, line_bits=line_bits)
    readout = _check_readout(readout)
    if readout is Readout.GATED:
        slots = check_readout_lines(lines, readout=readout, counter_bits=1)  # only SUMS depends on it
        values = _lines.unpack_lanes(slots[:, 0], lane_bits=LANE_BITS, signed=True)
        if (values == -2).any():
            raise ValueError("lines hold an invalid ternary code (0b10), which no readout produces")
        return values
    if counter_bits is None:
        raise TypeError("counter_bits is required to parse a SUMS readout")
    counter_bits = check_int("counter_bits", counter_bits, low=1, high=COUNTER_BITS_LIMIT)
    slots = check_readout_lines(lines, readout=readout, counter_bits=counter_bits)
    # Sign-extended from the last line's high bit: a sum whose extension bit (bit C + 1 when
    # C + 1 is odd) differs from its sign bit C lands outside the C + 1-bit range.
    values = _lines.unpack_planes(slots, lane_bits=LANE_BITS, signed=True)
    top = 1 << counter_bits
    slot, lane = _first((values < -top) | (values >= top))
    if slot is not None:
        raise ValueError(
            f"lines must repeat each sum's sign bit (bit {counter_bits}) in the last line's odd "
            f"bits (sign extension), not differ from it at lane {lane} of slot {slot}")
    slot, lane = _first(values == -top)
    if slot is not None:
        raise ValueError(
            f"lines must hold sums within [-{top - 1}, {top - 1}] for counter_bits={counter_bits}, "
            f"not {-top} at lane {lane} of slot {slot}")
    return values


def _first(bad):
    """``(slot, lane)`` of the first set entry of a 2-D mask, or ``(None, None)``."""
    if not bad.any():
        return None, None
    slot, lane = np.argwhere(bad)[0]
    return int(slot), int(lane)


def decode(lines, *, readout, n_elements, line_bits=512, counter_bits=None):
    """A readout back to a flat ``int8`` tensor of ``n_elements``, padding lanes dropped."""
    values = parse_readout(lines, readout=readout, line_bits=line_bits, counter_bits=counter_bits)
    return _lines.from_lane_grid(values, n_elements=n_elements)


def _check_readout(readout):
    return check_readout(readout, route=Route.GTERNARY)
