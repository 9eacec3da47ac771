"""Find the profiler outputs under a path: a file or a directory -> :class:`Source` list + notes.

What is recognised (the layouts are listed in ``traces/discover.py``): rocprofv3 CSV files
(grouped by directory and prefix), ``*_results.json[.gz]`` and ``*_results.db``, PyTorch
(Kineto) traces, and our ``dispatches.parquet`` tables. JSON is classified by content (its
first key, :func:`sniff_json`), never only by name. When one rocprofv3 prefix was written in
several formats only one is read (:data:`_FORMAT_PRIORITY`), with a note.

Hostile trees (issue 10): the walk opens regular files only (a FIFO named like a trace would
block ``open`` forever), follows symlinks but enters each real directory once, and never skips
silently - a directory it cannot list, a symlink it cannot follow (loop, missing target), a
directory reached a second time, a FIFO/socket/device named like an output, an unreadable JSON
that no name marks as a trace: each becomes a line in ``notes``. A path given directly that is
none of a readable regular file or directory is an error.

Unrelated trees (issue 12): a directory is read only when a layout name shows within two levels
of its top and the walk stays under an entry cap (``traces/dirscan.py`` states the rule); both
are decided from names alone, before any file is opened.

Provenance (point, rank, ...) is attached as each Source is made (``traces/provenance.py``).

Our results points are read only when complete (``run/results.py``): below the directory given,
a point whose ``point.json`` says it was interrupted or failed is a note, and none of its
partial runs is read.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import zlib
from pathlib import Path
from typing import Any

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run.results import COMPLETE, point_state
from pytest_gemmperf.traces.csv_layouts import file_type
from pytest_gemmperf.traces.dirscan import STOP_FILE, scan_tree
from pytest_gemmperf.traces.dirscan import os_reason as _os_reason
from pytest_gemmperf.traces.provenance import (Source, csv_role, point_json, results_prefix,
                                               str_or_none, with_attrs)

#: when one rocprofv3 prefix was written in several formats, read only the first of these
_FORMAT_PRIORITY = ("rocprof-json", "rocpd", "rocprof-csv")
TABLE_FILES = ("dispatches.parquet", "counters.parquet", "agents.parquet")
_SNIFF_BYTES = 65536
_FIRST_KEY = re.compile(rb'\{\s*"([^"]*)"')
#: Kineto writes its metadata keys first; Chrome traces from other tools start with traceEvents
_KINETO_FIRST_KEYS = frozenset({b"schemaVersion", b"traceEvents", b"deviceProperties",
                                b"distributedInfo", b"displayTimeUnit"})


def discover_with_notes(path: str | os.PathLike) -> tuple[list[Source], list[str]]:
    """Sources under ``path`` and notes naming everything that was skipped.

    Only regular files are ever opened: a FIFO, socket or device named like a trace is skipped
    with a note (opening a FIFO blocks forever). Symlinks are followed; a symlink loop, a
    dangling link or a directory reached twice is a note, as is a directory that cannot be
    listed. ``path`` itself must be a readable regular file or directory.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not os.path.islink(p):
            raise GemmperfInputError(p, "no such file or directory") from None
        raise GemmperfInputError(p, f"cannot read: {_os_reason(exc)}") from None
    notes: list[str] = []
    if stat.S_ISREG(st.st_mode):
        src = _file_source(p)
        if src is None:
            raise GemmperfInputError(p, "not a recognised profiler output (expected rocprofv3 "
                                        "CSV/JSON/rocpd, a PyTorch profiler trace or dispatches.parquet)")
        return [src], notes
    if not stat.S_ISDIR(st.st_mode):
        raise GemmperfInputError(p, f"not a regular file or directory ({file_type(st.st_mode)}); "
                                    "refusing to read it")
    try:
        with os.scandir(p):
            pass
    except OSError as exc:
        raise GemmperfInputError(p, f"cannot list directory: {_os_reason(exc)}") from None
    sources = _walk(p, notes)
    if not sources:
        raise GemmperfInputError(p, f"no profiler output found under {p}"
                                 + (f" ({'; '.join(notes)})" if notes else ""))
    return sources, notes


def _file_source(p: Path) -> Source | None:
    name = p.name
    if name in TABLE_FILES:
        return _tables_source(p.parent)
    kind = _classify(p)
    if kind is None:
        return None
    return with_attrs(Source(kind, [p]), p, root=None)


def _classify(p: Path) -> str | None:
    name = p.name
    if csv_role(name) is not None:
        return "rocprof-csv"
    if name.endswith(".db"):
        return "rocpd"
    if name.endswith((".json", ".json.gz")):
        return sniff_json(p)
    return None


