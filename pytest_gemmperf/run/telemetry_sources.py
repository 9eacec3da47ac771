"""What the telemetry sampler reads: the host (always), AMD GPUs (``amdsmi``), NVIDIA GPUs
(NVML through ``nvidia-ml-py``'s ``pynvml``).

Each source has ``open()`` (returns False when the platform has nothing to offer), ``static()``
(facts read once: product, driver, limits), ``sample()`` (a list of ``(device, metric, value,
unit)`` tuples for one instant) and ``close()``. A metric the library or device does not
support is dropped after its first failure with one note in ``notes`` (never fatal), so a
sample costs only the calls that work. The GPU libraries are imported only when present.

Metric names are shared across vendors where they mean the same thing, so the report and the
gate read one vocabulary: ``gfx_clock_mhz`` (AMD GFX / NVIDIA SM clock), ``mem_clock_mhz``,
``power_w``, ``power_cap_w``, ``temp_edge_c`` (NVIDIA: the GPU sensor), ``temp_hotspot_c``,
``temp_mem_c``, ``gfx_activity_pct``, ``vram_used_mib``, ``throttle_active`` (1 while a
clock-cutting reason is set, 0 otherwise) and ``throttle_reasons`` (the vendor's raw bit mask,
where it fits a float exactly); NVML adds ``gpu_idle`` (1 while the driver reports the GPU idle).

Every clock-event / throttle / violation reason the vendor reports is also one row
``reason_<name>`` (value 1) per sample in which it is set, in one vocabulary for both vendors
(:data:`REASON_WORDS`), so a summary can tell a power cap from the idle bit. Only the reasons in
:data:`CLOCK_CUTTING` can slow a kernel; the others (idle, application clocks, sync boost,
display clock, low utilisation, a clock below the host limit without a stated cause) are
recorded, never judged.
"""

from __future__ import annotations

import importlib
import os
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from pytest_gemmperf.run import procstat

#: reason name -> the words a label uses (both vendors share the names)
REASON_WORDS = {
    "power_cap": "power cap", "hw_slowdown": "hardware slowdown",
    "thermal_sw": "thermal slowdown (software)", "thermal_hw": "thermal slowdown (hardware)",
    "power_brake": "power brake", "thermal": "thermal limit", "current_limit": "current limit",
    "platform_limit": "platform limit", "throttled": "throttle status",
    "idle": "idle", "applications_clocks": "application clocks", "sync_boost": "sync boost",
    "display_clock": "display clock", "low_utilization": "low utilisation",
    "clock_below_host_limit": "clock below host limit", "other": "other reason",
}
#: reasons that hold clocks below what the work asks for (power, thermal, current limits): the
#: only ones that can slow a kernel. The rest say why clocks are where they are without any
#: limit cutting them (idle, application/display clock settings, sync boost).
CLOCK_CUTTING = frozenset({"power_cap", "hw_slowdown", "thermal_sw", "thermal_hw", "power_brake",
                           "thermal", "current_limit", "platform_limit", "throttled"})
#: metric name prefix of the per-reason rows
REASON_PREFIX = "reason_"
#: NVML clock-event (throttle) reason bits (nvmlClocksEventReason*, formerly ...ThrottleReason*)
NVML_REASON_BITS = ((0x1, "idle"), (0x2, "applications_clocks"), (0x4, "power_cap"),
                    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "thermal_sw"),
                    (0x40, "thermal_hw"), (0x80, "power_brake"), (0x100, "display_clock"))
NVML_KNOWN_BITS = sum(bit for bit, _ in NVML_REASON_BITS)
#: NVML clock-event reason "GPU idle": clocks parked because nothing runs
NVML_IDLE_REASON = 0x1
#: amdsmi_get_violation_status() "active_*" flags (MI300 and later). The flag without a cause
#: (and its per-XCP "total") also covers low utilisation, so it is recorded, not judged; the
#: power and thermal split of gpu_metrics 1.8 is judged.
AMD_VIOLATION_REASONS = (("active_ppt_pwr", "power_cap"), ("active_socket_thrm", "thermal"),
                         ("active_prochot_thrm", "thermal"), ("active_vr_thrm", "thermal"),
                         ("active_hbm_thrm", "thermal"),
                         ("active_gfx_clk_below_host_limit_pwr", "power_cap"),
                         ("active_gfx_clk_below_host_limit_thm", "thermal"),
                         ("active_low_utilization", "low_utilization"),
                         ("active_gfx_clk_below_host_limit", "clock_below_host_limit"),
                         ("active_gfx_clk_below_host_limit_total", "clock_below_host_limit"))
