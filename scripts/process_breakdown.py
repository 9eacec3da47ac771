"""Where each profiled process of a results folder spent its time.

The example workload (``perf_tests/workloads/gemm_comm.py``) ends every process with one line in
its log::

    gemmperf-timing: rank=0 start_to_first_kernel_s=4.02 profiled_s=0.26 export_s=0.03 exit_s=0.01

This script reads every ``point.json`` below RESULTS_DIR, finds those lines in each run's logs,
and prints one row per process: the four phases (start to first kernel: interpreter, ``import
torch``, device and process-group set-up, profiler start; the profiled steps, warm-up included;
the profiler's stop and the trace export; tear-down until exit), ``process_s`` (their sum, the
process's lifetime) and ``run_s`` (the launch's wall time as the runner measured it, so
``run_s - process_s`` is what the launcher added, e.g. torchrun's agent). Then the median of
each column per point. A run whose log has no such line (another workload) gets one row with
its ``run_s`` only.

Usage: ``python scripts/process_breakdown.py RESULTS_DIR``. Exit status 0; 2 with one line
naming the file when the folder holds no ``point.json`` or one cannot be read.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a plain checkout

from pytest_gemmperf.errors import GemmperfInputError  # noqa: E402
from pytest_gemmperf.traces.fileio import read_json_object  # noqa: E402

PHASES = ("start_to_first_kernel_s", "profiled_s", "export_s", "exit_s")
COLUMNS = (*PHASES, "process_s", "run_s")
_LINE = re.compile(r"gemmperf-timing:\s+(.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")


@dataclass(frozen=True)
class Row:
    """One process of one run of one point (``rank`` None: the run printed no timing line)."""

    test: str
    point: str
    run: int
    rank: int | None
    values: dict[str, float | None]


def parse_timing_lines(text: str) -> list[tuple[int | None, dict[str, float]]]:
    """``(rank, {phase: seconds})`` of every complete ``gemmperf-timing:`` line in ``text``."""
    out = []
    for line in text.splitlines():
        m = _LINE.search(line)
        if not m:
            continue
        fields = dict(_FIELD.findall(m.group(1)))
        try:
            phases = {k: float(fields[k]) for k in PHASES}
            rank = int(fields["rank"]) if "rank" in fields else None
        except (KeyError, ValueError):
            continue  # a line cut off by a killed process: not a measurement
        out.append((rank, phases))
    return out


def point_rows(point_json: Path) -> list[Row]:
    """The rows of one point: each run's processes from its logs (node logs included)."""
    rec = read_json_object(point_json)
    test, point = str(rec.get("test_id", "?")), str(rec.get("point", point_json.parent.name))
    rows = []
    runs = rec.get("runs")
    for run in runs if isinstance(runs, list) else []:
        if not isinstance(run, dict):
            continue
        logs = [run.get("log")] + [n.get("log") for n in run.get("nodes") or [] if isinstance(n, dict)]
        found = []
        for log in dict.fromkeys(x for x in logs if isinstance(x, str)):
            try:
                text = (point_json.parent / log).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue  # a run killed before its log was written: run_s alone says enough
            found += parse_timing_lines(text)
        run_s = run.get("duration_s")
        run_s = float(run_s) if isinstance(run_s, (int, float)) else None
        k = run.get("run") if isinstance(run.get("run"), int) else len(rows)
        if not found:
            rows.append(Row(test, point, k, None, {**dict.fromkeys(COLUMNS[:-1]), "run_s": run_s}))
        for rank, phases in sorted(found, key=lambda f: (f[0] is None, f[0] or 0)):
            rows.append(Row(test, point, k, rank, {**phases, "process_s": sum(phases.values()), "run_s": run_s}))
    return rows


def collect(results: Path) -> list[Row]:
    files = sorted(results.rglob("point.json"))
    if not files:
        raise GemmperfInputError(results, "no point.json below it: not a gemmperf results folder")
    return [row for f in files for row in point_rows(f)]


def _cell(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def table(rows: list[Row]) -> str:
    """Rows per process, then the median of each column per (test, point)."""
    head = ["test", "point", "run", "rank", *COLUMNS]
    body = [[r.test, r.point, str(r.run), "-" if r.rank is None else str(r.rank),
             *(_cell(r.values.get(c)) for c in COLUMNS)] for r in rows]
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.test, r.point), []).append(r)
    medians = []
    for (test, point), rs in groups.items():
        cells = []
        for c in COLUMNS:
            vals = [r.values[c] for r in rs if r.values.get(c) is not None]
            cells.append(_cell(statistics.median(vals)) if vals else "-")
        medians.append([test, point, "median", f"n={sum(r.rank is not None for r in rs)}", *cells])
    widths = [max(len(x) for x in col) for col in zip(head, *body, *medians)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [fmt(head), *map(fmt, body)]
    if medians:
        lines += ["", *map(fmt, medians)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="a results folder (or a folder of them)")
    args = p.parse_args(argv)
    try:
        if not args.results.is_dir():
            raise GemmperfInputError(args.results, "not a directory")
        rows = collect(args.results)
    except GemmperfInputError as exc:
        print(f"process_breakdown: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
