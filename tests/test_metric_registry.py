"""The metric registry (``gate/metrics.py``) is the one place that describes a gate metric.

* every metric a representative samples table (and its verdicts) holds is registered, and the
  registry's builders together produce every registered samples metric;
* the comparison, the confirmation re-runs, the verdict table, report.html, report.xlsx and the
  history page take each metric's direction and unit from its entry (flip the entry, they flip);
* a toy metric registered in a test flows through gate_samples and the per-source reduction,
  compare, the verdict table, report.xlsx and the history values with no other code touched;
* point facts are the builders' own: the per-source reduction keeps exactly the rows the full
  table gives, also where a kernel carries collective metadata without a collective name.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import openpyxl
import pandas as pd
import pytest

from pytest_gemmperf.gate import confirm
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate.compare import GateConfig, assign_verdicts, compare
from pytest_gemmperf.gate.file_reduce import gate_inputs
from pytest_gemmperf.gate.samples import gate_samples
from pytest_gemmperf.gate.headline import format_verdict_table, raw_detail
from pytest_gemmperf.history.values import history_values
from pytest_gemmperf.report import write_reports
from pytest_gemmperf.report.excel import _column, _verdict_units
from pytest_gemmperf.report.history_page import _check_changes, _display_scale, history_sheet_table
from pytest_gemmperf.report.html import _env
from pytest_gemmperf.traces.discover import load
from test_gate_samples import NCCL_KERNEL, torch_point, write_rank_trace

BUILT = sorted(name for name, m in M.REGISTRY.items() if m.builder is not None)


@pytest.fixture(scope="module")
def coll_samples(tmp_path_factory) -> pd.DataFrame:
    """Three runs of a 4-rank Kineto point with GEMMs, allreduce and all-gather."""
    return gate_samples(torch_point(tmp_path_factory.mktemp("reg")), warmup=1)


def test_every_samples_metric_is_registered(coll_samples, trace_908):
    real = gate_samples(trace_908.dispatches, warmup=2)
    # a test that gates some kernels also writes the others as within-process controls
    some = gate_samples(trace_908.dispatches, kernels=[r"^Cijk_"], warmup=2)
    seen = set(coll_samples["metric"]) | set(real["metric"]) | set(some["metric"])
    assert seen <= set(M.REGISTRY)
    # the builders of the registry together write every samples metric it lists
    assert sorted(seen) == BUILT
    verdicts = compare(coll_samples, coll_samples, GateConfig(dispersion_min_dispatches=3), test="t::x")
    assert set(verdicts["metric"]) <= set(M.REGISTRY)
    assert M.CV_ROBUST in set(verdicts["metric"])  # derived by the comparison, builder None


def test_registry_entries_are_complete():
    for name, m in M.REGISTRY.items():
        assert m.name == name and m.description
        assert m.scope in (M.DISPATCH, M.PROCESS, M.RUN)
        assert isinstance(m.builder, M.RunBuilder) == (m.scope == M.RUN)
        assert m.unit.xlsx in ("us", "ratio", "float", "int")
    assert M.lookup("category_total_ns:gemm") is M.REGISTRY[M.CATEGORY_TOTAL_NS]
    assert M.lookup("my_ns").unit.time and not M.lookup("my_score").unit.time
    assert M.format_value(1_500_000, M.DUR_NS) == "1.5 ms"
    assert M.format_value(0.61234, M.OVERLAP_FRACTION) == "0.6123"


def _fall(metric: str) -> pd.DataFrame:
    """One compared row of ``metric``: the candidate at half the baseline, clearly significant."""
    return pd.DataFrame({"test": ["t::x"], "point": ["p"], "kernel": ["k"], "metric": [metric],
                         "n_base": [8], "n_cand": [8], "base_median_ns": [2e6], "cand_median_ns": [1e6],
                         "ratio": [0.5], "ci_low": [0.45], "ci_high": [0.55], "p_value": [1e-9],
                         "q_value": [1e-9], "verdict": [""], "note": [""]})


def _uses(metric: str) -> dict:
    """What the gate and the reports make of ``metric`` through its registry entry."""
    row = _fall(metric)
    v = assign_verdicts(row, GateConfig(dispersion_threshold=0.05))
    ratio, _, _ = confirm._worse(v)
    changes = _check_changes(pd.DataFrame({"test": ["t"], "point": ["p"], "kernel": ["k"], "metric": [metric],
                                           "run_before": ["r1"], "run_after": ["r2"], "ratio": [0.5]}))
    units = _verdict_units(v)
    return {"verdict": v["verdict"].iloc[0], "worse": float(ratio[0]) > 1, "change": changes["direction"].iloc[0],
            "table": raw_detail(v.iloc[0]).text() + " " + format_verdict_table(v, footnote=False).splitlines()[1],
            "xlsx_us": bool(np.isfinite(units["base_median_us"].iloc[0])),
            "html_time": _env().tests["time_metric"](metric),
            "history_unit": _display_scale(metric, 2e6)[1]}


@pytest.mark.parametrize("name", sorted(M.REGISTRY))
def test_direction_and_unit_are_read_from_the_entry(name, monkeypatch):
    entry = M.REGISTRY[name]
    before = _uses(name)
    assert before["verdict"] == ("regression" if entry.higher_is_better else "improvement")
    assert before["worse"] == before["change"].startswith("regression") == entry.higher_is_better
    assert before["xlsx_us"] == before["html_time"] == entry.unit.time
    assert (" ms," in before["table"]) == entry.unit.time
    odd = M.Unit("widgets/s")
    monkeypatch.setitem(M.REGISTRY, name, dataclasses.replace(
        entry, higher_is_better=not entry.higher_is_better, unit=M.NS if not entry.unit.time else odd))
    after = _uses(name)
    assert after["verdict"] == ("improvement" if entry.higher_is_better else "regression")
    assert after["worse"] != before["worse"] and after["change"] != before["change"]
    assert after["xlsx_us"] != before["xlsx_us"] and after["html_time"] != before["html_time"]
    assert after["table"] != before["table"]
    assert after["history_unit"] == ("widgets/s" if entry.unit.time else "ms")


# ---------------------------------------------------------------------------------------------
# a toy metric, registered here only

TOY = "toy_launches_per_ms"
TOY_UNIT = M.Unit("launches/ms")


def _launch_rate(t: M.BuildInput) -> M.Built:
    """Per unit: dispatches of the gated kernels per ms of their span (higher is better)."""
    p, d = t.prepared, t.dispatches
    rows = p.rows[t.gated]
    g = pd.DataFrame({"pu": p.pu[t.gated], "s": d["start_ns"].to_numpy(np.int64)[rows],
                      "e": d["end_ns"].to_numpy(np.int64)[rows]}).groupby("pu").agg(
        n=("s", "size"), s=("s", "min"), e=("e", "max"))
    pu = g.index.to_numpy()
    rate = g["n"].to_numpy(float) / ((g["e"] - g["s"]).to_numpy(float) / 1e6)
    return M.Built([M.Rows.of(TOY, p.point_of[pu], M.ALL_KERNELS, p.unit_of[pu], rate)])


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(M.REGISTRY, TOY, M.Metric(TOY, TOY_UNIT, "toy: launch rate", _launch_rate,
                                                  higher_is_better=True))


def _dispatches(gap_ns: int, seed: int) -> pd.DataFrame:
    """Six processes, each 40 dispatches of one kernel every ``gap_ns``."""
    rng = np.random.default_rng(seed)
    frames = []
    for pid in range(6):
        n = 40
        start = np.cumsum(np.full(n, gap_ns * rng.lognormal(0, 0.01))).astype(np.int64)
        dur = np.rint(1_000 * rng.lognormal(0, 0.01, n)).astype(np.int64)
        frames.append(pd.DataFrame({"point": "p", "host": "h", "pid": 100 + pid, "rank": 0, "run": 0,
                                    "kernel": "gemm_a", "category": "gemm", "start_ns": start,
                                    "dur_ns": dur, "end_ns": start + dur}))
    return pd.concat(frames, ignore_index=True)


def test_toy_metric_flows_through_samples_compare_tables_and_reports(toy, tmp_path):
    base_d, cand_d = _dispatches(2_000, 1), _dispatches(3_000, 2)  # the candidate launches slower
    base, cand = gate_samples(base_d), gate_samples(cand_d)
    assert (base["metric"] == TOY).sum() == 6
    assert list(base["metric"].drop_duplicates())[-1] == TOY  # rows in registry order
    v = compare(base, cand, test="t::x")
    row = v[v["metric"] == TOY].iloc[0]
    assert row["verdict"] == "regression" and row["ratio"] < 0.7  # a fall of a higher-is-better metric
    assert v.loc[v["metric"] == M.DUR_NS, "verdict"].eq("unchanged").all()
    table = format_verdict_table(v)
    toy_line = next(line for line in table.splitlines() if TOY in line) + " " + raw_detail(row).text()
    assert f"{row['base_median_ns']:.4g}" in toy_line and " us" not in toy_line
    files = write_reports(tmp_path, dispatches=cand_d, verdicts=v, formats=["xlsx"])
    ws = openpyxl.load_workbook(files["report.xlsx"])["verdicts"]
    head = [c.value for c in ws[2]]
    cells = [dict(zip(head, (c.value for c in r))) for r in ws.iter_rows(min_row=3)]
    toy_cell = next(c for c in cells if c["metric"] == TOY)
    assert toy_cell["base_value"] == pytest.approx(row["base_median_ns"]) and toy_cell["base_median (µs)"] is None
    assert _column(TOY, pd.Series([1.0])).kind == "float"
    values = history_values(cand, test="t::x")
    assert (values["metric"] == TOY).sum() == 6
    hist = values.assign(run_id="r1", time=pd.Timestamp("2026-01-01", tz="UTC"), commit="c", branch="b",
                         hw_key="hw")
    sheet = history_sheet_table(hist)
    assert set(sheet.loc[sheet["metric"] == TOY, "value_unit"]) == {"launches/ms"}


def test_context_metric_is_neither_compared_nor_kept_in_history(monkeypatch):
    monkeypatch.setitem(M.REGISTRY, TOY, M.Metric(TOY, TOY_UNIT, "toy: context", _launch_rate, gated=False))
    base, cand = gate_samples(_dispatches(2_000, 1)), gate_samples(_dispatches(3_000, 2))
    assert (base["metric"] == TOY).sum() == 6
    assert TOY not in set(compare(base, cand, test="t::x")["metric"])
    assert TOY not in set(history_values(cand, test="t::x")["metric"])


def test_toy_metric_in_the_per_source_reduction(toy, tmp_path):
    for r in range(4):
        write_rank_trace(tmp_path / "pt" / "run0" / f"rank{r}" / "trace.json", r, seed=r)
    want = gate_samples(load([tmp_path / "pt"]).dispatches, warmup=1)
    got = gate_inputs([tmp_path / "pt"], jobs=1, warmup=1)
    assert got.reduced
    pd.testing.assert_frame_equal(want, got.samples, check_exact=True)
    assert (want["metric"] == TOY).sum() == 4


def test_builder_rows_of_an_unregistered_metric_are_refused(monkeypatch):
    def stray(t: M.BuildInput) -> M.Built:
        return M.Built([M.Rows.of("not_registered", ["p"], ["*"], ["u"], [1.0])])

    monkeypatch.setitem(M.REGISTRY, "stray", M.Metric("stray", M.PLAIN, "emits another name", stray))
    with pytest.raises(ValueError, match="not_registered"):
        gate_samples(_dispatches(2_000, 0))


def test_per_source_point_facts_are_the_full_tables(tmp_path):
    """GEMMs in two processes of a point, no kernel categorised "collective", but one process's
    kernel carries collective metadata (a custom communication kernel): neither the full table
    nor the per-source reduction writes GEMM overlap rows (the per-source path used to count
    the metadata as collectives and keep 0-covered overlap rows the full table lacks)."""
    a = write_rank_trace(tmp_path / "pt" / "rank0" / "a.pt.trace.json", 0, seed=1)
    b = write_rank_trace(tmp_path / "pt" / "rank1" / "b.pt.trace.json", 1, seed=2)
    doc = json.loads(a.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != NCCL_KERNEL]
    a.write_text(json.dumps(doc))
    doc = json.loads(b.read_text())
    for e in doc["traceEvents"]:
        if e.get("name") == NCCL_KERNEL:
            e["name"] = "my_fused_comm_kernel_v2"
    b.write_text(json.dumps(doc))
    full = load([tmp_path / "pt"]).dispatches
    assert full["coll_name"].notna().any() and not (full["category"] == "collective").any()
    want = gate_samples(full, warmup=1)
    for jobs in (1, 2):
        got = gate_inputs([tmp_path / "pt"], jobs=jobs, warmup=1)
        pd.testing.assert_frame_equal(want, got.samples, check_exact=True)
    assert "overlap_fraction" not in set(want["metric"])


def test_samples_rows_follow_registry_order(coll_samples):
    order = M.row_order()
    per_unit = coll_samples[~coll_samples["metric"].isin([M.COLL_LATENCY_NS, M.COLL_BUSBW_GBPS])]
    ranks = per_unit["metric"].map(order).to_numpy()
    assert (np.diff(ranks) >= 0).all()
    assert coll_samples["metric"].iloc[-1] in (M.COLL_LATENCY_NS, M.COLL_BUSBW_GBPS)