#: gpu_metrics ``indep_throttle_status`` (MI100/MI200, Navi): the ASIC-independent layout of
#: the kernel's amdgpu_smu.h, 16 bits per group: power (PPT, SPL...), current (TDC, EDC),
#: temperature (TEMP_*, VRHOT, PROCHOT), other (PPM, FIT)
AMD_INDEP_GROUPS = ((0, "power_cap"), (16, "current_limit"), (32, "thermal"), (48, "platform_limit"))

Sample = tuple[str, str, float, str]


def _import(name: str):
    """The module, or None when it is not installed (or fails to import: a broken install must
    not break a CPU run)."""
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - ImportError, OSError of a missing shared library...
        return None


def visible_indices(env: dict[str, str] | None) -> list[int] | None:
    """GPU indices named by ``CUDA_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` /
    ``ROCR_VISIBLE_DEVICES`` (numeric lists only), or None for all."""
    for key in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        text = (env or {}).get(key)
        if text is None or text.strip() == "":
            continue
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if parts and all(p.isdigit() for p in parts):
            return [int(p) for p in parts]
    return None


class _Probes:
    """Metric probes that drop out after their first failure (with one note)."""

    def __init__(self, notes: list[str], prefix: str) -> None:
        self.notes = notes
        self.prefix = prefix
        self.dead: set[str] = set()

    def call(self, key: str, fn: Callable[[], Any]) -> Any:
        if key in self.dead:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported, AmdSmiLibraryException...
            self.dead.add(key)
            self.notes.append(f"{self.prefix}: {key} not sampled ({type(exc).__name__}: {exc})")
            return None


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None  # amdsmi reports unsupported fields as "N/A"
    return f if f == f else None


def nvml_reasons(bits: int) -> list[str]:
    """Reason names set in an NVML clock-event mask; bits newer than this table are ``other``."""
    out = [name for bit, name in NVML_REASON_BITS if bits & bit]
    if bits & ~NVML_KNOWN_BITS:
        out.append("other")
    return out


def _flag(v: Any) -> bool | None:
    """An amdsmi ``active_*`` flag (bool or 0/1; per XCP/XCC: nested lists of them), None when
    unsupported (``"N/A"``, max uint8)."""
    if isinstance(v, (list, tuple)):
        flags = [f for f in map(_flag, v) if f is not None]
        return any(flags) if flags else None
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    return None


def amd_violation_reasons(viol: dict[str, Any]) -> list[str] | None:
    """Reason names active in an ``amdsmi_get_violation_status`` dict; None when it supports
    no flag (older ASICs answer ``"N/A"`` everywhere)."""
    supported, out = False, []
    for key, name in AMD_VIOLATION_REASONS:
        on = _flag(viol.get(key))
        supported |= on is not None
        if on and name not in out:
            out.append(name)
    return out if supported else None


def amd_metrics_reasons(gm: dict[str, Any]) -> list[str] | None:
    """Reason names from gpu_metrics: ``indep_throttle_status`` by bit group where reported,
    else the ASIC-specific ``throttle_status`` word (non-zero: ``throttled``, cause unknown)."""
    indep = gm.get("indep_throttle_status")
    if isinstance(indep, int) and not isinstance(indep, bool) and 0 <= indep < 2**64 - 1:
        return [name for shift, name in AMD_INDEP_GROUPS if (indep >> shift) & 0xFFFF]
    ts = _num(gm.get("throttle_status"))
    if ts is None:
        return None
    return ["throttled"] if ts else []


