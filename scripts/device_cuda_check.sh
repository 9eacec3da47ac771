#!/usr/bin/env bash
# device_cuda_check.sh -- one short end-to-end check of the torch backend on a CUDA GPU.
#
# Runs perf_tests/test_gemm_overlap.py twice from a plain checkout (no `pip install -e`, so no
# pytest11 entry point: the plugin is loaded with `-p pytest_gemmperf.plugin`):
#   run 1 records baselines into a fresh temporary store (every point: "no baseline ... recorded"),
#   run 2 gates against them (an A/A comparison: expect no regression),
# then `python3 -m pytest_gemmperf.cli analyze` on run 2's results writes kernels.csv.
# On a machine without a GPU the test takes its CPU branch, so the script also runs here (dry run).
#
# Usage (repository root):  OUT=/tmp/devout bash scripts/device_cuda_check.sh
#   device machine:          bash scripts/device_cuda_check.sh      with carry [".whl"]
# .whl/ (ignored by git) holds py3.12 manylinux wheels of the runtime dependencies the device
# image lacks (msgspec, xlsxwriter); they are installed into /tmp/site only when an import fails.
# Fetch them once (here, repo root):  echo /.whl/ >> .git/info/exclude; python3 -m pip download
#   --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#   --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl msgspec xlsxwriter
#
# Environment: OUT (evidence folder, default /tmp/gemmperf-cuda-check), PYTHON (default python3),
# REPEATS (processes per point, default 2), RUN_TIMEOUT_S (per pytest run, default 150),
# POINT_TIMEOUT_S (per workload launch, default 90), PYTEST_EXTRA (more pytest arguments for
# both runs, split on spaces, e.g. "-k ch28" to run half the sweep).
#
# Evidence in $OUT (11 files, flat): check.log (versions, stage timings, per-launch wall times,
# per-process breakdown, bare launches, telemetry summary, analyze output, final status),
# process_breakdown.txt (per process of both runs: start to first kernel, profiled steps, trace
# export, exit, the process's lifetime and the launch's wall time; scripts/process_breakdown.py),
# pytest_run1.log, pytest_run2.log,
# verdicts.csv, summary.md, report.html (the gating session's report, with its telemetry panel
# per point), kernels.csv (from analyze), telemetry_summary.txt (per point, process and GPU:
# SM clock min/median/max, power, temperature, throttled seconds, plus sample rows taken while
# the GEMM workload ran), telemetry_gpu.csv (every GPU sample, long format),
# results_meta.tgz (run/point/baseline json, workload logs incl. NCCL warnings, each point's
# telemetry.parquet; no raw traces).
# Telemetry: NVML through pynvml (nvidia-ml-py); without it only host samples are recorded and
# the telemetry stage says so (the check itself does not fail on it).
# Bare launches (BARE_LAUNCHES=0 skips them): the example point's workload alone, one rank, once
# through torchrun's agent and once started directly as the runner starts a one-rank point
# (run/process.py one_rank_argv), each under BARE_TIMEOUT_S (default 45): the agent's cost.
# Time: GPU sweep 4 points x REPEATS launches per run; worst case with every timeout hit is
# about 90 + 2 x 150 + 60 + 2 x 45 s, so give the device call timeout_s=560. If run 1 times out,
# run 2 gates only FIRST_POINT. Exit status: 0 when both pytest runs and analyze succeeded, else 1.

set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
OUT=${OUT:-/tmp/gemmperf-cuda-check}
PY=${PYTHON:-python3}
REPEATS=${REPEATS:-2}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-150}
POINT_TIMEOUT_S=${POINT_TIMEOUT_S:-90}
BARE_LAUNCHES=${BARE_LAUNCHES:-1}
BARE_TIMEOUT_S=${BARE_TIMEOUT_S:-45}
FIRST_POINT=${FIRST_POINT:-ch28-th256 or th1}  # the first point of the GPU / CPU sweep
mkdir -p "$OUT" || exit 2
WORK=$(mktemp -d /tmp/gemmperf-check.XXXXXX) || exit 2
export PYTHONUNBUFFERED=1
# NCCL's warnings (bootstrap interface, topology) land in each workload.log (results_meta.tgz)
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# only the plugin under test: the image's other pytest plugins (cov, timeout, benchmark...) stay out
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1

stage() { echo; echo "=== $(date +%H:%M:%S) [+$((SECONDS))s] $*"; }

install_wheels() {
    if "$PY" -c "import msgspec, xlsxwriter" 2>/dev/null; then
        echo "msgspec and xlsxwriter already importable: no wheels installed"
    elif compgen -G ".whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl || return 1
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    else
        echo "msgspec/xlsxwriter missing and no .whl/ folder (carry [\".whl\"])"; return 1
    fi
    export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
}

