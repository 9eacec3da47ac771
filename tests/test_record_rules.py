"""The baseline record's rules (store/record.py) pinned on small in-memory tables, without a
store on disk: directory names of test ids (today's and the legacy ones a store still finds),
the canonical form of samples and its parquet encoding, what a record's files must hold to be
read (meta.json, summary.yaml, samples and variance history: each damage named in one line),
the variance history a run adds, summary.yaml's text, and how records merge and differ."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.store.record import (BaselineRecord, _changed_points, _check_summary, _now, _parse_blobs,
                                          _parse_meta, _sha256, _samples_from_parquet, _samples_to_parquet,
                                          _variance_from_parquet, _variance_to_parquet, add_history, diff_records,
                                          hashed_slug_for_test, kept_points, known_points, legacy_keys,
                                          merge_records, normalize_samples, parse_time, render_summary, run_keys,
                                          slug_for_test, summarize, version_name, versions_of)

P = Path("store/rec/v1/x")
SHA = {"sha256": "0" * 64}
COLUMNS = ["point", "kernel", "metric", "unit", "value"]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def rows(*specs) -> pd.DataFrame:
    """Sample rows from ``(point, kernel, metric, unit, value)`` tuples."""
    return pd.DataFrame(list(specs), columns=COLUMNS)


def run(point_factors: dict[str, float], kernels=("gemm",), units=4, per_unit=3) -> pd.DataFrame:
    """One run's dur_ns samples: per point, ``units`` processes of ``per_unit`` dispatches around
    1000 ns times the point's factor (a little spread between processes)."""
    out = []
    for p, f in point_factors.items():
        for k in kernels:
            for u in range(units):
                for i in range(per_unit):
                    out.append((p, k, "dur_ns", f"u{u}", f * 1000.0 * (1 + 0.01 * u) + i))
    return rows(*out)


def _message(call) -> str:
    with pytest.raises(GemmperfInputError) as err:
        call()
    text = str(err.value)
    assert "\n" not in text
    return text


# -- directory names -----------------------------------------------------------------------------

def test_a_plain_test_id_keeps_its_readable_directory_name():
    assert slug_for_test("perf_tests/test_x.py::test_y") == "perf_tests_test_x.py__test_y"
    assert legacy_keys("perf_tests/test_x.py::test_y") == []


def test_a_sanitized_test_id_gets_twelve_hex_digits_of_its_hash_and_keeps_its_legacy_names():
    tid = "a/t.py::test_x[ch28]"
    assert slug_for_test(tid) == f"a_t.py__test_x_ch28-{sha(tid)[:12]}"
    assert slug_for_test("a/t.py::test_x(ch28)") != slug_for_test(tid)
    assert hashed_slug_for_test(tid) == f"a_t.py__test_x_ch28-{sha(tid)[:12]}-{sha(tid)[:8]}"
    assert legacy_keys(tid) == [(tid, "a_t.py__test_x_ch28"), ("a/t.py::test_x", "a_t.py__test_x")]


def test_a_long_test_id_is_cut_to_150_characters_with_its_hash():
    tid = "tests/test_t.py::test_" + "x" * 200
    plain = tid.replace("::", "__").replace("/", "_")
    assert slug_for_test(tid) == f"{plain[:137]}-{sha(tid)[:12]}"
    # its point's parameters cut off: the record of the bare id, written before, is found
    assert legacy_keys(tid + "[1]") == [(tid, f"{plain[:137]}-{sha(tid)[:12]}")]
    exactly = "t" * 150  # at the limit: kept as it is, today and before
    assert slug_for_test(exactly) == exactly and legacy_keys(exactly) == []


# -- samples in canonical form -------------------------------------------------------------------

def test_samples_in_any_order_and_dtype_normalize_to_one_table():
    a = rows(("p2", "k", "dur_ns", "u1", 3), ("p1", "k", "dur_ns", "u0", 2.0), ("p1", "k", "dur_ns", "u0", 1.0),
             ("p10", "k", "dur_ns", "u0", 5))
    b = a.iloc[::-1].astype({"point": "category", "unit": "category"}).reset_index(drop=True)
    na, nb = normalize_samples(a), normalize_samples(b)
    pd.testing.assert_frame_equal(na, nb)
    assert list(na.columns) == COLUMNS and na["value"].dtype == "float64"
    assert list(na["point"]) == ["p1", "p1", "p10", "p2"] and list(na["value"]) == [1.0, 2.0, 5.0, 3.0]
    for c in COLUMNS[:4]:
        assert list(na[c].cat.categories) == sorted(set(na[c].astype(str)))
    assert _samples_to_parquet(na) == _samples_to_parquet(nb)


