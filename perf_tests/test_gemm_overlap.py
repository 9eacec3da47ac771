"""GEMMs concurrent with all-reduce traffic, swept and gated against ``baselines/``.

On a GPU machine the sweep is the RCCL/NCCL one (channels x threads per block), the gated
kernels are the GEMMs, and ``auto`` profiles with rocprofv3 (ROCm) or the PyTorch profiler (CUDA).

On a machine without a GPU the same workload runs on the CPU: 2 torchrun ranks, gloo all-reduce
on its own thread while the GEMMs run, PyTorch profiler on. The ``threads`` axis there sets the
intra-op threads of each rank (``OMP_NUM_THREADS``) -- the CPU's counterpart of "threads
working on one operation"; the RCCL variables would be set but have no effect on gloo. The gated
"kernel" is ``aten::mm`` (on the CPU the profiler's operators are the dispatches). A shared CPU
runner is far noisier than a GPU, so this test uses a 25% practical threshold there.
"""

from __future__ import annotations

from pytest_gemmperf import Axis, sweep
from pytest_gemmperf.run.backend import cuda_gpu_present, rocm_gpu_present

ON_GPU = rocm_gpu_present() or cuda_gpu_present()

GPU_GEMM_KERNELS = [r"^Cijk_", r"gemm", r"nvjet|cutlass|xmma"]
COUNTERS = ["SQ_BUSY_CU_CYCLES", "SQ_WAVES", "SQ_INSTS_MFMA"]

if ON_GPU:
    SWEEP = sweep(channels=[28, 56], threads=[256, 512], kernels=GPU_GEMM_KERNELS)
    SHAPE = ["--shape", "4096x4096x4096", "--dtype", "bfloat16",
             "--gemms-per-step", "8", "--steps", "10", "--comm-mb", "64"]
    THRESHOLD = None  # the session's --gemmperf-threshold (gate default 5%)
else:
    SWEEP = sweep(threads=Axis([1, 2], env=["OMP_NUM_THREADS", "MKL_NUM_THREADS"]),
                  kernels=[r"^aten::mm$"])
    SHAPE = ["--shape", "384x384x384", "--dtype", "float32",
             "--gemms-per-step", "8", "--steps", "10", "--comm-mb", "4"]
    THRESHOLD = 0.25


@SWEEP
def test_gemm_comm_overlap(gemmperf, gemm_comm_workload):
    result = gemmperf.profile([str(gemm_comm_workload), *SHAPE], launcher="torchrun", nproc=2,
                              launcher_args=["--standalone"], counters=COUNTERS, timeout_s=600)
    assert len(result.gated_dispatches) > 0
    gemmperf.assert_no_regression(result, threshold=THRESHOLD)
