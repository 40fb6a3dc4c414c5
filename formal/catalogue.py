"""Every proof `make formal` runs, with its configuration, mode and depth.

Configurations come from the shipped presets (``PRESETS``) through the same code that
builds the controller: a lane engine is proven at a tile's width, the register map is the
preset's own. ``quick`` marks the subset the test suite runs.
"""

import dataclasses

from ..golden.formats import count_limit
from ..golden.params import PRESETS, FabricParams
from ..golden.regmap import register_map
from ..hw import sign_count, ternary_gate
from ..hw.axi_controller import AxiController
from ..hw.combiner import WriteCombiner
from ..hw.controller import TILE_LANES, Controller
from ..hw.passthrough import Fp32Passthrough
from .axi import AXI_OUTPUTS, AxiSpec
from .blocks import CSRSpec, PairFoldSpec, PassthroughSpec, SignCountSpec, TernaryGateSpec
from .combiner import CombinerSpec
from .controller import ControllerSpec
from .runner import Proof

__all__ = ["block_proofs", "controller_proofs", "axi_proofs", "combiner_proofs", "bug_proofs",
           "all_proofs", "ProofParams", "PROOF_PARAMS"]

class ProofParams(FabricParams):
    """A :class:`FabricParams` whose line may be narrower than a CXL line: a multiple of 8
    bits from 8 on. The hardware is generated alike at any width (lanes, groups and tiles
    are copies made by one loop); only the golden model's line helpers and the register
    map's documented widths keep to 128 to 1024 bits. Every other parameter is checked as
    :class:`FabricParams` checks it."""

    def __post_init__(self):
        narrow = self.line_bits
        if isinstance(narrow, bool) or not isinstance(narrow, int) or narrow % 8 \
                or not 8 <= narrow <= 1024:
            raise ValueError(f"line_bits must be a multiple of 8 from 8 to 1024, "
                             f"not {narrow!r}")
        object.__setattr__(self, "line_bits", 128)
        try:
            super().__post_init__()
        finally:
            object.__setattr__(self, "line_bits", narrow)


#: The controller's configuration for its proofs: the shipped code at two workers, two slots
#: and one window, with 32-bit lines in four tiles of one 8-lane group each (the default tile
#: has four groups, the default top sixteen tiles: more copies of the same loop). The rest
#: of the controller is as shipped, but for buffers of four entries (the least its readouts
#: allow with one to spare, so that backpressure fills them within a few cycles) and two
#: memory reads in flight.
PROOF_PARAMS = ProofParams(line_bits=32, max_workers=2, depth=2, num_windows=1)
PROOF_TILE_LANES = 8
PROOF_CONFIG = (f"{PROOF_PARAMS.name}, {PROOF_TILE_LANES}-bit tiles, 4-entry buffers")
#: The same with three workers: a bitmap that is not a power of two wide, an odd
#: NUM_WORKERS at its largest, and counters that reach their largest value (3 in 2 bits).
THREE_WORKERS = dataclasses.replace(PROOF_PARAMS, max_workers=3)
#: The same with 1-bit counters: two workers' votes or codes saturate a lane, so the tiles
#: fold with the route engines and their saturation tests (docs/design.md, "Lane tiles").
SATURATING = dataclasses.replace(PROOF_PARAMS, counter_bits=1)


def _controller_block(params=PROOF_PARAMS, buffer_depth=4):
    return Controller(params=params, tile_lanes=PROOF_TILE_LANES,
                      group_lanes=PROOF_TILE_LANES, max_reads=2, buffer_depth=buffer_depth)


def _controller(params=PROOF_PARAMS, buffer_depth=4, **kwargs):
    def spec():
        return ControllerSpec(controller=_controller_block(params, buffer_depth), **kwargs)
    return spec


