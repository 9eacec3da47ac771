"""The baseline store and the results files the gate reads and writes: storage, not statistics.

Each module has one job:

* :mod:`~pytest_gemmperf.store.record` -- a record's content: samples, variance history,
  ``summary.yaml``, ``meta.json``; encoding, checks, per-point merge, diffs (pure, no I/O).
* :mod:`~pytest_gemmperf.store.baselines` -- :class:`BaselineStore`: the on-disk layout, the
  writers' lock, crash-proof transactions over immutable record versions, the history's keeping,
  pruning, verification.
* :mod:`~pytest_gemmperf.store.transactions` and :mod:`~pytest_gemmperf.store.fs` -- the
  journal (stage, commit, apply, recover) and the file-system steps every write goes through.
* :mod:`~pytest_gemmperf.store.hardware` -- the hardware key a record is filed under and the
  run metadata stored beside it.
* :mod:`~pytest_gemmperf.store.results` -- reading a finished results directory into samples
  and records (``baseline refresh|learn|diff``, ``gemmperf compare``).
* :mod:`~pytest_gemmperf.store.compare_inputs` -- one side of ``gemmperf compare``: traces,
  results directories, baselines or samples files, as samples; the hardware key to read.
* :mod:`~pytest_gemmperf.store.verdicts_file` -- a test's ``verdicts.csv`` in a results
  directory, merged point by point.

Layering (``docs/ARCHITECTURE.md``): ``sweep -> run -> traces -> analysis -> gate -> store ->
report``. The store sits above the gate because a record is made of the gate's samples
(``gate.samples``) and its variance history of the gate's per-run contributions
(``gate.compare.variance_contribution``); the gate never imports the store, so ``gate/`` stays
statistics only. The store never imports the pytest glue (``plugin.py``, ``pytest_glue/``) or
``commands/``: they call it. Nothing writes a baseline implicitly: :meth:`BaselineStore.save` /
``save_many`` are called by an explicit refresh only.

This file imports nothing, so that importing one module (``store.fs`` in a killed writer, say)
loads only what that module needs.
"""
