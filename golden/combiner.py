"""Write-combining gradient accumulator: the transaction-exact reference model.

Small integer gradient updates ``(address, value)`` are summed near memory so that DRAM sees
fewer, larger writes ``(address, delta)``; memory applies a write as ``mem[address] += delta``.
This module defines, for a sequence of accepted updates and flush points, the exact sequence
of writes the hardware (:mod:`neuron_fabric.hw.combiner`) sends downstream. Timing (stalls,
backpressure, burst draining) changes when a write leaves, never which writes leave or in
which order.

The rules, applied to one accepted update ``v`` at address ``a`` (set ``s = a mod sets``,
tag ``a div sets``):

1. **Bypass**: with a threshold ``T`` and ``|v| >= T``, write ``(a, v)``. The buffer is not
   touched, even when it holds ``a``.
2. **Hit** (way ``w`` of set ``s`` holds ``a``), with the sum ``acc + v`` and the count
   ``n + 1``:

   - the sum does not fit ``acc_width`` bits: write ``(a, acc)`` (the old sum) and restart
     the entry with ``v`` and count 1; the sticky overflow flag is set. Nothing is clipped.
   - ``|sum| >= T``: write ``(a, sum)`` and free the entry;
   - ``n + 1 == max_updates``: write ``(a, sum)`` (nothing when the sum is 0) and free it;
   - ``sum == 0``: free the entry without a write (a zero delta changes nothing);
   - otherwise keep ``sum`` and ``n + 1``.
3. **Miss**:

   - ``v == 0``: nothing to remember, nothing written (absorbed);
   - with a small threshold ``S`` and ``|v| < S`` (a *tiny* value): in lossy mode the value is
     dropped, as the seed design's dual-threshold variant does; otherwise it takes the lowest
     free way of the set, or, when the set is full, it is written through as ``(a, v)`` so it
     never evicts an entry that has gathered more;
   - otherwise it takes the lowest free way, or, when the set is full, the way pointed to by
     the set's round-robin pointer is evicted (written back as ``(tag*sets + s, acc)``), the
     new value takes its place with count 1, and the pointer advances by one (mod ``ways``).

A **flush** writes every valid entry back in set order, way order within a set, and frees
it; the round-robin pointers are kept. A valid entry never holds 0 (rule 2 frees it), so every
write has a nonzero delta. In lossless mode, after a flush the sum of the deltas written to
each address equals the sum of the values accepted for it; in lossy mode the dropped values
make up the difference, and the model reports them.

Overflow: values are ``value_width``-bit two's complement, sums ``acc_width``-bit. An
accumulation that would leave the ``acc_width`` range writes the old sum back first (rule 2)
instead of saturating, so the result stays exact; the sticky flag reports that it happened
(it means ``acc_width`` is narrow for the traffic, or the threshold is off).

Byte accounting: an input transaction carries ``ceil(addr_width/8) + ceil(value_width/8)``
bytes, a write ``ceil(addr_width/8) + ceil(acc_width/8)`` bytes.
"""

import dataclasses
import enum

import numpy as np

from .validate import check_int

__all__ = ["Cause", "CombinerParams", "Combiner", "CombinerResult", "run", "check_sums"]


class Cause(enum.IntEnum):
    """Why a write left the block (reported by the model, not by the hardware)."""

    BYPASS = 0       #: ``|v| >= threshold``, written as it came
    THRESHOLD = 1    #: the entry's sum reached the threshold
    MAX_UPDATES = 2  #: the entry merged ``max_updates`` values
    OVERFLOW = 3     #: the next sum would not fit ``acc_width`` bits; old sum written first
    EVICT = 4        #: the entry was the round-robin victim of a miss in a full set
    THROUGH = 5      #: a tiny value missed in a full set and was written through
    FLUSH = 6        #: written by a flush


