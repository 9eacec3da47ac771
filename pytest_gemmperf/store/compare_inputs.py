"""Loading one side of a comparison: traces, results directories, baselines, samples files.

Shared by ``gemmperf compare`` (``commands/compare.py`` keeps only the argument wiring) and
anything else that gates outside a live pytest session. Each loader returns
``{test_id: samples}`` ('' when the input carries no test id); :func:`load_history` returns the
variance history a baselines store keeps per test; :func:`resolve_hardware_key` picks the
hardware key when a store holds several. Bad input raises :class:`GemmperfInputError` with
the path and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pytest_gemmperf.analysis.report_parts import SweepReduction
from pytest_gemmperf.analysis.source_totals import reduce_or_read, reduce_sources
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.compare import compare
from pytest_gemmperf.gate.confirm import CONFIRM, ConfirmConfig, PointJudge
from pytest_gemmperf.gate.gate_config import GateConfig
from pytest_gemmperf.run.environment import Disturbance
from pytest_gemmperf.run.telemetry import affected_processes, note_rows, slowest_process_notes
from pytest_gemmperf.run.telemetry import evidence as telemetry_evidence
from pytest_gemmperf.traces.fileio import read_json_object
from pytest_gemmperf.gate.samples import SAMPLE_COLUMNS
from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.traces.skipped import check_lost_inputs
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.hardware import trace_hardware_key
from pytest_gemmperf.traces.discover import load
from pytest_gemmperf.traces.schema import Trace
from pytest_gemmperf.store.results import resolve_results_dir
from pytest_gemmperf.store.results import results_samples
from pytest_gemmperf.gate.file_reduce import gate_inputs
from pytest_gemmperf.run.results import run_state
from pytest_gemmperf.traces.dirscan import NotALayout, check_recognisable
from pytest_gemmperf.run.results import newest_complete_run


def resolve_hardware_key(base: str | Path, cands: list[str], hw: str | None,
                         records: list | None) -> str | None:
    """The hardware key to read from a baselines store: ``hw`` when given; else, where some
    test is stored for several keys, the one the candidate results directories recorded
    (``run.json``); else None (every record)."""
    if hw is None and records and any(len(k) > 1 for k in hw_keys_by_test(records).values()):
        return results_hw_key(cands)
    return hw


def read_samples_file(p: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    except Exception as exc:  # pyarrow / csv parser errors vary; one line for the user
        raise GemmperfInputError(p, f"cannot read samples table: {exc}") from None
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise GemmperfInputError(p, f"not a samples table (lacks {', '.join(missing)})")
    return df[list(SAMPLE_COLUMNS)]


def baseline_records(p: Path, hw: str | None = None, recs: list | None = None) -> list | None:
    """Records when ``p`` is a baselines root, hardware dir or record dir; else None.

    ``hw`` keeps the records of that hardware key. Without it, a test recorded for several
    hardware keys is an error: pooling an MI300X and an MI350X baseline is no baseline.
    ``recs``: the records of ``p`` when already loaded."""
    recs = all_baseline_records(p) if recs is None else recs
    if recs is None:
        return None
    if hw is not None:
        keep = [r for r in recs if r.hw_key == hw]
        if recs and not keep:
            found = ", ".join(sorted({r.hw_key for r in recs}))
            raise GemmperfInputError(p, f"no baseline for hardware key {hw!r} (found: {found}); choose with --hw")
        return keep
    for test, ks in sorted(hw_keys_by_test(recs).items()):
        if len(ks) > 1:
            raise GemmperfInputError(p, f"holds {test!r} for {len(ks)} hardware keys ({', '.join(sorted(ks))}): "
                                        "choose one with --hw")
    return recs


def all_baseline_records(p: Path, damaged: list | None = None) -> list | None:
    """Every record of a baselines root, hardware dir or record dir (None when ``p`` is none).
    ``damaged``: a list that receives the errors of damaged records, which are then skipped
    (the others still compare); without it a damaged record raises."""
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

    if level == "root":
        return BaselineStore(p).load_all(damaged=damaged)
    if level == "hw":
        return BaselineStore(p.parent).load_all(p.name, damaged=damaged)
    rec = BaselineStore(p.parent.parent).load_path(p)  # this record only: others' damage is no matter
    return [] if rec is None else [rec]


def load_history(path: str, hw: str | None = None, records: list | None = None) -> dict[str, pd.DataFrame]:
    """``{test_id: variance history}`` when ``path`` is a baselines directory (the history the
    gate pools with each kernel's variance), else empty."""
    p = Path(path)
    recs = baseline_records(p, hw, records) if p.is_dir() else None
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
        p = newest_run(Path(path)) or Path(path)
        if not _is_results_dir(p):
            return None
        try:
            doc = json.loads((p / "run.json").read_text())
        except (OSError, ValueError, GemmperfInputError):
            return None
        key = doc.get("hardware_key") if isinstance(doc, dict) else None
        if not key:
            return None
        keys.add(str(key))
    return keys.pop() if len(keys) == 1 else None


def trace_hw_key(path: str, agents: dict) -> str | None:
    """The hardware key of a trace input from the agents :func:`load_side` collected for it
    (``gfx942-AMD_Instinct_MI300X-x8``), None when its traces list no GPU agent; results
    directories are keyed by their ``run.json`` instead (:func:`results_hw_key`)."""
    return trace_hardware_key(agents.get(path))


@dataclass(frozen=True)
class ReportInput:
    """What the reports read of one side (``report.write_reports``' ``dispatches``,
    ``counters`` and ``agents``): its dispatches reduced where each source was read
    (``analysis/report_parts.py``), or, where a report view joins several sources' dispatches
    (counters, torch collective metadata, one GPU's dispatches in two sources), its full tables."""

    dispatches: pd.DataFrame | SweepReduction
    counters: pd.DataFrame | None
    agents: pd.DataFrame | None

    @classmethod
    def of(cls, trace) -> "ReportInput":
        """The full tables of a ``traces.schema.Trace``."""
        return cls(trace.dispatches, trace.counters, trace.agents)


def load_side(path: str, warmup: int | None = 0, traces: dict | None = None,
              hw: str | None = None, records: list | None = None,
              jobs: int | None = 1, agents: dict | None = None,
              allow_partial: bool = False) -> dict[str, pd.DataFrame]:
    """``{test_id: samples}`` of one input ('' when the input carries no test id).

    Samples come from :func:`~pytest_gemmperf.gate.samples.gate_samples`, as in pytest and
    ``baseline refresh``: a results directory per test with each point's kernel regexes and
    warm-up (``warmup`` None: the recorded one), other traces with every kernel gated.
    ``traces``, when given, receives ``{path: ReportInput}`` for trace inputs and results
    directories: what the reports read of the dispatches, reduced where each source is read
    (the full tables only where a report view joins sources). ``jobs``: worker processes
    reading trace files or results points at once (None or 0: every usable core); without
    ``traces`` each trace file is read with the gate's columns only and reduced to its samples
    where it is read (``gate/file_reduce.py``; with ``traces`` read whole and reduced for the
    reports in the same pass), so the full dispatches table is never held, and the samples'
    text columns are categoricals (a dispatch's row holds codes, not its kernel's name; the
    gate reads them as it reads text); the samples are the same whatever ``jobs`` is.
    ``agents``, when given, receives ``{path: agents table}`` for trace inputs that list agents
    (with or without ``traces``): what names their hardware when no ``run.json`` does
    (:func:`trace_hw_key`). Results directories, baselines and samples files add nothing.
    An interrupted results run, or traces of which a file or directory could not be read (a
    rank or process lost), raise unless ``allow_partial``: a comparison missing part of its
    input must not pass quietly."""
    p = Path(path)
    if not p.exists():
        raise GemmperfInputError(p, "no such file or directory")
    if p.is_file() and (p.suffix == ".parquet" or (p.suffix == ".csv" and _is_samples_csv(p))):
        return {"": read_samples_file(p)}
    recs = baseline_records(p, hw, records)
    if recs is not None:
        if not recs:
            raise GemmperfInputError(p, "baselines directory holds no readable record")
        out: dict[str, list[pd.DataFrame]] = {}
        for r in recs:
            out.setdefault(str(r.test_id), []).append(r.samples)
        return {k: pd.concat(v, ignore_index=True) for k, v in out.items()}

    run = newest_run(p, report=_note)
    if run is not None:
        # as `baseline refresh --from .gemmperf/results`: the newest run, not all runs pooled
        print(printable(f"note: {p}: holds {run.name} and older runs; comparing the newest complete one, {run}"),
              file=sys.stderr)
        p = run
    elif _holds_runs(p):
        resolve_results_dir(p)  # raises: no run there is complete
    if _is_results_dir(p):
        out = results_samples(p, warmup=warmup, jobs=jobs, allow_partial=allow_partial, report=_note)
        if traces is not None:
            traces[path] = _complete_points_report(p, jobs, warmup or 0)
        return out
    if p.is_dir():
        _check_trace_dir(p)  # before any reader: an unrelated tree is one line naming it
    inputs = gate_inputs([p], jobs=jobs, warmup=warmup or 0, compact=False, path=p, stats=False,
                         categorical=True, reports=traces is not None)
    samples, found, skipped = inputs.samples, inputs.agents, inputs.skipped
    if traces is not None:
        traces[path] = _report_input(inputs, [p], jobs)
    check_lost_inputs(p, skipped, allow_partial)
    if agents is not None and found is not None and len(found):
        agents[path] = found
    for note in samples.attrs.get("notes", []):
        print(printable(f"note: {p}: {note}"), file=sys.stderr)
    return {"": samples}


def _note(text: str) -> None:
    print(text if text.startswith("note: ") else f"note: {text}", file=sys.stderr)


def _report_input(inputs, paths: list[Path], jobs: int | None) -> ReportInput:
    """What the reports read of a trace side from its gate inputs (``gate_inputs(reports=True)``):
    the reduction, else (a report view joins sources) the full tables it read, each source once
    where it could."""
    if inputs.sweep is not None:
        return ReportInput(inputs.sweep, None, inputs.agents)
    return ReportInput.of(inputs.trace if inputs.trace is not None else load(paths, jobs=jobs))


def _complete_points(root: Path) -> list[Path]:
    """A run's complete points (an interrupted point's raw outputs must not join them): the run
    itself when it is complete."""
    state = run_state(root)
    return [root] if state.is_complete else [root / rel for rel in state.complete]


def results_agents(path: str, jobs: int | None = 1) -> pd.DataFrame | None:
    """The agents of the complete points of the results run ``path`` names (a parent's newest
    complete run), as the reports read them; None for any other input or where none are listed:
    what names a run's hardware when its ``run.json`` does not."""
    p = newest_run(Path(path)) or Path(path)
    if not _is_results_dir(p):
        return None
    found = reduce_sources(_complete_points(p), jobs=jobs).agents
    return found if len(found) else None


def _complete_points_report(root: Path, jobs: int | None, warmup: int) -> ReportInput:
    """What the reports read of a run's complete points only, reduced point by point where the
    views allow."""
    reduced = reduce_or_read(_complete_points(root), jobs=jobs, warmup=warmup)
    if isinstance(reduced, Trace):  # a view joins sources (counters, collective metadata)
        return ReportInput.of(reduced)
    return ReportInput(reduced.sweep(), None, reduced.agents)


def _check_trace_dir(p: Path) -> None:
    """Refuse a directory that is no known layout (``traces/dirscan.py``), naming the baselines
    store as one more thing it could have been (``gemmperf compare baselines/ ...`` before any
    baseline was recorded: the store has no ``<hw_key>/<test>/meta.json`` yet)."""
    try:
        check_recognisable(p)
    except NotALayout as exc:
        raise GemmperfInputError(p, "not a baselines store (no <hw_key>/<test>/meta.json: nothing "
                                    "recorded yet?), results, rocprofv3 output or sweep directory"
                                 + exc.detail) from None


def hw_keys_by_test(recs: list) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for r in recs:
        keys.setdefault(str(r.test_id), set()).add(r.hw_key)
    return keys


def newest_run(p: Path, report=None) -> Path | None:
    """The newest complete run when ``p`` is the parent of timestamped results directories
    (``.gemmperf/results``: children holding ``run.json``) and no results directory itself;
    else None. Timestamps (``YYYY-mm-ddTHH-MM-SS``) sort by name; ``report`` names each newer
    run that is not complete (``run/results.py``)."""
    if not p.is_dir() or _is_results_dir(p):
        return None

    return newest_complete_run(p, report)


def _holds_runs(p: Path) -> bool:
    """``p`` is the parent of results runs (none of which need be complete)."""
    try:
        return p.is_dir() and not _is_results_dir(p) and any(
            (c / "run.json").is_file() for c in p.iterdir() if not c.is_symlink())
    except OSError:
        return False


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


def pair_tests(base: dict[str, pd.DataFrame], cand: dict[str, pd.DataFrame], base_path: str, cand_path: str
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


# ------------------------------------------------------------------------------------------
# one decision wherever it is read: what the pytest gate used, recorded with the run
# (point.json ``gate``), and the same decision taken again from it by ``gemmperf compare``

#: point.json ``gate`` layout version
GATE_EVIDENCE_VERSION = 1


def runs_of(dispatches: pd.DataFrame) -> list[int]:
    """The process runs (``run`` numbers) a dispatches table holds."""
    if dispatches is None or "run" not in dispatches.columns or not len(dispatches):
        return []
    runs = pd.to_numeric(pd.Series(pd.unique(dispatches["run"])), errors="coerce").dropna()
    return sorted(int(r) for r in runs)


def unit_runs(samples: pd.DataFrame) -> pd.Series:
    """Per samples row, the run of its unit (``host/pid/rank/run``; -1 where it has none)."""
    run = samples["unit"].astype(str).str.rsplit("/", n=1).str[-1]
    return pd.to_numeric(run, errors="coerce").fillna(-1).astype("int64")


def samples_digest(samples: pd.DataFrame | None) -> str:
    """A digest of a samples table's content, independent of row order and dtypes: whether the
    baseline compared against is the one a run was gated against."""
    if samples is None or not len(samples):
        return ""
    keys = ["point", "kernel", "metric", "unit"]
    d = samples[keys + ["value"]].astype({k: str for k in keys}).astype({"value": float})
    d = d.sort_values(keys + ["value"], kind="mergesort")
    return hashlib.sha256(pd.util.hash_pandas_object(d, index=False).to_numpy().tobytes()).hexdigest()


def baseline_disturbance(meta: object, point: str) -> Disturbance:
    """The contention of the run that recorded ``point`` of a baseline record (its meta
    ``points[point].disturbance``); undisturbed when the record says nothing."""
    points = meta.get("points") if isinstance(meta, dict) else None
    doc = points.get(point) if isinstance(points, dict) else None
    return Disturbance.from_dict(doc.get("disturbance") if isinstance(doc, dict) else None)


def gate_evidence(cfg: GateConfig, confirm: ConfirmConfig, record_path: Path, base, base_pt: pd.DataFrame,
                  history: pd.DataFrame | None, dispatches: pd.DataFrame, disturbance: Disturbance,
                  base_disturbance: Disturbance | None = None) -> dict:
    """point.json ``gate`` as the first look knows it: the rule in force, the baseline's
    identity, the contention it was recorded under and the variance history runs used, the
    first look's processes and disturbance; each re-run round appends its :func:`round_record`."""
    return {"version": GATE_EVIDENCE_VERSION, "threshold": cfg.threshold, "fdr": cfg.fdr,
            "confirm_rounds": confirm.rounds,
            "baseline": {"record": str(record_path), "generation": int(getattr(base, "generation", 0) or 0),
                         "samples_sha256": samples_digest(base_pt),
                         "disturbance": (base_disturbance or Disturbance(False)).as_dict(),
                         "history_runs": (sorted(set(history["run"].astype(str))) if history is not None
                                          and len(history) else [])},
            "first": {"runs": runs_of(dispatches), "disturbance": disturbance.as_dict()},
            "rounds": []}


def round_record(kind: str, dispatches: pd.DataFrame, disturbance: Disturbance, waited_s: float = 0.0) -> dict:
    """One re-run round of point.json ``gate``: its kind, processes, disturbance, wait."""
    return {"kind": kind, "runs": runs_of(dispatches), "disturbance": disturbance.as_dict(),
            "waited_s": round(float(waited_s or 0.0), 3)}


def telemetry_notes(verdicts: pd.DataFrame, telemetry: dict | None, dispatches: pd.DataFrame | None) -> pd.DataFrame:
    """Each verdict row names the telemetry evidence of the point's processes (point.json
    ``telemetry``); a slower kernel's row says whether its slowest process was throttled."""
    tele = telemetry if isinstance(telemetry, dict) else {}
    reasons, _ = telemetry_evidence(tele.get("summary"))
    verdicts = slowest_process_notes(verdicts, dispatches, affected_processes(tele.get("summary")))
    return note_rows(verdicts, reasons)


@dataclass(frozen=True)
class GatedPoint:
    """A results point the pytest gate judged: its point.json and directory."""

    doc: dict
    dir: Path

    @property
    def gate(self) -> dict | None:
        g = self.doc.get("gate")
        ok = (isinstance(g, dict) and isinstance(g.get("first"), dict) and isinstance(g.get("rounds"), list)
              and isinstance(g.get("threshold"), (int, float)) and isinstance(g.get("fdr"), (int, float)))
        return g if ok else None

    @property
    def compared(self) -> bool:
        """pytest compared this point with a baseline (rather than recording one)."""
        return isinstance(self.doc.get("verdicts"), dict)


def gated_points(path: str) -> dict[str, dict[str, GatedPoint]]:
    """``{test: {point: GatedPoint}}`` of a results directory (its newest complete run for a
    parent), empty for any other input."""
    p = Path(path)
    run = newest_run(p) or p
    out: dict[str, dict[str, GatedPoint]] = {}
    if not _is_results_dir(run):
        return out
    for pj in sorted(run.glob("*/*/point.json")):
        doc = read_json_object(pj)
        if isinstance(doc.get("test_id"), str):
            out.setdefault(doc["test_id"], {})[str(doc.get("point") or pj.parent.name)] = GatedPoint(doc, pj.parent)
    return out


def replay_gate(test: str, point: str, base_pt: pd.DataFrame, cand_pt: pd.DataFrame,
                history: pd.DataFrame | None, gated: GatedPoint) -> tuple[pd.DataFrame, list[str]]:
    """The pytest gate's decision of one point taken again from what it recorded: the same
    rule, the same first look, confirmation and decide rounds on the same processes, the same
    disturbance, the baseline's variance history as it was, the same telemetry notes. Returns
    (verdicts, what could not be reproduced: the baseline or its history changed since)."""
    gate = gated.gate
    problems: list[str] = []
    base_rec = gate.get("baseline") if isinstance(gate.get("baseline"), dict) else {}
    if base_rec.get("samples_sha256") and samples_digest(base_pt) != base_rec["samples_sha256"]:
        problems.append(f"the baseline's samples differ from those gated against ({base_rec.get('record')}, "
                        f"generation {base_rec.get('generation')})")
    hist = history[history["point"].astype(str) == point] if history is not None and len(history) else None
    used = [str(r) for r in base_rec.get("history_runs") or []]
    if hist is not None:
        have = set(hist["run"].astype(str))
        lost = [r for r in used if r not in have]
        if lost:
            problems.append(f"{len(lost)} variance-history run(s) the gate pooled are no longer in the baseline "
                            f"({lost[0]}{', ...' if len(lost) > 1 else ''})")
        hist = hist[hist["run"].astype(str).isin(used)]
        hist = hist if len(hist) else None
    elif used:
        problems.append(f"the baseline has no variance history; the gate pooled {len(used)} run(s)")
    cfg = GateConfig(threshold=float(gate["threshold"]), fdr=float(gate["fdr"]))
    runs = unit_runs(cand_pt)
    first = gate["first"]

    def rows(of: dict) -> pd.DataFrame:
        return cand_pt[runs.isin([int(r) for r in of.get("runs") or []]).to_numpy()]

    judge = PointJudge(lambda cand, gate_cfg: compare(base_pt, cand, gate_cfg, test=test, history=hist),
                       rows(first), cfg, ConfirmConfig(rounds=int(gate.get("confirm_rounds") or 0)),
                       Disturbance.from_dict(first.get("disturbance")),
                       Disturbance.from_dict(base_rec.get("disturbance")))
    for r in gate["rounds"]:
        if isinstance(r, dict):
            judge.add_round(rows(r), Disturbance.from_dict(r.get("disturbance")), kind=str(r.get("kind") or CONFIRM))
    dispatches = None
    if _telemetry_affects(gated.doc.get("telemetry")):
        try:
            dispatches = pd.read_parquet(gated.dir / "dispatches.parquet")
        except (OSError, ValueError) as exc:
            problems.append(f"telemetry notes not reproduced: cannot read dispatches.parquet: {exc}")
    return telemetry_notes(judge.verdicts, gated.doc.get("telemetry"), dispatches), problems


def _telemetry_affects(telemetry: object) -> bool:
    """Whether the telemetry names an affected process (the slowest-process notes need the
    point's dispatches only then)."""
    return isinstance(telemetry, dict) and bool(affected_processes(telemetry.get("summary")))
