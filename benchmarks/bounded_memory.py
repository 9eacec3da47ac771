"""Peak memory and wall time of ``gemmperf analyze`` on a generated Kineto trace (or rocprofv3
JSON) of a given size, against a typed msgspec decode of the fields any reader needs, measured
in the same run.

The trace is written (streamed, never held) into a temporary directory and deleted afterwards:
per dispatch a ``cpu_op`` with shapes, a ``python_function``, the runtime launch, the kernel
(or a memcpy/memset) with grid/block/stream/correlation/External id, and the launch->kernel
flow pair (``ph`` s/f), plus ``ProfilerStep#N`` annotations every 1,000 dispatches; ~120
kernel names (long templated C++ names, as real traces have), epoch-scale timestamps in µs with
3 fractional digits. About 2 KB of JSON per dispatch: ~600k dispatches at 1.2 GB.

``--format rocprof-json``: a rocprofv3 7.x ``--output-format json`` file instead (compact, as
rocprofv3 writes it; rocprofv3-formats.md §4): one process, 8 GPU agents and a CPU agent, 120
kernel symbols, per dispatch a ``kernel_dispatch`` record (4 queues per GPU) and a
``hipLaunchKernel`` record in ``hip_api``, a ``memory_copy`` record every 50 dispatches; about
620 bytes a dispatch.

``--format rocprof-csv``: a rocprofv3 7.x ``kernel_trace.csv`` (22 columns, rocprofv3-formats.md
§3.1) of one process, 8 GPUs with 4 queues each, the same 120 kernel names; about 430 bytes a
dispatch. ``--format rocpd``: a rocpd SQLite ``_results.db`` (§5) of one run: the dispatch,
event, thread, symbol, process, node and agent tables the reader queries (no views, so it reads
the tables), the same dispatches; about 160 bytes a dispatch.

For each size it prints the file size, events and dispatches, and

* ``analyze``: ``gemmperf analyze FILE --no-report --jobs 1`` in a child process: its wall time
  and peak RSS (``getrusage(RUSAGE_CHILDREN)`` of a fresh wrapper process, so the figure is
  the analyze process's own maximum resident set);
* ``decode``: a child process that reads the file and decodes ``traceEvents`` into a typed
  ``msgspec.Struct`` of (ph, cat, name, ts, dur) (rocprofv3: the dispatch records' start, end,
  kernel id, agent and queue): its wall time and peak RSS;
  (rocprofv3 CSV: ``pyarrow.csv.read_csv`` of the columns the reader parses, with its text
  columns dictionary-encoded; rocpd: the reader's dispatch query fetched a batch at a time and
  dropped);
* ``own schema`` (the JSON formats): the whole file decoded at once with the reader's own msgspec schema (every
  field its checks read): what an exact reader cannot do without, in time;
* ``oracle`` (Kineto): the least an exact reader must do for ``analyze --no-report``'s outputs
  (:data:`_ORACLE_TORCH`: the fields they read, times as exact ns, the repeated-key scan),
  the whole file at once in one process: wall, peak RSS, CPU seconds and each step's;
* ``compare`` (``--compare``): ``gemmperf compare A B --no-report --jobs 1`` of two traces of
  that size (the second a re-generation with other timings), wall and peak RSS; with
  ``--before`` also on that checkout's code, and whether the two ``verdicts.csv`` are
  byte-identical; ``--compare-only`` measures compare alone (no decode or analyze); with
  ``--report`` compare writes its reports (the command's default), and ``--before`` compares
  verdicts.csv, summary.md and the report CSVs;
* ``before`` (``--before CHECKOUT``): the same ``analyze`` on another checkout's code (a
  change's before, in the same run and under the same load), and whether its ``kernels.csv``
  and ``summary.json`` are byte-identical to this checkout's;
* ``stages`` (``--stages``, Kineto): ``analyze`` once more with its stages timed (:data:`_STAGES`:
  start and imports, file blocks, cutting the runs, decode, the repeated-key scan, number text,
  the runs' columns, heap trims, after the read, the outputs), CPU seconds each;
* ``paired`` (``--paired N``, Kineto): N rounds of the oracle, ``analyze`` and ``--before``'s
  ``analyze`` one after another on the same file, each round's ratios to the oracle, their
  median and the best against the best: on a shared or virtual machine one process's CPU time
  moves by a fifth between runs, a round's ratio much less.

Usage: python benchmarks/bounded_memory.py [--mb 100 400 1200]
       [--format torch|rocprof-json|rocprof-csv|rocpd]
       [--gzip] [--compare | --compare-only] [--report] [--dir DIR] [--before CHECKOUT] [--stages]
       [--paired N]

Needs free disk of about the sizes summed (twice with ``--compare``) in DIR (default: the
system temporary directory).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: JSON bytes per dispatch group (measured from the generator's output)
BYTES_PER_DISPATCH = 1730
EPOCH_US = 1_700_000_000_000_000  # µs since the epoch, like Kineto's absolute timestamps

_OPS = ["aten::mm", "aten::addmm", "aten::bmm", "aten::add", "aten::mul", "aten::copy_",
        "aten::native_layer_norm", "aten::_softmax", "aten::gelu", "aten::fill_",
        "c10d::allreduce_", "aten::index_select"]


def kernel_names(n: int = 120) -> list[str]:
    """``n`` distinct kernel names of the shapes real traces carry (Tensile GEMMs, templated
    elementwise kernels, NCCL, a few short ones)."""
    names = []
    for i in range(n):
        k = i % 4
        if k == 0:
            names.append(f"Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT{64 + i}x32x256_MI16x16x1_"
                         f"SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_"
                         f"GRVWA8_GRVWB8_GSUAMB_GLS0_ISA950_IU1_K1_LBSPPA2048_LBSPPB2048_LBSPPM0_"
                         f"LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV1_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_"
                         f"NTD0_NTM0_NEPBS16_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_"
                         f"SSO0_SVW8_SK0_SKXCCM0_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1_"
                         f"VWB1_WSGRA0_WSGRB0_WS64_WG32_8_1_WGM{i}")
        elif k == 1:
            names.append(f"void at::native::vectorized_elementwise_kernel<{4 + i % 5}, "
                         f"at::native::BinaryFunctor<float, float, float, "
                         f"at::native::binary_internal::MulFunctor<float> >, "
                         f"std::array<char*, {3 + i}ul> >(int, at::native::BinaryFunctor<float, "
                         f"float, float, at::native::binary_internal::MulFunctor<float> >, "
                         f"std::array<char*, {3 + i}ul>)")
        elif k == 2:
            names.append(f"ncclDevKernel_Generic_{i}(ncclDevKernelArgsStorage<4096ul>)")
        else:
            names.append(f"void at::native::reduce_kernel<{256 + i}, 1, at::native::ReduceOp<float, "
                         f"at::native::func_wrapper_t<float, at::native::sum_functor<float, "
                         f"float, float>::operator()(at::TensorIterator&)::{{lambda(float, "
                         f"float)#1}}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, "
                         f"at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
                         f"float>::operator()(at::TensorIterator&)::{{lambda(float, float)#1}}>, "
                         f"unsigned int, float, 4, 4>)")
    return names


def _us(ns: int) -> str:
    """Kineto's µs text with 3 fractional digits, from integer ns."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def write_trace(path: Path, n_dispatch: int, seed: int = 0, gz: bool = False) -> int:
    """Write a Kineto trace with ``n_dispatch`` GPU events; returns the number of events."""
    import random

    rng = random.Random(seed)
    names = [json.dumps(n) for n in kernel_names()]
    pid, tid = 4242, 4243
    opener = gzip.open if gz else open
    n_events = 0
    t = EPOCH_US * 1000 + 123_456_789  # ns
    with opener(path, "wt") as fh:
        fh.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0, "name": '
                 '"AMD Instinct MI350X", "totalGlobalMem": 309220868096, "computeMajor": 9, '
                 '"computeMinor": 5, "warpSize": 64, "numSms": 256, "gcnArchName": '
                 '"gfx950:sramecc+:xnack-"}\n  ],\n  "distributedInfo": {"backend": "nccl", '
                 '"rank": 0, "world_size": 8},\n  "hip_runtime_version": 60443483,\n'
                 '  "traceEvents": [\n')
        fh.write(f'  {{"ph": "M", "pid": {pid}, "tid": 0, "name": "process_name", "args": '
                 f'{{"name": "python"}}}}')
        n_events += 1
        out: list[str] = []
        for i in range(n_dispatch):
            if i % 1000 == 0:
                out.append(f',\n  {{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{i // 1000}", '
                           f'"pid": {pid}, "tid": {tid}, "ts": {_us(t)}, "dur": {_us(rng.randrange(10**8, 2 * 10**8))}, '
                           f'"args": {{"External id": {3 * i + 1}, "Record function id": 0, "Ev Idx": {i}}}}}')
                n_events += 1
            ext, corr = 3 * i + 2, i + 1
            op = _OPS[i % len(_OPS)]
            op_dur = rng.randrange(20_000, 80_000)
            m = 64 * (1 + i % 32)
            out.append(
                f',\n  {{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": {pid}, "tid": {tid}, '
                f'"ts": {_us(t)}, "dur": {_us(op_dur)}, "args": {{"External id": {ext}, '
                f'"Record function id": 0, "Sequence number": {i}, "Fwd thread id": 0, '
                f'"Ev Idx": {i}, "Input Dims": [[{m}, 4096], [4096, {m}]], '
                f'"Input type": ["c10::BFloat16", "c10::BFloat16"], '
                f'"Input Strides": [[4096, 1], [{m}, 1]], "Concrete Inputs": ["", ""]}}}}')
            out.append(
                f',\n  {{"ph": "X", "cat": "python_function", "name": "torch/nn/modules/linear.py(125): forward", '
                f'"pid": {pid}, "tid": {tid}, "ts": {_us(t + 100)}, "dur": {_us(op_dur - 200)}, '
                f'"args": {{"Python parent id": {i}, "Python id": {i + 1}, "Python thread": 0}}}}')
            launch = t + 5_000
            kind = i % 50
            if kind == 48:
                cat, name, rt = "gpu_memcpy", '"Memcpy HtoD (Host -> Device)"', "hipMemcpyWithStream"
            elif kind == 49:
                cat, name, rt = "gpu_memset", '"Memset (Device)"', "hipMemsetAsync"
            else:
                cat, name, rt = "kernel", names[rng.randrange(len(names))], "hipLaunchKernel"
            out.append(
                f',\n  {{"ph": "X", "cat": "cuda_runtime", "name": "{rt}", "pid": {pid}, "tid": {tid}, '
                f'"ts": {_us(launch)}, "dur": {_us(rng.randrange(3_000, 9_000))}, '
                f'"args": {{"External id": {ext}, "cbid": 1, "correlation": {corr}}}}}')
            start = launch + rng.randrange(10_000, 50_000)
            dur = rng.randrange(2_000, 400_000)
            grid = f'"grid": [{rng.randrange(1, 4096)}, 1, 1], "block": [256, 1, 1], ' if cat == "kernel" else ""
            out.append(
                f',\n  {{"ph": "X", "cat": "{cat}", "name": {name}, "pid": 0, "tid": {1 + i % 3}, '
                f'"ts": {_us(start)}, "dur": {_us(dur)}, "args": {{"External id": {ext}, '
                f'"queued": 0, "device": 0, "context": 1, "stream": {1 + i % 3}, '
                f'"correlation": {corr}, "registers per thread": 128, "shared memory": 65536, '
                f'{grid}"blocks per SM": 1.5, "warps per SM": 4.0, '
                f'"est. achieved occupancy %": 25}}}}')
            out.append(f',\n  {{"ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, '
                       f'"ts": {_us(launch)}, "cat": "ac2g", "name": "ac2g"}}')
            out.append(f',\n  {{"ph": "f", "id": {corr}, "pid": 0, "tid": {1 + i % 3}, '
                       f'"ts": {_us(start)}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}')
            n_events += 6
            t += op_dur + rng.randrange(1_000, 5_000)
            if len(out) > 60_000:
                fh.write("".join(out))
                out.clear()
        fh.write("".join(out))
        fh.write('\n  ],\n  "traceName": "gen.pt.trace.json",\n  "displayTimeUnit": "ms",\n'
                 f'  "baseTimeNanoseconds": {EPOCH_US * 1000}\n}}\n')
    return n_events


