"""Hostile and malformed inputs for the rocprofv3 CSV readers, the rocpd reader and directory
discovery (issue 10).

Every rejection must be a :class:`GemmperfInputError` whose message is one line naming the
file (and, for cell errors, the row and the column), with no numpy ``RuntimeWarning`` on the
way; every case runs under ``SIGALRM`` so a hang fails instead of blocking the suite. A
representative subset goes through ``gemmperf analyze`` in a subprocess: exit status 2 and
exactly one stderr line. Accepted-but-unusual inputs (CRLF, BOM, quoted commas/newlines, extra
columns, negative timestamps, values near 2**63) must read with exact numbers.

Tests run as root here, where ``chmod 000`` does not stop reads: "unreadable" files and
directories are simulated by making ``os.scandir`` / ``open`` raise ``PermissionError`` for
that one path (the code under test sees exactly what an unprivileged user would).
"""

from __future__ import annotations

import builtins
import csv
import io
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from cli_batch import CliRun, run_cli_batch
from conftest import FIXTURES
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.discover import load
from pytest_gemmperf.traces.rocpd import read_rocpd_db
from pytest_gemmperf.traces.rocprof_csv import read_rocprof_csv
from test_rocpd import T0, UUID_A, _db

CASE_TIMEOUT_S = 60
REPO = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------- file builders

KT = {  # headers verbatim from rocprofv3-formats.md section 3.1
    "6.2": ("Kind", "Agent_Id", "Queue_Id", "Kernel_Id", "Kernel_Name", "Correlation_Id",
            "Start_Timestamp", "End_Timestamp", "Private_Segment_Size", "Group_Segment_Size",
            "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X",
            "Grid_Size_Y", "Grid_Size_Z"),
    "6.3": ("Kind", "Agent_Id", "Queue_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
            "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Private_Segment_Size",
            "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
            "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"),
    "7.x": ("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
            "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
            "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
            "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"),
}
KT["rocpd"] = ("Guid",) + KT["7.x"]
CC = ("Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id",
      "Grid_Size", "Kernel_Id", "Kernel_Name", "Workgroup_Size", "LDS_Block_Size", "Scratch_Size",
      "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Counter_Name", "Counter_Value",
      "Start_Timestamp", "End_Timestamp")
STATS = ("Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage", "MinNs", "MaxNs", "StdDev")
MEMCPY = ("Kind", "Direction", "Stream_Id", "Source_Agent_Id", "Destination_Agent_Id",
          "Correlation_Id", "Start_Timestamp", "End_Timestamp")
V1 = ("Index", "KernelName", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr",
      "lds", "scr", "arch_vgpr", "accum_vgpr", "sgpr", "wave_size", "sig", "obj", "DispatchNs",
      "BeginNs", "EndNs", "CompleteNs")
API = ("Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp",
       "End_Timestamp")
SCRATCH = ("Kind", "Operation", "Agent_Id", "Queue_Id", "Thread_Id", "Alloc_Flags",
           "Start_Timestamp", "End_Timestamp")
ALLOC = ("Kind", "Operation", "Agent_Id", "Allocation_Size", "Address", "Correlation_Id",
         "Start_Timestamp", "End_Timestamp")
AGENT_INFO = FIXTURES / "rocprof_csv" / "v7" / "mi350-n1" / "5358_agent_info.csv"

_STRINGS = {"kind", "kernel_name", "guid", "counter_name", "direction", "name", "kernelname",
            "sig", "obj", "agent_id", "source_agent_id", "destination_agent_id", "domain",
            "function", "operation", "address"}
_DEFAULTS = {"kind": "KERNEL_DISPATCH", "agent_id": "Agent 4", "kernel_name": "gemm_kernel",
             "guid": "g-1", "counter_name": "SQ_WAVES", "counter_value": "4.000000",
             "start_timestamp": "1000", "end_timestamp": "2000", "direction": "HOST_TO_DEVICE",
             "source_agent_id": "Agent 0", "destination_agent_id": "Agent 4", "name": "gemm_kernel",
             "calls": "2", "totaldurationns": "3000", "averagens": "1500.000000",
             "percentage": "100.000000", "minns": "1000", "maxns": "2000", "stddev": "707.106781",
             "kernelname": "gemm_kernel", "sig": "0x0", "obj": "0x7f", "beginns": "1000",
             "endns": "2000", "dispatchns": "900", "completens": "2100", "gpu-id": "2"}


def _cell(col: str, value: str) -> str:
    """rocprofv3's quoting: strings in double quotes (never escaped), numbers bare."""
    return f'"{value}"' if col.lower() in _STRINGS else value


def _row(cols, i: int = 0, **over) -> str:
    """One data row; ``over`` replaces cells by lower-case column name (raw text, unquoted)."""
    out = []
    for c in cols:
        lc = c.lower()
        if lc in over:
            out.append(over[lc])
            continue
        v = _DEFAULTS.get(lc, "1")
        if lc in ("dispatch_id", "correlation_id", "index"):
            v = str(i + 1)
        elif lc in ("start_timestamp", "beginns"):
            v = str(1000 + 3000 * i)
        elif lc in ("end_timestamp", "endns"):
            v = str(2000 + 3000 * i)
        out.append(_cell(c, v))
    return ",".join(out)