versions() {
    command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi \
        --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv
    echo "torchrun: $(command -v torchrun || echo 'not on PATH (python -m torch.distributed.run)')"
    timeout 90 "$PY" - <<'EOF'
import importlib, platform, sys
print("python", sys.version.split()[0], sys.executable, platform.machine())
for name in ("torch", "pandas", "numpy", "pyarrow", "scipy", "pytest", "msgspec", "xlsxwriter",
             "jinja2", "yaml", "filelock", "xdist", "pynvml"):
    try:
        mod = importlib.import_module(name)
        print(f"{name:11s} {getattr(mod, '__version__', '?'):14s} {getattr(mod, '__file__', '')}")
    except Exception as exc:
        print(f"{name:11s} MISSING ({type(exc).__name__}: {exc})")
import torch
print("torch.cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print("device 0:", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
    try:
        print("nccl", torch.cuda.nccl.version())
    except Exception as exc:
        print("nccl ?", exc)
from pytest_gemmperf.run.backend import select_backend
print("gemmperf backend auto ->", select_backend("auto").describe())
import pytest_gemmperf.plugin, pytest_gemmperf.report.excel, pytest_gemmperf.traces.torch_trace  # noqa
print("plugin, report and torch trace reader import ok")
EOF
}

pytest_run() {  # $1 = 1 | 2, then extra pytest arguments
    local n=$1; shift
    # SIGINT first: the plugin then kills each workload's process group and pytest still prints
    # its summary; SIGKILL 20 s later if that hangs
    timeout -s INT -k 20 "$RUN_TIMEOUT_S" "$PY" -m pytest -p pytest_gemmperf.plugin \
        perf_tests/test_gemm_overlap.py -v -rA -p no:cacheprovider \
        --gemmperf-baseline-dir "$WORK/baselines" --gemmperf-results-dir "$WORK/results$n" \
        --gemmperf-report-dir "$WORK/report$n" --gemmperf-repeats "$REPEATS" \
        --gemmperf-timeout "$POINT_TIMEOUT_S" ${PYTEST_EXTRA:-} "$@" 2>&1 | tee "$OUT/pytest_run$n.log"
}

bare_launches() {  # $1 = folder for their traces
    "$PY" - "$1" "$BARE_TIMEOUT_S" <<'EOF'
import shlex, subprocess, sys, time
from perf_tests.test_gemm_overlap import SHAPE
from pytest_gemmperf.run.process import launch_argv
work, timeout = sys.argv[1], float(sys.argv[2])
wl = "perf_tests/workloads/gemm_comm.py"
def cmd(how):
    program = [wl, *SHAPE, "--trace-dir", f"{work}/{how}"]
    if how == "agent":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                "--nproc_per_node", "1", *program]
    return launch_argv([sys.executable, *program], "torchrun", nproc=1, extra=["--standalone"])
for how in ("agent", "direct"):
    argv = cmd(how)
    print(f"$ {shlex.join(argv)}", flush=True)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"BARE {how}: timed out after {timeout:.0f} s")
        continue
    wall = time.monotonic() - t0
    lines = [l for l in proc.stdout.splitlines() if l.startswith("gemmperf-timing:")]
    print(f"BARE {how}: wall {wall:.2f} s, exit {proc.returncode}; {lines[-1] if lines else 'no timing line'}")
    if proc.returncode:
        print(proc.stderr[-1500:])
EOF
}

