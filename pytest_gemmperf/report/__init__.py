"""Reports people can act on: report.html, report.xlsx, CSV/JSON and a Markdown summary.

:func:`write_reports` takes canonical tables (one sweep, or several for an N-way comparison)
and an optional verdicts table; :func:`write_results_reports` does the same for a pytest
session's results directory (docs/ARCHITECTURE.md "Results layout").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError, output_error
from pytest_gemmperf.paths import contained, contained_glob
from pytest_gemmperf.report.before_after import ComparedSamples, read_results_compared
from pytest_gemmperf.report.data import DEFAULT_SHORT_KERNEL_US, ReportData, build_report_data, report_kernel_labels
from pytest_gemmperf.safe_io import unneutralise_frame
from pytest_gemmperf.report import tables
from pytest_gemmperf.report.html import prepare_template, write_html
from pytest_gemmperf.traces.discover import load
from pytest_gemmperf.report.telemetry import read_results_telemetry

if TYPE_CHECKING:
    from pytest_gemmperf.traces.parallel import Beside


#: every output; ``formats`` picks among these groups
FORMATS = ("html", "xlsx", "csv", "json", "md")


def hardware_from_agents(agents: pd.DataFrame | None) -> str | None:
    """``8 x AMD Instinct MI350X (gfx950, 256 CUs)`` from an agents table; GPUs are counted
    per host, so two 8-GPU nodes read ``2 hosts x 8 x ...`` (:func:`gpu_count_text`)."""
    if agents is None or len(agents) == 0 or "type" not in agents.columns:
        return None
    gpus = agents[agents["type"].astype(object) == "GPU"]
    if len(gpus) == 0:
        return None
    key = [c for c in ("host", "gpu_index", "node_id") if c in gpus.columns]
    gpus = gpus.drop_duplicates(key) if key else gpus
    host = gpus["host"].astype(object).fillna("") if "host" in gpus.columns else pd.Series("", index=gpus.index)
    parts = []
    for (product, arch, cus), grp in gpus.groupby(
            [gpus["product"].astype(object).fillna("GPU"), gpus["gpu_arch"].astype(object).fillna("?"),
             gpus["cu_count"].astype("Float64").fillna(-1)], sort=True):
        extra = f"{arch}" + (f", {int(cus)} CUs" if cus >= 0 else "")
        per_host = host.loc[grp.index].value_counts(sort=False).sort_index().tolist()
        parts.append(f"{gpu_count_text(per_host)} {product} ({extra})")
    return "; ".join(parts)


def gpu_count_text(per_host: Sequence[int]) -> str:
    """GPU counts of the hosts as a reader counts them: ``8 x`` (one host), ``2 hosts x 8 x``
    (alike hosts), ``2 hosts (8 + 4) x`` (different counts), never one sum of all hosts."""
    if len(per_host) == 1:
        return f"{per_host[0]} x"
    if len(set(per_host)) == 1:
        return f"{len(per_host)} hosts x {per_host[0]} x"
    return f"{len(per_host)} hosts ({' + '.join(map(str, per_host))}) x"


def write_reports(out_dir: str | os.PathLike, *,
                  dispatches: pd.DataFrame | Sequence[pd.DataFrame] | Mapping[str, pd.DataFrame],
                  verdicts: pd.DataFrame | None = None,
                  counters: pd.DataFrame | Sequence[pd.DataFrame | None] | None = None,
                  agents: pd.DataFrame | Sequence[pd.DataFrame | None] | None = None,
                  meta: Mapping[str, Any] | None = None, labels: Sequence[str] | None = None,
                  formats: Iterable[str] = FORMATS, skip: Iterable[str] = (),
                  warmup: int = 0, top_k: int = 5,
                  short_kernel_us: float = DEFAULT_SHORT_KERNEL_US,
                  max_sheet_rows: int | None = None,
                  telemetry: tuple[pd.DataFrame, pd.DataFrame, dict] | None = None,
                  compared: Sequence[ComparedSamples] = (),
                  beside: Beside | None = None) -> dict[str, Path]:
    """Write every report into ``out_dir``; returns ``{file name: path}``.

    ``dispatches`` is one canonical dispatches table, a list of them (with ``labels``; the
    first is the baseline of an N-way comparison) or a mapping label -> table. ``counters`` and
    ``agents`` follow the same shape. ``verdicts`` is the gate's table, with a ``label`` column
    naming the candidate sweep when several were compared. ``skip`` names files not to write
    (e.g. ``kernels.csv`` when the caller writes its own). ``compared``: the samples each
    ``compare`` call received (baseline and candidate per test), drawn per process beside the
    forest plot for every verdict row that is not ``unchanged``. ``beside``: a process
    (``traces.parallel.beside``, best preloading ``report.excel``) that writes report.xlsx while
    this one writes the other files; the same bytes as written here.
    """
    formats = set(formats)
    unknown = formats - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown report formats {sorted(unknown)}; choose from {FORMATS}")
    skip = set(skip)
    out = Path(out_dir)
    meta = dict(meta or {})
    if "hardware" not in meta:
        first_agents = agents if isinstance(agents, pd.DataFrame) or agents is None else \
            next((a for a in agents if a is not None), None)
        hw = hardware_from_agents(first_agents)
        if hw:
            meta["hardware"] = hw
    data = build_report_data(dispatches, verdicts=verdicts, counters=counters, agents=agents,
                             meta=meta, labels=labels, warmup=warmup, top_k=top_k,
                             short_kernel_us=short_kernel_us, telemetry=telemetry, compared=compared)
    try:
        out.mkdir(parents=True, exist_ok=True)
        return _write(data, out, formats, skip, max_sheet_rows, beside)
    except OSError as exc:
        raise output_error(exc, out, what="report") from None


def _write(data: ReportData, out: Path, formats: set[str], skip: set[str],
           max_sheet_rows: int | None, beside: Beside | None = None) -> dict[str, Path]:
    files: dict[str, Path] = {}
    xlsx = "xlsx" in formats and "report.xlsx" not in skip
    if xlsx and beside is not None:
        report_kernel_labels(data)  # computed once, here: the workbook's process gets them with the data
    # started first: the other process writes the workbook while this one writes the rest
    workbook = beside.submit(_write_excel, data, out / "report.xlsx", max_sheet_rows) \
        if xlsx and beside is not None else None
    if "csv" in formats:
        files.update(tables.write_csvs(data, out, skip))
    if xlsx:  # listed in this place either way
        files["report.xlsx"] = out / "report.xlsx" if workbook else _write_excel(data, out / "report.xlsx",
                                                                                 max_sheet_rows)
    if "html" in formats and "report.html" not in skip:
        files["report.html"] = write_html(data, out / "report.html")
    if "md" in formats and "summary.md" not in skip:
        files["summary.md"] = tables.write_summary_md(data, out / "summary.md")
    if workbook is not None:
        files["report.xlsx"] = workbook()
    if "json" in formats and "summary.json" not in skip:
        path = out / "summary.json"
        files["summary.json"] = path
        tables.write_summary_json(data, path, files)
    return files


def _write_excel(data: ReportData, path: Path, max_sheet_rows: int | None) -> Path:
    """report.xlsx (a module-level function: it runs in a process beside this one too)."""
    # lazy: the workbook's module (xlsxwriter) only in the process that writes it
    from pytest_gemmperf.report import excel

    return excel.write_excel(data, path, max_rows=max_sheet_rows or excel.DEFAULT_MAX_ROWS)


# ---------------------------------------------------------------------------------------------
# pytest session results directory


def _read_run_json(root: Path) -> dict[str, Any]:
    p = contained(root, "run.json")  # a planted link is refused, never read through
    if not p.is_file():
        return {}
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GemmperfInputError(p, f"unreadable run metadata: {exc}") from None


def failed_points(root: Path) -> list[str]:
    """``test[point]`` of each point of a results directory whose run failed (point.json
    ``status`` ``failed``): the points whose outcome is ``error``."""
    out = []
    for p in sorted(root.glob("*/*/point.json")):
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # the readers name a damaged point.json themselves
        if isinstance(doc, dict) and doc.get("status") == "failed":
            out.append(f"{doc.get('test_id') or p.parent.parent.name}[{doc.get('point') or p.parent.name}]")
    return out


def _session_meta(run: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten the few run.json facts the report headline shows; keep the rest as-is."""
    meta: dict[str, Any] = {}
    versions = run.get("versions") if isinstance(run.get("versions"), Mapping) else {}
    for key, sources in (("hardware", ("hardware", "hardware_key")),
                         ("rocm_version", ("rocm_version", "rocm")),
                         ("rocprofv3_version", ("rocprofv3_version", "rocprofv3")),
                         ("torch_version", ("torch_version", "torch")),
                         ("commit", ("commit", "git_commit")), ("host", ("host",)),
                         ("created", ("start_time", "started", "created"))):
        for s in sources:
            v = run.get(s, versions.get(s))
            if v not in (None, "", {}):
                meta[key] = v if not isinstance(v, Mapping) else json.dumps(v, sort_keys=True)
                break
    tree = working_tree_text({**versions, **run})
    if tree:
        meta["working_tree"] = tree
    meta["run"] = dict(run)
    return meta


