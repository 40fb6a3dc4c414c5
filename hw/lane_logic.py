"""Per-lane arithmetic written as gates, for the lane engines.

A lane's state is a few bits, and there are hundreds of lanes per line. Written with ``+``
and ``>``, each lane gets its own adder and comparators, which synthesis maps to carry
chains (on ECP5, a CCU2C per two bits, each counting as two LUT4s). Written as the gates
below, synthesis packs a lane's step and tests into a handful of LUT4s, and the values the
lanes compare against (a threshold from NUM_WORKERS or GATE) are computed once, outside.
Where depth matters more than packing (a comparison in a fold cycle, a wide reduction), the
gates are kept wires, so that synthesis builds the tree as written.
"""

import random

from amaranth.hdl import C, Cat, Module, Signal, Value
from amaranth.sim import Simulator

__all__ = ["KEEP", "step", "widen", "readout_terms", "select_line", "read_line",
           "kept_tree", "kept_halves", "kept_compare", "joined_greater", "joined_equal",
           "shared_bit_terms", "kept"]

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


def shared_bit_terms(terms, inputs, *, rounds=64, seed=0):
    """``terms`` (``[(select, line)]``) bit by bit, with the lines that read one bit together:
    for each line bit, ``[(indices, bit)]``, ``indices`` the terms whose line has ``bit``
    there. A readout's lines are often one register's bits seen another way (a G-Ternary
    sum's bits are G-Binary counter bits of the same row); joining their selects before a
    tree spares the tree a term for each bit they share.

    ``inputs`` are the signals the lines are built from. A line bit is an input's bit when
    it follows that bit in every one of ``rounds`` random values of the inputs (the lines
    run in Amaranth's simulator, seeded with ``seed``); bits that are one input bit are
    shared, any other bit (a gate, a constant) stands alone.
    """
    width = len(Value.cast(terms[0][1]))
    sources = _bit_sources([line for _, line in terms], inputs, rounds=rounds, seed=seed)
    per_bit = []
    for bit in range(width):
        groups = {}
        for index, (_, line) in enumerate(terms):
            source = sources[index][bit]
            key = source if source is not None else ("term", index)
            groups.setdefault(key, ([], Value.cast(line)[bit]))[0].append(index)
        per_bit.append([(tuple(indices), value) for indices, value in groups.values()])
    return per_bit


def _bit_sources(lines, inputs, *, rounds, seed):
    """For each bit of each of ``lines``, the ``(input, bit)`` of ``inputs`` it follows in
    ``rounds`` random values of the inputs, or None where it follows none."""
    m = Module()
    outputs = [Signal(len(Value.cast(line)), name=f"line_{index}")
               for index, line in enumerate(lines)]
    m.d.comb += [output.eq(line) for output, line in zip(outputs, lines)]
    rng = random.Random(seed)
    given = [[rng.getrandbits(len(signal)) for signal in inputs] for _ in range(rounds)]
    seen = []

    async def bench(ctx):
        for values in given:
            for signal, value in zip(inputs, values):
                ctx.set(signal, value)
            seen.append([ctx.get(output) for output in outputs])

    simulator = Simulator(m)
    simulator.add_testbench(bench)
    simulator.run()

    def history(values_of, bit):
        return tuple(values[bit[0]] >> bit[1] & 1 for values in values_of)

    followed = {}
    for number, signal in enumerate(inputs):
        for bit in range(len(signal)):
            followed.setdefault(history(given, (number, bit)), (number, bit))
    return [[followed.get(history(seen, (index, bit)))
             for bit in range(len(Value.cast(line)))] for index, line in enumerate(lines)]


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


def kept_compare(m, a, b, name, *, equal=True):
    """Compare unsigned ``a`` and ``b`` of equal widths as kept four-input gates: returns
    ``[(greater, equal)]`` of the most and the least significant halves of their bits (one
    pair for two bits or fewer), for the caller's own gate to join: ``a > b`` is
    ``hi.greater | hi.equal & lo.greater`` and ``a == b`` is ``hi.equal & lo.equal``.

    Each two bits, from the least significant, give ``(greater, equal)``, a gate each, and
    each half's pairs are joined in a tree of gates (``greater = g_hi | e_hi & g_lo``). A
    lone most significant bit (an odd width) is left to the gate that joins it, as its two
    bits. With the caller's gate that is two levels for up to 4 bits, three for up to 8.
    Left to synthesis, a comparison in a lane's fold cycle became a chain of four LUT levels.

    With ``equal=False`` only ``a > b`` is asked for: the least significant half's equal is
    None, and no gate is built for an equal that only an equality would read (kept, it would
    stay in the netlist with nothing reading it). Where the width is odd and the other bits
    join in one level (five bits), the lone top bit is then the most significant half on its
    own: the caller's gate reads it and the joined rest, one gate fewer at the same depth.
    """
    a, b = Value.cast(a), Value.cast(b)
    if len(a) != len(b) or not len(a):
        raise ValueError(f"kept_compare operands must have equal, nonzero widths, not "
                         f"{len(a)} and {len(b)}")

    def later(value, label):
        """An equal built as a kept gate when first asked for (``value`` gives it)."""
        built = []

        def get():
            if not built:
                built.append(kept(m, value(), label))
            return built[0]
        return get

    pieces = []   # (greater, equal as a function), most significant first
    for low in reversed(range(0, len(a), 2)):
        # Written as gates: ``>`` would become a carry chain.
        greater, same = a[low] & ~b[low], ~(a[low] ^ b[low])
        if low + 1 < len(a):
            high_equal = ~(a[low + 1] ^ b[low + 1])
            greater = kept(m, a[low + 1] & ~b[low + 1] | high_equal & greater, f"{name}_gt{low}")
            same = later(lambda high_equal=high_equal, same=same: high_equal & same,
                         f"{name}_eq{low}")
        else:
            same = (lambda same=same: same)
        pieces.append((greater, same))

    def join(chunk, label):
        level = 0
        while len(chunk) > 1:
            joined = [(kept(m, g_hi | e_hi() & g_lo, f"{name}_{label}{level}_gt{index}"),
                       later(lambda e_hi=e_hi, e_lo=e_lo: e_hi() & e_lo(),
                             f"{name}_{label}{level}_eq{index}"))
                      for index, ((g_hi, e_hi), (g_lo, e_lo))
                      in enumerate(zip(chunk[0::2], chunk[1::2]))]
            chunk = joined + chunk[len(joined) * 2:]
            level += 1
        return chunk[0]

    if len(pieces) == 1:
        halves = pieces
    else:
        half = (len(pieces) + 1) // 2
        if not equal and len(a) % 2 and len(pieces) == 3:
            half = 1
        halves = [join(pieces[:half], "hi"), join(pieces[half:], "lo")]
    (lowest_greater, lowest_equal) = halves[-1]
    return [(greater, same()) for greater, same in halves[:-1]] + [
        (lowest_greater, lowest_equal() if equal else None)]


def joined_greater(halves):
    """``a > b`` from :func:`kept_compare`'s halves, for the caller's gate."""
    (greater, equal), *rest = halves
    return greater | equal & rest[0][0] if rest else greater


def joined_equal(halves):
    """``a == b`` from :func:`kept_compare`'s halves, for the caller's gate."""
    return halves[0][1] & halves[1][1] if len(halves) > 1 else halves[0][1]


def kept(m, value, name):
    """``value`` on a one-bit wire kept through synthesis, a boundary ABC maps to."""
    wire = Signal(name=name, attrs=KEEP)
    m.d.comb += wire.eq(value)
    return wire
