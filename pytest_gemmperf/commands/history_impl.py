"""The work of ``gemmperf history``. Its parser is :mod:`pytest_gemmperf.commands.history`, which
imports this module only when the command runs, so ``gemmperf --help`` loads neither pandas
nor scipy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from pytest_gemmperf.commands.argtypes import add_allow_partial, non_negative, positive
from pytest_gemmperf.config import SettingError, add_cli_option
from pytest_gemmperf.errors import GemmperfInputError, OutputError, failure_line
from pytest_gemmperf.commands.termtable import fit_table, values_text
from pytest_gemmperf.textsafe import printable, printable_frame
from pytest_gemmperf.workdir import default_output_dir
from pytest_gemmperf.commands.defaults import HISTORY_CHECK_OUT as CHECK_OUT
from pytest_gemmperf.commands.defaults import HISTORY_LAST as DEFAULT_LAST
from pytest_gemmperf.commands.defaults import HISTORY_TEST_ID as DEFAULT_TEST_ID
from pytest_gemmperf.store.compare_inputs import _is_results_dir, newest_run
from pytest_gemmperf.history.store import RunInfo
from pytest_gemmperf.store.hardware import hardware_key
from pytest_gemmperf.history.store import HistoryStore
from pytest_gemmperf.history.values import history_values
import uuid
from pytest_gemmperf.store.compare_inputs import load_side, results_agents
from pytest_gemmperf.history.changepoints import CHANGE_COLUMNS, detect_changes, recent_regressions
from pytest_gemmperf.history.changepoints import format_changes, write_changes_csv
from pytest_gemmperf.report.history_page import write_history_reports
from pytest_gemmperf.history.suspects import SUSPECT_COLUMNS, confirm_text, format_suspects, newest_run_suspects
from pytest_gemmperf.gate.gate_config import GateConfig
from pytest_gemmperf.safe_io import write_csv
from pytest_gemmperf.config import format_threshold

#: exit status of ``history check`` with a suspect newest run and no recent regression change
#: point: neither passed nor a confirmed regression (the gate's "undecided" status)
EXIT_SUSPECT = 4


SERIES = ["hw_key", "test", "point", "kernel", "metric"]


def run_info_for(path: str | Path, *, run_id: str, commit: str | None = None, branch: str | None = None,
                 time: str | None = None, hw: str | None = None, traces: dict | None = None,
                 agents: Callable[[], pd.DataFrame | None] | None = None):
    """The :class:`RunInfo` of an input: the arguments first, then what a results directory's
    ``run.json`` recorded (creation time, git commit, hardware key, versions), then the traces'
    agents for the hardware key (``traces``' tables, else what ``agents()`` gives: called only
    when nothing before named the hardware)."""

    doc: dict[str, Any] = {}
    p = newest_run(Path(path)) or Path(path)  # .gemmperf/results: the run load_side read
    if _is_results_dir(p) and (p / "run.json").is_file():
        try:
            loaded = json.loads((p / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise GemmperfInputError(p / "run.json", f"not readable JSON: {exc}") from None
        doc = loaded if isinstance(loaded, dict) else {}
    if hw is None:
        hw = doc.get("hardware_key")
    if hw is None and traces:

        tables = [t.agents for t in traces.values() if t.agents is not None and len(t.agents)]
        if tables:
            hw = hardware_key(pd.concat(tables, ignore_index=True))
    elif hw is None and agents is not None:
        found = agents()
        if found is not None and len(found):
            hw = hardware_key(found)
    versions = doc.get("versions") if isinstance(doc.get("versions"), dict) else {}
    meta = {"source": str(path), "versions": versions, "host": doc.get("host")}
    return RunInfo(run_id=run_id, time=time or doc.get("created"), commit=commit or doc.get("git_commit"),
                   branch=branch or doc.get("git_branch"), hw_key=hw or "unknown",
                   meta={k: v for k, v in meta.items() if v})


def carries_no_test_id(sides: dict[str, pd.DataFrame]) -> bool:
    """Whether ``load_side``'s ``{test: samples}`` holds samples without a test id (key '')."""
    return any(not test and len(s) for test, s in sides.items())


