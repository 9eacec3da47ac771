"""``report.xlsx``: the TraceLens rocprofv3 report's sheets (with correct units) plus the gate.

Every sheet has a one-line description in row 1, the header in row 2 (frozen, with an
autofilter) and units in the headers; the numbers are stored in the unit the header names
(``*_ns`` columns are converted to µs). Text is always written with ``write_string`` and the
workbook has ``strings_to_formulas`` off, so a kernel name starting with ``=``, ``+``, ``-`` or
``@`` stays text (the CSV writers prefix such cells with ``'`` instead, see ``safe_io``: a CSV
has no cell types). Long tables are capped at ``max_rows`` rows and say so in row 1.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd
import xlsxwriter

from pytest_gemmperf.analysis.timeline import PYTORCH_TYPES, tracelens_rows
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.report.data import ReportData, sweep_fact, verdict_counts
from pytest_gemmperf.report.tables import STATUS_TEXT, public
from pytest_gemmperf.numbers import tidy_float
from pytest_gemmperf.safe_io import write_bytes
from pytest_gemmperf.report.data import report_kernel_labels
from pytest_gemmperf.analysis.variance import parse_point_axes
from pytest_gemmperf.analysis.report_parts import object_values
from pytest_gemmperf.analysis.small_tables import SMALL_TABLE_ROWS, descending_order

DEFAULT_MAX_ROWS = 50_000
#: Excel's hard limit is 1,048,576 rows; cap well below to bound size and write time
_EXCEL_ROW_LIMIT = 1_048_000

@dataclass
class _Col:
    header: str
    scale: float = 1.0
    kind: str = "text"  # text | int | us | ms | ns | ratio | pct | p | float


def _column(name: str, series: pd.Series) -> _Col:
    """Header with unit and number kind for one DataFrame column."""
    kind = _dtype_kind(series.dtype)
    if kind in ("bool", "text"):
        return _Col(name, 1.0, kind)
    if name in ("start_ns", "end_ns"):
        return _Col(name[:-3] + " (ns)", 1.0, "int")
    metric = M.REGISTRY.get(name)
    if metric is not None:  # a column holding a gate metric's values: its unit, not its name's suffix
        if metric.unit.time:
            return _Col(name.removesuffix("_ns") + " (µs)", 1e-3, "us")
        return _Col(name, 1.0, metric.unit.xlsx)
    if name.endswith("_ns"):
        return _Col(name[:-3] + " (µs)", 1e-3, "us")
    if name.endswith("_us"):
        return _Col(name[:-3] + " (µs)", 1.0, "us")
    if name.endswith("_ms"):
        return _Col(name[:-3] + " (ms)", 1.0, "ms")
    if "(µs)" in name:
        return _Col(name, 1.0, "us")
    if "(ms)" in name:
        return _Col(name, 1.0, "ms")
    if "(%)" in name or name in ("percent", "max_overlap_percentage") or name.endswith("_percent"):
        return _Col(name if "(%)" in name else f"{name} (%)", 1.0, "pct")
    if name in ("ratio", "ci_low", "ci_high", "shared_shift"):
        return _Col(name + " (cand/base)" if name == "ratio" else name, 1.0, "ratio")
    if name in ("p_value", "q_value", "rank_p_value"):
        return _Col(name, 1.0, "p")
    if name in ("cv", "mad_cv", "iqr_cv", "mean_overlap_fraction",
                "overlapped_share", "cu_utilization", "threshold") or name.endswith("_fraction"):
        return _Col(name + (" (fraction)" if name == "threshold" else ""), 1.0, "float")
    return _Col(name, 1.0, kind)


#: a NumPy dtype's kind letter: booleans, integers, other numbers (timedelta ``m`` is text here,
#: as pandas' ``is_numeric_dtype`` leaves it out)
_NUMPY_KIND = {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "float"}


def _dtype_kind(dtype: Any) -> str:
    """``bool``, ``text`` (not a number), ``int`` or ``float`` (another number) for a column's
    dtype, as pandas' ``is_bool_dtype``, ``is_numeric_dtype`` and ``is_integer_dtype`` class it;
    a NumPy dtype by its kind letter (the same answers, without their dispatch per column)."""
    if isinstance(dtype, np.dtype):
        return _NUMPY_KIND.get(dtype.kind, "text")
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if not pd.api.types.is_numeric_dtype(dtype):
        return "text"
    return "int" if pd.api.types.is_integer_dtype(dtype) else "float"


class _Book:
    def __init__(self, target: Any, max_rows: int) -> None:
        # in_memory: the parts of the zip are assembled in memory, not as some 40 temporary files
        # written, read back and removed (a tenth of a second of a small report's workbook)
        self.wb = xlsxwriter.Workbook(target, {
            "strings_to_formulas": False, "strings_to_urls": False, "strings_to_numbers": False,
            "nan_inf_to_errors": False, "in_memory": True})
        self.max_rows = max(1, min(int(max_rows), _EXCEL_ROW_LIMIT))
        add = self.wb.add_format
        self.fmt = {
            "title": add({"bold": True, "font_size": 12}),
            "note": add({"italic": True, "font_color": "#555555"}),
            "header": add({"bold": True, "bg_color": "#DDE4EE", "border": 1, "text_wrap": True,
                           "valign": "top"}),
            "text": add({}),
            "bool": add({}),
            "int": add({"num_format": "#,##0"}),
            "us": add({"num_format": "#,##0.000"}),
            "ms": add({"num_format": "#,##0.000"}),
            "ns": add({"num_format": "#,##0"}),
            "ratio": add({"num_format": "0.0000"}),
            "pct": add({"num_format": "0.00"}),
            "p": add({"num_format": "0.000E+00"}),
            "float": add({"num_format": "0.0000"}),
            "bad": add({"bg_color": "#F8CBAD", "font_color": "#9C0006"}),
            "good": add({"bg_color": "#C6EFCE", "font_color": "#006100"}),
            "warn": add({"bg_color": "#FFEB9C", "font_color": "#9C5700"}),
            "big": add({"bold": True, "font_size": 16}),
        }

    def table(self, name: str, df: pd.DataFrame, description: str, *, csv_hint: str | None = None,
              start_col: int = 0, ws=None, first_row: int = 0, filter_: bool = True,
              widths: dict[str, int] | None = None, hide: tuple[str, ...] = ()):
        """Write ``df`` with a description row, a frozen header row and an autofilter; columns
        named in ``hide`` are left out (:func:`_hidden`). Returns the sheet, the header's row
        and each shown column's name and :class:`_Col`."""
        # each column taken out of the frame once (a column lookup costs more than its few
        # cells); a hidden one passed over here instead of a frame without it made first
        named = [(c, s) for c, s in df.items() if c not in hide]
        return self.columns(name, named, len(df), description, csv_hint=csv_hint, start_col=start_col,
                            ws=ws, first_row=first_row, filter_=filter_, widths=widths)

    def columns(self, name: str, named: list[tuple[Any, pd.Series]], rows: int, description: str, *,
                csv_hint: str | None = None, start_col: int = 0, ws=None, first_row: int = 0,
                filter_: bool = True, widths: dict[str, int] | None = None):
        """:meth:`table` of a table given as its ``(name, column)`` pairs, each column ``rows``
        long: a table made only to be written here needs no frame (a few tenths of a
        millisecond to build and to take apart again, whatever its size)."""
        ws = ws or self.wb.add_worksheet(name)
        shown = min(rows, self.max_rows)
        if shown < rows:
            named = [(c, s.iloc[:shown]) for c, s in named]
        note = description
        if rows > shown:
            note += (f" - showing the first {shown:,} of {rows:,} rows"
                     + (f"; all rows are in {csv_hint}" if csv_hint else ""))
        ws.write_string(first_row, start_col, note, self.fmt["note"])
        hdr = first_row + 1
        cols = [(c, _column(str(c), s)) for c, s in named]
        for j, (_, spec) in enumerate(cols):
            ws.write_string(hdr, start_col + j, spec.header, self.fmt["header"])
        col_widths = []
        for j, ((c, spec), (_, s)) in enumerate(zip(cols, named)):
            self._write_column(ws, hdr + 1, start_col + j, s, spec)
            width = (widths or {}).get(str(c))
            if width is None:
                width = 60 if spec.kind == "text" and str(c) in ("kernel", "name", "kernel_name", "note") \
                    else max(10, min(28, len(spec.header) + 2))
            col_widths.append(width)
        for first, last, width in _runs(col_widths):
            # a run of equal widths in one call: the same width stored for each of its columns
            ws.set_column(start_col + first, start_col + last, width)
        if first_row == 0 and start_col == 0:
            ws.freeze_panes(hdr + 1, 0)
        if filter_ and len(cols):
            ws.autofilter(hdr, start_col, hdr + max(shown, 1), start_col + len(cols) - 1)
        return ws, hdr, cols

    def _write_column(self, ws, row0: int, col: int, s: pd.Series, spec: _Col) -> None:
        fmt = self.fmt[spec.kind if spec.kind in self.fmt else "float"]
        if spec.kind in ("text", "bool"):
            values = object_values(s).tolist()
            for i, v in enumerate(values):
                if isinstance(v, (bool, np.bool_)):  # a boolean cell, not the text 'False'
                    ws.write_boolean(row0 + i, col, bool(v), fmt)
                elif isinstance(v, float):  # a number among text: without its binary noise
                    ws.write_number(row0 + i, col, tidy_float(v), fmt)
                elif v is not None:
                    ws.write_string(row0 + i, col, str(v), fmt)
            return
        arr = _float64(s)
        if spec.scale != 1.0:
            arr = arr * spec.scale
        # Python floats of one tolist(): a NumPy scalar per cell costs more than writing it;
        # ns shown in µs: 9436846.9 ns * 1e-3 must read 9436.8469, not 9436.846899999999
        values = arr.tolist()
        if all(map(math.isfinite, values)):
            # the cells of write_number, in one call (write_column writes a float as write_number)
            ws.write_column(row0, col, [tidy_float(x) for x in values], fmt)
            return
        for i, x in enumerate(values):
            if math.isfinite(x):  # a missing value is an empty cell
                ws.write_number(row0 + i, col, tidy_float(x), fmt)

    def close(self) -> None:
        self.wb.close()


