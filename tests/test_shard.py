"""Sharded sweeps: the assignment (shard.py), ``--gemmperf-shard I/N`` in the plugin, and
``gemmperf merge`` -- a sweep run as two shards and merged gives exactly the verdicts of the
same sweep run unsharded."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import numpy as np
import pytest

from pytest_gemmperf import shard
from pytest_gemmperf.cli import main as cli_main
from pytest_gemmperf.commands.merge_impl import merge_results
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run import backend as be
from pytest_gemmperf.run import environment

pytest_plugins = ["pytester"]

# pytester's in-process runs drop the modules they imported afterwards; pyarrow extension types
# cannot be registered twice, so everything the inner sessions use is imported here, once.
import pandas.core.arrays.arrow.extension_types  # noqa: E402,F401
import pyarrow.parquet  # noqa: E402,F401

import pytest_gemmperf.gate.compare  # noqa: E402,F401
import pytest_gemmperf.gate.samples  # noqa: E402,F401
import pytest_gemmperf.gate.verdict  # noqa: E402,F401
import pytest_gemmperf.report  # noqa: E402,F401
import pytest_gemmperf.run.process  # noqa: E402,F401
import pytest_gemmperf.run.replay  # noqa: E402,F401
import pytest_gemmperf.run.torch_backend  # noqa: E402,F401
import pytest_gemmperf.store.baselines  # noqa: E402,F401
import pytest_gemmperf.store.hardware  # noqa: E402,F401
import pytest_gemmperf.store.results  # noqa: E402,F401
import pytest_gemmperf.traces.torch_trace  # noqa: E402,F401

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fixtures" / "gemmperf_plugin" / "fake_kineto_workload.py"
SLUG = "test_shsweep.py__test_shsweep"

# points named in $SLOW_POINTS run their aten::mm 30 % slower (the candidate's regressions)
TEST_FILE = f"""
import os, sys
from pytest_gemmperf import sweep

@sweep(channels=[28, 56, 70], threads=[256, 512], kernels=[r"^aten::mm$", r"^aten::add$"])
def test_shsweep(gemmperf, gemmperf_point):
    slow = os.environ.get("SLOW_POINTS", "").split(",")
    scale = "1.3" if gemmperf_point.id in slow else "1.0"
    result = gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "30"], repeats=2,
                              env={{"FAKE_SCALE": scale}})
    gemmperf.assert_no_regression(result)

def test_plain():
    pass
