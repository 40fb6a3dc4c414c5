"""The golden model's lane arithmetic in PyTorch, on the tensors' own device, bit for bit.

:mod:`neuron_fabric.golden` is the reference: NumPy arrays on the host. The DDP hooks need
the same arithmetic on a bucket wherever it lives (a CUDA bucket under NCCL, a CPU bucket
under gloo) without a round trip through the host. This module is that twin: every function
takes and returns ``torch`` tensors, computes on their device with tensor operations (no
Python loop over elements or lanes, no copy to the host) and returns exactly the values and
lines its golden namesake returns for the same input, refusing what the golden model refuses
with the same exception and rule. On CPU tensors, where torch has no population count, no
bit pack and no fused loop, compiled loops (NumPy's, the golden model's) run in the tensors'
own memory instead (:data:`CPU_KERNELS`); every other device runs the torch arithmetic.

- G-Binary (:mod:`~neuron_fabric.golden.gbinary`): :func:`gbinary_encode`,
  :func:`gbinary_aggregate_planes`, :func:`gbinary_readout_planes`,
  :func:`gbinary_parse_readout`, :func:`gbinary_decode`;
- G-Ternary (:mod:`~neuron_fabric.golden.gternary`): :func:`gternary_encode`,
  :func:`gternary_aggregate_planes`, :func:`gternary_readout_planes`,
  :func:`gternary_parse_readout`, :func:`gternary_decode`.

Lines are ``uint8`` tensors laid out as the golden model's arrays (:mod:`.golden.lines`);
the bit-sliced arithmetic views them as ``int64`` words, whose bit order within a word is
the lanes' order on a little-endian device. Every shift that must not repeat a sign bit is
masked, so signed words behave as the golden model's ``uint64`` ones.

Random draws: the golden G-Ternary encoder draws ``rng.random(size, dtype=float32)`` from a
NumPy generator. The twin takes those draws as a tensor (``draws``) instead of a generator:
given the golden model's bits it gives the golden model's codes. Where the draws must be
made on the device, :func:`counter_words` and :func:`uniform_draws` define them from a seed
with a counter-based hash that NumPy computes too (:func:`counter_words_numpy`).

Besides the golden model's functions, what the hooks need: :func:`scaled_values_into`, the
decode of a readout straight into a bucket with each parameter's scale; :func:`range_sums`,
per-range population counts behind the hooks' agreement statistic; and :class:`Workspace`,
scratch kept from call to call, which the functions on the hooks' path take (with ``out=``
for their results) so that a step allocates nothing large.
"""

import math

import numpy as np
import torch

from ..golden import gternary as _gternary
from ..golden import lines as _lines
from ..golden.formats import (COUNTER_BITS_LIMIT, GATE_MAX, MAX_WORKERS_LIMIT, Readout, Route,
                              check_counter_bits, check_max_workers, check_readout,
                              readout_lines_per_slot, sum_limit)
from ..golden.validate import check_int

__all__ = ["GRAD_TYPES", "Workspace", "gbinary_encode", "gbinary_aggregate_planes",
           "gbinary_readout_planes",
           "gbinary_parse_readout", "gbinary_decode",
           "gternary_threshold", "gternary_tau", "gternary_encode_lines", "gternary_encode",
           "gternary_aggregate_planes", "gternary_readout_planes",
           "gternary_parse_readout", "gternary_decode",
           "counter_words", "counter_words_numpy", "uniform_draws", "uniform_draws_numpy",
           "pack_bits", "scaled_values_into", "range_sums", "word_range_sums"]

_I64 = torch.int64
# Bit patterns as signed 64-bit integers (torch has no unsigned 64-bit arithmetic).
_EVEN = 0x5555_5555_5555_5555
_ODD = 0xAAAA_AAAA_AAAA_AAAA - (1 << 64)
_ONES = -1
# Eight bytes of 0 or 1 times this put bit i of the byte at bit 56 + i: the packed byte is
# the product's top byte, with no carry into it (each bit lands on one place).
_PACK_MAGIC = 0x0102_0408_1020_4080
_BYTE_LOW_BITS = 0x0101_0101_0101_0101
# Eight bytes of 2-bit codes times this put byte i's code at bit 24 + 2i (i < 4) and at
# bit 56 + 2 (i - 4) (i >= 4): 2**24 + 2**18 + 2**12 + 2**6.
_CODE_MAGIC = (1 << 24) + (1 << 18) + (1 << 12) + (1 << 6)
_LANE_BITS_TERNARY = _gternary.LANE_BITS


#: On the CPU the twin runs compiled loops where torch has none, in the tensors' own
#: memory: NumPy's ``bitwise_count`` and ``packbits`` for population counts and the G-Binary
#: encode, the golden model's compiled loops for the G-Ternary codes and fold. Torch
#: arithmetic took 7 times as long for a count, 2.6 to 2.9 times for a chunk's G-Binary
#: encode, 3.5 to 4 times for G-Ternary codes and 3.2 times for a G-Ternary fold. False
#: keeps the torch arithmetic that every other device runs, on the CPU too (the tests check
#: both).
CPU_KERNELS = True


def _on_cpu_kernels(tensor):
    """Whether ``tensor`` is worked on by the CPU's compiled loops."""
    return CPU_KERNELS and tensor.device.type == "cpu"