def _engine_configs():
    """``(label, params, max_contributions)``: each preset as the controller folds it (a vote
    a worker, so no lane saturates), and a narrow counter that saturates."""
    default, small = PRESETS["default"], PRESETS["small"]
    narrow = FabricParams(max_workers=16, counter_bits=3)
    return [
        (f"{default.name}, {TILE_LANES} line bits", default, default.max_workers, True),
        (f"{small.name}, {TILE_LANES} line bits", small, small.max_workers, False),
        (f"{narrow.name} (saturates), {TILE_LANES} line bits", narrow, None, False),
    ]


def block_proofs():
    """The block proofs: each unbounded (k-induction), with its covers."""
    proofs = []
    for label, p, most, quick in _engine_configs():
        tag = p.name if most is not None else p.name + "_sat"
        for group, spec_class, name in (("sign-count", SignCountSpec, "sign_count"),
                                        ("ternary-gate", TernaryGateSpec, "ternary_gate")):
            def spec(spec_class=spec_class, p=p, most=most):
                return spec_class(line_bits=TILE_LANES, max_workers=p.max_workers,
                                  counter_bits=p.counter_bits, max_contributions=most)
            proofs += [Proof(f"{name}_{tag}", group, label, "prove", 2, spec, quick=quick),
                       Proof(f"{name}_{tag}_cover", group, label, "cover",
                             count_limit(p.counter_bits) + 3 if most is None else 6, spec,
                             quick=quick)]
    for p, quick in ((PRESETS["default"], True), (PRESETS["small"], False)):
        def pair(p=p):
            return PairFoldSpec(max_workers=p.max_workers, counter_bits=p.counter_bits)
        proofs += [Proof(f"pair_fold_{p.name}", "pair-fold", f"{p.name}, one pair", "prove",
                         1, pair, quick=quick),
                   Proof(f"pair_fold_{p.name}_cover", "pair-fold", f"{p.name}, one pair",
                         "cover", 1, pair, quick=quick)]
    for p, quick in ((PRESETS["default"], True), (PRESETS["small"], False)):
        def passthrough(p=p):
            return PassthroughSpec(line_bits=p.line_bits, max_reads=3)
        def csr(p=p):
            return CSRSpec(regmap=register_map(p))
        proofs += [
            Proof(f"passthrough_{p.name}", "passthrough", f"{p.name}, 3 reads in flight",
                  "prove", 3, passthrough, quick=quick),
            Proof(f"passthrough_{p.name}_cover", "passthrough",
                  f"{p.name}, 3 reads in flight", "cover", 10, passthrough, quick=quick),
            Proof(f"csr_{p.name}", "csr", f"register map of {p.name}", "prove", 4, csr,
                  quick=quick),
            Proof(f"csr_{p.name}_cover", "csr", f"register map of {p.name}", "cover", 6, csr,
                  quick=quick),
        ]
    for p in (PRESETS["default"],):
        blocks = (
            ("sign_count", lambda p=p: sign_count.SignCountEngine(
                line_bits=TILE_LANES, max_workers=p.max_workers), ("o",)),
            ("ternary_gate", lambda p=p: ternary_gate.TernaryGateEngine(
                line_bits=TILE_LANES, max_workers=p.max_workers), ("o",)),
            ("passthrough", lambda p=p: Fp32Passthrough(line_bits=p.line_bits, max_reads=3),
             ("o_mem", "o_data")),
        )
        proofs += [Proof(f"{name}_valid_ignores_ready", "handshake", f"{p.name}", "netlist", 0,
                         build, quick=True, streams=streams) for name, build, streams in blocks]
    return proofs


#: The contract's groups, each checked in a run of its own: the solver proves one group's
#: properties deeper than all of them at once.
CONTRACT = ("handshake", "responses", "aggregation", "passthrough", "registers")

