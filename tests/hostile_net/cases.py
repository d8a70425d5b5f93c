"""The hostile-network cases: crafted RoCEv2 packets, built with scapy, and the answer the
InfiniBand specification requires of the responder.

Each case names the target QP it needs (``rc``: an RC QP in RTS connected to us; ``uc``: the
same for UC; ``ud``; ``reset``: an RC QP left in RESET), builds its packets from the target's
parameters (``T``) and states what must come back:

- ``wire``: the packets the responder sends back, in order, each as ``"ACK psn+N"``,
  ``"NAK:<code> psn+N"``, ``"READ_RESPONSE_ONLY psn+N"``, ``"ATOMIC_ACK psn+N"``, with PSNs
  relative to the PSN the target expects (``T.psn``); ``[]`` is silence;
- ``state``: the target QP's state afterwards;
- ``mem``: ``"same"`` (every byte of both memory regions untouched) or ``"changed"``;
- ``recv``: the receive completions, ``"none"`` or ``"ok:SRC_QP:LEN"``/``"err"`` entries.

``spec`` cites the section of the InfiniBand Architecture Specification, Volume 1 (chapter 9,
the transport layer), that the answer follows, in our words. ``rxe`` records where Linux
Soft-RoCE answers differently from the specification (checked in the VM rig, so a change in
rxe shows up); the mock must give the specification's answer.

scapy's ``contrib.roce`` has BTH (with the ICRC, which it computes over the IPv4 pseudo-header)
and AETH only; RETH, DETH and AtomicETH are declared here from the specification's layouts
(9.3.2 DETH, 9.3.3 RETH, 9.3.4 AtomicETH), so the whole packet is scapy's encoding.
"""

from scapy.contrib.roce import BTH
from scapy.fields import IntField, XIntField, XLongField, XBitField, ByteField
from scapy.layers.inet import IP, UDP
from scapy.packet import Packet, Raw

ROCEV2_PORT = 4791
DEFAULT_PKEY = 0xFFFF
QKEY = 0x11111111
# The peer QP the target's RC QP is connected to (nothing listens behind it but us).
PEER_QPN = 0x000ABC
MTU = 1024
PSN_MASK = 0xFFFFFF

# BTH opcodes (9.2, table of opcodes): RC 0x00-0x14, UD 0x64.
OP = {
    "SEND_FIRST": 0x00, "SEND_MIDDLE": 0x01, "SEND_LAST": 0x02, "SEND_ONLY": 0x04,
    "WRITE_FIRST": 0x06, "WRITE_MIDDLE": 0x07, "WRITE_LAST": 0x08, "WRITE_ONLY": 0x0A,
    "READ_REQUEST": 0x0C, "READ_RESPONSE_FIRST": 0x0D, "READ_RESPONSE_MIDDLE": 0x0E,
    "READ_RESPONSE_LAST": 0x0F, "READ_RESPONSE_ONLY": 0x10, "ACK": 0x11,
    "ATOMIC_ACK": 0x12, "COMPARE_SWAP": 0x13, "FETCH_ADD": 0x14, "UD_SEND_ONLY": 0x64,
    # UC: the RC opcode + 0x20.
    "UC_WRITE_FIRST": 0x26, "UC_WRITE_MIDDLE": 0x27, "UC_WRITE_ONLY": 0x2A,
}
OP_NAME = {v: k for k, v in OP.items()}
# AETH NAK codes (9.7.5.2.8, table 45): syndrome 011 in bits 7..5, the code in 4..0.
NAK_CODE = {0: "PSN_SEQ", 1: "INV_REQ", 2: "REM_ACCESS", 3: "REM_OP", 4: "INV_RD_REQ"}


class RETH(Packet):
    """RDMA extended transport header (9.3.3): VA, R_Key, DMA length."""
    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dlen", 0)]


class DETH(Packet):
    """Datagram extended transport header (9.3.2): Q_Key, reserved, source QP."""
    name = "DETH"
    fields_desc = [XIntField("qkey", 0), ByteField("resv", 0), XBitField("sqpn", 0, 24)]


class AtomicETH(Packet):
    """Atomic extended transport header (9.3.4): VA, R_Key, swap (add) data, compare data."""
    name = "AtomicETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), XLongField("swap", 0),
                   XLongField("cmp", 0)]


