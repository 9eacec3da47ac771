"""``--jobs`` that pays: ``auto`` chooses the pool only where its start-up costs less than it
saves (``traces/parallel.pool_pays``), and ``gemmperf analyze --no-report`` reduces each source
in the workers (``analysis/source_totals.py``) so that the parent never holds the full
dispatches table; its ``kernels.csv`` and ``summary.json`` are byte-identical to the full-table
path's, serial or pooled."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_gemmperf.commands import analyze_impl
from pytest_gemmperf.config import BY_NAME, JOBS_AUTO
from pytest_gemmperf.traces import parallel

FIX = Path(__file__).parent / "fixtures"
CSV_DIR = FIX / "rocprof_csv" / "v7" / "mi350-n1"
MB = 1_000_000


@pytest.fixture
def cores8(monkeypatch):
    monkeypatch.setattr(parallel, "usable_cores", lambda: 8)
    monkeypatch.delenv(parallel.XDIST_COUNT_ENV, raising=False)
    return monkeypatch


# ------------------------------------------------------------------------------ the decision

def test_auto_is_serial_for_a_few_small_files_and_a_pool_for_many_large_ones():
    assert not parallel.pool_pays(8, 3, 3 * 200_000)         # a few small files: start-up dominates
    assert not parallel.pool_pays(8, 1, 10_000 * MB)         # one file: nothing to share
    assert not parallel.pool_pays(1, 96, 96 * 19 * MB)       # one worker is no pool
    assert parallel.pool_pays(2, 96, 96 * 19 * MB)           # 96 rocprofv3 CSVs of a 44k-dispatch run
    assert parallel.pool_pays(2, 16, 16 * 19 * MB)           # sixteen such files already pay on 2 cores
    assert not parallel.pool_pays(2, 4, 4 * 19 * MB)         # four do not: about 0.5 s of reading
    # the rule itself: the time saved, serial x (1 - 1/w), against the pool's start-up
    serial = parallel.serial_seconds(10, 10 * MB)
    assert parallel.pool_pays(2, 10, 10 * MB) == (serial / 2 > parallel.POOL_START_S)


def test_pool_jobs_auto_reads_sizes_and_counts_gzip_as_its_text(cores8, tmp_path):
    small = [tmp_path / f"s{i}.csv" for i in range(3)]
    for f in small:
        f.write_bytes(b"x" * 1000)
    assert parallel.pool_jobs(JOBS_AUTO, small) == 1
    assert parallel.pool_jobs(None, small) == 1
    large = [tmp_path / f"l{i}_kernel_trace.csv" for i in range(96)]
    for f in large:
        with open(f, "wb") as fh:  # sparse: the size is what the estimate reads
            fh.truncate(19 * MB)
    assert parallel.pool_jobs(JOBS_AUTO, large) == 8
    cores8.setenv(parallel.XDIST_COUNT_ENV, "4")
    assert parallel.pool_jobs(JOBS_AUTO, large) == 2          # this xdist worker's share
    gz = [tmp_path / f"g{i}.json.gz" for i in range(4)]
    plain = [tmp_path / f"p{i}.json" for i in range(4)]
    for f in gz + plain:
        with open(f, "wb") as fh:
            fh.truncate(10 * MB)
    assert parallel.input_bytes(gz) == 4 * 10 * MB * parallel.GZIP_FACTOR
    assert parallel.pool_jobs(JOBS_AUTO, gz) == 2             # 400 MB of JSON text to parse
    assert parallel.pool_jobs(JOBS_AUTO, plain) == 1          # 40 MB: about half a second
    # an explicit count keeps its floor: the pool above POOL_MIN_BYTES
    assert parallel.pool_jobs(2, small) == 1
    assert parallel.pool_jobs(2, large) == 2


@pytest.mark.parametrize("text, value", [("auto", JOBS_AUTO), (" AUTO ", JOBS_AUTO), ("0", JOBS_AUTO),
                                         ("1", 1), ("4", 4)])
def test_jobs_setting_reads_auto_and_counts(text, value):
    assert BY_NAME["jobs"].convert(text) == value


def test_jobs_default_is_auto_and_bad_values_are_one_line():
    assert BY_NAME["jobs"].default == "auto" and BY_NAME["jobs"].convert(None) == JOBS_AUTO
    for bad in ("-1", "two", "1.5"):
        with pytest.raises(ValueError) as exc:
            BY_NAME["jobs"].convert(bad)
        assert "\n" not in str(exc.value)


def test_cli_accepts_jobs_auto(tmp_path, capsys):
    from pytest_gemmperf.cli import main

    assert main(["analyze", str(_csv_tree(tmp_path)), "--jobs", "auto", "--no-report",
                 "--out", str(tmp_path / "out")]) == 0
    assert main(["analyze", "x", "--jobs", "some"]) == 2
    assert "--jobs" in capsys.readouterr().err


def test_analyze_leaves_the_collector_as_it_found_it(tmp_path):
    """The command keeps what exists before its work out of full collections while it runs;
    an in-process caller gets every object back into them afterwards, even after an error."""
    import gc

    from pytest_gemmperf.cli import main

    before = gc.get_freeze_count()
    assert main(["analyze", str(_csv_tree(tmp_path)), "--no-report", "--out", str(tmp_path / "out")]) == 0
    assert gc.get_freeze_count() == before
    assert main(["analyze", str(tmp_path / "missing"), "--no-report", "--out", str(tmp_path / "o2")]) == 2
    assert gc.get_freeze_count() == before


def test_pytest_reads_jobs_auto(pytester):
    from pytest_gemmperf.pytest_glue.options import resolve_options

    pytester.makeini("[pytest]\ngemmperf_jobs = auto\n")
    assert resolve_options(pytester.parseconfig(), pytester.path).jobs == JOBS_AUTO
    assert resolve_options(pytester.parseconfig("--gemmperf-jobs", "auto"), pytester.path).jobs == JOBS_AUTO


pytest_plugins = ["pytester"]


# ---------------------------------------------------------------- analyze: per-source reduction

def _csv_tree(root: Path, *, same_host: bool = False, copies: int = 3) -> Path:
    """rocprofv3 7.x processes, one per source: ``<host>/<pid>_*``; ``same_host``: every copy
    under the same host and pid (one process found in several sources)."""
    for r in range(copies):
        d = root / "csv" / f"copy{r}" / "mi350-n1" if same_host else root / "csv" / f"host{r}"
        d.mkdir(parents=True)
        pid = "5358" if same_host else str(5358 + r)
        for f in CSV_DIR.glob("5358_*"):
            shutil.copy(f, d / f.name.replace("5358", pid))
    return root / "csv"


def _mixed_tree(root: Path) -> Path:
    """rocprofv3 CSV, rocprofv3 JSON and Kineto traces under one root (a ``source`` column)."""
    _csv_tree(root / "m")
    shutil.copytree(FIX / "rocprof_json", root / "m" / "json")
    shutil.copytree(FIX / "torch", root / "m" / "torch")
    return root / "m"


def _analyze(tmp_path: Path, name: str, root: Path, *extra: str) -> dict[str, bytes]:
    from pytest_gemmperf.cli import main

    out = tmp_path / name
    assert main(["analyze", str(root), "--out", str(out), *extra]) == 0
    return {f: (out / f).read_bytes() for f in ("kernels.csv", "summary.json")}


@pytest.mark.slow  # a process pool, and the full-table path writes the reports
@pytest.mark.parametrize("tree", ["csv", "mixed", "shared_process"])
@pytest.mark.parametrize("opts", [(), ("--warmup", "1"), ("--warmup", "2", "--categories", "RULES")])
def test_analyze_no_report_equals_the_full_table_path(tmp_path, monkeypatch, capsys, tree, opts):
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)  # the pool on small fixtures
    root = {"csv": _csv_tree, "mixed": _mixed_tree,
            "shared_process": lambda p: _csv_tree(p, same_host=True)}[tree](tmp_path)
    rules = tmp_path / "rules.yaml"
    rules.write_text('fills: ["FillFunctor"]\nmine: ["Cijk", "nccl"]\n')
    opts = tuple(str(rules) if o == "RULES" else o for o in opts)
    full = _analyze(tmp_path, "full", root, "--jobs", "1", *opts)           # reports: the full table
    capsys.readouterr()
    for jobs in ("1", "2"):
        got = _analyze(tmp_path, f"reduced{jobs}", root, "--no-report", "--jobs", jobs, *opts)
        assert got == full, (jobs, tree, opts)
    assert capsys.readouterr().err.count("note:") in (0, 2)  # the same notes both times


@pytest.mark.slow  # a process pool
@pytest.mark.parametrize("report", [(), ("--no-report",)])
def test_analyze_never_holds_the_full_table(tmp_path, monkeypatch, report):
    """The parent reads no full dispatches table, with its reports or without: the workers
    send back per-source reductions (before, ``load`` pickled every worker's whole table back
    and concatenated 4.2 M rows; with reports it still did until the reports' views were
    reduced too, ``analysis/report_parts.py``)."""
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)
    root = _csv_tree(tmp_path)

    def refuse(*args, **kwargs):
        raise AssertionError("the full dispatches table was loaded")

    monkeypatch.setattr(analyze_impl, "load", refuse)
    for jobs in ("1", "2"):
        _analyze(tmp_path, f"out{jobs}", root, *report, "--jobs", jobs)
        assert (tmp_path / f"out{jobs}" / "report.html").is_file() == (not report)


def test_a_process_in_two_sources_with_a_warmup_reads_the_full_tables(tmp_path):
    """Warm-up is per process: one found in two sources cannot be reduced source by source."""
    from pytest_gemmperf.analysis.source_totals import reduce_sources

    root = _csv_tree(tmp_path, same_host=True, copies=2)
    assert reduce_sources([root], warmup=1) is None
    got = reduce_sources([root], warmup=0)
    assert got is not None and len(got.rows) == got.totals["n_dispatches"].sum()


def test_workers_send_back_duration_rows_and_totals(tmp_path):
    from pytest_gemmperf.analysis.kernel_stats import ROW_KEYS
    from pytest_gemmperf.analysis.source_totals import TOTAL_KEYS, ReduceOptions, reduce_source
    from pytest_gemmperf.traces.discover import discover_all, load

    root = _csv_tree(tmp_path, copies=1)
    src = discover_all([root]).unique[0]
    part = reduce_source(src, ReduceOptions(point=None, warmup=0))
    full = load([root]).dispatches
    assert list(part.rows.keys.columns) == list(ROW_KEYS) and len(part.rows) == len(full)
    assert len(part.rows.keys) == full.groupby(list(ROW_KEYS), dropna=False, observed=True).ngroups
    assert (part.rows.dur_ns == full["dur_ns"].to_numpy()).all()
    assert len(part.totals) == full.groupby(list(TOTAL_KEYS), dropna=False, observed=True).ngroups


def _long_csv_tree(root: Path, repeats: int) -> Path:
    """One rocprofv3 process whose kernel trace is the fixture's rows ``repeats`` times."""
    d = root / "long" / "host0"
    d.mkdir(parents=True)
    lines = [line + "\n" for line in (CSV_DIR / "5358_kernel_trace.csv").read_text().splitlines()]
    (d / "5358_kernel_trace.csv").write_text(lines[0] + "".join(lines[1:] * repeats))
    shutil.copy(CSV_DIR / "5358_agent_info.csv", d)
    return root / "long"


