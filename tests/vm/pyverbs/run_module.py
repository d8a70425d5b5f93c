#!/usr/bin/env python3
"""Runs one module of rdma-core's pyverbs test suite (tests/test_*.py) in the VM rig's guest
and prints one machine-readable line per outcome, for tests/vm/pyverbs-report.py:

    PYV <ok|skip|fail|error|xfail|xpass> <test id> | <reason or exception, one line>
    PYV-SLOW <test id> <seconds>   (a test that took more than 2 s)
    PYV-END <module> ran=<n>

    run_module.py SUITE_DIR MODULE [run_tests.py options, e.g. --dev mlx5_0]

SUITE_DIR is a directory named ``tests`` holding the suite (Debian's python3-pyverbs ships
it in /usr/share/doc/rdma-core/tests, partly gzipped: the guest unpacks a copy). The module
is loaded as rdma-core's run_tests.py loads it (``tests.<module>``, after the suite's
``args_parser`` took ``--dev`` and the other options), its test cases as run_tests.py finds
them (unittest's loader on the module), and run with unittest's text runner
(its usual output and tracebacks go to stderr). A module that crashes the interpreter prints
no PYV-END line: the guest script reports that.

``rig_dry_run()`` (tests/vm/py-closure.py calls it on the host) imports the whole suite from
the host's copy so that every module it loads goes into the guest.
"""

import gzip
import importlib
import os
import shutil
import sys
import tempfile
import time
import types
import unittest

SUITE = "/usr/share/doc/rdma-core/tests"


def one_line(text):
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class Result(unittest.TextTestResult):
    """unittest's text result that also prints a PYV line for each outcome, and a
    ``PYV-SLOW <test id> <seconds>`` line for a test that took more than SLOW seconds."""

    SLOW = 2.0

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        took = time.monotonic() - self._started
        if took > self.SLOW:
            sys.stdout.write("PYV-SLOW %s %.1f\n" % (test.id(), took))
            sys.stdout.flush()

    def _pyv(self, status, test, detail=""):
        sys.stdout.write("PYV %s %s | %s\n" % (status, test.id(), one_line(detail)))
        sys.stdout.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._pyv("ok", test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._pyv("skip", test, reason)

    def addError(self, test, err):
        super().addError(test, err)
        self._pyv("error", test, self._exc_info_to_string(err, test))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._pyv("fail", test, self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._pyv("xfail", test, self._exc_info_to_string(err, test))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._pyv("xpass", test)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            status = "fail" if issubclass(err[0], test.failureException) else "error"
            self._pyv(status, subtest, self._exc_info_to_string(err, subtest))


def load_suite(suite_dir, options, whole=True):
    """Imports the ``tests`` package in SUITE_DIR with run_tests.py's options parsed. With
    ``whole`` false, the package is set up without running its ``__init__.py``, which imports
    every test module (run_tests.py's way to find them): a process that runs one module
    then imports only that module and what it imports, which saves about 1.7 s a module
    under TCG."""
    sys.path.insert(0, suite_dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(suite_dir)))
    from args_parser import parser

    sys.argv[1:] = options
    parser.parse_args()
    if whole:
        return importlib.import_module("tests")
    package = types.ModuleType("tests")
    package.__path__ = [os.path.abspath(suite_dir)]
    sys.modules["tests"] = package
    # tests.utils and tests.mlx5_base import each other; the suite's modules work when
    # tests.utils comes first, as it does in the whole package (test_addr imports it first).
    importlib.import_module("tests.utils")
    return package


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: run_module.py SUITE_DIR MODULE [run_tests.py options]")
    suite_dir, module = sys.argv[1], sys.argv[2]
    load_suite(suite_dir, sys.argv[3:], whole=False)
    mod = importlib.import_module("tests." + module)
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Result)
    result = runner.run(suite)
    sys.stdout.write("PYV-END %s ran=%d\n" % (module, result.testsRun))
    sys.stdout.flush()


def unpack(src, dst):
    """Copies the suite in SRC to DST, unpacking the gzipped files."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if name.endswith(".gz"):
            with gzip.open(path, "rb") as f, open(os.path.join(dst, name[:-3]), "wb") as out:
                shutil.copyfileobj(f, out)
        elif os.path.isfile(path):
            shutil.copy(path, dst)


def rig_dry_run():
    """Imports the whole suite (every test module, as run_tests.py does) from a copy of the
    host's, then forgets the copy's own modules (the guest unpacks its own)."""
    tmp = tempfile.mkdtemp()
    try:
        unpack(SUITE, os.path.join(tmp, "tests"))
        saved = list(sys.path), list(sys.argv)
        load_suite(os.path.join(tmp, "tests"), [])
        # Imported by unittest's runner and loader only when they run.
        import unittest.runner  # noqa: F401
        import unittest.loader  # noqa: F401
        import unittest.mock  # noqa: F401
        sys.path[:], sys.argv[:] = saved
        for name, m in list(sys.modules.items()):
            if (getattr(m, "__file__", None) or "").startswith(tmp) or name in (
                "tests",
                "args_parser",
            ):
                del sys.modules[name]
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--unpack":
        unpack(SUITE, sys.argv[2])
    else:
        main()