"""

PLUGIN_ARGS = ([] if any(ep.value == "pytest_gemmperf.plugin"
                         for ep in importlib.metadata.entry_points(group="pytest11"))
               else ["-p", "pytest_gemmperf.plugin"])


# ------------------------------------------------------------------------ assignment (pure)

def test_parse_shard():
    assert shard.parse_shard("2/4") == shard.Shard(2, 4) and str(shard.parse_shard(" 1 / 1 ")) == "1/1"
    for bad in ("0/2", "3/2", "1/0", "a/b", "1", "1/2/3", "-1/2"):
        with pytest.raises(ValueError, match="I/N|1 <= I <= N"):
            shard.parse_shard(bad)


def test_assignment_is_a_partition_independent_of_order():
    ids = [f"t.py::test_x[ch{c}-th{t}]" for c in (28, 56, 70, 84, 98) for t in (128, 256, 512)]
    for count in (1, 2, 3, 4, 7, 20):
        a = shard.assign(ids, None, count)
        assert a.min() >= 0 and a.max() < count
        sizes = np.bincount(a, minlength=count)
        assert sizes.max() - sizes.min() <= 1  # no durations: balanced by count
        # same ids in another collection order -> same shard for each id
        perm = np.random.default_rng(count).permutation(len(ids))
        b = shard.assign([ids[i] for i in perm], None, count)
        assert dict(zip(ids, a.tolist())) == dict(zip([ids[i] for i in perm], b.tolist()))
        masks = [shard.select(ids, None, shard.Shard(i, count)) for i in range(1, count + 1)]
        assert (np.sum(masks, axis=0) == 1).all()  # every id in exactly one shard


def test_lpt_balances_by_known_durations():
    # one long point and many short ones: count-balancing would put 60+5 s on one shard
    durations = {"long": 60.0, **{f"s{i}": 5.0 for i in range(12)}}
    ids = list(durations)
    a = shard.assign(ids, durations, 2)
    loads = shard.shard_loads(ids, durations, 2)
    assert sorted(loads) == [60.0, 60.0]
    assert np.bincount(a).tolist() in ([1, 12], [12, 1])
    # LPT on 7,6,5,4,3 over 2 shards: {7,4,3}=14 / {6,5}=11 (the greedy's known answer)
    d = {"a": 7, "b": 6, "c": 5, "d": 4, "e": 3}
    a = shard.assign(list(d), d, 2)
    assert {k for k, s in zip(d, a) if s == a[0]} == {"a", "d", "e"}


def test_unknown_durations_take_the_median_and_hash_breaks_ties():
    d = {"a": 10.0, "b": 2.0, "c": float("nan"), "d": -1.0}   # nan / negative: unknown
    ids = ["a", "b", "c", "d", "e", "f"]
    loads = shard.shard_loads(ids, d, 2)
    assert sum(loads) == pytest.approx(10 + 2 + 4 * 6.0)     # unknowns at median(10, 2) = 6
    assert max(loads) - min(loads) <= 6.0
    assert shard.stable_hash("x") == shard.stable_hash("x") == 0x2d711642b726b044
    with pytest.raises(ValueError, match="collected twice"):
        shard.assign(["a", "a"], None, 2)


def test_plan_digest_changes_with_ids_or_durations():
    ids = ["a", "b", "c", "d"]
    base = shard.plan_digest(ids, None, 2)
    assert base == shard.plan_digest(list(reversed(ids)), None, 2)
    assert base != shard.plan_digest(ids + ["e"], None, 2)
    assert base != shard.plan_digest(ids, {"a": 100.0}, 2) or \
        shard.assign(ids, {"a": 100.0}, 2).tolist() == shard.assign(ids, None, 2).tolist()


def test_baseline_durations_reads_meta_pointers(tmp_path):
    rec = tmp_path / "hwA" / "t.py__test_x"
    rec.mkdir(parents=True)
    (rec / "meta.json").write_text(json.dumps({"test_id": "t.py::test_x", "metadata": {"points": {
        "ch28": {"duration_s": 12.5}, "ch56": {"duration_s": "bad"}, "ch70": {}}}}))
    other = tmp_path / "hwB" / "t.py__test_x"
    other.mkdir(parents=True)
    (other / "meta.json").write_text(json.dumps({"test_id": "t.py::test_x",
                                                 "metadata": {"points": {"ch28": {"duration_s": 20.0}}}}))
    (tmp_path / "hwC" / "t.py__test_x").mkdir(parents=True)
    (tmp_path / "hwC" / "t.py__test_x" / "meta.json").write_text("{not json")
    assert shard.baseline_durations(tmp_path, ["t.py::test_x"]) == {"t.py::test_x[ch28]": 20.0}
    assert shard.baseline_durations(tmp_path / "absent", ["t.py::test_x"]) == {}


# ------------------------------------------------------------------------------ the plugin

@pytest.fixture
def gp(pytester, monkeypatch, without_session_reports):
    """pytester with the plugin on the CPU torch backend; results and baselines under the test
    directory; this host's load never decides a verdict; no session writes its reports (no
    test here reads them: the merge's own report is written by ``gemmperf merge``)."""
    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    for var in ("FAKE_SCALE", "FAKE_FAIL", "SLOW_POINTS", shard.SHARD_ENV):
        monkeypatch.delenv(var, raising=False)
    pytester.makepyfile(test_shsweep=TEST_FILE)

    def run(*args, results="res", base="base"):
        return pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                                  f"--gemmperf-results-dir={results}", f"--gemmperf-baseline-dir={base}",
                                  "--gemmperf-telemetry=off", *args)

    run.path = pytester.path
    return run


def _collected(out) -> list[str]:
    return sorted(line.strip() for line in out.stdout.lines if "::test_" in line and "[" in line
                  or line.strip().endswith("::test_plain"))


