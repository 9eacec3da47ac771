"""Run-history store (history/values.py, history/store.py): values, immutable appends, reads
through pyarrow.dataset, fsspec URLs, concurrent writers, damaged files, retention."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.samples import compact_samples
from pytest_gemmperf.history.store import HISTORY_COLUMNS, HistoryStore, RunInfo
from pytest_gemmperf.history.values import VALUE_COLUMNS, history_values

REPO = Path(__file__).resolve().parent.parent


def _samples(rng: np.random.Generator, level: float = 1000.0, units: int = 3, n: int = 41) -> pd.DataFrame:
    rows = []
    for u in range(units):
        unit = f"host/{100 + u}/0/0"
        for v in level * np.exp(rng.normal(0, 0.02, n)):
            rows.append(("ch28", "gemm_a", "dur_ns", unit, float(v)))
        rows.append(("ch28", "category:gemm", "category_total_ns", unit, level * n))
        rows.append(("ch28", "*", "exposed_comm_ns", unit, 55.0 + u))
    return pd.DataFrame(rows, columns=["point", "kernel", "metric", "unit", "value"])


def _values(test: str = "perf/test_a.py::test_a", level: float = 1000.0, seed: int = 0) -> pd.DataFrame:
    return history_values(_samples(np.random.default_rng(seed), level), test=test)


# ------------------------------------------------------------------------------------ values

def test_history_values_one_value_per_unit_and_metric():
    s = _samples(np.random.default_rng(1))
    v = history_values(s, test="t::x")
    assert tuple(v.columns) == VALUE_COLUMNS
    assert not v.duplicated(["test", "point", "kernel", "metric", "unit"]).any()
    dur = v[v["metric"] == "dur_ns"].set_index("unit")["value"]
    expect = s[s["metric"] == "dur_ns"].groupby("unit")["value"].median()
    pd.testing.assert_series_equal(dur.sort_index(), expect.sort_index(), check_names=False)
    # unit-level metrics pass unchanged
    exp = v[v["metric"] == "exposed_comm_ns"].sort_values("unit")["value"].tolist()
    assert exp == [55.0, 56.0, 57.0]
    assert v["value"].dtype == np.float64 and set(v["test"]) == {"t::x"}


def test_history_values_of_compacted_samples_keep_the_median_and_drop_counts():
    s = _samples(np.random.default_rng(2), n=101)  # odd count: the 21 quantiles keep the median
    compact = compact_samples(s)
    assert (compact["metric"] == "dispatch_count").any()
    v = history_values(compact, test="t")
    assert "dispatch_count" not in set(v["metric"])
    full = history_values(s, test="t")
    pd.testing.assert_frame_equal(v.reset_index(drop=True), full.reset_index(drop=True))


def test_history_values_rejects_a_non_samples_table():
    with pytest.raises(GemmperfInputError, match="lacks"):
        history_values(pd.DataFrame({"x": [1]}), test="t")


# ------------------------------------------------------------------------------------ store

def test_append_read_round_trip_types_order_and_filters(tmp_path):
    st = HistoryStore(tmp_path / "hist")
    assert st.read().empty and tuple(st.read().columns) == HISTORY_COLUMNS
    odd = "tests/perf/test_x.py::test_y[a=b%c d]"  # '/', '::', '=', '%' and a space in one segment
    for i, t in enumerate(["2026-03-02T10:00:00Z", "2026-03-01T10:00:00+00:00", "2026-03-03T11:00:00"]):
        st.append(_values(odd, seed=i), RunInfo(f"run-{i}", time=t, commit=f"c{i}", branch="main",
                                                hw_key="gfx942-MI300X-x8", meta={"torch_version": "2.6"}))
    st.append(_values("other::t", seed=9), RunInfo("run-9", time="2026-03-04", hw_key="sm90-H100-x1"))
    h = st.read()
    assert tuple(h.columns) == HISTORY_COLUMNS
    assert str(h["time"].dtype) == "datetime64[ns, UTC]" and h["value"].dtype == np.float64
    # sorted by time: run-1 (Mar 1) first although appended second
    assert h.drop_duplicates("run_id")["run_id"].tolist() == ["run-1", "run-0", "run-2", "run-9"]
    assert set(h.loc[h["run_id"] == "run-9", "commit"]) == {None}
    a = st.read(test=odd)
    assert set(a["test"]) == {odd} and set(a["hw_key"]) == {"gfx942-MI300X-x8"} and a["run_id"].nunique() == 3
    assert len(a) == 3 * len(_values(odd))
    k = st.read(kernel_contains="gemm")
    assert set(k["kernel"]) == {"gemm_a", "category:gemm"}
    assert set(st.read(hw_key="sm90-H100-x1")["run_id"]) == {"run-9"}
    assert st.read(test="nope").empty and st.read(hw_key="nope").empty
    # the stored values are exactly what was appended
    got = a[a["run_id"] == "run-0"].sort_values(["kernel", "metric", "unit"])["value"].to_numpy()
    want = _values(odd, seed=0).sort_values(["kernel", "metric", "unit"])["value"].to_numpy()
    np.testing.assert_array_equal(got, want)


def test_runs_carry_the_metadata_without_a_second_file(tmp_path):
    st = HistoryStore(str(tmp_path))
    run = RunInfo("ci-17", time="2026-05-01T00:00:00Z", commit="abc123", branch="feature/x", hw_key="hw1",
                  meta={"versions": {"rocm": "6.4"}, "telemetry": {"throttled": 0}})
    st.append(pd.concat([_values("t1"), _values("t2")]), run)  # two tests -> two files
    r = st.runs()
    assert len(r) == 1
    row = r.iloc[0]
    assert (row["run_id"], row["commit"], row["branch"], row["hw_key"]) == ("ci-17", "abc123", "feature/x", "hw1")
    assert row["tests"] == 2 and row["files"] == 2
    assert row["meta"] == {"versions": {"rocm": "6.4"}, "telemetry": {"throttled": 0}}
    assert row["time"] == pd.Timestamp("2026-05-01", tz="UTC")
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and p.name.startswith(".")) == []


def test_appends_never_overwrite_and_leave_no_temp_files(tmp_path):
    st = HistoryStore(tmp_path)
    # one run, three points (as a pytest session appends them): three files, one name stem
    paths = {st.append(_values().assign(point=f"p{i}"), RunInfo("same-run", hw_key="hw")) for i in range(3)}
    assert len(paths) == 3 and all(Path(p).is_file() for p in paths)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 3 and all(p.suffix == ".parquet" and not p.name.startswith(".") for p in files)
    assert st.runs()["files"].tolist() == [3]


def test_bad_run_info_and_empty_values_are_one_line_errors(tmp_path):
    with pytest.raises(GemmperfInputError, match="non-empty run id"):
        RunInfo("  ")
    with pytest.raises(GemmperfInputError, match="not ISO 8601|not a time"):
        RunInfo("r", time="yesterday-ish")
    with pytest.raises(GemmperfInputError, match="no values"):
        HistoryStore(tmp_path).append(_values().iloc[:0], RunInfo("r"))
    assert not any(tmp_path.rglob("*.parquet"))


def test_memory_and_file_urls_use_the_same_code_path(tmp_path):
    import fsspec

    url = f"memory://gemmperf-test-{uuid.uuid4().hex}/hist"
    try:
        st = HistoryStore(url)
        assert not st.local
        p = st.append(_values(seed=1), RunInfo("m1", time="2026-01-01", hw_key="hw"))
        st.append(_values(seed=2), RunInfo("m2", time="2026-01-02", hw_key="hw"))
        assert p.startswith("memory://") and fsspec.filesystem("memory").exists(p)
        h = st.read()
        assert h["run_id"].drop_duplicates().tolist() == ["m1", "m2"] and len(h) == 2 * len(_values())
        assert st.runs()["run_id"].tolist() == ["m1", "m2"]
        assert st.prune(keep_last=1, dry_run=False)["run_id"].tolist() == ["m1"]
        assert HistoryStore(url).runs()["run_id"].tolist() == ["m2"]
    finally:
        fsspec.filesystem("memory").rm(url.split("://", 1)[1].split("/")[0], recursive=True)
    # a file:// URL lands in the same layout a plain path reads
    HistoryStore(f"file://{tmp_path}").append(_values(), RunInfo("f1", hw_key="hw"))
    assert HistoryStore(tmp_path).runs()["run_id"].tolist() == ["f1"]


def test_unknown_protocol_is_a_one_line_error():
    with pytest.raises(GemmperfInputError, match="cannot open history store"):
        HistoryStore("nosuchproto://bucket/x")


_WRITER = textwrap.dedent("""
    import sys
    import numpy as np, pandas as pd
    from pytest_gemmperf.history.store import HistoryStore, RunInfo
    root, machine, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    st = HistoryStore(root)
    for i in range(n):
        v = pd.DataFrame({"test": "t::x", "point": "p", "kernel": ["k1", "k2"], "metric": "dur_ns",
                          "unit": f"{machine}/1/0/0", "value": [float(i), float(i) + 0.5]})
        st.append(v, RunInfo(f"{machine}-{i:02d}", time=pd.Timestamp("2026-01-01", tz="UTC")
                             + pd.Timedelta(seconds=i), hw_key="shared-hw"))
