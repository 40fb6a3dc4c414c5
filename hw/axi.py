"""AXI4 and AXI4-Lite at the controller's boundary (docs/design.md, "The AXI top").

The signatures here are the buses as the manager drives them (``Out`` for the manager's
signals, ``In`` for the subordinate's), one member per AXI signal with AXI's own names
(``awvalid``, ``rdata`` ...), so an emitted port reads ``s_axi_awvalid``. A subordinate
takes a bus as ``In(...)``, a manager as ``Out(...)``. Response and burst encodings and the
data port's address layout are declared once, here.
"""

import enum

from amaranth.hdl import Mux, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..golden.controller import Status
from ..golden.params import ADDR_BITS
from ..golden.validate import check_int

__all__ = ["Resp", "Burst", "WorkerFrom", "Axi4Signature", "AxiLiteSignature",
           "data_address_layout", "status_resp", "line_size", "LEN_BITS", "FIXED_BEATS"]

#: Width of AxLEN: a burst is 1 to 256 beats.
LEN_BITS = 8
#: Beats of a FIXED burst at most: AXI4 allows 1 to 16.
FIXED_BEATS = 16


class Resp(enum.IntEnum):
    """xRESP encodings."""
    OKAY   = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


class Burst(enum.IntEnum):
    """AxBURST encodings."""
    FIXED = 0
    INCR  = 1
    WRAP  = 2


class WorkerFrom(enum.Enum):
    """Where the data port takes a write's worker id from (docs/design.md, "The AXI top").

    ``ADDRESS``: bits of the byte address above the line address, so each worker writes
    through its own alias of the windows (one address range per worker, whatever the bus).
    ``ID``: the top bits of AWID, which an AXI interconnect fills with the index of the
    manager port the write came in on.
    """
    ADDRESS = "address"
    ID = "id"


def line_size(line_bits):
    """AxSIZE of a whole line: ``log2`` of its bytes."""
    return (line_bits // 8).bit_length() - 1


def status_resp(status):
    """The xRESP of a native status (a :class:`Status`-shaped value): OKAY for OK, SLVERR
    for NOT_READY, DUPLICATE and BAD_REQUEST (the status itself travels in xUSER)."""
    return Mux(status == Status.OK, Resp.OKAY, Resp.SLVERR)


def data_address_layout(*, line_bits, worker_bits, worker_from):
    """The data port's byte address, low bits first: the byte ``offset`` within a line
    (0 for every access the port takes), the 32-bit ``line`` address, the ``worker`` id when
    it comes from the address, and ``clear``: a read there is a READ_CLEAR."""
    fields = {"offset": unsigned(line_size(line_bits)), "line": unsigned(ADDR_BITS)}
    if WorkerFrom(worker_from) is WorkerFrom.ADDRESS:
        fields["worker"] = unsigned(worker_bits)
    fields["clear"] = unsigned(1)
    return data.StructLayout(fields)


def _check_widths(addr_width, data_width, id_width, user_width):
    check_int("addr_width", addr_width, low=1, high=64)
    check_int("data_width", data_width, low=8, high=1024)
    if data_width & (data_width - 1):
        raise ValueError(f"data_width must be a power of two, not {data_width!r}")
    check_int("id_width", id_width, low=0, high=32)
    check_int("user_width", user_width, low=0, high=32)


class Axi4Signature(wiring.Signature):
    """An AXI4 bus from the manager's side: AW, W, B, AR and R with INCR/FIXED bursts.

    ``id_width`` 0 leaves out the ID signals (one ID); ``user_width`` 0 leaves out BUSER
    and RUSER. AWLOCK, AWCACHE, AWPROT, AWQOS and their AR twins are left out: a
    subordinate here ignores them and a manager drives their defaults.
    """

    def __init__(self, *, addr_width, data_width, id_width=0, user_width=0):
        _check_widths(addr_width, data_width, id_width, user_width)
        self.addr_width, self.data_width = addr_width, data_width
        self.id_width, self.user_width = id_width, user_width
        members = {}
        for ch in ("aw", "ar"):
            if id_width:
                members[f"{ch}id"] = Out(id_width)
            members.update({f"{ch}addr": Out(addr_width), f"{ch}len": Out(LEN_BITS),
                            f"{ch}size": Out(3), f"{ch}burst": Out(2),
                            f"{ch}valid": Out(1), f"{ch}ready": In(1)})
        members.update({"wdata": Out(data_width), "wstrb": Out(data_width // 8),
                        "wlast": Out(1), "wvalid": Out(1), "wready": In(1)})
        for ch in ("b", "r"):
            if id_width:
                members[f"{ch}id"] = In(id_width)
            if ch == "r":
                members.update({"rdata": In(data_width), "rlast": In(1)})
            members[f"{ch}resp"] = In(2)
            if user_width:
                members[f"{ch}user"] = In(user_width)
            members.update({f"{ch}valid": In(1), f"{ch}ready": Out(1)})
        super().__init__(members)

    def __eq__(self, other):
        return (isinstance(other, Axi4Signature)
                and (other.addr_width, other.data_width, other.id_width, other.user_width)
                == (self.addr_width, self.data_width, self.id_width, self.user_width))

    def __repr__(self):
        return (f"Axi4Signature(addr_width={self.addr_width}, data_width={self.data_width}, "
                f"id_width={self.id_width}, user_width={self.user_width})")


class AxiLiteSignature(wiring.Signature):
    """An AXI4-Lite bus from the manager's side, 32-bit data (AWPROT and ARPROT left out)."""

    def __init__(self, *, addr_width):
        _check_widths(addr_width, 32, 0, 0)
        self.addr_width = addr_width
        super().__init__({
            "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(32), "wstrb": Out(4), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
            "rdata": In(32), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return isinstance(other, AxiLiteSignature) and other.addr_width == self.addr_width

    def __repr__(self):
        return f"AxiLiteSignature(addr_width={self.addr_width})"
