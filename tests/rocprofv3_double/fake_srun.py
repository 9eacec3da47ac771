"""Launcher stand-in: ``fake_srun.py [--style srun|openmpi|mpich] N cmd...`` runs N copies of cmd
with the rank variables that launcher exports (srun: SLURM_PROCID/SLURM_NTASKS; Open MPI's
mpirun: OMPI_COMM_WORLD_RANK/SIZE; MPICH/Hydra's mpirun: PMI_RANK/PMI_SIZE and
MPI_LOCALRANKID), waits for all, and returns the first non-zero status."""

from __future__ import annotations

import os
import subprocess
import sys

STYLES = {
    "srun": lambda r, n: {"SLURM_PROCID": str(r), "SLURM_NTASKS": str(n)},
    "openmpi": lambda r, n: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(n)},
    "mpich": lambda r, n: {"PMI_RANK": str(r), "PMI_SIZE": str(n), "MPI_LOCALRANKID": str(r)},
}


def main(argv: list[str]) -> int:
    style = "srun"
    if argv[0] == "--style":
        style, argv = argv[1], argv[2:]
    n, cmd = int(argv[0]), argv[1:]
    procs = [subprocess.Popen(cmd, env=dict(os.environ, **STYLES[style](i, n))) for i in range(n)]
    codes = [p.wait() for p in procs]
    return next((c if c > 0 else 1 for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
