"""Reading finished results directories: the samples and baseline records of a run.

What ``gemmperf baseline refresh|learn|diff`` and ``gemmperf compare`` read from a results
directory (``docs/ARCHITECTURE.md``, results layout): each finished point's dispatches, narrowed
to its kernel regexes and gated with its recorded warm-up exactly as the plugin gated it, so a
refreshed baseline holds the samples pytest compared. Nothing here writes a baseline; the store
is :mod:`pytest_gemmperf.store.baselines`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from pytest_gemmperf.analysis.selection import select_kernels
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.confirm import worst_disturbance
from pytest_gemmperf.run.environment import Disturbance
from pytest_gemmperf.run.results import COMPLETE, check_run, newest_complete_run, point_state, read_json_doc
from pytest_gemmperf.sweep import invalid_env
from pytest_gemmperf.store.hardware import hardware_key
from pytest_gemmperf.store.record import BaselineRecord, _now
from pytest_gemmperf.gate.samples import gate_samples
from pytest_gemmperf.traces.parallel import map_ordered, pool_jobs

if TYPE_CHECKING:
    from pytest_gemmperf.store.baselines import BaselineStore

#: point.json statuses whose data must not become a baseline.
_BAD_STATUSES = frozenset({"failed", "error", "timeout", "crashed", "skipped", "killed"})


def _read_json(path: Path) -> dict[str, Any]:
    """``point.json`` / ``run.json`` as an object, or one line naming the file."""
    return read_json_doc(path)


def resolve_results_dir(path: str | os.PathLike, report: Callable[[str], None] | None = None) -> Path:
    """``path`` itself when it is a results directory; the newest complete run inside it when
    it is the parent of timestamped runs (``.gemmperf/results``), ``report`` naming any newer
    run that was interrupted."""
    p = Path(path)
    if not p.is_dir():
        raise GemmperfInputError(p, "results directory does not exist")
    if (p / "run.json").is_file() or any(p.glob("*/*/point.json")):
        return p
    runs = sorted(c for c in p.iterdir() if c.is_dir() and (c / "run.json").is_file())
    if runs:
        newest = newest_complete_run(p, report)
        if newest is None:
            raise GemmperfInputError(p, f"no complete run: the newest, {runs[-1].name}, and every older "
                                        "one was interrupted (give one with --allow-partial)")
        return newest
    raise GemmperfInputError(p, "not a gemmperf results directory (no run.json, no <test>/<point>/point.json)")


@dataclass
class _Point:
    test_id: str
    point: str
    dir: Path
    doc: dict[str, Any]


def _finished_points(root: Path, test_filter: str | None,
                     report: Callable[[str], None] | None) -> list[_Point]:
    """The complete points of ``root``; failed and unfinished ones are named through ``report``
    (a caller reaches an unfinished one only with ``allow_partial``)."""
    points = []
    for pj in sorted(root.glob("*/*/point.json")):
        doc = _read_json(pj)
        test_id = doc.get("test_id")
        if not isinstance(test_id, str) or not test_id:
            raise GemmperfInputError(pj, "lacks 'test_id'")
        if test_filter and test_filter not in test_id:
            continue
        status = str(doc.get("status") or "").lower()
        if status in _BAD_STATUSES or point_state(pj.parent, doc) != COMPLETE:
            if report:
                report(f"skipped {pj.parent}: status {status or 'unknown'!r}")
            continue
        bad_env = invalid_env(doc.get("env") or {})
        if bad_env:
            # a run nobody meant (OMP_NUM_THREADS=abc) is no reference; the pytest path refuses it too
            if report:
                report(f"skipped {pj.parent}: invalid environment: {'; '.join(bad_env)}")
            continue
        check_point_tables(pj.parent)
        points.append(_Point(test_id, str(doc.get("point") or pj.parent.name), pj.parent, doc))
    if not points:
        what = f"matching {test_filter!r} " if test_filter else ""
        raise GemmperfInputError(root, f"no finished test points {what}found")
    return points


def _point_hw_key(p: _Point, run_hw: str | None, run_path: Path) -> str:
    """point.json's key, else run.json's, else the GPU agents the point recorded. Never this
    machine's key: the results may come from another host."""
    hw = p.doc.get("hardware_key") or run_hw
    if hw:
        return str(hw)
    apath = p.dir / "agents.parquet"
    hw = hardware_key(_read_parquet(apath)) if apath.is_file() else None
    if hw is None or hw.startswith("cpu-"):
        raise GemmperfInputError(run_path, f"no hardware key in run.json or {p.dir.name}/point.json and no "
                                           "GPU agents in agents.parquet: cannot tell which hardware this run is from")
    return hw


