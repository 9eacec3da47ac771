"""``.gemmperf/``: the one directory of a project where gemmperf writes what nobody placed.

Every default output lands below it: the plugin's results (``.gemmperf/results/``) and run
history (``.gemmperf/history/``), and the commands run without ``--out`` (``gemmperf analyze``,
``compare``, ``history check``: ``.gemmperf/<command>/<time>-<random>/``, a fresh directory per
call, so one call never overwrites another's files). Nothing the tool writes by default is
mixed with the project's own files.

When gemmperf creates ``.gemmperf/`` it writes ``.gemmperf/.gitignore`` containing ``*``: git
then ignores everything in it (that file included) without the project editing its own
``.gitignore``. A ``.gemmperf/`` that already exists is the user's to arrange: nothing is
added to it, and a ``.gitignore`` in it is never replaced.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_gemmperf.paths import contained
from pytest_gemmperf.run.results import timestamped_dir

TOOL_DIR = ".gemmperf"
GITIGNORE = ".gitignore"
#: what the ``.gitignore`` holds: every entry, itself included
IGNORE_ALL = "*\n"


def make_tool_dir(path: str | os.PathLike) -> Path | None:
    """Create the ``.gemmperf`` directory ``path`` lies in (``path`` itself or an ancestor)
    with its ``.gitignore`` when that directory does not exist yet; returns it when this call
    created it, else None (no ``.gemmperf`` on the path, or it existed)."""
    p = Path(os.path.expanduser(path)).absolute()
    tool = next((q for q in (p, *p.parents) if q.name == TOOL_DIR), None)
    if tool is None or tool.exists() or tool.is_symlink():
        return None
    try:
        tool.mkdir(parents=True)
    except FileExistsError:  # another session made it first: theirs to arrange
        return None
    try:
        with open(tool / GITIGNORE, "x", encoding="utf-8") as fh:
            fh.write(IGNORE_ALL)
    except FileExistsError:
        pass
    return tool


def remove_unused_tool_dir(tool: Path | None) -> None:
    """Undo :func:`make_tool_dir` when nothing else was written: ``tool`` holding only the
    ``.gitignore`` written there is removed, so a session that produced nothing leaves nothing."""
    if tool is None:
        return
    ignore = tool / GITIGNORE
    try:
        if [e.name for e in os.scandir(tool)] != [GITIGNORE] or ignore.is_symlink():
            return
        if ignore.read_text(encoding="utf-8") != IGNORE_ALL:
            return
        ignore.unlink()
        tool.rmdir()
    except OSError:
        pass


def default_output_dir(command: str, root: str | os.PathLike = ".") -> Path:
    """A new ``root/.gemmperf/<command>/<YYYY-mm-ddTHH-MM-SS>-<random>/``: the output
    directory of a command run without ``--out`` (``.gemmperf/`` made, with its ``.gitignore``,
    when missing). Raises ``OSError`` when it cannot be made."""
    tool = Path(root) / TOOL_DIR
    make_tool_dir(tool)
    return timestamped_dir(contained(tool, command))


__all__ = ["GITIGNORE", "IGNORE_ALL", "TOOL_DIR", "default_output_dir", "make_tool_dir",
           "remove_unused_tool_dir"]
