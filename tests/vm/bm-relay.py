#!/usr/bin/env python3
"""The host's part of the two-guest collective of tests/vm/baremetal.sh: connects to the
serial consoles of two bare-metal guests (QEMU -chardev socket servers that wait for this
client), writes each console to its log file and copies each endpoint line ("EP ...") one
guest prints to the other guest's serial input. The guests now connect through the driver's
IB CM and print no such line: only the consoles are collected (the copying stays for a
program that still exchanges through the host).
Ends when both guests have closed their consoles, or after TIMEOUT seconds.

    bm-relay.py SOCKET_A LOG_A SOCKET_B LOG_B [TIMEOUT]
"""
import os
import selectors
import socket
import sys
import time


def main():
    sock_a, log_a, sock_b, log_b = sys.argv[1:5]
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 120.0
    deadline = time.monotonic() + timeout
    conns = []
    for path in (sock_a, sock_b):
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)
                break
            except OSError:
                if time.monotonic() > deadline:
                    print(f"bm-relay: no console at {path}", file=sys.stderr)
                    return 1
                time.sleep(0.05)
        conns.append(s)
    logs = [open(log_a, "wb"), open(log_b, "wb")]
    pending = [b"", b""]
    sel = selectors.DefaultSelector()
    for i, s in enumerate(conns):
        sel.register(s, selectors.EVENT_READ, i)
    open_ = 2
    relayed = 0
    while open_ and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            i = key.data
            data = conns[i].recv(65536)
            if not data:
                sel.unregister(conns[i])
                open_ -= 1
                continue
            logs[i].write(data)
            logs[i].flush()
            pending[i] += data
            *lines, pending[i] = pending[i].split(b"\n")
            for line in lines:
                line = line.rstrip(b"\r")
                if line.startswith(b"EP "):
                    try:
                        conns[1 - i].sendall(line + b"\n")
                        relayed += 1
                    except OSError:
                        pass
    print(f"bm-relay: {relayed} endpoint lines relayed")
    return 0 if open_ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
