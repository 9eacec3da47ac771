"""A baseline record's content: samples, variance history, summary.yaml and meta.json.

Everything here is pure (bytes in, bytes or tables out): how a record is encoded and checked,
independent of where and how :mod:`pytest_gemmperf.store.baselines` keeps it on disk. The encoding is
deterministic -- the same observations in any order give the same ``samples.parquet`` and
``summary.yaml`` bytes -- so a refresh that changes nothing leaves no diff.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
import yaml

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.store.hardware import sanitize
from pytest_gemmperf.run.results import base_test_id, distinct_slug
from pytest_gemmperf.gate.metrics import DISPATCH_COUNT
from pytest_gemmperf.gate.samples import compact_samples
import pyarrow as pa
import pyarrow.parquet as pq
from pytest_gemmperf.gate.compare import variance_contribution

SCHEMA_VERSION = 1
SAMPLE_COLUMNS = ("point", "kernel", "metric", "unit", "value")
_KEY_COLUMNS = SAMPLE_COLUMNS[:4]
SUMMARY_FILE = "summary.yaml"
SAMPLES_FILE = "samples.parquet"
VARIANCE_FILE = "variance.parquet"
VARIANCE_COLUMNS = ("run", "seq", "point", "kernel", "metric", "df", "ss")
#: the identity of a history run's data (:func:`run_keys`); a history written before it existed
#: reads its ``run`` label here, so such runs stay distinct from each other and from new ones
VARIANCE_KEY = "key"
#: earlier runs per point whose variance the gate pools (3 df each with 4 processes per run;
#: benchmarks/gate_accuracy.py: 10 runs reach the 3 % detection target on the real trace)
MAX_HISTORY_RUNS = 20
META_FILE = "meta.json"
_DATA_FILES = (SAMPLES_FILE, SUMMARY_FILE)
#: Significant digits of the statistics in summary.yaml: enough to review, few enough that
#: run-to-run noise in the last digits does not turn every line of a refresh into a diff.
SUMMARY_DIGITS = 4
#: Metadata fields shown in summary.yaml (looked up in meta, meta["run"], meta["run"]["versions"]).
_VERSION_FIELDS = ("rocm_version", "rocprofv3_version", "torch_version", "driver_version",
                   "git_commit", "host", "date")
_MAX_SLUG = 150
#: a record version's directory name (``v`` + generation)
_VERSION_RE = re.compile(r"v[0-9]{1,12}")


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
    #: the old key (test id) the store found this record under, when it predates the test's
    #: current id (:func:`legacy_keys`); its next save writes it under ``test_id``
    migrated_from: str | None = None

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
    (``perf_tests/test_x.py::test_y`` -> ``perf_tests_test_x.py__test_y``). Distinct ids get
    distinct names: when sanitizing loses information (``test_f[1]`` and ``test_f(1)``) or the
    name is too long, a hash of the whole id is appended; plain ids keep their old names."""
    plain = str(test_id).replace("::", "__").replace("/", "_")
    return distinct_slug(str(test_id), plain, sanitize(plain), _MAX_SLUG, digits=12)


def hashed_slug_for_test(test_id: str) -> str:
    """The second directory name of a test whose :func:`slug_for_test` another test's record
    holds: the readable name plus a hash of the id."""
    return distinct_slug(str(test_id), "", slug_for_test(test_id), _MAX_SLUG)


def legacy_keys(test_id: str) -> list[tuple[str, str]]:
    """``(test id, directory name)`` under which a record of ``test_id`` may have been written
    before items had their own identity, newest rule first: the same id under the old naming
    (no hash for a sanitized id), then the id cut at its first ``[`` (its point's parameters,
    brackets in file names and all). Read, never written: the next save uses the new key."""
    out: list[tuple[str, str]] = []
    current = slug_for_test(test_id)
    for old_id in dict.fromkeys((str(test_id), base_test_id(str(test_id)))):
        slug = _legacy_slug(old_id)
        if slug != current and (old_id, slug) not in out:
            out.append((old_id, slug))
    return out


def _legacy_slug(test_id: str) -> str:
    """The directory name records were written under before :func:`slug_for_test` told
    sanitized ids apart."""
    slug = sanitize(str(test_id).replace("::", "__").replace("/", "_").replace("\\", "_"))
    if len(slug) > _MAX_SLUG:
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
    v = _with_keys(variance).sort_values(["seq", "point", "kernel", "metric"], kind="mergesort", ignore_index=True)
    cols = {c: pa.array(v[c].astype(str).tolist(), pa.string())
            for c in ("run", "point", "kernel", "metric", VARIANCE_KEY)}
    cols["seq"] = pa.array(v["seq"].to_numpy(np.int64), pa.int64())
    for c in ("df", "ss"):
        cols[c] = pa.array(v[c].to_numpy(np.float64), pa.float64())
    buf = io.BytesIO()
    pq.write_table(pa.table({c: cols[c] for c in (*VARIANCE_COLUMNS, VARIANCE_KEY)}), buf, compression="zstd",
                   store_schema=False)
    return buf.getvalue()


