"""The source-kind registry: every input format gemmperf reads, registered once.

A *source* (:class:`~pytest_gemmperf.traces.provenance.Source`) is one unit to read: a file,
the CSV files of one rocprofv3 process, or a results point's tables. Its *kind* is one
:class:`SourceKind` of :data:`KINDS`, which holds everything format-specific that the other
modules need:

* ``sniff``: does this file look like me? Discovery (``traces/sources.py``) asks every kind
  and takes the strongest claim (:class:`Match`), the earlier kind on a tie. JSON is decided by
  content (the first bytes), a conventional name only when no kind recognises the content (the
  reader then reports what is wrong with the file, naming it);
* ``classify``: what the file is within its output (the role: ``kernel_trace``,
  ``counter_collection``, ``agent_info`` ...) and the output prefix that groups files;
* ``read``: one Source -> Trace (``traces/source_reader.py`` attaches the path provenance);
* how its path names provenance, whether an empty file means "a process without GPU work",
  whether the gate may reduce its sources one by one in worker processes, and the names that
  mark it in a directory scan (``traces/dirscan.py``) and in a replayed point
  (``run/replay.py``).

Order matters twice: on equal claims the earlier kind wins (a rocprofv3 JSON and a Kineto
trace are both ``.json``), and kinds of one ``group`` (the rocprofv3 formats) written under the
same directory and prefix are one output, read in the earliest registered format only.

Readers are imported when a source is read, through ``importlib.import_module`` (which
consults ``sys.modules`` first, so tests can substitute a reader module). Sources travel to
worker processes by kind name and the workers import this module afresh, so a kind must be in
:data:`KINDS` as written here to be read with ``jobs > 1`` (one added at run time, as a test
does, is read in-process only). Adding a format: docs/ARCHITECTURE.md "Adding a trace format".
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import re
import zlib
from enum import IntEnum
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.provenance import (Source, csv_role, point_json, results_prefix,
                                               str_or_none, with_attrs)
from pytest_gemmperf.traces.schema import (AGENT_SCHEMA, COUNTER_SCHEMA, OLD_SOURCE_NAMES, NoGpuEvents,
                                           Trace, empty, finalize_agents, finalize_counters,
                                           finalize_dispatches)


class Match(IntEnum):
    """How strongly a kind claims a file."""

    #: only a conventional name (``*_results.json``): taken when no kind recognises the content
    WEAK = 1
    #: the content was recognised, or the name is one only this kind uses (``*_kernel_trace.csv``)
    STRONG = 2


def one_file(name: str) -> tuple[str, str]:
    """The default ``classify``: a file is a whole output by itself, with no prefix."""
    return "file", ""


class Probe:
    """A file being identified: its name, whether the user named it directly, and its first
    bytes, read once and only when a kind asks (gzip is undone on the prefix read)."""

    SNIFF_BYTES = 65536

    def __init__(self, path: Path, given: bool) -> None:
        self.path = path
        self.name = path.name
        self.given = given
        self.error: OSError | None = None
        self._head: bytes | None = None

    def head(self) -> bytes:
        """The first bytes (decompressed); empty when the file cannot be read (:attr:`error`)."""
        if self._head is None:
            try:
                with open(self.path, "rb") as fh:
                    head = fh.read(self.SNIFF_BYTES)
            except OSError as exc:
                self.error, head = exc, b""
            if head[:2] == b"\x1f\x8b":
                head = _gunzip_prefix(head, self.SNIFF_BYTES)
            self._head = head
        return self._head


class SourceKind(NamedTuple):
    """One input format: how it is recognised, grouped, read and named (a named tuple: every
    program imports this registry, and a frozen dataclass of these fields costs 1.5 ms to
    make, five times as much)."""

    name: str
    #: does this file look like me? (None: no)
    sniff: Callable[[Probe], Match | None]
    #: one Source -> Trace; the list receives notes (what was read in a fallback, and why)
    read: Callable[[Source, list[str]], Trace]
    #: file name -> (role, output prefix)
    classify: Callable[[str], tuple[str, str]] = one_file
    #: roles a source holds, in the order its files are listed
    roles: tuple[str, ...] = ("file",)
    #: an output holding none of these roles is skipped with the note ``incomplete``
    needs_one_of: tuple[str, ...] = ()
    incomplete: str = ""
    #: kinds of one group under the same directory and prefix are one output (None: each file
    #: is its own source)
    group: str | None = None
    #: file names carry rocprofv3's ``<pid>_`` / our runner's ``rank<R>_<pid>_`` prefix
    pid_prefix: bool = False
    #: the files record no host: the parent directory of a ``<pid>_`` file names it
    host_from_parent: bool = False
    #: the rows already carry point, rank, host, pid, run and pass: the path adds nothing
    own_provenance: bool = False
    #: a directory holding this file is one source of this kind (built by ``directory``), and
    #: the walk does not descend below it; a file of this kind named directly reads its directory
    stop_file: str | None = None
    directory: Callable[[Path], Source] | None = None
    #: the reader's :class:`~pytest_gemmperf.traces.schema.NoDispatches` means a process that
    #: did no GPU work (the launcher): a note, not an error
    empty_is_launcher: bool = False
    #: every process of a source lies within it, so the gate may reduce sources one by one in
    #: worker processes (``gate/file_reduce.py``); otherwise it reads the full tables
    reducible: bool = True
    #: name patterns whose presence near the top makes a directory readable (``dirscan``)
    layout_marks: tuple[str, ...] = ()
    #: name patterns a file of this kind may have: a FIFO, socket or device so named is noted
    output_names: tuple[str, ...] = ()
    #: glob patterns, relative to a stored point's directory, of the files a replay reads
    replay_globs: tuple[str, ...] = ()
    #: ``read`` for a caller that reads only some dispatch columns (the third argument): a
    #: reader that keeps less while reading (None: ``read``, the table cut afterwards). The
    #: fourth, ``coded``: its dispatches may come as ``traces/coded.CodedDispatches``
    read_columns: Callable[[Source, list[str], Sequence[str], bool], Trace] | None = None

    def source(self, files: list[Path], root: Path | None) -> Source:
        """The Source of ``files`` (one output of this kind) with its path provenance;
        ``root`` is the directory the user gave (None for a file given directly)."""
        if self.directory is not None:
            return self.directory(files[0].parent)
        f = files[0]
        return with_attrs(Source(self.name, list(files)), f, root,
                          prefix=self.classify(f.name)[1] if self.pid_prefix else None,
                          host_from_parent=self.host_from_parent)


class Unreadable:
    """A file no name marks as a trace, and whose first bytes could not be read."""

    __slots__ = ("error",)

    def __init__(self, error: OSError) -> None:
        self.error = error


# --------------------------------------------------------------------------- the registry API

def find(name: str) -> SourceKind | None:
    """The registered kind called ``name``."""
    return next((k for k in KINDS if k.name == name), None)


def reducible(name: str) -> bool:
    """Whether sources of the kind called ``name`` may be reduced one by one (``reducible``)."""
    kind = find(name)
    return kind is not None and kind.reducible


def identify(path: Path, *, given: bool) -> SourceKind | Unreadable | None:
    """The kind that claims ``path`` most strongly (the earlier registered on a tie); None when
    none does; :class:`Unreadable` when only the content could have told and it cannot be read.
    ``given``: the user named this file (some names count only then, e.g. any ``*.db``)."""
    probe = Probe(path, given)
    best: tuple[Match, SourceKind] | None = None
    for kind in KINDS:
        m = kind.sniff(probe)
        if m is not None and (best is None or m > best[0]):
            best = (m, kind)
    if best is not None:
        return best[1]
    return Unreadable(probe.error) if probe.error is not None else None


def directory_kind(filenames: Iterable[str]) -> SourceKind | None:
    """The kind whose ``stop_file`` a directory holds: the directory is one source of it."""
    names = set(filenames)
    return next((k for k in KINDS if k.stop_file is not None and k.stop_file in names), None)


def is_layout_mark(name: str) -> bool:
    return _matcher(tuple(p for k in KINDS for p in k.layout_marks))(name)


def is_output_name(name: str) -> bool:
    return _matcher(tuple(p for k in KINDS for p in k.output_names))(name)


def replay_globs() -> tuple[str, ...]:
    return tuple(p for k in KINDS for p in k.replay_globs)


@functools.lru_cache(maxsize=8)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a whole name matches one of the glob ``patterns`` (as ``fnmatch.translate``
    reads them: case-sensitive). The registry's patterns are all a whole name or ``*`` and a
    literal suffix: tested as such, without compiling a regex of them all (about a millisecond,
    in every program that scans a directory)."""
    if not any(c in p.removeprefix("*") for p in patterns for c in "*?["):
        names = frozenset(p for p in patterns if not p.startswith("*"))
        suffixes = tuple(p[1:] for p in patterns if p.startswith("*"))
        return lambda name: name in names or name.endswith(suffixes)
    rx = _pattern(patterns)
    return lambda name: rx.match(name) is not None


