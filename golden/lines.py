"""Line geometry: the one place that knows byte and bit order.

A line is ``line_bits`` bits (128, 256, 512 or 1024). Byte ``k`` of a line is bits
``[8k+7 : 8k]``, so a line maps to a Python integer as ``int.from_bytes(b, "little")``.
Lane ``i`` of width ``W`` is bits ``[i*W+W-1 : i*W]`` (Amaranth's ``ArrayLayout`` order).
Element ``j`` of a flat tensor goes to lane ``j mod L`` of line ``j div L``; the last line is
padded with a neutral code.

A readout spreads values wider than a lane's place over several lines as bit-planes
(:func:`pack_planes`): line ``k`` holds digit ``k`` of every value, each at its own lane's bits.

In NumPy a batch of lines is a C-contiguous ``uint8`` array whose last axis holds the
``line_bits // 8`` bytes of each line. Every other module packs and unpacks through here.
"""

import numpy as np

__all__ = [
    "LINE_BITS_CHOICES",
    "LANE_BITS_CHOICES",
    "check_line_bits",
    "line_bytes",
    "check_lines",
    "pack_lanes",
    "unpack_lanes",
    "interleave_bit_planes",
    "pack_planes",
    "unpack_planes",
    "bit_planes_to_bytes",
    "to_lane_grid",
    "from_lane_grid",
    "split_lines",
    "line_to_int",
    "int_to_line",
    "lanes_to_int",
    "int_to_lanes",
]

LINE_BITS_CHOICES = (128, 256, 512, 1024)
# Lane widths the packers support: every field the design puts in a line.
LANE_BITS_CHOICES = (1, 2, 4, 8, 16)


def check_line_bits(line_bits):
    """Validate ``line_bits`` and return it."""
    if isinstance(line_bits, bool) or not isinstance(line_bits, (int, np.integer)):
        raise TypeError(f"line_bits must be an integer, not {line_bits!r}")
    if int(line_bits) not in LINE_BITS_CHOICES:
        raise ValueError(f"line_bits must be one of {LINE_BITS_CHOICES}, not {line_bits!r}")
    return int(line_bits)


def line_bytes(line_bits):
    """Bytes per line."""
    return check_line_bits(line_bits) // 8


