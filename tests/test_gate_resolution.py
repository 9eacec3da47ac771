"""The timer's resolution bounds what a change of a short kernel can prove (gate/durations.py
``_resolution_var``): identical per-process medians must not give a zero-width interval."""

import numpy as np
import pandas as pd

from pytest_gemmperf.gate.compare import GateConfig, compare

COLS = ["point", "kernel", "metric", "unit", "value"]


def _side(prefix: str, memset_ns: float, rng: np.random.Generator, units: int = 3) -> pd.DataFrame:
    rows = []
    for u in range(units):
        unit = f"{prefix}/{u}/0/0"
        # a short kernel whose durations sit on two ticks of a 1 ns timer, the same in every process
        rows += [("p", "memset", "dur_ns", unit, memset_ns + (i % 2)) for i in range(100)]
        for k in range(10):
            rows += [("p", f"gemm{k}", "dur_ns", unit, 5000.0 + 50 * rng.random()) for _ in range(30)]
    return pd.DataFrame(rows, columns=COLS)


def _memset_row(shift_ns: float) -> pd.Series:
    rng = np.random.default_rng(3)
    v = compare(_side("a", 1000.0, rng), _side("b", 1000.0 + shift_ns, rng), GateConfig(threshold=0.0))
    return v[v["kernel"] == "memset"].iloc[0]


def test_one_tick_change_is_not_a_verdict():
    row = _memset_row(1.0)
    assert abs(row["ratio"] - 1.001) < 1e-5
    assert row["ci_low"] < 1.0 < row["ci_high"]  # no zero-width interval from identical medians
    assert row["verdict"] == "unchanged"


def test_change_of_many_ticks_is_still_found():
    row = _memset_row(30.0)
    assert row["ci_low"] > 1.0
    assert row["verdict"] == "regression"


def test_identical_medians_on_every_side_give_no_zero_width_interval():
    # few kernels (no shared factor, no useful prior), every process on the same tick: the
    # H200 Memset case (3 identical per-process medians per side)
    def side(prefix: str, memset_ns: float) -> pd.DataFrame:
        rows = []
        for u in range(3):
            rows += [("p", "memset", "dur_ns", f"{prefix}/{u}/0/0", memset_ns) for _ in range(40)]
            rows += [("p", "copy", "dur_ns", f"{prefix}/{u}/0/0", 2000.0) for _ in range(40)]
        return pd.DataFrame(rows, columns=COLS)

    v = compare(side("a", 1000.0), side("b", 1001.0), GateConfig(threshold=0.0))
    row = v[v["kernel"] == "memset"].iloc[0]
    assert row["ci_high"] - row["ci_low"] > 1e-3
    assert row["verdict"] != "regression"
    v = compare(side("a", 1000.0), side("b", 1080.0), GateConfig(threshold=0.0))
    row = v[v["kernel"] == "memset"].iloc[0]
    assert row["verdict"] == "regression" and row["ci_low"] > 1.05
