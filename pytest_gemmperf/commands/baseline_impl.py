"""The work of ``gemmperf baseline``. Its parser is :mod:`pytest_gemmperf.commands.baseline`, which
imports this module only when the command runs, so ``gemmperf --help`` loads neither pandas
nor scipy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pytest_gemmperf.commands.argtypes import add_allow_partial, non_negative
from pytest_gemmperf.commands.helpfmt import command_description
from pytest_gemmperf.config import SettingError, add_cli_option
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.compare import GateConfig, compare
from pytest_gemmperf.gate.headline import PRINTED_NUMBERS, change_text, footer_lines
from pytest_gemmperf.commands.termtable import NO_VALUE, value_text
from pytest_gemmperf.gate.verdict import per_process_medians
from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.results import refresh_from_results
from pytest_gemmperf.store.record import META_FILE
from pytest_gemmperf.store.results import records_from_results, resolve_results_dir
from pytest_gemmperf.store.record import normalize_samples, summarize
from pytest_gemmperf.store.record import legacy_keys
from pytest_gemmperf.store.record import kept_points, merge_records
from pytest_gemmperf.store.results import records_from_results


def _print_footer() -> None:
    """What each printed number is: the text ``gemmperf compare`` and docs/statistics.md carry."""
    print("\n".join(footer_lines(PRINTED_NUMBERS)))


def _medians(samples: pd.DataFrame | None) -> pd.Series:
    """Per (point, kernel, metric): the median ``gemmperf compare`` and the verdicts print
    (over processes of each process's median), so the tools' medians are one number."""
    if samples is None or not len(samples):
        return pd.Series(dtype=float)
    return per_process_medians(normalize_samples(samples))


def _with_medians(table: pd.DataFrame, column: str, samples: pd.DataFrame | None) -> pd.DataFrame:
    """``table`` with ``column`` holding :func:`_medians` of ``samples`` on its rows' keys."""
    keys = pd.MultiIndex.from_frame(table[["point", "kernel", "metric"]].astype(str))
    med = _medians(samples)
    out = table.copy()
    out[column] = med.reindex(keys).to_numpy(float) if len(med) else float("nan")
    return out


def _store(args: argparse.Namespace):

    return BaselineStore(args.baseline_dir)


def _say(msg: str) -> None:
    print(printable(msg), file=sys.stderr)


MAX_TEXT = 70  # kernel names run to hundreds of characters; the files keep them whole




def _print_table(df: pd.DataFrame) -> None:
    """Plain table, text columns left-aligned and long names shortened in the middle."""
    df = df.copy()
    for c in df.columns:
        if (pd.api.types.is_numeric_dtype(df[c]) and isinstance(df[c].dtype, pd.api.extensions.ExtensionDtype)
                and df[c].isna().any()):
            # nullable integers print <NA> whatever na_rep says: as text, with the dash
            df[c] = df[c].astype(object).where(df[c].notna(), NO_VALUE)
        if not pd.api.types.is_numeric_dtype(df[c]):
            text = df[c].astype(object).where(df[c].notna(), "").astype(str).map(printable)
            text = text.where(text.str.len() <= MAX_TEXT,
                              text.str[:MAX_TEXT // 2 - 2] + "..." + text.str[-(MAX_TEXT // 2 - 1):])
            width = max(int(text.str.len().max() or 0), len(str(c)))
            df[c] = text.str.ljust(width)
    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 10_000):
        # a cell with no value (the old side of a new record) reads as a dash, not NaN / <NA>
        print(df.to_string(index=False, justify="left", na_rep=NO_VALUE))


def run_refresh(args: argparse.Namespace) -> int:

    recs = refresh_from_results(args.results, _store(args), args.test_filter, warmup=args.warmup, report=_say,
                                replace=args.replace, jobs=getattr(args, "jobs", 0),
                                allow_partial=getattr(args, "allow_partial", False))
    print(printable(f"{len(recs)} baseline record(s) refreshed in {args.baseline_dir}"))
    return 0


def run_learn(args: argparse.Namespace) -> int:

    store = _store(args)
    root = resolve_results_dir(args.results, _say)
    learned = 0
    for rec in records_from_results(root, args.test_filter, warmup=args.warmup, report=_say,
                                    jobs=getattr(args, "jobs", 0),
                                    allow_partial=getattr(args, "allow_partial", False)):
        # existence only: learn() reads and checks the record under its lock
        if not (store.path_for(rec.test_id, rec.hw_key) / META_FILE).is_file():
            _say(f"no baseline for {rec.hw_key} {rec.test_id}: nothing to learn into (refresh first)")
            continue
        done = [p for p in sorted(set(rec.samples["point"].astype(str)))
                if store.learn(rec.test_id, rec.hw_key, rec.samples[rec.samples["point"].astype(str) == p],
                               f"{root.name}/{p}", report=_say)]
        learned += len(done)
        _say(f"{rec.hw_key} {rec.test_id}: learned {len(done)} point(s)"
             + ("" if done else " (already in the history)"))
    print(printable(f"variance of {learned} point run(s) added to the history in {args.baseline_dir}"))
    return 0


def run_show(args: argparse.Namespace) -> int:

    if not Path(args.baseline_dir).is_dir():  # a mistyped --baseline-dir is no empty store
        _say(f"gemmperf: error: no baseline store at {args.baseline_dir}")
        return 2
    store = _store(args)
    if args.test_id is None:
        table = store.list(args.hw, verify=args.verify)
        if table.empty:
            print(printable(f"no baselines in {args.baseline_dir}"))
            return 0
        _print_table(table.drop(columns=["metrics", "rows", "generation"]).rename(
            columns={"test_id": "test", "hw_key": "hw"}))
        bad = table[table["status"].str.startswith(("damaged", "incomplete"))]
        if not args.verify:
            print(printable(f"{len(table)} record(s); checksums NOT verified (--no-verify)"))
        else:
            print(printable(f"{len(table)} record(s); checksums verified: {len(table) - len(bad)} ok, "
                            f"{int(table['status'].str.startswith('damaged').sum())} damaged, "
                            f"{int(table['status'].str.startswith('incomplete').sum())} incomplete"))
        for r in bad.itertuples(index=False):
            _say(f"{r.status.split(':', 1)[0]}: {r.hw_key} {r.test_id}: {r.status.split(':', 1)[1].strip()}")
        return 0
    hws = [args.hw] if args.hw else sorted(p.name for p in store.root.iterdir()
                                           if p.is_dir() and not p.name.startswith(".")) if store.root.is_dir() else []
    # this test's records only: a damaged record of another test is none of this command's business
    recs = [r for r in (store.load(args.test_id, hw) for hw in hws) if r is not None]
    if not recs:
        raise GemmperfInputError(args.baseline_dir, f"no baseline for test {args.test_id!r}")
    for rec in recs:
        print(printable(f"{rec.test_id}  [{rec.hw_key}]  updated {rec.updated}  generation {rec.generation}  "
                        "(checksums verified)"))
        if rec.migrated_from is not None:
            old_dir = store.path_for(rec.test_id, rec.hw_key).parent / dict(legacy_keys(rec.test_id))[rec.migrated_from]
            print(printable(f"migrated: found under old key {rec.migrated_from!r} ({old_dir}); the next save "
                            f"writes it under {rec.test_id!r} ({store.path_for(rec.test_id, rec.hw_key)})"))
        _print_table(_with_medians(summarize(rec.samples), "median", rec.samples))
        if rec.variance is not None and len(rec.variance):
            runs = rec.variance.groupby("point")["seq"].nunique()
            print(printable("variance history (earlier runs per point): "
                            + ", ".join(f"{p} {int(n)}" for p, n in runs.items())))
    _print_footer()
    return 0


def run_diff(args: argparse.Namespace) -> int:

    store = _store(args)
    printed = False
    for new in records_from_results(args.results, args.test_filter, warmup=args.warmup, report=_say,
                                    jobs=getattr(args, "jobs", 0),
                                    allow_partial=getattr(args, "allow_partial", False)):
        old = store.load(new.test_id, new.hw_key)
        kept = kept_points(old, new)
        # what the refresh would store: merged per point unless --replace
        merged = merge_records(old, new, replace=args.replace)
        diff = BaselineStore.diff(old, merged)
        diff = _with_medians(_with_medians(diff, "old_median", None if old is None else old.samples),
                             "new_median", merged.samples)
        diff = diff_table(diff, None if old is None else _tested_changes(old.samples, new.samples, new.test_id))
        counts = diff["diff"].value_counts()
        status = "new baseline" if old is None else ", ".join(
            f"{counts.get(c, 0)} {c}" for c in DIFF_STATES if c != SAME_MEDIAN or counts.get(c, 0))
        print(printable(f"{new.test_id}  [{new.hw_key}]: {status}"))
        if kept:
            print(printable(f"  point(s) not in the run: {', '.join(kept)} -- "
                            + ("REMOVED by --replace" if args.replace else "kept (refresh --replace would remove them)")))
        shown = diff if args.all else diff[diff["diff"] != "unchanged"]
        if not shown.empty:
            _print_table(shown)
            printed = True
    if printed:
        _print_footer()
    return 0


#: a row whose printed median is the same on both sides while the samples behind it differ
#: (more processes, a merged run): never called ``changed``
SAME_MEDIAN = "same median"
DIFF_STATES = ("changed", SAME_MEDIAN, "added", "removed", "unchanged")


def diff_table(diff: pd.DataFrame, tested: pd.DataFrame | None) -> pd.DataFrame:
    """What ``baseline diff`` prints per (point, kernel, metric): both medians in the metric's
    unit, the tested change with its CI as ``gemmperf compare`` prints it (the run against the
    stored record; ``tested``: compare's rows), the processes on each side, and ``diff``: a row
    whose median is the same value on both sides is never ``changed`` (``same median`` when
    only the processes behind it differ)."""
    old_text = [value_text(x, m) for x, m in zip(diff["old_median"], diff["metric"])]
    new_text = [value_text(x, m) for x, m in zip(diff["new_median"], diff["metric"])]
    state = diff["change"].astype(str).to_numpy(dtype=object).copy()
    a, b = diff["old_median"].to_numpy(float), diff["new_median"].to_numpy(float)
    # the store calls a row changed when its processes differ too; equal values are not a change
    same_value = np.isclose(a, b, rtol=1e-12, atol=0)
    for i in np.flatnonzero((state == "changed") & same_value):
        same_units = _count(diff["old_n_units"].iloc[i]) == _count(diff["new_n_units"].iloc[i])
        state[i] = "unchanged" if same_units else SAME_MEDIAN
    change = pd.Series("-", index=diff.index, dtype=object)
    if tested is not None and len(tested):
        keys = pd.MultiIndex.from_frame(diff[["point", "kernel", "metric"]].astype(str))
        change = tested.reindex(keys)["change"].fillna("-").set_axis(diff.index)
    units = [f"{_count(a)} -> {_count(b)}" for a, b in zip(diff["old_n_units"], diff["new_n_units"])]
    return pd.DataFrame({"point": diff["point"], "kernel": diff["kernel"], "metric": diff["metric"],
                         "old": old_text, "new": new_text, "change [95% CI]": change.to_numpy(),
                         "processes": units, "diff": state}, index=diff.index)


def _count(n: object) -> str:
    return NO_VALUE if n is None or n is pd.NA or (isinstance(n, float) and n != n) else str(int(n))


def _tested_changes(old: pd.DataFrame, new: pd.DataFrame, test: str) -> pd.DataFrame:
    """Per (point, kernel, metric) as strings: the change of the run against the stored
    record with its 95 % CI, the text ``gemmperf compare`` prints
    (:func:`~pytest_gemmperf.gate.headline.change_text` of the gate's own comparison)."""
    v = compare(old, new, GateConfig(), test=test)
    if not len(v):
        return pd.DataFrame(columns=["change"])
    text = [change_text(r, lo, hi) for r, lo, hi in zip(v["ratio"], v["ci_low"], v["ci_high"])]
    keys = pd.MultiIndex.from_frame(v[["point", "kernel", "metric"]].astype(str))
    out = pd.DataFrame({"change": text}, index=keys)
    return out[~out.index.duplicated()]


def run_prune(args: argparse.Namespace) -> int:
    """Lists what ``--older-than`` selects; removes it only with ``--yes`` (as ``history prune``)."""
    if args.yes and args.dry_run:
        raise SettingError("--yes removes and --dry-run only lists: give one of them")
    dry = not args.yes
    removed = _store(args).prune(older_than=args.older_than, dry_run=dry, hw_key=args.hw, report=_say)
    verb = "would remove" if dry else "removed"
    for r in removed:
        print(printable(f"{verb} {r['hw_key']} {r['test_id']} (updated {r['updated']}; {r['reason']})"))
    if args.older_than is None:
        _say("nothing selected: pass --older-than DAYS")
    print(printable(f"{len(removed)} record(s) " + ("to remove" + ("; run again with --yes to remove them"
                                                                    if removed else "") if dry else "removed")))
    return 0
