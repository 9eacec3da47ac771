"""The ``baselines/`` store (DESIGN.md section 7, regression-statistics.md 3.9).

Layout, one directory per (hardware key, test id)::

    <root>/<hw_key>/<test slug>/
        summary.yaml      human-readable, reviewed in pull requests; deterministic, one line per
                          (point, kernel, metric) so a refresh shows as a minimal diff
        samples.parquet   the samples table (point, kernel, metric, unit, value), zstd
        variance.parquet  optional variance history: per earlier run and (point, kernel), the
                          between-process sum of squares and df of its per-process log medians
                          (``gate.compare.variance_contribution``); the gate pools it with each
                          comparison's own variance. A refresh moves the replaced run's
                          contribution here; ``gemmperf baseline learn`` (or
                          ``--gemmperf-learn-variance``) adds any run's. Newest
                          ``MAX_HISTORY_RUNS`` runs per point are kept.
        meta.json         schema version, ids, generation, SHA-256 of the two files above,
                          run metadata (ROCm/rocprofv3/torch/driver versions, host, commit)
    <root>/.locks/        one lock file per record (git-ignored by its own .gitignore)

Consistency without a reader lock: each file is replaced atomically (temp file in the same
directory, fsync, ``os.replace``) and ``meta.json`` is replaced last. A reader checks both data
files against the checksums in the ``meta.json`` it read; a mismatch means a writer is between
its renames, so the reader retries under the writer's lock. Reading therefore works on a
read-only checkout, and a mismatch that persists under the lock is a hand-edited or
half-merged record, reported as such. Writers hold a ``filelock.FileLock`` per record, so
``pytest -n 8`` workers refreshing the same record serialize instead of interleaving.

Nothing here writes a baseline implicitly: :meth:`BaselineStore.save` is called by an explicit
refresh only.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
import yaml
from filelock import FileLock, Timeout

from pytest_gemmperf.analysis.selection import select_kernels
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.hardware import hardware_key, sanitize

SCHEMA_VERSION = 1
SAMPLE_COLUMNS = ("point", "kernel", "metric", "unit", "value")
_KEY_COLUMNS = SAMPLE_COLUMNS[:4]
SUMMARY_FILE = "summary.yaml"
SAMPLES_FILE = "samples.parquet"
VARIANCE_FILE = "variance.parquet"
VARIANCE_COLUMNS = ("run", "seq", "point", "kernel", "metric", "df", "ss")
#: earlier runs per point whose variance the gate pools (3 df each with 4 processes per run;
#: benchmarks/gate_accuracy.py: 10 runs reach the 3 % detection target on the real trace)
MAX_HISTORY_RUNS = 20
META_FILE = "meta.json"
_DATA_FILES = (SAMPLES_FILE, SUMMARY_FILE)
LOCK_DIR = ".locks"
LOCK_TIMEOUT_S = 300.0
#: Significant digits of the statistics in summary.yaml: enough to review, few enough that
#: run-to-run noise in the last digits does not turn every line of a refresh into a diff.
SUMMARY_DIGITS = 4
#: Metadata fields shown in summary.yaml (looked up in meta, meta["run"], meta["run"]["versions"]).
_VERSION_FIELDS = ("rocm_version", "rocprofv3_version", "torch_version", "driver_version",
                   "git_commit", "host", "date")
#: point.json statuses whose data must not become a baseline.
_BAD_STATUSES = frozenset({"failed", "error", "timeout", "crashed", "skipped", "killed"})
_MAX_SLUG = 150


@dataclass
class BaselineRecord:
    """One baseline: the samples of one test on one hardware key."""

    test_id: str
    hw_key: str
    samples: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    created: str | None = None  # set by the store (UTC ISO)
    updated: str | None = None
    generation: int = 0  # number of writes of this record
    #: variance history (:data:`VARIANCE_COLUMNS`), None when the record has none; set by the
    #: store: :meth:`BaselineStore.save` ignores what a caller puts here
    variance: pd.DataFrame | None = None

    def history_for(self, point: str | None = None) -> pd.DataFrame | None:
        """The variance history rows (of one point), as ``gate.compare.compare(history=...)``
        takes them."""
        if self.variance is None or not len(self.variance):
            return None
        v = self.variance
        return v if point is None else v[v["point"].astype(str) == str(point)]


# ----------------------------------------------------------------------------- helpers


def slug_for_test(test_id: str) -> str:
    """Directory name for a test id, following the results layout
    (``perf_tests/test_x.py::test_y`` -> ``perf_tests_test_x.py__test_y``)."""
    slug = sanitize(str(test_id).replace("::", "__").replace("/", "_").replace("\\", "_"))
    if len(slug) > _MAX_SLUG:  # long parametrized ids: keep it readable and unique
        digest = hashlib.sha256(str(test_id).encode()).hexdigest()[:12]
        slug = f"{slug[:_MAX_SLUG - 13]}-{digest}"
    return slug


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sorted_codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, categories) with categories the sorted distinct strings of ``col`` (no NaN)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        col = col.cat.remove_unused_categories()
        cats = np.asarray([str(c) for c in col.cat.categories], dtype=object)
        if len(set(cats)) == len(cats):  # else two categories print alike: fall back below
            order = np.argsort(cats, kind="stable")
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            return rank[col.cat.codes.to_numpy()], cats[order]
    codes, uniques = pd.factorize(col.astype(str), sort=True)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def normalize_samples(samples: pd.DataFrame, path: str | os.PathLike | None = None) -> pd.DataFrame:
    """Samples in canonical form: the five columns, strings as ``category`` with sorted
    categories, float values, rows sorted by every column, so that the same observations in any
    order and any dtypes give the same table (and the same parquet bytes)."""
    missing = [c for c in SAMPLE_COLUMNS if c not in samples.columns]
    if missing:
        raise GemmperfInputError(path, f"samples table lacks columns {missing}")
    coded = {}
    for c in _KEY_COLUMNS:
        if samples[c].isna().any():
            raise GemmperfInputError(path, f"samples column {c!r} has missing values")
        coded[c] = _sorted_codes(samples[c])
    try:
        values = pd.to_numeric(samples["value"], errors="raise").to_numpy(dtype="float64")
    except (TypeError, ValueError) as exc:
        raise GemmperfInputError(path, f"samples column 'value' is not numeric: {exc}") from None
    # integer codes of sorted categories order like the strings, and sort far faster
    order = np.lexsort((values,) + tuple(coded[c][0] for c in reversed(_KEY_COLUMNS)))
    out = {c: pd.Categorical.from_codes(codes[order], categories=pd.Index(cats, dtype=object).astype(str))
           for c, (codes, cats) in coded.items()}
    out["value"] = values[order]
    return pd.DataFrame(out)


def _samples_to_parquet(samples: pd.DataFrame) -> bytes:
    """``samples`` must be normalized (sorted categories): dictionary columns are written as is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {}
    for c in _KEY_COLUMNS:
        cat = samples[c].array
        cols[c] = pa.DictionaryArray.from_arrays(pa.array(cat.codes, pa.int32()),
                                                 pa.array(np.asarray(cat.categories, dtype=object), pa.string()))
    cols["value"] = pa.array(samples["value"].to_numpy(dtype="float64"), pa.float64())
    buf = io.BytesIO()
    # no pandas/arrow schema metadata: the bytes depend on the data only (byte-identical rewrites)
    pq.write_table(pa.table(cols), buf, compression="zstd", use_dictionary=True, store_schema=False)
    return buf.getvalue()


