"""Verilog and manifest of the AXI top for one parameter set.

The AXI top (:class:`~neuron_fabric.hw.axi_controller.AxiController`: the controller and its
three AXI adapters) goes to a folder of its own beside the native top's, ``axi_<name>/``,
with the same rules as the native top (:mod:`.verilog`): one Verilog file holding every
module, a file list, a Verilator configuration with the same waivers, a register reference
and a manifest, byte-identical for the same inputs in any folder. The manifest adds what a
testbench of the AXI ports needs: each port's prefix, the data port's address fields, the
ID width and where a write's worker comes from.
"""

import hashlib
import json
import pathlib

from ..golden.params import FabricParams
from ..golden.regmap import register_map
from ..hw.axi import WorkerFrom
from ..hw.axi_controller import AXI_PORTS, AxiController
from .verilog import (MAX_READS, _layout_fields, file_list, manifest_header, ports_of,
                      to_verilog, verilator_config)

__all__ = ["AXI_ROLE", "AXI_ID_WIDTH", "axi_folder_name", "axi_module", "generate_axi"]

#: The role of the AXI top in its manifest.
AXI_ROLE = "axi_controller"
#: AWID and ARID bits of the generated AXI top.
AXI_ID_WIDTH = 4


def axi_folder_name(params):
    """The AXI top's folder beside the native top's: ``axi_l512_w16_c5_d64_n2``."""
    return f"axi_{params.name}"


def axi_module(params):
    return f"nfabric_axi_{params.name}"


def generate_axi(params, out_dir, *, max_reads=MAX_READS, id_width=AXI_ID_WIDTH,
                 worker_from=WorkerFrom.ADDRESS, log=print):
    """Write the AXI top's Verilog, file list, Verilator configuration, ``registers.md`` and
    ``manifest.json`` under ``out_dir``; returns the manifest. Files are written only when
    their content changed."""
    if not isinstance(params, FabricParams):
        raise TypeError(f"params must be a FabricParams, not {params!r}")
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    module = axi_module(params)
    top = AxiController(params=params, id_width=id_width, worker_from=worker_from,
                        max_reads=max_reads)
    log(f"gen: {AXI_ROLE}: converting {module}")
    verilog = to_verilog(top, module=module)
    regmap = register_map(params)
    file_name = f"{module}.v"
    manifest = {
        **manifest_header(params, max_reads=max_reads),
        "axi": {
            "ports": {prefix: adapter for prefix, adapter, _ in AXI_PORTS},
            "id_width": id_width,
            "worker_from": top.worker_from.value,
            "data_address": _layout_fields(top.address_layout),
        },
        "blocks": {AXI_ROLE: {"module": module, "file": file_name,
                              "ports": ports_of(verilog, module), "payloads": {},
                              "sha256": hashlib.sha256(verilog.encode()).hexdigest()}},
        "top": module,
        "file_list": f"{module}.f",
        "verilator_config": f"{module}.vlt",
        "registers": {reg.name: {"address": reg.address,
                                 "fields": {f.name: [f.offset, f.width, f.access.value]
                                            for f in reg.fields}}
                      for reg in regmap},
    }
    files = {file_name: verilog,
             manifest["file_list"]: file_list(module, [file_name]),
             manifest["verilator_config"]: verilator_config(module, [file_name]),
             "registers.md": regmap.to_markdown(),
             "manifest.json": json.dumps(manifest, indent=2, sort_keys=True) + "\n"}
    for name, text in files.items():
        path = out_dir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    log(f"gen: wrote {len(files)} files to {out_dir}")
    return manifest
