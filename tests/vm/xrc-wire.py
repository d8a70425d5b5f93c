#!/usr/bin/env python3
"""XRC on the wire in the linuxuhca boot: reads the fabric's capture (the server's --pcap,
native InfiniBand, LRH first) and the guest's console log, and checks what
ibv_xsrq_pingpong's XRC requests carried against what the tools printed.

Each tool prints a "local:" line per XRC target QP it made (LID, QPN RECV, SRQN). A run's
side (its server, or its client(s)) is one XRC domain. The checks:
  - every XRC request packet (OpCode bits 7:5 = 101, a request operation) went to a target
    QP a tool printed, and its XRCETH named an XRC SRQ of that target's side;
  - every printed target received XRC requests, and every printed SRQ was named by at least
    50 requests that end a message (ibv_xsrq_pingpong -n 50: 50 messages to each);
  - where one side has several SRQs (two clients sharing a domain), each of its targets
    received requests naming each of them: a target fed another process's SRQ.

The server is killed when QEMU is gone and its capture may end inside a record; that last
record is ignored. Prints one line per check (PASS/FAIL); exit status 0 if all passed.

  python3 tests/vm/xrc-wire.py CAPTURE.pcap GUEST.log
"""
import re
import struct
import sys
from collections import Counter, defaultdict

# Request operations of RC, as XRC carries them in OpCode bits 4:0: SEND, RDMA WRITE,
# RDMA READ request, the atomics, SEND with invalidate.
REQUESTS = set(range(0x00, 0x0D)) | {0x13, 0x14, 0x16, 0x17}
# Those that end a message: SEND Last, Last with immediate, Only, Only with immediate.
MESSAGE_ENDS = {0x02, 0x03, 0x04, 0x05}


def packets(path):
    """Yields each whole record of a pcap file (either byte order, us or ns stamps)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off : off + 16])
        off += 16
        if off + incl > len(data):
            return
        yield data[off : off + incl]
        off += incl


def xrc_requests(path):
    """(DLID, destination QP, XRCETH SRQ number, OpCode bits 4:0) of each XRC request."""
    for p in packets(path):
        if len(p) < 8:
            continue
        lnh = p[1] & 3
        bth = 8 + (40 if lnh == 3 else 0)
        if lnh not in (2, 3) or len(p) < bth + 16:
            continue
        op = p[bth]
        if op >> 5 != 5 or (op & 0x1F) not in REQUESTS:
            continue
        dlid = struct.unpack(">H", p[2:4])[0]
        dqp = int.from_bytes(p[bth + 5 : bth + 8], "big")
        srqn = int.from_bytes(p[bth + 13 : bth + 16], "big")
        yield dlid, dqp, srqn, op & 0x1F


def targets(path):
    """{(LID, target QPN): side} and {side: set of SRQNs} from the tools' "local:" lines."""
    head = re.compile(r"^--- (XRC: .*), (server|clients?): ")
    local = re.compile(
        r"^\s*local: LID ([0-9a-f]+), QPN RECV ([0-9a-f]+) SEND [0-9a-f]+, "
        r"PSN [0-9a-f]+, SRQN ([0-9a-f]+)"
    )
    side = None
    by_qp, srqs = {}, defaultdict(set)
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\r\n")
            m = head.match(line)
            if m:
                side = (m.group(1), m.group(2))
                continue
            if line.startswith("--- "):
                side = None
                continue
            m = local.match(line)
            if m and side:
                lid, qpn, srqn = (int(g, 16) for g in m.groups())
                by_qp[(lid, qpn)] = side
                srqs[side].add(srqn)
    return by_qp, srqs


def main():
    cap, log = sys.argv[1], sys.argv[2]
    by_qp, srqs = targets(log)
    fails = 0

    def check(ok, text):
        nonlocal fails
        print(("PASS " if ok else "FAIL ") + text)
        fails += not ok

    check(len(by_qp) > 0, f"capture: the tools printed {len(by_qp)} XRC target QPs")
    seen = Counter()
    named = defaultdict(set)
    ends = Counter()
    stray = []
    for dlid, dqp, srqn, op in xrc_requests(cap):
        side = by_qp.get((dlid, dqp))
        if side is None or srqn not in srqs[side]:
            stray.append((dlid, dqp, srqn))
            continue
        seen[(dlid, dqp)] += 1
        named[(dlid, dqp)].add(srqn)
        if op in MESSAGE_ENDS:
            ends[(side, srqn)] += 1
    total = sum(seen.values())
    check(
        not stray and total > 0,
        f"capture: {total} XRC requests, each to a printed target QP naming an SRQ of its "
        f"domain ({len(stray)} others"
        + (": " + ", ".join(f"LID {l} QP {q:#x} SRQ {s:#x}" for l, q, s in stray[:5]) if stray else "")
        + ")",
    )
    idle = [k for k in by_qp if not seen[k]]
    check(not idle, f"capture: every printed target QP received XRC requests ({len(idle)} none)")
    few = [(side, s) for side, ss in srqs.items() for s in ss if ends[(side, s)] < 50]
    check(
        not few,
        "capture: every printed XRC SRQ was named by at least 50 requests ending a message"
        + (f" (short: {', '.join(f'{s:#x}' for _, s in few)})" if few else ""),
    )
    for side, ss in sorted(srqs.items()):
        if len(ss) < 2:
            continue
        tq = [k for k, v in by_qp.items() if v == side]
        ok = all(named[k] == ss for k in tq)
        check(
            ok,
            f"capture: {side[0]}: each of the {len(tq)} target QPs of one domain received "
            f"requests naming each of its {len(ss)} SRQs ("
            + "; ".join(f"QP {k[1]:#x}: " + " ".join(f"{s:#x}" for s in sorted(named[k])) for k in tq)
            + ")",
        )
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