def test_categories_that_print_alike_become_one():
    s = rows(("p", "k", "dur_ns", "u0", 1.0), ("p", "k", "dur_ns", "u0", 2.0))
    s["unit"] = pd.Categorical([1, "1"])
    n = normalize_samples(s)
    assert list(n["unit"].cat.categories) == ["1"] and list(n["value"]) == [1.0, 2.0]


def test_an_unused_category_is_dropped():
    s = rows(("p", "k", "dur_ns", "u0", 1.0))
    s["kernel"] = pd.Categorical(["k"], categories=["a", "k"])
    assert list(normalize_samples(s)["kernel"].cat.categories) == ["k"]


@pytest.mark.parametrize("change, problem", [
    (lambda s: s.drop(columns=["unit"]), "samples table lacks columns ['unit']"),
    (lambda s: s.assign(kernel=[None, "k"]), "samples column 'kernel' has missing values"),
    (lambda s: s.assign(value=["fast", "1"]), "samples column 'value' is not numeric"),
])
def test_samples_that_cannot_be_normalized_are_named(change, problem):
    s = rows(("p", "k", "dur_ns", "u0", 1.0), ("p", "k", "dur_ns", "u1", 2.0))
    assert _message(lambda: normalize_samples(change(s), P)).startswith(f"{P}: {problem}")


def test_samples_parquet_stores_each_key_string_once_and_no_schema_metadata():
    s = normalize_samples(run({"p1": 1, "p2": 2}))
    data = _samples_to_parquet(s)
    meta = pq.read_metadata(pa.BufferReader(data))
    assert meta.metadata is None  # no pandas/arrow schema: the bytes depend on the data only
    for i in range(4):
        assert "PLAIN_DICTIONARY" in meta.row_group(0).column(i).encodings or \
            "RLE_DICTIONARY" in meta.row_group(0).column(i).encodings
    back = _samples_from_parquet(data, P)
    pd.testing.assert_frame_equal(back, s, check_categorical=False)


def _parquet(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf)
    return buf.getvalue()


GOOD = rows(("p", "k", "dur_ns", "u0", 1.0), ("p", "k", "dur_ns", "u1", 2.0))


@pytest.mark.parametrize("data, problem", [
    (b"PAR1 not parquet", "unreadable parquet"),
    (_parquet(GOOD.drop(columns=["unit"])), "samples lack columns ['unit']"),
    (_parquet(GOOD.assign(kernel=["k", None])), "samples column 'kernel' is not a complete string column"),
    (_parquet(GOOD.assign(point=[1, 2])), "samples column 'point' is not a complete string column"),
    (_parquet(GOOD.assign(value=[1, 2])), "samples column 'value' is int64, expected float64"),
])
def test_a_damaged_samples_file_is_named(data, problem):
    assert _message(lambda: _samples_from_parquet(data, P)).startswith(f"{P}: {problem}")


# -- variance history ----------------------------------------------------------------------------

def _history(**cols) -> pd.DataFrame:
    base = {"run": ["r1", "r2"], "seq": [1, 2], "point": ["p", "p"], "kernel": ["k", "k"], "metric": ["dur_ns"] * 2,
            "df": [3.0, 1.0], "ss": [0.5, 0.0]}
    return pd.DataFrame(base | cols)


def test_a_variance_history_round_trips_with_its_keys_and_no_schema_metadata():
    h = _history(key=["sha256:a", None])  # a row written before keys existed reads its run label
    data = _variance_to_parquet(h)
    assert pq.read_metadata(pa.BufferReader(data)).metadata is None
    back = _variance_from_parquet(data, P)
    assert list(back.columns) == ["run", "seq", "point", "kernel", "metric", "df", "ss", "key"]
    assert list(back["key"]) == ["sha256:a", "r2"] and list(back["df"]) == [3.0, 1.0] and list(back["ss"]) == [0.5, 0.0]
    old = _variance_from_parquet(_parquet(_history()), P)  # no key column at all
    assert list(old["key"]) == ["r1", "r2"]


@pytest.mark.parametrize("df, ss", [(0.0, 1.0), (-1.0, 1.0), (np.inf, 1.0), (np.nan, 1.0), (2.0, -0.5),
                                    (2.0, np.nan)])