def _header(cols) -> str:
    return ",".join(f'"{c}"' for c in cols)


def _write(path: Path, lines, end: str = "\n", raw: bytes | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw if raw is not None else (end.join(lines) + end).encode("utf-8"))
    return path


def csv_case(name: str, cols, bad_row: str | None = None, *, header: str | None = None,
             rows: list[str] | None = None, raw: bytes | None = None):
    """A builder: a good first row, then ``bad_row`` (or explicit ``rows``)."""
    def build(tmp: Path) -> tuple[Path, Path]:
        body = rows if rows is not None else [_row(cols, 0)] + ([bad_row] if bad_row else [])
        p = _write(tmp / name, [header if header is not None else _header(cols)] + body, raw=raw)
        return p, p
    return build


def kt_bad(version: str, **over):
    cols = KT[version]
    return csv_case("1_kernel_trace.csv", cols, _row(cols, 1, **over))


def agent_info_bad(column: str, value: str):
    """The real 7.x agent_info fixture with one cell of its last row replaced (raw text)."""
    def build(tmp: Path):
        lines = [ln for ln in AGENT_INFO.read_text().splitlines() if ln.strip()]
        head = next(csv.reader([lines[0]]))
        cells = next(csv.reader([lines[-1]]))
        cells[head.index(column)] = value
        lines[-1] = ",".join(c if c == value or _is_int(c) else f'"{c}"' for c in cells)
        p = _write(tmp / "1_agent_info.csv", lines)
        return p, p
    return build


def _is_int(x: str) -> bool:
    return x.lstrip("-").isdigit()


def rocpd_case(sql: str, views: bool = True):
    def build(tmp: Path):
        p = _db(tmp, [(UUID_A, 1234, 3, T0, {"counters": True})], views=views)
        conn = sqlite3.connect(p)
        conn.execute(sql.format(s=f"_{UUID_A}"))
        conn.commit()
        conn.close()
        return p, p
    return build


def raw_db(content: bytes | None = None, truncate: int | None = None):
    def build(tmp: Path):
        p = tmp / "node-b" / "1234_results.db"
        if truncate is not None:
            good = _db(tmp, [(UUID_A, 1234, 3, T0, {})])
            data = good.read_bytes()[:truncate]
            good.write_bytes(data)
            return good, good
        return _write(p, [], raw=content), p
    return build


def empty_db(tmp: Path):
    p = tmp / "1_results.db"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE unrelated (x INTEGER)")
    conn.commit()
    conn.close()
    return p, p


K = 'UPDATE "rocpd_kernel_dispatch{s}" SET '

# --------------------------------------------------------------------------- directory builders

GOOD_KT = FIXTURES / "rocprof_csv" / "v7" / "mi350-n1" / "5358_kernel_trace.csv"


def _good_dir(tmp: Path) -> Path:
    d = tmp / "run"
    d.mkdir()
    (d / "good").mkdir()
    (d / "good" / "5358_kernel_trace.csv").write_bytes(GOOD_KT.read_bytes())
    return d


def fifo_direct(tmp: Path):
    p = tmp / "1_kernel_trace.csv"
    os.mkfifo(p)
    return p, p


def fifo_only_dir(tmp: Path):
    d = tmp / "run"
    d.mkdir()
    os.mkfifo(d / "1_kernel_trace.csv")
    return d, d / "1_kernel_trace.csv"


def loop_direct(tmp: Path):
    p = tmp / "1_kernel_trace.csv"
    os.symlink(p.name, p)
    return p, p


def loop_pair_only_dir(tmp: Path):
    d = tmp / "run"
    d.mkdir()
    os.symlink("b_results.db", d / "a_results.db")
    os.symlink("a_results.db", d / "b_results.db")
    return d, d / "a_results.db"


def socket_only_dir(tmp: Path):
    d = tmp / "run"
    d.mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / "7_results.db"))
    s.close()
    return d, d / "7_results.db"


def device_link_direct(tmp: Path):
    p = tmp / "1_kernel_trace.csv"
    os.symlink("/dev/zero", p)
    return p, p


def device_as_db(tmp: Path):
    p = tmp / "2_results.db"
    os.symlink("/dev/zero", p)
    return p, p


def point_json_fifo(tmp: Path):
    d = _good_dir(tmp)
    os.mkfifo(d / "good" / "point.json")
    return d, d / "good" / "point.json"


def dangling_only_dir(tmp: Path):
    d = tmp / "run"
    d.mkdir()
    os.symlink("missing_kernel_trace.csv", d / "1_kernel_trace.csv")
    return d, d / "1_kernel_trace.csv"


def tables_float_fraction(tmp: Path):
    import pandas as pd
    d = tmp / "point"
    d.mkdir()
    pd.DataFrame({"kernel": ["k", "k"], "start_ns": [1.0, 1.5], "end_ns": [3, 4]}).to_parquet(
        d / "dispatches.parquet")
    return d, d / "dispatches.parquet"


def tables_fifo_only(tmp: Path):
    d = tmp / "point"
    d.mkdir()
    os.mkfifo(d / "dispatches.parquet")
    return d, d / "dispatches.parquet"


