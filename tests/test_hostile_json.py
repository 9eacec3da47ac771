"""Hostile and malformed JSON inputs for the two JSON readers (Kineto and rocprofv3 JSON).

Every case of the corpus goes through the public entry point (``read_torch_trace`` or
``read_rocprof_json``) under a wall-clock alarm and must end in a ``GemmperfInputError`` whose
one-line text names the file and the offending field: no traceback, no hang, no warning, no
silent pass. A representative subset also runs through ``gemmperf analyze`` in a subprocess:
exit status 2 and exactly one stderr line naming the file. The accepted-but-unusual inputs at
the end must read with exact numbers.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from cli_batch import CliRun, run_cli_batch
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.fileio import ENV_MAX_DECOMPRESSED, read_maybe_gzip
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json
from pytest_gemmperf.traces.torch_trace import read_torch_cpu_trace, read_torch_trace

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures"
KINETO = json.loads((FIX / "torch" / "rocm_sdk_rank3.pt.trace.json").read_text())
ROCPROF = json.loads((FIX / "rocprof_json" / "v7_two_processes_counters_results.json").read_text())
RAW = "@@RAW@@"  # placeholder string replaced by raw JSON text after json.dumps
DEEP = "[" * 200_000 + "]" * 200_000
DEEP_OBJ = '{"a":' * 200_000 + "1" + "}" * 200_000
TIMEOUT_S = 20
# any warning (numpy RuntimeWarning included) fails a test here: none may reach a user's stderr
pytestmark = pytest.mark.filterwarnings("error")


@contextlib.contextmanager
def alarm(seconds: int = TIMEOUT_S):
    """Fail (instead of hanging the suite) when the body runs longer than ``seconds``."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"reader did not finish within {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------- corpus builders

def _event(doc: dict, cat: str, name: str | None = None) -> dict:
    return next(e for e in doc["traceEvents"]
                if e.get("cat") == cat and (name is None or e.get("name") == name))


def k_event(cat: str, key: str, value, name: str | None = None, raw: str | None = None):
    """Kineto doc with ``key`` of the first ``cat`` event set (``args.X`` sets an arg; a value
    of None deletes the key)."""
    def make() -> bytes:
        doc = copy.deepcopy(KINETO)
        e = _event(doc, cat, name)
        target, k = (e.setdefault("args", {}), key[5:]) if key.startswith("args.") else (e, key)
        if value is None:
            target.pop(k, None)
        else:
            target[k] = RAW if raw is not None else value
        return _dump(doc, raw)
    return make


def k_top(key: str, value, raw: str | None = None):
    def make() -> bytes:
        doc = copy.deepcopy(KINETO)
        doc[key] = RAW if raw is not None else value
        return _dump(doc, raw)
    return make


def r_set(path: str, value, raw: str | None = None):
    """rocprofv3 doc with the dotted ``path`` (list indices as numbers) below the first process
    set to ``value`` (or to the raw JSON text ``raw``)."""
    def make() -> bytes:
        doc = copy.deepcopy(ROCPROF)
        node = doc["rocprofiler-sdk-tool"][0]
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node[p]
        node[parts[-1]] = RAW if raw is not None else value
        return _dump(doc, raw)
    return make


def _dump(doc: dict, raw: str | None) -> bytes:
    text = json.dumps(doc)
    if raw is not None:
        assert text.count(f'"{RAW}"') == 1
        text = text.replace(f'"{RAW}"', raw)
    return text.encode()


def const(data: bytes):
    return lambda: data


def k_gzip_bomb() -> bytes:
    return gzip.compress(b" " * 3_000_000 + json.dumps(KINETO).encode(), 9)


# (case id, reader, bytes factory, regex the one-line message must match)
KINETO_CASES = [
    ("k-ts-true", k_event("kernel", "ts", True), r"ts is not a JSON number: true"),
    ("k-ts-false", k_event("kernel", "ts", False), r"ts is not a JSON number: false"),
    ("k-ts-null", k_event("kernel", "ts", 0, raw="null"), r"ts is not a JSON number: null"),
    ("k-ts-string", k_event("kernel", "ts", "1000.5"), r"ts is not a JSON number: \"1000.5\""),
    ("k-ts-object", k_event("kernel", "ts", {"v": 1}), r"ts is not a JSON number"),
    ("k-ts-array", k_event("kernel", "ts", [1000]), r"ts is not a JSON number"),
    ("k-ts-1e30", k_event("kernel", "ts", 0, raw="1e30"), r"ts is outside the int64 range"),
    ("k-ts-1e400", k_event("kernel", "ts", 0, raw="1e400"), r"ts is outside the int64 range"),
    ("k-ts-neg-1e400", k_event("kernel", "ts", 0, raw="-1e400"), r"ts is outside the int64 range"),
    ("k-ts-just-over-int64", k_event("kernel", "ts", 0, raw="9223372036854775.808"),
     r"ts is outside the int64 range"),
    ("k-ts-20-digits", k_event("kernel", "ts", 10 ** 19), r"ts is outside the int64 range"),
    ("k-ts-huge-exponent", k_event("kernel", "ts", 0, raw="1e999999999"), r"ts is outside"),
    ("k-ts-absent", k_event("kernel", "ts", None), r"ts is missing"),
    ("k-ts-5000-digits", k_event("kernel", "ts", 0, raw="1." + "7" * 5000), r"more than 1000 digits"),
    ("k-ts-100k-int-digits", k_event("kernel", "ts", 0, raw="9" * 100_000), r"more than 1000 digits"),
    ("k-dur-1000-int-digits", k_event("kernel", "dur", 0, raw="9" * 1000), r"dur is outside"),
    ("k-dur-negative", k_event("kernel", "dur", -1.5), r"dur is negative: -1.5"),
    ("k-dur-true", k_event("kernel", "dur", True), r"dur is not a JSON number"),
    ("k-dur-string", k_event("kernel", "dur", "5"), r"dur is not a JSON number"),
    ("k-dur-1e30", k_event("kernel", "dur", 0, raw="1e30"), r"dur is outside the int64 range"),
    ("k-dur-absent", k_event("kernel", "dur", None), r"dur is missing"),
    ("k-ts-plus-dur-overflow", lambda: k_event("kernel", "dur", 0, raw="2.000")().replace(
        b'"ts": 1100.1236', b'"ts": 9223372036854775.000'), r"ts \+ dur is outside"),
    ("k-device-true", k_event("kernel", "args.device", True), r"args.device is not a JSON integer"),
    ("k-device-float", k_event("kernel", "args.device", 1.5), r"args.device is not a JSON integer"),
    ("k-device-string", k_event("kernel", "args.device", "0"), r"args.device is not a JSON integer"),
    ("k-stream-2p63", k_event("kernel", "args.stream", 2 ** 63), r"args.stream is outside the int64"),
    ("k-correlation-below-int64", k_event("kernel", "args.correlation", -2 ** 63 - 1),
     r"args.correlation is outside the int64"),
    ("k-correlation-integral-float", k_event("kernel", "args.correlation", 7.0),
     r"args.correlation is not a JSON integer: 7.0"),
    ("k-external-id-string", k_event("cpu_op", "args.External id", "12"),
     r"args.External id is not a JSON integer"),
    ("k-pid-true", k_event("kernel", "pid", True), r"pid is not a JSON integer: True"),
    ("k-tid-float", k_event("cpu_op", "tid", 1.5), r"tid is not a JSON integer"),
    ("k-pid-2p64", k_event("cuda_runtime", "pid", 2 ** 64), r"pid is outside the int64"),
    ("k-grid-bool", k_event("kernel", "args.grid", [True, 1, 1]), r"args.grid is not a list"),
    ("k-grid-negative", k_event("kernel", "args.grid", [-1, 1, 1]), r"args.grid is not a list"),
    ("k-grid-4-dims", k_event("kernel", "args.grid", [1, 2, 3, 4]), r"args.grid is not a list"),
    ("k-grid-string", k_event("kernel", "args.grid", "256"), r"args.grid is not a list"),
    ("k-block-2p32", k_event("kernel", "args.block", [2 ** 32, 1, 1]), r"args.block is not a list"),
    ("k-cpu-op-ts-true", k_event("cpu_op", "ts", True), r"ts is not a JSON number"),
    ("k-cpu-op-dur-negative", k_event("cpu_op", "dur", -3), r"dur is negative"),
    ("k-runtime-ts-string", k_event("cuda_runtime", "ts", "x"), r"ts is not a JSON number"),
    ("k-step-dur-null", k_event("user_annotation", "dur", 0, raw="null"), r"dur is not a JSON number"),
    ("k-group-size-true", k_event("cpu_op", "args.Group size", True, name="record_param_comms"),
     r"args.Group size is not a JSON integer"),
    ("k-nelems-2p70", k_event("cpu_op", "args.In msg nelems", 2 ** 70, name="record_param_comms"),
     r"args.In msg nelems is outside the int64"),
    ("k-base-time-float", k_top("baseTimeNanoseconds", 1.7e18), r"baseTimeNanoseconds is not"),
    ("k-base-time-true", k_top("baseTimeNanoseconds", True), r"baseTimeNanoseconds is not"),
    ("k-numsms-string", lambda: _dump({**KINETO, "deviceProperties": [
        {**KINETO["deviceProperties"][0], "numSms": "x"}]}, None), r"numSms is not"),
    ("k-deep-args", k_event("kernel", "args.kind", 0, raw=DEEP), r"nested too deeply"),
    ("k-deep-unknown-key", k_top("zzz", 0, raw=DEEP), r"nested too deeply"),
    ("k-deep-top-array", const(DEEP.encode()), r"Expected `object`, got `array` - at `\$\[0\]`"),
    ("k-deep-event-list", lambda: b'{"traceEvents": [' + DEEP.encode() + b"]}",
     r"Expected `object`, got `array`"),
    ("k-nan-literal", k_event("kernel", "ts", 0, raw="NaN"), r"not valid JSON"),
    ("k-infinity-literal", k_event("kernel", "dur", 0, raw="Infinity"), r"not valid JSON"),
    ("k-truncated", lambda: json.dumps(KINETO).encode()[:3000], r"not valid JSON"),
    ("k-trace-events-object", k_top("traceEvents", {"a": 1}), r"not a PyTorch profiler trace"),
    ("k-name-null", k_event("kernel", "name", 0, raw="null"), r"Expected `str`, got `null`"),
    ("k-cat-number", lambda: json.dumps(KINETO).encode().replace(b'"cat": "kernel"', b'"cat": 5', 1),
     r"Expected `str`, got `int`"),
    ("k-empty", const(b""), r"empty file"),
    ("k-whitespace-only", const(b" \r\n\t "), r"empty file"),
    ("k-binary-garbage", const(bytes(range(256)) * 4), r"not valid JSON"),
    ("k-invalid-utf8", lambda: json.dumps(KINETO).encode().replace(b"aten::mm", b"aten::\xff\xfe", 1),
     r"not valid JSON: a string is not UTF-8"),
    ("k-number-top-level", const(b"42"), r"not a PyTorch profiler trace"),
    ("k-rocprofv3-json", lambda: json.dumps(ROCPROF).encode(), r"rocprofv3 JSON"),
    ("k-truncated-gzip", lambda: gzip.compress(json.dumps(KINETO).encode())[:-20],
     r"corrupt or truncated gzip"),
    ("k-gzip-bad-crc", lambda: (lambda g: g[:-8] + bytes([g[-8] ^ 1]) + g[-7:])(
        gzip.compress(json.dumps(KINETO).encode())), r"corrupt or truncated gzip.*incorrect data check"),
    ("k-gzip-trailing-garbage", lambda: gzip.compress(json.dumps(KINETO).encode()) + b"junk",
     r"garbage after the compressed stream"),
    ("k-gzip-bomb", k_gzip_bomb, r"beyond the 1,000,000-byte limit"),
]

ROCPROF_CASES = [
    ("r-start-true", r_set("buffer_records.kernel_dispatch.0.start_timestamp", True),
     r"'start_timestamp': Expected `int`, got `bool`"),
    ("r-start-null", r_set("buffer_records.kernel_dispatch.0.start_timestamp", None),
     r"'start_timestamp': Expected `int`, got `null`"),
    ("r-start-string", r_set("buffer_records.kernel_dispatch.0.start_timestamp", "1"),
     r"'start_timestamp': Expected `int`, got `str`"),
    ("r-start-float", r_set("buffer_records.kernel_dispatch.0.start_timestamp", 1.5),
     r"'start_timestamp': Expected `int`, got `float`"),
    ("r-start-1e30", r_set("buffer_records.kernel_dispatch.0.start_timestamp", 0, raw="1e30"),
     r"'start_timestamp': Expected `int`, got `float`"),
    ("r-start-1e400", r_set("buffer_records.kernel_dispatch.0.start_timestamp", 0, raw="1e400"),
     r"'start_timestamp'"),
    ("r-start-negative", r_set("buffer_records.kernel_dispatch.0.start_timestamp", -1),
     r"'start_timestamp': Expected `int` >= 0"),
    ("r-start-2p63", r_set("buffer_records.kernel_dispatch.0.start_timestamp", 2 ** 63),
     r"'start_timestamp': Expected `int` <= 9223372036854775807"),
    ("r-end-2p64", r_set("buffer_records.kernel_dispatch.0.end_timestamp", 2 ** 64 + 1),
     r"'end_timestamp': Expected `int` <= 9223372036854775807"),
    ("r-end-before-start", r_set("buffer_records.kernel_dispatch.0.end_timestamp", 5),
     r"end before they start"),
    ("r-thread-id-minus-1", r_set("buffer_records.kernel_dispatch.0.thread_id", -1),
     r"'thread_id': Expected `int` >= 0"),
    ("r-agent-handle-true", r_set("buffer_records.kernel_dispatch.0.dispatch_info.agent_id.handle", True),
     r"'dispatch_info.agent_id.handle': Expected `int`, got `bool`"),
    ("r-grid-negative", r_set("buffer_records.kernel_dispatch.0.dispatch_info.grid_size.x", -5),
     r"'dispatch_info.grid_size.x': Expected `int` >= 0"),
    ("r-wg-integral-float", r_set("buffer_records.kernel_dispatch.0.dispatch_info.workgroup_size.y", 1.0),
     r"'dispatch_info.workgroup_size.y': Expected `int`, got `float`"),
    ("r-kernel-id-2p63", r_set("buffer_records.kernel_dispatch.0.dispatch_info.kernel_id", 2 ** 63),
     r"'dispatch_info.kernel_id': Expected `int` <="),
    ("r-dispatch-id-string", r_set("buffer_records.kernel_dispatch.0.dispatch_info.dispatch_id", "abc"),
     r"'dispatch_info.dispatch_id': Expected `int`, got `str`"),
    ("r-correlation-2p63", r_set("buffer_records.kernel_dispatch.0.correlation_id.internal", 2 ** 63),
     r"'correlation_id.internal': Expected `int` <="),
    ("r-counter-value-string", r_set("callback_records.counter_collection.0.records.0.value", "x"),
     r"'records\[0\].value': Expected `float`, got `str`"),
    ("r-counter-value-1e400", r_set("callback_records.counter_collection.0.records.0.value", 0,
                                    raw="1e400"), r"Number out of range"),
    ("r-counter-start-negative", r_set("callback_records.counter_collection.0.dispatch_data."
                                       "start_timestamp", -7), r"'dispatch_data.start_timestamp'"),
    ("r-agent-cu-count-negative", r_set("agents.2.cu_count", -1), r"Expected `int` >= 0"),
    ("r-agent-gpu-index-minus-2", r_set("agents.2.gpu_index", -2), r"Expected `int` >= -1"),
    ("r-metadata-pid-float", r_set("metadata.pid", 1.5), r"'metadata.pid': Expected `int \| null`, got `float`"),
    ("r-symbol-kernel-id-negative", r_set("kernel_symbols.0.kernel_id", -1), r"Expected `int` >= 0"),
    ("r-sgpr-true", r_set("kernel_symbols.0.sgpr_count", True), r"Expected `int`, got `bool`"),
    ("r-deep-config", r_set("metadata.config", 0, raw=DEEP_OBJ), r"nested too deeply"),
    ("r-invalid-utf8", lambda: json.dumps(ROCPROF).encode().replace(b'"hostname": "', b'"hostname": "\xc3\x28', 1),
     r"not valid JSON: a string is not UTF-8"),
    ("r-deep-top", const(DEEP.encode()), r"not rocprofv3 JSON output.*Expected `object`"),
    ("r-deep-unknown-key", lambda: b'{"x": ' + DEEP.encode() + b', "rocprofiler-sdk-tool": []}',
     r"nested too deeply"),
    ("r-tool-not-list", const(b'{"rocprofiler-sdk-tool": 5}'), r"Expected `array.*got `int`"),
    ("r-tool-empty", const(b'{"rocprofiler-sdk-tool": []}'), r"holds no process"),
    ("r-truncated", lambda: json.dumps(ROCPROF).encode()[:5000], r"not valid JSON"),
    ("r-kineto-given", lambda: json.dumps(KINETO).encode(), r"PyTorch profiler"),
    ("r-nan-literal", r_set("buffer_records.kernel_dispatch.0.end_timestamp", 0, raw="NaN"),
     r"not valid JSON"),
    ("r-empty", const(b""), r"empty file"),
]

CASES = ([("torch", *c) for c in KINETO_CASES] + [("rocprof", *c) for c in ROCPROF_CASES])


def _read(kind: str, path: Path):
    return read_torch_trace(path) if kind == "torch" else read_rocprof_json(path)


def _file(tmp_path: Path, kind: str, case: str, data: bytes) -> Path:
    name = f"{case}.pt.trace.json" if kind == "torch" else f"{case}_results.json"
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_corpus_is_large_and_distinct():
    ids = [c[1] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 90
    inputs = {(c[0], c[2]()) for c in CASES}  # (reader, bytes): no two cases are the same test
    assert len(inputs) == len(CASES)


@pytest.mark.parametrize("kind, case, make, pattern", CASES, ids=[c[1] for c in CASES])
def test_hostile_input_is_one_clear_error(tmp_path, monkeypatch, kind, case, make, pattern):
    monkeypatch.setenv(ENV_MAX_DECOMPRESSED, "1000000")
    p = _file(tmp_path, kind, case, make())
    with warnings.catch_warnings(record=True) as caught, alarm():
        warnings.simplefilter("always")
        with pytest.raises(GemmperfInputError) as ei:
            _read(kind, p)
    text = str(ei.value)
    assert "\n" not in text and text.startswith(str(p)), text
    assert ei.value.path == str(p)
    import re
    assert re.search(pattern, ei.value.message), text
    assert not caught, [str(w.message) for w in caught]


@pytest.mark.parametrize("case, make", [(c[0], c[1]) for c in KINETO_CASES], ids=[c[0] for c in KINETO_CASES])
def test_a_slim_read_raises_the_full_reads_error(tmp_path, monkeypatch, case, make):
    """``gemmperf analyze --no-report`` reads a trace slim (``traces/torch_slim.py``): every
    check of the full read is kept, in its order, so the one line is the same."""
    from pytest_gemmperf.traces.torch_slim import SLIM_COLUMNS

    monkeypatch.setenv(ENV_MAX_DECOMPRESSED, "1000000")
    p = _file(tmp_path, "torch", case, make())
    with alarm(), pytest.raises(GemmperfInputError) as full:
        read_torch_trace(p)
    with alarm(), pytest.raises(GemmperfInputError) as slim:
        read_torch_trace(p, columns=SLIM_COLUMNS)
    assert str(slim.value) == str(full.value)


def test_kineto_errors_name_the_event(tmp_path):
    p = _file(tmp_path, "torch", "x", k_event("kernel", "ts", True)())
    with pytest.raises(GemmperfInputError) as ei:
        read_torch_trace(p)
    # traceEvents index of the first kernel event in the fixture, its category and name
    assert ei.value.record.startswith("traceEvents[10], kernel 'Cijk_Ailk_Bljk")


def test_cpu_trace_reader_checks_too(tmp_path):
    p = _file(tmp_path, "torch", "cpu", k_event("cpu_op", "dur", 0, raw="-0.5")())
    with pytest.raises(GemmperfInputError, match=r"traceEvents\[6\].*dur is negative"):
        read_torch_cpu_trace(p)


def test_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "stuck.pt.trace.json"
    os.mkfifo(fifo)
    with alarm(5), pytest.raises(GemmperfInputError, match="it is a FIFO, not a regular file"):
        read_torch_trace(fifo)
    with alarm(5), pytest.raises(GemmperfInputError, match="it is a directory"):
        read_rocprof_json(tmp_path)


def test_decompression_limit_argument_and_env(tmp_path, monkeypatch):
    p = tmp_path / "b.json.gz"
    p.write_bytes(gzip.compress(b"x" * 10_000))
    assert len(read_maybe_gzip(str(p), max_bytes=10_000)) == 10_000
    with pytest.raises(GemmperfInputError, match="beyond the 9,999-byte limit"):
        read_maybe_gzip(str(p), max_bytes=9_999)
    monkeypatch.setenv(ENV_MAX_DECOMPRESSED, "9999")
    with pytest.raises(GemmperfInputError, match=f"beyond the 9,999-byte limit.*{ENV_MAX_DECOMPRESSED}"):
        read_maybe_gzip(str(p))
    monkeypatch.setenv(ENV_MAX_DECOMPRESSED, "lots")
    with pytest.raises(GemmperfInputError, match="is not a positive integer"):
        read_maybe_gzip(str(p))
    monkeypatch.delenv(ENV_MAX_DECOMPRESSED)
    # two members (``cat a.gz b.gz``) count together against the limit
    p.write_bytes(gzip.compress(b"a" * 6000) + gzip.compress(b"b" * 6000))
    assert read_maybe_gzip(str(p)) == b"a" * 6000 + b"b" * 6000
    with pytest.raises(GemmperfInputError, match="beyond the 10,000-byte limit"):
        read_maybe_gzip(str(p), max_bytes=10_000)


def test_bomb_memory_is_bounded(tmp_path):
    """A 256 MiB expansion stops at a 16 MiB limit: the peak RSS of a fresh process (about
    110 MiB after imports) stays far below what the full expansion would need."""
    bomb = tmp_path / "bomb.pt.trace.json.gz"
    z = __import__("zlib").compressobj(1, wbits=31)  # 1.1 MB; level 9's 0.26 MB takes 3x as long
    with open(bomb, "wb") as f:
        chunk = b"\0" * (1 << 24)
        for _ in range(16):
            f.write(z.compress(chunk))
        f.write(z.flush())
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent (pytest)
    code = ("import sys; from pytest_gemmperf.traces.torch_trace import read_torch_trace\n"
            "from pytest_gemmperf.errors import GemmperfInputError\n"
            "try:\n    read_torch_trace(sys.argv[1])\nexcept GemmperfInputError as e:\n    print(e)\n"
            "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))")
    env = {**os.environ, ENV_MAX_DECOMPRESSED: str(16 << 20), "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True,
                       env=env, timeout=60)
    msg, rss_kib = r.stdout.strip().splitlines()
    assert "beyond the 16,777,216-byte limit" in msg
    assert int(rss_kib) < 220 * 1024  # the 256 MiB were never materialised


# ----------------------------------------------------------------------------- CLI subset

CLI_SUBSET = ["k-ts-true", "k-ts-1e400", "k-dur-negative", "k-pid-2p64", "k-deep-args",
              "k-gzip-bomb", "k-base-time-float", "r-start-negative", "r-start-2p63",
              "r-deep-top", "r-counter-value-1e400"]


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict[str, tuple[Path, CliRun]]:
    """``gemmperf analyze`` of each case of CLI_SUBSET in a real process (one for them all)."""
    tmp = tmp_path_factory.mktemp("cli")
    given, commands = {}, {}
    for case in CLI_SUBSET:
        kind, _, make, _pattern = next(c for c in CASES if c[1] == case)
        (tmp / case).mkdir()
        given[case] = _file(tmp / case, kind, case, make())
        commands[case] = ["analyze", str(given[case]), "--out", str(tmp / case / "out"), "--no-report"]
    env = {**os.environ, ENV_MAX_DECOMPRESSED: "1000000", "PYTHONWARNINGS": "always"}
    runs = run_cli_batch(commands, tmp / "stderr", cwd=tmp, env=env)
    return {case: (given[case], runs[case]) for case in CLI_SUBSET}


@pytest.mark.slow  # a real gemmperf process
@pytest.mark.parametrize("case", CLI_SUBSET)
def test_cli_exit_2_one_line(cli_runs, case):
    p, r = cli_runs[case]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and str(p) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "Warning" not in r.stderr


# ----------------------------------------------------------------------------- accepted inputs

def _kineto_with(ts: str, dur: str) -> bytes:
    """The fixture with its first GEMM kernel's ts/dur replaced by raw number text."""
    return (json.dumps(KINETO).encode()
            .replace(b'"ts": 1100.1236, "dur": 20.4564', f'"ts": {ts}, "dur": {dur}'.encode()))


def _gemm(t) -> dict:
    d = t.dispatches
    return d[d["correlation_id"] == 101].iloc[0].to_dict()


@pytest.mark.parametrize("ts, dur, start, end, rounded", [
    ("1100.124", "20.456", 1_100_124, 1_120_580, 0),                 # plain 3 decimals
    ("1100", "20", 1_100_000, 1_120_000, 0),                          # JSON integers (µs)
    ("1100.12400000", "20.45600", 1_100_124, 1_120_580, 0),           # trailing zeros: exact
    ("1.100124e3", "2.0456E1", 1_100_124, 1_120_580, 0),              # exponent form: exact
    ("1100.1236", "20.4564", 1_100_124, 1_120_580, 2),                # sub-ns: rounded once
    ("1100.0005", "0.0005", 1_100_000, 1_100_001, 2),                 # half-even; end from exact sum
    ("1100.0015", "0.0010", 1_100_002, 1_100_002, 1),                 # half-even up (odd -> even)
    ("1100." + "0" * 300 + "1", "1", 1_100_000, 1_101_000, 1),        # 300 sub-ns digits
    ("1100", "1e-99999999", 1_100_000, 1_100_000, 1),                 # tiny, bounded work
])
def test_unusual_numbers_read_exactly(tmp_path, ts, dur, start, end, rounded):
    p = _file(tmp_path, "torch", "ok", _kineto_with(ts, dur))
    with alarm():
        t = read_torch_trace(p)
    g = _gemm(t)
    assert (g["start_ns"], g["end_ns"], g["dur_ns"]) == (start, end, end - start)
    assert t.meta["subns_rounded"] == rounded
    assert len(t.meta["notes"]) == (rounded > 0)
    if rounded:
        assert f"{rounded} ts/dur value(s) had digits below 1 ns" in t.meta["notes"][0]


def test_negative_epoch_offsets_bom_whitespace_crlf_labels(tmp_path):
    doc = copy.deepcopy(KINETO)
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = round(e["ts"] - 5000, 4)  # every event before the epoch of the clock
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "label lanes", "pid": "Spans",
                               "tid": "PyTorch Profiler", "ts": -1.5, "dur": 1})
    text = json.dumps(doc, indent=1).replace("\n", "\r\n")
    p = _file(tmp_path, "torch", "neg", b"\xef\xbb\xbf \r\n\t" + text.encode() + b"\r\n \t")
    t = read_torch_trace(p)
    g = _gemm(t)
    # 1100.1236 - 5000 = -3899.8764 us -> -3899876.4 ns -> -3899876 (half-even)
    assert g["start_ns"] == -3_899_876 and g["dur_ns"] == 20_456
    ops = t.meta["cpu_ops"]
    lab = ops[ops["name"] == "label lanes"].iloc[0]
    assert lab["ts_ns"] == -1500 and lab["dur_ns"] == 1000
    assert lab["pid"] is None or str(lab["pid"]) == "<NA>"  # a lane label is not an id


def test_rocprof_json_bom_and_whitespace(tmp_path):
    p = _file(tmp_path, "rocprof", "bom", b"\xef\xbb\xbf\r\n " + json.dumps(ROCPROF).encode() + b"\n")
    assert len(read_rocprof_json(p).dispatches) == 10


def test_multi_member_gzip_trace(tmp_path):
    raw = json.dumps(KINETO).encode()
    p = _file(tmp_path, "torch", "mm", gzip.compress(raw[:5000]) + gzip.compress(raw[5000:]))
    assert len(read_torch_trace(p).dispatches) == 8