def _samples_from_parquet(data: bytes, path: Path) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # small files: no thread pool (pyarrow's pool can abort at interpreter exit,
        # apache/arrow#34314, after all the work is done)
        table = pq.read_table(pa.BufferReader(data), read_dictionary=list(_KEY_COLUMNS), use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise GemmperfInputError(path, f"unreadable parquet: {exc}") from None
    missing = [c for c in SAMPLE_COLUMNS if c not in table.column_names]
    if missing:
        raise GemmperfInputError(path, f"samples lack columns {missing}")
    df = table.select(list(SAMPLE_COLUMNS)).to_pandas()
    # written normalized and checksummed: check, do not re-sort
    for c in _KEY_COLUMNS:
        if not isinstance(df[c].dtype, pd.CategoricalDtype) or df[c].isna().any():
            raise GemmperfInputError(path, f"samples column {c!r} is not a complete string column")
    if df["value"].dtype != "float64":
        raise GemmperfInputError(path, f"samples column 'value' is {df['value'].dtype}, expected float64")
    return df


def _variance_to_parquet(variance: pd.DataFrame) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    v = variance.sort_values(["seq", "point", "kernel", "metric"], kind="mergesort", ignore_index=True)
    cols = {c: pa.array(v[c].astype(str).tolist(), pa.string()) for c in ("run", "point", "kernel", "metric")}
    cols["seq"] = pa.array(v["seq"].to_numpy(np.int64), pa.int64())
    for c in ("df", "ss"):
        cols[c] = pa.array(v[c].to_numpy(np.float64), pa.float64())
    buf = io.BytesIO()
    pq.write_table(pa.table({c: cols[c] for c in VARIANCE_COLUMNS}), buf, compression="zstd",
                   store_schema=False)
    return buf.getvalue()


def _variance_from_parquet(data: bytes, path: Path) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        df = pq.read_table(pa.BufferReader(data), use_threads=False).to_pandas()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise GemmperfInputError(path, f"unreadable parquet: {exc}") from None
    missing = [c for c in VARIANCE_COLUMNS if c not in df.columns]
    if missing:
        raise GemmperfInputError(path, f"variance history lacks columns {missing}")
    df = df[list(VARIANCE_COLUMNS)]
    bad = ~np.isfinite(df["df"].to_numpy(float)) | (df["df"].to_numpy(float) <= 0) | ~(df["ss"].to_numpy(float) >= 0)
    if bad.any():
        raise GemmperfInputError(path, f"variance history row {int(np.flatnonzero(bad)[0]) + 1}: "
                                       "df must be > 0 and ss >= 0")
    return df


def _parse_blobs(blobs: dict[str, bytes], d: Path) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The samples and the variance history (None when the record has none) of a record's
    checksummed files, as :meth:`BaselineStore._read_consistent` returns them."""
    samples = _samples_from_parquet(blobs[SAMPLES_FILE], d / SAMPLES_FILE)
    variance = (_variance_from_parquet(blobs[VARIANCE_FILE], d / VARIANCE_FILE)
                if VARIANCE_FILE in blobs else None)
    return samples, variance


def _empty_variance() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
        VARIANCE_COLUMNS, (object, "int64", object, object, object, "float64", "float64"))})


def add_history(variance: pd.DataFrame | None, samples: pd.DataFrame, run: str,
                points: Iterable[str] | None = None, max_runs: int = MAX_HISTORY_RUNS) -> pd.DataFrame:
    """``variance`` plus the contribution of one run's ``samples`` (only ``points`` when
    given), keeping the newest ``max_runs`` runs per point."""
    from pytest_gemmperf.gate.compare import variance_contribution

    old = _empty_variance() if variance is None else variance
    s = samples if points is None else samples[samples["point"].astype(str).isin(set(map(str, points)))]
    contrib = variance_contribution(s) if len(s) else None
    if contrib is None or contrib.empty:
        return old
    seq = int(old["seq"].max()) + 1 if len(old) else 1
    new = contrib.assign(run=str(run), seq=seq)[list(VARIANCE_COLUMNS)]
    both = pd.concat([old, new], ignore_index=True) if len(old) else new
    # newest max_runs runs of each point
    runs = both[["point", "seq"]].drop_duplicates().sort_values(["point", "seq"], ascending=[True, False])
    runs = runs.groupby("point", sort=False).head(max_runs)
    keep = both.merge(runs, on=["point", "seq"], how="inner")
    return keep[list(VARIANCE_COLUMNS)].reset_index(drop=True)


def _changed_points(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """Points of ``old`` whose samples differ in ``new`` (both normalized)."""
    out = []
    new_by = {str(p): g for p, g in new.groupby(new["point"].astype(str), sort=True)}
    for p, g in old.groupby(old["point"].astype(str), sort=True):
        n = new_by.get(str(p))
        if n is None:
            continue  # a point dropped from the test is no evidence about the new run's variance
        if (len(n) != len(g) or not np.array_equal(g["value"].to_numpy(), n["value"].to_numpy())
                or any(not np.array_equal(g[c].astype(str).to_numpy(), n[c].astype(str).to_numpy())
                       for c in ("kernel", "metric", "unit"))):
            out.append(str(p))
    return out


def _round_sig(x: float, digits: int = SUMMARY_DIGITS) -> float | int | None:
    if x is None or not np.isfinite(x):
        return None
    if x == 0:
        return 0
    r = float(f"{x:.{digits}g}")
    return int(r) if r.is_integer() and abs(r) < 2**53 else r


def summarize(samples: pd.DataFrame) -> pd.DataFrame:
    """Per (point, kernel, metric): n_units, n, median, p05, p95 over all observations."""
    g = samples.groupby(["point", "kernel", "metric"], observed=True, sort=True)["value"]
    out = pd.DataFrame({
        "n_units": samples.groupby(["point", "kernel", "metric"], observed=True, sort=True)["unit"].nunique(),
        "n": g.size(),
        "median": g.median(),
        "p05": g.quantile(0.05),
        "p95": g.quantile(0.95),
    }).reset_index()
    for c in ("point", "kernel", "metric"):
        out[c] = out[c].astype(str)
    return out.sort_values(["point", "kernel", "metric"], kind="mergesort", ignore_index=True)


class _FlowMap(dict):
    """A mapping dumped on one line, so a changed statistic is a one-line diff."""


class _SummaryDumper(yaml.SafeDumper):
    pass


_SummaryDumper.add_representer(
    _FlowMap, lambda d, m: d.represent_mapping("tag:yaml.org,2002:map", list(m.items()), flow_style=True))


def _lookup(meta: dict[str, Any], key: str) -> Any:
    for src in (meta, meta.get("run"), (meta.get("run") or {}).get("versions")
                if isinstance(meta.get("run"), dict) else None):
        if isinstance(src, dict) and src.get(key) is not None:
            return src[key]
    return None


def versions_of(meta: dict[str, Any]) -> dict[str, Any]:
    """The software/host facts of a record's metadata (fields of :data:`_VERSION_FIELDS`)."""
    return {k: _lookup(meta, k) for k in _VERSION_FIELDS}


