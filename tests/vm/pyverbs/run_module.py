#!/usr/bin/env python3
"""Runs rdma-core's pyverbs test suite (tests/test_*.py), one module a process, in the VM
rig's guest and prints one machine-readable line per outcome, for tests/vm/pyverbs-report.py:

    PYV <ok|skip|fail|error|xfail|xpass> <test id> | <reason or exception, one line>
    PYV-SLOW <test id> <seconds>   (a test that took more than 2 s)
    PYV-END <module> ran=<n>

    run_module.py SUITE_DIR MODULE [run_tests.py options, e.g. --dev mlx5_0]
    run_module.py --all SUITE_DIR SECONDS [run_tests.py options]
    run_module.py --unpack DIR

With ``--all``, every module of the suite runs in its own process, forked from one that has
loaded what they share (pyverbs, the suite's helpers): a crash loses only its module, and
the guest does not start the interpreter and import pyverbs 44 times (about 2.5 s each
under TCG). Each module gets SECONDS; the parent prints a ``PYV error tests.<module>`` line
for one that ends without its PYV-END line, and ``PYV-TIME <module> <seconds>`` lines.
``--unpack DIR`` copies Debian's suite into DIR, gunzipping its gzipped files.

SUITE_DIR is a directory named ``tests`` holding the suite (Debian's python3-pyverbs ships
it in /usr/share/doc/rdma-core/tests, partly gzipped: the guest unpacks a copy). The module
is loaded as rdma-core's run_tests.py loads it (``tests.<module>``, after the suite's
``args_parser`` took ``--dev`` and the other options), its test cases as run_tests.py finds
them (unittest's loader on the module), and run with unittest's text runner
(its usual output and tracebacks go to stderr). A module that crashes the interpreter prints
no PYV-END line.

``rig_dry_run()`` (tests/vm/py-closure.py calls it on the host) imports the whole suite from
the host's copy so that every module it loads goes into the guest.
"""

import gzip
import importlib
import os
import shutil
import signal
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


def run_module(module):
    """Runs tests.MODULE (the suite loaded), unittest's output on stderr."""
    mod = importlib.import_module("tests." + module)
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Result)
    result = runner.run(suite)
    sys.stdout.write("PYV-END %s ran=%d\n" % (module, result.testsRun))
    sys.stdout.flush()


def run_all(suite_dir, limit):
    """Runs every module of the suite, each in a child process forked from this one (which
    has loaded what every module shares), under LIMIT seconds; prints each child's PYV
    lines, its tracebacks when it had a failure or an error, and a PYV error line for a
    module whose process ended without its PYV-END line (a crash, the time limit)."""
    modules = sorted(f[:-3] for f in os.listdir(suite_dir) if f.startswith("test_") and f.endswith(".py"))
    started = time.monotonic()
    for module in modules:
        out, err = "/tmp/pyv-%s.out" % module, "/tmp/pyv-%s.err" % module
        t0 = time.monotonic()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                with open(out, "w") as o, open(err, "w") as e:
                    os.dup2(o.fileno(), 1)
                    os.dup2(e.fileno(), 2)
                    run_module(module)
                    status = 0
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        why = None
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.WIFSIGNALED(status):
                    why = "killed by signal %d" % os.WTERMSIG(status)
                else:
                    why = "exit status %d" % os.WEXITSTATUS(status)
                break
            if time.monotonic() - t0 > limit:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                why = "killed after %d s" % limit
                break
            time.sleep(0.05)
        text = open(out, errors="replace").read() if os.path.exists(out) else ""
        sys.stdout.write(text)
        finished = ("PYV-END %s " % module) in text
        if not finished:
            sys.stdout.write(
                "PYV error tests.%s | the module's process ended without finishing (%s)\n"
                % (module, why)
            )
        if not finished or "\nPYV error " in "\n" + text or "\nPYV fail " in "\n" + text:
            lines = open(err, errors="replace").read().splitlines() if os.path.exists(err) else []
            first = next((i for i, line in enumerate(lines) if line.startswith("=" * 20)), None)
            shown = lines[first:][-150:] if first is not None else []
            if not finished:
                shown += lines[-20:]
            for line in shown:
                sys.stdout.write("  %s: %s\n" % (module, line))
        sys.stdout.write("PYV-TIME %s %.2f\n" % (module, time.monotonic() - t0))
        sys.stdout.flush()
    sys.stdout.write("PYV-TIME all %.2f\n" % (time.monotonic() - started))
    sys.stdout.flush()


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--all":
        suite_dir, limit = sys.argv[2], int(sys.argv[3])
        load_suite(suite_dir, sys.argv[4:], whole=False)
        run_all(suite_dir, limit)
        return
    if len(sys.argv) < 3:
        sys.exit(
            "usage: run_module.py SUITE_DIR MODULE [run_tests.py options]\n"
            "       run_module.py --all SUITE_DIR SECONDS [run_tests.py options]\n"
            "       run_module.py --unpack DIR"
        )
    suite_dir, module = sys.argv[1], sys.argv[2]
    load_suite(suite_dir, sys.argv[3:], whole=False)
    run_module(module)


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
