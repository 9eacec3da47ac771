"""The settings table (``config.SETTINGS``) as pytest sees it: ``--gemmperf-*`` options, ini
keys, and their resolution into :class:`Options`.

Command-line options override ini values (``gemmperf_*``), which override the table's
defaults; a bad value is one ``UsageError`` line naming where it was set. An xdist worker
resolves the same options and receives what must be one per session (the results directory,
the history's run id) from the controller through ``workerinput``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_gemmperf.config import BY_DEST, HISTORY_OFF, SETTINGS, default, error_text, resolve_path
from pytest_gemmperf.pytest_glue.history import HistorySettings, new_run

# the package exports the ``sweep`` decorator under the module's name
sweep_mod = importlib.import_module("pytest_gemmperf.sweep")

#: what the xdist controller hands each worker (``hooks.XdistHooks``)
WORKERINPUT_DIR = "gemmperf_results_dir"
WORKERINPUT_ARGV = "gemmperf_argv"
WORKERINPUT_HISTORY = "gemmperf_history_run"


@dataclass(frozen=True)
class Options:
    """The ``--gemmperf-*`` options after command line > ini > default resolution (defaults:
    the settings table, ``config.py``)."""

    results_dir: Path
    baseline_dir: Path
    report_dir: Path
    backend: str = default("backend")
    replay_dir: Path | None = None
    repeats: int = default("repeats")
    threshold: float | None = None
    warmup: int | None = None
    timeout_s: float = default("timeout")
    gpus_per_point: int = default("gpus_per_point")
    update_baselines: bool = False
    warn_only: bool = False
    rocprofv3: str = default("rocprofv3")
    learn_variance: bool = False
    #: confirmation rounds for a suspicious point (gate/confirm.py ConfirmConfig.rounds); 0 disables
    confirm: int = default("confirm")
    #: sample host/GPU telemetry while points run (run/telemetry.py)
    telemetry: bool = default("telemetry")
    telemetry_interval_s: float = default("telemetry_interval")
    #: worker processes reading trace files (traces/parallel.py); 0: every usable core
    jobs: int = default("jobs")
    #: ``--gemmperf-repeats auto``: each point's count planned from its baseline (gate/power.py)
    #: to detect a slowdown of ``detect``, at most ``max_repeats``; ``repeats`` without a baseline
    repeats_auto: bool = False
    detect: float | None = None
    max_repeats: int = default("max_repeats")
    #: what an undecided point does to its test: fail, skip or pass (gate/outcome.py)
    undecided: str = default("undecided")
    #: seconds a disturbed point's confirmation re-run waits for a quiet machine
    quiet_wait_s: float = default("quiet_wait")
    #: seconds of re-runs an undecided point may take to reach the processes it needs
    decide_budget_s: float = default("decide_budget")


def add_options(parser: pytest.Parser) -> None:
    """Every row of the settings table as a ``--gemmperf-*`` option and a ``gemmperf_*`` ini key."""
    group = parser.getgroup("gemmperf", "GPU kernel performance gate (pytest-gemmperf)")
    for s in SETTINGS:  # the one table of settings (config.py)
        help_text = s.pytest_help()
        if s.kind == "bool":
            group.addoption(s.flag, action="store_true", default=None, dest=s.dest, help=help_text)
        elif s.kind == "linelist":
            group.addoption(s.flag, action="append", default=None, dest=s.dest, metavar=s.metavar,
                            help=help_text)
        else:
            group.addoption(s.flag, action="store", default=None, dest=s.dest, metavar=s.metavar,
                            help=help_text)
        parser.addini(s.ini, help=help_text.replace("%%", "%"), type=s.kind, default=s.ini_default())


def setting(config: pytest.Config, dest: str) -> tuple[Any, str]:
    """(value, where): the command line (``cli``) wins over the ini file (``ini``), which wins
    over the table's default (``default``); the value as given, not yet parsed."""
    value = config.getoption(dest)
    if value is not None:
        return value, "cli"
    s = BY_DEST[dest]
    value = config.getini(s.ini)
    if s.kind == "bool":
        return bool(value), "ini"
    if s.kind == "linelist":
        return (list(value) or None), "ini"
    return (value, "ini") if value not in ("", None) else (s.default, "default")


def setting_value(config: pytest.Config, dest: str) -> Any:
    """A setting's parsed value; a bad one is a one-line ``UsageError`` naming where it was set."""
    try:
        return BY_DEST[dest].convert(setting(config, dest)[0])
    except ValueError as exc:
        raise pytest.UsageError(error_text(flag_name(config, dest), str(exc))) from None


def path_setting(config: pytest.Config, dest: str) -> Path | None:
    """A path setting, resolved against where it was given; None when unset."""
    value, where = setting(config, dest)
    if value in (None, ""):
        return None
    if where == "default":  # a default follows the rootdir
        return resolve_path(value, config.rootpath, strict_base=False)
    # relative command-line paths follow the invocation directory, ini paths the ini file
    base = (config.invocation_params.dir if where == "cli"
            else (config.inipath.parent if config.inipath else config.rootpath))
    return resolve_path(value, Path(base))


