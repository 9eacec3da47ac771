"""Hostile text from traces never reaches a person raw, and a valid trace never crashes the report.

Kernel names, op names and paths come from files nobody vetted. Every place a person reads them
as text (the pytest terminal summary and failure message, progress lines, every ``gemmperf``
command's output, ``summary.md``, ``report.html``) must show control, bidirectional and line
separator characters as visible escapes, while the tables meant for programs (``kernels.csv``,
``verdicts.csv``) keep the name as the trace wrote it.

The report property test generates valid Kineto and rocprofv3 traces over kernel counts that
straddle pandas' int8/int16 categorical-code boundary (127, 255/256 categories), with and
without GEMMs and collectives, on one or several GPUs, and runs ``gemmperf analyze`` with its
full default report.
"""

from __future__ import annotations

import csv
import itertools
import json
import random
import sys
import unicodedata
from pathlib import Path

import pandas as pd
import pytest

from pytest_gemmperf import cli

pytest_plugins = ["pytester"]

UNSAFE = {"Cc", "Cf", "Zl", "Zp", "Cs"}

#: names that would recolour the terminal, set its title, ring, break lines or reverse text;
#: the GEMM / collective prefixes put them in the categories the reports single out
HOSTILE = (
    "Cijk_Alik_Bljk\x1b[31mRED\x1b[0m_MT64x64",                  # CSI colour
    "void gemm_evil\x1b]0;pwned title\x07<float>",               # OSC window title + BEL
    "Cijk_line\nbreak|pipe|`tick`",                               # newline, Markdown pipes, backticks
    "elementwise\roverwrite\tthe line",                           # CR, TAB
    "ncclDevKernel_\u202eesrever\u2066iso\u2069\u200f\u061c",    # bidi override, isolates, marks
    "reduce_kernel\x9b31m\x85c1\u2028sep\u2029\x00nul\x7f",       # C1 CSI, NEL, separators, NUL, DEL
    "softmax\ufeffbom\u200bzw\U000e0041tag",                      # BOM, zero width, tag character
)


def _raw_unsafe(text: str) -> list[str]:
    """Every character of ``text`` that acts on a display instead of showing (``\\n`` excluded:
    callers split lines themselves)."""
    return sorted({f"U+{ord(c):04X}" for c in text if c != "\n" and unicodedata.category(c) in UNSAFE})


def _assert_clean(text: str, where: str) -> None:
    bad = _raw_unsafe(text)
    assert not bad, f"raw control/bidi characters {bad} reach {where}"


# --- the escaping function ------------------------------------------------------------------

@pytest.mark.parametrize("name", HOSTILE + ("plain µs ▶ 名前 name", "", "\\x1b already escaped"))
def test_printable_escapes_control_and_bidi_characters(name):
    from pytest_gemmperf.textsafe import printable, printable_lines

    out = printable(name)
    assert "\n" not in out and not _raw_unsafe(out)
    # every other character is kept, in order: escaping only replaces the unsafe ones
    kept = "".join(c for c in name if unicodedata.category(c) not in UNSAFE)
    it = iter(out)
    assert all(c in it for c in kept)
    lines = printable_lines(f"head\n{name}\ntail").split("\n")
    assert lines[0] == "head" and lines[-1] == "tail" and not _raw_unsafe("\n".join(lines))


def test_printable_covers_every_unsafe_code_point():
    from pytest_gemmperf.textsafe import printable

    unsafe = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in UNSAFE]
    assert len(unsafe) > 2000  # controls, format characters, separators, surrogates
    text = printable("".join(unsafe))
    assert text.isascii() and text.isprintable()
    assert printable("a\x1bb\u202ec\nd") == "a\\x1bb\\u202ec\\nd"


# --- trace generators -----------------------------------------------------------------------