def _runs(values: list) -> list[tuple[int, int, Any]]:
    """``(first, last, value)`` of each run of equal neighbours in ``values`` (positions)."""
    runs: list[tuple[int, int, Any]] = []
    for j, v in enumerate(values):
        if runs and runs[-1][2] == v:
            runs[-1] = (runs[-1][0], j, v)
        else:
            runs.append((j, j, v))
    return runs


def _hidden(data: ReportData) -> tuple[str, ...]:
    """The columns :meth:`_Book.table` leaves out of a report table: the label of a single-sweep
    report (what ``tables.public`` drops, without a frame made for it)."""
    return () if data.multi else ("label",)


def _float64(s: pd.Series) -> np.ndarray:
    """A number column's values as float64, NaN where missing or not a number; a NumPy integer or
    float column, or a nullable one, converts directly (the same values, without pandas' three
    passes)."""
    if isinstance(s.dtype, np.dtype) and s.dtype.kind in "iuf":
        return s.to_numpy(dtype=np.float64)
    if isinstance(s.array, (pd.arrays.IntegerArray, pd.arrays.FloatingArray)):  # nullable: NA -> NaN
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    return pd.to_numeric(s, errors="coerce").astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)


def _col_index(cols, name: str) -> int | None:
    for j, (c, _) in enumerate(cols):
        if c == name:
            return j
    return None