#: Depths of the controller's bounded checks (docs/verification.md, "Formal proofs"): what
#: the solver reaches within `make formal`'s half hour on two cores.
CONTRACT_DEPTH = 20
QUICK_DEPTH = 14
#: A reset check must reach a word's flags raised after a reset that came with the word in
#: flight, and a read of them: the window's configuration and sweep (about 10 cycles), the
#: write, the reset, the flags' stage (9 cycles after the write) and the read's 2 cycles.
RESET_DEPTH = 22
#: The deep checks: after the reset's sweep and the configuration, two lifetimes of the
#: tracked slot (every worker writes it and it is read once a worker, the last read clearing
#: it, twice, with any backpressure). The cover reaches the second lifetime's last answer at
#: step 23 (each step costs the solver about twice the one before).
DEEP_DEPTH = 24
DEEP_COVER_DEPTH = 24
#: The registers' deep checks: a fold's flags counted and read (the write, the tiles' flag
#: stage and a read of ERRORS once the pipeline has drained, by step 22).
FLAGS_DEPTH = 26

#: The deeper checks keep line addresses and window bases below 2**ADDRESS_BITS: the window
#: arithmetic at full width is in the short check of the whole contract.
ADDRESS_BITS = 4
DEEP_CONFIG = f"{PROOF_CONFIG}, addresses below {2 ** ADDRESS_BITS}"
#: The deep checks run on lines of one tile, so that they fit `make formal`'s half hour:
#: the tracked lane pair is in one tile, and the four tiles of the checks to CONTRACT_DEPTH
#: are copies of it. Their buffers have the shipped 16 entries, so requests flow back to
#: back: with 4, admission waits for the buffers to drain after four requests, and two
#: lifetimes take more steps (the second readout with both workers' writes comes at step 29,
#: not 21).
ONE_TILE = dataclasses.replace(PROOF_PARAMS, line_bits=PROOF_TILE_LANES)
DEEP_BUFFER_DEPTH = 16
ONE_TILE_CONFIG = (f"{ONE_TILE.name}, one {PROOF_TILE_LANES}-bit tile, {DEEP_BUFFER_DEPTH}-entry "
                   f"buffers, addresses below {2 ** ADDRESS_BITS}")
#: The readouts' deep check has the traffic a slot's lifetimes need: requests to the window,
#: the registers written before the first. The passthrough's traffic beside the folds and a
#: change of configuration between requests are in the checks to CONTRACT_DEPTH.
LIFETIME_CONFIG = f"{ONE_TILE_CONFIG}, window traffic"


def _group(group, **kwargs):
    return _controller(checks=("handshake", group), address_bits=ADDRESS_BITS, **kwargs)


def _deep(group, **kwargs):
    return _group(group, params=ONE_TILE, buffer_depth=DEEP_BUFFER_DEPTH, **kwargs)


def _lifetimes(**kwargs):
    return _deep("aggregation", window_traffic=True, **kwargs)


