"""Hostile inputs the trace readers must refuse in one line, and CPU-only totals that stay inside
their wall window.

* a rocpd ``kernels`` view that never ends (recursive, with or without rows) stops within seconds
  with one line naming the file, from the reader and from ``gemmperf analyze`` (exit 2);
* a key written twice in any JSON object (a Kineto event's ``dur``/``name``/``ts``, inside
  ``args``, a rocprofv3 ``end_timestamp``/``kernel_id``, ``point.json``), escaped or not, is an
  error naming the key, the file and the record, while strings that merely look like keys are
  accepted;
* a Kineto trace whose device activity is only profiler ranges or categories the reader does not
  treat as kernels is an error, not a CPU analysis; a genuine CPU-only trace counts only the
  outermost operators of each thread, so nested operators are not summed twice.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from pytest_gemmperf.cli import main as gemmperf_main
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.fileio import read_json_object
from pytest_gemmperf.traces.rocpd import read_rocpd_db
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json
from pytest_gemmperf.traces.discover import load
from pytest_gemmperf.traces.torch_trace import read_torch_cpu_trace, read_torch_trace

sys.path.insert(0, str(Path(__file__).parent))
from test_rocpd import T0, UUID_A, _db  # noqa: E402  (the documented rocpd schema builder)

FIX = Path(__file__).parent / "fixtures"
KINETO = json.loads((FIX / "torch" / "rocm_sdk_rank3.pt.trace.json").read_text())
ROCPROF = json.loads((FIX / "rocprof_json" / "v7_two_processes_counters_results.json").read_text())
MARK = "@@REPEAT@@"
ENV_BUDGET_S = "GEMMPERF_ROCPD_BUDGET_S"
ENV_MAX_STEPS = "GEMMPERF_ROCPD_MAX_STEPS"


def _one_line(exc: GemmperfInputError, path: Path) -> str:
    text = str(exc)
    assert "\n" not in text and str(path) in text, text
    return text


# ----------------------------------------------------------------------------- rocpd budget

_ENDLESS = {
    # rows without end: the example of a hostile file
    "recursive rows": "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT {cols} FROM r",
    # no row ever comes out: only the step/time budget can stop it
    "recursive sorted": "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                        "SELECT {cols} FROM r ORDER BY x DESC",
    "recursive aggregate": "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                           "SELECT {cols} FROM (SELECT max(x) AS x FROM r)",
    # finite, but far more rows than the file holds (a cross join of the view's own source)
    "row multiplier": "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r "
                      "WHERE x < 100000000) SELECT {cols} FROM r",
}
_VIEW_COLS = ", ".join(f"x AS {c}" for c in (
    "guid", "pid", "tid", "agent_abs_index", "kernel_id", "dispatch_id", "queue_id", "stream_id",
    "start", '"end"', "grid_x", "grid_y", "grid_z", "workgroup_x", "workgroup_y", "workgroup_z",
    "lds_size", "scratch_size", "stack_id"))


def _endless_db(tmp_path: Path, body: str, tables: bool) -> Path:
    if tables:
        p = _db(tmp_path, [(UUID_A, 1234, 3, T0, {})], views=False)
    else:
        p = tmp_path / "node-b" / "1234_results.db"
        p.parent.mkdir(parents=True)
    conn = sqlite3.connect(p)
    conn.execute(f"CREATE VIEW kernels AS {body.format(cols=_VIEW_COLS)}")
    conn.commit()
    conn.close()
    return p


@pytest.mark.parametrize("tables", [True, False], ids=["with-tables", "view-only"])
@pytest.mark.parametrize("kind", list(_ENDLESS))
def test_rocpd_endless_view_is_one_line_within_seconds(tmp_path, monkeypatch, kind, tables):
    monkeypatch.delenv(ENV_BUDGET_S, raising=False)
    monkeypatch.delenv(ENV_MAX_STEPS, raising=False)
    p = _endless_db(tmp_path, _ENDLESS[kind], tables)
    t0 = time.monotonic()
    with pytest.raises(GemmperfInputError) as ei:
        read_rocpd_db(p)
    assert time.monotonic() - t0 < 10
    text = _one_line(ei.value, p)
    assert "kernels view" in text, text


def test_rocpd_budget_env_var_bounds_the_time(tmp_path, monkeypatch):
    p = _endless_db(tmp_path, _ENDLESS["recursive sorted"], tables=True)
    monkeypatch.setenv(ENV_MAX_STEPS, str(10 ** 15))
    monkeypatch.setenv(ENV_BUDGET_S, "0.2")
    t0 = time.monotonic()
    with pytest.raises(GemmperfInputError, match=ENV_BUDGET_S):
        read_rocpd_db(p)
    assert time.monotonic() - t0 < 5
    monkeypatch.setenv(ENV_BUDGET_S, "soon")
    with pytest.raises(GemmperfInputError, match=ENV_BUDGET_S):
        read_rocpd_db(p)


def test_rocpd_endless_view_cli_exit_2(tmp_path, capsys):
    p = _endless_db(tmp_path, _ENDLESS["recursive rows"], tables=True)
    rc = gemmperf_main(["analyze", str(p), "--out", str(tmp_path / "out"), "--no-report"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and str(p) in err and "Traceback" not in err, err


def test_rocpd_real_views_still_read(tmp_path):
    t = read_rocpd_db(_db(tmp_path, [(UUID_A, 1234, 3, T0, {"counters": True})]))
    assert t.meta["read_via"] == "kernels view" and len(t.dispatches) == 4


# ----------------------------------------------------------------------------- repeated keys

def _with_repeat(doc, target, key: str, raw_value: str, escaped_key: str | None = None) -> bytes:
    """``doc`` as JSON with ``"key": raw_value`` written a second time into object ``target``
    (found by identity), optionally spelled with escapes."""
    target[MARK] = 0
    text = json.dumps(doc)
    del target[MARK]
    spelled = escaped_key if escaped_key is not None else json.dumps(key)
    return text.replace(f'"{MARK}": 0', f"{spelled}: {raw_value}").encode()


def _kineto_event(cat: str) -> dict:
    return next(e for e in KINETO["traceEvents"] if e.get("cat") == cat)


def _kineto_cases():
    kernel = lambda d: next(e for e in d["traceEvents"] if e.get("cat") == "kernel")  # noqa: E731
    cpu = lambda d: next(e for e in d["traceEvents"] if e.get("cat") == "cpu_op")  # noqa: E731
    return [
        ("kernel dur", kernel, "dur", "5000", None, "traceEvents["),
        ("kernel name", kernel, "name", '"other_kernel"', None, "traceEvents["),
        ("kernel ts", kernel, "ts", "1.5", None, "traceEvents["),
        ("cpu_op dur", cpu, "dur", "0.001", None, "traceEvents["),
        ("escaped dur", kernel, "dur", "5000", '"d\\u0075r"', "traceEvents["),
        ("args correlation", lambda d: kernel(d)["args"], "correlation", "7", None, "args"),
        ("args unread key", lambda d: _set(kernel(d)["args"], "note", "x"), "note", '"y"', None, "args"),
        ("top level", lambda d: d, "schemaVersion", "2", None, "$"),
        ("device property", lambda d: d["deviceProperties"][0], "name", '"x"', None, "deviceProperties[0]"),
    ]


def _set(obj: dict, key: str, value) -> dict:
    obj[key] = value
    return obj


@pytest.mark.parametrize("case", _kineto_cases(), ids=lambda c: c[0])
def test_kineto_repeated_key_names_key_file_and_record(tmp_path, case):
    _, where, key, raw_value, escaped, record = case
    doc = json.loads(json.dumps(KINETO))
    p = tmp_path / "rank0.pt.trace.json"
    p.write_bytes(_with_repeat(doc, where(doc), key, raw_value, escaped))
    with pytest.raises(GemmperfInputError) as ei:
        read_torch_trace(p)
    text = _one_line(ei.value, p)
    assert repr(key) in text and "twice" in text and record in text, text


def _rocprof_cases():
    proc = lambda d: d["rocprofiler-sdk-tool"][0]  # noqa: E731
    disp = lambda d: proc(d)["buffer_records"]["kernel_dispatch"][1]  # noqa: E731
    return [
        ("end_timestamp", disp, "end_timestamp", "99999999999999999", "kernel_dispatch[1]"),
        ("kernel_id", lambda d: disp(d)["dispatch_info"], "kernel_id", "3", "kernel_dispatch[1]"),
        ("grid x", lambda d: disp(d)["dispatch_info"]["grid_size"], "x", "1", "kernel_dispatch[1]"),
        ("agent", lambda d: proc(d)["agents"][0], "cu_count", "1", "agents[0]"),
        ("metadata pid", lambda d: proc(d)["metadata"], "pid", "1", "process 0"),
        ("second process", lambda d: d["rocprofiler-sdk-tool"][1]["buffer_records"]["kernel_dispatch"][0],
         "start_timestamp", "1", "process 1"),
    ]


@pytest.mark.parametrize("case", _rocprof_cases(), ids=lambda c: c[0])
def test_rocprof_json_repeated_key_names_key_file_and_record(tmp_path, case):
    _, where, key, raw_value, record = case
    doc = json.loads(json.dumps(ROCPROF))
    p = tmp_path / "1234_results.json"
    p.write_bytes(_with_repeat(doc, where(doc), key, raw_value))
    with pytest.raises(GemmperfInputError) as ei:
        read_rocprof_json(p)
    text = _one_line(ei.value, p)
    assert repr(key) in text and "twice" in text and record in text, text


@pytest.mark.parametrize("body,key", [
    ('{"test_id": "t", "status": "ok", "status": "failed"}', "status"),
    ('{"runs": [{"run": 0, "returncode": 0}, {"run": 1, "returncode": 0, "returncode": 1}]}',
     "returncode"),
    ('{"axes": {"ch": 28, "c\\u0068": 56}}', "ch"),
])
def test_point_json_repeated_key(tmp_path, body, key):
    p = tmp_path / "point.json"
    p.write_text(body)
    with pytest.raises(GemmperfInputError) as ei:
        read_json_object(p)
    text = _one_line(ei.value, p)
    assert repr(key) in text and "twice" in text, text


_LOOKALIKES = [
    '{"name": "\\"dur\\": 1, \\"dur\\": 2"}',
    '{"name": "{\\"a\\":1,\\"a\\":2}", "a": 1}',
    '{"a": "x\\\\", "b": "\\\\\\"a\\": 2"}',
    '{"a": {"a": {"a": 1}}, "b": [{"a": 1}, {"a": 2}], "c": {"b": 1}}',
    '{"k": "}", "k2": "{", "k3": ":", "k4": "\\u0022k\\u0022: 1"}',
    '{"dur": 1, "Dur": 2, "dur ": 3, "d\\u00fcr": 4, "dúr": 5}',
    '{"d\\u00fcr": 4, "dùr": 5, "\\ud83d\\ude00": 1, "😁": 2}',
    '[{"a": 1}, {"a": 1}, [{"a": [{"a": 1}]}]]',
    '{"long_key_aaaaaaaaaaaaaaaa_1": 1, "long_key_aaaaaaaaaaaaaaaa_2": 2, '
    '"long_key_aaaaaaaaaaaaaaab_1": 3}',
]


@pytest.mark.parametrize("text", _LOOKALIKES)
def test_strings_that_look_like_keys_are_not_repeats(tmp_path, text):
    p = tmp_path / "run.json"
    p.write_text('{"doc": ' + text + "}")
    assert read_json_object(p) == {"doc": json.loads(text)}


@pytest.mark.parametrize("depth", [1, 2, 5, 40, 80])
def test_repeat_found_at_any_depth_and_position(tmp_path, depth):
    inner = '{"x": 1, "y": {"x": 2}, "s": "\\"x\\": 4", "x": 3}'
    p = tmp_path / "point.json"
    p.write_text('{"a": ' * (depth - 1) + inner + "}" * (depth - 1))
    with pytest.raises(GemmperfInputError) as ei:
        read_json_object(p)
    text = _one_line(ei.value, p)
    assert "'x'" in text and "twice" in text and ("$" + ".a" * (depth - 1) + ")") in text, text


def test_kineto_lookalike_strings_read(tmp_path):
    doc = json.loads(json.dumps(KINETO))
    ev = _kineto_event_in(doc, "kernel")
    ev["name"] = 'gemm<{"dur": 1, "dur": 2}> \\" {'
    ev["args"]["note"] = '"name": "x", "name": "y"'
    p = tmp_path / "rank0.pt.trace.json"
    p.write_text(json.dumps(doc))
    assert len(read_torch_trace(p).dispatches) > 0


def _kineto_event_in(doc: dict, cat: str) -> dict:
    return next(e for e in doc["traceEvents"] if e.get("cat") == cat)


# ----------------------------------------------------------------------------- no GPU events

def _gpu_less_trace(path: Path, device_events: list[dict]) -> Path:
    """A GPU run's trace whose kernels are missing: CPU ops, launches, and ``device_events``."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": 10.0,
         "dur": 50.0, "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 100, "tid": 100, "ts": 70.0,
         "dur": 20.0, "args": {"External id": 2}},
        {"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "python"}},
        *device_events,
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _dev(cat: str, name: str, pid=0, tid=7, ts=15.0, dur=30.0) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


_DEVICE_ONLY = {
    "cuda_profiler_range": [_dev("cuda_profiler_range", "CUDA Profiler Range")],
    "gpu_user_annotation": [_dev("gpu_user_annotation", "forward"), _dev("gpu_user_annotation", "bwd")],
    "mtia": [_dev("mtia_ccp_events", "mtia_kernel"), _dev("mtia_runtime", "launch", pid=100)],
    "xpu runtime only": [_dev("xpu_runtime", "zeCommandListAppendLaunchKernel", pid=100, tid=100)],
    "privateuse1": [_dev("privateuse1_runtime", "launch", pid=100), _dev("privateuse1_driver", "x")],
    "hpu": [_dev("hpu_op", "matmul")],
    "cuda runtime, kernels not recorded": [_dev("cuda_runtime", "cudaLaunchKernel", pid=100, tid=100)],
    "unknown device category": [_dev("some_accelerator_op", "op")],
}


@pytest.mark.parametrize("case", list(_DEVICE_ONLY))
def test_device_activity_without_kernels_is_an_error_not_a_cpu_analysis(tmp_path, case):
    p = _gpu_less_trace(tmp_path / "rank0.pt.trace.json", _DEVICE_ONLY[case])
    cat = _DEVICE_ONLY[case][0]["cat"]
    for read in (read_torch_trace, read_torch_cpu_trace, lambda f: load(f)):
        with pytest.raises(GemmperfInputError) as ei:
            read(p)
        text = _one_line(ei.value, p)
        assert repr(cat) in text and "device activity" in text, text


def test_device_activity_without_kernels_cli_exit_2(tmp_path, capsys):
    p = _gpu_less_trace(tmp_path / "rank0.pt.trace.json", _DEVICE_ONLY["cuda_profiler_range"])
    rc = gemmperf_main(["analyze", str(p), "--out", str(tmp_path / "out"), "--no-report"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and "cuda_profiler_range" in err and str(p) in err, err


def _cpu_ops_trace(path: Path, ops: list[tuple[str, int, float, float]]) -> Path:
    """A CPU-only trace: (name, thread, ts µs, dur µs) cpu_ops plus PyTorch's own host events."""
    events = [{"ph": "X", "cat": "cpu_op", "name": n, "pid": 100, "tid": tid, "ts": ts, "dur": d}
              for n, tid, ts, d in ops]
    events += [{"ph": "X", "cat": "python_function", "name": "train.py(1): <module>", "pid": 100,
                "tid": 100, "ts": 0.0, "dur": 1.0},
               {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                "tid": "PyTorch Profiler", "ts": 0.0, "dur": 100000.0},
               {"ph": "i", "s": "t", "name": "Iteration Start: PyTorch Profiler", "pid": 100,
                "tid": 100, "ts": 0.0},
               {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100,
                "tid": 100, "ts": 0.0, "dur": 100000.0}]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


_NESTED = {
    # the example: outer 10 ms holding inner 6 + 3 ms -> 10 ms in all, not 19
    "outer 10 inner 6+3": [("aten::linear", 1, 0.0, 10000.0), ("aten::mm", 1, 500.0, 6000.0),
                           ("aten::add", 1, 7000.0, 3000.0)],
    "three levels": [("a", 1, 0.0, 10000.0), ("b", 1, 1000.0, 8000.0), ("c", 1, 2000.0, 5000.0),
                     ("d", 1, 2500.0, 1000.0)],
    "same start, touching siblings": [("p", 1, 0.0, 9000.0), ("x", 1, 0.0, 4000.0),
                                      ("y", 1, 4000.0, 5000.0)],
    "two threads, repeated steps": [(n, tid, step * 20000.0 + off, d)
                                    for step in range(3) for tid in (1, 2)
                                    for n, off, d in (("aten::linear", 0.0, 10000.0),
                                                      ("aten::mm", 100.0, 9000.0),
                                                      ("aten::relu", 12000.0, 500.0))],
    "overlap that does not nest": [("a", 1, 0.0, 10000.0), ("b", 1, 5000.0, 10000.0)],
}


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


@pytest.mark.parametrize("case", list(_NESTED))
def test_cpu_fallback_totals_stay_inside_each_threads_window(tmp_path, case):
    ops = _NESTED[case]
    p = _cpu_ops_trace(tmp_path / "cpu.pt.trace.json", ops)
    for d in (read_torch_cpu_trace(p).dispatches, load(p).dispatches):
        assert len(d) == len(ops)  # every operator keeps its row for kernel regexes
        for tid in {t for _, t, _, _ in ops}:
            mine = [(int(ts * 1000), int((ts + dur) * 1000)) for _, t, ts, dur in ops if t == tid]
            got = int(d.loc[d["thread_id"] == tid, "dur_ns"].sum())
            # nested operators: each busy nanosecond of the thread counted exactly once;
            # operators that overlap without nesting (clock rounding): never more than that
            assert got == _union_ns(mine) or (case.startswith("overlap") and got <= _union_ns(mine))
            assert got <= max(e for _, e in mine) - min(s for s, _ in mine)
    if case == "outer 10 inner 6+3":
        d = read_torch_cpu_trace(p).dispatches
        assert int(d["dur_ns"].sum()) == 10_000_000
        assert dict(zip(d["kernel"].astype(str), d["dur_ns"])) == {
            "aten::linear": 1_000_000, "aten::mm": 6_000_000, "aten::add": 3_000_000}
