"""The Kineto slim read's fast paths (docs/performance.md, Kineto "Time"): plain ``ts``/``dur``
number text read a token at a time (``jsonnum._plain_us_to_ns``), runs of events decoded with
the types the checks ask for (``torch_decode.checked``) going straight to numpy columns, and
keys numbered per run on their distinct values (``torch_slim.first_seen_codes``). Each must
give what the digit-by-digit path, the full read and one-at-a-time numbering give."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.jsonnum import (INT64_MAX, OK, OUT_OF_RANGE, _digits_us_to_ns,
                                            _plain_us_to_ns, us_text_to_ns)
from pytest_gemmperf.traces.torch_decode import _decode_slim, checked
from pytest_gemmperf.traces.torch_slim import SLIM_COLUMNS, first_seen_codes
from pytest_gemmperf.traces.torch_trace import read_torch_trace


def _raw(texts: list[str]) -> list[msgspec.Raw]:
    return [msgspec.Raw(t.encode()) for t in texts]


def _exact_ns(text: str) -> int:
    return int(Decimal(text) * 1000)


# ----------------------------------------------------------------------------- number text

_plain = st.builds(lambda i, f: i + ("." + f if f else ""),
                   st.one_of(st.just("0"), st.from_regex(r"[1-9][0-9]{0,15}", fullmatch=True)),
                   st.from_regex(r"[0-9]{0,3}", fullmatch=True))


@settings(max_examples=300, deadline=None)
@given(st.lists(_plain, min_size=1, max_size=40))
def test_plain_tokens_read_as_their_exact_decimal_value(texts):
    """Any 1-16 integer digits with 0-3 decimals: exact ns where it fits int64, else the digit
    path's out-of-range status; the same as the digit path token by token."""
    values, status = us_text_to_ns(_raw(texts))
    want_v, want_s = _digits_us_to_ns(_raw(texts))
    assert values.tolist() == want_v.tolist() and status.tolist() == want_s.tolist()
    for t, v, s in zip(texts, values.tolist(), status.tolist()):
        exact = _exact_ns(t)
        assert (v, s) == ((exact, OK) if exact <= INT64_MAX else (0, OUT_OF_RANGE)), t


def test_epoch_scale_fractions_and_the_int64_edge():
    texts = ["1700000000123456.789", "1700000000123456.7", "1700000000123456", "0.001", "0",
             "9223372036854775.807", "9223372036854775.808", "9999999999999999.999", "5.000"]
    values, status = us_text_to_ns(_raw(texts))
    assert values[:6].tolist() == [1_700_000_000_123_456_789, 1_700_000_000_123_456_700,
                                   1_700_000_000_123_456_000, 1, 0, INT64_MAX]
    assert status.tolist() == [OK] * 6 + [OUT_OF_RANGE, OUT_OF_RANGE, OK]
    assert values[8] == 5000
    _, plain = _plain_us_to_ns(b"".join(texts[i].encode() for i in (0, 6)),
                               np.array([len(texts[0]), len(texts[6])]))
    assert plain.tolist() == [True, False]  # beyond int64: left to the digit path


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_plain, st.sampled_from(
    ["-1.5", "1e3", "2.0456E1", "1100.1236", "1100.0005", "12.3450", '"12.5"', "true", "null", "",
     "[1]", "1" * 40, "0.0000", "-0", "17000000001234567.5"])), min_size=1, max_size=30))
def test_plain_and_other_tokens_mixed_keep_each_tokens_value(texts):
    """Plain tokens beside signs, exponents, sub-ns digits, non-numbers and absent values: each
    token gets what it gets alone on the digit path."""
    values, status = us_text_to_ns(_raw(texts))
    for i, t in enumerate(texts):
        v, s = _digits_us_to_ns(_raw([t]))
        assert (values[i], status[i]) == (v[0], s[0]), t


# ----------------------------------------------------------------------------- checked runs

