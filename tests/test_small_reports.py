"""The reports of a small input take shortcuts past pandas' per-operation costs (a grouping where
every key has one row, a frame per timeline group, a concatenation of one table): each gives
what the long way gives, value for value, on random tables (nulls, ties, one row), and the
long way still runs where a shortcut does not apply."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis.intervals import sorted_group_codes
from pytest_gemmperf.analysis.report_parts import decategorized
from pytest_gemmperf.analysis import small_tables as S
from pytest_gemmperf.analysis.timeline import PYTORCH_TYPES, tracelens_rows
from pytest_gemmperf.report import data as D
from pytest_gemmperf.report import excel as X
from pytest_gemmperf.report import html as H
from pytest_gemmperf.report import plots as P
from pytest_gemmperf.report.tables import public


def _same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got.columns.dtype == want.columns.dtype
    assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes]
    assert got.to_csv() == want.to_csv()


def _random_table(rng: random.Random, n: int) -> pd.DataFrame:
    return pd.DataFrame({
        "label": ["run"] * n,
        "kernel": pd.Categorical([rng.choice(["a", "b<c>", "=x", None]) for _ in range(n)]),
        "rank": pd.array([rng.choice([0, 1, None]) for _ in range(n)], dtype="Int64"),
        "dur_ns": [rng.randint(0, 10**6) for _ in range(n)],
        "v": [rng.choice([1.5, np.nan, -0.0, 1e300, 2 / 3]) for _ in range(n)],
        "text": pd.array([rng.choice(["x", None]) for _ in range(n)], dtype=object),
    })


# ------------------------------------------------------------------------------ table plumbing

def test_public_slices_the_label_as_drop_removes_it():
    rng = random.Random(1)
    single = SimpleNamespace(multi=False)
    for n in (0, 1, 7):
        t = _random_table(rng, n)
        _same_frame(public(t, single), t.drop(columns="label"))
        moved = t[["kernel", "label", "v"]]  # label not first: the long way
        _same_frame(public(moved, single), moved.drop(columns="label"))
    assert public(t, SimpleNamespace(multi=True)) is t


def test_one_sweeps_table_is_what_concat_gives(monkeypatch):
    rng = random.Random(2)
    for n in (0, 1, 5, 40):
        t = D._with_label(_random_table(rng, n).drop(columns="label"), "run")
        want = pd.concat([decategorized(t)], ignore_index=True)
        calls = []
        real = pd.concat
        monkeypatch.setattr(pd, "concat", lambda *a, **k: calls.append(1) or real(*a, **k))
        got = D._concat([t])
        monkeypatch.setattr(pd, "concat", real)
        _same_frame(got, want)
        assert calls == []  # nothing to join: no copy made
    shifted = t.set_axis(range(10, 10 + len(t)))  # an index concat would renumber
    _same_frame(D._concat([shifted]), pd.concat([decategorized(shifted)], ignore_index=True))


# ------------------------------------------------------------------------------ timeline sheets

def _old_sheet_rows(r: dict) -> list[tuple]:
    """The rows the workbook's timeline sheets were built from: a Series and a frame per group."""
    row = pd.Series({f"{t}_ns": r[f"{t}_ms"] * 1e6 for t in PYTORCH_TYPES})
    total = float(row["total_time_ns"])
    values = [float(row[f"{t}_ns"]) for t in PYTORCH_TYPES]
    sheet = pd.DataFrame({"type": list(PYTORCH_TYPES), "time ms": [v / 1e6 for v in values],
                          "percent": [100.0 * v / total if total else np.nan for v in values]})
    return [tuple(s) for s in sheet.itertuples(index=False)]


def test_timeline_rows_are_the_old_sheets():
    rng = random.Random(3)
    for _ in range(300):
        r = {f"{t}_ms": rng.choice([0.0, 1.25, 2 / 3, 1e-7, 12345.678, np.nan]) for t in PYTORCH_TYPES}
        got = tracelens_rows({f"{t}_ns": r[f"{t}_ms"] * 1e6 for t in PYTORCH_TYPES})
        want = _old_sheet_rows(r)
        assert [g[0] for g in got] == [w[0] for w in want]
        for j in (1, 2):
            a = np.array([g[j] for g in got], dtype=np.float64)
            b = np.array([w[j] for w in want], dtype=np.float64)
            assert a.tobytes() == b.tobytes() or np.array_equal(a, b, equal_nan=True), r


class _Sheet:
    def __getattr__(self, name):
        return lambda *a, **k: None


