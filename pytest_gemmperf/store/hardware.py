"""Hardware key and run metadata for baselines (``docs/design.md``, "Baselines").

The key names what the numbers depend on physically (GPU arch, product, GPU count; CPU model and
core count for CPU-only runs). Software versions are *metadata*, never part of the key: a ROCm or
driver upgrade is exactly what the gate must compare across.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
from pytest_gemmperf.version import __version__

#: Seconds allowed for each external probe (rocprofv3 --version, git rev-parse).
PROBE_TIMEOUT_S = 10.0

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
# Marketing suffixes that vary between kernel/firmware versions without changing the chip.
_CPU_NOISE = re.compile(r"\(R\)|\(TM\)|\(tm\)|\bCPU\b|\b\d+-Core\b|\bProcessor\b|@\s*[\d.]+\s*GHz",
                        re.IGNORECASE)


def sanitize(text: str) -> str:
    """File-name-safe token: runs of anything outside ``[A-Za-z0-9._+-]`` become one ``_``."""
    return _UNSAFE.sub("_", str(text).strip()).strip("_.") or "unknown"


def _gpu_rows(agents: pd.DataFrame) -> pd.DataFrame:
    if "type" in agents.columns:
        is_gpu = agents["type"].astype("string").str.upper().eq("GPU").fillna(False)
    else:
        is_gpu = pd.Series(False, index=agents.index)
    if "gpu_arch" in agents.columns:
        # some formats leave `type` empty; a gfx target is unambiguous
        is_gpu |= agents["gpu_arch"].astype("string").str.startswith("gfx").fillna(False)
    return agents.loc[is_gpu.to_numpy(dtype=bool)]


def _gpus_per_host(gpus: pd.DataFrame) -> tuple[int, int]:
    """(GPU count of the largest host, number of hosts).

    Every rank's trace lists all agents of its node, so rows are deduplicated by a device id;
    where no id column is filled the rows of one file are taken as that host's GPUs.
    """
    host = gpus["host"].astype("string").fillna("") if "host" in gpus.columns else pd.Series("", index=gpus.index)
    dev = pd.Series(pd.NA, index=gpus.index, dtype="Int64")
    for col in ("gpu_index", "logical_id", "node_id"):
        if col in gpus.columns:
            dev = dev.fillna(pd.to_numeric(gpus[col], errors="coerce").astype("Int64"))
    known = dev.notna()
    counts = pd.Series(dtype="int64")
    if known.any():
        counts = pd.DataFrame({"host": host[known], "dev": dev[known]}).drop_duplicates().groupby("host").size()
    if (~known).any():
        file = gpus["file"].astype("string").fillna("") if "file" in gpus.columns else pd.Series("", index=gpus.index)
        per_file = pd.DataFrame({"host": host[~known], "file": file[~known]}).groupby(["host", "file"]).size()
        fallback = per_file.groupby(level="host").max()
        counts = pd.concat([counts, fallback]).groupby(level=0).max()
    return int(counts.max()), int(len(counts))


def _joined(values: pd.Series) -> str:
    uniq = sorted({str(v).strip() for v in values.dropna() if str(v).strip()})
    return "+".join(uniq) if uniq else "unknown"


def cpu_model() -> str:
    """CPU model name of this machine (``/proc/cpuinfo`` on Linux, ``platform`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_hardware_key(model: str | None = None, cores: int | None = None,
                     machine: str | None = None) -> str:
    """``cpu-<machine>-<model>-<N>c``, e.g. ``cpu-x86_64-AMD_EPYC_9575F-2c``."""
    model = _CPU_NOISE.sub(" ", model if model is not None else cpu_model())
    model = re.sub(r"\s+", " ", model).strip()
    cores = cores if cores is not None else (os.cpu_count() or 1)
    machine = machine or platform.machine() or "unknown"
    return f"cpu-{sanitize(machine)}-{sanitize(model)}-{int(cores)}c"


def hardware_key(agents: pd.DataFrame | None) -> str:
    """Baseline key for the hardware in ``agents`` (canonical agents table).

    ``gfx950-AMD_Instinct_MI350X-x8`` for one node with 8 GPUs, ``...-x8-n2`` for two such nodes.
    Without GPU agents (CPU runs, ``None``) the key of this machine's CPU is returned.
    """
    gpus = _gpu_rows(agents) if agents is not None and len(agents) else None
    if gpus is None or gpus.empty:
        return cpu_hardware_key()
    arch = _joined(gpus["gpu_arch"]) if "gpu_arch" in gpus.columns else "unknown"
    product = _joined(gpus["product"]) if "product" in gpus.columns else "unknown"
    n_gpu, n_host = _gpus_per_host(gpus)
    key = f"{sanitize(arch)}-{sanitize(product)}-x{n_gpu}"
    return key + (f"-n{n_host}" if n_host > 1 else "")


def trace_hardware_key(agents: pd.DataFrame | None) -> str | None:
    """The hardware key a trace's own agents table names (rocprofv3 ``agent_info`` / JSON
    agents, rocpd, Kineto ``deviceProperties``): :func:`hardware_key` of its GPU agents; None
    when it lists no GPU. Unlike :func:`hardware_key` it never falls back to this machine's CPU:
    a trace read here may have been recorded anywhere, so without GPU agents it says nothing."""
    if agents is None or not len(agents) or _gpu_rows(agents).empty:
        return None
    return hardware_key(agents)


# ----------------------------------------------------------------------------- metadata


def _run(argv: list[str], cwd: str | os.PathLike | None = None) -> str | None:
    """stdout of a probe command, or None when it is missing, fails or hangs."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              cwd=cwd, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _read_text(path: str) -> str | None:
    try:
        text = Path(path).read_text(errors="replace").strip()
    except OSError:
        return None
    return text or None


def parse_rocprofv3_version(text: str) -> str | None:
    """The ``version`` field of ``rocprofv3 --version`` (7.0+ prints ``key: value`` lines)."""
    first = None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        first = first or line
        m = re.match(r"^-*\s*version\s*[:=]\s*(\S+)", line, re.IGNORECASE)
        if m:
            return m.group(1)
    return first


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def parse_nvidia_driver_version(text: str | None) -> str | None:
    """Driver version from ``/proc/driver/nvidia/version``
    (``NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue ...``)."""
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text or "")
    return m.group(1) if m else None


def gpu_driver_version() -> str | None:
    """amdgpu's module version on ROCm machines, else the NVIDIA kernel module's."""
    return (_read_text("/sys/module/amdgpu/version")
            or parse_nvidia_driver_version(_read_text("/proc/driver/nvidia/version")))


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    out = _run(["git", "rev-parse", "HEAD"], cwd=cwd) if shutil.which("git") else None
    return out.strip() or None if out else None


def _run_bytes(argv: list[str], cwd: str | os.PathLike | None = None) -> bytes | None:
    """stdout of a probe command as bytes (a diff is not text), or None when it fails."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_S, cwd=cwd, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(cwd: str | os.PathLike | None = None) -> dict[str, Any]:
    """Whether the working tree the run was made from had uncommitted changes, so that a
    regression caused by an uncommitted edit is not pinned on a clean commit:

    * ``git_describe``: ``git describe --always --dirty`` (``v1.2-3-gabc123-dirty``);
    * ``git_dirty``: tracked files differ from the commit (staged or not);
    * ``git_diff_sha256``: SHA-256 of ``git diff HEAD --binary`` (None when clean): two runs
      with the same commit and the same hash ran the same code;
    * ``git_untracked``: how many untracked, not ignored files the tree holds (not hashed).

    Every value is None where git is absent, the directory is no repository, or a probe fails
    or hangs; never an error."""
    none: dict[str, Any] = {"git_describe": None, "git_dirty": None, "git_diff_sha256": None,
                            "git_untracked": None}
    if not shutil.which("git"):
        return none
    describe = _run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=cwd)
    if describe is None:
        return none
    diff = _run_bytes(["git", "-c", "core.quotePath=false", "diff", "HEAD", "--binary", "--no-color",
                       "--no-ext-diff"], cwd=cwd)
    untracked = _run_bytes(["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=cwd)
    dirty = None if diff is None else bool(diff)
    return {
        "git_describe": describe.strip() or None,
        "git_dirty": dirty,
        "git_diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None,
        "git_untracked": None if untracked is None else len([p for p in untracked.split(b"\0") if p]),
    }


def collect_metadata(cwd: str | os.PathLike | None = None) -> dict[str, Any]:
    """Software/host facts recorded beside a baseline (never part of its key).

    Missing tools give ``None``; every probe runs under :data:`PROBE_TIMEOUT_S`.
    """
    rocm_version = _read_text("/opt/rocm/.info/version")
    rocprof = shutil.which("rocprofv3")
    rocprof_out = _run([rocprof, "--version"]) if rocprof else None
    return {
        "rocm_version": rocm_version,
        "rocprofv3_version": parse_rocprofv3_version(rocprof_out) if rocprof_out else None,
        "torch_version": _package_version("torch"),
        "driver_version": gpu_driver_version(),
        "host": socket.gethostname(),
        "git_commit": git_commit(cwd),
        **git_state(cwd),
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "tool_version": __version__,
        "python_version": platform.python_version(),
    }