main() {
    local rc1=99 rc2=99 rca=99 report
    stage "install wheels ($PY)"
    install_wheels || { echo "FAIL: wheel install"; return 1; }
    echo "PYTHONPATH=$PYTHONPATH"
    stage "versions"
    versions || echo "WARN: version probe failed (status $?)"

    stage "pytest run 1: record baselines into $WORK/baselines (repeats $REPEATS)"
    pytest_run 1; rc1=$?
    echo "run 1 exit status $rc1"

    local only=()
    # 124: run 1 ran out of time (launches slower than planned); gate the first point only so
    # that run 2 still fits and exercises the comparison
    [ "$rc1" = 124 ] && only=(-k "$FIRST_POINT")
    if compgen -G "$WORK/baselines/*" >/dev/null; then
        stage "pytest run 2: gate against run 1's baselines ${only[*]}"
        pytest_run 2 ${only[@]+"${only[@]}"}; rc2=$?
        echo "run 2 exit status $rc2"
    else
        echo "no baseline recorded by run 1: run 2 skipped"
    fi

    local res=$WORK/results2
    [ -d "$res" ] || res=$WORK/results1
    if [ -d "$res" ]; then
        stage "analyze $res"
        timeout -s INT -k 10 60 "$PY" -m pytest_gemmperf.cli analyze "$res" --out "$WORK/analyze"
        rca=$?
        echo "analyze exit status $rca"
        ls -la "$WORK/analyze" 2>/dev/null
    fi

    stage "collect evidence into $OUT"
    report=$WORK/report2
    [ -f "$report/report.html" ] || report=$WORK/report1
    ls -la "$report" 2>/dev/null
    for f in verdicts.csv summary.md report.html; do
        [ -f "$report/$f" ] && cp "$report/$f" "$OUT/$f"
    done
    [ -f "$WORK/analyze/kernels.csv" ] && cp "$WORK/analyze/kernels.csv" "$OUT/kernels.csv"
    (cd "$WORK" && find . -path ./analyze -prune -o \( -name '*.json' -not -path '*/raw/*' \
        -o -name '*.log' -o -name 'verdicts.csv' -o -name 'telemetry.parquet' \) -type f -print0 2>/dev/null |
        tar -czf "$OUT/results_meta.tgz" --null -T - 2>/dev/null)
    # per-launch wall times (torchrun start + CUDA/NCCL init + workload), from point.json
    "$PY" - "$WORK" <<'EOF' || true
import json, sys
from pathlib import Path
for p in sorted(Path(sys.argv[1]).glob("results*/*/*/point.json")):
    rec = json.loads(p.read_text())
    runs = ", ".join(f"{r.get('duration_s')}s rc={r.get('returncode')}" for r in rec.get("runs", []))
    print(f"{p.parent.parent.parent.name} {rec.get('point')}: {rec.get('status')} "
          f"{rec.get('backend')}/{rec.get('device')} nproc={rec.get('nproc')} "
          f"dispatches={rec.get('dispatches')} verdicts={rec.get('verdicts', '-')} runs: {runs}")
EOF
    stage "per-process breakdown (start to first kernel, profiled steps, trace export, exit)"
    for res in "$WORK"/results1 "$WORK"/results2; do
        [ -d "$res" ] || continue
        echo "--- $(basename "$res")"
        "$PY" scripts/process_breakdown.py "$res"
    done 2>&1 | tee "$OUT/process_breakdown.txt"
    if [ "$BARE_LAUNCHES" != 0 ]; then
        stage "bare launches of the example point, one rank: torchrun's agent vs started directly"
        bare_launches "$WORK/bare" || echo "WARN: bare launches failed (status $?)"
    fi
    stage "telemetry (NVML clocks/power/temperature sampled while the workload ran)"
    "$PY" - "$WORK" "$OUT" <<'EOF' 2>&1 | tee "$OUT/telemetry_summary.txt" || true
import json, sys
from pathlib import Path
import pandas as pd
work, out = Path(sys.argv[1]), Path(sys.argv[2])
nan = float("nan")
gpu_frames = []
for res in sorted(work.glob("results*")):
    for pq in sorted(res.glob("*/*/telemetry.parquet")):
        rec = json.loads((pq.parent / "point.json").read_text())
        tele = rec.get("telemetry") or {}
        df = pd.read_parquet(pq)
        gpu = df[df["device"].str.startswith("gpu")]
        print(f"{res.name} {rec.get('point')}: sources={tele.get('sources')} interval={tele.get('interval_s')} s "
              f"samples={tele.get('samples')} rows={len(df)} gpu_rows={len(gpu)} "
              f"sampler_cpu={100 * float(tele.get('sampler_cpu_fraction') or 0):.2f}% of a core")
        for d, st in (tele.get("static") or {}).get("nvml", {}).get("devices", {}).items():
            print(f"  {d}: {st}")
        for n in (tele.get("notes") or [])[:5]:
            print(f"  note: {n}")
        for r in tele.get("summary") or []:
            if r["device"] == "host":
                continue
            print(f"  process {r['process']} {r['device']}: SM clock min/median/max "
                  f"{r.get('clock_min_mhz', nan):.0f}/{r.get('clock_median_mhz', nan):.0f}/"
                  f"{r.get('clock_max_mhz', nan):.0f} MHz, power median {r.get('power_median_w', nan):.0f} W, "
                  f"temp max {r.get('temp_edge_max_c', nan):.0f} C, throttled {r.get('throttle_s', 0):.2f} s, "
                  f"samples {r.get('samples')}")
        if len(gpu):
            wide = gpu.pivot_table(index=["time_ns", "device"], columns="metric", values="value").reset_index()
            win = (tele.get("processes") or {}).get("0")
            if win:  # samples while process 0 (the GEMM workload) ran
                wide = wide[(wide["time_ns"] >= win[0]) & (wide["time_ns"] <= win[1])]
            wide["t_s"] = (wide["time_ns"] - wide["time_ns"].min()) / 1e9
            cols = [c for c in ("t_s", "device", "gfx_clock_mhz", "mem_clock_mhz", "power_w", "temp_edge_c",
                                "gfx_activity_pct", "vram_used_mib", "throttle_reasons") if c in wide]
            step = max(1, len(wide) // 10)
            print("  samples during process 0 (every %d-th):" % step)
            print(wide[cols].iloc[::step].round(2).to_string(index=False))
            gpu_frames.append(gpu.assign(results=res.name, point=rec.get("point")))
if gpu_frames:
    pd.concat(gpu_frames).to_csv(out / "telemetry_gpu.csv", index=False)
    print(f"TELEMETRY: {sum(len(f) for f in gpu_frames)} GPU sample rows -> telemetry_gpu.csv")
else:
    print("TELEMETRY: no GPU samples (pynvml missing or NVML unavailable): host samples only")
EOF
    ls -la "$OUT"

    stage "done: run1=$rc1 run2=$rc2 analyze=$rca"
    if [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$rca" = 0 ]; then
        echo "DEVICE CHECK: PASS"; return 0
    fi
    echo "DEVICE CHECK: FAIL"; return 1
}

main 2>&1 | tee "$OUT/check.log"
status=${PIPESTATUS[0]}
[ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
exit "$status"
