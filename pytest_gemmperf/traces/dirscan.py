"""Bounded, name-only scan of an input directory, and the rule that accepts it as a layout.

Rule (so that ``gemmperf compare /tmp ...`` does not walk all of /tmp and then name an unrelated
file). A directory given as input is read only when both hold:

1. **It is recognisably a layout gemmperf reads, near its top.** Within :data:`RECOGNISE_DEPTH`
   directory levels (the directory itself = level 0) there is a profiler-output name or a
   layout directory: ``run.json`` / ``point.json`` (results), a name a source kind marks as its
   own (``layout_marks`` in ``traces/kinds.py``: ``dispatches.parquet``, ``*kernel_trace.csv`` /
   ``*counter_collection.csv`` / ``*agent_info.csv``, ``*_results.json[.gz]`` / ``*_results.db``,
   ``*.pt.trace.json[.gz]``), any ``.json[.gz]`` in the directory itself (a trace exported under
   any name), or a directory named ``<T>thread`` / ``nccl_<C>channels`` (aorta sweep),
   ``pass_N`` / ``pmc_N`` (rocprofv3 counter passes), ``rank<R>``, ``run<k>``,
   ``torch_profiler``, ``rocprof_traces``.
   The deepest documented layout puts its first such name at level 2 (``.gemmperf/results/
   <timestamp>/run.json``, ``<sweep parent>/<sweep>/<T>thread``, ``<out>/pass_1/<host>/...``).
2. **It is not a whole unrelated tree.** The scan visits at most :func:`max_entries` directory
   entries (50,000 by default, ``GEMMPERF_MAX_DIR_ENTRIES``); a results directory's points stop
   the descent at their ``dispatches.parquet`` (a kind's ``stop_file``), so even a large sweep
   stays far below that.

Both checks look at names only: no file is opened before the directory is accepted, so a
broken file somewhere in an unrelated tree can never be what the error names. Either failure
is one :class:`NotALayout` line naming the directory.

The scan itself keeps the walk's hostile-tree contract (``traces/discover.py``): regular files
only, symlinks followed but each real directory entered once, and every skipped entry a note
and a typed record (``traces/skipped.py``).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from collections import deque
from pathlib import Path

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces import kinds
from pytest_gemmperf.traces.csv_layouts import file_type
from pytest_gemmperf.traces.skipped import SkippedInput, SkipReason, skip

#: levels below the input directory searched for a layout name (0 = the directory itself)
RECOGNISE_DEPTH = 2
DEFAULT_MAX_ENTRIES = 50_000
MAX_ENTRIES_ENV = "GEMMPERF_MAX_DIR_ENTRIES"
#: how both refusals start (``store.compare_inputs`` adds "baselines store" where one is accepted too)
NOT_A_LAYOUT = "not a results, rocprofv3 output or sweep directory"
#: our results layout's own files: they mark a layout and are never read as traces
LAYOUT_FILES = frozenset({"run.json", "point.json"})


@functools.cache
def _layout_dir() -> re.Pattern[str]:
    """Directory names of the layouts we know, compiled when a scan first meets a directory."""
    return re.compile(r"^(?:\d+thread|nccl_\d+channels|(?:pass|pmc)_\d+|rank_?\d+|run\d+|"
                      r"torch_profiler|rocprof_traces)$")


class NotALayout(GemmperfInputError):
    """A directory given as input that is no layout gemmperf reads. ``detail`` is what follows
    :data:`NOT_A_LAYOUT` in the message (a caller that accepts one more kind of directory
    words its own refusal around it)."""

    def __init__(self, path: Path, detail: str) -> None:
        self.detail = detail
        super().__init__(path, NOT_A_LAYOUT + detail)


def max_entries() -> int:
    """The entry cap: ``GEMMPERF_MAX_DIR_ENTRIES`` when set to a positive integer, else 50,000."""
    text = os.environ.get(MAX_ENTRIES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_ENTRIES
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise GemmperfInputError(None, f"{MAX_ENTRIES_ENV}={text!r}: expected a positive integer")
    return n


def os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink loop (too many levels of symbolic links)"
    return exc.strerror or str(exc)


def looks_like_output(name: str) -> bool:
    """A name a profiler output could have (used to note skipped FIFOs, sockets, devices)."""
    return kinds.is_output_name(name)


def is_layout_file(name: str, depth: int) -> bool:
    """A file name that marks a readable layout (any ``.json`` only in the input directory)."""
    return (name in LAYOUT_FILES or kinds.is_layout_mark(name)
            or (depth == 0 and name.endswith((".json", ".json.gz"))))


def is_layout_dir(name: str) -> bool:
    return _layout_dir().match(name) is not None


class _Budget:
    """Entries visited so far against the cap, shared by the probe and the full scan."""

    def __init__(self, root: Path, limit: int) -> None:
        self.root, self.limit, self.used = root, limit, 0

    def spend(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise NotALayout(
                self.root, f": more than {self.limit:,} entries under it (scan stopped); name the run's own directory or "
                f"its trace files, or raise {MAX_ENTRIES_ENV}")


def _list(d: Path, notes: list[str] | None, skipped: list[SkippedInput] | None = None):
    """(st, sorted entries) of directory ``d``; None (with a note) when it cannot be listed."""
    try:
        st = os.stat(d)
        with os.scandir(d) as it:
            return st, sorted(it, key=lambda e: e.name)
    except OSError as exc:
        if notes is not None:
            skip(notes, skipped, d, SkipReason.UNLISTABLE,
                 f"{d}: directory skipped, cannot list it ({os_reason(exc)})")
        return None


def check_recognisable(root: Path, budget: _Budget | None = None) -> None:
    """Raise unless ``root`` shows a layout name within :data:`RECOGNISE_DEPTH` levels.

    Breadth-first over names only (no file opened), under the entry cap. A name counts whatever
    the entry turns out to be (a FIFO or a dangling link named like a trace is the walk's to
    note). When a directory on the way cannot be listed or an entry cannot be followed, the
    directory is not refused here: the walk then names what it could not read.
    """
    budget = budget or _Budget(root, max_entries())
    queue = deque([(root, 0)])
    seen: set[tuple[int, int]] = set()
    unsure = False
    while queue:
        d, depth = queue.popleft()
        listed = _list(d, None)  # the full scan notes what cannot be listed
        if listed is None:
            unsure = True
            continue
        st, entries = listed
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        budget.spend(len(entries))
        for e in entries:
            if is_layout_file(e.name, depth) or is_layout_dir(e.name):
                return
            try:
                is_dir = e.is_dir()  # follows symlinks; a dangling link is not a directory
            except OSError:
                unsure = True
                continue
            if is_dir and depth < RECOGNISE_DEPTH:
                queue.append((Path(e.path), depth + 1))
    if unsure:
        return
    raise NotALayout(
        root, " (found no trace files or "
        f"layout directories within depth {RECOGNISE_DEPTH}); name the run's results directory, "
        "rocprofv3 output directory, sweep directory or trace files")


def scan_tree(root: Path, notes: list[str], skipped: list[SkippedInput] | None = None
              ) -> list[tuple[Path, list[str], list[Path]]]:
    """(directory, regular file names, subdirectories) top-down in name order, after checking
    that ``root`` is recognisable (:func:`check_recognisable`), under the entry cap.

    Never opens a file. Skipped parts get a note: directories that cannot be listed, symlinks
    that cannot be followed (loops, missing targets), directories reached a second time (a
    symlink back up the tree would otherwise loop forever), and FIFOs/sockets/devices named like
    profiler outputs (each also a record in ``skipped``, when given). A directory that is one
    source as a whole (a kind's ``stop_file``: a results point's tables) is listed but not
    descended into.
    """
    budget = _Budget(root, max_entries())
    check_recognisable(root, budget)
    budget.used = 0  # the cap is on one walk of the tree; the probe only read its top levels
    out: list[tuple[Path, list[str], list[Path]]] = []
    seen: dict[tuple[int, int], Path] = {}
    stack = [root]
    while stack:
        d = stack.pop()
        listed = _list(d, notes, skipped)
        if listed is None:
            continue
        st, entries = listed
        key = (st.st_dev, st.st_ino)
        if key in seen:
            skip(notes, skipped, d, SkipReason.REVISITED,
                 f"{d}: directory not read again, it is {seen[key]} (a symlink back into the tree)")
            continue
        seen[key] = d
        budget.spend(len(entries))
        files: list[str] = []
        subdirs: list[Path] = []
        for e in entries:
            path = d / e.name
            try:
                est = os.stat(path)  # follows symlinks
            except OSError as exc:
                kind = "symlink" if os.path.islink(path) else "entry"
                skip(notes, skipped, path, SkipReason.DANGLING_LINK,
                     f"{path}: {kind} skipped, cannot follow it ({os_reason(exc)})")
                continue
            if stat.S_ISDIR(est.st_mode):
                subdirs.append(path)
            elif stat.S_ISREG(est.st_mode):
                files.append(e.name)
            elif looks_like_output(e.name):
                skip(notes, skipped, path, SkipReason.SPECIAL_FILE,
                     f"{path}: skipped, {file_type(est.st_mode)} named like a profiler output "
                     "(never opened)")
        if kinds.directory_kind(files) is not None:
            subdirs = []  # the tables already hold this point's raw files
        out.append((d, files, subdirs))
        stack.extend(reversed(subdirs))
    return out
