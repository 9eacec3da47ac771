"""The one stub between AMD's rocprofv3 front end and the workload (see realfront.py).

The fake ROCm tree's libraries are empty files; left in ``LD_PRELOAD`` they would make ld.so
print an error in every process. ``install()`` wraps ``os.execvpe`` (single pass) and
``subprocess.check_call`` (one child per pass) so that, just before the real exec, every
``LD_PRELOAD`` entry that lives in the fake tree moves to ``FAKE_ROCPROFV3_PRELOAD``. Everything
else the front end decided (argv, every other variable) reaches the workload unchanged; the
fake tool library (``fake_gpu.py``) treats ``FAKE_ROCPROFV3_PRELOAD`` as its ``LD_PRELOAD``.
"""

from __future__ import annotations

import os
import subprocess

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__import__("sys").argv[0])))


def _fake_tree_entry(path: str) -> bool:
    return os.path.abspath(path).startswith(_ROOT + os.sep)


def strip_preload(env):
    env = dict(os.environ if env is None else env)
    entries = [e for e in env.get("LD_PRELOAD", "").split(":") if e]
    fake = [e for e in entries if _fake_tree_entry(e)]
    if fake:
        env["FAKE_ROCPROFV3_PRELOAD"] = ":".join(fake)
        rest = [e for e in entries if e not in fake]
        if rest:
            env["LD_PRELOAD"] = ":".join(rest)
        else:
            env.pop("LD_PRELOAD", None)
    return env


def install() -> None:
    real_exec, real_check_call = os.execvpe, subprocess.check_call

    def execvpe(file, args, env):
        return real_exec(file, args, strip_preload(env))

    def check_call(*popenargs, **kwargs):
        kwargs["env"] = strip_preload(kwargs.get("env"))
        return real_check_call(*popenargs, **kwargs)

    os.execvpe = execvpe
    subprocess.check_call = check_call