#: rocprofv3 JSON bytes per dispatch (its kernel_dispatch record, a hip_api record, and a
#: memory_copy record every 50 dispatches; measured from the generator's output)
ROCPROF_BYTES_PER_DISPATCH = 620
ROCPROF_EPOCH_NS = 63_857_982_592_000  # rocprofiler-sdk's timestamps: ns since boot


def _rocprof_frame(pid: int, n_names: int = 120) -> dict:
    """One process element of a rocprofv3 7.x JSON (rocprofv3-formats.md §4) without its
    records: metadata, a CPU and 8 GPU agents, ``n_names`` kernel symbols (kernel_id 1..n; id 0
    the empty placeholder real files start with) and the other sections, empty."""
    names = kernel_names(n_names)
    gpus = [{"size": 1072, "id": {"handle": 37946 + 13 * g}, "type": 2, "cpu_cores_count": 0,
             "simd_count": 1024, "wave_front_size": 64, "num_xcc": 8, "cu_count": 256,
             "array_count": 32, "simd_per_cu": 4, "max_engine_clk_fcompute": 2400,
             "gfx_target_version": 90500, "name": "gfx950", "vendor_name": "AMD",
             "product_name": "AMD Instinct MI350X", "model_name": "", "node_id": 2 + g,
             "logical_node_id": 2 + g, "logical_node_type_id": g, "gpu_index": g}
            for g in range(8)]
    cpu = {"size": 1072, "id": {"handle": 37933}, "type": 1, "cpu_cores_count": 128,
           "simd_count": 0, "wave_front_size": 0, "num_xcc": 0, "cu_count": 0, "name": "AMD EPYC 9575F",
           "vendor_name": "CPU", "product_name": "AMD EPYC 9575F 64-Core Processor", "model_name": "",
           "node_id": 0, "logical_node_id": 0, "logical_node_type_id": 0, "gpu_index": -1}
    symbols = [{"size": 88, "kernel_id": 0, "code_object_id": 0, "kernel_name": "",
                "formatted_kernel_name": "", "demangled_kernel_name": "", "truncated_kernel_name": ""}]
    for k, name in enumerate(names, start=1):
        short = name.split("(")[0].split("<")[0].replace("void ", "")
        symbols.append({"size": 88, "kernel_id": k, "code_object_id": 1 + k % 7,
                        "kernel_name": f"_Z{len(short)}{short.replace('::', '_')}v.kd",
                        "kernel_object": 140341013919104 + 4096 * k, "kernarg_segment_size": 40,
                        "kernarg_segment_alignment": 16, "group_segment_size": 0,
                        "private_segment_size": 0, "sgpr_count": 48 + k % 16,
                        "arch_vgpr_count": 8 * (1 + k % 32), "accum_vgpr_count": 0,
                        "kernel_code_entry_byte_offset": 4736,
                        "kernel_address": {"handle": 140341013923840 + 4096 * k},
                        "formatted_kernel_name": name, "demangled_kernel_name": name,
                        "truncated_kernel_name": short})
    empty_lists = ("hsa_api", "marker_api", "rccl_api", "memory_allocation", "scratch_memory",
                   "rocdecode_api", "rocjpeg_api", "pc_sample_host_trap", "pc_sample_stochastic")
    return {
        "metadata": {"node": {"id": 0, "hash": 0, "machine_id": "7a08373dca364ee48cb645887d6f3084",
                              "system_name": "Linux", "hostname": "gen-node-0", "release": "5.15.0",
                              "version": "#170-Ubuntu SMP", "hardware_name": "x86_64",
                              "domain_name": "(none)"},
                     "pid": pid, "init_time": ROCPROF_EPOCH_NS - 10**9, "fini_time": 0,
                     "command": ["python3", "-u", "train.py"],
                     "config": {"output_path": "/tmp/out", "kernel_rename": False, "group_by_queue": False}},
        "agents": [cpu, *gpus], "counters": [],
        "strings": {"callback_records": [], "buffer_records": [
            {"kind": "KERNEL_DISPATCH", "operations": ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE",
                                                       "KERNEL_DISPATCH_COMPLETE"]}]},
        "code_objects": [], "kernel_symbols": symbols, "host_functions": [], "summary": [],
        "callback_records": {"counter_collection": []},
        "buffer_records": {"kernel_dispatch": "@KD@", "hip_api": "@HIP@", "memory_copy": "@COPY@",
                           **{k: [] for k in empty_lists}},
    }


