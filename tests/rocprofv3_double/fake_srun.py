"""Minimal srun stand-in: ``fake_srun.py N cmd...`` runs N copies of cmd with SLURM_PROCID /
SLURM_NTASKS set (as srun does), waits for all, and returns the first non-zero status."""

from __future__ import annotations

import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    n, cmd = int(argv[0]), argv[1:]
    procs = [subprocess.Popen(cmd, env=dict(os.environ, SLURM_PROCID=str(i), SLURM_NTASKS=str(n)))
             for i in range(n)]
    codes = [p.wait() for p in procs]
    return next((c if c > 0 else 1 for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