def working_tree_text(facts: Mapping[str, Any]) -> str | None:
    """What the report says of the working tree a run was made from (``store/hardware.py``'s
    ``git_state``): ``clean`` or ``uncommitted changes (diff sha256 1a2b3c4d5e6f)``, with the
    ``git describe`` name and the untracked files; None where it was not recorded."""
    dirty = facts.get("git_dirty")
    if not isinstance(dirty, bool):
        return None
    text = "clean"
    if dirty:
        digest = facts.get("git_diff_sha256")
        text = "uncommitted changes" + (f" (diff sha256 {str(digest)[:12]})" if digest else "")
    describe = facts.get("git_describe")
    if isinstance(describe, str) and describe:
        text += f"; {describe}"
    untracked = facts.get("git_untracked")
    if isinstance(untracked, int) and not isinstance(untracked, bool) and untracked:
        text += f"; {untracked} untracked file(s)"
    return text


def read_verdict_files(root: Path) -> pd.DataFrame | None:
    """All ``<test>/verdicts.csv`` of a results directory, concatenated."""
    frames = []
    for p in contained_glob(root, "*/verdicts.csv"):
        try:
            # our own CSV: undo the formula neutralisation so kernel names read as recorded
            frames.append(unneutralise_frame(pd.read_csv(
                p, keep_default_na=True, dtype={"test": str, "point": str, "kernel": str,
                                                "metric": str, "verdict": str, "note": str})))
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            raise GemmperfInputError(p, f"unreadable verdicts: {exc}") from None
    if not frames:
        return None
    v = pd.concat(frames, ignore_index=True)
    for c in ("test", "point", "kernel", "metric", "verdict", "note"):
        if c in v.columns:
            v[c] = v[c].fillna("")
    return v


def write_results_reports(results_dir: str | os.PathLike, out_dir: str | os.PathLike,
                          **kwargs: Any) -> Path | None:
    """Reports of a pytest session's results directory (the plugin's end-of-session hook).

    Returns ``out_dir``, or None when the session produced no dispatches (nothing profiled).
    """
    root = Path(results_dir)
    if not any(root.glob("*/*/dispatches.parquet")):
        return None
    trace = load([root])
    meta = _session_meta(_read_run_json(root))
    meta.setdefault("inputs", [str(root)])
    meta["point_errors"] = failed_points(root)  # outcome "error": the banner counts them

    kwargs.setdefault("telemetry", read_results_telemetry(root))
    verdicts = read_verdict_files(root)
    kwargs.setdefault("compared", read_results_compared(root, verdicts))
    write_reports(out_dir, dispatches=trace.dispatches, counters=trace.counters, agents=trace.agents,
                  verdicts=verdicts, meta=meta, **kwargs)
    return Path(out_dir)


__all__ = ["FORMATS", "ComparedSamples", "prepare_template", "working_tree_text", "ReportData", "build_report_data", "hardware_from_agents",
           "read_verdict_files", "write_reports", "write_results_reports"]
