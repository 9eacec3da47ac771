"""The work of ``gemmperf plan`` (commands/plan.py holds its parser): read the store, plan each
record with :mod:`pytest_gemmperf.gate.power`, print one table per point."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import textwrap
from pathlib import Path

from pytest_gemmperf.analysis.kernel_names import short_names
from pytest_gemmperf.commands.compare_impl import (RESULTS, Rules, input_kind, point_rules, recorded_rules,
                                                   threshold_line)
from pytest_gemmperf.config import Origin
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.gate_config import GateConfig
from pytest_gemmperf.gate.power import CURVE_MULTIPLES, plan
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.traces.categories import category_of

#: columns of the per-point table
HEADER = ("kernel", "category", "dispatches/process", "CV %", "df prior+history", "CI now ±%",
          "processes/side")
LEGEND = ("processes/side: profiled processes (ranks x repeats) per side for {power:g}% power; "
          "CV: per-process sd of the kernel's median as the gate estimates it (moderated; for a "
          "kernel, relative to the factor its process shares with the other kernels); df: degrees "
          "of freedom the gate's prior and the baseline's variance history add to the processes' "
          "own; CI now: half-width of the gate's 95 % interval with the recorded processes per side.")


def run(args: argparse.Namespace) -> int:
    root = Path(args.baseline_dir)
    if not root.is_dir():
        raise GemmperfInputError(root, "no baseline store here (record one with pytest, or pass --baseline-dir)")
    damaged: list[GemmperfInputError] = []
    recs = BaselineStore(root).load_all(args.hw, damaged=damaged)
    for err in damaged:
        print(printable(f"gemmperf: error: {err} (record skipped)"), file=sys.stderr)
    recs = _selected(recs, args, root, damaged)
    base = GateConfig()
    cfg = GateConfig(threshold=base.threshold if args.threshold is None else args.threshold,
                     fdr=base.fdr if args.fdr is None else args.fdr)
    origin = getattr(args, "setting_origins", {}).get("threshold") or Origin("default", "default")
    explicit = origin.kind == "flag"  # --threshold given: every test, whatever it recorded
    # the rule each test gates at, resolved as `gemmperf compare` resolves it: the newest run of
    # --results (the candidate) recorded it, else the baseline record, else the fallback
    if args.results is not None and input_kind(args.results) != RESULTS:
        raise GemmperfInputError(args.results, "--results: not a gemmperf results directory (run.json or "
                                               "<test>/<point>/point.json)")
    cand_rules: Rules = {} if explicit or not args.results else recorded_rules(args.results)
    used: dict[str, dict[str, tuple[float | None, str]]] = {}
    tables = []
    for rec in sorted(recs, key=lambda r: (r.test_id, r.hw_key)):
        base_rules = {} if explicit else recorded_rules("", [rec])
        points = sorted({str(x) for x in rec.samples["point"].unique()})
        rules = point_rules(rec.test_id, points, base_rules, cand_rules)
        used.setdefault(rec.test_id, {}).update(rules)
        for point in _plan_record(rec, args, cfg, rules):
            tables.append(_render(rec.test_id, rec.hw_key, point))
    print(printable(threshold_line(used, cfg.threshold, origin.text)))
    print()
    for table in tables:
        print(table)
        print()
    for line in textwrap.wrap(LEGEND.format(power=100 * args.power), 100):
        print(printable(line))
    if damaged:
        print(printable(f"gemmperf: {len(damaged)} damaged baseline record(s) not planned"), file=sys.stderr)
        return 2
    return 0


def _plan_record(rec, args: argparse.Namespace, cfg: GateConfig,
                 rules: dict[str, tuple[float | None, str]]) -> list:
    """The plan of each point of ``rec`` at its own rule (None: ``cfg``'s threshold)."""
    out = []
    points = rec.samples["point"].astype(str)
    for point in sorted(rules):
        rule = rules[point][0]
        point_cfg = cfg if rule is None else dataclasses.replace(cfg, threshold=rule)
        out += plan(rec.samples[points == point], args.detect, point_cfg, rec.variance, rec.test_id,
                    args.power, args.max_repeats)
    return out


def _selected(recs: list, args: argparse.Namespace, root: Path, damaged: list) -> list:
    """The records the options select; one line naming what is missing when none is."""
    if args.test_id is not None:
        recs = [r for r in recs if r.test_id == args.test_id]
        if not recs:
            raise GemmperfInputError(root, f"no baseline for test {args.test_id!r}"
                                           + (f" on {args.hw}" if args.hw else ""))
    if args.test_filter:
        recs = [r for r in recs if args.test_filter in r.test_id]
        if not recs:
            raise GemmperfInputError(root, f"no baseline test id contains {args.test_filter!r}")
    if not recs and not damaged:
        raise GemmperfInputError(root, "no baseline records" + (f" for hardware key {args.hw}" if args.hw else ""))
    return recs


# ---------------------------------------------------------------------------------------------
# text


def _render(test_id: str, hw_key: str, p) -> str:
    """One point's table and summary lines, every field escaped."""
    rule = p.decision
    labels = short_names([r.noise.kernel for r in p.kernels])
    lines = [f"{test_id}  [{hw_key}]  point {p.point}: {p.processes} processes per side recorded",
             f"  detect +{_pct(p.effect)} at threshold {_pct(rule.threshold)}, FDR {rule.fdr:g}, "
             f"{100 * p.target:g}% power (the change alone among {p.rows_in_family} rows: "
             f"p <= {rule.alpha:.2g}; counts 2..{p.max_processes})"]
    opened = sorted(r.noise.kernel.split(":", 1)[-1] for r in p.rows if r.noise.opens_sd > 0)
    if opened and rule.shared_share > 0:
        lines.append(f"  a total of {', '.join(opened)}: planned as every kernel of it changing, most of the gated "
                     f"ones: the '*' row moves with them and, significant at {rule.shared_share * rule.fdr:.2g}, "
                     f"opens the total at FDR {rule.fdr:g}")
    cats: dict[str, list] = {}
    rows = []
    for r in p.rows:
        n = r.noise
        if n.metric == "dur_ns":
            cat, label = category_of(n.kernel), labels.get(n.kernel, n.kernel)
        else:
            cat, label = n.kernel.split(":", 1)[-1], "(total)"
        cats.setdefault(cat, [])
        if n.metric == "dur_ns":
            cats[cat].append(r)
        order = (cat, n.metric != "dur_ns", r.needed if r.needed is not None else math.inf, label)
        rows.append((order, (label, cat, _num(n.dispatches, "{:.0f}"), _num(100 * n.sd, "{:.2f}"),
                             _df(n, p), _num(100 * math.expm1(n.ci_half), "{:.2f}"), _need(r.needed, p))))
    table = [HEADER] + [cells for _, cells in sorted(rows, key=lambda x: x[0])]
    table = [tuple(printable(c) for c in row) for row in table]
    width = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, width)).rstrip() for row in table]
    if p.effect <= rule.threshold:
        lines.append(f"  +{_pct(p.effect)} lies within the {_pct(rule.threshold)} threshold: no count makes it a "
                     "regression (plan a larger change, or pass --threshold)")
    for cat in sorted(c for c, ks in cats.items() if ks):
        lines.append("  " + _summary(p, cats[cat], f"every {cat} kernel"))
    if p.kernels:
        lines.append("  " + _summary(p, p.kernels, "every gated kernel"))
    lines += _curve_lines(p, labels)
    return "\n".join(printable(line) for line in lines)


