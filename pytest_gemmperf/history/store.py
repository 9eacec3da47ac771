"""The run-history store: an append-only, partitioned Parquet dataset at a directory or fsspec URL.

Layout (hive partitioning, values percent-encoded so any test id or hardware key is one path
segment)::

    <root>/hw_key=<key>/test=<test id>/<run id>--<uuid>.parquet

Every file is **immutable** and written once: one file per call of :meth:`HistoryStore.append`
and test, so any number of writers (CI machines, xdist workers) append concurrently without a
lock and without ever reading, modifying or rewriting another file. A local file is written to
a hidden temporary name in its final directory (dataset discovery skips names starting with
``.``), fsync-ed, and hard-linked to its final name (``link(2)`` refuses an existing name: no
file is ever overwritten); object stores get one put of the complete object, which is atomic
there. Each file carries its run's metadata as columns (``run_id, time, commit, branch`` and a
JSON ``run_meta``: versions, telemetry summary), so :meth:`HistoryStore.runs` needs no second
file.

A run id is recorded once per (hardware key, test, point): :meth:`HistoryStore.append` refuses
values for a point the run already holds, unless ``replace``, which writes the new file first and
then deletes the old one. Readers never count a run twice even when two files of one run and
point exist anyway (a writer killed between those two steps, two concurrent writers): only the
newest file (its ``written`` stamp, then its name) of each (hardware key, test, run, point) is
read. Reading is pyarrow.dataset's job (partition pruning, filters pushed down); when a scan
fails, each file is opened on its own to name the damaged one in a
:class:`~pytest_gemmperf.errors.GemmperfInputError`.
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import io
import json
import os
import re
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pytest_gemmperf.errors import GemmperfInputError, writing
from pytest_gemmperf.redact import redact_record
from pytest_gemmperf.paths import contained, contained_relative
from pyarrow.fs import LocalFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem
from pyarrow.fs import FileSelector, FileType

HISTORY_COLUMNS = ("run_id", "time", "commit", "branch", "hw_key", "test",
                   "point", "kernel", "metric", "unit", "value")
#: columns inside each file (hw_key and test are the partition directories)
FILE_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("time", pa.timestamp("ns", tz="UTC")), ("commit", pa.string()),
    ("branch", pa.string()), ("point", pa.string()), ("kernel", pa.string()), ("metric", pa.string()),
    ("unit", pa.string()), ("value", pa.float64()), ("run_meta", pa.string()),
    # when the file was written: of two files of one run and point, readers keep the newer
    # (files written before this column existed read it as null: oldest)
    ("written", pa.timestamp("ns", tz="UTC")),
    # the whole test id: its partition directory holds a shortened one when the id is longer
    # than a file name may be (files written before this column existed: the directory's)
    ("test_id", pa.string()),
    # per row, a hash of its point's values (data_key()): one run's data is recorded once,
    # whatever run id it is given (null in files written before this column existed)
    ("data_key", pa.string()),
])
PARTITION_SCHEMA = pa.schema([("hw_key", pa.string()), ("test", pa.string())])
DATASET_SCHEMA = pa.schema(list(FILE_SCHEMA) + list(PARTITION_SCHEMA))
#: what one run's values are unique by: a second file with the same key is a duplicate
_RUN_KEY = ("hw_key", "test", "run_id", "point")
#: columns a history file cannot lack (a null here means a stray, non-history Parquet file)
_REQUIRED = ("run_id", "time", "point", "kernel", "metric", "unit")
RUNS_COLUMNS = ("run_id", "time", "commit", "branch", "hw_key", "tests", "files", "meta")


@dataclass
class RunInfo:
    """Metadata of one run: ``time`` (any ``pd.Timestamp`` input; naive means UTC),
    ``commit``/``branch`` when known, the hardware key, and ``meta`` (versions, telemetry
    summary, source path: anything JSON-able; stored as JSON in every file of the run)."""

    run_id: str
    time: Any = None
    commit: str | None = None
    branch: str | None = None
    hw_key: str = "unknown"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.run_id = str(self.run_id or "").strip()
        if not self.run_id:
            raise GemmperfInputError(None, "a history run needs a non-empty run id")
        try:
            t = pd.Timestamp(_dt.datetime.now(_dt.timezone.utc) if self.time is None else self.time)
        except (ValueError, TypeError) as exc:
            raise GemmperfInputError(None, f"run time {self.time!r} is not ISO 8601: {exc}") from None
        if t is pd.NaT:
            raise GemmperfInputError(None, f"run time {self.time!r} is not a time")
        self.time = t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")
        self.commit = str(self.commit) if self.commit else None
        self.branch = str(self.branch) if self.branch else None
        self.hw_key = str(self.hw_key or "unknown")


def _empty_history() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=("datetime64[ns, UTC]" if c == "time" else
                                               np.float64 if c == "value" else object))
                         for c in HISTORY_COLUMNS})


class HistoryStore:
    """Run history at ``url``: a local directory (``~`` expanded) or any fsspec URL
    (``memory://``, ``file://``, ``s3://``... with the filesystem's package installed)."""

    def __init__(self, url: str | os.PathLike) -> None:
        # lazy: optional dependency
        import fsspec

        text = os.fspath(url)
        if "://" not in text:
            text = os.path.abspath(os.path.expanduser(text))
        self.url = text
        try:
            self.fs, self.root = fsspec.core.url_to_fs(text)
        except (ImportError, ValueError) as exc:  # unknown protocol / its package missing
            raise GemmperfInputError(text, f"cannot open history store: {exc}") from None
        self.root = self.root.rstrip("/") or "/"
        protocol = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self.local = "file" in protocol or "local" in protocol

    # ------------------------------------------------------------------------------- writing
    def append(self, values: pd.DataFrame, run: RunInfo, *, replace: bool = False) -> str:
        """Write ``values`` (``test, point, kernel, metric, unit, value``, e.g. from
        :func:`~pytest_gemmperf.history.values.history_values`) as new immutable file(s), one
        per test. Returns the file written (or the store URL when several tests were).

        A point the run already holds (same hardware key and test) is refused with a
        :class:`GemmperfInputError` before anything is written, unless ``replace``: then the
        run's files holding those points are deleted once the new files are written."""
        paths = self.append_files(values, run, replace=replace)
        return paths[0] if len(paths) == 1 else self.url

    def append_files(self, values: pd.DataFrame, run: RunInfo, *, replace: bool = False) -> list[str]:
        """:meth:`append`, returning every file written."""
        need = ("test", "point", "kernel", "metric", "unit", "value")
        missing = [c for c in need if c not in values.columns]
        if missing:
            raise GemmperfInputError(None, f"history values lack {', '.join(missing)}")
        if len(values) == 0:
            raise GemmperfInputError(None, f"run {run.run_id!r}: no values to record")
        meta = json.dumps(redact_record(run.meta or {}), sort_keys=True, default=str)
        parts = list(values.groupby(values["test"].astype(str), sort=True))
        keys = {str(test): data_keys(part, run.time) for test, part in parts}
        # every test is checked before any file is written: a refused run writes nothing
        replaced = [self._clash(run, str(test), set(part["point"].astype(str)), replace)
                    + self._same_data(run, str(test), keys[str(test)], replace) for test, part in parts]
        written = time.time_ns()
        paths = []
        for test, part in parts:
            n = len(part)
            table = pa.table({
                "run_id": pa.array([run.run_id] * n, pa.string()),
                "time": pa.array(np.full(n, run.time.value, dtype=np.int64), pa.int64()).cast(FILE_SCHEMA.field("time").type),
                "commit": pa.array([run.commit] * n, pa.string()),
                "branch": pa.array([run.branch] * n, pa.string()),
                **{c: pa.array(part[c].astype(str).to_numpy(object), pa.string())
                   for c in ("point", "kernel", "metric", "unit")},
                "value": pa.array(pd.to_numeric(part["value"], errors="coerce").to_numpy(np.float64)),
                "run_meta": pa.array([meta] * n, pa.string()),
                "written": pa.array(np.full(n, written, dtype=np.int64), pa.int64()).cast(FILE_SCHEMA.field("written").type),
                "test_id": pa.array([str(test)] * n, pa.string()),
                "data_key": pa.array(part["point"].astype(str).map(keys[str(test)]).to_numpy(object), pa.string()),
            }, schema=FILE_SCHEMA)
            buf = io.BytesIO()
            pq.write_table(table, buf, compression="zstd")
            directory = self._partition_dir(_segment('hw_key', run.hw_key), _segment('test', test_partition(str(test))))
            path = f"{directory}/{_file_stem(run.run_id)}--{uuid.uuid4().hex[:16]}.parquet"
            # a full or read-only history is named as the history's, never as the input's
            try:
                with writing(self._display(path), what="history file", kept="nothing of this run recorded"):
                    self._put(directory, path, buf.getvalue())
            except BaseException:
                for done in paths:  # all of the run or none of it: a retry is not refused as recorded
                    try:
                        self.fs.rm_file(self._local_file(done) if self.local else done)
                    except (OSError, GemmperfInputError):
                        pass
                raise
            paths.append(path)
        for old in sorted({f for files in replaced for f in files}):
            with writing(self._display(old), what="history file"):
                self.fs.rm_file(old)  # after the new file: readers see the old run or the new, never none
        return [self._display(p) for p in paths]

    def _partition_dir(self, *segments: str) -> str:
        """A partition directory below the root; locally, a segment that is not one plain
        name or a link planted in the store is refused (one line naming it), so an append
        never lands outside the store."""
        if self.local:
            return os.fspath(contained(self.root, *segments))
        return "/".join([self.root, *segments])

    def _local_file(self, path: str) -> str:
        """``path`` (a file the dataset listed) after checking it lies below the root through
        no link: prune deletes only files of this store."""
        rel = os.path.relpath(path, self.root)
        if rel.startswith(".." + os.sep) or rel == ".." or os.path.isabs(rel):
            raise GemmperfInputError(path, f"lies outside the history store {self.root}; not deleted")
        return os.fspath(contained_relative(self.root, rel))
    def _clash(self, run: RunInfo, test: str, points: set[str], replace: bool) -> list[str]:
        """Files in which ``run`` already holds one of ``points`` of ``test``: refused unless
        ``replace`` (then they are what the new file replaces)."""
        files = self._run_files(run.hw_key, test, run.run_id, points)
        if files and not replace:
            held = sorted({p for ps in files.values() for p in ps})
            raise GemmperfInputError(self._display(next(iter(files))),
                                     f"run {run.run_id!r} is already in the history ({test} on {run.hw_key}, "
                                     f"point(s) {', '.join(held)}); not recorded again (--replace replaces it)")
        return sorted(files)

    def _same_data(self, run: RunInfo, test: str, keys: dict[str, str], replace: bool) -> list[str]:
        """Files in which another run id holds the very values of a point of ``keys`` (the same
        results recorded again under a new id): refused unless ``replace``, which moves them to
        ``run`` (the files are what the new file replaces)."""
        dataset = self._dataset(run.hw_key, test)
        if dataset is None:
            return []
        filt = ds.field("data_key").isin(sorted(set(keys.values()))) & (ds.field("run_id") != run.run_id)
        found = self._scan(dataset, ["run_id", "point"], filt, keep_filename=True)
        if found.num_rows == 0:
            return []
        if not replace:
            other = sorted(set(found["run_id"].to_pylist()))
            points = sorted(set(found["point"].to_pylist()))
            raise GemmperfInputError(self._display(found["__filename"][0].as_py()),
                                     f"the values of run {run.run_id!r} ({test} on {run.hw_key}, point(s) "
                                     f"{', '.join(points)}) are already in the history as run {other[0]!r}; "
                                     "a run is recorded once (--replace moves it to the new id)")
        return sorted(set(found["__filename"].to_pylist()))

    def _run_files(self, hw_key: str, test: str, run_id: str, points: set[str]) -> dict[str, set[str]]:
        """{file: points of ``points`` it holds} of the files of ``run_id`` under ``hw_key``/``test``."""
        dataset = self._dataset(hw_key, test)
        if dataset is None:
            return {}
        found = self._scan(dataset, ["point"], ds.field("run_id") == run_id, keep_filename=True)
        out: dict[str, set[str]] = {}
        for path, point in zip(found["__filename"].to_pylist(), found["point"].to_pylist()):
            if point in points:
                out.setdefault(path, set()).add(point)
        return out

    def _put(self, directory: str, path: str, data: bytes) -> None:
        if not self.local:
            if self.fs.exists(path):  # a uuid collision: never overwrite
                raise FileExistsError(errno.EEXIST, "history file exists", path)
            self.fs.pipe_file(path, data)  # one put of a complete object
            return
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)  # fails on an existing name: never overwrites
            except OSError as exc:
                if exc.errno == errno.EEXIST:
                    raise
                os.replace(tmp, path)  # a file system without hard links; the name is a fresh uuid
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        try:  # make the new directory entry durable too
            dfd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass

    # ------------------------------------------------------------------------------- reading
    def _display(self, path: str) -> str:
        return path if self.local else self.fs.unstrip_protocol(path)

    def _dataset(self, hw_key: str | None = None, test: str | None = None) -> ds.Dataset | None:
        """The dataset of the history files below the narrowest partition directory the filters
        allow (only that part is listed), or None when nothing is stored there."""
        base = self.root
        if hw_key is not None:
            base += "/" + _segment("hw_key", hw_key)
            if test is not None:
                base += "/" + _segment("test", test_partition(str(test)))
        try:
            if not self.fs.isdir(base):
                if self.fs.exists(base):
                    raise GemmperfInputError(self._display(base), "history store is not a directory")
                return None
            if self.local:
                pafs = LocalFileSystem()
            else:
                pafs = PyFileSystem(FSSpecHandler(self.fs))

            # history files only: *.parquet, no hidden/temporary segment (".x.tmp", "_x"); any
            # other file a person leaves in the directory is neither read nor ever pruned
            files = sorted(i.path for i in pafs.get_file_info(FileSelector(base, recursive=True))
                           if i.type == FileType.File and i.path.endswith(".parquet")
                           and not any(seg.startswith((".", "_")) for seg in i.path[len(base):].split("/")))
            if not files:
                return None
            return ds.dataset(files, filesystem=pafs, format="parquet", schema=DATASET_SCHEMA,
                              partitioning=ds.partitioning(PARTITION_SCHEMA, flavor="hive"),
                              partition_base_dir=self.root)
        except (OSError, pa.ArrowException) as exc:
            raise GemmperfInputError(self._display(base), f"cannot list history store: {exc}") from None

    def _scan(self, dataset: ds.Dataset, columns: list[str], filt=None, *, keep_filename: bool = False) -> pa.Table:
        """Scan with the engine; on failure open each file on its own and name the bad one."""
        try:
            table = dataset.to_table(columns=[*columns, "__filename"], filter=filt)
        except (OSError, pa.ArrowException) as exc:
            self._raise_bad_file(dataset, exc)
            raise GemmperfInputError(self.url, f"cannot read history: {_first_line(exc)}") from None
        for col in (c for c in _REQUIRED if c in columns):
            nulls = pc.is_null(table[col])
            if pc.any(nulls).as_py():
                bad = table["__filename"].filter(nulls)[0].as_py()
                raise GemmperfInputError(self._display(bad), f"not a history file (no {col!r} values)")
        return table if keep_filename else table.drop_columns(["__filename"])

    def _raise_bad_file(self, dataset: ds.Dataset, exc: BaseException) -> None:
        for frag in dataset.get_fragments():
            try:
                t = frag.to_table(schema=DATASET_SCHEMA)
            except (OSError, pa.ArrowException) as err:
                raise GemmperfInputError(self._display(frag.path),
                                         f"not a readable Parquet history file: {_first_line(err)}") from None
            del t

    def read(self, *, test: str | None = None, kernel_contains: str | None = None,
             hw_key: str | None = None, point: str | None = None) -> pd.DataFrame:
        """The history (:data:`HISTORY_COLUMNS`), filtered, sorted by time, run_id (then test,
        point, kernel, metric, unit). An empty store gives an empty frame; a damaged file
        raises :class:`GemmperfInputError` naming it."""
        dataset = self._dataset(hw_key, test)
        if dataset is None:
            return _empty_history()
        filt = _equal_filter(hw_key, test, point)
        if kernel_contains:
            e = pc.match_substring(ds.field("kernel"), str(kernel_contains))
            filt = e if filt is None else filt & e
        table = self._scan(dataset, [*HISTORY_COLUMNS, "written", "test_id"], filt, keep_filename=True)
        if kernel_contains:  # which file of a run is newest does not depend on the kernel filter
            unfiltered = _equal_filter(hw_key, test, point)
            files = self._scan(dataset, [*_RUN_KEY, "written"], unfiltered, keep_filename=True)
        else:
            files = table
        table = _whole_test_ids(_newest_files_only(table, files)).select(list(HISTORY_COLUMNS))
        if table.num_rows == 0:
            return _empty_history()
        # sorted by Arrow (C++), before pandas: several times faster than sort_values on strings
        keys = ["time", "run_id", "test", "point", "kernel", "metric", "unit"]
        df = table.sort_by([(k, "ascending") for k in keys]).to_pandas()
        for c in ("commit", "branch"):  # the nullable ones: None, not NaN, when unknown
            df[c] = df[c].astype(object).where(df[c].notna(), None)
        df["time"] = pd.to_datetime(df["time"], utc=True).astype("datetime64[ns, UTC]")
        df["value"] = df["value"].astype(np.float64)
        return df[list(HISTORY_COLUMNS)]

    def _file_runs(self, hw_key: str | None = None) -> pd.DataFrame:
        """One row per history file: run columns, hw_key, test, file. Every column is constant
        within a file and a scan batch never spans two files, so the first row of each batch
        is enough (memory stays bounded however long the history)."""
        dataset = self._dataset(hw_key)
        cols = ["run_id", "time", "commit", "branch", "hw_key", "test", "run_meta", "test_id", "__filename"]
        if dataset is None:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in cols}).rename(columns={"__filename": "file"})
        heads = []
        try:
            for batch in dataset.to_batches(columns=cols):
                if batch.num_rows:
                    heads.append(batch.slice(0, 1))
        except (OSError, pa.ArrowException) as exc:
            self._raise_bad_file(dataset, exc)
            raise GemmperfInputError(self.url, f"cannot read history: {_first_line(exc)}") from None
        if not heads:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in cols}).rename(columns={"__filename": "file"})
        df = _whole_test_ids(pa.Table.from_batches(heads)).to_pandas().rename(columns={"__filename": "file"})
        for col in ("run_id", "time"):
            bad = df[col].isna()
            if bad.any():
                raise GemmperfInputError(self._display(df.loc[bad, "file"].iloc[0]),
                                         f"not a history file (no {col!r} values)")
        df["time"] = pd.to_datetime(df["time"], utc=True).astype("datetime64[ns, UTC]")
        return df.drop_duplicates("file").reset_index(drop=True)

    def runs(self, *, hw_key: str | None = None) -> pd.DataFrame:
        """One row per (run_id, hw_key): :data:`RUNS_COLUMNS` (``tests``/``files``: how many;
        ``meta``: the run's metadata dict), sorted by time, run_id."""
        f = self._file_runs(hw_key)
        if f.empty:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in RUNS_COLUMNS})
        g = f.groupby(["run_id", "hw_key"], sort=False, observed=True)
        out = g.agg(time=("time", "min"), commit=("commit", "first"), branch=("branch", "first"),
                    tests=("test", "nunique"), files=("file", "size"), meta=("run_meta", "first")).reset_index()
        out["meta"] = [_loads(m) for m in out["meta"]]
        return out.sort_values(["time", "run_id"], kind="stable").reset_index(drop=True)[list(RUNS_COLUMNS)]

    # ------------------------------------------------------------------------------- retention
    def prune(self, *, keep_last: int | None = None, older_than_days: float | None = None,
              hw_key: str | None = None, dry_run: bool = True,
              now: pd.Timestamp | None = None) -> pd.DataFrame:
        """Files of the runs to remove: runs beyond the newest ``keep_last`` per hardware key,
        and/or runs older than ``older_than_days``. Returns ``run_id, hw_key, time, test,
        file`` of every file concerned; deletes them only when ``dry_run`` is False. Only
        files the dataset reads as history are ever deleted (never anything else in the
        directory); emptied partition directories of a local store are removed too."""
        if keep_last is None and older_than_days is None:
            raise GemmperfInputError(None, "prune needs --keep-last N and/or --older-than DAYS")
        if keep_last is not None and keep_last < 1:
            raise GemmperfInputError(None, f"--keep-last must be >= 1, got {keep_last}")
        if older_than_days is not None and not older_than_days >= 0:
            raise GemmperfInputError(None, f"--older-than must be >= 0 days, got {older_than_days}")
        f = self._file_runs(hw_key)
        cols = ["run_id", "hw_key", "time", "test", "file"]
        if f.empty:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
        runs = f.groupby(["hw_key", "run_id"], observed=True)["time"].min().reset_index()
        drop = np.zeros(len(runs), dtype=bool)
        if keep_last is not None:
            rank = runs.sort_values(["time", "run_id"], ascending=False).groupby("hw_key", observed=True).cumcount()
            drop |= (rank.reindex(runs.index) >= keep_last).to_numpy()
        if older_than_days is not None:
            ref = pd.Timestamp.now(tz="UTC") if now is None else pd.Timestamp(now)
            drop |= (runs["time"] < ref - pd.Timedelta(days=float(older_than_days))).to_numpy()
        gone = runs[drop][["hw_key", "run_id"]]
        out = f.merge(gone, on=["hw_key", "run_id"])[cols].sort_values(["time", "run_id", "test"], kind="stable")
        out = out.reset_index(drop=True)
        if not dry_run:
            doomed = [self._local_file(p) if self.local else p for p in out["file"]]
            for path in doomed:
                self.fs.rm_file(path)
            if self.local:
                for d in sorted({os.path.dirname(p) for p in out["file"]}, reverse=True):
                    for cand in (d, os.path.dirname(d)):
                        try:
                            os.rmdir(cand)  # only when empty
                        except OSError:
                            pass
        out["file"] = [self._display(p) for p in out["file"]]
        return out