@functools.lru_cache(maxsize=8)
def _pattern(patterns: tuple[str, ...]) -> re.Pattern:
    # one regex for all patterns: the scan tests every entry of a tree against them
    return re.compile("|".join(fnmatch.translate(p) for p in patterns) or r"(?!)")


def _gunzip_prefix(data: bytes, limit: int) -> bytes:
    """The first decompressed bytes of a gzip stream of which only a prefix was read."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        return d.decompress(data, limit)
    except zlib.error:
        return b""


def _reader(name: str):
    # import_module consults sys.modules first, so tests can substitute a reader module
    return importlib.import_module(f"pytest_gemmperf.traces.{name}")


# --------------------------------------------------------------------------- rocprofv3 JSON

_JSON = (".json", ".json.gz")
_FIRST_KEY = re.compile(rb'\{\s*"([^"]*)"')


def _first_key(head: bytes) -> bytes | None:
    """The first key of a JSON object's text; None when the text is no object."""
    s = head.lstrip()
    if not s.startswith(b"{"):
        return None
    m = _FIRST_KEY.match(s)
    return m[1] if m else b""


def _sniff_rocprof_json(p: Probe) -> Match | None:
    if not p.name.endswith(_JSON):
        return None
    if _first_key(p.head()) == b"rocprofiler-sdk-tool":
        return Match.STRONG
    return Match.WEAK if p.name.endswith(("_results.json", "_results.json.gz")) else None


