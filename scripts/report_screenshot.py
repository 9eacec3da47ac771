"""Regenerate docs/report.png (the README's picture of report.html) from a real run.

Runs the example suite (``perf_tests/test_gemm_overlap.py``: on a machine without a GPU a real
CPU sweep under the PyTorch profiler) twice with private results, baselines and report
directories: the first session records the baselines, the second is gated against them and
writes the report. Then headless Chromium takes a screenshot of the report at the given window
size (default 1366x768, the smallest common laptop screen). Nothing under the checkout changes
except the picture.

    python scripts/report_screenshot.py [--out docs/report.png] [--width 1366] [--height 768]
                                        [--workdir DIR] [--history-out FILE]

``--history-out FILE`` also writes a screenshot of the history page of the two runs
(``gemmperf history check``). Needs Chromium (``chromium``, ``chromium-browser`` or
``google-chrome`` on PATH). Prints each step and its duration.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITE = "perf_tests/test_gemm_overlap.py"


def _step(what: str, argv: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> None:
    start = time.monotonic()
    print(f"{what}: {' '.join(argv)}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    print(f"  exit {proc.returncode} in {time.monotonic() - start:.1f} s", flush=True)
    if proc.returncode not in ok:
        sys.stdout.write(proc.stdout[-4000:])
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"{what} failed (exit {proc.returncode})")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("no Chromium on PATH (chromium, chromium-browser, google-chrome)")


def screenshot(page: Path, out: Path, width: int, height: int) -> None:
    """The first screenful of ``page`` at ``width`` x ``height`` into ``out`` (PNG)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        _step("screenshot", [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                             f"--user-data-dir={profile}", f"--window-size={width},{height}",
                             f"--screenshot={out.resolve()}", page.resolve().as_uri()], REPO)
    print(f"wrote {out}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "docs" / "report.png")
    p.add_argument("--width", type=int, default=1366)
    p.add_argument("--height", type=int, default=768)
    p.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary directory)")
    p.add_argument("--history-out", type=Path, help="also a screenshot of the history page of the two runs")
    args = p.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="gemmperf-screenshot-"))
    work.mkdir(parents=True, exist_ok=True)
    pytest_args = [sys.executable, "-m", "pytest", SUITE, "-p", "no:cacheprovider", "-q",
                   f"--gemmperf-baseline-dir={work / 'baselines'}", f"--gemmperf-history={work / 'history'}"]
    _step("1st session (records the baselines)", pytest_args + [f"--gemmperf-results-dir={work / 'run1'}",
                                                                f"--gemmperf-report-dir={work / 'report1'}"], REPO)
    # exit 1: the gate found a regression on this machine; the report shows it as it is
    _step("2nd session (gated against them)", pytest_args + [f"--gemmperf-results-dir={work / 'run2'}",
                                                             f"--gemmperf-report-dir={work / 'report2'}"], REPO,
          ok=(0, 1))
    screenshot(work / "report2" / "report.html", args.out, args.width, args.height)
    if args.history_out:
        _step("history check", [sys.executable, "-m", "pytest_gemmperf.cli", "history", "check",
                                "--history", str(work / "history"), "--out", str(work / "history-check")], REPO,
              ok=(0, 1))
        screenshot(work / "history-check" / "history.html", args.history_out, args.width, args.height)
    print(f"runs kept in {work}" if args.workdir else f"runs in {work} (temporary; remove when done)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