def _denied(monkeypatch, target: Path, *, scandir: bool = False, opening: bool = False):
    """Make ``target`` unreadable as for an unprivileged user (root ignores chmod 000)."""
    target_s = os.fspath(target)
    if scandir:
        real_scandir = os.scandir

        def fake_scandir(path="."):
            if os.fspath(path) == target_s:
                raise PermissionError(13, "Permission denied", target_s)
            return real_scandir(path)
        monkeypatch.setattr(os, "scandir", fake_scandir)
    if opening:
        real_open = builtins.open

        def fake_open(file, *a, **kw):
            if isinstance(file, (str, os.PathLike)) and os.fspath(file) == target_s:
                raise PermissionError(13, "Permission denied", target_s)
            return real_open(file, *a, **kw)
        monkeypatch.setattr(builtins, "open", fake_open)


def unreadable_root_dir(tmp: Path, monkeypatch):
    d = _good_dir(tmp)
    _denied(monkeypatch, d, scandir=True)
    return d, d


def unreadable_only_subdir(tmp: Path, monkeypatch):
    d = tmp / "run"
    (d / "secret").mkdir(parents=True)
    _denied(monkeypatch, d / "secret", scandir=True)
    return d, d / "secret"


def unreadable_trace_file(tmp: Path, monkeypatch):
    d = _good_dir(tmp)
    f = d / "good" / "5358_kernel_trace.csv"
    _denied(monkeypatch, f, opening=True)
    return d, f


def unreadable_json_direct(tmp: Path, monkeypatch):
    p = _write(tmp / "trace.json", ['{"traceEvents": []}'])
    _denied(monkeypatch, p, opening=True)
    return p, p


# ------------------------------------------------------------------------------------ the corpus