class Target:
    """What the target program reported about its QP and memory."""

    def __init__(self, kind, fields, psn, local, remote):
        self.kind = kind
        self.qpn = int(fields["qpn"])
        self.rkey = int(fields.get("rkey", 0))
        self.va = int(fields.get("va", 0))
        self.len = int(fields.get("len", 0))
        self.rkey_other = int(fields.get("rkey_other", 0))
        self.va_other = int(fields.get("va_other", 0))
        self.qkey = int(fields.get("qkey", 0))
        self.psn = psn
        self.local = local      # our address: the peer the target is connected to
        self.remote = remote    # the target's address


def payload(n, seed=0xA5):
    return bytes(((i * 7 + seed) & 0xFF) for i in range(n))


def corrupt_icrc(p):
    """The packet's bytes with one bit of its ICRC (the last four bytes) flipped."""
    b = bytearray(bytes(p))
    b[-1] ^= 0x01
    return bytes(b)


def pkt(t, opcode, psn_off, *layers, dqpn=None, pkey=DEFAULT_PKEY, ackreq=1, src=None, tver=0):
    """One RoCEv2 packet to the target, as Linux sends from a UDP socket (DF, Identification 0);
    scapy fills the lengths, the UDP checksum and the ICRC."""
    ip = IP(src=src or t.local, dst=t.remote, flags="DF", id=0, ttl=64)
    bth = BTH(opcode=opcode, pkey=pkey, dqpn=t.qpn if dqpn is None else dqpn, ackreq=ackreq,
              psn=(t.psn + psn_off) & PSN_MASK, version=tver)
    p = ip / UDP(sport=0xC000, dport=ROCEV2_PORT) / bth
    for layer in layers:
        p = p / layer
    return p


def write_only(t, psn_off=0, n=64, va=None, rkey=None, dlen=None, **kw):
    return pkt(t, OP["WRITE_ONLY"], psn_off,
               RETH(va=t.va if va is None else va, rkey=t.rkey if rkey is None else rkey,
                    dlen=n if dlen is None else dlen), Raw(payload(n)), **kw)


def uc_write_only(t, psn_off=0, n=64, va=None, **kw):
    return pkt(t, OP["UC_WRITE_ONLY"], psn_off,
               RETH(va=t.va if va is None else va, rkey=t.rkey, dlen=n), Raw(payload(n)),
               ackreq=0, **kw)


def read_req(t, psn_off=0, n=64, va=None, rkey=None):
    return pkt(t, OP["READ_REQUEST"], psn_off,
               RETH(va=t.va if va is None else va, rkey=t.rkey if rkey is None else rkey, dlen=n))


def fetch_add(t, psn_off=0, va=None):
    return pkt(t, OP["FETCH_ADD"], psn_off,
               AtomicETH(va=t.va if va is None else va, rkey=t.rkey, swap=1, cmp=0))


def ud_send(t, n=64, qkey=None, sqpn=PEER_QPN, pkey=DEFAULT_PKEY):
    return pkt(t, OP["UD_SEND_ONLY"], 0, DETH(qkey=QKEY if qkey is None else qkey, sqpn=sqpn),
               Raw(payload(n)), pkey=pkey, ackreq=0)


def other_source(t):
    """An address beside ours that is not the peer the target is connected to."""
    a = t.local.split(".")
    a[3] = str(int(a[3]) + 1)
    return ".".join(a)


# Sections of IBA Vol. 1, chapter 9, the answers rely on (our summaries).
S_HDR = ("9.6 (transport header validation): a packet that fails a header check -- P_Key, "
         "destination QP, QP state, Q_Key, source of a connected QP -- is silently dropped; "
         "no response, the QP is not affected")
S_PSN_AHEAD = ("9.7.5.1 (responder PSN check) / 9.9 (responder errors): a PSN ahead of the expected one "
               "(within the 2^23 after it) is a sequence error, NAKed (PSN Sequence Error, "
               "PSN = the expected PSN) once per gap, the QP stays in RTS")
S_PSN_DUP = ("9.7.5.1 (responder PSN check): a PSN in the 2^23 behind the expected one is a "
             "duplicate; a duplicate SEND or WRITE is not executed again and is ACKed "
             "(PSN = the expected PSN - 1 here)")
S_INV = ("9.7.5.2.8 table 45 (NAK Invalid Request) / 9.9 (responder errors): an opcode out "
         "of sequence, a length error (payload beyond the path MTU or not matching the "
         "RETH length), a misaligned atomic; NAK Invalid Request, the QP goes to Error, "
         "nothing written")
