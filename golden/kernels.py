"""Compiled loops for the golden model's two hot paths NumPy cannot run at memory speed.

A NumPy call makes one pass over its arrays per operation. The G-Ternary sum of 8 workers
takes about 75 bitwise operations a word (two tallies a lane, then a subtraction), so even
on chunks held in the L2 cache it ran at a third of the speed of reading the workers' lines;
the G-Ternary encoder's compare and pack took five passes a chunk. The loops here do the
same arithmetic with Numba, every step of a block of words while it is in the L1 cache, and
the sum writes its lines with streaming stores: it runs at about the speed of a copy of its
input, the encoder's pass at the speed of reading the gradient.

:func:`ternary_sum_lines` is the bit-sliced sum of :mod:`.gternary` on ``uint64`` words of
32 lanes: full adders count the workers' votes into bit-planes, and a ripple of borrows
turns the tallies into the two's complement sums of the ``SUMS`` readout.
:func:`ternary_codes` compares and packs. The NumPy functions check every argument; the
kernels trust theirs, and Numba does not check array bounds.
"""

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["ternary_sum_lines", "ternary_codes"]

_EVEN = np.uint64(0x5555_5555_5555_5555)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)

# Words of each worker a block: the block's rows, tallies and sums (about 15 arrays of
# 8 KiB) stay in the L1 and L2 caches (256 to 2,048 words measured alike).
_BLOCK_WORDS = 1024
# Bit-planes of a sum: a count of up to 127 workers (the widest counter) and its sign.
_PLANES = 8

_jit = numba.njit(cache=True, nogil=True)
_inline = numba.njit(cache=True, inline="always")


@_inline
def _full_adder(a, b, c):
    """Sum and carry of three bit-planes."""
    partial = a ^ b
    return partial ^ c, (a & b) | (partial & c)


@_inline
def _votes(word):
    """A worker's word as two votes a lane: its code's low bit (+1 or -1) at the even bit,
    low AND high (-1) at the odd bit.

    Over workers the even bits count ``N = P + M`` and the odd bits ``M``. An invalid code
    (``10``) has its low bit clear and counts in neither, so the sum ``N - 2M`` needs no
    correction. Three operations: no form of two keeps the lanes apart and tells a -1 from
    an invalid code.
    """
    return word & ((word << _ONE) | _EVEN)


@_jit
def _count_eight(rows, tally, n):
    """Count the votes of the eight ``rows`` into the four planes ``tally``: a carry-save
    tree of four full adders and three half adders, each word's tree in registers."""
    r0, r1, r2, r3, r4, r5, r6, r7 = rows
    t0, t1, t2, t3 = tally[0], tally[1], tally[2], tally[3]
    for j in range(n):
        s0, c0 = _full_adder(_votes(r0[j]), _votes(r1[j]), _votes(r2[j]))
        s1, c1 = _full_adder(_votes(r3[j]), _votes(r4[j]), _votes(r5[j]))
        s2, c2 = _full_adder(s0, s1, _votes(r6[j]))
        last = _votes(r7[j])
        t0[j] = s2 ^ last
        twos = s2 & last
        s3, c3 = _full_adder(c0, c1, c2)
        t1[j] = s3 ^ twos
        fours = s3 & twos
        t2[j] = c3 ^ fours
        t3[j] = c3 & fours


@_inline
def _full_subtractor(a, b, borrow):
    """Difference and borrow out of ``a - b - borrow``, bit-planes."""
    partial = a ^ b
    return partial ^ borrow, (~a & b) | (~partial & borrow)


@_jit
def _add_tally(total, tally, n):
    """``total += tally``: eight planes plus four, a ripple of carries."""
    for j in range(n):
        carry = _ZERO
        for k in range(_PLANES):
            total[k, j], carry = _full_adder(total[k, j], tally[k, j] if k < 4 else _ZERO, carry)


@_jit
def _subtract_minus(planes, n):
    """Tallies ``N`` (even bits) and ``M`` (odd bits) to the sums ``N - 2M``, in place: eight
    planes of two's complement at the even bits.

    Bit ``k`` of the sum is ``N_k - M_{k-1}`` less the borrow. Eight planes hold any count
    of at most 127 workers, and past the tallies' top bit the ripple repeats the sign.
    """
    for j in range(n):
        borrow, minus = _ZERO, _ZERO  # no borrow into bit 0, and M_{-1} = 0
        for k in range(_PLANES):
            both = planes[k, j]
            planes[k, j], borrow = _full_subtractor(both & _EVEN, minus, borrow)
            minus = (both >> _ONE) & _EVEN


@intrinsic
def _stream(typingctx, array, index, value):
    """``array[index] = value`` (a 1-d array) as a streaming store, which writes memory
    without first reading the line it lands in: for output lines that nothing reads while
    they could still be in the cache, that reading is a third of the sum's memory traffic.
    An x86 processor combines a cache line's eight streaming stores into one write."""

    def codegen(context, builder, signature, args):
        array_type, _, value_type = signature.args
        data, at, item = args
        view = context.make_array(array_type)(context, builder, data)
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [at], wraparound=False)
        item = context.cast(builder, item, value_type, array_type.dtype)
        store = builder.store(item, pointer)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return numba.types.void(array, index, value), codegen