def _newest_files_only(table: pa.Table, files: pa.Table) -> pa.Table:
    """``table``'s rows less those of a file that another, newer file of the same
    :data:`_RUN_KEY` supersedes (``files``: the key, ``written`` and ``__filename`` of at least
    every row of ``table``). Newest: the latest ``written`` (null: oldest), then the greatest
    file name, so every reader picks the same file."""
    per_file = files.group_by([*_RUN_KEY, "__filename"]).aggregate([("written", "max")])
    if per_file.num_rows == per_file.group_by(list(_RUN_KEY)).aggregate([]).num_rows:
        return table  # one file per run and point: the common case, nothing to drop
    f = per_file.to_pandas()
    stamp = [-1 if pd.isna(t) else pd.Timestamp(t).value for t in f["written_max"]]
    f = f.assign(_stamp=stamp).sort_values(["_stamp", "__filename"], kind="stable")
    losers = f[f.duplicated(list(_RUN_KEY), keep="last")]
    lose = pd.MultiIndex.from_arrays([losers["__filename"].astype(str), losers["point"].astype(str)])
    rows = pd.MultiIndex.from_arrays([table["__filename"].to_pandas().astype(str),
                                      table["point"].to_pandas().astype(str)])
    return table.filter(pa.array(~rows.isin(lose)))