def _signed(value):
    """An unsigned 64-bit constant as the signed integer with the same bits."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


def _shr(words, shift):
    """Logical right shift of ``int64`` words (torch's is arithmetic)."""
    return (words >> shift) & ((1 << (64 - shift)) - 1)


def _words(lines):
    """``uint8`` lines ``(..., line_bytes)`` as ``int64`` words ``(..., line_bytes // 8)``: a
    view where every line lies whole at an 8-byte boundary (a slice of the lines of every
    worker, say), else a copy."""
    aligned = (lines.stride(-1) == 1 and lines.storage_offset() % 8 == 0
               and all(stride % 8 == 0 for stride in lines.stride()[:-1]))
    return (lines if aligned else lines.contiguous()).view(_I64)


# ----------------------------------------------------------------------------- checks

def _check_tensor(value, *, name, dtype, ndim):
    if not isinstance(value, torch.Tensor) or value.dtype != dtype or value.dim() != ndim:
        got = (f"a {value.dim()}-D {value.dtype} tensor" if isinstance(value, torch.Tensor)
               else type(value).__name__)
        raise TypeError(f"{name} must be a {ndim}-D torch.Tensor of {dtype}, not {got}")
    return value


#: Gradient types the twin takes: those with a NumPy counterpart, which the golden model takes.
GRAD_TYPES = (torch.float16, torch.float32, torch.float64)


def _check_grad(grad, name="grad"):
    """A floating-point tensor (float16, float32 or float64), flattened; NaN is checked by
    the callers, which read the data for their own purposes first."""
    if not isinstance(grad, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, not {type(grad).__name__}")
    if not grad.is_floating_point():
        raise TypeError(f"{name} must be a floating-point array, not dtype {grad.dtype}")
    if grad.dtype not in GRAD_TYPES:
        raise TypeError(f"{name} must be float16, float32 or float64 (a dtype the golden model "
                        f"has), not {grad.dtype}")
    return grad.reshape(-1)


def _refuse_nan(flat, name="grad"):
    where = int(torch.nonzero(torch.isnan(flat))[0])
    raise ValueError(
        f"{name} must not contain NaN (first at flat index {where}); "
        "a NaN gradient is a fault for the health monitor, not a value to encode")


def _check_lines(lines, *, name="lines", line_bits=None, ndim=2):
    if not isinstance(lines, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of uint8, not {type(lines).__name__}")
    if lines.dtype != torch.uint8:
        raise TypeError(f"{name} must have dtype uint8, not {lines.dtype}")
    if lines.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} axes, not shape {tuple(lines.shape)}")
    found = lines.shape[-1] * 8
    if line_bits is None:
        if found not in _lines.LINE_BITS_CHOICES:
            raise ValueError(
                f"{name} must have a last axis of {[b // 8 for b in _lines.LINE_BITS_CHOICES]} "
                f"bytes (one line), not {lines.shape[-1]}")
        line_bits = found
    else:
        line_bits = _lines.check_line_bits(line_bits)
        if found != line_bits:
            raise ValueError(f"{name} must have {line_bits // 8} bytes per line "
                             f"(line_bits={line_bits}), not {lines.shape[-1]}")
    return lines.contiguous(), line_bits


def _lines_out(out, shape, device):
    """A new ``uint8`` tensor of ``shape`` on ``device``, or ``out`` checked to be one that
    is contiguous: the functions write into it through flat views, so a strided one would
    be left unwritten."""
    if out is None:
        return torch.empty(shape, dtype=torch.uint8, device=device)
    if (not isinstance(out, torch.Tensor) or out.dtype != torch.uint8
            or tuple(out.shape) != tuple(shape) or out.device != device
            or not out.is_contiguous()):
        got = (f"a {'contiguous' if out.is_contiguous() else 'strided'} {out.dtype} tensor of "
               f"shape {tuple(out.shape)} on {out.device}" if isinstance(out, torch.Tensor)
               else type(out).__name__)
        raise ValueError(f"out must be a contiguous uint8 tensor of shape {tuple(shape)} on "
                         f"{device}, not {got}")
    return out


def _check_readout_lines(lines, *, readout, counter_bits):
    per_slot = readout_lines_per_slot(readout, counter_bits=counter_bits)
    if lines.shape[0] % per_slot:
        raise ValueError(
            f"lines must hold whole {Readout(readout).name} readouts of {per_slot} lines each, "
            f"not {lines.shape[0]} lines")
    return lines.reshape(lines.shape[0] // per_slot, per_slot, lines.shape[1])


def _check_workers(lines, max_workers, counter_bits, *, limit_rows=None):
    """Every worker's lines ``(workers, n_lines, line_bytes)``, as given: the folds read their
    words through :func:`_words`, with no copy of a slice of lines."""
    _, line_bits = _check_lines(lines, ndim=3)
    check_max_workers(max_workers)
    counter_bits = check_counter_bits(counter_bits, max_workers=max_workers)
    if limit_rows is not None and lines.shape[0] > limit_rows:
        raise ValueError(f"lines must hold at most {limit_rows} workers' contributions, "
                         f"not {lines.shape[0]}")
    return lines, line_bits, counter_bits


# ----------------------------------------------------------------------------- scratch

class Workspace:
    """Scratch tensors kept from call to call.

    :meth:`take` hands out a view of a buffer held under a name, grown when it is too small,
    so that a caller that runs the same shapes step after step (the hooks, a chunk of lanes
    at a time) allocates nothing after the first step: fresh memory for every temporary is
    what made the kernel's time exceed the arithmetic's. A view is valid until the next
    :meth:`take` of its name; a workspace serves one thread.
    """

    def __init__(self):
        self._held = {}

    def take(self, name, shape, dtype, device):
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        numel = math.prod(shape)
        key = (name, dtype, str(device))
        held = self._held.get(key)
        if held is None or held.numel() < numel:
            held = self._held[key] = torch.empty(max(numel, 1), dtype=dtype, device=device)
        return held[:numel].view(shape)


def _workspace(workspace):
    return Workspace() if workspace is None else workspace


# ----------------------------------------------------------------------------- bits

def pack_bits(mask, out=None, *, workspace=None):
    """Pack a flat contiguous ``bool`` tensor into bytes, element ``j`` at bit ``j % 8`` of
    byte ``j // 8`` (NumPy's ``packbits(..., bitorder="little")``). The last byte's missing
    bits are 0. Returns ``uint8`` of ``ceil(size / 8)`` bytes (into ``out`` if given)."""
    size = mask.numel()
    n_bytes = -(-size // 8)
    if out is None:
        out = torch.empty(n_bytes, dtype=torch.uint8, device=mask.device)
    whole = size // 8
    if whole:
        words = _workspace(workspace).take("pack", whole, _I64, mask.device)
        torch.mul(mask[:8 * whole].view(torch.uint8).view(_I64), _PACK_MAGIC, out=words)
        out[:whole].copy_(words.view(torch.uint8).view(whole, 8)[:, 7])
    if size > 8 * whole:
        tail = torch.zeros(8, dtype=torch.uint8, device=mask.device)
        tail[:size - 8 * whole] = mask[8 * whole:].to(torch.uint8)
        out[whole:whole + 1].copy_((tail.view(_I64) * _PACK_MAGIC).view(torch.uint8)[7:8])
    return out


def _popcount_(words, tmp):
    """Set bits of each ``int64`` word, in place. ``tmp`` is scratch of the same shape.

    torch has no population count: on the CPU NumPy's ``bitwise_count`` counts in the
    tensor's memory with the processor's instruction; elsewhere :func:`_popcount_swar_`
    counts with shifts and masks."""
    if _on_cpu_kernels(words):
        counts = words.numpy().view(np.uint64)
        np.bitwise_count(counts, out=counts)
        return words
    return _popcount_swar_(words, tmp)


def _popcount_swar_(words, tmp):
    """:func:`_popcount_` with shifts, masks and one multiplication, on any device."""
    torch.bitwise_right_shift(words, 1, out=tmp)
    tmp &= _EVEN
    words -= tmp
    torch.bitwise_right_shift(words, 2, out=tmp)
    tmp &= 0x3333_3333_3333_3333
    words &= 0x3333_3333_3333_3333
    words += tmp
    torch.bitwise_right_shift(words, 4, out=tmp)  # the fields are small: no sign to repeat
    words += tmp
    words &= 0x0F0F_0F0F_0F0F_0F0F
    words *= 0x0101_0101_0101_0101
    words >>= 56
    return words


def _popcount(words):
    return _popcount_(words.clone(), torch.empty_like(words))


def range_sums(streams, weights, starts, stops, *, workspace=None, in_place=False):
    """``sum_s weights[s] * popcount(streams[s] bits [starts[r], stops[r]))`` per range ``r``.

    ``streams`` is ``(S, n_words)`` ``int64`` (bit ``i`` of the stream at bit ``i % 64`` of
    word ``i // 64``), ``weights`` ``S`` Python integers, ``starts``/``stops`` bit positions.
    Returns ``int64`` sums, one per range, on the streams' device: exact integers. The
    streams are only read; with ``in_place`` they are counted where they lie, and left as
    counts.
    """
    ws = _workspace(workspace)
    device = streams.device
    n_streams, n_words = streams.shape
    # Taken before the counts below, which may overwrite the streams.
    ends = _range_ends(lambda index: streams[:, index], weights, starts, stops, n_words,
                       device)
    if not n_words:
        return ends
    counts = streams if in_place else ws.take("counts", streams.shape, _I64, device).copy_(streams)
    _popcount_(counts, ws.take("popcount", counts.shape, _I64, device))
    per_word = ws.take("per_word", n_words, _I64, device)
    torch.mul(counts[0], weights[0], out=per_word)
    for s in range(1, n_streams):
        per_word.add_(counts[s], alpha=weights[s])
    return _whole_words(per_word, starts, stops, ends)


def word_range_sums(per_word, words_at, weights, starts, stops):
    """:func:`range_sums` from each word's weighted count ``per_word`` (``int64``, one per
    word of the streams), already summed over the streams; ``words_at(index)`` gives the
    streams' words at an ``int64`` index tensor, ``(S, len(index))``, for the words where a
    range starts or stops inside."""
    ends = _range_ends(words_at, weights, starts, stops, per_word.numel(), per_word.device)
    return _whole_words(per_word, starts, stops, ends) if per_word.numel() else ends


def _range_ends(words_at, weights, starts, stops, n_words, device):
    """Per range, less the weighted bits of its first word before its start, plus those of
    its last word before its stop: the words of both ends gathered and counted at once,
    their masks made on the host (the ends are Python integers)."""
    ends = [int(bit) for bit in starts] + [int(bit) for bit in stops]
    if not n_words or not ends:
        return torch.zeros(len(ends) // 2, dtype=_I64, device=device)
    # An end on a word boundary takes no bit of its word (a stop past the last word included).
    index = torch.tensor([min(bit // 64, n_words - 1) for bit in ends], device=device)
    masks = torch.tensor([_signed((1 << bit % 64) - 1) for bit in ends], device=device)
    words = words_at(index) & masks  # (streams, 2 * ranges)
    weight = torch.tensor(weights, dtype=_I64, device=device)[:, None]
    below = (_popcount(words) * weight).sum(0)
    return below[len(starts):] - below[:len(starts)]


def _whole_words(per_word, starts, stops, total):
    """``total`` plus, per range, ``per_word`` summed over the words from its start's to its
    stop's (exclusive)."""
    # A sum per range (torch's int64 prefix sum does not vectorize, and is slower than these
    # sums).
    for r, (start, stop) in enumerate(zip(starts, stops)):
        a, b = int(start) // 64, int(stop) // 64
        if a < b:
            total[r] += per_word[a:b].sum()
    return total


# ----------------------------------------------------------------------------- random draws

_GAMMA = 0x9E37_79B9_7F4A_7C15
_MIX = (0xBF58_476D_1CE4_E5B9, 0x94D0_49BB_1331_11EB)


def _key(*fields):
    """A 64-bit key from non-negative integers (SplitMix64 over them, in Python integers)."""
    state = 0
    for value in fields:
        state = _mix_int((state + _GAMMA + int(value)) & ((1 << 64) - 1))
    return state


def _mix_int(z):
    z = ((z ^ (z >> 30)) * _MIX[0]) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * _MIX[1]) & ((1 << 64) - 1)
    return z ^ (z >> 31)


def counter_words(key, n_words, *, first=0, device="cpu"):
    """``n_words`` pseudo-random 64-bit words (``int64``) from a ``key`` (a tuple of
    non-negative integers): word ``w`` is SplitMix64's output for the counter
    ``K + (w + 1) * gamma`` with ``K`` hashed from the key. Counter-based, so any device draws
    any word by itself (``first``: the index of the first word drawn), and
    :func:`counter_words_numpy` gives the same bits."""
    base = _key(*key)
    z = torch.arange(first + 1, first + n_words + 1, dtype=_I64, device=device)
    z = z * _signed(_GAMMA) + _signed(base)
    z = (z ^ _shr(z, 30)) * _signed(_MIX[0])
    z = (z ^ _shr(z, 27)) * _signed(_MIX[1])
    return z ^ _shr(z, 31)


def counter_words_numpy(key, n_words):
    """:func:`counter_words` in NumPy (``uint64``), the reference for its wrap-around."""
    with np.errstate(over="ignore"):
        z = (np.arange(1, n_words + 1, dtype=np.uint64) * np.uint64(_GAMMA)
             + np.uint64(_key(*key)))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX[0])
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX[1])
        return z ^ (z >> np.uint64(31))


def uniform_draws(key, count, *, first=0, device="cpu"):
    """``count`` float32 draws in ``[0, 1)`` from ``key``: element ``j`` is the 32-bit half
    ``j % 2`` (low first) of word ``j // 2`` of :func:`counter_words`, shifted right by 8 and
    times ``2**-24``, as NumPy makes a float32 from 32 random bits. ``first`` (even) is the
    index of the first element drawn."""
    if first % 2:
        raise ValueError(f"first must be even (draws start on a whole word), not {first!r}")
    words = counter_words(key, -(-count // 2), first=first // 2, device=device)
    halves = torch.stack([words & 0xFFFF_FFFF, _shr(words, 32)], dim=1).reshape(-1)[:count]
    return (halves >> 8).to(torch.float32) * (2.0 ** -24)


def uniform_draws_numpy(key, count):
    """:func:`uniform_draws` in NumPy."""
    halves = counter_words_numpy(key, -(-count // 2)).view(np.uint32)[:count]
    return (halves >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


# ----------------------------------------------------------------------------- G-Binary

def gbinary_encode(grad, *, line_bits=512, dither=None, out=None, workspace=None,
                   undithered=None, nan_check=True):
    """:func:`neuron_fabric.golden.gbinary.encode` of ``grad``, or, with ``dither``, of
    ``grad * (1 - 2 * d)`` where ``d`` is bit ``j % 8`` of byte ``j // 8`` of ``dither``
    (``uint8``, at least ``ceil(size / 8)`` bytes): a flipped element encodes 1 where it is
    above 0, an element kept where it is below 0, so ``+-0`` still encodes 0.

    Returns ``uint8`` lines ``(ceil(size / line_bits), line_bits // 8)`` on ``grad``'s device
    (into ``out`` if given; temporaries from ``workspace``, a :class:`Workspace`). With a
    dither, ``undithered`` (``uint8``, as many bytes as the lines) receives the lines
    without it, as :func:`~neuron_fabric.golden.gbinary.encode` of ``grad`` gives them.
    Raises ``TypeError`` for a non-floating tensor and ``ValueError`` for NaN or an
    unsupported ``line_bits``; ``nan_check=False`` skips the pass that looks for NaN, for a
    caller that has seen the data finite (a NaN would then encode as 0).
    """
    nbytes = _lines.line_bytes(line_bits)
    flat = _check_grad(grad)
    size = flat.numel()
    n_lines = -(-size // line_bits)
    if nan_check and size and torch.isnan(flat.min()):
        _refuse_nan(flat)
    ws = _workspace(workspace)
    device = flat.device
    out = _lines_out(out, (n_lines, nbytes), device)
    packed = out.view(-1)
    used = -(-size // 8)
    packed[used:] = 0
    if not size:
        return out
    if dither is not None and (not isinstance(dither, torch.Tensor) or dither.dtype != torch.uint8
                               or dither.numel() < used):
        raise ValueError(f"dither must be uint8 bytes holding a bit for each of the "
                         f"{size} elements, not {dither!r:.60}")
    if _on_cpu_kernels(flat):
        _gbinary_pack_numpy(flat.detach().numpy(), packed.numpy(), dither, undithered, ws)
        return out
    # One pass makes every element's sign a byte (-1, 0 or +1: sign(+-0) is 0); the rest
    # works on 8 of those bytes a word. A compare per mask, into bool, is three times slower.
    signs = ws.take("signs", size, flat.dtype, device)
    codes = ws.take("codes", 8 * used, torch.int8, device)
    codes[size:] = 0
    codes[:size].copy_(torch.sign(flat, out=signs))
    words = codes.view(_I64)
    negative = ws.take("negative_words", used, _I64, device)
    torch.bitwise_right_shift(words, 7, out=negative)  # a byte's sign bit to its bit 0
    negative &= _BYTE_LOW_BITS
    negative *= _PACK_MAGIC
    packed[:used].copy_(negative.view(torch.uint8).view(used, 8)[:, 7])
    if undithered is not None:
        undithered.copy_(packed)
    if dither is not None:
        nonzero = ws.take("nonzero_words", used, _I64, device)
        torch.bitwise_and(words, _BYTE_LOW_BITS, out=nonzero)  # -1 and +1 have bit 0 set
        nonzero *= _PACK_MAGIC
        flipped = ws.take("flipped", used, torch.uint8, device)
        flipped.copy_(nonzero.view(torch.uint8).view(used, 8)[:, 7])
        # N ^ (Z & F), Z the non-zero elements: below 0 where kept, above 0 where flipped
        # (N ^ Z is the positive ones; bits past the last element are 0 in both).
        flipped &= dither.reshape(-1)[:used]
        packed[:used] ^= flipped
    return out


def _gbinary_pack_numpy(values, packed, dither, undithered, ws):
    """:func:`gbinary_encode`'s bits on the CPU into ``packed`` (the lines' bytes, the padding
    already 0), as the golden model packs them: a compare into a mask a byte an element,
    then ``packbits``; with a dither, the non-zero elements' bits flipped where it says."""
    mask = ws.take("mask", values.size, torch.bool, "cpu").numpy()
    used = packed[:-(-values.size // 8)]  # the bytes holding the elements
    used[:] = np.packbits(np.less(values, 0, out=mask), bitorder="little")
    if undithered is not None:
        undithered.numpy()[:] = packed
    if dither is not None:
        flipped = np.packbits(np.not_equal(values, 0, out=mask), bitorder="little")
        flipped &= dither.reshape(-1)[:used.size].numpy()
        used ^= flipped


def _count_rows(rows, width, planes=None, workspace=None):
    """Add ``rows`` (``(W, ...)`` ``int64``) bit by bit into ``width`` planes ``(width, ...)``
    (``planes`` if given), least significant first: a ripple of half adders per row, only
    as far as its count can reach, in place."""
    ws = _workspace(workspace)
    shape = rows.shape[1:]
    if planes is None:
        planes = torch.empty((width,) + shape, dtype=_I64, device=rows.device)
    planes.zero_()
    carries = (ws.take("carry_a", shape, _I64, rows.device),
               ws.take("carry_b", shape, _I64, rows.device))
    for index, row in enumerate(rows):
        if index == 0:
            planes[0].copy_(row)
            continue
        carry = row
        for k in range(min(width, (index + 1).bit_length())):
            nxt = carries[k % 2]
            torch.bitwise_and(planes[k], carry, out=nxt)
            planes[k] ^= carry
            carry = nxt
    return planes


def _greater(planes, value, out=None):
    """Mask of the unsigned numbers held as ``planes`` (a list) above the constant ``value``
    (into ``out`` if given)."""
    n = len(planes)
    if out is None:
        out = torch.empty_like(planes[0])
    if value < 0 or value >> n:
        return out.fill_(_ONES if value < 0 else 0)
    addend = (1 << n) - 1 - value
    started = False
    for k, plane in enumerate(planes):
        if addend >> k & 1:
            if started:
                out |= plane
            else:
                out.copy_(plane)
                started = True
        elif started:
            out &= plane
    return out if started else out.zero_()


def _equal(planes, value, out=None):
    if out is None:
        out = torch.empty_like(planes[0])
    if value < 0 or value >> len(planes):
        return out.zero_()
    out.fill_(_ONES)
    for k, plane in enumerate(planes):
        if value >> k & 1:
            out &= plane
        else:
            out &= ~plane
    return out


def gbinary_aggregate_planes(lines, *, max_workers, counter_bits=None, out=None,
                             workspace=None):
    """:func:`neuron_fabric.golden.gbinary.aggregate_planes`: every worker's lines
    ``(workers, n_lines, line_bytes)`` counted per lane, saturating at
    ``2**counter_bits - 1``, as ``uint8`` ``(n_lines, counter_bits, line_bytes)`` bit-planes
    (into ``out`` if given)."""
    lines, _, counter_bits = _check_workers(lines, max_workers, counter_bits, limit_rows=255)
    workers, n_lines, nbytes = lines.shape
    out = _lines_out(out, (n_lines, counter_bits, nbytes), lines.device)
    out.zero_()
    if not workers or not n_lines:
        return out
    ws = _workspace(workspace)
    rows = _words(lines)  # (workers, n_lines, words)
    width = workers.bit_length()
    planes = _count_rows(rows, width, ws.take("planes", (width,) + rows.shape[1:], _I64,
                                               lines.device), ws)
    if width > counter_bits:  # a bit above the counter's saturates every counter plane
        over = ws.take("carry_a", rows.shape[1:], _I64, lines.device)
        over.copy_(planes[counter_bits])
        for plane in planes[counter_bits + 1:]:
            over |= plane
        planes[:counter_bits] |= over
    used = min(width, counter_bits)
    _words(out)[:, :used].copy_(planes[:used].transpose(0, 1))
    return out


def _check_readout(readout, route):
    return check_readout(readout, route=route)


def gbinary_readout_planes(planes, *, readout, num_workers, out=None):
    """:func:`neuron_fabric.golden.gbinary.readout_planes`: the readout lines of complete
    slots from ``uint8`` planes ``(n_slots, counter_bits, line_bytes)`` (into ``out`` if
    given, for ``SIGN`` and ``TERNARY``)."""
    _check_tensor(planes, name="planes", dtype=torch.uint8, ndim=3)
    readout = _check_readout(readout, Route.GBINARY)
    n_slots, counter_bits, nbytes = planes.shape
    line_bits = _lines.check_line_bits(8 * nbytes)
    check_int("counter_bits (planes.shape[1])", counter_bits, low=1, high=COUNTER_BITS_LIMIT)
    num_workers = check_int("num_workers", num_workers, low=1, high=MAX_WORKERS_LIMIT)
    if readout is Readout.COUNTS:
        return planes.reshape(-1, nbytes).clone()
    per_slot = 1 if readout is Readout.SIGN else 2
    out = _lines_out(out, (n_slots * per_slot, nbytes), planes.device)
    words = list(_words(planes).transpose(0, 1))  # counter_bits of (n_slots, words)
    slots = _words(out).view(n_slots, per_slot, nbytes // 8)
    _greater(words, num_workers // 2, out=slots[:, 0])
    if readout is Readout.TERNARY:
        if num_workers % 2:  # with N odd every lane is decided
            slots[:, 1] = _ONES
        else:
            _equal(words, num_workers // 2, out=slots[:, 1])
            slots[:, 1].bitwise_not_()
    return out.view(-1, line_bits // 8)


def _byte_lanes(data, kind):
    """Every byte of ``uint8`` data ``(..., n_bytes)`` as its lanes, looked up in a table of
    the 256 bytes (one gather a byte writes all its lanes): ``"bits"``, 8 lanes of ``uint8``
    0/1; ``"signs"``, 8 lanes of ``int8`` ``1 - 2 * bit``; ``"codes"``, 4 two-bit lanes as
    sign-extended ``int8``."""
    table = _table(kind, data.device)  # a byte's lanes as one integer: one word gathered
    per_byte = 8 if kind != "codes" else 4
    index = data.reshape(-1).to(torch.int32)
    lanes = torch.index_select(table, 0, index).view(torch.uint8 if kind == "bits" else torch.int8)
    return lanes.reshape(*data.shape[:-1], data.shape[-1] * per_byte)


def _bits_of(lines):
    """Every bit of ``uint8`` lines ``(..., n_bytes)`` as ``uint8`` 0/1 ``(..., 8 * n_bytes)``."""
    return _byte_lanes(lines, "bits")


def gbinary_parse_readout(lines, *, readout, line_bits=512, counter_bits=None):
    """:func:`neuron_fabric.golden.gbinary.parse_readout`: lane values per slot."""
    lines, line_bits = _check_lines(lines, line_bits=line_bits)
    readout = _check_readout(readout, Route.GBINARY)
    if readout is Readout.COUNTS:
        if counter_bits is None:
            raise TypeError("counter_bits is required to parse a COUNTS readout")
        counter_bits = check_int("counter_bits", counter_bits, low=1, high=COUNTER_BITS_LIMIT)
        slots = _check_readout_lines(lines, readout=readout, counter_bits=counter_bits)
        bits = _bits_of(slots).to(torch.int32)  # (n_slots, planes, lanes)
        weights = (1 << torch.arange(counter_bits, dtype=torch.int32, device=lines.device))
        return (bits * weights[None, :, None]).sum(1).to(torch.uint8)
    slots = _check_readout_lines(lines, readout=readout, counter_bits=1)
    negative = _bits_of(slots[:, 0])
    if readout is Readout.SIGN:
        return negative
    decided = _bits_of(slots[:, 1])
    bad = negative > decided
    if bool(bad.any()):
        slot, lane = (int(x) for x in torch.nonzero(bad)[0])
        raise ValueError(
            "lines must leave a TERNARY readout's line-0 (sign) bit clear where its line-1 bit "
            f"is 0 (a tie), not set it at lane {lane} of slot {slot}")
    return decided.view(torch.int8) - 2 * negative.view(torch.int8)


def _from_lane_grid(grid, n_elements):
    flat = grid.reshape(-1)
    if not 0 <= n_elements <= flat.numel():
        raise ValueError(f"n_elements must be between 0 and {flat.numel()} (the lanes given), "
                         f"not {n_elements!r}")
    return flat[:n_elements]


def gbinary_decode(lines, *, readout, n_elements, line_bits=512, counter_bits=None):
    """:func:`neuron_fabric.golden.gbinary.decode`: ``SIGN`` to ``int8`` -1/+1, ``TERNARY``
    to -1/0/+1, ``COUNTS`` to ``uint8`` counts, padding lanes dropped."""
    checked, _ = _check_lines(lines, line_bits=line_bits)
    if _check_readout(readout, Route.GBINARY) is Readout.SIGN:  # +-1 looked up a byte
        slots = _check_readout_lines(checked, readout=readout, counter_bits=1)
        return _from_lane_grid(_byte_lanes(slots[:, 0], "signs"), n_elements)
    values = gbinary_parse_readout(lines, readout=readout, line_bits=line_bits,
                                   counter_bits=counter_bits)
    return _from_lane_grid(values, n_elements)


# ----------------------------------------------------------------------------- G-Ternary

def _check_real(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, not {value!r}")
    return value


def _exact_threshold(tau, dtype):
    """The smallest value of ``dtype`` (a torch float type) that is at least ``tau``."""
    np_type = {torch.float16: np.float16, torch.float32: np.float32,
               torch.float64: np.float64}[dtype]
    rounded = np_type(tau)
    if float(rounded) < tau:
        rounded = np.nextafter(rounded, np_type(np.inf))
    return float(rounded)


def gternary_threshold(grad, *, ratio):
    """The checks and the first pass of :func:`gternary_encode`: returns ``(tau, peak)``,
    the threshold ``ratio * max|g|`` rounded up to ``grad``'s type (NaN for ``0 * inf``,
    which keeps nothing) and ``max|g|`` (0 for an empty tensor)."""
    flat = _check_grad(grad)
    _check_real("ratio", ratio)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio must be between 0 and 1, not {ratio!r}")
    if flat.numel() == 0:
        return 0.0, 0.0
    low, high = torch.aminmax(flat)
    high, low = float(high), float(low)
    if math.isnan(high) or math.isnan(low):
        _refuse_nan(flat)
    peak = max(high, -low)
    return _exact_threshold(ratio * peak, flat.dtype), peak


def gternary_tau(peak, *, ratio, dtype=torch.float32):
    """The threshold of :func:`gternary_threshold` from ``peak`` = ``max|g|`` found by the
    caller (the hooks find it in their pass over the stream): ``ratio * peak`` rounded up
    to ``dtype``."""
    _check_real("ratio", ratio)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio must be between 0 and 1, not {ratio!r}")
    return _exact_threshold(ratio * peak, dtype)


def gternary_encode_lines(grad, *, tau, line_bits=512, draws=None, scale=None, out=None,
                          workspace=None):
    """The second pass of :func:`gternary_encode`: the codes of ``grad`` against the
    threshold ``tau`` from :func:`gternary_threshold` (of this or a larger tensor), packed
    into lines (into ``out`` if given); ``draws`` and ``scale`` (required with ``draws``: the
    finite scale of the stochastic mode) as there."""
    nbytes = _lines.line_bytes(line_bits)
    flat = _check_grad(grad)
    size = flat.numel()
    lanes = line_bits // 2
    n_lines = -(-size // lanes)
    ws = _workspace(workspace)
    device = flat.device
    out = _lines_out(out, (n_lines, nbytes), device)
    if _on_cpu_kernels(flat):
        scaled = None
        if draws is not None:  # u * s rounded to float32, as the golden model scales them
            scaled = ws.take("scaled", size, torch.float32, device).numpy()
            np.multiply(draws.detach().to(device).numpy(), np.float32(scale), out=scaled)
        _gternary.codes_into(flat.detach().numpy(), tau, scaled, out.numpy().reshape(-1))
        return out
    # Masks a byte a lane, the padding lanes 0 (the neutral code).
    padded = n_lines * lanes
    positive = ws.take("mask", padded, torch.bool, device)
    negative = ws.take("mask_2", padded, torch.bool, device)
    positive[size:] = False
    negative[size:] = False
    positive, negative = positive[:size], negative[:size]
    if math.isnan(tau):  # 0 * inf: the golden encoder's compares with NaN keep nothing
        positive.zero_()
        negative.zero_()
    elif tau > 0:
        torch.ge(flat, tau, out=positive)
        torch.le(flat, -tau, out=negative)
    else:  # |g| >= 0 everywhere; sign(0) is still 0
        torch.gt(flat, 0, out=positive)
        torch.lt(flat, 0, out=negative)
    if draws is not None:
        # Kept where u * s < |g|, u * s rounded to float32 and compared in the wider of
        # float32 and the gradient's type, as the golden model's compiled loop compares.
        wide = torch.float64 if flat.dtype == torch.float64 else torch.float32
        scaled = ws.take("scaled", size, torch.float32, device)
        torch.mul(draws.to(device), float(np.float32(scale)), out=scaled)
        magnitude = ws.take("magnitude", size, wide, device)
        magnitude.copy_(flat)
        magnitude.abs_()
        kept = ws.take("kept", size, torch.bool, device)
        torch.lt(scaled.to(wide) if wide != torch.float32 else scaled, magnitude, out=kept)
        positive &= kept
        negative &= kept
    if not padded:
        return out
    # Eight lanes' codes a word, a byte each: positive 01, negative 11 (the masks are
    # exclusive). One multiplication gathers bytes 0 to 3 into byte 3 and bytes 4 to 7
    # into byte 7, lane after lane two bits apart: every other product of the bytes and
    # the factor's powers lands on its own two bits, so none carries into the codes.
    codes = ws.take("code_words", padded // 8, _I64, device)
    plus = _words(ws.take("mask", padded, torch.bool, device).view(torch.uint8))
    minus = _words(ws.take("mask_2", padded, torch.bool, device).view(torch.uint8))
    torch.bitwise_left_shift(minus, 1, out=codes)
    codes |= minus
    codes |= plus
    codes *= _CODE_MAGIC
    out.view(-1).view(-1, 2).copy_(codes.view(torch.uint8).view(-1, 2, 4)[:, :, 3])
    return out


def gternary_encode(grad, *, ratio, line_bits=512, draws=None, scale=None):
    """:func:`neuron_fabric.golden.gternary.encode` with the generator's draws given:
    ``draws`` is what ``rng.random(grad.size, dtype=numpy.float32)`` returns, as a float32
    tensor (None: deterministic). Same threshold, same codes, same refusals.

    Two passes, as the golden encoder: ``max|g|`` (:func:`gternary_threshold`), then the
    compares and the packing (:func:`gternary_encode_lines`)."""
    _lines.line_bytes(line_bits)
    flat = _check_grad(grad)
    if draws is not None and (not isinstance(draws, torch.Tensor) or draws.dtype != torch.float32
                              or draws.numel() != flat.numel()):
        raise TypeError(f"draws must be a float32 torch.Tensor of {flat.numel()} uniform draws, "
                        f"not {draws!r:.60}")
    tau, peak = gternary_threshold(flat, ratio=ratio)
    if flat.numel() and draws is not None:
        if scale is None:
            if not math.isfinite(peak):
                raise ValueError("grad must be finite in stochastic mode without a scale: the "
                                 "default scale max|g| is infinite; pass a finite scale")
            scale = peak
        elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating,
                                                                np.integer)):
            raise TypeError(f"scale must be a real number, not {scale!r}")
        elif not math.isfinite(scale) or scale < 0:
            raise ValueError(f"scale must be a finite number >= 0, not {scale!r}")
    return gternary_encode_lines(flat, tau=tau, line_bits=line_bits, draws=draws, scale=scale)


def _votes(words, out):
    """A worker's words as two votes a lane: the code's low bit at the even bit, low AND high
    (a -1) at the odd bit; an invalid code (``10``) votes for neither."""
    torch.bitwise_left_shift(words, 1, out=out)
    out |= _EVEN
    out &= words
    return out


def _subtract_minus(tally, bits, out, tmp):
    """Tallies ``N`` (even bits) and ``M`` (odd bits) as ``bits`` planes ``out`` of
    ``N - 2M``, two's complement at the even bits (``bits`` past the tallies repeat the
    sign; the odd bits of ``out`` are left as they come); ``tmp``: three scratch rows.

    A ripple of borrows, plane ``k`` taking ``N``'s bit ``k`` from the even bits of
    ``tally[k]`` and ``M``'s bit ``k - 1`` from the odd bits of ``tally[k - 1]``, moved to the
    even bits: whatever the odd bits hold never reaches an even bit, so nothing is masked
    on the way. Seven operations a plane: with ``p = a ^ borrow``, the difference is
    ``p ^ b`` and the next borrow ``((b ^ borrow) & ~p) ^ borrow`` (the majority of ``~a``,
    ``b`` and the borrow)."""
    borrow, b, p = tmp[0], tmp[1], tmp[2]
    out[0].copy_(tally[0])  # less 2M, nothing at bit 0
    borrow.zero_()
    for k in range(1, bits):
        if k > len(tally):  # 0 - 0 - borrow: the sign, repeated
            out[k].copy_(borrow)
            continue
        torch.bitwise_right_shift(tally[k - 1], 1, out=b)  # M's bit k - 1 at the even bits
        if k == len(tally):  # a = 0: the difference is b ^ borrow, the borrow b | borrow
            torch.bitwise_xor(b, borrow, out=out[k])
            borrow |= b
        elif k == 1:  # no borrow yet
            torch.bitwise_xor(tally[k], b, out=out[k])
            torch.bitwise_not(tally[k], out=borrow)
            borrow &= b
        else:
            torch.bitwise_xor(tally[k], borrow, out=p)
            torch.bitwise_xor(p, b, out=out[k])
            b ^= borrow
            p.bitwise_not_()
            b &= p
            borrow ^= b
    return out


def _signed_equal(planes, value):
    return _equal(planes, value % (1 << len(planes)))


def _fold_in_order(rows, limit, width):
    """The device's saturating fold, worker after worker: ``S = clip(S + v, -limit, limit)``
    on ``width`` planes of two's complement at the even bits."""
    sums = [torch.zeros_like(rows[0]) for _ in range(width)]
    for word in rows:
        high = _shr(word, 1) & _EVEN
        low = word & _EVEN
        minus = low & high
        plus = low ^ minus
        top, bottom = _signed_equal(sums, limit), _signed_equal(sums, -limit)
        plus = plus & ~top
        minus = minus & ~bottom
        either = plus | minus
        carry = sums[0] & either
        sums[0] = sums[0] ^ either
        for k in range(1, width):
            total = sums[k] ^ minus
            next_carry = (sums[k] & minus) | (total & carry)
            sums[k] = total ^ carry
            carry = next_carry
    return [plane & _EVEN for plane in sums]


def gternary_aggregate_planes(lines, *, max_workers, counter_bits=None, out=None,
                              workspace=None):
    """:func:`neuron_fabric.golden.gternary.aggregate_planes`: the saturating per-lane sums of
    every worker's lines ``(workers, n_lines, line_bytes)``, in worker order, as ``uint8``
    ``SUMS`` lines ``(n_lines, ceil((counter_bits + 1) / 2), line_bytes)`` (into ``out`` if
    given)."""
    lines, _, counter_bits = _check_workers(lines, max_workers, counter_bits)
    workers, n_lines, nbytes = lines.shape
    per_slot = readout_lines_per_slot(Readout.SUMS, counter_bits=counter_bits)
    out = _lines_out(out, (n_lines, per_slot, nbytes), lines.device)
    if not workers or not n_lines:
        return out.zero_()
    if _on_cpu_kernels(lines):
        _gternary.aggregate_planes(lines.numpy(), max_workers=max_workers,
                                   counter_bits=counter_bits, out=out.numpy())
        return out
    ws = _workspace(workspace)
    device = lines.device
    rows = _words(lines)  # (workers, n_lines, words)
    n = rows.shape[1:]
    limit = sum_limit(max_workers, counter_bits)
    if workers <= limit:  # no sum can saturate: P - M in any order
        width = workers.bit_length()
        votes = _votes(rows, ws.take("votes", rows.shape, _I64, device))
        tally = _count_rows(votes, width, ws.take("planes", (width,) + n, _I64, device), ws)
        planes = _subtract_minus(list(tally), width + 1,
                                 ws.take("sums", (width + 1,) + n, _I64, device),
                                 ws.take("borrows", (3,) + n, _I64, device))
    else:
        planes = torch.stack(_fold_in_order(list(rows), limit, counter_bits + 1))
    # Digit d: plane 2d at the even bits, plane 2d + 1 at the odd bits, written in place
    # into the slots' lines.
    digits = _words(out)  # (n_lines, per_slot, words), as the planes' (n_lines, words)
    even = ws.take("digit_even", n, _I64, device)
    for d in range(per_slot):
        line = digits[:, d]
        torch.bitwise_and(planes[min(2 * d + 1, len(planes) - 1)], _EVEN, out=line)
        line <<= 1
        torch.bitwise_and(planes[min(2 * d, len(planes) - 1)], _EVEN, out=even)
        line |= even
    return out


def gternary_readout_planes(planes, *, readout, gate, out=None, workspace=None):
    """:func:`neuron_fabric.golden.gternary.readout_planes`: the readout lines of complete
    slots from ``SUMS`` lines ``(n_slots, k, line_bytes)`` (into ``out`` if given, for
    ``GATED``)."""
    _check_tensor(planes, name="planes", dtype=torch.uint8, ndim=3)
    readout = _check_readout(readout, Route.GTERNARY)
    n_slots, per_slot, nbytes = planes.shape
    _lines.check_line_bits(8 * nbytes)
    check_int("lines per slot (planes.shape[1])", per_slot, low=1,
              high=(COUNTER_BITS_LIMIT + 2) // 2)
    gate = check_int("gate", gate, low=0, high=GATE_MAX)
    if readout is Readout.SUMS:
        return planes.reshape(-1, nbytes).clone()
    ws = _workspace(workspace)
    device = planes.device
    shape = (n_slots, nbytes // 8)
    digits = _words(planes).transpose(0, 1)  # (k, n_slots, words)
    odd = ws.take("odd_bits", (per_slot,) + shape, _I64, device)
    torch.bitwise_right_shift(digits, 1, out=odd)  # bit 2d + 1 of each sum at the even bits
    bits = [plane for d in range(per_slot) for plane in (digits[d], odd[d])]
    sign, low = bits[-1], bits[:-1]
    threshold = max(gate, 1)
    out = _lines_out(out, (n_slots, nbytes), device)
    code = _words(out)
    positive = _greater(low, threshold - 1, out=code)
    positive &= ~sign
    top = (1 << len(low)) - threshold
    negative = ws.take("negative", shape, _I64, device)
    if top >= 0:
        _greater(low, top, out=negative)
        negative.bitwise_not_()
        negative &= sign
    else:
        negative.zero_()
    positive |= negative
    positive &= _EVEN
    negative &= _EVEN
    negative <<= 1
    positive |= negative  # the code: non-zero at the even bit, negative at the odd bit
    return out


def _two_bit_lanes(data):
    """2-bit lanes of ``uint8`` bytes ``(..., n)`` as sign-extended ``int8`` ``(..., 4n)``."""
    return _byte_lanes(data, "codes")


def gternary_parse_readout(lines, *, readout, line_bits=512, counter_bits=None):
    """:func:`neuron_fabric.golden.gternary.parse_readout`: ``int8`` lane values per slot."""
    lines, line_bits = _check_lines(lines, line_bits=line_bits)
    readout = _check_readout(readout, Route.GTERNARY)
    if readout is Readout.GATED:
        slots = _check_readout_lines(lines, readout=readout, counter_bits=1)
        codes = _words(slots[:, 0])
        if bool((_shr(codes, 1) & ~codes & _EVEN).any()):  # a 10: high bit without low bit
            raise ValueError(f"lines hold an invalid ternary code "
                             f"({_gternary.INVALID_CODE:#04b}), which no readout produces")
        return _two_bit_lanes(slots[:, 0])
    if counter_bits is None:
        raise TypeError("counter_bits is required to parse a SUMS readout")
    counter_bits = check_int("counter_bits", counter_bits, low=1, high=COUNTER_BITS_LIMIT)
    slots = _check_readout_lines(lines, readout=readout, counter_bits=counter_bits)
    k = slots.shape[1]
    digits = _two_bit_lanes(slots).to(torch.int16)  # (n_slots, k, lanes), the top one signed
    values = (digits[:, -1] << (2 * (k - 1)))
    for d in range(k - 1):
        values = values + ((digits[:, d] & 3) << (2 * d))
    top = 1 << counter_bits
    for bad, message in (
            ((values < -top) | (values >= top),
             lambda slot, lane: (
                 f"lines must repeat each sum's sign bit (bit {counter_bits}) in the last line's "
                 f"odd bits (sign extension), not differ from it at lane {lane} of slot {slot}")),
            (values == -top,
             lambda slot, lane: (
                 f"lines must hold sums within [-{top - 1}, {top - 1}] for "
                 f"counter_bits={counter_bits}, not {-top} at lane {lane} of slot {slot}"))):
        if bool(bad.any()):
            slot, lane = (int(x) for x in torch.nonzero(bad)[0])
            raise ValueError(message(slot, lane))
    return values.to(torch.int8)


def gternary_decode(lines, *, readout, n_elements, line_bits=512, counter_bits=None):
    """:func:`neuron_fabric.golden.gternary.decode`: ``int8`` values, padding lanes dropped."""
    values = gternary_parse_readout(lines, readout=readout, line_bits=line_bits,
                                    counter_bits=counter_bits)
    return _from_lane_grid(values, n_elements)


# ----------------------------------------------------------------------------- the hooks' decode

def _sign_table(device):
    """Per byte, its 8 lanes as float32: -1.0 where the bit is set, else +1.0."""
    bits = (torch.arange(256, device=device)[:, None] >> torch.arange(8, device=device)) & 1
    return (1 - 2 * bits).to(torch.float32)


def _code_table(device):
    """Per byte, its 4 G-Ternary codes as float32 -1/0/+1 (the invalid code never comes from
    a readout the hooks decode)."""
    codes = (torch.arange(256, device=device)[:, None] >> torch.arange(0, 8, 2, device=device)) & 3
    return torch.tensor([0.0, 1.0, -2.0, -1.0], device=device)[codes]


def _lane_tables(device):
    """The byte tables of :func:`_byte_lanes`."""
    byte = torch.arange(256, device=device)[:, None]
    bits = ((byte >> torch.arange(8, device=device)) & 1).to(torch.uint8)
    codes = ((byte >> torch.arange(0, 8, 2, device=device)) & 3).to(torch.int8)
    tables = {"bits": bits, "signs": (1 - 2 * bits.to(torch.int8)), "codes": (codes ^ 2) - 2}
    return {kind: table.contiguous().view(_I64 if table.shape[1] == 8 else torch.int32)
            .reshape(256) for kind, table in tables.items()}


_TABLES = {}


def _table(kind, device):
    """A table by kind: ``"sign"`` and ``"code"`` (float32 values a lane, for the hooks'
    decode), or a table of :func:`_byte_lanes`."""
    key = (kind, str(device))
    if key not in _TABLES:
        if kind == "sign":
            _TABLES[key] = _sign_table(device)
        elif kind == "code":
            _TABLES[key] = _code_table(device)
        else:
            for name, table in _lane_tables(device).items():
                _TABLES[name, str(device)] = table
    return _TABLES[key]


def scaled_values_into(data, *, route, pieces, zeros=None, workspace=None):
    """Decode packed lanes straight into their destinations, each times its scale.

    ``data`` is ``uint8``: for G-Binary one bit a lane (1: the value is -1, else +1), for
    G-Ternary a 2-bit code a lane (``01`` +1, ``11`` -1, ``00`` 0); lane ``j`` is element
    ``j`` of the stream. ``pieces`` are ``(start, out, scale)``: the lanes from ``start`` on,
    ``out.numel()`` of them, are written into ``out`` (a contiguous float32 view) as
    ``float32(value) * scale``, exactly as NumPy multiplies the decoded values by a float32
    scale: a table of every byte's lanes times the scale, gathered a byte at a time, so each
    element is written once. ``zeros`` (G-Binary, optional) has a bit a lane too: where it is
    0 the value is multiplied by ``+0.0`` after the scale (the ``TERNARY`` readout's ties).
    """
    per_byte = 8 if route == "gbinary" else 4
    table = _table("sign" if route == "gbinary" else "code", data.device)
    for start, out, scale in pieces:
        count = out.numel()
        if not count:
            continue
        stop = start + count
        scaled = table * scale
        dest = out.reshape(-1)
        first, last = -(-start // per_byte), stop // per_byte  # whole bytes inside
        if first < last:
            body = dest[first * per_byte - start:last * per_byte - start].view(-1, per_byte)
            index = _workspace(workspace).take("index", last - first, torch.int32, data.device)
            torch.index_select(scaled, 0, index.copy_(data[first:last]), out=body)
        # The lanes in partial bytes: before the first whole byte, and after the last one
        # (one byte that holds the whole piece when there is no whole byte).
        edges = ([(start, stop)] if first > last else
                 [(start, first * per_byte), (last * per_byte, stop)])
        for lo, hi in edges:
            if lo < hi:
                byte = lo // per_byte
                lanes = scaled[data[byte:byte + 1].to(torch.int64)].reshape(-1)
                dest[lo - start:hi - start] = lanes[lo - byte * per_byte:hi - byte * per_byte]
        if zeros is not None:
            keep = _bits_of(zeros[start // 8:-(-stop // 8)])[start % 8:start % 8 + count]
            dest.mul_(keep.to(torch.float32))
