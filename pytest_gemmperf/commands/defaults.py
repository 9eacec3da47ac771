"""Fixed names and defaults that a command's parser prints in ``--help`` and its work uses: one
light module both import, so the parser (loaded for ``--help``) and the ``<name>_impl`` module
(loaded when the command runs) never import each other."""

from __future__ import annotations

#: ``analyze`` / ``compare`` default outputs: a new .gemmperf/<name>/<time>-<random>/ per call
#: (workdir.py)
ANALYZE_OUT = "analyze"
COMPARE_OUT = "compare"
#: the gate's Benjamini-Hochberg level (``GateConfig.fdr``), named here because the gate's module
#: loads scipy and --help must not; tests/test_startup.py keeps the two equal
COMPARE_FDR = 0.01
#: ``history show``: runs per series in the trend table
HISTORY_LAST = 5
#: ``history check``'s default output: a new .gemmperf/history-check/<time>-<random>/ per call
#: (workdir.py; .gemmperf/history is the plugin's history store itself)
HISTORY_CHECK_OUT = "history-check"
#: test id of recorded inputs that carry none (a trace, a rocprofv3 directory, a samples
#: table): one name whatever the path, so runs read from per-job directories (ci-job-4711/)
#: form one series instead of a new one per run
HISTORY_TEST_ID = "gemmperf-history-record"
#: aorta ``rocprof_cu_only.yaml``: CU busy cycles, waves, wave cycles, MFMA instructions
ROCPROF_CU_ONLY_COUNTERS = ("SQ_BUSY_CU_CYCLES", "SQ_WAVES", "SQ_WAVE_CYCLES", "SQ_INSTS_MFMA")
#: ``rocprof-config`` when rocprofv3 is not installed and no --rocprof-version is given
ROCPROF_VERSION = "7.0"