def controller_proofs():
    """The controller's contract, bounded, with its covers."""
    small = PRESETS["small"]
    proofs = [
        Proof("controller_valid_ignores_ready", "handshake", PROOF_CONFIG, "netlist", 0,
              _controller_block, quick=True, streams=("o_resp", "o_mem")),
        Proof(f"controller_{small.name}_valid_ignores_ready", "handshake", small.name,
              "netlist", 0, lambda: Controller(params=small), streams=("o_resp", "o_mem")),
        Proof("controller_contract_short", "controller", PROOF_CONFIG, "bmc", QUICK_DEPTH,
              _controller(checks=CONTRACT), quick=True),
    ]
    for group in CONTRACT[1:]:
        proofs.append(Proof(f"controller_{group}", f"controller: {group}", DEEP_CONFIG, "bmc",
                            CONTRACT_DEPTH, _group(group)))
    resets = _controller(checks=("handshake", "reset"), resets=True, address_bits=ADDRESS_BITS)
    power_up = _controller(checks=("handshake", "responses", "reset"),
                           address_bits=ADDRESS_BITS)
    # Three workers: the groups a worker count touches (the bitmaps and statuses, the folds
    # and readouts, the NUM_WORKERS field's range), each with its cover.
    three = (f"{THREE_WORKERS.name}, {PROOF_TILE_LANES}-bit tiles, 4-entry buffers, "
             f"addresses below {2 ** ADDRESS_BITS}")
    for group in ("responses", "aggregation", "registers"):
        proofs.append(Proof(f"controller_{group}_3_workers", f"controller: {group}", three,
                            "bmc", CONTRACT_DEPTH, _group(group, params=THREE_WORKERS)))
    # Counters that saturate: the folds, readouts and SATURATED flag of the engines' tiles.
    # ERRORS is read only once the requests have drained, so the registers group runs to
    # the registers' deep depth.
    saturating = (f"{SATURATING.name} (saturates), {PROOF_TILE_LANES}-bit tiles, 4-entry "
                  f"buffers, addresses below {2 ** ADDRESS_BITS}")
    proofs += [
        Proof("controller_aggregation_saturating", "controller: aggregation", saturating,
              "bmc", CONTRACT_DEPTH, _group("aggregation", params=SATURATING)),
        Proof("controller_registers_saturating", "controller: registers", saturating,
              "bmc", FLAGS_DEPTH, _group("registers", params=SATURATING)),
        Proof("controller_cover_saturating", "controller", saturating, "cover", FLAGS_DEPTH,
              _controller(SATURATING, checks=CONTRACT, address_bits=ADDRESS_BITS)),
    ]
    proofs += [
        Proof("controller_contract_cover_3_workers", "controller", three, "cover",
              CONTRACT_DEPTH, _controller(THREE_WORKERS, checks=CONTRACT,
                                          address_bits=ADDRESS_BITS)),
        Proof("controller_contract_cover", "controller", PROOF_CONFIG, "cover",
              CONTRACT_DEPTH, _controller(checks=CONTRACT)),
        Proof("controller_responses_deep", "controller: responses", ONE_TILE_CONFIG, "bmc",
              DEEP_DEPTH, _deep("responses")),
        Proof("controller_registers_deep", "controller: registers", ONE_TILE_CONFIG, "bmc",
              FLAGS_DEPTH, _deep("registers")),
        Proof("controller_deep_cover", "controller", ONE_TILE_CONFIG, "cover",
              DEEP_COVER_DEPTH, _controller(ONE_TILE, DEEP_BUFFER_DEPTH, checks=CONTRACT,
                                            address_bits=ADDRESS_BITS, deep_covers=True)),
        Proof("controller_aggregation_deep", "controller: aggregation", LIFETIME_CONFIG,
              "bmc", DEEP_DEPTH, _lifetimes()),
        Proof("controller_aggregation_deep_cover", "controller: aggregation", LIFETIME_CONFIG,
              "cover", DEEP_COVER_DEPTH, _lifetimes(deep_covers=True)),
        Proof("controller_reset", "controller: reset", DEEP_CONFIG, "bmc", RESET_DEPTH,
              resets),
        Proof("controller_reset_cover", "controller: reset", DEEP_CONFIG, "cover",
              RESET_DEPTH, resets),
        Proof("controller_power_up", "controller: reset", DEEP_CONFIG + ", power-up state "
              "arbitrary", "bmc", RESET_DEPTH, power_up, power_up=True),
        # The tiles never clear a slot's row: from any power-up contents, the readouts are
        # the reference's.
        Proof("controller_aggregation_power_up", "controller: aggregation",
              DEEP_CONFIG + ", power-up state arbitrary", "bmc", CONTRACT_DEPTH,
              _group("aggregation"), power_up=True),
    ]
    return proofs


#: The AXI top for its channel rules: the controller's proof configuration behind the
#: adapters, with 2-bit AXI IDs and four requests unanswered at most.
AXI_CONFIG = f"{PROOF_CONFIG}, 2-bit AXI IDs, 4 tags"
#: Depth of the AXI channel rules' bounded check: refused bursts are answered within it
#: (B and RLAST by step 6); step 11 took the solver more than half an hour.
AXI_DEPTH = 11
#: Depth of their covers: a two-beat write burst's B through the memory at step 13, a
#: two-beat read burst's last beat at step 15.
AXI_COVER_DEPTH = 18


