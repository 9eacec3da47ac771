"""The baseline store's transactions: stage, commit by one rename, apply; recovery after a kill.

One transaction writes new versions of one or more records (``docs/ARCHITECTURE.md``, baseline
record). Its journal ``<root>/.txn/<id>.json`` names each record and its new version:

1. the journal is written with ``state: staging`` (from here a crash is rolled back);
2. every new version directory is written in full and fsynced (nothing points to it yet);
3. the journal is replaced by one with ``state: committed`` -- one ``os.replace``, the single
   commit point of the whole transaction, however many records it holds;
4. :func:`apply`: each record's ``meta.json`` (the pointer) is switched to its new version's,
   its derived ``summary.yaml`` rewritten, its old versions and old-layout files removed;
5. the journal is removed.

:func:`recover`, run by every writer first under the store lock, redoes step 4 for a committed
journal (idempotent) and removes the staged versions of a staging one, so a writer killed at
any step leaves every record of the transaction old, or every one new, and no debris once the
next writer ran. Readers never write: :func:`targets` tells them which records a committed
journal already switched, so they read the new state even before recovery.

All disk changes go through :mod:`pytest_gemmperf.store.fs` (one fault-injection step each).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pytest_gemmperf.errors import GemmperfInputError, output_error
from pytest_gemmperf.store import fs
from pytest_gemmperf.paths import contained, contained_relative
from pytest_gemmperf.store.record import _VERSION_RE, META_FILE, SAMPLES_FILE, SUMMARY_FILE, VARIANCE_FILE

TXN_DIR = ".txn"


@dataclass
class Plan:
    """One record's new version in a transaction."""

    dir: Path  # the record directory
    version: str  # v<generation>
    blobs: dict[str, bytes]  # file name -> bytes, meta.json included


def ignored_dir(root: Path, name: str) -> Path:
    """``root/name``, created with a ``.gitignore`` of ``*`` (locks and journals are private)."""
    p = contained(root, name)
    if not p.is_dir():
        fs.mkdir(p)
    ignore = p / ".gitignore"
    if not ignore.exists():
        try:
            with open(ignore, "x") as fh:
                fh.write("*\n")
        except FileExistsError:
            pass
    return p


def versions(d: Path) -> list[str]:
    """Names of the version directories in record directory ``d``, oldest first."""
    try:
        names = [e.name for e in os.scandir(d) if _VERSION_RE.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(names, key=lambda n: int(n[1:]))


def file_or_none(path: Path) -> bytes | None:
    try:
        return fs.read_bytes(path)
    except FileNotFoundError:
        return None


def _valid(doc: Any) -> bool:
    if not isinstance(doc, dict) or doc.get("state") not in ("staging", "committed"):
        return False
    recs = doc.get("records")
    # record dirs are <hw>/<slug>, never hidden, never outside the store
    return isinstance(recs, list) and all(
        isinstance(r, dict) and isinstance(r.get("dir"), str) and isinstance(r.get("version"), str)
        and _VERSION_RE.fullmatch(r["version"]) and not Path(r["dir"]).is_absolute()
        and len(Path(r["dir"]).parts) == 2 and not any(part.startswith(".") for part in Path(r["dir"]).parts)
        for r in recs)


def journals(root: Path) -> list[tuple[Path, dict[str, Any] | None]]:
    """(path, parsed journal or None when unreadable), oldest first."""
    tdir = contained(root, TXN_DIR)
    try:
        names = sorted(n for n in os.listdir(tdir) if n.endswith(".json") and not n.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for n in names:
        p = tdir / n
        try:
            doc = json.loads(fs.read_bytes(p))
        except FileNotFoundError:
            continue  # finished meanwhile
        except (ValueError, UnicodeDecodeError, GemmperfInputError):
            doc = None
        out.append((p, doc if _valid(doc) else None))
    return out


def targets(root: Path) -> dict[Path, Path | None]:
    """Record dir -> meta.json of the version a committed (not yet applied) journal switches
    it to: what a reader must see before any writer rolled the journal forward. Records a
    staging journal names map to None: their new version is not (yet) part of the store."""
    out: dict[Path, Path | None] = {}
    for _p, doc in journals(root):
        if doc is not None:
            for r in doc["records"]:
                d = contained_relative(root, r["dir"])
                if doc["state"] == "committed":
                    out[d] = d / r["version"] / META_FILE
                else:
                    out.setdefault(d, None)
    return out


#: what a failed write left, in the words of its one-line error
KEPT_OLD = "the previous record is kept"
KEPT_NEW = ("the new record is committed and reads as new; the next baseline write finishes "
            "switching to it")
KEPT_UNSURE = "the next baseline write finishes or undoes it"


@dataclass
class _Cursor:
    """The file a transaction is writing now: ``write(2)`` on a descriptor names none, and a
    full disk must be reported at the file the user knows."""

    path: Path


def run(root: Path, plans: list[Plan]) -> None:
    """Stage every plan, commit by one journal rename, apply, clean up (store lock held).

    A refused write (disk full, read-only, quota, I/O error) raises one-line
    :class:`~pytest_gemmperf.errors.OutputError`: before the commit the staged versions and
    the journal are removed again, so the store is byte for byte as before; after it the new
    state stands (readers follow the committed journal) and the next writer finishes it."""
    tdir = ignored_dir(root, TXN_DIR)
    journal = tdir / f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}.json"
    entries = [{"dir": p.dir.relative_to(root).as_posix(), "version": p.version} for p in plans]

    def doc(state: str) -> bytes:
        return (json.dumps({"state": state, "records": entries}, indent=1) + "\n").encode()

    at = _Cursor(journal)
    committed = False
    try:
        fs.atomic_write(journal, doc("staging"))  # from here a crash is rolled back
        for p in plans:
            vdir = p.dir / p.version
            at.path = vdir
            fs.mkdir(p.dir)
            fs.rmtree(vdir)  # an unreferenced leftover of the same name
            fs.mkdir(vdir)
            for name in sorted(p.blobs):
                at.path = vdir / name
                fs.write_new(vdir / name, p.blobs[name])
            at.path = vdir
            fs.fsync_dir(vdir)
        at.path = journal
        fs.atomic_write(journal, doc("committed"))  # THE commit point: from here, rolled forward
        committed = True
        apply(root, journal, entries, at)
    except OSError as exc:
        # the journal on disk decides (the commit rename may have happened before an fsync
        # failed); once applied it is gone, and only we know that it was committed
        state = "committed" if committed else _journal_state(journal)
        if state is None or state == "staging":
            _roll_back(journal, plans)
            kept = KEPT_OLD
        else:
            kept = KEPT_NEW if state == "committed" else KEPT_UNSURE
        raise output_error(exc, at.path, kept=kept) from exc


def _journal_state(journal: Path) -> str | None:
    """``staging``/``committed`` as the journal on disk says; None when it was never written,
    ``unknown`` when it cannot be read (then nothing is rolled back by guesswork)."""
    try:
        doc = json.loads(fs.read_bytes(journal))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError, GemmperfInputError):
        return "unknown"
    return doc.get("state") if isinstance(doc, dict) and doc.get("state") in ("staging", "committed") \
        else "unknown"


