"""A discovered :class:`Source` and what its path says about it: point, rank, pass, run, host, pid.

Rank comes only from explicit information: a ``rank<R>`` / ``rank_<R>`` path component or file
prefix, ``distributedInfo.rank`` inside a torch trace (read later, by the reader), ``point.json``
(its ``runs[].files`` map or a recorded ``RANK`` in ``env``). It is never inferred from file
order.

Path rules (``traces/discover.py`` lists the layouts):

* ``rank<R>`` / ``pass_N`` / ``pmc_N`` / ``run<k>`` directory components; an aorta sweep's
  ``<T>thread/nccl_<C>channels`` names the point ``ch<C>-th<T>``;
* a rocprofv3 file prefix ``<pid>_`` or our runner's ``rank<R>_<pid>_``; for CSV output (which
  records no host) the parent directory is the host, unless it is the directory the user gave
  or a known layout directory;
* the nearest ``point.json`` (up to six levels up) names the point and may map the file to a
  rank and run. ``point.json`` is read once per (real path, mtime) (an lru cache).
"""

from __future__ import annotations

import functools
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.csv_layouts import file_type
from pytest_gemmperf.traces.fileio import read_json_object

_CSV_ROLES = {"kernel_trace.csv": "kernel_trace", "counter_collection.csv": "counter_collection",
              "agent_info.csv": "agent_info"}
_RESULTS_SUFFIX = re.compile(r"_results\.(json|json\.gz|db)$")

_RANK_DIR = re.compile(r"^rank_?(\d+)$")
_RANK_PREFIX = re.compile(r"^rank_?(\d+)_(\d+)(?:_|$)")
_PID_PREFIX = re.compile(r"^(\d+)$")
_PASS_DIR = re.compile(r"^(?:pass|pmc)_(\d+)$")
_RUN_DIR = re.compile(r"^run(\d+)$")
_THREADS_DIR = re.compile(r"^(\d+)thread$")
_CHANNELS_DIR = re.compile(r"^nccl_(\d+)channels$")
#: directory names that are layout containers, never a host name
_CONTAINER_DIRS = frozenset({"rocprof_traces", "torch_profiler", "raw", "trace", "traces",
                             "logs", "out", "output", "rocprof", "results"})


@dataclass
class Source:
    """One unit to read: a file, or the CSV files of one rocprofv3 output prefix.

    ``kind`` names its entry in the source-kind registry (``traces/kinds.py``)."""

    kind: str
    files: list[Path]
    point: str | None = None
    rank: int | None = None
    pass_: int | None = None
    host: str | None = None
    pid: int | None = None
    run: int | None = None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "files": [str(f) for f in self.files], "point": self.point,
                "rank": self.rank, "pass": self.pass_, "host": self.host, "pid": self.pid,
                "run": self.run}


def csv_role(name: str) -> tuple[str, str] | None:
    """(role, prefix) for rocprofv3 CSV names, e.g. ``123_kernel_trace.csv`` -> (kernel_trace, 123)."""
    for suffix, role in _CSV_ROLES.items():
        if name == suffix:
            return role, ""
        if name.endswith("_" + suffix):
            return role, name[: -len(suffix) - 1]
    return None


def results_prefix(name: str) -> str:
    """The rocprofv3 prefix of a ``<prefix>_results.json[.gz]`` / ``_results.db`` name."""
    return _RESULTS_SUFFIX.sub("", name)


def with_attrs(src: Source, f: Path, root: Path | None, *, prefix: str | None = None,
               host_from_parent: bool = False) -> Source:
    """Attach point, rank, pass, run, host and pid from explicit path information.

    ``f`` is the source's first file, ``root`` the directory the user gave (None for a file
    given directly). ``prefix``: the file's rocprofv3 output prefix (``<pid>`` or
    ``rank<R>_<pid>``) where its kind names files so; ``host_from_parent``: the kind records no
    host, so the parent directory of a ``<pid>_`` file names it. Mutates and returns ``src``."""
    parts = Path(os.path.abspath(f)).parts  # the user's path: symlinked sweep dirs keep their names
    dirs = parts[:-1]
    for i, comp in enumerate(dirs):
        if m := _RANK_DIR.match(comp):
            src.rank = int(m[1])
        elif m := _PASS_DIR.match(comp):
            src.pass_ = int(m[1])
        elif m := _RUN_DIR.match(comp):
            src.run = int(m[1])
        elif (m := _THREADS_DIR.match(comp)) and i + 1 < len(dirs) and \
                (c := _CHANNELS_DIR.match(dirs[i + 1])):
            src.point = f"ch{c[1]}-th{m[1]}"
    if prefix is not None:
        if m := _RANK_PREFIX.match(prefix):
            src.rank, src.pid = int(m[1]), int(m[2])
        elif m := _PID_PREFIX.match(prefix):
            src.pid = int(m[1])
        if src.pid is not None and host_from_parent:
            src.host = _host_dir(f.parent, root)
    _apply_point_json(src, f)
    return src


def _host_dir(parent: Path, root: Path | None) -> str | None:
    """rocprofv3 >= 6.3 writes ``<host>/<pid>_*``; the parent is a host name unless it is the
    directory the user pointed at or a known layout directory."""
    if root is not None and _real(parent) == _real(root):
        return None
    name = parent.name
    if not name or name in _CONTAINER_DIRS or any(rx.match(name) for rx in (
            _RANK_DIR, _PASS_DIR, _RUN_DIR, _THREADS_DIR, _CHANNELS_DIR)):
        return None
    return name


def _real(p: Path) -> Path:
    """``os.path.realpath``: unlike ``Path.resolve`` on Python 3.11 it never raises on a
    symlink loop."""
    return Path(os.path.realpath(p))


def point_json(d: Path) -> dict | None:
    """``d/point.json`` as a dict, None when there is none; a point.json that is not a regular
    file or not a readable JSON object is a :class:`GemmperfInputError` naming it."""
    p = d / "point.json"
    try:
        st = p.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise GemmperfInputError(p, f"point.json is not a regular file ({file_type(st.st_mode)})")
    return _read_point_json(_real(p), st.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _read_point_json(p: Path, mtime_ns: int) -> dict:
    # mtime_ns is part of the cache key only: a rewritten point.json is read again
    return read_json_object(p)


def _apply_point_json(src: Source, f: Path) -> None:
    """Our results layout: the nearest ancestor with point.json names the point and may map the
    file to its rank (``runs[].files``) or record ``RANK`` in its env."""
    f = _real(f)
    for d in list(f.parents)[:6]:
        info = point_json(d)
        if info is None:
            continue
        src.point = str_or_none(info.get("point")) or d.name
        env = info.get("env") if isinstance(info.get("env"), dict) else {}
        for run in info.get("runs") or []:
            if not isinstance(run, dict):
                continue
            for rank, paths in (run.get("files") or {}).items():
                for rp in paths if isinstance(paths, list) else [paths]:
                    q = Path(rp)
                    q = _real(q if q.is_absolute() else d / q)
                    if q == f or q in f.parents:
                        if str(rank).isdigit():
                            src.rank = int(rank)
                        if isinstance(run.get("run"), int):
                            src.run = run["run"]
        if src.rank is None and str(env.get("RANK", "")).isdigit():
            src.rank = int(env["RANK"])
        return


def str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None
