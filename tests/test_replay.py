"""Replay: declared points mapped onto aorta sweep directories and gemmperf results dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run.replay import (
    ReplayMissing, available_points, default_test_slug, point_tokens, replay_point)

from conftest import shared_file


def _touch(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _aorta_sweep(root: Path, cells: list[tuple[int, int]]) -> Path:
    for threads, channels in cells:
        cell = root / f"{threads}thread" / f"nccl_{channels}channels"
        _touch(cell / "run_output.log", "ok")
        _touch(cell / "torch_profiler" / "rank0" / "customer_trace_step5.json")
        _touch(cell / "rocprof_traces" / "pass_1" / "host" / "4242_results.json")
    # TraceLens output also has <T>thread folders; it must not look like sweep cells
    _touch(root / "tracelens_analysis" / "256thread" / "individual_reports" / "perf_28ch_rank0.xlsx", "x")
    return root


def test_point_tokens():
    assert point_tokens("ch28-th256") == {"ch": "28", "th": "256"}
    assert point_tokens("ch56-th512-algoRing") == {"ch": "56", "th": "512", "algo": "Ring"}
    assert point_tokens("default") == {"default": ""}


def test_aorta_layout_maps_ch_th(tmp_path):
    sweep = _aorta_sweep(tmp_path / "sweep", [(256, 28), (256, 56), (512, 28)])
    assert available_points(sweep) == ["ch28-th256", "ch28-th512", "ch56-th256"]
    res = replay_point(sweep, "ch56-th256")
    assert res.layout == "aorta" and res.directory == sweep / "256thread" / "nccl_56channels"
    names = sorted(p.name for p in res.files)
    assert names == ["4242_results.json", "customer_trace_step5.json"]


def test_aorta_partial_ids_map_when_unambiguous(tmp_path):
    sweep = _aorta_sweep(tmp_path / "sweep", [(256, 28), (256, 56), (512, 28)])
    assert replay_point(sweep, "th512").stored_point == "ch28-th512"
    assert replay_point(sweep, "ch56").stored_point == "ch56-th256"
    with pytest.raises(ReplayMissing, match="ambiguous, matches ch28-th256, ch28-th512"):
        replay_point(sweep, "ch28")


def test_missing_point_lists_what_is_available(tmp_path):
    sweep = _aorta_sweep(tmp_path / "sweep", [(256, 28), (512, 28)])
    with pytest.raises(ReplayMissing) as err:
        replay_point(sweep, "ch70-th256")
    assert err.value.available == ["ch28-th256", "ch28-th512"]
    assert "ch70-th256" in str(err.value) and "available: ch28-th256, ch28-th512" in str(err.value)
    with pytest.raises(ReplayMissing, match="no stored point"):
        replay_point(sweep, "ch28-th256-algoRing")   # an axis the sweep never had


def test_cell_without_traces_is_missing(tmp_path):
    sweep = tmp_path / "sweep"
    _touch(sweep / "256thread" / "nccl_28channels" / "run_output.log", "FAILED")
    with pytest.raises(ReplayMissing, match="holds no trace files"):
        replay_point(sweep, "ch28-th256")


def test_not_a_sweep_dir(tmp_path):
    _touch(tmp_path / "x" / "notes.txt", "")
    with pytest.raises(GemmperfInputError, match="not a sweep directory"):
        replay_point(tmp_path / "x", "ch28-th256")
    with pytest.raises(GemmperfInputError, match="does not exist"):
        replay_point(tmp_path / "nope", "ch28-th256")


def test_real_aorta_trace_in_sweep_layout(tmp_path):
    real = shared_file("aorta/smci350-zts-gtu-c6-25_200691.1758927066581847260.pt.trace.json")
    cell = tmp_path / "sweep" / "512thread" / "nccl_56channels" / "torch_profiler" / "rank0"
    cell.mkdir(parents=True)
    (cell / real.name).symlink_to(real)
    res = replay_point(tmp_path / "sweep", "ch56-th512")
    assert [p.name for p in res.files] == [real.name]


def _results(root: Path, stamp: str, tests: dict[str, list[str]]) -> Path:
    run = root / stamp
    _touch(run / "run.json", json.dumps({"host": "h"}))
    for slug, points in tests.items():
        for point in points:
            pdir = run / slug / point
            _touch(pdir / "point.json", json.dumps({"point": point}))
            _touch(pdir / "run0" / "raw" / "rank0_11_kernel_trace.csv", '"Kind","Agent_Id"\n')
            _touch(pdir / "dispatches.parquet", "")
    return run


def test_results_layout(tmp_path):
    base = tmp_path / "results"
    _results(base, "2026-01-01T00-00-00", {"perf_tests_test_x.py__test_y": ["ch28-th256"]})
    newest = _results(base, "2026-02-01T00-00-00", {
        "perf_tests_test_x.py__test_y": ["ch28-th256", "ch56-th256"],
        "perf_tests_test_x.py__test_z": ["ch56-th256"]})
    test_id = "perf_tests/test_x.py::test_y[ch28-th256]"
    assert default_test_slug(test_id) == "perf_tests_test_x.py__test_y"
    results = pytest.importorskip("pytest_gemmperf.run.results")
    odd = "perf tests/test+x.py::Test::test_y[ch28]"      # fallback must agree with the writer
    assert default_test_slug(odd) == results.slugify_test_id(results.base_test_id(odd))
    res = replay_point(base, "ch28-th256", test_id)
    assert res.layout == "results" and res.directory == newest / "perf_tests_test_x.py__test_y" / "ch28-th256"
    assert {p.name for p in res.files} == {"rank0_11_kernel_trace.csv", "dispatches.parquet"}
    assert replay_point(newest, "ch28-th256").test_slug == "perf_tests_test_x.py__test_y"
    with pytest.raises(ReplayMissing, match="several tests"):
        replay_point(newest, "ch56-th256")
    with pytest.raises(ReplayMissing, match="no results for test perf_tests_test_x.py__test_q"):
        replay_point(newest, "ch28-th256", "perf_tests/test_x.py::test_q")
    with pytest.raises(ReplayMissing, match="available: ch28-th256, ch56-th256"):
        replay_point(newest, "ch99-th256", test_id)
