"""Nothing is counted twice and multi-node points cannot lose their rendezvous port.

* Run history: a run id is recorded once per (hardware key, test, point); recording it again is
  refused with one line (CLI exit 2, pytest side: not recorded) unless ``--replace``, and when
  two files of one run and point exist anyway, every reader counts the newest one only.
* Variance history of a baseline: keyed by the identity of a run's data, so refreshing or
  learning the same results again, under any name, in any order, adds it once.
* Multi-node points on one machine meet in a rendezvous store the launcher holds open: a port
  that another process takes in the meantime cannot break the launch.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pytest_gemmperf.gate.compare  # noqa: F401
import pytest_gemmperf.pytest_glue.history  # noqa: F401
import pytest_gemmperf.store.baselines  # noqa: F401 - see test_history_cli: pytester drops modules
import pytest_gemmperf.store.results  # noqa: F401
from pytest_gemmperf.cli import main
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.history.store import HistoryStore, RunInfo
from pytest_gemmperf.history.values import history_values
from pytest_gemmperf.run import process
from pytest_gemmperf.run.process import node_launch_argvs
from pytest_gemmperf.run.torch_backend import run_torch_nodes
from pytest_gemmperf.store import record
from pytest_gemmperf.store.baselines import BaselineStore

from test_baseline import HW, make_results  # the documented results layout

REPO = Path(__file__).resolve().parent.parent
GEMM_COMM = REPO / "perf_tests" / "workloads" / "gemm_comm.py"
TINY = ["--shape", "16x16x16", "--steps", "1", "--warmup-steps", "0", "--gemms-per-step", "1",
        "--comm-mb", "0.01"]
TEST = "perf/test_g.py::test_g"
#: run ids a CI system might use, hostile to file names included
RUN_IDS = ["nightly-42", "job/7:a b", "../../x", "ü-ß-☃", "-", "a" * 200, ".hidden"]


def _samples(level: float, seed: int, points=("ch28",)) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = [(p, "Cijk_gemm", "dur_ns", f"h/{seed}{u}/0/0", float(v))
            for p in points for u in range(3) for v in level * np.exp(rng.normal(0, 0.01, 31))]
    return pd.DataFrame(rows, columns=["point", "kernel", "metric", "unit", "value"])


def _samples_file(path: Path, level: float, seed: int) -> Path:
    _samples(level, seed).to_parquet(path)
    return path


def _record(f: Path, hist: Path, run_id: str, *extra: str) -> int:
    return main(["history", "record", str(f), "--history", str(hist), "--run-id", run_id, "--test", TEST,
                 "--hw", "hw1", *extra])


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------------ run history

@pytest.mark.parametrize("run_id", RUN_IDS)
def test_history_record_of_a_known_run_id_is_refused_unless_replace(tmp_path, capsys, run_id):
    hist = tmp_path / "hist"
    a = _samples_file(tmp_path / "a.parquet", 1000.0, 1)
    b = _samples_file(tmp_path / "b.parquet", 1500.0, 2)
    assert _record(a, hist, run_id) == 0
    before = sorted(p.read_bytes() for p in hist.rglob("*.parquet"))
    capsys.readouterr()
    assert _record(b, hist, run_id) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert repr(run_id) in line and "--replace" in line and "already" in line
    assert sorted(p.read_bytes() for p in hist.rglob("*.parquet")) == before  # nothing written
    # --replace swaps the run's values: still one run, now b's
    assert _record(b, hist, run_id, "--replace") == 0
    h = HistoryStore(hist).read()
    assert h["run_id"].unique().tolist() == [run_id]
    assert h["value"].median() == pytest.approx(1500.0, rel=0.02) and len(h) == 3
    assert len(list(hist.rglob("*.parquet"))) == 1 and not list(hist.rglob(".*"))
    # the refusal is per point: another test or another hardware key is another series
    assert main(["history", "record", str(b), "--history", str(hist), "--run-id", run_id, "--test", "other::t",
                 "--hw", "hw1"]) == 0
    assert main(["history", "record", str(b), "--history", str(hist), "--run-id", run_id, "--test", TEST,
                 "--hw", "hw2"]) == 0


def test_history_check_after_a_refused_duplicate_still_checks(tmp_path, capsys):
    """The issue's sequence: the same --run-id twice with other data. The second is refused, and
    `history check` reads one run per id (it no longer silently skips the report)."""
    hist = tmp_path / "hist"
    for i in range(8):
        f = _samples_file(tmp_path / f"s{i}.parquet", 1000.0 if i < 5 else 1200.0, i)
        assert main(["history", "record", str(f), "--history", str(hist), "--run-id", f"r{i:02d}", "--test", TEST,
                     "--hw", "hw1", "--time", f"2026-10-{i + 1:02d}T03:00:00"]) == 0
    dup = _samples_file(tmp_path / "dup.parquet", 900.0, 99)
    assert main(["history", "record", str(dup), "--history", str(hist), "--run-id", "r07", "--test", TEST,
                 "--hw", "hw1"]) == 2
    capsys.readouterr()
    rc = main(["history", "check", "--history", str(hist), "--out", str(tmp_path / "out"), "--no-report"])
    out = capsys.readouterr().out
    assert "8 run(s)" in out and rc == 1, out


@pytest.mark.parametrize("n_files", [2, 3])
@pytest.mark.parametrize("newest_name", ["sorts-first", "sorts-last"])
def test_two_files_of_one_run_and_point_are_read_once(tmp_path, n_files, newest_name):
    """Files of one run id and point that exist together anyway (a writer killed between
    writing the new file and deleting the old one, two writers past the check at once): each
    is written while the others are out of sight. Every reader counts one of them, the newest
    written, whatever the file names and listing order."""
    st = HistoryStore(tmp_path / "h")
    levels = [1000.0 * (1 + k) for k in range(n_files)]
    hidden: list[tuple[Path, Path]] = []
    for k, level in enumerate(levels):
        v = history_values(_samples(level, k, points=("ch28", "ch56")), test=TEST)
        path = Path(st.append(v, RunInfo("r1", time="2026-01-01", hw_key="hw")))
        # name the k-th file so that the newest sorts first or last among them
        rank = n_files - 1 - k if newest_name == "sorts-first" else k
        final = path.with_name(f"r1--{rank:016x}.parquet")
        aside = tmp_path / f"aside{k}"
        path.rename(aside)
        hidden.append((aside, final))
        time.sleep(0.002)
    for aside, final in hidden:
        aside.rename(final)
    assert len(list((tmp_path / "h").rglob("*.parquet"))) == n_files
    h = st.read()
    assert len(h) == 6  # 2 points x 3 units, once
    assert h.groupby("point")["value"].median().tolist() == pytest.approx([levels[-1]] * 2, rel=0.02)
    # every way of reading agrees
    assert len(st.read(point="ch28")) == 3 and len(st.read(kernel_contains="Cijk")) == 6
    assert len(st.read(test=TEST, hw_key="hw")) == 6
    assert st.runs()["run_id"].tolist() == ["r1"]


def test_pytest_side_append_of_a_known_run_and_point_is_refused(tmp_path):
    """The plugin appends one file per point under the session's run id: a second append of
    the same point (a re-run item, two items mapped to one point) is refused, other points of
    the same run are not."""
    st = HistoryStore(tmp_path / "h")
    run = RunInfo("session-1", hw_key="hw")
    for i, p in enumerate(["p1", "p2", "p3"]):
        st.append(history_values(_samples(1000.0, i, points=(p,)), test=TEST), run)
    for p in ["p1", "p3"]:
        with pytest.raises(GemmperfInputError, match=r"session-1.*already.*--replace") as err:
            st.append(history_values(_samples(2000.0, 9, points=(p,)), test=TEST), run)
        assert "\n" not in str(err.value) and p in str(err.value)
    # one refused test in a multi-test append writes none of them
    both = pd.concat([history_values(_samples(2000.0, 9, points=("p9",)), test="other::t"),
                      history_values(_samples(2000.0, 9, points=("p2",)), test=TEST)])
    with pytest.raises(GemmperfInputError):
        st.append(both, run)
    assert st.read(test="other::t").empty
    assert len(st.read()) == 9 and st.read()["value"].max() < 1100
    st.append(history_values(_samples(2000.0, 9, points=("p2",)), test=TEST), run, replace=True)
    h = st.read()
    assert len(h) == 9 and h.loc[h["point"] == "p2", "value"].min() > 1900


# ------------------------------------------------------------------------- variance history

VARIANCE_KEY = getattr(record, "VARIANCE_KEY", "run")


def _history_runs(store: BaselineStore, test: str) -> pd.DataFrame:
    v = store.load(test, HW).variance
    return pd.DataFrame(columns=["point", "seq", VARIANCE_KEY]) if v is None else v


# AABBAABB, once here, added no path: its same-again refreshes are ABBA's BB and AA, its
# re-added run ABABAB's
# ABABAB and ABCABC (a re-added run among others) run in `pytest tests`; AA and ABBA in the inner loop
@pytest.mark.parametrize("pattern", ["AA", pytest.param("ABABAB", marks=pytest.mark.slow), "ABBA",
                                     pytest.param("ABCABC", marks=pytest.mark.slow)])
def test_refresh_of_the_same_runs_again_adds_each_run_once(tmp_path, capsys, pattern):
    """Refreshing from results directories in any order adds each distinct run's data to the
    variance history at most once: alternating two directories six times gives two history
    runs, not five."""
    dirs = {c: make_results(tmp_path / f"res{c}", seed=i, failed_point=False) for i, c in enumerate(sorted(set(pattern)))}
    bdir = str(tmp_path / "base")
    for c in pattern:
        assert main(["baseline", "refresh", "--from", str(dirs[c]), "--baseline-dir", bdir, "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    store = BaselineStore(bdir)
    replaced = {a for a, b in zip(pattern, pattern[1:]) if a != b}
    for test in ("perf_tests/test_gemm.py::test_overlap", "perf_tests/test_gemm.py::test_alone"):
        runs = _history_runs(store, test)
        per_point = runs.groupby("point")["seq"].nunique()
        # every directory that was the baseline and got replaced, once
        assert (len(per_point) > 0) == bool(replaced) and (per_point == len(replaced)).all(), (pattern, runs)
        assert not runs.drop_duplicates(["point", "seq"]).duplicated(["point", VARIANCE_KEY]).any()
    moves = [a for a, b in zip(pattern, pattern[1:]) if a != b]
    assert ("already in the variance history; not added again" in err) == (len(moves) > len(set(moves)))


# ("a", "b", "c"): a copy under a new name, twice over (a single rename adds no path)
@pytest.mark.parametrize("names", [("same", "same"), ("a", "b", "c")])
def test_learn_of_the_same_run_under_any_name_adds_it_once(tmp_path, capsys, names):
    base = make_results(tmp_path / "base-run", seed=0, failed_point=False)
    other = make_results(tmp_path / "other-run", seed=5, failed_point=False)
    bdir = str(tmp_path / "base")
    assert main(["baseline", "refresh", "--from", str(base), "--baseline-dir", bdir, "--jobs", "1"]) == 0
    for name in names:  # one results directory copied under several names
        copy = tmp_path / "copies" / name
        if not copy.exists():
            shutil.copytree(other, copy)
        assert main(["baseline", "learn", "--from", str(copy), "--baseline-dir", bdir, "--jobs", "1"]) == 0
    # and a refresh that moves the learned run's data into the history does not add it again
    assert main(["baseline", "refresh", "--from", str(other), "--baseline-dir", bdir, "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    store = BaselineStore(bdir)
    runs = _history_runs(store, "perf_tests/test_gemm.py::test_overlap")
    assert (runs.groupby("point")["seq"].nunique() == 2).all(), runs  # base (moved in) + other (learned)
    assert not runs.drop_duplicates(["point", "seq"]).duplicated(["point", VARIANCE_KEY]).any()
    assert "already in the variance history; not added again" in err


def test_run_keys_are_the_data_not_the_row_order_or_the_compaction():
    run_keys = record.run_keys
    s = _samples(1000.0, 3, points=("p1", "p2"))
    keys = run_keys(s)
    assert set(keys) == {"p1", "p2"} and keys["p1"] != keys["p2"]
    assert run_keys(s.sample(frac=1.0, random_state=1)) == keys
    from pytest_gemmperf.gate.samples import compact_samples

    assert run_keys(compact_samples(s)) == keys
    moved = s.assign(value=s["value"] * (1 + 1e-12))
    assert run_keys(moved)["p1"] != keys["p1"]


def _key_of_one_point(samples: pd.DataFrame) -> str:
    """A run key as written in a stored variance history: the point's samples alone, compacted
    and normalized, hashed column by column (the definition the stored keys were made with)."""
    import hashlib

    from pytest_gemmperf.gate.samples import compact_samples

    s = record.normalize_samples(compact_samples(samples.reset_index(drop=True)))
    h = hashlib.sha256()
    for c in ("point", "kernel", "metric", "unit"):
        h.update("\x1f".join(s[c].astype(str)).encode("utf-8", "surrogatepass") + b"\x1e")
    h.update(s["value"].to_numpy(dtype="<f8").tobytes())
    return "sha256:" + h.hexdigest()[:24]


@pytest.mark.parametrize("seed", range(6))
def test_a_points_run_key_ignores_the_other_points_of_the_table(seed):
    """Keys are made for all points at once: each is still its point's own key, whatever other
    points (raw, already compacted with their dispatch counts, of other kernels) share the
    table, in any row order, with or without a choice of points."""
    from pytest_gemmperf.gate.samples import compact_samples

    rng = np.random.default_rng(seed)
    names = ["p1", "p10", "p2", "ch28-th256", "ü☃"][: rng.integers(1, 6)]
    parts = []
    for i, p in enumerate(names):
        s = _samples(1000.0 * (i + 1), seed * 10 + i, points=(p,))
        if rng.random() < 0.4:
            s = pd.concat([s, s.assign(kernel="nccl", value=s["value"] * 3)], ignore_index=True)
        if rng.random() < 0.5:
            s = compact_samples(s, per_unit=int(rng.integers(1, 25)))  # a stored (compacted) point
        parts.append(s)
    table = pd.concat(parts, ignore_index=True).sample(frac=1.0, random_state=seed).reset_index(drop=True)
    want = {p: _key_of_one_point(table[table["point"] == p]) for p in names}
    assert record.run_keys(table) == want
    some = names[:: 2]
    assert record.run_keys(table, some + ["absent"]) == {p: want[p] for p in some}
    assert record.run_keys(table, []) == {}


def _exact_samples(points=("p1", "p2")) -> pd.DataFrame:
    """A fixed table whose values are the same bits on every machine: sums and products of
    small integers and powers of two only (NumPy's vectorized ``exp`` differs in the last bit
    between CPUs with and without AVX-512, so a table drawn through it is not fixed)."""
    rows = [(p, "Cijk_gemm", "dur_ns", f"h/3{u}/0/0", 1000.0 + 0.25 * ((7 * i + 3 * u + 11 * j) % 41))
            for j, p in enumerate(points) for u in range(3) for i in range(31)]
    return pd.DataFrame(rows, columns=["point", "kernel", "metric", "unit", "value"])


def test_run_keys_stay_those_of_stored_histories():
    """The key of a fixed table, as every earlier version wrote it into variance histories."""
    assert record.run_keys(_exact_samples()) == {
        "p1": "sha256:b9e5d2f4c2eb6def68d462f2", "p2": "sha256:1ea20312a31743ebe7f6899b"}


# --------------------------------------------------------------------------------- ports

def _listen_on(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return s


@pytest.mark.slow  # real node agents
# three nodes: more than the two of test_multinode.py's launches, on the same code path
@pytest.mark.parametrize("nnodes,nproc", [(3, 1)])
def test_multinode_launch_survives_its_port_being_taken(tmp_path, monkeypatch, nnodes, nproc):
    """Whatever port a bind-and-close picker would choose is taken by someone else before the
    agents start (here: every port such a picker returns is listened on by this test), and the
    launch still gathers every rank."""
    taken: list[socket.socket] = []
    real = process.free_port

    def picked_then_taken(host: str = "127.0.0.1") -> int:
        port = real(host)
        taken.append(_listen_on(port))  # another CI job got there first
        return port

    monkeypatch.setattr(process, "free_port", picked_then_taken)
    try:
        nodes = node_launch_argvs([sys.executable, str(GEMM_COMM), *TINY], nproc=nproc, nnodes=nnodes)
        for s in taken:  # and it is still taken while the agents run
            assert s.fileno() >= 0
        run = run_torch_nodes(nodes, env=dict(os.environ), run_dir=tmp_path / "run0", run=0, device="cpu",
                              timeout_s=120, world_size=nnodes * nproc)
    finally:
        for s in taken:
            s.close()
    assert run.returncode == 0, run.tail
    assert sorted(run.files) == list(range(nnodes * nproc)) and run.missing_ranks == []
    assert run.node_ranks == {k: list(range(k * nproc, (k + 1) * nproc)) for k in range(nnodes)}


def test_node_rendezvous_needs_no_port_picked_in_advance(monkeypatch):
    """No launch path picks a port by binding and closing: the endpoint is a listener this
    process keeps, the node addresses sort in node order for any number of nodes."""
    def never(*a, **k):
        raise AssertionError("a port picked by bind-and-close can be taken before it is used")

    monkeypatch.setattr(process, "free_port", never)
    agents = node_launch_argvs("train.py", 2, 4)
    endpoint = agents[0][agents[0].index("--rdzv-endpoint") + 1]
    host, port = endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        pass  # someone listens there now, before any agent started
    addrs = [process.node_local_addr("127.0.0.1", k) for k in range(2500)]
    assert addrs == sorted(addrs) and len(set(addrs)) == len(addrs)
    assert all(a.startswith("127.") and all(0 <= int(o) <= 255 for o in a.split(".")) for a in addrs)
    # a rendezvous given by the user (a real cluster) is used as given
    mine = node_launch_argvs("train.py", 8, 2, ["--rdzv-backend=c10d", "--rdzv-endpoint=head:29400"])
    assert all("--local-addr" not in a and "--rdzv-endpoint=head:29400" in a for a in mine)
