"""G-Ternary: 2-bit codes per element, gated per-lane sums (docs/design.md, "G-Ternary").

A written line holds ``line_bits // 2`` lanes of 2-bit codes: ``00`` = 0, ``01`` = +1,
``11`` = -1 and ``10`` invalid. The codes are 2-bit two's complement, which is how this
module packs and parses them (``10`` reads as -2, the invalid marker). The device keeps
per lane a signed saturating sum ``S``; the gated readout is ``sign(S)`` where
``|S| >= GATE`` and 0 elsewhere.

The sums are computed bit-sliced on the lines' own 2-bit layout. Per worker one word holds
two votes a lane: the code's low bit (a +1 or a -1) at the even bit and low AND high (a -1)
at the odd bit, so an invalid code, whose low bit is 0, votes for neither. Carry-save adders
count both at once into planes holding ``N = P + M`` at the even bits and ``M`` at the odd
bits (``P`` +1 codes, ``M`` -1 codes), and a ripple of borrows gives the sum ``N - 2M =
P - M`` as the 2-bit digits of the ``SUMS`` readout lines (:func:`aggregate_planes`,
:func:`readout_planes`); :func:`aggregate` unpacks them to a byte per lane. Where no sum can
saturate, that whole count runs in one compiled loop (:mod:`.kernels`): in NumPy it took
about 75 passes over every chunk and a third of the speed of reading the lines. Where sums
can saturate, the signed tallies are counted in NumPy a chunk at a time (see
:mod:`.gbinary`), clipped and, where the order of the workers matters, folded worker after
worker.
"""

import numpy as np

from . import gbinary
from . import lines as _lines
from .validate import check_array, check_generator, check_grad, check_int
from .formats import (COUNTER_BITS_LIMIT, GATE_MAX, MAX_WORKERS_LIMIT, ROUTE_SPECS, Readout, Route,
                      check_counter_bits, count_limit, check_max_workers, check_readout,
                      check_readout_lines, readout_lines_per_slot, sum_limit)

__all__ = ["ZERO_CODE", "PLUS_CODE", "MINUS_CODE", "INVALID_CODE", "INVALID_VALUE", "encode",
           "codes_into", "ternarize", "codes", "invalid_lanes", "aggregate", "aggregate_planes",
           "gate", "readout", "readout_planes", "parse_readout", "decode"]

LANE_BITS = ROUTE_SPECS[Route.GTERNARY].lane_bits
#: The 2-bit codes: two's complement of 0, +1 and -1; the fourth is invalid.
ZERO_CODE = 0b00
PLUS_CODE = 0b01
MINUS_CODE = 0b11
INVALID_CODE = 0b10
#: The invalid code read as a 2-bit two's complement number, as :func:`codes` gives it.
INVALID_VALUE = INVALID_CODE - (1 << LANE_BITS)


def ternarize(grad, *, ratio, rng=None, scale=None, draws=None):
    """The worker-side ternary value of each element: ``int8`` -1, 0 or +1, flattened.

    Deterministic (``rng=None``): ``t = sign(g)`` where ``|g| >= tau`` and 0 elsewhere, with
    ``tau = ratio * max|g|`` over the whole tensor (the bucket). ``ratio = 0`` keeps every
    non-zero sign.

    Stochastic (``rng`` a ``numpy.random.Generator``), TernGrad style: elements below
    ``tau`` are still 0; every other element keeps its sign with probability
    ``min(1, |g| / s)``, where ``s`` is ``scale`` (shared by all workers, as TernGrad shares
    the maximum) or ``max|g|`` when ``scale`` is None. ``ratio = 0`` makes it unbiased:
    ``E[s * t] = g`` for ``|g| <= s``. Exactly ``grad.size`` float32 uniform draws are taken
    from ``rng`` in element order, so a seed reproduces the codes. ``draws`` may give those
    draws instead of ``rng``: a ``float32`` array of ``grad.size`` values in ``[0, 1)``, as
    ``rng.random(grad.size, dtype=numpy.float32)`` returns them (for draws made elsewhere,
    such as the DDP hooks' counter-based ones).

    ``+-0.0`` encode as 0, ``+-inf`` keep their sign (and make ``tau`` infinite, so only
    infinite elements survive the threshold). NaN raises ``ValueError``.
    """
    flat, tau, draws = _prepare(grad, ratio, rng, scale, draws)
    values = np.empty(flat.size, dtype=np.int8)
    for start in range(0, flat.size, _CHUNK):
        stop = min(start + _CHUNK, flat.size)
        positive, negative = _signs(flat[start:stop], tau, None if draws is None else draws[start:stop])
        np.subtract(positive.view(np.int8), negative.view(np.int8), out=values[start:stop])
    return values


