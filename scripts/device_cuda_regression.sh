#!/usr/bin/env bash
# device_cuda_regression.sh -- does a real slowdown on a CUDA GPU fail the gate?
#
# Runs the perf_tests GEMM + all-reduce workload 3 times as the baseline (bf16 4096x4096x4096)
# and 3 times as the candidate with 12.5 % more work per GEMM (K = 4608: same GEMM kernel,
# longer), each a separate torchrun process writing Kineto traces, then
# `gemmperf compare base cand`, which must exit 1 with the GEMM kernel and the GEMM category total
# as regressions (about +12 %). One GPU is enough.
#
# Usage (repository root, on the device with carry [".whl"]; see device_cuda_check.sh for the
# wheels):  bash scripts/device_cuda_regression.sh      Evidence: $OUT/{workloads,compare}.log,
# $OUT/verdicts.csv. Exit status: that of `gemmperf compare` (1 = regression found, expected).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/gemmperf-cuda-regression}
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/gemmperf-regr.XXXXXX) || exit 2
mkdir -p "$OUT"
if ! "$PY" -c "import msgspec, xlsxwriter" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
for side in base cand; do
    shape=4096x4096x4096
    [ "$side" = cand ] && shape=4096x4096x4608
    for r in 0 1 2; do
        echo "== $side run $r shape $shape" >> "$OUT/workloads.log"
        timeout 90 torchrun --standalone --nproc_per_node 1 perf_tests/workloads/gemm_comm.py \
            --device cuda --shape "$shape" --dtype bfloat16 --gemms-per-step 8 --steps 10 \
            --comm-mb 64 --trace-dir "$WORK/$side/r$r" >> "$OUT/workloads.log" 2>&1 \
            || echo "launch $side $r failed (see workloads.log)"
    done
done
"$PY" -m pytest_gemmperf.cli compare "$WORK/base" "$WORK/cand" --out "$WORK/cmp" --no-report \
    2>&1 | tee "$OUT/compare.log"
rc=${PIPESTATUS[0]}
cp "$WORK/cmp/verdicts.csv" "$OUT/" 2>/dev/null
echo "compare exit status $rc (1 = regression found)"
exit "$rc"