class _CountingBook:
    """The workbook's interface, counting the tables written (no xlsxwriter behind it)."""

    def __init__(self):
        self.tables = {}
        self.wb = SimpleNamespace(add_chart=lambda *a, **k: _Sheet())

    def table(self, name, df, description, **kwargs):
        self.tables[name] = df.copy()
        return _Sheet(), 1, [(c, None) for c in df.columns]

    def columns(self, name, named, rows, description, **kwargs):
        """A table given as its columns (kept as a frame here, for the test to read)."""
        assert all(len(s) == rows for _, s in named)
        return self.table(name, pd.DataFrame(dict(named), index=range(rows)), description, **kwargs)


def _timeline_report(points: list) -> SimpleNamespace:
    rows = [{"label": "run", "point": p, "num_ranks": 2, "n_groups": 2,
             **{f"{t}_ms": 1.5 * (i + 1) + j for j, t in enumerate(PYTORCH_TYPES)}} for i, p in enumerate(points)]
    return SimpleNamespace(timeline_by_point=pd.DataFrame(rows), multi=False, labels=["run"])


def test_timeline_sheets_build_no_frame_per_group(monkeypatch):
    """The sheets' frames are the same few whatever the number of groups."""
    built = []
    real = pd.DataFrame.__init__

    def counting(self, *a, **k):
        built.append(1)
        real(self, *a, **k)

    counts = []
    for points in (["ch2-th256"], [f"ch{c}-th{t}" for c in (2, 4) for t in (256, 512)] + [None]):
        book = _CountingBook()
        monkeypatch.setattr(pd.DataFrame, "__init__", counting)
        built.clear()
        X._timeline_sheets(book, _timeline_report(points))
        monkeypatch.setattr(pd.DataFrame, "__init__", real)
        counts.append(len(built))
        sheet = book.tables["gpu_timeline"]
        assert len(sheet) == len(points) * len(PYTORCH_TYPES)
        want = [w for i, p in enumerate(points) for w in _old_sheet_rows(_timeline_report(points)
                                                                         .timeline_by_point.iloc[i].to_dict())]
        assert sheet["type"].tolist() == [w[0] for w in want]
        assert sheet["time (ms)"].tolist() == [w[1] for w in want]
        last = points[-1]
        threads = sheet["thread_config"].tolist()[-1]
        assert threads == last.split("-th")[1] + "thread" if last else pd.isna(threads)
    assert counts[0] == counts[1]


# ------------------------------------------------------------------------------ groupings of one row

def _overlap_table(rng: random.Random, n: int, unique: bool) -> pd.DataFrame:
    kernels = [f"k{i}" for i in range(n)] if unique else [rng.choice(["k1", "k2", "k0"]) for _ in range(n)]
    rng.shuffle(kernels)
    return pd.DataFrame({
        "label": [rng.choice(["run", "b"]) for _ in range(n)], "kernel": kernels,
        "count": [rng.randint(1, 9) for _ in range(n)],
        "mean_overlap_fraction": [rng.choice([0.0, 0.25, 1 / 3, np.nan]) for _ in range(n)],
        "median_dur_us": [rng.choice([0.0, 1.5, 7 / 3, 1e4, np.nan]) for _ in range(n)],
        "interference_slowdown": [rng.choice([1.0, 1.1, np.nan]) for _ in range(n)]})


def _pandas_scatter_points(o: pd.DataFrame) -> pd.DataFrame:
    return o.groupby(["label", "kernel"], sort=True).agg(
        count=("count", "sum"), frac=("mean_overlap_fraction", "mean"),
        dur=("median_dur_us", "median"), slow=("interference_slowdown", "median")).reset_index()


def test_scatter_points_are_the_grouped_ones(monkeypatch):
    rng = random.Random(4)
    for _ in range(200):
        o = _overlap_table(rng, rng.randint(1, 12), unique=rng.random() < 0.8)
        got, want = P._scatter_points(o), _pandas_scatter_points(o)
        assert got["label"].tolist() == want["label"].tolist()
        assert got["kernel"].tolist() == want["kernel"].tolist()
        for c in ("count", "frac", "dur", "slow"):
            assert np.array_equal(got[c].to_numpy(np.float64), want[c].to_numpy(np.float64), equal_nan=True)
        svg = P.overlap_scatter(o)
        monkeypatch.setattr(P, "one_row_per_key", lambda df, keys: False)
        assert P.overlap_scatter(o) == svg  # the chart, byte for byte
        monkeypatch.undo()


