"""rocprofv3 backend end to end against AMD's real front end of every release line plus the fake
tool library (tests/rocprofv3_double/: realfront.py installs ../shared's rocprofv3.py into a fake
ROCm tree; fake_gpu.py/fake_tool.py play the preloaded tool inside the workload).

Tests that need a front end skip, with the reason, when ../shared is absent; the command-line,
job-file and output-check unit tests run everywhere. Expected headers and messages below are
copied from /work/shared/docs (rocprofv3-formats.md §3, rocprofv3-cli.md §6), not from the
double's own tables, so a drift in the double fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run.process import WorkloadError, live_processes, run_process
from pytest_gemmperf.run.rocprofv3 import (
    CounterConfigError, ProfilerOutputError, ProfilerSetupError, RocprofVersion,
    check_counter_output, check_timing_output, counter_groups, counter_pass_argv,
    counters_unavailable_reason, detect_version, job_file, parse_version_output, pmc_checker,
    profile_point, relevant_log_lines, timing_pass_argv, write_job_file)

from conftest import shared_file

DOUBLE = Path(__file__).resolve().parent / "rocprofv3_double"
sys.path.insert(0, str(DOUBLE))
import realfront  # noqa: E402

APP = [sys.executable, str(DOUBLE / "fake_app.py")]
#: every release folder of ../shared/data/rocprofv3/frontend
VERSIONS = list(realfront.RELEASES)
V = {"6.2.0": RocprofVersion(6, 2, 0), "6.3": RocprofVersion(6, 3, 0),
     "6.4": RocprofVersion(6, 4, 0), "7.0": RocprofVersion(7, 0, 0),
     "develop-2025-08": RocprofVersion(7, 1, 0)}
#: the release whose real front-end runs stay in the inner loop (`pytest -m "not slow"`)
INNER_LOOP_RELEASE = "7.0"


def releases(versions=VERSIONS, inner: str = INNER_LOOP_RELEASE) -> list:
    """``versions`` as parameters of an end-to-end test: each runs AMD's front end and the
    workload as real processes, so one release (``inner``, else the first listed) runs in the
    inner loop and the others are marked ``slow``; ``pytest tests`` runs them all."""
    keep = inner if inner in versions else versions[0]
    return [v if v == keep else pytest.param(v, marks=pytest.mark.slow) for v in versions]


#: header table of each release (develop writes 7.0's)
H = {"6.2.0": "6.2", "6.3": "6.3", "6.4": "6.4", "7.0": "7.0", "develop-2025-08": "7.0"}

KT_HEADER = {  # rocprofv3-formats.md §3.1, verbatim
    "6.2": '"Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"',
    "6.4": '"Kind","Agent_Id","Queue_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"',
    "7.0": '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"',
}
CC_HEADER = {  # rocprofv3-formats.md §3.2, verbatim
    "6.2": '"Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id","Grid_Size","Kernel_Name","Workgroup_Size","LDS_Block_Size","Scratch_Size","VGPR_Count","SGPR_Count","Counter_Name","Counter_Value"',
    "6.4": '"Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id","Grid_Size","Kernel_Id","Kernel_Name","Workgroup_Size","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count","Counter_Name","Counter_Value","Start_Timestamp","End_Timestamp"',
}
CC_HEADER["7.0"] = CC_HEADER["6.4"]
KT_HEADER["6.3"] = KT_HEADER["6.4"]   # formats §3.1: 18 columns in 6.3 and 6.4
CC_HEADER["6.3"] = '"Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id","Grid_Size","Kernel_Id","Kernel_Name","Workgroup_Size","LDS_Block_Size","Scratch_Size","VGPR_Count","SGPR_Count","Counter_Name","Counter_Value","Start_Timestamp","End_Timestamp"'


_TREES: dict[str, Path] = {}


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """release -> fake ROCm tree holding AMD's front end (skips when ../shared is absent)."""
    if not realfront.available():
        pytest.skip(realfront.skip_reason())
    base = tmp_path_factory.mktemp("rocm")
    return {r: realfront.install(r, base / r) for r in realfront.releases()}


