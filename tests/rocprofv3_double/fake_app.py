"""Test workload for the rocprofv3 double: "launches" kernels through fake_gpu, and can crash,
hang, leave a grandchild behind, or act like torchrun (spawn ranked workers).

    fake_app.py --kernels Cijk_Alik_Bljk=5@20000 ncclDevKernel_Generic=3 [--workers 2]
                [--env-out DIR] [--pids-out FILE] [--exit-code N] [--crash] [--hang]
                [--sleeper]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import fake_gpu  # noqa: E402

ENV_KEYS_PREFIXES = ("ROCPROF", "ROCP_", "NCCL_", "RCCL_", "HSA_", "LD_", "RANK", "LOCAL_RANK",
                     "WORLD_SIZE", "GEMMPERF", "FAKE_")


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--kernels", nargs="*", default=["Cijk_Alik_Bljk_HHS_BH_MT128x128x64=4@20000"])
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--env-out", default=None, help="directory; writes env_<pid>.json")
    p.add_argument("--pids-out", default=None, help="file; appends one pid per line")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--crash", action="store_true")
    p.add_argument("--hang", action="store_true")
    p.add_argument("--sleeper", action="store_true", help="leave a sleeping grandchild")
    return p.parse_args(argv)


def _kernels(specs: list[str]) -> list[tuple[str, int, int]]:
    out = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        count, _, dur = (rest or "1").partition("@")
        out.append((name, int(count), int(dur or 10_000)))
    return out


def _note_pid(path: str | None, pid: int) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(f"{pid}\n")


def main(argv: list[str]) -> int:
    args = _parse(argv)
    _note_pid(args.pids_out, os.getpid())
    if args.env_out:
        os.makedirs(args.env_out, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k.startswith(ENV_KEYS_PREFIXES)}
        with open(os.path.join(args.env_out, f"env_{os.getpid()}.json"), "w") as fh:
            json.dump(env, fh)
    if args.sleeper:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        _note_pid(args.pids_out, child.pid)
    if args.workers:
        # like torchrun: the launcher process runs no kernels, each worker gets its rank
        rest = [a for a in argv]
        i = rest.index("--workers")
        del rest[i:i + 2]
        procs = []
        for rank in range(args.workers):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                       WORLD_SIZE=str(args.workers))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *rest],
                                          env=env))
        codes = [p.wait() for p in procs]
        return next((c if c > 0 else 1 for c in codes if c != 0), 0)
    for name, count, dur_ns in _kernels(args.kernels):
        for _ in range(count):
            fake_gpu.dispatch(name, dur_ns)
    print(f"fake_app pid={os.getpid()} rank={os.environ.get('RANK', '-')} done {len(args.kernels)} kernels",
          flush=True)
    if args.crash:
        raise RuntimeError("HIP error: an illegal memory access was encountered (fake)")
    if args.hang:
        print("fake_app hanging", flush=True)
        while True:
            time.sleep(1)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