def resolve_options(config: pytest.Config, results_dir: Path) -> Options:
    """Every ``--gemmperf-*`` option of this session resolved and checked (``results_dir``: the
    session's, made by the controller)."""
    backend = setting_value(config, "gemmperf_backend")
    replay = path_setting(config, "gemmperf_replay")
    if backend == "replay" and replay is None:
        raise pytest.UsageError("--gemmperf-backend replay needs --gemmperf-replay DIR")
    if replay is not None and not replay.is_dir():
        raise pytest.UsageError(f"--gemmperf-replay: {replay} is not a directory")
    repeats = setting_value(config, "gemmperf_repeats")
    auto = repeats == "auto"
    detect = setting_value(config, "gemmperf_detect")
    if auto and not detect:
        raise pytest.UsageError("--gemmperf-repeats auto needs --gemmperf-detect (e.g. 3%)")
    return Options(
        results_dir=results_dir,
        baseline_dir=path_setting(config, "gemmperf_baseline_dir"),
        report_dir=path_setting(config, "gemmperf_report_dir"),
        backend=backend, replay_dir=replay, repeats=default("repeats") if auto else repeats,
        repeats_auto=auto, detect=detect, max_repeats=setting_value(config, "gemmperf_max_repeats"),
        threshold=setting_value(config, "gemmperf_threshold"),
        warmup=setting_value(config, "gemmperf_warmup"),
        # 0 s was read as "the default" before the table existed: kept so
        timeout_s=setting_value(config, "gemmperf_timeout") or default("timeout"),
        gpus_per_point=setting_value(config, "gemmperf_gpus_per_point"),
        update_baselines=bool(setting_value(config, "gemmperf_update_baselines")),
        warn_only=bool(setting_value(config, "gemmperf_warn_only")),
        rocprofv3=str(setting_value(config, "gemmperf_rocprofv3")),
        learn_variance=bool(setting_value(config, "gemmperf_learn_variance")),
        confirm=setting_value(config, "gemmperf_confirm"),
        telemetry=setting_value(config, "gemmperf_telemetry"),
        telemetry_interval_s=setting_value(config, "gemmperf_telemetry_interval"),
        jobs=setting_value(config, "gemmperf_jobs"),
        undecided=setting_value(config, "gemmperf_undecided"),
        quiet_wait_s=setting_value(config, "gemmperf_quiet_wait"),
        decide_budget_s=setting_value(config, "gemmperf_decide_budget"),
    )


def axis_overrides(config: pytest.Config) -> tuple[dict[str, list], list[str] | None]:
    """Axis values and kernel regexes from the command line / ini, validated here, before
    collection: a bad value is one ``UsageError`` line (exit 4), never a run with
    ``NCCL_NTHREADS=abc`` nor a traceback per module. User axes are checked against their
    declarations when the tests are collected (``hooks.pytest_generate_tests``)."""
    values: dict[str, list] = {}
    flag = ""
    try:
        for dest, axis in (("gemmperf_channels", "channels"), ("gemmperf_threads", "threads")):
            flag = flag_name(config, dest)
            raw = setting(config, dest)[0]
            if raw not in (None, ""):
                values[axis] = sweep_mod.check_builtin_values(axis, sweep_mod.parse_values(raw))
        flag = flag_name(config, "gemmperf_axis")
        for item in setting(config, "gemmperf_axis")[0] or ():
            name, vals = sweep_mod.parse_axis_override(item)
            if name in sweep_mod.BUILTIN_AXES:
                vals = sweep_mod.check_builtin_values(name, vals)
            values[name] = vals
        flag = flag_name(config, "gemmperf_kernels")
        kernels = setting(config, "gemmperf_kernels")[0]
        if kernels:
            sweep_mod.check_kernels(kernels)
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"{flag}: {exc}") from None
    return values, (list(kernels) if kernels else None)


def flag_name(config: pytest.Config, dest: str) -> str:
    """How the user spelled a setting: ``--gemmperf-x`` or ``gemmperf_x (ini)``."""
    return ("--" + dest.replace("_", "-")) if config.getoption(dest) is not None \
        else f"{BY_DEST[dest].ini} (ini)"


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (its controller writes the session's files)."""
    return hasattr(config, "workerinput")


def history_settings(config: pytest.Config, results_dir: Path) -> HistorySettings | None:
    """The run history of this session (``history.py``), None when turned off. One run
    id and time per session: the controller makes them, xdist workers receive a copy."""
    raw, _ = setting(config, "gemmperf_history")
    check = bool(setting(config, "gemmperf_history_check")[0])
    if raw is not None and str(raw).strip().lower() in HISTORY_OFF:
        if check:
            raise pytest.UsageError("--gemmperf-history-check needs a history (--gemmperf-history is off)")
        return None
    window = setting_value(config, "gemmperf_history_window")
    if raw is not None and "://" in str(raw):
        url = str(raw)
    else:
        url = str(path_setting(config, "gemmperf_history"))
    run = (dict(config.workerinput[WORKERINPUT_HISTORY]) if is_worker(config)
           and WORKERINPUT_HISTORY in config.workerinput else new_run(results_dir, config.rootpath))
    return HistorySettings(url=url, run_id=run["run_id"], time=run["time"], branch=run.get("branch"),
                           check=check, window=window)