def note_default_test(path: str, test: str, override: str = "--test ID") -> None:
    """The one line saying which test id an input without one was recorded under, and how
    to name it otherwise."""
    print(printable(f"note: {path} carries no test id: recorded in the history as test {test!r} "
                    f"({override} names it otherwise)"), file=sys.stderr)


def record_samples(history: str, sides: dict[str, pd.DataFrame], run, default_test: str,
                   replace: bool = False) -> list[str]:
    """Append ``{test: samples}`` (``load_side``'s result) as one run, samples without a test
    id under ``default_test``; returns the files. A run id already holding one of these points
    is refused unless ``replace``."""

    frames = [history_values(s, test=test or default_test) for test, s in sides.items() if len(s)]
    values = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if values.empty:
        raise GemmperfInputError(None, f"run {run.run_id!r}: no samples to record")
    return HistoryStore(history).append_files(values, run, replace=replace)


def record_compare_candidate(history: str, run_id: str | None, path: str, label: str,
                             sides: dict[str, pd.DataFrame], n_cands: int, traces: dict | None = None,
                             hw: str | None = None) -> None:
    """``gemmperf compare --history DIR [--run-id ID]``: append a candidate as a run. Run id:
    ``ID`` (``ID-<label>`` with several candidates); without ``--run-id`` the label plus a
    random suffix, so repeated compares of a same-named candidate stay distinct runs. ``hw``:
    the hardware key the caller read from the candidate's traces (``--no-report`` keeps no
    Trace to read it from); else as :func:`run_info_for` finds it."""

    rid = (f"{run_id}-{label}" if n_cands > 1 else run_id) if run_id else f"{label}-{uuid.uuid4().hex[:8]}"
    mine = {path: traces[path]} if traces and path in traces else None
    run = run_info_for(path, run_id=rid, traces=mine, hw=hw)
    files = record_samples(history, sides, run, DEFAULT_TEST_ID)
    if carries_no_test_id(sides):
        note_default_test(path, DEFAULT_TEST_ID, "`gemmperf history record --test ID`")
    print(printable(f"history: run {rid} (hw {run.hw_key}) recorded in {history} ({len(files)} file(s))"))


def _require_store(args: argparse.Namespace) -> str:
    """The history store to use; the project may have turned the history off."""
    if args.history is None:
        origin = getattr(args, "setting_origins", {}).get("history")
        where = origin.text if origin is not None else "gemmperf_history"
        raise SettingError(f"no history store: the history is off ({where}); name one with --history DIR")
    return args.history


def run_record(args: argparse.Namespace) -> int:

    _require_store(args)
    try:
        # the agents alone name the hardware (no report is written: nothing reduced for one)
        agents: dict = {}
        sides = load_side(args.path, args.warmup, agents=agents, allow_partial=getattr(args, "allow_partial", False))
        run = run_info_for(args.path, run_id=args.run_id, commit=args.commit, branch=args.branch,
                           time=args.time, hw=args.hw,
                           agents=lambda: agents[args.path] if args.path in agents else results_agents(args.path))
        files = record_samples(args.history, sides, run, args.test or DEFAULT_TEST_ID,
                               replace=args.replace)
    except OutputError:
        raise  # a write into the history: the line names the history file
    except (OSError, UnicodeError) as exc:
        raise GemmperfInputError(getattr(exc, "filename", None) or args.path, str(exc)) from None
    if not args.test and carries_no_test_id(sides):
        note_default_test(args.path, DEFAULT_TEST_ID)
    print(printable(f"recorded run {run.run_id} ({run.time.isoformat()}, hw {run.hw_key}, "
                    f"{len(sides)} test(s)) into {args.history}: {len(files)} file(s)"))
    return 0


def store_missing(url: str) -> bool:
    """Whether the history store ``url`` does not exist (a mistyped ``--history``), said in
    one line; an existing store without runs is :func:`_read`'s to report."""

    st = HistoryStore(url)
    try:
        missing = not st.fs.isdir(st.root)
    except (OSError, ValueError):  # a remote filesystem that cannot tell: the read will say
        return False
    if missing:
        print(printable(f"gemmperf: error: no history store at {url}"), file=sys.stderr)
    return missing