def test_one_row_per_key():
    assert S.one_row_per_key(pd.DataFrame({"a": ["x", "y"], "b": ["z", "z"]}), ("a", "b"))
    assert not S.one_row_per_key(pd.DataFrame({"a": ["x", "x"], "b": ["z", "z"]}), ("a", "b"))
    assert not S.one_row_per_key(pd.DataFrame({"a": ["x", None], "b": ["z", "z"]}), ("a", "b"))
    assert not S.one_row_per_key(pd.DataFrame({"a": [1, 2], "b": ["z", "z"]}), ("a", "b"))
    big = pd.DataFrame({"a": [str(i) for i in range(S.SMALL_TABLE_ROWS + 1)]})
    assert not S.one_row_per_key(big, ("a",))  # pandas' grouping above the threshold


def _kernels_table(rng: random.Random, n: int, unique: bool) -> pd.DataFrame:
    kernels = [f"k{i}" for i in range(n)] if unique else [rng.choice(["k1", "k0"]) for _ in range(n)]
    return pd.DataFrame({
        "label": ["run"] * n, "point": [None] * n, "kernel": kernels,
        "category": pd.array([rng.choice(["gemm", "other", None]) for _ in range(n)], dtype=object),
        "count": [rng.randint(1, 9) for _ in range(n)],
        "total_ns": [rng.choice([1000, 2000, rng.randint(1, 10**9)]) for _ in range(n)],
        "median_ns": [rng.choice([1.5, 2 / 3, np.nan]) for _ in range(n)],
        "p95_ns": [rng.choice([1.5, 1e9 / 7, np.nan]) for _ in range(n)],
        "cv": [rng.choice([0.1, np.nan]) for _ in range(n)]})


def test_kernel_overview_is_the_grouped_one(monkeypatch):
    rng = random.Random(5)
    report = SimpleNamespace()
    for _ in range(200):
        report.kernels = _kernels_table(rng, rng.randint(1, 12), unique=rng.random() < 0.8)
        got = H._records(H._kernel_overview(report))
        monkeypatch.setattr(H, "one_row_per_key", lambda df, keys: False)
        want = H._records(H._kernel_overview(report))
        monkeypatch.undo()
        assert got == want


def _cells(rng: random.Random, n: int) -> pd.DataFrame:
    names = [f"kernel_{rng.randint(0, 10**6)}_{i}" for i in range(n)]
    rng.shuffle(names)
    count = [rng.randint(1, 50) for _ in range(n)]
    return pd.DataFrame({
        "point": [None] * n, "rank": pd.array([None] * n, dtype="Int64"),
        "kernel": pd.Categorical(names), "count": count,
        "total_ns": [c * rng.choice([1000, 1001, rng.randint(1, 10**6)]) for c in count],
        "mean_ns": [rng.random() * 1e5 for _ in range(n)],
        "std_ns": [rng.random() * 1e4 if c > 1 else np.nan for c in count],
        "min_ns": [rng.randint(0, 1000) for _ in range(n)], "max_ns": [rng.randint(1000, 10**6) for _ in range(n)],
        "median_ns": [rng.choice([np.nan, 1.5, 2.25, 1e3 / 3]) for _ in range(n)],
        "category": pd.Categorical([rng.choice(["gemm", "elementwise"]) for _ in range(n)])})


def test_kernel_summary_of_one_cell_per_kernel_is_the_pooled_one(monkeypatch):
    rng = random.Random(6)
    for _ in range(200):
        k = _cells(rng, rng.randint(1, 25))
        assert D._one_cell_per_kernel(k) is not None
        want = D._kernel_summary_pooled(k)
        monkeypatch.setattr(pd.DataFrame, "groupby", lambda *a, **kw: pytest.fail("grouped"))
        got = D._kernel_summary(k)
        monkeypatch.undo()
        _same_frame(got, want)


def test_kernel_summary_takes_the_long_way_otherwise():
    rng = random.Random(7)
    k = _cells(rng, 6)
    repeated = pd.concat([k, k], ignore_index=True)  # two cells per kernel: pooled
    assert D._one_cell_per_kernel(repeated) is None
    missing = k.assign(category=k["category"].cat.add_categories(["x"]).where(k.index > 0))
    assert D._one_cell_per_kernel(missing) is None
    assert D._one_cell_per_kernel(k.iloc[:0]) is None
    nullable = k.assign(count=k["count"].astype("Int64"))
    assert D._one_cell_per_kernel(nullable) is None
    _same_frame(D._kernel_summary(repeated), D._kernel_summary_pooled(repeated))


