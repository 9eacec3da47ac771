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
``temp_mem_c``, ``gfx_activity_pct``, ``vram_used_mib``, ``throttle_active`` (1 while clocks
are held down by a power or thermal limit, 0 otherwise) and ``throttle_reasons`` (vendor bit
mask, for the record); NVML adds ``gpu_idle`` (1 while the driver reports the GPU idle).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Callable, Iterable

#: NVML clock-event (throttle) reasons that mean "held down by a limit": SW power cap (0x4), HW
#: slowdown (0x8), SW thermal (0x20), HW thermal (0x40), HW power brake (0x80). Idle (0x1),
#: application clocks (0x2), sync boost (0x10) and display clock (0x100) are not throttling.
NVML_THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
#: NVML clock-event reason "GPU idle": clocks parked because nothing runs
NVML_IDLE_REASON = 0x1
#: amdsmi_get_violation_status() keys whose True means a limit is active now
AMD_VIOLATION_KEYS = ("active_ppt_pwr", "active_socket_thrm", "active_prochot_thrm",
                      "active_vr_thrm", "active_hbm_thrm", "active_gfx_clk_below_host_limit")

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


# ------------------------------------------------------------------------------------- host

def cpu_ticks_split(fields: Iterable[float]) -> tuple[float, float, float]:
    """``(busy, steal, total)`` of a ``/proc/stat`` cpu line's fields (user nice system idle
    iowait irq softirq steal; missing ones are 0). Busy leaves out idle, iowait and steal; one
    definition for the telemetry samples and the contention monitor (``run/environment.py``)."""
    user, nice, system, idle, iowait, irq, softirq, steal = (list(fields) + [0.0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return busy, steal, busy + idle + iowait + steal


class HostSource:
    """Host metrics from ``/proc`` and ``/sys`` (Linux; elsewhere only the load average).

    * ``load1`` and ``load_per_core`` (1-minute load average / usable cores)
    * ``cpu_busy_frac`` / ``cpu_steal_frac`` for the host (device ``host``) and per CPU
      (device ``cpuN``, busy only for each CPU, steal per CPU only when any is non-zero), from
      the ``/proc/stat`` tick deltas between two samples
    * ``cpu_freq_mhz``: mean ``scaling_cur_freq`` over the CPUs (where cpufreq is exposed)
    * ``mem_available_frac`` (``/proc/meminfo``) and ``mem_pressure_some_avg10``
      (``/proc/pressure/memory``, PSI: % of time some task stalled on memory)
    """

    name = "host"

    def __init__(self, proc: str = "/proc", sys_cpu: str = "/sys/devices/system/cpu") -> None:
        self.proc = Path(proc)
        self.sys_cpu = Path(sys_cpu)
        self.notes: list[str] = []
        self._prev: dict[str, list[float]] | None = None
        self._freq_files: list[Path] = []
        self._fds: dict[str, int] = {}
        try:
            self.cores = max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            self.cores = max(1, os.cpu_count() or 1)

    def _read(self, path: Path) -> str:
        """Read a /proc or /sys file through a descriptor kept open between samples (pread
        from offset 0 re-reads it): a third of the cost of open/read/close each time."""
        key = str(path)
        fd = self._fds.get(key)
        if fd is None:
            fd = self._fds[key] = os.open(key, os.O_RDONLY)
        chunks, off = [], 0
        while True:
            b = os.pread(fd, 65536, off)
            if not b:
                break
            chunks.append(b)
            off += len(b)
        return b"".join(chunks).decode()

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

    def _read_stat(self) -> dict[str, list[float]] | None:
        try:
            text = self._read(self.proc / "stat")
        except OSError:
            return None
        out = {}
        for line in text.splitlines():
            if line.startswith("cpu"):
                parts = line.split()
                out[parts[0]] = [float(x) for x in parts[1:9]] + [0.0] * max(0, 9 - len(parts))
        return out

    def sample(self) -> list[Sample]:
        rows: list[Sample] = []
        try:
            load1 = os.getloadavg()[0]
            rows += [("host", "load1", load1, "1"), ("host", "load_per_core", load1 / self.cores, "1")]
        except (AttributeError, OSError):
            pass
        cur = self._read_stat()
        if cur is not None and self._prev is not None:
            steal_any = False
            per: list[Sample] = []
            for cpu, v in cur.items():
                p = self._prev.get(cpu)
                if p is None:
                    continue
                busy, steal, total = cpu_ticks_split(a - b for a, b in zip(v, p))
                if total <= 0:
                    continue
                busy /= total
                dev = "host" if cpu == "cpu" else cpu
                if dev == "host":
                    rows.append((dev, "cpu_busy_frac", busy, "1"))
                    rows.append((dev, "cpu_steal_frac", steal / total, "1"))
                else:
                    per.append((dev, "cpu_busy_frac", busy, "1"))
                    if steal > 0:
                        steal_any = True
                        per.append((dev, "cpu_steal_frac", steal / total, "1"))
            rows += per if steal_any else [r for r in per if r[1] == "cpu_busy_frac"]
        if cur is not None:
            self._prev = cur
        if self._freq_files:
            khz = []
            for f in self._freq_files:
                try:
                    khz.append(float(self._read(f)))
                except (OSError, ValueError):
                    continue
            if khz:
                rows.append(("host", "cpu_freq_mhz", sum(khz) / len(khz) / 1000.0, "MHz"))
        try:
            mem = {}
            for line in self._read(self.proc / "meminfo").splitlines()[:8]:
                k, _, v = line.partition(":")
                mem[k] = float(v.split()[0]) if v.split() else 0.0
            if mem.get("MemTotal") and "MemAvailable" in mem:
                rows.append(("host", "mem_available_frac", mem["MemAvailable"] / mem["MemTotal"], "1"))
        except (OSError, ValueError):
            pass
        try:
            first = self._read(self.proc / "pressure" / "memory").split("\n", 1)[0]
            avg10 = dict(kv.split("=") for kv in first.split()[1:]).get("avg10")
            if avg10 is not None:
                rows.append(("host", "mem_pressure_some_avg10", float(avg10), "%"))
        except (OSError, ValueError):
            pass
        return rows

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()


# ----------------------------------------------------------------------------------- NVIDIA

class NvmlSource:
    """NVIDIA GPUs through NVML (``pynvml`` of ``nvidia-ml-py``); ``module`` replaceable."""

    name = "nvml"

    def __init__(self, indices: Iterable[int] | None = None, module: Any = None) -> None:
        self.nv = module
        self.indices = None if indices is None else list(indices)
        self.notes: list[str] = []
        self.handles: list[tuple[str, Any]] = []
        self._p = _Probes(self.notes, "nvml")

    def open(self) -> bool:
        nv = self.nv or _import("pynvml")
        if nv is None:
            return False
        self.nv = nv
        try:
            nv.nvmlInit()
            n = int(nv.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001 - NVMLError (no driver): not an NVIDIA host
            self.notes.append(f"nvml: not available ({type(exc).__name__}: {exc})")
            return False
        for i in (range(n) if self.indices is None else [i for i in self.indices if i < n]):
            try:
                self.handles.append((f"gpu{i}", nv.nvmlDeviceGetHandleByIndex(i)))
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"nvml: gpu{i} skipped ({type(exc).__name__}: {exc})")
        if not self.handles:
            self.close()
            return False
        return True

    def _reasons_fn(self):
        nv = self.nv
        # renamed "clock event reasons" in newer NVML; the throttle name is the older alias
        return getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons")

    def static(self) -> dict[str, Any]:
        nv, p = self.nv, self._p
        out: dict[str, Any] = {"vendor": "nvidia"}
        drv = p.call("driver_version", nv.nvmlSystemGetDriverVersion)
        if drv is not None:
            out["driver"] = _text(drv)
        devices = {}
        for dev, h in self.handles:
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
            devices[dev] = d
        out["devices"] = devices
        return out

    def sample(self) -> list[Sample]:
        nv, p = self.nv, self._p
        rows: list[Sample] = []
        for dev, h in self.handles:
            def add(metric: str, unit: str, fn: Callable[[], Any], scale: float = 1.0) -> None:
                v = p.call(metric, fn)
                if v is not None:
                    rows.append((dev, metric, float(v) * scale, unit))

            add("gfx_clock_mhz", "MHz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            add("mem_clock_mhz", "MHz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
            add("power_w", "W", lambda: nv.nvmlDeviceGetPowerUsage(h), 1e-3)
            add("power_cap_w", "W", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), 1e-3)
            add("temp_edge_c", "C", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            util = p.call("utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
            if util is not None:
                rows.append((dev, "gfx_activity_pct", float(util.gpu), "%"))
                rows.append((dev, "mem_activity_pct", float(util.memory), "%"))
            mem = p.call("memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
            if mem is not None:
                rows.append((dev, "vram_used_mib", float(mem.used) / 2**20, "MiB"))
            reasons = p.call("throttle_reasons", lambda: self._reasons_fn()(h))
            if reasons is not None:
                rows.append((dev, "throttle_reasons", float(int(reasons)), "bitmask"))
                rows.append((dev, "throttle_active", float(bool(int(reasons) & NVML_THROTTLE_MASK)), "1"))
                # the driver's own idle flag: utilisation is averaged over up to a second and
                # read 0 % beside 1980 MHz and 121 W during bursts of GEMMs on an H200
                rows.append((dev, "gpu_idle", float(bool(int(reasons) & NVML_IDLE_REASON)), "1"))
        return rows

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - already shut down
            pass


# -------------------------------------------------------------------------------------- AMD

class AmdSmiSource:
    """AMD GPUs through ``amdsmi`` (ROCm's Python library); ``module`` replaceable."""

    name = "amdsmi"

    def __init__(self, indices: Iterable[int] | None = None, module: Any = None) -> None:
        self.am = module
        self.indices = None if indices is None else list(indices)
        self.notes: list[str] = []
        self.handles: list[tuple[str, Any]] = []
        self._p = _Probes(self.notes, "amdsmi")

    def open(self) -> bool:
        am = self.am or _import("amdsmi")
        if am is None:
            return False
        self.am = am
        try:
            flags = getattr(getattr(am, "AmdSmiInitFlags", None), "INIT_AMD_GPUS", None)
            am.amdsmi_init() if flags is None else am.amdsmi_init(flags)
            handles = list(am.amdsmi_get_processor_handles())
        except Exception as exc:  # noqa: BLE001 - AmdSmiException (no driver): not an AMD host
            self.notes.append(f"amdsmi: not available ({type(exc).__name__}: {exc})")
            return False
        for i, h in enumerate(handles):
            if self.indices is None or i in self.indices:
                self.handles.append((f"gpu{i}", h))
        if not self.handles:
            self.close()
            return False
        return True

    def static(self) -> dict[str, Any]:
        am, p = self.am, self._p
        out: dict[str, Any] = {"vendor": "amd"}
        devices = {}
        for dev, h in self.handles:
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
            devices[dev] = d
        out["devices"] = devices
        return out

    def sample(self) -> list[Sample]:
        am, p = self.am, self._p
        rows: list[Sample] = []
        for dev, h in self.handles:
            def add(metric: str, value: Any, unit: str) -> None:
                v = _num(value)
                if v is not None:
                    rows.append((dev, metric, v, unit))

            for metric, clk in (("gfx_clock_mhz", "GFX"), ("mem_clock_mhz", "MEM")):
                info = p.call(metric, lambda: am.amdsmi_get_clock_info(h, getattr(am.AmdSmiClkType, clk))) or {}
                add(metric, info.get("clk", info.get("cur_clk")), "MHz")
            pw = p.call("power_info", lambda: am.amdsmi_get_power_info(h)) or {}
            cur = _num(pw.get("current_socket_power"))
            add("power_w", cur if cur is not None else pw.get("average_socket_power"), "W")
            add("power_cap_w", pw.get("power_limit"), "W")
            for metric, kind in (("temp_edge_c", "EDGE"), ("temp_hotspot_c", "HOTSPOT"), ("temp_mem_c", "VRAM")):
                add(metric, p.call(metric, lambda: am.amdsmi_get_temp_metric(
                    h, getattr(am.AmdSmiTemperatureType, kind), am.AmdSmiTemperatureMetric.CURRENT)), "C")
            act = p.call("gpu_activity", lambda: am.amdsmi_get_gpu_activity(h)) or {}
            add("gfx_activity_pct", act.get("gfx_activity"), "%")
            vram = p.call("vram_usage", lambda: am.amdsmi_get_gpu_vram_usage(h)) or {}
            add("vram_used_mib", vram.get("vram_used"), "MiB")  # documented in MB
            viol = p.call("violation_status", lambda: am.amdsmi_get_violation_status(h))
            if viol is not None:
                flags = [viol.get(k) for k in AMD_VIOLATION_KEYS if isinstance(viol.get(k), bool)]
                if flags:
                    rows.append((dev, "throttle_active", float(any(flags)), "1"))
            else:
                # older ASICs: the gpu_metrics throttle_status word (non-zero = throttled)
                gm = p.call("gpu_metrics_info", lambda: am.amdsmi_get_gpu_metrics_info(h)) or {}
                ts = _num(gm.get("throttle_status"))
                if ts is not None:
                    rows.append((dev, "throttle_reasons", ts, "bitmask"))
                    rows.append((dev, "throttle_active", float(ts != 0), "1"))
        return rows

    def close(self) -> None:
        try:
            self.am.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
            pass


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
