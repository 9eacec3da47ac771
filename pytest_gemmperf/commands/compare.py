"""``gemmperf compare BASE CAND [CAND...]``: the gate outside pytest.

BASE and each CAND may be anything ``gemmperf analyze`` reads (trace files, rocprofv3 output
dirs, aorta sweep dirs, results dirs), a baselines store / hardware dir / record dir, or a
samples table file (``.parquet`` / ``.csv`` with ``point, kernel, metric, unit, value``).
Writes ``DIR/verdicts.csv`` (the contract columns first, in order, extras after) and exits 1
when any verdict is ``regression``, 2 on bad input, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd

from pytest_gemmperf.commands.argtypes import non_negative
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.compare import GateConfig, compare, parse_threshold
from pytest_gemmperf.gate.samples import SAMPLE_COLUMNS, gate_samples
from pytest_gemmperf.gate.verdict import REGRESSION, format_verdict_table

#: verdicts.csv column order required by the CLI contract (ARCHITECTURE extras follow).
CSV_COLUMNS = ("point", "kernel", "metric", "n_base", "n_cand", "base_median_ns", "cand_median_ns",
               "ratio", "ci_low", "ci_high", "p_value", "q_value", "verdict")
DEFAULT_OUT = "gemmperf-compare"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare", help="compare candidate(s) against a baseline; exit 1 on regression",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("base", metavar="BASE", help="baseline: traces, results/sweep dir, baselines dir, samples file")
    p.add_argument("cands", nargs="+", metavar="CAND", help="candidate(s), same kinds as BASE")
    p.add_argument("--labels", nargs="+", metavar="L", help="one label per CAND (default: the path names)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output directory (default ./{DEFAULT_OUT})")
    p.add_argument("--threshold", type=_threshold, default=0.05, metavar="T",
                   help="practical threshold, e.g. 5%% or 0.05 (default 5%%); 0 = statistics alone")
    p.add_argument("--kernel-threshold", nargs=2, action="append", default=[], metavar=("REGEX", "T"),
                   help="per-kernel threshold override (repeatable, first match wins)")
    p.add_argument("--fdr", type=_fraction, default=GateConfig().fdr, metavar="Q",
                   help=f"Benjamini-Hochberg FDR across all comparisons of a test (default {GateConfig().fdr:g})")
    p.add_argument("--warmup", type=non_negative, default=None, metavar="N",
                   help="drop the first N dispatches of each (process, kernel) (default: 0 for traces; "
                        "for results directories the warm-up the plugin gated each point with)")
    p.add_argument("--abs-floor-ns", type=float, default=0.0, metavar="NS",
                   help="a regression must also grow the median by more than NS (default 0)")
    p.add_argument("--benchmark-json", metavar="FILE",
                   help="also write pytest-benchmark JSON: FILE for the candidate, FILE-base.json for BASE")
    p.add_argument("--hw", metavar="KEY",
                   help="with a baselines directory as BASE: use its records of this hardware key "
                        "(default: the candidate results' hardware key when the store holds several)")
    p.add_argument("--max-rows", type=int, default=20, help="rows of the printed table (default 20)")
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="write verdicts.csv only (no report.html / report.xlsx / summary.md)")
    p.set_defaults(func=run)
    return p


def _threshold(text: str) -> float:
    try:
        return parse_threshold(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return v


# ---------------------------------------------------------------------------------------------
# inputs


def _read_samples_file(p: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    except Exception as exc:  # pyarrow / csv parser errors vary; one line for the user
        raise GemmperfInputError(p, f"cannot read samples table: {exc}") from None
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise GemmperfInputError(p, f"not a samples table (lacks {', '.join(missing)})")
    return df[list(SAMPLE_COLUMNS)]


def _baseline_records(p: Path, hw: str | None = None, recs: list | None = None) -> list | None:
    """Records when ``p`` is a baselines root, hardware dir or record dir; else None.

    ``hw`` keeps the records of that hardware key. Without it, a test recorded for several
    hardware keys is an error: pooling an MI300X and an MI350X baseline is no baseline.
    ``recs``: the records of ``p`` when already loaded."""
    recs = _all_baseline_records(p) if recs is None else recs
    if recs is None:
        return None
    if hw is not None:
        keep = [r for r in recs if r.hw_key == hw]
        if recs and not keep:
            found = ", ".join(sorted({r.hw_key for r in recs}))
            raise GemmperfInputError(p, f"no baseline for hardware key {hw!r} (found: {found}); choose with --hw")
        return keep
    for test, ks in sorted(_hw_keys_by_test(recs).items()):
        if len(ks) > 1:
            raise GemmperfInputError(p, f"holds {test!r} for {len(ks)} hardware keys ({', '.join(sorted(ks))}): "
                                        "choose one with --hw")
    return recs


def _all_baseline_records(p: Path) -> list | None:
    if not p.is_dir():
        return None
    if (p / "meta.json").is_file():
        level = "record"
    elif any(p.glob("*/meta.json")):
        level = "hw"
    elif any(p.glob("*/*/meta.json")):
        level = "root"
    else:
        return None
    from pytest_gemmperf.gate.baseline import BaselineStore

    if level == "root":
        return BaselineStore(p).load_all()
    if level == "hw":
        return BaselineStore(p.parent).load_all(p.name)
    store = BaselineStore(p.parent.parent)
    return [r for r in store.load_all(p.parent.name)
            if store.path_for(r.test_id, r.hw_key).resolve() == p.resolve()]


def load_history(path: str, hw: str | None = None, records: list | None = None) -> dict[str, pd.DataFrame]:
    """``{test_id: variance history}`` when ``path`` is a baselines directory (the history the
    gate pools with each kernel's variance), else empty."""
    p = Path(path)
    recs = _baseline_records(p, hw, records) if p.is_dir() else None
    out: dict[str, list[pd.DataFrame]] = {}
    for r in recs or []:
        h = r.history_for()
        if h is not None:
            out.setdefault(str(r.test_id), []).append(h)
    return {k: pd.concat(v, ignore_index=True) for k, v in out.items()}


def results_hw_key(paths: list[str]) -> str | None:
    """The hardware key the candidate results directories recorded (run.json), when they agree."""
    keys = set()
    for path in paths:
        p = Path(path)
        if not _is_results_dir(p):
            return None
        try:
            from pytest_gemmperf.gate.baseline import resolve_results_dir

            doc = json.loads((resolve_results_dir(p) / "run.json").read_text())
        except (OSError, ValueError, GemmperfInputError):
            return None
        key = doc.get("hardware_key") if isinstance(doc, dict) else None
        if not key:
            return None
        keys.add(str(key))
    return keys.pop() if len(keys) == 1 else None


def load_side(path: str, warmup: int | None = 0, traces: dict | None = None,
              hw: str | None = None, records: list | None = None) -> dict[str, pd.DataFrame]:
    """``{test_id: samples}`` of one input ('' when the input carries no test id).

    Samples come from :func:`~pytest_gemmperf.gate.samples.gate_samples`, as in pytest and
    ``baseline refresh``: a results directory per test with each point's kernel regexes and
    warm-up (``warmup`` None: the recorded one), other traces with every kernel gated.
    ``traces``, when given, receives ``{path: Trace}`` for trace inputs (the reports need the
    dispatches, not only the samples)."""
    p = Path(path)
    if not p.exists():
        raise GemmperfInputError(p, "no such file or directory")
    if p.is_file() and (p.suffix == ".parquet" or (p.suffix == ".csv" and _is_samples_csv(p))):
        return {"": _read_samples_file(p)}
    recs = _baseline_records(p, hw, records)
    if recs is not None:
        if not recs:
            raise GemmperfInputError(p, "baselines directory holds no readable record")
        out: dict[str, list[pd.DataFrame]] = {}
        for r in recs:
            out.setdefault(str(r.test_id), []).append(r.samples)
        return {k: pd.concat(v, ignore_index=True) for k, v in out.items()}
    from pytest_gemmperf.traces.discover import load

    if _is_results_dir(p):
        from pytest_gemmperf.gate.baseline import results_samples

        out = results_samples(p, warmup=warmup)
        if traces is not None:
            traces[path] = load([p])
        return out
    trace = load([p])
    if traces is not None:
        traces[path] = trace
    samples = gate_samples(trace.dispatches, warmup=warmup or 0, compact=False, path=p)
    for note in samples.attrs.get("notes", []):
        print(f"note: {p}: {note}", file=sys.stderr)
    return {"": samples}


def _hw_keys_by_test(recs: list) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for r in recs:
        keys.setdefault(str(r.test_id), set()).add(r.hw_key)
    return keys


def _is_results_dir(p: Path) -> bool:
    """A gemmperf results directory (run.json or <test>/<point>/point.json)."""
    return p.is_dir() and ((p / "run.json").is_file() or any(p.glob("*/*/point.json")))


def _is_samples_csv(p: Path) -> bool:
    try:
        with p.open("r", encoding="utf-8", errors="replace") as fh:
            head = fh.readline()
    except OSError:
        return False
    cols = [c.strip().strip('"') for c in head.split(",")]
    return all(c in cols for c in SAMPLE_COLUMNS)


def _pair(base: dict[str, pd.DataFrame], cand: dict[str, pd.DataFrame], base_path: str, cand_path: str
          ) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """Match tests of the two sides: by test id when both carry ids, else one to one."""
    if set(base) == {""} or set(cand) == {""}:
        if len(base) > 1 or len(cand) > 1:
            many, path = (base, base_path) if len(base) > 1 else (cand, cand_path)
            raise GemmperfInputError(path, f"holds {len(many)} tests and the other side is plain traces: "
                                           f"name one baseline record directory (<root>/<hw_key>/<test>), "
                                           f"or give results directories / baselines on both sides")
        (tb, b), = base.items()
        (tc, c), = cand.items()
        return [(tb or tc, b, c)]
    tests = sorted(set(base) | set(cand))
    empty = pd.DataFrame({c: pd.Series(dtype=object if c != "value" else float) for c in SAMPLE_COLUMNS})
    return [(t, base.get(t, empty), cand.get(t, empty)) for t in tests]


# ---------------------------------------------------------------------------------------------


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
    base_recs = _all_baseline_records(base_path) if base_path.is_dir() else None
    hw = getattr(args, "hw", None)
    if hw is None and base_recs and any(len(k) > 1 for k in _hw_keys_by_test(base_recs).values()):
        hw = results_hw_key(args.cands)
    base = load_side(args.base, args.warmup, keep, hw=hw, records=base_recs)
    history = load_history(args.base, hw, records=base_recs)
    frames = []
    cand_samples = []
    for label, cpath in zip(labels, args.cands):
        cand = load_side(cpath, args.warmup, keep)
        cand_samples.append((label, cand))
        for test, b, c in _pair(base, cand, args.base, cpath):
            v = compare(b, c, cfg, test=test, history=history.get(test))
            if len(args.cands) > 1:
                v.insert(0, "label", label)
            frames.append(v)
    verdicts = pd.concat(frames, ignore_index=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cols = list(CSV_COLUMNS) + [c for c in verdicts.columns if c not in CSV_COLUMNS]
    tmp = out / "verdicts.csv.tmp"
    verdicts[cols].to_csv(tmp, index=False)
    os.replace(tmp, out / "verdicts.csv")
    if args.benchmark_json:
        _export(args.benchmark_json, base, cand_samples)
    if getattr(args, "report", True):
        _write_reports(args, labels, verdicts, traces, out)

    counts = verdicts["verdict"].value_counts()
    print(format_verdict_table(verdicts, args.max_rows))
    print("verdicts: " + ", ".join(f"{k} {int(n)}" for k, n in counts.items()) + f" -> {out / 'verdicts.csv'}")
    n_reg = int(counts.get(REGRESSION, 0))
    if n_reg:
        print(f"gemmperf: {n_reg} regression(s)", file=sys.stderr)
        return 1
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
                   traces: dict, out: Path) -> None:
    """One report with every sweep side by side (baseline first) where the inputs are traces;
    verdicts.csv stays this command's. A report failure never changes the gate's exit status."""
    from pytest_gemmperf.report import write_reports

    sides = [(args.base, "base" if "base" not in labels else "baseline")] + list(zip(args.cands, labels))
    sides = [(path, label) for path, label in sides if path in traces]
    if not sides:
        print("note: no report: the inputs are samples or baselines, not traces", file=sys.stderr)
        return
    try:
        files = write_reports(
            out, dispatches=[traces[p].dispatches for p, _ in sides], labels=[lab for _, lab in sides],
            counters=[traces[p].counters for p, _ in sides], agents=[traces[p].agents for p, _ in sides],
            verdicts=verdicts, warmup=args.warmup or 0, skip={"verdicts.csv"},
            meta={"baseline": args.base, "inputs": [args.base, *args.cands]})
    except Exception as exc:  # noqa: BLE001 - the verdicts are written; say why the report is not
        print(f"gemmperf: report not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    if "report.html" in files:
        print(f"report: {files['report.html']}")
