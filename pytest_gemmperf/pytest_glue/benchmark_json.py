"""pytest-benchmark JSON of a pytest session (``--gemmperf-benchmark-json PATH``).

The gated points of a session are known to the controller from the test reports: each gated
point records a ``gemmperf_gated`` property (test id, point id, warm-up, kernel regexes) when
its samples are taken (``gate_step.GateStep.samples``). Under xdist the properties travel
with the reports, and every worker writes its points into the one results directory, so the
controller needs no per-worker part files: at the end of the session it reads each gated
point's ``dispatches.parquet`` from the results directory and exports it.

What is exported is the candidate the gate judged: the dispatch durations of the kernels the
point's regexes select, after the same warm-up removal (``samples_from_dispatches``; all
processes, including confirmation re-runs, which join ``dispatches.parquet``). Each
(test, point, kernel) is one pytest-benchmark benchmark whose rounds are those durations in
seconds (``gate/benchmark_export.py``); ``fullname`` is ``<test id>::<kernel>[<point>]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.analysis.selection import select_kernels
from pytest_gemmperf.gate.benchmark_export import to_pytest_benchmark_json
from pytest_gemmperf.gate.samples import samples_from_dispatches
from pytest_gemmperf.pytest_glue.reporting import PROP_GATED
from pytest_gemmperf.run.results import ResultsDir
from pytest_gemmperf.jsonsafe import clean
from pytest_gemmperf.safe_io import write_text



def gated_property(test_id: str, point_id: str, warmup: int, kernels: Iterable[str]) -> tuple[str, str]:
    """The ``(name, value)`` a gated point records among its test's user_properties."""
    return PROP_GATED, json.dumps({"test": test_id, "point": point_id, "warmup": int(warmup),
                                   "kernels": list(kernels)})


def write_session_benchmark_json(path: Path, results_root: Path, gated: Iterable[dict[str, Any]],
                                 *, machine_info: dict | None = None,
                                 commit_info: dict | None = None,
                                 outcomes: Iterable[dict[str, Any]] = ()) -> tuple[Path, int]:
    """Write the pytest-benchmark JSON of the ``gated`` points (dicts as recorded by
    :func:`gated_property`; duplicates are merged) found under ``results_root``. Returns
    (path, number of benchmarks). A point whose ``dispatches.parquet`` is missing or has no
    selected dispatches raises ``GemmperfInputError`` naming the file: an export silently
    short of a point would be compared as if the point had vanished. ``outcomes``: the points'
    gate outcomes (``gemmperf_outcome`` properties); each benchmark's ``extra_info`` carries its
    point's ``gemmperf_outcome`` and reason."""
    by_point = {(str(o.get("test")), str(o.get("point"))): o for o in outcomes if isinstance(o, dict)}
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for g in gated:
        seen.setdefault((str(g["test"]), str(g["point"])), g)
    if not seen:
        raise GemmperfInputError(path, "no gated points in this session: pytest-benchmark JSON not written")
    results = ResultsDir(results_root)
    benches: list[dict[str, Any]] = []
    doc: dict[str, Any] = {}
    for (test, point), g in sorted(seen.items()):
        file = results.point_dir(test, point) / "dispatches.parquet"
        try:
            disp = pd.read_parquet(file)
        except (OSError, ValueError) as exc:
            raise GemmperfInputError(file, f"cannot read the gated point's dispatches: {exc}") from None
        disp = select_kernels(disp, list(g.get("kernels") or []))
        samples = samples_from_dispatches(disp, warmup=int(g.get("warmup") or 0), categories=False)
        if samples.empty:
            raise GemmperfInputError(file, "no dispatches of the gated kernels left after warm-up")
        doc = to_pytest_benchmark_json(samples, machine_info, commit_info, test=test)
        o = by_point.get((test, point))
        if o is not None:
            for b in doc["benchmarks"]:
                b.setdefault("extra_info", {}).update(gemmperf_outcome=o.get("outcome"),
                                                      gemmperf_reason=o.get("reason") or "")
        benches.extend(doc["benchmarks"])
    doc["benchmarks"] = benches
    path.parent.mkdir(parents=True, exist_ok=True)
    # private temp file + rename: never written through a planted link
    return write_text(path, json.dumps(clean(doc), indent=2, ensure_ascii=True)), len(benches)