S_ACC = ("9.7.5.2.8 table 45 (NAK Remote Access Error) / 9.9 (responder errors): an R_Key "
         "that does not cover the request (bounds, access, another PD); NAK, the QP goes to "
         "Error, nothing written or read")
S_ICRC = ("7.8 (the ICRC; RoCEv2: annex A17) / 9.6: a packet whose ICRC does not match is "
          "dropped before the transport looks at it")
S_ATOMIC_DUP = ("9.7.5.1 (duplicate requests): a duplicate atomic is not executed again; the "
                "responder answers it with the original value it saved the first time")
S_UC = ("9.8 (UC): the responder sends nothing back; a request it cannot execute (R_Key, "
        "length, opcode sequence) is dropped with the rest of its message and the QP stays "
        "in RTS; a First or Only packet starts a message whatever its PSN")
S_OK = "9.4 (Send, RDMA Write, RDMA Read, Atomic): executed and acknowledged"
S_UD = ("9.8 (UD) / 9.6: a UD datagram with the QP's Q_Key is delivered whatever DETH's "
        "source QP says; the receive completion reports that source QP (the datagram "
        "service does not authenticate senders: that is what the Q_Key is for)")
S_UD_DROP = ("9.6 (Q_Key check), 9.8: a UD datagram with a wrong Q_Key, or larger than the "
             "path MTU, is silently dropped; no receive is consumed")
S_RES = ("9.5 / 9.7.5.2.8 table 45, as we read them: responder resources bound the RDMA "
         "READ and atomic requests whose responses are still being produced; a responder "
         "that has answered each request before the next arrives is within them (the NAK "
         "Invalid Request for exceeding them answers requests it cannot hold)")


RXE_DUP_ACK = {
    "wire": ["ACK psn=0xffffff"],
    "why": "rxe ACKs a duplicate SEND or WRITE with the PSN before the next one it would "
           "ACK (resp.ack_psn - 1), and on a QP that has not ACKed anything yet that is "
           "0xFFFFFF, a PSN unrelated to the connection (psn_dup_after_one shows the same "
           "duplicate answered right once a request was ACKed). An ACK acknowledges every "
           "request up to its PSN (9.7.5.1), so the re-ACK of a duplicate must carry a PSN "
           "the responder has executed: the mock sends ePSN - 1",
}


def case(name, target, build, wire, state, mem, recv="none", spec="", rxe=None, rd=1,
         what=""):
    return dict(name=name, target=target, build=build, wire=wire, state=state, mem=mem,
                recv=recv, spec=spec, rxe=rxe, rd=rd, what=what)