def write_rocprof_json(path: Path, n_dispatch: int, seed: int = 0, gz: bool = False) -> int:
    """Write a rocprofv3 7.x ``--output-format json`` file (compact, as rocprofv3 writes it) of
    one process with ``n_dispatch`` kernel dispatch records on 8 GPUs (4 queues each), a
    ``hipLaunchKernel`` record per dispatch in ``hip_api`` and a memory copy every 50
    dispatches; returns the number of records."""
    import random

    rng = random.Random(seed)
    pid = 908
    frame = _rocprof_frame(pid)
    n_names = len(frame["kernel_symbols"]) - 1
    text = json.dumps({"rocprofiler-sdk-tool": [frame]}, separators=(",", ":"))
    head, rest = text.split('"@KD@"')
    middle, rest = rest.split('"@HIP@"')
    middle2, tail = rest.split('"@COPY@"')
    opener = gzip.open if gz else open
    t = ROCPROF_EPOCH_NS
    launches = []  # (corr, start, end) of each hip_api record, written after the dispatches
    with opener(path, "wt") as fh:
        fh.write(head + "[")
        out: list[str] = []
        for i in range(n_dispatch):
            corr = i + 1
            gpu = i % 8
            launch = t
            start = launch + rng.randrange(10_000, 50_000)
            dur = rng.randrange(2_000, 400_000)
            out.append(
                f'{"," if i else ""}{{"size":184,"kind":11,"operation":2,"thread_id":{pid + i % 4},'
                f'"correlation_id":{{"internal":{corr},"external":0}},"start_timestamp":{start},'
                f'"end_timestamp":{start + dur},"dispatch_info":{{"size":72,"agent_id":{{"handle":'
                f'{37946 + 13 * gpu}}},"queue_id":{{"handle":{16 + (i // 8) % 4}}},"kernel_id":'
                f'{1 + rng.randrange(n_names)},"dispatch_id":{i // 8 + 1},"private_segment_size":0,'
                f'"group_segment_size":{rng.choice((0, 65536))},"workgroup_size":{{"x":256,"y":1,"z":1}},'
                f'"grid_size":{{"x":{256 * rng.randrange(1, 4096)},"y":1,"z":1}}}},"stream_id":{{"handle":0}}}}')
            launches.append((corr, launch, launch + rng.randrange(3_000, 9_000)))
            t += rng.randrange(20_000, 80_000)
            if len(out) > 20_000:
                fh.write("".join(out))
                out.clear()
        fh.write("".join(out) + "]" + middle + "[")
        out.clear()
        for j, (corr, s, e) in enumerate(launches):
            out.append(f'{"," if j else ""}{{"size":64,"kind":3,"operation":53,"correlation_id":'
                       f'{{"internal":{corr},"external":0}},"start_timestamp":{s},"end_timestamp":{e},'
                       f'"thread_id":{pid + j % 4}}}')
            if len(out) > 20_000:
                fh.write("".join(out))
                out.clear()
        fh.write("".join(out) + "]" + middle2 + "[")
        out.clear()
        copies = launches[::50]
        del launches
        for j, (corr, s, e) in enumerate(copies):
            out.append(f'{"," if j else ""}{{"size":80,"kind":13,"operation":1,"thread_id":{pid},'
                       f'"correlation_id":{{"internal":{corr},"external":0}},"start_timestamp":{s},'
                       f'"end_timestamp":{e},"dst_agent_id":{{"handle":37946}},"src_agent_id":'
                       f'{{"handle":37933}},"bytes":{rng.randrange(4096, 1 << 26)}}}')
        fh.write("".join(out) + "]" + tail + "\n")
    return 2 * n_dispatch + len(copies)


