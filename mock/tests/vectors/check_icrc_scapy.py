#!/usr/bin/env python3
"""Verify the ICRC of every RoCEv2 packet in a pcap with scapy's scapy.contrib.roce.

Usage: python3 check_icrc_scapy.py FILE.pcap
Each packet with a BTH is rebuilt with icrc=None (scapy recomputes it) and the last four
bytes are compared with the captured ones. Exit 0 if every ICRC matches and at least one
RoCEv2 packet was seen, 1 otherwise. Only scapy is used (pip install scapy).
"""
import sys

from scapy.contrib.roce import BTH
from scapy.utils import rdpcap

seen = bad = 0
for i, p in enumerate(rdpcap(sys.argv[1]), 1):
    if BTH not in p:
        continue
    seen += 1
    wire = bytes(p)
    q = p.copy()
    q[BTH].icrc = None
    rebuilt = bytes(q)
    if rebuilt[-4:] != wire[-4:] or len(rebuilt) != len(wire):
        bad += 1
        print(f"packet {i}: ICRC {wire[-4:].hex()} != scapy's {rebuilt[-4:].hex()}")
print(f"{seen} RoCEv2 packets, {bad} with a bad ICRC")
sys.exit(1 if bad or not seen else 0)