def _axi_top():
    return AxiController(params=PROOF_PARAMS, id_width=2, tile_lanes=PROOF_TILE_LANES,
                         max_reads=2, buffer_depth=4, max_requests=4)


def _axi_spec():
    return AxiSpec(top=_axi_top())


def axi_proofs():
    """The AXI top's channel rules, bounded, with their covers and the netlist check."""
    valid_ready = tuple((f"{prefix}_{channel}ready", f"{prefix}_{channel}valid")
                        for prefix, channel in AXI_OUTPUTS)
    return [
        Proof("axi_valid_ignores_ready", "axi channels", AXI_CONFIG, "netlist", 0, _axi_top,
              quick=True, streams=valid_ready),
        Proof("axi_channels", "axi channels", AXI_CONFIG, "bmc", AXI_DEPTH, _axi_spec),
        Proof("axi_channels_cover", "axi channels", AXI_CONFIG, "cover", AXI_COVER_DEPTH,
              _axi_spec),
    ]


#: The write combiner at its defaults, for its output's transfer rule.
COMBINER_CONFIG = "defaults: 32 sets x 4 ways"

#: The write combiner for its no-loss contract: the shipped code with 2 sets of 2 ways,
#: 3-bit addresses (4 tags a set, so misses evict), 3-bit values and sums (so sums
#: overflow), threshold 3 (so values bypass and sums reach it), 3 values an entry and a
#: 2-entry FIFO (so backpressure fills it). Sets are rows of one memory and ways copies made
#: by one loop.
COMBINER_PROOF = dict(addr_width=3, value_width=3, sets=2, ways=2, threshold=3, max_updates=3,
                      fifo_depth=2)
COMBINER_PROOF_CONFIG = "2 sets x 2 ways, 3-bit addresses, values and sums, threshold 3"
#: k of the k-induction: with fewer steps the induction meets states no run reaches (the
#: invariant does not pin every register of the pipeline).
COMBINER_DEPTH = 10
#: The end-to-end check (the deltas sent add up to the values accepted at every idle
#: cycle) and the covers, which reach a flush written back and idle at step 15.
COMBINER_BMC_DEPTH = 12
COMBINER_COVER_DEPTH = 18
#: The planted forwarding bug shows at step 10.
COMBINER_BUG_DEPTH = 12


#: 16 sets, so that the valid bits are read in two levels (by the set's low three bits,
#: then the rest), with 6-bit addresses for the same 4 tags a set.
COMBINER_SETS = dict(COMBINER_PROOF, addr_width=6, sets=16)
COMBINER_SETS_CONFIG = "16 sets x 2 ways, 6-bit addresses, 3-bit values and sums, threshold 3"
#: Lossy mode drops tiny misses: values of magnitude below 2.
COMBINER_LOSSY = dict(COMBINER_PROOF, small_threshold=2, lossy=True)


def _combiner_spec(params=COMBINER_PROOF, **kwargs):
    def spec():
        return CombinerSpec(WriteCombiner(**params), **kwargs)
    return spec


def combiner_proofs():
    """The write combiner: its no-loss contract unbounded, end to end to a depth, with its
    covers; its output's ``valid`` never waits on ``ready``."""
    return [
        Proof("combiner_no_loss", "combiner", COMBINER_PROOF_CONFIG, "prove", COMBINER_DEPTH,
              _combiner_spec()),
        Proof("combiner_end_to_end", "combiner", COMBINER_PROOF_CONFIG, "bmc",
              COMBINER_BMC_DEPTH, _combiner_spec(end_to_end=True)),
        Proof("combiner_no_loss_cover", "combiner", COMBINER_PROOF_CONFIG, "cover",
              COMBINER_COVER_DEPTH, _combiner_spec(), quick=True),
        Proof("combiner_no_loss_16_sets", "combiner", COMBINER_SETS_CONFIG, "prove",
              COMBINER_DEPTH, _combiner_spec(COMBINER_SETS)),
        Proof("combiner_lossy", "combiner", f"{COMBINER_PROOF_CONFIG}, lossy below 2",
              "prove", COMBINER_DEPTH, _combiner_spec(COMBINER_LOSSY)),
        Proof("combiner_lossy_cover", "combiner", f"{COMBINER_PROOF_CONFIG}, lossy below 2",
              "cover", COMBINER_COVER_DEPTH, _combiner_spec(COMBINER_LOSSY)),
        Proof("combiner_valid_ignores_ready", "handshake", COMBINER_CONFIG, "netlist", 0,
              WriteCombiner, quick=True, streams=("o_wb",)),
    ]