def _variance_from_parquet(data: bytes, path: Path) -> pd.DataFrame:
    try:
        df = pq.read_table(pa.BufferReader(data), use_threads=False).to_pandas()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise GemmperfInputError(path, f"unreadable parquet: {exc}") from None
    missing = [c for c in VARIANCE_COLUMNS if c not in df.columns]
    if missing:
        raise GemmperfInputError(path, f"variance history lacks columns {missing}")
    df = _with_keys(df)[[*VARIANCE_COLUMNS, VARIANCE_KEY]]
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
        (*VARIANCE_COLUMNS, VARIANCE_KEY), (object, "int64", object, object, object, "float64", "float64", object))})


def _with_keys(variance: pd.DataFrame) -> pd.DataFrame:
    """``variance`` with a :data:`VARIANCE_KEY` on every row (its ``run`` label where none)."""
    if VARIANCE_KEY not in variance.columns:
        return variance.assign(**{VARIANCE_KEY: variance["run"].astype(str)})
    key = variance[VARIANCE_KEY]
    if key.isna().any():
        return variance.assign(**{VARIANCE_KEY: key.where(key.notna(), variance["run"].astype(str))})
    return variance


def run_keys(samples: pd.DataFrame, points: Iterable[str] | None = None) -> dict[str, str]:
    """Per point (of ``points`` when given), the identity of a run's data: a SHA-256 of its
    samples as a baseline stores them (compacted, normalized), so raw and stored samples of one
    run, in any row order, give the same key and two runs' data never do."""
    text = samples["point"].astype(str)
    if points is not None:
        wanted = text.isin(set(map(str, points))).to_numpy()
        samples, text = samples[wanted], text[wanted]
    if not len(samples):
        return {}
    # Compacted and normalized once for all points (each point's rows are what compacting and
    # normalizing that point alone gives: compaction works per point, kernel and unit, and the
    # normalized rows sort by point first), except that a table holding dispatch counts is
    # taken as compacted already: points with and without them are compacted apart.
    counted = text.isin(set(text[(samples["metric"] == DISPATCH_COUNT).to_numpy()])).to_numpy()
    parts = [compact_samples(samples[m].reset_index(drop=True)) for m in (counted, ~counted) if m.any()]
    s = normalize_samples(parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True))
    columns = {c: s[c].astype(str).to_numpy(dtype=object) for c in _KEY_COLUMNS}
    values = s["value"].to_numpy(dtype="<f8")
    out = {}
    for point, rows in sorted(pd.Series(columns["point"]).groupby(columns["point"], sort=False).indices.items()):
        h = hashlib.sha256()
        for c in _KEY_COLUMNS:  # the text itself, not a writer's encoding of it
            h.update("\x1f".join(columns[c][rows]).encode("utf-8", "surrogatepass") + b"\x1e")
        h.update(values[rows].tobytes())
        out[str(point)] = "sha256:" + h.hexdigest()[:24]
    return out


def known_points(variance: pd.DataFrame | None, keys: dict[str, str]) -> list[str]:
    """The points of ``keys`` (:func:`run_keys`) whose run is already in ``variance``."""
    if variance is None or not len(variance):
        return []
    have = set(zip(variance["point"].astype(str), _with_keys(variance)[VARIANCE_KEY].astype(str)))
    return sorted(p for p, k in keys.items() if (p, k) in have)


