"""The gate's samples from a slim read (``gate.file_reduce``: each source read with the gate's
columns only, its dispatches handed over as codes, the text columns kept as categoricals) are
exactly those of the full path (``gate_samples`` of ``load(paths).dispatches``): the same rows,
order, values and attrs, on random multi-process traces of every input kind, with and without
collective metadata (a Kineto trace carrying it is read whole)."""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.gate import file_reduce
from pytest_gemmperf.gate.compare import GateConfig, compare
from pytest_gemmperf.gate.file_reduce import GATE_COLUMNS, gate_inputs
from pytest_gemmperf.gate.samples import TEXT_COLUMNS, gate_samples
from pytest_gemmperf.store.compare_inputs import load_side
from pytest_gemmperf.traces.coded import CodedDispatches, NotSlim
from pytest_gemmperf.traces.discover import load
from pytest_gemmperf.traces.torch_trace import read_torch_trace

FIX = Path(__file__).parent / "fixtures"
JSON_V7 = FIX / "rocprof_json" / "v7_two_processes_counters_results.json"
CSV_DIR = FIX / "rocprof_csv" / "v7" / "mi350-n1"

GEMM = "Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_WG32_8_1"
NAMES = [GEMM, GEMM.replace("MT128", "MT256"), "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
         "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)",
         "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)"]


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def write_kineto(path: Path, rng: np.random.Generator, pid: int, rank: int | None, n: int,
                 collectives: bool = False) -> Path:
    """A Kineto trace of one process: ProfilerStep ranges, per dispatch an operator, the launch
    and the kernel (two devices, three streams, GEMMs overlapping collectives, memcpys, some
    zero durations); ``collectives``: NCCL kernels launched under ``record_param_comms``."""
    t = 1_700_000_000_000_000_000 + int(rng.integers(0, 10**9))
    ev = [f'{{"ph": "M", "pid": {pid}, "tid": 0, "name": "process_name", "args": {{"name": "python"}}}}']
    for i in range(n):
        if i % 7 == 0:
            ev.append(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{i // 7}", "pid": {pid}, '
                      f'"tid": {pid}, "ts": {_us(t)}, "dur": {_us(5_000_000)}}}')
        k = int(rng.integers(len(NAMES) + 1))
        ext, corr = 2 * i + 1, i + 1
        comm = k == 2 and collectives
        if comm:
            ev.append(f'{{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": {pid}, "tid": {pid}, '
                      f'"ts": {_us(t)}, "dur": {_us(30_000)}, "args": {{"External id": {ext}, '
                      f'"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024, '
                      f'"Out msg nelems": 1024, "Group size": 2, "Process Group Name": "0", '
                      f'"Process Group Ranks": "[0, 1]", "In split size": "[]", "Out split size": "[]"}}}}')
        ev.append(f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": {pid}, "tid": {pid}, '
                  f'"ts": {_us(t + 100)}, "dur": {_us(20_000)}, "args": {{"External id": {ext}}}}}')
        ev.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": {pid}, "tid": {pid}, '
                  f'"ts": {_us(t + 500)}, "dur": {_us(3_000)}, "args": {{"External id": {ext}, '
                  f'"correlation": {corr}}}}}')
        start = t + int(rng.integers(5_000, 40_000))
        dur = 0 if rng.random() < 0.05 else int(rng.integers(1_000, 90_000))
        dev, stream = int(rng.integers(2)), int(rng.choice([3, 7, 11]))
        cat, name = ("gpu_memcpy", "Memcpy HtoD (Host -> Device)") if k == len(NAMES) else ("kernel", NAMES[k])
        ev.append(f'{{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {dev}, "tid": {stream}, '
                  f'"ts": {_us(start)}, "dur": {_us(dur)}, "args": {{"External id": {ext}, "device": {dev}, '
                  f'"stream": {stream}, "correlation": {corr}, "grid": [64, 1, 1], "block": [256, 1, 1]}}}}')
        t += int(rng.integers(10_000, 60_000))
    dist = f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 2}}, ' if rank is not None else ""
    head = ('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"}, '
            '{"id": 1, "name": "AMD Instinct MI300X"}], ' + dist
            + '"rocprofiler-sdk_version": "1.0", "traceEvents": [\n')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + ",\n".join(ev) + "\n]}")
    return path


