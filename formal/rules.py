"""Properties every proof shares: the reset at the start and the stream transfer rules."""

from amaranth.asserts import AnySeq, Initial
from amaranth.hdl import Assert, Assume, ResetSignal, Signal, Value

__all__ = ["free", "reset_at_start", "after_reset", "StreamRules", "past"]


def free(m, *targets):
    """Drive each of ``targets`` with an arbitrary value every cycle (``AnySeq``)."""
    for target in targets:
        value = Value.cast(target)
        m.d.comb += value.eq(AnySeq(len(value)))


def reset_at_start(m):
    """Reset is asserted in the first cycle and never again; returns a signal that is high
    from the first cycle after reset on, when every register with a reset holds its value
    (whatever the registers held at power-up)."""
    m.d.comb += Assume(ResetSignal() == Initial())
    return after_reset(m)


def after_reset(m):
    """A signal high from the cycle after a reset until the next one, low in the first cycle
    whatever the registers held at power-up."""
    running = Signal()
    m.d.sync += running.eq(1)
    return running & ~Initial()


def past(m, value, *, name):
    """``value`` one cycle ago; 0 in the first cycle and in the cycle after a reset, since
    what happened during a reset is not the block's to answer for."""
    value = Value.cast(value)
    previous = Signal(len(value), name=name)
    m.d.sync += previous.eq(value)
    return previous


class StreamRules:
    """The transfer rules of :mod:`amaranth.lib.stream` on one port.

    A source holds ``valid`` until the transfer and keeps ``payload`` stable while it waits;
    ``valid`` never waits on ``ready`` (checked on the netlist: see
    :func:`neuron_fabric.formal.runner.check_valid_ignores_ready`). On an input the rules are
    assumed of the environment; on an output they are asserted of the block. The sink's
    ``ready`` is free in both cases: any pattern of backpressure.
    """

    @staticmethod
    def drive_input(m, port, *, name, active=None):
        """Drive ``port`` (an input stream of the block) as an arbitrary source that obeys
        the rules, with arbitrary ``valid`` and ``payload`` where it is free to change."""
        free(m, port.valid, port.payload)
        StreamRules._held(m, port, name=name, check=Assume, active=active)

    @staticmethod
    def check_output(m, port, *, name, active):
        """Leave ``port.ready`` free and assert the rules on ``port`` (an output stream)
        while ``active`` (from the first cycle after reset)."""
        free(m, port.ready)
        StreamRules._held(m, port, name=name, check=Assert, active=active)

    @staticmethod
    def _held(m, port, *, name, check, active):
        payload = Value.cast(port.payload)
        waiting = past(m, port.valid & ~port.ready, name=f"{name}_waiting")
        before = past(m, payload, name=f"{name}_payload_before")
        condition = waiting if active is None else waiting & active
        with m.If(condition):
            m.d.comb += [check(port.valid), check(payload == before)]
