"""AMD's real ``rocprofv3`` front end, installed into a temporary fake ROCm tree.

The release folders under ``../shared/data/rocprofv3/frontend`` hold AMD's own
``source/bin/rocprofv3.py`` per release line (MIT). :func:`install` lays one out the way a ROCm
install does, relative to which the script finds everything it needs:

    <root>/bin/rocprofv3.py       the release's script, CMake-configured (@VAR@ -> values)
    <root>/bin/rocprofv3          launcher: installs the exec stub, then runs rocprofv3.py
    <root>/lib/rocprofiler-sdk/librocprofiler-sdk-tool.so   empty files: the script only checks
    <root>/lib/librocprofiler-sdk.so (+ roctx, kokkosp, ...)  that they exist (7.0 resolves them)
    <root>/.info/version          the ROCm version, as a ROCm install has it

Only two things are stubbed: the library files (empty) and the final exec (``exec_stub.py``:
the fake libraries are moved from ``LD_PRELOAD`` to ``FAKE_ROCPROFV3_PRELOAD`` so ld.so does not
try to load empty files; the fake tool library in ``fake_gpu.py`` reads that instead).

:func:`run_inprocess` imports the installed script and calls its ``main(argv)`` with
``os.execvpe``/``subprocess.check_call`` replaced by recorders, returning the exit status and the
exact argv/environment each exec would have received.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: ``../shared/data`` beside the checkout (tests/rocprofv3_double -> tests -> repo -> ..), or the
#: folder GEMMPERF_SHARED_DATA names, as tests/conftest.py reads it
FRONTEND_DIR = Path(os.environ.get("GEMMPERF_SHARED_DATA") or HERE.parent.parent.parent / "shared" / "data") \
    / "rocprofv3" / "frontend"

#: release folder -> (ROCm version written to .info/version and rocm_version, SDK version)
RELEASES = {
    "6.2.0": ("6.2.0", "0.4.0"),
    "6.3": ("6.3.0", "0.5.0"),
    "6.4": ("6.4.0", "0.6.0"),
    "7.0": ("7.0.0", "1.0.0"),
    # rocm-systems develop 2025-08-09, SDK VERSION 1.0.0; the README calls it closest to 7.1
    "develop-2025-08": ("7.1.0", "1.0.0"),
}

#: libraries the 7.x script resolves (fatal when missing); 6.x only builds the paths
_LIBS = ("lib/rocprofiler-sdk/librocprofiler-sdk-tool.so", "lib/librocprofiler-sdk.so",
         "lib/librocprofiler-sdk-roctx.so", "lib/rocprofiler-sdk/librocprofiler-sdk-tool-kokkosp.so",
         "libexec/rocprofiler-sdk/librocprofv3-list-avail.so",   # 6.4, 7.0
         "libexec/librocprofv3-list-avail.so",                   # 6.3
         "lib/rocprofiler-sdk/librocprofv3-list-avail.so",       # develop-2025-08
         "lib/rocprofiler-sdk/librocprofiler-sdk-rocattach.so",
         "lib/librocprof-trace-decoder.so")

TOOL_LIB = "lib/rocprofiler-sdk/librocprofiler-sdk-tool.so"


def available() -> bool:
    return FRONTEND_DIR.is_dir()


def skip_reason() -> str:
    return (f"AMD's rocprofv3 front ends are absent ({FRONTEND_DIR}; they live in ../shared "
            "beside the checkout)")


def releases() -> list[str]:
    """Release folders present (in RELEASES order)."""
    return [r for r in RELEASES if (FRONTEND_DIR / r / "rocprofv3.py").is_file()]


def configure(text: str, release: str) -> str:
    """CMake ``configure_file`` of the script's ``@VAR@`` version block."""
    rocm, sdk = RELEASES[release]
    values = {"FULL_VERSION_STRING": sdk, "ROCPROFILER_SDK_GIT_REVISION": "0000000-realfront",
              "CMAKE_LIBRARY_ARCHITECTURE": "x86_64-linux-gnu", "CMAKE_SYSTEM_NAME": "Linux",
              "CMAKE_SYSTEM_PROCESSOR": "x86_64", "CMAKE_SYSTEM_VERSION": "6.8.0",
              "CMAKE_CXX_COMPILER_ID": "Clang", "CMAKE_CXX_COMPILER_VERSION": "19.0.0",
              "rocm_version_FULL_VERSION": rocm}
    for key, val in values.items():
        text = text.replace(f"@{key}@", val)
    return text


