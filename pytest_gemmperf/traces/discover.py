"""Find profiler outputs under a path and load them into one Trace.

Understood inputs:

* a single file: rocprofv3 ``*_kernel_trace.csv`` / ``*_counter_collection.csv`` /
  ``*_agent_info.csv``, ``*_results.json[.gz]``, ``*_results.db``, a PyTorch (Kineto) trace
  ``*.json[.gz]``, or one of our ``dispatches.parquet`` tables. JSON is classified by content
  (top-level keys), never only by name;
* a rocprofv3 output directory: ``<host>/<pid>_*`` (6.3+), ``<pid>_*`` (6.2), ``pass_N/`` and
  ``pmc_N/`` sub-directories, our runner's ``rank<R>_<pid>_*`` prefixes;
* an aorta sweep: ``<T>thread/nccl_<C>channels/{rocprof_traces,torch_profiler/rank<R>}`` ->
  point ``ch<C>-th<T>``;
* our results directory (docs/ARCHITECTURE.md "Results layout"): a point directory holding
  ``dispatches.parquet`` is read from its tables and its ``run<k>/raw`` files are not re-read.

Rank comes only from explicit information: a ``rank<R>`` / ``rank_<R>`` path component or file
prefix, ``distributedInfo.rank`` inside a torch trace, ``point.json`` (its ``runs[].files``
map or a recorded ``RANK`` in ``env``). It is never inferred from file order.

Hostile trees (issue 10): the walk opens regular files only (a FIFO named like a trace would
block ``open`` forever), follows symlinks but enters each real directory once, and never skips
silently - a directory it cannot list, a symlink it cannot follow (loop, missing target), a
directory reached a second time, a FIFO/socket/device named like an output, an unreadable JSON
that no name marks as a trace: each becomes a line in ``notes`` (``gemmperf analyze`` prints
them as ``note:`` lines). A path given directly that is none of a readable regular file or
directory is an error.

Unrelated trees (issue 12): a directory is read only when a layout name shows within two levels
of its top and the walk stays under an entry cap (``traces/dirscan.py`` states the rule); both
are decided from names alone, before any file is opened.
"""

from __future__ import annotations

import errno
import functools
import importlib
import json
import os
import re
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.csv_layouts import file_type
from pytest_gemmperf.traces.dirscan import STOP_FILE, scan_tree
from pytest_gemmperf.traces.dirscan import os_reason as _os_reason
from pytest_gemmperf.traces.schema import (AGENT_SCHEMA, COUNTER_SCHEMA, DISPATCH_SCHEMA,
                                           Trace, concat_tables, empty, finalize_agents,
                                           finalize_counters, finalize_dispatches, set_columns)

KINDS = ("rocprof-csv", "rocprof-json", "rocpd", "torch", "tables")
#: when one rocprofv3 prefix was written in several formats, read only the first of these
_FORMAT_PRIORITY = ("rocprof-json", "rocpd", "rocprof-csv")
_CSV_ROLES = {"kernel_trace.csv": "kernel_trace", "counter_collection.csv": "counter_collection",
              "agent_info.csv": "agent_info"}
_TABLE_FILES = ("dispatches.parquet", "counters.parquet", "agents.parquet")
_SNIFF_BYTES = 65536
_FIRST_KEY = re.compile(rb'\{\s*"([^"]*)"')
#: Kineto writes its metadata keys first; Chrome traces from other tools start with traceEvents
_KINETO_FIRST_KEYS = frozenset({b"schemaVersion", b"traceEvents", b"deviceProperties",
                                b"distributedInfo", b"displayTimeUnit"})

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
    """One unit to read: a file, or the CSV files of one rocprofv3 output prefix."""

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


# --------------------------------------------------------------------------- discovery

def discover(path: str | os.PathLike) -> list[Source]:
    """Sources under ``path`` (a file or a directory), with provenance attached."""
    return discover_with_notes(path)[0]


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
    if name in _TABLE_FILES:
        return _tables_source(p.parent)
    kind = _classify(p)
    if kind is None:
        return None
    return _with_attrs(Source(kind, [p]), p, root=None)


