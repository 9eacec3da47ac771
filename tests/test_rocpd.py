"""rocpd SQLite reader.

No real rocpd ``.db`` is public (rocprofv3-formats.md §5), so these tests build databases in
tmp_path from the documented schema: table and column names of upstream ``rocpd_tables.sql``
(schema 3.x), the per-run ``_<uuid>`` suffix and the values the writer ``generateRocpd.cpp`` stores
(queue/stream id = handle, agent id = node id, symbol id = kernel_id, ``stack_id`` = internal
correlation id, ``display_name`` = formatted name, JSON ``extdata``). The DDL and the ``kernels`` /
``counters_collection`` views below are written for these tests and expose the documented view
columns the reader uses; they are not copies of the upstream files.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.rocpd import read_rocpd_db
from pytest_gemmperf.traces.schema import validate_dispatches

CIJK = "Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB0_AFC0"
UUID_A = "0199a1b2_c3d4_7e5f_8a9b_0c1d2e3f4a5b"
UUID_B = "0199a1b2_c3d4_7e5f_8a9b_ffffeeeedddd"

_DDL = {
    "rocpd_string": "id INTEGER PRIMARY KEY, guid TEXT, string TEXT",
    "rocpd_info_node": "id INTEGER PRIMARY KEY, guid TEXT, hash BIGINT, machine_id TEXT, "
                       "system_name TEXT, hostname TEXT, release TEXT, version TEXT, "
                       "hardware_name TEXT, domain_name TEXT",
    "rocpd_info_process": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, ppid INTEGER, "
                          "pid INTEGER, init BIGINT, fini BIGINT, start BIGINT, \"end\" BIGINT, "
                          "command TEXT, environment JSONB, extdata JSONB",
    "rocpd_info_thread": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, ppid INTEGER, "
                         "pid INTEGER, tid INTEGER, name TEXT, start BIGINT, \"end\" BIGINT, "
                         "extdata JSONB",
    "rocpd_info_agent": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, type TEXT, "
                        "absolute_index INTEGER, logical_index INTEGER, type_index INTEGER, "
                        "uuid INTEGER, name TEXT, model_name TEXT, vendor_name TEXT, "
                        "product_name TEXT, user_name TEXT, extdata JSONB",
    "rocpd_info_queue": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, name TEXT, "
                        "extdata JSONB",
    "rocpd_info_stream": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, name TEXT, "
                         "extdata JSONB",
    "rocpd_info_pmc": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, "
                      "agent_id INTEGER, target_arch TEXT, event_code INT, instance_id INTEGER, "
                      "name TEXT, symbol TEXT, description TEXT, long_description TEXT, "
                      "component TEXT, units TEXT, value_type TEXT, block TEXT, expression TEXT, "
                      "is_constant INTEGER, is_derived INTEGER, extdata JSONB",
    "rocpd_info_kernel_symbol": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, "
                                "code_object_id INTEGER, kernel_name TEXT, display_name TEXT, "
                                "kernel_object INTEGER, kernarg_segment_size INTEGER, "
                                "kernarg_segment_alignment INTEGER, group_segment_size INTEGER, "
                                "private_segment_size INTEGER, sgpr_count INTEGER, "
                                "arch_vgpr_count INTEGER, accum_vgpr_count INTEGER, extdata JSONB",
    "rocpd_event": "id INTEGER PRIMARY KEY, guid TEXT, category_id INTEGER, stack_id INTEGER, "
                   "parent_stack_id INTEGER, correlation_id INTEGER, call_stack JSONB, "
                   "line_info JSONB, extdata JSONB",
    "rocpd_pmc_event": "id INTEGER PRIMARY KEY, guid TEXT, event_id INTEGER, pmc_id INTEGER, "
                       "value REAL, extdata JSONB",
    "rocpd_kernel_dispatch": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, "
                             "tid INTEGER, agent_id INTEGER, kernel_id INTEGER, "
                             "dispatch_id INTEGER, queue_id INTEGER, stream_id INTEGER, "
                             "start BIGINT, \"end\" BIGINT, private_segment_size INTEGER, "
                             "group_segment_size INTEGER, workgroup_size_x INTEGER, "
                             "workgroup_size_y INTEGER, workgroup_size_z INTEGER, "
                             "grid_size_x INTEGER, grid_size_y INTEGER, grid_size_z INTEGER, "
                             "region_name_id INTEGER, event_id INTEGER, extdata JSONB",
}

# Views exposing the documented column names (rocprofv3-formats.md §5 table).
_VIEWS = """
CREATE VIEW kernels AS
SELECT K.id, K.guid, T.tid, K.nid, P.pid, S.display_name AS name,
       A.absolute_index AS agent_abs_index, A.logical_index AS agent_log_index,
       A.type_index AS agent_type_index, A.type AS agent_type, K.kernel_id, K.dispatch_id,
       K.stream_id, K.queue_id, K.start, K."end", K."end" - K.start AS duration,
       K.grid_size_x AS grid_x, K.grid_size_y AS grid_y, K.grid_size_z AS grid_z,
       K.workgroup_size_x AS workgroup_x, K.workgroup_size_y AS workgroup_y,
       K.workgroup_size_z AS workgroup_z, K.group_segment_size AS lds_size,
       K.private_segment_size AS scratch_size, E.stack_id, E.correlation_id AS corr_id
