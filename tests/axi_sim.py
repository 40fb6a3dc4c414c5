"""AXI channels driven and watched from an Amaranth testbench, one cycle at a time.

A :class:`Source` offers beats from a queue, pausing at random between them and holding
each until it is taken; a :class:`Sink` takes beats with random pauses and checks the
channel's rules on the other side: once VALID is high it stays high, payload unchanged,
until READY. Each cycle a test calls :func:`step` over every channel: all drive, then all
sample (so a READY that depends on a VALID is seen), then the clock ticks.
"""

import collections


class Source:
    """Drives ``valid`` and ``fields`` (``{name: signal}``) from :attr:`queue` (dicts)."""

    def __init__(self, valid, ready, fields, *, rng, pause=0.0):
        self.valid, self.ready, self.fields = valid, ready, fields
        self.rng, self.pause = rng, pause
        self.queue = collections.deque()
        self.holding = None
        self.sent = 0

    def drive(self, ctx):
        if self.holding is None and self.queue and self.rng.random() >= self.pause:
            self.holding = self.queue.popleft()
        ctx.set(self.valid, self.holding is not None)
        for name, value in (self.holding or {}).items():
            ctx.set(self.fields[name], value)

    def sample(self, ctx):
        if self.holding is not None and ctx.get(self.ready):
            self.holding = None
            self.sent += 1

    @property
    def idle(self):
        return self.holding is None and not self.queue


class Sink:
    """Drives ``ready`` with random pauses; keeps the beats taken in :attr:`beats`.

    ``held`` gives the part of a beat that must not change while it waits (all of it by
    default)."""

    def __init__(self, valid, ready, fields, *, rng, pause=0.0, name="channel",
                 held=lambda beat: beat):
        self.valid, self.ready, self.fields = valid, ready, fields
        self.rng, self.pause, self.name, self.held = rng, pause, name, held
        self.beats = []
        self.offered = None     # a beat offered and not taken yet

    def drive(self, ctx):
        ctx.set(self.ready, self.rng.random() >= self.pause)

    def sample(self, ctx):
        if not ctx.get(self.valid):
            assert self.offered is None, f"{self.name}: VALID fell before READY"
            return None
        beat = {name: int(ctx.get(signal)) for name, signal in self.fields.items()}
        assert self.offered is None or self.held(self.offered) == self.held(beat), \
            f"{self.name}: the payload changed while waiting, {self.offered} then {beat}"
        if ctx.get(self.ready):
            self.beats.append(beat)
            self.offered = None
            return beat
        self.offered = beat
        return None


def channel(bus, prefix, names):
    """``{name: signal}`` of ``bus``'s ``<prefix><name>`` signals that exist."""
    return {name: getattr(bus, prefix + name) for name in names if hasattr(bus, prefix + name)}


async def step(ctx, channels):
    """One cycle: every channel drives, then every channel samples, then the clock ticks."""
    for c in channels:
        c.drive(ctx)
    for c in channels:
        c.sample(ctx)
    await ctx.tick()
