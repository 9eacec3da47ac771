"""The gate on a busy machine, with a workload whose timings do not depend on the host's load.

The stand-in workload (``tests/fixtures/gemmperf_plugin/fake_kineto_workload.py``) writes CPU
Kineto traces whose ``aten::mm`` lasts ``--mm-us`` x ``$FAKE_SCALE`` microseconds with 2 %
dispatch and 1 % process noise, however loaded the host is. So a verdict on a busy machine is
about what the gate makes of the *measured* contention, not about the contention itself:

1. in a temporary directory, a two-point sweep of that workload records its baselines on the
   machine as it is;
2. ``--burners-per-core`` CPU-bound processes per core start (default 3);
3. ``--slow-runs`` gated runs of the workload made ``--scale`` times slower (default 5 x 3x):
   each must end *failed* or *undecided*, never a plain pass;
4. ``--same-runs`` gated runs of the unchanged workload (default 10): none may hold a
   ``regression`` row.

The runs are real ``pytest`` processes with the plugin's defaults except ``--gemmperf-quiet-wait``
(default here 5 s: the burners never stop, so the default 120 s would only add waiting). Each
point's outcome is read from its ``point.json``; the contention from the host sampler
(``/proc/stat``). Every run is judged again by ``gemmperf compare`` on the same store, which must
reproduce pytest's verdict, change, CI, q and reason on every row. Prints one line per run and a
table.

``nice -n 10 python benchmarks/busy_gate.py [--slow-runs 5] [--same-runs 10] [--scale 3]
[--burners-per-core 3] [--quiet-wait 5] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import example_gate as eg  # noqa: E402

STAND_IN = eg.REPO / "tests" / "fixtures" / "gemmperf_plugin" / "fake_kineto_workload.py"
TEST_FILE = Path("test_busy.py")
SUITE = f'''
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28, 56], threads=[256], kernels=[r"^aten::mm$"])
def test_busy(gemmperf):
    result = gemmperf.profile([sys.executable, {str(STAND_IN)!r}, "--dispatches", "40"], repeats=2)
    gemmperf.assert_no_regression(result)
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slow-runs", type=int, default=5)
    ap.add_argument("--same-runs", type=int, default=10)
    ap.add_argument("--scale", type=float, default=3.0, help="the slow workload's aten::mm factor")
    ap.add_argument("--burners-per-core", type=int, default=3)
    ap.add_argument("--quiet-wait", default="5", help="--gemmperf-quiet-wait for the gated runs")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    args = ap.parse_args(argv)
    root, tmp = eg.work_dir(args.keep, "gemmperf-busy-gate-")
    common = ["--gemmperf-backend", "torch", "--gemmperf-baseline-dir", str(root / "base")]
    gated = [*common, "--gemmperf-quiet-wait", args.quiet_wait]
    try:
        (root / TEST_FILE).write_text(SUITE, encoding="utf-8")
        print(f"{eg.cores()} cores; load {eg.load():.1f} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
              flush=True)
        rc, _, _, secs = eg.pytest_run(root, "baseline", common, test_file=TEST_FILE)
        print(f"baselines recorded: exit {rc} ({secs:.0f} s, load {eg.load():.1f})", flush=True)
        if rc != 0:
            print(f"busy_gate: the baseline run failed; see {root / 'logs' / 'baseline.log'}", file=sys.stderr)
            return 2
        burners = eg.start_burners(args.burners_per_core * eg.cores())
        results: list[eg.RunResult] = []
        try:
            print(f"{len(burners)} CPU burners running", flush=True)
            time.sleep(2)  # let the load show in /proc/stat before the first run
            slow = {"FAKE_SCALE": str(args.scale)}
            results += [eg.gated_run(root, f"busy-{args.scale:g}x", i, gated, store=root / "base",
                                     test_file=TEST_FILE, env_extra=slow)
                        for i in range(args.slow_runs)]
            results += [eg.gated_run(root, "busy-same", i, gated, store=root / "base", test_file=TEST_FILE)
                        for i in range(args.same_runs)]
        finally:
            eg.stop_burners(burners)
        print()
        print("\n".join(eg.summary(results)))
        slow_rs = [r for r in results if r.case != "busy-same"]
        same_rs = [r for r in results if r.case == "busy-same"]
        never_plain = sum(not r.plain_pass and r.outcome in ("failed", "undecided") for r in slow_rs)
        no_reg = sum(not r.verdicts.get("regression") and r.exit_status in (0, 1) for r in same_rs)
        points = Counter()
        for r in same_rs:
            points.update(r.points)
        print(f"\n{args.scale:g}x slower: {never_plain} of {len(slow_rs)} runs failed or undecided, none a plain pass")
        print(f"unchanged: {no_reg} of {len(same_rs)} runs without a regression row "
              f"(points: {', '.join(f'{k} {n}' for k, n in sorted(points.items()))})")
        print(f"load after: {eg.load():.1f}; {eg.LEGEND}")
        differ = sum(r.compare_diff or 0 for r in results) + sum(r.compare_diff is None for r in results)
        print(f"gemmperf compare vs pytest: {differ} differing row(s) (or failed compares) over {len(results)} runs")
        return 0 if never_plain == len(slow_rs) and no_reg == len(same_rs) and not differ else 1
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