FROM rocpd_kernel_dispatch K
JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
JOIN rocpd_event E ON E.id = K.event_id AND E.guid = K.guid
JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
JOIN rocpd_info_process P ON P.id = K.pid AND P.guid = K.guid
JOIN rocpd_info_thread T ON T.id = K.tid AND T.guid = K.guid;
CREATE VIEW counters_collection AS
SELECT MIN(V.id) AS id, V.guid, K.dispatch_id, K.kernel_id, E.id AS event_id,
       E.correlation_id, E.stack_id, P.pid, K.agent_id, A.absolute_index AS agent_abs_index,
       A.type AS agent_type, I.name AS counter_name, I.id AS counter_id, SUM(V.value) AS value,
       K.start, K."end", S.display_name AS kernel_name
FROM rocpd_pmc_event V
JOIN rocpd_info_pmc I ON I.id = V.pmc_id AND I.guid = V.guid
JOIN rocpd_event E ON E.id = V.event_id AND E.guid = V.guid
JOIN rocpd_kernel_dispatch K ON K.event_id = V.event_id AND K.guid = V.guid
JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
JOIN rocpd_info_process P ON P.id = K.pid AND P.guid = K.guid
GROUP BY V.guid, K.dispatch_id, I.name, K.agent_id;
"""

SYMBOLS = [  # kernel_id, formatted (display) name, truncated name, vgpr, agpr, sgpr
    (7, "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic_1", 64, 0, 96),
    (3, CIJK, CIJK + ".kd", 128, 64, 100),
    (12, "__amd_rocclr_copyBuffer", "__amd_rocclr_copyBuffer.kd", 8, 0, 32),
]


def _run(conn: sqlite3.Connection, uuid: str, pid: int, gpu_node: int, t0: int, *,
         counters: bool = False, extra_dispatch: tuple | None = None) -> None:
    guid = uuid.replace("_", "-")
    s = f"_{uuid}"
    for table, cols in _DDL.items():
        conn.execute(f'CREATE TABLE "{table}{s}" ({cols})')
    ins = lambda t, row: conn.execute(  # noqa: E731
        f'INSERT INTO "{t}{s}" VALUES ({",".join("?" * len(row))})', row)
    ins("rocpd_string", (1, guid, "KERNEL_DISPATCH"))
    ins("rocpd_info_node", (77, guid, 77, "abc123", "Linux", "node-b", "5.15", "#1", "x86_64", ""))
    ins("rocpd_info_process", (pid, guid, 77, 1, pid, t0, t0 + 9_000_000, t0, t0 + 9_000_000,
                               "python3 train.py", "{}", "{}"))
    for tid in (pid, pid + 50):
        ins("rocpd_info_thread", (tid, guid, 77, 1, pid, tid, None, None, None, "{}"))
    for node, typ, tindex in ((0, "CPU", 0), (2, "GPU", 0), (3, "GPU", 1)):
        ext = {"id": {"handle": 30000 + node}, "type": 2 if typ == "GPU" else 1, "node_id": node,
               "name": "gfx942" if typ == "GPU" else "AMD EPYC", "cu_count": 304 if typ == "GPU" else 0,
               "simd_per_cu": 4, "wave_front_size": 64, "num_xcc": 8, "gfx_target_version": 90402,
               "max_engine_clk_fcompute": 2100}
        if typ == "GPU":
            ext["gpu_index"] = tindex
        ins("rocpd_info_agent", (node, guid, 77, pid, typ, node, node, tindex, 0,
                                 ext["name"], "", "AMD",
                                 "AMD Instinct MI300X" if typ == "GPU" else "AMD EPYC", "",
                                 json.dumps(ext)))
    for q in (16, 18, 20):
        ins("rocpd_info_queue", (q, guid, 77, pid, f"Queue {q}", "{}"))
    for kid, disp, trunc, v, a, sg in SYMBOLS:
        ins("rocpd_info_kernel_symbol", (kid, guid, 77, pid, 1, disp + ".kd", disp, 0, 24, 16, 0, 0,
                                         sg, v, a, json.dumps({"kernel_id": kid,
                                                               "formatted_kernel_name": disp,
                                                               "truncated_kernel_name": trunc})))
    dispatches = [  # dispatch_id, kernel_id, queue, stream, tid, start, dur, grid_x, lds
        (1, 12, 16, 0, pid, t0 + 1000, 2840, 512, 0),
        (2, 3, 18, 567, pid, t0 + 5000, 11720, 4096, 32768),
        (3, 7, 20, 565, pid + 50, t0 + 6000, 1_217_193, 256, 4096),
        (4, 3, 18, 567, pid, t0 + 17000, 11000, 4096, 32768),
    ]
    if extra_dispatch:
        dispatches.append(extra_dispatch)
    for did, kid, q, st, tid, start, dur, gx, lds in dispatches:
        ins("rocpd_event", (did, guid, 1, 100 + did, 100 + did, 9000 + did, "{}", "{}", "{}"))
        ins("rocpd_kernel_dispatch", (did, guid, 77, pid, tid, gpu_node, kid, did, q, st, start,
                                      start + dur, 0, lds, 256, 1, 1, gx, 1, 1, None, did, "{}"))
    if counters:
        ins("rocpd_info_pmc", (11, guid, 77, pid, gpu_node, "GPU", 0, 0, "SQ_WAVES", "SQ_WAVES",
                               "waves", "", "rocm", "", "ABS", "SQ", "", 0, 0, "{}"))
        ins("rocpd_info_pmc", (42, guid, 77, pid, gpu_node, "GPU", 0, 0, "GRBM_GUI_ACTIVE",
                               "GRBM_GUI_ACTIVE", "busy", "", "rocm", "", "ABS", "GRBM", "", 0, 0, "{}"))
        # one row per dimension instance; the view / reader sums them per dispatch and counter
        for i, (evt, pmc, val) in enumerate([(2, 11, 4.0), (2, 11, 4.0), (2, 11, 2.0), (2, 42, 1234.0),
                                             (3, 11, 1.0)]):
            ins("rocpd_pmc_event", (i + 1, guid, evt, pmc, val, "{}"))


def _plain_views(conn: sqlite3.Connection, uuid: str) -> None:
    for table in _DDL:
        conn.execute(f'CREATE VIEW "{table}" AS SELECT * FROM "{table}_{uuid}"')
    conn.executescript(_VIEWS)


def _db(tmp_path: Path, runs, views: bool = True, name: str = "node-b/1234_results.db") -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(p)
    for uuid, pid, gpu_node, t0, kw in runs:
        _run(conn, uuid, pid, gpu_node, t0, **kw)
    if views:
        _plain_views(conn, runs[0][0])
    conn.commit()
    conn.close()
    return p


T0 = 1_550_151_853_029_637


def test_single_run_via_kernels_view(tmp_path):
    t = read_rocpd_db(_db(tmp_path, [(UUID_A, 1234, 3, T0, {"counters": True})]))
    d = t.dispatches
    validate_dispatches(d)
    assert t.meta["read_via"] == "kernels view"
    assert len(d) == 4
    assert set(d["source"]) == {"rocpd"} and set(d["host"]) == {"node-b"} and set(d["pid"]) == {1234}
    assert d["agent"].tolist() == [1, 1, 1, 1]  # node 3 -> gpu_index 1
    assert set(d["gpu_arch"]) == {"gfx942"}
    row = d[d.dispatch_id == 3].iloc[0]
    assert row.kernel == "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"
    assert row.kernel_short == "ncclDevKernel_Generic_1"
    assert row.category == "collective"
    assert (row.queue, row.stream, row.thread_id, row.correlation_id) == (20, 565, 1284, 103)
    assert (row.grid_x, row.wg_x, row.lds_bytes, row.vgpr, row.sgpr) == (256, 256, 4096, 64, 96)
    assert row.dur_ns == 1_217_193
    gemm = d[d.kernel_id == 3]
    assert set(gemm["kernel"]) == {CIJK} and set(gemm["kernel_short"]) == {CIJK + ".kd"}
    assert set(gemm["agpr"]) == {64}
    assert t.meta["init_time_ns"] == {1234: T0}


def test_counters_summed(tmp_path):
    c = read_rocpd_db(_db(tmp_path, [(UUID_A, 1234, 3, T0, {"counters": True})])).counters
    wide = c.pivot_table(index="dispatch_id", columns="counter", values="value", observed=True)
    assert wide.loc[2, "SQ_WAVES"] == 10.0 and wide.loc[2, "GRBM_GUI_ACTIVE"] == 1234.0
    assert wide.loc[3, "SQ_WAVES"] == 1.0
    assert set(c["kernel"].astype(str)) == {CIJK, "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"}
    assert set(c["agent"]) == {1} and set(c["correlation_id"]) == {102, 103}


def test_two_runs_read_from_uuid_tables(tmp_path):
    """Views cover one run only; the reader must read both runs' suffixed tables."""
    p = _db(tmp_path, [(UUID_A, 1234, 2, T0, {"counters": True}),
                       (UUID_B, 1235, 3, T0 + 50, {})])
    t = read_rocpd_db(p)
    assert t.meta["read_via"] == "tables"
    assert sorted(t.meta["runs"]) == sorted([UUID_A, UUID_B])
    d = t.dispatches
    validate_dispatches(d)
    assert d.groupby("pid", observed=True)["agent"].first().to_dict() == {1234: 0, 1235: 1}
    assert len(d) == 8 and len(t.counters) == 3
    assert len(t.agents) == 6 and set(t.agents["pid"]) == {1234, 1235}


