"""Run a command with ``torch.distributed``'s variables derived from SLURM's (one srun task).

``srun --nodes N --ntasks-per-node P cmd`` starts every rank itself, but sets only SLURM's
variables; a PyTorch workload (``init_process_group("env://")``) needs ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. The torch backend
therefore runs ``srun ... python -m pytest_gemmperf.run.slurm_env -- cmd`` (see
:func:`wrap_command`); this module maps the variables and ``exec``s ``cmd`` (same process, so a
profiler sees the workload itself):

==================  ===========================================================
``RANK``            ``SLURM_PROCID``
``WORLD_SIZE``      ``SLURM_STEP_NUM_TASKS`` (else ``SLURM_NTASKS``)
``LOCAL_RANK``      ``SLURM_LOCALID``
``LOCAL_WORLD_SIZE`` tasks on this node: ``SLURM_STEP_TASKS_PER_NODE`` entry of ``SLURM_NODEID``
``GROUP_RANK``      ``SLURM_NODEID`` (the node index, as torchrun names it)
``MASTER_ADDR``     first host of ``SLURM_STEP_NODELIST`` (else ``SLURM_JOB_NODELIST``): rank 0's node
``MASTER_PORT``     ``29500`` unless set
==================  ===========================================================

Variables already set win (a user's ``MASTER_ADDR`` is kept). Rank and host of each trace then
come from the workload's own trace metadata, as for every backend.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from typing import Mapping, Sequence

DEFAULT_MASTER_PORT = "29500"

_RANGE = re.compile(r"^([^\[,]*)\[([^\]]+)\](.*)$")
_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def first_host(nodelist: str) -> str:
    """First host of a SLURM host list: ``gpu[07-09,12],cpu1`` -> ``gpu07``."""
    head = _split_top(nodelist.strip())[0] if nodelist.strip() else ""
    m = _RANGE.match(head)
    if not m:
        return head
    prefix, ranges, suffix = m.groups()
    first = ranges.split(",")[0].split("-")[0]
    return f"{prefix}{first}{suffix}"


def tasks_per_node(spec: str) -> list[int]:
    """``SLURM_STEP_TASKS_PER_NODE`` (``2(x3),1``) expanded to one count per node."""
    out: list[int] = []
    for part in filter(None, spec.split(",")):
        m = _TASKS.match(part.strip())
        if not m:
            raise ValueError(f"tasks per node {spec!r}: cannot read {part!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def torch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add (see the module docstring); empty outside a SLURM task."""
    if "SLURM_PROCID" not in environ:
        return {}
    env = {"RANK": environ["SLURM_PROCID"]}
    world = environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS")
    if world:
        env["WORLD_SIZE"] = world
    if "SLURM_LOCALID" in environ:
        env["LOCAL_RANK"] = environ["SLURM_LOCALID"]
    node = environ.get("SLURM_NODEID")
    if node is not None:
        env["GROUP_RANK"] = node
        spec = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
        try:
            counts = tasks_per_node(spec) if spec else []
        except ValueError:
            counts = []
        if counts and int(node) < len(counts):
            env["LOCAL_WORLD_SIZE"] = str(counts[int(node)])
    nodes = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    if nodes:
        env["MASTER_ADDR"] = first_host(nodes)
    env["MASTER_PORT"] = DEFAULT_MASTER_PORT
    return {k: v for k, v in env.items() if k not in environ}


def wrap_command(command: str | Sequence[str]) -> list[str]:
    """``command`` (argv or a shell-style string) run through this module: the srun task maps
    SLURM's variables first."""
    argv = shlex.split(command) if isinstance(command, str) else [os.fspath(c) if isinstance(c, os.PathLike)
                                                                 else str(c) for c in command]
    return [sys.executable, "-m", "pytest_gemmperf.run.slurm_env", "--", *argv]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m pytest_gemmperf.run.slurm_env -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env.update(torch_env(env))
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        print(f"gemmperf slurm_env: cannot run {args[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - exec does not return


def _split_top(text: str) -> list[str]:
    """Split a host list at the commas outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


if __name__ == "__main__":
    sys.exit(main())
