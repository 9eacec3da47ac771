"""``gemmperf analyze`` with its reports (the default) reduces each source where it is read
(``analysis/report_parts.py``): the parent never concatenates every dispatch, and every report
file is the same, byte for byte, as the one built from the full dispatches table, whatever
``--jobs`` is; a sweep whose views need several sources' dispatches at once (counters,
collective metadata, one process-GPU group in two sources) is read in full instead."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis.kernel_stats import ROW_KEYS, concat_rows, drop_warmup, duration_rows
from pytest_gemmperf.analysis.report_parts import SweepReduction, merge_parts, report_part
from pytest_gemmperf.analysis.source_totals import dispatch_totals, reduce_sources
from pytest_gemmperf.report.data import build_report_data
from pytest_gemmperf.traces import parallel
from test_parallel_analyze import _csv_tree

FIX = Path(__file__).parent / "fixtures"


def _report_files(out: Path) -> dict[str, bytes]:
    """Every file of an analyze output directory, as what must not change: report.html without
    its generation time, report.xlsx's sheets and strings without the workbook's dates."""
    files: dict[str, bytes] = {}
    for p in sorted(out.iterdir()):
        if p.name == "report.xlsx":
            with zipfile.ZipFile(p) as z:
                for name in z.namelist():
                    if not name.startswith("docProps/"):
                        files[f"report.xlsx:{name}"] = z.read(name)
        elif p.name == "report.html":
            files[p.name] = re.sub(rb'"generated": "[^"]*"|generated[^<]*\d{4}-\d\d-\d\dT[^<]*', b"",
                                   p.read_bytes())
        else:
            files[p.name] = p.read_bytes()
    return files


def _analyze(tmp_path: Path, name: str, root: Path, *extra: str) -> dict[str, bytes]:
    from pytest_gemmperf.cli import main

    out = tmp_path / name
    assert main(["analyze", str(root), "--out", str(out), *extra]) == 0
    return _report_files(out)


def _full(tmp_path: Path, name: str, root: Path, *extra: str) -> dict[str, bytes]:
    """The reports built from the full dispatches table (the notebook API holds every
    dispatch; ``gemmperf analyze`` built its reports that way before)."""
    from pytest_gemmperf import api

    opts = dict(zip(extra[::2], extra[1::2]))
    analysis = api.load([root], warmup=int(opts.get("--warmup", 0)), categories=opts.get("--categories"),
                        jobs=1)
    return _report_files(analysis.report(tmp_path / name))


@pytest.mark.slow  # a process pool, and reports written four times
@pytest.mark.parametrize("opts", [(), ("--warmup", "2", "--categories", "RULES")])
def test_reports_of_reduced_sources_equal_the_full_tables(tmp_path, monkeypatch, capsys, opts):
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)  # the pool on small fixtures
    root = _csv_tree(tmp_path)
    rules = tmp_path / "rules.yaml"
    rules.write_text('fills: ["FillFunctor"]\nmine: ["nccl"]\ngemm: ["Cijk", "elementwise"]\n')
    opts = tuple(str(rules) if o == "RULES" else o for o in opts)
    full = _full(tmp_path, "full", root, *opts)
    assert "report.html" in full and "top5_gemm_kernels_time_variance_with_collective_overlap.csv" in full
    for jobs in ("1", "2"):
        got = _analyze(tmp_path, f"reduced{jobs}", root, "--jobs", jobs, *opts)
        assert got.keys() == full.keys()
        assert [f for f in full if got[f] != full[f]] == [], (jobs, opts)


def test_views_that_join_sources_read_the_full_tables(tmp_path):
    """Counters to join, collective metadata to match across ranks, one GPU's dispatches in
    two sources: no reduction (the caller reads the full tables), never a partial view."""
    counters = tmp_path / "counters"
    counters.mkdir()
    shutil.copy(FIX / "rocprof_json" / "v7_two_processes_counters_results.json", counters)
    assert reduce_sources([counters], reports=True) is None
    assert reduce_sources([counters], reports=False) is not None
    torch = tmp_path / "torch"
    torch.mkdir()
    shutil.copy(FIX / "torch" / "rocm_sdk_rank3.pt.trace.json", torch)
    assert reduce_sources([torch], reports=True) is None
    twice = _csv_tree(tmp_path / "twice", copies=2, same_host=True)
    assert reduce_sources([twice], reports=True) is not None  # two files: two GPU groups each
    csv = _csv_tree(tmp_path / "plain", copies=2)
    assert reduce_sources([csv, csv / "host0"], reports=True) is not None  # one file read once


def test_fallback_reports_equal_the_full_tables(tmp_path, capsys):
    """A sweep read in full for its reports (counters, torch collectives) gives the reports the
    full table gives."""
    root = tmp_path / "mixed"
    _csv_tree(root)
    shutil.copytree(FIX / "rocprof_json", root / "json")
    shutil.copytree(FIX / "torch", root / "torch")
    full = _full(tmp_path, "full", root)
    got = _analyze(tmp_path, "auto", root)
    assert [f for f in full if got.get(f) != full[f]] == []


# ------------------------------------------------------------------- parts merge exactly

GEMMS = ("Cijk_Ailk_Bljk_HHS_BH_MT128x128", "Cijk_Alik_Bljk_SB_MT64x64", "Cijk_Ailk_Bjlk_BBS_MT256x128")
COLLS = ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclDevKernel_AllGather_RING_LL")
OTHER = ("elementwise_kernel<add>", "__amd_rocclr_copyBuffer", "reduce_kernel<512>")


def _sweep(seed: int, n_sources: int) -> list[pd.DataFrame]:
    """Dispatch tables of ``n_sources`` sources (files), each one to three GPUs, with GEMMs,
    collectives overlapping them, memcpy and other kernels, tied durations, (point, rank)
    groups that span sources, and null ranks."""
    rng = np.random.default_rng(seed)
    names = list(GEMMS + COLLS + OTHER)
    cats = ["gemm"] * len(GEMMS) + ["collective"] * len(COLLS) + ["elementwise", "memcpy", "reduce"]
    frames = []
    for s in range(n_sources):
        n = int(rng.integers(1, 400))
        k = rng.integers(0, len(names), n)
        agent = rng.integers(0, 1 + s % 3, n)
        dur = rng.choice([1000, 2000, 2000, 40_000, 70_000, 120_000], n) + rng.integers(0, 3, n) * 500
        start = np.sort(rng.integers(1_700_000_000_000, 1_700_000_000_000 + 50_000 * n, n))
        point = rng.choice(["ch28-th256", "ch56-th512", None], n)
        rank = pd.array(np.where(rng.random(n) < 0.3, None, rng.integers(0, 2, n)), dtype="Int64")
        frames.append(pd.DataFrame({
            "source": pd.Categorical(["rocprof-csv"] * n), "file": pd.Categorical([f"/t/{s}.csv"] * n),
            "host": pd.Categorical([f"node{s % 2}"] * n), "pid": pd.array([100 + s] * n, dtype="Int64"),
            "rank": rank, "point": pd.Categorical(point), "run": pd.array([s % 2] * n, dtype="Int64"),
            "pass": pd.array([None] * n, dtype="Int64"), "agent": pd.array(agent, dtype="Int64"),
            "kernel": pd.Categorical([names[i] for i in k]),
            "category": pd.Categorical([cats[i] for i in k]),
            "start_ns": start, "end_ns": start + dur, "dur_ns": dur.astype(np.int64),
            "dispatch_id": pd.array(np.arange(n), dtype="Int64"),
            "zero_dur": dur == 0, "queue_overlap": np.zeros(n, dtype=bool)}))
    return frames


def _views(data) -> dict[str, pd.DataFrame]:
    return {k: getattr(data, k) for k in ("kernels", "kernel_summary", "by_category", "short_kernels",
                                          "short_histogram", "kernel_details", "top_variance", "overlap",
                                          "timeline", "timeline_by_point")} | {
        f"box:{k}": v for k, v in data.boxes.items()}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("warmup", [0, 2])
def test_merged_parts_give_the_views_of_the_concatenated_table(seed, warmup):
    from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables

    frames = _sweep(seed, 2 + seed % 4)
    full = concat_tables(frames, DISPATCH_SCHEMA)
    reduced = SweepReduction(
        rows=concat_rows([duration_rows(drop_warmup(f, warmup), ROW_KEYS) for f in frames]),
        totals=concat_tables([dispatch_totals(f) for f in frames], DISPATCH_SCHEMA | {
            c: "int64" for c in ("n_dispatches", "total_ns", "first_start_ns", "last_end_ns", "zero_dur",
                                 "queue_overlap")}),
        parts=merge_parts([report_part(f, warmup=warmup, short_us=50.0) for f in frames]))
    want = _views(build_report_data(full, warmup=warmup))
    got = _views(build_report_data(reduced, warmup=warmup))
    assert want.keys() == got.keys()
    for k in want:
        pd.testing.assert_frame_equal(got[k], want[k], check_exact=True, obj=k)
    assert len(want["top_variance"]) and len(want["overlap"])
    # and those of the analysis functions on the full table, as the reports called them before
    from pytest_gemmperf.analysis.overlap import gemm_overlap, overlap_by_kernel
    from pytest_gemmperf.analysis.timeline import gpu_timeline
    from pytest_gemmperf.analysis.variance import top_variance, with_collective_overlap, with_timestamps
    from pytest_gemmperf.analysis.report_parts import decategorized
    from pytest_gemmperf.report.data import _object_keys

    top = with_collective_overlap(with_timestamps(top_variance(full, k=5, warmup=warmup), full), full)
    pd.testing.assert_frame_equal(got["top_variance"].drop(columns="label"),
                                  decategorized(top.drop(columns=["min_row", "max_row"])), check_exact=True)
    pd.testing.assert_frame_equal(got["timeline"].drop(columns="label"), decategorized(gpu_timeline(full)),
                                  check_exact=True)
    keys = ["point", "rank", "kernel"]
    obk = _object_keys(decategorized(overlap_by_kernel(full, overlap=gemm_overlap(full, names=False))), keys)
    pd.testing.assert_frame_equal(got["overlap"][list(obk.columns)], obk, check_exact=True)


def test_a_reduction_is_reported_only_with_the_settings_it_was_reduced_with():
    """The warm-up and the short-kernel threshold were applied where each source was read: a
    report asking for others is an error, never tables of the wrong settings."""
    frames = _sweep(1, 2)
    parts = [report_part(f, warmup=2, short_us=50.0) for f in frames]
    reduced = SweepReduction(rows=concat_rows([duration_rows(drop_warmup(f, 2), ROW_KEYS) for f in frames]),
                             totals=pd.concat([dispatch_totals(f) for f in frames]), parts=merge_parts(parts))
    build_report_data(reduced, warmup=2)
    for kwargs in ({"warmup": 0}, {"warmup": 2, "short_kernel_us": 10.0}):
        with pytest.raises(ValueError, match="reduced with warm-up 2"):
            build_report_data(reduced, **kwargs)
    with pytest.raises(ValueError, match="different warm-ups"):
        merge_parts([parts[0], report_part(frames[1], warmup=0)])