def render_summary(record: BaselineRecord, samples: pd.DataFrame | None = None) -> bytes:
    """summary.yaml text: sorted points, kernels (as list items: kernel names are often longer
    than YAML's 128-character simple-key limit) and metrics, one flow mapping per metric."""
    samples = normalize_samples(record.samples) if samples is None else samples
    stats = summarize(samples)
    points: list[dict[str, Any]] = []
    for point, pdf in stats.groupby("point", sort=True):
        kernels = []
        for kernel, kdf in pdf.groupby("kernel", sort=True):
            metrics = {
                row.metric: _FlowMap(n_units=int(row.n_units), n=int(row.n),
                                     median=_round_sig(row.median), p05=_round_sig(row.p05),
                                     p95=_round_sig(row.p95))
                for row in kdf.itertuples(index=False)  # one row per metric of one kernel
            }
            kernels.append({"kernel": str(kernel), "metrics": metrics})
        points.append({"point": str(point), "kernels": kernels})
    doc = {
        "schema_version": SCHEMA_VERSION,
        "test_id": record.test_id,
        "hw_key": record.hw_key,
        "source": {k: v for k, v in versions_of(record.meta).items() if v is not None},
        "points": points,
    }
    header = ("# gemmperf baseline summary: generated by `gemmperf baseline refresh`, do not edit.\n"
              "# Statistics over all samples per (point, kernel, metric); raw samples in samples.parquet.\n")
    body = yaml.dump(doc, Dumper=_SummaryDumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=4096)
    return (header + body).encode("utf-8")


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; baselines are shared and committed
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read: {exc.strerror or exc}") from None


