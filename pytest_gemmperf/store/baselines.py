"""The ``baselines/`` store (DESIGN.md section 7, regression-statistics.md 3.9): crash-proof.

Layout, one directory per (hardware key, test id)::

    <root>/<hw_key>/<test slug>/
        meta.json         THE POINTER: a byte copy of the current version's meta.json (schema
                          version, ids, generation, ``version``, SHA-256 of each data file, run
                          metadata). Switching a record to a new version is one ``os.replace``.
        summary.yaml      derived copy of the current version's summary, at a stable path for
                          pull-request review; rewritten after each switch, never read for data
        v<generation>/    one immutable version: samples.parquet, summary.yaml, optional
                          variance.parquet (variance history), meta.json
    <root>/.locks/store.lock   the writers' lock (git-ignored)
    <root>/.txn/<id>.json      the journal of a write in progress (git-ignored)

A record written by older gemmperf (``meta.json`` without ``version``, data files beside it)
loads as before and is migrated by its next write.

Writing (every write -- save, refresh of many records, learn -- is one transaction, under the
store lock): (1) write the journal ``state: staging`` naming each record's new version;
(2) write every new version directory in full, fsynced; (3) replace the journal by one with
``state: committed`` -- the single commit point of the whole transaction; (4) switch each
record's ``meta.json``, rewrite its derived summary, remove its old versions; (5) remove the
journal. A writer killed anywhere leaves either a staging journal (the next writer removes the
staged versions: all records stay old) or a committed one (the next writer redoes step 4,
which is idempotent: all records become new). Readers never write: they resolve a record
through a committed journal when one names it, so even before recovery every record of a
multi-record refresh reads as new, or every one as old. Pruning renames a record away in one
step, then deletes it. See ``tests/test_baseline_crash.py``: a kill at every step.

``load`` takes no lock: a version is complete before anything points to it, and a reader that
finds its version deleted under it (a writer switched and cleaned up) reads again, at last
under the writers' lock. ``load_all`` reads under the writers' lock where it can take it (not
on a read-only checkout, where nobody writes), so it never sees half of a live multi-record
refresh. A mismatch that persists is a hand-edited or half-merged record, reported as
damaged; :meth:`BaselineStore.list` with ``verify=True`` checks every checksum and names
damaged and incomplete records instead of failing on them, and ``load_all(damaged=[])`` skips
them. The transaction machinery is :mod:`pytest_gemmperf.store.transactions`, the file-system
steps :mod:`pytest_gemmperf.store.fs`, the record's encoding :mod:`pytest_gemmperf.store.record`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pandas as pd
from filelock import FileLock, Timeout

from pytest_gemmperf.errors import GemmperfInputError, output_error, writing
from pytest_gemmperf.store import fs
from pytest_gemmperf.store import transactions as txn
from pytest_gemmperf.store.hardware import sanitize
from pytest_gemmperf.redact import redact_record
from pytest_gemmperf.paths import contained
from pytest_gemmperf.store.record import (_DATA_FILES, META_FILE, SAMPLES_FILE,
                                          SCHEMA_VERSION, SUMMARY_FILE, VARIANCE_FILE, BaselineRecord,
                                          _changed_points, _check_summary, _now, _parse_blobs, _parse_meta,
                                          _samples_to_parquet, _sha256, _variance_from_parquet,
                                          _variance_to_parquet, add_history, diff_records, kept_points, known_points,
                                          legacy_keys, merge_records, normalize_samples, parse_time, render_summary,
                                          hashed_slug_for_test, run_keys, slug_for_test,
                                          version_name, versions_of)

LOCK_DIR = ".locks"
LOCK_FILE = "store.lock"
LOCK_TIMEOUT_S = 300.0
#: lock-free reads of a record before a reader waits for the writers' lock
_READ_TRIES = 3
_LIST_COLUMNS = ["test_id", "hw_key", "points", "kernels", "metrics", "rows", "history_runs", "updated",
                 "generation", "versions", "status"]


class _Mismatch(Exception):
    """Files disagree with the meta.json read: a writer may be cleaning up, or damage."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass
