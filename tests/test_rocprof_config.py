"""gemmperf rocprof-config: YAML that parses, follows the jobs: schema, and whose regex matches
exactly the intended kernel names (names full of regex metacharacters)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from conftest import shared_file
from pytest_gemmperf.cli import main
from pytest_gemmperf.commands.rocprof_config_impl import (AORTA_CU_ONLY_COUNTERS, anchored_regex,
                                                          ecma_escape)

META_NAMES = [
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, (anonymous namespace)::Sum>>(T*)",
    "Cijk_Ailk_Bljk_HHS_BH_MT128x128x64_MI32x32x8_SN_1LDSB0_[clone .kd]",
    "kern*plus+question?dot.caret^dollar$pipe|brace{2,3}slash/back\\slash",
    "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
    "a&b 'quoted' \"double\" - = @ # %",
]
NEAR_MISSES = [
    "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)_extra",
    "x ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<8192ul>)",
    "kernnnplus+question?dot.caret^dollar$pipe|brace{2,3}slash/back\\slash",
    "Cijk_Ailk_Bljk_HHS_BH_MT128x128x64_MI32x32x8_SN_1LDSB0_c",
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, (anonymous namespace)::Sum>>(T)",
    "",
]


def _schema_check(doc: dict, schema: dict) -> None:
    """The subset of JSON Schema the rocprofv3 input schema uses: object properties + types."""
    types = {"array": list, "string": str, "boolean": bool, "integer": int, "object": dict}
    assert set(doc) <= set(schema["properties"]), set(doc) - set(schema["properties"])
    for key, value in doc.items():
        spec = schema["properties"][key]
        assert isinstance(value, types[spec["type"]]), key
        if spec["type"] == "array" and "items" in spec and spec["items"].get("type") == "object":
            for item in value:
                _schema_check(item, spec["items"])


def test_escape_matches_each_name_exactly():
    for name in META_NAMES:
        assert re.fullmatch(ecma_escape(name), name)
    rx = re.compile(anchored_regex(META_NAMES))
    for name in META_NAMES:
        assert rx.search(name), name  # rocprofv3 uses regex_search: the anchors make it whole-name
    for other in NEAR_MISSES:
        assert not rx.search(other), other
    # only ECMAScript syntax characters are escaped (identity escapes of letters would change
    # meaning: \d, \w, \b ...)
    assert ecma_escape("abc_<>&,:- 09") == "abc_<>&,:- 09"


def _top_csv(path, names):
    df = pd.DataFrame({"threads": 256, "channel": 28, "rank": range(len(names)), "kernel_name": names,
                       "kernel_time_min_us": 1.0, "kernel_time_max_us": 5.0,
                       "time_diff_us": [10.0 - i for i in range(len(names))]})
    df.to_csv(path, index=False)
    return path


def test_from_csv_writes_jobs_yaml_and_kernel_list(tmp_path, capsys):
    csv = _top_csv(tmp_path / "top5_gemm_kernels_time_variance.csv", META_NAMES + [META_NAMES[0]])
    out = tmp_path / "cfg" / "counters.yaml"
    rc = main(["rocprof-config", "--from", str(csv), "--top-k", "4", "--out", str(out),
               "--rocprof-version", "7.0"])
    assert rc == 0
    doc = yaml.safe_load(out.read_text())
    assert list(doc) == ["jobs"] and len(doc["jobs"]) == 1
    job = doc["jobs"][0]
    assert job["pmc"] == list(AORTA_CU_ONLY_COUNTERS)
    assert job["output_format"] == ["csv"]
    rx = re.compile(job["kernel_include_regex"])
    targets = META_NAMES[:4]  # ranked by time_diff_us, duplicates collapsed, top 4
    assert all(rx.search(n) for n in targets)
    assert not rx.search(META_NAMES[4])
    assert not any(rx.search(n) for n in NEAR_MISSES)
    listed = (tmp_path / "cfg" / "counters_kernel_list.txt").read_text().splitlines()
    assert listed == targets
    assert "4 kernel(s)" in capsys.readouterr().out


def test_schema_of_rocprofv3(tmp_path):
    schema = json.loads(shared_file("rocprofv3/inputs/schemas/rocprofv3_input_schema.json").read_text())
    csv = _top_csv(tmp_path / "t.csv", META_NAMES)
    out = tmp_path / "job.yaml"
    assert main(["rocprof-config", "--from", str(csv), "--out", str(out), "--rocprof-version", "6.4",
                 "--counters", "SQ_WAVES,SQ_BUSY_CU_CYCLES,GRBM_GUI_ACTIVE", "--max-per-pass", "2"]) == 0
    doc = yaml.safe_load(out.read_text())
    _schema_check(doc, schema)
    assert [j["pmc"] for j in doc["jobs"]] == [["SQ_WAVES", "SQ_BUSY_CU_CYCLES"], ["GRBM_GUI_ACTIVE"]]
    assert len({j["kernel_include_regex"] for j in doc["jobs"]}) == 1


def test_rocm_62_gets_metrics_schema(tmp_path, capsys):
    csv = _top_csv(tmp_path / "t.csv", META_NAMES[:2])
    out = tmp_path / "job.yaml"
    assert main(["rocprof-config", "--from", str(csv), "--out", str(out), "--rocprof-version", "6.2"]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc == {"metrics": [{"pmc": list(AORTA_CU_ONLY_COUNTERS)}]}
    # 6.2's filter is --kernel-names on the command line (exact truncated names; C-named
    # kernels keep ".kd" in their truncated name)
    err = capsys.readouterr().err
    assert "--kernel-names reduce_kernel" in err and "_SN_1LDSB0_.kd" in err


def test_from_real_trace(tmp_path):
    src = shared_file("rocprofv3/AMD-AGI_TraceLens/908_results.TRIMMED_DERIVED.json")
    out = tmp_path / "job.json"
    assert main(["rocprof-config", "--from", str(src), "--top-k", "3", "--out", str(out),
                 "--rocprof-version", "7.0"]) == 0
    job = json.loads(out.read_text())["jobs"][0]
    names = (tmp_path / "job_kernel_list.txt").read_text().splitlines()
    assert len(names) == 3 and all(n.startswith("Cijk_") for n in names)
    from pytest_gemmperf.traces.discover import load
    all_names = set(load(src).dispatches["kernel"].astype(str))
    rx = re.compile(job["kernel_include_regex"])
    assert {n for n in all_names if rx.search(n)} == set(names)


@pytest.mark.parametrize("argv, message", [
    (["--from", "missing.csv", "--out", "x.yaml"], "no such file"),
    (["--from", "{csv}", "--out", "x.txt"], "must end in"),
    (["--from", "{bad}", "--out", "x.yaml"], "kernel_name"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, message):
    csv = _top_csv(tmp_path / "t.csv", META_NAMES[:1])
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    argv = [a.format(csv=csv, bad=bad) for a in argv]
    argv = [str(tmp_path / a) if a.endswith((".yaml", ".txt")) else a for a in argv]
    assert main(["rocprof-config", *argv, "--rocprof-version", "7.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
