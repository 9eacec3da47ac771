"""No secret is stored: what gemmperf writes (point.json, run.json, logs, baselines, history,
reports) never holds the value of a secret-named variable or command-line option, while the
workload itself still receives the real values.

The end-to-end test plants random secrets in the inherited environment, in ``profile(env=)``,
as command-line arguments (``--token X``, ``--api-key=X``, ``HF_TOKEN=X``, an ``env``
wrapper) and as a bare argument, runs a recording session and a gating session on the CPU
stand-in workload, then ``baseline refresh``, ``history record``, ``analyze`` and ``compare``
with their reports, and searches every file written (raw bytes, decompressed gzip, the text of
parquet and xlsx files) for every secret.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import secrets
import string
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from gemmperf_pytester_support import FAKE, PLUGIN_ARGS, gp  # noqa: F401  (fixture)
from pytest_gemmperf.cli import main as cli_main
from pytest_gemmperf.history.store import HistoryStore, RunInfo
from pytest_gemmperf.run.process import WorkloadError, require_success, run_process
from pytest_gemmperf.run.results import write_point_json
from pytest_gemmperf.pytest_glue.point import recorded_env
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import BaselineRecord

pytest_plugins = ["pytester"]

REDACTED = "<redacted>"

#: inherited variables: the issue's names, then the patterns in other places, cases and prefixes
#: that the old recorder kept (NCCL_, HSA_, OMP_, GPU_, GEMMPERF_...)
INHERITED_SECRETS = ("AMD_API_KEY", "TORCH_HUB_TOKEN", "CUDA_LICENSE_KEY", "ROCM_PASSWORD",
                     "NCCL_AUTH_COOKIE", "HSA_private_key", "OMP_Passwd", "GPU_CREDENTIALS",
                     "RCCL_SECRET_SAUCE", "GEMMPERF_AUTH", "HIP_PRIVATE_BLOB", "MKL_Token")
#: variables the test sets through profile(env=): recorded, but their values redacted
PROFILE_SECRETS = ("HF_TOKEN", "NCCL_IB_PRIVATE_PATH", "my_api_key", "OMP_SECRET")
#: command-line forms, each one or two arguments (the stand-in workload reads them back)
ARG_FORMS = (("--token", "{v}"), ("--api-key={v}",), ("HF_HUB_TOKEN={v}",), ("--db-password", "{v}"))


def _secret() -> str:
    return "s3cr3t" + secrets.token_hex(12)


def _sha(v: str) -> str:
    return hashlib.sha256(v.encode()).hexdigest()


WRAPPER = '''
"""Checks that the real secrets arrived, records their digests, strips them, runs the stand-in."""
import hashlib, json, os, re, runpy, sys

pattern = re.compile("TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|PRIVATE", re.I)
seen = {"env": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in os.environ.items()
                if pattern.search(k) and v.startswith("s3cr3t")}, "args": []}
rest, args = [], iter(sys.argv[1:])
for a in args:
    if a in ("--token", "--db-password"):
        a = next(args)
    elif "=" in a and pattern.search(a.split("=", 1)[0]):
        a = a.split("=", 1)[1]
    elif not a.startswith("s3cr3t"):
        rest.append(a)
        continue
    seen["args"].append(hashlib.sha256(a.encode()).hexdigest())
with open(os.environ["SECRETS_SEEN"], "w") as fh:
    json.dump(seen, fh)
for k in [k for k in os.environ if pattern.search(k)]:
    del os.environ[k]  # the stand-in writes NCCL_/HSA_/OMP_ variables it saw into the results
sys.argv = [FAKE] + rest
runpy.run_path(FAKE, run_name="__main__")
'''

TEST_FILE = '''
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28], threads=[256], kernels=[r"^aten::mm$"])
def test_secret_sweep(gemmperf):
    result = gemmperf.profile({command!r}, repeats=2, env={env!r})
    gemmperf.assert_no_regression(result)
'''


def _file_texts(path: Path) -> list[bytes]:
    """The bytes of a file and every text it holds in a decoded form."""
    data = path.read_bytes()
    out = [data]
    if data[:2] == b"\x1f\x8b":
        out.append(gzip.decompress(data))
    if data[:4] == b"PAR1":
        df = pd.read_parquet(io.BytesIO(data))
        out.append(df.astype(str).to_csv().encode())
        out.append(str(pq.read_metadata(io.BytesIO(data)).metadata).encode())
    if data[:2] == b"PK":
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            out.extend(z.read(n) for n in z.namelist())
    return out


def _leaks(roots: list[Path], values: dict[str, str]) -> list[str]:
    found = []
    for root in roots:
        for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            for blob in _file_texts(f):
                found += [f"{name} in {f}" for name, v in values.items() if v.encode() in blob]
    return sorted(set(found))


@pytest.mark.parametrize("form", ["argv", "string"])
def test_no_secret_value_is_written_anywhere(gp, pytester, monkeypatch, form):  # noqa: F811
    inherited = {n: _secret() for n in INHERITED_SECRETS}
    profile_env = {n: _secret() for n in PROFILE_SECRETS}
    arg_values = [_secret() for _ in ARG_FORMS]
    bare = _secret()  # a token given as a bare argument, its variable name nowhere on the line
    wrapped = _secret()  # `env WANDB_API_KEY=... python ...`
    for name, v in inherited.items():
        monkeypatch.setenv(name, v)
    seen_file = pytester.path / "seen.json"
    monkeypatch.setenv("SECRETS_SEEN", str(seen_file))
    monkeypatch.setenv("BARE_API_TOKEN", bare)  # known to the runner only through its name
    wrapper = pytester.path / "secret_workload.py"
    wrapper.write_text(f"FAKE = {str(FAKE)!r}\n" + WRAPPER)
    args = [part.format(v=v) for form_parts, v in zip(ARG_FORMS, arg_values) for part in form_parts]
    argv = ["env", f"WANDB_API_KEY={wrapped}", sys.executable, str(wrapper), "--dispatches", "40",
            *args, bare]
    command = argv if form == "argv" else " ".join(argv)
    pytester.makepyfile(test_gpsweep=TEST_FILE.format(command=command, env=profile_env))

    run_args = ["--gemmperf-history=hist", "--gemmperf-report-dir=report", "--gemmperf-confirm=0"]
    gp(*run_args, results="res1").assert_outcomes(passed=1)  # records the baseline
    first_seen = json.loads(seen_file.read_text())
    gated = gp(*run_args, "--gemmperf-threshold=50%", results="res")  # gates against it
    gated.assert_outcomes(passed=1)
    gated.stdout.no_fnmatch_line("*recorded one at*")

    # the workload received every real value
    all_env = {**inherited, **profile_env, "WANDB_API_KEY": wrapped, "BARE_API_TOKEN": bare}
    assert first_seen["env"] == {k: _sha(v) for k, v in all_env.items()}
    assert sorted(first_seen["args"]) == sorted(_sha(v) for v in [*arg_values, bare])

    root = pytester.path
    res = root / "res"
    assert cli_main(["baseline", "refresh", "--from", str(res), "--baseline-dir", str(root / "base"),
                     "--jobs", "1"]) == 0
    assert cli_main(["history", "record", "--history", str(root / "hist"), "--run-id", "ci-7",
                     str(res)]) == 0
    assert cli_main(["analyze", "--out", str(root / "analysis"), "--jobs", "1", str(res)]) == 0
    # a run is recorded once: res is already in hist as ci-7, so compare appends to a store of its own
    assert cli_main(["compare", "--out", str(root / "compared"), "--jobs", "1", "--threshold", "50%",
                     "--history", str(root / "hist-compared"), "--run-id", "ci-8",
                     str(root / "base"), str(res)]) in (0, 1, 4)  # 4: a point undecided (--undecided skip)

    written = [root / d for d in ("res1", "res", "base", "hist", "hist-compared", "report", "analysis",
                                  "compared")]
    assert all(d.is_dir() for d in written), [d for d in written if not d.is_dir()]
    for d in ("report", "analysis", "compared"):
        names = {p.name for p in (root / d).rglob("*")}
        assert {"report.html", "report.xlsx", "summary.md"} <= names, (d, names)
    planted = {**all_env, **{f"arg{i}": v for i, v in enumerate(arg_values)}}
    assert _leaks(written, planted) == []

    # the records still say which variables were set and that a secret was there
    point = json.loads(next(res.rglob("point.json")).read_text())
    assert point["env"]["HF_TOKEN"] == REDACTED and point["env"]["NCCL_AUTH_COOKIE"] == REDACTED
    assert "AMD_API_KEY" not in point["env"]  # not a performance variable: not recorded at all
    assert REDACTED in json.dumps(point["resolved_command"])


@pytest.mark.parametrize("name", [*INHERITED_SECRETS, *PROFILE_SECRETS, "x_token_y", "Cookie", "PASSWD",
                                  "GITHUB_PRIVATE_DEPLOY", "NCCL_CREDENTIAL", "OAUTH"])
def test_recorded_environment_never_holds_a_secret_value(name):
    value = _secret()
    inherited = {name: value, "HOME": "/home/ci", "NCCL_DEBUG": "INFO", "HSA_XNACK": "1",
                 "AMD_SERIALIZE_KERNEL": "3", "SLACK_WEBHOOK_URL": "https://hooks/" + value}
    recorded = recorded_env(inherited, {})
    assert value not in json.dumps(recorded)
    # the performance knobs are still there; unrelated variables are not recorded
    assert recorded["NCCL_DEBUG"] == "INFO" and recorded["HSA_XNACK"] == "1"
    assert recorded["AMD_SERIALIZE_KERNEL"] == "3"
    assert "HOME" not in recorded and "SLACK_WEBHOOK_URL" not in recorded
    # what the point itself sets is always recorded, its secret-named values redacted
    set_by_point = recorded_env(inherited, {name: value, "OMP_NUM_THREADS": "4"})
    assert set_by_point[name] == REDACTED and set_by_point["OMP_NUM_THREADS"] == "4"


COMMAND_CASES = [
    ["python", "w.py", "--token", "{v}"],
    ["python", "w.py", "--api-key={v}"],
    ["python", "w.py", "-password", "{v}", "--n", "3"],
    ["env", "HF_TOKEN={v}", "python", "w.py"],
    ["python", "w.py", "auth.token={v}"],
    ["sh", "-c", "python w.py --secret {v} && echo done"],
    ["python", "w.py", "--Private_Key", "{v}"],
    ["python", "w.py", "{v}"],  # bare: only its variable's name (in the environment) marks it
]


@pytest.mark.parametrize("case", COMMAND_CASES, ids=lambda c: " ".join(c[:4]))
def test_command_lines_in_logs_and_errors_are_redacted(tmp_path, monkeypatch, case):
    value = _secret()
    monkeypatch.setenv("DEPLOY_TOKEN", value)  # a CI job's token, inherited by everything
    argv = [sys.executable, "-c", "import sys; sys.exit(3)", *[a.format(v=value) for a in case]]
    env = {"PATH": "/usr/bin:/bin", "DEPLOY_TOKEN": value}
    log = tmp_path / "logs" / "run.log"
    res = run_process(argv, env=env, timeout_s=30, log_path=log)
    assert res.returncode == 3
    assert value not in log.read_text() and REDACTED in log.read_text()
    with pytest.raises(WorkloadError) as info:
        require_success(res, "timing run 0", 5)
    assert value not in str(info.value)
    # point.json written through the results writer, with the command and the error text
    write_point_json(tmp_path, {"command": argv, "resolved_command": argv, "error": str(info.value),
                                "env": env, "node_commands": [argv, argv]})
    assert value not in (tmp_path / "point.json").read_text()


def _records_with(value: str) -> dict:
    return {"points": {"ch28": {"env": {"HF_TOKEN": value, "NCCL_ALGO": "Ring"},
                                "command": ["python", "w.py", "--token", value]}},
            "run": {"argv": ["-p", "x", f"--api-key={value}"], "SOME_AUTH": value}}


def test_baseline_and_history_metadata_are_redacted_even_for_old_records(tmp_path):
    value = _secret()
    samples = pd.DataFrame({"point": ["ch28"] * 4, "kernel": ["k"] * 4, "metric": ["dur_ns"] * 4,
                            "unit": ["u0", "u0", "u1", "u1"], "value": [1.0, 2.0, 3.0, 4.0]})
    store = BaselineStore(tmp_path / "base")
    # a record written before redaction existed keeps its metadata through a merge
    store.save(BaselineRecord(test_id="t.py::test_x", hw_key="gfx942-x", samples=samples,
                              meta=_records_with(value)), merge=True)
    store.save(BaselineRecord(test_id="t.py::test_x", hw_key="gfx942-x", samples=samples,
                              meta={"points": {"ch56": {"env": {}}}}), merge=True)
    hs = HistoryStore(str(tmp_path / "hist"))
    hs.append(pd.DataFrame({"test": ["t"], "point": ["p"], "kernel": ["k"], "metric": ["dur_ns"],
                            "unit": ["u"], "value": [1.0]}),
              RunInfo(run_id="r1", time=pd.Timestamp("2024-01-01", tz="UTC"), hw_key="gfx942-x",
                      meta=_records_with(value)))
    assert _leaks([tmp_path], {"secret": value}) == []
    loaded = store.load("t.py::test_x", "gfx942-x")
    assert loaded.meta["points"]["ch28"]["env"] == {"HF_TOKEN": REDACTED, "NCCL_ALGO": "Ring"}
    assert loaded.hw_key == "gfx942-x"  # a key that merely ends in "key" is no secret


@pytest.mark.parametrize("name", ["HF_TOKEN", "NCCL_AUTH_COOKIE", "aws_secret_access_key"])
def test_redaction_does_not_make_environments_differ(name):
    # imported here so that, before redact.py existed, this test fails alone
    from pytest_gemmperf.redact import comparable_env, redact_env

    old = {name: _secret(), "NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "8"}
    new = {**redact_env(old)}
    other_secret = {**old, name: _secret()}
    assert comparable_env(old) == comparable_env(new) == comparable_env(other_secret)
    assert comparable_env(old) != comparable_env({**old, "NCCL_ALGO": "Tree"})  # real changes still count


# ------------------------------------------------------------------ secrets the workload prints

#: the words that make a name a secret's (redact.SECRET_NAME)
SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE")
#: characters of the random values: none is changed by JSON, XML, HTML, CSV or shell quoting, so
#: a value written anywhere is found by a plain search
VALUE_CHARS = string.ascii_letters + string.digits + "-_.~+@:"


def random_secret_name(rng: random.Random) -> str:
    word = rng.choice(SECRET_WORDS)
    word = "".join(c.lower() if rng.random() < 0.3 else c for c in word)
    head = "GP" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=rng.randint(0, 5)))
    tail = "".join(rng.choices(string.ascii_uppercase + "_", k=rng.randint(0, 4)))
    return f"{head}_{word}{tail}"


def random_secret_value(rng: random.Random, length: int) -> str:
    """A value of ``length`` characters. One shorter than 8 holds a ``~``, which nothing the
    product writes does, so that a hit is a leak and not a four-letter word of a report."""
    chars = rng.choices(VALUE_CHARS, k=length)
    if length < 8:
        chars[rng.randrange(length)] = "~"
    return "".join(chars)


PRINTING_WORKLOAD = '''
"""Prints every secret it was given (environment, arguments) on stdout and stderr, then fails
with them in its message (a FAIL file) or runs the stand-in workload."""
import json, os, runpy, sys

spec = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "spec.json")))
values = [os.environ[n] for n in spec["env_names"]] + sys.argv[1:]
print("stdout:", *values, flush=True)
print("stderr:", *values, file=sys.stderr, flush=True)
for n in spec["env_names"]:
    del os.environ[n]  # the stand-in records some prefixes it sees: the workload's own file
if os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "FAIL")):
    raise RuntimeError("cannot log in with " + " ".join(values))
sys.argv = [FAKE, "--dispatches", "20"]
runpy.run_path(FAKE, run_name="__main__")
'''

PRINTING_TEST = '''
import json
import sys
from pathlib import Path
from pytest_gemmperf import sweep

SPEC = json.loads((Path(__file__).parent / "spec.json").read_text())

@sweep(threads=[1], kernels=[r"^aten::mm$"])
def test_prints(gemmperf):
    command = [sys.executable, str(Path(__file__).parent / "printing_workload.py"), *SPEC["argv"]]
    gemmperf.assert_no_regression(gemmperf.profile(command, repeats=2, env=SPEC["profile_env"]))
'''


def _fresh_process(monkeypatch) -> None:
    """Each pytest or gemmperf run is a process of its own: forget the values an earlier run in
    this process has met (redact.remember), so each run is checked on what it knows itself."""
    from pytest_gemmperf import redact

    monkeypatch.setattr(redact, "_KNOWN", set(), raising=False)


_SHOWS_SECRETS = """
import os, sys