def test_a_variance_row_without_positive_df_and_nonnegative_ss_is_named_by_its_number(df, ss):
    data = _parquet(_history(df=[3.0, df], ss=[0.5, ss]))
    assert _message(lambda: _variance_from_parquet(data, P)) == \
        f"{P}: variance history row 2: df must be > 0 and ss >= 0"


def test_a_damaged_variance_file_is_named():
    assert "unreadable parquet" in _message(lambda: _variance_from_parquet(b"garbage", P))
    data = _parquet(_history().drop(columns=["ss"]))
    assert _message(lambda: _variance_from_parquet(data, P)) == f"{P}: variance history lacks columns ['ss']"


def test_a_records_files_parse_to_samples_and_a_history_when_it_has_one():
    s = normalize_samples(GOOD)
    blobs = {"samples.parquet": _samples_to_parquet(s)}
    samples, variance = _parse_blobs(blobs, P)
    assert variance is None and list(samples["value"]) == [1.0, 2.0]
    samples, variance = _parse_blobs(blobs | {"variance.parquet": _variance_to_parquet(_history())}, P)
    assert list(variance["seq"]) == [1, 2]


def test_history_for_one_point_or_all_and_none_when_empty():
    rec = BaselineRecord("t", "hw", GOOD)
    assert rec.generation == 0 and rec.history_for() is None
    rec.variance = _history().iloc[:0]
    assert rec.history_for() is None
    rec.variance = _history(point=["p", "q"])
    assert list(rec.history_for()["point"]) == ["p", "q"]
    assert list(rec.history_for("q")["run"]) == ["r2"]


def test_a_runs_key_is_its_data_in_any_order_and_never_another_runs():
    a = run({"p1": 1, "p2": 2})
    keys = run_keys(a)
    assert sorted(keys) == ["p1", "p2"] and all(re.fullmatch(r"sha256:[0-9a-f]{24}", k) for k in keys.values())
    assert run_keys(a.iloc[::-1].reset_index(drop=True)) == keys
    assert run_keys(normalize_samples(a)) == keys
    b = run({"p1": 1.5, "p2": 2})
    assert run_keys(b)["p1"] != keys["p1"] and run_keys(b)["p2"] == keys["p2"]
    assert run_keys(a, ["p2", "p9"]) == {"p2": keys["p2"]}


def test_known_points_are_those_whose_run_the_history_holds():
    keys = {"p1": "sha256:a", "p2": "sha256:b"}
    hist = _history(point=["p1", "p2"], key=["sha256:a", "sha256:x"])
    assert known_points(hist, keys) == ["p1"]
    assert known_points(None, keys) == [] and known_points(pd.DataFrame(), keys) == []
    assert known_points(_history(run=["sha256:b", "r"], point=["p2", "p2"]), keys) == ["p2"]  # legacy: the run label


def test_each_run_adds_its_points_once_with_the_next_sequence_number():
    first = run({"p1": 1, "p2": 2})
    h1 = add_history(None, first, "run-1")
    assert list(h1.columns) == ["run", "seq", "point", "kernel", "metric", "df", "ss", "key"]
    assert set(h1["seq"]) == {1} and set(h1["run"]) == {"run-1"} and sorted(set(h1["point"])) == ["p1", "p2"]
    assert (h1["df"] == 3).all() and (h1["ss"] >= 0).all()
    keys = run_keys(first)
    assert list(h1["key"]) == [keys[p] for p in h1["point"]]
    pd.testing.assert_frame_equal(add_history(h1, first, "again"), h1)  # the same data: not twice
    h2 = add_history(h1, run({"p1": 1.2, "p2": 2}), "run-2")
    assert list(h2.index) == list(range(len(h2)))
    assert sorted(map(tuple, h2[["point", "seq"]].drop_duplicates().to_numpy().tolist())) == [
        ("p1", 1), ("p1", 2), ("p2", 1)]
    h3 = add_history(h2, run({"p1": 1.3, "p2": 2.5}), "run-3", points=["p2"])
    assert sorted(set(h3.loc[h3["seq"] == 3, "point"])) == ["p2"]


def test_the_history_keeps_the_newest_twenty_runs_of_each_point():
    one = add_history(None, run({"p1": 1}), "r0")
    old = pd.concat([one.assign(seq=i, run=f"r{i}", key=f"k{i}") for i in range(1, 21)], ignore_index=True)
    new = add_history(old, run({"p1": 1.1}), "r21")
    assert sorted(set(new["seq"])) == list(range(2, 22))
    assert sorted(set(add_history(old, run({"p1": 1.1}), "r21", max_runs=3)["seq"])) == [19, 20, 21]