#: rocprofv3 kernel_trace.csv bytes per dispatch (measured from the generator's output)
CSV_BYTES_PER_DISPATCH = 430
#: the 7.x kernel_trace.csv header (rocprofv3-formats.md §3.1)
KT_7X = ("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
         "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
         "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
         "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")


def _dispatches(n_dispatch: int, seed: int):
    """Per dispatch (index, gpu, queue, kernel id 1..120, start, end), as
    :func:`write_rocprof_json` draws them: 8 GPUs, 4 queues each, in buffer order."""
    import random

    rng = random.Random(seed)
    n_names = len(kernel_names())
    t = ROCPROF_EPOCH_NS
    for i in range(n_dispatch):
        start = t + rng.randrange(10_000, 50_000)
        yield i, i % 8, 1 + (i // 8) % 4, 1 + rng.randrange(n_names), start, start + rng.randrange(2_000, 400_000)
        t += rng.randrange(20_000, 80_000)


def write_kernel_trace_csv(path: Path, n_dispatch: int, seed: int = 0, gz: bool = False) -> int:
    """Write a rocprofv3 7.x ``kernel_trace.csv`` of one process with ``n_dispatch`` rows on 8
    GPUs (4 queues each); returns the number of rows."""
    names = kernel_names()
    pid = 908
    with open(path, "w") as fh:
        fh.write(",".join(f'"{c}"' for c in KT_7X) + "\n")
        fh.writelines(f'"KERNEL_DISPATCH","Agent {2 + gpu}",{queue},0,{pid + i % 4},{i // 8 + 1},{k},'
                      f'"{names[k - 1]}",{i + 1},{start},{end},{(k % 3) * 512},0,{8 * (1 + k % 32)},0,'
                      f'{48 + k % 16},256,1,1,{256 * (1 + i % 4095)},1,1\n'
                      for i, gpu, queue, k, start, end in _dispatches(n_dispatch, seed))
    return n_dispatch


#: rocpd bytes per dispatch (measured from the generator's output)
ROCPD_BYTES_PER_DISPATCH = 160
_ROCPD_UUID = "0199a1b2_c3d4_7e5f_8a9b_0c1d2e3f4a5b"
#: the tables the rocpd reader queries, with upstream rocpd_tables.sql's columns
_ROCPD_DDL = {
    "rocpd_info_node": "id INTEGER PRIMARY KEY, guid TEXT, hash BIGINT, machine_id TEXT, system_name TEXT, "
                       "hostname TEXT, release TEXT, version TEXT, hardware_name TEXT, domain_name TEXT",
    "rocpd_info_process": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, ppid INTEGER, pid INTEGER, "
                          "init BIGINT, fini BIGINT, start BIGINT, \"end\" BIGINT, command TEXT, "
                          "environment JSONB, extdata JSONB",
    "rocpd_info_thread": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, ppid INTEGER, pid INTEGER, "
                         "tid INTEGER, name TEXT, start BIGINT, \"end\" BIGINT, extdata JSONB",
    "rocpd_info_agent": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, type TEXT, "
                        "absolute_index INTEGER, logical_index INTEGER, type_index INTEGER, uuid INTEGER, "
                        "name TEXT, model_name TEXT, vendor_name TEXT, product_name TEXT, user_name TEXT, "
                        "extdata JSONB",
    "rocpd_info_kernel_symbol": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, "
                                "code_object_id INTEGER, kernel_name TEXT, display_name TEXT, "
                                "kernel_object INTEGER, kernarg_segment_size INTEGER, "
                                "kernarg_segment_alignment INTEGER, group_segment_size INTEGER, "
                                "private_segment_size INTEGER, sgpr_count INTEGER, arch_vgpr_count INTEGER, "
                                "accum_vgpr_count INTEGER, extdata JSONB",
    "rocpd_event": "id INTEGER PRIMARY KEY, guid TEXT, category_id INTEGER, stack_id INTEGER, "
                   "parent_stack_id INTEGER, correlation_id INTEGER, call_stack JSONB, line_info JSONB, "
                   "extdata JSONB",
    "rocpd_kernel_dispatch": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, tid INTEGER, "
                             "agent_id INTEGER, kernel_id INTEGER, dispatch_id INTEGER, queue_id INTEGER, "
                             "stream_id INTEGER, start BIGINT, \"end\" BIGINT, private_segment_size INTEGER, "
                             "group_segment_size INTEGER, workgroup_size_x INTEGER, workgroup_size_y INTEGER, "
                             "workgroup_size_z INTEGER, grid_size_x INTEGER, grid_size_y INTEGER, "
                             "grid_size_z INTEGER, region_name_id INTEGER, event_id INTEGER, extdata JSONB",
}


def write_rocpd_db(path: Path, n_dispatch: int, seed: int = 0, gz: bool = False) -> int:
    """Write a rocpd ``_results.db`` of one run (one process, a CPU and 8 GPU agents, 120
    kernel symbols) with ``n_dispatch`` kernel dispatches, each with its event; returns the
    number of dispatches."""
    import sqlite3

    s, guid, pid = f"_{_ROCPD_UUID}", _ROCPD_UUID.replace("_", "-"), 908
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    for table, cols in _ROCPD_DDL.items():
        conn.execute(f'CREATE TABLE "{table}{s}" ({cols})')

    def insert(table: str, rows) -> None:
        rows = iter(rows)
        first = next(rows, None)
        if first is None:
            return
        sql = f'INSERT INTO "{table}{s}" VALUES ({",".join("?" * len(first))})'
        conn.execute(sql, first)
        conn.executemany(sql, rows)

    insert("rocpd_info_node", [(1, guid, 0, "7a08373dca364ee48cb645887d6f3084", "Linux", "gen-node-0",
                                "5.15.0", "#170", "x86_64", "(none)")])
    insert("rocpd_info_process", [(pid, guid, 1, 1, pid, ROCPROF_EPOCH_NS - 10**9, 0, 0, 0,
                                   "python3 -u train.py", "{}", "{}")])
    insert("rocpd_info_thread", [(pid + j, guid, 1, 1, pid, pid + j, None, None, None, "{}") for j in range(4)])
    agents = [(0, guid, 1, pid, "CPU", 0, 0, 0, 0, "AMD EPYC 9575F", "", "CPU", "AMD EPYC 9575F", "",
               json.dumps({"id": {"handle": 37933}, "gpu_index": -1}))]
    for g in range(8):
        agents.append((2 + g, guid, 1, pid, "GPU", 2 + g, 2 + g, g, 0, "gfx950", "", "AMD",
                       "AMD Instinct MI350X", "", json.dumps({"id": {"handle": 37946 + 13 * g}, "gpu_index": g,
                                                              "cu_count": 256, "wave_front_size": 64,
                                                              "gfx_target_version": 90500})))
    insert("rocpd_info_agent", agents)
    insert("rocpd_info_kernel_symbol", [
        (k, guid, 1, pid, 1, name + ".kd", name, 0, 40, 16, 0, 0, 48 + k % 16, 8 * (1 + k % 32), 0,
         json.dumps({"truncated_kernel_name": name.split("(")[0].split("<")[0]}))
        for k, name in enumerate(kernel_names(), start=1)])
    batch: list[tuple] = []
    events: list[tuple] = []
    for i, gpu, queue, k, start, end in _dispatches(n_dispatch, seed):
        events.append((i + 1, guid, 1, i + 1, 0, 0, "{}", "{}", "{}"))
        batch.append((i + 1, guid, 1, pid, pid + i % 4, 2 + gpu, k, i // 8 + 1, 16 + queue, 0, start, end,
                      0, (k % 3) * 512, 256, 1, 1, 256 * (1 + i % 4095), 1, 1, None, i + 1, "{}"))
        if len(batch) >= 50_000:
            insert("rocpd_event", events)
            insert("rocpd_kernel_dispatch", batch)
            batch.clear()
            events.clear()
    insert("rocpd_event", events)
    insert("rocpd_kernel_dispatch", batch)
    conn.commit()
    conn.close()
    return n_dispatch


#: a child's timed part begins: the file read whole (gunzipped where it is gzip) as ``raw``
_READ = """
import sys, time
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    raw = fh.read()
if raw[:2] == b"\\x1f\\x8b":
    import gzip
    raw = gzip.decompress(raw)
"""

_DECODE = """
import msgspec
class Ev(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
class Doc(msgspec.Struct):
    traceEvents: list[Ev] = []
""" + _READ + """
doc = msgspec.json.decode(raw, type=Doc)
print(len(doc.traceEvents), time.perf_counter() - t0)
"""

#: the same for a rocprofv3 JSON: per dispatch record its times, kernel id, agent and queue
_DECODE_ROCPROF = """
import msgspec
class H(msgspec.Struct, frozen=True):
    handle: int = 0
class Info(msgspec.Struct, frozen=True):
    kernel_id: int = 0
    agent_id: H = H()
    queue_id: H = H()
class D(msgspec.Struct):
    start_timestamp: int = 0
    end_timestamp: int = 0
    dispatch_info: Info = Info()
class B(msgspec.Struct):
    kernel_dispatch: list[D] = []
class P(msgspec.Struct):
    buffer_records: B = msgspec.field(default_factory=B)
class Doc(msgspec.Struct):
    tool: list[P] = msgspec.field(default=[], name="rocprofiler-sdk-tool")
""" + _READ + """
doc = msgspec.json.decode(raw, type=Doc)
print(sum(len(p.buffer_records.kernel_dispatch) for p in doc.tool), time.perf_counter() - t0)
"""

#: the whole file decoded at once with the reader's own typed schema (every field its checks
#: read: ids, args, launch dimensions, ts/dur as number text), the collector off as in the reader
_DECODE_SCHEMA = """
import gc
gc.disable()
from {module} import _DECODER
""" + _READ + """
doc = _DECODER.decode(raw)
print(time.perf_counter() - t0)
"""

#: The least an exact reader of a Kineto trace must do for ``analyze --no-report``'s outputs
#: (kernels.csv, summary.json), the whole file at once. What those outputs read, per event kind:
#: every event's ``ph`` and ``cat`` (which kind it is; the device categories a trace without
#: kernels holds); of GPU events (kernel, memcpy, memset) the name, ``ts`` and ``dur`` in exact
#: ns (statistics, first start and last end, the in-order check) and the lane (``args.device``
#: else ``pid``, ``args.stream`` else ``tid``); of runtime calls ``pid``, ``args.correlation``
#: and whether ``args.grid`` is there (one call per correlation id, the launch first: its pid
#: counts for the host process) and the name (the runtime's flavour); of CPU operators and
#: annotations ``pid``; flows and Python functions nothing past ``ph``/``cat``; and the text of
#: every time the reader reads (GPU events', runtime calls' ``ts``, operators' and profiler
#: steps' ``ts``/``dur``), whose digits below 1 ns summary.json's notes count. Epoch-scale µs
#: with a fraction do not fit a float (multiples of 256 ns at 1.7e18 ns), so ``ts``/``dur`` are
#: number text (``msgspec.Raw``, the cheapest exact capture: ``args`` as Raw and decoded again
#: for GPU and runtime events measured no cheaper) turned into ns by the vectorised parse; the
#: ids are exact ints. And every object's keys checked for a repeat (a JSON decoder keeps the
#: last of ``"dur"`` twice silently): printed as its own line. It prints the CPU seconds of
#: each step; the measured process is the whole child (start, read, steps).
_ORACLE_TORCH = """
import gc
from typing import Any
import msgspec
from pytest_gemmperf.jsonkeys import find_repeated_key
from pytest_gemmperf.traces.jsonnum import exact_ints, us_text_to_ns
gc.disable()  # as the reader: millions of objects and no cycles
RAW = msgspec.Raw(b"")
class Args(msgspec.Struct, gc=False):  # no cycles in decoded JSON: untracked, as the reader's
    device: Any = None
    stream: Any = None
    correlation: Any = None
    grid: msgspec.Raw = RAW
class Ev(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = RAW
    dur: msgspec.Raw = RAW
    args: Args | None = None
class Doc(msgspec.Struct):
    traceEvents: list[Ev] = []
NO_ARGS = Args()
GPU = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
OPS = {"cpu_op", "Operator"}
HOST = OPS | {"user_annotation"}
""" + _READ + """
c0 = time.process_time()
events = msgspec.json.decode(raw, type=Doc).traceEvents
c1 = time.process_time()
kinds = {}
for e in events:
    if e.ph == "X":
        kinds.setdefault(e.cat, []).append(e)
gpu = [e for c in GPU if c in kinds for e in kinds[c]]
rt = [e for c in RUNTIME if c in kinds for e in kinds[c]]
ops = [e for c in OPS if c in kinds for e in kinds[c]]
notes = [e for e in kinds.get("user_annotation", ()) if e.name.startswith("ProfilerStep#")]
ts, s1 = us_text_to_ns([e.ts for e in gpu])
dur, s2 = us_text_to_ns([e.dur for e in gpu])
# the note on ts/dur with digits below 1 ns counts every time the reader reads
rounded = [us_text_to_ns(x)[1] for x in ([e.ts for e in rt], [e.ts for e in ops], [e.dur for e in ops],
                                        [e.ts for e in notes], [e.dur for e in notes])]
names = [e.name for e in gpu]
ga = [e.args or NO_ARGS for e in gpu]
lane = (exact_ints([a.device for a in ga]), exact_ints([e.pid for e in gpu], True),
        exact_ints([a.stream for a in ga]), exact_ints([e.tid for e in gpu], True))
ra = [e.args or NO_ARGS for e in rt]
corr = exact_ints([a.correlation for a in ra])
launch = [len(a.grid) > 0 for a in ra]
rt_pid = exact_ints([e.pid for e in rt], True)
rt_names = [e.name for e in rt[:200]]
host_pid = exact_ints([e.pid for c in HOST if c in kinds for e in kinds[c]], True)
c2 = time.process_time()
del events, kinds, gpu, rt, ops, notes, ga, ra
c3 = time.process_time()
# the array a run of events at a time (the scan of one 4 MB run stays in cache: a third cheaper
# than the whole file at once), cut where the generator starts an event line, and the frame
head = raw.index(b"[", raw.index(b'"traceEvents"')) + 1
tail = raw.rindex(b"]")
hit = find_repeated_key(raw[:head] + raw[tail:])
at = head
while hit is None and at < tail:
    cut = raw.find(b",\\n  {", at + (4 << 20), tail)
    cut = tail if cut < 0 else cut
    hit = find_repeated_key(b"[" + raw[at:cut] + b"]")
    at = cut + 1
c4 = time.process_time()
assert hit is None, hit
print(len(ts), c1 - c0 + c3 - c2, c2 - c1, c4 - c3, file=sys.stderr)  # the wrapper drops stdout
"""

#: the plain read of a kernel_trace.csv: the columns the reader parses, its text columns
#: dictionary-encoded, the whole file at once
_READ_CSV = """
import sys, time
t0 = time.perf_counter()
import pyarrow as pa, pyarrow.csv as pacsv
text = pa.dictionary(pa.int32(), pa.string())
cols = ["Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
        "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size",
        "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y",
        "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]
t = pacsv.read_csv(sys.argv[1], convert_options=pacsv.ConvertOptions(
    include_columns=cols, column_types={"Agent_Id": text, "Kernel_Name": text}))
print(t.num_rows, time.perf_counter() - t0)
"""

#: the plain fetch of a rocpd file's dispatches: the reader's dispatch query, a batch at a time
_FETCH_ROCPD = """
import sqlite3, sys, time
t0 = time.perf_counter()
from pytest_gemmperf.traces.rocpd import _DISPATCH_TABLE_SQL
conn = sqlite3.connect(sys.argv[1])
s = conn.execute("SELECT substr(name, 22) FROM sqlite_master WHERE name LIKE 'rocpd_kernel_dispatch%'").fetchone()[0]
cur = conn.execute(_DISPATCH_TABLE_SQL.format(s=s))
n = 0
while batch := cur.fetchmany(65536):
    n += len(batch)
print(n, time.perf_counter() - t0)
"""

#: per --format: the writer, its bytes a dispatch, the file name, the plain read it is measured
#: against (what it prints as the decode), the reader module whose own schema decodes it whole
FORMATS = {
    "torch": (write_trace, BYTES_PER_DISPATCH, "a.pt.trace.json", _DECODE, "torch_decode"),
    "rocprof-json": (write_rocprof_json, ROCPROF_BYTES_PER_DISPATCH, "a_results.json", _DECODE_ROCPROF,
                     "rocprof_json_schema"),
    "rocprof-csv": (write_kernel_trace_csv, CSV_BYTES_PER_DISPATCH, "gen-node/908_kernel_trace.csv",
                    _READ_CSV, None),
    "rocpd": (write_rocpd_db, ROCPD_BYTES_PER_DISPATCH, "gen-node/908_results.db", _FETCH_ROCPD, None),
}
_PLAIN = {"torch": "typed decode (ph, cat, name, ts, dur)",
          "rocprof-json": "typed decode (start, end, kernel_id, agent, queue)",
          "rocprof-csv": "pyarrow.csv.read_csv, same columns",
          "rocpd": "sqlite3 fetch of the dispatch query"}

_MEASURE = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, wall, ru.ru_maxrss * 1024, ru.ru_utime + ru.ru_stime)
"""


#: ``gemmperf analyze FILE --no-report --jobs 1`` in this process with its stages timed: each
#: wrapped function's own CPU (its thread's, less the wrapped functions it calls) and the
#: process's total; printed as JSON
_STAGES = """
import json, resource, sys, threading, time
from collections import defaultdict
own = defaultdict(float)
inner = []
def wrap(owner, name, label):
    f = getattr(owner, name)
    def g(*a, **k):
        if threading.current_thread() is not threading.main_thread():
            t = time.thread_time()
            try:
                return f(*a, **k)
            finally:
                own[label] += time.thread_time() - t
        t = time.thread_time()
        inner.append(0.0)
        try:
            return f(*a, **k)
        finally:
            d = time.thread_time() - t
            own[label] += d - inner.pop()
            if inner:
                inner[-1] += d
    setattr(owner, name, g)