def _read(args: argparse.Namespace) -> pd.DataFrame:

    h = HistoryStore(_require_store(args)).read(test=args.test, kernel_contains=args.kernel, hw_key=args.hw)
    if h.empty:
        raise GemmperfInputError(args.history, "history holds no runs"
                                 + (" matching the filters" if (args.test or args.kernel or args.hw) else ""))
    return h


def run_medians(history: pd.DataFrame) -> pd.DataFrame:
    """One value per (series, run): the median over the run's units, ordered by time."""
    g = history.groupby([*SERIES, "time", "run_id"], sort=False, observed=True, dropna=False)["value"]
    out = g.median().reset_index()
    return out.sort_values([*SERIES, "time", "run_id"], kind="stable").reset_index(drop=True)


def trend_table(history: pd.DataFrame, last: int = DEFAULT_LAST) -> pd.DataFrame:
    """Per series: ``runs`` (all), the last ``last`` run medians, ``trend_pct`` (first -> last
    of those) and ``slope_pct_per_run`` (least-squares slope of log value on run index, as a
    percentage per run; NaN with fewer than 2 runs or non-positive values). Vectorised: the
    slope comes from per-series sums, no loop over series."""
    m = run_medians(history)
    key = m[SERIES].astype(str).agg("\x1f".join, axis=1)
    m["_s"] = pd.factorize(key)[0]
    m["_all"] = m.groupby("_s")["value"].transform("size")
    rev = m.groupby("_s").cumcount(ascending=False)
    m = m[(rev < last).to_numpy()].copy()
    m["_x"] = m.groupby("_s").cumcount().astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        m["_y"] = np.log(m["value"].where(m["value"] > 0))
    m["_xy"] = m["_x"] * m["_y"]
    m["_xx"] = m["_x"] ** 2
    g = m.groupby("_s", sort=True)
    sums = g[["_x", "_y", "_xy", "_xx"]].sum(min_count=1)
    n = g.size().astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = (n * sums["_xy"] - sums["_x"] * sums["_y"]) / (n * sums["_xx"] - sums["_x"] ** 2)
        first, lastv = g["value"].first(), g["value"].last()
        trend = (lastv / first - 1.0) * 100.0
    with np.errstate(over="ignore", invalid="ignore"):  # a slope past float range shows as "-"
        slope = (np.exp(b) - 1.0) * 100.0
    out = g[SERIES].first()
    out["runs"] = g["_all"].first().astype(int)
    out["last_runs"] = g["run_id"].agg(lambda s: " ".join(map(str, s)))
    out["last_values"] = g["value"].agg(lambda s: " ".join(_fmt(v) for v in s))
    out["last_value_list"] = g["value"].agg(list)
    out["latest"] = lastv
    out["trend_pct"] = trend.where(n > 1)
    out["slope_pct_per_run"] = slope.where(n > 1)
    return out.reset_index(drop=True)


def _detector():
    """(detect_changes, recent_regressions, CHANGE_COLUMNS)."""
    return detect_changes, recent_regressions, CHANGE_COLUMNS


def detect(history: pd.DataFrame, detect_changes, source: str) -> pd.DataFrame:
    """``detect_changes`` over the whole history (it keys series by hw_key too, so machines
    are never mixed); ``hw_key`` is guaranteed in the result."""
    # values near the float limits overflow its sums; such a series has no finite change to
    # report, and the terminal gets no raw numpy warning
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanmedian of a series with no finite spread
        ch = detect_changes(history, source=source)
    return ch if "hw_key" in ch.columns else ch.assign(hw_key=pd.Series(dtype=object))


#: the width ``history show`` fits when the terminal does not say (a pipe, CI logs)
SHOW_WIDTH = 160


