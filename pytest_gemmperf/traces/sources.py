"""Find the profiler outputs under a path: a file or a directory -> :class:`Source` list + notes.

What is recognised is what the source-kind registry (``traces/kinds.py``) claims: rocprofv3
CSV files (grouped by directory and prefix), ``*_results.json[.gz]`` and ``*_results.db``,
PyTorch (Kineto) traces, and our ``dispatches.parquet`` tables (the layouts are listed in
``traces/discover.py``). JSON is classified by content (its first key), never only by name.
When one rocprofv3 prefix was written in several formats only one is read (the earliest
registered), with a note.

Hostile trees: the walk opens regular files only (a FIFO named like a trace would
block ``open`` forever), follows symlinks but enters each real directory once, and never skips
silently - a directory it cannot list, a symlink it cannot follow (loop, missing target), a
directory reached a second time, a FIFO/socket/device named like an output, an unreadable JSON
that no name marks as a trace: each becomes a line in ``notes`` and a typed record in
``skipped`` (``traces/skipped.py``). A path given directly that is none of a readable regular
file or directory is an error.

Unrelated trees: a directory is read only when a layout name shows within two levels
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
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run.results import COMPLETE, point_state
from pytest_gemmperf.traces import kinds
from pytest_gemmperf.traces.csv_layouts import file_type
from pytest_gemmperf.traces.dirscan import LAYOUT_FILES, scan_tree
from pytest_gemmperf.traces.dirscan import os_reason as _os_reason
from pytest_gemmperf.traces.provenance import Source, point_json
from pytest_gemmperf.traces.skipped import SkippedInput, SkipReason, skip


@dataclass
class Discovery:
    """What discovery found under one path: the sources to read, a note for everything it
    skipped (in walk order), and the skipped entries as typed records."""

    sources: list[Source]
    notes: list[str] = field(default_factory=list)
    skipped: list[SkippedInput] = field(default_factory=list)


def discover_with_notes(path: str | os.PathLike) -> tuple[list[Source], list[str]]:
    """Sources under ``path`` and notes naming everything that was skipped
    (:func:`discover_inputs`, without the typed records)."""
    found = discover_inputs(path)
    return found.sources, found.notes


def discover_inputs(path: str | os.PathLike) -> Discovery:
    """Sources under ``path``, with notes and records of everything that was skipped.

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
    if stat.S_ISREG(st.st_mode):
        src = _file_source(p)
        if src is None:
            raise GemmperfInputError(p, "not a recognised profiler output (expected rocprofv3 "
                                        "CSV/JSON/rocpd, a PyTorch profiler trace or dispatches.parquet)")
        return Discovery([src])
    if not stat.S_ISDIR(st.st_mode):
        raise GemmperfInputError(p, f"not a regular file or directory ({file_type(st.st_mode)}); "
                                    "refusing to read it")
    try:
        with os.scandir(p):
            pass
    except OSError as exc:
        raise GemmperfInputError(p, f"cannot list directory: {_os_reason(exc)}") from None
    found = Discovery([])
    found.sources = _walk(p, found)
    if not found.sources:
        notes = found.notes
        raise GemmperfInputError(p, f"no profiler output found under {p}"
                                 + (f" ({'; '.join(notes)})" if notes else ""))
    return found


def _file_source(p: Path) -> Source | None:
    kind = kinds.identify(p, given=True)
    if isinstance(kind, kinds.Unreadable):
        raise GemmperfInputError(p, f"cannot read file: {_os_reason(kind.error)}")
    return None if kind is None else kind.source([p], root=None)


def sniff_json(p: Path) -> str | None:
    """The name of the kind a (gzipped) JSON file is read as, or None (``kinds.identify`` on a
    file named directly).

    Content decides; when it is unrecognisable (corrupt, truncated, empty) a conventional name
    (``*_results.json``, ``*.pt.trace.json``) still selects a reader, which then reports the
    problem with the file name instead of the file being silently ignored.
    """
    kind = kinds.identify(p, given=True)
    if isinstance(kind, kinds.Unreadable):
        raise GemmperfInputError(p, f"cannot read file: {_os_reason(kind.error)}")
    return None if kind is None else kind.name


def _walk(root: Path, found: Discovery) -> list[Source]:
    notes, skipped = found.notes, found.skipped
    sources: list[Source] = []
    # (directory, group, prefix) -> kind name -> role -> file: one output, maybe in several formats
    outputs: dict[tuple[Path, str, str], dict[str, dict[str, Path]]] = {}
    unfinished: list[Path] = []
    for d, filenames, _subdirs in scan_tree(root, notes, skipped):
        if any(u == d or u in d.parents for u in unfinished):
            continue
        if d != root and "point.json" in filenames and _unfinished_point(d, found):
            unfinished.append(d)
            continue
        whole = kinds.directory_kind(filenames)
        if whole is not None:
            sources.append(whole.source([d / whole.stop_file], root))  # not descended below
            continue
        for name in filenames:
            if name in LAYOUT_FILES:
                continue
            f = d / name
            kind = kinds.identify(f, given=False)
            if isinstance(kind, kinds.Unreadable):
                skip(notes, skipped, f, SkipReason.UNREADABLE,
                     f"{f}: skipped, cannot read file: {_os_reason(kind.error)}")
                continue
            if kind is None:
                continue
            if kind.group is None:
                sources.append(kind.source([f], root))
                continue
            role, prefix = kind.classify(name)
            roles = outputs.setdefault((d, kind.group, prefix), {}).setdefault(kind.name, {})
            roles.setdefault(role, f)
    for (d, _group, prefix), by_kind in sorted(outputs.items(),
                                               key=lambda kv: (str(kv[0][0]), kv[0][2], kv[0][1])):
        chosen = next(k for k in kinds.KINDS if k.name in by_kind)
        others = [k for k in by_kind if k != chosen.name]
        label = str(d / (prefix or "<no prefix>"))
        if others:
            skip(notes, skipped, label, SkipReason.OTHER_FORMAT,
                 f"{label}: read as {chosen.name}; same prefix also written as "
                 f"{', '.join(others)} (not read twice)")
        roles = by_kind[chosen.name]
        if chosen.needs_one_of and not any(r in roles for r in chosen.needs_one_of):
            skip(notes, skipped, label, SkipReason.NO_GPU_WORK, f"{label}: {chosen.incomplete}; skipped")
            continue
        sources.append(chosen.source([roles[r] for r in chosen.roles if r in roles], root))
    return sources


def _unfinished_point(d: Path, found: Discovery) -> bool:
    """A results point whose status says it did not complete (its runs are partial), named in
    the notes. A point.json without a status (hand-made, or an older layout) is read as before."""
    info = point_json(d)
    if not (info or {}).get("status"):
        return False
    state = point_state(d, info or {})
    if state == COMPLETE:
        return False
    skip(found.notes, found.skipped, d, SkipReason.INTERRUPTED_POINT,
         f"{d}: point not read, it is {state} (status {str((info or {}).get('status'))!r})")
    return True
