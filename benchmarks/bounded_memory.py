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

For each size it prints the file size, events and dispatches, and

* ``analyze``: ``gemmperf analyze FILE --no-report --jobs 1`` in a child process: its wall time
  and peak RSS (``getrusage(RUSAGE_CHILDREN)`` of a fresh wrapper process, so the figure is
  the analyze process's own maximum resident set);
* ``decode``: a child process that reads the file and decodes ``traceEvents`` into a typed
  ``msgspec.Struct`` of (ph, cat, name, ts, dur) (rocprofv3: the dispatch records' start, end,
  kernel id, agent and queue): its wall time and peak RSS;
* ``own schema``: the whole file decoded at once with the reader's own msgspec schema (every
  field its checks read): what an exact reader cannot do without, in time;
* ``compare`` (``--compare``): ``gemmperf compare A B --no-report --jobs 1`` of two traces of
  that size (the second a re-generation with other timings), wall and peak RSS; with
  ``--before`` also on that checkout's code, and whether the two ``verdicts.csv`` are
  byte-identical; ``--compare-only`` measures compare alone (no decode or analyze);
* ``before`` (``--before CHECKOUT``): the same ``analyze`` on another checkout's code (a
  change's before, in the same run and under the same load), and whether its ``kernels.csv``
  and ``summary.json`` are byte-identical to this checkout's.

Usage: python benchmarks/bounded_memory.py [--mb 100 400 1200] [--format torch|rocprof-json]
       [--gzip] [--compare | --compare-only] [--dir DIR] [--before CHECKOUT]

Needs free disk of about the sizes summed (twice with ``--compare``) in DIR (default: the
system temporary directory).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
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

#: the oracle of an exact reader: the whole file decoded at once with the reader's own typed
#: schema (every field its checks read: ids, args, launch dimensions, ts/dur as number text)
_DECODE_SCHEMA = """
from {module} import _DECODER
""" + _READ + """
doc = _DECODER.decode(raw)
print(time.perf_counter() - t0)
"""