def _point_warmup(p: _Point, warmup: int | None, run_warmup: int | None) -> int:
    """The caller's ``warmup``, else the one the plugin gated the point with (point.json),
    else run.json's, else 0."""
    for w in (warmup, p.doc.get("warmup"), run_warmup):
        if isinstance(w, int) and not isinstance(w, bool):
            return w
    return 0


def _point_samples(p: _Point, warmup: int) -> pd.DataFrame:
    dpath = p.dir / "dispatches.parquet"
    if not dpath.is_file():
        raise GemmperfInputError(dpath, "missing (the point finished but left no dispatch table)")
    disp = _read_parquet(dpath)
    if disp.empty or "kernel" not in disp.columns:
        raise GemmperfInputError(dpath, "no dispatches")
    if "point" not in disp.columns or disp["point"].isna().all():
        disp["point"] = pd.Categorical([p.point] * len(disp))
    kernels = p.doc.get("kernels") or []
    if not isinstance(kernels, list):
        raise GemmperfInputError(p.dir / "point.json", "'kernels' is not a list of regexes")
    names = pd.DataFrame({"kernel": pd.unique(disp["kernel"].astype(object))})
    if select_kernels(names, kernels, p.dir / "point.json").empty:
        raise GemmperfInputError(dpath, f"no dispatch matches the point's kernel regexes {kernels}")
    # the plugin's gate_samples call, with the point's regexes and warm-up: same samples
    return gate_samples(disp, kernels=kernels, warmup=warmup, compact=True, path=dpath)


def results_samples(results_dir: str | os.PathLike, test_filter: str | None = None, *,
                    warmup: int | None = None,
                    report: Callable[[str], None] | None = None,
                    jobs: int | None = 1, allow_partial: bool = False) -> dict[str, pd.DataFrame]:
    """``{test_id: samples}`` of a finished run, as the plugin gated it (no hardware key
    needed: what ``gemmperf compare`` reads from a results directory). ``jobs``: points
    read and gated at once in worker processes (``traces/parallel.py``; same result). An
    interrupted run is refused unless ``allow_partial`` (then its complete points only)."""
    root = _complete_run(results_dir, report, allow_partial)
    run_path = root / "run.json"
    run_meta = _read_json(run_path) if run_path.is_file() else {}
    groups: dict[str, list[_Point]] = {}
    for p in _finished_points(root, test_filter, report):
        groups.setdefault(p.test_id, []).append(p)
    ordered = [sorted(points, key=lambda q: q.point) for _, points in sorted(groups.items())]
    parts = iter(_samples_of_points([p for points in ordered for p in points], warmup,
                                    run_meta.get("warmup"), jobs))
    return {points[0].test_id: pd.concat([next(parts) for _ in points], ignore_index=True)
            for points in ordered}


def _complete_run(results_dir: str | os.PathLike, report: Callable[[str], None] | None,
                  allow_partial: bool) -> Path:
    """The run to read: a parent's newest complete run, or the run given, checked complete
    (``run.results.check_run``: one line naming an interrupted run and how far it got)."""
    root = resolve_results_dir(results_dir, report)
    state = check_run(root, allow_partial)
    if not state.is_complete and report:
        report(f"{state.refusal().split(' (', 1)[0]}; reading its {len(state.complete)} complete point(s) only")
    return root


def _point_samples_task(task: tuple[_Point, int]) -> pd.DataFrame:
    return _point_samples(*task)


def _samples_of_points(points: list[_Point], warmup: int | None, run_warmup: int | None,
                       jobs: int | None) -> list[pd.DataFrame]:
    """``_point_samples`` of each point, in order, on up to ``jobs`` worker processes."""
    tasks = [(p, _point_warmup(p, warmup, run_warmup)) for p in points]
    n = pool_jobs(jobs, [p.dir / "dispatches.parquet" for p in points])
    return map_ordered(_point_samples_task, tasks, n)


