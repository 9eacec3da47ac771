"""The suite stops on the first Ctrl-C or SIGTERM, also while a test runs ``gemmperf`` in-process
(cli.main turns Ctrl-C into exit status 130, which would only fail that one test): a small inner
session with this directory's conftest.py, signalled while its first test is inside cli.main,
ends within 10 s (on a quiet machine) with pytest's interrupted status (2) and never starts its
second test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

TESTS = REPO / "tests"

pytestmark = pytest.mark.slow  # a whole inner pytest session per signal

INNER = '''
import os, time
from pathlib import Path

from pytest_gemmperf.cli import main
from pytest_gemmperf.commands import analyze_impl


def test_a_command_is_interrupted(monkeypatch, tmp_path):
    def slow(args, *, full, **options):
        Path(os.environ["INNER_READY"]).write_text("ready")
        time.sleep(60)
        raise AssertionError("not interrupted")

    monkeypatch.setattr(analyze_impl, "analyze", slow)
    assert main(["analyze", str(tmp_path), "--out", str(tmp_path / "o")]) == 0


def test_the_next_one_never_starts():
    Path(os.environ["INNER_SECOND"]).write_text("ran")
'''


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_ends_the_session_as_interrupted(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    ready, second = tmp_path / "ready", tmp_path / "second"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    # tests/ first: `-p conftest` is tests/conftest.py, not the repository root's
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]), INNER_READY=str(ready),
               INNER_SECOND=str(second), PY_COLORS="0")
    # -p conftest: this suite's conftest.py (the tests' signal handling) as the inner session's plugin
    cmd = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-p", "no:randomly",
           "-q", "-o", "addopts=", f"--rootdir={tmp_path}", str(tmp_path / "test_inner.py")]
    # a shell's background job starts with SIGINT ignored; the inner session must see it
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240  # the inner session's start-up on a loaded machine
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the inner test never reached cli.main"
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    # 10 s on a quiet machine; on a shared runner the inner session's teardown gets only its share
    # of the cores, so the budget grows with the load (per core) measured when it ended
    busy = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    assert took < 10 * busy, (took, busy, out)
    assert not second.exists(), out  # the session did not go on
    assert "KeyboardInterrupt" in out and "test_a_command_is_interrupted" in out, out