def _env(trees, version: str, **extra: str) -> dict[str, str]:
    if version not in trees:
        pytest.skip(f"release folder {version} is absent from {realfront.FRONTEND_DIR}")
    env = dict(os.environ)
    # the front end's bin/ first; `#!/usr/bin/env python3` of the fake avail finds this python
    path = os.pathsep.join([str(trees[version] / "bin"), os.path.dirname(sys.executable),
                            env.get("PATH", "")])
    env.update(PATH=path)
    env.pop("ROCM_PATH", None)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "FAKE_ROCPROFV3_ARCH",
                "FAKE_ROCPROFV3_ZERO_COUNTERS", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "MPI_RANK"):
        env.pop(key, None)
    env.update(extra)
    return env


def _envs_seen(env_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(env_dir.glob("env_*.json"))]


def test_real_aorta_input_yaml_on_70(tmp_path, trees):
    """aorta's rocprof_cu_only.yaml (one job: pmc + kernel_trace + regex) -> pass_1/."""
    src = shared_file("aorta/rocprof_cu_only.yaml")
    out = tmp_path / "out"
    proc = subprocess.run(["rocprofv3", "-i", str(src), "-d", str(out), "-o", "r",
                           "--", *APP, "--kernels", "Cijk_Ailk_Bljk=2", "elementwise_kernel=1"],
                          env=_env(trees, "7.0"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    cc = (out / "pass_1" / "r_counter_collection.csv").read_text().splitlines()
    assert cc[0] == CC_HEADER["7.0"]
    assert all("Cijk_Ailk_Bljk" in row for row in cc[1:])  # regex "(gemm|Cijk_.*)" applied
    assert len(cc) == 1 + 2 * 4                             # 2 dispatches x 4 counters
    assert (out / "pass_1" / "r_kernel_trace.csv").read_text().startswith(KT_HEADER["7.0"])


# --- version detection and command lines ------------------------------------------------------

def test_parse_version_output_7x_and_sdk_only():
    text = "             version: 1.0.0\n        rocm_version: 7.0.2\n"
    assert parse_version_output(text) == (7, 0, 2)
    assert parse_version_output("    version: 0.6.0\n") == (6, 4, 0)
    assert parse_version_output("rocprofv3: error: unrecognized arguments: --version") is None


@pytest.mark.parametrize("version,expected,source", [
    ("6.2.0", (6, 2, 0), ".info/version"), ("6.3", (6, 3, 0), ".info/version"),
    ("6.4", (6, 4, 0), ".info/version"), ("7.0", (7, 0, 0), "--version"),
    ("develop-2025-08", (7, 1, 0), "--version")])
def test_detect_version_with_the_real_front_end(trees, version, expected, source):
    """6.x's argparse rejects --version (exit 2): the tree's .info/version decides; 7.x prints
    rocm_version. Both paths run AMD's own script."""
    env = _env(trees, version)
    proc = subprocess.run(["rocprofv3", "--version"], env=env, capture_output=True, text=True,
                          timeout=60)
    if source == "--version":
        assert proc.returncode == 0 and "rocm_version" in proc.stdout
    else:
        assert proc.returncode == 2 and "unrecognized arguments: --version" in proc.stderr
    v = detect_version("rocprofv3", env)
    assert (v.major, v.minor, v.patch) == expected
    assert source in v.source


def test_detect_version_without_rocprofv3(tmp_path):
    with pytest.raises(ProfilerSetupError, match="not found"):
        detect_version("rocprofv3-does-not-exist", {"PATH": str(tmp_path)})


def test_timing_pass_argv_per_version(tmp_path):
    a62 = timing_pass_argv(V["6.2.0"], tmp_path, ["app"])
    assert a62[-4:] == ["-o", "rank%env{RANK}%_%pid%", "--", "app"]   # 6.2 expands %env{}% too
    a7 = timing_pass_argv(V["7.0"], tmp_path, ["app", "-x"], formats=("csv", "json"))
    assert a7 == ["rocprofv3", "--kernel-trace", "--output-format", "csv", "json", "-d",
                  str(tmp_path), "-o", "rank%env{RANK}%_%pid%", "--", "app", "-x"]
    assert "--pmc" not in a7 and "-i" not in a7
    with pytest.raises(ValueError, match="rocpd"):
        timing_pass_argv(V["6.4"], tmp_path, ["app"], formats=("rocpd",))
    with pytest.raises(ValueError, match="otf2"):
        timing_pass_argv(V["6.2.0"], tmp_path, ["app"], formats=("otf2",))
    assert "otf2" in timing_pass_argv(V["6.3"], tmp_path, ["app"], formats=("otf2",))


def test_job_file_schemas():
    groups = [["SQ_WAVES", "GRBM_COUNT"], ["SQ_INSTS_VALU"]]
    assert job_file(V["6.2.0"], groups, ["Cijk_"]) == {
        "metrics": [{"pmc": ["SQ_WAVES", "GRBM_COUNT"]}, {"pmc": ["SQ_INSTS_VALU"]}]}
    job = job_file(V["6.4"], groups, ["Cijk_", "gemm"], ("csv",))
    assert job["jobs"][0] == {"pmc": ["SQ_WAVES", "GRBM_COUNT"],
                              "kernel_include_regex": "(Cijk_)|(gemm)", "output_format": ["csv"]}
    assert "kernel_include_regex" not in job_file(V["7.0"], groups)["jobs"][1]


def test_write_job_file_yaml_roundtrip(tmp_path):
    job = job_file(V["7.0"], [["SQ_WAVES"]], ["Cijk_"])
    assert yaml.safe_load(write_job_file(job, tmp_path / "j.yaml").read_text()) == job
    with pytest.raises(ValueError):
        write_job_file(job, tmp_path / "j.txt")


def test_counter_groups_with_and_without_pmc_check(tmp_path, trees):
    names = [f"SQ_{n}" for n in ("WAVES", "BUSY_CYCLES", "BUSY_CU_CYCLES", "WAVE_CYCLES",
                                 "INSTS_MFMA", "INSTS_VALU", "INSTS_SALU", "ACTIVE_INST_ANY",
                                 "INSTS_LDS", "INSTS_SMEM")] + ["GRBM_COUNT", "SQ_WAVES"]
    assert counter_groups(names, max_per_pass=5) == [names[:5], names[5:10], ["GRBM_COUNT"]]
    checker = pmc_checker("rocprofv3-avail", _env(trees, "7.0"))
    assert checker is not None
    groups = counter_groups(names, max_per_pass=16, checker=checker)
    assert groups == [names[:8] + ["GRBM_COUNT"], names[8:10]]   # fake SQ block holds 8
    with pytest.raises(CounterConfigError, match="BOGUS_COUNTER"):
        counter_groups(["SQ_WAVES", "BOGUS_COUNTER"], checker=checker)
    assert pmc_checker("rocprofv3-avail", {"PATH": str(tmp_path)}) is None


# --- end to end -------------------------------------------------------------------------------

@pytest.mark.parametrize("version", releases())
def test_profile_point_success(tmp_path, trees, version):
    """torchrun-style workers (RANK exported): timing repeats and one counter pass, per release."""
    env = _env(trees, version, ROCPROF_OUTPUT_FORMAT="rocpd", ROCPROF_KERNEL_FILTER_INCLUDE_REGEX="x")
    env_dir = tmp_path / "envs"
    workload = [*APP, "--workers", "2", "--env-out", str(env_dir),
                "--kernels", "Cijk_Alik_Bljk_HHS=3@20000", "ncclDevKernel_Generic_1=2@50000"]
    res = profile_point({"NCCL_MAX_NCHANNELS": "28", "RCCL_THREADS_PER_BLOCK": "256"}, workload,
                        tmp_path / "pt", counters=["SQ_WAVES", "GRBM_COUNT"],
                        kernel_regexes=["Cijk_"], repeats=2, timeout_s=60, env=env)
    assert (res.version.major, res.version.minor) == (V[version].major, V[version].minor)
    assert res.dropped_env == ["ROCPROF_KERNEL_FILTER_INCLUDE_REGEX", "ROCPROF_OUTPUT_FORMAT"]
    assert [r.result.returncode for r in res.runs] == [0, 0]
    assert res.runs[0].result.pid != res.runs[1].result.pid        # separate processes
    for run in res.runs:
        traces = sorted(run.raw_dir.glob("*_kernel_trace.csv"))
        assert [t.name.split("_")[0] for t in traces] == ["rank0", "rank1"]   # 6.2 included
        for t in traces:
            lines = t.read_text().splitlines()
            assert lines[0] == KT_HEADER[H[version]] and len(lines) == 1 + 5
        assert len(list(run.raw_dir.glob("*_results.json"))) == 3   # launcher writes one too
        assert not list(run.raw_dir.glob("*_results.db"))           # the user's rocpd is gone
    sub = "pmc_1" if version == "6.2.0" else "pass_1"
    files = res.counter_check.files[1]
    assert [f.parent.name for f in files] == [sub, sub]
    rows = files[0].read_text().splitlines()
    assert rows[0] == CC_HEADER[H[version]]
    if version == "6.2.0":   # no regex filter in 6.2 (only exact --kernel-names)
        assert len(rows) == 1 + 5 * 2
    else:
        assert len(rows) == 1 + 3 * 2 and all("Cijk_" in r for r in rows[1:])

    seen = _envs_seen(env_dir)
    timing = [e for e in seen if e.get("ROCPROF_KERNEL_TRACE") == "1"]
    counting = [e for e in seen if e.get("ROCPROF_COUNTER_COLLECTION") == "1"]
    assert len(timing) == 2 * 3 and len(counting) == 3              # 2 repeats x (launcher + 2)
    for e in seen:
        assert e["NCCL_MAX_NCHANNELS"] == "28" and e["RCCL_THREADS_PER_BLOCK"] == "256"
        assert e["ROCPROFILER_LIBRARY_CTOR"] == "1"
        assert e["ROCP_TOOL_LIBRARIES"] == str(trees[version] / realfront.TOOL_LIB)
        assert realfront.TOOL_LIB in e["FAKE_ROCPROFV3_PRELOAD"] and "LD_PRELOAD" not in e
    for e in timing:
        assert e["ROCPROF_OUTPUT_FORMAT"] == "csv,json"
        assert "ROCPROF_COUNTERS" not in e                          # timing runs carry no pmc
        assert Path(e["ROCPROF_OUTPUT_PATH"]).parts[-2:] in (("run0", "raw"), ("run1", "raw"))
        assert e["ROCPROF_OUTPUT_FILE_NAME"] == "rank%env{RANK}%_%pid%"
    for e in counting:
        assert e["ROCPROF_COUNTERS"] == "pmc: SQ_WAVES GRBM_COUNT"
        assert Path(e["ROCPROF_OUTPUT_PATH"]).name == sub
        if version == "6.2.0":
            assert "ROCPROF_KERNEL_FILTER_INCLUDE_REGEX" not in e
        else:
            assert e["ROCPROF_KERNEL_FILTER_INCLUDE_REGEX"] == "Cijk_"
    assert {e.get("RANK") for e in timing} == {None, "0", "1"}


@pytest.mark.parametrize("version", releases())
def test_multi_pass_counters(tmp_path, trees, version):
    env = _env(trees, version)
    groups = [["SQ_WAVES", "SQ_INSTS_VALU"], ["GRBM_COUNT", "GRBM_GUI_ACTIVE"], ["TCC_HIT_sum"]]
    res = profile_point({}, [*APP, "--kernels", "Cijk_X=2"], tmp_path / "pt",
                        counters=[c for g in groups for c in g], kernel_regexes=["Cijk_"],
                        timeout_s=60, env=env, max_counters_per_pass=2,
                        avail_exe="no-such-avail")
    assert res.counter_groups == groups
    sub = "pmc_" if version == "6.2.0" else "pass_"
    for i, group in enumerate(groups, start=1):
        (f,) = res.counter_check.files[i]
        assert f.parent.name == f"{sub}{i}"
        names = {line.split('"')[-2] for line in f.read_text().splitlines()[1:]}  # Counter_Name
        assert names == set(group)


TEMPLATED = "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>(float*)"


@pytest.mark.parametrize("version", releases())
def test_counters_for_exact_kernel_names(tmp_path, trees, version):
    """Mismatches 3 and 6: exact names become ``--kernel-names`` (6.2, truncated) or an escaped,
    anchored regex (>= 6.3); either way only that kernel is counted, including a templated name
    full of regex operators."""
    res = profile_point({}, [*APP, "--kernels", f"{TEMPLATED}=2", f"{TEMPLATED}_x=1", "Cijk_X=1"],
                        tmp_path / "pt", counters=["SQ_WAVES"], kernel_names=[TEMPLATED],
                        timeout_s=60, env=_env(trees, version))
    (f,) = res.counter_check.files[1]
    rows = f.read_text().splitlines()[1:]
    # 6.2 compares the truncated name, which the "_x" variant shares: the closest 6.2 allows
    assert len(rows) == (3 if version == "6.2.0" else 2)
    assert all("reduce_kernel" in r for r in rows)


@pytest.mark.parametrize("version", releases(["6.4", "7.0", "develop-2025-08"]))
def test_unsupported_counter_warns_exits_0_and_fails_clearly(tmp_path, trees, version):
    env = _env(trees, version)
    out = tmp_path / "c"
    job = write_job_file(job_file(V[version], [["SQ_WAVEZ"]]), tmp_path / "job.json")
    res = run_process(counter_pass_argv(V[version], out, job, [*APP, "--kernels", "Cijk_X=1"]),
                      env=env, timeout_s=60, log_path=tmp_path / "c.log")
    assert res.returncode == 0                                      # rocprofv3 says nothing is wrong
    assert not list(out.rglob("*_counter_collection.csv"))
    with pytest.raises(ProfilerOutputError) as err:
        check_counter_output(out, [["SQ_WAVEZ"]], res.log_path)
    text = str(err.value)
    assert "no *_counter_collection.csv" in text
    assert "Unable to find all counters for agent" in text and "Missing: [SQ_WAVEZ]" in text
    # partially known set: the file exists but lacks the unknown counter
    with pytest.raises(ProfilerOutputError, match="counters missing .*SQ_WAVEZ"):
        profile_point({}, [*APP, "--kernels", "Cijk_X=1"], tmp_path / "pt",
                      counters=["SQ_WAVES", "SQ_WAVEZ"], timeout_s=60, env=env,
                      avail_exe="no-such-avail")


@pytest.mark.parametrize("version", releases(["6.2.0", "6.3"]))
def test_unknown_counter_aborts_before_64(tmp_path, trees, version):
    """6.2 and 6.3 abort (glog FATAL); 6.4 only warns (test above): one of 6.3's differences."""
    assert V[version].unknown_counter_aborts and not V["6.4"].unknown_counter_aborts
    with pytest.raises(ProfilerOutputError) as err:
        profile_point({}, [*APP, "--kernels", "Cijk_X=1"], tmp_path / "pt",
                      counters=["SQ_WAVEZ"], timeout_s=60, env=_env(trees, version))
    text = str(err.value)
    assert "Unable to find all counters" in text
    if version == "6.2.0":   # 6.2 runs every pass as a child: the wrapper reports the signal
        assert "died with <Signals.SIGABRT: 6>" in text
    else:                    # one job: exec semantics, the application's own signal
        assert "killed by SIGABRT" in text


def test_too_many_counters_abort(tmp_path, trees):
    env = _env(trees, "7.0")
    sq = ["SQ_WAVES", "SQ_BUSY_CYCLES", "SQ_BUSY_CU_CYCLES", "SQ_WAVE_CYCLES", "SQ_INSTS_MFMA",
          "SQ_INSTS_VALU", "SQ_INSTS_SALU", "SQ_ACTIVE_INST_ANY", "SQ_INSTS_LDS"]
    with pytest.raises(ProfilerOutputError) as err:
        profile_point({}, [*APP, "--kernels", "Cijk_X=1"], tmp_path / "pt", counters=sq,
                      timeout_s=60, env=env, max_counters_per_pass=16, avail_exe="no-such-avail")
    assert "exceeds the capabilities of the hardware" in str(err.value)
    assert "killed by SIGABRT" in str(err.value)                   # single pass: exec semantics
    # multi-pass: the wrapper reports the dead pass, exits 1 and skips the remaining passes
    out = tmp_path / "multi"
    job = write_job_file(job_file(V["7.0"], [sq, ["GRBM_COUNT"]]), tmp_path / "job.json")
    res = run_process(counter_pass_argv(V["7.0"], out, job, [*APP, "--kernels", "Cijk_X=1"]),
                      env=env, timeout_s=60, log_path=tmp_path / "m.log")
    assert res.returncode == 1
    assert any("Fatal error: Command" in ln and "died with <Signals.SIGABRT: 6>" in ln
               for ln in relevant_log_lines(res.log_path))
    assert not (out / "pass_2").exists()


def test_gfx1151_skips_counters_but_keeps_timing(tmp_path, trees):
    env = _env(trees, "7.0", FAKE_ROCPROFV3_ARCH="gfx1151")
    res = profile_point({}, [*APP, "--kernels", "Cijk_X=2"], tmp_path / "pt",
                        counters=["SQ_WAVES"], timeout_s=60, env=env)
    assert res.counters_skipped and "gfx1151" in res.counters_skipped
    assert res.counter_result is None and res.runs[0].files
    # and when the arch is not recognised up front, the aqlprofile abort in the log says it
    out = tmp_path / "c"
    job = write_job_file(job_file(V["7.0"], [["SQ_WAVES"]]), tmp_path / "job.json")
    r = run_process(counter_pass_argv(V["7.0"], out, job, [*APP, "--kernels", "Cijk_X=1"]),
                    env=env, timeout_s=60, log_path=tmp_path / "c.log")
    assert r.returncode == -6
    assert "hsa_iterate_agents" in counters_unavailable_reason(r.log_path)


def test_all_zero_counters_fail(tmp_path, trees):
    env = _env(trees, "6.4", FAKE_ROCPROFV3_ZERO_COUNTERS="1")
    with pytest.raises(ProfilerOutputError, match="every counter is zero"):
        profile_point({}, [*APP, "--kernels", "Cijk_X=2"], tmp_path / "pt",
                      counters=["SQ_WAVES", "GRBM_COUNT"], timeout_s=60, env=env)


def test_timing_output_check_rejects_missing_files(tmp_path):
    (tmp_path / "raw").mkdir()
    with pytest.raises(ProfilerOutputError, match="no \\*_kernel_trace.csv"):
        check_timing_output(tmp_path / "raw")
    (tmp_path / "raw" / "x_kernel_trace.csv").write_text('"Kind","Agent_Id"\n')
    with pytest.raises(ProfilerOutputError, match="no rows"):
        check_timing_output(tmp_path / "raw", formats=("csv",))


@pytest.mark.parametrize("version", releases(["6.2.0", "7.0"]))
def test_workload_crash_is_an_error_with_log_tail(tmp_path, trees, version):
    with pytest.raises(WorkloadError) as err:
        profile_point({}, [*APP, "--crash"], tmp_path / "pt", timeout_s=60,
                      env=_env(trees, version))
    text = str(err.value)
    assert "exit status 1" in text
    assert "illegal memory access" in text and "RuntimeError" in text


@pytest.mark.slow  # a real process left to time out
def test_workload_hang_times_out_and_leaves_nothing(tmp_path, trees):
    pids = tmp_path / "pids.txt"
    env = _env(trees, "7.0")
    detect_version("rocprofv3", env)     # warm the interpreter's caches outside the timeout
    with pytest.raises(WorkloadError, match="timed out") as err:
        profile_point({}, [*APP, "--hang", "--sleeper", "--pids-out", str(pids)], tmp_path / "pt",
                      timeout_s=4.0, grace_s=1.0, env=env)
    result = err.value.result
    assert result.timed_out
    assert live_processes(result.pid) == set()
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2                                           # the app and its sleeper
    assert not [pid for pid in left if _running(pid)]


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting for init to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


LAUNCHERS = ("srun", "openmpi", "mpich")   # fake_srun.py --style


@pytest.mark.parametrize("version", releases())
@pytest.mark.parametrize("style", LAUNCHERS)
def test_rocprofv3_goes_inside_the_launcher_with_per_rank_names(tmp_path, trees, version, style):
    """srun / Open MPI / MPICH mpirun prefix: one rocprofv3 per rank (cli §1), files named by the
    launcher's real rank (mismatch 4: %rank% would name every MPICH rank 0)."""
    launcher = [sys.executable, str(DOUBLE / "fake_srun.py"), "--style", style, "2"]
    res = profile_point({}, [*APP, "--kernels", "Cijk_X=2"], tmp_path / "pt", timeout_s=60,
                        env=_env(trees, version), launcher_prefix=launcher,
                        counters=["SQ_WAVES"], kernel_regexes=["Cijk_"])
    argv = res.runs[0].result.argv
    assert argv[:len(launcher)] == tuple(launcher)
    assert "rocprofv3" in argv and "rank%env{GEMMPERF_RANK}%_%pid%" in argv
    assert "%rank%" not in " ".join(argv)
    traces = sorted(t.name.split("_")[0] for t in res.runs[0].raw_dir.glob("*_kernel_trace.csv"))
    assert traces == ["rank0", "rank1"]
    counted = sorted(f.name.split("_")[0] for f in res.counter_check.files[1])
    assert counted == ["rank0", "rank1"]
    # and the trace reader takes those ranks from the names (the session reads them this way)
    from pytest_gemmperf.traces.discover import load
    ranks = load([res.runs[0].raw_dir]).dispatches["rank"]
    assert sorted(ranks.dropna().unique().tolist()) == [0, 1] and ranks.notna().all()


# --- refused before anything runs (no front end needed) -----------------------------------------

def test_m7_profile_point_refuses_a_bad_user_job_before_running(tmp_path):
    bad = tmp_path / "job.json"
    bad.write_text(json.dumps({"metrics": [{"pmc": ["SQ_WAVES"]}]}))
    with pytest.raises(GemmperfInputError, match="job schema"):
        profile_point({}, ["true"], tmp_path / "pt", version=V["7.0"],
                      exe="no-such-rocprofv3", job_path=bad)
    assert not (tmp_path / "pt" / "run0").exists()


def test_point_env_cannot_set_profiler_variables(tmp_path):
    with pytest.raises(ProfilerSetupError, match="ROCPROF_OUTPUT_FORMAT"):
        profile_point({"ROCPROF_OUTPUT_FORMAT": "rocpd"}, ["true"], tmp_path,
                      version=V["7.0"])