def test_changed_points_are_those_whose_samples_differ():
    old = normalize_samples(rows(("a", "k", "dur_ns", "u0", 1.0), ("b", "k", "dur_ns", "u0", 1.0),
                                 ("c", "k", "dur_ns", "u0", 1.0), ("d", "k", "dur_ns", "u0", 1.0),
                                 ("e", "k", "dur_ns", "u0", 1.0), ("gone", "k", "dur_ns", "u0", 1.0)))
    new = normalize_samples(rows(("a", "k", "dur_ns", "u0", 1.0),  # the same
                                 ("b", "k", "dur_ns", "u0", 2.0),  # another value
                                 ("c", "k", "dur_ns", "u0", 1.0), ("c", "k", "dur_ns", "u1", 1.0),  # more rows
                                 ("d", "k2", "dur_ns", "u0", 1.0),  # another kernel
                                 ("e", "k", "dur_ns", "u9", 1.0)))  # another unit
    assert _changed_points(old, new) == ["b", "c", "d", "e"]


# -- meta.json and summary.yaml ------------------------------------------------------------------

META = {"schema_version": 1, "test_id": "t.py::test_x", "hw_key": "gfx942", "generation": 3, "version": "v3",
        "files": {"samples.parquet": SHA, "summary.yaml": SHA}}


def test_a_files_checksum_is_its_sha256_as_sha256sum_prints_it():
    assert _sha256(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_a_valid_meta_json_is_read_as_it_is():
    assert _parse_meta(json.dumps(META).encode(), P) == META
    lean = {k: v for k, v in META.items() if k not in ("generation", "version")}
    assert _parse_meta(json.dumps(lean).encode(), P) == lean
    assert _parse_meta(json.dumps(META | {"generation": 0}).encode(), P)["generation"] == 0


@pytest.mark.parametrize("data, problem", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[]", "not a gemmperf baseline meta.json (no schema_version)"),
    (b'["schema_version"]', "not a gemmperf baseline meta.json (no schema_version)"),
    (b"{}", "not a gemmperf baseline meta.json (no schema_version)"),
    (META | {"schema_version": 2}, "baseline schema_version 2, this gemmperf reads 1 (written by a newer gemmperf)"),
    (META | {"schema_version": 0}, "baseline schema_version 0, this gemmperf reads 1"),
    (META | {"schema_version": "1"}, "baseline schema_version '1', this gemmperf reads 1"),
    ({k: v for k, v in META.items() if k != "test_id"}, "meta.json lacks 'test_id'"),
    ({k: v for k, v in META.items() if k != "hw_key"}, "meta.json lacks 'hw_key'"),
    ({k: v for k, v in META.items() if k != "files"}, "meta.json lacks 'files'"),
    (META | {"test_id": ""}, "meta.json 'test_id' is '', expected a non-empty string"),
    (META | {"hw_key": 5}, "meta.json 'hw_key' is 5, expected a non-empty string"),
    (META | {"generation": -1}, "meta.json 'generation' is -1, expected a non-negative integer"),
    (META | {"generation": True}, "meta.json 'generation' is True, expected a non-negative integer"),
    (META | {"generation": 1.5}, "meta.json 'generation' is 1.5, expected a non-negative integer"),
    (META | {"version": "../x"}, "meta.json 'version' is '../x', expected v<number>"),
    (META | {"version": 3}, "meta.json 'version' is 3, expected v<number>"),
    (META | {"version": "v"}, "meta.json 'version' is 'v', expected v<number>"),
    (META | {"files": []}, "meta.json 'files' lacks the checksums of samples.parquet, summary.yaml"),
    (META | {"files": {}}, "meta.json 'files' lacks the checksums of samples.parquet, summary.yaml"),
    (META | {"files": {"samples.parquet": SHA}}, "meta.json 'files' lacks the checksums"),
    (META | {"files": {"samples.parquet": SHA, "summary.yaml": "0" * 64}}, "meta.json 'files' lacks the checksums"),
    (META | {"files": {"samples.parquet": SHA, "summary.yaml": {"bytes": 3}}}, "meta.json 'files' lacks the checksums"),
    (META | {"files": {"samples.parquet": {"sha256": None}, "summary.yaml": SHA}}, "meta.json 'files' lacks the checksums"),
])
def test_a_damaged_meta_json_is_named_in_one_line(data, problem):
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    assert _message(lambda: _parse_meta(raw, P)).startswith(f"{P}: {problem}")