def _roll_back(journal: Path, plans: list[Plan]) -> None:
    """Undo a staging transaction that failed with an ordinary error (disk full): remove its
    staged versions, the record directories it created, then the journal. Best effort: what a
    failure here leaves, the staging journal still names, and the next writer removes it."""
    try:
        for p in plans:
            if _pointed_version(p.dir) != p.version:  # never remove what a meta.json points to
                fs.rmtree(p.dir / p.version)
            if p.dir.is_dir() and not any(p.dir.iterdir()):  # this write created it
                fs.rmdir(p.dir)
                fs.rmdir(p.dir.parent)
        fs.unlink(journal)
        fs.fsync_dir(journal.parent)
    except (OSError, GemmperfInputError):
        pass


def apply(root: Path, journal: Path, entries: list[dict[str, str]], at: _Cursor | None = None) -> None:
    """Switch each record to its version, refresh its derived summary, remove what the old
    state left; then the journal. Idempotent: recovery runs it again after a crash."""
    at = at or _Cursor(journal)
    for e in entries:
        d = contained_relative(root, e["dir"])
        vdir = d / e["version"]
        try:
            meta_bytes = fs.read_bytes(vdir / META_FILE)
            summary = fs.read_bytes(vdir / SUMMARY_FILE)
        except FileNotFoundError:
            raise GemmperfInputError(journal, f"commits {vdir}, which is incomplete (edited by hand?): "
                                              "restore it or delete the journal") from None
        at.path = d / META_FILE
        if file_or_none(d / META_FILE) != meta_bytes:
            fs.atomic_write(d / META_FILE, meta_bytes)  # the switch
        at.path = d / SUMMARY_FILE
        if file_or_none(d / SUMMARY_FILE) != summary:
            fs.atomic_write(d / SUMMARY_FILE, summary)
        at.path = d
        clean_record(d, keep=e["version"])
    at.path = journal
    fs.unlink(journal)
    fs.fsync_dir(journal.parent)


def clean_record(d: Path, keep: str) -> None:
    """Remove the record's other versions, old-layout data files and temp files (lock held)."""
    for p in sorted(d.iterdir()):
        if p.is_dir() and _VERSION_RE.fullmatch(p.name) and p.name != keep:
            fs.rmtree(p)
        elif p.name.endswith(".tmp") and p.name.startswith("."):
            fs.unlink(p)
        elif p.name in (SAMPLES_FILE, VARIANCE_FILE):  # migrated into a version
            fs.unlink(p)


def recover(root: Path, report: Callable[[str], None] | None) -> None:
    """Roll committed journals forward and staging ones back; remove temp files and the
    remains of interrupted prunes (store lock held)."""
    tdir = contained(root, TXN_DIR)
    if tdir.is_dir():
        for p in sorted(tdir.glob(".*.tmp")):
            fs.unlink(p)
    for path, doc in journals(root):
        if doc is None:
            raise GemmperfInputError(path, "invalid or unreadable baseline journal (not written by gemmperf?): "
                                           "inspect the records it names, then delete it")
        if doc["state"] == "committed":
            apply(root, path, doc["records"])
            if report:
                report(f"completed an interrupted baseline write ({len(doc['records'])} record(s))")
            continue
        for e in doc["records"]:
            d = contained_relative(root, e["dir"])
            if _pointed_version(d) != e["version"]:  # never remove what a meta.json points to
                fs.rmtree(d / e["version"])
            if d.is_dir() and not any(d.iterdir()):  # an interrupted first write
                fs.rmdir(d)
                fs.rmdir(d.parent)
        fs.unlink(path)
        fs.fsync_dir(path.parent)
        if report:
            report(f"rolled back an interrupted baseline write ({len(doc['records'])} record(s))")
    if root.is_dir():
        for name in sorted(p.name for p in root.iterdir() if not p.name.startswith(".")):
            hw = contained(root, name)  # never remove prune debris through a planted link
            if hw.is_dir():
                for trash in sorted(hw.glob(".*.pruned-*")):
                    fs.rmtree(trash)
                if not any(hw.iterdir()):
                    fs.rmdir(hw)


def _pointed_version(d: Path) -> str | None:
    data = file_or_none(d / META_FILE)
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc.get("version") if isinstance(doc, dict) else None