def _read_one_file(module: str, function: str, src: Source, columns: Sequence[str] | None,
                   coded: bool) -> Trace:
    """``module.function`` of the source's file, given ``columns`` and ``coded`` where the
    caller reads some columns only."""
    read = getattr(_reader(module), function)
    if columns is None:
        return read(src.files[0])
    return read(src.files[0], columns=columns, coded=coded)


def _read_rocprof_json(src: Source, notes: list[str], columns: Sequence[str] | None = None,
                       coded: bool = False) -> Trace:
    return _read_one_file("rocprof_json", "read_rocprof_json", src, columns, coded)


def _results_file(name: str) -> tuple[str, str]:
    return "results", results_prefix(name)


# --------------------------------------------------------------------------- rocpd

def _sniff_rocpd(p: Probe) -> Match | None:
    # in a walk only rocprofv3's own name; a file named directly may be called anything.db
    return Match.STRONG if p.name.endswith(".db" if p.given else "_results.db") else None


def _read_rocpd(src: Source, notes: list[str], columns: Sequence[str] | None = None,
                coded: bool = False) -> Trace:
    return _read_one_file("rocpd", "read_rocpd_db", src, columns, coded)


# --------------------------------------------------------------------------- rocprofv3 CSV

_CSV_ROLES = ("kernel_trace", "counter_collection", "agent_info")


def _sniff_rocprof_csv(p: Probe) -> Match | None:
    return Match.STRONG if csv_role(p.name) is not None else None


def _csv_file(name: str) -> tuple[str, str]:
    return csv_role(name) or one_file(name)  # only names the sniff claimed come here


def _read_csv_group(src: Source, notes: list[str], columns: Sequence[str] | None = None,
                    coded: bool = False) -> Trace:
    rocprof_csv = _reader("rocprof_csv")
    roles = {role[0]: f for f in src.files if (role := csv_role(f.name)) is not None}
    agents = None
    if "agent_info" in roles:
        agents = _agents_of(rocprof_csv.read_agent_info_csv(roles["agent_info"]), roles["agent_info"])
    meta: dict[str, Any] = {}
    if "kernel_trace" in roles:
        kt = (rocprof_csv.read_kernel_trace_csv(roles["kernel_trace"], agents=agents) if columns is None
              else rocprof_csv.read_kernel_trace_csv(roles["kernel_trace"], agents=agents,
                                                     columns=columns, coded=coded))
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
    reader_notes = [n for part in (agents_df.attrs.get("notes", []), meta.get("notes", []),
                                   counter_notes) for n in part]
    if reader_notes:
        meta["notes"] = list(dict.fromkeys(reader_notes))
    return Trace(dispatches=dispatches, counters=counters, agents=agents_df,
                 files=[str(f) for f in src.files], meta=meta)


def _agents_of(result: Any, path: Path) -> pd.DataFrame:
    if isinstance(result, Trace):
        return result.agents
    if isinstance(result, pd.DataFrame):
        return result
    raise GemmperfInputError(path, "agent_info reader returned an unexpected object")


# --------------------------------------------------------------------------- PyTorch (Kineto)

#: Kineto writes its metadata keys first; Chrome traces from other tools start with traceEvents
_KINETO_FIRST_KEYS = frozenset({b"schemaVersion", b"traceEvents", b"deviceProperties",
                                b"distributedInfo", b"displayTimeUnit"})


def _sniff_torch(p: Probe) -> Match | None:
    if not p.name.endswith(_JSON):
        return None
    head = p.head()
    first = _first_key(head)
    if first is not None:
        if first in _KINETO_FIRST_KEYS or (b'"traceEvents"' in head and b'"ph"' in head):
            return Match.STRONG
    elif head.lstrip().startswith(b"[") and b'"ph"' in head and b'"ts"' in head:
        return Match.STRONG  # bare Chrome-trace array
    return Match.WEAK if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz")) else None


