"""``traces.fileio.read_json_object`` (point.json in discovery, run.json in ``gemmperf merge``) and
``run.results.read_json_doc`` (the results JSON that ``baseline refresh``, ``compare`` and the store
read): every failure, a key written twice included, is one GemmperfInputError naming the file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES
from pytest_gemmperf.cli import main
from pytest_gemmperf.commands.merge_impl import plan_merge
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run.results import read_json_doc
from pytest_gemmperf.traces.discover import discover
from pytest_gemmperf.traces.fileio import read_json_object

TORCH = FIXTURES / "torch" / "rocm_sdk_rank3.pt.trace.json"


def _raises(path: Path, fragment: str) -> GemmperfInputError:
    with pytest.raises(GemmperfInputError) as err:
        read_json_object(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and fragment in msg and "\n" not in msg, msg
    return err.value


def test_reads_an_object(tmp_path):
    p = tmp_path / "point.json"
    p.write_text(json.dumps({"point": "ch28-th256", "runs": [{"run": 0}]}), encoding="utf-8")
    assert read_json_object(p) == {"point": "ch28-th256", "runs": [{"run": 0}]}
    assert read_json_object(str(p)) == {"point": "ch28-th256", "runs": [{"run": 0}]}


@pytest.mark.parametrize("text, fragment", [
    ('{"point": "a",', "not valid JSON: Expecting property name"),
    ("", "not valid JSON: Expecting value"),
    ('{"a": 1} {"b": 2}', "not valid JSON: Extra data"),
    ("[1, 2]", "not a JSON object (found an array)"),
    ("null", "not a JSON object (found null)"),
    ('"text"', "not a JSON object (found a string)"),
    ("3.5", "not a JSON object (found a number)"),
    ("true", "not a JSON object (found a boolean)"),
])
def test_bad_content(tmp_path, text, fragment):
    p = tmp_path / "run.json"
    p.write_text(text, encoding="utf-8")
    _raises(p, fragment)


def test_not_utf8(tmp_path):
    p = tmp_path / "run.json"
    p.write_bytes(b'{"host": "\xff\xfe"}')
    _raises(p, "not valid JSON: 'utf-8' codec can't decode byte 0xff")


def test_missing_file(tmp_path):
    _raises(tmp_path / "absent.json", "cannot read file: No such file or directory")


def test_unreadable_file(tmp_path, monkeypatch):
    # root ignores chmod 000, so deny the open the way the kernel would for another user
    p = tmp_path / "point.json"
    p.write_text("{}")
    real_open = os.open

    def denied(path, *a, **kw):
        if os.fspath(path) == str(p):
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(path, *a, **kw)
    monkeypatch.setattr(os, "open", denied)
    _raises(p, "cannot read file: Permission denied")


def test_fifo_and_directory_are_errors_not_hangs(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)  # no writer: a blocking open would hang forever
    _raises(fifo, "it is a FIFO, not a regular file")
    d = tmp_path / "point.json"
    d.mkdir()
    _raises(d, "cannot read file")


# ---- the two callers --------------------------------------------------------------------------

def _traced_point(root: Path, point_json: str) -> Path:
    raw = root / "t" / "p" / "run0" / "raw"
    raw.mkdir(parents=True)
    shutil.copy(TORCH, raw / TORCH.name)
    (root / "t" / "p" / "point.json").write_text(point_json, encoding="utf-8")
    return raw / TORCH.name


def test_discovery_names_a_broken_point_json(tmp_path):
    f = _traced_point(tmp_path, '["not", "an", "object"]')
    with pytest.raises(GemmperfInputError) as err:
        discover(f)
    assert str(err.value) == f"{tmp_path / 't' / 'p' / 'point.json'}: not a JSON object (found an array)"


def test_discovery_rereads_a_rewritten_point_json(tmp_path):
    f = _traced_point(tmp_path, json.dumps({"point": "first"}))
    pj = tmp_path / "t" / "p" / "point.json"
    assert [s.point for s in discover(f)] == ["first"]
    pj.write_text(json.dumps({"point": "second"}), encoding="utf-8")
    st = pj.stat()
    os.utime(pj, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # coarse clocks: force a new mtime
    assert [s.point for s in discover(f)] == ["second"]


@pytest.mark.parametrize("text, fragment", [
    ("{broken", "not valid JSON"),
    ("[]", "not a JSON object (found an array)"),
])
def test_merge_names_a_broken_run_json(tmp_path, text, fragment):
    d = tmp_path / "shard1"
    d.mkdir()
    (d / "run.json").write_text(text, encoding="utf-8")
    with pytest.raises(GemmperfInputError) as err:
        plan_merge([d], tmp_path / "out")
    assert str(err.value).startswith(f"{d / 'run.json'}: {fragment}")
    assert not (tmp_path / "out").exists()


# ---- the results JSON (run/results.read_json_doc): refresh, compare and the store read it ------

REPEATED = "key 'status' appears twice in one JSON object"


def test_results_json_with_a_repeated_key_is_one_line(tmp_path):
    p = tmp_path / "point.json"
    p.write_text('{"point": "a", "status": "failed", "runs": [], "status": "complete"}', encoding="utf-8")
    with pytest.raises(GemmperfInputError) as err:
        read_json_doc(p)
    assert str(err.value).startswith(f"{p} ($): {REPEATED} (byte "), str(err.value)
    # the same refusal through a byte-order mark, which json.loads accepts
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    with pytest.raises(GemmperfInputError, match=REPEATED):
        read_json_doc(p)
    p.write_text('{"point": "a", "status": "complete"}', encoding="utf-16")
    assert read_json_doc(p) == {"point": "a", "status": "complete"}


def _repeat(path: Path, key: str, value: str) -> None:
    """Write ``key`` a second time, as a hand edit or a corrupt merge would."""
    text = json.dumps(json.loads(path.read_text(encoding="utf-8")))
    assert f'"{key}"' in text
    path.write_text(text[:-1] + f', "{key}": "{value}"}}', encoding="utf-8")


@pytest.mark.parametrize("where", ["run.json", "point.json"])
@pytest.mark.parametrize("command", ["refresh", "compare"])
def test_refresh_and_compare_refuse_a_repeated_key(tmp_path, capsys, where, command):
    from test_baseline import make_results  # here, not at module level: its fixtures stay its own

    results = make_results(tmp_path / "results" / "2026-11-20T10-00-00", failed_point=False)
    bad = results / "run.json" if where == "run.json" else next(results.glob("*/ch28-th256/point.json"))
    key = "hardware_key" if where == "run.json" else "status"
    _repeat(bad, key, "edited")
    if command == "refresh":
        argv = ["baseline", "refresh", "--from", str(results), "--baseline-dir", str(tmp_path / "store")]
    else:
        base = make_results(tmp_path / "base" / "2026-11-19T10-00-00", seed=5, failed_point=False)
        argv = ["compare", str(base), str(results), "--out", str(tmp_path / "out"), "--no-report", "--jobs", "1"]
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert all(ln.startswith("note: ") for ln in err[:-1]) and "Traceback" not in "".join(err), err
    assert err[-1].startswith(f"gemmperf: error: {bad} ($): key '{key}' appears twice in one JSON object"), err
    assert not any((tmp_path / "store").rglob("meta.json"))  # nothing refreshed from it
