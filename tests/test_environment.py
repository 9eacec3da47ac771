"""Contention evidence (run/environment.py): /proc/stat deltas, runnable threads, concurrent
points, and the disturbance they add up to -- on synthetic /proc/stat files."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from pytest_gemmperf.run import environment as env
from pytest_gemmperf.run.environment import ContentionMonitor, assess, combine, read_proc_stat

TICK = 100.0


def write_stat(path: Path, *, busy_s: float, idle_s: float, steal_s: float = 0.0, running: int = 1) -> None:
    t = lambda s: int(round(s * TICK))  # noqa: E731
    path.write_text(f"cpu  {t(busy_s)} 0 0 {t(idle_s)} 0 0 0 {t(steal_s)} 0 0\n"
                    f"cpu0 {t(busy_s)} 0 0 {t(idle_s)} 0 0 0 {t(steal_s)} 0 0\n"
                    f"intr 0\nctxt 1\nbtime 1\nprocesses 10\nprocs_running {running}\nprocs_blocked 0\n")


@pytest.fixture(autouse=True)
def _tick(monkeypatch):
    monkeypatch.setattr(env.os, "sysconf", lambda name: TICK)


def test_read_proc_stat_fields(tmp_path):
    p = tmp_path / "stat"
    write_stat(p, busy_s=12.0, idle_s=30.0, steal_s=3.0, running=5)
    st = read_proc_stat(str(p))
    assert st == {"busy": 12.0, "steal": 3.0, "total": 45.0, "procs_running": 5.0}
    assert read_proc_stat(str(tmp_path / "absent")) is None
    (tmp_path / "junk").write_text("nothing here\n")
    assert read_proc_stat(str(tmp_path / "junk")) is None


def test_monitor_records_foreign_cpu_steal_runnable_and_concurrent_points(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    write_stat(stat, busy_s=100.0, idle_s=100.0, running=1)
    active = tmp_path / "res" / ".active"
    active.mkdir(parents=True)
    # another xdist worker's point is running
    (active / "999999.json").write_text(json.dumps({"point": "test_x[th2]", "pid": 999999}))
    monkeypatch.setattr(env, "_own_cpu_s", lambda: 0.0)  # our own process used no CPU
    mon = ContentionMonitor(marker_dir=active, label="test_x[th1]", interval_s=0.02, proc_stat=str(stat))
    with mon:
        mine = active / f"{env.os.getpid()}.json"
        assert json.loads(mine.read_text())["point"] == "test_x[th1]"
        # the host gets busy: 5 runnable threads (4 besides the sampler), other CPU use, steal
        write_stat(stat, busy_s=100.0, idle_s=100.0, running=5)
        time.sleep(0.15)
        write_stat(stat, busy_s=100.6, idle_s=100.2, steal_s=0.2, running=5)
    ev = mon.evidence
    assert not mine.exists()
    assert ev["concurrent_points"] == 1 and ev["concurrent"] == ["test_x[th2]"]
    assert ev["runnable_max"] == 4.0 and 2.0 < ev["runnable_mean"] <= 4.0
    assert ev["foreign_cpu_cores"] == pytest.approx(0.6 / ev["wall_s"], rel=0.02)
    assert ev["steal_fraction"] == pytest.approx(0.2 / 1.0, rel=1e-3)
    assert ev["cores"] >= 1


def test_quiet_host_is_not_disturbed(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    write_stat(stat, busy_s=10.0, idle_s=10.0, running=1)
    monkeypatch.setattr(env, "_cores", lambda: 2)
    with ContentionMonitor(marker_dir=tmp_path / ".active", interval_s=0.02, proc_stat=str(stat)) as mon:
        time.sleep(0.05)
    d = assess(mon.evidence)
    assert not d.disturbed and d.factor == 1.0 and d.text == ""
    assert not (tmp_path / ".active").exists()  # the marker directory goes when the last point ends


def test_assess_names_each_reason_and_the_factor():
    d = assess({"cores": 2, "runnable_mean": 4.2, "foreign_cpu_cores": 1.5, "own_cpu_cores": 1.0,
                "steal_fraction": 0.1, "concurrent_points": 1})
    assert d.disturbed
    text = d.text
    assert text.startswith("noisy environment: ")
    for part in ("1 other gemmperf point(s) ran at the same time", "4.2 runnable threads on 2 cores",
                 "other processes used 1.5 of 2 cores", "CPU steal 10%"):
        assert part in text, part
    assert d.factor == pytest.approx(2.1)  # max(1 + 1 point, 4.2/2, (1.5+1)/2, 1/0.9)
    # concurrent points on their own GPUs do not share the devices
    assert not assess({"cores": 8, "concurrent_points": 3}, shares_devices=False).disturbed
    assert assess({"cores": 8, "concurrent_points": 3}).factor == 4.0
    # small amounts are not contention
    assert not assess({"cores": 2, "runnable_mean": 2.4, "foreign_cpu_cores": 0.4,
                       "steal_fraction": 0.01}).disturbed
    assert not assess(None).disturbed and not assess({}).disturbed


def test_combine_takes_the_worst_of_several_runs():
    a = {"cores": 2, "runnable_mean": 1.0, "concurrent_points": 0, "concurrent": []}
    b = {"cores": 2, "runnable_mean": 3.5, "concurrent_points": 1, "steal_fraction": 0.2}
    c = combine(a, None, b)
    assert c["runnable_mean"] == 3.5 and c["concurrent_points"] == 1 and c["steal_fraction"] == 0.2
    assert combine(None) is None


def test_monitor_survives_a_marker_vanishing_while_it_reads(tmp_path):
    active = tmp_path / ".active"
    active.mkdir()
    stop = threading.Event()

    def churn():  # another worker's marker appears and disappears all the time
        while not stop.is_set():
            f = active / "1.json"
            try:
                f.write_text('{"point": "other"}')
                f.unlink()
            except FileNotFoundError:  # the monitor removes the emptied folder on exit
                pass

    t = threading.Thread(target=churn)
    t.start()
    try:
        with ContentionMonitor(marker_dir=active, interval_s=0.005) as mon:
            time.sleep(0.1)
    finally:
        stop.set()
        t.join()
    assert mon.evidence["concurrent_points"] in (0, 1)


def test_gpu_kernel_timings_ignore_host_cpu_load_but_not_shared_devices():
    busy = {"cores": 2, "runnable_mean": 6.0, "foreign_cpu_cores": 1.8, "steal_fraction": 0.3}
    assert assess(busy).disturbed
    assert not assess(busy, cpu_bound=False).disturbed
    d = assess({**busy, "concurrent_points": 1}, cpu_bound=False)
    assert d.disturbed and d.factor == 2.0 and "same devices" in d.text
    assert not assess({**busy, "concurrent_points": 1}, cpu_bound=False, shares_devices=False).disturbed
