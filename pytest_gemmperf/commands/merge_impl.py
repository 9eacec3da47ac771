"""The work of ``gemmperf merge``. Its parser is :mod:`pytest_gemmperf.commands.merge`, which
imports this module only when the command runs, so ``gemmperf --help`` loads neither pandas
nor scipy.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pytest_gemmperf import safe_io
from pytest_gemmperf.errors import GemmperfInputError, failure_line
from pytest_gemmperf.commands.argtypes import add_allow_partial
from pytest_gemmperf.paths import contained
from pytest_gemmperf.store.results import check_point_tables
from pytest_gemmperf.run.results import (COMPLETE, INTERRUPTED, POINT_JSON, RUN_JSON, VERDICTS_CSV, RunState,
                                         check_run, write_json)
from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.traces.fileio import read_json_object
from pytest_gemmperf.gate.outcome import counts_text, outcome_counts, point_outcomes
from pytest_gemmperf.report import read_verdict_files
from pytest_gemmperf.report import write_results_reports


@dataclass
class MergePlan:
    """What a merge will write: point directories (source -> destination), other test-level
    files, verdict files per test, the inputs' run.json documents."""

    inputs: list[Path]
    runs: list[dict]
    points: dict[tuple[str, str], Path] = field(default_factory=dict)
    files: dict[tuple[str, str], Path] = field(default_factory=dict)
    verdicts: dict[str, list[Path]] = field(default_factory=dict)
    missing_shards: list[int] = field(default_factory=list)
    #: each input's completeness (``run/results.py``); an interrupted one only with allow_partial
    states: list[RunState] = field(default_factory=list)