def _check_optional_threshold(name, value, high):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be None or an integer, not {value!r}")
    if not 1 <= int(value) <= high:
        raise ValueError(f"{name} must be None or between 1 and {high}, not {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class CombinerParams:
    """One configuration of the write-combining accumulator.

    Parameters
    ----------
    addr_width : int
        Address bits, 2 to 64 (default 32).
    value_width : int
        Bits of an update value, two's complement, 2 to 32 (default 16).
    acc_width : int or None
        Bits of an accumulated sum and of a written delta, ``value_width`` to 64; ``None``
        takes ``value_width`` (a write is as wide as an update).
    sets : int
        Sets of the buffer, a power of two from 1 to ``2**(addr_width - 1)`` (default 32).
        The set index is the low address bits, the tag the rest.
    ways : int
        Ways per set, 1 to 64 (default 4).
    threshold : int or None
        ``T``: values with ``|v| >= T`` bypass the buffer and a sum with ``|sum| >= T`` is
        written back; 1 to ``2**(value_width - 1)``, or ``None`` for neither (default 50, the
        seed design's value).
    small_threshold : int or None
        ``S``: a miss with ``|v| < S`` never evicts (it is written through when its set is
        full, or dropped in lossy mode); 1 to ``T - 1`` (to ``2**(value_width - 1)`` without
        ``T``), or ``None`` (default) to treat small values like the others.
    lossy : bool
        Drop tiny misses as the seed's dual-threshold variant does (default ``False``).
        Needs ``small_threshold``.
    max_updates : int
        An entry is written back when it has merged this many values, 2 to 65536 (default 255).
    fifo_depth : int
        Entries of the write-back FIFO, 2 to 65536 (default 16). Timing only.
    burst : int
        The FIFO starts draining when it holds this many entries and then drains until empty,
        1 to ``fifo_depth`` (default ``fifo_depth``). Timing only.

    Raises
    ------
    TypeError
        For a parameter of the wrong type.
    ValueError
        For a value out of range, naming the parameter and the rule.
    """

    addr_width: int = 32
    value_width: int = 16
    acc_width: int | None = None
    sets: int = 32
    ways: int = 4
    threshold: int | None = 50
    small_threshold: int | None = None
    lossy: bool = False
    max_updates: int = 255
    fifo_depth: int = 16
    burst: int | None = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("addr_width", check_int("addr_width", self.addr_width, low=2, high=64))
        put("value_width", check_int("value_width", self.value_width, low=2, high=32))
        if self.acc_width is None:
            put("acc_width", self.value_width)
        put("acc_width", check_int("acc_width", self.acc_width, low=self.value_width, high=64))
        sets = self.sets
        if isinstance(sets, bool) or not isinstance(sets, (int, np.integer)):
            raise TypeError(f"sets must be an integer, not {sets!r}")
        high = 1 << (self.addr_width - 1)
        if not (1 <= sets <= high and sets & (sets - 1) == 0):
            raise ValueError(f"sets must be a power of two between 1 and {high}, not {sets!r}")
        put("sets", int(sets))
        put("ways", check_int("ways", self.ways, low=1, high=64))
        limit = 1 << (self.value_width - 1)
        put("threshold", _check_optional_threshold("threshold", self.threshold, limit))
        put("small_threshold", _check_optional_threshold(
            "small_threshold", self.small_threshold,
            limit if self.threshold is None else self.threshold - 1))
        if not isinstance(self.lossy, (bool, np.bool_)):
            raise TypeError(f"lossy must be a bool, not {self.lossy!r}")
        put("lossy", bool(self.lossy))
        if self.lossy and self.small_threshold is None:
            raise ValueError(f"lossy must be False when small_threshold is None, "
                             f"not {self.lossy!r}")
        put("max_updates", check_int("max_updates", self.max_updates, low=2, high=1 << 16))
        put("fifo_depth", check_int("fifo_depth", self.fifo_depth, low=2, high=1 << 16))
        if self.burst is None:
            put("burst", self.fifo_depth)
        put("burst", check_int("burst", self.burst, low=1, high=self.fifo_depth))

    @property
    def set_bits(self):
        """Address bits that select the set."""
        return self.sets.bit_length() - 1

    @property
    def tag_width(self):
        """Address bits stored as the tag."""
        return self.addr_width - self.set_bits

    @property
    def entries(self):
        """Entries of the buffer (``sets * ways``)."""
        return self.sets * self.ways

    @property
    def value_range(self):
        """``(low, high)``: the inclusive range of an update value."""
        return -(1 << (self.value_width - 1)), (1 << (self.value_width - 1)) - 1

    @property
    def acc_range(self):
        """``(low, high)``: the inclusive range of a sum and of a written delta."""
        return -(1 << (self.acc_width - 1)), (1 << (self.acc_width - 1)) - 1

    @property
    def bytes_in(self):
        """Bytes one update carries (address and value, each rounded up to whole bytes)."""
        return -(-self.addr_width // 8) + -(-self.value_width // 8)

    @property
    def bytes_out(self):
        """Bytes one write carries (address and delta, each rounded up to whole bytes)."""
        return -(-self.addr_width // 8) + -(-self.acc_width // 8)


@dataclasses.dataclass(frozen=True)
class CombinerResult:
    """What :func:`run` returns.

    Members
    -------
    params : CombinerParams
    addr : numpy.ndarray of uint64
        Address of each write, in the order the block sends them.
    delta : numpy.ndarray of int64
        Delta of each write (nonzero, within ``params.acc_range``).
    cause : numpy.ndarray of uint8
        :class:`Cause` of each write.
    flush_ends : numpy.ndarray of int64
        For each flush, the number of writes sent when it completed.
    dropped : tuple of two numpy.ndarray
        ``(addr, value)`` of the tiny misses that lossy mode discarded (empty otherwise).
    stats : dict
        ``updates`` (accepted), ``writes``, one count per cause name (lower case),
        ``absorbed_zero`` (zero values that missed), ``freed_zero`` (entries whose sum came
        back to 0), ``dropped`` and ``dropped_sum`` (lossy mode), ``overflow_flag`` (the
        sticky flag) and ``held`` (entries still buffered at the end; 0 after a final flush).
    """

    params: CombinerParams
    addr: np.ndarray
    delta: np.ndarray
    cause: np.ndarray
    flush_ends: np.ndarray
    dropped: tuple
    stats: dict

    @property
    def transactions_in(self):
        return self.stats["updates"]

    @property
    def transactions_out(self):
        return self.stats["writes"]

    @property
    def bytes_in(self):
        return self.stats["updates"] * self.params.bytes_in

    @property
    def bytes_out(self):
        return self.stats["writes"] * self.params.bytes_out

    @property
    def reduction(self):
        """Transactions in per transaction out (``inf`` when nothing was written)."""
        out = self.transactions_out
        return self.transactions_in / out if out else float("inf")

    @property
    def byte_reduction(self):
        """Bytes in per byte out (``inf`` when nothing was written)."""
        out = self.bytes_out
        return self.bytes_in / out if out else float("inf")


class Combiner:
    """The accumulator's state, advanced one accepted update or one flush at a time.

    ``update(addr, value)`` and ``flush()`` apply the rules in the module docstring and append
    the writes they cause to ``writes`` (a list of ``(addr, delta, cause)``). ``entries()``
    returns the buffer's contents. Arguments are Python integers and are not checked here
    (:func:`run` checks whole arrays); the model is sequential by nature, one update at a time.
    """

    def __init__(self, params):
        if not isinstance(params, CombinerParams):
            raise TypeError(f"params must be a CombinerParams, not {params!r}")
        p = self.params = params
        self._mask = p.sets - 1
        self._shift = p.set_bits
        self._tags = [[None] * p.ways for _ in range(p.sets)]   # None: way is free
        self._accs = [[0] * p.ways for _ in range(p.sets)]
        self._counts = [[0] * p.ways for _ in range(p.sets)]
        self._rr = [0] * p.sets
        self.writes = []
        self.dropped = []
        self.stats = {"updates": 0, "writes": 0, **{c.name.lower(): 0 for c in Cause},
                      "absorbed_zero": 0, "freed_zero": 0, "dropped": 0, "dropped_sum": 0,
                      "overflow_flag": False}

    def _write(self, addr, delta, cause):
        self.writes.append((addr, delta, cause))

    def update(self, addr, value):
        """Accept one update (``0 <= addr < 2**addr_width``, ``value`` in range)."""
        p = self.params
        stats = self.stats
        stats["updates"] += 1
        threshold = p.threshold
        if threshold is not None and (value >= threshold or value <= -threshold):
            self._write(addr, value, Cause.BYPASS)
            return
        s = addr & self._mask
        tag = addr >> self._shift
        tags = self._tags[s]
        if tag in tags:
            w = tags.index(tag)
            accs = self._accs[s]
            acc = accs[w]
            total = acc + value
            count = self._counts[s][w] + 1
            low, high = p.acc_range
            if total > high or total < low:
                self._write(addr, acc, Cause.OVERFLOW)
                accs[w] = value
                self._counts[s][w] = 1
                stats["overflow_flag"] = True
            elif threshold is not None and (total >= threshold or total <= -threshold):
                self._write(addr, total, Cause.THRESHOLD)
                tags[w] = None
            elif count >= p.max_updates:
                if total:
                    self._write(addr, total, Cause.MAX_UPDATES)
                else:
                    stats["freed_zero"] += 1
                tags[w] = None
            elif total == 0:
                stats["freed_zero"] += 1
                tags[w] = None
            else:
                accs[w] = total
                self._counts[s][w] = count
            return
        if value == 0:
            stats["absorbed_zero"] += 1
            return
        small = p.small_threshold
        tiny = small is not None and -small < value < small
        if tiny and p.lossy:
            stats["dropped"] += 1
            stats["dropped_sum"] += value
            self.dropped.append((addr, value))
            return
        if None in tags:
            w = tags.index(None)
        elif tiny:
            self._write(addr, value, Cause.THROUGH)
            return
        else:
            w = self._rr[s]
            self._write((tags[w] << self._shift) | s, self._accs[s][w], Cause.EVICT)
            self._rr[s] = w + 1 if w + 1 < p.ways else 0
        tags[w] = tag
        self._accs[s][w] = value
        self._counts[s][w] = 1

    def flush(self):
        """Write back every entry (set order, then way order) and free it."""
        shift = self._shift
        for s, tags in enumerate(self._tags):
            accs = self._accs[s]
            for w, tag in enumerate(tags):
                if tag is not None:
                    self._write((tag << shift) | s, accs[w], Cause.FLUSH)
                    tags[w] = None

    def entries(self):
        """The buffer's contents: a list of ``(set, way, addr, acc, count)`` of valid entries."""
        shift = self._shift
        return [(s, w, (tag << shift) | s, self._accs[s][w], self._counts[s][w])
                for s, tags in enumerate(self._tags)
                for w, tag in enumerate(tags) if tag is not None]


def _check_stream(params, addr, value):
    addr = np.asarray(addr)
    value = np.asarray(value)
    for name, array in (("addr", addr), ("value", value)):
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"{name} must be a 1-D integer array, not "
                            f"{array.ndim}-D {array.dtype}")
    if addr.shape != value.shape:
        raise ValueError(f"addr and value must have the same length, not {addr.size} and "
                         f"{value.size}")
    top = (1 << params.addr_width) - 1
    too_high = addr > top if params.addr_width < 64 else np.zeros(addr.shape, dtype=bool)
    bad = np.flatnonzero(too_high | (addr < 0) if addr.dtype.kind == "i" else too_high)
    if bad.size:
        raise ValueError(f"addr must be between 0 and {top} (addr_width "
                         f"{params.addr_width}), not {int(addr[bad[0]])} at index {bad[0]}")
    low, high = params.value_range
    bad = np.flatnonzero((value < low) | (value > high))
    if bad.size:
        raise ValueError(f"value must be between {low} and {high} (value_width "
                         f"{params.value_width}), not {int(value[bad[0]])} at index {bad[0]}; "
                         f"quantize with saturation first")
    return addr, value


def run(params, addr, value, *, flush_after=(), final_flush=True):
    """Replay an update stream through the model and return a :class:`CombinerResult`.

    Parameters
    ----------
    params : CombinerParams
    addr, value : 1-D integer arrays of the same length
        The accepted updates in order; addresses in ``[0, 2**addr_width)``, values in
        ``params.value_range`` (out-of-range values are refused, not clipped).
    flush_after : sequence of int
        Flush points: a flush after the first ``k`` updates for each ``k`` (0 to the length,
        non-decreasing; a repeated point is a flush of an empty buffer and writes nothing).
    final_flush : bool
        Flush after the last update too (default ``True``); ``False`` leaves entries held, as
        a block without a flush would.

    Raises
    ------
    TypeError, ValueError
        For a bad array or flush point, naming it and the rule.
    """
    if not isinstance(params, CombinerParams):
        raise TypeError(f"params must be a CombinerParams, not {params!r}")
    addr, value = _check_stream(params, addr, value)
    points = [check_int("flush_after", k, low=0, high=addr.size) for k in flush_after]
    if any(b < a for a, b in zip(points, points[1:])):
        raise ValueError(f"flush_after must be non-decreasing, not {list(flush_after)!r}")
    if final_flush:
        points.append(addr.size)
    model = Combiner(params)
    update = model.update
    addr_list = addr.tolist()
    value_list = value.tolist()
    flush_ends = []
    start = 0
    for stop in points + [addr.size]:
        for a, v in zip(addr_list[start:stop], value_list[start:stop]):
            update(a, v)
        start = stop
        if len(flush_ends) < len(points):
            model.flush()
            flush_ends.append(len(model.writes))
    writes = model.writes
    stats = dict(model.stats)
    stats["writes"] = len(writes)
    out_addr = np.fromiter((w[0] for w in writes), dtype=np.uint64, count=len(writes))
    out_delta = np.fromiter((w[1] for w in writes), dtype=np.int64, count=len(writes))
    out_cause = np.fromiter((w[2] for w in writes), dtype=np.uint8, count=len(writes))
    counts = np.bincount(out_cause, minlength=len(Cause))
    for cause in Cause:
        stats[cause.name.lower()] = int(counts[cause])
    stats["held"] = len(model.entries())
    dropped = (np.array([d[0] for d in model.dropped], dtype=np.uint64),
               np.array([d[1] for d in model.dropped], dtype=np.int64))
    return CombinerResult(params=params, addr=out_addr, delta=out_delta, cause=out_cause,
                          flush_ends=np.asarray(flush_ends, dtype=np.int64), dropped=dropped,
                          stats=stats)


def check_sums(addr_in, value_in, addr_out, delta_out, *, dropped=None):
    """Check that per address the written deltas sum to the accepted values.

    ``dropped`` is an optional ``(addr, value)`` pair of arrays that lossy mode discarded; they
    are counted on the written side. Returns the number of distinct addresses checked;
    raises ``AssertionError`` naming the first address whose sums differ.
    """
    addr_in = np.asarray(addr_in, dtype=np.uint64)
    addr_out = np.asarray(addr_out, dtype=np.uint64)
    value_in = np.asarray(value_in, dtype=np.int64)
    delta_out = np.asarray(delta_out, dtype=np.int64)
    if dropped is not None:
        addr_out = np.concatenate([addr_out, np.asarray(dropped[0], dtype=np.uint64)])
        delta_out = np.concatenate([delta_out, np.asarray(dropped[1], dtype=np.int64)])
    keys, inverse = np.unique(np.concatenate([addr_in, addr_out]), return_inverse=True)
    sums = np.zeros(keys.size, dtype=np.int64)
    np.add.at(sums, inverse[:addr_in.size], value_in)
    np.subtract.at(sums, inverse[addr_in.size:], delta_out)
    bad = np.flatnonzero(sums)
    if bad.size:
        raise AssertionError(f"address {int(keys[bad[0]])}: written deltas differ from the "
                             f"accepted values by {-int(sums[bad[0]])} "
                             f"({bad.size} addresses differ)")
    return int(keys.size)
