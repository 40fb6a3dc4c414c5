"""Per-lane arithmetic written as gates, for the lane engines.

A lane's state is a few bits, and there are hundreds of lanes per line. Written with ``+``
and ``>``, each lane gets its own adder and comparators, which synthesis maps to carry
chains (on ECP5, a CCU2C per two bits, each counting as two LUT4s). Written as the gates
below, synthesis packs a lane's step and tests into a handful of LUT4s, and the values the
lanes compare against (a threshold from NUM_WORKERS or GATE) are computed once, outside.
"""

from amaranth.hdl import C, Cat, Signal, Value

__all__ = ["KEEP", "step", "carry_out", "widen", "readout_terms", "select_line", "read_line",
           "kept_tree", "kept_halves", "kept"]

#: The attribute that keeps a wire or a register through synthesis: copies of a register
#: that cut its fan-out, and the gates of a :func:`kept_tree`.
KEEP = {"keep": 1}


def step(value, *, up, down):
    """``value + 1`` where ``up``, ``value - 1`` where ``down`` (never both), in
    ``len(value)`` bits.

    Bit ``k`` toggles when every lower bit is 1 (counting up) or 0 (counting down). Wraps
    like an adder of the same width; the engines keep ``up`` and ``down`` low at their limits.
    """
    value = Value.cast(value)
    ones, zeros = Value.cast(up), Value.cast(down)
    bits = []
    for k in range(len(value)):
        bits.append(value[k] ^ (ones | zeros))
        ones = ones & value[k]
        zeros = zeros & ~value[k]
    return Cat(bits)


def carry_out(a, b, *, carry_in=0):
    """The carry out of ``a + b + carry_in`` (``a`` and ``b`` of equal width), as gates.

    With ``b = ~t``: ``a > t`` for ``carry_in = 0``, ``a >= t`` for ``carry_in = 1``.
    """
    a, b = Value.cast(a), Value.cast(b)
    if len(a) != len(b):
        raise ValueError(f"carry_out operands must have equal widths, not {len(a)} and {len(b)}")
    carry = Value.cast(carry_in)
    for k in range(len(a)):
        carry = (a[k] & b[k]) | (carry & (a[k] | b[k]))
    return carry


def widen(value, width):
    """``value`` zero-extended to ``width`` bits (the constant bits fold away in synthesis)."""
    value = Value.cast(value)
    return Cat(value, C(0, width - len(value))) if width > len(value) else value


def readout_terms(readout, beat, lines_by_readout):
    """``[(select, line)]``, one pair per distinct line of ``lines_by_readout`` (``{Readout:
    [line, ...]}``): ``select`` is 1 when ``readout`` and ``beat`` ask for that line. A line
    that answers several beats (a ``TERNARY`` line 0 is the ``SIGN`` line) gets one select."""
    selects, lines = {}, {}
    for kind, kind_lines in lines_by_readout.items():
        for index, line in enumerate(kind_lines):
            lines[id(line)] = line
            selects.setdefault(id(line), []).append((readout == kind) & (beat == index))
    return [(Cat(selects[key]).any(), line) for key, line in lines.items()]


def select_line(terms):
    """The OR of every ``line`` of ``terms`` whose ``select`` is 1 (selects are one-hot, or
    all 0 for a zero line): each bit of the result looks only at its own lane's bits."""
    result = None
    for select, line in terms:
        line = Value.cast(line)
        term = line & Value.cast(select).replicate(len(line))
        result = term if result is None else result | term
    return result


def read_line(m, p_in, p_out, lines_by_readout):
    """Drive ``p_out.readout`` with line ``p_in.beat`` of readout ``p_in.readout``: one line
    per cycle, each bit choosing among its own lane's bits. A beat past the readout's last
    line, or a readout not listed, reads 0."""
    m.d.comb += p_out.readout.eq(select_line(readout_terms(p_in.readout, p_in.beat,
                                                           lines_by_readout)))


def kept_tree(m, terms, op, name):
    """``op`` (``"any"`` or ``"all"``) of ``terms``, each a function of at most four bits, as
    a tree of four-input gates; every term and gate is a wire kept through synthesis.

    Mapped for area, a wide reduction off the critical path (as ABC sees it, without the
    routing) becomes a chain of LUTs, a level each: 16 terms took six levels where a tree
    takes two above the terms. Kept wires are boundaries ABC maps to, so the tree is what it
    builds.
    """
    bits = [kept(m, term, f"{name}_{index}") for index, term in enumerate(terms)]
    level = 0
    while len(bits) > 1:
        bits = [kept(m, getattr(Cat(bits[index:index + 4]), op)(), f"{name}_l{level}_{index // 4}")
                for index in range(0, len(bits), 4)]
        level += 1
    return bits[0]


def kept_halves(m, terms, op, name):
    """:func:`kept_tree` of each half of ``terms`` (one tree when there is one term): the
    tree but for its root, so that the caller's own gate can join the halves and other bits
    in the root's level."""
    half = (len(terms) + 1) // 2
    return [kept_tree(m, chunk, op, f"{name}_{side}")
            for side, chunk in (("a", terms[:half]), ("b", terms[half:])) if chunk]


def kept(m, value, name):
    """``value`` on a one-bit wire kept through synthesis, a boundary ABC maps to."""
    wire = Signal(name=name, attrs=KEEP)
    m.d.comb += wire.eq(value)
    return wire