def plan_merge(inputs: list[Path], out: Path, *, partial: bool = False,
               allow_partial: bool = False) -> MergePlan:
    """Check the inputs and list what to copy; raises ``GemmperfInputError`` naming the file
    (or both directories of a conflict) and what is wrong."""
    if not inputs:
        raise GemmperfInputError(None, "merge needs at least one results directory")
    seen: dict[Path, Path] = {}
    runs = []
    for d in inputs:
        if not d.is_dir():
            raise GemmperfInputError(d, "not a directory")
        real = d.resolve()
        if real in seen:
            raise GemmperfInputError(d, f"given twice (also as {seen[real]})")
        seen[real] = d
        runs.append(_read_run_json(d))
    states = [check_run(d, allow_partial) for d in inputs]  # an interrupted shard is refused
    out_real = out.resolve()
    for real, d in seen.items():
        if out_real == real or real in out_real.parents:
            raise GemmperfInputError(out, f"--out must not be inside the input {d}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise GemmperfInputError(out, "--out exists and is not an empty directory")
    plan = MergePlan(inputs=list(inputs), runs=runs, states=states)
    plan.missing_shards = _check_shards(inputs, runs, partial)
    for d, state in zip(inputs, states):
        for test_dir in sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if test_dir.is_symlink():
                continue  # never follow a link out of the results directory
            for child in sorted(test_dir.iterdir()):
                if child.name.startswith(".") or child.is_symlink():
                    continue  # lock files; links are not ours
                key = (test_dir.name, child.name)
                if child.is_dir():
                    if not (child / POINT_JSON).is_file():
                        continue  # not a point directory
                    if f"{test_dir.name}/{child.name}" in state.incomplete:
                        continue  # --allow-partial: an interrupted point's runs are not merged
                    check_point_tables(child)  # a table cut short is not copied on as whole
                    if key in plan.points:
                        raise GemmperfInputError(child, f"point {child.name} of {test_dir.name} is also in "
                                                        f"{plan.points[key]}: the shards overlap")
                    plan.points[key] = child
                elif child.name == VERDICTS_CSV:
                    plan.verdicts.setdefault(test_dir.name, []).append(child)
                elif child.is_file():
                    if key in plan.files:
                        raise GemmperfInputError(child, f"also in {plan.files[key]}: the shards overlap")
                    plan.files[key] = child
    if not plan.points:
        raise GemmperfInputError(inputs[0], "no point directories (<test>/<point>/point.json) in any input")
    return plan


def merge_results(inputs: list[Path], out: Path, *, partial: bool = False,
                  allow_partial: bool = False) -> MergePlan:
    """Write the merged results directory ``out`` (see the module docstring). An interrupted
    input is refused unless ``allow_partial``, which merges its complete points only."""
    plan = plan_merge(inputs, out, partial=partial, allow_partial=allow_partial)
    frames = {test: _merged_verdicts(paths, plan) for test, paths in sorted(plan.verdicts.items())}
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        # every destination is built by contained(): names from the inputs' listings are one
        # level each, and nothing in --out is followed as a link
        for (test, point), src in sorted(plan.points.items()):
            contained(out, test).mkdir(exist_ok=True)
            shutil.copytree(src, contained(out, test, point), symlinks=True, copy_function=_link_or_copy)
        for (test, name), src in sorted(plan.files.items()):
            contained(out, test).mkdir(exist_ok=True)
            _link_or_copy(str(src), str(contained(out, test, name)))
        for test, frame in frames.items():
            contained(out, test).mkdir(exist_ok=True)
            safe_io.write_text(contained(out, test, VERDICTS_CSV), safe_io.csv_text(frame))
        write_json(out / RUN_JSON, _merged_run_json(plan))
    except BaseException:
        if created and not out.is_symlink():  # leave nothing half-merged behind (only what we made)
            shutil.rmtree(out, ignore_errors=True)
        raise
    return plan


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    plan = merge_results([Path(p) for p in args.inputs], out, partial=args.partial,
                         allow_partial=getattr(args, "allow_partial", False))
    for state in plan.states:
        if not state.is_complete:
            print(f"gemmperf merge: --allow-partial: {state.refusal().split(' (', 1)[0]}; "
                  "merged its complete points only", file=sys.stderr)
    tests = {t for t, _ in plan.points}
    shards = [r.get("shard", {}).get("shard") for r in plan.runs if isinstance(r.get("shard"), dict)]
    print(printable(f"gemmperf merge: {len(plan.inputs)} results dir(s)"
                    + (f" (shards {', '.join(shards)})" if shards else "")
                    + f": {len(tests)} test(s), {len(plan.points)} point(s) -> {out}"))
    if plan.missing_shards:
        print(printable(f"gemmperf merge: --partial: shard(s) {', '.join(map(str, plan.missing_shards))} missing"),
              file=sys.stderr)
    commits = {r.get("git_commit") for r in plan.runs}
    if len(commits) > 1:
        print(printable(f"gemmperf merge: warning: the inputs ran different commits ({', '.join(map(str, commits))})"),
              file=sys.stderr)

    verdicts = read_verdict_files(out)
    regressions = 0
    if verdicts is not None and len(verdicts):
        counts = verdicts["verdict"].value_counts().sort_index()
        print(printable("verdicts: " + ", ".join(f"{k}={v}" for k, v in counts.items())))
        # the points' outcomes as each shard's pytest session judged them (gate/outcome.py)
        print(printable("points: " + counts_text(outcome_counts(o for _, o in point_outcomes(verdicts)))))
        regressions = int(counts.get("regression", 0))
    if args.report:

        try:
            path = write_results_reports(out, Path(args.report_dir) if args.report_dir else out / "report")
        except Exception as exc:  # noqa: BLE001 - as in the plugin: a broken report must not hide the verdicts
            print(printable(f"gemmperf merge: report not written: {failure_line(exc)}"), file=sys.stderr)
            return 1 if regressions else 2  # an output that is not there; a regression says more
        print(printable(f"report: {path}" if path else "report: nothing profiled, no report"))
    return 1 if regressions else 0


def _read_run_json(d: Path) -> dict:
    path = d / RUN_JSON
    if not path.is_file():
        raise GemmperfInputError(path, "missing: not a gemmperf results directory")
    doc = read_json_object(path)
    if "shard" in doc and not _valid_shard(doc["shard"]):
        raise GemmperfInputError(path, "'shard' needs index, count and plan")
    return doc


def _valid_shard(s) -> bool:
    return (isinstance(s, dict) and isinstance(s.get("index"), int) and isinstance(s.get("count"), int)
            and 1 <= s["index"] <= s["count"] and isinstance(s.get("plan"), str))


def _check_shards(inputs: list[Path], runs: list[dict], partial: bool) -> list[int]:
    """Shards of one plan, each index once; returns the missing indices (error unless partial)."""
    sharded = [(d, r["shard"]) for d, r in zip(inputs, runs) if "shard" in r]
    if not sharded:
        return []
    if len(sharded) != len(inputs):
        plain = next(d for d, r in zip(inputs, runs) if "shard" not in r)
        raise GemmperfInputError(plain / RUN_JSON, f"not a shard, but {sharded[0][0]} is: merge the "
                                                  "shards of one sharded run only")
    d0, s0 = sharded[0]
    by_index: dict[int, Path] = {}
    for d, s in sharded:
        if s["count"] != s0["count"] or s["plan"] != s0["plan"]:
            raise GemmperfInputError(d / RUN_JSON, f"shard {s['index']}/{s['count']} (plan {s['plan']}) is not "
                                                   f"from the plan of {d0} ({s0['index']}/{s0['count']}, plan "
                                                   f"{s0['plan']}): the shards collected different points or "
                                                   "read different baseline durations")
        if s["index"] in by_index:
            raise GemmperfInputError(d, f"shard {s['index']}/{s['count']} is also {by_index[s['index']]}")
        by_index[s["index"]] = d
    missing = [i for i in range(1, s0["count"] + 1) if i not in by_index]
    if missing and not partial:
        count = s0["count"]
        raise GemmperfInputError(d0, f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} "
                                     "missing (give every shard's results directory, or --partial)")
    return missing