def test_a_source_travels_back_in_a_few_bytes_per_dispatch(tmp_path):
    """Per dispatch a worker sends its key index and duration, packed (the key columns
    themselves once per distinct key): 96 files of 44k dispatches pickled ~93 MB back to the
    parent as slim columns (~23 bytes a dispatch), which it unpickled while the workers ran."""
    import pickle

    from pytest_gemmperf.analysis.source_totals import ReduceOptions, reduce_source
    from pytest_gemmperf.traces.discover import discover_all, load

    root = _long_csv_tree(tmp_path, 2000)
    part = reduce_source(discover_all([root]).unique[0], ReduceOptions(point=None, warmup=0))
    n = len(load([root]).dispatches)
    assert n >= 20_000
    assert len(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)) / n < 8


def _random_sources(seed: int, n_sources: int = 5) -> list:
    """Dispatch-like tables of several sources: groups span sources, null points and ranks,
    each source's categoricals list their categories in its own order (and some unused)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    kernels = [f"k{i}" for i in range(7)]
    frames = []
    for s in range(n_sources):
        n = int(rng.integers(0, 400))
        order = list(rng.permutation(kernels))
        kernel = pd.Categorical(rng.choice(kernels[:5], n), categories=order)
        point = pd.Categorical(rng.choice(["p1", "p0", None], n), categories=["p1", "p0"][::1 - 2 * (s % 2)])
        rank = pd.array(rng.choice([0, 1, 2, -5], n), dtype="Int64")
        rank[rng.random(n) < 0.3] = pd.NA
        frames.append(pd.DataFrame({
            "source": pd.Categorical(rng.choice(["rocprof-csv", "torch"], n)),
            "point": point, "rank": rank, "kernel": kernel,
            "category": pd.Categorical([f"c{int(k[1:]) % 3}" for k in kernel]),
            "dur_ns": rng.integers(0, 10 ** int(rng.integers(1, 10)), n).astype("int64"),
        }))
    return frames


@pytest.mark.parametrize("seed", range(6))
def test_statistics_of_duration_rows_equal_those_of_the_full_table(seed):
    """kernels.csv from the sources' duration rows (``rows_kernel_table``) equals the full
    table's (``kernel_table``): the same rows, order and bits, also for (point, rank, kernel)
    groups that span sources."""
    import pandas as pd

    from pytest_gemmperf.analysis.kernel_stats import ROW_KEYS, ROW_SCHEMA, concat_rows, duration_rows
    from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables

    frames = _random_sources(seed)
    full = concat_tables(frames, {**ROW_SCHEMA, "dur_ns": DISPATCH_SCHEMA["dur_ns"]})
    rows = concat_rows([duration_rows(f, ROW_KEYS) for f in frames])
    for mixed in (False, True):
        want = analyze_impl.kernel_table(full, mixed=mixed)
        got = analyze_impl.rows_kernel_table(rows, mixed=mixed)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert want.to_csv() == got.to_csv()


def test_a_kernel_group_spanning_two_files_has_the_full_tables_statistics(tmp_path):
    """Two processes without a rank: every (point, rank, kernel) group spans both files."""
    from pytest_gemmperf.analysis.source_totals import reduce_sources
    from pytest_gemmperf.traces.discover import load

    root = _csv_tree(tmp_path, copies=2)
    reduced = reduce_sources([root], jobs=1)
    d = load([root]).dispatches
    assert d["rank"].isna().all() and d["pid"].nunique() == 2
    got = analyze_impl.rows_kernel_table(reduced.rows, mixed=False)
    assert got.to_csv() == analyze_impl.kernel_table(d).to_csv()
    assert (d.groupby("kernel", observed=True)["pid"].nunique() == 2).all()  # each in both files
    assert len(got) == d["kernel"].nunique() and got["count"].sum() == len(d)


@pytest.mark.parametrize("wide", [False, True])
def test_duration_rows_number_keys_as_the_rows_first_show_them(wide):
    """Each distinct key once, in first-appearance order (nulls a key of their own), and each
    row's key index and duration back exactly; ``wide``: more key combinations than an int64
    code holds, so the keys are grouped by ``groupby`` instead."""
    import numpy as np
    import pandas as pd

    from pytest_gemmperf.analysis.kernel_stats import duration_rows

    rng = np.random.default_rng(11)
    n = 9000 if wide else 3000
    d = _random_sources(5, n_sources=1)[0].sample(n, replace=True, random_state=1).reset_index(drop=True)
    d["dur_ns"] = rng.integers(0, 2**40, n)                      # beyond 32 bits: kept as int64
    keys = ["source", "point", "rank", "kernel", "category"]
    if wide:  # five columns of ~8,000 distinct values: (8001 ** 5) > 2**62
        for c in ["w0", "w1", "w2", "w3", "w4"]:
            d[c] = pd.Series(rng.integers(0, 8000, n)).astype(object).where(rng.random(n) > 0.1, None)
        keys += ["w0", "w1", "w2", "w3", "w4"]
    rows = duration_rows(d, keys)
    want = d[keys].drop_duplicates().reset_index(drop=True)
    pd.testing.assert_frame_equal(rows.keys, want)
    pd.testing.assert_frame_equal(rows.keys.iloc[rows.group].reset_index(drop=True), d[keys])
    assert rows.dur_ns.dtype == np.int64 and (rows.dur_ns == d["dur_ns"]).all()
    assert rows.group.dtype.itemsize <= 2


def test_group_statistics_without_a_second_sort_equal_the_sorted_deviations(monkeypatch):
    """MAD and outlier counts read off the sorted key (bisection, searchsorted) equal the
    sort of the deviations they replace (the path kept for keys beyond 2**53)."""
    import numpy as np

    from pytest_gemmperf.analysis import kernel_stats as ks

    rng = np.random.default_rng(7)
    for trial in range(120):
        n_groups = int(rng.integers(1, 30))
        n = int(rng.integers(n_groups, 2000))
        gid = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
        rng.shuffle(gid)
        dur = [rng.integers(0, 4, n), rng.integers(0, 10**9, n), rng.lognormal(10, 2, n).astype(np.int64),
               np.where(rng.random(n) < 0.9, 1000, rng.integers(0, 10**6, n))][trial % 4].astype(np.int64)
        fast = ks.group_statistics(gid, dur, n_groups)
        with monkeypatch.context() as m:
            m.setattr(ks, "KEYED_LIMIT", 0)
            slow = ks.group_statistics(gid, dur, n_groups)
        for name in fast:
            assert fast[name].dtype == slow[name].dtype, name
            np.testing.assert_array_equal(fast[name], slow[name], err_msg=f"{name}, trial {trial}")


def _concat_tables_by_pandas(frames, schema):
    """concat_tables as pandas' union_categoricals and concat write it (the reference)."""
    import numpy as np
    import pandas as pd
    from pandas.api.types import union_categoricals

    from pytest_gemmperf.traces.schema import INT, STR, _string_categorical

    cols: list[str] = []
    for f in frames:
        cols.extend(c for c in f.columns if c not in cols)
    out = {}
    for c in cols:
        if schema.get(c) == STR or any(c in f.columns and isinstance(f[c].dtype, pd.CategoricalDtype)
                                       for f in frames):
            parts = [_string_categorical(f[c]) if c in f.columns
                     else pd.Categorical.from_codes(np.full(len(f), -1), categories=pd.Index([], dtype=object))
                     for f in frames]
            out[c] = pd.Series(union_categoricals(parts, ignore_order=True))
        else:
            dtype = schema.get(c)
            out[c] = pd.concat([f[c].reset_index(drop=True) if c in f.columns
                                else pd.Series([pd.NA] * len(f), dtype=dtype if dtype in (INT, None) and dtype
                                               else "object") for f in frames], ignore_index=True)
    return pd.DataFrame(out)


