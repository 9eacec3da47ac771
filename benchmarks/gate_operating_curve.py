"""The first look's operating curve: how often a GEMM-only test fails, and what fraction of
its GEMM rows are ``regression``, when every GEMM changes by a multiple of the threshold.

Noise model, trace and samples: ``benchmarks/gate_regimes.py`` (real 908 trace resampled by
whole steps, 1 % per-process factor shared by all kernels, ~0.35 % per kernel; 4 + 4
processes, fresh baseline; the test gates the GEMMs and the samples carry the other kernels as
within-process controls, as ``gate_samples`` writes them). Every GEMM of the candidate is
``k x threshold`` slower, k in 0, 1/2, 4/5, 1, 1.4, 2 (the default threshold, 5 %).

Each replicate's statistics (``compare_stats``) are computed once and kept (``--cache``); the
rule that turns them into verdicts (``assign_verdicts``: the bound's level
``GateConfig.threshold_level``, corrected over the significant rows) is then applied at every
level of ``--levels``, so the levels are compared on the same replicates. Per multiple and
level: tests failing and the mean fraction of GEMM rows ``regression``, each with its 95 %
interval (Clopper-Pearson; mean +- 1.96 standard errors). ``--no-controls`` drops the controls
from the samples: the gate on the gated kernels alone, the same replicates otherwise.

Run: ``python benchmarks/gate_operating_curve.py [--reps 60] [--levels 0.8,0.7]
[--cache FILE] [--no-controls]``; the table, its command and date are in
``docs/statistics.md`` ("The operating curve").
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gate_first_look as fl  # noqa: E402
import gate_regimes as gr  # noqa: E402
from pytest_gemmperf.gate.compare import CV, GateConfig, _hierarchical_q, assign_verdicts  # noqa: E402
from pytest_gemmperf.gate.metrics import CONTROL_NS  # noqa: E402

MULTIPLES = (0.0, 0.5, 0.8, 1.0, 1.4, 2.0)
THRESHOLD = GateConfig().threshold


def frames(k: float, reps: int, controls: bool, cache: dict, save) -> list[pd.DataFrame]:
    """The ``compare_stats`` frames of ``reps`` replicates of a family change of ``k`` x the
    threshold (the cached ones first; each multiple draws from its own seed)."""
    key = (k, controls)
    have = cache.setdefault(key, {"frames": [], "rng": None})
    pool = fl._pool("real-resampled")
    gemm, top = gr.gemms(pool)
    rng = have["rng"] or np.random.default_rng([4000, int(round(100 * k))])
    regime = gr.Regime(f"family {k:g} x threshold", kind="family", effect=k * THRESHOLD)
    keep = gr.compare_stats
    if not controls:  # the same replicates, judged without the controls' rows
        gr.compare_stats = lambda b, c, *a, **kw: keep(b[b["metric"] != CONTROL_NS], c[c["metric"] != CONTROL_NS],
                                                       *a, **kw)
    try:
        last = time.monotonic()
        while len(have["frames"]) < reps:
            out: list[pd.DataFrame] = []
            gr.one_test(pool, rng, regime, gemm, top, confirm=False, stats_out=out)
            have["frames"].append(out[0])
            have["rng"] = rng
            if time.monotonic() - last > 60:
                save()
                last = time.monotonic()
    finally:
        gr.compare_stats = keep
    save()
    return have["frames"][:reps]


def measures(st: pd.DataFrame, level: float) -> tuple[float, float]:
    """(test fails, fraction of GEMM rows ``regression``) of one replicate at the default
    threshold with the bound's level ``level`` (the q-values again under the gate's current
    multiplicity rule: a cached frame may predate it)."""
    cfg = GateConfig(threshold_level=level)
    st = st.copy()
    main = (st["metric"] != CV).to_numpy()
    st.loc[main, "q_value"] = _hierarchical_q(st[main], cfg)[0]
    v = assign_verdicts(st, cfg)
    reg = v["verdict"] == "regression"
    dur = v[(v["metric"] == "dur_ns") & (v["kernel"].astype(str) != "*")]
    return float(reg.any()), float((dur["verdict"] == "regression").mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--levels", default="0.8")
    ap.add_argument("--cache", default="")
    ap.add_argument("--no-controls", action="store_true")
    args = ap.parse_args(argv)
    if fl._pool("real-resampled") is None:
        print("real trace absent: nothing measured")
        return 0
    path = Path(args.cache) if args.cache else None
    cache = pickle.loads(path.read_bytes()) if path and path.exists() else {}

    def save() -> None:
        if path:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(cache))
            tmp.replace(path)

    levels = [float(x) for x in args.levels.split(",") if x]
    t0 = time.perf_counter()
    head = ["change", "level", "reps", "tests failing [95 %]", "GEMM rows `regression` [95 %]"]
    rows = [head]
    for k in MULTIPLES:
        fr = frames(k, args.reps, not args.no_controls, cache, save)
        for level in levels:
            m = np.array([measures(st, level) for st in fr])
            f_lo, f_hi = fl.interval(m[:, 0], False)
            r_lo, r_hi = fl.interval(m[:, 1], False)
            rows.append([f"{k:g} x ({100 * k * THRESHOLD:g} %)", f"{level:g}", str(len(fr)),
                         f"{100 * m[:, 0].mean():.1f} % [{100 * f_lo:.1f}-{100 * f_hi:.1f}]",
                         f"{100 * m[:, 1].mean():.1f} % [{100 * r_lo:.1f}-{100 * r_hi:.1f}]"])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    fmt = lambda r: "| " + " | ".join(c.ljust(x) for c, x in zip(r, w)) + " |"  # noqa: E731
    print(f"python benchmarks/gate_operating_curve.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip()
          + f"  ({datetime.now(timezone.utc):%Y-%m-%d}, {time.perf_counter() - t0:.0f} s)")
    print(f"GEMM-only test, every GEMM k x the {100 * THRESHOLD:g} % threshold slower, 4 + 4 processes, fresh "
          f"baseline, first look, {'with' if not args.no_controls else 'without'} within-process controls")
    print()
    print("\n".join([fmt(rows[0]), "|" + "|".join("-" * (x + 2) for x in w) + "|"] + [fmt(r) for r in rows[1:]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
