"""One host sampler: the contention monitor (run/environment.py) and the telemetry's host source
(run/telemetry_sources.py) share one reading of /proc/stat per tick (run/procstat.py), and the
monitor polls alone when telemetry is off -- on a synthetic /proc directory."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_gemmperf.run import environment as env
from pytest_gemmperf.run.environment import ContentionMonitor
from pytest_gemmperf.run.telemetry import TelemetrySampler
from pytest_gemmperf.run.telemetry_sources import HostSource

TICK = 100.0


def write_stat(proc: Path, *, busy: int, idle: int, steal: int = 0, running: int = 1) -> None:
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 {steal} 0 0\n"
                               f"cpu0 {busy} 0 0 {idle} 0 0 0 {steal} 0 0\n"
                               f"intr 0\nctxt 1\nprocs_running {running}\nprocs_blocked 0\n")
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 500 kB\n")


@pytest.fixture(autouse=True)
def _tick(monkeypatch):
    monkeypatch.setattr(env.os, "sysconf", lambda name: TICK)


@pytest.fixture
def stat_reads(monkeypatch, tmp_path):
    """Count every read of ``<tmp_path>/proc/stat``, whichever way it is read: open() for
    reading (a Path.read_text) or a pread from offset 0 on a descriptor opened for it."""
    target = str(tmp_path / "proc" / "stat")
    count = {"n": 0}
    fds: set[int] = set()
    real_open, real_pread, real_io_open = os.open, os.pread, io.open

    def counting_os_open(path, *a, **k):
        fd = real_open(path, *a, **k)
        if str(path) == target:
            fds.add(fd)
        return fd

    def counting_pread(fd, n, off):
        if off == 0 and fd in fds:
            count["n"] += 1
        return real_pread(fd, n, off)

    def counting_io_open(file, mode="r", *a, **k):
        if str(file) == target and "r" in mode:
            count["n"] += 1
        return real_io_open(file, mode, *a, **k)

    monkeypatch.setattr(os, "open", counting_os_open)
    monkeypatch.setattr(os, "pread", counting_pread)
    monkeypatch.setattr(io, "open", counting_io_open)
    return count


def _samplers() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("gemmperf-"))


def test_one_reading_of_proc_stat_per_tick_when_both_run(tmp_path, stat_reads):
    proc = tmp_path / "proc"
    write_stat(proc, busy=100, idle=100, running=5)
    mon = ContentionMonitor(interval_s=0.01, proc_stat=str(proc / "stat"))
    sampler = TelemetrySampler(0.05, sources=[HostSource(proc=str(proc), sys_cpu=str(tmp_path / "sys"))])
    with mon, sampler:  # the order of the call sites (pytest_glue/point.py, pytest_glue/reruns.py)
        time.sleep(0.15)
        threads = _samplers()
        write_stat(proc, busy=160, idle=120, steal=20, running=5)
        time.sleep(0.2)
    ticks = sampler.metadata()["samples"]
    assert ticks >= 4
    # one thread samples; the monitor's 0.01 s polling would read the file ~35 times more
    assert threads == ["gemmperf-telemetry"]
    # every tick: one read shared by both; besides: the source's first reading on open, the
    # monitor's start and end readings
    assert stat_reads["n"] <= ticks + 3
    ev = mon.evidence
    assert ev["samples"] == ticks + 2 and ev["runnable_mean"] == 4.0 and ev["runnable_max"] == 4.0
    assert ev["steal_fraction"] == pytest.approx(20 / 100)
    f = sampler.frame()
    host = f[(f["device"] == "host") & (f["metric"] == "cpu_steal_frac")]["value"]
    assert host.max() == pytest.approx(20 / 100)  # the telemetry rows from the same readings
    assert _samplers() == []


def test_monitor_polls_alone_when_telemetry_is_off(tmp_path, stat_reads):
    proc = tmp_path / "proc"
    write_stat(proc, busy=100, idle=100, running=3)
    mon = ContentionMonitor(interval_s=0.02, proc_stat=str(proc / "stat"))
    with mon, TelemetrySampler(0.05, enabled=False):
        time.sleep(0.2)
        threads = _samplers()
    assert threads == ["gemmperf-contention"]
    assert mon.evidence["samples"] >= 5 and mon.evidence["runnable_mean"] == 2.0
    assert stat_reads["n"] == mon.evidence["samples"]


def test_monitor_resumes_polling_when_the_sampler_stops_first(tmp_path):
    proc = tmp_path / "proc"
    write_stat(proc, busy=100, idle=100, running=3)
    mon = ContentionMonitor(interval_s=0.02, proc_stat=str(proc / "stat"))
    sampler = TelemetrySampler(0.05, sources=[HostSource(proc=str(proc), sys_cpu=str(tmp_path / "sys"))])
    with mon:
        with sampler:
            time.sleep(0.12)
        assert _samplers() == ["gemmperf-contention"]
        write_stat(proc, busy=100, idle=100, running=9)
        time.sleep(0.15)
    assert mon.evidence["runnable_max"] == 8.0  # seen only by the monitor's own polling
    assert mon.evidence["samples"] >= sampler.metadata()["samples"] + 4
    # the monitor entered after the sampler starts fed, and neither polls twice
    with sampler.__class__(0.05, sources=[HostSource(proc=str(proc), sys_cpu=str(tmp_path / "sys"))]) as s2:
        with ContentionMonitor(interval_s=0.01, proc_stat=str(proc / "stat")) as m2:
            time.sleep(0.12)
            assert _samplers() == ["gemmperf-telemetry"]
    assert m2.evidence["runnable_max"] == 8.0 and m2.evidence["samples"] <= s2.metadata()["samples"] + 2


def test_a_patched_read_proc_stat_also_governs_the_fed_readings(tmp_path, monkeypatch):
    """Plugin tests silence host load by patching ``environment.read_proc_stat``: the readings
    the telemetry hands over go through it as well."""
    proc = tmp_path / "proc"
    write_stat(proc, busy=100, idle=100, running=9)
    monkeypatch.setattr(env, "read_proc_stat", lambda *a, **k: None)
    mon = ContentionMonitor(interval_s=0.01, proc_stat=str(proc / "stat"))
    with mon, TelemetrySampler(0.03, sources=[HostSource(proc=str(proc), sys_cpu=str(tmp_path / "sys"))]):
        time.sleep(0.1)
    assert "runnable_mean" not in mon.evidence and "foreign_cpu_cores" not in mon.evidence
    assert not env.assess(mon.evidence).disturbed


def test_no_proc_stat_leaves_the_cpu_fields_out(tmp_path):
    """A host without /proc (macOS): the source does not drive the feed, the monitor's own
    reads fail, and only the portable fields remain."""
    nowhere = tmp_path / "no-proc"
    mon = ContentionMonitor(interval_s=0.02, proc_stat=str(nowhere / "stat"))
    sampler = TelemetrySampler(0.03, sources=[HostSource(proc=str(nowhere), sys_cpu=str(tmp_path / "sys"))])
    with mon, sampler:
        time.sleep(0.1)
        threads = _samplers()
    assert threads == ["gemmperf-contention", "gemmperf-telemetry"]
    ev = mon.evidence
    assert {"cores", "own_cpu_cores", "concurrent_points"} <= set(ev)
    assert not {"runnable_mean", "foreign_cpu_cores", "steal_fraction"} & set(ev)
    assert "cpu_busy_frac" not in set(sampler.frame()["metric"])


def test_parse_proc_stat_one_parser_for_both():
    from pytest_gemmperf.run import procstat

    st = procstat.parse_proc_stat("cpu  4 0 2 10\ncpu0 4 0 2 10 0 0 0 3\nprocs_running 2\n")
    assert st.names == ("cpu", "cpu0") and st.procs_running == 2.0
    assert st.ticks.tolist() == [[4, 0, 2, 10, 0, 0, 0, 0], [4, 0, 2, 10, 0, 0, 0, 3]]
    busy, steal, total = procstat.cpu_ticks_split(st.ticks)
    assert busy.tolist() == [6, 6] and steal.tolist() == [0, 3] and total.tolist() == [16, 19]
    assert procstat.parse_proc_stat("nothing here\n") is None
    assert procstat.parse_proc_stat("cpu  1 x 2\n") is None  # not numbers: not a /proc/stat
    assert env.read_proc_stat("unused", parsed=st) == {"busy": 0.06, "steal": 0.0, "total": 0.16,
                                                      "procs_running": 2.0}
    assert np.isclose(env.read_proc_stat("unused", parsed=st)["total"], 16 / TICK)


def test_a_host_source_dropped_without_close_releases_the_monitors(tmp_path):
    import gc

    proc = tmp_path / "proc"
    write_stat(proc, busy=100, idle=100, running=3)
    src = HostSource(proc=str(proc), sys_cpu=str(tmp_path / "sys"))
    assert src.open()
    del src
    gc.collect()
    with ContentionMonitor(interval_s=0.01, proc_stat=str(proc / "stat")) as mon:
        time.sleep(0.08)
        assert _samplers() == ["gemmperf-contention"]
    assert mon.evidence["samples"] >= 4