def test_shows(record_property):
    values = [os.environ[n] for n in sorted(os.environ) if n.startswith("GPX_")]
    print("stdout:", *values)
    print("stderr:", *values, file=sys.stderr)
    record_property("seen", " ".join(values))
    assert not values, "login failed for " + " ".join(values)
"""


def test_pytest_shows_no_known_secret_in_failures_captured_output_or_junit(pytester, monkeypatch):
    """What pytest itself shows of an item (its failure text, captured stdout and stderr, its
    properties) in the terminal and in JUnit XML passes through the same redaction."""
    rng = random.Random(secrets.randbits(32))
    values = {f"GPX_{i}_{rng.choice(SECRET_WORDS)}": random_secret_value(rng, length) for i, length in
              enumerate((4, 7, rng.randint(8, 64)))}
    for name, v in values.items():
        monkeypatch.setenv(name, v)
    pytester.makepyfile(test_shows=_SHOWS_SECRETS)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-rA", "--junitxml=j.xml",
                                          "-o", "junit_logging=all", "--tb=long")
    result.assert_outcomes(failed=1)
    shown = "\n".join(result.outlines + result.errlines)
    junit = (pytester.path / "j.xml").read_text()
    assert "login failed for" in shown and "stdout:" in junit
    assert [n for n, v in values.items() if v in shown or v in junit] == [], values


@pytest.mark.slow  # three profiled sessions and four commands
def test_secrets_printed_by_the_workload_are_never_written_or_shown(gp, pytester, monkeypatch, capsys):  # noqa: F811
    """Random secret names and values (4 to 64 characters) in the inherited environment, in
    ``profile(env=)`` and in the command line (``--opt V``, ``--opt=V``, ``NAME=V``), printed by
    the workload on stdout and stderr and, when it fails, in its error: no file a recording, a
    gating and a failing session, a refresh, a history record, an analysis and a comparison
    write, no JUnit XML and no terminal line holds one."""
    seed = secrets.randbits(32)
    rng = random.Random(seed)
    lengths = iter(rng.sample([4, 5, 6, 7, 8, 9], 6) + [rng.randint(4, 64) for _ in range(6)])
    names = set()
    while len(names) < 8:
        names.add(random_secret_name(rng))
    names = sorted(names)
    inherited = {n: random_secret_value(rng, next(lengths)) for n in names[:4]}
    profile_env = {n: random_secret_value(rng, next(lengths)) for n in names[4:]}
    opt = [f"--{random_secret_name(rng).lower().replace('_', '-')}" for _ in range(2)]
    arg_values = [random_secret_value(rng, next(lengths)) for _ in range(4)]
    argv = ["--n", "3", opt[0], arg_values[0], f"{opt[1]}={arg_values[1]}",
            f"{random_secret_name(rng)}={arg_values[2]}", "--steps", "10", f"--{rng.choice(SECRET_WORDS).lower()}",
            arg_values[3]]
    planted = {**inherited, **profile_env, **{f"argv{i}": v for i, v in enumerate(arg_values)}}
    for name, v in inherited.items():
        monkeypatch.setenv(name, v)
    root = pytester.path
    (root / "printing_workload.py").write_text(f"FAKE = {str(FAKE)!r}\n" + PRINTING_WORKLOAD)
    (root / "spec.json").write_text(json.dumps({"env_names": names, "argv": argv, "profile_env": profile_env}))
    (root / "test_gpsweep.py").unlink()
    pytester.makepyfile(test_prints=PRINTING_TEST)

    shown: list[str] = []
    args = ["--gemmperf-history=hist", "--gemmperf-confirm=0", "-rA"]
    for results, extra, outcome in (("res1", [], "passed"), ("res", ["--gemmperf-report-dir=report"], "passed"),
                                     ("res3", [], "failed")):
        if outcome == "failed":
            (root / "FAIL").write_text("")
        _fresh_process(monkeypatch)
        run = gp(*args, *extra, f"--junitxml={results}.xml", "--gemmperf-threshold=50%", results=results)
        run.assert_outcomes(**{outcome: 1})
        shown += run.outlines + run.errlines
    assert any("cannot log in with" in line for line in shown)  # the failure was shown, hidden

    for cli_args in (["baseline", "refresh", "--from", str(root / "res"), "--baseline-dir", str(root / "base"),
                      "--jobs", "1"],
                     ["history", "record", "--history", str(root / "hist"), "--run-id", "ci-7", str(root / "res")],
                     ["analyze", "--out", str(root / "analysis"), "--jobs", "1", str(root / "res")],
                     ["compare", "--out", str(root / "compared"), "--jobs", "1", "--threshold", "50%",
                      "--history", str(root / "hist-compared"), "--run-id", "ci-8", str(root / "base"),
                      str(root / "res")]):
        _fresh_process(monkeypatch)
        assert cli_main(cli_args) in (0, 1, 2, 4), cli_args
        out = capsys.readouterr()
        shown += (out.out + out.err).splitlines()

    written = [root / d for d in ("res1", "res", "res3", "base", "hist", "hist-compared", "report", "analysis",
                                  "compared")]
    assert all(d.is_dir() for d in written), [d for d in written if not d.is_dir()]
    logs = sorted(root.glob("res*/**/workload.log"))
    assert len(logs) >= 5 and all("stdout:" in p.read_text() for p in logs)
    junit = [root / f"{r}.xml" for r in ("res1", "res", "res3")]
    found = _leaks(written, planted) + [f"{n} in {p}" for p in junit for n, v in planted.items()
                                        if v in p.read_text()]
    found += [f"{n} in terminal: {line}" for line in shown for n, v in planted.items() if v in line]
    assert found == [], f"seed {seed}: {found}"
    # what is not secret survives: the workload's other arguments, the failure's own words
    point = json.loads(next((root / "res3").rglob("point.json")).read_text())
    assert point["command"][2:4] == ["--n", "3"] and "--steps" in point["command"]
    assert point["command"][point["command"].index("--steps") + 1] == "10"
    assert "cannot log in with" in point["error"] and point["error"].count(REDACTED) >= len(planted)
    assert "stdout: " in logs[0].read_text() and REDACTED in logs[0].read_text()