def add_history(variance: pd.DataFrame | None, samples: pd.DataFrame, run: str,
                points: Iterable[str] | None = None, max_runs: int = MAX_HISTORY_RUNS) -> pd.DataFrame:
    """``variance`` plus the contribution of one run's ``samples`` (only ``points`` when
    given), keeping the newest ``max_runs`` runs per point. A point whose run is already in the
    history (same :func:`run_keys` key) is not added again: its evidence would count twice."""
    old = _empty_variance() if variance is None else _with_keys(variance)
    keys = run_keys(samples, points)
    for p in known_points(old, keys):
        del keys[p]
    s = samples[samples["point"].astype(str).isin(set(keys))]
    contrib = variance_contribution(s) if len(s) else None
    if contrib is None or contrib.empty:
        return old
    seq = int(old["seq"].max()) + 1 if len(old) else 1
    new = contrib.assign(run=str(run), seq=seq)
    new = new.assign(**{VARIANCE_KEY: new["point"].astype(str).map(keys)})[[*VARIANCE_COLUMNS, VARIANCE_KEY]]
    both = pd.concat([old, new], ignore_index=True) if len(old) else new
    # newest max_runs runs of each point
    runs = both[["point", "seq"]].drop_duplicates().sort_values(["point", "seq"], ascending=[True, False])
    runs = runs.groupby("point", sort=False).head(max_runs)
    keep = both.merge(runs, on=["point", "seq"], how="inner")
    return keep[[*VARIANCE_COLUMNS, VARIANCE_KEY]].reset_index(drop=True)


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
    for key in ("test_id", "hw_key"):
        if not isinstance(meta[key], str) or not meta[key]:
            raise GemmperfInputError(path, f"meta.json {key!r} is {meta[key]!r}, expected a non-empty string")
    gen = meta.get("generation", 0)
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
        raise GemmperfInputError(path, f"meta.json 'generation' is {gen!r}, expected a non-negative integer")
    version = meta.get("version")
    # the version names a subdirectory: anything but v<digits> could point outside the record
    if version is not None and not (isinstance(version, str) and _VERSION_RE.fullmatch(version)):
        raise GemmperfInputError(path, f"meta.json 'version' is {version!r}, expected v<number>")
    files = meta["files"]
    if not isinstance(files, dict) or any(not isinstance(files.get(n), dict) or "sha256" not in files[n]
                                          or not isinstance(files[n]["sha256"], str) for n in _DATA_FILES):
        raise GemmperfInputError(path, "meta.json 'files' lacks the checksums of "
                                       f"{', '.join(_DATA_FILES)}")
    return meta


def _check_summary(data: bytes, path: Path, meta: dict[str, Any]) -> None:
    try:
        # libyaml's safe loader when built in: the same documents, ~10x faster (every load checks this)
        doc = yaml.load(data.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise GemmperfInputError(path, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise GemmperfInputError(path, f"not a schema_version {SCHEMA_VERSION} baseline summary")
    if doc.get("test_id") != meta["test_id"] or doc.get("hw_key") != meta["hw_key"]:
        raise GemmperfInputError(path, "test_id/hw_key differ from meta.json")



def version_name(generation: int) -> str:
    """Directory name of a record's version ``generation`` (``v7``)."""
    return f"v{int(generation)}"


def parse_time(text: Any) -> _dt.datetime | None:
    """An ISO timestamp (naive means UTC), None when absent or unparsable."""
    try:
        t = _dt.datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


# ----------------------------------------------------------------------------- merging and diffs


def kept_points(old: BaselineRecord | None, new: BaselineRecord) -> list[str]:
    """Points of ``old`` that ``new`` does not carry: a merge keeps them, ``replace`` removes them."""
    if old is None:
        return []
    have = set(new.samples["point"].astype(str))
    return sorted(set(old.samples["point"].astype(str)) - have)


def merge_records(old: BaselineRecord | None, new: BaselineRecord, replace: bool = False) -> BaselineRecord:
    """The record a write of ``new`` over ``old`` stores: per point, ``new``'s samples replace
    ``old``'s; ``old``'s points that ``new`` lacks are kept unless ``replace``. Metadata merge
    the same way (``new``'s keys win; ``meta["points"]`` merged per point), so a run made with
    ``-k`` or one point of a pytest sweep never deletes the other points' samples."""
    if old is None or replace:
        return new
    keep = kept_points(old, new)
    if not keep:
        samples = new.samples
        old_points: dict[str, Any] = {}
    else:
        others = old.samples[old.samples["point"].astype(str).isin(keep)]
        samples = pd.concat([others.astype({c: str for c in _KEY_COLUMNS}),
                             new.samples.astype({c: str for c in _KEY_COLUMNS})], ignore_index=True)
        old_points = {p: v for p, v in (old.meta.get("points") or {}).items() if str(p) in set(keep)}
    meta = {**old.meta, **new.meta}
    if old_points or isinstance(new.meta.get("points"), dict):
        meta["points"] = {**old_points, **(new.meta.get("points") or {})}
    return BaselineRecord(test_id=new.test_id, hw_key=new.hw_key, samples=samples, meta=meta)


def diff_records(old: BaselineRecord | pd.DataFrame | None,
                 new: BaselineRecord | pd.DataFrame | None) -> pd.DataFrame:
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