from pytest_gemmperf import cli
from pytest_gemmperf.commands import analyze_impl
from pytest_gemmperf.traces import jsonstream, torch_decode, torch_frames, torch_trace
ru = resource.getrusage(resource.RUSAGE_SELF)
own["start and imports"] = ru.ru_utime + ru.ru_stime
for owner, name, label in [
        (torch_decode, "find_repeated_key", "repeated-key scan"),
        (torch_decode, "decode_stream", "the read loop's rest (events freed, splitter)"),
        (jsonstream.JsonSplitter, "_next_block", "file blocks"),
        (jsonstream.JsonSplitter, "_more", "file blocks"),
        (jsonstream.JsonSplitter, "_piece_through", "a run's text cut and copied"),
        (jsonstream, "_wrap", "a run's text cut and copied"),
        (jsonstream, "_tokens", "a run's text cut and copied"),
        (torch_decode, "_decode_slim", "msgspec decode"),
        (jsonstream.FreeMemory, "after_run", "heap trims"),
        (jsonstream.FreeMemory, "finish", "heap trims"),
        (torch_decode, "bucket_events", "events bucketed by category"),
        (torch_frames, "_us_field", "ts/dur number text to ns"),
        (torch_trace._Reading, "take", "columns of a run (ids, codes, pid counts)"),
        (torch_trace, "_slim_trace", "after the read: host pid, coded columns, in-order check"),
        (analyze_impl, "analyze", "reduction, statistics"),
        (analyze_impl, "write_outputs", "kernels.csv, summary.json")]:
    wrap(owner, name, label)
