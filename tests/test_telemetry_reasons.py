"""Which GPU clock-event / throttle reasons make a point a noisy environment (run/telemetry.py).

Only reasons that cut clocks (power cap, thermal, hardware slowdown, power brake, current
limits), set while the GPU was busy with the process's kernels, are evidence, besides a
measured clock drop. Idle, application clocks, sync boost, display clock, low utilisation and
any reason while the GPU idles are recorded per process (``reasons_seen``, seconds each) and
never judged. The pynvml and amdsmi doubles are fed state sequences one sample at a time, 100 ms
apart, so every second below is exact.
"""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from pytest_gemmperf.report.telemetry import read_results_telemetry
from pytest_gemmperf.run.environment import assess
from pytest_gemmperf.run.telemetry import (COLUMNS, TELEMETRY_FILE, TelemetrySampler, affected_processes,
                                           evidence, read_telemetry, summarise, write_telemetry)
from pytest_gemmperf.run.telemetry_sources import (AmdSmiSource, NvmlSource, amd_violation_reasons,
                                                   nvml_reasons)
from telemetry_doubles import fake_amdsmi, fake_pynvml

T0 = 1_700_000_000_000_000_000
STEP_NS = 100_000_000
INTERVAL_S = STEP_NS / 1e9

# the phases of a process, per vendor: clocks, activity, reasons. NVML's utilisation reads 0 %
# throughout (a long average, as on the H200): its idle reason bit alone tells busy from idle.
NVML = {
    "idle": {"reasons": 0x1, "sm_mhz": 345, "util": 0},
    "busy": {"reasons": 0x0, "sm_mhz": 1980, "util": 0},
    "benign": {"reasons": 0x10, "sm_mhz": 1980, "util": 0},          # sync boost
    "benign2": {"reasons": 0x2, "sm_mhz": 1980, "util": 0},          # application clocks
    "power_cap": {"reasons": 0x4, "sm_mhz": 1755, "util": 0},
    "idle_hot": {"reasons": 0x1 | 0x20, "sm_mhz": 345, "util": 0},  # SW thermal, idle
    "slow": {"reasons": 0x0, "sm_mhz": 1600, "util": 0},
}
AMD = {
    "idle": {"violation": {"active_low_utilization": [[True, "N/A"]]}, "gfx_mhz": 500, "util": 0},
    "busy": {"violation": {}, "gfx_mhz": 2100, "util": 99},
    # the flag without a cause (it also covers low utilisation), the clock at its maximum
    "benign": {"violation": {"active_gfx_clk_below_host_limit": True}, "gfx_mhz": 2100, "util": 99},
    "benign2": {"violation": {"active_gfx_clk_below_host_limit_total": [[1, 0]]}, "gfx_mhz": 2100, "util": 99},
    "power_cap": {"violation": {"active_ppt_pwr": True}, "gfx_mhz": 1850, "util": 99},
    "idle_hot": {"violation": {"active_socket_thrm": True}, "gfx_mhz": 500, "util": 0},
    "slow": {"violation": {}, "gfx_mhz": 1700, "util": 99},
}
VENDORS = {"nvidia": (NVML, fake_pynvml, NvmlSource), "amd": (AMD, fake_amdsmi, AmdSmiSource)}


def feed(vendor: str, processes: list[list[tuple[str, int]]],
         extra: dict[str, dict] | None = None) -> tuple[list[dict], pd.DataFrame]:
    """Sample the vendor's double through its source: each process is a list of (phase, samples),
    ``extra`` adds phases; returns the per-process summary and the samples."""
    phases, double, source = VENDORS[vendor]
    phases = {**phases, **(extra or {})}
    state: dict = {}
    src = source(module=double(state))
    assert src.open()
    rows, windows, t = [], {}, T0
    for k, steps in enumerate(processes):
        first = t
        for phase, n in steps:
            state.update(phases[phase])
            for _ in range(n):
                rows += [(t, "h", d, m, v, u) for d, m, v, u in src.sample()]
                t += STEP_NS
        windows[str(k)] = [first, t - STEP_NS]
        t += 3 * STEP_NS  # between processes: no sample
    src.close()
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return summarise(frame, windows, INTERVAL_S), frame


def gpu_rows(summary: list[dict]) -> dict[str, dict]:
    return {r["process"]: r for r in summary if r["device"] == "gpu0"}


