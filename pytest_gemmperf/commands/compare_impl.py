"""The work of ``gemmperf compare``: load both sides, gate each candidate, write the verdicts
and the reports. Its parser is :mod:`pytest_gemmperf.commands.compare`, which imports this
module only when the command runs, so ``gemmperf --help`` loads neither pandas nor scipy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from pytest_gemmperf.commands.compare import DEFAULT_OUT
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.compare import GateConfig, compare, parse_threshold
from pytest_gemmperf.gate.load import (  # noqa: F401 - load_side/load_history/results_hw_key: public here too
    all_baseline_records, load_history, load_side, pair_tests, resolve_hardware_key, results_hw_key,
    trace_hw_key)
from pytest_gemmperf.gate.verdict import (REGRESSION, VERDICTS_CSV_COLUMNS, format_verdict_table,
                                          verdicts_csv_order)
from pytest_gemmperf.textsafe import printable, printable_frame
from pytest_gemmperf.workdir import default_output_dir

#: verdicts.csv column order: the one the pytest session writes too (test first, contract
#: columns in ARCHITECTURE order, label, diagnostics, other extras by name)
CSV_COLUMNS = VERDICTS_CSV_COLUMNS


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (OSError, UnicodeError) as exc:
        raise GemmperfInputError(getattr(exc, "filename", None), str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    labels = args.labels or [Path(c).name or str(c) for c in args.cands]
    if len(labels) != len(args.cands):
        raise GemmperfInputError(None, f"--labels needs {len(args.cands)} label(s), got {len(labels)}")
    cfg = GateConfig(threshold=args.threshold, fdr=args.fdr, warmup=args.warmup or 0, abs_floor_ns=args.abs_floor_ns,
                     per_kernel=[(rx, parse_threshold(t)) for rx, t in args.kernel_threshold])
    traces: dict = {}
    keep = traces if getattr(args, "report", True) else None  # tables only for the reports
    # a store with several hardware keys: the one asked for, else the candidates' own
    base_path = Path(args.base)
    damaged: list = []  # damaged baseline records: named and skipped, the others still compare
    base_recs = all_baseline_records(base_path, damaged) if base_path.is_dir() else None
    for err in damaged:
        print(printable(f"error: {err} (record skipped)"), file=sys.stderr)
    hw = resolve_hardware_key(base_path, args.cands, getattr(args, "hw", None), base_recs)
    jobs = getattr(args, "jobs", 0)
    partial = getattr(args, "allow_partial", False)
    base = load_side(args.base, args.warmup, keep, hw=hw, records=base_recs, jobs=jobs, allow_partial=partial)
    history = load_history(args.base, hw, records=base_recs)
    frames = []
    cand_samples = []
    compared: list = []  # what each compare() call received: the report draws it per process
    for label, cpath in zip(labels, args.cands):
        agents: dict = {}  # a trace candidate's agents: its hardware key in --history
        cand = load_side(cpath, args.warmup, keep, jobs=jobs, agents=agents, allow_partial=partial)
        cand_samples.append((label, cand))
        if getattr(args, "history", None):
            from pytest_gemmperf.commands.history_impl import record_compare_candidate

            record_compare_candidate(args.history, args.run_id, cpath, label, cand, len(args.cands), keep,
                                     hw=trace_hw_key(cpath, agents))
        for test, b, c in pair_tests(base, cand, args.base, cpath):
            v = compare(b, c, cfg, test=test, history=history.get(test))
            if keep is not None:
                compared.append((test, b, c, label))
            if len(args.cands) > 1:
                v.insert(0, "label", label)
            frames.append(v)
    verdicts = pd.concat(frames, ignore_index=True)
    out = Path(args.out) if args.out else default_output_dir(DEFAULT_OUT)
    out.mkdir(parents=True, exist_ok=True)
    from pytest_gemmperf.safe_io import write_csv

    write_csv(verdicts_csv_order(verdicts), out / "verdicts.csv")  # formulas neutralised, no link followed
    if args.benchmark_json:
        _export(args.benchmark_json, base, cand_samples)
    if getattr(args, "report", True):
        _write_reports(args, labels, verdicts, traces, out, compared)

    counts = verdicts["verdict"].value_counts()
    print(format_verdict_table(printable_frame(verdicts), args.max_rows, warmup=args.warmup))
    print(printable("verdicts: " + ", ".join(f"{k} {int(n)}" for k, n in counts.items()) + f" -> {out / 'verdicts.csv'}"))
    n_reg = int(counts.get(REGRESSION, 0))
    if n_reg:
        print(printable(f"gemmperf: {n_reg} regression(s)"), file=sys.stderr)
        return 1
    if damaged:
        print(printable(f"gemmperf: {len(damaged)} damaged baseline record(s) not compared"), file=sys.stderr)
        return 2
    return 0


def _export(target: str, base: dict[str, pd.DataFrame], cands: list[tuple[str, dict]]) -> None:
    from pytest_gemmperf.gate.benchmark_export import write_pytest_benchmark_json

    t = Path(target)
    stem = t.name[:-5] if t.name.endswith(".json") else t.name
    write_pytest_benchmark_json(t.with_name(f"{stem}-base.json"), pd.concat(list(base.values()), ignore_index=True))
    for label, cand in cands:
        name = t.name if len(cands) == 1 else f"{stem}-{label}.json"
        write_pytest_benchmark_json(t.with_name(name), pd.concat(list(cand.values()), ignore_index=True))


def _write_reports(args: argparse.Namespace, labels: list[str], verdicts: pd.DataFrame,
                   traces: dict, out: Path, compared: list | None = None) -> None:
    """One report with every sweep side by side (baseline first) where the inputs are traces;
    verdicts.csv stays this command's. A report failure never changes the gate's exit status.
    ``compared``: (test, baseline samples, candidate samples, label) of each compare() call."""
    from pytest_gemmperf.report import ComparedSamples, write_reports

    sides = [(args.base, "base" if "base" not in labels else "baseline")] + list(zip(args.cands, labels))
    sides = [(path, label) for path, label in sides if path in traces]
    if not sides:
        print(printable("note: no report: the inputs are samples or baselines, not traces"), file=sys.stderr)
        return
    try:
        files = write_reports(
            out, dispatches=[traces[p].dispatches for p, _ in sides], labels=[lab for _, lab in sides],
            counters=[traces[p].counters for p, _ in sides], agents=[traces[p].agents for p, _ in sides],
            verdicts=verdicts, warmup=args.warmup or 0, skip={"verdicts.csv"},
            meta={"baseline": args.base, "inputs": [args.base, *args.cands]},
            compared=[ComparedSamples(test, b, c, label if len(labels) > 1 else "")
                      for test, b, c, label in compared or ()])
    except Exception as exc:  # noqa: BLE001 - the verdicts are written; say why the report is not
        print(printable(f"gemmperf: report not written: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return
    if "report.html" in files:
        print(printable(f"report: {files['report.html']}"))
