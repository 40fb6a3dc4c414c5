"""FP32 lines: byte-exact identity through the device (docs/design.md, "FP32 passthrough").

An FP32 line holds ``line_bits // 32`` little-endian IEEE-754 binary32 values. The device
never looks inside: whatever bytes are written are the bytes read back, NaN payloads,
``-0.0`` and denormals included. The host reduces FP32 gradients itself.
"""

import numpy as np

from . import lines as _lines

__all__ = ["to_lines", "from_lines", "identity"]


def to_lines(tensor, *, line_bits=512):
    """Pack a ``float32`` tensor into lines, bit patterns untouched; padding bytes are 0.

    Raises ``TypeError`` for any other dtype: converting silently would change the bytes.
    """
    nbytes = _lines.line_bytes(line_bits)
    tensor = np.asarray(tensor)
    if tensor.dtype != np.float32:
        raise TypeError(f"tensor must have dtype float32 for the FP32 path, not {tensor.dtype}")
    raw = np.ascontiguousarray(tensor, dtype="<f4").reshape(-1).view(np.uint8)
    return _lines.to_lane_grid(raw, lanes=nbytes).copy()  # never a view of the caller's tensor


def from_lines(lines, *, n_elements, line_bits=512):
    """The first ``n_elements`` ``float32`` values held by FP32 lines (a copy, bit-exact)."""
    lines, _ = _lines.check_lines(lines, line_bits=line_bits)
    values = lines.reshape(-1).view("<f4")
    return _lines.from_lane_grid(values, n_elements=n_elements).astype(np.float32, copy=True)


def identity(lines):
    """What the FP32 path returns for ``lines``: the same bytes (a copy)."""
    lines, _ = _lines.check_lines(lines)
    return lines.copy()