def test_tables_only_no_views(tmp_path):
    t = read_rocpd_db(_db(tmp_path, [(UUID_A, 1234, 3, T0, {"counters": True})], views=False))
    assert t.meta["read_via"] == "tables"
    a = read_rocpd_db(_db(tmp_path, [(UUID_A, 1234, 3, T0, {"counters": True})], name="v.db"))
    cols = ["dispatch_id", "kernel", "kernel_short", "agent", "queue", "stream", "correlation_id",
            "thread_id", "start_ns", "dur_ns", "vgpr", "host"]
    assert t.dispatches[cols].astype(str).values.tolist() == a.dispatches[cols].astype(str).values.tolist()
    assert t.counters["value"].sum() == a.counters["value"].sum() == 1245.0


def test_agents_table(tmp_path):
    a = read_rocpd_db(_db(tmp_path, [(UUID_A, 1234, 3, T0, {})])).agents
    gpus = a[a["type"] == "GPU"]
    assert gpus["gpu_index"].tolist() == [0, 1] and gpus["node_id"].tolist() == [2, 3]
    assert set(gpus["product"]) == {"AMD Instinct MI300X"} and set(gpus["cu_count"]) == {304}
    assert gpus["handle"].tolist() == [30002, 30003]
    assert a[a["type"] == "CPU"]["gpu_index"].isna().all()


