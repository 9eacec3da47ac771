"""What the CPU example suite's gate catches: ``pytest perf_tests/test_gemm_overlap.py`` gated
against a baseline it recorded, run after run, unchanged (A/A) and with the README's one edit.

In a temporary copy of the example suite (``perf_tests/``, the root ``conftest.py`` and
``pyproject.toml``; its own ``.gemmperf/`` store, results and history) the script records a
baseline with one pytest run, then runs the suite ``--runs`` times per case:

* ``aa``: unchanged (A/A): every point should pass.
* ``heavy``: the one edit the README gives a new user, made in the copy's
  ``perf_tests/test_gemm_overlap.py``: the CPU GEMM shape ``384x384x384`` -> ``384x384x576``
  (each ``aten::mm`` does 1.5x the multiply-adds: +50 % GEMM work). It should fail.
* ``busy-aa`` / ``busy-heavy`` (``--busy``): the same with ``--burners-per-core`` CPU-bound
  processes per core (default 3) started after the baseline was recorded, stopped after each case.

Each run is classified from what the gate wrote and what pytest returned, not from pass/fail
alone: the rows of the run's ``verdicts.csv`` (any ``regression`` -> *failed*; else any
``inconclusive`` -> *undecided*; else *passed*; no rows or an exit status other than 0/1 ->
*error*) and pytest's exit status and outcome counts (``plain pass``: exit 0 with every test
passed, none failed or skipped). Prints one line per run and a table per case, with the load
average before and after.

Measured figures, with their dates, loads and commands: docs/statistics.md ("Busy machines and
undecided points") and the README's table. Run it with nothing else on the machine for the quiet
cases: the gate measures the host's contention, and another job's load rightly makes a point
undecided.

Run: ``nice -n 10 python benchmarks/example_gate.py --runs 10 [--busy] [--cases aa,heavy]``
(about 40 s per A/A run on a quiet 2-core machine, up to ~3 min for a run whose points re-run
to confirm). ``--keep DIR`` keeps the copy (its results and reports) in DIR.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST_FILE = Path("perf_tests") / "test_gemm_overlap.py"
#: the README's one edit: the CPU GEMM's K dimension x 1.5
SHAPE_BEFORE, SHAPE_AFTER = '"384x384x384"', '"384x384x576"'
#: the example suite's baseline store (pyproject.toml's gemmperf_baseline_dir)
STORE = Path(".gemmperf") / "baselines"
CASES = ("aa", "heavy")
BUSY_CASES = ("busy-aa", "busy-heavy")
BURNER = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\nwhile True:\n    pass\n"


@dataclass
class RunResult:
    """One gated pytest run."""

    case: str
    exit_status: int
    seconds: float
    verdicts: Counter = field(default_factory=Counter)
    tests: Counter = field(default_factory=Counter)  # junit outcomes: passed / failed / skipped / error
    points: Counter = field(default_factory=Counter)  # the gate's outcome per point (point.json)
    #: rows ``gemmperf compare`` judged differently (None: not checked or compare failed)
    compare_diff: int | None = None

    @property
    def outcome(self) -> str:
        """The run's worst point outcome as the gate wrote it (failed > error > undecided >
        passed); error when pytest's exit status is not 0/1 or no point was gated."""
        if self.exit_status not in (0, 1) or not self.points:
            return "error"
        return next(o for o in ("failed", "error", "undecided", "passed") if self.points.get(o))

    @property
    def plain_pass(self) -> bool:
        """pytest said "all passed": exit 0, no test failed, skipped or errored."""
        return (self.exit_status == 0 and self.tests.get("passed", 0) > 0
                and not any(self.tests.get(k) for k in ("failed", "skipped", "error")))