def _xl(row: int, col: int) -> str:
    return xlsxwriter.utility.xl_rowcol_to_cell(row, col)


def _summary_sheet(book: _Book, data: ReportData) -> None:
    ws = book.wb.add_worksheet("summary")
    f = book.fmt
    status = data.status
    colour = {"failed": "bad", "error": "bad", "undecided": "warn", "passed": "good"}.get(status, "note")
    ws.write_string(0, 0, "gemmperf report", f["title"])
    ws.write_string(1, 0, "status", f["header"])
    ws.write_string(1, 1, STATUS_TEXT[status], f[colour])
    row = 2
    sweeps = sweep_fact(data)
    facts: list[tuple[str, Any]] = [(sweeps[0], ", ".join(sweeps[1]))] if sweeps else []
    facts += [(f"dispatches ({lab})", n) for lab, n in data.n_dispatches.items()]
    facts += [(f"points: {k}", n) for k, n in data.outcome_counts.items()]
    facts += [(f"verdicts: {k}", n) for k, n in verdict_counts(data.verdicts).items()]
    facts += [("short-kernel threshold (µs)", data.short_kernel_us), ("top-K per cell", data.top_k)]
    for key in ("hardware", "rocm_version", "rocprofv3_version", "commit", "created"):
        if data.meta.get(key):
            facts.append((key, data.meta[key]))
    for k, v in facts:
        ws.write_string(row, 0, k, f["header"])
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            ws.write_number(row, 1, tidy_float(float(v)), f["int"] if float(v).is_integer() else f["float"])
        else:
            ws.write_string(row, 1, str(v))
        row += 1
    for note in data.notes:
        ws.write_string(row, 0, note, f["note"])
        row += 1
    ws.set_column(0, 0, 32)
    ws.set_column(1, 1, 40)
    # time by category (all points and ranks) with a native chart
    cat = data.by_category
    if len(cat):
        names, sweeps, times = category_times(cat, data.labels)
        r0 = row + 2
        ws.write_string(r0 - 1, 0, "kernel time by category, all points and ranks (ms)", f["note"])
        ws.write_string(r0, 0, "category", f["header"])
        for j, lab in enumerate(sweeps):
            ws.write_string(r0, 1 + j, f"{lab} time (ms)", f["header"])
        for i, (catname, vals) in enumerate(zip(names, times)):
            ws.write_string(r0 + 1 + i, 0, str(catname))
            for j, v in enumerate(vals):
                ws.write_number(r0 + 1 + i, 1 + j, tidy_float(float(v)), f["ms"])
        chart = book.wb.add_chart({"type": "bar"})
        n = len(names)
        for j, lab in enumerate(sweeps):
            chart.add_series({"name": f"{lab}", "categories": ["summary", r0 + 1, 0, r0 + n, 0],
                              "values": ["summary", r0 + 1, 1 + j, r0 + n, 1 + j]})
        chart.set_title({"name": "Kernel time by category"})
        chart.set_x_axis({"name": "time (ms)"})
        chart.set_legend({"position": "bottom"})
        ws.insert_chart(1, 3, chart, {"x_scale": 1.4, "y_scale": 1.3})


