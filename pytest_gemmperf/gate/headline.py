"""The headline of a verdict row: the tested change with its CI, the verdict, and why.

Every place a person reads a verdict (the terminal summary, a failure message, ``gemmperf
compare``'s table, ``summary.md``, the header and verdict table of ``report.html``) shows
the text :func:`headline` makes, so the numbers on one row always agree with each other: the
verdict follows from the change and its CI shown beside it, never from a number printed
elsewhere. The per-process medians and their ratio ("raw") are a different quantity; they
stay in ``verdicts.csv`` / ``report.xlsx`` and behind the HTML expander (:func:`raw_detail`),
with a note when the raw ratio falls outside the tested CI.

:data:`PRINTED_NUMBERS` is the one description of those numbers: the tools print it as their
footer and ``docs/statistics.md`` carries it word for word (a test checks both).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import pandas as pd

from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.gate.verdict import (IMPROVEMENT, INCONCLUSIVE, MISSING, NEW, REGRESSION, UNCHANGED,
                                          shorten_kernel)

#: What each printed number is: the footer of ``gemmperf compare``, ``baseline show`` and
#: ``baseline diff``, and the paragraph of docs/statistics.md of the same name.
PRINTED_NUMBERS = (
    "change [95% CI]: the tested quantity, the ratio of the geometric means over processes of "
    "each process's median dispatch duration after warm-up removal, each process's factor "
    "shared by all its kernels removed within its side (it narrows the CI, it does not move "
    "the ratio); kernel '*': the change shared by all kernels; sums (category totals, ...): "
    "the ratio of the geometric means of the per-process per-step values. The verdict follows "
    "from that change, its CI and its q-value; the reason says why a row is not unchanged, or "
    "why an unchanged row's CI is not inside the threshold band. median (base and cand in "
    "verdicts.csv, report.xlsx and the details of report.html; baseline show; old and new in "
    "baseline diff): the median over processes of each process's median dispatch duration "
    "after warm-up removal. raw: cand/base of those medians, shown only beside them; it can "
    "fall outside the CI, which is of the geometric means with the shared factor removed.")

#: the order rows are listed in, worst first
SEVERITY = {REGRESSION: 0, INCONCLUSIVE: 1, MISSING: 2, NEW: 3, IMPROVEMENT: 4, UNCHANGED: 5}


@dataclass(frozen=True)
class Headline:
    """What a person reads about one verdict row."""

    verdict: str
    #: the tested change with its CI, ``+12.3% [+8.1, +16.6]``; ``-`` without a number
    change: str
    #: why the row got its verdict; empty for an unchanged row whose CI lies inside the band
    reason: str

    def text(self) -> str:
        """One line: ``regression +12.3% [+8.1, +16.6]: reason``."""
        head = f"{self.verdict} {self.change}"
        return f"{head}: {self.reason}" if self.reason else head


@dataclass(frozen=True)
class RawDetail:
    """The per-process medians of a row and their ratio: the details behind a headline."""

    base: str
    cand: str
    raw: str
    #: why the raw ratio lies outside the tested CI, when it does
    note: str

    def text(self) -> str:
        s = f"base {self.base}, cand {self.cand}, raw {self.raw}"
        return f"{s} ({self.note})" if self.note else s


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _text(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    s = str(x)
    return "" if s in ("nan", "None") else s


def change_text(ratio: Any, lo: Any, hi: Any) -> str:
    """``+12.3% [+8.1, +16.6]``: the change in percent with its CI; ``-`` without a finite ratio."""
    r, a, b = _num(ratio), _num(lo), _num(hi)
    if not math.isfinite(r):
        return "-"
    s = f"{100 * (r - 1):+.1f}%"
    if math.isfinite(a) and math.isfinite(b):
        s += f" [{100 * (a - 1):+.1f}, {100 * (b - 1):+.1f}]"
    return s


def _pct(thr: float) -> str:
    return f"{100 * thr:g}%"


def ci_inside_band(row: Mapping[str, Any]) -> bool:
    """Whether the row's CI lies inside ``[1 - threshold, 1 + threshold]`` (on the metric's
    worse-is-higher orientation, as the gate sizes it)."""
    lo, hi, thr = _num(row.get("ci_low")), _num(row.get("ci_high")), _num(row.get("threshold"))
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(thr)):
        return False
    if bool(M.higher_is_better([_text(row.get("metric"))])[0]):
        if lo <= 0 or hi <= 0:
            return False
        lo, hi = 1 / hi, 1 / lo
    return lo >= 1 - thr and hi <= 1 + thr


def headline(row: Mapping[str, Any]) -> Headline:
    """The headline of one verdicts-table row (a dict, a Series or an itertuples row's
    ``_asdict()``): change with CI, verdict, and the reason (the row's note; where it has none,
    the rule that decided: beyond the threshold at q, or a CI not inside the band)."""
    verdict = _text(row.get("verdict")) or INCONCLUSIVE
    change = change_text(row.get("ratio"), row.get("ci_low"), row.get("ci_high"))
    reason = " ".join(_text(row.get("note")).split())
    if not reason:
        thr, q = _num(row.get("threshold")), _num(row.get("q_value"))
        if verdict in (REGRESSION, IMPROVEMENT) and math.isfinite(thr):
            reason = f"beyond the {_pct(thr)} threshold" + (f" at q {q:.2g}" if math.isfinite(q) else "")
        elif verdict == UNCHANGED and not ci_inside_band(row):
            band = f"the {_pct(thr)} threshold band" if math.isfinite(thr) else "the threshold band"
            # a row written before the gate noted why (an older verdicts.csv): say what is seen
            reason = f"the CI is not inside {band} (no reason recorded)"
        elif verdict == NEW:
            reason = "only in the candidate"
        elif verdict == MISSING:
            reason = "only in the baseline"
    return Headline(verdict, change, reason)


def raw_detail(row: Mapping[str, Any]) -> RawDetail:
    """The medians behind a row in the metric's display unit, their ratio, and a note when that
    ratio lies outside the tested CI (which is of the geometric means over processes, each
    process's shared factor removed: the medians keep that factor and weigh processes
    differently, so with few or scattered processes they can disagree)."""
    metric = _text(row.get("metric"))
    b, c = _num(row.get("base_median_ns")), _num(row.get("cand_median_ns"))
    raw = c / b if math.isfinite(b) and math.isfinite(c) and b > 0 else math.nan
    lo, hi = _num(row.get("ci_low")), _num(row.get("ci_high"))
    note = ""
    if math.isfinite(raw) and math.isfinite(lo) and math.isfinite(hi) and not lo <= raw <= hi:
        note = ("outside the tested CI: the medians keep each process's factor shared by all its "
                "kernels and take the middle process; the tested change compares geometric means "
                "with that factor removed")

    def show(x: float) -> str:
        return M.format_value(x, metric) if math.isfinite(x) else "-"

    return RawDetail(show(b), show(c), "-" if not math.isfinite(raw) else f"x{raw:.3f}", note)


def sort_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Worst first: by :data:`SEVERITY`, then the largest change first."""
    ratio = pd.to_numeric(df["ratio"], errors="coerce") if "ratio" in df.columns else pd.Series(0.0, index=df.index)
    d = df.assign(_o=df["verdict"].map(SEVERITY).fillna(9), _r=-ratio.fillna(0))
    return d.sort_values(["_o", "_r"], kind="stable").drop(columns=["_o", "_r"])