def _classify(p: Path) -> str | None:
    name = p.name
    if _csv_role(name) is not None:
        return "rocprof-csv"
    if name.endswith(".db"):
        return "rocpd"
    if name.endswith((".json", ".json.gz")):
        return sniff_json(p)
    return None


def _csv_role(name: str) -> tuple[str, str] | None:
    """(role, prefix) for rocprofv3 CSV names, e.g. ``123_kernel_trace.csv`` -> (kernel_trace, 123)."""
    for suffix, role in _CSV_ROLES.items():
        if name == suffix:
            return role, ""
        if name.endswith("_" + suffix):
            return role, name[: -len(suffix) - 1]
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
    for d, filenames, _subdirs in scan_tree(root, notes):
        if STOP_FILE in filenames:
            sources.append(_tables_source(d))  # scan_tree did not descend below it
            continue
        for name in filenames:
            f = d / name
            role = _csv_role(name)
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
                sources.append(_with_attrs(Source("torch", [f]), f, root))
            else:
                prefix = re.sub(r"_results\.(json|json\.gz|db)$", "", name)
                entry = prefixes.setdefault((d, prefix), {})
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
        sources.append(_with_attrs(Source(chosen, files), files[0], root))
    return sources


def _tables_source(d: Path) -> Source:
    files = [d / n for n in _TABLE_FILES if (d / n).is_file()]
    src = Source("tables", files)
    info = _point_json(d)
    if info is not None:
        src.point = _str_or_none(info.get("point")) or d.name
    return src


# --------------------------------------------------------------------------- provenance

def _with_attrs(src: Source, f: Path, root: Path | None) -> Source:
    """Attach point, rank, pass, run, host and pid from explicit path information."""
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
    if src.kind in ("rocprof-csv", "rocprof-json", "rocpd"):
        prefix = _rocprof_prefix(f.name)
        if m := _RANK_PREFIX.match(prefix):
            src.rank, src.pid = int(m[1]), int(m[2])
        elif m := _PID_PREFIX.match(prefix):
            src.pid = int(m[1])
        if src.pid is not None and src.kind == "rocprof-csv":  # JSON/rocpd record the host
            src.host = _host_dir(f.parent, root)
    _apply_point_json(src, f)
    return src


def _rocprof_prefix(name: str) -> str:
    role = _csv_role(name)
    if role is not None:
        return role[1]
    return re.sub(r"_results\.(json|json\.gz|db)$", "", name)


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


def _point_json(d: Path) -> dict | None:
    p = d / "point.json"
    try:
        st = p.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise GemmperfInputError(p, f"point.json is not a regular file ({file_type(st.st_mode)})")
    mtime = st.st_mtime_ns
    return _read_point_json(_real(p), mtime)


@functools.lru_cache(maxsize=256)
def _read_point_json(p: Path, mtime_ns: int) -> dict:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GemmperfInputError(p, f"cannot read point.json: {exc}") from None
    if not isinstance(data, dict):
        raise GemmperfInputError(p, "point.json must hold a JSON object")
    return data


def _apply_point_json(src: Source, f: Path) -> None:
    """Our results layout: the nearest ancestor with point.json names the point and may map the
    file to its rank (``runs[].files``) or record ``RANK`` in its env."""
    f = _real(f)
    for d in list(f.parents)[:6]:
        info = _point_json(d)
        if info is None:
            continue
        src.point = _str_or_none(info.get("point")) or d.name
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


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


# --------------------------------------------------------------------------- reading