def category_times(cat: pd.DataFrame, labels: list[str]) -> tuple[list[Any], list[Any], list[list[float]]]:
    """The summary sheet's time by category: category names, sweeps and per category the ms of
    each sweep, largest first in the first sweep (pandas' sort: a quicksort, ties as it leaves
    them). One sweep's small table is summed in Python (integers: exact) and sorted by the same
    NumPy call pandas makes; otherwise pandas' grouping and pivot."""
    one = len(labels) == 1 and len(cat) <= SMALL_TABLE_ROWS and isinstance(cat["total_ns"].dtype, np.dtype) \
        and cat["total_ns"].dtype.kind == "i"
    names = cat["category"].tolist() if one else []
    if one and all(isinstance(x, str) for x in names) and set(cat["label"].tolist()) == {labels[0]}:
        sums: dict[str, int] = {}
        for name, total in zip(names, cat["total_ns"].tolist()):
            sums[name] = sums.get(name, 0) + total
        keys = sorted(sums)
        ms = np.asarray([sums[k] for k in keys], dtype=np.int64) / 1e6
        order = descending_order(ms)  # as DataFrame.sort_values(ascending=False) orders them
        return [keys[i] for i in order], [labels[0]], [[v] for v in ms[order].tolist()]
    agg = cat.groupby(["label", "category"], sort=True)["total_ns"].sum().reset_index()
    wide = agg.pivot(index="category", columns="label", values="total_ns").fillna(0) / 1e6
    wide = wide[[lab for lab in labels if lab in wide.columns]]
    wide = wide.sort_values(wide.columns[0], ascending=False)
    return wide.index.tolist(), wide.columns.tolist(), wide.to_numpy(dtype=np.float64).tolist()