""")


@pytest.mark.slow  # two real writer processes, about 1.3 s
def test_two_ci_machines_appending_concurrently_lose_nothing(tmp_path):
    """Two real processes append 20 runs each into one directory, at the same time, into the
    same partition directories: all 40 runs and all 80 values come back."""
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    root = tmp_path / "hist"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(script), str(root), m, "20"], env=env,
                              stderr=subprocess.PIPE, text=True) for m in ("ci-a", "ci-b")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    st = HistoryStore(root)
    runs = st.runs()
    assert len(runs) == 40
    assert sorted(runs["run_id"]) == sorted(f"{m}-{i:02d}" for m in ("ci-a", "ci-b") for i in range(20))
    h = st.read()
    assert len(h) == 80
    for m in ("ci-a", "ci-b"):
        got = h[h["unit"] == f"{m}/1/0/0"].sort_values(["run_id", "kernel"])["value"].to_numpy()
        np.testing.assert_array_equal(got, np.repeat(np.arange(20.0), 2) + np.tile([0.0, 0.5], 20))
    assert len(list(root.rglob("*.parquet"))) == 40 and not [p for p in root.rglob(".*")]


# ------------------------------------------------------------------------------------ damage

def _store_with_runs(root: Path, n: int = 2) -> tuple[HistoryStore, list[str]]:
    st = HistoryStore(root)
    return st, [st.append(_values(seed=i), RunInfo(f"r{i}", time=f"2026-02-0{i + 1}", hw_key="hw"))
                for i in range(n)]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_history_file_is_one_line_naming_it(tmp_path, damage):
    st, paths = _store_with_runs(tmp_path / "h")
    bad = Path(paths[1])
    data = bad.read_bytes()
    bad.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"not parquet at all\n" * 50,
                     "empty": b""}[damage])
    for call in (st.read, st.runs, lambda: st.prune(keep_last=1)):
        with pytest.raises(GemmperfInputError) as ei:
            call()
        msg = str(ei.value)
        assert "\n" not in msg and msg.startswith(str(bad)), msg
        assert "not a readable Parquet history file" in msg
    assert Path(paths[0]).is_file() and bad.is_file()  # nothing deleted by a failed prune


def test_a_stray_parquet_file_is_not_read_as_history(tmp_path):
    st, _ = _store_with_runs(tmp_path / "h")
    stray = tmp_path / "h" / "hw_key=hw" / "samples.parquet"
    pd.DataFrame({"x": [1.0]}).to_parquet(stray)
    with pytest.raises(GemmperfInputError, match="not a history file") as ei:
        st.read()
    assert str(ei.value).startswith(str(stray))


# ------------------------------------------------------------------------------------ prune

def test_prune_keep_last_per_hw_key_and_older_than(tmp_path):
    st = HistoryStore(tmp_path)
    for hw in ("hwA", "hwB"):
        for i in range(4):
            st.append(_values(seed=i), RunInfo(f"{hw}-{i}", time=f"2026-06-0{i + 1}", hw_key=hw))
    (tmp_path / "README.txt").write_text("not history\n")
    dry = st.prune(keep_last=2)
    assert sorted(dry["run_id"]) == ["hwA-0", "hwA-1", "hwB-0", "hwB-1"]
    assert len(st.runs()) == 8  # dry run deletes nothing
    old = st.prune(older_than_days=10, now=pd.Timestamp("2026-06-13T12:00", tz="UTC"))
    assert sorted(old["run_id"]) == ["hwA-0", "hwA-1", "hwA-2", "hwB-0", "hwB-1", "hwB-2"]
    gone = st.prune(keep_last=3, hw_key="hwB", dry_run=False)
    assert gone["run_id"].tolist() == ["hwB-0"]
    assert sorted(st.runs()["run_id"]) == sorted([f"hwA-{i}" for i in range(4)] + ["hwB-1", "hwB-2", "hwB-3"])
    assert (tmp_path / "README.txt").read_text() == "not history\n"
    with pytest.raises(GemmperfInputError, match="keep-last"):
        st.prune()
    with pytest.raises(GemmperfInputError, match=">= 1"):
        st.prune(keep_last=0)
