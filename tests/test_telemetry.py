"""Telemetry (run/telemetry.py): the host sampler for real, GPU doubles of pynvml and amdsmi,
per-process summaries, the gate's use of throttling and the report panel / xlsx sheet."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.confirm import apply_disturbance
from pytest_gemmperf.run.environment import assess
from pytest_gemmperf.traces.schema import finalize_dispatches
from pytest_gemmperf.run.telemetry import (MIN_THROTTLE_S, TELEMETRY_FILE, TelemetrySampler, affected_processes, evidence,
                                           note_rows, read_telemetry, slowest_process_notes, summarise,
                                           write_telemetry)
from pytest_gemmperf.run.telemetry_sources import AmdSmiSource, HostSource, NvmlSource, visible_indices
from telemetry_doubles import fake_amdsmi, fake_pynvml
# the same stand-in workload and sweep as test_plugin; importing it also imports, once, what
# pytester's in-process sessions would otherwise import again (pyarrow extension types)
from test_plugin import PLUGIN_ARGS, TEST_FILE


def _run_processes(sampler: TelemetrySampler, state: dict, n: int = 4, seconds: float = 0.35,
                   throttled: int | None = None) -> None:
    """n back-to-back 'processes'; the double throttles (power cap, clock 1980 -> 1400 MHz)
    during process ``throttled`` only."""
    with sampler:
        for k in range(n):
            with sampler.process(k):
                if k == throttled:
                    state.update(throttle=True, sm_mhz=1400, gfx_mhz=1500)
                time.sleep(seconds)
                state.update(throttle=False, sm_mhz=1980, gfx_mhz=2100)
            time.sleep(0.03)


def test_host_sampler_real_at_interval():
    s = TelemetrySampler(0.05, sources=[HostSource()])
    with s:
        with s.process(0):
            time.sleep(0.6)
    f = s.frame()
    assert list(f.columns) == ["time_ns", "host", "device", "metric", "value", "unit"]
    assert {"load1", "load_per_core", "cpu_busy_frac", "mem_available_frac"} <= set(f["metric"])
    t = np.sort(f["time_ns"].unique())
    assert len(t) >= 8
    assert 0.035 < np.median(np.diff(t)) / 1e9 < 0.08  # the configured interval
    busy = f[(f["metric"] == "cpu_busy_frac") & (f["device"] == "host")]["value"]
    assert busy.between(0, 1).all()
    meta = s.metadata()
    assert meta["sources"] == ["host"] and meta["clock"].startswith("CLOCK_REALTIME")
    assert "monotonic_minus_realtime_ns" in meta["clock_offsets"]
    assert meta["processes"]["0"][1] > meta["processes"]["0"][0]
    assert 0 <= meta["sampler_cpu_fraction"] < 0.05


def test_disabled_sampler_records_nothing():
    s = TelemetrySampler(0.01, enabled=False)
    with s:
        time.sleep(0.05)
    assert s.frame().empty and s.metadata() == {"enabled": False}


def test_nvml_double_metrics_units_and_unsupported_metric_skipped_with_note():
    state: dict = {}
    nv = fake_pynvml(state, n_devices=2, unsupported=("temperature",))
    src = NvmlSource(indices=[1], module=nv)
    assert src.open()
    static = src.static()
    assert static["driver"] == "550.90.07" and static["devices"]["gpu1"]["power_cap_w"] == 700.0
    rows = {(d, m): (v, u) for d, m, v, u in src.sample()}
    assert rows[("gpu1", "gfx_clock_mhz")] == (1980.0, "MHz")
    assert rows[("gpu1", "power_w")] == (650.0, "W")  # NVML reports mW
    assert rows[("gpu1", "vram_used_mib")] == (41 * 1024.0, "MiB")
    assert rows[("gpu1", "throttle_active")] == (0.0, "1")
    assert not any(m.startswith("temp") for _, m in rows)
    assert any("temp_edge_c not sampled" in n and "Not Supported" in n for n in src.notes)
    n_calls = state["calls"].count("temperature")
    src.sample()
    assert state["calls"].count("temperature") == n_calls  # dropped after its first failure
    state["throttle"] = True
    assert ("gpu1", "throttle_active", 1.0, "1") in src.sample()
    src.close()
    assert state["init"] is False


def test_amdsmi_double_metrics_and_missing_edge_sensor():
    state: dict = {"throttle": True}
    am = fake_amdsmi(state, n_devices=2, unsupported=("edge",))
    src = AmdSmiSource(module=am)
    assert src.open()
    st = src.static()
    assert st["devices"]["gpu0"]["product"] == "AMD Instinct MI300X"
    assert st["devices"]["gpu0"]["power_cap_w"] == 750.0  # µW -> W
    rows = {(d, m): v for d, m, v, _ in src.sample()}
    assert rows[("gpu1", "gfx_clock_mhz")] == 2100 and rows[("gpu0", "mem_clock_mhz")] == 1300
    assert rows[("gpu0", "power_w")] == 700 and rows[("gpu0", "temp_hotspot_c")] == 80
    assert rows[("gpu0", "throttle_active")] == 1.0
    assert ("gpu0", "temp_edge_c") not in rows
    assert any("temp_edge_c not sampled" in n for n in src.notes)


def test_gpu_libraries_imported_only_when_present(monkeypatch):
    state: dict = {}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(state))
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import fails like a missing package
    s = TelemetrySampler(0.02, env={"CUDA_VISIBLE_DEVICES": "0"})
    with s:
        time.sleep(0.1)
    assert s.metadata()["sources"] == ["host", "nvml"]
    assert {"gpu0", "host"} <= set(s.frame()["device"])
    assert visible_indices({"HIP_VISIBLE_DEVICES": "2,3"}) == [2, 3]
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "GPU-abc"}) is None


def test_source_failures_never_break_the_run():
    class Broken:
        name = "broken"
        notes: list = []

        def open(self):
            raise RuntimeError("library exploded")

    s = TelemetrySampler(0.02, sources=[HostSource(), Broken()])
    with s:
        time.sleep(0.05)
    assert any("broken: not opened" in n for n in s.notes)
    assert not s.frame().empty


# 1.5 s of real sampling each; after its source the AMD run takes the NVIDIA run's path (its
# source's readings are checked in test_amdsmi_double_metrics_and_missing_edge_sensor)
@pytest.mark.parametrize("vendor", ["nvidia", pytest.param("amd", marks=pytest.mark.slow)])
def test_throttle_in_one_of_four_processes_named_in_verdicts_and_report(tmp_path, vendor):
    """The GPU double throttles during process 2 of 4: the summary, the gate's disturbance,
    the verdict notes, report.html and the xlsx telemetry sheet all name process 2."""
    state: dict = {}
    src = (NvmlSource(module=fake_pynvml(state)) if vendor == "nvidia"
           else AmdSmiSource(module=fake_amdsmi(state)))
    s = TelemetrySampler(0.02, sources=[HostSource(), src])
    _run_processes(s, state, throttled=2)
    frame = s.frame()
    summary = summarise(frame, s.windows, s.interval_s)
    gpu = {r["process"]: r for r in summary if r["device"] == "gpu0"}
    assert set(gpu) == {"0", "1", "2", "3"}
    # (another process may at most catch one sample taken while the state flipped, under load)
    assert gpu["2"]["throttle_s"] >= 0.2 and all(gpu[p]["throttle_s"] < MIN_THROTTLE_S for p in "013")
    reasons, factor = evidence(summary)
    assert any(r.startswith("gpu0 power cap") and "while kernels ran in process 2 (clock 1" in r for r in reasons)
    assert not any("process 0" in r or "process 1" in r or "process 3" in r for r in reasons)
    assert factor > 1.2  # clocks 1400-1500 vs 1980-2100 MHz

    # the gate: a 10 % regression within what the clocks explain becomes inconclusive; a far
    # larger one stays a regression, and every row names the throttled process
    dist = assess({"telemetry": summary, "cores": 2}, shares_devices=False, cpu_bound=False)
    assert dist.disturbed and "in process 2" in dist.text
    v = pd.DataFrame({"test": "t", "point": "p", "kernel": ["gemm_a", "gemm_b", "gemm_c"],
                      "metric": "dur_ns", "n_base": 4, "n_cand": 4, "base_median_ns": 100.0,
                      "cand_median_ns": [110.0, 300.0, 100.0], "ratio": [1.10, 3.0, 1.0],
                      "ci_low": [1.06, 2.8, 0.99], "ci_high": [1.14, 3.2, 1.01], "p_value": 0.01,
                      "q_value": 0.01, "verdict": ["regression", "regression", "unchanged"],
                      "threshold": 0.03, "note": ""})
    out = note_rows(apply_disturbance(v, dist), reasons)
    assert list(out["verdict"]) == ["inconclusive", "regression", "unchanged"]
    assert out["note"].str.contains("in process 2", regex=False).all()
    assert out["note"].str.count("power cap").max() == 1 or "noisy environment" in out["note"][0]

    # per row: does the kernel's slowest process coincide with the throttled one?
    runs = pd.DataFrame({"kernel": np.repeat(["gemm_a", "gemm_b", "gemm_c"], 8), "run": np.tile(np.arange(4), 6),
                         "dur_ns": np.concatenate([np.tile([100, 100, 130, 100], 2), np.tile([400, 300, 300, 300], 2),
                                                   np.tile([100, 101, 100, 100], 2)]).astype(float)})
    slow = slowest_process_notes(out, runs, affected_processes(summary))
    assert affected_processes(summary) == {"2"}
    assert "slowest process 2 coincides with throttling" in slow["note"][0]
    assert "slowest process 0 ran without throttling" in slow["note"][1]
    assert "slowest process" not in slow["note"][2]  # unchanged rows: nothing to explain
    out = slow

    # storage and report
    point_dir = tmp_path / "res" / "tests_t.py__test_x" / "p"
    point_dir.mkdir(parents=True)
    write_telemetry(point_dir, frame)
    (point_dir / "point.json").write_text(json.dumps({
        "test_id": "tests/t.py::test_x", "point": "p",
        "telemetry": {**s.metadata(), "summary": summary}}))
    from pytest_gemmperf.report import write_reports
    from pytest_gemmperf.report.telemetry import read_results_telemetry

    tele = read_results_telemetry(tmp_path / "res")
    assert len(tele[0]) == len(frame) and set(tele[1]["process"]) == {"0", "1", "2", "3"}
    disp = pd.DataFrame({"point": "p", "rank": 0, "run": np.repeat(np.arange(4), 5), "kernel": "gemm_a",
                         "start_ns": np.arange(20) * 1000, "queue": 1, "host": "h", "pid": 1,
                         "source": "rocprofv3-json"})
    disp["end_ns"] = disp["start_ns"] + 500
    disp = finalize_dispatches(disp, "synthetic")
    files = write_reports(tmp_path / "rep", dispatches=disp, verdicts=out.assign(test="tests/t.py::test_x"),
                          telemetry=tele, formats=("html", "xlsx", "md"))
    md = files["summary.md"].read_text()
    assert "Telemetry (machine state" in md and "`test_x[p]`" in md and "in process 2" in md
    html = files["report.html"].read_text()
    assert 'id="telemetry"' in html and "throttled" in html and "in process 2" in html
    assert html.count("<svg") >= 1 and "p2</text>" in html
    import openpyxl

    wb = openpyxl.load_workbook(files["report.xlsx"], read_only=True)
    assert "telemetry" in wb.sheetnames
    cells = [c for row in wb["telemetry"].iter_rows(values_only=True) for c in row if c is not None]
    assert "gpu0" in cells and "2" in [str(c) for c in cells]


def test_no_throttle_no_evidence():
    state: dict = {}
    s = TelemetrySampler(0.02, sources=[NvmlSource(module=fake_pynvml(state))])
    _run_processes(s, state, n=3, seconds=0.15)
    summary = summarise(s.frame(), s.windows, s.interval_s)
    assert evidence(summary) == ([], 1.0)
    assert not assess({"telemetry": summary}, cpu_bound=False).disturbed


def test_idle_clocks_are_not_a_clock_drop():
    """An idle GPU parks its clocks (start-up of a process): only busy samples count."""
    state: dict = {}
    s = TelemetrySampler(0.02, sources=[NvmlSource(module=fake_pynvml(state))])
    with s:
        for k in range(3):
            with s.process(k):
                state.update(util=0, sm_mhz=345, idle=True)  # start-up: idle
                time.sleep(0.1 if k != 1 else 0.3)  # process 1 idles longer
                state.update(util=98, sm_mhz=1980, idle=False)
                time.sleep(0.15)
    summary = summarise(s.frame(), s.windows, s.interval_s)
    # medians: a sample taken while the state flips may pair an idle clock with busy activity
    assert all(r["clock_median_mhz"] == 1980 and r["busy_samples"] > 0 for r in summary)
    assert evidence(summary) == ([], 1.0)


def test_busy_from_the_drivers_idle_flag_when_utilisation_reads_zero():
    """On an H200, NVML's utilisation (a long average) read 0 % beside 1980 MHz and 121 W during
    bursts of GEMMs, which left every clock statistic empty: the idle clock-event reason decides
    busy too."""
    state: dict = {"util": 0}
    s = TelemetrySampler(0.02, sources=[NvmlSource(module=fake_pynvml(state))])
    with s:
        for k in range(3):
            with s.process(k):
                state.update(idle=True, sm_mhz=345)
                time.sleep(0.12)
                state.update(idle=False, sm_mhz=1980)
                time.sleep(0.15)
    summary = summarise(s.frame(), s.windows, s.interval_s)
    assert len(summary) == 3
    assert all(r["busy_samples"] > 0 and r["clock_median_mhz"] == 1980 for r in summary)
    assert evidence(summary) == ([], 1.0)


def test_bad_telemetry_file_is_one_line(tmp_path):
    p = tmp_path / TELEMETRY_FILE
    p.write_bytes(b"not parquet")
    with pytest.raises(GemmperfInputError) as e:
        read_telemetry(p)
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value)
    pd.DataFrame({"time_ns": [1], "value": [1.0]}).to_parquet(p)
    with pytest.raises(GemmperfInputError, match="lacks columns"):
        read_telemetry(p)


def test_append_for_confirmation_round(tmp_path):
    s = TelemetrySampler(0.02, sources=[HostSource()])
    with s:
        time.sleep(0.08)
    f = s.frame()
    write_telemetry(tmp_path, f)
    write_telemetry(tmp_path, f, append=True)
    assert len(read_telemetry(tmp_path / TELEMETRY_FILE)) == 2 * len(f)


# ------------------------------------------------------------------ through the plugin (pytester)

pytest_plugins = ["pytester"]


def _plugin_run(pytester, monkeypatch):
    from pytest_gemmperf.run import backend as be
    from pytest_gemmperf.run import environment

    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.delenv("FAKE_SCALE", raising=False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    pytester.makepyfile(test_gpsweep=TEST_FILE.replace("repeats=2", "repeats=4"))

    def run(*args, results="res"):
        return pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                                  f"--gemmperf-results-dir={results}", "--gemmperf-baseline-dir=base",
                                  "--gemmperf-confirm=0", "-k", "ch28", *args)
    return run


def test_plugin_writes_telemetry_and_names_the_throttled_process(pytester, monkeypatch):
    """Four processes per point; the NVML double throttles (1980 -> 1400 MHz) while process 2
    runs. The run writes telemetry.parquet and its summary; a 25 % slower candidate is
    reported inconclusive because of the throttling, process 2 named in verdicts and report."""
    from pytest_gemmperf.run import telemetry as tm

    run = _plugin_run(pytester, monkeypatch)
    state: dict = {}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(state))
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    out = run("--gemmperf-telemetry-interval=0.02", results="res1")
    out.assert_outcomes(passed=1)
    pdir = pytester.path / "res1" / "test_gpsweep.py__test_gpsweep" / "ch28-th256"
    f = read_telemetry(pdir / TELEMETRY_FILE)
    assert {"host", "gpu0"} <= set(f["device"]) and "gfx_clock_mhz" in set(f["metric"])
    tele = json.loads((pdir / "point.json").read_text())["telemetry"]
    assert tele["interval_s"] == 0.02 and sorted(tele["processes"]) == ["0", "1", "2", "3"]
    assert {r["process"] for r in tele["summary"]} == {"0", "1", "2", "3"}
    run_json = json.loads((pytester.path / "res1" / "run.json").read_text())
    assert run_json["telemetry"]["static"]["nvml"]["devices"]["gpu0"]["product"] == "NVIDIA H200"

    original = tm.TelemetrySampler.process

    def throttling(self, run_no):
        state.update(throttle=str(run_no) == "2", sm_mhz=1400 if str(run_no) == "2" else 1980)
        return original(self, run_no)

    monkeypatch.setattr(tm.TelemetrySampler, "process", throttling)
    monkeypatch.setenv("FAKE_SCALE", "1.25")
    out = run("--gemmperf-telemetry-interval=0.02", "--gemmperf-report-dir=rep2", results="res2")
    # inconclusive, not a failure: the throttling explains it; undecided, so reported skipped
    out.assert_outcomes(skipped=1)
    v = pd.read_csv(pytester.path / "res2" / "test_gpsweep.py__test_gpsweep" / "verdicts.csv")
    # gemmperf compare of the gated run adds the same telemetry notes to the same rows
    from pytest_gemmperf import cli

    monkeypatch.chdir(pytester.path)
    assert cli.main(["compare", "base", "res2", "--out", "cmp", "--no-report"]) == 4
    c = pd.read_csv(pytester.path / "cmp" / "verdicts.csv").set_index(["kernel", "metric"]).sort_index()
    g = v.set_index(["kernel", "metric"]).sort_index()
    assert c["note"].fillna("").equals(g["note"].fillna("")) and c["verdict"].equals(g["verdict"])
    mm = v[(v["kernel"] == "aten::mm") & (v["metric"] == "dur_ns")].iloc[0]
    assert mm["verdict"] == "inconclusive", mm.to_dict()
    assert "gpu0 power cap" in mm["note"] and "in process 2" in mm["note"]
    assert v["note"].fillna("").str.contains("in process 2", regex=False).all()
    html = (pytester.path / "rep2" / "report.html").read_text()
    assert 'id="telemetry"' in html and "in process 2" in html


def test_telemetry_off_and_bad_interval(pytester, monkeypatch):
    run = _plugin_run(pytester, monkeypatch)
    out = run("--gemmperf-telemetry=off", results="off")
    out.assert_outcomes(passed=1)
    pdir = pytester.path / "off" / "test_gpsweep.py__test_gpsweep" / "ch28-th256"
    assert not (pdir / TELEMETRY_FILE).exists()
    assert json.loads((pdir / "point.json").read_text())["telemetry"] == {"enabled": False}
    out = run("--gemmperf-telemetry-interval=0", results="bad")
    assert out.ret == 4
    out.stderr.fnmatch_lines(["*--gemmperf-telemetry-interval must be 0.01..60 seconds*"])


def test_failed_point_keeps_its_telemetry(pytester, monkeypatch):
    run = _plugin_run(pytester, monkeypatch)
    monkeypatch.setenv("FAKE_FAIL", "1")
    out = run("--gemmperf-telemetry-interval=0.02", results="failed")
    out.assert_outcomes(failed=1, deselected=1)
    pdir = pytester.path / "failed" / "test_gpsweep.py__test_gpsweep" / "ch28-th256"
    pj = json.loads((pdir / "point.json").read_text())
    # the crash takes ~0.1 s: the samples at start and stop at least (the window may hold none)
    assert pj["status"] == "failed" and pj["telemetry"]["enabled"] and pj["telemetry"]["samples"] >= 2
    assert "0" in pj["telemetry"]["processes"]
    assert len(read_telemetry(pdir / TELEMETRY_FILE)) > 0


def test_rocprofv3_process_windows_from_boottime_dispatches():
    """rocprofv3 runs its repeats in one call: windows come from the dispatches' CLOCK_BOOTTIME
    timestamps, moved onto CLOCK_REALTIME with the offset taken at the sampler's start."""
    from pytest_gemmperf.run.telemetry import windows_from_dispatches

    off = -1_700_000_000_000_000_000  # boottime - realtime
    d = pd.DataFrame({"run": [0, 0, 1, 1], "start_ns": [100, 150, 500, 520], "end_ns": [140, 190, 510, 600]})
    w = windows_from_dispatches(d, off)
    assert w == {"0": [100 - off, 190 - off], "1": [500 - off, 600 - off]}
    assert windows_from_dispatches(d, None) == {}
    assert windows_from_dispatches(d.drop(columns="run"), off) == {}