def _read_torch(src: Source, notes: list[str], columns: Sequence[str] | None = None,
                coded: bool = False) -> Trace:
    torch_trace = _reader("torch_trace")
    f = src.files[0]
    try:
        return (torch_trace.read_torch_trace(f, columns=columns, coded=True) if coded
                else torch_trace.read_torch_trace(f, columns=columns))
    except NoGpuEvents:
        # a CPU-only run (the CPU example of perf_tests): operators stand in for kernels
        notes.append(f"{f}: no GPU events; reading CPU operators as dispatches")
        return torch_trace.read_torch_cpu_trace(f)


# --------------------------------------------------------------------------- our results tables

TABLE_FILES = ("dispatches.parquet", "counters.parquet", "agents.parquet")


def _sniff_tables(p: Probe) -> Match | None:
    # in a walk the directory holding dispatches.parquet is the source (stop_file)
    return Match.STRONG if p.given and p.name in TABLE_FILES else None


def _tables_source(d: Path) -> Source:
    files = [d / n for n in TABLE_FILES if (d / n).is_file()]
    src = Source("tables", files)
    info = point_json(d)
    if info is not None:
        src.point = str_or_none(info.get("point")) or d.name
    return src


def _current_source_names(df: pd.DataFrame) -> pd.DataFrame:
    """Older results name a format in ``source`` as it once was spelled: read under the
    kinds' names, so one run's tables never show two spellings of one format."""
    if "source" in df.columns and df["source"].isin(list(OLD_SOURCE_NAMES)).any():
        df["source"] = df["source"].astype(object).replace(OLD_SOURCE_NAMES)
    return df


def _read_tables(src: Source, notes: list[str]) -> Trace:
    by_name = {f.name: f for f in src.files}

    def read(name: str) -> pd.DataFrame | None:
        f = by_name.get(name)
        if f is None:
            return None
        try:
            df = pd.read_parquet(f)
        except (OSError, ValueError) as exc:  # pyarrow errors derive from these
            raise GemmperfInputError(f, f"cannot read parquet table: {exc}") from None
        return _current_source_names(df)

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


# --------------------------------------------------------------------------- the registry

_ROCPROF_JSON = ("*_results.json", "*_results.json.gz")

#: every kind, in claim and format-priority order (see the module docstring)
KINDS: list[SourceKind] = [
    SourceKind(
        name="rocprof-json", sniff=_sniff_rocprof_json, read=_read_rocprof_json,
        read_columns=_read_rocprof_json,
        classify=_results_file, roles=("results",), group="rocprofv3", pid_prefix=True,
        empty_is_launcher=True, layout_marks=_ROCPROF_JSON, output_names=("*.json", "*.json.gz"),
        replay_globs=tuple(f"**/{p}" for p in _ROCPROF_JSON)),
    SourceKind(
        name="rocpd", sniff=_sniff_rocpd, read=_read_rocpd, read_columns=_read_rocpd,
        classify=_results_file, roles=("results",), group="rocprofv3", pid_prefix=True,
        empty_is_launcher=True, layout_marks=("*_results.db",), output_names=("*.db",),
        replay_globs=("**/*_results.db",)),
    SourceKind(
        name="rocprof-csv", sniff=_sniff_rocprof_csv, read=_read_csv_group, read_columns=_read_csv_group,
        classify=_csv_file, roles=_CSV_ROLES, needs_one_of=("kernel_trace", "counter_collection"),
        incomplete="only agent_info.csv, no kernel trace or counters (a process without GPU "
                   "work, e.g. the launcher)",
        group="rocprofv3", pid_prefix=True, host_from_parent=True, empty_is_launcher=True,
        layout_marks=tuple(f"*{r}.csv" for r in _CSV_ROLES),
        output_names=tuple(f"*{r}.csv" for r in _CSV_ROLES),
        replay_globs=tuple(f"**/*_{r}.csv" for r in _CSV_ROLES)),
    SourceKind(
        name="torch", sniff=_sniff_torch, read=_read_torch, read_columns=_read_torch,
        layout_marks=("*.pt.trace.json", "*.pt.trace.json.gz"), output_names=("*.json", "*.json.gz"),
        # aorta's torch_profiler/ holds Kineto traces under any name
        replay_globs=("**/*.pt.trace.json", "**/*.pt.trace.json.gz", "torch_profiler/**/*.json*")),
    SourceKind(
        name="tables", sniff=_sniff_tables, read=_read_tables, own_provenance=True,
        stop_file="dispatches.parquet", directory=_tables_source,
        layout_marks=("dispatches.parquet",), output_names=tuple(f"*{n}" for n in TABLE_FILES),
        replay_globs=tuple(f"**/{n}" for n in TABLE_FILES)),
]