def _verdicts_sheet(book: _Book, data: ReportData) -> None:
    v = data.verdicts
    if v is None:
        ws = book.wb.add_worksheet("verdicts")
        ws.write_string(0, 0, "no baseline was compared: no verdicts", book.fmt["note"])
        return
    df = _verdict_units(public(v, data))
    # the distinguishing short label of report.html beside the full name (sort/filter by it)

    labels = report_kernel_labels(data)
    df.insert(df.columns.get_loc("kernel") + 1, "short_name",
              df["kernel"].astype(str).map(labels).astype(object))
    ws, hdr, cols = book.table("verdicts", df, "gate verdicts: ratio = the tested change (cand/base of the "
                               "geometric means over processes), 95% CI; base/cand: medians over processes "
                               "(their ratio can fall outside the CI); regression needs q <= FDR and the "
                               "change above 1 + threshold",
                               csv_hint="verdicts.csv", widths={"short_name": 50})
    n = min(len(df), book.max_rows)
    if n == 0:
        return
    jt = _col_index(cols, "threshold")
    for name in ("ratio", "ci_low", "ci_high"):
        j = _col_index(cols, name)
        if j is None:
            continue
        rng = (hdr + 1, j, hdr + n, j)
        if jt is not None:
            # row-relative references: Excel shifts them for every row of the range
            cell = _xl(hdr + 1, j)
            thr = xlsxwriter.utility.xl_rowcol_to_cell(hdr + 1, jt, col_abs=True)
            ws.conditional_format(*rng, {"type": "formula", "criteria": f"=AND(ISNUMBER({cell}),{cell}>1+{thr})",
                                         "format": book.fmt["bad"]})
            ws.conditional_format(*rng, {"type": "formula", "criteria": f"=AND(ISNUMBER({cell}),{cell}<1-{thr})",
                                         "format": book.fmt["good"]})
        else:
            ws.conditional_format(*rng, {"type": "3_color_scale", "min_type": "num", "min_value": 0.9,
                                         "mid_type": "num", "mid_value": 1.0, "max_type": "num",
                                         "max_value": 1.1, "min_color": "#63BE7B",
                                         "mid_color": "#FFFFFF", "max_color": "#F8696B"})
    jv = _col_index(cols, "verdict")
    if jv is not None:
        for word, fmt in (("regression", "bad"), ("improvement", "good"), ("inconclusive", "warn")):
            ws.conditional_format(hdr + 1, jv, hdr + n, jv, {"type": "cell", "criteria": "==",
                                                              "value": f'"{word}"', "format": book.fmt[fmt]})


def _verdict_units(v: pd.DataFrame) -> pd.DataFrame:
    """Medians in µs for duration metrics; other metrics (CV, fractions, GB/s) keep their unit
    in ``*_value`` columns, so no column mixes units."""
    metric = v["metric"].astype(str)
    is_ns = M.is_time(metric)
    out = v.copy()
    pos = out.columns.get_loc("base_median_ns")
    for side in ("base", "cand"):
        raw = pd.to_numeric(out.pop(f"{side}_median_ns"), errors="coerce")
        out.insert(pos, f"{side}_value", raw.where(~is_ns))
        out.insert(pos, f"{side}_median_us", raw.where(is_ns) / 1e3)
        pos += 2
    return out


def _short_kernels_sheet(book: _Book, data: ReportData) -> None:
    ws, hdr, cols = book.table(
        "short_kernels", data.short_kernels, f"kernels shorter than {data.short_kernel_us:g} µs (TraceLens "
        "short-kernel study, durations in µs); histogram and chart on the right", hide=_hidden(data))
    hist = data.short_histogram
    c0 = len(cols) + 1
    _, hh, hcols = book.table("short_kernels", hist, "duration histogram of short kernels (µs)",
                              ws=ws, start_col=c0, filter_=False, hide=_hidden(data))
    n = len(hist) if not data.multi else len(hist[hist["label"] == data.labels[0]])
    if n:
        jc = _col_index(hcols, "count")
        jb = _col_index(hcols, "bin_end_us")
        chart = book.wb.add_chart({"type": "column"})
        chart.add_series({"name": f"short kernels ({data.labels[0]})",
                          "categories": ["short_kernels", hh + 1, c0 + jb, hh + n, c0 + jb],
                          "values": ["short_kernels", hh + 1, c0 + jc, hh + n, c0 + jc],
                          "gap": 10})
        chart.set_title({"name": f"Short kernels (< {data.short_kernel_us:g} µs)"})
        chart.set_x_axis({"name": "bin end (µs)"})
        chart.set_y_axis({"name": "dispatches"})
        chart.set_legend({"none": True})
        ws.insert_chart(hh + n + 3, c0, chart)


