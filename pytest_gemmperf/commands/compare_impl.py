"""The work of ``gemmperf compare``. Its parser is :mod:`pytest_gemmperf.commands.compare`, which
imports this module only when the command runs, so ``gemmperf --help`` loads neither pandas
nor scipy.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Iterator, Sequence

import pandas as pd

from pytest_gemmperf.commands.argtypes import add_allow_partial, non_negative
from pytest_gemmperf.commands.helpfmt import command_description
from pytest_gemmperf.errors import GemmperfInputError, failure_line
from pytest_gemmperf.config import BY_NAME, Origin, SettingError, add_cli_option, format_threshold, parse_threshold
from pytest_gemmperf.gate.compare import GateConfig, compare
from pytest_gemmperf.store.compare_inputs import (  # noqa: F401 - load_side/load_history/results_hw_key: public here too
    GatedPoint, _holds_runs, _is_results_dir, all_baseline_records, baseline_records, gated_points, load_history,
    load_side, newest_run, pair_tests, replay_gate, resolve_hardware_key, results_hw_key, trace_hw_key)
from pytest_gemmperf.gate.confirm import apply_baseline_disturbance
from pytest_gemmperf.gate.outcome import FAILED, UNDECIDED, counts_text, outcome_counts, point_outcomes
from pytest_gemmperf.gate.headline import format_verdict_table
from pytest_gemmperf.gate.verdict import REGRESSION, VERDICTS_CSV_COLUMNS, verdicts_csv_order
from pytest_gemmperf.textsafe import printable, printable_frame
from pytest_gemmperf.workdir import default_output_dir
from pytest_gemmperf.commands.defaults import COMPARE_FDR
from pytest_gemmperf.commands.defaults import COMPARE_OUT as DEFAULT_OUT
from pytest_gemmperf.safe_io import write_csv
from pytest_gemmperf.commands.history_impl import record_compare_candidate
from pytest_gemmperf.traces.fileio import read_json_object
from pytest_gemmperf.run.environment import Disturbance
from pytest_gemmperf.store.results import point_disturbance
from pytest_gemmperf.gate.benchmark_export import write_pytest_benchmark_json
from pytest_gemmperf.report import ComparedSamples, write_reports


#: verdicts.csv column order: the one the pytest session writes too (test first, contract
#: columns in ARCHITECTURE order, label, diagnostics, other extras by name)
CSV_COLUMNS = VERDICTS_CSV_COLUMNS
#: exit status of a comparison with an undecided point (no regression), per ``--undecided``
EXIT_UNDECIDED = {"fail": 1, "skip": 4, "pass": 0}


def run(args: argparse.Namespace) -> int:
    with input_errors():
        return _run(args)


@contextlib.contextmanager
def input_errors() -> Iterator[None]:
    """What the OS raises while reading or writing, as one line naming the file."""
    try:
        yield
    except (OSError, UnicodeError) as exc:
        raise GemmperfInputError(getattr(exc, "filename", None), str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    g = gate(args)
    out, unwritten = write_outputs(args, g, Path(args.out) if args.out else None,
                                   report=getattr(args, "report", True))
    counts = g.verdicts["verdict"].value_counts()
    outcomes = point_outcomes(g.verdicts)
    by_outcome = outcome_counts(o for _, o in outcomes)
    print(printable(threshold_line(g.used, g.threshold, g.origin.text)))
    print(format_verdict_table(printable_frame(g.verdicts), args.max_rows, warmup=args.warmup))
    print(printable("verdicts: " + ", ".join(f"{k} {int(n)}" for k, n in counts.items()) + f" -> {out / 'verdicts.csv'}"))
    print(printable("points: " + counts_text(by_outcome)))
    for key, o in outcomes:
        if o.outcome == UNDECIDED:
            print(printable(f"undecided: {_point_name(key)}: {o.reason}; to decide: {o.decide}"), file=sys.stderr)
    policy = undecided_policy(args)
    status = exit_status(g.verdicts, len(g.damaged), policy, by_outcome)
    n_reg = int(counts.get(REGRESSION, 0))
    if unwritten:  # the verdicts stand; an output that is not there is exit 2 unless 1 says more
        print(printable(f"gemmperf: report not written: {unwritten}"), file=sys.stderr)
        status = 1 if status == 1 else 2
    if n_reg:
        print(printable(f"gemmperf: {n_reg} regression(s) ({by_outcome.get(FAILED, 0)} failed point(s))"),
              file=sys.stderr)
    elif g.damaged:
        print(printable(f"gemmperf: {len(g.damaged)} damaged baseline record(s) not compared"), file=sys.stderr)
    elif by_outcome.get(UNDECIDED, 0):
        print(printable(f"gemmperf: {by_outcome[UNDECIDED]} undecided point(s) (--undecided {policy}: "
                        f"exit {status})"), file=sys.stderr)
    return status


def undecided_policy(args: argparse.Namespace) -> str:
    """``--undecided`` in force (the project's setting, else ``skip``)."""
    return getattr(args, "undecided", None) or "skip"


def exit_status(verdicts: pd.DataFrame, n_damaged: int, undecided: str = "skip",
                by_outcome: dict[str, int] | None = None) -> int:
    """The command's exit status for its verdicts: 1 when any is a regression (what CI reads as
    "the code got slower"), 2 when damaged baseline records were not compared, then for an
    undecided point :data:`EXIT_UNDECIDED` of the ``--undecided`` policy, else 0.
    ``by_outcome``: the verdicts' :func:`outcome_counts`, when the caller has them already."""
    if (verdicts["verdict"] == REGRESSION).any():
        return 1
    if n_damaged:
        return 2
    if by_outcome is None:
        by_outcome = outcome_counts(o for _, o in point_outcomes(verdicts))
    if by_outcome.get(UNDECIDED, 0):
        return EXIT_UNDECIDED[undecided]
    return 0


@dataclasses.dataclass
class Gated:
    """What ``gemmperf compare`` decided before writing anything."""

    verdicts: pd.DataFrame
    labels: list[str]
    threshold: float
    origin: Origin
    #: per test and point: (the test's own rule or None, where it was recorded)
    used: dict[str, dict[str, tuple[float | None, str]]]
    damaged: list
    base: dict[str, pd.DataFrame]
    cand_samples: list[tuple[str, dict]]
    #: input path -> its trace (only when the reports were asked for)
    traces: dict
    compared: list


def gate(args: argparse.Namespace) -> Gated:
    """The verdicts of the command's candidates against its baseline (settings already resolved
    on ``args``); appends to ``--history`` as it goes. Tables for the reports are kept when
    ``args.report``."""
    mistake = argument_order_error(args.base, list(args.cands), getattr(args, "argv", None))
    if mistake is not None:
        raise mistake
    base_arg = _base(args)
    labels = candidate_labels(args.labels, args.cands)
    threshold = GateConfig().threshold if args.threshold is None else args.threshold
    origin = getattr(args, "setting_origins", {}).get("threshold") or Origin("default", "default")
    explicit = origin.kind == "flag"  # --threshold given: every test, whatever it recorded
    cfg = GateConfig(threshold=threshold, fdr=args.fdr, warmup=args.warmup or 0, abs_floor_ns=args.abs_floor_ns,
                     per_kernel=[(rx, _kernel_threshold(rx, t)) for rx, t in args.kernel_threshold])
    traces: dict = {}
    keep = traces if getattr(args, "report", True) else None  # tables only for the reports
    # a store with several hardware keys: the one asked for, else the candidates' own
    base_path = Path(base_arg)
    damaged: list = []  # damaged baseline records: named and skipped, the others still compare
    base_recs = all_baseline_records(base_path, damaged) if base_path.is_dir() else None
    for err in damaged:
        print(printable(f"error: {err} (record skipped)"), file=sys.stderr)
    hw = resolve_hardware_key(base_path, args.cands, getattr(args, "hw", None), base_recs)
    jobs = getattr(args, "jobs", 0)
    partial = getattr(args, "allow_partial", False)
    try:
        base = load_side(base_arg, args.warmup, keep, hw=hw, records=base_recs, jobs=jobs, allow_partial=partial)
    except GemmperfInputError as exc:
        raise _with_store_hint(exc, args, base_recs) from None
    history = load_history(base_arg, hw, records=base_recs)
    hw_recs = baseline_records(base_path, hw, base_recs) if base_recs is not None else None
    base_rules = {} if explicit else recorded_rules(base_arg, hw_recs)
    base_noise = recorded_disturbances(base_arg, hw_recs)
    frames = []
    cand_samples = []
    compared: list = []  # what each compare() call received: the report draws it per process
    used: dict[str, dict[str, tuple[float | None, str]]] = {}
    # the gate's own decision of a run pytest gated, unless options change the rule it used
    changed = _rule_options(args, explicit)
    for label, cpath in zip(labels, args.cands):
        agents: dict = {}  # a trace candidate's agents: its hardware key in --history
        cand = load_side(cpath, args.warmup, keep, jobs=jobs, agents=agents, allow_partial=partial)
        cand_samples.append((label, cand))
        if getattr(args, "history", None):

            record_compare_candidate(args.history, args.run_id, cpath, label, cand, len(args.cands), keep,
                                     hw=trace_hw_key(cpath, agents))
        cand_rules = {} if explicit else recorded_rules(cpath)
        gated = gated_points(cpath)
        if changed and any(g.compared for pts in gated.values() for g in pts.values()):
            _note(f"{cpath}: gated by pytest; compared with {changed} instead of the rule the gate used: "
                  "verdicts may differ from pytest's")
        for test, b, c in pair_tests(base, cand, base_arg, cpath):
            rules = point_rules(test, _points(b, c), base_rules, cand_rules)
            used.setdefault(test, {}).update(rules)
            v = compare_test(b, c, cfg, test, history.get(test), rules,
                             gated={} if changed else gated.get(test, {}), base_noise=base_noise.get(test))
            if keep is not None:
                compared.append((test, b, c, label))
            if len(args.cands) > 1:
                v.insert(0, "label", label)
            frames.append(v)
    verdicts = pd.concat(frames, ignore_index=True)
    return Gated(verdicts, labels, threshold, origin, used, damaged, base, cand_samples, traces, compared)


def candidate_labels(given: Sequence[str] | None, cands: Sequence[str]) -> list[str]:
    """The candidates' labels: ``--labels`` (one each, no two alike: the verdicts and the report
    tell candidates apart by them), else :func:`path_labels` of their paths."""
    if not given:
        return path_labels(cands)
    if len(given) != len(cands):
        raise GemmperfInputError(None, f"--labels needs {len(cands)} label(s), got {len(given)}")
    twice = sorted({x for x in given if list(given).count(x) > 1})
    if twice:
        raise GemmperfInputError(None, f"--labels: {', '.join(map(repr, twice))} given for more than one "
                                       "candidate: each needs its own label")
    return list(given)


def path_labels(paths: Sequence[str]) -> list[str]:
    """Distinct labels for ``paths``: each one's shortest trailing part that no other path ends in
    at that depth (``run`` where the names differ; ``a/run`` and ``b/run`` for two ``run``
    directories), numbered where two paths read alike (``run``, ``run (2)``)."""
    parts = [Path(p).parts or (str(p),) for p in paths]
    labels = []
    for own in parts:
        k = 1
        while k < len(own) and any(other[-k:] == own[-k:] for other in parts if other != own):
            k += 1
        labels.append(str(Path(*own[-k:])))
    return numbered(labels)


def numbered(labels: Sequence[str], taken: Sequence[str] = ()) -> list[str]:
    """``labels`` with each repeat (and each one in ``taken``) given the first ``" (n)"`` suffix,
    n = 2, 3, ..., that names no other: no two alike and none in ``taken``; the first of each is
    kept as it is."""
    used = set(taken) | set(labels)
    seen: set[str] = set()
    out = []
    for label in labels:
        name, n = label, 1
        while name in seen or (name != label and name in used) or name in taken:
            n += 1
            name = f"{label} ({n})"
        seen.add(name)
        used.add(name)
        out.append(name)
    return out


def write_outputs(args: argparse.Namespace, g: Gated, out: Path | None, *,
                  report: bool) -> tuple[Path, str | None]:
    """verdicts.csv (and ``--benchmark-json``, and with ``report`` the reports) into ``out``
    (None: a new default output directory); returns the directory and why the report could not
    be written (None when it was)."""
    out = out or default_output_dir(DEFAULT_OUT)
    out.mkdir(parents=True, exist_ok=True)

    write_csv(verdicts_csv_order(g.verdicts), out / "verdicts.csv")  # formulas neutralised, no link followed
    if args.benchmark_json:
        _export(args.benchmark_json, g.base, g.cand_samples)
    unwritten = _write_reports(args, g.labels, g.verdicts, g.traces, out, g.compared) if report else None
    return out, unwritten


def _point_name(key: tuple[str, ...]) -> str:
    """``[label: ]test[point]`` of a :func:`point_outcomes` key (traces carry neither a test
    id nor a point: ``the comparison``)."""
    label, test, point = ("", *key) if len(key) == 2 else key if len(key) == 3 else ("", "", "/".join(key))
    name = (test or "the comparison") + (f"[{point}]" if point not in ("", "-") else "")
    return f"{label}: {name}" if label else name


def _rule_options(args: argparse.Namespace, explicit: bool) -> str:
    """The options given that change the rule the pytest gate used ("" when none): with them
    a gated run is compared anew rather than judged as the gate judged it."""
    given = [name for name, on in (("--threshold", explicit), ("--kernel-threshold", bool(args.kernel_threshold)),
                                   ("--fdr", args.fdr != COMPARE_FDR), ("--abs-floor-ns", bool(args.abs_floor_ns)),
                                   ("--warmup", args.warmup is not None)) if on]
    return ", ".join(given)


def _note(text: str) -> None:
    print(printable(f"note: {text}"), file=sys.stderr)


STORE, RESULTS, OTHER = "baseline store", "results directory", "other"


def input_kind(path: str) -> str:
    """What an argument is, from its content: a baseline store (a root, hardware or record
    directory: ``meta.json`` records), a results directory (``run.json``, or the parent of
    such runs), or anything else (traces, samples files, paths that do not exist)."""
    p = Path(path)
    try:
        if not p.is_dir():
            return OTHER
        metas = (p / "meta.json", *p.glob("*/meta.json"), *p.glob("*/*/meta.json"))
        if any(_is_record_meta(m) for m in metas):
            return STORE
        if _is_results_dir(p) or _holds_runs(p):
            return RESULTS
    except OSError:  # unreadable: the loaders say so, naming the path
        return OTHER
    return OTHER


def _is_record_meta(path: Path) -> bool:
    """A baseline record's ``meta.json`` (its ids inside), not any file of that name a trace
    directory may hold."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("test_id"), str) and isinstance(doc.get("hw_key"), str)


def argument_order_error(base: str | None, cands: list[str], argv: list[str] | None) -> GemmperfInputError | None:
    """The one-line error of a baseline store given as a candidate while the baseline is not one
    (``gemmperf compare RESULTS STORE``: the inverted comparison would pass a regression as an
    improvement), with the corrected command where one exists; None when the order is right.
    Judged by content (:func:`input_kind`), never by names; two stores compare as given."""
    stores = [c for c in cands if input_kind(c) == STORE]
    if not stores:
        return None
    store = stores[0]
    if base is None:
        return GemmperfInputError(store, "a baseline store given as the candidate; did you mean: "
                                         + _command(argv, [base, *cands], [store, "CAND"])
                                         + " (CAND: a results directory, traces or a samples file)")
    base_kind = input_kind(base)
    if base_kind == STORE:
        return None  # two stores: their records compared, a question of its own
    if len(stores) > 1:
        return GemmperfInputError(store, f"{len(stores)} baseline stores given as candidates: a candidate is "
                                         "a run (results directory, traces or a samples file), and one store "
                                         "is the baseline (the first argument)")
    rest = [c for c in cands if c != store]
    what = f"{shlex.quote(base)}, given as the baseline, is a {base_kind}" if base_kind != OTHER else \
        f"{shlex.quote(base)} was given as the baseline"
    return GemmperfInputError(store, f"a baseline store given as the candidate ({what}); did you mean: "
                                     + _command(argv, [base, *cands], [store, base, *rest]))


def _command(argv: list[str] | None, given: list[str | None], fixed: list[str]) -> str:
    """``gemmperf compare`` with the positional arguments ``given`` replaced by ``fixed`` and
    every option of ``argv`` kept in place, each word quoted for a POSIX shell."""
    words = list(argv) if argv else ["compare"]
    at = words.index("compare") + 1 if "compare" in words else 0
    head, tail = words[:at] or ["compare"], words[at:]
    for g in given:  # drop the positionals as given, first occurrence each
        if g is not None and g in tail:
            tail.remove(g)
    return " ".join(shlex.quote(w) for w in ["gemmperf", *head, *fixed, *tail])


def _base(args: argparse.Namespace) -> str:
    """BASE as given, else the baseline store (``--baseline-dir``, else the project's
    ``gemmperf_baseline_dir``, else ``baselines``): the store pytest gates against."""
    origins = getattr(args, "setting_origins", {})
    if args.base is None:
        store = args.baseline_dir or BY_NAME["baseline_dir"].default
        print(printable(f"note: comparing against the baseline store {store}"), file=sys.stderr)
        return str(store)
    if "baseline_dir" in origins and origins["baseline_dir"].kind == "flag":
        raise SettingError("--baseline-dir names the store compared against when BASE is not given: "
                           "give BASE or --baseline-dir, not both")
    return args.base


def _with_store_hint(exc: GemmperfInputError, args: argparse.Namespace, base_recs: list | None) -> Exception:
    """``exc``, naming the project's baseline store when BASE was a directory holding no baseline
    while the store lies elsewhere (``gemmperf compare baselines/ ...`` in a project that keeps its
    store in ``gemmperf_baseline_dir``)."""
    store = getattr(args, "baseline_dir", None)
    if (args.base is None or base_recs or store is None or not Path(args.base).is_dir()
            or not Path(store).is_dir() or Path(args.base).resolve() == Path(store).resolve()):
        return exc
    return GemmperfInputError(exc.path, f"{exc.message} (the project's baseline store is {store}: "
                                        "`gemmperf compare CAND` compares against it)")


def _kernel_threshold(regex: str, text: str) -> float:
    try:
        return parse_threshold(text)
    except ValueError as exc:
        raise SettingError(f"--kernel-threshold {regex}: {exc}") from None


#: ``{test: {point: rule}}`` as recorded with an input; None: recorded as "no rule of its own"
Rules = dict[str, dict[str, "float | None"]]


def _point_docs(path: str, records: list | None) -> Iterator[tuple[str, str, dict, object]]:
    """(test, point, what it recorded, where) of every point of an input: a baseline record's
    point metadata (``records``), or a results directory's ``point.json`` (the newest complete
    run of a parent, as :func:`load_side` reads it)."""
    if records is not None:
        for rec in records:
            points = rec.meta.get("points") if isinstance(rec.meta, dict) else None
            for point, doc in (points if isinstance(points, dict) else {}).items():
                if isinstance(doc, dict):
                    yield str(rec.test_id), str(point), doc, rec.test_id
        return
    p = Path(path)
    run = newest_run(p) or p
    if not _is_results_dir(run):
        return
    for pj in sorted(run.glob("*/*/point.json")):
        doc = read_json_object(pj)
        if isinstance(doc.get("test_id"), str):
            yield doc["test_id"], str(doc.get("point") or pj.parent.name), doc, pj


def recorded_rules(path: str, records: list | None = None) -> Rules:
    """Each test's own threshold (``assert_no_regression(threshold=...)``) as the input recorded
    it (:func:`_point_docs`). Only points that recorded one appear (a results point always
    records it, None for no rule)."""
    out: Rules = {}
    for test, point, doc, where in _point_docs(path, records):
        if "threshold" in doc:
            out.setdefault(test, {})[point] = _rule(doc["threshold"], where)
    return out


#: ``{test: {point: Disturbance}}``: the contention each baseline point was recorded under
Disturbances = dict[str, dict[str, Disturbance]]


def recorded_disturbances(path: str, records: list | None = None) -> Disturbances:
    """The disturbed points of a baseline side (:func:`_point_docs`): the contention a record
    was recorded under, or a results point's processes ran under (as a refresh would record
    it). Undisturbed points are left out."""
    out: Disturbances = {}
    for test, point, doc, _ in _point_docs(path, records):
        d = point_disturbance(doc)
        if d.disturbed:
            out.setdefault(test, {})[point] = d
    return out


def _rule(value: object, where: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise GemmperfInputError(str(where), f"recorded threshold {value!r} is not a relative change >= 0")
    return float(value)


def _points(b: pd.DataFrame, c: pd.DataFrame) -> list[str]:
    return sorted({str(x) for x in pd.unique(b["point"])} | {str(x) for x in pd.unique(c["point"])})


def point_rules(test: str, points: list[str], base: Rules, cand: Rules) -> dict[str, tuple[float | None, str]]:
    """Per point: (the test's own threshold or None, where it was recorded). The candidate's
    record wins (the rule the test had when that run was gated, as pytest gated it), else the
    baseline's."""
    out: dict[str, tuple[float | None, str]] = {}
    for point in points:
        if point in cand.get(test, {}):
            rule = cand[test][point]
            out[point] = (rule, "candidate run" if rule is not None else "")
        elif point in base.get(test, {}):
            rule = base[test][point]
            out[point] = (rule, "baseline" if rule is not None else "")
        else:
            out[point] = (None, "")
    return out


def compare_test(b: pd.DataFrame, c: pd.DataFrame, cfg: GateConfig, test: str, history,
                 rules: dict[str, tuple[float | None, str]],
                 gated: dict[str, GatedPoint] | None = None,
                 base_noise: dict[str, Disturbance] | None = None) -> pd.DataFrame:
    """:func:`compare` of one test at its own threshold where it recorded one, else at
    ``cfg.threshold``. Points whose rules differ are compared in groups of one threshold each
    (pytest gates every point on its own). ``gated``: the points pytest gated, with what the
    gate recorded (``store.compare_inputs.GatedPoint``): each is judged as the gate judged it
    (``replay_gate``), and what cannot be reproduced is said on stderr. ``base_noise``: the
    contention each baseline point was recorded under (:func:`recorded_disturbances`), allowed
    for in the points compared anew (a replayed point uses what the gate recorded)."""

    def anew(bg: pd.DataFrame, cg: pd.DataFrame, thr: float) -> pd.DataFrame:
        v = compare(bg, cg, dataclasses.replace(cfg, threshold=thr), test=test, history=history)
        return _allow_for_baseline(v, base_noise or {})

    frames = []
    replayed: set[str] = set()
    for point, g in sorted((gated or {}).items()):
        if not g.compared:
            continue  # pytest recorded a baseline there: nothing was judged
        if g.gate is None:
            _note(f"{test}[{point}]: gated without a record of the gate's evidence (point.json has no "
                  "'gate': a run of an older gemmperf): compared as one look, without its confirmation "
                  "rounds, disturbance or the variance history it used; verdicts may differ from pytest's")
            continue
        bp, cp = b[b["point"].astype(str) == point], c[c["point"].astype(str) == point]
        if cp.empty or bp.empty:
            continue
        v, problems = replay_gate(test, point, bp, cp, history, g)
        for problem in problems:
            _note(f"{test}[{point}]: not reproduced as gated: {problem}")
        frames.append(v)
        replayed.add(point)
    if replayed:
        b, c = b[~b["point"].astype(str).isin(replayed)], c[~c["point"].astype(str).isin(replayed)]
        if c.empty and b.empty:
            return pd.concat(frames, ignore_index=True)
    groups: dict[float, list[str]] = {}
    for point in _points(b, c):
        rule = rules.get(point, (None, ""))[0]
        groups.setdefault(cfg.threshold if rule is None else rule, []).append(point)
    if len(groups) <= 1:
        thr = next(iter(groups), cfg.threshold)
        frames.append(anew(b, c, thr))
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    for thr, points in groups.items():
        bg, cg = b[b["point"].astype(str).isin(points)], c[c["point"].astype(str).isin(points)]
        frames.append(anew(bg, cg, thr))
    return pd.concat(frames, ignore_index=True)


def _allow_for_baseline(verdicts: pd.DataFrame, base_noise: dict[str, Disturbance]) -> pd.DataFrame:
    """``verdicts`` with each point's baseline contention allowed for (``apply_baseline_disturbance``)."""
    if verdicts.empty or not base_noise:
        return verdicts
    point = verdicts["point"].astype(str)
    parts = [apply_baseline_disturbance(rows, base_noise[p]) if p in base_noise else rows
             for p, rows in verdicts.groupby(point, sort=False)]
    return pd.concat(parts).loc[verdicts.index]


def threshold_line(used: dict[str, dict[str, tuple[float | None, str]]], fallback: float, origin: str) -> str:
    """One line saying which threshold gated what: each test's recorded rule, and the
    ``fallback`` (from ``origin``: ``--threshold``, the project file, or the default) for the rest."""
    parts: dict[str, None] = {}
    rest = False
    for test, points in used.items():
        by_rule: dict[tuple[float, str], list[str]] = {}
        for point, (rule, side) in points.items():
            if rule is None:
                rest = True
            else:
                by_rule.setdefault((rule, side), []).append(point)
        for (rule, side), pts in by_rule.items():
            which = test if len(pts) == len(points) else f"{test}[{', '.join(pts)}]"
            parts[f"{format_threshold(rule)} (per-test rule recorded with the {side} of {which})"] = None
    fb = f"{format_threshold(fallback)} ({origin})"
    if not parts:
        return f"threshold: {fb}"
    return "threshold: " + "; ".join(parts) + (f"; {fb} for the rest" if rest else "")


def _export(target: str, base: dict[str, pd.DataFrame], cands: list[tuple[str, dict]]) -> None:

    t = Path(target)
    stem = t.name[:-5] if t.name.endswith(".json") else t.name
    write_pytest_benchmark_json(t.with_name(f"{stem}-base.json"), pd.concat(list(base.values()), ignore_index=True))
    # one file a candidate, beside FILE-base.json: a label's path separators (``a/run``) kept out
    # of the name, and no two names alike
    names = [t.name] if len(cands) == 1 else [f"{n}.json" for n in numbered(
        [f"{stem}-{label.replace('/', '_').replace(os.sep, '_')}" for label, _ in cands], taken=[f"{stem}-base"])]
    for name, (_, cand) in zip(names, cands):
        write_pytest_benchmark_json(t.with_name(name), pd.concat(list(cand.values()), ignore_index=True))


def _write_reports(args: argparse.Namespace, labels: list[str], verdicts: pd.DataFrame,
                   traces: dict, out: Path, compared: list | None = None) -> str | None:
    """One report with every sweep side by side (baseline first) where the inputs are traces;
    verdicts.csv stays this command's. Returns why the report could not be written (None when
    it was, or when there is none to write): the caller prints it after the verdicts.
    ``compared``: (test, baseline samples, candidate samples, label) of each compare() call."""

    base = "base" if "base" not in labels else numbered(["baseline"], labels)[0]
    sides = [(args.base, base)] + list(zip(args.cands, labels))
    sides = [(path, label) for path, label in sides if path in traces]
    if not sides:
        print(printable("note: no report: the inputs are samples or baselines, not traces"), file=sys.stderr)
        return None
    try:
        files = write_reports(
            out, dispatches=[traces[p].dispatches for p, _ in sides], labels=[lab for _, lab in sides],
            counters=[traces[p].counters for p, _ in sides], agents=[traces[p].agents for p, _ in sides],
            verdicts=verdicts, warmup=args.warmup or 0, skip={"verdicts.csv"},
            meta={"baseline": args.base, "inputs": [args.base, *args.cands]},
            compared=[ComparedSamples(test, b, c, label if len(labels) > 1 else "")
                      for test, b, c, label in compared or ()])
    except Exception as exc:  # noqa: BLE001 - the verdicts are written; say why the report is not
        return failure_line(exc)
    if "report.html" in files:
        print(printable(f"report: {files['report.html']}"))
    return None