def _timeline(rng: random.Random, points: list) -> pd.DataFrame:
    n = len(points)
    return pd.DataFrame({"point": pd.array(points, dtype=object),
                         "rank": pd.array([rng.choice([0, 3, None]) for _ in range(n)], dtype="Int64"),
                         **{f"{t}_ns": (np.array([rng.randint(0, 10**12) for _ in range(n)], dtype=np.int64)
                                        if j % 2 else np.array([rng.choice([0.0, 1.5, np.nan, 1e9 / 7])
                                                                for _ in range(n)]))
                            for j, t in enumerate(PYTORCH_TYPES)}})


def test_timeline_by_point_of_one_group_per_point_is_the_grouped_one(monkeypatch):
    rng = random.Random(8)
    for _ in range(200):
        pool = ["ch2-th256", "b", "a", "th512", None]
        points = rng.sample(pool, rng.randint(1, len(pool))) if rng.random() < 0.8 else \
            [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        tl = _timeline(rng, points)
        got = D._timeline_by_point(tl)
        monkeypatch.setattr(D, "_one_group_per_point", lambda *a: None)
        want = D._timeline_by_point(tl)
        monkeypatch.undo()
        _same_frame(got, want)
    assert D._one_group_per_point(_timeline(rng, ["a", "a"]), [f"{t}_ns" for t in PYTORCH_TYPES]) is None


def test_category_times_of_one_sweep_are_the_pivoted_ones(monkeypatch):
    """The summary sheet's time by category: names, sweeps and values in pandas' order (ties
    where its quicksort leaves them, up to tables past numpy's insertion sort)."""
    rng = random.Random(9)
    names = [f"c{i}" for i in range(40)]
    for _ in range(300):
        n = rng.randint(1, 60)
        cat = pd.DataFrame({"label": ["run"] * n, "category": [rng.choice(names[:rng.randint(1, 40)])
                                                               for _ in range(n)],
                            "total_ns": np.array([rng.choice([0, 1000, 2000, rng.randint(0, 10**12)])
                                                  for _ in range(n)], dtype=np.int64)})
        got = X.category_times(cat, ["run"])
        monkeypatch.setattr(X, "SMALL_TABLE_ROWS", -1)
        want = X.category_times(cat, ["run"])
        monkeypatch.undo()
        assert got[:2] == want[:2]
        assert np.array(got[2]).tobytes() == np.array(want[2]).tobytes()


def _dispatches(rng: random.Random, n: int) -> pd.DataFrame:
    return pd.DataFrame({
        "point": pd.Categorical([rng.choice(["p1", "p0", None]) for _ in range(n)]),
        "rank": pd.array([rng.choice([0, 1, None]) for _ in range(n)], dtype="Int64"),
        "host": pd.array([rng.choice(["h", None]) for _ in range(n)], dtype="str"),
        "pid": np.array([rng.randint(1, 5) for _ in range(n)], dtype=np.int64),
        "kernel": pd.Categorical([rng.choice(["gemm_a", "=b", "c"]) for _ in range(n)]),
        "category": pd.Categorical([rng.choice(["gemm", "collective", "other", None]) for _ in range(n)]),
        "start_ns": np.arange(n, dtype=np.int64) * 10,
        "dur_ns": np.array([rng.choice([5, 7, rng.randint(1, 10**6)]) for _ in range(n)], dtype=np.int64),
        "grid_x": pd.array([rng.choice([1, None]) for _ in range(n)], dtype="Int64"),
        "queue": np.array([rng.random() for _ in range(n)]),
        "stream": pd.array([rng.choice(["s0", None, 3]) for _ in range(n)], dtype=object)})


def test_details_part_is_the_decategorized_selection():
    """A part's kernel details: the rows and values of the selection it was, text as text."""
    from pytest_gemmperf.analysis.report_parts import DETAIL_COLUMNS, KERNEL_DETAILS_TOP, _details_part

    rng = random.Random(10)
    for n in (1, 2, 50, KERNEL_DETAILS_TOP, KERNEL_DETAILS_TOP + 1, 300):
        d = _dispatches(rng, n)
        top = np.sort(d["dur_ns"].nlargest(KERNEL_DETAILS_TOP).index.to_numpy())
        want = d[[c for c in DETAIL_COLUMNS if c in d.columns]].iloc[top].reset_index(drop=True)
        _same_frame(_details_part(d), decategorized(want))


def _same_objects(got: np.ndarray, want: np.ndarray) -> bool:
    """Object arrays of the same values, a null where the other has the same kind of null."""
    return len(got) == len(want) and all(
        a is b or (type(a) is type(b) and (a == b if a == a else b != b)) for a, b in zip(got, want))


def test_display_values_are_display_names():
    from pytest_gemmperf.analysis.overlap import display_names, display_values
    from pytest_gemmperf.analysis.report_parts import _text_categorical

    rng = random.Random(11)
    for n in (0, 1, 9, 40):
        d = _dispatches(rng, n)
        rows = np.array(sorted(rng.sample(range(n), n // 2)), dtype=np.int64)
        for dtype in (object, "str", "category"):
            d["kernel_short"] = pd.Series([rng.choice(["s", "é", None, np.nan]) for _ in range(n)], dtype=dtype)
            for frame in (d, d.drop(columns="kernel_short")):
                want = display_names(frame.iloc[rows])
                got = display_values(frame, rows)
                assert _same_objects(got, want.to_numpy(dtype=object))
                # the collectives' names as they travel: the same values read back
                assert _same_objects(np.asarray(_text_categorical(got), dtype=object),
                                     np.asarray(want.astype("category").array, dtype=object))


# ------------------------------------------------------------------------------ sorted groups, top variance

def _key_column(rng: random.Random, kind: str, n: int):
    if kind == "cat":  # categories not in text order: pandas sorts by their order
        cats = ["z", "m", "a", "q"]
        rng.shuffle(cats)
        return pd.Categorical([rng.choice(cats + [None]) for _ in range(n)], categories=cats)
    if kind == "Int64":
        return pd.array([rng.choice([3, -1, 0, None]) for _ in range(n)], dtype="Int64")
    if kind == "int":
        return np.array([rng.choice([3, -1, 0]) for _ in range(n)])
    if kind == "float":
        return np.array([rng.choice([3.5, -0.0, 0.0, np.nan, np.inf]) for _ in range(n)])
    if kind == "obj":
        return pd.array([rng.choice(["b", "a", None, np.nan, "é", "Z"]) for _ in range(n)], dtype=object)
    return pd.array([rng.choice(["b", "a", None, "é", "Z"]) for _ in range(n)], dtype="str")


def test_sorted_group_codes_are_ngroup_of_every_key_kind():
    rng = random.Random(12)
    kinds = ["cat", "Int64", "int", "float", "obj", "str"]
    for _ in range(600):
        n = rng.randint(0, 30)
        keys = rng.sample(kinds, rng.randint(1, 3))
        df = pd.DataFrame({k: _key_column(rng, k, n) for k in keys})
        want = df.groupby(keys, observed=True, dropna=False, sort=True).ngroup().to_numpy()
        assert np.array_equal(sorted_group_codes(df, keys), want), df


def _gemm_rows(rng: random.Random, n: int) -> pd.DataFrame:
    return pd.DataFrame({
        "point": _key_column(rng, "cat", n).rename_categories(["ch2-th256", "th512", "x", "ch4"]),
        "rank": pd.array([rng.choice([0, 1, None]) for _ in range(n)], dtype="Int64"),
        "kernel": _key_column(rng, "cat", n),
        "category": pd.Categorical([rng.choice(["gemm", "other"]) for _ in range(n)]),
        "gpu": np.array([rng.randint(0, 2) for _ in range(n)]),
        "start_ns": np.array([rng.choice([5, rng.randint(0, 10**6)]) for _ in range(n)], dtype=np.int64),
        "dur_ns": np.array([rng.choice([5, 7, 100, rng.randint(1, 10**6)]) for _ in range(n)], dtype=np.int64),
    }, index=np.array(rng.sample(range(10 * n + 1), n), dtype=np.int64))


def test_small_top_variance_is_the_grouped_one(monkeypatch):
    """Ties in durations, starts and ranges, missing keys, categories out of text order."""
    from pytest_gemmperf.analysis import variance as V

    rng = random.Random(13)
    taken = 0
    for _ in range(400):
        d = _gemm_rows(rng, rng.randint(1, 40))
        kw = dict(k=rng.randint(1, 5), category=rng.choice([None, "gemm"]), warmup=rng.choice([0, 0, 1]),
                  by=rng.choice([("point", "rank", "kernel"), ("rank", "kernel"), ("kernel",), ("point", "rank")]))
        calls = []
        real = V._small_top
        monkeypatch.setattr(V, "_small_top", lambda *a: calls.append(real(*a)) or calls[-1])
        got = V.top_variance(d, **kw)
        monkeypatch.setattr(V, "_small_top", lambda *a: None)
        want = V.top_variance(d, **kw)
        monkeypatch.undo()
        taken += calls[0] is not None
        _same_frame(got, want)
    assert taken > 200


def test_small_top_variance_not_taken_for_text_keys_or_large_tables():
    from pytest_gemmperf.analysis import variance as V

    d = _gemm_rows(random.Random(14), 20)
    assert V._small_top(d, 5, ["point", "rank", "kernel"]) is not None
    assert V._small_top(d.assign(kernel=d["kernel"].astype(object)), 5, ["point", "rank", "kernel"]) is None
    assert V._small_top(d.assign(dur_ns=d["dur_ns"].astype(float)), 5, ["point", "rank", "kernel"]) is None
    assert V._small_top(d, 5, ["point", "rank"]) is None  # no kernel key
    big = pd.concat([d] * (V.SMALL_TABLE_ROWS // 20 + 1), ignore_index=True)
    assert V._small_top(big, 5, ["point", "rank", "kernel"]) is None


def _overlap_rows(rng: random.Random, n: int) -> pd.DataFrame:
    dur = np.array([rng.choice([5, 7, 100, rng.randint(1, 10**6)]) for _ in range(n)], dtype=np.int64)
    covered = np.array([rng.choice([0, int(x), rng.randint(0, int(x))]) for x in dur], dtype=np.int64)
    return pd.DataFrame({
        "point": _key_column(rng, "cat", n), "rank": _key_column(rng, "Int64", n),
        "kernel": _key_column(rng, "cat", n), "dur_ns": dur, "overlap_ns": covered,
        "overlap_fraction": np.where(dur > 0, covered / np.where(dur > 0, dur, 1), np.nan)})


def test_small_overlap_by_kernel_is_the_grouped_one(monkeypatch):
    """Rows in group order (pandas' mean then sums by runs) and not, keys missing."""
    from pytest_gemmperf.analysis import overlap as O

    rng = random.Random(15)
    for _ in range(300):
        ov = _overlap_rows(rng, rng.randint(1, 40))
        if rng.random() < 0.4:
            ov = ov.sort_values(["point", "rank", "kernel"], na_position="last", kind="stable")
        kw = dict(overlap=ov, by=rng.choice([("point", "rank", "kernel"), ("rank", "kernel"), ("kernel",)]),
                  threshold=rng.choice([0.0, 0.5]))
        got = O.overlap_by_kernel(None, **kw)
        monkeypatch.setattr(O, "plain_group_key", lambda dtype: False)  # pandas' grouping
        want = O.overlap_by_kernel(None, **kw)
        monkeypatch.undo()
        _same_frame(got, want)


def test_grouped_mean_is_pandas_mean():
    """Both of pandas' sums: by runs where the rows are in group order without NaN, else
    compensated, bit for bit (large and small magnitudes, infinities, NaN)."""
    from pytest_gemmperf.analysis.overlap import grouped_mean

    rng = random.Random(16)
    pool = [0.1, 1 / 3, 2 / 3, 1e16, -1e16, 1.0, np.nan, np.inf, -np.inf, 1e-300, 0.9999999]
    for _ in range(1500):
        n, groups = rng.randint(1, 150), rng.randint(1, 6)
        gid = np.array([rng.randrange(groups) for _ in range(n)])
        if rng.random() < 0.5:
            gid = np.sort(gid)
        share = rng.random()
        values = np.array([rng.choice(pool) if rng.random() < share else rng.random() for _ in range(n)])
        with np.errstate(invalid="ignore"):
            pandas = pd.Series(values).groupby(gid, sort=True).mean()
        want = np.full(groups, np.nan)
        want[pandas.index.to_numpy()] = pandas.to_numpy()
        got = grouped_mean(gid, values, groups)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        assert got[~np.isnan(got)].tobytes() == want[~np.isnan(want)].tobytes()


def _old_grouped_boxes(d: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The boxes as pandas' grouping numbered them and a frame of the keys joined them."""
    gid = d.groupby(by, dropna=False, observed=True, sort=True).ngroup().to_numpy()
    stats = D.box_stats(d["dur_ns"].to_numpy(np.int64), gid, int(gid.max()) + 1)
    _, first = np.unique(gid, return_index=True)
    keys = d[by].iloc[first].reset_index(drop=True)
    keys.index = gid[first]
    return pd.concat([decategorized(keys).sort_index().reset_index(drop=True), stats], axis=1)


def test_grouped_boxes_are_the_grouped_ones():
    rng = random.Random(17)
    for _ in range(300):
        n = rng.randint(1, 40)
        d = pd.DataFrame({"kernel": _key_column(rng, "cat", n),
                          "label": pd.array([rng.choice(["run", "b"]) for _ in range(n)],
                                            dtype=rng.choice(["str", object])),
                          "threads": _key_column(rng, "Int64", n),
                          "dur_ns": np.array([rng.choice([5, 7, rng.randint(1, 10**6)]) for _ in range(n)])})
        by = rng.choice([["kernel", "label"], ["kernel", "label", "threads"]])
        _same_frame(D._grouped_boxes(d, by), _old_grouped_boxes(d, by))


def test_small_category_totals_are_the_grouped_ones(monkeypatch):
    rng = random.Random(18)
    for _ in range(300):
        n = rng.randint(1, 30)
        totals = pd.DataFrame({
            "point": _key_column(rng, "cat", n), "rank": _key_column(rng, "Int64", n),
            "category": _key_column(rng, "cat", n),
            "n_dispatches": np.array([rng.randint(0, 9) for _ in range(n)], dtype=np.int64),
            "total_ns": np.array([rng.choice([0, rng.randint(0, 10**12)]) for _ in range(n)], dtype=np.int64)})
        got = D._by_category_of_totals(totals)
        monkeypatch.setattr(D, "_small_category_totals", lambda t: None)
        want = D._by_category_of_totals(totals)
        monkeypatch.undo()
        _same_frame(got, want)


def _random_boxes(rng: random.Random, n: int, numbers) -> pd.DataFrame:
    """Box rows of ``n`` kernels, each its own or one of two names repeated, on a shuffled index."""
    kernels = [f"k{i}" for i in range(n)] if rng.random() < 0.7 else [rng.choice(["a", "b"]) for _ in range(n)]
    return pd.DataFrame({"kernel": pd.array(kernels, dtype=object),
                         "label": [rng.choice(["run", "b"]) for _ in range(n)], **numbers},
                        index=rng.sample(range(50), n))


def test_per_kernel_boxes_are_the_grouped_ones():
    rng = random.Random(19)
    for _ in range(100):
        n = rng.randint(1, 8)
        boxes = _random_boxes(rng, n, {c: [rng.random() for _ in range(n)] for c in D.BOX_COLUMNS})
        got = H._per_kernel(boxes, ["label"])
        want = [(k, g.sort_values(["label"])) for k, g in boxes.groupby("kernel", sort=False)]
        assert [k for k, _ in got] == [k for k, _ in want]
        for (k, a), (_, b) in zip(got, want):
            _same_frame(a, b)
            assert P.box_rows_panel(P.frame_rows(a), ["label"], k) == P.box_rows_panel(P.frame_rows(b), ["label"], k)


def test_per_kernel_rows_draw_the_per_kernel_frames():
    rng = random.Random(17)
    for _ in range(100):
        n = rng.randint(1, 8)
        boxes = _random_boxes(rng, n, {"rank": [rng.randint(0, 3) for _ in range(n)],
                                       "count": [rng.randint(1, 9) for _ in range(n)],
                                       **{c: [rng.choice([rng.random(), np.nan, 2.0]) for _ in range(n)]
                                          for c in D.BOX_COLUMNS[1:]}})
        for cols in (["label"], ["rank"], ["label", "rank"]):
            got = H._per_kernel_rows(boxes, cols)
            want = H._per_kernel(boxes, cols)
            assert [k for k, _ in got] == [k for k, _ in want]
            for (k, rows), (_, frame) in zip(got, want):
                assert P.box_rows_panel(rows, cols, k, label="x") == \
                    P.box_rows_panel(P.frame_rows(frame), cols, k, label="x")


def test_variance_csvs_are_each_tables_csv():
    """The three variance CSVs cut from one table made safe once: each the CSV of its own table
    (formula-like text, a CR in one table's column only, floats to tidy, ns, a second sweep)."""
    from pytest_gemmperf.report import tables as T
    from pytest_gemmperf.safe_io import csv_text

    rng = random.Random(20)
    for _ in range(60):
        n = rng.randint(1, 6)
        top = pd.DataFrame({
            "label": ["run"] * n, "threads": pd.array([rng.choice([256, None]) for _ in range(n)], dtype="Int64"),
            "channel": pd.array([None] * n, dtype="Int64"), "rank": pd.array([0] * n, dtype="Int64"),
            "kernel_name": pd.array([rng.choice(["=cmd", "k\rx", "plain", "+1"]) for _ in range(n)], dtype=object),
            "kernel_time_min_us": [rng.choice([0.1 + 0.2, 1 / 3]) for _ in range(n)],
            "kernel_time_max_us": [2.5] * n, "time_diff_us": [rng.random() for _ in range(n)],
            "point": pd.array([rng.choice(["ch2-th256", None]) for _ in range(n)], dtype=object),
            "median_us": [1.0] * n, "mad_cv": [np.nan] * n, "iqr_cv": [0.5] * n, "count": [3] * n,
            "min_duration_timestamp_ms": [1e-3 * 7] * n, "max_duration_timestamp_ms": [2.0] * n,
            "time_between_min_max_ms": [1.993] * n, "min_duration_found_us": [0.1] * n,
            "max_duration_found_us": [2.5] * n})
        if rng.random() < 0.5:  # the overlap columns, one of them holding a CR
            top = top.assign(overlapping_collective_count=1,
                             overlapping_collective_names=pd.array([rng.choice(["a;b", "c\rd"]) for _ in range(n)],
                                                                   dtype=object),
                             max_overlap_percentage=12.5, max_overlap_collective="=x", total_overlap_duration_ms=0.25)
        data = SimpleNamespace(top_variance=top, multi=rng.random() < 0.3)
        texts = T._variance_csv_texts(data)
        assert texts == {name: csv_text(df) for name, df in T.variance_tables(data).items()}
    empty = SimpleNamespace(top_variance=top.iloc[:0], multi=False)
    assert T._variance_csv_texts(empty) == {name: csv_text(df) for name, df in T.variance_tables(empty).items()}


def test_kernel_details_of_a_small_table_are_the_longest_rows():
    from pytest_gemmperf.analysis.report_parts import KERNEL_DETAILS_TOP

    rng = random.Random(21)
    for n in (1, 5, 16, 17, 40, KERNEL_DETAILS_TOP):  # ties past numpy's insertion sort too
        d = decategorized(_dispatches(rng, n))
        got = D._kernel_details(d)
        # the long way (nlargest and a selection by label) where the rows are labelled otherwise
        want = D._kernel_details(d.set_axis(pd.Index(np.arange(n, dtype=np.int64))))
        _same_frame(got, want)


def test_kernels_by_time_are_the_grouped_ones():
    rng = random.Random(22)
    for _ in range(300):
        n = rng.randint(1, 40)  # ties past numpy's insertion sort too
        unique = rng.random() < 0.7
        g = pd.DataFrame({"kernel": pd.array([f"k{i}" if unique else rng.choice(["a", "b", "c"]) for i in range(n)],
                                             dtype=object),
                          "total_ns": np.array([rng.choice([10, 20, rng.randint(0, 10**9)]) for _ in range(n)])})
        want = list(g.groupby("kernel")["total_ns"].sum().sort_values(ascending=False).index.astype(str))
        assert D._kernels_by_time(g) == want


def test_boxes_of_one_sweep_are_those_of_its_concatenation():
    rng = random.Random(23)
    n = 30
    part = pd.DataFrame({"kernel": _key_column(rng, "cat", n), "threads": _key_column(rng, "Int64", n),
                         "channel": pd.array([None] * n, dtype="Int64"), "rank": _key_column(rng, "Int64", n),
                         "dur_ns": np.array([rng.randint(1, 10**6) for _ in range(n)]), "label": "run"},
                        index=rng.sample(range(100), n))
    kernels = ["q", "a", "z"]
    got = D._boxes([part], kernels)
    want = D._boxes([part, part.iloc[:0]], kernels)  # the long way: a concatenation (of the part and nothing)
    assert got.keys() == want.keys() and "threads" in got
    for axis in got:
        _same_frame(got[axis], want[axis])


def test_descending_order_is_pandas_descending_sort():
    rng = np.random.default_rng(4)
    for _ in range(300):
        v = rng.integers(0, 4, rng.integers(0, 40)) * rng.choice([1, 10**12])
        s = pd.Series(v)
        assert S.descending_order(v).tolist() == s.sort_values(ascending=False).index.tolist()
        assert S.descending_order(v, kind="stable").tolist() == s.nlargest(len(v)).index.tolist()
