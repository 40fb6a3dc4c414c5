"""The generator's parameter set, shared by the golden model, the hardware and the reports."""

import dataclasses

from .validate import check_int
from .formats import check_counter_bits, check_max_workers, count_limit
from .lines import check_line_bits

__all__ = ["FabricParams", "ADDR_BITS", "HW_MAX_WORKERS_RANGE", "PRESETS"]

#: Width of a request's line address (a 64-byte line at L=512 covers 256 GiB).
ADDR_BITS = 32
#: The hardware's range for MAX_WORKERS: the contribution bitmap is one bit per worker.
HW_MAX_WORKERS_RANGE = (2, 64)


@dataclasses.dataclass(frozen=True)
class FabricParams:
    """One configuration of the controller.

    Parameters
    ----------
    line_bits : int
        Bits per line: 128, 256, 512 or 1024.
    max_workers : int
        Workers a slot can take contributions from (2 to 64): the width of the
        contribution bitmap and of the worker id.
    depth : int
        Slots per window (1 to 65536).
    num_windows : int
        Aggregation windows (1 to 8).
    counter_bits : int or None
        Counter width; None gives ``ceil(log2(max_workers + 1))``, which never saturates.
        A narrower counter saves area and caps the workers a job may use at
        ``2**counter_bits - 1`` (the capability registers report it). A width worked out
        from ``max_workers`` is worked out again when :func:`dataclasses.replace` changes
        ``max_workers`` (a width given equal to the one worked out counts as worked out).

    Raises
    ------
    TypeError, ValueError
        On a parameter of the wrong type or out of range, naming it and the rule.
    """

    line_bits: int = 512
    max_workers: int = 16
    depth: int = 64
    num_windows: int = 2
    counter_bits: int | None = None
    # The width worked out from max_workers, when counter_bits was not given: replace()
    # passes every field on, and a counter_bits still equal to it is worked out again.
    _derived_counter_bits: int | None = dataclasses.field(default=None, repr=False,
                                                          compare=False)

    def __post_init__(self):
        check_line_bits(self.line_bits)
        check_max_workers(self.max_workers, low=HW_MAX_WORKERS_RANGE[0], high=HW_MAX_WORKERS_RANGE[1])
        check_int("depth", self.depth, low=1, high=1 << 16)
        check_int("num_windows", self.num_windows, low=1, high=8)
        derived = (self.counter_bits is None
                   or (self._derived_counter_bits is not None
                       and self.counter_bits == self._derived_counter_bits))
        counter_bits = check_counter_bits(None if derived else self.counter_bits,
                                          max_workers=self.max_workers)
        object.__setattr__(self, "counter_bits", counter_bits)
        object.__setattr__(self, "_derived_counter_bits", counter_bits if derived else None)

    @property
    def worker_bits(self):
        """Width of the worker id field."""
        return max(1, (self.max_workers - 1).bit_length())

    @property
    def workers_served(self):
        """Most workers whose votes the counters hold without saturating."""
        return min(self.max_workers, count_limit(self.counter_bits))

    @property
    def name(self):
        """A short name that carries the parameters, used for module and file names."""
        return (f"l{self.line_bits}_w{self.max_workers}_c{self.counter_bits}"
                f"_d{self.depth}_n{self.num_windows}")

    def as_dict(self):
        """The parameters by name (what a manifest records)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.repr}


#: Named parameter sets for the generator and the reports.
PRESETS = {
    "default": FabricParams(),
    "small": FabricParams(line_bits=128, max_workers=4, depth=8, num_windows=2),
}
