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
from pytest_gemmperf.traces.jsonkeys import find_repeated_key
from pytest_gemmperf.traces.rocpd import ENV_BUDGET_S, ENV_MAX_STEPS, read_rocpd_db
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json
from pytest_gemmperf.traces.torch_trace import read_torch_trace

sys.path.insert(0, str(Path(__file__).parent))
from test_rocpd import T0, UUID_A, _db  # noqa: E402  (the documented rocpd schema builder)

FIX = Path(__file__).parent / "fixtures"
KINETO = json.loads((FIX / "torch" / "rocm_sdk_rank3.pt.trace.json").read_text())
ROCPROF = json.loads((FIX / "rocprof_json" / "v7_two_processes_counters_results.json").read_text())
MARK = "@@REPEAT@@"


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
    monkeypatch.setenv(ENV_BUDGET_S, "0.5")
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
def test_strings_that_look_like_keys_are_not_repeats(text):
    assert find_repeated_key(text.encode()) is None


def test_repeat_found_at_any_depth_and_position():
    for depth in (1, 2, 5, 40, 80):
        inner = '{"x": 1, "y": {"x": 2}, "x": 3}'
        doc = '{"a": ' * (depth - 1) + inner + "}" * (depth - 1)
        hit = find_repeated_key(doc.encode())
        assert hit is not None and hit.key == "x", depth
        assert hit.path == "$" + ".a" * (depth - 1), hit.path


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