def _as_path_list(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def read_source(src: Source, notes: list[str] | None = None) -> Trace | None:
    """Read one source; None (with a note) for a rocprofv3 process that recorded no GPU work."""
    notes = notes if notes is not None else []
    f = src.files[0]
    try:
        if src.kind == "torch":
            from pytest_gemmperf.traces import torch_trace
            try:
                return torch_trace.read_torch_trace(f)
            except GemmperfInputError as exc:
                if "no GPU kernel" not in exc.message:
                    raise
                # a CPU-only run (the CPU example of perf_tests): operators stand in for kernels
                notes.append(f"{f}: no GPU events; reading CPU operators as dispatches")
                return torch_trace.read_torch_cpu_trace(f)
        if src.kind == "rocprof-json":
            return _reader("rocprof_json").read_rocprof_json(f)
        if src.kind == "rocpd":
            return _reader("rocpd").read_rocpd_db(f)
        if src.kind == "rocprof-csv":
            return _read_csv_group(src)
        if src.kind == "tables":
            return _read_tables(src)
    except GemmperfInputError as exc:
        if src.kind != "torch" and src.kind != "tables" and _is_no_dispatch_error(exc):
            notes.append(f"{f}: {exc.message}; skipped (a process without GPU work, e.g. the launcher)")
            return None
        raise
    except OSError as exc:
        raise GemmperfInputError(f, f"cannot read file: {exc.strerror or exc}") from None
    raise GemmperfInputError(f, f"unknown source kind {src.kind!r}")


def _reader(name: str):
    # import_module consults sys.modules first, so tests can substitute a reader module
    return importlib.import_module(f"pytest_gemmperf.traces.{name}")


def _is_no_dispatch_error(exc: GemmperfInputError) -> bool:
    msg = exc.message.lower()
    return "no kernel dispatch" in msg or "no dispatches" in msg


def _read_csv_group(src: Source) -> Trace:
    rocprof_csv = _reader("rocprof_csv")
    roles = {role[0]: f for f in src.files if (role := _csv_role(f.name)) is not None}
    agents = None
    if "agent_info" in roles:
        agents = _agents_of(rocprof_csv.read_agent_info_csv(roles["agent_info"]), roles["agent_info"])
    meta: dict[str, Any] = {}
    if "kernel_trace" in roles:
        kt = rocprof_csv.read_kernel_trace_csv(roles["kernel_trace"], agents=agents)
        dispatches = (kt.dispatches if isinstance(kt, Trace)
                      else finalize_dispatches(kt, str(roles["kernel_trace"])))
        if isinstance(kt, Trace):
            meta.update(kt.meta)
    else:
        dispatches = finalize_dispatches(pd.DataFrame({"start_ns": [], "end_ns": [], "kernel": []}),
                                         None, allow_empty=True)
    counters = empty(COUNTER_SCHEMA)
    counter_notes: list[str] = []
    if "counter_collection" in roles:
        cc = rocprof_csv.read_counter_collection_csv(roles["counter_collection"], agents=agents)
        counter_notes = list(cc.attrs.get("notes", [])) if isinstance(cc, pd.DataFrame) else []
        counters = (cc.counters if isinstance(cc, Trace)
                    else finalize_counters(cc, str(roles["counter_collection"])))
        if isinstance(cc, Trace):
            meta.setdefault("counter_meta", cc.meta)
    agents_df = agents if agents is not None else empty(AGENT_SCHEMA)
    # reader notes (e.g. columns a newer rocprofv3 added that were ignored), once each
    notes = [n for part in (agents_df.attrs.get("notes", []), meta.get("notes", []),
                            counter_notes) for n in part]
    if notes:
        meta["notes"] = list(dict.fromkeys(notes))
    return Trace(dispatches=dispatches, counters=counters, agents=agents_df,
                 files=[str(f) for f in src.files], meta=meta)


def _agents_of(result: Any, path: Path) -> pd.DataFrame:
    if isinstance(result, Trace):
        return result.agents
    if isinstance(result, pd.DataFrame):
        return result
    raise GemmperfInputError(path, "agent_info reader returned an unexpected object")


def _read_tables(src: Source) -> Trace:
    by_name = {f.name: f for f in src.files}

    def read(name: str) -> pd.DataFrame | None:
        f = by_name.get(name)
        if f is None:
            return None
        try:
            return pd.read_parquet(f)
        except (OSError, ValueError) as exc:  # pyarrow errors derive from these
            raise GemmperfInputError(f, f"cannot read parquet table: {exc}") from None

    d = read("dispatches.parquet")
    path = str(by_name.get("dispatches.parquet", src.files[0]))
    dispatches = finalize_dispatches(d, path)
    c = read("counters.parquet")
    a = read("agents.parquet")
    counters = (finalize_counters(c, str(by_name["counters.parquet"])) if c is not None
                else empty(COUNTER_SCHEMA))
    agents = finalize_agents(a, str(by_name["agents.parquet"])) if a is not None else empty(AGENT_SCHEMA)
    return Trace(dispatches=dispatches, counters=counters, agents=agents,
                 files=[str(f) for f in src.files], meta={"format": "tables"})


def _attach(df: pd.DataFrame, src: Source, point: str | None, notes: list[str]) -> pd.DataFrame:
    if len(df) == 0:
        return df
    values: dict[str, Any] = {}
    if point is not None:
        values["point"] = point
    if src.kind != "tables":  # our tables already carry their provenance
        if point is None and src.point is not None:
            values["point"] = src.point
        if src.run is not None:
            values["run"] = src.run
        if src.pass_ is not None:
            values["pass"] = src.pass_
        for col, val in (("rank", src.rank), ("host", src.host), ("pid", src.pid)):
            if val is None or col not in df.columns:
                continue
            have = df[col].dropna()
            if have.empty:
                values[col] = val
            elif col == "rank" and (have != val).any():
                notes.append(f"{src.files[0]}: rank {val} from the path differs from the rank "
                             f"recorded in the file ({sorted(set(have.astype(int)))}); kept the file's")
    elif point is None and src.point is not None and df["point"].isna().all():
        values["point"] = src.point
    return set_columns(df, **values) if values else df


def concat_with_extras(frames: list[pd.DataFrame], schema: dict[str, str]) -> pd.DataFrame:
    """concat_tables with the canonical columns first and reader-specific extras (e.g. torch
    ``op_name``) after them, even when only some frames have them."""
    frames = [f for f in frames if f is not None and len(f.columns)]
    out = concat_tables(frames, schema)
    return out[[c for c in schema if c in out.columns] + [c for c in out.columns if c not in schema]]


def _str_categories(df: pd.DataFrame) -> pd.DataFrame:
    """Give every categorical column string-typed categories: union_categoricals refuses to mix
    an all-null column's object categories with the str categories of a filled one."""
    fix = {}
    for c in df.columns:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype) and s.cat.categories.dtype != "str":
            cats = s.cat.categories
            if len(cats) == 0 or all(isinstance(x, str) for x in cats):
                fix[c] = pd.Series(pd.Categorical.from_codes(
                    s.cat.codes.to_numpy(), categories=pd.Index(list(cats), dtype="str")), index=s.index)
    if not fix:
        return df
    df = df.copy(deep=False)
    for c, v in fix.items():
        df[c] = v
    return df