def _kernel_names(n: int, *, gemms: bool, collectives: bool, hostile: bool = False) -> list[str]:
    names = []
    for i in range(n):
        if gemms and i % 3 == 0:
            names.append(f"Cijk_Ailk_Bljk_S_B_MT{i}x64x16_MI16x16x1")
        elif collectives and i % 7 == 1:
            names.append(f"ncclDevKernel_AllReduce_Sum_f32_RING_LL_{i}(ncclDevKernelArgsStorage<4096ul>)")
        else:
            names.append(f"void at::native::elementwise_kernel_{i}<128, 4>(int)")
    if hostile:
        names[: len(HOSTILE)] = HOSTILE[: len(names)]
    return names


def write_kineto(path: Path, names: list[str], *, gpus: int = 1, reps: int = 3, scale: dict | None = None,
                 seed: int = 0) -> Path:
    """A PyTorch-profiler (Kineto) trace: each kernel ``reps`` times on each GPU, collectives
    overlapping the GEMM before them."""
    rng = random.Random(seed)
    events, corr = [], 1
    for gpu in range(gpus):
        ts = 1000.0
        for rep in range(reps):
            for name in names:
                dur = round(5.0 * (scale or {}).get(name, 1.0) * rng.uniform(0.98, 1.02), 3)
                start = ts - 2.0 if name.startswith("nccl") else ts  # overlaps the previous kernel
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": gpu, "tid": 7,
                               "ts": round(start, 3), "dur": dur,
                               "args": {"device": gpu, "stream": 7, "correlation": corr}})
                ts += dur + 1.0
                corr += 1
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}), encoding="utf-8")
    return path


KT_HEADER = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
             "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
             "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
             "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]