def write_rocprof_json(path: Path, rng: np.random.Generator, pids: list[int], n: int) -> Path:
    """The two-process fixture's layout with ``pids`` processes of ``n`` random dispatch records
    each: kernels (GEMM, RCCL, copy, elementwise) on both GPUs, two queues, overlapping times."""
    doc = json.loads(JSON_V7.read_text())
    template = doc["rocprofiler-sdk-tool"][0]
    procs = []
    for j, pid in enumerate(pids):
        p = copy.deepcopy(template)
        p["metadata"]["pid"] = pid
        gpus = [a["id"]["handle"] for a in p["agents"] if a["type"] == 2]
        ids = [s["kernel_id"] for s in p["kernel_symbols"] if s["kernel_id"]]
        rec0 = p["buffer_records"]["kernel_dispatch"][0]
        records = []
        t = 63_855_948_000_000 + j * 10**9
        for i in range(n):
            r = copy.deepcopy(rec0)
            start = t + int(rng.integers(0, 30_000))
            r["start_timestamp"] = start
            r["end_timestamp"] = start + (0 if rng.random() < 0.05 else int(rng.integers(500, 60_000)))
            r["correlation_id"]["internal"] = i + 1
            r["thread_id"] = pid
            info = r["dispatch_info"]
            info["agent_id"]["handle"] = int(rng.choice(gpus))
            info["queue_id"]["handle"] = int(rng.choice([16, 17]))
            info["kernel_id"] = int(rng.choice(ids))
            info["dispatch_id"] = i + 1
            records.append(r)
            t += int(rng.integers(5_000, 20_000))
        p["buffer_records"]["kernel_dispatch"] = records
        p["callback_records"]["counter_collection"] = []
        procs.append(p)
    doc["rocprofiler-sdk-tool"] = procs
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return path


def write_csv_process(d: Path, rng: np.random.Generator, pid: int, n: int) -> None:
    """The rocprofv3 7.x CSV fixture's process as ``pid`` with ``n`` dispatches resampled from
    its rows at random times."""
    d.mkdir(parents=True, exist_ok=True)
    for f in CSV_DIR.glob("5358_*"):
        shutil.copy(f, d / f.name.replace("5358", str(pid)))
    trace = d / f"{pid}_kernel_trace.csv"
    rows = pd.read_csv(trace)
    rows = rows.iloc[rng.integers(0, len(rows), n)].reset_index(drop=True)
    start = 1_550_151_853_343_277 + np.cumsum(rng.integers(1_000, 20_000, n))
    rows["Start_Timestamp"] = start
    rows["End_Timestamp"] = start + np.where(rng.random(n) < 0.05, 0, rng.integers(500, 40_000, n))
    rows["Dispatch_Id"] = np.arange(1, n + 1)
    rows["Correlation_Id"] = np.arange(1, n + 1)
    rows.to_csv(trace, index=False, quoting=1)


def write_rocpd(d: Path, rng: np.random.Generator, n: int) -> Path:
    """A rocpd database of two runs (processes), each with ``n`` random dispatches besides the
    writer's own (``test_rocpd``): GEMM, RCCL and copy kernels on three queues."""
    from test_rocpd import SYMBOLS, T0, UUID_A, UUID_B, _db

    p = _db(d, [(UUID_A, 1234, 2, T0, {}), (UUID_B, 1235, 3, T0 + 50, {})])
    conn = sqlite3.connect(p)
    for uuid, pid, gpu in ((UUID_A, 1234, 2), (UUID_B, 1235, 3)):
        guid, t = uuid.replace("_", "-"), T0 + 100_000
        for did in range(5, n + 5):
            start = t + int(rng.integers(0, 30_000))
            dur = 0 if rng.random() < 0.05 else int(rng.integers(500, 60_000))
            kid = int(rng.choice([k for k, *_ in SYMBOLS]))
            conn.execute(f'INSERT INTO "rocpd_event_{uuid}" VALUES (?,?,?,?,?,?,?,?,?)',
                         (did, guid, 1, 100 + did, 100 + did, 9000 + did, "{}", "{}", "{}"))
            conn.execute(f'INSERT INTO "rocpd_kernel_dispatch_{uuid}" VALUES '
                         f'({",".join("?" * 23)})',
                         (did, guid, 77, pid, pid, gpu, kid, did, int(rng.choice([16, 18, 20])), 0, start,
                          start + dur, 0, 0, 256, 1, 1, 4096, 1, 1, None, did, "{}"))
            t += int(rng.integers(5_000, 20_000))
    conn.commit()
    conn.close()
    return p