BIG = str(2 ** 63)
# (id, builder, reader, fragment the message must contain)
REJECT = [
    # kernel_trace 7.x: every numeric failure class
    ("kt7-start-2^63", kt_bad("7.x", start_timestamp=BIG), "load", "Start_Timestamp"),
    ("kt7-end-2^64", kt_bad("7.x", end_timestamp=str(2 ** 64)), "load", "outside the signed 64-bit"),
    ("kt7-start-below-int64", kt_bad("7.x", start_timestamp=str(-2 ** 63 - 1)), "load", "64-bit"),
    ("kt7-start-inf", kt_bad("7.x", start_timestamp="inf"), "load", "not a finite number"),
    ("kt7-end-minus-inf", kt_bad("7.x", end_timestamp="-inf"), "load", "not a finite number"),
    ("kt7-end-nan", kt_bad("7.x", end_timestamp="nan"), "load", "End_Timestamp"),
    ("kt7-end-NaN-in-lds", kt_bad("7.x", lds_block_size="NaN"), "load", "LDS_Block_Size"),
    ("kt7-start-1e400", kt_bad("7.x", start_timestamp="1e400"), "load", "Start_Timestamp"),
    ("kt7-lds-fraction", kt_bad("7.x", lds_block_size="12.5"), "load", "not an integer"),
    ("kt7-grid-sci-fraction", kt_bad("7.x", grid_size_x="1.5e0"), "load", "Grid_Size_X"),
    ("kt7-start-text", kt_bad("7.x", start_timestamp="abc"), "load", "not a number"),
    ("kt7-queue-NULL-text", kt_bad("7.x", queue_id="NULL"), "load", "Queue_Id"),
    ("kt7-dispatch-N/A", kt_bad("7.x", dispatch_id="N/A"), "load", "Dispatch_Id"),
    ("kt7-start-hex-2^63", kt_bad("7.x", start_timestamp="0x8000000000000000"), "load",
     "outside the signed 64-bit"),
    ("kt7-end-hex-all-ones", kt_bad("7.x", end_timestamp="0xFFFFFFFFFFFFFFFF"), "load",
     "End_Timestamp"),
    ("kt7-start-hex-garbage", kt_bad("7.x", start_timestamp="0xZZ"), "load", "not a number"),
    ("kt7-start-unicode-digits", kt_bad("7.x", start_timestamp="\u0661\u0662\u0663"), "load",
     "not a number"),
    ("kt7-start-1e19-sci", kt_bad("7.x", start_timestamp="1e19"), "load", "64-bit"),
    ("kt7-start-2^63-zeros", kt_bad("7.x", start_timestamp=BIG + ".000000"), "load", "64-bit"),
    ("kt7-nul-in-name", kt_bad("7.x", kernel_name='"gemm\x00_kernel"'), "load", "NUL"),
    ("kt7-negative-duration", kt_bad("7.x", start_timestamp="9000", end_timestamp="8000"), "load",
     "end before they start"),
    ("kt7-empty-start", kt_bad("7.x", start_timestamp=""), "load", "is empty"),
    ("kt7-agent-label-text", kt_bad("7.x", agent_id='"Agent x"'), "load", "Agent_Id"),
    ("kt7-missing-column", csv_case("1_kernel_trace.csv", KT["7.x"][:-1]), "load",
     "lacks required column(s) Grid_Size_Z"),
    ("kt7-duplicate-column", csv_case("1_kernel_trace.csv", KT["7.x"] + ("Kernel_Name",)), "load",
     "twice"),
    ("kt7-short-row", csv_case("1_kernel_trace.csv", KT["7.x"], _row(KT["7.x"], 1).rsplit(",", 1)[0]),
     "load", "21 fields"),
    ("kt7-long-row", csv_case("1_kernel_trace.csv", KT["7.x"], _row(KT["7.x"], 1) + ",7"), "load",
     "23 fields"),
    ("kt7-header-only", csv_case("1_kernel_trace.csv", KT["7.x"], rows=[]), "csv", "header only"),
    ("kt7-empty-file", csv_case("1_kernel_trace.csv", KT["7.x"], raw=b""), "load", "empty file"),
    ("kt7-binary-garbage", csv_case("1_kernel_trace.csv", KT["7.x"], raw=b"\x89PNG\r\n\x1a\n\x00\x00"),
     "load", "CSV header"),
    ("kt7-marker-mid-file", csv_case("1_kernel_trace.csv", KT["7.x"],
                                     rows=[_row(KT["7.x"], 0), "...", _row(KT["7.x"], 1)]),
     "load", "fields"),
    ("kt7-invalid-utf8-name", csv_case("1_kernel_trace.csv", KT["7.x"], raw=(
        _header(KT["7.x"]) + "\n" + _row(KT["7.x"], 0, kernel_name='"g\udcff"') + "\n"
    ).encode("utf-8", "surrogateescape")), "load", "UTF8"),
    ("kt7-unterminated-quote", csv_case("1_kernel_trace.csv", KT["7.x"],
                                        rows=[_row(KT["7.x"], 0, kernel_name='"gemm')]), "load", ""),
    ("kt7-nul-in-header", csv_case("1_kernel_trace.csv", KT["7.x"], header=_header(KT["7.x"]) + ',"X\x00"'),
     "load", "NUL"),
    # other kernel_trace layouts
    ("kt62-start-inf", kt_bad("6.2", start_timestamp="inf"), "load", "Start_Timestamp"),
    ("kt62-end-2^63", kt_bad("6.2", end_timestamp=BIG), "load", "End_Timestamp"),
    ("kt63-dispatch-fraction", kt_bad("6.3", dispatch_id="2.5"), "load", "Dispatch_Id"),
    ("kt63-nul-name", kt_bad("6.3", kernel_name='"a\x00"'), "load", "NUL"),
    ("kt63-damaged-header", csv_case("1_kernel_trace.csv",
                                     tuple(c for c in KT["6.3"] if c != "Dispatch_Id")), "load",
     "Dispatch_Id"),
    ("kt-rocpd-convert-2^63", kt_bad("rocpd", start_timestamp=BIG), "load", "Start_Timestamp"),
    # counter_collection
    ("cc-value-inf", csv_case("1_counter_collection.csv", CC, _row(CC, 1, counter_value="inf")),
     "csv", "Counter_Value"),
    ("cc-value-nan", csv_case("1_counter_collection.csv", CC, _row(CC, 1, counter_value="nan")),
     "csv", "Counter_Value"),
    ("cc-value-1e400", csv_case("1_counter_collection.csv", CC, _row(CC, 1, counter_value="1e400")),
     "csv", "Counter_Value"),
    ("cc-value-text", csv_case("1_counter_collection.csv", CC, _row(CC, 1, counter_value="many")),
     "csv", "Counter_Value"),
    ("cc-dispatch-2^63", csv_case("1_counter_collection.csv", CC, _row(CC, 1, dispatch_id=BIG)),
     "csv", "Dispatch_Id"),
    ("cc-nul-counter-name", csv_case("1_counter_collection.csv", CC,
                                     _row(CC, 1, counter_name='"SQ\x00WAVES"')), "csv", "NUL"),
    # agent_info
    ("agent-cu-count-text", agent_info_bad("Cu_Count", "lots"), "csv", "Cu_Count"),
    ("agent-hive-negative", agent_info_bad("Hive_Id", "-1"), "csv", "Hive_Id"),
    ("agent-hive-2^64", agent_info_bad("Hive_Id", str(2 ** 64)), "csv", "unsigned 64-bit"),
    ("agent-node-fraction", agent_info_bad("Node_Id", "1.5"), "csv", "Node_Id"),
    # stats
    ("stats-calls-inf", csv_case("1_kernel_stats.csv", STATS, _row(STATS, 1, calls="inf")), "csv",
     "Calls"),
    ("stats-total-2^63", csv_case("1_kernel_stats.csv", STATS, _row(STATS, 1, totaldurationns=BIG)),
     "csv", "TotalDurationNs"),
    ("stats-average-nan", csv_case("1_kernel_stats.csv", STATS, _row(STATS, 1, averagens="nan")),
     "csv", "AverageNs"),
    ("stats-min-fraction", csv_case("1_kernel_stats.csv", STATS, _row(STATS, 1, minns="1.5")),
     "csv", "MinNs"),
    ("stats-nul-name", csv_case("1_kernel_stats.csv", STATS, _row(STATS, 1, name='"k\x00"')), "csv",
     "NUL"),
    # memory_copy
    ("memcpy-start-1e400", csv_case("1_memory_copy_trace.csv", MEMCPY,
                                    _row(MEMCPY, 1, start_timestamp="1e400")), "csv", "Start_Timestamp"),
    ("memcpy-negative", csv_case("1_memory_copy_trace.csv", MEMCPY,
                                 _row(MEMCPY, 1, start_timestamp="9000", end_timestamp="10")), "csv",
     "end before they start"),
    ("memcpy-end-text", csv_case("1_memory_copy_trace.csv", MEMCPY,
                                 _row(MEMCPY, 1, end_timestamp="later")), "csv", "End_Timestamp"),
    # legacy rocprof v1 results.csv
    ("v1-begin-2^63", csv_case("results.csv", V1, _row(V1, 1, beginns=BIG)), "csv", "BeginNs"),
    ("v1-end-inf", csv_case("results.csv", V1, _row(V1, 1, endns="inf")), "csv", "EndNs"),
    # CSVs kept as raw tables
    ("api-start-inf", csv_case("1_hip_api_trace.csv", API, _row(API, 1, start_timestamp="inf")),
     "csv", "Start_Timestamp"),
    ("scratch-end-2^63", csv_case("1_scratch_memory_trace.csv", SCRATCH,
                                  _row(SCRATCH, 1, end_timestamp=BIG)), "csv", "End_Timestamp"),
    ("alloc-size-fraction", csv_case("1_memory_allocation_trace.csv", ALLOC,
                                     _row(ALLOC, 1, allocation_size="4096.5")), "csv",
     "Allocation_Size"),
    # rocpd SQLite
    ("rocpd-real-fraction", rocpd_case(K + "start = start + 0.5 WHERE id = 2"), "load",
     "is not an integer"),
    ("rocpd-real-fraction-tables", rocpd_case(K + "start = start + 0.5 WHERE id = 2", views=False),
     "load", "REAL"),
    ("rocpd-text-end", rocpd_case(K + "\"end\" = 'abc' WHERE id = 2"), "load", "TEXT"),
    ("rocpd-blob-queue", rocpd_case(K + "queue_id = x'0102' WHERE id = 2"), "load", "BLOB"),
    ("rocpd-inf-start", rocpd_case(K + "start = 9e999 WHERE id = 2"), "load", "64-bit"),
    ("rocpd-1e19-real", rocpd_case(K + "start = 1e19 WHERE id = 2"), "load", "64-bit"),
    ("rocpd-null-start", rocpd_case(K + "start = NULL WHERE id = 2"), "load", "missing timestamp"),
    ("rocpd-negative-duration", rocpd_case(K + "\"end\" = start - 1 WHERE id = 2"), "load",
     "end before they start"),
    ("rocpd-pmc-text", rocpd_case('UPDATE "rocpd_pmc_event{s}" SET value = \'x\' WHERE id = 2'),
     "load", "TEXT"),
    ("rocpd-pmc-inf", rocpd_case('UPDATE "rocpd_pmc_event{s}" SET value = 9e999 WHERE id = 2'),
     "load", "finite"),
    ("rocpd-process-init-text", rocpd_case('UPDATE "rocpd_info_process{s}" SET init = \'soon\''),
     "load", "init"),
    ("rocpd-symbol-sgpr-fraction",
     rocpd_case('UPDATE "rocpd_info_kernel_symbol{s}" SET sgpr_count = 1.25 WHERE id = 3'),
     "load", "sgpr_count"),
    ("rocpd-not-sqlite", raw_db(b"this is not a database\n"), "load", "not an SQLite database"),
    ("rocpd-truncated", raw_db(truncate=2048), "load", ""),
    ("rocpd-no-dispatch-table", empty_db, "load", "not a rocpd database"),
    # directory layouts and special files
    ("dir-fifo-direct", fifo_direct, "load", "FIFO"),
    ("dir-fifo-only", fifo_only_dir, "load", "FIFO"),
    ("dir-symlink-loop-direct", loop_direct, "load", "symlink loop"),
    ("dir-symlink-loop-pair-only", loop_pair_only_dir, "load", "symlink loop"),
    ("dir-socket-only", socket_only_dir, "load", "socket"),
    ("dir-device-link-direct", device_link_direct, "load", "character device"),
    ("dir-device-as-rocpd", device_as_db, "rocpd", "character device"),
    ("dir-point-json-fifo", point_json_fifo, "load", "point.json is not a regular file"),
    ("dir-dangling-link-only", dangling_only_dir, "load", "No such file"),
    ("dir-unlistable-root", unreadable_root_dir, "load", "Permission denied"),
    ("dir-unlistable-only-subdir", unreadable_only_subdir, "load", "Permission denied"),
    ("dir-unreadable-trace-file", unreadable_trace_file, "load", "Permission denied"),
    ("dir-unreadable-json-direct", unreadable_json_direct, "load", "Permission denied"),
    ("tables-float-fraction", tables_float_fraction, "load", "start_ns 1.5"),
    ("tables-fifo-only", tables_fifo_only, "load", "FIFO"),
]