def discover_all(paths) -> tuple[list[Path], list[Source], list[Source], list[str]]:
    """(roots, every source found, the sources to read - each set of files once -, notes)."""
    roots = _as_path_list(paths)
    if not roots:
        raise GemmperfInputError(None, "no input paths given")
    sources: list[Source] = []
    notes: list[str] = []
    for r in roots:
        s, n = discover_with_notes(r)
        sources += s
        notes += n
    unique: list[Source] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for src in sources:
        key = (src.kind, tuple(sorted(str(f) for f in src.files)))
        if key in seen:  # e.g. dispatches/counters/agents.parquet of one point named separately
            continue
        seen.add(key)
        unique.append(src)
    return roots, sources, unique, notes


def read_attached(src: Source, point: str | None) -> tuple[Trace | None, list[str], list[str]]:
    """One source read with its provenance attached: (trace or None, the reader's notes, the
    notes of attaching path information). Picklable, so a worker process can run it
    (``traces/parallel.py``)."""
    notes: list[str] = []
    t = read_source(src, notes)
    if t is None:
        return None, notes, []
    attach: list[str] = []
    t.dispatches = _attach(t.dispatches, src, point, attach)
    t.counters = _attach(t.counters, src, point, attach)
    t.agents = _attach_agents(t.agents, src)
    t.meta = {**t.meta, "source": src.describe()}
    return t, notes, attach