# torch_trace calls these by the names it imported
torch_trace.bucket_events = torch_decode.bucket_events
torch_trace.decode_stream = torch_decode.decode_stream
try:
    cli.main(["analyze", *sys.argv[1:], "--no-report", "--jobs", "1"])
except SystemExit:
    pass
ru = resource.getrusage(resource.RUSAGE_SELF)
own["process"] = ru.ru_utime + ru.ru_stime
own["of it: system (page faults, reads)"] = ru.ru_stime
print(json.dumps(own), file=sys.stderr)
"""


def measure_stages(path: Path, out: Path) -> dict[str, float]:
    """:data:`_STAGES` on ``path``: CPU seconds by stage of ``analyze --no-report``."""
    run = subprocess.run([sys.executable, "-c", _STAGES, str(path), "--out", str(out)],
                         capture_output=True, text=True, check=True, cwd=str(REPO),
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(run.stderr.strip().splitlines()[-1])


def measure(cmd: list[str], code: Path = REPO, ok: tuple[int, ...] = (0, 1, 4)) -> dict[str, float]:
    """Wall, peak RSS (bytes) and CPU seconds of ``cmd`` run in a fresh wrapper process, on the
    code of the checkout ``code``; an exit status outside ``ok`` stops the benchmark (a gemmperf
    command's 1, a regression, and 4, undecided with one process a side, are outcomes)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    # run in the checkout: ``python -m`` puts the working directory first on sys.path
    out = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True,
                         env=env, check=True, cwd=str(code)).stdout.split()
    rc, wall, rss, cpu = int(out[0]), float(out[1]), int(out[2]), float(out[3])
    if rc not in ok:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {rc}")
    return {"wall_s": wall, "rss": rss, "cpu_s": cpu}