# Elements per chunk: a chunk's float32 data and its masks stay in cache between passes.
_CHUNK = 1 << 19


def _prepare(grad, ratio, rng, scale, given=None):
    """Validate the arguments; return the flat gradient, ``tau`` and the scaled draws
    (``given``: the draws themselves, in place of ``rng``)."""
    flat = check_grad(grad, nan_check=False)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating, np.integer)):
        raise TypeError(f"ratio must be a real number, not {ratio!r}")
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio must be between 0 and 1, not {ratio!r}")
    if rng is not None:
        check_generator(rng)
        if given is not None:
            raise TypeError("rng and draws must not both be given: draws are what rng would draw")
    if given is not None:
        if (not isinstance(given, np.ndarray) or given.dtype != np.float32
                or given.shape != (flat.size,)):
            raise TypeError(f"draws must be a 1-D float32 numpy.ndarray of {flat.size} values, "
                            f"not {given!r:.60}")
        if given.size and not (given.min() >= 0 and given.max() < 1):
            raise ValueError("draws must lie in [0, 1), as uniform draws do")
    stochastic = rng is not None or given is not None
    if flat.size == 0:
        return flat, 0.0, None
    high, low = _max_min(flat)
    if np.isnan(high) or np.isnan(low):
        check_grad(flat)  # raises, naming the first NaN
    peak = max(high, -low)
    draws = None
    if stochastic:
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
        draws = rng.random(flat.size, dtype=np.float32) if given is None else given.copy()
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


def _signs(chunk, tau, draws, out=None):
    """Masks of the elements that encode as +1 and as -1 (into ``out``, two bool arrays, if given)."""
    positive, negative = out if out is not None else (None, None)
    if tau > 0:  # tau is exact in the chunk's dtype (see _exact_threshold)
        positive = np.greater_equal(chunk, tau, out=positive)
        negative = np.less_equal(chunk, -tau, out=negative)
    else:  # |g| >= 0 holds everywhere; sign(0) is still 0
        positive = np.greater(chunk, 0, out=positive)
        negative = np.less(chunk, 0, out=negative)
    if draws is not None:
        kept = draws < np.abs(chunk)
        positive &= kept
        negative &= kept
    return positive, negative


def _kernels():
    """The compiled loops (:mod:`.kernels`), imported on first use: importing Numba takes
    about 0.2 s, which the users of this package that never sum or encode G-Ternary lines
    (the hardware generator, loading a trace) need not pay."""
    from . import kernels
    return kernels


