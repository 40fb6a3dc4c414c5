"""``python -m neuron_fabric.gen``: Verilog, manifest and register reference for a parameter set.

Writes ``<out>/<name>/`` where ``<name>`` carries the parameters (``l512_w16_c5_d64_n2``):
one Verilog file per block (the controller top holds all of them), the top's file list
(``.f``) and Verilator configuration (``.vlt``), ``manifest.json`` and ``registers.md``;
and beside it ``<out>/axi_<name>/``, the same for the AXI top (the controller behind AXI4
and AXI4-Lite adapters). ``--check`` then elaborates every file with Icarus and lints it
with Verilator's ``-Wall`` and the ``.vlt``, as a plain build and with public signals as
under cocotb.
"""

import argparse
import dataclasses
import pathlib
import sys
import time

from ..golden.params import PRESETS
from .axi import axi_folder_name, generate_axi
from .check import icarus_compile, verilator_lint
from .tools import ToolError
from .verilog import MAX_READS, generate


def _parser():
    parser = argparse.ArgumentParser(prog="python -m neuron_fabric.gen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="default",
                        help="named parameter set to start from (default: %(default)s)")
    for name in ("line_bits", "max_workers", "depth", "num_windows", "counter_bits"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, dest=name,
                            help=f"override the preset's {name}")
    parser.add_argument("--max-reads", type=int, default=MAX_READS,
                        help="memory reads in flight at most (default: %(default)s)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/verilog"),
                        help="output folder; files go to OUT/<name>/ (default: %(default)s)")
    parser.add_argument("--no-axi", action="store_true",
                        help="leave out the AXI top (axi_<name>/)")
    parser.add_argument("--check", action="store_true",
                        help="compile every file with Icarus and lint it with Verilator "
                             "(-Wall and the generated .vlt, with and without public "
                             "signals)")
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    overrides = {name: getattr(args, name) for name in
                 ("line_bits", "max_workers", "depth", "num_windows", "counter_bits")
                 if getattr(args, name) is not None}
    try:
        params = dataclasses.replace(PRESETS[args.preset], **overrides)
    except (TypeError, ValueError) as error:
        print(f"gen: bad parameters: {error}", file=sys.stderr)
        return 2
    out = args.out / params.name
    started = time.perf_counter()
    folders = [out] if args.no_axi else [out, args.out / axi_folder_name(params)]
    try:
        manifests = [generate(params, out, max_reads=args.max_reads)]
        if not args.no_axi:
            manifests.append(generate_axi(params, folders[1], max_reads=args.max_reads))
    except ToolError as error:
        print(f"gen: {error}", file=sys.stderr)
        return 1
    for folder, manifest in zip(folders, manifests):
        for block in manifest["blocks"].values():
            path = folder / block["file"]
            print(f"gen:   {path}  {path.stat().st_size:>10,} bytes")
        for name in (manifest["file_list"], manifest["verilator_config"], "manifest.json",
                     "registers.md"):
            print(f"gen:   {folder / name}  {(folder / name).stat().st_size:>10,} bytes")
    if args.check:
        for folder, manifest in zip(folders, manifests):
            config = folder / manifest["verilator_config"]
            print(f"gen: checking with Icarus and Verilator --lint-only -Wall {config} "
                  f"(with and without --public-flat-rw)")
            try:
                for block in manifest["blocks"].values():
                    icarus_compile(folder / block["file"], module=block["module"])
                    verilator_lint(folder / block["file"], module=block["module"],
                                   config=config)
                    print(f"gen:   {block['file']}: iverilog ok, verilator lint ok")
            except ToolError as error:
                print(f"gen: {error}", file=sys.stderr)
                return 1
    print(f"gen: done in {time.perf_counter() - started:.1f} s; results in "
          f"{' and '.join(f'{folder}/' for folder in folders)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
