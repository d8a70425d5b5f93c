#!/usr/bin/env python3
"""Prints the files a Python script needs in the VM rig's guest, one absolute path a line:
the interpreter (its real path), the files of every module that importing the scripts and
running their dry-run hook loaded (stdlib, extension modules, site-packages such as scapy),
and what the interpreter reads at start-up (site, encodings, its own shared library is found
by build-rig.sh with ldd).

    py-closure.py SCRIPT...

Compiled bytecode (``__pycache__/*.pyc``) goes with each module that has it, so the guest
does not compile scapy under emulation. Left out: ``cryptography`` and ``cffi``, which scapy
only probes for at import (it works without them; they are 15 MB).

A script may define ``rig_dry_run()``: called here so that modules imported lazily while it
runs (scapy loads some on first use) are in the list too. Each file goes into the initramfs
at the same path, so the interpreter finds its prefix and site-packages as on the host.
"""

import importlib.util
import os
import sys


# Packages scapy imports if present and does without.
OPTIONAL = {"cryptography", "cffi", "_cffi_backend"}


def main():
    for i, path in enumerate(sys.argv[1:]):
        path = os.path.abspath(path)
        sys.path.insert(0, os.path.dirname(path))
        spec = importlib.util.spec_from_file_location("rig_script_%d" % i, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if hasattr(mod, "rig_dry_run"):
            mod.rig_dry_run()
    exe = os.path.realpath(sys.executable)
    print(exe)  # first: build-rig.sh links /usr/bin/python3 to it
    files = set()
    for name, m in list(sys.modules.items()):
        f = getattr(m, "__file__", None)
        if not f or not os.path.isfile(f) or name.split(".")[0] in OPTIONAL:
            continue
        files.add(os.path.realpath(f))
        if f.endswith(".py"):
            c = importlib.util.cache_from_source(f)
            if os.path.isfile(c):
                files.add(os.path.realpath(c))
    # The landmark by which the interpreter finds its prefix.
    files.add(os.path.realpath(os.path.join(os.path.dirname(os.__file__), "os.py")))
    here = {os.path.abspath(p) for p in sys.argv[1:]}
    for f in sorted(files):
        if f not in here and f != exe:
            print(f)


if __name__ == "__main__":
    main()