def merge_notes(notes: list[str], t: Trace | None, read_notes: list[str], attach_notes: list[str]) -> None:
    """Add one source's notes to ``notes`` in the order the serial reader wrote them."""
    notes += read_notes
    if t is not None:
        notes.extend(n for n in t.meta.get("notes", []) if n not in notes)
        notes += attach_notes


def _load_all(paths, point: str | None, jobs: int | None = 1
              ) -> tuple[list[Path], list[Source], list[Trace], list[str]]:
    from pytest_gemmperf.traces.parallel import map_ordered, pool_jobs

    roots, sources, unique, notes = discover_all(paths)
    n_jobs = pool_jobs(jobs, [f for s in unique for f in s.files])
    traces: list[Trace] = []
    for t, read_notes, attach_notes in map_ordered(functools.partial(read_attached, point=point),
                                                   unique, n_jobs):
        merge_notes(notes, t, read_notes, attach_notes)
        if t is not None:
            traces.append(t)
    return roots, sources, traces, notes


def _attach_agents(df: pd.DataFrame, src: Source) -> pd.DataFrame:
    values = {col: val for col, val in (("host", src.host), ("pid", src.pid))
              if val is not None and len(df) and df[col].isna().all()}
    return set_columns(df, **values) if values else df


def load(paths: str | os.PathLike | Iterable[str | os.PathLike], *, point: str | None = None,
         jobs: int | None = 1) -> Trace:
    """Discover and read everything under ``paths`` into one Trace.

    ``point`` overrides the point of every row (replay of a directory onto a declared point).
    ``jobs``: worker processes reading sources at once (None or 0: every usable core; 1: in
    this process); the Trace is the same whatever ``jobs`` is (``traces/parallel.py``).
    ``meta``: ``sources`` (what was read, with provenance), ``notes`` (what was skipped and why),
    ``files`` (per-file reader meta, e.g. torch ``cpu_ops``/``steps``).
    """
    roots, sources, traces, notes = _load_all(paths, point, jobs)
    if not any(len(t.dispatches) for t in traces):
        label = ", ".join(str(r) for r in roots)
        raise GemmperfInputError(roots[0], f"no kernel dispatches found under {label}"
                                 + (f" ({'; '.join(notes)})" if notes else ""))
    return _combine(traces, sources, notes)


def load_counters(paths: str | os.PathLike | Iterable[str | os.PathLike], *,
                  point: str | None = None) -> pd.DataFrame:
    """Counter records of every source under ``paths`` (all ``pass_N``/``pmc_N`` directories
    together; the ``pass`` column tells them apart)."""
    roots, sources, traces, notes = _load_all(paths, point)
    counters = concat_with_extras([t.counters for t in traces if len(t.counters)], COUNTER_SCHEMA)
    if len(counters) == 0:
        raise GemmperfInputError(roots[0], f"no counter records found under "
                                           f"{', '.join(str(r) for r in roots)}")
    return counters


def _combine(traces: list[Trace], sources: list[Source], notes: list[str]) -> Trace:
    dispatches = concat_with_extras([t.dispatches for t in traces if len(t.dispatches)],
                                    DISPATCH_SCHEMA)
    counters = concat_with_extras([t.counters for t in traces if len(t.counters)], COUNTER_SCHEMA)
    agents = concat_with_extras([t.agents for t in traces if len(t.agents)], AGENT_SCHEMA)
    files: list[str] = []
    per_file: dict[str, dict] = {}
    for t in traces:
        files += [str(f) for f in t.files]
        per_file[str(t.files[0]) if t.files else str(len(per_file))] = t.meta
    meta = {"sources": [s.describe() for s in sources], "notes": notes, "files": per_file}
    return Trace(dispatches=dispatches, counters=counters, agents=agents, files=files, meta=meta)