def _merged_verdicts(paths: list[Path], plan: MergePlan) -> pd.DataFrame:
    """One test's verdict rows from several shards, ordered as ``store.verdicts_file.merge_verdicts``
    orders them (stable by point); every cell kept as its text."""
    frames, owner = [], {}
    for p in paths:
        try:
            f = pd.read_csv(p, dtype=str, keep_default_na=False, na_filter=False)
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            raise GemmperfInputError(p, f"unreadable verdicts: {exc}") from None
        if "point" not in f.columns:
            raise GemmperfInputError(p, "no 'point' column: not a gemmperf verdicts file")
        for point in f["point"].unique():
            if point in owner:
                raise GemmperfInputError(p, f"verdicts of point {point} are also in {owner[point]}: "
                                            "the shards overlap")
            owner[point] = p
        if frames and list(f.columns) != list(frames[0].columns):
            raise GemmperfInputError(p, f"columns differ from {paths[0]}")
        frames.append(safe_io.unneutralise_frame(f))
    merged = pd.concat(frames, ignore_index=True)
    return merged.sort_values("point", kind="stable").reset_index(drop=True)


def _merged_run_json(plan: MergePlan) -> dict:
    first = dict(plan.runs[0])
    first.pop("shard", None)
    entries = []
    for d, r in zip(plan.inputs, plan.runs):
        s = r.get("shard") or {}
        entries.append({"dir": str(d.resolve()), "shard": s.get("shard"), "plan": s.get("plan"),
                        "created": r.get("created"), "host": r.get("host"),
                        "hardware_key": r.get("hardware_key"), "git_commit": r.get("git_commit"),
                        "points": sum(1 for _, src in plan.points.items() if d in src.parents)})
    hw = {e["hardware_key"] for e in entries if e["hardware_key"]}
    first["hardware_key"] = hw.pop() if len(hw) == 1 else None
    if len({e["hardware_key"] for e in entries if e["hardware_key"]}) > 1:
        first["hardware_keys"] = sorted({e["hardware_key"] for e in entries if e["hardware_key"]})
    first["merged"] = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    first["merged_from"] = entries
    if plan.missing_shards:
        first["missing_shards"] = plan.missing_shards
    # a merge of an interrupted shard stays interrupted: its readers need --allow-partial too
    if plan.states:
        first.pop("writer", None)
        first["status"] = COMPLETE if all(st.is_complete for st in plan.states) else INTERRUPTED
        first["points_total"] = sum(st.points_total for st in plan.states)
        first["points_complete"] = sum(len(st.complete) for st in plan.states)
        first["points_failed"] = sum(len(st.failed) for st in plan.states)
        first["complete_points"] = sorted(p for st in plan.states for p in st.complete)
    return first


def _link_or_copy(src: str, dst: str) -> str:
    """A hard link (no bytes copied; the inputs are read-only artefacts) or, across file
    systems, a copy."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst


__all__ = ["MergePlan", "add_parser", "merge_results", "plan_merge", "run"]