def reason_rows(names: list[str] | None) -> Iterator[tuple[str, Any, str]]:
    """One ``reason_<name>`` row per reason set, and ``throttle_active`` from the clock-cutting
    ones; nothing when the device reports no reasons."""
    if names is None:
        return
    for name in names:
        yield REASON_PREFIX + name, 1.0, "1"
    yield "throttle_active", float(any(n in CLOCK_CUTTING for n in names)), "1"


# ------------------------------------------------------------------------------------- host

class HostSource:
    """Host metrics from ``/proc`` and ``/sys`` (Linux; elsewhere only the load average).

    * ``load1`` and ``load_per_core`` (1-minute load average / usable cores)
    * ``cpu_busy_frac`` / ``cpu_steal_frac`` for the host (device ``host``) and per CPU
      (device ``cpuN``, busy only for each CPU, steal per CPU only where non-zero), from
      the ``/proc/stat`` tick deltas between two samples
    * ``cpu_freq_mhz``: mean ``scaling_cur_freq`` over the CPUs (where cpufreq is exposed)
    * ``mem_available_frac`` (``/proc/meminfo``) and ``mem_pressure_some_avg10``
      (``/proc/pressure/memory``, PSI: % of time some task stalled on memory)

    While open it drives the ``/proc/stat`` feed (``run/procstat.py``): each sample's parsed
    reading also goes to the contention monitor, which then reads nothing itself.
    """

    name = "host"

    def __init__(self, proc: str = "/proc", sys_cpu: str = "/sys/devices/system/cpu") -> None:
        self.proc = Path(proc)
        self.sys_cpu = Path(sys_cpu)
        self.notes: list[str] = []
        self._prev: procstat.ProcStat | None = None
        self._freq_files: list[Path] = []
        self._files = procstat.StatFile()
        self._driver: procstat.Driver | None = None
        try:
            self.cores = max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            self.cores = max(1, os.cpu_count() or 1)

    def open(self) -> bool:
        try:
            self._freq_files = sorted(self.sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"))
        except OSError:
            self._freq_files = []
        if not self._freq_files:
            self.notes.append("host: CPU frequency not exposed (no cpufreq scaling_cur_freq)")
        if not (self.proc / "pressure" / "memory").exists():
            self.notes.append("host: memory pressure (PSI) not exposed")
        self._prev = self._read_stat()
        if self._prev is not None:  # no /proc/stat: the monitor keeps (failing) on its own
            self._driver = procstat.drive(self.proc / "stat")
            # a source dropped without close() must not keep the monitors waiting for readings
            weakref.finalize(self, self._driver.stop)
        return True

    def static(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cores": self.cores, "cpus": os.cpu_count()}
        try:
            for line in (self.proc / "cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    out["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return out

    def _read_stat(self) -> procstat.ProcStat | None:
        try:
            return procstat.parse_proc_stat(self._files.read(self.proc / "stat"))
        except OSError:
            return None

    def sample(self) -> list[Sample]:
        rows: list[Sample] = []
        try:
            load1 = os.getloadavg()[0]
            rows += [("host", "load1", load1, "1"), ("host", "load_per_core", load1 / self.cores, "1")]
        except (AttributeError, OSError):
            pass
        cur = self._read_stat()
        if cur is not None:
            if self._prev is not None:
                rows += _cpu_rows(self._prev, cur)
            self._prev = cur
            if self._driver is not None:
                self._driver.publish(cur)
        if self._freq_files:
            khz = []
            for f in self._freq_files:
                try:
                    khz.append(float(self._files.read(f)))
                except (OSError, ValueError):
                    continue
            if khz:
                rows.append(("host", "cpu_freq_mhz", sum(khz) / len(khz) / 1000.0, "MHz"))
        try:
            mem = {}
            for line in self._files.read(self.proc / "meminfo").splitlines()[:8]:
                k, _, v = line.partition(":")
                mem[k] = float(v.split()[0]) if v.split() else 0.0
            if mem.get("MemTotal") and "MemAvailable" in mem:
                rows.append(("host", "mem_available_frac", mem["MemAvailable"] / mem["MemTotal"], "1"))
        except (OSError, ValueError):
            pass
        try:
            first = self._files.read(self.proc / "pressure" / "memory").split("\n", 1)[0]
            avg10 = dict(kv.split("=") for kv in first.split()[1:]).get("avg10")
            if avg10 is not None:
                rows.append(("host", "mem_pressure_some_avg10", float(avg10), "%"))
        except (OSError, ValueError):
            pass
        return rows

    def close(self) -> None:
        if self._driver is not None:
            self._driver.stop()
            self._driver = None
        self._files.close()


def _cpu_rows(prev: procstat.ProcStat, cur: procstat.ProcStat) -> list[Sample]:
    """Busy / steal fractions from the tick deltas of the CPUs in both readings (all CPUs at
    once; a CPU with no ticks in between is left out): host rows first, then per CPU its busy
    fraction and, where non-zero, its steal fraction."""
    if prev.names == cur.names:
        names, d = cur.names, cur.ticks - prev.ticks
    else:  # a CPU went on- or offline between the two readings
        pos = {n: i for i, n in enumerate(prev.names)}
        keep = [i for i, n in enumerate(cur.names) if n in pos]
        names = tuple(cur.names[i] for i in keep)
        d = cur.ticks[keep] - prev.ticks[[pos[n] for n in names]]
    busy, steal, total = procstat.cpu_ticks_split(d)
    ok = total > 0
    safe = np.where(ok, total, 1.0)
    busy_f, steal_f = (busy / safe).tolist(), (steal / safe).tolist()
    host: list[Sample] = []
    per: list[Sample] = []
    for name, b, s, has_steal, good in zip(names, busy_f, steal_f, (steal > 0).tolist(), ok.tolist()):
        if not good:
            continue
        if name == "cpu":
            host += [("host", "cpu_busy_frac", b, "1"), ("host", "cpu_steal_frac", s, "1")]
        else:
            per.append((name, "cpu_busy_frac", b, "1"))
            if has_steal:
                per.append((name, "cpu_steal_frac", s, "1"))
    return host + per


# ------------------------------------------------------------------------------------- GPUs

class GpuSource:
    """What the GPU sources share: optional import of the vendor library (``module`` replaces
    it in tests), init and device handles filtered to ``indices`` (``gpuN`` by the library's
    index), static facts per device, samples per device, shutdown. A subclass holds only what
    differs: :meth:`_open_handles`, :meth:`_system_static`, :meth:`_device_static` and
    :meth:`_device_sample`, which yields ``(metric, value, unit)``; values that are None or
    not numbers (amdsmi's ``"N/A"``) are dropped. Library calls go through ``self._p.call``
    so an unsupported metric drops out after one note."""

    name = ""         # also the notes' prefix
    module_name = ""  # the Python module imported on open()
    vendor = ""       # static()["vendor"]

    def __init_subclass__(cls, *, name: str, module_name: str, vendor: str, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.name, cls.module_name, cls.vendor = name, module_name, vendor

    def __init__(self, indices: Iterable[int] | None = None, module: Any = None) -> None:
        self.lib = module
        self.indices = None if indices is None else list(indices)
        self.notes: list[str] = []
        self.handles: list[tuple[str, Any]] = []
        self._p = _Probes(self.notes, self.name)

    def open(self) -> bool:
        lib = self.lib or _import(self.module_name)
        if lib is None:
            return False
        self.lib = lib
        try:
            self.handles = self._open_handles()
        except Exception as exc:  # noqa: BLE001 - NVMLError / AmdSmiException: no driver, not this vendor
            self.notes.append(f"{self.name}: not available ({type(exc).__name__}: {exc})")
            return False
        if not self.handles:
            self.close()
            return False
        return True

    def _wanted(self, i: int) -> bool:
        return self.indices is None or i in self.indices

    def static(self) -> dict[str, Any]:
        out: dict[str, Any] = {"vendor": self.vendor, **self._system_static()}
        out["devices"] = {dev: self._device_static(h, out) for dev, h in self.handles}
        return out

    def sample(self) -> list[Sample]:
        return [(dev, metric, v, unit) for dev, h in self.handles
                for metric, raw, unit in self._device_sample(h) if (v := _num(raw)) is not None]

    def close(self) -> None:
        try:
            self._shutdown()
        except Exception:  # noqa: BLE001 - already shut down
            pass

    # -- what differs per vendor
    def _open_handles(self) -> list[tuple[str, Any]]:
        """Initialise the library; the wanted devices as ``(gpuN, handle)``."""
        raise NotImplementedError

    def _system_static(self) -> dict[str, Any]:
        return {}

    def _device_static(self, h: Any, out: dict[str, Any]) -> dict[str, Any]:
        """Facts of one device (may add system-wide ones to ``out``)."""
        raise NotImplementedError

    def _device_sample(self, h: Any) -> Iterator[tuple[str, Any, str]]:
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError


def _scaled(v: Any, scale: float) -> float | None:
    return None if v is None else float(v) * scale


class NvmlSource(GpuSource, name="nvml", module_name="pynvml", vendor="nvidia"):
    """NVIDIA GPUs through NVML (``pynvml`` of ``nvidia-ml-py``)."""

    def _open_handles(self) -> list[tuple[str, Any]]:
        nv = self.lib
        nv.nvmlInit()
        n = int(nv.nvmlDeviceGetCount())
        out = []
        for i in (range(n) if self.indices is None else [i for i in self.indices if i < n]):
            try:
                out.append((f"gpu{i}", nv.nvmlDeviceGetHandleByIndex(i)))
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"nvml: gpu{i} skipped ({type(exc).__name__}: {exc})")
        return out

    def _reasons_fn(self):
        nv = self.lib
        # renamed "clock event reasons" in newer NVML; the throttle name is the older alias
        return getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons")

    def _system_static(self) -> dict[str, Any]:
        drv = self._p.call("driver_version", self.lib.nvmlSystemGetDriverVersion)
        return {} if drv is None else {"driver": _text(drv)}

    def _device_static(self, h: Any, out: dict[str, Any]) -> dict[str, Any]:
        nv, p = self.lib, self._p
        d: dict[str, Any] = {}
        for key, fn in (("product", lambda: nv.nvmlDeviceGetName(h)),
                        ("vbios", lambda: nv.nvmlDeviceGetVbiosVersion(h)),
                        ("uuid", lambda: nv.nvmlDeviceGetUUID(h))):
            v = p.call(key, fn)
            if v is not None:
                d[key] = _text(v)
        cap = p.call("power_limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))
        if cap is not None:
            d["power_cap_w"] = float(cap) / 1000.0
        for key, clk in (("max_gfx_clock_mhz", "NVML_CLOCK_SM"), ("max_mem_clock_mhz", "NVML_CLOCK_MEM")):
            v = p.call(key, lambda: nv.nvmlDeviceGetMaxClockInfo(h, getattr(nv, clk)))
            if v is not None:
                d[key] = float(v)
        return d

    def _device_sample(self, h: Any) -> Iterator[tuple[str, Any, str]]:
        nv, call = self.lib, self._p.call
        yield "gfx_clock_mhz", call("gfx_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)), "MHz"
        yield "mem_clock_mhz", call("mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)), "MHz"
        # NVML reports milliwatts
        yield "power_w", _scaled(call("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h)), 1e-3), "W"
        yield "power_cap_w", _scaled(call("power_cap_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h)), 1e-3), "W"
        yield "temp_edge_c", call("temp_edge_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)), "C"
        util = call("utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            yield "gfx_activity_pct", float(util.gpu), "%"
            yield "mem_activity_pct", float(util.memory), "%"
        mem = call("memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            yield "vram_used_mib", float(mem.used) / 2**20, "MiB"
        reasons = call("throttle_reasons", lambda: self._reasons_fn()(h))
        if reasons is not None:
            bits = int(reasons)
            if bits < 2**53:  # a float holds it exactly; the reason rows carry every bit anyway
                yield "throttle_reasons", float(bits), "bitmask"
            yield from reason_rows(nvml_reasons(bits))
            # the driver's own idle flag: utilisation is averaged over up to a second and
            # read 0 % beside 1980 MHz and 121 W during bursts of GEMMs on an H200
            yield "gpu_idle", float(bool(bits & NVML_IDLE_REASON)), "1"

    def _shutdown(self) -> None:
        self.lib.nvmlShutdown()


class AmdSmiSource(GpuSource, name="amdsmi", module_name="amdsmi", vendor="amd"):
    """AMD GPUs through ``amdsmi`` (ROCm's Python library)."""

    def _open_handles(self) -> list[tuple[str, Any]]:
        am = self.lib
        flags = getattr(getattr(am, "AmdSmiInitFlags", None), "INIT_AMD_GPUS", None)
        am.amdsmi_init() if flags is None else am.amdsmi_init(flags)
        return [(f"gpu{i}", h) for i, h in enumerate(am.amdsmi_get_processor_handles()) if self._wanted(i)]

    def _device_static(self, h: Any, out: dict[str, Any]) -> dict[str, Any]:
        am, p = self.lib, self._p
        d: dict[str, Any] = {}
        asic = p.call("asic_info", lambda: am.amdsmi_get_gpu_asic_info(h)) or {}
        if asic.get("market_name"):
            d["product"] = str(asic["market_name"])
        vb = p.call("vbios_info", lambda: am.amdsmi_get_gpu_vbios_info(h)) or {}
        if vb.get("version"):
            d["vbios"] = str(vb["version"])
        drv = p.call("driver_info", lambda: am.amdsmi_get_gpu_driver_info(h)) or {}
        if drv.get("driver_version"):
            out["driver"] = str(drv["driver_version"])
        cap = p.call("power_cap_info", lambda: am.amdsmi_get_power_cap_info(h)) or {}
        if _num(cap.get("power_cap")) is not None:
            d["power_cap_w"] = _num(cap["power_cap"]) / 1e6  # documented in microwatts
        gfx = p.call("clock_info", lambda: am.amdsmi_get_clock_info(h, am.AmdSmiClkType.GFX)) or {}
        if _num(gfx.get("max_clk")) is not None:
            d["max_gfx_clock_mhz"] = _num(gfx["max_clk"])
        return d

    def _device_sample(self, h: Any) -> Iterator[tuple[str, Any, str]]:
        am, call = self.lib, self._p.call
        for metric, clk in (("gfx_clock_mhz", "GFX"), ("mem_clock_mhz", "MEM")):
            info = call(metric, lambda: am.amdsmi_get_clock_info(h, getattr(am.AmdSmiClkType, clk))) or {}
            yield metric, info.get("clk", info.get("cur_clk")), "MHz"
        pw = call("power_info", lambda: am.amdsmi_get_power_info(h)) or {}
        cur = _num(pw.get("current_socket_power"))
        yield "power_w", cur if cur is not None else pw.get("average_socket_power"), "W"
        yield "power_cap_w", pw.get("power_limit"), "W"
        for metric, kind in (("temp_edge_c", "EDGE"), ("temp_hotspot_c", "HOTSPOT"), ("temp_mem_c", "VRAM")):
            yield metric, call(metric, lambda: am.amdsmi_get_temp_metric(
                h, getattr(am.AmdSmiTemperatureType, kind), am.AmdSmiTemperatureMetric.CURRENT)), "C"
        act = call("gpu_activity", lambda: am.amdsmi_get_gpu_activity(h)) or {}
        yield "gfx_activity_pct", act.get("gfx_activity"), "%"
        vram = call("vram_usage", lambda: am.amdsmi_get_gpu_vram_usage(h)) or {}
        yield "vram_used_mib", vram.get("vram_used"), "MiB"  # documented in MB
        viol = call("violation_status", lambda: am.amdsmi_get_violation_status(h))
        names = amd_violation_reasons(viol) if isinstance(viol, dict) else None
        if viol is not None and names is None:
            # older ASICs answer "N/A" for every flag: read gpu_metrics from now on
            self._p.dead.add("violation_status")
            self.notes.append("amdsmi: violation_status reports no flag; throttle status from gpu_metrics")
        if names is None:
            gm = call("gpu_metrics_info", lambda: am.amdsmi_get_gpu_metrics_info(h)) or {}
            names = amd_metrics_reasons(gm)
            ts = _num(gm.get("throttle_status"))
            if ts is not None:
                yield "throttle_reasons", ts, "bitmask"
        yield from reason_rows(names)

    def _shutdown(self) -> None:
        self.lib.amdsmi_shut_down()


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
