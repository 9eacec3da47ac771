"""First-hour polish (issue 12, item 6): the CLI as a new user meets it.

* every ``gemmperf <cmd> [<sub>] --help``: no reST markup, every option has help, defaults shown;
* ``gemmperf compare /tmp ...``: an unrelated or huge directory is refused in one line naming it,
  from names alone (no broken file inside it is ever what the error names), while every
  documented layout is still recognised;
* ``rocprof-config`` on a CPU-only run warns (one stderr line) that its regex selects CPU ops;
* ``verdicts.csv`` has the same columns in the same order from a pytest session and from
  ``gemmperf compare`` of the same runs.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

# pytester's in-process runs drop the modules they imported afterwards; pyarrow extension types
# cannot be registered twice, so everything the inner sessions use is imported here, once.
import pandas.core.arrays.arrow.extension_types  # noqa: F401
import pyarrow.parquet  # noqa: F401

import pytest_gemmperf.gate.compare  # noqa: F401
import pytest_gemmperf.gate.samples  # noqa: F401
import pytest_gemmperf.run.process  # noqa: F401
import pytest_gemmperf.run.torch_backend  # noqa: F401
import pytest_gemmperf.store.baselines  # noqa: F401
import pytest_gemmperf.store.hardware  # noqa: F401
import pytest_gemmperf.store.results  # noqa: F401
import pytest_gemmperf.traces.torch_trace  # noqa: F401
from pytest_gemmperf.cli import build_parser
from pytest_gemmperf.cli import main as cli_main
from pytest_gemmperf.commands.helpfmt import HelpFormatter, command_description, plain
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.verdict import VERDICT_COLUMNS, VERDICTS_CSV_COLUMNS, verdicts_csv_order
from pytest_gemmperf.run import backend as be
from pytest_gemmperf.run import environment
from pytest_gemmperf.traces import dirscan
from pytest_gemmperf.traces.discover import load

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fixtures" / "gemmperf_plugin" / "fake_kineto_workload.py"
GPU_TORCH_TRACE = REPO / "tests" / "fixtures" / "torch" / "rocm_sdk_rank3.pt.trace.json"


# ------------------------------------------------------------------------------------- --help

def _parsers(parser: argparse.ArgumentParser, name: str = "gemmperf"):
    """(command line, parser) for the top parser and every sub-parser, recursively."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _parsers(p, f"{name} {sub}")


ALL_PARSERS = list(_parsers(build_parser()))


def test_every_subcommand_is_covered():
    names = {n for n, _ in ALL_PARSERS}
    assert {"gemmperf analyze", "gemmperf compare", "gemmperf rocprof-config", "gemmperf baseline refresh",
            "gemmperf baseline learn", "gemmperf baseline show", "gemmperf baseline diff",
            "gemmperf baseline prune"} <= names


@pytest.mark.parametrize("name,parser", ALL_PARSERS, ids=[n for n, _ in ALL_PARSERS])
def test_help_is_plain_text_with_every_option_explained(name, parser):
    text = parser.format_help()
    assert "``" not in text and ":func:" not in text and ":class:" not in text, text
    blocks = text.split("\n\n")
    if parser.description:  # the description is prose, not the usage synopsis again
        assert not blocks[1].startswith("`gemmperf"), blocks[1]
    fmt = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        opt = "/".join(action.option_strings)
        assert action.help and action.help.strip(), f"{name} {opt}: no help text"
        default = action.default
        if default is None or isinstance(default, bool) or default == [] or default is argparse.SUPPRESS:
            continue  # nothing to show: "not given", a flag, an empty list
        shown = fmt._expand_help(action)  # the text --help prints for this option
        assert "default" in shown.lower(), f"{name} {opt}: default {default!r} not shown: {shown!r}"