def write_rocprof_csv(directory: Path, names: list[str], *, gpus: int = 1, reps: int = 3) -> Path:
    """A rocprofv3 7.x ``<pid>_kernel_trace.csv`` (22 columns, rocprofv3-formats.md)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "4242_kernel_trace.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(KT_HEADER)
        did, t = 1, 1_550_000_000_000_000
        for gpu in range(gpus):
            for rep in range(reps):
                for kid, name in enumerate(names):
                    w.writerow(["KERNEL_DISPATCH", f"Agent {gpu + 2}", 1, 1, 4242, did, kid + 1, name, did,
                                t, t + 5000, 0, 0, 8, 0, 16, 256, 1, 1, 1024, 1, 1])
                    did += 1
                    t += 6000
    return path


def _analyze(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(["analyze", *args, "--jobs", "1"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


REPORT_FILES = ("kernels.csv", "summary.json", "report.html", "report.xlsx", "summary.md")


# --- item: trace text reaches the terminal raw ----------------------------------------------

def test_analyze_escapes_trace_names_everywhere_a_person_reads(tmp_path, capsys):
    # the path itself is hostile too: a directory name holding ESC and a newline
    d = tmp_path / "runs\x1b[2Jcleared\nx"
    d.mkdir()
    trace = write_kineto(d / "trace.json", _kernel_names(20, gemms=True, collectives=True, hostile=True), gpus=2)
    out = d / "out"
    rc, stdout, stderr = _analyze(capsys, str(trace), "--out", str(out))
    assert rc == 0, stderr
    for f in REPORT_FILES:
        assert (out / f).is_file(), f
    _assert_clean(stdout + stderr, "gemmperf analyze output")
    assert "\\x1b[2Jcleared\\nx" in stdout  # the output path is shown, escaped, on one line
    md = (out / "summary.md").read_text(encoding="utf-8")
    _assert_clean(md, "summary.md")
    for line in md.splitlines():  # no name breaks a table row: every row has the header's cells
        if line.startswith("| "):
            assert line.count(" | ") + line.replace("\\|", "").count("|") >= 2
    html = (out / "report.html").read_text(encoding="utf-8")
    _assert_clean(html.replace("\t", "").replace("\r", ""), "report.html")
    # the table for programs keeps every name exactly as the trace wrote it
    kernels = pd.read_csv(out / "kernels.csv", keep_default_na=False)
    assert set(HOSTILE) <= set(kernels["kernel"])


def test_summary_md_table_rows_keep_their_columns(tmp_path, capsys):
    names = _kernel_names(12, gemms=True, collectives=False, hostile=True)
    base = write_kineto(tmp_path / "base.json", names, reps=4, seed=1)
    cand = write_kineto(tmp_path / "cand.json", names, reps=4, seed=2, scale={n: 2.0 for n in HOSTILE})
    out = tmp_path / "cmp"
    cli.main(["compare", str(base), str(cand), "--out", str(out), "--jobs", "1"])
    cap = capsys.readouterr()
    _assert_clean(cap.out + cap.err, "gemmperf compare output")
    assert "\\x1b" in cap.out  # the hostile kernels are listed, escaped
    md = (out / "summary.md").read_text(encoding="utf-8")
    _assert_clean(md, "summary.md")
    # each table (consecutive "|" lines) keeps its header's number of cells in every row
    tables = [list(g) for is_row, g in itertools.groupby(md.splitlines(), lambda ln: ln.startswith("|")) if is_row]
    assert tables
    for table in tables:
        header_cells = len(table[0].replace("\\|", "").split("|"))
        for ln in table:
            assert len(ln.replace("\\|", "").split("|")) == header_cells, ln
    verdicts = pd.read_csv(out / "verdicts.csv", keep_default_na=False)
    assert set(HOSTILE) <= set(verdicts["kernel"])


HOSTILE_PATHS = ("nope\x1b]0;title\x07", "two\nlines", "\u202eexe.txt", "cr\rover", "c1\x9b2J")


@pytest.mark.parametrize("name", HOSTILE_PATHS)
@pytest.mark.parametrize("command", ["analyze", "compare", "baseline show", "history show"])
def test_cli_output_escapes_hostile_paths(tmp_path, capsys, command, name):
    bad = str(tmp_path / name)
    argv = {"analyze": ["analyze", bad, "--out", str(tmp_path / "o"), "--jobs", "1"],
            "compare": ["compare", bad, bad, "--out", str(tmp_path / "o"), "--jobs", "1"],
            "baseline show": ["baseline", "show", "--baseline-dir", bad],
            "history show": ["history", "show", "--history", bad]}[command]
    rc = cli.main(argv)
    cap = capsys.readouterr()
    _assert_clean(cap.out + cap.err, f"gemmperf {command} output")
    if rc == 2:  # an input error is one line, whatever the path holds
        assert len(cap.err.splitlines()) == 1, cap.err


HOSTILE_WORKLOAD = r'''
import json, os, random, sys
NAMES = json.loads(sys.argv[1])
scale = float(os.environ.get("FAKE_SCALE", "1.0"))
rng = random.Random(os.getpid())
for rank in range(2):
    pid = os.getpid() * 10 + rank
    ts, events = 1000.0, []
    for i in range(30):
        for name in NAMES:
            dur = round(100.0 * scale * rng.lognormvariate(0.0, 0.02), 3)
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": pid,
                           "ts": round(ts, 3), "dur": dur, "args": {"External id": len(events)}})
            ts += dur + 5.0
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": pid, "tid": pid,
                       "ts": round(ts, 3), "dur": 20.0, "args": {"External id": len(events)}})
        ts += 25.0
    out = os.path.join(os.environ["GEMMPERF_TRACE_DIR"], f"rank{rank}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "trace.json"), "w") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
'''


def test_pytest_session_escapes_names_in_failure_summary_and_progress(pytester, monkeypatch):
    from gemmperf_pytester_support import PLUGIN_ARGS
    from pytest_gemmperf.run import backend as be
    from pytest_gemmperf.run import environment

    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    monkeypatch.delenv("FAKE_SCALE", raising=False)
    names = ["aten::mm" + h for h in HOSTILE[:6]]
    workload = pytester.path / "hostile_workload.py"
    workload.write_text(HOSTILE_WORKLOAD, encoding="utf-8")
    pytester.makepyfile(test_hostile=f"""