def check_lines(lines, *, name="lines", line_bits=None, ndim=2):
    """Validate a batch of lines and return it as a C-contiguous ``uint8`` array.

    ``ndim`` is the expected number of axes (2: ``(n_lines, line_bytes)``; 3:
    ``(workers, n_lines, line_bytes)``). With ``line_bits=None`` the width is taken from
    the last axis and must still be a legal line width. Returns ``(array, line_bits)``.
    """
    if not isinstance(lines, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of uint8, not {type(lines).__name__}")
    if lines.dtype != np.uint8:
        raise TypeError(f"{name} must have dtype uint8, not {lines.dtype}")
    if lines.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, not shape {lines.shape}")
    found_bits = lines.shape[-1] * 8
    if line_bits is None:
        if found_bits not in LINE_BITS_CHOICES:
            raise ValueError(
                f"{name} must have a last axis of {[b // 8 for b in LINE_BITS_CHOICES]} bytes "
                f"(one line), not {lines.shape[-1]}")
        line_bits = found_bits
    else:
        line_bits = check_line_bits(line_bits)
        if found_bits != line_bits:
            raise ValueError(
                f"{name} must have {line_bits // 8} bytes per line (line_bits={line_bits}), "
                f"not {lines.shape[-1]}")
    return np.ascontiguousarray(lines), line_bits


def _check_lane_bits(lane_bits):
    if lane_bits not in LANE_BITS_CHOICES:
        raise ValueError(f"lane_bits must be one of {LANE_BITS_CHOICES}, not {lane_bits!r}")


def pack_lanes(values, *, lane_bits):
    """Pack unsigned lane values along the last axis into bytes.

    ``values[..., i]`` lands at bits ``[i*lane_bits + lane_bits-1 : i*lane_bits]`` of the
    returned ``uint8`` array's last axis. Values are masked to ``lane_bits`` bits, so a
    signed array packs as two's complement. The lane count times ``lane_bits`` must be a
    whole number of bytes.
    """
    _check_lane_bits(lane_bits)
    values = np.asarray(values)
    n_lanes = values.shape[-1]
    if (n_lanes * lane_bits) % 8:
        raise ValueError(f"{n_lanes} lanes of {lane_bits} bits are not a whole number of bytes")
    lead = values.shape[:-1]
    if lane_bits == 1:
        return np.packbits(values.astype(np.uint8) & 1, axis=-1, bitorder="little")
    if lane_bits == 8:
        return values.astype(np.uint8)
    if lane_bits == 16:
        return values.astype("<u2").view(np.uint8).reshape(*lead, n_lanes * 2)
    per_byte = 8 // lane_bits
    mask = (1 << lane_bits) - 1
    groups = (values.astype(np.uint8) & mask).reshape(*lead, n_lanes // per_byte, per_byte)
    out = groups[..., 0].copy()
    for k in range(1, per_byte):
        out |= groups[..., k] << np.uint8(k * lane_bits)
    return out


def _lane_table(lane_bits, signed):
    """Every byte's ``8 // lane_bits`` lanes (``uint8``, or sign-extended ``int8``) packed into
    one unsigned word per byte, so that one gather unpacks a byte."""
    byte = np.arange(256, dtype=np.uint8)[:, None]
    lanes = (byte >> np.arange(0, 8, lane_bits, dtype=np.uint8)) & np.uint8((1 << lane_bits) - 1)
    if signed:
        half = np.int8(1 << (lane_bits - 1))
        lanes = (lanes.view(np.int8) ^ half) - half  # sign-extend from bit lane_bits - 1
    word = np.dtype(f"u{8 // lane_bits}")
    return np.ascontiguousarray(lanes).view(word).reshape(256), lanes.dtype


# The lookup tables of unpack_lanes for the lane widths below a byte.
_LANE_TABLES = {(bits, signed): _lane_table(bits, signed) for bits in (2, 4) for signed in (False, True)}


def unpack_lanes(data, *, lane_bits, signed=False):
    """Inverse of :func:`pack_lanes`: split the last axis of ``data`` into lanes.

    Returns ``uint8`` (``uint16`` for 16-bit lanes); with ``signed=True`` the lanes are
    sign-extended two's complement values as ``int8`` (``int16`` for 16-bit lanes).
    """
    _check_lane_bits(lane_bits)
    data = np.ascontiguousarray(data, dtype=np.uint8)
    lead = data.shape[:-1]
    if lane_bits == 1:
        out = np.unpackbits(data, axis=-1, bitorder="little")
    elif lane_bits == 8:
        out = data.copy()
    elif lane_bits == 16:
        out = data.view("<u2").astype(np.uint16)
    else:  # one table lookup a byte gives all its lanes, already sign-extended if asked
        table, lane = _LANE_TABLES[lane_bits, signed]
        return table[data].view(lane).reshape(*lead, data.shape[-1] * 8 // lane_bits)
    if not signed:
        return out
    if lane_bits == 16:
        return out.view(np.int16)
    values = out.view(np.int8)  # 8-bit lanes: reinterpretation is the sign extension
    if lane_bits < 8:
        half = np.int8(1 << (lane_bits - 1))
        values = (values ^ half) - half  # sign-extend from bit lane_bits-1
    return values


def pack_planes(values, *, planes, lane_bits=1):
    """Split lane values into ``planes`` planes of ``lane_bits``-bit digits, least significant first.

    Plane ``k`` holds bits ``[k*W + W-1 : k*W]`` (``W = lane_bits``) of every value, and
    value ``i``'s digit sits at bits ``[i*W + W-1 : i*W]`` of the plane, in the order of
    :func:`pack_lanes`: all of a value's bits stay at its own lane's place in every plane.
    Negative values split as two's complement, so digits beyond a value's width repeat its
    sign bit (sign extension); non-negative values are zero-extended.

    ``values`` is an integer array ``(..., n_lanes)``; returns ``uint8`` planes
    ``(..., planes, n_lanes * lane_bits // 8)``, each a whole number of bytes.
    """
    _check_lane_bits(lane_bits)
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError(f"values must be an integer array, not dtype {values.dtype}")
    if isinstance(planes, bool) or not isinstance(planes, (int, np.integer)):
        raise TypeError(f"planes must be an integer, not {planes!r}")
    if planes < 1:
        raise ValueError(f"planes must be at least 1, not {planes!r}")
    n_bytes = values.shape[-1] * lane_bits // 8
    out = np.empty(values.shape[:-1] + (int(planes), n_bytes), dtype=np.uint8)
    for k in range(int(planes)):  # NumPy's shift is arithmetic for signed values
        out[..., k, :] = pack_lanes(values >> (k * lane_bits), lane_bits=lane_bits)
    return out


def unpack_planes(planes, *, lane_bits=1, signed=False):
    """Inverse of :func:`pack_planes`: planes ``(..., n_planes, n_bytes)`` to lane values.

    Lane ``i``'s value is the digits at its place in every plane, plane 0 least
    significant: ``n_planes * lane_bits`` bits, at most 16. Returns ``uint8`` (``uint16``
    above 8 bits) of shape ``(..., n_bytes * 8 // lane_bits)``; with ``signed=True`` the
    top bit is the sign (two's complement) and the values are ``int8`` (``int16``).
    """
    _check_lane_bits(lane_bits)
    planes = np.ascontiguousarray(planes, dtype=np.uint8)
    if planes.ndim < 2 or planes.shape[-2] < 1:
        raise ValueError(f"planes must have a plane axis before the byte axis, not shape {planes.shape}")
    width = planes.shape[-2] * lane_bits
    if width > 16:
        raise ValueError(f"planes must hold at most 16 bits per lane, not {width}")
    if lane_bits == 1 and width <= 8:
        lead, (n_planes, n_bytes) = planes.shape[:-2], planes.shape[-2:]
        # Lane order is plane-major within each slot; gather every slot's plane k into one row.
        rows = np.ascontiguousarray(np.moveaxis(planes.reshape(-1, n_planes, n_bytes), 1, 0))
        out = np.empty(rows.shape[1] * n_bytes * 8, dtype=np.uint8)
        bit_planes_to_bytes(rows.reshape(n_planes, -1), out, signed=signed)
        out = out.reshape(*lead, n_bytes * 8)
        return out.view(np.int8) if signed else out
    dtype = np.dtype(np.uint8 if width <= 8 else np.uint16)
    out = unpack_lanes(planes[..., 0, :], lane_bits=lane_bits).astype(dtype)
    for k in range(1, planes.shape[-2]):
        digits = unpack_lanes(planes[..., k, :], lane_bits=lane_bits).astype(dtype)
        out |= digits << dtype.type(k * lane_bits)
    if not signed:
        return out
    values = out.view(np.int8 if dtype == np.uint8 else np.int16)
    if width < 8 * dtype.itemsize:
        half = values.dtype.type(1 << (width - 1))
        values = (values ^ half) - half  # sign-extend from bit width-1
    return values


# Plane bytes unpacked at a time: 8 times as many output bytes stay in the L2 cache.
_UNPACK_BYTES = 1 << 15


def bit_planes_to_bytes(planes, out, *, signed=False):
    """Lane values of 1-bit planes, one byte a lane: the inverse of :func:`pack_planes`.

    ``planes`` is ``(n_planes, n_bytes)`` ``uint8`` (at most 8 planes, least significant
    first, lane ``i`` at bit ``i``); ``out`` is a ``uint8`` array of ``8 * n_bytes`` lanes,
    written in place. With ``signed=True`` the top plane is the sign (two's complement) and
    the bytes hold ``int8`` values. Each plane is unpacked once and folded in on ``uint64``
    views, eight lanes an operation: with at most 8 planes a lane's value is below 128 before
    every shift, so no bit crosses into the next lane.
    """
    n_planes, n_bytes = planes.shape
    if not 1 <= n_planes <= 8 or out.shape != (8 * n_bytes,):
        raise ValueError(f"planes must be 1 to 8 planes of the {out.size // 8} bytes out holds, "
                         f"not shape {planes.shape}")
    for start in range(0, n_bytes, _UNPACK_BYTES):
        stop = min(start + _UNPACK_BYTES, n_bytes)
        acc = out[8 * start:8 * stop]
        wide = acc.view(np.uint64) if (stop - start) % 8 == 0 else acc  # a short tail: bytes
        wide[...] = np.unpackbits(planes[-1, start:stop], bitorder="little").view(wide.dtype)
        one = wide.dtype.type(1)
        for k in range(n_planes - 2, -1, -1):
            wide <<= one
            wide |= np.unpackbits(planes[k, start:stop], bitorder="little").view(wide.dtype)
        if signed and n_planes < 8:  # sign-extend from bit n_planes - 1, lane by lane
            half = np.uint8(1 << (n_planes - 1))
            acc ^= half
            acc -= half
    return out


# Masks of the shift-and-mask steps that spread 32 bits to the even positions of 64.
_SPREAD_STEPS = tuple((np.uint64(shift), np.uint64(mask)) for shift, mask in (
    (16, 0x0000_FFFF_0000_FFFF), (8, 0x00FF_00FF_00FF_00FF), (4, 0x0F0F_0F0F_0F0F_0F0F),
    (2, 0x3333_3333_3333_3333), (1, 0x5555_5555_5555_5555)))


def _spread_bits(packed):
    """Bit ``i`` of the packed bytes to bit ``2i`` of the result (``uint64`` words)."""
    x = packed.view("<u4").astype(np.uint64)
    for shift, mask in _SPREAD_STEPS:
        x |= x << shift
        x &= mask
    return x


def interleave_bit_planes(low, high):
    """Pack two bit-planes into 2-bit lanes: lane ``i`` gets ``high[i]`` ``low[i]``.

    ``low`` and ``high`` are packed bits (``uint8``, little bit order) of the same length;
    returns twice as many bytes, the 2-bit lanes in lane order.
    """
    n_bytes = low.size
    pad = -n_bytes % 4  # the spreading works on 32-bit words
    if pad:
        low, high = np.pad(low, (0, pad)), np.pad(high, (0, pad))
    merged = _spread_bits(low) | (_spread_bits(high) << np.uint64(1))
    return merged.astype("<u8", copy=False).view(np.uint8)[:2 * n_bytes]


def to_lane_grid(flat, *, lanes, fill=0):
    """Reshape a flat array into ``(n_lines, lanes)``, padding the last line with ``fill``."""
    flat = np.ravel(flat)
    n_lines = -(-flat.size // lanes)
    if flat.size == n_lines * lanes:
        return flat.reshape(n_lines, lanes)
    grid = np.full(n_lines * lanes, fill, dtype=flat.dtype)
    grid[:flat.size] = flat
    return grid.reshape(n_lines, lanes)


def from_lane_grid(grid, *, n_elements):
    """Flatten a lane grid and drop the padding lanes beyond ``n_elements``."""
    flat = np.ravel(grid)
    if not 0 <= n_elements <= flat.size:
        raise ValueError(
            f"n_elements must be between 0 and {flat.size} (the lanes given), not {n_elements!r}")
    return flat[:n_elements]


def split_lines(data, *, line_bits):
    """Cut rows of packed bytes into lines: ``(n, k * line_bytes)`` to ``(n * k, line_bytes)``."""
    nbytes = line_bytes(line_bits)
    if data.shape[-1] % nbytes:
        raise ValueError(f"{data.shape[-1]} bytes are not a whole number of {line_bits}-bit lines")
    return np.ascontiguousarray(data).reshape(-1, nbytes)


def line_to_int(line):
    """A line (bytes-like or 1-D ``uint8`` array) as a Python integer."""
    if not isinstance(line, (bytes, bytearray, memoryview)):
        line = np.asarray(line, dtype=np.uint8).tobytes()
    return int.from_bytes(line, "little")


def int_to_line(value, *, line_bits):
    """A Python integer as one line, a 1-D ``uint8`` array of ``line_bits // 8`` bytes."""
    nbytes = line_bytes(line_bits)
    if not 0 <= value < (1 << line_bits):
        raise ValueError(f"value must fit in {line_bits} unsigned bits, not {value:#x}")
    return np.frombuffer(int(value).to_bytes(nbytes, "little"), dtype=np.uint8).copy()


def lanes_to_int(values, *, lane_bits):
    """Lanes of any width (two's complement for negative values) packed into one integer.

    Lane ``i`` lands at bits ``[i*W + W-1 : i*W]``, as in a line. For the odd widths of
    accumulators (a 5-bit counter, a 6-bit sum) that no line format uses; lines themselves
    go through :func:`pack_lanes`.
    """
    values = np.asarray(values).astype(np.int64).ravel()
    lane_bits = int(lane_bits)
    if values.size and (values.max() >= 1 << lane_bits or values.min() < -(1 << (lane_bits - 1))):
        raise ValueError(f"values must fit {lane_bits}-bit lanes, not span "
                         f"[{values.min()}, {values.max()}]")
    bits = (values[:, None] >> np.arange(lane_bits)) & 1
    return int.from_bytes(np.packbits(bits.astype(np.uint8).ravel(), bitorder="little").tobytes(),
                          "little")


def int_to_lanes(value, *, lane_bits, lanes, signed=False):
    """Inverse of :func:`lanes_to_int`: ``lanes`` values of ``lane_bits`` bits, as ``int64``."""
    nbytes = (lane_bits * lanes + 7) // 8
    raw = np.frombuffer(int(value).to_bytes(nbytes, "little"), dtype=np.uint8)
    bits = np.unpackbits(raw, bitorder="little")[:lane_bits * lanes].reshape(lanes, lane_bits)
    out = (bits.astype(np.int64) << np.arange(lane_bits)).sum(axis=1)
    if signed:
        out -= (out >> (lane_bits - 1) & 1) << lane_bits
    return out