def _x(cat: str, name: str, ts, dur, pid=1, tid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


_T0 = 1_700_000_000_000_000
#: the kernel's start, epoch-scale with a fraction (written as number text by _write)
_KERNEL_TS = "1700000000000010.125"


def _events(**kernel_args) -> list[dict]:
    return [_x("cpu_op", "aten::mm", _T0, 50, pid=7, **{"External id": 1}),
            _x("python_function", "f", _T0, 50, pid=7, **{"Python id": 3}),
            _x("cuda_runtime", "cudaLaunchKernel", _T0 + 1, 2, pid=7, correlation=11, grid=[1, 1, 1]),
            _x("kernel", "gemm", "@TS@", 5.125, pid=0, tid=7,
               **{"device": 0, "stream": 7, "correlation": 11, "grid": [4, 1, 1], "block": [256, 1, 1],
                  **kernel_args}),
            {"ph": "s", "id": 11, "pid": 7, "tid": 7, "ts": _T0 + 1, "cat": "ac2g", "name": "ac2g"}]


def _text(events: list[dict]) -> str:
    return json.dumps(events).replace('"@TS@"', _KERNEL_TS)


def _write(tmp_path: Path, events: list[dict], name: str = "t.pt.trace.json") -> Path:
    p = tmp_path / name
    p.write_text('{"schemaVersion": 1, "traceEvents": ' + _text(events) + "}")
    return p


def test_a_run_decodes_checked_only_where_every_value_has_the_checked_type():
    def is_checked(events: list[dict]) -> bool:
        return checked(_decode_slim(_text(events).encode()))

    assert is_checked(_events())
    assert is_checked(_events(grid=[2 ** 31 - 1, 1, 1], block=[1, 1, 1], correlation=2 ** 63 - 1))
    for odd in ({"grid": [2 ** 31, 1, 1]}, {"block": [1, 1, 1, 1]}, {"device": "0"}, {"stream": True},
                {"correlation": 2 ** 63}, {"External id": 1.0}, {"Group size": "8"}):
        assert not is_checked(_events(**odd)), odd
    python_odd = _events()
    python_odd[1]["args"]["External id"] = "x"  # a key the reader never checks on such an event
    assert not is_checked(python_odd)
    labels = _events()
    labels[3]["pid"], labels[3]["tid"] = "GPU 0", "stream 7"
    assert is_checked(labels)


@pytest.mark.parametrize("kernel_args, other", [
    ({}, None),
    ({"grid": [2 ** 31, 1, 1], "block": [3, 1, 1]}, None),         # not checked, still fits int64
    ({"device": None, "stream": None}, None),                       # the lane from pid/tid
    ({"Group size": "8"}, None),                                    # a collective size not an int
    ({}, ("python_function", "External id", "x")),                  # a value nobody checks
    ({}, ("cpu_op", "Input Dims", [[1, 2], "odd"])),
])
def test_checked_and_other_runs_give_the_full_reads_columns(tmp_path, kernel_args, other):
    events = _events(**kernel_args)
    if other is not None:
        cat, key, value = other
        next(e for e in events if e.get("cat") == cat)["args"][key] = value
    p = _write(tmp_path, events)
    full = read_torch_trace(p)
    slim = read_torch_trace(p, columns=SLIM_COLUMNS)
    pd.testing.assert_frame_equal(slim.dispatches, full.dispatches[list(SLIM_COLUMNS)], check_exact=True)
    assert slim.dispatches["start_ns"].tolist() == [1_700_000_000_000_010_125]
    assert slim.meta["pid"] == full.meta["pid"] == 7


@pytest.mark.parametrize("change, message", [
    (lambda e: e[3].update(ts="12"), "ts is not a JSON number"),
    (lambda e: e[3].update(dur=-1), "dur is negative"),
    (lambda e: e[0].update(ts="x"), "ts is not a JSON number"),
    (lambda e: e[2].update(ts=True), "ts is not a JSON number"),
    (lambda e: e[3]["args"].update(device=1.5), "args.device is not a JSON integer"),
    (lambda e: e[0]["args"].update({"External id": 2 ** 64}), "args.External id is outside"),
])
def test_an_error_in_a_checked_or_other_run_is_the_full_reads(tmp_path, change, message):
    events = _events()
    change(events)
    p = _write(tmp_path, events)
    with pytest.raises(GemmperfInputError) as full:
        read_torch_trace(p)
    with pytest.raises(GemmperfInputError) as slim:
        read_torch_trace(p, columns=SLIM_COLUMNS)
    assert str(slim.value) == str(full.value)
    assert message in str(full.value)


def test_a_key_twice_in_a_checked_runs_args_is_refused(tmp_path):
    events = _text(_events()).replace('"device": 0,', '"device": 0, "device": 1,', 1)
    assert checked(_decode_slim(events.encode()))
    p = tmp_path / "twice.pt.trace.json"
    p.write_text('{"schemaVersion": 1, "traceEvents": ' + events + "}")
    with pytest.raises(GemmperfInputError, match="key 'device' appears twice"):
        read_torch_trace(p, columns=SLIM_COLUMNS)


# ----------------------------------------------------------------------------- numbering

@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "c", "d", "e", ""]), max_size=12), max_size=6))
def test_keys_numbered_per_run_as_one_at_a_time(runs):
    one_at_a_time: dict = {}
    per_run: dict = {}
    for run in runs:
        want = [one_at_a_time.setdefault(k, len(one_at_a_time)) for k in run]
        got = first_seen_codes(per_run, *pd.factorize(np.array(run, dtype=object)))
        assert got.tolist() == want
    assert list(per_run.items()) == list(one_at_a_time.items())