def _timeline_sheets(book: _Book, data: ReportData) -> None:
    tp = data.timeline_by_point
    rows = []
    summ = []
    records = _records(tp)
    points = [_point_text(r.get("point")) for r in records]
    axes_of = _points_axes(points)
    for r, point in zip(records, points):
        axes = axes_of[point]
        config = (point or "all") if not data.multi else f"{r['label']}:{point or 'all'}"
        # the sheet's rows in plain floats: a frame per group costs more than its eight rows
        for kind, ms, pct in tracelens_rows({f"{t}_ns": r[f"{t}_ms"] * 1e6 for t in PYTORCH_TYPES}):
            rows.append({"full_config": config,
                         "threads_num": axes.get("threads"),
                         "thread_config": f"{axes['threads']}thread" if axes.get("threads") is not None else None,
                         "channels_num": axes.get("channel"),
                         "channel_config": f"{axes['channel']}channels" if axes.get("channel") is not None else None,
                         "num_ranks": r["num_ranks"], "type": kind,
                         "time (ms)": ms, "percent (%)": pct})
        summ.append({"full_config": config,
                     "threads_num": axes.get("threads"), "channels_num": axes.get("channel"),
                     "num_ranks": r["num_ranks"], "computation_time_ms": r["computation_time_ms"],
                     "exposed_comm_time_ms": r["exposed_comm_time_ms"],
                     "exposed_memcpy_time_ms": r["exposed_memcpy_time_ms"],
                     "busy_time_ms": r["busy_time_ms"], "idle_time_ms": r["idle_time_ms"],
                     "total_time_ms": r["total_time_ms"]})
    # built with the sheet's headers (no rename on the way), as columns: no frame for a few rows
    all_data = dict(_columns_of(rows, ["full_config", "threads_num", "thread_config", "channels_num",
                                       "channel_config", "num_ranks", "type", "time (ms)", "percent (%)"]))
    book.columns("gpu_timeline", list(all_data.items()), len(rows),
                 "aorta All_Data: TraceLens PyTorch-mode GPU timeline per config, mean over the "
                 "process-GPU groups (ranks) of the config")
    for name, value, column in (("Pivot_Time_ms", "time ms", "time (ms)"), ("Pivot_Percent", "percent", "percent (%)")):
        description = f"aorta {name}: index type, columns full_config, values {value}"
        if not rows:
            book.table(name, pd.DataFrame(columns=["type"]), description)
            continue
        keys, piv = pivot_columns(all_data, "type", "full_config", column)
        unit = "ms" if value == "time ms" else "%"
        book.columns(name, [(str(c) if c == "type" else f"{c} ({unit})", s) for c, s in zip(keys, piv)],
                     len(piv[0]), description)
    ws, hdr, cols = book.columns("Summary_By_Config", _columns_of(summ, list(summ[0]) if summ else []),
                                 len(summ), "aorta Summary_By_Config: per config, mean over ranks (ms); "
                                 "computation + exposed comm + exposed memcpy + idle = total")
    n = len(summ)
    if n:
        chart = book.wb.add_chart({"type": "column", "subtype": "stacked"})
        for name, colour in (("computation_time_ms", "#4472C4"), ("exposed_comm_time_ms", "#ED7D31"),
                             ("exposed_memcpy_time_ms", "#A5A5A5"), ("idle_time_ms", "#D9D9D9")):
            j = _col_index(cols, name)
            chart.add_series({"name": ["Summary_By_Config", hdr, j],
                              "categories": ["Summary_By_Config", hdr + 1, 0, hdr + n, 0],
                              "values": ["Summary_By_Config", hdr + 1, j, hdr + n, j],
                              "fill": {"color": colour}})
        chart.set_title({"name": "kernel time per config"})
        chart.set_y_axis({"name": "time (ms)"})
        ws.insert_chart(hdr + n + 3, 0, chart, {"x_scale": 1.5, "y_scale": 1.2})


def _columns_of(rows: list[dict[str, Any]], names: list[str]) -> list[tuple[str, pd.Series]]:
    """The columns of ``pd.DataFrame(rows, columns=names)`` (``rows`` each holding every name):
    each inferred from its own values, as the frame infers it (ints with None as floats, only
    None as objects, text as ``str``), without the frame around them."""
    if not rows:
        return [(k, pd.Series([], dtype=object)) for k in names]
    return [(k, pd.Series([r[k] for r in rows])) for k in names]


def _records(df: pd.DataFrame) -> list[dict[Any, Any]]:
    """``df.to_dict("records")``. A frame of NumPy number and text columns (the timeline's) is
    read from its columns as they iterate, which is what pandas reads, without its ``iloc`` per
    column and its boxing pass (which changes none of these values)."""
    series = [s for _, s in df.items()]
    if not df.columns.is_unique or not all(_plain(s.dtype) for s in series):
        return df.to_dict("records")
    names = df.columns.tolist()
    return [dict(zip(names, row)) for row in zip(*series)]


