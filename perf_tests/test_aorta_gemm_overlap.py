"""The aorta GEMM/communication-overlap workload (ROCm/aorta ``train.py``), swept like
``scripts/gemm_analysis/run_train_various_channels.sh``: channels 28/42/56/70 x RCCL threads per
block 256/512, 8 ranks, GEMM kernels gated and counter-profiled.

Skipped with the reason when no aorta checkout is found (``AORTA_DIR``). The trainer writes its
PyTorch profiler traces to ``<training.output_dir>/torch_profiler/rank<R>/``; ``{output_dir}`` is
replaced by each repeat's ``raw/`` directory, so the torch backend finds them there.
"""

from __future__ import annotations

from pytest_gemmperf import sweep

CONFIG = "config/single_node/gemm_overlap_comm.yaml"


@sweep(channels=[28, 42, 56, 70], threads=[256, 512], kernels=[r"^Cijk_", r"gemm"])
def test_aorta_gemm_overlap(gemmperf, aorta_dir):
    result = gemmperf.profile(
        ["train.py", "--config", CONFIG,
         "--override", "profiling.tensorboard=false",
         "--override", "training.output_dir={output_dir}"],
        launcher="torchrun", nproc=8, cwd=aorta_dir,
        env={"PYTORCH_ROCM_PROFILER_ENABLE_TRACING": "1"},
        counters=["SQ_BUSY_CU_CYCLES", "SQ_WAVES", "SQ_WAVE_CYCLES", "SQ_INSTS_MFMA"],
    )
    gemmperf.assert_no_regression(result)