def _curve_lines(p, labels: dict) -> list[str]:
    """The operating curve of every row: the chance it fails at the recorded count when it
    alone changes by each multiple of the threshold (``power.operating_curve``)."""
    rows = [r for r in p.rows if r.curve]
    if not rows:
        return []
    unit = p.curve_unit
    what = "the threshold" if p.decision.threshold > 0 else "the change to detect"
    head = ("kernel",) + tuple(f"{k:g}x ({_pct(k * unit)})" for k in CURVE_MULTIPLES)
    table = [head]
    for r in rows:
        n = r.noise
        label = labels.get(n.kernel, n.kernel) if n.metric == "dur_ns" else n.kernel
        table.append((label,) + tuple(f"{100 * x:.0f}%" if math.isfinite(x) else "-" for x in r.curve))
    table = [tuple(printable(c) for c in row) for row in table]
    width = [max(len(row[i]) for row in table) for i in range(len(head))]
    out = [f"  operating curve with {max(p.processes, 2)} processes per side: the chance a row fails when it "
           f"alone changes by a multiple of {what}"]
    return out + ["  " + "  ".join(c.ljust(w) for c, w in zip(row, width)).rstrip() for row in table]


def _summary(p, rows, what: str) -> str:
    n, reach = p.count_for(rows)
    head = f"to detect +{_pct(p.effect)} in {what}"
    if reach == len(rows):
        return f"{head}: {n} processes per side"
    more = f"{head}: more than {p.max_processes} processes per side"
    if n is None:
        return f"{more} (none of {len(rows)} within {p.max_processes})"
    return f"{more} ({reach} of {len(rows)} with {n})"


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def _num(x: float, spec: str) -> str:
    return spec.format(x) if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def _df(n, p) -> str:
    """The df the prior and the history add at the recorded count: the prior's as the gate
    bounds it there (``prior_df_cap`` times the processes' own df)."""
    if n.metric != "dur_ns":
        return "-"
    cap = p.decision.prior_df_cap
    prior = n.prior_df if cap is None else min(n.prior_df, cap * (2 * n.processes - 2 + n.history_df))
    return f"{'inf' if not math.isfinite(prior) else f'{prior:.1f}'}+{n.history_df:.0f}"


def _need(needed: int | None, p) -> str:
    return str(needed) if needed is not None else f">{p.max_processes}"
