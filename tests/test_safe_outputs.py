"""Safe outputs (issue 10, item 4): no CSV cell is a spreadsheet formula, and no writer follows
a symbolic link it did not create (planted links and planted fixed temp names are harmless)."""

from __future__ import annotations

import csv
import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from test_report_html import _sweep
from pytest_gemmperf import safe_io
from pytest_gemmperf.safe_io import (neutralise_cell, neutralise_frame, unneutralise_cell,
                                     unneutralise_frame)

#: kernel names a hostile (or unlucky) workload can produce: each would be evaluated by a
#: spreadsheet opening the CSV
HOSTILE = ["=HYPERLINK(\"http://x\",\"y\")", "+cmd|' /C calc'!A0", "-2+3+cmd|'/C calc'!A0",
           "@SUM(1+1)*cmd|'/C calc'!A0", "\t=1+1", "\r=1+1"]
DANGEROUS_START = tuple("=+-@\t\r")


def _cells(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def assert_no_formula_cells(path: Path) -> int:
    """Every cell of the CSV at ``path`` is safe to open in a spreadsheet: it does not begin
    with a formula character unless it is a plain number. Returns the number of cells."""
    rows = _cells(path)
    n = 0
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            n += 1
            if cell.startswith(DANGEROUS_START):
                try:
                    float(cell)
                except ValueError:
                    pytest.fail(f"{path.name} row {r} col {c}: formula cell {cell!r}")
    return n


# ---------------------------------------------------------------------------------------------
# the neutralisation rule


@pytest.mark.parametrize("cell", HOSTILE + ["=", "-", "@", "-x", "+x", "=-3.5"])
def test_formula_cells_are_prefixed_and_restored(cell):
    out = neutralise_cell(cell)
    assert out == "'" + cell
    assert unneutralise_cell(out) == cell


@pytest.mark.parametrize("cell", ["-3.5", "+1e5", "-7", ".5", "-0.25E-3", "gemm", "'quoted", "",
                                  "a=b", "Cijk_-=+@"])
def test_plain_cells_are_unchanged(cell):
    assert neutralise_cell(cell) == cell
    assert unneutralise_cell(cell) == cell


#: cells of every kind a text column may hold: formulas, plain numbers (signed, Unicode digits),
#: a bare CR, text, missing values, numbers, bytes, booleans
MIXED_CELLS = ["=1+1", "+5", "-3", "-3.5e2", "@x", "\tx", "\rx", "a\rb", "plain", "", "-", "+.5", "-\u0663",
               "x\n=y", "'=z", " =q", None, float("nan"), 5, 2.5, b"=b", True, pd.NA]


@pytest.mark.parametrize("seed", range(4))
def test_short_text_columns_scan_as_pandas_scans_them(seed, monkeypatch):
    """A short object column is scanned for formulas and CRs value by value in Python, a long one
    by pandas' ``.str`` accessor: the same cells neutralised, the same row ends, the same text,
    in object, categorical and string columns and header names alike."""
    import numpy as np

    rng = np.random.default_rng(seed)
    frames = []
    for t in range(80):
        n = int(rng.integers(0, 10))
        pick = [MIXED_CELLS[i] for i in rng.integers(0, len(MIXED_CELLS), n)]
        text = [c if isinstance(c, str) else None for c in pick]
        df = pd.DataFrame({"o": pd.Series(pick, dtype=object), "cat": pd.Categorical(text),
                           "str": pd.Series(text, dtype="str"), "n": range(n)})
        if t % 4 == 0:
            df.columns = ["=o", "cat", "+str", "n"]
        frames.append(df)
    short = [(neutralise_frame(df), safe_io._has_cr(df), safe_io.csv_text(df)) for df in frames]
    monkeypatch.setattr(safe_io, "_SHORT_TEXT", -1)  # every column through pandas
    compared = 0
    for df, (frame, cr, text) in zip(frames, short):
        try:
            by_pandas = neutralise_frame(df)
        except TypeError:  # pandas refuses a column of bytes only (the next test)
            continue
        pd.testing.assert_frame_equal(frame, by_pandas, check_exact=True)
        assert (cr, text) == (safe_io._has_cr(df), safe_io.csv_text(df))
        compared += 1
    assert compared >= 70


def test_a_column_of_bytes_is_written_not_a_traceback(tmp_path):
    """An object column holding only bytes has no text cell to neutralise: the table is written
    (pandas' ``.str`` accessor refuses such a column with a TypeError)."""
    path = safe_io.write_csv(pd.DataFrame({"kernel": ["k"], "raw": pd.Series([b"=x"], dtype=object)}),
                             tmp_path / "t.csv")
    assert path.read_text(encoding="utf-8") == "kernel,raw\nk,b'=x'\n"


def test_numbers_stay_numbers_and_round_trip(tmp_path):
    df = pd.DataFrame({
        "kernel": HOSTILE + ["ok"],
        "ratio": [-3.5, -1.0, 0.0, 1.5, -2.25, 7.0, -1e9],
        "count": [-1, 2, 3, 4, 5, 6, 7],
        "mixed": [1, "=x", 2.5, None, "-3", "@y", "z"],
        "cat": pd.Categorical(["-a", "b", "-a", "b", "=c", "b", "b"]),
    })
    path = safe_io.write_csv(df, tmp_path / "t.csv")
    assert_no_formula_cells(path)
    back = pd.read_csv(path)
    # numeric columns are written and read back as numbers, negative ones included
    assert back["ratio"].tolist() == df["ratio"].tolist()
    assert back["count"].tolist() == df["count"].tolist()
    assert back["kernel"].tolist() == ["'" + k for k in HOSTILE] + ["ok"]
    restored = unneutralise_frame(back)
    assert restored["kernel"].tolist() == df["kernel"].tolist()
    assert restored["cat"].tolist() == df["cat"].astype(str).tolist()
    assert restored["mixed"].astype(str).tolist()[:3] == ["1", "=x", "2.5"]
    # nothing to change -> the same object, no copy
    clean = pd.DataFrame({"a": ["x", "y"], "b": [-1.0, 2.0]})
    assert neutralise_frame(clean) is clean


def test_header_cells_are_neutralised(tmp_path):
    df = pd.DataFrame({"=evil": ["x"], "ok": [1]})
    path = safe_io.write_csv(df, tmp_path / "h.csv")
    assert _cells(path)[0] == ["'=evil", "ok"]


# ---------------------------------------------------------------------------------------------
# every CSV the project writes


@pytest.fixture(scope="module")
def hostile_sweeps():
    base = _sweep(0, n_per_kernel=20, points=("ch28-th256",), ranks=(0,))
    cand = _sweep(1, n_per_kernel=20, points=("ch28-th256",), ranks=(0,))
    names = {k: HOSTILE[i % len(HOSTILE)] + f"_gemm{i}" for i, k in
             enumerate(sorted(base["kernel"].astype(str).unique()))}
    for df in (base, cand):
        df["kernel"] = df["kernel"].astype(str).map(names)
    return base, cand, names


def test_report_csvs_neutralised(tmp_path, hostile_sweeps):
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches
    from pytest_gemmperf.report import read_verdict_files, write_reports

    base, cand, names = hostile_sweeps
    v = compare(samples_from_dispatches(base), samples_from_dispatches(cand), test="t.py::test_x")
    out = tmp_path / "r"
    files = write_reports(out, dispatches=cand, verdicts=v, formats=["csv"])
    csvs = [p for n, p in files.items() if n.endswith(".csv")]
    assert {p.name for p in csvs} >= {"kernels.csv", "verdicts.csv",
                                      "top5_gemm_kernels_time_variance.csv"}
    for p in csvs:
        assert_no_formula_cells(p)
    k = pd.read_csv(files["kernels.csv"])
    assert set(k["kernel"]) == {"'" + n for n in names.values()}
    # numeric columns of kernels.csv are still numbers
    assert pd.api.types.is_numeric_dtype(k["median_ns"])
    # the report reader undoes the prefix: kernel names come back as recorded
    (tmp_path / "res" / "t").mkdir(parents=True)
    os.replace(files["verdicts.csv"], tmp_path / "res" / "t" / "verdicts.csv")
    back = read_verdict_files(tmp_path / "res")
    assert set(back["kernel"]) == set(v["kernel"])


def test_results_verdicts_csv_neutralised_and_merged(tmp_path):
    from pytest_gemmperf.store.verdicts_file import merge_verdicts

    def verdicts(point, kernel, ratio):
        return pd.DataFrame({"point": [point], "kernel": [kernel], "metric": ["dur_ns"],
                             "ratio": [ratio], "verdict": ["regression"], "note": ["-oops"]})

    merge_verdicts(tmp_path, "p1", verdicts("p1", HOSTILE[0], -0.5))
    path = merge_verdicts(tmp_path, "p2", verdicts("p2", HOSTILE[1], 1.5))
    assert_no_formula_cells(path)
    back = pd.read_csv(path)
    assert back["kernel"].tolist() == ["'" + HOSTILE[0], "'" + HOSTILE[1]]
    assert back["ratio"].tolist() == [-0.5, 1.5]
    # re-merging reads the old rows back: no double prefix
    path = merge_verdicts(tmp_path, "p2", verdicts("p2", HOSTILE[2], 2.0))
    back = pd.read_csv(path)
    assert back["kernel"].tolist() == ["'" + HOSTILE[0], "'" + HOSTILE[2]]
    assert back["note"].tolist() == ["'-oops", "'-oops"]


def test_cli_compare_and_analyze_csvs_neutralised(tmp_path, hostile_sweeps, capsys):
    from pytest_gemmperf.cli import main
    from pytest_gemmperf.gate.samples import samples_from_dispatches

    base, cand, names = hostile_sweeps
    samples_from_dispatches(base).to_parquet(tmp_path / "base.parquet")
    samples_from_dispatches(cand).to_parquet(tmp_path / "cand.parquet")
    out = tmp_path / "cmp"
    rc = main(["compare", str(tmp_path / "base.parquet"), str(tmp_path / "cand.parquet"),
               "--out", str(out), "--no-report"])
    assert rc in (0, 1)
    assert assert_no_formula_cells(out / "verdicts.csv") > 20
    v = pd.read_csv(out / "verdicts.csv")
    assert {"'" + n for n in names.values()} <= set(v["kernel"])
    assert pd.api.types.is_numeric_dtype(v["ratio"])

    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    cand.to_parquet(trace_dir / "dispatches.parquet")
    out2 = tmp_path / "an"
    rc = main(["analyze", str(trace_dir), "--out", str(out2)])
    assert rc == 0
    for p in sorted(out2.glob("*.csv")):
        assert_no_formula_cells(p)
    k = pd.read_csv(out2 / "kernels.csv")
    assert {"'" + n for n in names.values()} <= set(k["kernel"])


# ---------------------------------------------------------------------------------------------
# symbolic links


def _plant(directory: Path, names: list[str], victim: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for n in names:
        (directory / n).symlink_to(victim)


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim" / "bashrc"
    v.parent.mkdir()
    v.write_text("precious\n")
    return v


def _assert_untouched(victim: Path, directory: Path, names: list[str]) -> None:
    assert victim.read_text() == "precious\n"
    for n in names:
        p = directory / n
        if p.exists() or p.is_symlink():
            assert not p.is_symlink(), f"{n} is still a link"


def test_report_writers_replace_planted_links(tmp_path, victim, hostile_sweeps):
    from pytest_gemmperf.report import write_reports

    base, cand, _ = hostile_sweeps
    out = tmp_path / "report"
    names = ["report.html", "report.xlsx", "summary.json", "summary.md", "kernels.csv",
             "top5_gemm_kernels_time_variance.csv"]
    _plant(out, names, victim)
    files = write_reports(out, dispatches=cand)
    assert set(names) <= set(files)
    _assert_untouched(victim, out, names)
    assert (out / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert json.loads((out / "summary.json").read_text())["status"] == "analysis"
    mode = stat.S_IMODE((out / "report.html").stat().st_mode)
    assert mode & 0o044, "a report is readable like any other file (mkstemp's 0600 widened)"
    # no temporary files left behind
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_results_writers_ignore_planted_links_and_fixed_temp_names(tmp_path, victim):
    from pytest_gemmperf.store.verdicts_file import merge_verdicts
    from pytest_gemmperf.run.results import write_json, write_tables

    point = tmp_path / "res" / "t" / "p1"
    planted = ["dispatches.parquet", ".dispatches.parquet.tmp", "point.json", "verdicts.csv",
               "verdicts.csv.tmp"]
    _plant(point, planted, victim)
    d = pd.DataFrame({"kernel": ["=k"], "start_ns": [1], "end_ns": [2]})
    write_tables(point, {"dispatches": d})
    write_json(point / "point.json", {"a": 1})
    merge_verdicts(point, "p1", pd.DataFrame({"point": ["p1"], "kernel": ["=k"], "ratio": [1.0]}))
    _assert_untouched(victim, point, ["dispatches.parquet", "point.json", "verdicts.csv"])
    assert pd.read_parquet(point / "dispatches.parquet")["kernel"].tolist() == ["=k"]


def test_cli_and_export_writers_ignore_planted_links(tmp_path, victim, hostile_sweeps, capsys):
    from pytest_gemmperf.cli import main
    from pytest_gemmperf.gate.benchmark_export import write_pytest_benchmark_json
    from pytest_gemmperf.gate.samples import samples_from_dispatches
    from pytest_gemmperf.run.rocprofv3 import write_job_file

    base, cand, _ = hostile_sweeps
    samples_from_dispatches(base).to_parquet(tmp_path / "base.parquet")
    samples_from_dispatches(cand).to_parquet(tmp_path / "cand.parquet")
    out = tmp_path / "cmp"
    _plant(out, ["verdicts.csv", "verdicts.csv.tmp", "bench.json", "bench.json.tmp"], victim)
    main(["compare", str(tmp_path / "base.parquet"), str(tmp_path / "cand.parquet"),
          "--out", str(out), "--no-report"])
    write_pytest_benchmark_json(out / "bench.json", samples_from_dispatches(cand))
    _assert_untouched(victim, out, ["verdicts.csv", "bench.json"])
    assert json.loads((out / "bench.json").read_text())["benchmarks"]

    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    cand.to_parquet(trace_dir / "dispatches.parquet")
    out2 = tmp_path / "an"
    _plant(out2, ["kernels.csv", "summary.json", "report.html"], victim)
    assert main(["analyze", str(trace_dir), "--out", str(out2)]) == 0
    _assert_untouched(victim, out2, ["kernels.csv", "summary.json", "report.html"])

    job = tmp_path / "jobs" / "job.json"
    _plant(job.parent, ["job.json"], victim)
    write_job_file({"jobs": []}, job)
    _assert_untouched(victim, job.parent, ["job.json"])


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with safe_io.atomic_open(target, "w") as fh:
            fh.write("half")
            raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_append_log_refuses_a_link(tmp_path, victim):
    log = tmp_path / "logs" / "run.log"
    _plant(log.parent, ["run.log"], victim)
    with pytest.raises(safe_io.UnsafeOutputError, match="symbolic link"):
        safe_io.open_append(log)
    assert victim.read_text() == "precious\n"
    ok = tmp_path / "logs" / "ok.log"
    with safe_io.open_append(ok) as fh:
        fh.write(b"a\n")
    with safe_io.open_append(ok) as fh:
        fh.write(b"b\n")
    assert ok.read_bytes() == b"a\nb\n"


def test_lock_files_refuse_planted_links(tmp_path, victim):
    """The results directory's lock files (filelock opens them with O_NOFOLLOW): a planted link
    is refused with an error, and its target is not truncated."""
    from pytest_gemmperf.store.verdicts_file import merge_verdicts

    test_dir = tmp_path / "res" / "t"
    _plant(test_dir, [".verdicts.lock"], victim)
    with pytest.raises(OSError):
        merge_verdicts(test_dir, "p1", pd.DataFrame({"point": ["p1"], "kernel": ["k"]}))
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("writer", ["text", "bytes"])
def test_written_files_follow_the_umask_in_force_at_each_write(tmp_path, writer):
    """Each file gets what a plain ``open`` would give under the umask of that moment: the
    umask is never read once and kept (a program may change it between two writes)."""
    write = (lambda p: safe_io.write_text(p, "x")) if writer == "text" else \
        (lambda p: safe_io.write_bytes(p, b"x"))
    old = os.umask(0o077)
    try:
        modes = []
        for i, mask in enumerate((0o077, 0o022, 0o002, 0o027, 0o077)):
            os.umask(mask)
            write(tmp_path / f"f{i}")
            plain = tmp_path / f"plain{i}"
            with open(plain, "w"):
                pass
            modes.append((stat.S_IMODE((tmp_path / f"f{i}").stat().st_mode),
                          stat.S_IMODE(plain.stat().st_mode), 0o666 & ~mask))
        # a replaced file takes the new file's mode, not the old one's
        os.umask(0o022)
        write(tmp_path / "f0")
        assert stat.S_IMODE((tmp_path / "f0").stat().st_mode) == 0o644
    finally:
        os.umask(old)
    assert all(got == plain == want for got, plain, want in modes), modes


def test_a_planted_temporary_name_is_skipped_not_opened(tmp_path, victim, monkeypatch):
    """The temporary file's name is random; where a link or file already stands at the drawn
    name (planted, or a clash), that name is never opened and the next one is drawn."""
    draws = iter([b"\x00" * 6, b"\x00" * 6, b"\x01" * 6])
    monkeypatch.setattr(safe_io.os, "urandom", lambda n: next(draws))
    target = tmp_path / "out.csv"
    planted = tmp_path / f".out.csv.{'00' * 6}.tmp"
    planted.symlink_to(victim)
    safe_io.write_text(target, "new\n")
    assert target.read_text() == "new\n" and not target.is_symlink()
    assert victim.read_text() == "precious\n" and planted.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [planted.name, "out.csv", "victim"]


def test_no_free_temporary_name_is_an_error_naming_the_target(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_io.os, "urandom", lambda n: b"\x07" * n)
    (tmp_path / f".out.csv.{'07' * 6}.tmp").write_text("someone else's")
    with pytest.raises(FileExistsError) as info:
        safe_io.write_text(tmp_path / "out.csv", "x")
    assert str(tmp_path / "out.csv") in str(info.value)
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("rows", [0, 3, 1500])
@pytest.mark.parametrize("categories", [["a", "b"], ["a", "=b"], ["a", "x\ry"], ["=a", "b\r"], [1, 2]])
def test_categorical_columns_are_scanned_by_their_categories(rows, categories, monkeypatch):
    """A categorical column is passed over when none of its categories is a formula (or holds
    a CR): the same frame, row ends and text as its cells scanned one by one, with categories
    used, unused (a formula or CR among them, no cell holding it) and missing cells."""
    values = [categories[0] if i % 3 else None for i in range(rows)]
    df = pd.DataFrame({"k": pd.Categorical(values, categories=categories), "n": range(rows)})
    got = (neutralise_frame(df), safe_io._has_cr(df), safe_io.csv_text(df))
    monkeypatch.setattr(safe_io, "_SHORT_TEXT", -1)  # the categories' shortcut off: every cell
    want = (neutralise_frame(df), safe_io._has_cr(df), safe_io.csv_text(df))
    pd.testing.assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1:] == want[1:]
    assert got[0] is df or not ({"a", "b", "x\ry", 1, 2} >= set(categories))


@pytest.mark.parametrize("writer", ["text", "bytes"])
def test_whole_writes_survive_short_writes_and_fail_cleanly(tmp_path, monkeypatch, writer):
    """write_text / write_bytes: every byte written where write(2) takes a few at a time (text
    with CRs, CRLFs and non-ASCII kept as given); a failing write leaves the old file, no
    temporary file, and an error naming the file."""
    import errno

    text = "a,b\r\nç,\"x\ny\"\r\n" * 50
    write = (lambda p: safe_io.write_text(p, text)) if writer == "text" else \
        (lambda p: safe_io.write_bytes(p, text.encode()))
    real_write = os.write
    monkeypatch.setattr(safe_io.os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    target = tmp_path / "out.csv"
    assert write(target) == target
    assert target.read_bytes() == text.encode()

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safe_io.os, "write", full)
    with pytest.raises(OSError) as info:
        write(target)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert target.read_bytes() == text.encode()
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