def run_show(args: argparse.Namespace) -> int:
    if store_missing(_require_store(args)):
        return 2
    h = _read(args)
    t = trend_table(h, args.last)
    det = _detector()
    note = ""
    if det is None:
        t["latest_change"] = "change detection unavailable"
        note = "change detection unavailable (pytest_gemmperf.history.changepoints is not installed)"
    else:
        changes = detect(h, det[0], args.history)
        t["latest_change"] = _latest_change(t, changes)
        t["latest_change"] = _with_suspects(t, newest_run_suspects(h, check_threshold(args)[0], changes=changes))
    shown = t.head(args.max_rows)
    header = ["test", "point", "kernel", "metric", "runs", f"last {args.last} run medians", "trend", "slope/run",
              "latest change"]
    rows = [[printable(str(r["test"])), printable(str(r["point"])), printable(str(r["kernel"])), str(r["metric"]),
             str(r["runs"]), values_text(r["last_value_list"], str(r["metric"])), _pct(r["trend_pct"]),
             _pct(r["slope_pct_per_run"]), printable(str(r["latest_change"]))]
            for r in shown.to_dict("records")]
    if t["hw_key"].nunique() > 1:
        header.insert(0, "hw")
        for row, hw in zip(rows, shown["hw_key"].astype(str)):
            row.insert(0, printable(hw))
    n_runs = h["run_id"].nunique()
    print(printable(f"history {args.history}: {n_runs} run(s), {len(t)} series "
                    f"({h['time'].min():%Y-%m-%d %H:%M} .. {h['time'].max():%Y-%m-%d %H:%M} UTC)"))
    # as wide as the terminal (COLUMNS), else 160: long test ids and kernel names are
    # shortened in the middle, never wrapped; the latest change (its verdict word and change
    # first) only when they cannot give more, and then at its end
    width = shutil.get_terminal_size((SHOW_WIDTH, 24)).columns
    print("\n".join(fit_table(header, rows, width, shrink=("kernel", "test", "hw"),
                               shrink_last=("latest change",), right=("runs", "trend", "slope/run"))))
    if len(t) > args.max_rows:
        print(printable(f"... {len(t) - args.max_rows} more series (narrow with -k / --test)"))
    if note:
        print(printable(note), file=sys.stderr)
    return 0


def _latest_change(t: pd.DataFrame, changes: pd.DataFrame) -> list[str]:
    if changes is None or changes.empty:
        return ["none"] * len(t)
    c = changes.sort_values("time_after", kind="stable").groupby(SERIES, sort=False, observed=True).tail(1)
    # the change as compare prints it (a percentage), the run it appeared in and its commit
    text = [f"{d} {100 * (r - 1):+.1f}% at {ra}" + (f" ({str(cm)[:10]})" if isinstance(cm, str) and cm else "")
            for d, r, ra, cm in zip(c["direction"], c["ratio"].astype(float), c["run_after"], c["commit_after"])]
    lut = dict(zip(map(tuple, c[SERIES].astype(str).to_numpy()), text))
    return [lut.get(tuple(k), "none") for k in t[SERIES].astype(str).to_numpy()]


def _with_suspects(t: pd.DataFrame, suspects: pd.DataFrame) -> list[str]:
    """``latest_change``, with "suspect" where the newest run is one."""
    # short: the table fits the terminal; `history check` prints the whole sentence
    lut = {tuple(map(str, k)): f"suspect x{r:.3g} at {rid} ({_confirm_short(n)})"
           for k, r, rid, n in zip(suspects[SERIES].to_numpy(), suspects["ratio"].astype(float),
                                   suspects["run_id"], suspects["confirm_runs"])}
    return [lut.get(tuple(k), old) for k, old in zip(t[SERIES].astype(str).to_numpy(), t["latest_change"])]


def _confirm_short(n: int | None) -> str:
    return "confirm: ?" if n is None else f"confirm: {n} more run{'s' if n != 1 else ''}"


def check_threshold(args: argparse.Namespace) -> tuple[float, str]:
    """The threshold a suspect must exceed and where it came from (flag, project file, default)."""
    value = getattr(args, "threshold", None)
    origin = getattr(args, "setting_origins", {}).get("threshold")
    if value is None:
        return GateConfig().threshold, "the gate's default"
    return float(value), origin.text if origin is not None else "--threshold"