# Gradient types the compiled encoder takes (float16 widened to float32 first).
_COMPILED_TYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def encode(grad, *, ratio, line_bits=512, rng=None, scale=None, draws=None):
    """Ternarize a gradient (see :func:`ternarize`) and pack it into G-Ternary lines.

    Element ``j`` goes to lane ``j mod L`` of line ``j div L`` with ``L = line_bits // 2``;
    padding lanes are ``00``. Returns ``uint8`` lines ``(ceil(size / L), line_bits // 8)``.

    Two reads of the gradient: one for ``max|g|`` (:func:`_prepare`), then one compiled loop
    that compares and packs every element (:func:`kernels.ternary_codes`). In NumPy the second
    pass took five operations a chunk and ran at half the speed of the first. A gradient of
    a type the loop is not compiled for (wider than float64) is compared and packed in
    NumPy, with the same rules.
    """
    nbytes = _lines.line_bytes(line_bits)
    flat, tau, draws = _prepare(grad, ratio, rng, scale, draws)
    n_lines = -(-flat.size // (line_bits // 2))
    out = np.empty(n_lines * nbytes, dtype=np.uint8)
    if flat.dtype not in _COMPILED_TYPES:
        positive, negative = _signs(flat, tau, draws)
        values = np.zeros(n_lines * line_bits // 2, dtype=np.int8)
        np.subtract(positive.view(np.int8), negative.view(np.int8), out=values[:flat.size])
        return _lines.pack_lanes(values.reshape(n_lines, -1), lane_bits=LANE_BITS)
    codes_into(flat, tau, draws, out)
    return out.reshape(n_lines, nbytes)


def codes_into(flat, tau, draws, out):
    """:func:`encode`'s second pass, for a caller that has its threshold (the DDP hooks take
    one a bucket): the codes of the 1-D gradient ``flat`` (float16, float32 or float64)
    against ``tau`` (>= 0, exact in ``flat``'s type, as :func:`encode` makes it), kept where
    the scaled draws ``draws`` (float32 ``u * s``, one an element, or None) are below
    ``|g|``, packed into ``out``: the lines' bytes, ``uint8``, C-contiguous, a whole number
    of 8-byte words and at least ``ceil(flat.size / 32)`` of them. Words past the last
    element are 0."""
    if (not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim != 1
            or out.size % 8 or out.size < 8 * -(-flat.size // 32)
            or not out.flags.c_contiguous):
        raise ValueError(f"out must be C-contiguous uint8 bytes, whole 8-byte words, room for "
                         f"{flat.size} codes, not {out!r:.60}")
    if flat.dtype == np.float16:  # widened exactly, and so compared exactly
        flat, tau = flat.astype(np.float32), np.float32(tau)
    tau = flat.dtype.type(tau)
    if tau == 0:  # |g| >= 0 holds everywhere; the smallest positive value keeps sign(0) at 0
        tau = np.nextafter(flat.dtype.type(0), flat.dtype.type(1))
    words = out.view("<u8")  # the kernel packs lanes into little-endian words
    written = -(-flat.size // 32)
    _kernels().ternary_codes(flat, tau, draws, words)
    words[written:] = 0  # the padding words


def codes(lines):
    """The lane values of G-Ternary lines: ``int8`` -1, 0, +1, and -2 for the invalid code."""
    return _lines.unpack_lanes(lines, lane_bits=LANE_BITS, signed=True)


def invalid_lanes(lines):
    """Boolean mask of the lanes holding the invalid code ``10``, shape ``(..., lanes)``."""
    return codes(lines) == INVALID_VALUE


# Bit 2t of a word: lane t's low (non-zero) bit; lane t's high (negative) bit is bit 2t + 1.
# As 0-d arrays: NumPy converts a scalar operand anew on every call, which costs as much as
# the operation on a few thousand words.
_EVEN = np.array(0x5555_5555_5555_5555, dtype=np.uint64)
_ODD = np.array(0xAAAA_AAAA_AAAA_AAAA, dtype=np.uint64)
_ONE = np.array(1, dtype=np.uint64)


def _signed_tallies(rows):
    """Per worker, a word with +1 codes at the even bits and -1 codes at the odd bits, for the
    saturating fold, which needs ``P`` and ``M`` themselves (freshly allocated words)."""
    out = []
    for word in rows:
        high = word >> _ONE
        high &= _EVEN  # lane t's negative bit, moved to bit 2t
        low = word & _EVEN
        minus = low & high
        low ^= minus  # +1: non-zero and not negative
        minus <<= _ONE
        low |= minus
        out.append(low)
    return out


def _halves(planes):
    """The even-bit tally (as is) and the odd-bit tally (moved to the even bits) of ``planes``."""
    return list(planes), [plane >> _ONE for plane in planes]


def _subtract(a, b):
    """Bit-sliced ``a - b`` of two equally wide plane lists: two's complement, one plane wider.

    A ripple of full subtractors, five operations a plane: ``d = a ^ b ^ borrow`` and the
    borrow out ``(~a & b) | (~(a ^ b) & borrow)``, written ``((a ^ b) & b) | (d & borrow)``.
    """
    out, borrow = [], None
    for x, y in zip(a, b):
        diff = x ^ y
        out_borrow = diff & y
        if borrow is not None:
            diff ^= borrow
            borrow &= diff
            out_borrow |= borrow
        out.append(diff)
        borrow = out_borrow
    out.append(borrow)  # the sign: the numbers were below 2**len(a)
    return out


def _clamp(planes, limit, width):
    """Numbers as ``planes`` clipped to at most ``limit``, as ``width`` planes; and the mask of
    those above it."""
    above = gbinary._greater(planes, limit)
    out = []
    for k in range(width):
        plane = planes[k] & ~above if k < len(planes) else np.zeros_like(above)
        if limit >> k & 1:
            plane |= above
        out.append(plane)
    return out, above


def _signed_equal(planes, value):
    """Mask of the two's complement numbers held as ``planes`` that equal ``value``."""
    return gbinary._equal(planes, value % (1 << len(planes)))


def _fold_in_order(rows, limit, width):
    """The device's fold, worker after worker: ``S = clip(S + v, -limit, limit)``.

    ``rows`` are the workers' words (already narrowed to the words that need it), in
    arrival order. ``S`` is ``width`` planes of two's complement at the even bits; a lane
    whose sum would leave the range stays at the bound and is flagged. Returns the planes
    and the mask of flagged lanes.
    """
    sums = [np.zeros_like(rows[0]) for _ in range(width)]
    saturated = np.zeros_like(rows[0])
    for word in _signed_tallies(rows):
        plus = word & _EVEN
        minus = (word >> _ONE) & _EVEN
        top, bottom = _signed_equal(sums, limit), _signed_equal(sums, -limit)
        saturated |= (top & plus) | (bottom & minus)
        plus &= ~top
        minus &= ~bottom
        # Add +1 (plus) or -1 (minus: all ones) with a ripple of carries.
        carry = sums[0] & (plus | minus)
        sums[0] ^= plus | minus
        for plane in sums[1:]:
            total = plane ^ minus
            next_carry = (plane & minus) | (total & carry)
            np.bitwise_xor(total, carry, out=plane)
            carry = next_carry
    return sums, saturated


def _merge_digits(low, high, out):
    """``low``'s even bits and ``high``'s odd bits, into ``out``."""
    np.bitwise_xor(low, high, out)
    np.bitwise_and(out, _ODD, out)
    np.bitwise_xor(out, low, out)


def _saturating_sums(rows, limit, counter_bits):
    """Saturating sums of one chunk of every worker's words, when more workers than ``limit``.

    Returns ``(planes, saturated)``: ``counter_bits + 1`` planes of two's complement at the
    even bits (odd bits are don't-care) and the mask of lanes that saturated.

    A lane's running sum stays within ``[-M, P]``: where ``P`` and ``M`` are both within the
    limit, or one of them is zero (the sum only climbs or only falls), saturating step by step
    equals clipping each of them, and the sum is ``min(P, limit) - min(M, limit)``. The words
    holding a lane with both signs and a tally past the limit, where the order of the workers
    matters, are folded again worker after worker (:func:`_fold_in_order`), exactly, and
    replace those results.
    """
    workers = len(rows)
    tally = [np.empty_like(rows[0]) for _ in range(workers.bit_length())]
    gbinary._count_rows(_signed_tallies(rows), tally, [np.empty_like(rows[0]) for _ in range(2)],
                        writable=True)
    plus, minus = _halves(tally)
    plus, plus_above = _clamp(plus, limit, counter_bits)
    minus, minus_above = _clamp(minus, limit, counter_bits)
    sums = _subtract(plus, minus)
    saturated = plus_above | minus_above
    nonzero = [np.bitwise_or.reduce(half) for half in (tally, [p >> _ONE for p in tally])]
    ordered = nonzero[0] & nonzero[1] & saturated & _EVEN
    words = np.flatnonzero(ordered.reshape(-1))
    if words.size:  # exact for every lane of these words
        exact, flagged = _fold_in_order([row.reshape(-1)[words] for row in rows], limit, len(sums))
        for plane, value in zip(sums, exact):
            plane.reshape(-1)[words] = value
        saturated.reshape(-1)[words] = flagged
    return sums, saturated


def _sum_chunks(lines, max_workers, counter_bits):
    """Yield ``(chunk, digits, bits, saturated)`` for chunks of whole lines.

    ``digits`` is ``(k, n_lines, words)`` ``uint64``: the chunk's ``SUMS`` readout lines
    (``k`` of them, see :func:`kernels.ternary_sum_lines`), line-major; ``bits`` how many
    low bits of the sums are significant (the rest repeat the sign); ``saturated`` the mask
    at the even bits of the lanes that saturated, or None when none can. The arrays are
    scratch, reused for the next chunk.

    With no more workers than the limit no partial sum can leave the range, so the sum is
    ``P - M`` in any order, which the compiled kernel counts (:func:`_fast_sums`).
    Otherwise :func:`_saturating_sums`.
    """
    limit = sum_limit(max_workers, counter_bits)
    per_slot = readout_lines_per_slot(Readout.SUMS, counter_bits=counter_bits)
    words = gbinary._word_rows(lines)
    workers, n_lines, words_per_line = words.shape
    chunks = gbinary._line_chunks(n_lines, words_per_line)
    fast = workers <= limit
    scratch = gbinary._scratch(per_slot, chunks, words_per_line)
    if fast:  # the kernel's slot-major lines, whole for every chunk (a view, never a copy)
        slot_scratch = np.empty(scratch.size, dtype=np.uint64)
    for chunk in chunks:
        size = (chunk.stop - chunk.start) * words_per_line
        digits = scratch[:, :size].reshape(per_slot, -1, words_per_line)
        if fast:
            slots = slot_scratch[:per_slot * size].reshape(-1, per_slot, words_per_line)
            _fast_sums(words, chunk.start, slots, streaming=False)
            gbinary._swap_lines(slots, digits)
            bits, saturated = workers.bit_length() + 1, None
        else:
            planes, saturated = _saturating_sums(list(gbinary._chunk_rows(words, chunk)), limit,
                                                 counter_bits)
            _digit_lines(planes, digits.reshape(per_slot, -1))
            bits = counter_bits + 1
        yield chunk, digits, bits, saturated


def _fast_sums(words, first_line, out, *, streaming):
    """The sums that cannot saturate of ``(workers, n_lines, words_per_line)`` words, from
    line ``first_line`` on, as the slots' ``SUMS`` lines ``out``: ``(lines, k,
    words_per_line)`` ``uint64``, written with streaming stores where the caller reads them
    later (``streaming``), not at once."""
    workers, n_lines, per_line = words.shape
    # The kernel does not check its bounds: these hold by construction, and must.
    if not (0 < workers <= MAX_WORKERS_LIMIT and out.shape[0] <= n_lines - first_line
            and 0 < out.shape[1] <= (COUNTER_BITS_LIMIT + 2) // 2 and out.shape[2] == per_line
            and out.dtype == np.uint64 and out.flags.c_contiguous):
        raise ValueError(f"cannot sum lines {first_line}..+{out.shape[0]} of {words.shape} words "
                         f"into {out.shape} {out.dtype} readout lines")
    _kernels().ternary_sum_lines(words.reshape(workers, -1), first_line * per_line, out,
                                 streaming)


def _check_workers(lines, max_workers, counter_bits):
    lines, line_bits = _lines.check_lines(lines, ndim=3)
    check_max_workers(max_workers)
    counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
    return lines, line_bits, counter_bits


def _lane_mask(mask):
    """A mask at the even bits of ``(n, words)`` ``uint64`` as booleans, one per lane."""
    return np.unpackbits(mask.view(np.uint8), axis=-1, bitorder="little")[..., ::2].view(bool)


def aggregate(lines, *, max_workers, counter_bits=None, return_flags=False):
    """Sum the ternary values per lane over workers, saturating, in worker order.

    ``lines`` is ``(workers, n_lines, line_bytes)`` ``uint8``. An invalid code counts as 0.
    Sums saturate in ``[-limit, +limit]`` with ``limit = max_workers`` (or
    ``2**counter_bits - 1`` for a narrower counter). Saturation is applied after each
    worker's line, as the hardware folds lines in arrival order: with mixed signs that can
    differ from clipping the total.

    Returns ``int8`` sums ``(n_lines, line_bits // 2)``; with ``return_flags=True`` also a
    dict of boolean masks: ``"saturated"`` per lane, ``"invalid"`` per worker and lane.
    These are the sums of :func:`aggregate_planes`, unpacked to a byte per lane.
    """
    lines, line_bits, counter_bits = _check_workers(lines, max_workers, counter_bits)
    workers, n_lines, nbytes = lines.shape
    sums = np.zeros((n_lines, line_bits // 2), dtype=np.int8)
    saturated = np.zeros((n_lines, line_bits // 2), dtype=bool)
    if workers:
        for chunk, digits, bits, over in _sum_chunks(lines, max_workers, counter_bits):
            _digits_to_lanes(digits.reshape(len(digits), -1), bits, sums[chunk].reshape(-1))
            if return_flags and over is not None:
                saturated[chunk] = _lane_mask(over.reshape(-1, nbytes // 8))
    if return_flags:
        return sums, {"saturated": saturated, "invalid": invalid_lanes(lines)}
    return sums


def _digits_to_lanes(digits, bits, out):
    """The low ``bits`` bits of sums held as 2-bit digit lines ``(k, words)`` to ``int8`` lanes
    (two's complement, bit ``bits - 1`` the sign).

    Bit ``2j`` of every sum sits at the even bits of ``digits[j]`` and bit ``2j + 1`` at the
    odd bits. Each bit becomes a dense 1-bit plane of the first half of the words (lanes at the
    even bits) and the second half (lanes at the odd bits), so one unpack per plane serves two
    words; the bytes then come out in pairs, split apart as 16-bit values.
    """
    half = digits.shape[1] // 2  # lines are whole numbers of 16-byte pairs of words
    dense = np.empty((bits, half), dtype=np.uint64)
    moved = np.empty(half, dtype=np.uint64)
    for k, row in enumerate(dense):
        first, second = digits[k // 2, :half], digits[k // 2, half:]
        if k % 2 == 0:  # first half's even bits, second half's even bits moved to the odd bits
            np.left_shift(second, _ONE, moved)
            _merge_digits(first, moved, row)
        else:  # first half's odd bits moved to the even bits, second half's odd bits
            np.right_shift(first, _ONE, moved)
            _merge_digits(moved, second, row)
    pairs = np.empty(64 * half, dtype=np.uint8)
    _lines.bit_planes_to_bytes(dense.view(np.uint8).reshape(bits, -1), pairs, signed=True)
    pairs = pairs.view("<u2")
    lanes = out.view(np.uint8)
    np.copyto(lanes[:32 * half], pairs, casting="unsafe")  # the low byte: first half
    pairs >>= np.uint16(8)
    np.copyto(lanes[32 * half:], pairs, casting="unsafe")


def aggregate_planes(lines, *, max_workers, counter_bits=None, return_saturated=False, out=None):
    """The sums of :func:`aggregate` as the device reads them out: ``SUMS`` lines, never unpacked.

    Same arguments and rules as :func:`aggregate`. Returns ``uint8``
    ``(n_lines, ceil((counter_bits + 1) / 2), line_bytes)``: entry ``[j, k]`` is a line
    holding bits ``2k`` and ``2k + 1`` of every sum of line ``j`` (two's complement,
    ``counter_bits + 1`` bits, the sign repeated beyond), lane ``t`` at bits ``2t`` and
    ``2t + 1``. That is each slot's ``SUMS`` readout, so ``.reshape(-1, line_bytes)`` gives
    the readout lines, and :func:`readout_planes` derives the ``GATED`` readout from it.
    With ``return_saturated=True`` also the boolean mask ``(n_lines, line_bits // 2)`` of the
    lanes that saturated. ``out``, a C-contiguous ``uint8`` array of that shape, receives the
    lines in place of a new array.
    """
    lines, line_bits, counter_bits = _check_workers(lines, max_workers, counter_bits)
    workers, n_lines, nbytes = lines.shape
    per_slot = readout_lines_per_slot(Readout.SUMS, counter_bits=counter_bits)
    shape = (n_lines, per_slot, nbytes)
    if out is None:  # every line is written when any worker contributes: no zeros first
        out = (np.empty if workers else np.zeros)(shape, dtype=np.uint8)
    elif (not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != shape
          or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous uint8 numpy.ndarray of shape {shape}, "
                         f"not {out!r:.60}")
    elif not workers:
        out[...] = 0
    saturated = np.zeros((n_lines, line_bits // 2), dtype=bool) if return_saturated else None
    if workers and workers <= sum_limit(max_workers, counter_bits):  # no sum can saturate
        _fast_sums(gbinary._word_rows(lines), 0, out.view(np.uint64), streaming=True)
    elif workers:
        rows = out.view(np.uint64)
        for chunk, digits, _, over in _sum_chunks(lines, max_workers, counter_bits):
            gbinary._swap_lines(digits, rows[chunk])  # one copy into the slots' lines
            if saturated is not None and over is not None:
                saturated[chunk] = _lane_mask(over.reshape(-1, nbytes // 8))
    return (out, saturated) if return_saturated else out


def _digit_lines(planes, out):
    """Lines of 2-bit digits from two's complement planes at the even bits: ``out[k]`` gets
    plane ``2k`` at the even bits and plane ``2k + 1`` at the odd bits, planes past the top
    repeating the sign."""
    for k, line in enumerate(out):
        np.left_shift(planes[min(2 * k + 1, len(planes) - 1)], _ONE, out=line)
        _merge_digits(planes[min(2 * k, len(planes) - 1)], line, line)


def _check_sums(sums):
    return gbinary._check_values(sums, name="sums", low=-128, high=127)


def _gated(sums, threshold):
    threshold = max(threshold, 1)  # |S| >= 0 passes everything, and sign(0) is 0 anyway
    if threshold > 128:  # beyond any sum's magnitude
        return np.zeros(sums.shape, dtype=np.int8)
    # Python integers compare exactly with any integer dtype (no wrap-around, no widening).
    positive = sums >= threshold
    negative = sums <= -threshold
    return positive.view(np.int8) - negative.view(np.int8)


def gate(sums, *, gate):
    """``sign(S)`` where ``|S| >= gate``, else 0; ``int8`` of the same shape.

    ``sums`` is the output of :func:`aggregate` (``int8``, or any integer array with values
    from -128 to 127). ``gate`` is the GATE register: an integer from 0 to 255 (0 and 1
    both pass every non-zero sum).
    """
    return _gated(_check_sums(sums), check_int("gate", gate, low=0, high=GATE_MAX))


def readout(sums, *, readout, gate, counter_bits):
    """The exact readout lines a complete slot returns, slot after slot.

    Every line keeps lane ``t`` at bits ``2t`` and ``2t + 1``, where its code arrives:

    - ``GATED``, 1 line: the 2-bit code of the gated value (``sign(S)`` where
      ``|S| >= gate``, else 0).
    - ``SUMS``, ``ceil((counter_bits + 1) / 2)`` lines: ``S`` in two's complement with
      ``counter_bits + 1`` bits; line ``k`` holds bit ``2k`` of lane ``t``'s sum at line bit
      ``2t`` and bit ``2k + 1`` at line bit ``2t + 1``. When ``counter_bits + 1`` is odd, the
      last line's bit ``2t + 1`` repeats the sign bit (sign extension).

    ``sums`` is ``(n_slots, line_bits // 2)`` of any integer dtype (``int8`` from
    :func:`aggregate`) within ``+-(2**counter_bits - 1)``; returns
    ``(n_slots * k, line_bits // 8)`` ``uint8`` where ``k`` lines make one slot's readout
    (:func:`~neuron_fabric.golden.formats.readout_lines_per_slot`).
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
        gated = _gated(sums, check_int("gate", gate, low=0, high=GATE_MAX))
        return _lines.pack_lanes(gated, lane_bits=LANE_BITS)
    planes = _lines.pack_planes(sums, lane_bits=LANE_BITS,
                                planes=readout_lines_per_slot(readout, counter_bits=counter_bits))
    return planes.reshape(-1, _lines.line_bytes(line_bits))


def readout_planes(planes, *, readout, gate):
    """The readout lines of complete slots, from sums held as ``SUMS`` lines, bit-sliced.

    ``planes`` is ``(n_slots, k, line_bytes)`` ``uint8`` as :func:`aggregate_planes`
    returns it (``k = ceil((counter_bits + 1) / 2)``). Gives exactly what :func:`readout`
    gives for the same sums, without a byte per lane: ``GATED`` compares every sum with
    ``+-gate`` on the planes, 32 lanes an operation, and ``SUMS`` is the lines themselves.
    """
    check_array(planes, name="planes", dtype=np.uint8, ndim=3)
    readout = _check_readout(readout)
    n_slots, per_slot, nbytes = planes.shape
    _lines.check_line_bits(8 * nbytes)
    check_int("lines per slot (planes.shape[1])", per_slot, low=1, high=(COUNTER_BITS_LIMIT + 2) // 2)
    gate = check_int("gate", gate, low=0, high=GATE_MAX)
    if readout is Readout.SUMS:
        return planes.reshape(-1, nbytes).copy()
    digits = np.empty((per_slot, n_slots, nbytes // 8), dtype=np.uint64)  # line-major
    gbinary._swap_lines(np.ascontiguousarray(planes).view(np.uint64), digits)
    bits = [plane for line in digits for plane in (line, line >> _ONE)]  # at the even bits
    sign, low = bits[-1], bits[:-1]  # two's complement: the top bit has weight -2**len(low)
    threshold = max(gate, 1)
    # S >= g: sign clear and the low bits >= g. S <= -g: sign set and the low bits, which
    # are S + 2**len(low), at most 2**len(low) - g.
    positive = ~sign & gbinary._greater(low, threshold - 1)
    top = (1 << len(low)) - threshold
    negative = sign & ~gbinary._greater(low, top) if top >= 0 else np.zeros_like(sign)
    positive |= negative
    positive &= _EVEN
    negative &= _EVEN
    negative <<= _ONE
    positive |= negative  # the code: non-zero at the even bit, negative at the odd bit
    return positive.view(np.uint8).reshape(n_slots, nbytes)


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
        if (values == INVALID_VALUE).any():
            raise ValueError(f"lines hold an invalid ternary code ({INVALID_CODE:#04b}), which no "
                             "readout produces")
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