#: The duplicate test's planted bug shows only once a worker's earlier write has left the
#: writes in flight for the stored bitmap and the worker writes again.
DUPLICATE_BUG_DEPTH = 22


def bug_proofs():
    """Each planted bug under the proof that catches it: each must fail."""
    sign = PRESETS["small"]

    def sign_count():
        return SignCountSpec(line_bits=TILE_LANES, max_workers=sign.max_workers,
                             counter_bits=sign.counter_bits, max_contributions=sign.max_workers)

    def passthrough():
        return PassthroughSpec(line_bits=sign.line_bits, max_reads=3)

    on_top = {"reset_flags": ("reset", _controller(checks=("reset",), resets=True,
                                                   address_bits=ADDRESS_BITS)),
              "tie_rule": ("aggregation", _group("aggregation")),
              "forward_three_ahead": ("aggregation", _group("aggregation")),
              "response_order": ("responses", _group("responses")),
              "duplicate_check": ("responses", _group("responses")),
              "read_clear_bitmap": ("responses", _group("responses")),
              "passthrough_bit": ("passthrough", _group("passthrough"))}
    proofs = [
        Proof("bug_tie_rule_block", "planted bugs", f"{sign.name}, {TILE_LANES} line bits",
              "bmc", 6, sign_count, quick=True, bug="tie_rule"),
        Proof("bug_passthrough_bit_block", "planted bugs", f"{sign.name}, 3 reads in flight",
              "bmc", 6, passthrough, quick=True, bug="passthrough_bit"),
    ]
    depths = {"reset": RESET_DEPTH, "duplicate_check": DUPLICATE_BUG_DEPTH}
    proofs += [Proof(f"bug_{bug}", "planted bugs", f"{DEEP_CONFIG}; {group}", "bmc",
                     depths.get(bug, depths.get(group, CONTRACT_DEPTH)), spec, bug=bug)
               for bug, (group, spec) in on_top.items()]
    proofs.append(Proof("bug_stale_row", "planted bugs", f"{DEEP_CONFIG}, power-up state "
                        "arbitrary; aggregation", "bmc", CONTRACT_DEPTH, _group("aggregation"),
                        bug="stale_row", power_up=True))
    # Only a readout of the slot's second lifetime shows this one (the check to
    # CONTRACT_DEPTH passes on it), so its proof looks only at the last step.
    proofs.append(Proof("bug_clear_folded_onto", "planted bugs", f"{LIFETIME_CONFIG}; "
                        "aggregation", "bmc", DEEP_DEPTH, _lifetimes(),
                        bug="clear_folded_onto", skip=DEEP_DEPTH - 1))
    proofs.append(Proof("bug_saturation_dropped", "planted bugs",
                        f"{SATURATING.name} (saturates); registers", "bmc", FLAGS_DEPTH,
                        _group("registers", params=SATURATING), bug="saturation_dropped"))
    proofs.append(Proof("bug_combiner_forward", "planted bugs", COMBINER_PROOF_CONFIG, "bmc",
                        COMBINER_BUG_DEPTH, _combiner_spec(), bug="combiner_forward"))
    proofs.append(Proof("bug_item_last", "planted bugs", f"{AXI_CONFIG}; axi channels", "bmc",
                        AXI_DEPTH, _axi_spec, bug="item_last"))
    return proofs


def all_proofs():
    """Every proof, in the order the report lists them."""
    return (block_proofs() + controller_proofs() + axi_proofs() + combiner_proofs()
            + bug_proofs())