def sniff_json(p: Path) -> str | None:
    """``"torch"``, ``"rocprof-json"`` or None, from the first bytes of a (gzipped) JSON file.

    Content decides; when it is unrecognisable (corrupt, truncated, empty) a conventional name
    (``*_results.json``, ``*.pt.trace.json``) still selects a reader, which then reports the
    problem with the file name instead of the file being silently ignored.
    """
    by_name = ("rocprof-json" if p.name.endswith(("_results.json", "_results.json.gz")) else
               "torch" if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz")) else None)
    try:
        with open(p, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError as exc:
        if by_name is not None:
            return by_name  # its reader reports the error with the file name
        raise GemmperfInputError(p, f"cannot read file: {_os_reason(exc)}") from None
    if head[:2] == b"\x1f\x8b":
        head = _gunzip_prefix(head)
    s = head.lstrip()
    if s.startswith(b"{"):
        m = _FIRST_KEY.match(s)
        first = m[1] if m else b""
        if first == b"rocprofiler-sdk-tool":
            return "rocprof-json"
        if first in _KINETO_FIRST_KEYS or (b'"traceEvents"' in head and b'"ph"' in head):
            return "torch"
    elif s.startswith(b"[") and b'"ph"' in head and b'"ts"' in head:
        return "torch"  # bare Chrome-trace array
    return by_name


def _gunzip_prefix(data: bytes) -> bytes:
    """The first decompressed bytes of a gzip stream of which only a prefix was read."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        return d.decompress(data, _SNIFF_BYTES)
    except zlib.error:
        return b""


def _walk(root: Path, notes: list[str]) -> list[Source]:
    sources: list[Source] = []
    prefixes: dict[tuple[Path, str], dict[str, Any]] = {}
    unfinished: list[Path] = []
    for d, filenames, _subdirs in scan_tree(root, notes):
        if any(u == d or u in d.parents for u in unfinished):
            continue
        if d != root and "point.json" in filenames and _unfinished_point(d, notes):
            unfinished.append(d)
            continue
        if STOP_FILE in filenames:
            sources.append(_tables_source(d))  # scan_tree did not descend below it
            continue
        for name in filenames:
            f = d / name
            role = csv_role(name)
            if role is not None:
                entry = prefixes.setdefault((d, role[1]), {})
                entry.setdefault("rocprof-csv", {})[role[0]] = f
                continue
            kind = None
            if name.endswith("_results.db"):
                kind = "rocpd"
            elif name.endswith((".json", ".json.gz")) and name not in ("point.json", "run.json"):
                try:
                    kind = sniff_json(f)
                except GemmperfInputError as exc:  # unreadable, and not named like a trace
                    notes.append(f"{f}: skipped, {exc.message}")
                    continue
            if kind is None:
                continue
            if kind == "torch":
                sources.append(with_attrs(Source("torch", [f]), f, root))
            else:
                entry = prefixes.setdefault((d, results_prefix(name)), {})
                entry.setdefault(kind, f)
    for (d, prefix), kinds in sorted(prefixes.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        chosen = next(k for k in _FORMAT_PRIORITY if k in kinds)
        skipped = [k for k in kinds if k != chosen]
        label = str(d / (prefix or "<no prefix>"))
        if skipped:
            notes.append(f"{label}: read as {chosen}; same prefix also written as "
                         f"{', '.join(skipped)} (not read twice)")
        if chosen == "rocprof-csv":
            roles = kinds[chosen]
            files = [roles[r] for r in ("kernel_trace", "counter_collection", "agent_info") if r in roles]
            if "kernel_trace" not in roles and "counter_collection" not in roles:
                notes.append(f"{label}: only agent_info.csv, no kernel trace or counters "
                             "(a process without GPU work, e.g. the launcher); skipped")
                continue
        else:
            files = [kinds[chosen]]
        sources.append(with_attrs(Source(chosen, files), files[0], root))
    return sources


def _unfinished_point(d: Path, notes: list[str]) -> bool:
    """A results point whose status says it did not complete (its runs are partial), named in
    ``notes``. A point.json without a status (hand-made, or an older layout) is read as before."""
    info = point_json(d)
    if not (info or {}).get("status"):
        return False
    state = point_state(d, info or {})
    if state == COMPLETE:
        return False
    notes.append(f"{d}: point not read, it is {state} (status {str((info or {}).get('status'))!r})")
    return True


def _tables_source(d: Path) -> Source:
    files = [d / n for n in TABLE_FILES if (d / n).is_file()]
    src = Source("tables", files)
    info = point_json(d)
    if info is not None:
        src.point = str_or_none(info.get("point")) or d.name
    return src
