"""Doubles of ``pynvml`` (nvidia-ml-py) and ``amdsmi`` for the telemetry tests.

They follow the libraries' documented Python APIs: function names, argument order, units
(NVML power in mW, memory in bytes; amdsmi power in W, power cap in µW, VRAM in MB, "N/A" for
unsupported fields) and the exceptions raised for an unsupported metric
(``NVMLError_NotSupported``; ``AmdSmiLibraryException`` with a NOT_SUPPORTED code). A shared
``state`` dict lets a test change clocks and throttling while the sampler runs: NVML's
clock-event mask is ``state["reasons"]`` when set (else power cap while ``throttle``, idle while
``idle``); amdsmi's violation flags are updated from ``state["violation"]`` (``"na"``: every flag
"N/A", as on MI200), its gpu_metrics from ``state["metrics"]``, its GFX activity is
``state["util"]``.
"""

from __future__ import annotations

import types
from typing import Any


def fake_pynvml(state: dict[str, Any], n_devices: int = 1, unsupported: tuple[str, ...] = ()):
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return {3: "Not Supported", 9: "Driver Not Loaded"}.get(self.value, f"NVML error {self.value}")

    class NVMLError_NotSupported(NVMLError):
        def __init__(self) -> None:
            super().__init__(3)

    nv.NVMLError, nv.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    nv.NVML_ERROR_NOT_SUPPORTED = 3
    nv.NVML_CLOCK_GRAPHICS, nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 0, 1, 2
    nv.NVML_TEMPERATURE_GPU = 0
    for bit, name in ((0x1, "GpuIdle"), (0x2, "ApplicationsClocksSetting"), (0x4, "SwPowerCap"),
                      (0x8, "HwSlowdown"), (0x10, "SyncBoost"), (0x20, "SwThermalSlowdown"),
                      (0x40, "HwThermalSlowdown"), (0x80, "HwPowerBrakeSlowdown"),
                      (0x100, "DisplayClockSetting")):
        setattr(nv, f"nvmlClocksThrottleReason{name}", bit)
        setattr(nv, f"nvmlClocksEventReason{name}", bit)
    calls: list[str] = []
    state.setdefault("calls", calls)

    def check(name: str) -> None:
        state["calls"].append(name)
        if name in unsupported:
            raise NVMLError_NotSupported()

    def handle(i):
        if not 0 <= i < n_devices:
            raise NVMLError(2)
        return ("nvml-handle", i)

    nv.nvmlInit = lambda: state.__setitem__("init", True)
    nv.nvmlShutdown = lambda: state.__setitem__("init", False)
    nv.nvmlDeviceGetCount = lambda: n_devices
    nv.nvmlDeviceGetHandleByIndex = handle
    nv.nvmlSystemGetDriverVersion = lambda: "550.90.07"
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    nv.nvmlDeviceGetVbiosVersion = lambda h: "96.00.9F.00.01"
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-0000-{h[1]}"

    def clock(h, kind):
        check("clock")
        return state.get("sm_mhz", 1980) if kind == nv.NVML_CLOCK_SM else 2619

    def max_clock(h, kind):
        return 1980 if kind == nv.NVML_CLOCK_SM else 2619

    def power(h):
        check("power")
        return int(state.get("power_w", 650) * 1000)

    def limit(h):
        check("power_limit")
        return 700_000

    def temp(h, sensor):
        check("temperature")
        return state.get("temp_c", 61)

    def util(h):
        check("utilization")
        return types.SimpleNamespace(gpu=state.get("util", 97), memory=40)

    def mem(h):
        check("memory")
        return types.SimpleNamespace(total=141 * 2**30, free=100 * 2**30, used=41 * 2**30)

    def reasons(h):
        check("throttle")
        if "reasons" in state:
            return state["reasons"]
        return (0x4 if state.get("throttle") else 0x0) | (0x1 if state.get("idle") else 0x0)

    nv.nvmlDeviceGetClockInfo, nv.nvmlDeviceGetMaxClockInfo = clock, max_clock
    nv.nvmlDeviceGetPowerUsage, nv.nvmlDeviceGetEnforcedPowerLimit = power, limit
    nv.nvmlDeviceGetTemperature, nv.nvmlDeviceGetUtilizationRates = temp, util
    nv.nvmlDeviceGetMemoryInfo = mem
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = reasons
    return nv


