"""The baseline store's public names, in one import (``from pytest_gemmperf.gate.baseline import ...``).

The store is three modules, each with one job:

* :mod:`pytest_gemmperf.gate.record` -- a record's content: samples, variance history,
  ``summary.yaml``, ``meta.json``; encoding, checks, per-point merge, diffs (pure, no I/O).
* :mod:`pytest_gemmperf.gate.store` -- :class:`BaselineStore`: the on-disk layout, the writers'
  lock, crash-proof transactions over immutable record versions, the history's keeping,
  pruning, verification; its I/O primitives are :mod:`pytest_gemmperf.gate.store_fs`.
* :mod:`pytest_gemmperf.gate.results_source` -- reading a finished results directory into
  samples and records (``baseline refresh|learn|diff``, ``gemmperf compare``).

Nothing writes a baseline implicitly: :meth:`BaselineStore.save` / ``save_many`` are called by
an explicit refresh only.
"""

from __future__ import annotations

from pytest_gemmperf.gate.record import (_DATA_FILES, _KEY_COLUMNS, MAX_HISTORY_RUNS, META_FILE,  # noqa: F401
                                         SAMPLE_COLUMNS, SAMPLES_FILE, SCHEMA_VERSION, SUMMARY_DIGITS,
                                         SUMMARY_FILE, VARIANCE_COLUMNS, VARIANCE_FILE, BaselineRecord,
                                         _changed_points, _check_summary, _now, _parse_blobs, _parse_meta,
                                         _samples_from_parquet, _samples_to_parquet, _sha256,
                                         _variance_from_parquet, _variance_to_parquet, add_history,
                                         diff_records, kept_points, merge_records, normalize_samples,
                                         parse_time, render_summary, slug_for_test, summarize,
                                         version_name, versions_of)
from pytest_gemmperf.gate.results_source import (_BAD_STATUSES, records_from_results,  # noqa: F401
                                                 refresh_from_results, resolve_results_dir,
                                                 results_samples)
from pytest_gemmperf.gate.store import LOCK_DIR, LOCK_TIMEOUT_S, BaselineStore  # noqa: F401
from pytest_gemmperf.gate.store_txn import TXN_DIR  # noqa: F401
from pytest_gemmperf.gate.store_fs import atomic_write as _atomic_write  # noqa: F401
from pytest_gemmperf.gate.store_fs import fsync_dir as _fsync_dir  # noqa: F401