READERS = {"load": load, "csv": read_rocprof_csv, "rocpd": read_rocpd_db}


@pytest.fixture(autouse=True)
def case_timeout():
    """Fail (instead of hanging the suite) when a case blocks, e.g. on opening a FIFO."""
    def expire(signum, frame):
        raise TimeoutError(f"case exceeded {CASE_TIMEOUT_S} s (hang)")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(CASE_TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _build(builder, tmp_path, monkeypatch):
    import inspect
    if "monkeypatch" in inspect.signature(builder).parameters:
        return builder(tmp_path, monkeypatch)
    return builder(tmp_path)


def test_corpus_is_large_and_distinct():
    ids = [c[0] for c in REJECT]
    assert len(ids) == len(set(ids))
    assert len(ids) + len(ACCEPT) >= 55


@pytest.mark.parametrize("case_id, builder, reader, fragment", REJECT, ids=[c[0] for c in REJECT])
def test_rejected_with_one_line_naming_the_file(case_id, builder, reader, fragment, tmp_path,
                                                monkeypatch):
    given, named = _build(builder, tmp_path, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(GemmperfInputError) as ei:
            READERS[reader](given)
    msg = str(ei.value)
    assert "\n" not in msg and "\r" not in msg
    assert os.fspath(named) in msg, msg
    assert fragment in msg, msg
    noisy = [w for w in caught if issubclass(w.category, (RuntimeWarning, UserWarning))]
    assert not noisy, [str(w.message) for w in noisy]


def test_cell_errors_name_row_and_column(tmp_path):
    p, _ = kt_bad("7.x", start_timestamp=BIG)(tmp_path)
    with pytest.raises(GemmperfInputError) as ei:
        load(p)
    assert str(ei.value) == (f"{p}:3 (row 2): column 'Start_Timestamp': '{BIG}' is outside the "
                             "signed 64-bit integer range")


# ----------------------------------------------------------------- CLI: exit 2, one stderr line

CLI_SUBSET = ["kt7-start-2^63", "kt7-start-inf", "kt7-nul-in-name", "kt7-missing-column",
              "rocpd-text-end", "rocpd-real-fraction", "dir-fifo-only", "dir-symlink-loop-direct",
              "dir-fifo-direct"]


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict[str, tuple[Path, Path, CliRun]]:
    """``gemmperf analyze`` of each case of CLI_SUBSET in a real process (one for them all)."""
    tmp = tmp_path_factory.mktemp("cli")
    built, commands = {}, {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for case_id in CLI_SUBSET:
            builder = next(c[1] for c in REJECT if c[0] == case_id)
            case_dir = tmp / case_id.replace("^", "")
            case_dir.mkdir()
            given, named = _build(builder, case_dir, monkeypatch)
            built[case_id] = (given, named, case_dir)
            commands[case_id] = ["analyze", os.fspath(given), "--out", os.fspath(case_dir / "out"), "--no-report"]
    runs = run_cli_batch(commands, tmp / "stderr", cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "always"},
                         timeout_s=50 * len(commands))
    return {c: (built[c][1], built[c][2], runs[c]) for c in CLI_SUBSET}


@pytest.mark.slow  # a real gemmperf process
@pytest.mark.parametrize("case_id", CLI_SUBSET)
def test_cli_analyze_exits_2_with_one_stderr_line(cli_runs, case_id):
    named, case_dir, r = cli_runs[case_id]
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and os.fspath(named) in lines[0]
    assert not (case_dir / "out" / "kernels.csv").exists()


# --------------------------------------------------------------------- skipped parts: a note each

def _note_case_fifo(d: Path):
    os.mkfifo(d / "good" / "9_kernel_trace.csv")
    return d / "good" / "9_kernel_trace.csv", "FIFO"


def _note_case_loop(d: Path):
    os.symlink("self_kernel_trace.csv", d / "good" / "self_kernel_trace.csv")
    return d / "good" / "self_kernel_trace.csv", "symlink loop"


def _note_case_dir_loop(d: Path):
    os.symlink("..", d / "good" / "up")
    return d / "good" / "up", "not read again"


def _note_case_dangling(d: Path):
    os.symlink("gone_results.db", d / "good" / "1_results.db")
    return d / "good" / "1_results.db", "No such file"


def _note_case_socket(d: Path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / "good" / "8_results.db"))
    s.close()
    return d / "good" / "8_results.db", "socket"


def _note_case_device(d: Path):
    os.symlink("/dev/null", d / "good" / "3_kernel_trace.csv")
    return d / "good" / "3_kernel_trace.csv", "character device"


NOTE_CASES = [_note_case_fifo, _note_case_loop, _note_case_dir_loop, _note_case_dangling,
              _note_case_socket, _note_case_device]


@pytest.mark.parametrize("make", NOTE_CASES, ids=[f.__name__[11:] for f in NOTE_CASES])
def test_skipped_entries_beside_good_data_get_a_note(make, tmp_path):
    d = _good_dir(tmp_path)
    skipped, word = make(d)
    t = load(d)
    assert len(t.dispatches) == 13  # the fixture's dispatches, read once
    notes = [n for n in t.meta["notes"] if os.fspath(skipped) in n]
    assert len(notes) == 1 and word in notes[0], t.meta["notes"]


def test_unlistable_subdirectory_is_a_note_not_silence(tmp_path, monkeypatch):
    d = _good_dir(tmp_path)
    (d / "secret").mkdir()
    _denied(monkeypatch, d / "secret", scandir=True)
    t = load(d)
    assert len(t.dispatches) == 13
    assert [n for n in t.meta["notes"] if n.startswith(f"{d / 'secret'}: directory skipped")]


@pytest.mark.slow  # a real gemmperf process
def test_cli_prints_the_skip_notes(tmp_path):
    """A process file that cannot be read is missing from every total: one line naming it and
    exit 2; with --allow-partial the rest is analysed and the skip is a note."""
    d = _good_dir(tmp_path)
    os.mkfifo(d / "good" / "9_kernel_trace.csv")

    def analyze(*extra):
        return subprocess.run([sys.executable, "-m", "pytest_gemmperf.cli", "analyze", os.fspath(d),
                               "--out", os.fspath(tmp_path / "out"), "--no-report", *extra],
                              capture_output=True, text=True, timeout=50, cwd=REPO)

    refused = analyze()
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "9_kernel_trace.csv" in refused.stderr and "FIFO" in refused.stderr and "--allow-partial" in refused.stderr
    proc = analyze("--allow-partial")
    assert proc.returncode == 0, proc.stderr
    assert [ln for ln in proc.stderr.splitlines()
            if ln.startswith("note: ") and "9_kernel_trace.csv" in ln and "FIFO" in ln]


# ------------------------------------------------------------- accepted-but-unusual, exact numbers

NEAR = 2 ** 63 - 1


def _exact(path: Path, starts, ends, names=None, reader=load):
    d = reader(path).dispatches
    assert d["start_ns"].tolist() == starts
    assert d["end_ns"].tolist() == ends
    assert d["dur_ns"].tolist() == [e - s for s, e in zip(starts, ends)]
    if names is not None:
        assert d["kernel"].astype(str).tolist() == names
    return d


def acc_crlf_bom_quotes(tmp: Path):
    cols = KT["7.x"]
    lines = [_header(cols), _row(cols, 0, kernel_name='"void f<a, b>(int, float)"'),
             _row(cols, 1, kernel_name='"two\nlines, and a comma"')]
    p = _write(tmp / "1_kernel_trace.csv", [], raw=("\ufeff" + "\r\n".join(lines) + "\r\n").encode())
    _exact(p, [1000, 4000], [2000, 5000], ["void f<a, b>(int, float)", "two\nlines, and a comma"])


def acc_near_int64_max(tmp: Path):
    cols = KT["7.x"]
    starts = [NEAR - 10_007, NEAR - 5_003, 2 ** 53 + 1]
    ends = [NEAR - 3, NEAR, 2 ** 53 + 2]
    rows = [_row(cols, i, start_timestamp=str(s), end_timestamp=str(e))
            for i, (s, e) in enumerate(zip(starts, ends))]
    p = _write(tmp / "1_kernel_trace.csv", [_header(cols)] + rows)
    _exact(p, starts, ends)


def acc_near_int64_max_decimal_forms(tmp: Path):
    cols = KT["6.3"]
    rows = [_row(cols, 0, start_timestamp=f"{NEAR - 999}.000000", end_timestamp=f"{NEAR}.0"),
            _row(cols, 1, start_timestamp="1.6384e+04", end_timestamp="16385")]
    p = _write(tmp / "1_kernel_trace.csv", [_header(cols)] + rows)
    _exact(p, [NEAR - 999, 16384], [NEAR, 16385])


def acc_negative_timestamps(tmp: Path):
    cols = KT["6.2"]
    rows = [_row(cols, 0, start_timestamp="-5000", end_timestamp="-4000"),
            _row(cols, 1, start_timestamp="-1", end_timestamp="0")]
    p = _write(tmp / "1_kernel_trace.csv", [_header(cols)] + rows)
    _exact(p, [-5000, -1], [-4000, 0])


def acc_extra_column_kernel_trace(tmp: Path):
    cols = KT["7.x"] + ("Future_Column",)
    rows = [_row(cols, 0, future_column='"x"'), _row(cols, 1, future_column="2.5")]
    p = _write(tmp / "1_kernel_trace.csv", [_header(cols)] + rows)
    t = load(p)
    assert t.dispatches["start_ns"].tolist() == [1000, 4000]
    assert any("Future_Column" in n and os.fspath(p) in n for n in t.meta["notes"])


def acc_extra_column_in_the_middle(tmp: Path):
    cols = KT["7.x"][:8] + ("Another",) + KT["7.x"][8:]
    rows = [_row(cols, 0, another="inf"), _row(cols, 1, another="")]
    p = _write(tmp / "1_kernel_trace.csv", [_header(cols)] + rows)
    _exact(p, [1000, 4000], [2000, 5000], ["gemm_kernel", "gemm_kernel"])


def acc_extra_columns_other_kinds(tmp: Path):
    cc = _write(tmp / "a" / "1_counter_collection.csv",
                [_header(CC + ("New",)), _row(CC + ("New",), 0, new="7")])
    t = read_rocprof_csv(cc)
    assert t.counters["value"].tolist() == [4.0] and "New" in " ".join(t.meta["notes"])
    st = _write(tmp / "b" / "1_kernel_stats.csv", [_header(STATS + ("P99",)), _row(STATS + ("P99",), 0)])
    t = read_rocprof_csv(st)
    assert t.meta["kernel_stats"]["TotalDurationNs"].tolist() == [3000] and t.meta["notes"]
    mc = _write(tmp / "c" / "1_memory_copy_trace.csv",
                [_header(MEMCPY + ("Bytes",)), _row(MEMCPY + ("Bytes",), 0, bytes="4096")])
    t = read_rocprof_csv(mc)
    assert t.meta["memory_copy"]["dur_ns"].tolist() == [1000] and t.meta["notes"]


def acc_quoted_newline_across_block_boundary(tmp: Path):
    """A quoted newline placed as the last newline of pyarrow's first 1 MiB block, so the fast
    newline-splitting parse cuts a record in two and the reader must re-read quote-aware."""
    import pyarrow.csv as pacsv

    cols = KT["7.x"]
    block = 1 << 20  # pyarrow's default ReadOptions.block_size
    text = _header(cols) + "\n"
    names: list[str] = []
    i = 0
    while True:
        line = _row(cols, i, kernel_name=f'"kernel_{i}"') + "\n"
        if len(text) + len(line) > block - 400:
            break
        text += line
        names.append(f"kernel_{i}")
        i += 1
    pre, post = _row(cols, i, kernel_name='"@@"').split("@@")
    head = len(text) + len(pre)
    name = "a" * (block - 8 - head) + "\n" + "b" * 300  # its newline sits just below 1 MiB
    text += pre + name + post + "\n"
    names.append(name)
    for j in range(i + 1, i + 50):
        text += _row(cols, j, kernel_name=f'"kernel_{j}"') + "\n"
        names.append(f"kernel_{j}")
    p = _write(tmp / "1_kernel_trace.csv", [], raw=text.encode())
    with pytest.raises(Exception):  # the case really straddles a block boundary
        pacsv.read_csv(p, parse_options=pacsv.ParseOptions(newlines_in_values=False))
    n = len(names)
    d = _exact(p, [1000 + 3000 * k for k in range(n)], [2000 + 3000 * k for k in range(n)])
    assert d["kernel"].astype(str).tolist() == names


def acc_rocpd_integral_real_and_big(tmp: Path):
    p = _db(tmp, [(UUID_A, 1234, 3, T0, {})], views=False)
    conn = sqlite3.connect(p)
    conn.execute(f'UPDATE "rocpd_kernel_dispatch_{UUID_A}" SET grid_size_x = 4096.0 WHERE id = 2')
    conn.execute(f'UPDATE "rocpd_kernel_dispatch_{UUID_A}" SET start = {NEAR - 77}, '
                 f'"end" = {NEAR} WHERE id = 4')
    conn.execute(f'UPDATE "rocpd_kernel_dispatch_{UUID_A}" SET stream_id = NULL WHERE id = 1')
    conn.commit()
    conn.close()
    d = read_rocpd_db(p).dispatches.set_index("dispatch_id")
    assert d.loc[4, "start_ns"] == NEAR - 77 and d.loc[4, "end_ns"] == NEAR and d.loc[4, "dur_ns"] == 77
    assert d.loc[2, "grid_x"] == 4096


def acc_legacy_v1_exact(tmp: Path):
    rows = [_row(V1, 0, beginns=str(NEAR - 10), endns=str(NEAR))]
    p = _write(tmp / "results.csv", [_header(V1)] + rows)
    _exact(p, [NEAR - 10], [NEAR], reader=read_rocprof_csv)


def acc_hex_literals_read_the_same_on_both_paths(tmp: Path):
    """pyarrow's fast path reads ``0x10`` as 16; the exact text path (taken here because of
    the scientific-notation cell) must agree, and a negative start takes the text path too."""
    cols = KT["7.x"]
    fast = _write(tmp / "a" / "1_kernel_trace.csv",
                  [_header(cols), _row(cols, 0, lds_block_size="0x10")])
    slow = _write(tmp / "b" / "1_kernel_trace.csv",
                  [_header(cols), _row(cols, 0, lds_block_size="0x10", grid_size_x="1.024e3"),
                   _row(cols, 1, start_timestamp="-0x10", end_timestamp="0X10")])
    assert load(fast).dispatches["lds_bytes"].tolist() == [16]
    d = load(slow).dispatches
    assert d["lds_bytes"].tolist() == [16, 1] and d["grid_x"].tolist() == [1024, 1]
    assert d["start_ns"].tolist() == [1000, -16] and d["dur_ns"].tolist() == [1000, 32]


def acc_one_megabyte_kernel_name(tmp: Path):
    """Issue 10: a 98 KB CSV with one long name took 11 s (backtracking category regexes)."""
    import time
    cols = KT["7.x"]
    name = "ck_" * 333_333 + "ampere_" * 10
    p = _write(tmp / "1_kernel_trace.csv", [_header(cols), _row(cols, 0, kernel_name=f'"{name}"')])
    t0 = time.perf_counter()
    d = _exact(p, [1000], [2000], [name])
    assert time.perf_counter() - t0 < 5.0  # parse + names + categories; the regexes alone < 1 s
    assert d["category"].astype(str).tolist() == ["other"]


ACCEPT = [acc_one_megabyte_kernel_name, acc_hex_literals_read_the_same_on_both_paths, acc_crlf_bom_quotes, acc_near_int64_max, acc_near_int64_max_decimal_forms,
          acc_negative_timestamps, acc_extra_column_kernel_trace, acc_extra_column_in_the_middle,
          acc_extra_columns_other_kinds, acc_quoted_newline_across_block_boundary,
          acc_rocpd_integral_real_and_big, acc_legacy_v1_exact]


@pytest.mark.parametrize("case", ACCEPT, ids=[f.__name__[4:] for f in ACCEPT])
def test_accepted_unusual_inputs_read_exactly(case, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        case(tmp_path)
