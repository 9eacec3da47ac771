"""Run-history store timings: append, read (all / one test / -k), runs(), prune dry run.

Synthetic history shaped like a nightly CI sweep: RUNS runs x TESTS tests, each test 2 points x
20 kernels x (dur_ns + category totals) x 8 processes. Usage:
``python benchmarks/history_store.py [RUNS] [TESTS] [URL]`` (default 200 runs, 4 tests, a temp dir).
Prints one line per operation; timings on a shared machine are noisy.
"""

from __future__ import annotations

import sys
import tempfile
import time

import numpy as np
import pandas as pd

from pytest_gemmperf.history.store import HistoryStore, RunInfo


def values(test: str, rng: np.random.Generator) -> pd.DataFrame:
    k = [f"Cijk_Ailk_Bljk_MT{i}x128" for i in range(20)] + [f"category:c{i}" for i in range(4)]
    pts, kern, unit = np.meshgrid(["ch28-th256", "ch56-th256"], k, [f"h/{u}/0/0" for u in range(8)], indexing="ij")
    n = pts.size
    metric = np.where(np.char.startswith(kern.ravel().astype(str), "category:"), "category_total_ns", "dur_ns")
    return pd.DataFrame({"test": test, "point": pts.ravel(), "kernel": kern.ravel(), "metric": metric,
                         "unit": unit.ravel(), "value": 1e5 * np.exp(rng.normal(0, 0.02, n))})


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    tests = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    url = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="gemmperf-history-bench-")
    rng = np.random.default_rng(0)
    st = HistoryStore(url)
    t0 = time.perf_counter()
    rows = 0
    for r in range(runs):
        v = pd.concat([values(f"perf/test_{t}.py::test_{t}", rng) for t in range(tests)], ignore_index=True)
        rows += len(v)
        st.append(v, RunInfo(f"nightly-{r:04d}", time=pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(hours=r),
                             commit=f"{r:040x}", hw_key="gfx942-MI300X-x8", meta={"versions": {"rocm": "6.4.1"}}))
    t_app = time.perf_counter() - t0
    print(f"append: {runs} runs x {tests} tests = {runs * tests} files, {rows} rows in {t_app:.2f} s "
          f"({1e3 * t_app / (runs * tests):.1f} ms per file)  [{url}]")
    for label, fn in (("read all", lambda: st.read()),
                      ("read one test", lambda: st.read(test="perf/test_0.py::test_0")),
                      ("read one test + hw", lambda: st.read(test="perf/test_0.py::test_0", hw_key="gfx942-MI300X-x8")),
                      ("read -k MT3x", lambda: st.read(kernel_contains="MT3x")),
                      ("runs()", lambda: st.runs()),
                      ("prune dry run", lambda: st.prune(keep_last=10))):
        t0 = time.perf_counter()
        out = fn()
        print(f"{label}: {len(out)} rows in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