def _segment(key: str, value: str) -> str:
    return f"{key}={urllib.parse.quote(str(value), safe='')}"


#: the longest partition directory name kept as it is (file systems allow 255 bytes a name)
MAX_SEGMENT_BYTES = 200
#: characters a shortened test id keeps of the original before its hash
_SHORT_KEEP = 120


def test_partition(test: str) -> str:
    """The ``test`` partition value of a test id: the id itself when its directory name fits,
    else its first characters (file-name-safe) and a hash of the whole id, as the results
    and baseline directories shorten theirs. The whole id is in every file (``test_id``)."""
    if len(_segment("test", test).encode()) <= MAX_SEGMENT_BYTES:
        return test
    digest = hashlib.sha256(test.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', test)[:_SHORT_KEEP]}~{digest}"


def data_keys(values: pd.DataFrame, time: pd.Timestamp) -> dict[str, str]:
    """Per point of ``values`` (one test's rows), a hash of the run's time and its rows in any
    order: the same results (a results directory's time is its run.json's) give the same key
    under any run id; two runs, even of identical values, do not."""
    out = {}
    for point, part in values.groupby(values["point"].astype(str), sort=True):
        rows = part[["kernel", "metric", "unit"]].astype(str).assign(
            value=pd.to_numeric(part["value"], errors="coerce").astype(np.float64).map(float.hex))
        lines = [str(pd.Timestamp(time).value)] + sorted("\x1f".join(r) for r in rows.itertuples(index=False, name=None))
        out[str(point)] = "sha256:" + hashlib.sha256("\x1e".join(lines).encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return out


def _equal_filter(hw_key: str | None, test: str | None, point: str | None):
    """The dataset filter of the given columns (None: any); a test by its partition value."""
    filt = None
    for col, val in (("hw_key", hw_key), ("test", None if test is None else test_partition(str(test))),
                     ("point", point)):
        if val is not None:
            e = ds.field(col) == str(val)
            filt = e if filt is None else filt & e
    return filt


def _whole_test_ids(table: pa.Table) -> pa.Table:
    """``table`` with each row's whole test id in ``test`` (its file's ``test_id``, else the
    partition directory's, for files written before that column existed)."""
    i = table.schema.get_field_index("test")
    whole = pc.coalesce(table["test_id"], table["test"])
    return table.set_column(i, "test", whole)


def _file_stem(run_id: str) -> str:
    """A file-name-safe form of the run id (the id itself is stored inside the file)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).lstrip("._")[:80]
    return stem or "run"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _loads(text: Any) -> dict:
    if not isinstance(text, str) or not text:
        return {}
    try:
        v = json.loads(text)
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}
