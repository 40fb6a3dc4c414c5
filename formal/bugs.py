"""Planted bugs: each one a mistake that a proof must catch with a counterexample.

A bug is planted by replacing one name in one hardware module while the proof's design is
elaborated (:func:`planted`), so the shipped sources stay as they are and every bug is
written here, next to the proof that catches it. The proofs run on them expect ``FAIL``.
"""

import contextlib
import dataclasses
import functools
import importlib
import types

from amaranth.hdl import C, Cat, Elaboratable, Module, Signal
from amaranth.lib import fifo

from ..hw import axi_data_port, schedule

__all__ = ["PlantedBug", "BUGS", "planted"]


@dataclasses.dataclass(frozen=True)
class PlantedBug:
    """``patches`` maps ``"module:name"`` (a module of ``neuron_fabric``) to a function of the
    name's shipped value that returns the bugged one."""
    name: str
    description: str
    patches: dict


@contextlib.contextmanager
def planted(bug):
    """Plant ``bug`` (None: nothing) for the duration of the block."""
    if bug is None:
        yield
        return
    saved = []
    try:
        for target, bugged in bug.patches.items():
            module_name, attribute = target.split(":")
            module = importlib.import_module(f"neuron_fabric.{module_name}")
            shipped = getattr(module, attribute)
            saved.append((module, attribute, shipped))
            setattr(module, attribute, bugged(shipped))
        yield
    finally:
        for module, attribute, shipped in reversed(saved):
            setattr(module, attribute, shipped)


def _accepted_kept_through_reset(shipped):
    # The control plane's record of which words in flight were accepted writes survives a
    # reset, so it no longer drops the flags of words formed before one.
    def signal(*args, **kwargs):
        if kwargs.get("name") == "accepted_writes":
            kwargs["reset_less"] = True
        return shipped(*args, **kwargs)
    signal.like = shipped.like
    return signal


def _tie_reads_negative(shipped):
    # 2n >= N instead of 2n > N: the thresholds of N - 1, which differ from N's on ties only.
    def majority_thresholds(num_workers, *, max_workers):
        return shipped(num_workers - 1, max_workers=max_workers)
    return majority_thresholds


def _three_ahead_not_forwarded(shipped):
    # A write three words ahead is not copied: the row folds onto nothing.
    return {distance: schedule.Source.NONE if distance == 3 else source
            for distance, source in shipped.items()}


def _stale_row_taken(shipped):
    # The tiles are told to take the block RAM's row whatever the bitmap says: the first
    # write of a slot's lifetime folds onto what the row held before.
    def kept_halves(m, terms, op, name):
        return [C(1, 1)] if name == "bitmap_used" else shipped(m, terms, op, name)
    return kept_halves


def _stored_bitmap_ignored(shipped):
    # The duplicate test asks only the writes in flight, never the stored bitmap.
    def kept(m, value, name):
        return shipped(m, C(0, 1) if name == "ram_decides_duplicate" else value, name)
    return kept


class _SwappingFIFO(Elaboratable):
    """A buffer that hands out its first two entries in the wrong order: it holds the first
    entry back until the second has gone in, and puts it in the cycle after (where a third
    entry comes in that cycle, the third is lost too)."""

    def __init__(self, *, width, depth):
        self._inner = fifo.SyncFIFOBuffered(width=width, depth=depth)
        self.w_en, self.w_data = Signal(), Signal(width)
        self.r_en, self.r_data, self.r_rdy = Signal(), Signal(width), Signal()
        self.w_rdy, self.level = self._inner.w_rdy, self._inner.level

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self._inner
        held, holding, swapped = Signal.like(self.w_data), Signal(), Signal()
        m.d.comb += [inner.w_en.eq(self.w_en), inner.w_data.eq(self.w_data),
                     self.r_data.eq(inner.r_data), self.r_rdy.eq(inner.r_rdy),
                     inner.r_en.eq(self.r_en)]
        with m.If(~swapped & self.w_en):
            with m.If(~holding):
                m.d.comb += inner.w_en.eq(0)
                m.d.sync += [held.eq(self.w_data), holding.eq(1)]
            with m.Else():
                m.d.sync += [swapped.eq(1), holding.eq(0)]
        # The held entry goes in the cycle after the second one.
        late = Signal()
        m.d.sync += late.eq(~swapped & self.w_en & holding)
        with m.If(late):
            m.d.comb += [inner.w_en.eq(1), inner.w_data.eq(held)]
        return m


def _responses_swapped(shipped):
    return types.SimpleNamespace(SyncFIFOBuffered=_SwappingFIFO)


class _EveryItemLast(Elaboratable):
    """The AXI data port's tag FIFO (``shipped``, the class it builds), with every tag
    marked as its burst's last."""

    def __init__(self, shipped, *, width, depth):
        self._inner = shipped(width=width, depth=depth)
        self.w_en, self.w_data, self.r_en = Signal(), Signal(width), Signal()
        self.r_data, self.r_rdy = self._inner.r_data, self._inner.r_rdy
        self.w_rdy, self.level = self._inner.w_rdy, self._inner.level
        id_width = width - axi_data_port.tag_layout(id_width=0).size
        self._last = 1 << axi_data_port.tag_layout(id_width=id_width)["last"].offset

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self._inner
        m.d.comb += [inner.w_en.eq(self.w_en), inner.w_data.eq(self.w_data | self._last),
                     inner.r_en.eq(self.r_en)]
        return m