def _summary(**doc) -> bytes:
    return yaml.safe_dump({"schema_version": 1, "test_id": META["test_id"], "hw_key": META["hw_key"]} | doc).encode()


def test_a_summary_that_matches_its_meta_json_passes():
    assert _check_summary(_summary(points=[]), P, META) is None


@pytest.mark.parametrize("data, problem", [
    (b"a: [1, 2", "not valid YAML: "),
    (b"\xff", "not valid YAML: 'utf-8' codec can't decode"),
    (b"- 1\n- 2\n", "not a schema_version 1 baseline summary"),
    (_summary(schema_version=2), "not a schema_version 1 baseline summary"),
    (_summary(test_id="other"), "test_id/hw_key differ from meta.json"),
    (_summary(hw_key="gfx90a"), "test_id/hw_key differ from meta.json"),
])
def test_a_damaged_summary_is_named_in_one_line(data, problem):
    text = _message(lambda: _check_summary(data, P, META))
    assert text.startswith(f"{P}: {problem}")
    assert "line 1, column" not in text  # the YAML problem's first line only


# -- summary.yaml's text -------------------------------------------------------------------------

KERNEL = "void gemm_kernel<float, 128, 128, 32>(float const*, float const*, float*, int, int, int, int, int)"


def test_summary_yaml_is_one_line_per_metric_with_rounded_statistics():
    s = rows(*[("p1", KERNEL, "dur_ns", f"u{u}", 123.456789 + u * 1e-9) for u in range(2)],
             ("p1", KERNEL, "tflops", "u0", 1.0), ("p1", "日本", "dur_ns", "u0", 0.0),
             ("p2", "k", "big", "u0", 1e16), ("p2", "k", "mid", "u0", 3.0), ("p2", "k", "nan", "u0", np.nan))
    meta = {"run": {"host": "h1", "versions": {"rocm_version": "6.2"}}, "git_commit": "abc"}
    text = render_summary(BaselineRecord("t.py::test_x", "gfx942", s, meta=meta)).decode()
    lines = text.splitlines()
    assert lines[0].startswith("# gemmperf baseline summary") and lines[2] == "schema_version: 1"
    assert lines[3:5] == ["test_id: t.py::test_x", "hw_key: gfx942"]
    assert f"  - kernel: {KERNEL}" in lines  # long names stay on one line
    assert "      dur_ns: {n_units: 2, n: 2, median: 123.5, p05: 123.5, p95: 123.5}" in lines
    assert "      tflops: {n_units: 1, n: 1, median: 1, p05: 1, p95: 1}" in lines
    assert "  - kernel: 日本" in lines
    doc = yaml.safe_load(text)
    assert doc["source"] == {"rocm_version": "6.2", "git_commit": "abc", "host": "h1"}
    p2 = doc["points"][1]["kernels"][0]["metrics"]
    assert p2["big"]["median"] == 1e16 and isinstance(p2["big"]["median"], float)  # no int beyond 2**53
    assert p2["mid"]["median"] == 3 and isinstance(p2["mid"]["median"], int)
    assert p2["nan"]["median"] is None
    zero = doc["points"][0]["kernels"][1]["metrics"]["dur_ns"]
    assert zero["median"] == 0 and isinstance(zero["median"], int)
    assert render_summary(BaselineRecord("t.py::test_x", "gfx942", s.iloc[::-1], meta=meta)).decode() == text
    assert render_summary(BaselineRecord("t.py::test_x", "gfx942", None, meta=meta), normalize_samples(s)).decode() == text


def test_summarize_gives_the_observed_combinations_with_their_quantiles():
    s = normalize_samples(rows(*[("p1", "k1", "dur_ns", f"u{i % 2}", float(i)) for i in range(1, 101)],
                               ("p2", "k2", "dur_ns", "u0", 7.0)))
    st = summarize(s)
    assert list(st.columns) == ["point", "kernel", "metric", "n_units", "n", "median", "p05", "p95"]
    assert st[["point", "kernel"]].to_numpy().tolist() == [["p1", "k1"], ["p2", "k2"]]
    assert st["n_units"].tolist() == [2, 1] and st["n"].tolist() == [100, 1]
    assert st["median"].tolist() == [50.5, 7.0]
    assert st["p05"].tolist() == pytest.approx([5.95, 7.0]) and st["p95"].tolist() == pytest.approx([95.05, 7.0])


