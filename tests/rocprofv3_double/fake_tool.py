"""Fake rocprofiler-sdk tool library: what ``librocprofiler-sdk-tool.so`` does inside each
profiled process, reduced to what the runner depends on.

It is "loaded" when ``FAKE_ROCPROFV3_PRELOAD`` (the front end's ``LD_PRELOAD``, moved there by
``exec_stub.py``) names a ``librocprofiler-sdk-tool.so``; the ROCm tree it lives in gives the
release (``<root>/.info/version``), as the real library is built per release. Configuration is
read from the ``ROCPROF_*`` environment the way the C++ tool reads it (``cpp/`` excerpts:
``config.hpp``/``config.cpp``, ``output_key.cpp``, ``format_path.cpp``, ``output_stream.cpp``):

* ``ROCPROF_OUTPUT_PATH`` (default cwd), ``ROCPROF_OUTPUT_FILE_NAME`` (default ``<pid>`` on 6.2,
  ``%hostname%/%pid%`` from 6.3), both placeholder-expanded per process; files are
  ``<path>/<prefix>_<name>``;
* ``ROCPROF_OUTPUT_FORMAT``: upper-cased tokens split on ``, ; :``; CSV when none is given;
* ``ROCPROF_KERNEL_TRACE``, ``ROCPROF_STATS``, ``ROCPROF_COUNTER_COLLECTION`` + ``ROCPROF_COUNTERS``
  (``pmc: A B``), ``ROCPROF_TRUNCATE_KERNELS``;
* kernel filters for counters: ``ROCPROF_KERNEL_NAMES`` (6.2: comma-separated, exact match on the
  truncated name), ``ROCPROF_KERNEL_FILTER_INCLUDE_REGEX``/``_EXCLUDE_REGEX`` (>= 6.3,
  ``regex_search``).

Failure modes (rocprofv3-cli.md §6.1): an unknown counter aborts at the first dispatch on 6.2 and
6.3 (glog FATAL) and only warns from 6.4 (no counter file when none is left); more counters per
hardware block than one pass holds aborts (``Could not construct profile cfg``); a consumer RDNA
arch (``FAKE_ROCPROFV3_ARCH=gfx1151``) aborts inside aqlprofile. A process killed by a signal
writes nothing.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3

import _fake_common as fc

TOOL_NAME = "librocprofiler-sdk-tool.so"


def loaded_version(env) -> fc.Version | None:
    """Release of the preloaded fake tool library, or None when it is not preloaded."""
    for entry in env.get("FAKE_ROCPROFV3_PRELOAD", "").split(":"):
        if os.path.basename(entry).startswith(TOOL_NAME):
            root = os.path.dirname(os.path.dirname(os.path.dirname(entry)))
            try:
                with open(os.path.join(root, ".info", "version")) as fh:
                    return fc.parse_version(fh.read())
            except OSError:
                return None
    return None


def requested_counters(env) -> list[str]:
    if env.get("ROCPROF_COUNTER_COLLECTION") != "1":
        return []
    text = env.get("ROCPROF_COUNTERS", "")
    text = text.split("pmc:", 1)[1] if "pmc:" in text else text
    return fc.split_counters(text)


def first_dispatch(v: fc.Version, env) -> tuple[list[str], list[str], bool]:
    """(stderr lines, counters that will be collected, abort?) at the first kernel dispatch,
    where the tool builds its counter profile."""
    counters = requested_counters(env)
    if not counters:
        return [], [], False
    arch = fc.gpu_arch()
    glog = "20260112 16:56:23.465165 {pid}"
    if arch in fc.COUNTERLESS_ARCHS:
        return ["Error Calling hsa_iterate_agents: HSA_STATUS_ERROR: A generic error has occurred.",
                "*** SIGABRT received by PID {pid} ***", "    hsa_ven_amd_aqlprofile_get_info",
                "    rocprofiler::aql::set_profiler_active_on_queue(...)"], [], True
    found = [c for c in counters if fc.bare(c) in fc.CATALOG]
    missing = [c for c in counters if fc.bare(c) not in fc.CATALOG]
    lines: list[str] = []
    if missing:
        text = (f"Unable to find all counters for agent 1 (gpu-0, {arch}) in "
                f"[{', '.join(counters)}]. Found: [{', '.join(found)}]")
        if v.key < (6, 4):   # LOG(FATAL) until 324c57ede (2025-01-16, SDK 0.6.0 = 6.4)
            return [f"F{glog} tool.cpp:854] {text}", "*** Check failure stack trace: ***"], [], True
        lines.append(f"W{glog} tool.cpp:1183] {text}. Missing: [{', '.join(missing)}]")
    if found and fc.over_limit([fc.bare(c) for c in found]):
        lines.append(f"F{glog} tool.cpp:412] Could not construct profile cfg failed with error "
                     "code 38: Request exceeds the capabilities of the hardware to collect")
        return lines, [], True
    return lines, [fc.bare(c) for c in found], False


def formats(env) -> set[str]:
    raw = env.get("ROCPROF_OUTPUT_FORMAT", "CSV").upper()
    toks = {t for t in re.split(r"[,;:\s]+", raw) if t}
    return {t.lower() for t in toks} or {"csv"}


def truncate(name: str) -> str:
    """The SDK's ``truncated_kernel_name``: the base name without return type, namespaces,
    template arguments and parameters; a C-named kernel (no parameter list, e.g. ``Cijk_*``)
    keeps its ``.kd`` suffix (real 6.x/7.x ``*_results.json`` in ../shared/data show both)."""
    if "(" not in name:
        for suffix in ("[clone .kd]", ".kd"):
            name = name[:-len(suffix)].rstrip() if name.endswith(suffix) else name
        return name + ".kd"
    depth, cut = 0, len(name)
    for i in range(len(name) - 1, -1, -1):      # the last top-level parameter list
        if name[i] == ")":
            depth += 1
        elif name[i] == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    head, depth, out = name[:cut], 0, []
    for ch in head:
        depth += (ch == "<") - (ch == ">")
        if depth == 0 and ch not in "<>":
            out.append(ch)
    return "".join(out).strip().split(" ")[-1].rsplit("::", 1)[-1]


def counter_filter(v: fc.Version, env):
    """Predicate on the formatted kernel name: which dispatches get counters."""
    if v.key == (6, 2):
        names = {n for n in env.get("ROCPROF_KERNEL_NAMES", "").split(",")
                 if re.search(r"[A-Za-z0-9_]", n)}
        return (lambda k: truncate(k) in names) if names else (lambda k: True)
    inc = re.compile(env.get("ROCPROF_KERNEL_FILTER_INCLUDE_REGEX") or ".*")
    exc_text = env.get("ROCPROF_KERNEL_FILTER_EXCLUDE_REGEX", "")
    exc = re.compile(exc_text) if exc_text else None
    return lambda k: bool(inc.search(k)) and not (exc is not None and exc.search(k))


def output_base(v: fc.Version, env, pid: int, ppid: int, argv: list[str]) -> str:
    out_path = env.get("ROCPROF_OUTPUT_PATH") or os.getcwd()
    default = str(pid) if v.key == (6, 2) else "%hostname%/%pid%"
    prefix = env.get("ROCPROF_OUTPUT_FILE_NAME") or default
    return os.path.join(fc.expand(v, out_path, pid, ppid, env, argv),
                        fc.expand(v, prefix, pid, ppid, env, argv))


def write_process(v: fc.Version, env, pid: int, ppid: int, argv: list[str], disp: list[dict],
                  collected: list[str]) -> None:
    """Every output file of one process, as the tool writes them at exit."""
    base = output_base(v, env, pid, ppid, argv)
    os.makedirs(os.path.dirname(base) or ".", exist_ok=True)
    fmts = formats(env)
    arch = fc.gpu_arch()
    n_gpus = max(1, int(env.get("FAKE_ROCPROFV3_NUM_GPUS", "1")))
    node = 1 + int(env.get("LOCAL_RANK", "0") or 0) % n_gpus
    agent = f"Agent {node}" if v.major >= 7 else node
    key, ckey = fc.header_key(v), fc.header_key(v, "counter")
    trunc = env.get("ROCPROF_TRUNCATE_KERNELS") == "1"

    def shown(kernel: str) -> str:
        return truncate(kernel) if trunc else kernel

    kernel_ids: dict[str, int] = {}
    for d in disp:
        kernel_ids.setdefault(d["kernel"], len(kernel_ids) + 1)
    rows = []
    for i, d in enumerate(disp, start=1):
        name, kid = shown(d["kernel"]), kernel_ids[d["kernel"]]
        (gx, gy, gz), (wx, wy, wz) = d["grid"], d["wg"]
        if key == (6, 2):
            rows.append(["KERNEL_DISPATCH", agent, 1, kid, name, i, d["start_ns"], d["end_ns"],
                         0, 0, wx, wy, wz, gx, gy, gz])
        elif key == (6, 4):
            rows.append(["KERNEL_DISPATCH", agent, 1, d["tid"], i, kid, name, i, d["start_ns"],
                         d["end_ns"], 0, 0, wx, wy, wz, gx, gy, gz])
        else:
            rows.append(["KERNEL_DISPATCH", agent, 1, 0, d["tid"], i, kid, name, i, d["start_ns"],
                         d["end_ns"], 0, 0, 128, 0, 32, wx, wy, wz, gx, gy, gz])

    counter_rows = []
    if collected:
        keep = counter_filter(v, env)
        zero = env.get("FAKE_ROCPROFV3_ZERO_COUNTERS") == "1"
        for i, d in enumerate(disp, start=1):
            name = shown(d["kernel"])
            if not keep(name):
                continue
            grid = d["grid"][0] * d["grid"][1] * d["grid"][2]
            wg = d["wg"][0] * d["wg"][1] * d["wg"][2]
            for c in sorted(collected):
                value = 0 if zero else (grid // 64) * (1 + len(c) % 7) + i
                if ckey == (6, 2):
                    counter_rows.append([i, i, agent, 1, pid, d["tid"], grid, name, wg, 0, 0, 128,
                                         32, c, int(value)])
                elif ckey == (6, 3):
                    counter_rows.append([i, i, agent, 1, pid, d["tid"], grid,
                                         kernel_ids[d["kernel"]], name, wg, 0, 0, 128, 32, c,
                                         float(value), d["start_ns"], d["end_ns"]])
                else:
                    counter_rows.append([i, i, agent, 1, pid, d["tid"], grid,
                                         kernel_ids[d["kernel"]], name, wg, 0, 0, 128, 0, 32, c,
                                         float(value), d["start_ns"], d["end_ns"]])

    def write(suffix: str, text) -> None:
        with open(f"{base}_{suffix}", "wb" if isinstance(text, bytes) else "w") as fh:
            fh.write(text)

    if "csv" in fmts:
        write("agent_info.csv", fc.csv_text(fc.AGENT_INFO_HEADER, fc.agent_info_rows(arch, n_gpus)))
        if rows and env.get("ROCPROF_KERNEL_TRACE") == "1":
            write("kernel_trace.csv", fc.csv_text(fc.KERNEL_TRACE_HEADER[key], rows))
            if env.get("ROCPROF_STATS") == "1":
                durs = [d["end_ns"] - d["start_ns"] for d in disp]
                write("kernel_stats.csv", fc.csv_text(fc.STATS_HEADER, _stats(disp, shown)))
                write("domain_stats.csv", fc.csv_text(fc.STATS_HEADER, [[
                    "KERNEL_DISPATCH", len(durs), sum(durs), sum(durs) / len(durs), 100.0,
                    min(durs), max(durs), 0.0]]))
        if counter_rows:
            write("counter_collection.csv", fc.csv_text(fc.COUNTER_HEADER[ckey], counter_rows))
    if "json" in fmts:
        write("results.json", json.dumps(_json_doc(v, pid, argv, disp, kernel_ids, arch, node,
                                                   collected)))
    if "rocpd" in fmts and v.major >= 7:
        con = sqlite3.connect(f"{base}_results.db")
        con.execute("PRAGMA user_version = 1")
        con.close()
    if "pftrace" in fmts:
        write("results.pftrace", b"")
    if "otf2" in fmts and v.key >= (6, 3):
        write("results.otf2", b"")


def _stats(disp: list[dict], shown) -> list[list]:
    by: dict[str, list[int]] = {}
    for d in disp:
        by.setdefault(shown(d["kernel"]), []).append(d["end_ns"] - d["start_ns"])
    total = sum(sum(v) for v in by.values())
    out = []
    for name, durs in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        mean = sum(durs) / len(durs)
        sd = (sum((x - mean) ** 2 for x in durs) / len(durs)) ** 0.5
        out.append([name, len(durs), sum(durs), float(mean), 100.0 * sum(durs) / total,
                    min(durs), max(durs), float(sd)])
    return out


def _json_doc(v, pid, argv, disp, kernel_ids, arch, node, collected) -> dict:
    handle = 37946 + node
    dispatches = []
    for i, d in enumerate(disp, start=1):
        item = {"size": 184, "kind": 11, "operation": 2, "thread_id": d["tid"],
                "correlation_id": {"internal": i, "external": 0},
                "start_timestamp": d["start_ns"], "end_timestamp": d["end_ns"],
                "dispatch_info": {"size": 72, "agent_id": {"handle": handle},
                                  "queue_id": {"handle": 1}, "kernel_id": kernel_ids[d["kernel"]],
                                  "dispatch_id": i, "private_segment_size": 0,
                                  "group_segment_size": 0,
                                  "workgroup_size": dict(zip("xyz", d["wg"])),
                                  "grid_size": dict(zip("xyz", d["grid"]))}}
        if v.major >= 7:
            item["stream_id"] = {"handle": 0}
        dispatches.append(item)
    symbols = [{"size": 0, "kernel_id": 0, "code_object_id": 0, "kernel_name": "",
                "formatted_kernel_name": "", "demangled_kernel_name": "", "truncated_kernel_name": ""}]
    for name, kid in kernel_ids.items():
        symbols.append({"size": 96, "kernel_id": kid, "code_object_id": 1,
                        "kernel_name": f"{name}.kd", "formatted_kernel_name": name,
                        "demangled_kernel_name": name, "truncated_kernel_name": truncate(name),
                        "group_segment_size": 0, "private_segment_size": 0, "sgpr_count": 32,
                        "arch_vgpr_count": 128, "accum_vgpr_count": 0})
    kinds = [{"kind": "NONE", "operations": []} for _ in range(11)]
    kinds.append({"kind": "KERNEL_DISPATCH", "operations": ["KERNEL_DISPATCH_NONE",
                                                           "KERNEL_DISPATCH_ENQUEUE",
                                                           "KERNEL_DISPATCH_COMPLETE"]})
    product = fc.agent_info_rows(arch, 1)[1][fc.AGENT_INFO_HEADER.index("Product_Name")]
    agents = [{"size": 0, "id": {"handle": 1}, "type": 1, "name": "CPU", "node_id": 0,
               "logical_node_id": 0, "gpu_index": -1},
              {"size": 0, "id": {"handle": handle}, "type": 2, "name": arch,
               "product_name": product, "node_id": node, "logical_node_id": node,
               "gpu_index": node - 1, "cu_count": 304, "wave_front_size": 64}]
    proc = {"metadata": {"pid": pid, "init_time": disp[0]["start_ns"] - 1000 if disp else 0,
                         "fini_time": disp[-1]["end_ns"] + 1000 if disp else 0},
            "agents": agents,
            "counters": [{"name": c, "agent_id": {"handle": handle}} for c in collected],
            "strings": {"buffer_records": kinds},
            "kernel_symbols": symbols,
            "buffer_records": {"kernel_dispatch": dispatches, "hip_api": [], "hsa_api": [],
                               "marker_api": [], "memory_copy": [], "scratch_memory": []},
            "callback_records": {"counter_collection": []}}
    if v.major >= 7:
        proc["metadata"]["command"] = argv
    return {"rocprofiler-sdk-tool": [proc]}