def test_missing_symbol_names_dispatch(tmp_path):
    p = _db(tmp_path, [(UUID_A, 1234, 3, T0, {"extra_dispatch": (9, 555, 18, 567, 1234, T0 + 90000,
                                                                 100, 1, 0)})], views=False)
    with pytest.raises(GemmperfInputError, match="kernel_id 555 is not in rocpd_info_kernel_symbol") as ei:
        read_rocpd_db(p)
    assert ei.value.record == "rocpd_kernel_dispatch dispatch_id 9" and ei.value.path == str(p)


def test_no_dispatches(tmp_path):
    p = tmp_path / "e_results.db"
    conn = sqlite3.connect(p)
    conn.execute(f'CREATE TABLE "rocpd_kernel_dispatch_{UUID_A}" ({_DDL["rocpd_kernel_dispatch"]})')
    for t in ("rocpd_event", "rocpd_info_thread", "rocpd_info_kernel_symbol", "rocpd_info_process",
              "rocpd_info_node", "rocpd_info_agent"):
        conn.execute(f'CREATE TABLE "{t}_{UUID_A}" ({_DDL[t]})')
    conn.commit()
    conn.close()
    with pytest.raises(GemmperfInputError, match="no kernel dispatches"):
        read_rocpd_db(p)


def test_not_sqlite(tmp_path):
    p = tmp_path / "x_results.db"
    p.write_bytes(b"this is not a database" * 10)
    with pytest.raises(GemmperfInputError, match="not an SQLite database") as ei:
        read_rocpd_db(p)
    assert str(p) in str(ei.value)


def test_corrupt_sqlite(tmp_path):
    good = _db(tmp_path, [(UUID_A, 1234, 3, T0, {})])
    data = bytearray(good.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # header magic intact, schema page destroyed
    p = tmp_path / "corrupt_results.db"
    p.write_bytes(bytes(data))
    with pytest.raises(GemmperfInputError, match="rocpd database|not a rocpd") as ei:
        read_rocpd_db(p)
    assert ei.value.path == str(p)


def test_sqlite_but_not_rocpd(tmp_path):
    p = tmp_path / "results.db"  # e.g. a legacy rocprof v1 results.db
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE api (id INTEGER, name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(GemmperfInputError, match="not a rocpd database"):
        read_rocpd_db(p)


def test_opened_read_only(tmp_path):
    p = _db(tmp_path, [(UUID_A, 1234, 3, T0, {})])
    before = p.stat().st_mtime_ns, p.read_bytes()
    read_rocpd_db(p)
    assert (p.stat().st_mtime_ns, p.read_bytes()) == before
    assert not (tmp_path / "node-b" / "1234_results.db-journal").exists()