def run_check(args: argparse.Namespace) -> int:
    det = _detector()
    if det is None:
        raise GemmperfInputError(None, "change detection unavailable (pytest_gemmperf.history.changepoints "
                                       "is not installed)")
    detect_changes, recent_fn, change_cols = det
    if store_missing(_require_store(args)):
        return 2
    h = _read(args)
    changes = detect(h, detect_changes, args.history)
    recent_df = recent_fn(changes, h, args.history_window)
    out = Path(args.out) if args.out else default_output_dir(CHECK_OUT)
    out.mkdir(parents=True, exist_ok=True)
    write_changes_csv(changes, out / "changes.csv")  # ISO 8601 UTC times, formula cells neutralised
    n_series = h.groupby(SERIES, observed=True).ngroups
    print(printable(f"history {args.history}: {h['run_id'].nunique()} run(s), {n_series} series, "
                    f"{len(changes)} change point(s) -> {out / 'changes.csv'}"))
    threshold, origin = check_threshold(args)
    suspects = newest_run_suspects(h, threshold, changes=changes)
    write_csv(suspects[list(SUSPECT_COLUMNS)], out / "suspects.csv")
    if getattr(args, "report", True):
        _write_reports(h, changes, out, args.history_window, suspects)
    if len(suspects):
        print(printable(f"{len(suspects)} suspect newest run(s): far outside their series (beyond the "
                        f"{format_threshold(threshold)} threshold ({origin}) and the series' own spread) "
                        f"-> {out / 'suspects.csv'}"))
        print(format_suspects(suspects))
    if len(recent_df):
        print(printable(f"regression change point(s) within the last {args.history_window} run(s):"))
        print(format_changes(recent_df))
        print(printable(f"gemmperf: {len(recent_df)} recent regression change point(s)"), file=sys.stderr)
        return 1
    print(printable(f"no regression change point within the last {args.history_window} run(s)"))
    if len(suspects):
        print(printable(f"gemmperf: {len(suspects)} suspected regression(s) in the newest run, not yet a "
                        f"change point (exit {EXIT_SUSPECT})"), file=sys.stderr)
        return EXIT_SUSPECT
    return 0


def _write_reports(history: pd.DataFrame, changes: pd.DataFrame, out: Path, window: int,
                   suspects: pd.DataFrame | None = None) -> None:
    """history.html + history.xlsx (report/history_page.py) beside changes.csv. A report
    failure is reported and never changes the check's exit status."""
    try:
        files = write_history_reports(history, changes, out, recent_window=window, suspects=suspects)
    except Exception as exc:  # noqa: BLE001 - changes.csv is written; say why the page is not
        print(printable(f"gemmperf: history report not written: {failure_line(exc)}"), file=sys.stderr)
        return
    if "history.html" in files:
        print(printable(f"report: {files['history.html']}"))


def run_prune(args: argparse.Namespace) -> int:

    if args.keep_last is None and args.older_than is None:
        raise GemmperfInputError(None, "history prune needs --keep-last N and/or --older-than DAYS")
    st = HistoryStore(_require_store(args))
    gone = st.prune(keep_last=args.keep_last, older_than_days=args.older_than, hw_key=args.hw,
                    dry_run=not args.yes)
    runs = gone[["hw_key", "run_id"]].drop_duplicates()
    verb = "deleted" if args.yes else "would delete"
    for r in gone.itertuples(index=False):
        print(printable(f"{verb}: {r.file}  (run {r.run_id}, {pd.Timestamp(r.time):%Y-%m-%d %H:%M} UTC, hw {r.hw_key})"))
    print(printable(f"{verb} {len(runs)} run(s), {len(gone)} file(s)" + ("" if args.yes else "; run again with --yes to delete")))
    return 0


def _fmt(v: Any) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "-"
    if not np.isfinite(x):
        return "-"
    return f"{x:.4g}"


def _pct(v: Any) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if not np.isfinite(x) else f"{x:+.1f}%"

