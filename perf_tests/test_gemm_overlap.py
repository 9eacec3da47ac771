"""GEMMs concurrent with all-reduce traffic, swept and gated against ``baselines/``.

On a GPU machine the sweep is the RCCL/NCCL one (channels x threads per block), the gated
kernels are the GEMMs, and ``auto`` profiles with rocprofv3 (ROCm) or the PyTorch profiler (CUDA).
Each point runs 2 ranks, one GPU each; on a machine with one visible GPU it runs 1 rank, since
NCCL/RCCL refuse two ranks on one device (the all-reduce then moves no data between GPUs, but
the GEMM kernels, the gate and the reports are exercised all the same).

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


RANKS = 2


def ranks_per_point(gpus_per_point: int) -> int:
    """``RANKS``, or fewer on a GPU machine with fewer visible GPUs (one rank per GPU)."""
    if not ON_GPU:
        return RANKS
    if gpus_per_point > 0:  # --gemmperf-gpus-per-point: each xdist worker sees that many
        return max(1, min(RANKS, gpus_per_point))
    import torch  # already imported by the gemm_comm_workload fixture

    # ROCm builds count HIP devices here; honours CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES
    return max(1, min(RANKS, torch.cuda.device_count()))


@SWEEP
def test_gemm_comm_overlap(gemmperf, gemm_comm_workload):
    nproc = ranks_per_point(gemmperf.options.gpus_per_point)
    result = gemmperf.profile([str(gemm_comm_workload), *SHAPE], launcher="torchrun", nproc=nproc,
                              launcher_args=["--standalone"], counters=COUNTERS,
                              timeout_s=min(600.0, gemmperf.options.timeout_s))
    assert len(result.gated_dispatches) > 0
    gemmperf.assert_no_regression(result, threshold=THRESHOLD)