import sys
from pytest_gemmperf import sweep

@sweep(threads=[256], kernels=[r"^aten::mm"])
def test_hostile(gemmperf):
    result = gemmperf.profile([sys.executable, {str(workload)!r}, {json.dumps(names)!r}], repeats=2)
    gemmperf.assert_no_regression(result)
""")
    args = [*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark", "--gemmperf-backend", "torch",
            "--gemmperf-telemetry", "off", "--gemmperf-baseline-dir=base", "-rA"]
    first = pytester.runpytest(*args, "--gemmperf-results-dir=r1")
    first.assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_SCALE", "2.0")
    second = pytester.runpytest(*args, "--gemmperf-results-dir=r2")
    second.assert_outcomes(failed=1)
    for run in (first, second):
        text = "\n".join(run.outlines + run.errlines)
        _assert_clean(text, "the pytest terminal")
    text = "\n".join(second.outlines)
    assert "regression(s) in" in text and "aten::mm" in text and "\\x1b" in text
    # each hostile name stays on its own table line: no name starts a line of the failure table
    assert not any(ln.startswith(("break|pipe", "overwrite", "sep")) for ln in second.outlines)
    verdicts = pd.read_csv(pytester.path / "r2" / "test_hostile.py__test_hostile" / "verdicts.csv",
                           keep_default_na=False)
    assert set(names) <= set(verdicts["kernel"])


# --- item: a valid trace crashes the report --------------------------------------------------

def _analyze_ok(tmp_path: Path, capsys, trace: Path) -> None:
    out = tmp_path / "out"
    rc, stdout, stderr = _analyze(capsys, str(trace), "--out", str(out))
    assert rc == 0, f"{trace.name}: exit {rc}: {stderr[-2000:]}"
    for f in REPORT_FILES:
        assert (out / f).is_file(), f"{trace.name}: {f} missing; stderr: {stderr[-500:]}"
    assert "Traceback" not in stderr


# the boundary the field traces hit: 127 distinct names, GEMMs among them, no collective, 1 GPU
FAST_CASES = [
    ("kineto", 127, True, False, 1),
    ("kineto", 128, True, True, 2),
    ("kineto", 130, False, False, 1),
    ("rocprof_csv", 127, True, False, 1),
]


@pytest.mark.parametrize("fmt,n,gemms,collectives,gpus", FAST_CASES)
def test_report_never_crashes_on_valid_trace(tmp_path, capsys, fmt, n, gemms, collectives, gpus):
    names = _kernel_names(n, gemms=gemms, collectives=collectives)
    trace = (write_kineto(tmp_path / "t.json", names, gpus=gpus, reps=2) if fmt == "kineto"
             else write_rocprof_csv(tmp_path / "rocprof", names, gpus=gpus, reps=2).parent)
    _analyze_ok(tmp_path, capsys, trace)


def _sweep_cases(k: int = 12, seed: int = 20240611) -> list[tuple]:
    rng = random.Random(seed)
    counts = [1, 126, 127, 128, 255, 256, 257, 400] + [rng.randint(1, 400) for _ in range(k - 8)]
    return [(rng.choice(["kineto", "kineto", "rocprof_csv"]), n, rng.random() < 0.7, rng.random() < 0.5,
             rng.choice([1, 1, 2, 4])) for n in counts]


@pytest.mark.slow
@pytest.mark.parametrize("fmt,n,gemms,collectives,gpus", _sweep_cases())
def test_report_never_crashes_on_valid_trace_sweep(tmp_path, capsys, fmt, n, gemms, collectives, gpus):
    names = _kernel_names(n, gemms=gemms, collectives=collectives)
    trace = (write_kineto(tmp_path / "t.json", names, gpus=gpus, reps=2) if fmt == "kineto"
             else write_rocprof_csv(tmp_path / "rocprof", names, gpus=gpus, reps=2).parent)
    _analyze_ok(tmp_path, capsys, trace)