def measure_oracle(path: Path) -> dict[str, float]:
    """:data:`_ORACLE_TORCH` on ``path``: the whole child (wall, peak RSS, CPU seconds) and its
    steps' CPU seconds (decode and free, the fields, the repeated-key scan; the rest is the
    start and the read)."""
    run = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, "-c", _ORACLE_TORCH, str(path)],
                         capture_output=True, text=True, check=True, cwd=str(REPO),
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    rc, wall, rss, cpu = run.stdout.split()
    if int(rc):
        raise SystemExit(f"the oracle failed on {path}: {run.stderr.strip()[-500:]}")
    wall, rss, cpu = float(wall), int(rss), float(cpu)
    decode, fields, keys = (float(x) for x in run.stderr.split()[-3:])
    return {"wall_s": wall, "rss": rss, "cpu_s": cpu, "decode_cpu_s": decode, "fields_cpu_s": fields,
            "keys_cpu_s": keys, "rest_cpu_s": cpu - decode - fields - keys}


def gemmperf(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest_gemmperf.cli", *args]


#: what ``--report`` compares of the two checkouts' outputs (report.html carries its
#: generation time, so the tables and the summary stand for it)
_REPORT_FILES = ("verdicts.csv", "kernels.csv", "summary.md", "top5_gemm_kernels_time_variance.csv",
                 "top5_gemm_kernels_time_variance_with_timestamps.csv")


def _compare(args: argparse.Namespace, write, a: Path, n: int, gz: bool, d: Path) -> dict[str, float]:
    """``gemmperf compare A B --no-report --jobs 1`` (with ``--report``: with its reports, the
    command's default) of ``a`` and a re-generation of it with other timings (and with
    ``--before``, on that checkout's code: are the outputs the same?)."""
    b = d / "b" / a.name
    b.parent.mkdir(parents=True, exist_ok=True)
    write(b, n, seed=1, gz=gz)
    flags = [] if args.report else ["--no-report"]
    what = "gemmperf compare A B" + ("" if args.report else " --no-report") + ":"
    cmp_ = measure(gemmperf("compare", str(a), str(b), *flags, "--jobs", "1", "--out", str(d / "cmp")))
    print(f"  {what:<38} {cmp_['wall_s']:6.2f} s wall, "
          f"peak RSS {cmp_['rss'] / 2**20:7,.0f} MiB, {cmp_['cpu_s']:.1f} CPU-s")
    if args.before is not None:
        old = measure(gemmperf("compare", str(a), str(b), *flags, "--jobs", "1",
                               "--out", str(d / "cmp_before")), code=args.before)
        files = _REPORT_FILES if args.report else ("verdicts.csv",)
        differ = [f for f in files if _read(d / "cmp" / f) != _read(d / "cmp_before" / f)]
        print(f"  compare before ({args.before}):  {old['wall_s']:6.2f} s wall, "
              f"peak RSS {old['rss'] / 2**20:7,.0f} MiB, {old['cpu_s']:.1f} CPU-s; "
              + (f"{', '.join(differ)} DIFFER" if differ else f"{', '.join(files)} byte-identical"))
    b.unlink()
    return cmp_


def paired_rounds(path: Path, work: Path, rounds: int, before: Path | None) -> list[dict[str, float]]:
    """``rounds`` rounds of the minimal-fields oracle, ``analyze --no-report`` and (with
    ``before``) that checkout's, one after another on ``path``; prints each round's CPU seconds
    and ratios to the oracle's, then their median and the best against the best."""
    out = []
    print(f"  paired rounds (oracle, analyze{', before' if before else ''} alternately), CPU-s:")
    for i in range(rounds):
        r = {"oracle": measure_oracle(path)["cpu_s"],
             "analyze": measure(gemmperf("analyze", str(path), "--no-report", "--jobs", "1",
                                         "--out", str(work / "paired")))["cpu_s"]}
        if before is not None:
            r["before"] = measure(gemmperf("analyze", str(path), "--no-report", "--jobs", "1",
                                           "--out", str(work / "paired-before")), code=before)["cpu_s"]
        out.append(r)
        print(f"    round {i + 1}: " + ", ".join(
            f"{k} {v:.1f}" + ("" if k == "oracle" else f" ({v / r['oracle']:.2f}x)") for k, v in r.items()))
    for k in [k for k in out[0] if k != "oracle"]:
        ratios = [r[k] / r["oracle"] for r in out]
        best = min(r[k] for r in out) / min(r["oracle"] for r in out)
        print(f"    {k} / oracle: paired median {statistics.median(ratios):.2f}x "
              f"(range {min(ratios):.2f}-{max(ratios):.2f}), best to best {best:.2f}x")
    return out


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[50.0, 200.0],
                    help="trace sizes to generate, in MB of JSON (default: 50 200)")
    ap.add_argument("--format", choices=tuple(FORMATS), default="torch",
                    help="a Kineto trace (default), a rocprofv3 JSON, kernel_trace.csv or rocpd .db")
    ap.add_argument("--gzip", action="store_true", help="write the JSON traces gzip-compressed")
    ap.add_argument("--compare", action="store_true", help="also time gemmperf compare A B")
    ap.add_argument("--compare-only", action="store_true",
                    help="time gemmperf compare A B alone (no decode, no analyze)")
    ap.add_argument("--report", action="store_true",
                    help="compare with its reports (the command's default) instead of --no-report")
    ap.add_argument("--dir", default=None, help="where the traces are written (deleted after)")
    ap.add_argument("--before", type=Path, metavar="CHECKOUT", default=None,
                    help="also run analyze on this checkout's code (a change's before)")
    ap.add_argument("--stages", action="store_true",
                    help="(Kineto) also run analyze with its stages timed: CPU seconds by stage")
    ap.add_argument("--paired", type=int, default=0, metavar="N",
                    help="(Kineto) then N rounds of the oracle, analyze and --before's analyze "
                         "alternately, with each round's ratios: one process's CPU time moves "
                         "between runs on a shared or virtual machine, a round's ratio less")
    args = ap.parse_args()
    write, per_dispatch, name, decode, own_schema = FORMATS[args.format]
    gz = args.gzip and args.format in ("torch", "rocprof-json")
    print(f"load: {os.getloadavg()[0]:.2f} (1-min), {os.cpu_count()} cores")
    rows = []
    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    for mb in args.mb:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="gemmperf-bounded-") as d:
            n = int(mb * 1e6 / per_dispatch)
            a = Path(d) / "a" / (name + (".gz" if gz else ""))
            a.parent.mkdir(parents=True)
            t0 = time.perf_counter()
            n_events = write(a, n, gz=gz)
            gen_s = time.perf_counter() - t0
            size = a.stat().st_size
            if args.compare_only:
                print(f"\n{size / 1e6:,.0f} MB {args.format}{' gzip' if gz else ''}: "
                      f"{n_events:,} {'events' if args.format == 'torch' else 'records'}, {n:,} dispatches "
                      f"(generated in {gen_s:.0f} s)")
                rows.append({"mb": size / 1e6, "compare": _compare(args, write, a, n, gz, Path(d))})
                continue
            dec = measure([sys.executable, "-c", decode, str(a)], ok=(0,))
            schema = (None if own_schema is None else
                      measure([sys.executable, "-c", _DECODE_SCHEMA.format(
                          module="pytest_gemmperf.traces." + own_schema), str(a)], ok=(0,)))
            oracle = (measure_oracle(a) if args.format == "torch" else None)
            ana = measure(gemmperf("analyze", str(a), "--no-report", "--jobs", "1",
                                   "--out", str(Path(d) / "out")))
            row = {"mb": size / 1e6, "events": n_events, "dispatches": n, "analyze": ana,
                   "decode": dec, "schema": schema, "oracle": oracle}
            print(f"\n{size / 1e6:,.0f} MB {args.format}{' gzip' if gz else ''}: "
                  f"{n_events:,} {'events' if args.format == 'torch' else 'records'}, {n:,} dispatches "
                  f"(generated in {gen_s:.0f} s)")
            print(f"  {_PLAIN[args.format] + ':':<38} {dec['wall_s']:6.2f} s wall, "
                  f"peak RSS {dec['rss'] / 2**20:7,.0f} MiB, {dec['cpu_s']:.1f} CPU-s")
            if schema is not None:
                print(f"  the reader's own schema, whole file:   {schema['wall_s']:6.2f} s wall, "
                      f"peak RSS {schema['rss'] / 2**20:7,.0f} MiB, {schema['cpu_s']:.1f} CPU-s")
            if oracle is not None:
                print(f"  minimal-fields exact oracle:           {oracle['wall_s']:6.2f} s wall, "
                      f"peak RSS {oracle['rss'] / 2**20:7,.0f} MiB, {oracle['cpu_s']:.1f} CPU-s "
                      f"(decode {oracle['decode_cpu_s']:.1f}, fields {oracle['fields_cpu_s']:.1f}, "
                      f"start and read {oracle['rest_cpu_s']:.1f})")
                print(f"    of which the repeated-key scan:      {oracle['keys_cpu_s']:.1f} CPU-s")
            print(f"  gemmperf analyze --no-report:          {ana['wall_s']:6.2f} s wall, "
                  f"peak RSS {ana['rss'] / 2**20:7,.0f} MiB, {ana['cpu_s']:.1f} CPU-s; "
                  f"wall / plain = {ana['wall_s'] / dec['wall_s']:.2f}, "
                  f"CPU / plain = {ana['cpu_s'] / dec['cpu_s']:.2f}"
                  + ("" if schema is None else f", CPU / own-schema decode = {ana['cpu_s'] / schema['cpu_s']:.2f}")
                  + ("" if oracle is None else f", CPU / oracle = {ana['cpu_s'] / oracle['cpu_s']:.2f}, "
                                               f"wall / oracle = {ana['wall_s'] / oracle['wall_s']:.2f}"))
            if args.before is not None:
                old = measure(gemmperf("analyze", str(a), "--no-report", "--jobs", "1",
                                       "--out", str(Path(d) / "before")), code=args.before)
                row["before"] = old
                same = all((Path(d) / "out" / f).read_bytes() == (Path(d) / "before" / f).read_bytes()
                           for f in ("kernels.csv", "summary.json"))
                print(f"  before ({args.before}):  {old['wall_s']:6.2f} s wall, "
                      f"peak RSS {old['rss'] / 2**20:7,.0f} MiB, {old['cpu_s']:.1f} CPU-s; "
                      f"kernels.csv and summary.json {'byte-identical' if same else 'DIFFER'}")
            if args.stages and args.format == "torch":
                stages = measure_stages(a, Path(d) / "stages")
                row["stages"] = stages
                print("  analyze --no-report by stage (CPU-s):")
                for label, cpu in stages.items():
                    print(f"    {label:<58} {cpu:6.2f}")
            if args.paired and args.format == "torch":
                row["paired"] = paired_rounds(a, Path(d), args.paired, args.before)
            if args.compare:
                row["compare"] = _compare(args, write, a, n, gz, Path(d))
            rows.append(row)
    if len(rows) > 1 and not args.compare_only:
        lo, hi = rows[0], rows[-1]
        growth = hi["analyze"]["rss"] / lo["analyze"]["rss"] - 1
        print(f"\npeak RSS growth of analyze from {lo['mb']:,.0f} MB to {hi['mb']:,.0f} MB: "
              f"{growth:+.1%}")
        if args.before is not None:
            print(f"the same before: {hi['before']['rss'] / lo['before']['rss'] - 1:+.1%}")
    print(f"load after: {os.getloadavg()[0]:.2f} (1-min)")


if __name__ == "__main__":
    main()