def gate(summary: list[dict]):
    return assess({"telemetry": summary, "cores": 2}, shares_devices=False, cpu_bound=False)


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_benign_reasons_while_busy_are_recorded_not_judged(vendor):
    """Idle at start (parked clock), then the GEMMs at full clock with a reason that does not
    cut clocks (NVML: sync boost / application clocks; amdsmi: a clock below the host limit
    without a cause), then idle: no noisy label, the reasons and their seconds recorded."""
    summary, _ = feed(vendor, [[("idle", 3), ("benign", 5), ("idle", 2)],
                               [("idle", 3), ("benign2", 5), ("idle", 2)],
                               [("idle", 3), ("busy", 5), ("idle", 2)]])
    reasons, factor = evidence(summary)
    assert reasons == [] and factor == 1.0
    assert not gate(summary).disturbed
    gpu = gpu_rows(summary)
    assert all(r["clock_min_mhz"] == r["clock_median_mhz"] == (1980 if vendor == "nvidia" else 2100)
               for r in gpu.values())
    assert all(r["throttle_s"] == 0.0 and r["throttle_reasons_s"] == {} for r in gpu.values())
    idle = "idle" if vendor == "nvidia" else "low_utilization"
    first, second = ("sync_boost", "applications_clocks") if vendor == "nvidia" else \
        ("clock_below_host_limit", "clock_below_host_limit")
    assert gpu["0"]["reasons_seen"] == {first: 0.5, idle: 0.5}
    assert gpu["1"]["reasons_seen"] == {second: 0.5, idle: 0.5}
    assert gpu["2"]["reasons_seen"] == {idle: 0.5}
    json.dumps(summary)  # what point.json stores


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_power_cap_while_kernels_ran_is_named_with_its_clock(vendor, tmp_path):
    """A power cap with the clock held down while process 2's kernels ran: labelled, naming the
    reason, its seconds, the process and the clock against the highest busy clock; the report's
    summary rows (summary.md, the xlsx sheet) say the same."""
    summary, frame = feed(vendor, [[("idle", 2), ("busy", 5), ("idle", 1)],
                               [("idle", 2), ("busy", 5), ("idle", 1)],
                               [("idle", 2), ("power_cap", 5), ("idle", 1)]])
    clock, pct = ("1755", "-11") if vendor == "nvidia" else ("1850", "-12")
    reasons, factor = evidence(summary)
    assert f"gpu0 power cap 0.5 s while kernels ran in process 2 (clock {clock} MHz, {pct} %)" in reasons
    assert not any("process 0" in r or "process 1" in r for r in reasons)
    assert factor > 1.05
    dist = gate(summary)
    assert dist.disturbed and dist.text.startswith("noisy environment: gpu0 power cap 0.5 s while kernels ran")
    assert affected_processes(summary) == {"2"}
    gpu = gpu_rows(summary)
    assert gpu["2"]["throttle_s"] == 0.5 and gpu["2"]["throttle_reasons_s"] == {"power_cap": 0.5}
    assert gpu["2"]["reasons_seen"]["power_cap"] == 0.5

    point_dir = tmp_path / "t.py__test_x" / "p"
    point_dir.mkdir(parents=True)
    write_telemetry(point_dir, frame)
    (point_dir / "point.json").write_text(json.dumps({"test_id": "t.py::test_x", "point": "p",
                                                      "telemetry": {"summary": summary}}))
    _, rows, _ = read_results_telemetry(tmp_path)
    p2 = rows[(rows["process"] == "2") & (rows["device"] == "gpu0")].iloc[0]
    assert p2["throttle_reasons_s"] == "power cap 0.5 s"
    assert p2["reasons_seen"] == ("power cap 0.5 s, idle 0.3 s" if vendor == "nvidia"
                                  else "power cap 0.5 s, low utilisation 0.3 s")
    assert evidence(rows.drop(columns=["test", "point"]).to_dict("records"))[0] == reasons


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_thermal_slowdown_only_while_idle_after_the_kernels_is_not_judged(vendor):
    """Process 1's GPU reports a thermal slowdown only after its kernels, parked at idle clocks
    (still inside the process window): recorded, not a noisy environment."""
    summary, _ = feed(vendor, [[("idle", 2), ("busy", 5), ("idle", 2)],
                               [("idle", 2), ("busy", 5), ("idle_hot", 4)],
                               [("idle", 2), ("busy", 5), ("idle", 2)]])
    assert evidence(summary) == ([], 1.0)
    assert not gate(summary).disturbed
    gpu = gpu_rows(summary)
    hot = "thermal_sw" if vendor == "nvidia" else "thermal"
    assert gpu["1"]["reasons_seen"][hot] == 0.4 and gpu["1"]["throttle_s"] == 0.0


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_clock_drop_without_any_reason_is_labelled_by_the_clock_rule(vendor):
    summary, _ = feed(vendor, [[("idle", 2), ("busy", 5)], [("idle", 2), ("slow", 5)], [("idle", 2), ("busy", 5)]])
    reasons, factor = evidence(summary)
    slow, best = ("1600", "1980") if vendor == "nvidia" else ("1700", "2100")
    assert reasons == [f"gpu0 clock median {slow} MHz in process 1, {best} MHz in the best"]
    assert factor > 1.2 and gate(summary).disturbed and affected_processes(summary) == {"1"}


