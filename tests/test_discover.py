"""Input discovery and loading: layouts built in tmp_path from the torch fixtures, stub rocprofv3
readers (to test discovery alone), and the real readers on real shared data."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES, shared_file
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.discover import discover, discover_with_notes, load, load_counters
from pytest_gemmperf.traces.schema import (NoDispatches, Trace, finalize_counters,
                                           finalize_dispatches, validate_dispatches)

ROCM = FIXTURES / "torch" / "rocm_sdk_rank3.pt.trace.json"
CUDA = FIXTURES / "torch" / "gpuhost-01_777.1700000001000000000.pt.trace.json.gz"


def _torch_without_rank(dst: Path) -> Path:
    doc = json.loads(ROCM.read_text())
    del doc["distributedInfo"]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(doc))
    return dst


def _touch(p: Path, text: str = "x") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


# ---- stub rocprofv3 readers: discovery is tested apart from the parsers ----------------------

def _stub_dispatches(path, source: str) -> pd.DataFrame:
    text = Path(path).read_text()
    if '"EMPTY"' in text:
        raise NoDispatches(path, "no kernel dispatches in 1 process(es)")
    n = 3
    df = pd.DataFrame({"source": source, "kernel": ["Cijk_stub"] * n,
                       "start_ns": [0, 100, 200], "end_ns": [50, 150, 250], "agent": [0] * n})
    return finalize_dispatches(df, str(path))


@pytest.fixture
def stub_readers(monkeypatch):
    calls: list[tuple[str, str]] = []

    def rj(path):
        calls.append(("json", str(path)))
        if '"COUNTERS"' in Path(path).read_text():
            d = finalize_dispatches(pd.DataFrame({"start_ns": [], "end_ns": [], "kernel": []}), None,
                                    allow_empty=True)
            c = finalize_counters(pd.DataFrame({"counter": ["SQ_WAVES"], "value": [4.0],
                                                "source": "rocprof-json"}), str(path))
            return Trace(dispatches=d, counters=c, files=[str(path)])
        return Trace(dispatches=_stub_dispatches(path, "rocprof-json"), files=[str(path)])

    def kt(path, agents=None):
        calls.append(("kernel_trace", str(path)))
        return Trace(dispatches=_stub_dispatches(path, "rocprof-csv"), files=[str(path)])

    def cc(path, agents=None):
        calls.append(("counter_collection", str(path)))
        return finalize_counters(pd.DataFrame({"counter": ["SQ_WAVES", "GRBM_COUNT"],
                                               "value": [1.0, 2.0], "source": "rocprof-csv"}), str(path))

    def ai(path):
        calls.append(("agent_info", str(path)))
        return pd.DataFrame()

    def db(path):
        calls.append(("rocpd", str(path)))
        return Trace(dispatches=_stub_dispatches(path, "rocpd"), files=[str(path)])

    monkeypatch.setitem(sys.modules, "pytest_gemmperf.traces.rocprof_json",
                        types.SimpleNamespace(read_rocprof_json=rj))
    monkeypatch.setitem(sys.modules, "pytest_gemmperf.traces.rocprof_csv", types.SimpleNamespace(
        read_kernel_trace_csv=kt, read_counter_collection_csv=cc, read_agent_info_csv=ai))
    monkeypatch.setitem(sys.modules, "pytest_gemmperf.traces.rocpd", types.SimpleNamespace(read_rocpd_db=db))
    return calls


ROCPROF_JSON_HEAD = '{"rocprofiler-sdk-tool":[]}'
EMPTY_JSON = '{"rocprofiler-sdk-tool":[], "stub": "EMPTY"}'
COUNTERS_JSON = '{"rocprofiler-sdk-tool":[], "stub": "COUNTERS"}'


# ---- layouts --------------------------------------------------------------------------------

def _aorta_sweep(root: Path) -> Path:
    for t, c in ((256, 28), (512, 56)):
        cell = root / f"{t}thread" / f"nccl_{c}channels"
        for r in (0, 1):
            _torch_without_rank(cell / "torch_profiler" / f"rank{r}" / "customer_trace_step5.json")
        _touch(cell / "rocprof_traces" / "pass_1" / "node7" / "900_results.json", ROCPROF_JSON_HEAD)
        _touch(cell / "rocprof_traces" / "pass_1" / "node7" / "901_results.json", EMPTY_JSON)
        _touch(cell / "run_output.log", "log")
    return root


def test_aorta_sweep_points_ranks_passes(tmp_path, stub_readers):
    sources, notes = discover_with_notes(_aorta_sweep(tmp_path / "sweep"))
    torch = [s for s in sources if s.kind == "torch"]
    assert sorted((s.point, s.rank) for s in torch) == [
        ("ch28-th256", 0), ("ch28-th256", 1), ("ch56-th512", 0), ("ch56-th512", 1)]
    roc = [s for s in sources if s.kind == "rocprof-json"]
    assert len(roc) == 4
    for s in roc:
        assert s.pass_ == 1 and s.host is None and s.pid in (900, 901) and s.rank is None
        assert s.point in ("ch28-th256", "ch56-th512")


def test_aorta_sweep_load_skips_launcher(tmp_path, stub_readers):
    t = load(_aorta_sweep(tmp_path / "sweep"))
    d = t.dispatches
    validate_dispatches(d)
    assert set(d["point"]) == {"ch28-th256", "ch56-th512"}
    torch = d[d["source"] == "torch"]
    assert sorted(set(torch["rank"])) == [0, 1]
    roc = d[d["source"] == "rocprof-json"]
    assert len(roc) == 2 * 3 and roc["rank"].isna().all() and set(roc["pass"]) == {1}
    assert set(roc["pid"]) == {900}
    assert sum("901_results.json" in n and "skipped" in n for n in t.meta["notes"]) == 2
    # torch extras survive concatenation even though other frames lack them
    assert "op_name" in d.columns and roc["op_name"].isna().all()
    assert (torch["op_name"] == "aten::addmm").sum() == 4 * 2


def test_rank_recorded_in_trace_wins_over_path(tmp_path):
    f = tmp_path / "torch_profiler" / "rank0" / "t.json"
    f.parent.mkdir(parents=True)
    shutil.copy(ROCM, f)  # distributedInfo.rank = 3
    t = load(tmp_path)
    assert set(t.dispatches["rank"]) == {3}
    assert any("rank 0 from the path differs" in n for n in t.meta["notes"])


def test_rank_never_from_file_order(tmp_path, stub_readers):
    root = tmp_path / "out"
    for pid in (300, 100, 200):
        _touch(root / "hostA" / f"{pid}_results.json", ROCPROF_JSON_HEAD)
    sources = discover(root)
    assert [s.rank for s in sources] == [None, None, None]
    assert sorted(s.pid for s in sources) == [100, 200, 300]


def test_csv_prefixes_hosts_and_runner_rank_prefix(tmp_path, stub_readers):
    root = tmp_path / "out"
    _touch(root / "hostA" / "4321_kernel_trace.csv")
    _touch(root / "hostA" / "4321_agent_info.csv")
    _touch(root / "hostA" / "rank3_555_kernel_trace.csv")
    _touch(root / "hostA" / "rank3_555_counter_collection.csv")
    _touch(root / "hostA" / "77_agent_info.csv")  # launcher: no GPU work, no trace
    sources, notes = discover_with_notes(root)
    by_pid = {s.pid: s for s in sources}
    assert set(by_pid) == {4321, 555}
    assert by_pid[4321].host == "hostA" and by_pid[4321].rank is None
    assert [f.name for f in by_pid[4321].files] == ["4321_kernel_trace.csv", "4321_agent_info.csv"]
    assert by_pid[555].rank == 3
    assert any("77" in n and "agent_info" in n for n in notes)
    t = load(root)
    assert set(t.dispatches["host"]) == {"hostA"}
    assert sorted(t.dispatches["pid"].unique()) == [555, 4321]
    assert len(t.counters) == 2 and set(t.counters["rank"]) == {3}


def test_rocprof_62_layout_has_no_host(tmp_path, stub_readers):
    root = tmp_path / "single_process"
    _touch(root / "1234_kernel_trace.csv")
    (s,) = discover(root)
    assert (s.pid, s.host) == (1234, None)


def test_counter_passes_combined(tmp_path, stub_readers):
    root = tmp_path / "rocprof"
    for n in (1, 2):
        _touch(root / f"pmc_{n}" / "hostB" / "10_counter_collection.csv")
    _touch(root / "pass_3" / "hostB" / "11_results.json", COUNTERS_JSON)
    c = load_counters(root)
    assert sorted(c["pass"].unique()) == [1, 2, 3]
    assert len(c) == 2 + 2 + 1
    with pytest.raises(GemmperfInputError, match="no kernel dispatches"):
        load(root)  # counters only: nothing to time


def test_one_format_per_prefix(tmp_path, stub_readers):
    root = tmp_path / "out"
    _touch(root / "h" / "9_results.json", ROCPROF_JSON_HEAD)
    _touch(root / "h" / "9_kernel_trace.csv")
    _touch(root / "h" / "9_results.db")
    sources, notes = discover_with_notes(root)
    assert [s.kind for s in sources] == ["rocprof-json"]
    assert any("not read twice" in n for n in notes)


def test_json_classified_by_content(tmp_path, stub_readers):
    root = tmp_path / "mixed"
    shutil.copy(ROCM, _touch(root / "a" / "renamed.json"))  # torch trace without .pt.trace
    _touch(root / "b" / "weird_name.json", ROCPROF_JSON_HEAD)  # rocprofv3 JSON, odd name
    shutil.copy(ROCM, _touch(root / "c" / "5_results.json"))  # torch content, rocprof name
    _touch(root / "d" / "config.json", '{"rocprof": "not output", "traceEvents": "nope"}')
    _touch(root / "point.json", '{"point": "p1"}')
    with gzip.open(_touch(root / "e" / "t.json.gz"), "wt") as fh:
        fh.write(ROCM.read_text())
    kinds = {s.files[0].relative_to(root).as_posix(): s.kind for s in discover(root)}
    assert kinds == {"a/renamed.json": "torch", "b/weird_name.json": "rocprof-json",
                     "c/5_results.json": "torch", "e/t.json.gz": "torch"}


def test_single_files(tmp_path, stub_readers):
    (s,) = discover(ROCM)
    assert s.kind == "torch"
    f = _touch(tmp_path / "rank_2" / "h" / "rank2_31_kernel_trace.csv")
    (s,) = discover(f)
    assert (s.kind, s.rank, s.pid) == ("rocprof-csv", 2, 31)
    with pytest.raises(GemmperfInputError, match="not a recognised profiler output"):
        discover(_touch(tmp_path / "notes.txt"))


def test_empty_or_missing_dir(tmp_path):
    empty_dir = tmp_path / "nothing"
    _touch(empty_dir / "sub" / "readme.md")
    with pytest.raises(GemmperfInputError) as ei:
        load(empty_dir)
    # no layout name near the top: refused from names alone (traces/dirscan.py)
    assert str(ei.value).startswith(f"{empty_dir}: not a results, rocprofv3 output or sweep directory")
    _touch(empty_dir / "notes.json", "{}")  # a JSON at the top may be a trace: read, none found
    with pytest.raises(GemmperfInputError) as ei:
        load(empty_dir)
    assert str(ei.value).endswith(f"no profiler output found under {empty_dir}")
    with pytest.raises(GemmperfInputError, match="no such file"):
        discover(tmp_path / "absent")


def test_only_launcher_output_fails(tmp_path, stub_readers):
    root = tmp_path / "out"
    _touch(root / "h" / "1_results.json", EMPTY_JSON)
    with pytest.raises(GemmperfInputError, match="no kernel dispatches found"):
        load(root)


def test_corrupt_torch_trace_in_dir_is_an_error(tmp_path):
    root = tmp_path / "sweep"
    f = root / "torch_profiler" / "rank0" / "t.pt.trace.json"
    _touch(f, ROCM.read_text()[:500])
    with pytest.raises(GemmperfInputError) as ei:
        load(root)
    assert str(f) in str(ei.value)


# ---- our results layout -----------------------------------------------------------------------

def _results_point(root: Path, *, with_tables: bool) -> Path:
    point = root / "perf_tests_test_x.py__test_gemm" / "ch28-th256"
    raw0 = point / "run0" / "raw" / "torch_profiler" / "rank1" / "trace.json"
    raw1 = point / "run1" / "raw" / "torch_profiler" / "rank1" / "trace.json"
    for f in (raw0, raw1):
        _torch_without_rank(f)
    info = {"test_id": "perf_tests/test_x.py::test_gemm", "point": "ch28-th256",
            "axes": {"channels": 28, "threads": 256}, "env": {"NCCL_MAX_NCHANNELS": "28"},
            "runs": [{"run": 0, "returncode": 0, "files": {"1": ["run0/raw/torch_profiler/rank1"]}},
                     {"run": 1, "returncode": 0, "files": {"1": [str(raw1)]}}]}
    _touch(point / "point.json", json.dumps(info))
    if with_tables:
        t = load(point)
        t.dispatches.to_parquet(point / "dispatches.parquet")
        t.agents.to_parquet(point / "agents.parquet")
    return point


def test_results_point_raw_files_get_rank_and_run_from_point_json(tmp_path):
    point = _results_point(tmp_path / "results", with_tables=False)
    sources = discover(point.parent.parent)
    assert sorted((s.point, s.rank, s.run) for s in sources) == [("ch28-th256", 1, 0), ("ch28-th256", 1, 1)]


def test_results_tables_read_directly(tmp_path):
    point = _results_point(tmp_path / "results", with_tables=True)
    sources = discover(point.parent.parent)
    assert [s.kind for s in sources] == ["tables"]  # raw files under the point are not re-read
    assert sources[0].point == "ch28-th256"
    t = load(point.parent.parent)
    d = t.dispatches
    validate_dispatches(d)
    assert len(d) == 16 and sorted(d["run"].unique()) == [0, 1] and set(d["rank"]) == {1}
    assert set(d["point"]) == {"ch28-th256"} and "op_name" in d.columns
    assert load(point, point="replayed").dispatches["point"].unique().tolist() == ["replayed"]


def test_corrupt_parquet(tmp_path):
    d = tmp_path / "p"
    _touch(d / "dispatches.parquet", "not parquet")
    with pytest.raises(GemmperfInputError, match="parquet"):
        load(d)


def test_point_override_and_multiple_paths(tmp_path):
    t = load([ROCM, CUDA], point="ch1-th2")
    assert set(t.dispatches["point"]) == {"ch1-th2"}
    assert len(t.dispatches) == 8 + 2 and len(t.meta["sources"]) == 2
    assert set(t.meta["files"][str(ROCM)]) >= {"cpu_ops", "steps"}


# ---- real readers, real data ------------------------------------------------------------------

def test_real_readers_on_real_outputs_in_sweep_layout(tmp_path):
    aorta = shared_file("aorta/smci350-zts-gtu-c6-25_200691.1758927066581847260.pt.trace.json")
    rj = shared_file("rocprofv3/AMD-AGI_TraceLens/908_results.TRIMMED_DERIVED.json")
    kt = shared_file("rocprofv3/ROCm_rocm-systems/rocprofiler-sdk_docs_data_2025-08/kernel_trace.csv")
    cell = tmp_path / "sweep" / "256thread" / "nccl_28channels"
    shutil.copy(aorta, _touch(cell / "torch_profiler" / "rank0" / "customer_trace_step2.json"))
    shutil.copy(rj, _touch(cell / "rocprof_traces" / "pass_1" / "smci350-zts-gtu-c6-25" / "908_results.json"))
    shutil.copy(kt, _touch(cell / "rocprof_csv" / "nodeX" / "rank5_834304_kernel_trace.csv"))
    t = load(tmp_path / "sweep")
    d = t.dispatches
    validate_dispatches(d)
    assert set(d["point"]) == {"ch28-th256"}
    by_source = d.groupby("source", observed=True).size().to_dict()
    assert by_source["torch"] == 20 and by_source["rocprof-json"] == 355 and by_source["rocprof-csv"] > 0
    assert set(d.loc[d["source"] == "torch", "rank"]) == {0}
    assert d.loc[d["source"] == "rocprof-json", "rank"].isna().all()
    assert set(d.loc[d["source"] == "rocprof-json", "pass"]) == {1}
    assert set(d.loc[d["source"] == "rocprof-csv", "rank"]) == {5}


def test_symlinked_subdirectory_is_read_once_and_a_loop_is_a_note(tmp_path):
    """The walk follows symlinked directories (a sweep assembled from links is read) but enters
    each real directory once: a link back up the tree is a note, not an endless walk."""
    real = tmp_path / "store" / "node-a"
    real.mkdir(parents=True)
    shutil.copy(FIXTURES / "rocprof_csv" / "v7" / "mi350-n1" / "5358_kernel_trace.csv", real)
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "node-a").symlink_to(real, target_is_directory=True)
    (root / "again").symlink_to(real, target_is_directory=True)
    (real / "up").symlink_to(root, target_is_directory=True)
    sources, notes = discover_with_notes(root)
    assert [s.files[0].name for s in sources] == ["5358_kernel_trace.csv"]
    assert sources[0].host == "again"  # the first link in name order; the same files once
    assert any(n.startswith(f"{root / 'node-a'}: directory not read again") for n in notes)
    assert any(n.startswith(f"{real / 'up'}: directory not read again")
               or n.startswith(f"{root / 'again' / 'up'}: directory not read again") for n in notes)
    assert len(load(root).dispatches) == 13
