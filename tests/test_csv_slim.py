"""The rocprofv3 kernel_trace.csv read a block at a time (``traces/csv_slim.py``) against the
whole-file read: on random files of every layout the full reader accepts, the slim columns (and
the coded dispatches' table) equal the full table's row for row, dtypes and categories alike,
with the same meta and agents; on hostile files the error is the full read's line."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import SHARED_DATA

from pytest_gemmperf.analysis.source_totals import READ_COLUMNS, coded_reduction, dispatch_totals
from pytest_gemmperf.analysis.kernel_stats import ROW_KEYS, duration_rows
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces import csv_kernel_trace, csv_slim
from pytest_gemmperf.traces.coded import CodedDispatches
from pytest_gemmperf.traces.csv_layouts import _KT_62, _KT_63, _KT_7X, _KT_19
from pytest_gemmperf.traces.rocprof_csv import read_kernel_trace_csv
from pytest_gemmperf.traces.csv_slim import SLIM_COLUMNS

FIXTURES = Path(__file__).parent / "fixtures" / "rocprof_csv"
SHARED = SHARED_DATA / "rocprofv3"
AGENT_INFO = FIXTURES / "v7" / "mi350-n1" / "5358_agent_info.csv"
#: rocpd convert's dialect as ROCm 7.1.1 spells it (rocprofv3-formats.md §5)
_GUID = ("Guid", *(c.title() if c in ("LDS_Block_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count")
                   else c for c in _KT_7X))
LAYOUTS = {"6.2": _KT_62, "6.3": _KT_63, "19": _KT_19, "7.x": _KT_7X, "guid": _GUID}
NAMES = ["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
         "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
         "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
         "Cijk_Alik_Bljk_HHS_BH_MT256x256x64_MI16x16x1_SN_1LDSB1_AFC1_GSU1_ISA950",
         "__amd_rocclr_copyBuffer", "kernel with\na newline", "x", "zeta, alpha (float)"]


def _cell(col: str, row: dict) -> str:
    v = row.get(col.lower())
    if v is None:
        return ""
    return f'"{v}"' if isinstance(v, str) else str(v)


def write_trace(path: Path, rng: random.Random, layout: str, n: int, *, labels: str = "agent",
                bad: dict | None = None) -> Path:
    """A kernel_trace.csv of ``n`` random dispatches in ``layout`` (``bad``: row -> cells that
    replace the generated ones, as text)."""
    cols = LAYOUTS[layout]
    names = rng.sample(NAMES, rng.randint(1, len(NAMES)))
    if rng.random() < 0.5:
        names = [n_ for n_ in names if "\n" not in n_] or ["x"]
    lines = [",".join(f'"{c}"' for c in cols)]
    no_queue = rng.choice((0.0, 0.0, 0.5, 1.0))  # rows without a queue: in order per stream
    t = 1_550_151_853_000_000 if rng.random() < 0.8 else rng.randint(0, 10**6)
    for i in range(n):
        agent = rng.choice((2, 3, 3, 4))
        label = {"agent": f"Agent {agent}", "gpu": f"GPU {agent - 2}", "int": agent}[labels]
        start = t + rng.randint(-3000, 3000)
        t += rng.randint(0, 5000)
        row = {"kind": "KERNEL_DISPATCH", "agent_id": label, "queue_id": None if rng.random() < no_queue else rng.choice((1, 2, 3)),
               "stream_id": rng.choice((0, 1, 7, None)), "thread_id": 834304, "dispatch_id": i + 1,
               "kernel_id": rng.randint(1, 20), "kernel_name": rng.choice(names), "correlation_id": i + 1,
               "start_timestamp": start, "end_timestamp": start + rng.choice((0, 1, rng.randint(2, 400_000))),
               "guid": "00006409-00d1-70d1-a5cb-b5ab88214544"}
        for c in cols:
            row.setdefault(c.lower(), rng.randint(0, 300))
        cells = [_cell(c, row) for c in cols]
        for c, text in (bad or {}).get(i, {}).items():
            cells[[x.lower() for x in cols].index(c)] = text
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + ("\n" if rng.random() < 0.8 else ""))
    return path


def same_read(read, path: Path, expect_slim: bool | None = True) -> None:
    """``read(path, columns=...)`` slim equals the full read ``read(path)`` (or both refuse the
    file with the same line): the slim columns and the coded dispatches' table row for row, the
    coded reduction, meta, files, agents and counters; ``expect_slim``: whether the dispatches
    come coded, i.e. the file was read slim (None: either)."""
    try:
        full = read(path)
    except GemmperfInputError as exc:
        with pytest.raises(GemmperfInputError) as slim_exc:
            read(path, columns=SLIM_COLUMNS)
        assert str(slim_exc.value) == str(exc)
        assert type(slim_exc.value) is type(exc)
        return
    slim = read(path, columns=SLIM_COLUMNS)
    pd.testing.assert_frame_equal(slim.dispatches, full.dispatches[list(SLIM_COLUMNS)],
                                  check_exact=True, obj=str(path))
    assert slim.meta == full.meta
    assert slim.files == full.files
    pd.testing.assert_frame_equal(slim.agents, full.agents)
    pd.testing.assert_frame_equal(slim.counters, full.counters)
    coded = read(path, columns=READ_COLUMNS, coded=True).dispatches
    assert expect_slim is None or isinstance(coded, CodedDispatches) == expect_slim
    if isinstance(coded, CodedDispatches):
        table = full.dispatches[list(READ_COLUMNS)]
        pd.testing.assert_frame_equal(coded.frame(), table, check_exact=True)
        rows, totals = coded_reduction(coded)
        want = duration_rows(table, ROW_KEYS)
        pd.testing.assert_frame_equal(rows.keys, want.keys)
        assert (rows.group == want.group).all() and (rows.dur_ns == want.dur_ns).all()
        pd.testing.assert_frame_equal(totals, dispatch_totals(table))


def _same_read(path: Path, expect_slim: bool | None = True) -> None:
    same_read(read_kernel_trace_csv, path, expect_slim)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows, so that every file is read in many."""
    monkeypatch.setattr(csv_slim, "BLOCK_BYTES", 2048)