def _plain(dtype: Any) -> bool:
    """A column dtype whose values iterate as Python scalars (``to_dict`` leaves them as they
    are): a NumPy bool or number, or pandas' text with NaN for missing (``str``; the ``pd.NA``
    variant's missing cells ``to_dict`` makes None)."""
    if isinstance(dtype, np.dtype):
        return dtype.kind in "biuf"
    return isinstance(dtype, pd.StringDtype) and dtype.na_value is not pd.NA


def pivot_columns(df: pd.DataFrame | Mapping[str, pd.Series], index: str, columns: str,
                  value: str) -> tuple[list[Any], list[pd.Series]]:
    """The column names and the columns of ``df.pivot_table(index=index, columns=columns,
    values=value, aggfunc="first", sort=False).reset_index()`` of a float ``value`` column (what
    the pivot sheets write), from one pass over the rows (pandas' groupby and unstack cost some milliseconds a sheet,
    whatever its size): each cell the first non-missing value of its (index, column) pair, rows
    and columns without any value left out. Their order is pandas': each key in the order it
    first appears in its own column where every such key keeps a value, else in the order of the
    first appearance of the pairs that keep one."""
    first: dict[tuple[Any, Any], float] = {}
    seen: dict[tuple[Any, Any], None] = {}  # every pair, in order of first appearance
    rows: dict[Any, None] = {}
    cols: dict[Any, None] = {}
    for r, c, v in zip(df[index].tolist(), df[columns].tolist(), df[value].tolist()):
        if not _missing(r):
            rows.setdefault(r, None)
        if not _missing(c):
            cols.setdefault(c, None)
        if _missing(r) or _missing(c):
            continue
        seen.setdefault((r, c), None)
        if not _missing(v) and (r, c) not in first:
            first[(r, c)] = v
    kept = [pair for pair in seen if pair in first]
    by_pair = (list(dict.fromkeys(r for r, _ in kept)), list(dict.fromkeys(c for _, c in kept)))
    kept_rows = list(rows) if len(by_pair[0]) == len(rows) else by_pair[0]
    kept_cols = list(cols) if len(by_pair[1]) == len(cols) else by_pair[1]
    table = [pd.Series(kept_rows, dtype=df[index].dtype)]
    for c in kept_cols:
        table.append(pd.Series([first.get((r, c), np.nan) for r in kept_rows], dtype=np.float64))
    return [index, *kept_cols], table


def _missing(x: Any) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def _point_text(point: Any) -> str | None:
    return None if point is None or (isinstance(point, float) and math.isnan(point)) else str(point)


def _points_axes(points: list[str | None]) -> dict[str | None, dict[str, int | None]]:
    """``{point: {"threads": T, "channel": C}}`` (None where absent) of each distinct point id,
    all parsed in one call."""
    named = list(dict.fromkeys(p for p in points if p is not None))
    out: dict[str | None, dict[str, int | None]] = {None: {"threads": None, "channel": None}}
    if named:
        parsed = parse_point_axes(pd.Series(named, dtype=object))
        columns = {k: parsed[k].tolist() for k in ("threads", "channel")}
        for i, point in enumerate(named):
            out[point] = {k: (None if pd.isna(v[i]) else int(v[i])) for k, v in columns.items()}
    return out


def _environment_sheet(book: _Book, data: ReportData) -> None:
    flat = _flatten(data.meta)
    # text columns (their values are all text): no frame, nor its type inference, for them
    book.columns("environment", [("key", pd.Series(list(flat), dtype=object)),
                                 ("value", pd.Series(list(flat.values()), dtype=object))], len(flat),
                 "run metadata: hardware, software versions, commit, inputs",
                 widths={"key": 36, "value": 100})