CASES = [
    # Controls: well-formed requests are executed (so a silent target is not a pass).
    case("write_ok", "rc", lambda t: [write_only(t)], ["ACK psn+0"], "RTS", "changed",
         spec=S_OK, what="WRITE ONLY, 64 B inside the R_Key"),
    case("send_ok", "rc",
         lambda t: [pkt(t, OP["SEND_ONLY"], 0, Raw(payload(64)))], ["ACK psn+0"], "RTS",
         "changed", recv="ok:0:64", spec=S_OK, what="SEND ONLY, 64 B"),
    case("read_ok", "rc", lambda t: [read_req(t)], ["READ_RESPONSE_ONLY psn+0"], "RTS",
         "same", spec=S_OK, what="RDMA READ, 64 B inside the R_Key"),
    case("atomic_ok", "rc", lambda t: [fetch_add(t)], ["ATOMIC_ACK psn+0 orig=A"], "RTS",
         "changed", spec=S_OK, what="FETCH ADD on an aligned VA"),
    case("atomic_dup", "rc", lambda t: [fetch_add(t), fetch_add(t)],
         ["ATOMIC_ACK psn+0 orig=A", "ATOMIC_ACK psn+0 orig=A"], "RTS", "changed",
         spec=S_ATOMIC_DUP, what="the same FETCH ADD twice (a retransmission)"),
    # PSN outside the window.
    case("psn_ahead", "rc", lambda t: [write_only(t, 5)], ["NAK:PSN_SEQ psn+0"], "RTS",
         "same", spec=S_PSN_AHEAD, what="WRITE ONLY at ePSN+5"),
    case("psn_ahead_twice", "rc", lambda t: [write_only(t, 5), write_only(t, 6)],
         ["NAK:PSN_SEQ psn+0"], "RTS", "same", spec=S_PSN_AHEAD,
         what="two WRITEs at ePSN+5, +6: one NAK for the gap"),
    case("psn_ahead_edge", "rc", lambda t: [write_only(t, (1 << 23) - 1)],
         ["NAK:PSN_SEQ psn+0"], "RTS", "same", spec=S_PSN_AHEAD,
         what="WRITE at ePSN+2^23-1, the farthest PSN still ahead"),
    case("psn_beyond_window", "rc", lambda t: [write_only(t, 1 << 23)], ["ACK psn-1"], "RTS",
         "same", spec=S_PSN_DUP, rxe=RXE_DUP_ACK,
         what="WRITE at ePSN+2^23: past the window, so a duplicate"),
    case("psn_dup_far", "rc", lambda t: [write_only(t, -(1 << 22))], ["ACK psn-1"], "RTS",
         "same", spec=S_PSN_DUP, rxe=RXE_DUP_ACK,
         what="WRITE at ePSN-2^22, a duplicate far behind"),
    case("psn_dup_after_one", "rc", lambda t: [write_only(t), write_only(t, -(1 << 22))],
         ["ACK psn+0", "ACK psn+0"], "RTS", "changed", spec=S_PSN_DUP,
         what="a WRITE at ePSN, then one at ePSN-2^22: the duplicate is ACKed with the "
              "newest PSN executed"),
    # Lengths.
    case("write_over_mtu", "rc", lambda t: [write_only(t, n=MTU + 64)], ["NAK:INV_REQ psn+0"],
         "ERROR", "same", recv="flush", spec=S_INV,
         what="WRITE ONLY of 1088 B (RETH length 1088) on a 1024-byte path MTU"),
    case("write_first_short", "rc",
         lambda t: [pkt(t, OP["WRITE_FIRST"], 0, RETH(va=t.va, rkey=t.rkey, dlen=2 * MTU),
                        Raw(payload(MTU // 2)))], ["NAK:INV_REQ psn+0"], "ERROR", "same",
         recv="flush", spec=S_INV,
         what="WRITE FIRST of 512 B (a FIRST carries exactly the path MTU)"),
    case("write_len_mismatch", "rc", lambda t: [write_only(t, n=64, dlen=128)],
         ["NAK:INV_REQ psn+0"], "ERROR", "same", recv="flush", spec=S_INV,
         what="WRITE ONLY of 64 B whose RETH says 128"),
    case("write_beyond_rkey", "rc", lambda t: [write_only(t, va=t.va + t.len - 32)],
         ["NAK:REM_ACCESS psn+0"], "ERROR", "same", recv="flush", spec=S_ACC,
         what="WRITE of 64 B at 32 B before the end of the region"),
    case("write_bad_rkey", "rc", lambda t: [write_only(t, rkey=t.rkey ^ 0x80)],
         ["NAK:REM_ACCESS psn+0"], "ERROR", "same", recv="flush", spec=S_ACC,
         what="WRITE with an R_Key whose key byte differs"),
    case("write_other_pd", "rc",
         lambda t: [write_only(t, va=t.va_other, rkey=t.rkey_other)],
         ["NAK:REM_ACCESS psn+0"], "ERROR", "same", recv="flush", spec=S_ACC,
         what="WRITE with the R_Key of a region in another PD"),
    case("read_beyond_rkey", "rc", lambda t: [read_req(t, n=t.len + 64)],
         ["NAK:REM_ACCESS psn+0"], "ERROR", "same", recv="flush", spec=S_ACC,
         what="READ of the region's length + 64"),
    # Responder resources.
    case("read_burst", "rc", lambda t: [read_req(t, i) for i in range(4)],
         ["READ_RESPONSE_ONLY psn+0", "READ_RESPONSE_ONLY psn+1",
          "READ_RESPONSE_ONLY psn+2", "READ_RESPONSE_ONLY psn+3"], "RTS", "same",
         spec=S_RES, rd=1,
         what="4 READs back to back to a QP with 1 responder resource"),
    # Opcode sequence and atomics.
    case("atomic_misaligned", "rc", lambda t: [fetch_add(t, va=t.va + 4)],
         ["NAK:INV_REQ psn+0"], "ERROR", "same", recv="flush", spec=S_INV,
         what="FETCH ADD at a VA 4 bytes off 8-byte alignment"),
    case("write_middle_first", "rc",
         lambda t: [pkt(t, OP["WRITE_MIDDLE"], 0, Raw(payload(MTU)))], ["NAK:INV_REQ psn+0"],
         "ERROR", "same", recv="flush", spec=S_INV, what="WRITE MIDDLE with no FIRST before it"),
    case("send_last_first", "rc",
         lambda t: [pkt(t, OP["SEND_LAST"], 0, Raw(payload(64)))], ["NAK:INV_REQ psn+0"],
         "ERROR", "same", recv="flush", spec=S_INV, what="SEND LAST with no FIRST before it"),
    # Header checks: silence.
    case("bad_icrc", "rc", lambda t: [corrupt_icrc(write_only(t))], [], "RTS", "same",
         spec=S_ICRC, what="WRITE whose ICRC is off by one bit"),
    case("bad_tver", "rc", lambda t: [write_only(t, tver=1)], [], "RTS", "same", spec=S_HDR,
         what="WRITE with BTH transport header version 1 (0 is the only one); ICRC valid"),
    case("bad_pkey", "rc", lambda t: [write_only(t, pkey=0x8123)], [], "RTS", "same",
         spec=S_HDR, what="WRITE with P_Key 0x8123 (the QP's is 0xffff); ICRC valid"),
    case("qp_in_reset", "reset", lambda t: [write_only(t)], [], "RESET", "same", spec=S_HDR,
         what="WRITE to a QP in RESET"),
    case("qp_unknown", "rc", lambda t: [write_only(t, dqpn=(t.qpn + 0x1000) & 0xFFFFFF)], [],
         "RTS", "same", spec=S_HDR, what="WRITE to a QPN that does not exist"),
    case("rc_forged_source", "rc", lambda t: [write_only(t, src=other_source(t))], [], "RTS",
         "same", spec=S_HDR,
         what="WRITE with every field right but sent from another IP than the peer's"),
    # UC.
    case("uc_write_ok", "uc", lambda t: [uc_write_only(t)], [], "RTS", "changed", spec=S_UC,
         what="UC WRITE ONLY, 64 B inside the R_Key"),
    case("uc_psn_gap", "uc", lambda t: [uc_write_only(t, 5)], [], "RTS", "changed", spec=S_UC,
         what="UC WRITE ONLY at ePSN+5: an Only starts a new message"),
    case("uc_write_beyond_rkey", "uc", lambda t: [uc_write_only(t, va=t.va + t.len - 32)], [],
         "RTS", "same", spec=S_UC, what="UC WRITE of 64 B at 32 B before the region's end"),
    case("uc_write_over_mtu", "uc", lambda t: [uc_write_only(t, n=MTU + 64)], [], "RTS",
         "same", spec=S_UC, what="UC WRITE ONLY of 1088 B on a 1024-byte path MTU"),
    case("uc_middle_first", "uc",
         lambda t: [pkt(t, OP["UC_WRITE_MIDDLE"], 0, Raw(payload(MTU)), ackreq=0)], [], "RTS",
         "same", spec=S_UC, what="UC WRITE MIDDLE with no FIRST before it"),
    case("uc_forged_source", "uc", lambda t: [uc_write_only(t, src=other_source(t))], [],
         "RTS", "same", spec=S_HDR, what="UC WRITE from another IP than the peer's"),
    # UD.
    case("ud_ok", "ud", lambda t: [ud_send(t)], [], "RTS", "changed",
         recv="ok:%d:104" % PEER_QPN, spec=S_UD, what="UD SEND, right Q_Key"),
    case("ud_forged_sqpn", "ud", lambda t: [ud_send(t, sqpn=0x00DEAD)], [], "RTS", "changed",
         recv="ok:%d:104" % 0xDEAD, spec=S_UD, what="UD SEND whose DETH names source QP 0xdead"),
    case("ud_bad_qkey", "ud", lambda t: [ud_send(t, qkey=QKEY ^ 1)], [], "RTS", "same",
         spec=S_UD_DROP, what="UD SEND with a wrong Q_Key"),
    case("ud_bad_pkey", "ud", lambda t: [ud_send(t, pkey=0x8123)], [], "RTS", "same",
         spec=S_HDR, what="UD SEND with a wrong P_Key"),
    case("ud_over_mtu", "ud", lambda t: [ud_send(t, n=MTU + 64)], [], "RTS", "same",
         spec=S_UD_DROP, what="UD SEND of 1088 B on a 1024-byte MTU",
         rxe={"mem": "changed", "recv": "ok:%d:1128" % PEER_QPN,
              "why": "rxe delivers a UD datagram longer than the port's MTU (1024 here: "
                     "rxe0 on a 1500-byte veth); a UD message is one packet of at most the "
                     "path MTU, and a longer one is malformed (9.6, 9.8): the mock drops it"}),
]