def _no_whole_file_read(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the slim read fell back to the whole-file read")
    monkeypatch.setattr(csv_kernel_trace, "_read_typed", refuse)


def test_fixtures_and_shared_files(tmp_path, small_blocks, monkeypatch):
    files = sorted(FIXTURES.rglob("*kernel_trace*.csv")) + sorted(SHARED.rglob("*kernel_trace*.csv"))
    assert len(files) >= 3
    for p in files:
        _same_read(p)


@pytest.mark.parametrize("seed", range(8))
def test_random_files_read_slim_equal_the_full_read(tmp_path, small_blocks, monkeypatch, seed):
    rng = random.Random(seed)
    for layout in LAYOUTS:
        labels = rng.choice(("agent", "gpu", "int"))
        d = tmp_path / layout / "node-a"
        d.mkdir(parents=True)
        p = write_trace(d / f"{seed + 100}_kernel_trace.csv", rng, layout, rng.randint(1, 120), labels=labels)
        if labels != "int" and rng.random() < 0.5:
            shutil.copy(AGENT_INFO, d / f"{seed + 100}_agent_info.csv")
        full = read_kernel_trace_csv(p)
        with monkeypatch.context() as m:  # a clean file never needs the whole-file read
            _no_whole_file_read(m)
            slim = read_kernel_trace_csv(p, columns=SLIM_COLUMNS)
        pd.testing.assert_frame_equal(slim.dispatches, full.dispatches[list(SLIM_COLUMNS)], check_exact=True)
        _same_read(p)


def _hostile(rng: random.Random) -> dict:
    """One or two bad cells (or rows) of the kinds the full read checks."""
    col, text = rng.choice([
        ("start_timestamp", ""), ("end_timestamp", ""), ("end_timestamp", "12"),
        ("start_timestamp", "1.5"), ("grid_size_x", "abc"), ("grid_size_x", "1e400"),
        ("dispatch_id", "16384.000000"), ("dispatch_id", "1.6384e+04"), ("queue_id", "-3"),
        ("queue_id", "0x1F"), ("correlation_id", "0x8000000000000000"),
        ("thread_id", "99999999999999999999"), ("kernel_name", '"a\x00b"'), ("kernel_name", ""),
        ("kernel_name", '""'), ("agent_id", '"Agent x"'), ("agent_id", '"Agent 99"'),
        ("workgroup_size_x", "nan"), ("workgroup_size_x", "inf"), ("kernel_id", "+7"),
        ("queue_id", " 2"), ("dispatch_id", ""), ("kernel_name", '"unclosed'),
    ])
    return {col: text}


@pytest.mark.parametrize("seed", range(24))
def test_hostile_files_fail_with_the_full_reads_line(tmp_path, small_blocks, seed):
    rng = random.Random(1000 + seed)
    layout = rng.choice(list(LAYOUTS))
    n = rng.randint(1, 60)
    bad = {}
    for _ in range(rng.randint(1, 2)):
        row = rng.randrange(n)
        cells = _hostile(rng)
        cols = {c.lower() for c in LAYOUTS[layout]}
        bad.setdefault(row, {}).update({c: v for c, v in cells.items() if c in cols})
    d = tmp_path / "node-a"
    d.mkdir()
    p = write_trace(d / "7_kernel_trace.csv", rng, layout, n, bad=bad)
    _same_read(p, expect_slim=None)


@pytest.mark.parametrize("text", [
    "",  # header only
    '"KERNEL_DISPATCH","Agent 3",1,1\n',  # a short row
    '"KERNEL_DISPATCH","Agent 3",1,1,834304,8,10,"k",8,1550151853343277,1550151853345675,0,0,8,0,16,256,1,1,1048576,1,1,9\n',
])
def test_header_only_and_rows_of_the_wrong_width(tmp_path, small_blocks, text):
    p = tmp_path / "7_kernel_trace.csv"
    p.write_text(",".join(f'"{c}"' for c in _KT_7X) + "\n" + text)
    _same_read(p, expect_slim=False)


def test_bad_cells_alone_are_the_full_reads_error(tmp_path, small_blocks):
    """Each hostile cell on its own, in a later block than the first, in the 7.x layout."""
    cases = [_hostile(random.Random(i)) for i in range(200)]
    for i, cells in enumerate({tuple(c.items())[0] for c in cases}):
        p = write_trace(tmp_path / f"{i}_kernel_trace.csv", random.Random(i), "7.x", 80,
                        bad={70: dict([cells])})
        _same_read(p, expect_slim=None)


def test_a_dropped_or_changed_row_is_seen(tmp_path, small_blocks, monkeypatch):
    """The comparison fails when the slim read loses a row or alters a duration."""
    p = write_trace(tmp_path / "7_kernel_trace.csv", random.Random(3), "7.x", 50)
    real_add = csv_slim.SlimRows.add

    def drop_last(self, cols):
        real_add(self, {k: v.slice(0, len(v) - 1) for k, v in cols.items()})

    monkeypatch.setattr(csv_slim.SlimRows, "add", drop_last)
    with pytest.raises(AssertionError):
        _same_read(p)


def test_slim_keeps_a_few_bytes_a_dispatch(tmp_path, monkeypatch):
    """Per row the slim read keeps a kernel code, a lane code, a start offset and a duration
    until the file's end (the full read: a table of some 35 columns)."""
    p = write_trace(tmp_path / "7_kernel_trace.csv", random.Random(2), "7.x", 3000)
    seen = []
    real = csv_slim.coded_dispatches

    def spy(rows, *a):
        kept = [x for parts in rows.parts.values() for x in parts] + rows.starts.parts
        seen.append(sum(x.nbytes for x in kept) / rows.n)
        return real(rows, *a)

    monkeypatch.setattr(csv_slim, "coded_dispatches", spy)
    read_kernel_trace_csv(p, columns=SLIM_COLUMNS)
    assert seen and seen[0] <= 12