def test_versions_are_found_in_the_meta_its_run_or_the_runs_versions():
    meta = {"host": None, "torch_version": "2.5", "run": {"host": "h1", "versions": {"host": "h2", "rocm_version": "6.2"}}}
    v = versions_of(meta)
    assert list(v) == ["rocm_version", "rocprofv3_version", "torch_version", "driver_version", "git_commit", "host", "date"]
    assert v["host"] == "h1" and v["rocm_version"] == "6.2" and v["torch_version"] == "2.5"
    assert v["git_commit"] is None
    assert versions_of({"run": "not a mapping", "date": "2026-11-29"})["date"] == "2026-11-29"


def test_times_and_version_names():
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", _now())
    assert abs(parse_time(_now()) - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(minutes=5)
    assert parse_time("2026-11-29T10:00:00") == dt.datetime(2026, 11, 29, 10, tzinfo=dt.timezone.utc)
    t = parse_time("2026-11-29T10:00:00+02:00")
    assert t.utcoffset() == dt.timedelta(hours=2)
    assert parse_time("yesterday") is None and parse_time(None) is None
    assert version_name(7) == "v7" and version_name(np.int64(3)) == "v3"


# -- merging and diffs ---------------------------------------------------------------------------

def _rec(samples, **meta) -> BaselineRecord:
    return BaselineRecord("t", "hw", samples, meta=meta)


def test_a_write_replaces_the_points_it_carries_and_keeps_the_others_unless_replacing():
    old = _rec(rows(("p1", "k", "dur_ns", "u0", 1.0), ("p2", "k", "dur_ns", "u0", 2.0)),
               host="a", points={"p1": {"n": 1}, "p2": {"n": 2}})
    new = _rec(rows(("p1", "k", "dur_ns", "u0", 9.0)), git_commit="c")
    assert kept_points(old, new) == ["p2"] and kept_points(None, new) == []
    merged = merge_records(old, new)
    pd.testing.assert_frame_equal(merged.samples, rows(("p2", "k", "dur_ns", "u0", 2.0), ("p1", "k", "dur_ns", "u0", 9.0)))
    assert merged.meta == {"host": "a", "git_commit": "c", "points": {"p2": {"n": 2}}}
    assert merge_records(old, new, replace=True) is new and merge_records(None, new) is new
    newer = _rec(rows(("p1", "k", "dur_ns", "u0", 9.0)), points={"p1": {"n": 9}})
    assert merge_records(old, newer).meta["points"] == {"p2": {"n": 2}, "p1": {"n": 9}}
    same_points = _rec(rows(("p1", "k", "dur_ns", "u0", 9.0), ("p2", "k", "dur_ns", "u0", 8.0)),
                       points={"p1": {"n": 9}})
    merged = merge_records(old, same_points)
    assert merged.samples is same_points.samples and merged.meta["points"] == {"p1": {"n": 9}}
    assert merge_records(old, _rec(same_points.samples)).meta == {"host": "a", "points": {"p1": {"n": 1}, "p2": {"n": 2}}}


def test_a_diff_tells_added_removed_changed_and_unchanged_rows():
    old = rows(("a", "k", "dur_ns", "u0", 1.0), ("b", "k", "dur_ns", "u0", 1.0), ("c", "k", "dur_ns", "u0", 1.0),
               ("d", "k", "dur_ns", "u0", 1.0), ("e", "k", "dur_ns", "u0", 1.0))
    new = rows(("a", "k", "dur_ns", "u0", 1.0 + 1e-13),  # float rounding only
               ("b", "k", "dur_ns", "u0", 1.5), ("c", "k", "dur_ns", "u0", 1.0), ("c", "k", "dur_ns", "u1", 1.0),
               ("d", "k", "dur_ns", "u0", 1.0), ("f", "k", "dur_ns", "u0", 2.0))
    d = diff_records(_rec(old), _rec(new))
    assert d["point"].tolist() == ["a", "b", "c", "d", "e", "f"]
    assert d["change"].tolist() == ["unchanged", "changed", "changed", "unchanged", "removed", "added"]
    assert d["ratio"].tolist()[1] == 1.5 and np.isnan(d["ratio"].tolist()[4])
    assert d["old_n_units"].tolist()[2] == 1 and d["new_n_units"].tolist()[2] == 2
    assert list(d.index) == list(range(6))
    first = diff_records(None, new)
    assert (first["change"] == "added").all() and first["point"].tolist() == ["a", "b", "c", "d", "f"]
    assert (diff_records(old, None)["change"] == "removed").all()