def _tree(kind: str, root: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 120))
    if kind == "torch":
        for r in range(2):
            write_kineto(root / f"rank{r}" / "trace.pt.trace.json", rng, pid=4000 + r, rank=r, n=n)
    elif kind == "torch-collectives":
        # every rank carries the metadata (the ranks of one run record it alike): read whole
        write_kineto(root / "rank0" / "trace.pt.trace.json", rng, pid=4000, rank=0, n=n, collectives=True)
        write_kineto(root / "rank1" / "trace.pt.trace.json", rng, pid=4001, rank=1, n=n, collectives=True)
    elif kind == "torch-mixed-collectives":
        # ranks with and without the metadata in one side (an aorta sweep: a point whose ranks
        # mix, one profiled without record_param_comms): the metadata-free ranks' collective
        # kernels join the matching (by stream order), as in one table
        for t, metadata in ((256, (True, False, True)), (512, (False, False))):
            for r, coll in enumerate(metadata):
                write_kineto(root / f"{t}thread" / "nccl_4channels" / f"rank{r}" / "trace.pt.trace.json", rng,
                             pid=4000 + t + r, rank=r, n=n, collectives=coll)
    elif kind == "mixed-profilers":
        # one side of several profilers' sources: a Kineto rank, rocprofv3 JSON, CSV and tables
        write_kineto(root / "rank0" / "trace.pt.trace.json", rng, pid=4000, rank=0, n=n)
        write_rocprof_json(root / "rank1" / "a_results.json", rng, [1001], n)
        write_csv_process(root / "rank2" / "mi350-n1", rng, 5358, n)
        src = write_kineto(root.parent / f"{root.name}-src" / "t.pt.trace.json", rng, pid=4003, rank=3, n=n)
        (root / "rank3").mkdir(parents=True)
        load([src]).dispatches.to_parquet(root / "rank3" / "dispatches.parquet")
        shutil.rmtree(src.parent)
    elif kind == "rocprof-json":
        write_rocprof_json(root / "rank0" / "a_results.json", rng, [1001, 1002], n)
        write_rocprof_json(root / "rank1" / "b_results.json", rng, [2001], n)
    elif kind == "rocprof-csv":
        for r in range(2):
            write_csv_process(root / f"rank{r}" / "mi350-n1", rng, 5358 + r, n)
    elif kind == "rocpd":
        write_rocpd(root, rng, n)
    elif kind == "tables":
        src = _tree("torch", root / "src", seed)
        for r, f in enumerate(sorted(src.rglob("*.pt.trace.json"))):
            d = root / "tables" / f"rank{r}"
            d.mkdir(parents=True)
            load([f]).dispatches.to_parquet(d / "dispatches.parquet")
        shutil.rmtree(src)
        return root / "tables"
    return root


KINDS = ["torch", "torch-collectives", "torch-mixed-collectives", "mixed-profilers", "rocprof-json", "rocprof-csv",
         "rocpd", "tables"]


def _text(samples: pd.DataFrame) -> pd.DataFrame:
    return samples.astype({c: str for c in TEXT_COLUMNS})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_slim_samples_equal_the_full_paths(tmp_path, kind, seed):
    root = _tree(kind, tmp_path / "in", seed)
    for warmup in (0, 2):
        want = gate_samples(load([root]).dispatches, warmup=warmup, compact=False, path=root)
        got = gate_inputs([root], jobs=1, warmup=warmup, compact=False, path=root, stats=False,
                          categorical=True)
        assert got.reduced
        s = got.samples
        assert all(isinstance(s[c].dtype, pd.CategoricalDtype) for c in TEXT_COLUMNS)
        for c in TEXT_COLUMNS:  # the categories are the values held, no more
            assert set(s[c].cat.categories) == set(s[c].astype(str))
        pd.testing.assert_frame_equal(_text(s), want, check_exact=True)
        assert s.attrs == want.attrs
        # and the text path (no categoricals) is the full path's too
        plain = gate_inputs([root], jobs=1, warmup=warmup, compact=False, path=root, stats=False)
        pd.testing.assert_frame_equal(plain.samples, want, check_exact=True)