class _Current:
    """What a record directory holds now (under the lock)."""

    meta: dict[str, Any] | None  # parsed meta.json, None when absent or unreadable
    record: BaselineRecord | None  # None when absent or damaged
    blobs: dict[str, bytes]
    damage: GemmperfInputError | None  # set when the record exists but cannot be read
    #: the old key the record was found under (its next write goes to the new directory)
    migrated_from: str | None = None


class BaselineStore:
    """Baselines under ``root`` (usually ``baselines/`` in the repository)."""

    def __init__(self, root: str | os.PathLike, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.root = Path(root)
        self.lock_timeout_s = lock_timeout_s

    # ------------------------------------------------------------------ paths and the lock
    def path_for(self, test_id: str, hw_key: str) -> Path:
        """The record directory of ``test_id``. Readable names can coincide (``a/b.py`` and
        ``a_b.py`` both read ``a_b.py``): a name whose record belongs to another test sends
        this one to the name plus a hash of its id, so two tests never share a record."""
        hw = sanitize(hw_key)
        if hw.startswith("."):
            raise GemmperfInputError(None, f"invalid hardware key {hw_key!r}")
        plain = contained(self.root, hw, slug_for_test(test_id))
        owner = self._owner(plain)
        hashed = contained(self.root, hw, hashed_slug_for_test(test_id))
        if owner is None:
            return hashed if self._owner(hashed) == test_id else plain
        return plain if owner == test_id else hashed

    def _owner(self, d: Path) -> str | None:
        """The test id whose record ``d`` holds (None: no readable record there)."""
        meta_path = txn.targets(self.root).get(d) or d / META_FILE
        try:
            owner = _parse_meta(fs.read_bytes(meta_path), meta_path).get("test_id")
        except (OSError, GemmperfInputError):
            return None
        return owner if isinstance(owner, str) else None

    def files_dir(self, test_id: str, hw_key: str) -> Path | None:
        """The directory holding the record's current data files (its version directory, or
        the record directory for an old-layout record); None when there is no record."""
        d = self.path_for(test_id, hw_key)
        meta_path = txn.targets(self.root).get(d) or d / META_FILE
        try:
            meta = _parse_meta(fs.read_bytes(meta_path), meta_path)
        except FileNotFoundError:
            return None
        return d / meta["version"] if meta.get("version") else d

    def _lock(self) -> FileLock:
        return FileLock(txn.ignored_dir(self.root, LOCK_DIR) / LOCK_FILE, timeout=self.lock_timeout_s)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The writers' lock (one per store: a refresh of several records is one transaction)."""
        lock_path = self.root / LOCK_DIR / LOCK_FILE
        try:
            lock = self._lock()
            lock.acquire()
        except Timeout:
            raise GemmperfInputError(lock_path, f"baseline lock held by another process for more "
                                                f"than {self.lock_timeout_s:.0f} s") from None
        except OSError as exc:  # a read-only or full store: nothing was changed
            raise output_error(exc, lock_path, what="the baseline store's lock",
                               kept="no baseline was changed") from exc
        try:
            # any other refused write of a transaction: one line naming the file
            with writing(self.root, kept=txn.KEPT_OLD):
                yield
        finally:
            lock.release()

    # ------------------------------------------------------------------ reading
    def _read_consistent(self, d: Path, targets: dict[Path, Path]
                         ) -> tuple[dict[str, Any], Path, dict[str, bytes]] | None:
        """(meta, files dir, {file: bytes}) whose checksums agree; None when the record is
        absent. Raises ``_Mismatch`` when a file is missing or disagrees with meta.json, and
        ``GemmperfInputError`` when meta.json itself is unreadable."""
        meta_path = targets.get(d) or d / META_FILE
        try:
            meta_bytes = fs.read_bytes(meta_path)
        except FileNotFoundError:
            if meta_path != d / META_FILE:
                raise _Mismatch(meta_path, "missing") from None
            if (d / SAMPLES_FILE).exists():  # an old-layout record without its meta.json
                raise GemmperfInputError(meta_path, "missing (record has data files but no meta.json)")
            versions = txn.versions(d)
            if versions and d not in targets:  # no write in progress staged them: meta.json was lost
                raise GemmperfInputError(meta_path, f"missing (record has version {versions[-1]} but no "
                                                    "meta.json; `gemmperf baseline refresh` rewrites it)")
            return None  # absent, or a first write in progress / interrupted (list() names it)
        meta = _parse_meta(meta_bytes, meta_path)
        fdir = d / meta["version"] if meta.get("version") else d
        names = list(_DATA_FILES)
        entry = meta["files"].get(VARIANCE_FILE)
        if entry is not None:
            if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
                raise GemmperfInputError(meta_path, f"meta.json 'files' has no checksum of {VARIANCE_FILE}")
            names.append(VARIANCE_FILE)
        blobs: dict[str, bytes] = {}
        for name in names:
            try:
                blobs[name] = fs.read_bytes(fdir / name)
            except FileNotFoundError:
                raise _Mismatch(fdir / name, "missing") from None
            if _sha256(blobs[name]) != meta["files"][name]["sha256"]:
                raise _Mismatch(fdir / name, "does not match the checksum in meta.json (edited by hand or "
                                             "half-merged? run `gemmperf baseline refresh`)")
        if fdir != d and fdir / META_FILE != meta_path:
            # the version's own meta.json, which the pointer is a byte copy of: checked once the
            # record has parsed (_to_record), so damage to the data is named first
            try:
                blobs[META_FILE] = fs.read_bytes(fdir / META_FILE)
            except FileNotFoundError:
                raise _Mismatch(fdir / META_FILE, "missing") from None
        return meta, fdir, blobs

    def _read_record(self, d: Path, locked: bool = False) -> tuple[dict[str, Any], Path, dict[str, bytes]] | None:
        """:meth:`_read_consistent`, read again while a writer may be cleaning up under us, at
        last under the writers' lock (``locked``: the caller holds it); a mismatch that persists
        is damage (GemmperfInputError)."""
        for _ in range(0 if locked else _READ_TRIES):
            try:
                return self._read_consistent(d, txn.targets(self.root))
            except _Mismatch:
                time.sleep(0.01)
        # read-only checkout or timeout: nobody can be writing, the mismatch is real
        lock = None if locked else self._try_lock()
        try:
            return self._read_consistent(d, txn.targets(self.root))
        except _Mismatch as exc:
            raise GemmperfInputError(exc.path, exc.message) from None
        finally:
            if lock is not None:
                lock.release()

    @staticmethod
    def _to_record(meta: dict[str, Any], fdir: Path, blobs: dict[str, bytes]) -> BaselineRecord:
        _check_summary(blobs[SUMMARY_FILE], fdir / SUMMARY_FILE, meta)
        samples, variance = _parse_blobs(blobs, fdir)
        if META_FILE in blobs and _json_or_none(blobs[META_FILE]) != meta:
            # a version whose own meta.json is damaged is damaged: prune and a refresh's
            # salvage read that copy
            raise GemmperfInputError(fdir / META_FILE, f"differs from the record's {META_FILE}, of which it is "
                                                       "the version's copy (edited by hand or damaged? run "
                                                       "`gemmperf baseline refresh`)")
        return BaselineRecord(test_id=meta["test_id"], hw_key=meta["hw_key"], samples=samples,
                              meta=meta.get("metadata") or {}, schema_version=meta["schema_version"],
                              created=meta.get("created"), updated=meta.get("updated"),
                              generation=int(meta.get("generation", 0)), variance=variance)

    def _load_dir(self, d: Path, locked: bool = False) -> BaselineRecord | None:
        got = self._read_record(d, locked)
        return None if got is None else self._to_record(*got)

    def load(self, test_id: str, hw_key: str) -> BaselineRecord | None:
        """The baseline of ``test_id`` on ``hw_key``; None when there is none. A record written
        under an old key of the test (:func:`~pytest_gemmperf.store.record.legacy_keys`) is found
        there while the new key has none, with ``migrated_from`` set. A damaged record raises
        ``GemmperfInputError`` naming the file and what is wrong."""
        d = self.path_for(test_id, hw_key)
        rec = self._load_dir(d)
        if rec is None:
            return self._load_legacy(d, test_id, hw_key)
        if rec.test_id != test_id or rec.hw_key != hw_key:
            raise GemmperfInputError(d / META_FILE, f"holds test {rec.test_id!r} on {rec.hw_key!r}, "
                                                    f"expected {test_id!r} on {hw_key!r}")
        return rec

    def _load_legacy(self, d: Path, test_id: str, hw_key: str) -> BaselineRecord | None:
        """The first old-key record that really is this test's (a directory holding another
        test under that name is not), relabelled with the current id."""
        for old_id, slug in legacy_keys(test_id):
            rec = self._load_dir(d.parent / slug)
            if rec is not None and rec.test_id == old_id and rec.hw_key == hw_key:
                return dataclasses.replace(rec, test_id=test_id, migrated_from=old_id)
        return None

    def load_path(self, record_dir: str | os.PathLike) -> BaselineRecord | None:
        """The record in ``record_dir`` (``<root>/<hw_key>/<slug>``); None when there is none."""
        d = Path(record_dir)
        rec = self._load_dir(d)
        if rec is not None:
            self._check_dir(d, rec)
        return rec

    def _record_dirs(self, hw_key: str | None = None) -> list[Path]:
        if not self.root.is_dir():
            return []
        names = [sanitize(hw_key)] if hw_key else sorted(p.name for p in self.root.iterdir())
        out = []
        for name in names:
            if name.startswith("."):
                continue
            # a link planted at a hardware key or a record would let prune and recovery
            # delete what it points to: contained() refuses it, naming it
            hw = contained(self.root, name)
            if not hw.is_dir():
                continue
            out += [contained(self.root, name, d.name) for d in sorted(hw.iterdir())
                    if not d.name.startswith(".") and (d.is_dir() or d.is_symlink())]
        return out

    def _check_dir(self, d: Path, rec: BaselineRecord) -> None:
        if rec.hw_key != d.parent.name:
            raise GemmperfInputError(d / META_FILE, f"hw_key {rec.hw_key!r} does not match its "
                                                    f"directory {d.parent.name!r}")

    def load_all(self, hw_key: str | None = None, *,
                 damaged: list[GemmperfInputError] | None = None) -> list[BaselineRecord]:
        """Every record (of ``hw_key``). A damaged record raises, unless ``damaged`` is a list:
        then its error is appended there and the other records still load."""
        # under the writers' lock when we can take it: one consistent snapshot, never half of a
        # concurrent multi-record refresh (a read-only checkout has no writers to fear)
        lock = self._try_lock()
        try:
            recs = []
            for d in self._record_dirs(hw_key):
                try:
                    rec = self._load_dir(d, locked=lock is not None)
                    if rec is not None:
                        self._check_dir(d, rec)
                        recs.append(rec)
                except GemmperfInputError as exc:
                    if damaged is None:
                        raise
                    damaged.append(exc)
            return recs
        finally:
            if lock is not None:
                lock.release()

    def _try_lock(self) -> FileLock | None:
        """The writers' lock, None where it cannot be taken (read-only checkout, timeout)."""
        if not self.root.is_dir():
            return None
        try:
            lock = self._lock()
            lock.acquire()
        except (OSError, Timeout):
            return None
        return lock

    def list(self, hw_key: str | None = None, *, verify: bool = False) -> pd.DataFrame:
        """One row per record directory: test_id, hw_key, points, kernels, metrics, rows,
        history_runs, updated, generation, versions, status. Never raises for one record.

        ``status``: ``ok`` (with ``verify``: every checksum and file checked), ``not verified``
        (meta.json read only), ``damaged: ...`` or ``incomplete: ...`` with the reason."""
        rows = []
        targets = txn.targets(self.root)
        for d in self._record_dirs(hw_key):
            row: dict[str, Any] = {"test_id": None, "hw_key": d.parent.name}
            meta_path = targets.get(d) or d / META_FILE
            try:
                meta = _parse_meta(fs.read_bytes(meta_path), meta_path)
            except FileNotFoundError:
                row.update(test_id=f"? ({d.name})", status=self._absent_status(d, d in targets))
                rows.append(row)
                continue
            except GemmperfInputError as exc:
                row.update(test_id=f"? ({d.name})", status=f"damaged: {exc}")
                rows.append(row)
                continue
            st = meta.get("stats") if isinstance(meta.get("stats"), dict) else {}
            v = versions_of(meta.get("metadata") if isinstance(meta.get("metadata"), dict) else {})
            row.update(test_id=meta["test_id"], hw_key=meta["hw_key"], points=st.get("points"),
                       kernels=st.get("kernels"), metrics=st.get("metrics"), rows=st.get("rows"),
                       history_runs=st.get("history_runs", 0), updated=meta.get("updated"),
                       generation=meta.get("generation"),
                       versions=", ".join(f"{k.removesuffix('_version')} {v[k]}" for k in
                                          ("rocm_version", "rocprofv3_version", "torch_version") if v.get(k)),
                       status="not verified")
            if verify:
                try:
                    rec = self._load_dir(d)
                    if rec is None:
                        raise GemmperfInputError(meta_path, "vanished while listing")
                    self._check_dir(d, rec)
                    row["status"] = "ok"
                    if meta.get("version") and d not in targets:
                        try:
                            derived = fs.read_bytes(d / SUMMARY_FILE)
                        except FileNotFoundError:
                            derived = None
                        if derived is None or _sha256(derived) != meta["files"][SUMMARY_FILE]["sha256"]:
                            row["status"] = "ok (summary.yaml copy stale: the next write rewrites it)"
                except GemmperfInputError as exc:
                    row["status"] = f"damaged: {exc}"
            rows.append(row)
        out = pd.DataFrame(rows, columns=_LIST_COLUMNS)
        for c in ("points", "kernels", "metrics", "rows", "history_runs", "generation"):
            # counts stay integers beside a damaged record's missing ones (not 2.0 / NaN)
            out[c] = pd.to_numeric(out[c], errors="coerce").astype("Int64")
        return out.sort_values(["test_id", "hw_key"], ignore_index=True)

    @staticmethod
    def _absent_status(d: Path, in_journal: bool) -> str:
        if in_journal:
            return "incomplete: its first write is in progress or was interrupted (the next write rolls it back)"
        if (d / SAMPLES_FILE).exists():
            return f"incomplete: {d / META_FILE} missing (data files without meta.json)"
        versions = txn.versions(d)
        if versions:
            return (f"incomplete: {d / META_FILE} missing; version(s) {', '.join(versions)} unreferenced "
                    "(deleted meta.json? the next refresh replaces it)")
        return f"incomplete: {d} holds no record"

    # ------------------------------------------------------------------ writing
    def save(self, record: BaselineRecord, *, merge: bool = False) -> bool:
        """Write ``record`` (one transaction). ``merge``: per point, see :meth:`save_many`.
        Returns False (and writes nothing) when the stored record would not change."""
        return self.save_many([record], merge=merge)[0]

    def save_many(self, records: Iterable[BaselineRecord], *, merge: bool = False,
                  report: Callable[[str], None] | None = None) -> list[bool]:
        """Write several records as ONE transaction: after a crash at any instant, all of them
        read as before or all as after. Returns, per record, whether it was rewritten.

        ``merge`` (what refresh and pytest do): each record's points replace the stored ones of
        the same name and the stored points it lacks are kept (:func:`merge_records`); without
        it the record replaces the stored one whole. The variance history is the store's: the
        stored one is kept (salvaged from a damaged record when its own checksum holds), and
        for every point whose samples this write replaces, the replaced run's contribution is
        added to it."""
        records = list(records)
        prepared = []
        for rec in records:
            d = self.path_for(rec.test_id, rec.hw_key)
            if d in {p[0] for p in prepared}:
                raise GemmperfInputError(d, f"two records for {rec.test_id!r} on {rec.hw_key!r} in one write")
            prepared.append((d, rec))
        done = []
        with self._locked():
            txn.recover(self.root, report)
            plans = []
            for d, rec in prepared:  # merged with the stored record, so encoded under the lock
                cur = self._current_or_legacy(d, rec.test_id, rec.hw_key)
                if cur.damage is not None and report:
                    report(f"replacing damaged record of {rec.hw_key} {rec.test_id}: {cur.damage}")
                merged = merge_records(cur.record, rec, replace=not merge)
                kept = kept_points(cur.record, rec) if merge else []
                if kept and report:
                    report(f"kept {len(kept)} stored point(s) of {rec.hw_key} {rec.test_id} that the new data "
                           f"lacks ({', '.join(kept)}; --replace removes them)")
                plan = self._plan_save(d, merged, cur, report)
                done.append(plan is not None)
                if plan is not None:
                    plans.append(plan)
                elif cur.migrated_from is None:
                    self._repair_summary_copy(d, cur, report)
            if plans:
                self._commit(plans)
        return done

    @staticmethod
    def _repair_summary_copy(d: Path, cur: _Current, report: Callable[[str], None] | None) -> None:
        """A record that does not change still gets its derived ``summary.yaml`` back when that
        copy was damaged or edited (the lock is held; the copy is checksummed by nothing)."""
        if cur.meta is None or not cur.meta.get("version") or SUMMARY_FILE not in cur.blobs:
            return
        path = d / SUMMARY_FILE
        try:
            derived = fs.read_bytes(path)
        except FileNotFoundError:
            derived = None
        if derived == cur.blobs[SUMMARY_FILE]:
            return
        fs.atomic_write(path, cur.blobs[SUMMARY_FILE])
        if report:
            report(f"rewrote {path}: it differed from its version's summary (damaged or edited by hand)")

    def learn(self, test_id: str, hw_key: str, samples: pd.DataFrame, run: str,
              report: Callable[[str], None] | None = None) -> bool:
        """Add one run's between-process variance to the history of an existing baseline
        without changing its samples. False when there is no baseline, or the run is already
        in the history, by its ``run`` label or by its data (:func:`run_keys`: the same results
        learned twice, or under another name): its evidence would count twice. ``report`` gets
        one line per point not added for that reason."""
        d = self.path_for(test_id, hw_key)
        with self._locked():
            txn.recover(self.root, None)
            cur = self._current_or_legacy(d, test_id, hw_key)
            if cur.damage is not None:
                raise cur.damage
            if cur.record is None:
                return False
            stored, history = cur.record.samples, cur.record.variance
            if history is not None and (history["run"].astype(str) == str(run)).any():
                if report:
                    report(f"run {run} of {test_id} already in the variance history; not added again")
                return False
            points = set(stored["point"].astype(str)) & set(samples["point"].astype(str))
            for p in known_points(history, run_keys(samples, points)):
                points.discard(p)
                if report:
                    report(f"run {run} of {test_id}[{p}] already in the variance history; not added again")
            variance = add_history(history, samples, run, points)
            if (history is not None and variance.equals(history)) or (history is None and not len(variance)):
                return False
            samples_bytes, summary_bytes = cur.blobs[SAMPLES_FILE], cur.blobs[SUMMARY_FILE]
            if cur.migrated_from is not None:  # the summary names the old key: encode anew
                normal = normalize_samples(stored, d / SAMPLES_FILE)
                samples_bytes, summary_bytes = _samples_to_parquet(normal), render_summary(cur.record, normal)
            self._commit([self._plan(d, cur.record, cur.meta, samples_bytes, summary_bytes, variance)])
        return True

    def recover(self) -> list[str]:
        """Finish or undo what killed writers left (journals, staged versions, temp files,
        pruned directories); returns what was done. Every writer does this first."""
        notes: list[str] = []
        with self._locked():
            txn.recover(self.root, notes.append)
        return notes

    def _current(self, d: Path, test_id: str) -> _Current:
        """The record in ``d`` as stored (the caller holds the lock; journals are recovered)."""
        try:
            got = self._read_consistent(d, {})
        except (_Mismatch, GemmperfInputError) as exc:
            err = GemmperfInputError(exc.path, exc.message) if isinstance(exc, _Mismatch) else exc
            meta = None
            try:
                meta = _parse_meta(fs.read_bytes(d / META_FILE), d / META_FILE)
            except (OSError, GemmperfInputError):
                pass
            self._check_collision(d, meta, test_id)
            return _Current(meta, None, {}, err)
        if got is None:
            return _Current(None, None, {}, None)
        meta, fdir, blobs = got
        self._check_collision(d, meta, test_id)
        try:
            rec = self._to_record(meta, fdir, blobs)
        except GemmperfInputError as exc:
            return _Current(meta, None, blobs, exc)
        return _Current(meta, rec, blobs, None)

    def _current_or_legacy(self, d: Path, test_id: str, hw_key: str) -> _Current:
        """:meth:`_current`, or, when ``d`` holds nothing at all, the record of an old key of
        the test (relabelled, ``migrated_from`` set): read old, write new. The old directory is
        left as it is (another item may still be reading it); ``baseline prune`` removes it."""
        cur = self._current(d, test_id)
        if cur.meta is not None or cur.damage is not None:
            return cur
        for old_id, slug in legacy_keys(test_id):
            try:
                old = self._current(d.parent / slug, old_id)
            except GemmperfInputError:  # the directory holds another test: not ours
                continue
            if old.record is not None and old.record.hw_key == hw_key:
                rec = dataclasses.replace(old.record, test_id=test_id, migrated_from=old_id)
                return _Current(old.meta, rec, old.blobs, None, migrated_from=old_id)
        return cur

    @staticmethod
    def _check_collision(d: Path, meta: dict[str, Any] | None, test_id: str) -> None:
        if meta is not None and meta.get("test_id") != test_id:
            raise GemmperfInputError(d / META_FILE, f"directory already holds test {meta.get('test_id')!r} "
                                                    f"(test ids {test_id!r} collide after sanitizing)")

    def _plan_save(self, d: Path, record: BaselineRecord, cur: _Current,
                   report: Callable[[str], None] | None) -> txn.Plan | None:
        samples = normalize_samples(record.samples, d / SAMPLES_FILE)
        if samples.empty:
            raise GemmperfInputError(d, f"refusing to save an empty baseline for {record.test_id!r}")
        record = BaselineRecord(**{**record.__dict__, "samples": samples})
        samples_bytes = _samples_to_parquet(samples)
        summary_bytes = render_summary(record, samples)
        old = cur.record
        if (old is not None and cur.migrated_from is None and cur.blobs[SAMPLES_FILE] == samples_bytes
                and cur.blobs[SUMMARY_FILE] == summary_bytes):
            return None  # nothing changes: no write, no diff for reviewers
        if old is not None:
            changed = _changed_points(old.samples, samples)
            variance = old.variance
            if changed:
                run = (f"baseline generation {cur.meta.get('generation', 0)} "
                       f"({cur.meta.get('updated', 'unknown date')})")
                for p in known_points(variance, run_keys(old.samples, changed)):
                    if report:  # e.g. alternating refreshes from two results directories
                        report(f"run {run} of {record.test_id}[{p}] already in the variance history; "
                               "not added again")
                variance = add_history(variance, old.samples, run, changed)
        else:
            variance = self._salvage_history(d, cur, report) if cur.damage else None
        return self._plan(d, record, cur.meta, samples_bytes, summary_bytes, variance)

    def _salvage_history(self, d: Path, cur: _Current, report: Callable[[str], None] | None
                         ) -> pd.DataFrame | None:
        """The variance history of a damaged record, when some copy of it still checks out:
        the current meta's own checksum, else the newest version whose meta.json vouches for
        it, else an old-layout file that parses as a valid history. Repairing a record by a
        refresh must not throw away runs of evidence."""
        candidates: list[tuple[Path, dict[str, Any] | None]] = []
        if cur.meta is not None:
            fdir = d / cur.meta["version"] if cur.meta.get("version") else d
            candidates.append((fdir, cur.meta))
        for v in reversed([d / n for n in txn.versions(d)]):
            try:
                candidates.append((v, _parse_meta(fs.read_bytes(v / META_FILE), v / META_FILE)))
            except (OSError, GemmperfInputError):
                continue
        candidates.append((d, None))
        for fdir, meta in candidates:
            path = fdir / VARIANCE_FILE
            try:
                data = fs.read_bytes(path)
            except (OSError, GemmperfInputError):
                continue
            entry = (meta or {}).get("files", {}).get(VARIANCE_FILE)
            if meta is not None and not (isinstance(entry, dict) and entry.get("sha256") == _sha256(data)):
                continue
            try:
                history = _variance_from_parquet(data, path)
            except GemmperfInputError:
                continue
            if report:
                report(f"kept the variance history of damaged record {d} from {path}")
            return history
        return None

    def _plan(self, d: Path, record: BaselineRecord, old: dict[str, Any] | None, samples_bytes: bytes,
              summary_bytes: bytes, variance: pd.DataFrame | None) -> txn.Plan:
        """The files of the record's next version, meta.json included."""
        samples = record.samples
        now = _now()
        blobs = {SAMPLES_FILE: samples_bytes, SUMMARY_FILE: summary_bytes}
        if variance is not None and len(variance):
            blobs[VARIANCE_FILE] = _variance_to_parquet(variance)
        on_disk = [int(n[1:]) for n in txn.versions(d)]
        generation = max([int((old or {}).get("generation", 0))] + on_disk) + 1
        meta = {
            "schema_version": SCHEMA_VERSION,
            "test_id": record.test_id,
            "hw_key": record.hw_key,
            "generation": generation,
            "version": version_name(generation),
            "created": (old or {}).get("created") or now,
            "updated": now,
            "files": {n: {"sha256": _sha256(b), "bytes": len(b)} for n, b in blobs.items()},
            "stats": {"points": int(samples["point"].nunique()), "kernels": int(samples["kernel"].nunique()),
                      "metrics": int(samples["metric"].nunique()), "units": int(samples["unit"].nunique()),
                      "rows": int(len(samples)),
                      "history_runs": int(variance["seq"].nunique()) if VARIANCE_FILE in blobs else 0},
            # committed to git: env and commands redacted, also those of an older record
            "metadata": redact_record(record.meta),
        }
        try:
            blobs[META_FILE] = (json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n").encode()
        except (TypeError, ValueError) as exc:
            raise GemmperfInputError(d / META_FILE, f"metadata is not JSON-serializable: {exc}") from None
        return txn.Plan(d, meta["version"], blobs)

    def _commit(self, plans: list[txn.Plan]) -> None:
        """One transaction over ``plans`` (:func:`transactions.run`; the lock is held)."""
        txn.run(self.root, plans)

    # ------------------------------------------------------------------ pruning
    def prune(self, keep_test_ids: Iterable[str] | None = None,
              older_than: _dt.timedelta | float | None = None, dry_run: bool = False,
              hw_key: str | None = None, report: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
        """Remove records whose test id is not in ``keep_test_ids`` (when given) or whose last
        update is older than ``older_than`` (timedelta or days). Returns what was (or, with
        ``dry_run``, would be) removed: dicts with test_id, hw_key, updated, path, reason.
        Each removal is one rename (the record vanishes at once), then a private delete. A
        record whose meta.json cannot be read is left alone and named through ``report``."""
        keep = None if keep_test_ids is None else set(keep_test_ids)
        if older_than is not None and not isinstance(older_than, _dt.timedelta):
            older_than = _dt.timedelta(days=float(older_than))
        cutoff = _dt.datetime.now(_dt.timezone.utc) - older_than if older_than is not None else None
        removed = []
        with self._locked() if not dry_run else _nothing():
            if not dry_run:
                txn.recover(self.root, report)
            for d in self._record_dirs(hw_key):
                try:
                    m = _parse_meta(fs.read_bytes(d / META_FILE), d / META_FILE)
                except FileNotFoundError:
                    continue
                except GemmperfInputError as exc:
                    if report:
                        report(f"skipped (damaged, not pruned): {exc}")
                    continue
                reason = None
                if keep is not None and m["test_id"] not in keep:
                    reason = "test no longer exists"
                elif cutoff is not None:
                    updated = parse_time(m.get("updated"))
                    if updated is None or updated < cutoff:
                        reason = f"not updated for more than {older_than.days} days"
                if reason is None:
                    continue
                removed.append({"test_id": m["test_id"], "hw_key": m["hw_key"], "updated": m.get("updated"),
                                "path": str(d), "reason": reason})
                if not dry_run:
                    trash = d.parent / f".{d.name}.pruned-{secrets.token_hex(4)}"
                    fs.replace(d, trash)
                    fs.rmtree(trash)
                    if fs.rmdir(d.parent):  # only when this was the hw key's last record
                        fs.fsync_dir(d.parent.parent)
        return removed

    # ------------------------------------------------------------------ comparing
    @staticmethod
    def diff(old: BaselineRecord | pd.DataFrame | None, new: BaselineRecord | pd.DataFrame | None) -> pd.DataFrame:
        """Per (point, kernel, metric): old/new median and unit count, ratio new/old, and
        ``change`` in added / removed / changed / unchanged (:func:`record.diff_records`)."""
        return diff_records(old, new)


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None


@contextmanager
def _nothing() -> Iterator[None]:
    yield
