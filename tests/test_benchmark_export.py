"""pytest-benchmark JSON export: same statistics as pytest-benchmark, readable by its CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.benchmark_export import (benchmark_stats, to_pytest_benchmark_json,
                                                   write_pytest_benchmark_json)

pb_stats = pytest.importorskip("pytest_benchmark.stats")


def samples(seed: int, scale: float = 1.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for point in ("ch28-th256", "ch56-th512"):
        for kernel, base in (("Cijk_Ailk_Bljk_MT64x32x256", 12_000), ("ncclDevKernel_Generic_1", 1_200_000)):
            for unit in ("h/1/0/0", "h/2/1/0"):
                v = base * scale * np.exp(0.03 * rng.standard_normal(37))
                rows.append(pd.DataFrame({"point": point, "kernel": kernel, "metric": "dur_ns", "unit": unit,
                                          "value": v.round()}))
    rows.append(pd.DataFrame({"point": "ch28-th256", "kernel": "category:gemm", "metric": "category_total_ns",
                              "unit": ["h/1/0/0"], "value": [1e6]}))
    return pd.concat(rows, ignore_index=True)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 9, 10, 11, 37])
def test_stats_equal_pytest_benchmark_own(n):
    rng = np.random.default_rng(n)
    data = list(rng.lognormal(-9, 0.3, n))
    ref = pb_stats.Stats()
    for x in data:
        ref.update(x)
    mine = benchmark_stats(np.array(data))
    for field in pb_stats.Stats.fields:
        expected = getattr(ref, field)
        if isinstance(expected, str):
            assert mine[field] == expected
        else:
            assert mine[field] == pytest.approx(expected, rel=1e-12, abs=1e-18), field


def test_layout_one_benchmark_per_point_and_kernel_in_seconds():
    doc = to_pytest_benchmark_json(samples(1), machine_info={"node": "n"}, commit_info={"id": "abc"},
                                   datetime="2026-01-01T00:00:00+00:00")
    assert set(doc) == {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert len(doc["benchmarks"]) == 4  # 2 points x 2 kernels; category totals are not benchmarks
    b = doc["benchmarks"][0]
    assert set(b) >= {"group", "name", "fullname", "params", "param", "extra_info", "options", "stats"}
    assert b["group"] == "ch28-th256" and b["stats"]["rounds"] == 74
    assert 1e-5 < b["stats"]["median"] < 2e-5  # 12 us in seconds
    assert b["extra_info"]["processes"] == 2


def test_dispatches_table_is_accepted_and_bad_input_rejected():
    d = pd.DataFrame({"kernel": ["k"] * 3, "dur_ns": [100, 200, 300], "start_ns": [0, 1000, 2000],
                      "point": "p", "host": "h", "pid": 1, "rank": 0, "run": 0})
    doc = to_pytest_benchmark_json(d)
    assert doc["benchmarks"][0]["stats"]["median"] == pytest.approx(200e-9)
    with pytest.raises(GemmperfInputError):
        to_pytest_benchmark_json(pd.DataFrame({"x": [1]}))


@pytest.mark.slow  # a real pytest-benchmark process
def test_pytest_benchmark_compare_reads_two_exports(tmp_path):
    a = write_pytest_benchmark_json(tmp_path / "0001_base.json", samples(1))
    b = write_pytest_benchmark_json(tmp_path / "0002_cand.json", samples(2, scale=1.1))
    json.loads(a.read_text())
    exe = Path(sys.executable).parent / "pytest-benchmark"
    cmd = [str(exe)] if exe.exists() else ([shutil.which("pytest-benchmark")] if shutil.which("pytest-benchmark")
                                           else [sys.executable, "-m", "pytest_benchmark"])
    proc = subprocess.run(cmd + ["compare", str(a), str(b), "--columns", "min,median,mean,rounds",
                                 "--group-by", "group"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Cijk_Ailk_Bljk_MT64x32x256[ch28-th256]" in out
    assert "ncclDevKernel_Generic_1[ch56-th512]" in out
    assert "0001_base" in out and "0002_cand" in out
    assert "Failed to load" not in out + proc.stderr
