#!/usr/bin/env python3
"""Reads the console log of the pyverbs boot (guest/tests/pyverbs.sh's PYV lines) and
prints the counts (tests, pass, skip, fail, error), every skip grouped by reason, every
failure and error with its test id; exits 1 when a failure or error is not listed in the
expected file, when no module ran, or when the guest did not finish.

    pyverbs-report.py CONSOLE_LOG EXPECTED

EXPECTED: one entry a line, ``<test id> | <why>`` (the test id as the PYV line prints it,
``tests.<module>.<class>.<test>``; ``#`` starts a comment). Each entry must give its reason.
An entry that did not occur in the run is reported (not failed on).
"""

import collections
import re
import sys

LINE = re.compile(r"^PYV (ok|skip|fail|error|xfail|xpass) (\S+(?: \(.*?\))?) \| ?(.*)$")


def read_expected(path):
    expected = {}
    for n, raw in enumerate(open(path), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        tid, sep, why = line.partition(" | ")
        if not sep or not why.strip():
            sys.exit("%s:%d: an entry is '<test id> | <reason>': %r" % (path, n, line))
        expected[tid.strip()] = why.strip()
    return expected


def main():
    log, exp_path = sys.argv[1], sys.argv[2]
    expected = read_expected(exp_path)
    outcomes = []  # (status, id, detail)
    modules = 0
    done = False
    total_time = None
    slow = []  # (seconds, what)
    for raw in open(log, errors="replace"):
        line = raw.rstrip("\r\n")
        m = LINE.match(line)
        if m:
            outcomes.append(m.groups())
        elif line.startswith("PYV-END "):
            modules += 1
        elif line.startswith("PYV-TIME all "):
            total_time = line.split()[2]
        elif line.startswith("PYV-TIME ") or line.startswith("PYV-SLOW "):
            f = line.split()
            if len(f) == 3:
                slow.append((float(f[2]), ("module " if f[0] == "PYV-TIME" else "") + f[1]))
        elif line == "PYV-DONE":
            done = True
    by = collections.defaultdict(list)
    for status, tid, detail in outcomes:
        by[status].append((tid, detail))
    print(
        "pyverbs: %d tests: %d pass, %d skip, %d fail, %d error%s (%d modules finished%s)"
        % (
            len(outcomes),
            len(by["ok"]),
            len(by["skip"]),
            len(by["fail"]),
            len(by["error"]),
            "".join(", %d %s" % (len(by[s]), s) for s in ("xfail", "xpass") if by[s]),
            modules,
            ", %s s" % total_time if total_time else "",
        )
    )
    print("\nslowest modules and tests (s):")
    for took, what in sorted(slow, reverse=True)[:12]:
        print("  %6.1f  %s" % (took, what))
    reasons = collections.defaultdict(list)
    for tid, why in by["skip"]:
        reasons[why].append(tid)
    print("\nskips by reason:")
    for why, tids in sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print("  %3d  %s" % (len(tids), why or "(no reason given)"))
        for tid in sorted(tids):
            print("         %s" % tid)
    bad = 0
    seen = set()
    print("\nfailures and errors:")
    for status in ("fail", "error", "xpass"):
        for tid, detail in sorted(by[status]):
            if tid in expected:
                seen.add(tid)
                print("  expected   %-5s %s: %s\n             (%s)" % (status, tid, detail, expected[tid]))
            else:
                bad += 1
                print("  UNEXPECTED %-5s %s: %s" % (status, tid, detail))
    if not by["fail"] and not by["error"] and not by["xpass"]:
        print("  none")
    for tid in sorted(set(expected) - seen):
        print("  note: expected entry did not occur: %s (%s)" % (tid, expected[tid]))
    ok = True
    if bad:
        print("FAIL %d failures or errors not in %s" % (bad, exp_path))
        ok = False
    if not modules:
        print("FAIL no module of the suite finished")
        ok = False
    if not done:
        print("FAIL the guest did not finish the suite (no PYV-DONE)")
        ok = False
    if ok:
        print("PASS every failure and error is in %s" % exp_path)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
