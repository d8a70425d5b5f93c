#!/usr/bin/env python3
"""Throws the crafted packets of cases.py at a target responder and checks its answers.

The target is a program speaking the line protocol of examples/hostile_target.rs (the mock
HCA on a UDP socket) or tests/vm/src/hostile_verbs.c (Linux Soft-RoCE through libibverbs).
For each case this script asks the target for a fresh QP, sends the case's packets from
LOCAL (a raw IPv4 socket: scapy's bytes leave as built, ICRC included), listens on
LOCAL:4791 for what the responder sends back, asks the target for its QP state, its receive
completions and a hash of its memory, and compares all of it with the case's expected answer.

    hostile.py --local IP --remote IP --target-cmd 'CMD ARGS' [--as mock|rxe] [--only a,b]

--as rxe accepts a recorded rxe departure from the specification (cases.py's ``rxe``) as
rxe's answer; --as mock (the default) requires the specification's answer.
Prints one PASS/FAIL line per case and ends with "N passed, M failed"; exits 1 on any FAIL,
77 when it may not open a raw socket (it needs root or CAP_NET_RAW). Needs scapy.
"""

import argparse
import os
import random
import select
import shlex
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as C  # noqa: E402


class Proc:
    """The target program, one command and one reply line at a time."""

    def __init__(self, cmd, timeout):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        self.timeout = timeout
        self.expect("READY")

    def line(self):
        end = time.time() + self.timeout
        while time.time() < end:
            r, _, _ = select.select([self.p.stdout], [], [], max(0.0, end - time.time()))
            if not r:
                break
            s = self.p.stdout.readline()
            if not s:
                raise RuntimeError("the target exited (rc %s)" % self.p.poll())
            s = s.strip()
            if s.startswith(("READY", "QP ", "STATE ", "ERROR")):
                return s
        raise RuntimeError("the target did not answer within %s s" % self.timeout)

    def expect(self, what):
        s = self.line()
        if not s.startswith(what):
            raise RuntimeError("target: expected %s, got: %s" % (what, s))
        return s

    def ask(self, cmd, what):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.expect(what)

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            self.p.wait(timeout=10)
        except Exception:
            self.p.kill()


def fields(line):
    return dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)


STATE_NAMES = {"RST": "RESET", "ERR": "ERROR", "SQER": "SQE"}


def decode(data, base):
    """One packet the responder sent: BTH (and AETH) as a short string, PSN relative to base."""
    if len(data) < 12:
        return "RUNT(%d)" % len(data)
    opcode = data[0]
    psn = struct.unpack("!I", data[8:12])[0] & C.PSN_MASK
    rel = (psn - base) & C.PSN_MASK
    if rel >= 1 << 23:
        rel -= 1 << 24
    name = C.OP_NAME.get(opcode, "OP_0x%02x" % opcode)
    if opcode == C.OP["ACK"] and len(data) >= 16:
        syn = data[12]
        kind = syn >> 5
        if kind == 0:
            name = "ACK"
        elif kind == 1:
            name = "RNR_NAK"
        elif kind == 3:
            name = "NAK:" + C.NAK_CODE.get(syn & 0x1F, "0x%02x" % (syn & 0x1F))
        else:
            name = "AETH_0x%02x" % syn
    if opcode == C.OP["ATOMIC_ACK"] and len(data) >= 24:
        # AtomicAckETH's original value, after the AETH.
        return "%s psn%+d orig=0x%016x" % (name, rel, struct.unpack("!Q", data[16:24])[0])
    return show_psn(name, psn, base)


def show_psn(name, psn, base):
    """A packet's name and PSN as the cases write them: relative to the case's first PSN, or
    as it is when it is nowhere near it."""
    rel = (psn - base) & C.PSN_MASK
    if rel >= 1 << 23:
        rel -= 1 << 24
    if abs(rel) > 1 << 16:
        return "%s psn=0x%06x" % (name, psn)
    return "%s psn%+d" % (name, rel)


def expected_wire(wire, base):
    """A case's expected packets with every absolute PSN (``psn=0x...``, e.g. rxe's 0xFFFFFF)
    written as `decode` shows it for this run's first PSN: a random first PSN can fall near
    it, and then the same packet is shown relative."""
    out = []
    for w in wire:
        head, sep, rest = w.partition(" psn=0x")
        if not sep:
            out.append(w)
            continue
        hexpsn, _, tail = rest.partition(" ")
        shown = show_psn(head, int(hexpsn, 16), base)
        out.append(shown + (" " + tail if tail else ""))
    return out


def listen(sock, quiet):
    """Everything that arrives until `quiet` seconds pass with nothing."""
    got = []
    while True:
        r, _, _ = select.select([sock], [], [], quiet)
        if not r:
            return got
        got.append(sock.recv(65536))