@intrinsic
def _fence(typingctx):
    """Order every store before it, streaming ones included, before any memory access
    after it (a streaming store is not ordered with other stores until a fence)."""

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return numba.types.void(), codegen


@_jit
def ternary_sum_lines(words, first, out, streaming):
    """The G-Ternary sums of every worker's words, as ``SUMS`` readout lines.

    ``words`` is ``(workers, n_words)`` ``uint64``, each row a worker's lines end to end;
    the sums start at word ``first``, and ``out`` says how many lines: it is
    ``(n_lines, k, words_per_line)`` ``uint64``, and line ``[i, d]`` gets bit ``2d`` of
    every sum of line ``i`` at the lane's even bit and bit ``2d + 1`` at its odd bit, the
    sign repeated above the sum's top bit. The sums must not saturate (no more workers than
    the limit, at most 127). ``out`` must be C-contiguous; with ``streaming`` it is written
    with streaming stores (:func:`_stream`): for lines returned to the caller, not for scratch
    that is read at once.
    """
    workers = words.shape[0]
    n_lines, per_slot, per_line = out.shape
    block_lines = max(1, _BLOCK_WORDS // per_line)
    size = block_lines * per_line
    planes = np.zeros((_PLANES, size), np.uint64)
    tally = np.empty((4, size), np.uint64)
    absent = np.zeros(size, np.uint64)  # the rows past the last worker of a group of eight
    flat_out = out.reshape(-1)  # C-contiguous
    for first_line in range(0, n_lines, block_lines):
        lines = min(block_lines, n_lines - first_line)
        n = lines * per_line
        start = first + first_line * per_line
        for group in range(0, workers, 8):
            rows = _group_rows(words, group, start, n, absent)
            if group == 0:
                _count_eight(rows, planes, n)
                planes[4:, :n] = 0
            else:
                _count_eight(rows, tally, n)
                _add_tally(planes, tally, n)
        _subtract_minus(planes, n)
        for i in range(lines):  # the slots' lines in the order they lie in memory
            line = out[first_line + i]
            for d in range(per_slot):
                low, high = planes[2 * d], planes[2 * d + 1]
                at = ((first_line + i) * per_slot + d) * per_line  # line[d] in flat_out
                for j in range(per_line):
                    digits = low[i * per_line + j] | (high[i * per_line + j] << _ONE)
                    if streaming:
                        _stream(flat_out, at + j, digits)
                    else:
                        line[d, j] = digits
    if streaming:
        _fence()


@_inline
def _row(words, worker, start, n, absent):
    """Worker ``worker``'s ``n`` words from ``start``, or zeros (no votes) past the last."""
    if worker < words.shape[0]:
        return words[worker, start:start + n]
    return absent[:n]


@_inline
def _group_rows(words, first, start, n, absent):
    """The rows of the eight workers from ``first`` on (see :func:`_row`)."""
    return (_row(words, first, start, n, absent), _row(words, first + 1, start, n, absent),
            _row(words, first + 2, start, n, absent), _row(words, first + 3, start, n, absent),
            _row(words, first + 4, start, n, absent), _row(words, first + 5, start, n, absent),
            _row(words, first + 6, start, n, absent), _row(words, first + 7, start, n, absent))


@_inline
def _ternary_code(value, tau, draw):
    """The 2-bit code of one element: ``01`` (+1) where ``value >= tau``, ``11`` (-1) where
    ``value <= -tau``, else ``00``; an element whose ``draw`` is not below ``|value|`` is 0."""
    keep = draw < abs(value)
    plus = np.uint64((value >= tau) & keep)
    minus = np.uint64((value <= -tau) & keep)
    return (plus | minus) | (minus << _ONE)


@_jit
def ternary_codes(values, tau, draws, out):
    """G-Ternary codes of ``values`` (float32 or float64), packed: element ``32w + t`` at bits
    ``2t`` and ``2t + 1`` of ``out[w]``, the layout of :func:`.lines.pack_lanes` on the
    little-endian ``uint64`` words of the lines.

    ``tau`` is the threshold in the values' own type and must be above 0: a threshold of
    0 keeps every non-zero sign, which the smallest positive value gives exactly. ``draws``
    are the stochastic mode's scaled draws, one per element, or None. Writes the first
    ``ceil(values.size / 32)`` words of ``out``, the lanes past the last element as ``00``.
    """
    n = values.size
    whole = n // 32
    for w in range(whole):
        word = _ZERO
        for t in range(32):
            draw = draws[32 * w + t] if draws is not None else -np.inf
            word |= _ternary_code(values[32 * w + t], tau, draw) << np.uint64(2 * t)
        out[w] = word
    if n > 32 * whole:
        word = _ZERO
        for t in range(n - 32 * whole):
            draw = draws[32 * whole + t] if draws is not None else -np.inf
            word |= _ternary_code(values[32 * whole + t], tau, draw) << np.uint64(2 * t)
        out[whole] = word