_LAUNCHER = '''#!{python}
# fake ROCm tree: run AMD's rocprofv3.py with only the final exec stubbed (see realfront.py)
import os, runpy, sys
sys.path.insert(0, {double!r})
import exec_stub
exec_stub.install()
sys.path.pop(0)
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "rocprofv3.py"),
               run_name="__main__")
'''


_AVAIL = '''#!{python}
# fake ROCm tree: the test double's rocprofv3-avail, impersonating this tree's release
import os, runpy
os.environ["FAKE_ROCPROFV3_VERSION"] = {version!r}
runpy.run_path({avail!r}, run_name="__main__")
'''


def install(release: str, root: str | os.PathLike) -> Path:
    """Lay out a fake ROCm tree for ``release`` under ``root``; returns ``root``."""
    root = Path(root)
    src = FRONTEND_DIR / release / "rocprofv3.py"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "bin" / "rocprofv3.py").write_text(configure(src.read_text(), release))
    launcher = root / "bin" / "rocprofv3"
    launcher.write_text(_LAUNCHER.format(python=sys.executable, double=str(HERE)))
    launcher.chmod(0o755)
    avail = root / "bin" / "rocprofv3-avail"     # 7.x pmc-check: the fake one (see README)
    avail.write_text(_AVAIL.format(python=sys.executable, version=RELEASES[release][0],
                                   avail=str(HERE / "rocprofv3-avail")))
    avail.chmod(0o755)
    for lib in _LIBS:
        (root / lib).parent.mkdir(parents=True, exist_ok=True)
        (root / lib).write_bytes(b"")
    (root / ".info").mkdir(exist_ok=True)
    (root / ".info" / "version").write_text(RELEASES[release][0] + "-realfront\n")
    return root


# --- in-process runs ----------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one front-end invocation did: exit status, output, and the execs it made."""

    code: int
    stdout: str
    stderr: str
    execs: list[tuple[list[str], dict[str, str]]] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return self.code == 0 and bool(self.execs)


class _Exec(Exception):
    """Raised by the exec recorder: ``os.execvpe`` does not return."""


def _load(root: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"_rocprofv3_{tag}", root / "bin" / "rocprofv3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_inprocess(root: str | os.PathLike, argv: list[str], env: dict[str, str]) -> Outcome:
    """Call the installed script's ``main(argv)`` with ``os.environ`` = ``env``; the exec and
    every ``subprocess.check_call`` (one per pass) are recorded instead of run."""
    root = Path(root)
    execs: list[tuple[list[str], dict[str, str]]] = []

    def fake_exec(path, args, env=None):
        execs.append((list(args), dict(env if env is not None else os.environ)))
        raise _Exec()

    def fake_check_call(args, env=None, **kw):
        execs.append((list(args), dict(env if env is not None else os.environ)))
        return 0

    saved_env = dict(os.environ)
    saved = (os.execvpe, subprocess.check_call, list(sys.argv))
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.environ.clear()
        os.environ.update(env)
        os.execvpe, subprocess.check_call = fake_exec, fake_check_call
        sys.argv = [str(root / "bin" / "rocprofv3"), *argv]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                mod = _load(root, str(abs(hash(str(root)))))
                ret = mod.main(argv)
                code = int(ret or 0)
            except _Exec:
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception as exc:  # an uncaught exception: python prints it and exits 1
                err.write(f"Traceback (most recent call last):\n{type(exc).__name__}: {exc}\n")
                code = 1
    finally:
        os.execvpe, subprocess.check_call, sys.argv = saved
        os.environ.clear()
        os.environ.update(saved_env)
    return Outcome(code, out.getvalue(), err.getvalue(), execs)