def run_case(c, target, raw, rx, args):
    psn = random.randrange(0, 1 << 24)
    if c["target"] == "rc":
        line = target.ask("rc %s %d %d %d" % (args.local, C.PEER_QPN, psn, c["rd"]), "QP ")
    elif c["target"] == "uc":
        line = target.ask("uc %s %d %d" % (args.local, C.PEER_QPN, psn), "QP ")
    elif c["target"] == "ud":
        line = target.ask("ud %d" % C.QKEY, "QP ")
    else:
        line = target.ask("reset", "QP ")
    t = C.Target(c["target"], fields(line), psn, args.local, args.remote)
    before = fields(target.ask("state", "STATE "))
    listen(rx, 0.05)  # nothing stale
    for p in c["build"](t):
        raw.sendto(p if isinstance(p, bytes) else bytes(p), (args.remote, 0))
        time.sleep(0.01)
    wire = [decode(d, psn) for d in listen(rx, args.quiet)]
    # Original values of atomics compare by identity (the first one seen is A, ...): the
    # byte order an atomic reads memory in is the HCA's (see README.md).
    origs = []
    for i, w in enumerate(wire):
        if " orig=" in w:
            head, v = w.split(" orig=")
            if v not in origs:
                origs.append(v)
            wire[i] = "%s orig=%s" % (head, "ABCDEFGH"[origs.index(v) % 8])
    after = fields(target.ask("state", "STATE "))
    got = {
        "wire": wire,
        "state": STATE_NAMES.get(after["state"], after["state"]),
        "mem": "same" if after["hash"] == before["hash"] else "changed",
        "recv": after["recv"],
    }
    if origs:
        got["orig"] = origs
    want = {k: c[k] for k in ("wire", "state", "mem", "recv")}
    want["wire"] = expected_wire(want["wire"], psn)
    return got, want, psn


def compared(a):
    return {k: a[k] for k in ("wire", "state", "mem", "recv")}


def fmt(a):
    s = "wire=[%s] state=%s mem=%s recv=%s" % (", ".join(a["wire"]) or "silence",
                                               a["state"], a["mem"], a["recv"])
    if a.get("orig"):
        s += " (orig: %s)" % ", ".join("%s=%s" % ("ABCDEFGH"[i % 8], v)
                                       for i, v in enumerate(a["orig"]))
    return s


def rig_dry_run():
    """Builds and decodes every case's packets without sending anything, so that
    tests/vm/py-closure.py sees every module they load."""
    # The tables scapy.data falls back to at import when the host's files (/etc/ethertypes,
    # Wireshark's manuf, ...) are missing, as in the rig's guest.
    import scapy.libs.bluetoothids  # noqa: F401
    import scapy.libs.ethertypes  # noqa: F401
    import scapy.libs.manuf  # noqa: F401
    f = {"qpn": "17", "rkey": "1", "va": "4096", "len": "8192", "rkey_other": "2",
         "va_other": "65536", "qkey": str(C.QKEY)}
    t = C.Target("rc", f, 5, "10.0.0.2", "10.0.0.1")
    for c in C.CASES:
        for p in c["build"](t):
            decode(bytes(p)[28:], 5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--local", required=True, help="our address (the target's peer)")
    ap.add_argument("--remote", required=True, help="the target's RoCEv2 address")
    ap.add_argument("--target-cmd", required=True, help="the target program and its arguments")
    ap.add_argument("--as", dest="impl", default="mock", choices=["mock", "rxe"])
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--quiet", type=float, default=0.5,
                    help="seconds of silence that end a case's answer")
    ap.add_argument("--timeout", type=float, default=30.0, help="per target command")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    random.seed(args.seed)

    try:
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    except PermissionError:
        print("SKIPPED: a raw IPv4 socket needs root (CAP_NET_RAW)", flush=True)
        sys.exit(77)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((args.local, C.ROCEV2_PORT))
    target = Proc(shlex.split(args.target_cmd), args.timeout)
    only = set(filter(None, args.only.split(",")))
    passed = failed = 0
    try:
        for c in C.CASES:
            if only and c["name"] not in only:
                continue
            try:
                got, want, base = run_case(c, target, raw, rx, args)
            except Exception as e:  # the target failed: this case fails, the rest go on
                print("FAIL %s: %s" % (c["name"], e), flush=True)
                failed += 1
                continue
            accepted = [("spec", want)]
            if args.impl == "rxe" and c["rxe"]:
                alt = dict(want)
                alt.update({k: v for k, v in c["rxe"].items() if k in want})
                alt["wire"] = expected_wire(alt["wire"], base)
                accepted.append(("rxe's recorded departure", alt))
            match = next((n for n, a in accepted if a == compared(got)), None)
            ok = match is not None
            passed += ok
            failed += not ok
            print("%s %-20s %s: %s" % ("PASS" if ok else "FAIL", c["name"], args.impl, fmt(got)),
                  flush=True)
            if not ok or match != "spec":
                print("     %-20s spec: %s" % ("", fmt(want)), flush=True)
            if match and match != "spec":
                print("     %-20s (rxe departs from the specification: %s)"
                      % ("", c["rxe"].get("why", "")), flush=True)
    finally:
        target.close()
    print("%d passed, %d failed" % (passed, failed), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
