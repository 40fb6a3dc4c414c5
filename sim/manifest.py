"""The manifest of a generated parameter set: ports, payload layouts and registers.

:func:`neuron_fabric.gen.verilog.generate` writes ``manifest.json`` beside the Verilog. Every
bench and harness reads port names, widths and the bit offsets of stream payload fields from
it, so none of them assumes a port order or a width.
"""

import json
import pathlib

from ..golden.params import FabricParams

__all__ = ["Manifest", "Payload", "top_folder"]


class Manifest:
    """The generated manifest of one parameter set.

    Parameters
    ----------
    path : str or Path
        ``manifest.json`` or the folder holding it.

    Members
    -------
    folder : Path
        The folder of the Verilog files.
    params : FabricParams
        The parameter set the Verilog was generated for.
    data : dict
        The manifest as read.
    """

    def __init__(self, path):
        path = pathlib.Path(path)
        if path.is_dir():
            path = path / "manifest.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; write it with "
                                    f"`python -m neuron_fabric.gen --out build/verilog`")
        self.folder = path.parent
        self.data = json.loads(path.read_text(encoding="utf-8"))
        self.params = FabricParams(**self.data["params"])

    def block(self, role):
        """The manifest entry of block ``role`` (``controller``, ``sign_count`` ...)."""
        try:
            return self.data["blocks"][role]
        except KeyError:
            raise KeyError(f"the manifest in {self.folder} has no block {role!r}; it has "
                           f"{', '.join(self.data['blocks'])}") from None

    def source(self, role):
        return self.folder / self.block(role)["file"]

    def ports(self, role):
        """``{name: (direction, width)}`` of block ``role``."""
        return {p["name"]: (p["direction"], p["width"]) for p in self.block(role)["ports"]}

    def payload(self, role, port):
        """The :class:`Payload` of stream ``port`` (``"i_req"``) of block ``role``."""
        fields = self.block(role)["payloads"].get(f"{port}__payload")
        if fields is None:
            width = self.ports(role)[f"{port}__payload"][1]
            fields = {"": [0, width]}
        return Payload(fields)

    @property
    def registers(self):
        return self.data["registers"]


class Payload:
    """Packing of a flattened stream payload: ``{field: [offset, width]}`` from the manifest.

    A payload without a struct layout has one field named ``""``.
    """

    def __init__(self, fields):
        self.fields = {name: (int(off), int(width)) for name, (off, width) in fields.items()}
        self.width = max(off + width for off, width in self.fields.values())

    def pack(self, **values):
        word = 0
        for name, value in values.items():
            offset, width = self.fields[name]
            word |= (int(value) & ((1 << width) - 1)) << offset
        return word

    def get(self, word, name):
        offset, width = self.fields[name]
        return (word >> offset) & ((1 << width) - 1)

    def unpack(self, word):
        return {name: (word >> off) & ((1 << width) - 1)
                for name, (off, width) in self.fields.items()}


def top_folder(path, *, preset="default"):
    """The generated folder of one parameter set: ``path`` itself when it holds a
    ``manifest.json``, otherwise the folder of the ``preset`` parameter set inside it (as
    ``make verilog`` lays out ``build/verilog/``)."""
    from ..golden.params import PRESETS

    path = pathlib.Path(path)
    if (path / "manifest.json").is_file():
        return path
    return path / PRESETS[preset].name