def copy_suite(dest: Path) -> None:
    """The example suite as a user's checkout holds it, without this repository's tests."""
    shutil.copytree(REPO / "perf_tests", dest / "perf_tests",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy2(REPO / name, dest / name)


def set_heavy(root: Path, heavy: bool) -> None:
    """Make (or undo) the README's one edit in the copy."""
    path = root / TEST_FILE
    text = path.read_text(encoding="utf-8")
    old, new = (SHAPE_BEFORE, SHAPE_AFTER) if heavy else (SHAPE_AFTER, SHAPE_BEFORE)
    if heavy and SHAPE_BEFORE not in text and SHAPE_AFTER not in text:
        raise SystemExit(f"example_gate: {TEST_FILE} no longer holds the CPU shape {SHAPE_BEFORE}; "
                         "update SHAPE_BEFORE/SHAPE_AFTER and the README's edit together")
    path.write_text(text.replace(old, new), encoding="utf-8")


def pytest_run(root: Path, tag: str, extra: list[str], test_file: Path = TEST_FILE,
               env_extra: dict[str, str] | None = None) -> tuple[int, Path, Path, float]:
    """One ``pytest <test_file>`` (the example suite's) in ``root``: (exit status, results dir,
    junit file, seconds). Output goes to ``root/logs/<tag>.log``."""
    results = root / "runs" / tag
    junit = root / "junit" / f"{tag}.xml"
    log = root / "logs" / f"{tag}.log"
    for p in (results.parent, junit.parent, log.parent):
        p.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "pytest", str(test_file), "-p", "no:randomly", "-p", "no:cacheprovider",
           "-q", "-rA", f"--gemmperf-results-dir={results}", f"--junit-xml={junit}",
           f"--gemmperf-report-dir={root / 'reports' / tag}", *extra]
    t0 = time.monotonic()
    with log.open("w", encoding="utf-8") as fh:
        rc = subprocess.run(cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    return rc, results, junit, time.monotonic() - t0


def verdict_counts(results: Path) -> Counter:
    """The ``verdict`` column of every ``verdicts.csv`` the run wrote."""
    out: Counter = Counter()
    for f in sorted(results.rglob("verdicts.csv")):
        with f.open(newline="", encoding="utf-8") as fh:
            out.update(row["verdict"] for row in csv.DictReader(fh) if row.get("verdict"))
    return out


def point_outcomes(results: Path) -> Counter:
    """The gate's outcome (passed / failed / undecided / error) of every point the run wrote."""
    out: Counter = Counter()
    for f in sorted(results.rglob("point.json")):
        doc = json.loads(f.read_text(encoding="utf-8"))
        out[(doc.get("outcome") or {}).get("outcome", "error")] += 1
    return out


#: what compare must reproduce on every row the gate wrote
SAME_COLUMNS = ("verdict", "ratio", "ci_low", "ci_high", "q_value", "note")


def compare_differs(root: Path, store: Path, results: Path) -> int | None:
    """``gemmperf compare STORE RESULTS`` on a gated run: the number of rows whose verdict,
    change, CI, q or reason differ from what pytest wrote (rows only one side has count too);
    None when compare could not run (its output is in ``root/logs``)."""
    out = root / "compare" / results.name
    log = root / "logs" / f"compare-{results.name}.log"
    cmd = [sys.executable, "-m", "pytest_gemmperf.cli", "compare", str(store), str(results),
           "--out", str(out), "--no-report"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    with log.open("w", encoding="utf-8") as fh:
        rc = subprocess.run(cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    if rc not in (0, 1, 4) or not (out / "verdicts.csv").is_file():
        return None

    def rows(paths) -> dict[tuple, tuple]:
        got: dict[tuple, tuple] = {}
        for f in paths:
            with f.open(newline="", encoding="utf-8") as fh:
                for row in csv.DictReader(fh):
                    got[(row.get("test", ""), row["point"], row["kernel"], row["metric"])] = \
                        tuple(row.get(c, "") for c in SAME_COLUMNS)
        return got

    gated = rows(sorted(results.rglob("verdicts.csv")))
    compared = rows([out / "verdicts.csv"])
    if not gated:  # nothing to reproduce is not agreement
        return None
    return sum(gated.get(k) != compared.get(k) for k in set(gated) | set(compared))


def junit_counts(junit: Path) -> Counter:
    """Per test case: passed / failed / skipped / error, from pytest's JUnit XML."""
    out: Counter = Counter()
    if not junit.is_file():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        out["failed" if "failure" in kinds else "error" if "error" in kinds
            else "skipped" if "skipped" in kinds else "passed"] += 1
    return out


def gated_run(root: Path, case: str, i: int, extra: list[str], store: Path | None = None,
              **run_kw) -> RunResult:
    """One gated run; with ``store``, ``gemmperf compare`` judges it again (:func:`compare_differs`)."""
    rc, results, junit, secs = pytest_run(root, f"{case}-{i:02d}", extra, **run_kw)
    r = RunResult(case, rc, secs, verdict_counts(results), junit_counts(junit), point_outcomes(results))
    if store is not None:
        r.compare_diff = compare_differs(root, store, results)
    rows = ", ".join(f"{k} {n}" for k, n in sorted(r.verdicts.items())) or "no rows"
    points = ", ".join(f"{k} {n}" for k, n in sorted(r.points.items())) or "none"
    tests = ", ".join(f"{k} {n}" for k, n in sorted(r.tests.items())) or "no tests"
    same = "" if store is None else f"  compare: {'failed' if r.compare_diff is None else r.compare_diff} rows differ"
    print(f"  {case} run {i + 1}: {r.outcome:9s} exit {rc}  points: {points}  rows: {rows}  tests: {tests}{same}  "
          f"({secs:.0f} s, load {load():.1f})", flush=True)
    return r


def load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def baseline_contention(store: Path) -> str:
    """What the store's records say their recording runs were disturbed by (every comparison
    against a disturbed baseline allows for it), or ``none``."""
    seen = []
    for meta in sorted(store.glob("*/*/meta.json")):
        points = (json.loads(meta.read_text()).get("metadata") or {}).get("points") or {}
        for point, doc in sorted(points.items()):
            d = (doc or {}).get("disturbance") or {}
            if d.get("disturbed"):
                seen.append(f"{point} x{float(d.get('factor', 1)):.2f} ({'; '.join(d.get('reasons') or [])})")
    return ", ".join(seen) or "none"


def start_burners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]


def stop_burners(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def work_dir(keep: str | None, prefix: str) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """(the folder to work in, the temporary directory to clean up, or None for ``--keep DIR``,
    which must not exist yet)."""
    if keep:
        root = Path(keep).resolve()
        root.mkdir(parents=True, exist_ok=False)
        return root, None
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    return Path(tmp.name), tmp


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


LEGEND = ("failed / undecided / passed: the run's worst point outcome as the gate wrote it (point.json); "
          "plain pass = pytest exit 0 with every test passed, none skipped")


def summary(results: list[RunResult]) -> list[str]:
    """A markdown table: per case, the gate's outcomes and pytest's plain passes."""
    lines = ["| case | runs | failed | undecided | passed | error | pytest plain pass | compare: rows differing "
             "| median s |", "|---|---|---|---|---|---|---|---|---|"]
    for case in dict.fromkeys(r.case for r in results):
        rs = [r for r in results if r.case == case]
        c = Counter(r.outcome for r in rs)
        secs = sorted(r.seconds for r in rs)[len(rs) // 2]
        diffs = [r.compare_diff for r in rs]
        same = ("-" if all(d is None for d in diffs) else
                f"{sum(d for d in diffs if d is not None)}" + (f" ({diffs.count(None)} failed)" if None in diffs else ""))
        lines.append(f"| {case} | {len(rs)} | {c['failed']} | {c['undecided']} | {c['passed']} | {c['error']} | "
                     f"{sum(r.plain_pass for r in rs)} | {same} | {secs:.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="gated runs per case (default 10)")
    ap.add_argument("--cases", default=",".join(CASES),
                    help=f"comma-separated, of {', '.join(CASES + BUSY_CASES)} (default aa,heavy)")
    ap.add_argument("--busy", action="store_true", help="also the busy-aa and busy-heavy cases")
    ap.add_argument("--burners-per-core", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary directory)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    args = ap.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c] + (list(BUSY_CASES) if args.busy else [])
    unknown = [c for c in cases if c not in CASES + BUSY_CASES]
    if unknown or args.runs < 1:
        ap.error(f"unknown case(s) {unknown}" if unknown else "--runs must be >= 1")

    root, tmp = work_dir(args.keep, "gemmperf-example-gate-")
    try:
        copy_suite(root)
        print(f"example suite copied to {root}; {cores()} cores; load {load():.1f} "
              f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", flush=True)
        rc, _, _, secs = pytest_run(root, "baseline", args.pytest_args)
        print(f"baseline recorded: exit {rc} ({secs:.0f} s, load {load():.1f}; "
              f"contention kept with it: {baseline_contention(root / STORE)})", flush=True)
        if rc != 0:
            print(f"example_gate: the baseline run failed; see {root / 'logs' / 'baseline.log'}", file=sys.stderr)
            return 2
        results: list[RunResult] = []
        for case in cases:
            set_heavy(root, case.endswith("heavy"))
            burners = start_burners(args.burners_per_core * cores()) if case.startswith("busy") else []
            try:
                if burners:
                    print(f"{case}: {len(burners)} CPU burners running", flush=True)
                results += [gated_run(root, case, i, args.pytest_args, store=root / STORE)
                            for i in range(args.runs)]
            finally:
                stop_burners(burners)
        set_heavy(root, False)
        print()
        print("\n".join(summary(results)))
        print(f"\nload after: {load():.1f}; {LEGEND}")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