def fake_amdsmi(state: dict[str, Any], n_devices: int = 1, unsupported: tuple[str, ...] = ()):
    am = types.ModuleType("amdsmi")

    class AmdSmiException(Exception):
        pass

    class AmdSmiLibraryException(AmdSmiException):
        def __init__(self, err_code: int) -> None:
            super().__init__(err_code)
            self.err_code = err_code

        def get_error_code(self) -> int:
            return self.err_code

        def __str__(self) -> str:
            return f"Error code:\n\t{self.err_code} | AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"

    am.AmdSmiException, am.AmdSmiLibraryException = AmdSmiException, AmdSmiLibraryException
    am.AmdSmiRetCode = types.SimpleNamespace(STATUS_NOT_SUPPORTED=2)
    am.AmdSmiInitFlags = types.SimpleNamespace(INIT_AMD_GPUS=2)
    am.AmdSmiClkType = types.SimpleNamespace(SYS=0, GFX=0, DF=1, DCEF=2, SOC=3, MEM=4)
    am.AmdSmiTemperatureType = types.SimpleNamespace(EDGE=0, HOTSPOT=1, JUNCTION=1, VRAM=2)
    am.AmdSmiTemperatureMetric = types.SimpleNamespace(CURRENT=0)

    def check(name: str) -> None:
        if name in unsupported:
            raise AmdSmiLibraryException(2)

    am.amdsmi_init = lambda flags=None: state.__setitem__("init", True)
    am.amdsmi_shut_down = lambda: state.__setitem__("init", False)
    am.amdsmi_get_processor_handles = lambda: [("amd-handle", i) for i in range(n_devices)]
    am.amdsmi_get_gpu_asic_info = lambda h: {"market_name": "AMD Instinct MI300X", "device_id": "0x74a1"}
    am.amdsmi_get_gpu_vbios_info = lambda h: {"name": "MI300X", "version": "113-M3000100-102"}
    am.amdsmi_get_gpu_driver_info = lambda h: {"driver_name": "amdgpu", "driver_version": "6.8.5"}
    am.amdsmi_get_power_cap_info = lambda h: {"power_cap": 750_000_000, "default_power_cap": 750_000_000}

    def clock_info(h, kind):
        check("clock")
        if kind == am.AmdSmiClkType.GFX:
            return {"clk": state.get("gfx_mhz", 2100), "min_clk": 500, "max_clk": 2100,
                    "clk_locked": False, "clk_deep_sleep": False}
        return {"clk": 1300, "min_clk": 900, "max_clk": 1300, "clk_locked": "N/A", "clk_deep_sleep": False}

    def power_info(h):
        check("power")
        return {"current_socket_power": state.get("power_w", 700), "average_socket_power": "N/A",
                "gfx_voltage": 900, "soc_voltage": 800, "mem_voltage": 1100, "power_limit": 750}

    def temp(h, kind, metric):
        check("temp")
        if kind == am.AmdSmiTemperatureType.EDGE and "edge" in unsupported:
            raise AmdSmiLibraryException(2)  # MI300X has no edge sensor
        return {0: 50, 1: state.get("hotspot_c", 80), 2: 70}[kind]

    def activity(h):
        return {"gfx_activity": state.get("util", 99), "umc_activity": 30, "mm_activity": "N/A"}

    def vram(h):
        return {"vram_total": 196592, "vram_used": 42000}

    def violation(h):
        check("violation")
        hot = bool(state.get("throttle"))
        out = {"reference_timestamp": 0, "violation_timestamp": 0, "active_ppt_pwr": hot,
               "active_socket_thrm": False, "active_prochot_thrm": False, "active_vr_thrm": "N/A",
               "active_hbm_thrm": False}
        if state.get("violation") == "na":
            return {k: v if k.endswith("timestamp") else "N/A" for k, v in out.items()}
        return {**out, **state.get("violation", {})}

    def metrics(h):
        return {"throttle_status": 1 if state.get("throttle") else 0, **state.get("metrics", {})}

    am.amdsmi_get_clock_info, am.amdsmi_get_power_info = clock_info, power_info
    am.amdsmi_get_temp_metric, am.amdsmi_get_gpu_activity = temp, activity
    am.amdsmi_get_gpu_vram_usage, am.amdsmi_get_violation_status = vram, violation
    am.amdsmi_get_gpu_metrics_info = metrics
    return am