@pytest.mark.parametrize("kind", ["torch", "rocprof-json"])
def test_slim_kinds_are_read_as_codes(tmp_path, kind, monkeypatch):
    """Kineto and rocprofv3 JSON sources are read slim for the gate: the reader hands over
    codes (no full table of ~40 columns is built)."""
    root = _tree(kind, tmp_path / "in", 5)
    made = []
    frame = CodedDispatches.frame

    def spy(self):
        made.append(self.columns)
        return frame(self)

    monkeypatch.setattr(CodedDispatches, "frame", spy)
    gate_inputs([root], jobs=1, compact=False, stats=False, categorical=True)
    assert made and all(set(cols) <= set(GATE_COLUMNS) for cols in made)


def test_collective_metadata_reads_the_trace_whole(tmp_path):
    """A slim read asked for the collective columns refuses a trace that carries collective
    metadata (NotSlim), and one that carries none gives them all null, as the full table."""
    rng = np.random.default_rng(3)
    coll = write_kineto(tmp_path / "c.pt.trace.json", rng, pid=1, rank=0, n=40, collectives=True)
    plain = write_kineto(tmp_path / "p.pt.trace.json", rng, pid=2, rank=1, n=40)
    with pytest.raises(NotSlim):
        read_torch_trace(coll, columns=GATE_COLUMNS)
    full = read_torch_trace(coll).dispatches
    assert full["coll_name"].notna().any()
    slim = read_torch_trace(plain, columns=GATE_COLUMNS).dispatches
    whole = read_torch_trace(plain).dispatches
    pd.testing.assert_frame_equal(slim, whole[[c for c in GATE_COLUMNS if c in whole.columns]], check_exact=True)
    assert slim["coll_name"].isna().all()


def test_compare_verdicts_are_the_full_paths(tmp_path):
    """``gemmperf compare``'s loading (categorical samples from slim reads) gives the verdicts the
    full tables give."""
    a = _tree("torch", tmp_path / "a", 10)
    b = _tree("torch", tmp_path / "b", 11)
    sa, sb = load_side(str(a), jobs=1), load_side(str(b), jobs=1)
    assert isinstance(sa[""]["kernel"].dtype, pd.CategoricalDtype)
    got = compare(sa[""], sb[""], GateConfig(threshold=0.05))
    want = compare(gate_samples(load([a]).dispatches, compact=False),
                   gate_samples(load([b]).dispatches, compact=False), GateConfig(threshold=0.05))
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert file_reduce.GATE_COLUMNS == GATE_COLUMNS


_COMPARE_PEAK = """
import resource, sys
import numpy as np, pandas as pd
from pytest_gemmperf.gate.compare import GateConfig, compare

def side(seed, n, names):
    rng = np.random.default_rng(seed)
    k = rng.integers(0, len(names), n)
    u = rng.integers(0, 6, n)
    return pd.DataFrame({"point": pd.Categorical(["p"] * n), "kernel": pd.Categorical.from_codes(k, names),
                         "metric": pd.Categorical(["dur_ns"] * n), "unit": pd.Categorical.from_codes(u, [f"h/{i}/-/-" for i in range(6)]),
                         "value": np.exp(rng.normal(10, 0.1, n) + 0.01 * k)})

names = [f"void kernel_{i}<" + "x" * 600 + ">" for i in range(40)]
a, b = side(0, 250_000, names), side(1, 250_000, names)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
v = compare(a, b, GateConfig())
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, len(v))
"""


def test_compare_makes_no_text_a_dispatch():
    """Comparing samples of one row a dispatch (a categorical kernel column, as ``gemmperf
    compare`` loads them) makes no text per row: 2 x 250,000 rows of 600-character kernel names
    would be ~300 MB of text; the statistics' arrays are a few tens of MB."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _COMPARE_PEAK], capture_output=True, text=True, check=True).stdout
    growth_mib, n_rows = out.split()
    assert int(n_rows) > 40
    assert float(growth_mib) < 150, f"compare grew the peak RSS by {growth_mib} MiB"