def _every_item_last(shipped):
    return functools.partial(_EveryItemLast, shipped)


def _read_clear_keeps_bitmap(shipped):
    class ControlPlane(shipped):
        """Writes a READ_CLEAR's row back with its bitmap as it was: the slot's lines are
        emptied, its record of who wrote is not."""
        def _write_back(self, m, word, flight, st):
            super()._write_back(m, word, flight,
                                types.SimpleNamespace(**{**vars(st), "is_read_clear": C(0, 1)}))
    return ControlPlane


def _clear_folded_onto(shipped):
    class ControlPlane(shipped):
        """Takes a READ_CLEAR one word ahead for a write: the next write of the slot folds
        onto the sum of the lifetime the READ_CLEAR ended."""
        def _fold_and_late_words(self, m, regs, word, flight, st):
            clears = [C(0, 1), *flight.clears[1:]]
            super()._fold_and_late_words(m, regs, word, types.SimpleNamespace(
                **{**vars(flight), "clears": clears}), st)
    return ControlPlane


def _saturation_dropped(shipped):
    class LaneTile(shipped):
        """Raises a fold's INVALID_CODE as shipped and its SATURATED never."""
        def _flags(self, m, groups, live):
            m.d.sync += self.invalid.eq(live & Cat(group.flags[1] for group in groups).any())
    return LaneTile


def _bit_flipped(shipped):
    class FlippingPassthrough(shipped):
        """Flips one bit of the memory's read data on its way up."""
        def elaborate(self, platform):
            m = super().elaborate(platform)
            m.d.comb += self.o_data.payload[5].eq(~self.i_mem.payload[5])
            return m
    return FlippingPassthrough


def _commit_not_forwarded(shipped):
    class Pipeline(shipped):
        """Reads a set's row from memory while the update three ahead writes it back."""
        def field_copies(self, name, value):
            return super().field_copies(name, C(0, 1) if name == "r_from_commit" else value)
    return Pipeline


#: The planted bugs, by name.
BUGS = {bug.name: bug for bug in (
    PlantedBug("reset_flags", "the tiles' mask after a reset ends at the compare stage, and "
               "the control plane's record of accepted writes survives the reset, so the "
               "flags of a word in flight before a one-cycle reset are counted after it",
               {"hw.lane_tile:FLAGS_STAGE": lambda shipped: schedule.COMPARE_STAGE,
                "hw.control_plane:Signal": _accepted_kept_through_reset}),
    PlantedBug("tie_rule", "a tie reads as a negative majority (2n >= N)",
               {"hw.sign_count:majority_thresholds": _tie_reads_negative,
                "hw.control_plane:majority_thresholds": _tie_reads_negative}),
    PlantedBug("forward_three_ahead", "a write three words ahead is not forwarded",
               {"hw.control_plane:FORWARD_DISTANCES": _three_ahead_not_forwarded}),
    PlantedBug("stale_row", "a slot's block RAM row is folded onto whatever its bitmap says: "
               "the first write of a lifetime adds to what the row held before",
               {"hw.control_plane:kept_halves": _stale_row_taken}),
    PlantedBug("response_order", "the first two responses (and memory requests) leave "
               "swapped", {"hw.control_plane:fifo": _responses_swapped}),
    PlantedBug("duplicate_check", "the duplicate test never asks the stored bitmap",
               {"hw.control_plane:kept": _stored_bitmap_ignored}),
    PlantedBug("read_clear_bitmap", "a READ_CLEAR empties the slot's lines but writes its "
               "bitmap back full, so every write of the slot's next lifetime is refused as "
               "DUPLICATE", {"hw.controller:ControlPlane": _read_clear_keeps_bitmap}),
    PlantedBug("clear_folded_onto", "a write one word behind a READ_CLEAR of its slot "
               "folds onto the sum of the lifetime that READ_CLEAR ended, so the slot's next "
               "lifetime reads the last one's votes too",
               {"hw.controller:ControlPlane": _clear_folded_onto}),
    PlantedBug("saturation_dropped", "the tiles never raise SATURATED: a fold that "
               "saturates a lane leaves ERRORS as it was",
               {"hw.controller:LaneTile": _saturation_dropped}),
    PlantedBug("item_last", "the AXI data port takes every item for its burst's last: a "
               "B for each W beat, RLAST on every R beat",
               {"hw.axi_data_port:SyncFIFO": _every_item_last}),
    PlantedBug("combiner_forward", "the write combiner reads a set's row from memory while "
               "the update three ahead of it writes that set back, so it sums into a stale "
               "row", {"hw.combiner:_Pipeline": _commit_not_forwarded}),
    PlantedBug("passthrough_bit", "bit 5 of the memory's read data is flipped",
               {"hw.controller:Fp32Passthrough": _bit_flipped,
                "formal.blocks:Fp32Passthrough": _bit_flipped}),
)}