def test_help_of_the_real_command_line(capsys):
    with pytest.raises(SystemExit) as ei:
        cli_main(["baseline", "diff", "--help"])
    assert ei.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    # --from and --warmup had no help before
    assert "--from RESULTS_DIR results directory of a finished run" in out
    assert "--warmup N dispatches per process and kernel to drop" in out
    with pytest.raises(SystemExit):
        cli_main(["analyze", "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "`DIR/kernels.csv`" in out
    # bullets stay bullets: two items, each on its own line
    assert sum(line.startswith("* ") for line in out.splitlines()) == 2
    assert "gemmperf analyze PATH... [--out DIR]" not in out  # the docstring's synopsis is dropped


def test_formatter_rules():
    assert plain("run ``gemmperf analyze`` via :func:`pkg.mod.fn` and **always**") == \
        "run `gemmperf analyze` via `pkg.mod.fn` and always"
    assert command_description("``gemmperf x A B``: the gate outside pytest.\n\nMore.") == \
        "The gate outside pytest.\n\nMore."
    assert command_description("``gemmperf x A``\n\nReads things.") == "Reads things."
    assert command_description("Plain text.") == "Plain text."
    p = argparse.ArgumentParser(prog="t", formatter_class=HelpFormatter,
                                description="Lead line:\n\n* one ``a``\n  continued\n* two")
    p.add_argument("--n", type=int, default=3, help="count")
    p.add_argument("--m", type=int, default=4, help="count (default 4)")
    p.add_argument("--flag", action="store_true", help="a flag")
    text = p.format_help()
    assert "Lead line:\n\n* one `a` continued\n* two" in text
    assert "count (default: 3)" in text and "count (default 4)" in text and "(default 4) (default" not in text
    assert "a flag" in text and "a flag (default" not in text


# ----------------------------------------------------------------------- unrelated directories

def _write(p: Path, text: str = "x") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _cli(capsys, *argv):
    rc = cli_main(list(argv))
    cap = capsys.readouterr()
    return rc, [ln for ln in cap.err.splitlines() if ln.strip()]


def test_unrelated_directory_is_refused_in_one_line_naming_it(tmp_path, capsys):
    junk = tmp_path / "junk"
    for i in range(30):
        _write(junk / f"proj{i}" / "src" / f"m{i}.py")
    # a broken results point deep inside: before, discovery walked down to it and named it
    _write(junk / "a" / "b" / "c" / "test_x" / "th256" / "point.json", "{not json")
    _write(junk / "a" / "b" / "c" / "test_x" / "th256" / "dispatches.parquet", "not parquet")
    good = REPO / "tests" / "fixtures" / "rocprof_json" / "v7_two_processes_counters_results.json"
    rc, err = _cli(capsys, "compare", str(junk), str(good), "--out", str(tmp_path / "o"), "--no-report")
    assert rc == 2 and len(err) == 1, err
    # compare also accepts a baselines store, and says so
    assert err[0].startswith(f"gemmperf: error: {junk}: not a baselines store (")
    assert "results, rocprofv3 output or sweep directory (found no trace files" in err[0]
    assert f"within depth {dirscan.RECOGNISE_DEPTH}" in err[0] and "point.json" not in err[0]
    rc, err = _cli(capsys, "analyze", str(junk), "--out", str(tmp_path / "o2"), "--no-report")
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"gemmperf: error: {junk}: not a results, rocprofv3 output or sweep directory")


def test_compare_against_an_empty_baselines_store_says_so(tmp_path, capsys):
    store = tmp_path / "baselines"
    _write(store / "README.md", "# baselines\n")  # the repository's store before any recording
    good = REPO / "tests" / "fixtures" / "rocprof_json" / "v7_two_processes_counters_results.json"
    for extra in ([], ["--no-report"]):
        rc, err = _cli(capsys, "compare", str(store), str(good), "--out", str(tmp_path / "o"), *extra)
        assert rc == 2 and len(err) == 1, err
        assert err[0].startswith(f"gemmperf: error: {store}: not a baselines store (no <hw_key>/<test>/meta.json: "
                                 "nothing recorded yet?), results, rocprofv3 output or sweep directory"), err


def test_huge_tree_stops_at_the_entry_cap(tmp_path, capsys, monkeypatch):
    tree = tmp_path / "tree"
    _write(tree / "tmpabc" / "big.pt.trace.json", "{}")  # recognisable near the top, like /tmp
    for i in range(120):
        _write(tree / "other" / f"d{i // 10}" / f"f{i}.txt")
    _write(tree / "zzz" / "x" / "y" / "point.json", "{broken")  # never reached, never named
    monkeypatch.setenv(dirscan.MAX_ENTRIES_ENV, "100")
    rc, err = _cli(capsys, "analyze", str(tree), "--out", str(tmp_path / "o"), "--no-report")
    assert rc == 2 and len(err) == 1, err
    assert err[0] == (f"gemmperf: error: {tree}: not a results, rocprofv3 output or sweep directory: more "
                      f"than 100 entries under it (scan stopped); name the run's own directory or its trace "
                      f"files, or raise {dirscan.MAX_ENTRIES_ENV}")
    monkeypatch.setenv(dirscan.MAX_ENTRIES_ENV, "many")
    with pytest.raises(GemmperfInputError, match="expected a positive integer"):
        dirscan.max_entries()
    monkeypatch.delenv(dirscan.MAX_ENTRIES_ENV)
    assert dirscan.max_entries() == dirscan.DEFAULT_MAX_ENTRIES


def test_the_refusal_opens_no_file(tmp_path, capsys):
    """Names decide: FIFOs named like outputs below the bound would block any reader that
    opened them (the alarm turns such a hang into a failure)."""
    import signal

    d = tmp_path / "d"
    for i in range(5):
        (d / f"p{i}" / "q" / "r").mkdir(parents=True)
        os.mkfifo(d / f"p{i}" / "q" / "r" / "point.json")
        os.mkfifo(d / f"p{i}" / "q" / "r" / "1_results.json")

    def expire(signum, frame):
        raise TimeoutError("a file was opened (blocked on a FIFO)")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    try:
        with pytest.raises(GemmperfInputError, match="not a results"):
            dirscan.scan_tree(d, [])
        rc, err = _cli(capsys, "compare", str(d), str(d), "--out", str(tmp_path / "o"), "--no-report")
        assert rc == 2 and len(err) == 1 and "point.json" not in err[0] and "FIFO" not in err[0], err
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("layout", [
    "run.json",                                                        # results run directory
    "2026-11-26T10-37-24/run.json",                                    # .gemmperf/results
    "results/2026-11-26T10-37-24/run.json",                            # .gemmperf
    "test_x/th256/point.json",                                         # results without run.json
    "dispatches.parquet",                                              # one point
    "th256/dispatches.parquet",                                        # one test
    "1234_kernel_trace.csv",                                           # rocprofv3 6.2
    "host-a/1234_kernel_trace.csv",                                    # rocprofv3 >= 6.3
    "pass_1/host-a/1234_counter_collection.csv",                       # counter passes
    "pmc_1/1234_counter_collection.csv",                               # 6.2 passes
    "host-a/1234_results.json.gz",                                     # rocprofv3 JSON
    "run/host-a/1234_results.db",                                      # rocpd
    "trace.json",                                                      # a Kineto trace by any name
    "log/worker0.1700000.pt.trace.json",                               # tensorboard handler dir
    "256thread/nccl_28channels/torch_profiler/rank0/t.json",          # aorta sweep
    "sweep_2025/256thread/nccl_28channels/rocprof_traces/h/1_kernel_trace.csv",  # sweeps' parent
    "nccl_28channels/torch_profiler/rank0/t.json",                     # one aorta cell
])
def test_every_documented_layout_is_recognised(tmp_path, layout):
    _write(tmp_path / "in" / layout, "{}")
    dirscan.check_recognisable(tmp_path / "in")


def test_layouts_deeper_than_the_bound_are_refused(tmp_path):
    _write(tmp_path / "in" / "a" / "b" / "c" / "1234_kernel_trace.csv")
    _write(tmp_path / "in" / "a" / "b" / "notes.json")  # a plain JSON below the top marks nothing
    with pytest.raises(GemmperfInputError, match=r"found no trace files or layout directories within depth 2"):
        dirscan.check_recognisable(tmp_path / "in")
    # naming the directory that holds the output works
    dirscan.check_recognisable(tmp_path / "in" / "a" / "b")


# --------------------------------------------------------------------- rocprof-config on a CPU run

def _cpu_traces(tmp_path: Path) -> Path:
    out = tmp_path / "cpu_run"
    out.mkdir()
    env = {**os.environ, "GEMMPERF_TRACE_DIR": str(out), "GEMMPERF_OUTPUT_DIR": str(out)}
    subprocess.run([sys.executable, str(FAKE), "--ranks", "1", "--dispatches", "30"], env=env,
                   check=True, timeout=60)
    return out


def test_rocprof_config_warns_once_on_cpu_ops(tmp_path, capsys):
    cpu = _cpu_traces(tmp_path)
    rc, err = _cli(capsys, "rocprof-config", "--from", str(cpu), "--out", str(tmp_path / "cpu.yaml"),
                   "--rocprof-version", "7.0")
    assert rc == 0
    warnings = [ln for ln in err if ln.startswith("warning:")]
    assert len(warnings) == 1, err
    assert "CPU ops" in warnings[0] and "aten::mm" in warnings[0] and "no GPU kernel under rocprofv3" in warnings[0]
    assert (tmp_path / "cpu_kernel_list.txt").read_text() == "aten::mm\n"  # still written, as asked

    # a top-variance CSV naming PyTorch operators is the same mistake
    csv = _write(tmp_path / "top5_gemm_kernels_time_variance.csv", "kernel_name,time_diff_us\naten::mm,5\n")
    rc, err = _cli(capsys, "rocprof-config", "--from", str(csv), "--out", str(tmp_path / "c.yaml"),
                   "--rocprof-version", "7.0")
    assert rc == 0 and sum(ln.startswith("warning:") for ln in err) == 1


def test_rocprof_config_on_gpu_kernels_does_not_warn(tmp_path, capsys):
    rc, err = _cli(capsys, "rocprof-config", "--from", str(GPU_TORCH_TRACE), "--out", str(tmp_path / "g.yaml"),
                   "--rocprof-version", "7.0")
    assert rc == 0 and not [ln for ln in err if ln.startswith("warning:")], err
    csv = _write(tmp_path / "top.csv", "kernel_name,time_diff_us\nCijk_Alik_Bljk_HHS_BH_MT128x128,5\n"
                                        "void at::native::vectorized_elementwise_kernel<4>,3\n")
    rc, err = _cli(capsys, "rocprof-config", "--from", str(csv), "--out", str(tmp_path / "c.yaml"),
                   "--rocprof-version", "7.0")
    assert rc == 0 and not [ln for ln in err if ln.startswith("warning:")], err


# ------------------------------------------------------------------------ verdicts.csv column order

def test_csv_order_rule():
    df = pd.DataFrame(columns=["zeta", "verdict", "shared_shift", "point", "label", "alpha", "test"])
    assert list(verdicts_csv_order(df).columns) == ["test", "point", "verdict", "label", "shared_shift",
                                                    "alpha", "zeta"]
    assert VERDICTS_CSV_COLUMNS[: len(VERDICT_COLUMNS)] == VERDICT_COLUMNS and VERDICT_COLUMNS[0] == "test"


def _entry_point_loaded() -> bool:
    return any(ep.value == "pytest_gemmperf.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))


TEST_FILE = f"""
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28], threads=[256], kernels=[r"^aten::mm$"])
def test_order(gemmperf):
    result = gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "30"], repeats=2)
    gemmperf.assert_no_regression(result)
"""


def test_verdicts_csv_same_columns_from_pytest_and_compare(pytester, monkeypatch, capsys):
    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)  # host load decides nothing
    monkeypatch.delenv("FAKE_SCALE", raising=False)
    pytester.makepyfile(test_order=TEST_FILE)
    plugin = [] if _entry_point_loaded() else ["-p", "pytest_gemmperf.plugin"]

    def session(results: str):
        return pytester.runpytest(*plugin, "-p", "no:cacheprovider", "-p", "no:benchmark",
                                  f"--gemmperf-results-dir={results}", "--gemmperf-baseline-dir=base",
                                  "--gemmperf-report-dir=rep", "--gemmperf-confirm=0")

    session("res1").assert_outcomes(passed=1)  # records the baseline
    session("res2").assert_outcomes(passed=1)  # gates against it, writes verdicts.csv
    root = pytester.path
    from_pytest, = (root / "res2").glob("*/verdicts.csv")
    rc = cli_main(["compare", str(root / "base"), str(root / "res2"), "--out", str(root / "cmp"), "--no-report"])
    capsys.readouterr()
    assert rc == 0
    a = pd.read_csv(from_pytest)
    b = pd.read_csv(root / "cmp" / "verdicts.csv")
    assert list(a.columns) == list(b.columns)
    assert list(a.columns[: len(VERDICT_COLUMNS)]) == list(VERDICT_COLUMNS)
    assert set(a["test"]) == set(b["test"]) == {"test_order.py::test_order"}
    key = ["point", "kernel", "metric"]
    assert a.sort_values(key)[key].astype(str).values.tolist() == b.sort_values(key)[key].astype(str).values.tolist()

    # the parent of several runs (.gemmperf/results) compares its newest run, as `baseline refresh
    # --from` reads it, instead of pooling every run under it as anonymous traces
    import shutil

    shutil.copytree(root / "res1", root / "runs" / "2026-01-01T00-00-00")
    shutil.copytree(root / "res2", root / "runs" / "2026-01-02T00-00-00")
    rc = cli_main(["compare", str(root / "base"), str(root / "runs"), "--out", str(root / "cmp2"), "--no-report"])
    err = capsys.readouterr().err
    assert rc == 0 and "comparing the newest" in err and "2026-01-02T00-00-00" in err
    c = pd.read_csv(root / "cmp2" / "verdicts.csv")
    assert set(c["test"]) == {"test_order.py::test_order"}
    assert c.sort_values(key)[key + ["n_cand"]].astype(str).values.tolist() == \
        b.sort_values(key)[key + ["n_cand"]].astype(str).values.tolist()