_MEASURE = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, wall, ru.ru_maxrss * 1024, ru.ru_utime + ru.ru_stime)
"""


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


def gemmperf(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest_gemmperf.cli", *args]


def _compare(args: argparse.Namespace, write, a: Path, n: int, suffix: str, d: Path) -> dict[str, float]:
    """``gemmperf compare A B --no-report --jobs 1`` of ``a`` and a re-generation of it with
    other timings (and with ``--before``, on that checkout's code: are the verdicts the same?)."""
    b = d / f"b{suffix}"
    write(b, n, seed=1, gz=args.gzip)
    cmp_ = measure(gemmperf("compare", str(a), str(b), "--no-report", "--jobs", "1", "--out", str(d / "cmp")))
    print(f"  gemmperf compare A B --no-report:      {cmp_['wall_s']:6.2f} s wall, "
          f"peak RSS {cmp_['rss'] / 2**20:7,.0f} MiB, {cmp_['cpu_s']:.1f} CPU-s")
    if args.before is not None:
        old = measure(gemmperf("compare", str(a), str(b), "--no-report", "--jobs", "1",
                               "--out", str(d / "cmp_before")), code=args.before)
        same = (d / "cmp" / "verdicts.csv").read_bytes() == (d / "cmp_before" / "verdicts.csv").read_bytes()
        print(f"  compare before ({args.before}):  {old['wall_s']:6.2f} s wall, "
              f"peak RSS {old['rss'] / 2**20:7,.0f} MiB, {old['cpu_s']:.1f} CPU-s; "
              f"verdicts.csv {'byte-identical' if same else 'DIFFER'}")
    b.unlink()
    return cmp_


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[50.0, 200.0],
                    help="trace sizes to generate, in MB of JSON (default: 50 200)")
    ap.add_argument("--format", choices=("torch", "rocprof-json"), default="torch",
                    help="a Kineto trace (default) or a rocprofv3 JSON")
    ap.add_argument("--gzip", action="store_true", help="write the traces gzip-compressed")
    ap.add_argument("--compare", action="store_true", help="also time gemmperf compare A B")
    ap.add_argument("--compare-only", action="store_true",
                    help="time gemmperf compare A B alone (no decode, no analyze)")
    ap.add_argument("--dir", default=None, help="where the traces are written (deleted after)")
    ap.add_argument("--before", type=Path, metavar="CHECKOUT", default=None,
                    help="also run analyze on this checkout's code (a change's before)")
    args = ap.parse_args()
    rocprof = args.format == "rocprof-json"
    write, per_dispatch, decode = ((write_rocprof_json, ROCPROF_BYTES_PER_DISPATCH, _DECODE_ROCPROF)
                                   if rocprof else (write_trace, BYTES_PER_DISPATCH, _DECODE))
    print(f"load: {os.getloadavg()[0]:.2f} (1-min), {os.cpu_count()} cores")
    rows = []
    for mb in args.mb:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="gemmperf-bounded-") as d:
            n = int(mb * 1e6 / per_dispatch)
            suffix = ("_results.json" if rocprof else ".pt.trace.json") + (".gz" if args.gzip else "")
            a = Path(d) / f"a{suffix}"
            t0 = time.perf_counter()
            n_events = write(a, n, gz=args.gzip)
            gen_s = time.perf_counter() - t0
            size = a.stat().st_size
            if args.compare_only:
                print(f"\n{size / 1e6:,.0f} MB {args.format}{' gzip' if args.gzip else ''}: "
                      f"{n_events:,} {'records' if rocprof else 'events'}, {n:,} dispatches "
                      f"(generated in {gen_s:.0f} s)")
                rows.append({"mb": size / 1e6, "compare": _compare(args, write, a, n, suffix, Path(d))})
                continue
            dec = measure([sys.executable, "-c", decode, str(a)], ok=(0,))
            schema = measure([sys.executable, "-c", _DECODE_SCHEMA.format(
                module="pytest_gemmperf.traces." + ("rocprof_json_schema" if rocprof else "torch_decode")), str(a)],
                ok=(0,))
            ana = measure(gemmperf("analyze", str(a), "--no-report", "--jobs", "1",
                                   "--out", str(Path(d) / "out")))
            row = {"mb": size / 1e6, "events": n_events, "dispatches": n, "analyze": ana,
                   "decode": dec, "schema": schema}
            print(f"\n{size / 1e6:,.0f} MB {args.format}{' gzip' if args.gzip else ''}: "
                  f"{n_events:,} {'records' if rocprof else 'events'}, {n:,} dispatches "
                  f"(generated in {gen_s:.0f} s)")
            what = ("(start, end, kernel_id, agent, queue)" if rocprof
                    else "(ph, cat, name, ts, dur)")
            print(f"  typed decode {what}: {dec['wall_s']:6.2f} s wall, "
                  f"peak RSS {dec['rss'] / 2**20:7,.0f} MiB, {dec['cpu_s']:.1f} CPU-s")
            print(f"  the reader's own schema, whole file:   {schema['wall_s']:6.2f} s wall, "
                  f"peak RSS {schema['rss'] / 2**20:7,.0f} MiB, {schema['cpu_s']:.1f} CPU-s")
            print(f"  gemmperf analyze --no-report:          {ana['wall_s']:6.2f} s wall, "
                  f"peak RSS {ana['rss'] / 2**20:7,.0f} MiB, {ana['cpu_s']:.1f} CPU-s; "
                  f"wall / decode = {ana['wall_s'] / dec['wall_s']:.2f}, "
                  f"CPU / decode = {ana['cpu_s'] / dec['cpu_s']:.2f}, "
                  f"CPU / own-schema decode = {ana['cpu_s'] / schema['cpu_s']:.2f}")
            if args.before is not None:
                old = measure(gemmperf("analyze", str(a), "--no-report", "--jobs", "1",
                                       "--out", str(Path(d) / "before")), code=args.before)
                row["before"] = old
                same = all((Path(d) / "out" / f).read_bytes() == (Path(d) / "before" / f).read_bytes()
                           for f in ("kernels.csv", "summary.json"))
                print(f"  before ({args.before}):  {old['wall_s']:6.2f} s wall, "
                      f"peak RSS {old['rss'] / 2**20:7,.0f} MiB, {old['cpu_s']:.1f} CPU-s; "
                      f"kernels.csv and summary.json {'byte-identical' if same else 'DIFFER'}")
            if args.compare:
                row["compare"] = _compare(args, write, a, n, suffix, Path(d))
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