def test_concat_tables_equals_pandas_union_of_categories():
    import pandas as pd

    from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables

    frames = _random_sources(3, n_sources=8)
    frames[2] = frames[2].drop(columns=["rank", "category"])          # columns some frames lack
    frames[3]["extra"] = pd.Series(["x"] * len(frames[3]), dtype=object)
    frames[4]["category"] = frames[4]["category"].astype(object)       # text, not categorical
    frames[5]["point"] = pd.Categorical([None] * len(frames[5]))       # no categories at all
    frames[6]["source"] = pd.Categorical([1] * len(frames[6]))         # numeric categories
    schema = {c: DISPATCH_SCHEMA[c] for c in ("source", "point", "rank", "kernel", "category", "dur_ns")}
    got, want = concat_tables(frames, schema), _concat_tables_by_pandas(frames, schema)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    for c in want.columns:
        if isinstance(want[c].dtype, pd.CategoricalDtype):
            assert list(got[c].cat.categories) == list(want[c].cat.categories), c


def test_prestart_starts_the_fork_server_only_where_the_pool_is_likely(cores8, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    (small / "1_kernel_trace.csv").write_bytes(b"x" * 1000)
    assert not parallel.prestart(JOBS_AUTO, [small])
    large = tmp_path / "large"
    for i in range(32):
        host = large / f"node{i // 8}"
        host.mkdir(parents=True, exist_ok=True)
        with open(host / f"{i}_kernel_trace.csv", "wb") as fh:
            fh.truncate(19 * MB)
    assert not parallel.prestart(1, [large])                  # serial: no server
    assert not parallel.prestart(-3, [large])                 # a bad value is the command's to report
    assert parallel.prestart(JOBS_AUTO, [large])