def records_from_results(results_dir: str | os.PathLike, test_filter: str | None = None, *,
                         warmup: int | None = None,
                         report: Callable[[str], None] | None = None,
                         jobs: int | None = 1, allow_partial: bool = False) -> list[BaselineRecord]:
    """Baseline records for every test of a finished run (nothing is written).

    ``test_filter`` keeps tests whose id contains it. Each point's dispatches are narrowed to its
    ``kernels`` regexes and gated by :func:`pytest_gemmperf.gate.samples.gate_samples`, as the
    plugin gates them; ``warmup`` dispatches per (unit, kernel) are dropped, None meaning the
    point's recorded gate warm-up (point.json), else run.json's ``warmup``, else 0.
    Points whose status says they failed are skipped and named through ``report``. An
    interrupted run is refused unless ``allow_partial`` (then its complete points only).
    """
    root = _complete_run(results_dir, report, allow_partial)
    run_path = root / "run.json"
    run_meta = _read_json(run_path) if run_path.is_file() else {}
    run_hw = run_meta.get("hardware_key") or run_meta.get("hw_key")

    groups: dict[tuple[str, str], list[_Point]] = {}
    for p in _finished_points(root, test_filter, report):
        groups.setdefault((p.test_id, _point_hw_key(p, run_hw, run_path)), []).append(p)

    records = []
    ordered = [(key, sorted(points, key=lambda q: q.point)) for key, points in sorted(groups.items())]
    all_parts = iter(_samples_of_points([p for _, points in ordered for p in points], warmup,
                                        run_meta.get("warmup"), jobs))
    for (test_id, hw), points in ordered:
        parts = [next(all_parts) for _ in points]
        samples = pd.concat(parts, ignore_index=True)
        if samples is None or len(samples) == 0:
            raise GemmperfInputError(points[0].dir, f"no samples left for {test_id!r} after warm-up removal")
        meta = {"run": run_meta, "results_dir": root.name, "refreshed_at": _now(),
                "points": {p.point: {**{k: p.doc.get(k) for k in ("kernels", "env", "command", "backend", "threshold")
                                        if p.doc.get(k) is not None}, **_profiled_seconds(p.doc),
                                     **_disturbance_field(point_disturbance(p.doc))}
                           for p in points}}
        records.append(BaselineRecord(test_id=test_id, hw_key=hw, samples=samples, meta=meta))
    return records


def point_disturbance(doc: dict) -> Disturbance:
    """The contention a results point's processes ran under (its point.json): the worst of
    the first look's and every re-run round's, since a baseline made from the point holds all
    their samples."""
    gate = doc.get("gate") if isinstance(doc.get("gate"), dict) else {}
    rounds = [r.get("disturbance") for r in gate.get("rounds") or [] if isinstance(r, dict)]
    worst = Disturbance(False)
    for d in (doc.get("disturbance"), *rounds):
        worst = worst_disturbance(worst, Disturbance.from_dict(d))
    return worst


def _disturbance_field(d: Disturbance) -> dict:
    # a baseline recorded on a busy machine is allowed for by every comparison against it
    return {"disturbance": d.as_dict()} if d.disturbed else {}


def _profiled_seconds(doc: dict) -> dict:
    """``{"duration_s": total}`` of a point's runs (what ``--gemmperf-shard`` balances by,
    shard.py), or nothing when the point.json records no run times (a replayed point)."""
    runs = doc.get("runs") if isinstance(doc.get("runs"), list) else []
    total = sum(float(r["duration_s"]) for r in runs
                if isinstance(r, dict) and isinstance(r.get("duration_s"), (int, float)))
    return {"duration_s": round(total, 3)} if total > 0 else {}


def check_point_tables(point_dir: Path) -> None:
    """Every table of a finished point (``*.parquet`` beside its point.json: dispatches,
    counters, agents, telemetry, the compared baseline's samples) is a regular file whose
    parquet footer reads, or one line naming it: a table cut short is never passed on quietly
    to a report, a merge or a later reader. The footer only: cheap for any number of points."""
    # lazy: the footer check needs pyarrow's parquet module, which pandas loads on first use too
    import pyarrow.parquet as pq

    for path in sorted(point_dir.glob("*.parquet")):
        if path.is_symlink() or not path.is_file():
            raise GemmperfInputError(path, "not a regular file")
        try:
            pq.read_metadata(path)
        except Exception as exc:  # pyarrow raises a zoo of types for foreign or truncated files
            raise GemmperfInputError(path, f"unreadable parquet: {_first_line(exc)}") from None


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises a zoo of types for foreign or truncated files
        raise GemmperfInputError(path, f"unreadable parquet: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def refresh_from_results(results_dir: str | os.PathLike, store: BaselineStore,
                         test_filter: str | None = None, *, warmup: int | None = None,
                         report: Callable[[str], None] | None = None,
                         replace: bool = False, jobs: int | None = 1,
                         allow_partial: bool = False) -> list[BaselineRecord]:
    """Promote a finished run to baselines without re-running it, all records in one
    transaction (a crash leaves all of them old or all new). Per point: the run's points
    replace the stored ones, stored points the run lacks (a run made with ``-k``) are kept
    unless ``replace``. Returns the records built from the run; those whose stored record
    would not change are returned too but not rewritten."""
    records = records_from_results(results_dir, test_filter, warmup=warmup, report=report, jobs=jobs,
                                   allow_partial=allow_partial)
    written = store.save_many(records, merge=not replace, report=report)
    if report:
        for rec, w in zip(records, written):
            report(f"{'updated' if w else 'unchanged'} {rec.hw_key} {rec.test_id}")
    return records
