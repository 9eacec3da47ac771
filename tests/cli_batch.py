"""Several ``gemmperf`` command lines run one after another in one fresh interpreter, each
with its own exit status and its own stderr: the file descriptor itself is redirected to a
file per command, so whatever reaches it (the error line, a warning, a traceback, output
of C code) is that command's. For tests of what a user's terminal shows for each of many
hostile inputs: one interpreter start instead of one per input, and a crash or a hang still
fails them (the batch dies or times out), never the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_RUNNER = """
import json, os, sys
from pytest_gemmperf.cli import main

status = {}
for name, argv in json.loads(sys.argv[1]).items():
    sys.stderr.flush()
    saved = os.dup(2)
    err = os.open(os.path.join(sys.argv[2], name + ".stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 2)
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(err)
    status[name] = rc
print(json.dumps(status))
"""


@dataclass(frozen=True)
class CliRun:
    """One command of a batch: its exit status and what it wrote to stderr."""

    returncode: int
    stderr: str


def run_cli_batch(commands: dict[str, list[str]], out: Path, *, cwd: Path, env: dict[str, str],
                  timeout_s: float = 300) -> dict[str, CliRun]:
    """Run each of ``commands`` (name -> gemmperf arguments; a name is a file name) in one
    ``python`` with ``env``, in order; stderr files go to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**env, "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(commands), str(out)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise AssertionError(f"the batch of gemmperf commands died ({proc.returncode}): {proc.stderr[-2000:]}")
    status = json.loads(proc.stdout.splitlines()[-1])
    return {name: CliRun(status[name], (out / f"{name}.stderr").read_text(errors="replace")) for name in commands}