def test_shard_option_env_ini_and_errors(gp, pytester, monkeypatch):
    full = _collected(gp("--collect-only", "-q"))
    assert len(full) == 7
    one = gp("--collect-only", "-q", "--gemmperf-shard", "1/2")
    one.stdout.fnmatch_lines(["gemmperf shard 1/2: * of 7 points (no recorded durations: balanced by count)"])
    gp("--collect-only", "--gemmperf-shard", "1/2").stdout.fnmatch_lines(["gemmperf: backend *; shard 1/2"])
    two = gp("--collect-only", "-q", "--gemmperf-shard=2/2")
    s1, s2 = _collected(one), _collected(two)
    assert sorted(s1 + s2) == full and not set(s1) & set(s2) and {len(s1), len(s2)} == {3, 4}
    monkeypatch.setenv(shard.SHARD_ENV, "2/2")                 # the environment ...
    assert _collected(gp("--collect-only", "-q")) == s2
    pytester.makeini("[pytest]\ngemmperf_shard = 1/2\n")       # ... beats the ini file
    assert _collected(gp("--collect-only", "-q")) == s2
    monkeypatch.delenv(shard.SHARD_ENV)
    assert _collected(gp("--collect-only", "-q")) == s1
    assert _collected(gp("--collect-only", "-q", "--gemmperf-shard", "2/2")) == s2  # command line wins
    bad = gp("--collect-only", "--gemmperf-shard", "3/2")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--gemmperf-shard: '3/2': need 1 <= I <= N*"])
    # -k first, then the shard: the 2 ch28 items split one each
    k1 = _collected(gp("--collect-only", "-q", "-k", "ch28", "--gemmperf-shard", "1/2"))
    k2 = _collected(gp("--collect-only", "-q", "-k", "ch28", "--gemmperf-shard", "2/2"))
    assert len(k1) == len(k2) == 1 and k1 != k2


def _verdicts(root: Path) -> str:
    return (root / SLUG / "verdicts.csv").read_text()


def test_two_shards_merged_equal_the_unsharded_run(gp, monkeypatch, capsys):
    root = gp.path
    # 1. baselines: a real (stand-in) run records every point, with its profiling time
    gp(results="res_base").assert_outcomes(passed=7)
    meta = json.loads(next((root / "base").glob(f"*/{SLUG}/meta.json")).read_text())
    points = meta["metadata"]["points"]
    assert all(p["duration_s"] > 0 for p in points.values()) and len(points) == 6
    # the refresh job (the one writer of a sharded CI's store) records the durations too
    assert cli_main(["baseline", "refresh", "--from", str(root / "res_base"),
                     "--baseline-dir", str(root / "refreshed")]) == 0
    timed = shard.baseline_durations(root / "refreshed", ["test_shsweep.py::test_shsweep"])
    assert len(timed) == 6 and timed == shard.baseline_durations(root / "base", ["test_shsweep.py::test_shsweep"])
    # 2. the candidate: two points 30 % slower, recorded into a scratch store (no gate yet)
    monkeypatch.setenv("SLOW_POINTS", "ch56-th256,ch70-th512")
    gp(results="res_cand", base="scratch").assert_outcomes(passed=7)
    monkeypatch.delenv("SLOW_POINTS")
    # 3. gate the same candidate data (replayed) unsharded, and as shards 1/2 and 2/2
    replay = ["--gemmperf-replay", "res_cand", "--gemmperf-confirm", "0"]
    full = gp(*replay, results="res_all")
    full.assert_outcomes(passed=5, failed=2)
    outs = [gp(*replay, "--gemmperf-shard", f"{i}/2", results=f"res_s{i}") for i in (1, 2)]
    outs[0].stdout.fnmatch_lines(["gemmperf shard 1/2: * of 7 points (balanced by the recorded durations of 6)",
                                  "*shard 1/2: * of 7 points*combine the shards with `gemmperf merge`"])
    counts = [o.parseoutcomes() for o in outs]
    assert sum(c.get("passed", 0) for c in counts) == 5 and sum(c.get("failed", 0) for c in counts) == 2
    assert all(c.get("deselected", 0) >= 3 for c in counts)
    runs = [json.loads((root / f"res_s{i}" / "run.json").read_text())["shard"] for i in (1, 2)]
    assert runs[0]["plan"] == runs[1]["plan"] and runs[0]["total"] == 7
    assert not set(runs[0]["items"]) & set(runs[1]["items"])
    assert len(set(runs[0]["items"]) | set(runs[1]["items"])) == 7
    # 4. merge: the verdicts equal the unsharded run's, row for row and cell for cell
    capsys.readouterr()
    rc = cli_main(["merge", str(root / "res_s1"), str(root / "res_s2"), "--out", str(root / "merged")])
    printed = capsys.readouterr().out
    assert rc == 1 and "shards 1/2, 2/2" in printed and "6 point(s)" in printed and "regression=" in printed
    merged, unsharded = _verdicts(root / "merged"), _verdicts(root / "res_all")
    assert merged == unsharded
    rows = unsharded.splitlines()
    assert len(rows) > 20 and sum(",regression," in r for r in rows) >= 2
    assert {r.split(",")[1] for r in rows if ",regression," in r} == {"ch56-th256", "ch70-th512"}
    assert sorted(p.name for p in (root / "merged" / SLUG).iterdir() if p.is_dir()) == \
        sorted(p.name for p in (root / "res_all" / SLUG).iterdir() if p.is_dir())
    run_json = json.loads((root / "merged" / "run.json").read_text())
    assert [e["shard"] for e in run_json["merged_from"]] == ["1/2", "2/2"] and "shard" not in run_json
    assert sum(e["points"] for e in run_json["merged_from"]) == 6
    assert (root / "merged" / "report" / "report.html").is_file()
    # 5. the merge refuses what would lose or double points
    with pytest.raises(GemmperfInputError, match="shard.s. 2/2 missing"):
        merge_results([root / "res_s1"], root / "m1")
    merge_results([root / "res_s1"], root / "m2", partial=True)
    with pytest.raises(GemmperfInputError, match="given twice"):
        merge_results([root / "res_s1", root / "res_s1"], root / "m3")
    with pytest.raises(GemmperfInputError, match="not a shard"):
        merge_results([root / "res_s1", root / "res_all"], root / "m4")
    with pytest.raises(GemmperfInputError, match="not an empty directory"):
        merge_results([root / "res_s1", root / "res_s2"], root / "merged")
    assert not (root / "m1").exists() and not (root / "m3").exists()