def test_nvml_hw_slowdown_at_a_clock_change_counts_only_when_the_clock_is_down():
    """NVML documents HwSlowdown as "also reported during PState or clock change": set as the
    kernels start with the SM clock already at 1980 MHz it is recorded only; a real slowdown
    (clock halved) is named."""
    summary, _ = feed("nvidia", [[("idle", 2), ("ramp", 3), ("busy", 5)],
                                 [("idle", 2), ("busy", 8)],
                                 [("idle", 2), ("halved", 3), ("busy", 5)]],
                      extra={"ramp": {"reasons": 0x8, "sm_mhz": 1980, "util": 0},
                             "halved": {"reasons": 0x8, "sm_mhz": 990, "util": 0}})
    assert affected_processes(summary) == {"2"}
    reasons, _ = evidence(summary)
    assert [r for r in reasons if "while kernels ran" in r] == [
        "gpu0 hardware slowdown 0.3 s while kernels ran in process 2 (clock 990 MHz, -50 %)"]
    gpu = gpu_rows(summary)
    assert gpu["0"]["reasons_seen"] == {"hw_slowdown": 0.3, "idle": 0.2} and gpu["0"]["throttle_s"] == 0.0


@pytest.mark.parametrize("metrics, words", [
    ({"indep_throttle_status": 1 << 36, "throttle_status": 1}, "thermal limit"),  # TEMP_HOTSPOT
    ({"throttle_status": 5}, "throttle status"),                                  # ASIC-specific word
])
def test_amd_without_violation_flags_reads_gpu_metrics(metrics, words):
    """MI100/MI200 answer "N/A" for every violation flag: the throttle status comes from
    gpu_metrics (per reason group where indep_throttle_status is reported)."""
    summary, _ = feed("amd", [[("cool", 5)], [("hot", 5)]],
                      extra={"hot": {"violation": "na", "metrics": metrics, "gfx_mhz": 1500, "util": 99},
                             "cool": {"violation": "na", "metrics": {"throttle_status": 0},
                                      "gfx_mhz": 2100, "util": 99}})
    reasons, _ = evidence(summary)
    assert f"gpu0 {words} 0.5 s while kernels ran in process 1 (clock 1500 MHz, -29 %)" in reasons


def test_reason_decoding():
    assert nvml_reasons(0x0) == []
    assert nvml_reasons(0x1 | 0x10 | 0x100) == ["idle", "sync_boost", "display_clock"]
    assert nvml_reasons(0x4 | 0x8000000000000000) == ["power_cap", "other"]
    assert amd_violation_reasons({"active_ppt_pwr": "N/A", "active_hbm_thrm": "N/A"}) is None
    assert amd_violation_reasons({"active_ppt_pwr": False,
                                  "active_gfx_clk_below_host_limit_thm": [[0, "N/A"], [1, 0]],
                                  "active_low_utilization": [["N/A"]]}) == ["thermal"]


def test_reasons_stored_per_sample_in_telemetry_parquet(tmp_path):
    """The sampler stores one reason_<name> row per reason set, next to the raw mask;
    throttle_active (kept for readers of older files) follows the clock-cutting ones only."""
    state: dict = {"reasons": 0x1, "sm_mhz": 345, "util": 0}
    s = TelemetrySampler(0.02, sources=[NvmlSource(module=fake_pynvml(state))])
    with s:
        with s.process(0):
            time.sleep(0.1)
            state.update(reasons=0x10, sm_mhz=1980)
            time.sleep(0.15)
    write_telemetry(tmp_path, s.frame())
    f = read_telemetry(tmp_path / TELEMETRY_FILE)
    metrics = set(f["metric"])
    assert {"reason_idle", "reason_sync_boost", "throttle_reasons", "throttle_active"} <= metrics
    assert (f.loc[f["metric"] == "throttle_active", "value"] == 0).all()
    assert set(f.loc[f["metric"] == "throttle_reasons", "value"]) <= {1.0, 16.0}
    row = gpu_rows(summarise(f, s.windows, s.interval_s))["0"]
    assert set(row["reasons_seen"]) == {"idle", "sync_boost"} and row["throttle_s"] == 0.0
