"""The results layout: one directory per pytest session, one subdirectory per test and point.

```
<results_dir>/run.json
<results_dir>/<test_slug>/<point_id>/point.json
<results_dir>/<test_slug>/<point_id>/run<k>/logs/*.log, run<k>/raw/...
<results_dir>/<test_slug>/<point_id>/{dispatches,counters,agents}.parquet
<results_dir>/<test_slug>/verdicts.csv
```

Everything analysis, reports and ``gemmperf baseline refresh`` need is here, so none of them
has to touch a GPU again. Several pytest-xdist workers write into one directory: each point
directory has one writer; the shared files (``run.json``, ``verdicts.csv``) are written under a
file lock and replaced atomically.

Completeness: ``run.json`` and every ``point.json`` carry a ``status`` so that a run cut short
(Ctrl-C, ``-x``, ``kill -9``) is never read as a finished one. A session writes ``running``
first and ``complete`` or ``interrupted`` at its end; a point is ``running`` until its tables
are written (``complete``) or its workload fails (``failed``). ``kill -9`` leaves ``running``
behind, so :func:`run_state` reads ``running`` as interrupted unless the writing process is
still alive on this host. Directories written before the field existed count as complete where
their tables are present. A ``complete`` run also lists its complete points: one of them no
longer there complete (a test folder deleted, a point.json rewritten) makes the run *lost*,
refused as an interrupted one is, since what it measured is no longer all there.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import os
import re
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from pytest_gemmperf import safe_io
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.numbers import tidy_json
from pytest_gemmperf.paths import contained

if TYPE_CHECKING:
    import pandas as pd

RUN_JSON = "run.json"
POINT_JSON = "point.json"
VERDICTS_CSV = "verdicts.csv"
TABLE_FILES = {"dispatches": "dispatches.parquet", "counters": "counters.parquet",
               "agents": "agents.parquet"}
TIMESTAMP_FORMAT = "%Y-%m-%dT%H-%M-%S"
#: longest test directory name: file systems allow 255 bytes, and the point and run
#: directories below must still fit typical path limits
MAX_SLUG = 150
#: names tried before giving up on a fresh run directory (each collision draws a new suffix)
_CREATE_TRIES = 100

RUNNING = "running"
COMPLETE = "complete"
INTERRUPTED = "interrupted"
#: a run recorded complete that no longer holds every point run.json lists as complete
LOST = "lost"
FAILED = "failed"
SKIPPED = "skipped"
#: point.json statuses of a point whose workload failed (older writers used the specific word)
_FAILED_STATUSES = frozenset({FAILED, "error", "timeout", "crashed", "killed"})
#: what older writers called a point whose tables were written
_OLD_COMPLETE = frozenset({COMPLETE, "ok"})

# ``<path>::<Class>::<function>[<parameter ids>]``: the first ``::name[`` opens the parameter
# part (file and directory names may hold brackets, parameter ids may hold anything)


# the pytest runner's patterns, compiled on first use: a command reading results needs neither


@functools.cache
def _slug_unsafe() -> re.Pattern[str]:
    return re.compile(r"[^A-Za-z0-9._+-]+")


@functools.cache
def _parametrized() -> re.Pattern[str]:
    return re.compile(r"^(?P<head>.*?::[A-Za-z_][A-Za-z0-9_]*)\[(?P<ids>.*)\]$", re.DOTALL)


def base_test_id(nodeid: str) -> str:
    """The key records were stored under before items had their own identity: the node id cut
    at its first ``[`` (``a/t.py::test_x[ch28]`` -> ``a/t.py::test_x``). Only for finding
    those records again; :func:`item_test_id` is the key of a test now."""
    return nodeid.split("[", 1)[0]


def item_test_id(nodeid: str, point_id: str) -> str:
    """The id of the test an item belongs to: its node id without the sweep point.

    Everything else that tells two pytest items apart stays: the file path (brackets and all),
    classes, the function and the ids of other parametrizations, so no two items share a
    results folder, a baseline record or a history series. ``test_y[ch28-th256]`` ->
    ``test_y`` (what an ordinary sweep test was always keyed by); ``test_y[ch28-th256-fp16]``
    -> ``test_y[fp16]``; ``test_y[fp16]`` of a test without a sweep (point ``default``) stays
    ``test_y[fp16]``. The point is removed only where it stands as whole ``-``-separated
    parameter ids exactly once; anywhere else the node id is kept whole, which is still
    distinct."""
    head, ids = split_nodeid(nodeid)
    if ids is None:
        return nodeid
    rest = _without_point(ids.split("-"), point_id.split("-"))
    if rest is None:
        return nodeid
    return f"{head}[{'-'.join(rest)}]" if rest else head


def moved_test_ids(test_id: str, known: Iterable[str], rootdir: Path | None = None) -> list[str]:
    """Ids in ``known`` that name the test ``test_id`` names, seen from another rootdir: one is
    the other behind more leading directories (``w/proj/perf/t.py::test_f`` and
    ``perf/t.py::test_f``). A store holding one of them for a test that finds no record of its
    own was recorded under another spelling of the session, not for a new test. An id whose
    file exists under ``rootdir`` is another test of this project (``a/perf/t.py`` beside
    ``perf/t.py``), not a moved one."""
    found = {k for k in known if isinstance(k, str) and k != test_id
             and (k.endswith("/" + test_id) or test_id.endswith("/" + k))}
    if rootdir is not None:
        found = {k for k in found if not (rootdir / k.split("::", 1)[0]).exists()}
    return sorted(found)


def split_nodeid(nodeid: str) -> tuple[str, str | None]:
    """``(path::Class::function, parameter ids)``; ids None for an unparametrized item."""
    m = _parametrized().match(nodeid)
    return (nodeid, None) if m is None else (m.group("head"), m.group("ids"))


def _without_point(tokens: list[str], point: list[str]) -> list[str] | None:
    """``tokens`` with the one run equal to ``point`` removed; None when it occurs not exactly
    once (then nobody can say which run is the sweep's)."""
    n = len(point)
    hits = [i for i in range(len(tokens) - n + 1) if tokens[i:i + n] == point]
    if len(hits) != 1:
        return None
    return tokens[:hits[0]] + tokens[hits[0] + n:]


def slugify_test_id(test_id: str) -> str:
    """``perf_tests/test_x.py::test_y`` -> ``perf_tests_test_x.py__test_y``: one path segment of
    at most :data:`MAX_SLUG` characters. When sanitizing loses information (brackets, spaces,
    anything outside ``[A-Za-z0-9._+-]``) or the name is too long, a hash of the whole id is
    appended, so ``test_f[1]`` and ``test_f(1)`` keep apart; plain ids keep their old names."""
    plain = test_id.replace("::", "__").replace("/", "_")
    return distinct_slug(test_id, plain, _slug_unsafe().sub("_", plain), MAX_SLUG)


def distinct_slug(test_id: str, plain: str, cleaned: str, max_len: int, digits: int = 8) -> str:
    """``cleaned`` when it is exactly ``plain`` (nothing lost), short enough and no special
    directory name; otherwise its start plus ``-`` and ``digits`` hex digits of the SHA-256 of
    ``test_id``, within ``max_len``."""
    if cleaned == plain and len(cleaned) <= max_len and cleaned not in ("", ".", ".."):
        return cleaned
    digest = hashlib.sha256(test_id.encode("utf-8", "surrogatepass")).hexdigest()[:digits]
    return f"{cleaned[:max_len - digits - 1]}-{digest}"


#: a test folder's marker: the test id that claimed the folder name (ResultsDir.claim_test_dir)
TEST_ID_FILE = ".test-id"


def _claimed_by(test_dir: Path) -> str | None:
    try:
        return (test_dir / TEST_ID_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _hashed_slug(test_id: str) -> str:
    """The second name of a test whose readable folder name another test holds."""
    return distinct_slug(test_id, "", slugify_test_id(test_id), MAX_SLUG)


def _random_suffix() -> str:
    return secrets.token_hex(3)


def timestamped_dir(base: Path, now: _dt.datetime | None = None, *,
                    suffix: Callable[[], str] = _random_suffix) -> Path:
    """Create and return ``base/<YYYY-mm-ddTHH-MM-SS>-<random>``, this session's own directory.

    Made at once with an ``mkdir`` that fails when the name exists (then a new suffix is drawn),
    so two sessions started in the same second -- two CI jobs on one runner, a developer and a
    cron job -- never share a directory, whatever the clock says. Raises ``OSError`` when the
    directory cannot be made."""
    stamp = (now or _dt.datetime.now()).strftime(TIMESTAMP_FORMAT)
    base.mkdir(parents=True, exist_ok=True)
    for _ in range(_CREATE_TRIES):
        candidate = base / f"{stamp}-{suffix()}"
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{base}: no free run directory name for {stamp} after {_CREATE_TRIES} tries")


def missing_ancestor(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist yet (what creating
    ``path`` makes); None when ``path`` exists."""
    top = None
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            break
        top = p
    return top


def remove_unused(path: Path, top: Path | None) -> None:
    """Remove ``path`` and its parents up to ``top`` while they are empty: a session that
    profiled nothing leaves no directory behind. Anything not empty stays untouched."""
    if top is None:
        return
    for p in (path, *path.parents):
        try:
            p.rmdir()
        except OSError:
            return
        if p == top:
            return


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a private temp file + fsync + rename (``safe_io``: never through a link)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_io.write_text(path, text)


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON, its floats without binary noise (``numbers.tidy_json``), written atomically."""
    atomic_write_text(path, json.dumps(tidy_json(data), indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


@dataclass(frozen=True)
class ResultsDir:
    """One session's results directory (shared by all xdist workers of the session)."""

    root: Path

    # every directory below the root is built by paths.contained: a test or point name that
    # is not one plain name, or a link planted in a reused results directory, is refused
    # (GemmperfInputError naming it) instead of sending writes and removals elsewhere
    def test_dir(self, test_id: str) -> Path:
        return contained(self.root, self._test_slug(test_id))

    def point_dir(self, test_id: str, point_id: str) -> Path:
        return contained(self.root, self._test_slug(test_id), point_id)

    def run_dir(self, test_id: str, point_id: str, run: int) -> Path:
        return contained(self.root, self._test_slug(test_id), point_id, f"run{run}")

    def claim_test_dir(self, test_id: str) -> Path:
        """The test's directory, made and marked as ``test_id``'s before anything is written
        into it. Readable names can coincide (``a/b.py`` and ``a_b.py`` both read ``a_b.py``):
        the first test to claim a name keeps it, the other gets the name plus a hash of its
        id. The claim is an exclusive create, so xdist workers racing for one name agree."""
        for slug in (slugify_test_id(test_id), _hashed_slug(test_id)):
            d = contained(self.root, slug)
            d.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(d / TEST_ID_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            except FileExistsError:
                if _claimed_by(d) == test_id:
                    return d
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(test_id)
            return d
        raise GemmperfInputError(self.root / slugify_test_id(test_id),
                                 f"no results folder left for test {test_id!r}: its name and its hashed name are both taken")

    def _test_slug(self, test_id: str) -> str:
        """The folder name :meth:`claim_test_dir` gave (or would give) ``test_id``."""
        plain = slugify_test_id(test_id)
        owner = _claimed_by(self.root / plain)
        return plain if owner is None or owner == test_id else _hashed_slug(test_id)

    def ensure(self, session_meta: Mapping[str, Any]) -> None:
        """Create the directory and ``run.json`` once (the first writer wins), with status
        ``running`` and the writer's host and pid, so a reader can tell a live session from
        one that was killed."""
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / RUN_JSON
        if target.exists():
            return
        with file_lock(self.root / ".run.json.lock"):
            if not target.exists():
                write_json(target, {**dict(session_meta), "status": RUNNING,
                                    "writer": {"host": socket.gethostname(), "pid": os.getpid()}})

    def finish(self, interrupted: bool) -> RunState:
        """Record the session's end in ``run.json``: ``complete`` when every collected point
        ran (the caller knows; whatever the verdicts), else ``interrupted``, with the points
        that finished. A point still ``running`` makes the run interrupted either way."""
        state = run_state(self.root)
        self.update_run_json(status=INTERRUPTED if interrupted or state.incomplete else COMPLETE,
                             points_total=state.points_total, points_complete=len(state.complete),
                             points_failed=len(state.failed), complete_points=list(state.complete))
        return run_state(self.root)

    def rootdir(self) -> Path | None:
        """The pytest rootdir of the session that made this run (``run.json``), if known."""
        try:
            value = json.loads((self.root / RUN_JSON).read_text(encoding="utf-8")).get("rootdir")
        except (OSError, ValueError, AttributeError):
            return None
        return Path(value) if isinstance(value, str) and value else None

    def update_run_json(self, **fields: Any) -> None:
        """Add fields to ``run.json`` (e.g. the hardware key once a point has run)."""
        target = self.root / RUN_JSON
        with file_lock(self.root / ".run.json.lock"):
            data = json.loads(target.read_text(encoding="utf-8")) if target.exists() else {}
            changed = False
            for k, v in fields.items():
                if data.get(k) != v:
                    data[k] = v
                    changed = True
            if changed:
                write_json(target, data)


@dataclass(frozen=True)
class RunState:
    """How far one results directory got: its status and its points (``<test_slug>/<point>``)."""

    root: Path
    status: str
    points_total: int
    complete: tuple[str, ...]
    failed: tuple[str, ...]
    incomplete: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    #: points run.json lists as complete that are not there complete (status ``lost``)
    lost: tuple[str, ...] = ()

    @property
    def is_complete(self) -> bool:
        return self.status == COMPLETE

    @property
    def finished(self) -> tuple[str, ...]:
        """Points that ran to an end: tables written, workload failed, or nothing to replay."""
        return self.complete + self.failed + self.skipped

    def refusal(self) -> str:
        """The one line naming this run and how far it got."""
        if self.status == LOST:
            more = f" and {len(self.lost) - 1} more" if len(self.lost) > 1 else ""
            return (f"run {self.root.name} is missing {len(self.lost)} of the points its {RUN_JSON} "
                    f"records as complete ({self.lost[0]}{more}): "
                    f"{len(self.complete)} of {self.points_total} points complete "
                    "(--allow-partial: use the complete points only)")
        verb = "is still running" if self.status == RUNNING else "was interrupted"
        return (f"run {self.root.name} {verb}: {len(self.complete)} of {self.points_total} points "
                "complete (--allow-partial: use the complete points only)")


def point_state(point_dir: Path, doc: Mapping[str, Any]) -> str:
    """``complete``, ``failed``, ``skipped`` or ``interrupted`` for one point.json.

    ``running`` is interrupted here: a reader only asks about a run that is not live. A point
    without a status (written before the field existed), or with a word this writer does not
    use, is complete when its tables are there."""
    status = str(doc.get("status") or "").lower()
    if status in _OLD_COMPLETE:
        return COMPLETE
    if status in _FAILED_STATUSES:
        return FAILED
    if status == SKIPPED:
        return SKIPPED
    if status in (RUNNING, INTERRUPTED):
        return INTERRUPTED
    # no status or one of another writer's words: its tables say whether it finished
    return COMPLETE if (point_dir / TABLE_FILES["dispatches"]).is_file() else INTERRUPTED


def read_json_doc(path: Path) -> dict[str, Any]:
    """A results JSON file (run.json, point.json) as an object, or one line naming the file.
    A key written twice in one object is refused (:mod:`pytest_gemmperf.jsonkeys`): ``json``
    would keep the last value, so an edited ``"status"`` could turn a failed point complete."""
    try:
        raw = path.read_bytes()
        doc = json.loads(raw)
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise GemmperfInputError(path, f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise GemmperfInputError(path, "expected a JSON object")
    # lazy: keeps every pytest session fast (the plugin loads this module; the key scan needs numpy)
    from pytest_gemmperf.jsonkeys import check_unique_keys

    check_unique_keys(_utf8(raw), os.fspath(path))
    return doc


def _utf8(raw: bytes) -> bytes:
    """``raw`` as the BOM-less UTF-8 the key scan reads; ``json.loads`` also takes UTF-16/32
    and a UTF-8 byte-order mark, so the bytes it accepted are recoded the way it decoded them."""
    enc = json.detect_encoding(raw)
    return raw if enc == "utf-8" else raw.decode(enc, "surrogatepass").encode("utf-8", "surrogatepass")


def _writer_alive(doc: Mapping[str, Any]) -> bool:
    """Whether the session that wrote ``running`` still lives (same host, pid exists)."""
    w = doc.get("writer")
    if not isinstance(w, dict) or w.get("host") != socket.gethostname():
        return False
    pid = w.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def run_state(root: Path) -> RunState:
    """Read ``run.json`` and every ``<test>/<point>/point.json`` under ``root``.

    The run is complete when ``run.json`` says so; ``running`` of a dead writer, ``interrupted``
    or ``failed`` mean interrupted. Without a status (an older writer) it is complete unless a
    point never got its tables. ``points_total`` is what the session collected, at least the
    points found."""
    run_path = root / RUN_JSON
    run = read_json_doc(run_path) if run_path.is_file() else {}
    groups: dict[str, list[str]] = {COMPLETE: [], FAILED: [], SKIPPED: [], INTERRUPTED: []}
    for pj in sorted(root.glob(f"*/*/{POINT_JSON}")):
        groups[point_state(pj.parent, read_json_doc(pj))].append(f"{pj.parent.parent.name}/{pj.parent.name}")
    found = sum(len(v) for v in groups.values())
    total = run.get("points_total")
    total = max(total, found) if isinstance(total, int) and not isinstance(total, bool) else found
    status = str(run.get("status") or "").lower()
    if not status:
        status = COMPLETE if not groups[INTERRUPTED] else INTERRUPTED
    elif status == RUNNING:
        status = RUNNING if _writer_alive(run) else INTERRUPTED
    elif status != COMPLETE:
        status = INTERRUPTED
    lost = _lost_points(run, groups[COMPLETE]) if status == COMPLETE else ()
    return RunState(root=root, status=LOST if lost else status, points_total=total,
                    complete=tuple(groups[COMPLETE]), failed=tuple(groups[FAILED]),
                    incomplete=tuple(groups[INTERRUPTED]), skipped=tuple(groups[SKIPPED]), lost=lost)


def _lost_points(run: Mapping[str, Any], complete: list[str]) -> tuple[str, ...]:
    """The points ``run.json`` records as complete that are not complete now: by name where
    it lists them (``complete_points``), else ``?`` for each one its count
    (``points_complete``) exceeds what is there. Older writers recorded neither: nothing lost."""
    have = set(complete)
    named = run.get("complete_points")
    if isinstance(named, list) and all(isinstance(p, str) for p in named):
        return tuple(sorted(set(named) - have))
    count = run.get("points_complete")
    if isinstance(count, int) and not isinstance(count, bool) and count > len(have):
        return ("?",) * (count - len(have))
    return ()


def check_run(root: Path, allow_partial: bool) -> RunState:
    """The state of a run given directly: an incomplete one is one ``GemmperfInputError`` line
    unless ``allow_partial`` (then the caller reads its complete points only)."""
    state = run_state(root)
    if not state.is_complete and not allow_partial:
        raise GemmperfInputError(root, state.refusal())
    return state


def newest_complete_run(parent: Path, report=None) -> Path | None:
    """The newest complete run among ``parent``'s timestamped children (names sort by time),
    ``report`` naming each newer one that is not complete; None when there is none."""
    try:
        runs = sorted(c for c in parent.iterdir()
                      if c.is_dir() and not c.is_symlink() and (c / RUN_JSON).is_file())
    except OSError:
        return None
    for run in reversed(runs):
        try:
            state = run_state(run)
        except GemmperfInputError as exc:  # a damaged point.json: that run is not the newest
            if report:
                report(f"note: {run}: skipped, {exc}")
            continue
        if state.is_complete:
            return run
        if report:
            report(f"note: {run}: skipped, {state.refusal().split(' (', 1)[0]}")
    return None


def run_parts(path: Path, allow_partial: bool, report=None) -> list[Path]:
    """What to read of ``path`` when it is a results run or the parent of runs: the run
    itself when complete, else (``allow_partial``) its complete point directories, else one
    ``GemmperfInputError`` line; of a parent, its complete runs, ``report`` naming the others.
    Any other path is returned as it is."""
    if (path / RUN_JSON).is_file():
        state = check_run(path, allow_partial)
        if state.is_complete:
            return [path]
        if report:
            report(f"note: {path}: --allow-partial: {state.refusal().split(' (', 1)[0]}; "
                   "reading its complete points only")
        return [path / rel for rel in state.complete]
    try:
        runs = sorted(c for c in path.iterdir() if c.is_dir() and not c.is_symlink() and (c / RUN_JSON).is_file())
    except OSError:
        return [path]
    if not runs:
        return [path]
    out: list[Path] = []
    for run in runs:
        try:
            state = run_state(run)
        except GemmperfInputError as exc:
            if report:
                report(f"note: {run}: not read, {exc}")
            continue
        if state.is_complete:
            out.append(run)
        elif allow_partial:
            out += [run / rel for rel in state.complete]
        elif report:
            report(f"note: {run}: not read, {state.refusal()}")
    if not out:
        raise GemmperfInputError(path, f"no complete run among its {len(runs)} run(s) "
                                       "(--allow-partial: read the complete points of interrupted ones)")
    return out


def write_point_json(point_dir: Path, record: Mapping[str, Any]) -> Path:
    # only the runner writes point.json: a command reading results (gemmperf analyze of a trace
    # or of a results directory) loads no redaction patterns
    from pytest_gemmperf.redact import redact_record  # lazy: see above

    path = point_dir / POINT_JSON
    # the last net for secrets of this process's environment (results are CI artifacts)
    write_json(path, redact_record(dict(record)))
    return path


def write_tables(point_dir: Path, tables: Mapping[str, pd.DataFrame]) -> dict[str, Path]:
    """Write the canonical tables of a point as parquet (categories survive the round trip)."""
    out = {}
    for name, fname in TABLE_FILES.items():
        df = tables.get(name)
        if df is None:
            continue
        path = point_dir / fname
        safe_io.write_parquet(df.reset_index(drop=True), path, index=False)
        out[name] = path
    return out


def read_tables(point_dir: Path) -> dict[str, pd.DataFrame]:
    # lazy: keeps every pytest session fast (the plugin loads this module; only tables need pandas)
    import pandas as pd

    return {name: pd.read_parquet(point_dir / fname)
            for name, fname in TABLE_FILES.items() if (point_dir / fname).exists()}


def link_latest(results_root: Path) -> None:
    """Point ``<base>/latest`` at this session's directory (best effort: not all file systems
    allow symlinks, and nothing depends on it). Called for complete runs only, so ``latest``
    is the newest complete run."""
    latest = results_root.parent / "latest"
    try:
        if latest.is_symlink() or latest.exists():
            if not latest.is_symlink():
                return
            latest.unlink()
        latest.symlink_to(results_root.name, target_is_directory=True)
    except OSError:
        pass


def file_lock(path: Path):
    """The writers' lock of a shared results file (``run.json``, a test's ``verdicts.csv``):
    xdist workers of one session write them in turn."""
    # lazy: only writers lock; readers of results (gemmperf analyze) start without filelock
    from filelock import FileLock

    return FileLock(str(path), timeout=600)