def _parse_meta(data: bytes, path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise GemmperfInputError(path, f"not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or "schema_version" not in meta:
        raise GemmperfInputError(path, "not a gemmperf baseline meta.json (no schema_version)")
    ver = meta["schema_version"]
    if ver != SCHEMA_VERSION:
        newer = isinstance(ver, int) and ver > SCHEMA_VERSION
        hint = " (written by a newer gemmperf)" if newer else ""
        raise GemmperfInputError(path, f"baseline schema_version {ver!r}, this gemmperf reads "
                                       f"{SCHEMA_VERSION}{hint}")
    for key in ("test_id", "hw_key", "files"):
        if key not in meta:
            raise GemmperfInputError(path, f"meta.json lacks {key!r}")
    files = meta["files"]
    if not isinstance(files, dict) or any(not isinstance(files.get(n), dict) or "sha256" not in files[n]
                                          for n in _DATA_FILES):
        raise GemmperfInputError(path, "meta.json 'files' lacks the checksums of "
                                       f"{', '.join(_DATA_FILES)}")
    return meta


def _check_summary(data: bytes, path: Path, meta: dict[str, Any]) -> None:
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise GemmperfInputError(path, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise GemmperfInputError(path, f"not a schema_version {SCHEMA_VERSION} baseline summary")
    if doc.get("test_id") != meta["test_id"] or doc.get("hw_key") != meta["hw_key"]:
        raise GemmperfInputError(path, "test_id/hw_key differ from meta.json")


# ----------------------------------------------------------------------------- the store


class BaselineStore:
    """Baselines under ``root`` (usually ``baselines/`` in the repository)."""

    def __init__(self, root: str | os.PathLike, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.root = Path(root)
        self.lock_timeout_s = lock_timeout_s

    # -- paths and locks
    def path_for(self, test_id: str, hw_key: str) -> Path:
        hw = sanitize(hw_key)
        if hw.startswith("."):
            raise GemmperfInputError(None, f"invalid hardware key {hw_key!r}")
        return self.root / hw / slug_for_test(test_id)

    def _lock(self, record_dir: Path) -> FileLock:
        lock_dir = self.root / LOCK_DIR
        lock_dir.mkdir(parents=True, exist_ok=True)
        ignore = lock_dir / ".gitignore"
        if not ignore.exists():
            try:
                with open(ignore, "x") as fh:
                    fh.write("*\n")
            except FileExistsError:
                pass
        name = f"{record_dir.parent.name}__{record_dir.name}.lock"
        return FileLock(lock_dir / name, timeout=self.lock_timeout_s)

    def _locked(self, record_dir: Path) -> FileLock:
        lock = self._lock(record_dir)
        try:
            lock.acquire()
        except Timeout:
            raise GemmperfInputError(lock.lock_file, f"baseline lock held by another process for more "
                                                     f"than {self.lock_timeout_s:.0f} s") from None
        return lock

    # -- reading
    def _read_consistent(self, d: Path) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        """(meta, {file: bytes}) whose checksums agree, None when the record is absent.
        Raises ``_Mismatch`` when the files disagree with meta.json."""
        meta_path = d / META_FILE
        try:
            meta_bytes = _read_bytes(meta_path)
        except FileNotFoundError:
            if d.is_dir() and any((d / n).exists() for n in _DATA_FILES):
                raise GemmperfInputError(meta_path, "missing (record has data files but no meta.json)")
            return None
        meta = _parse_meta(meta_bytes, meta_path)
        blobs: dict[str, bytes] = {}
        for name in _DATA_FILES:
            try:
                blobs[name] = _read_bytes(d / name)
            except FileNotFoundError:
                raise _Mismatch(d / name, "missing") from None
            if _sha256(blobs[name]) != meta["files"][name]["sha256"]:
                raise _Mismatch(d / name, "does not match the checksum in meta.json "
                                          "(edited by hand or half-merged? run `gemmperf baseline refresh`)")
        if isinstance(meta["files"].get(VARIANCE_FILE), dict):
            try:
                blobs[VARIANCE_FILE] = _read_bytes(d / VARIANCE_FILE)
            except FileNotFoundError:
                raise _Mismatch(d / VARIANCE_FILE, "missing") from None
            if _sha256(blobs[VARIANCE_FILE]) != meta["files"][VARIANCE_FILE].get("sha256"):
                raise _Mismatch(d / VARIANCE_FILE, "does not match the checksum in meta.json "
                                                   "(edited by hand or half-merged?)")
        return meta, blobs

    def _load_dir(self, d: Path) -> BaselineRecord | None:
        try:
            got = self._read_consistent(d)
        except _Mismatch as first:
            # A writer may be between its renames: look again while holding its lock.
            try:
                lock = self._locked(d)
            except OSError:  # read-only checkout: nobody can be writing, the mismatch is real
                raise GemmperfInputError(first.path, first.message) from None
            try:
                got = self._read_consistent(d)
            except _Mismatch as again:
                raise GemmperfInputError(again.path, again.message) from None
            finally:
                lock.release()
        if got is None:
            return None
        meta, blobs = got
        _check_summary(blobs[SUMMARY_FILE], d / SUMMARY_FILE, meta)
        samples, variance = _parse_blobs(blobs, d)
        return BaselineRecord(test_id=meta["test_id"], hw_key=meta["hw_key"], samples=samples,
                              meta=meta.get("metadata") or {}, schema_version=meta["schema_version"],
                              created=meta.get("created"), updated=meta.get("updated"),
                              generation=int(meta.get("generation", 0)), variance=variance)

    def load(self, test_id: str, hw_key: str) -> BaselineRecord | None:
        """The baseline of ``test_id`` on ``hw_key``; None when there is none."""
        d = self.path_for(test_id, hw_key)
        rec = self._load_dir(d)
        if rec is not None and (rec.test_id != test_id or rec.hw_key != hw_key):
            raise GemmperfInputError(d / META_FILE, f"holds test {rec.test_id!r} on {rec.hw_key!r}, "
                                                    f"expected {test_id!r} on {hw_key!r}")
        return rec

    def _record_dirs(self, hw_key: str | None = None) -> list[Path]:
        if not self.root.is_dir():
            return []
        hw_dirs = [self.root / sanitize(hw_key)] if hw_key else sorted(self.root.iterdir())
        out = []
        for hw in hw_dirs:
            if hw.name.startswith(".") or not hw.is_dir():
                continue
            out += [d for d in sorted(hw.iterdir()) if d.is_dir() and not d.name.startswith(".")]
        return out

    def load_all(self, hw_key: str | None = None) -> list[BaselineRecord]:
        recs = []
        for d in self._record_dirs(hw_key):
            rec = self._load_dir(d)
            if rec is None:
                continue
            if rec.hw_key != d.parent.name:
                raise GemmperfInputError(d / META_FILE, f"hw_key {rec.hw_key!r} does not match its "
                                                        f"directory {d.parent.name!r}")
            recs.append(rec)
        return recs

    def _metas(self, hw_key: str | None = None) -> list[tuple[Path, dict[str, Any]]]:
        out = []
        for d in self._record_dirs(hw_key):
            p = d / META_FILE
            if p.exists():
                out.append((d, _parse_meta(_read_bytes(p), p)))
        return out

    def list(self, hw_key: str | None = None) -> pd.DataFrame:
        """One row per record (from meta.json only): test_id, hw_key, points, kernels, metrics,
        rows, history_runs, updated, generation, versions."""
        rows = []
        for _d, m in self._metas(hw_key):
            st = m.get("stats") or {}
            v = versions_of(m.get("metadata") or {})
            ver = ", ".join(f"{k.removesuffix('_version')} {v[k]}" for k in
                            ("rocm_version", "rocprofv3_version", "torch_version") if v.get(k))
            rows.append({"test_id": m["test_id"], "hw_key": m["hw_key"], "points": st.get("points"),
                         "kernels": st.get("kernels"), "metrics": st.get("metrics"), "rows": st.get("rows"),
                         "history_runs": st.get("history_runs", 0),
                         "updated": m.get("updated"), "generation": m.get("generation"), "versions": ver})
        cols = ["test_id", "hw_key", "points", "kernels", "metrics", "rows", "history_runs", "updated",
                "generation", "versions"]
        return pd.DataFrame(rows, columns=cols).sort_values(["test_id", "hw_key"], ignore_index=True)

    # -- writing
    def save(self, record: BaselineRecord) -> bool:
        """Write ``record`` atomically. Returns False (and writes nothing) when the stored samples
        are already identical, so a repeated refresh leaves no diff.

        The variance history is the store's: the stored one is kept, and for every point whose
        samples this write replaces, the replaced run's contribution is added to it."""
        d = self.path_for(record.test_id, record.hw_key)
        samples = normalize_samples(record.samples, d / SAMPLES_FILE)
        if samples.empty:
            raise GemmperfInputError(d, f"refusing to save an empty baseline for {record.test_id!r}")
        record = BaselineRecord(**{**record.__dict__, "samples": samples})
        samples_bytes = _samples_to_parquet(samples)
        summary_bytes = render_summary(record, samples)
        lock = self._locked(d)
        try:
            d.mkdir(parents=True, exist_ok=True)
            _remove_stale_temps(d)
            old = self._old_meta(d)
            if old is not None and old.get("test_id") != record.test_id:
                raise GemmperfInputError(d / META_FILE, f"directory already holds test {old.get('test_id')!r} "
                                                        f"(test ids {record.test_id!r} collide after sanitizing)")
            if (old is not None and old["files"][SAMPLES_FILE]["sha256"] == _sha256(samples_bytes)
                    and old["files"][SUMMARY_FILE]["sha256"] == _sha256(summary_bytes)
                    and self._files_match(d, old)):
                return False
            variance = self._next_history(d, old, samples)
            self._write(d, record, old, samples_bytes, summary_bytes, variance)
        finally:
            lock.release()
        return True

    def learn(self, test_id: str, hw_key: str, samples: pd.DataFrame, run: str) -> bool:
        """Add one run's between-process variance to the history of an existing baseline
        without changing its samples. False when there is no baseline, or ``run`` is already
        in the history (learning the same run twice would count its evidence twice)."""
        d = self.path_for(test_id, hw_key)
        lock = self._locked(d)
        try:
            try:
                got = self._read_consistent(d)
            except _Mismatch as exc:  # under the lock nobody is mid-write: the record is damaged
                raise GemmperfInputError(exc.path, exc.message) from None
            if got is None:
                return False
            meta, blobs = got
            stored, history = _parse_blobs(blobs, d)
            if history is not None and (history["run"].astype(str) == str(run)).any():
                return False
            points = set(stored["point"].astype(str)) & set(samples["point"].astype(str))
            variance = add_history(history, samples, run, points)
            if history is not None and variance.equals(history):
                return False
            if history is None and not len(variance):
                return False
            rec = BaselineRecord(test_id=meta["test_id"], hw_key=meta["hw_key"], samples=stored,
                                 meta=meta.get("metadata") or {})
            self._write(d, rec, meta, blobs[SAMPLES_FILE], blobs[SUMMARY_FILE], variance)
        finally:
            lock.release()
        return True

    def _next_history(self, d: Path, old: dict[str, Any] | None, samples: pd.DataFrame) -> pd.DataFrame | None:
        """The stored history plus the contribution of the points ``samples`` replaces."""
        if old is None:
            return None
        try:
            got = self._read_consistent(d)
            if got is None:
                return None
            meta, blobs = got
            old_samples, variance = _parse_blobs(blobs, d)
        except (_Mismatch, GemmperfInputError):
            return None  # a damaged record is being repaired: nothing trustworthy to keep
        changed = _changed_points(old_samples, samples)
        if not changed:
            return variance
        run = f"baseline generation {meta.get('generation', 0)} ({meta.get('updated', 'unknown date')})"
        return add_history(variance, old_samples, run, changed)

    def _write(self, d: Path, record: BaselineRecord, old: dict[str, Any] | None, samples_bytes: bytes,
               summary_bytes: bytes, variance: pd.DataFrame | None) -> None:
        """Write the record's files, meta.json last (the caller holds the lock)."""
        samples = record.samples
        now = _now()
        files = {SAMPLES_FILE: {"sha256": _sha256(samples_bytes), "bytes": len(samples_bytes)},
                 SUMMARY_FILE: {"sha256": _sha256(summary_bytes), "bytes": len(summary_bytes)}}
        variance_bytes = None
        if variance is not None and len(variance):
            variance_bytes = _variance_to_parquet(variance)
            files[VARIANCE_FILE] = {"sha256": _sha256(variance_bytes), "bytes": len(variance_bytes)}
        meta = {
            "schema_version": SCHEMA_VERSION,
            "test_id": record.test_id,
            "hw_key": record.hw_key,
            "generation": int(old.get("generation", 0)) + 1 if old else 1,
            "created": (old or {}).get("created") or now,
            "updated": now,
            "files": files,
            "stats": {"points": int(samples["point"].nunique()), "kernels": int(samples["kernel"].nunique()),
                      "metrics": int(samples["metric"].nunique()), "units": int(samples["unit"].nunique()),
                      "rows": int(len(samples)),
                      "history_runs": int(variance["seq"].nunique()) if variance_bytes else 0},
            "metadata": record.meta,
        }
        try:
            meta_bytes = (json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n").encode()
        except (TypeError, ValueError) as exc:
            raise GemmperfInputError(d / META_FILE, f"metadata is not JSON-serializable: {exc}") from None
        # data files first, meta.json last: readers verify the data against the meta they read
        _atomic_write(d / SAMPLES_FILE, samples_bytes)
        _atomic_write(d / SUMMARY_FILE, summary_bytes)
        if variance_bytes is not None:
            _atomic_write(d / VARIANCE_FILE, variance_bytes)
        _atomic_write(d / META_FILE, meta_bytes)
        if variance_bytes is None and (d / VARIANCE_FILE).exists():
            (d / VARIANCE_FILE).unlink()
        _fsync_dir(d)

    @staticmethod
    def _old_meta(d: Path) -> dict[str, Any] | None:
        """The current meta.json, or None when absent or unreadable (a refresh repairs it)."""
        try:
            return _parse_meta((d / META_FILE).read_bytes(), d / META_FILE)
        except (OSError, GemmperfInputError):
            return None

    @staticmethod
    def _files_match(d: Path, meta: dict[str, Any]) -> bool:
        try:
            return all(_sha256((d / n).read_bytes()) == meta["files"][n]["sha256"] for n in _DATA_FILES)
        except OSError:
            return False

    def prune(self, keep_test_ids: Iterable[str] | None = None,
              older_than: _dt.timedelta | float | None = None, dry_run: bool = False,
              hw_key: str | None = None) -> list[dict[str, Any]]:
        """Remove records whose test id is not in ``keep_test_ids`` (when given) or whose last
        update is older than ``older_than`` (timedelta or days). Returns what was (or, with
        ``dry_run``, would be) removed: dicts with test_id, hw_key, updated, path, reason."""
        keep = None if keep_test_ids is None else set(keep_test_ids)
        if older_than is not None and not isinstance(older_than, _dt.timedelta):
            older_than = _dt.timedelta(days=float(older_than))
        cutoff = _dt.datetime.now(_dt.timezone.utc) - older_than if older_than is not None else None
        removed = []
        for d, m in self._metas(hw_key):
            reason = None
            if keep is not None and m["test_id"] not in keep:
                reason = "test no longer exists"
            elif cutoff is not None:
                updated = _parse_time(m.get("updated"))
                if updated is None or updated < cutoff:
                    reason = f"not updated for more than {older_than.days} days"
            if reason is None:
                continue
            removed.append({"test_id": m["test_id"], "hw_key": m["hw_key"], "updated": m.get("updated"),
                            "path": str(d), "reason": reason})
            if not dry_run:
                self._remove(d)
        return removed

    def _remove(self, d: Path) -> None:
        lock = self._locked(d)
        try:
            if not d.exists():
                return
            # one rename makes the record vanish for readers at once; the rmtree is then private
            trash = d.parent / f".{d.name}.pruned-{os.getpid()}"
            os.replace(d, trash)
            shutil.rmtree(trash)
            _fsync_dir(d.parent)
            try:
                d.parent.rmdir()  # only succeeds when this was the last record of the hw key
            except OSError:
                pass
        finally:
            lock.release()

    # -- comparing
    @staticmethod
    def diff(old: BaselineRecord | pd.DataFrame | None, new: BaselineRecord | pd.DataFrame | None) -> pd.DataFrame:
        """Per (point, kernel, metric): old/new median and unit count, ratio new/old, and
        ``change`` in added / removed / changed / unchanged."""
        def stats(x: BaselineRecord | pd.DataFrame | None) -> pd.DataFrame:
            if x is None:
                return pd.DataFrame(columns=["point", "kernel", "metric", "median", "n_units"])
            s = x.samples if isinstance(x, BaselineRecord) else x
            return summarize(normalize_samples(s))[["point", "kernel", "metric", "median", "n_units"]]

        keys = ["point", "kernel", "metric"]
        a = stats(old).rename(columns={"median": "old_median", "n_units": "old_n_units"})
        b = stats(new).rename(columns={"median": "new_median", "n_units": "new_n_units"})
        for df in (a, b):
            for c in keys:
                df[c] = df[c].astype(str)
        m = a.merge(b, on=keys, how="outer", indicator=True)
        m["old_median"] = m["old_median"].astype("float64")
        m["new_median"] = m["new_median"].astype("float64")
        with np.errstate(divide="ignore", invalid="ignore"):
            m["ratio"] = m["new_median"] / m["old_median"]
        same = np.isclose(m["old_median"], m["new_median"], rtol=1e-12, atol=0) & (
            m["old_n_units"].astype("float64") == m["new_n_units"].astype("float64"))
        m["change"] = np.select([m["_merge"].eq("right_only"), m["_merge"].eq("left_only"), same],
                                ["added", "removed", "unchanged"], "changed")
        for c in ("old_n_units", "new_n_units"):
            m[c] = m[c].astype("Int64")
        cols = keys + ["old_median", "new_median", "ratio", "old_n_units", "new_n_units", "change"]
        return m[cols].sort_values(keys, kind="mergesort", ignore_index=True)


class _Mismatch(Exception):
    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _remove_stale_temps(d: Path) -> None:
    """Temp files of writers that died mid-write (only called under the record's lock)."""
    for p in d.glob(".*.tmp"):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _parse_time(text: Any) -> _dt.datetime | None:
    try:
        t = _dt.datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


# ----------------------------------------------------------------------------- refresh


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise GemmperfInputError(path, f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise GemmperfInputError(path, "expected a JSON object")
    return doc


def resolve_results_dir(path: str | os.PathLike) -> Path:
    """``path`` itself when it is a results directory; the newest run inside it when it is the
    parent of timestamped runs (``.gemmperf/results``)."""
    p = Path(path)
    if not p.is_dir():
        raise GemmperfInputError(p, "results directory does not exist")
    if (p / "run.json").is_file() or any(p.glob("*/*/point.json")):
        return p
    runs = sorted(c for c in p.iterdir() if c.is_dir() and (c / "run.json").is_file())
    if runs:
        return runs[-1]
    raise GemmperfInputError(p, "not a gemmperf results directory (no run.json, no <test>/<point>/point.json)")


@dataclass
class _Point:
    test_id: str
    point: str
    dir: Path
    doc: dict[str, Any]


def _finished_points(root: Path, test_filter: str | None,
                     report: Callable[[str], None] | None) -> list[_Point]:
    points = []
    for pj in sorted(root.glob("*/*/point.json")):
        doc = _read_json(pj)
        test_id = doc.get("test_id")
        if not isinstance(test_id, str) or not test_id:
            raise GemmperfInputError(pj, "lacks 'test_id'")
        if test_filter and test_filter not in test_id:
            continue
        status = str(doc.get("status") or "").lower()
        if status in _BAD_STATUSES:
            if report:
                report(f"skipped {pj.parent}: status {status!r}")
            continue
        points.append(_Point(test_id, str(doc.get("point") or pj.parent.name), pj.parent, doc))
    if not points:
        what = f"matching {test_filter!r} " if test_filter else ""
        raise GemmperfInputError(root, f"no finished test points {what}found")
    return points


def _point_hw_key(p: _Point, run_hw: str | None, run_path: Path) -> str:
    """point.json's key, else run.json's, else the GPU agents the point recorded. Never this
    machine's key: the results may come from another host."""
    hw = p.doc.get("hardware_key") or run_hw
    if hw:
        return str(hw)
    apath = p.dir / "agents.parquet"
    hw = hardware_key(_read_parquet(apath)) if apath.is_file() else None
    if hw is None or hw.startswith("cpu-"):
        raise GemmperfInputError(run_path, f"no hardware key in run.json or {p.dir.name}/point.json and no "
                                           "GPU agents in agents.parquet: cannot tell which hardware this run is from")
    return hw


def _point_warmup(p: _Point, warmup: int | None, run_warmup: int | None) -> int:
    """The caller's ``warmup``, else the one the plugin gated the point with (point.json),
    else run.json's, else 0."""
    for w in (warmup, p.doc.get("warmup"), run_warmup):
        if isinstance(w, int) and not isinstance(w, bool):
            return w
    return 0


def _point_samples(p: _Point, warmup: int) -> pd.DataFrame:
    from pytest_gemmperf.gate.samples import gate_samples

    dpath = p.dir / "dispatches.parquet"
    if not dpath.is_file():
        raise GemmperfInputError(dpath, "missing (the point finished but left no dispatch table)")
    disp = _read_parquet(dpath)
    if disp.empty or "kernel" not in disp.columns:
        raise GemmperfInputError(dpath, "no dispatches")
    if "point" not in disp.columns or disp["point"].isna().all():
        disp["point"] = pd.Categorical([p.point] * len(disp))
    kernels = p.doc.get("kernels") or []
    if not isinstance(kernels, list):
        raise GemmperfInputError(p.dir / "point.json", "'kernels' is not a list of regexes")
    names = pd.DataFrame({"kernel": pd.unique(disp["kernel"].astype(object))})
    if select_kernels(names, kernels, p.dir / "point.json").empty:
        raise GemmperfInputError(dpath, f"no dispatch matches the point's kernel regexes {kernels}")
    # the plugin's gate_samples call, with the point's regexes and warm-up: same samples
    return gate_samples(disp, kernels=kernels, warmup=warmup, compact=True, path=dpath)


def results_samples(results_dir: str | os.PathLike, test_filter: str | None = None, *,
                    warmup: int | None = None,
                    report: Callable[[str], None] | None = None) -> dict[str, pd.DataFrame]:
    """``{test_id: samples}`` of a finished run, as the plugin gated it (no hardware key
    needed: what ``gemmperf compare`` reads from a results directory)."""
    root = resolve_results_dir(results_dir)
    run_path = root / "run.json"
    run_meta = _read_json(run_path) if run_path.is_file() else {}
    groups: dict[str, list[_Point]] = {}
    for p in _finished_points(root, test_filter, report):
        groups.setdefault(p.test_id, []).append(p)
    return {test_id: pd.concat([_point_samples(p, _point_warmup(p, warmup, run_meta.get("warmup")))
                                for p in sorted(points, key=lambda q: q.point)], ignore_index=True)
            for test_id, points in sorted(groups.items())}


def records_from_results(results_dir: str | os.PathLike, test_filter: str | None = None, *,
                         warmup: int | None = None,
                         report: Callable[[str], None] | None = None) -> list[BaselineRecord]:
    """Baseline records for every test of a finished run (nothing is written).

    ``test_filter`` keeps tests whose id contains it. Each point's dispatches are narrowed to its
    ``kernels`` regexes and gated by :func:`pytest_gemmperf.gate.samples.gate_samples`, as the
    plugin gates them; ``warmup`` dispatches per (unit, kernel) are dropped, None meaning the
    point's recorded gate warm-up (point.json), else run.json's ``warmup``, else 0.
    Points whose status says they failed are skipped and named through ``report``.
    """
    root = resolve_results_dir(results_dir)
    run_path = root / "run.json"
    run_meta = _read_json(run_path) if run_path.is_file() else {}
    run_hw = run_meta.get("hardware_key") or run_meta.get("hw_key")

    groups: dict[tuple[str, str], list[_Point]] = {}
    for p in _finished_points(root, test_filter, report):
        groups.setdefault((p.test_id, _point_hw_key(p, run_hw, run_path)), []).append(p)

    records = []
    for (test_id, hw), points in sorted(groups.items()):
        parts = [_point_samples(p, _point_warmup(p, warmup, run_meta.get("warmup")))
                 for p in sorted(points, key=lambda q: q.point)]
        samples = pd.concat(parts, ignore_index=True)
        if samples is None or len(samples) == 0:
            raise GemmperfInputError(points[0].dir, f"no samples left for {test_id!r} after warm-up removal")
        meta = {"run": run_meta, "results_dir": root.name, "refreshed_at": _now(),
                "points": {p.point: {k: p.doc.get(k) for k in ("kernels", "env", "command", "backend")
                                     if p.doc.get(k) is not None} for p in points}}
        records.append(BaselineRecord(test_id=test_id, hw_key=hw, samples=samples, meta=meta))
    return records


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises a zoo of types for foreign or truncated files
        raise GemmperfInputError(path, f"unreadable parquet: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


def refresh_from_results(results_dir: str | os.PathLike, store: BaselineStore,
                         test_filter: str | None = None, *, warmup: int | None = None,
                         report: Callable[[str], None] | None = None) -> list[BaselineRecord]:
    """Promote a finished run to baselines without re-running it. Returns the records; those
    whose samples were unchanged are returned too but not rewritten."""
    records = records_from_results(results_dir, test_filter, warmup=warmup, report=report)
    for rec in records:
        written = store.save(rec)
        if report:
            report(f"{'updated' if written else 'unchanged'} {rec.hw_key} {rec.test_id}")
    return records
