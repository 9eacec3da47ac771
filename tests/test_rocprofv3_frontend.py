"""AMD's real rocprofv3 front end (../shared/data/rocprofv3/frontend, one folder per release) as
the oracle for every command line, job file and environment the runner produces.

* conformance: each release x each invocation kind (tests/rocprofv3_double/conformance.py) is
  accepted and hands the tool library exactly the expected ROCPROF_* environment; the committed
  docs/rocprofv3-conformance.md is what scripts/conformance_matrix.py generates now;
* issue 15's mismatches 1-7, each shown on the real code (these tests failed on 34e623b:
  otf2 offered on 6.2, no -o/--kernel-names on 6.2, %rank% under launchers, the caller's
  ROCPROF_OUTPUT_FORMAT passed through, no user-job validation).

Everything here skips with the reason when ../shared is absent.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

DOUBLE = Path(__file__).resolve().parent / "rocprofv3_double"
sys.path.insert(0, str(DOUBLE))
import _fake_common as fc  # noqa: E402
import conformance  # noqa: E402
import realfront  # noqa: E402

from pytest_gemmperf.errors import GemmperfInputError  # noqa: E402
from pytest_gemmperf.run.rocprofv3_cli import (  # noqa: E402
    MPI_RANK_PREFIX, RANK_PREFIX, ProfilerSetupError, check_ecma_regex,
    counter_pass_argv, explain_frontend_error, kernel_include_regex, profiler_env,
    timing_pass_argv, validate_job_file)

pytestmark = pytest.mark.skipif(not realfront.available(), reason=realfront.skip_reason())

V = conformance.VERSION
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("rocm")
    return {r: realfront.install(r, base / r) for r in realfront.releases()}


def _run(trees, release, argv, env=None):
    return realfront.run_inprocess(trees[release], argv, {"PATH": "/usr/bin:/bin", **(env or {})})


# --- conformance matrix ---------------------------------------------------------------------------

@pytest.mark.parametrize("release", list(realfront.RELEASES))
@pytest.mark.parametrize("case", list(conformance.CASES))
def test_conformance(trees, tmp_path, release, case):
    if release not in trees:
        pytest.skip(f"release folder {release} is absent")
    cell = conformance.check(release, case, trees[release], tmp_path)
    assert cell.accepted and cell.env_ok, cell.text()


def test_conformance_document_is_current(trees, tmp_path):
    text, bad = conformance.document(trees, tmp_path)
    assert bad == 0
    doc = REPO / "docs" / "rocprofv3-conformance.md"
    assert doc.read_text() == text, "stale: run python scripts/conformance_matrix.py"


def test_conformance_check_can_fail(trees, tmp_path, monkeypatch):
    """Negative controls: a rejected command line and a differing environment are reported."""
    bad = conformance.Invocation(["rocprofv3", "--kernel-trace", "--output-format", "otf2", "--",
                                  "app"], {}, [{}])
    monkeypatch.setitem(conformance.CASES, "otf2 raw", lambda r: bad)
    cell = conformance.check("6.2.0", "otf2 raw", trees["6.2.0"], tmp_path)
    assert not cell.accepted and "invalid choice: 'otf2'" in cell.detail
    off = conformance.CASES["timing (csv, json)"]("7.0")
    off.env = {"ROCPROF_OUTPUT_FORMAT": "rocpd"}     # what the runner used to pass through
    monkeypatch.setitem(conformance.CASES, "dirty", lambda r: off)
    cell = conformance.check("7.0", "dirty", trees["7.0"], tmp_path)
    assert cell.accepted and not cell.env_ok and "rocpd,csv,json" in cell.detail


# --- mismatch 1: otf2 on 6.2 ----------------------------------------------------------------------

def test_m1_otf2_rejected_by_62_and_never_offered(trees, tmp_path):
    out = _run(trees, "6.2.0", ["--kernel-trace", "--output-format", "otf2", "--", "app"])
    assert out.code == 2 and "invalid choice: 'otf2' (choose from 'csv', 'json', 'pftrace')" \
        in out.stderr
    assert "otf2" not in V["6.2.0"].output_formats
    with pytest.raises(ValueError, match="otf2"):
        timing_pass_argv(V["6.2.0"], tmp_path, ["app"], formats=("otf2",))
    for release in ("6.3", "6.4", "7.0"):       # 6.3 onwards has it
        argv = timing_pass_argv(V[release], tmp_path, ["app"], formats=("otf2",))
        assert _run(trees, release, argv[1:]).accepted


# --- mismatch 2: placeholders on 6.2 --------------------------------------------------------------

def test_m2_62_expands_pid_rank_env_but_not_hostname(trees):
    argv = timing_pass_argv(V["6.2.0"], "/o", ["app"])
    assert argv[argv.index("-o") + 1] == RANK_PREFIX
    (_, env), = _run(trees, "6.2.0", argv[1:]).execs
    assert env["ROCPROF_OUTPUT_FILE_NAME"] == RANK_PREFIX
    v62, v63 = fc.Version(6, 2), fc.Version(6, 3)
    tool_env = {"RANK": "3", "SLURM_PROCID": "5"}
    assert fc.expand(v62, "r%env{RANK}%_%rank%_%pid%_%hostname%", 42, 1, tool_env, []) == \
        "r3_5_42_%hostname%"
    assert "%hostname%" not in fc.expand(v63, "%hostname%/%pid%", 42, 1, tool_env, [])


# --- mismatch 3: --kernel-names on 6.2 ------------------------------------------------------------

def test_m3_62_kernel_names_on_the_command_line(trees, tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"metrics": [{"pmc": ["SQ_WAVES"]}]}))
    argv = counter_pass_argv(V["6.2.0"], "/o", job, ["app"],
                             kernel_names=[conformance.TEMPLATED, conformance.CNAME])
    out = _run(trees, "6.2.0", argv[1:])
    assert out.accepted
    (_, env), = out.execs
    assert env["ROCPROF_KERNEL_NAMES"] == f"reduce_kernel,{conformance.CNAME}.kd"
    assert env["ROCPROF_COUNTERS"] == "pmc: SQ_WAVES"
    # 6.3+ take names as an escaped regex inside the job, not as --kernel-names
    assert "--kernel-names" not in counter_pass_argv(V["6.3"], "/o", job, ["app"],
                                                     kernel_names=[conformance.CNAME])
    with pytest.raises(ProfilerSetupError, match="commas"):
        counter_pass_argv(V["6.2.0"], "/o", job, ["app"], kernel_names=["a,b"])


# --- mismatch 4: %rank% under launchers -----------------------------------------------------------

@pytest.mark.parametrize("release", ["6.2.0", "6.4", "7.0"])
def test_m4_rank_placeholder_is_0_for_every_mpich_rank(release):
    """The tool's %rank% ignores PMI_RANK (and 7.x reads MPI_LOCALRANKID, a node-local id), so
    the runner names files by the rank RANK_SHIM exports instead."""
    v = fc.parse_version(realfront.RELEASES[release][0])
    for rank in (1, 5):
        mpich = {"PMI_RANK": str(rank), "PMI_SIZE": "8", "MPI_LOCALRANKID": str(rank % 4)}
        named = fc.expand(v, "rank%rank%", 1, 1, mpich, [])
        assert named == ("rank" + str(rank % 4) if v.major >= 7 else "rank0")
        assert conformance.shim_rank(mpich) == str(rank)
    assert "%rank%" not in MPI_RANK_PREFIX and "GEMMPERF_RANK" in MPI_RANK_PREFIX
    assert conformance.shim_rank({"SLURM_PROCID": "3"}) == "3"
    assert conformance.shim_rank({"OMPI_COMM_WORLD_RANK": "2", "SLURM_PROCID": "0"}) == "2"
    assert conformance.shim_rank({}) == ""


# --- mismatch 5: the caller's ROCPROF_OUTPUT_FORMAT -----------------------------------------------

@pytest.mark.parametrize("release", ["6.2.0", "6.4", "7.0"])
def test_m5_inherited_output_format_is_appended_to_so_the_runner_removes_it(trees, release):
    argv = timing_pass_argv(V[release], "/o", ["app"])[1:]
    user = {"ROCPROF_OUTPUT_FORMAT": "rocpd", "ROCPROF_KERNEL_FILTER_INCLUDE_REGEX": "x"}
    (_, raw), = _run(trees, release, argv, user).execs
    assert raw["ROCPROF_OUTPUT_FORMAT"] == "rocpd,csv,json"      # the front end appends
    clean, dropped = profiler_env({**user, "HOME": "/h"})
    assert dropped == sorted(user) and clean == {"HOME": "/h"}
    (_, env), = _run(trees, release, argv, clean).execs
    assert env["ROCPROF_OUTPUT_FORMAT"] == "csv,json"
    assert "ROCPROF_KERNEL_FILTER_INCLUDE_REGEX" not in env


# --- mismatch 6: name-derived regexes -------------------------------------------------------------

def test_m6_names_are_escaped_for_ecmascript(trees, tmp_path):
    name = conformance.TEMPLATED
    assert re.search(name, name) is None                  # raw: "(", "*" are operators
    rx = kernel_include_regex((), [name, conformance.CNAME])
    assert re.search(rx, name) and re.search(rx, conformance.CNAME)
    assert not re.search(rx, name + "_x") and not re.search(rx, "x" + conformance.CNAME)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"jobs": [{"pmc": ["SQ_WAVES"], "kernel_include_regex": rx,
                                             "output_format": ["csv"]}]}))
    (_, env), = _run(trees, "7.0", ["-i", str(job), "-d", "/o", "--", "app"]).execs
    assert env["ROCPROF_KERNEL_FILTER_INCLUDE_REGEX"] == rx      # reaches the tool unchanged
    for py_only in ("(?P<k>gemm)", "(?i)gemm", r"gemm\Z"):
        with pytest.raises(ProfilerSetupError, match="Python-only"):
            check_ecma_regex(py_only)


# --- mismatch 7: wrong-schema and conflicting job files -------------------------------------------

def test_m7_wrong_schema_dies_in_the_front_end_and_reads_as_one_line(trees, tmp_path):
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"metrics": [{"pmc": ["SQ_WAVES"]}]}))
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"jobs": [{"pmc": ["SQ_WAVES"]}]}))
    out = _run(trees, "7.0", ["-i", str(metrics), "--", "app"])
    assert out.code == 1 and "Fatal error: 'jobs'" in out.stderr
    out = _run(trees, "6.2.0", ["-i", str(jobs), "--", "app"])
    assert out.code == 1 and "KeyError: 'metrics'" in out.stderr   # uncaught in parse_yaml
    assert "wrong job schema" in explain_frontend_error(out.stderr)
    with pytest.raises(GemmperfInputError) as err:
        validate_job_file(V["7.0"], metrics)
    assert str(err.value).startswith(str(metrics)) and "\n" not in str(err.value)
    assert "`metrics:` job schema, but rocprofv3 7.0 reads `jobs:`" in str(err.value)
    with pytest.raises(GemmperfInputError, match="`jobs:` job schema, but rocprofv3 6.2"):
        validate_job_file(V["6.2.0"], jobs)
    assert validate_job_file(V["6.2.0"], metrics) == [["SQ_WAVES"]]


@pytest.mark.parametrize("release", ["6.3", "6.4", "7.0"])
def test_m7_conflicting_job_value_is_caught_first(trees, tmp_path, release):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"jobs": [{"pmc": ["SQ_WAVES"], "output_file": "mine"}]}))
    out = _run(trees, release, ["-i", str(job), "-o", RANK_PREFIX, "--", "app"])
    assert out.code == 1 and "conflicting value for output_file" in out.stderr
    assert explain_frontend_error(out.stderr).startswith("the job file sets output_file")
    with pytest.raises(GemmperfInputError, match="jobs\\[1\\] sets output_file = 'mine'"):
        validate_job_file(V[release], job, cli={"output_file": RANK_PREFIX})
    # the runner's own jobs never conflict: format only in the job, never on the command line
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"jobs": [{"pmc": ["SQ_WAVES"], "output_format": ["csv"]}]}))
    argv = counter_pass_argv(V[release], "/o", ok, ["app"])
    assert "--output-format" not in argv and _run(trees, release, argv[1:]).accepted