def _flatten(d: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(d, dict):
        out: dict[str, str] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(d, (list, tuple)):
        try:
            return {prefix: json.dumps(d, default=str)}
        except (TypeError, ValueError):
            return {prefix: str(d)}
    if isinstance(d, pd.DataFrame):
        return {prefix: d.to_json(orient="records", default_handler=str)}
    return {prefix: "" if d is None else str(d)}


def _collective_sheets(book: _Book, data: ReportData) -> None:
    """aorta's ``nccl_master_all_configs`` (its columns and units: µs, ms, MB = 2**20 B,
    GB/s = 2**30 B/s) and our per-(point, collective, size) summary with the straggler table."""
    book.table("nccl_master_all_configs", data.nccl_master,
               "aorta nccl_master_all_configs: collectives matched across ranks per point; latencies "
               "and skews in µs, Total comm latency in ms, MB = 2^20 bytes, GB/s = 2^30 bytes/s "
               "(TraceLens units)", widths={"Collective name": 24, "source_file": 40}, hide=_hidden(data))
    ws, hdr, cols = book.table(
        "collectives", data.collectives,
        "per point, collective and message-size bucket over matched collectives: latency = fastest "
        "rank's kernel (µs), start/end skew (µs), algorithm and bus bandwidth (GB/s, GB = 2^30 B)",
        widths={"coll_name": 24}, hide=_hidden(data))
    if len(data.stragglers):
        first = hdr + 1 + min(len(data.collectives), book.max_rows) + 2
        book.table("collectives", data.stragglers,
                   "per point and rank: time waiting for the last rank to arrive (µs) and how often "
                   "the rank arrived last / first (straggler summary)", ws=ws, first_row=first,
                   filter_=False, hide=_hidden(data))


def write_excel(data: ReportData, path: Path, *, max_rows: int = DEFAULT_MAX_ROWS) -> Path:
    return write_book(path, max_rows, lambda book: _fill(book, data))


def write_book(path: Path, max_rows: int, fill: Callable[["_Book"], None]) -> Path:
    """A workbook ``fill`` writes, saved to ``path``. xlsxwriter builds the zip in memory and
    safe_io writes its bytes at once: a full disk is then one ``OSError`` of ours (a zip file
    left open on a failed write would raise again from its finalizer, on stderr), a link planted
    at ``path`` is replaced, never followed, and a failed write leaves the old file in place."""
    buf = io.BytesIO()
    book = _Book(buf, max_rows)
    try:
        fill(book)
    finally:
        book.close()
    write_bytes(path, buf.getvalue())
    return Path(path)


def _fill(book: "_Book", data: ReportData) -> None:
    _summary_sheet(book, data)
    _verdicts_sheet(book, data)
    book.table("kernels", data.kernels,
               "duration statistics per point, rank and kernel (µs; std sample, quantiles type 7)",
               csv_hint="kernels.csv", hide=_hidden(data))
    book.table("kernel_summary", data.kernel_summary,
               "TraceLens kernel_summary per kernel name, in true µs/ms (TraceLens's rocprof mode "
               "prints ns under µs labels); cumulative share computed after sorting", hide=_hidden(data))
    book.table("by_category", data.by_category,
               "kernel time per point, rank and category (all dispatches)", hide=_hidden(data))
    _short_kernels_sheet(book, data)
    book.table("kernel_details", data.kernel_details,
               "the 100 longest dispatches (TraceLens kernel_details)", hide=_hidden(data))
    book.table("top_variance", data.top_variance,
               f"aorta top-{data.top_k} GEMM kernels by max - min per (point, rank), with timestamps "
               "(trace clock, ms), collective overlap of the max instance and robust CVs",
               csv_hint="top5_gemm_kernels_time_variance_with_collective_overlap.csv", hide=_hidden(data))
    book.table("overlap", data.overlap,
               "GEMM dispatches overlapping collectives on the same GPU, per point, rank and kernel",
               hide=_hidden(data))
    _timeline_sheets(book, data)
    if len(data.counters) and len(data.counters.columns) > 1:
        book.table("counters", data.counters,
                   "hardware counters: median per point and kernel (raw counter units; "
                   "cu_utilization is a fraction of the CUs)", hide=_hidden(data))
    else:
        ws = book.wb.add_worksheet("counters")
        ws.write_string(0, 0, "no hardware counters in the inputs (run a counter pass: "
                              "gemmperf rocprof-config)", book.fmt["note"])
    if data.has_collectives:
        _collective_sheets(book, data)
    _environment_sheet(book, data)
    if len(data.telemetry_summary):
        book.table("telemetry", data.telemetry_summary,
                   "machine state per point, process and device while it ran (run/telemetry.py): "
                   "GFX/SM clock (host: CPU frequency) min/median/max MHz, median power W, max "
                   "temperatures °C, seconds throttled by a power/thermal limit; samples in each "
                   "point's telemetry.parquet")


__all__ = ["DEFAULT_MAX_ROWS", "pivot_columns", "write_book", "write_excel"]