def _kernel_cell(r: Mapping[str, Any], width: int) -> str:
    kern = shorten_kernel(r.get("kernel", ""), width)
    swapped = _text(r.get("swapped_to"))
    if swapped:
        half = max(8, (width - 4) // 2)
        kern = f"{shorten_kernel(r.get('kernel', ''), half)} -> {shorten_kernel(swapped, half)}"
    return kern


def format_verdict_table(df: pd.DataFrame | Iterable[Mapping[str, Any]], max_rows: int = 20, *,
                         kernel_width: int = 48, verdicts: tuple[str, ...] | None = None,
                         footnote: bool = True, warmup: int | None = None,
                         test_column: bool = False) -> str:
    """Fixed-width text table of headlines for a terminal or a pytest failure message.

    Worst first, at most ``max_rows`` rows with a "... N more" line. Columns: verdict, point
    (``test[point]`` with ``test_column``), kernel (shortened; a paired swap as ``A -> B``),
    metric, the tested change with its CI, q, and the reason (:func:`headline`); then
    (``footnote``) :data:`PRINTED_NUMBERS`. Text cells are shown as given: callers pass
    :func:`~pytest_gemmperf.textsafe.printable_frame` output."""
    d = df if isinstance(df, pd.DataFrame) else pd.DataFrame(list(df))
    if len(d) == 0:
        return "(no comparisons)"
    if verdicts is not None:
        d = d[d["verdict"].isin(verdicts)]
    d = sort_rows(d)
    shown = d.head(max_rows)
    where = "test[point]" if test_column else "point"
    rows = [("verdict", where, "kernel", "metric", "change [95% CI]", "q", "reason")]
    for r in shown.to_dict("records"):
        h = headline(r)
        point = _text(r.get("point"))
        if test_column:
            point = f"{_text(r.get('test')).rsplit('::', 1)[-1]}[{point}]"
        q = _num(r.get("q_value"))
        rows.append((h.verdict, point, _kernel_cell(r, kernel_width), _text(r.get("metric")), h.change,
                     "-" if not math.isfinite(q) else f"{q:.2g}", h.reason))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join([c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]).rstrip() for row in rows]
    if len(d) > len(shown):
        lines.append(f"... {len(d) - len(shown)} more")
    if footnote:
        text = PRINTED_NUMBERS + (f" Warm-up: the first {int(warmup)} dispatch(es) of each kernel and "
                                  "process." if warmup else "")
        lines += footer_lines(text)
    return "\n".join(lines)


def footer_lines(text: str = PRINTED_NUMBERS) -> list[str]:
    """``text`` wrapped as the tools print their footer (``note: ...``)."""
    return textwrap.wrap(text, 110, initial_indent="note: ", subsequent_indent="      ")


def summary_table(rows: Iterable[Mapping[str, Any]], max_rows: int = 50) -> str:
    """The terminal summary's table of a pytest session: the non-unchanged rows the gated points
    recorded (dicts with the verdicts-table fields), ``test[point]`` per row, text escaped."""
    safe = [{k: printable(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows]
    return format_verdict_table(safe, max_rows, test_column=True, footnote=False)


def notable(df: pd.DataFrame | None) -> pd.DataFrame:
    """The rows a summary lists: every row that is not ``unchanged``, worst first."""
    if df is None or not len(df):
        return pd.DataFrame(columns=[] if df is None else df.columns)
    return sort_rows(df[df["verdict"].astype(str) != UNCHANGED])


__all__ = ["Headline", "PRINTED_NUMBERS", "RawDetail", "SEVERITY", "change_text", "ci_inside_band",
           "footer_lines", "format_verdict_table", "headline", "notable", "raw_detail", "sort_rows",
           "summary_table"]