def _results(root: Path, points: dict[str, list[str]], shard_info: dict | None = None) -> Path:
    root.mkdir(parents=True)
    doc = {"created": "2026-01-01T00:00:00+00:00", "host": root.name, "status": "complete"}
    if shard_info:
        doc["shard"] = shard_info
    (root / "run.json").write_text(json.dumps(doc))
    for test, pts in points.items():
        for p in pts:
            (root / test / p).mkdir(parents=True)
            (root / test / p / "point.json").write_text(json.dumps({"point": p, "status": "complete"}))
        (root / test / "verdicts.csv").write_text(
            "test,point,kernel,verdict,ratio\n" + "".join(f"{test},{p},'=k,unchanged,-0.5\n" for p in pts))
    return root


def test_merge_conflicts_name_both_directories(tmp_path):
    plan = {"count": 2, "plan": "abc"}
    a = _results(tmp_path / "a", {"t1": ["p1", "p2"]}, {**plan, "index": 1, "shard": "1/2"})
    b = _results(tmp_path / "b", {"t1": ["p2"], "t2": ["p9"]}, {**plan, "index": 2, "shard": "2/2"})
    with pytest.raises(GemmperfInputError) as err:
        merge_results([a, b], tmp_path / "out")
    assert "point p2 of t1 is also in" in str(err.value) and str(a) in str(err.value) and str(b) in str(err.value)
    c = _results(tmp_path / "c", {"t2": ["p9"]}, {**plan, "index": 1, "shard": "1/2"})
    with pytest.raises(GemmperfInputError, match=r"shard 1/2 is also .*a"):
        merge_results([a, c], tmp_path / "out")
    d = _results(tmp_path / "d", {"t2": ["p9"]}, {"count": 2, "plan": "zzz", "index": 2, "shard": "2/2"})
    with pytest.raises(GemmperfInputError, match="not from the plan"):
        merge_results([a, d], tmp_path / "out")
    e = _results(tmp_path / "e", {"t2": ["p9"]}, {**plan, "index": 2, "shard": "2/2"})
    merge_results([a, e], tmp_path / "out")
    # formula-looking cells stay neutralised, numbers stay as written
    assert (tmp_path / "out" / "t1" / "verdicts.csv").read_text() == \
        "test,point,kernel,verdict,ratio\nt1,p1,'=k,unchanged,-0.5\nt1,p2,'=k,unchanged,-0.5\n"
    assert (tmp_path / "out" / "t2" / "p9" / "point.json").is_file()
    with pytest.raises(GemmperfInputError, match="run.json: missing"):
        merge_results([tmp_path / "out" / "t1"], tmp_path / "out2")
    assert cli_main(["merge", str(tmp_path / "nope"), "--out", str(tmp_path / "o3")]) == 2
