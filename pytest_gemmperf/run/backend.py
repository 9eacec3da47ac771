"""Which profiler runs a point: ``auto`` (the default), ``rocprofv3``, ``torch`` or ``replay``.

``auto``: rocprofv3 when it is on PATH and a ROCm GPU is present, else the PyTorch profiler on a
CUDA (or ROCm) GPU, else the PyTorch profiler on the CPU. The checks read device files and
sysfs only: importing torch in the pytest process would cost seconds per session and is not
needed to find a GPU.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("auto", "rocprofv3", "torch", "replay")


@dataclass(frozen=True)
class BackendChoice:
    name: str  # rocprofv3 | torch | replay
    device: str  # rocm | cuda | cpu | none (replay)
    reason: str

    def describe(self) -> str:
        return f"{self.name} on {self.device} ({self.reason})"


def rocm_gpu_present(kfd_topology: str = "/sys/class/kfd/kfd/topology/nodes") -> bool:
    """A ROCm GPU agent exists: ``/dev/kfd`` and a KFD topology node with a non-zero
    ``gfx_target_version`` (CPU nodes report 0)."""
    if not os.path.exists("/dev/kfd"):
        return False
    for props in glob.glob(os.path.join(kfd_topology, "*", "properties")):
        try:
            text = Path(props).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "gfx_target_version" and value.strip() not in ("", "0"):
                return True
    return False


def cuda_gpu_present() -> bool:
    """An NVIDIA GPU is visible to the driver."""
    if glob.glob("/dev/nvidia[0-9]*"):
        return True
    return bool(glob.glob("/proc/driver/nvidia/gpus/*"))


def select_backend(requested: str = "auto", *, rocprofv3_exe: str = "rocprofv3",
                   replay_dir: str | os.PathLike | None = None) -> BackendChoice:
    """Resolve ``--gemmperf-backend``; raises ValueError for an unusable explicit choice."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    if requested == "replay" or (requested == "auto" and replay_dir is not None):
        if replay_dir is None:
            raise ValueError("--gemmperf-backend replay needs --gemmperf-replay DIR")
        return BackendChoice("replay", "none", f"outputs under {replay_dir}")
    rocm = rocm_gpu_present()
    have_rocprof = shutil.which(rocprofv3_exe) is not None
    if requested == "rocprofv3":
        if not have_rocprof:
            raise ValueError(f"--gemmperf-backend rocprofv3: {rocprofv3_exe!r} is not on PATH")
        return BackendChoice("rocprofv3", "rocm", "requested")
    if requested == "auto" and rocm and have_rocprof:
        return BackendChoice("rocprofv3", "rocm", "rocprofv3 on PATH and a ROCm GPU present")
    # ROCm builds of PyTorch expose HIP devices as "cuda", so the torch workload treats both alike
    if rocm:
        return BackendChoice("torch", "rocm", "ROCm GPU present" + ("" if have_rocprof else
                                                                    ", rocprofv3 not on PATH"))
    if cuda_gpu_present():
        return BackendChoice("torch", "cuda", "CUDA GPU present")
    return BackendChoice("torch", "cpu", "no GPU found")
