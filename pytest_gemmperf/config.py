"""Every gemmperf setting in one table, parsed in one place, found in one configuration.

A setting (:class:`Setting`) has one name, one parser, one default and one help text. pytest's
``--gemmperf-*`` options and ``gemmperf_*`` ini keys are generated from :data:`SETTINGS`
(``pytest_glue/options.py``); the ``gemmperf`` command's flags that mean the same thing (``--baseline-dir``,
``--threshold``, ``--history``, ``--jobs``, ``--warmup``) are added by :func:`add_cli_option`
from the same rows. Both front ends read the same project configuration: pytest finds its
inifile itself, the command finds it the way pytest does (:func:`find_project`), so
``gemmperf baseline refresh`` writes the store that pytest gates against. In both, the command
line wins over the configuration file, which wins over the default; a relative path in the file
is relative to the file's directory, a default one to the rootdir (the file's directory).

:func:`parse_threshold` is the one reading of a threshold, for pytest, the command,
``assert_no_regression(threshold=...)`` and the baseline record.

Standard library only: the command reads this before any subcommand imports pandas.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import configparser

#: values of the history setting that turn the run history off
HISTORY_OFF = ("none", "off", "no", "false", "0")
_ON = ("on", "true", "1")
_OFF = ("off", "false", "0")


class SettingError(ValueError):
    """A setting's value is wrong; ``str()`` is one line naming the flag or file and key."""


# ------------------------------------------------------------------------------------ parsers

def parse_threshold(value: str | float) -> float:
    """The gate's practical threshold as a relative change.

    ``"5%"``, ``"0.05"`` and ``0.05`` -> 0.05; ``"0"`` and ``"0%"`` -> 0.0 (the statistics
    alone); ``"12.5%"`` -> 0.125. A bare number >= 1 is refused, naming both readings: ``5``
    could mean 5 % or 500 %. Negative, non-numeric and non-finite values are refused; the
    ``ValueError`` message is one line."""
    hint = "write e.g. 5% or 0.05"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"threshold {value!r} is not a number: {hint}")
    text = value.strip() if isinstance(value, str) else ""
    percent = text.endswith("%")
    try:
        number = float(text[:-1] if percent else text) if isinstance(value, str) else float(value)
    except ValueError:
        raise ValueError(f"threshold {value!r} is not a number: {hint}") from None
    if not math.isfinite(number):
        raise ValueError(f"threshold {value!r} is not a finite number: {hint}")
    if number < 0:
        raise ValueError(f"threshold {value!r} is negative: {hint} (0: the statistics alone)")
    if percent:
        return number / 100 + 0.0
    if number >= 1:
        raise ValueError(f"threshold {value!r} is ambiguous: write {number:g}% (or {number / 100:g})")
    return number + 0.0  # -0.0 -> 0.0


def format_threshold(value: float) -> str:
    """0.25 -> ``25%`` (how the command says which threshold it used)."""
    return f"{100 * value:g}%"


def _number(kind: type[int] | type[float], low: float | None = None, high: float | None = None, *,
            unit: str = "", note: str = "", got: bool = True) -> Callable[[str], Any]:
    """A parser of one ``int`` or finite ``float`` setting, at least ``low`` and, with ``high``,
    at most ``high`` (``unit`` names the range's unit, ``note`` follows a lower bound alone;
    ``got`` adds the value read). Its errors are one line: ``invalid value 'x'``,
    ``must be >= 1 (an integer)``, ``must be 0..10 rounds, got 11``."""
    def shown(x: float) -> str:
        return f"{x:g}" if isinstance(x, float) else str(x)

    def parse(text: str) -> Any:
        try:
            x = kind(str(text).strip())
        except ValueError:
            raise ValueError(f"invalid value {text!r}") from None
        if isinstance(x, float) and not math.isfinite(x):
            raise ValueError(f"invalid value {text!r}")
        if low is None or (x >= low and (high is None or x <= high)):
            return x
        bound = f">= {shown(low)}{note}" if high is None else f"{shown(low)}..{shown(high)} {unit}"
        raise ValueError(f"must be {bound}" + (f", got {shown(x)}" if got else ""))
    return parse


def _positive(kind: type[int] | type[float], unit: str) -> Callable[[str], Any]:
    """A parser of a number that must be more than 0 (a time limit: 0 or less could never be
    met, and every point would fail as timed out): ``must be > 0 seconds, got -5``."""
    number = _number(kind)

    def parse(text: str) -> Any:
        x = number(text)
        if x <= 0:
            raise ValueError(f"must be > 0 {unit}, got {x:g}")
        return x
    return parse


def _int_at_least(low: int, note: str = "", got: bool = True) -> Callable[[str], int]:
    """The common row: an integer of at least ``low``."""
    return _number(int, low, note=note, got=got)


def _repeats(text: str) -> int | str:
    """A count >= 1, or ``auto`` (planned per point from its baseline)."""
    if str(text).strip().lower() == "auto":
        return "auto"
    return _int_at_least(1, " or auto", got=False)(text)


#: the ``jobs`` value meaning "auto" (``0`` is the same: its older spelling)
JOBS_AUTO = 0
#: ``jobs`` schemes naming a Dask distributed scheduler: ours, and Dask's own address form
CLUSTER_SCHEMES = ("dask", "tcp")
#: the port a Dask scheduler listens on unless told otherwise (``dask scheduler --port``)
DASK_DEFAULT_PORT = 8786


@dataclass(frozen=True)
class ClusterAddress:
    """``jobs`` as a Dask distributed scheduler (``dask://HOST[:PORT]`` or ``tcp://HOST[:PORT]``):
    the per-input work runs as tasks on its workers (``traces/cluster.py``)."""

    host: str
    port: int
    #: as the user wrote it, for error lines
    text: str

    @property
    def address(self) -> str:
        """The scheduler's address in Dask's own form (``tcp://HOST:PORT``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port}"


def parse_cluster_address(text: str) -> ClusterAddress | None:
    """``dask://HOST[:PORT]`` / ``tcp://HOST[:PORT]`` -> :class:`ClusterAddress` (port
    :data:`DASK_DEFAULT_PORT` when absent); None when ``text`` names no such scheme; a
    ``ValueError`` (one line) for such an address without a host, with a bad port, or with a
    path, query, fragment or user name."""
    raw = str(text).strip()
    scheme, sep, _ = raw.partition("://")
    if not sep or scheme.lower() not in CLUSTER_SCHEMES:
        return None
    parts = urlsplit(raw)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{raw!r}: the port must be a number 0..65535") from None
    if not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{raw!r} is not a scheduler address: write {scheme.lower()}://HOST:PORT")
    if port == 0:
        raise ValueError(f"{raw!r}: port 0 names no scheduler")
    return ClusterAddress(parts.hostname, DASK_DEFAULT_PORT if port is None else port, raw)


def _jobs(text: str) -> int | ClusterAddress:
    """``auto`` (or ``0``) -> :data:`JOBS_AUTO`: a pool of the usable cores where the
    estimate says it pays (``traces/parallel.py``), else serial; ``N >= 1``: at most N;
    ``dask://HOST:PORT`` (or ``tcp://``): a Dask scheduler's workers (:class:`ClusterAddress`)."""
    if str(text).strip().lower() == "auto":
        return JOBS_AUTO
    cluster = parse_cluster_address(text)
    if cluster is not None:
        return cluster
    return _int_at_least(0, " (or auto, or dask://HOST:PORT)")(text)


#: a time budget in seconds (0: off), up to a day
_SECONDS = _number(float, 0, 86400, unit="seconds")


def _on_off(text: str) -> bool:
    word = str(text).strip().lower()
    if word in _ON:
        return True
    if word in _OFF:
        return False
    raise ValueError(f"{word!r} is not on or off")


def _one_of(*names: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in names:
            raise ValueError(f"{text!r} is not one of {', '.join(names)}")
        return text
    return parse


# -------------------------------------------------------------------------------------- table

@dataclass(frozen=True)
class Setting:
    """One setting: pytest flag ``--gemmperf-<name>``, ini key ``gemmperf_<name>``, and the
    ``gemmperf`` command's flag ``cli`` where the command has one."""

    name: str
    #: pytest ini type: ``string``, ``bool`` (a flag) or ``linelist`` (a repeatable option)
    kind: str
    #: the value when nothing sets it, as the file would spell it (None: unset)
    default: str | bool | None
    #: ``VALUE`` in ``--flag=VALUE``; empty for a flag
    metavar: str
    #: the default as ``--help`` states it
    shown: str
    help: str
    #: text -> value; ValueError with a one-line message. None: the text as given
    parse: Callable[[str], Any] | None = None
    #: a path: relative values follow the ini file's directory (pytest: rootdir for a default)
    path: bool = False
    cli: str | None = None

    @property
    def ini(self) -> str:
        return f"gemmperf_{self.name}"

    @property
    def dest(self) -> str:
        """pytest's option dest (the ini key's spelling)."""
        return self.ini

    @property
    def flag(self) -> str:
        return "--gemmperf-" + self.name.replace("_", "-")

    def pytest_help(self) -> str:
        """The help text ending with its default, unless it states one already (``%%`` for
        argparse: pytest formats it like the command's help)."""
        if not self.shown or "default" in self.help:
            return self.help
        return f"{self.help} (default: {self.shown})"

    def ini_default(self) -> Any:
        """What ``config.getini`` returns when the file does not set the key: nothing, so the
        plugin can tell an unset key from one set to the default."""
        return {"bool": bool(self.default), "linelist": []}.get(self.kind, "")

    def convert(self, raw: Any) -> Any:
        """``raw`` (text from a flag or file, or the default) -> the value (ValueError)."""
        if raw is None or raw == "":
            raw = self.default
        if raw is None or self.parse is None:
            return raw
        return self.parse(raw)


def error_text(where: str, message: str) -> str:
    """``--gemmperf-x must be ...`` / ``--gemmperf-x: 'y' is not ...``: one line."""
    return f"{where} {message}" if message.startswith("must ") else f"{where}: {message}"


SETTINGS: tuple[Setting, ...] = (
    Setting("channels", "string", None, "C1,C2", "the values the test declares",
            "values of the channels axis, e.g. 28,56 (tests that declare the axis)"),
    Setting("threads", "string", None, "T1,T2", "the values the test declares",
            "values of the threads axis, e.g. 256,512"),
    Setting("kernels", "linelist", None, "REGEX", "the regexes the test declares",
            "kernel regexes replacing the declared ones (option repeatable)"),
    Setting("axis", "linelist", None, "NAME=V1,V2", "the values the test declares",
            "NAME=V1,V2: values of any declared axis (option repeatable)"),
    Setting("results_dir", "string", None, "DIR", ".gemmperf/results/<timestamp>",
            "results directory of this run (default .gemmperf/results/<timestamp>)", path=True),
    Setting("baseline_dir", "string", "baselines", "DIR", "baselines", "baseline store", path=True,
            cli="--baseline-dir"),
    Setting("report_dir", "string", ".gemmperf/report", "DIR", ".gemmperf/report", "report output directory",
            path=True),
    Setting("backend", "string", "auto", "NAME", "auto", "auto | rocprofv3 | torch | replay",
            parse=_one_of("auto", "rocprofv3", "torch", "replay")),
    Setting("replay", "string", None, "DIR", "none: run the workloads",
            "analyse existing outputs in DIR instead of running workloads", path=True),
    Setting("repeats", "string", "3", "N|auto", "3",
            "processes (repeats) per sweep point; auto: per point the smallest count that "
            "detects --gemmperf-detect, planned from its baseline (gemmperf plan; 3 while it has none)",
            parse=_repeats),
    Setting("detect", "string", None, "CHANGE", "none",
            "with --gemmperf-repeats auto: the slowdown each point's count must detect with "
            "80%% power, e.g. 3%%", parse=parse_threshold),
    Setting("max_repeats", "string", "16", "N", "16",
            "with --gemmperf-repeats auto: the most repeats per point it may choose",
            parse=_int_at_least(2)),
    Setting("threshold", "string", None, "T", "the gate's, 5%%",
            "practical threshold of the gate, e.g. 5%% or 0.05 (default: the gate's, 5%%)",
            parse=parse_threshold, cli="--threshold"),
    Setting("warmup", "string", None, "N", "0",
            "dispatches per kernel and process dropped as warm-up (default: 0)",
            parse=_int_at_least(0), cli="--warmup"),
    Setting("timeout", "string", "1800", "SECONDS", "1800", "seconds allowed per workload run",
            parse=_positive(float, "seconds")),
    Setting("gpus_per_point", "string", "0", "G", "0: no binding",
            "GPUs per point; xdist worker N gets GPUs [N*G, (N+1)*G)", parse=_int_at_least(0)),
    Setting("rocprofv3", "string", "rocprofv3", "EXE", "rocprofv3 on PATH", "rocprofv3 executable"),
    Setting("update_baselines", "bool", False, "", "off",
            "record the results of the selected tests as their baselines"),
    Setting("warn_only", "bool", False, "", "off", "report regressions without failing"),
    Setting("progress", "string", "on", "on|off", "on",
            "on | off: a line per point as it starts and ends and per workload process "
            "(-q: point lines only; -qq: none)", parse=_on_off),
    Setting("benchmark_json", "string", None, "PATH", "not written",
            "at the end of the session write the gated kernels' dispatch durations "
            "of every gated point as pytest-benchmark JSON to PATH", path=True),
    Setting("confirm", "string", "3", "N", "3",
            "re-run a suspicious point up to N rounds before blocking (its repeats each; "
            "0: off); the new processes join the candidate and the point is judged again",
            parse=_number(int, 0, 10, unit="rounds")),
    Setting("undecided", "string", "skip", "fail|skip|pass", "skip",
            "what a point the gate could not decide (an inconclusive gated row, no regression) "
            "does: fail (the test fails with the reason), skip (reported skipped with the "
            "reason) or pass (accepted); gemmperf compare: exit 1, 4 or 0",
            parse=_one_of("fail", "skip", "pass"), cli="--undecided"),
    Setting("quiet_wait", "string", "120", "SECONDS", "120", "before the confirmation re-runs of a disturbed "
            "point, wait for a quiet machine (measured load), up to SECONDS per point in all (0: no wait)", parse=_SECONDS),
    Setting("decide_budget", "string", "600", "SECONDS", "600", "re-run an undecided point whose CIs cross the "
            "threshold toward the processes they need (at most --gemmperf-max-repeats runs) while the re-runs "
            "fit in SECONDS (0: off)", parse=_SECONDS),
    Setting("learn_variance", "bool", False, "", "off",
            "add each compared run's between-process variance to its baseline's "
            "history (sharper gate over time; writes baselines/)"),
    Setting("telemetry", "string", "on", "on|off", "on",
            "on | off: sample host and GPU telemetry (clocks, power, temperature, "
            "throttling) while each point runs, into telemetry.parquet", parse=_on_off),
    Setting("telemetry_interval", "string", "0.1", "SECONDS", "0.1",
            "seconds between telemetry samples (0.01..60, default 0.1)",
            parse=_number(float, 0.01, 60, unit="seconds")),
    Setting("history", "string", ".gemmperf/history", "DIR|URL", ".gemmperf/history under the rootdir",
            "run-history store every gated point appends to: a directory or an fsspec URL; "
            "none/off: no history", path=True, cli="--history"),
    Setting("history_check", "bool", False, "", "off",
            "also fail a test whose history shows a regression change point within the "
            "last K runs (slow creep), naming the runs"),
    Setting("history_window", "string", "5", "K", "5",
            "K of --gemmperf-history-check: runs a change point counts as recent",
            parse=_int_at_least(1, " (an integer)", got=False), cli="--window"),
    Setting("shard", "string", None, "I/N", "no sharding",
            "I/N: run shard I of N of the sweep points (one CI job of a matrix), "
            "balanced by the baselines' recorded durations; also $GEMMPERF_SHARD"),
    Setting("jobs", "string", "auto", "N|auto|dask://HOST:PORT", "auto",
            "worker processes reading a point's trace files at once (auto: the usable cores, "
            "split between pytest-xdist workers, where the input is large enough for the pool's "
            "start-up to pay, else serial; 0: auto; 1: serial, no pool; dask://HOST:PORT: the "
            "workers of that Dask scheduler, pytest-gemmperf[dask]); the tables do not "
            "depend on it", parse=_jobs, cli="--jobs"),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_DEST: dict[str, Setting] = {s.dest: s for s in SETTINGS}


def default(name: str) -> Any:
    """A setting's default value, parsed (what ``Options`` starts from)."""
    return BY_NAME[name].convert(None)


# ------------------------------------------------------------------------ project configuration

@dataclass(frozen=True)
class ProjectConfig:
    """What the command found of the project's pytest configuration."""

    #: the file pytest would take as its inifile; None: none up to the file-system root
    path: Path | None
    #: pytest's rootdir: the file's directory, else the directory the search started in
    root: Path
    #: the ``gemmperf_*`` keys the file sets (text, or a list of lines)
    values: Mapping[str, str | list[str]] = field(default_factory=dict)
    #: False for a ``pyproject.toml`` without pytest settings, which pytest takes as its
    #: rootdir only
    has_settings: bool = True

    def line(self) -> str | None:
        """The one stderr line saying what was read (None: nothing found)."""
        if self.path is None:
            return None
        if not self.has_settings:
            return f"gemmperf: no project configuration found; paths relative to {self.root} ({self.path.name})"
        return f"gemmperf: settings from {self.path}"


def find_project(start: Path) -> ProjectConfig:
    """The configuration pytest would read when started in ``start``: walking up from it, in
    each directory the first of ``pytest.toml``, ``.pytest.toml``, ``pytest.ini``,
    ``.pytest.ini`` (always), ``pyproject.toml`` with ``[tool.pytest.ini_options]`` or
    ``[tool.pytest]``, ``tox.ini`` with ``[pytest]``, ``setup.cfg`` with ``[tool:pytest]``;
    failing those, the nearest ``pyproject.toml`` names the rootdir. A file that cannot be
    parsed raises :class:`SettingError` naming it."""
    start = Path(start).absolute()
    first_pyproject: Path | None = None
    for base in (start, *start.parents):
        for name, loader in _LOADERS:
            p = base / name
            if not p.is_file():
                continue
            if name == "pyproject.toml" and first_pyproject is None:
                first_pyproject = p
            found = loader(p)
            if found is not None:
                values = {k: v for k, v in found.items() if k.startswith("gemmperf_")}
                return ProjectConfig(path=p, root=base, values=values)
    if first_pyproject is not None:
        return ProjectConfig(path=first_pyproject, root=first_pyproject.parent, has_settings=False)
    return ProjectConfig(path=None, root=start, has_settings=False)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def _ini_sections(path: Path) -> configparser.ConfigParser:
    # only a project with an ini-style file reads one (the parser's module costs ~1 ms to import)
    import configparser  # lazy: see above

    # as pytest's iniconfig: no interpolation, case-sensitive keys, '#'/';' whole-line comments
    cp = configparser.ConfigParser(interpolation=None, delimiters=("=", ":"),
                                   comment_prefixes=("#", ";"), inline_comment_prefixes=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        cp.read_string(_read_text(path), source=str(path))
    except configparser.Error as exc:
        raise SettingError(f"{path}: not a valid ini file: {' '.join(str(exc).split())}") from None
    return cp


def _section(path: Path, name: str) -> dict[str, str] | None:
    cp = _ini_sections(path)
    return {k: v.strip() for k, v in cp.items(name, raw=True)} if cp.has_section(name) else None


def _toml(path: Path) -> dict[str, Any]:
    # only a project with a TOML file reads one (tomllib compiles its patterns on import: ~1.5 ms)
    import tomllib  # lazy: see above

    try:
        return tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise SettingError(f"{path}: not valid TOML: {exc}") from None


def _ini_text(value: Any) -> str | list[str]:
    """A TOML value as pytest's ini mode sees it: lists stay lists, the rest is text."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _load_pytest_toml(path: Path) -> dict[str, Any]:
    table = _toml(path).get("pytest")
    return {k: _ini_text(v) for k, v in table.items()} if isinstance(table, dict) else {}


def _load_pyproject(path: Path) -> dict[str, Any] | None:
    tool = _toml(path).get("tool")
    pytest_table = tool.get("pytest") if isinstance(tool, dict) else None
    if not isinstance(pytest_table, dict):
        return None
    ini = pytest_table.get("ini_options")
    native = {k: v for k, v in pytest_table.items() if k != "ini_options"}
    table = native or ini
    if not isinstance(table, dict):
        return None
    return {k: _ini_text(v) for k, v in table.items()}


_LOADERS: tuple[tuple[str, Callable[[Path], dict[str, Any] | None]], ...] = (
    ("pytest.toml", _load_pytest_toml),
    (".pytest.toml", _load_pytest_toml),
    ("pytest.ini", lambda p: _section(p, "pytest") or {}),
    (".pytest.ini", lambda p: _section(p, "pytest") or {}),
    ("pyproject.toml", _load_pyproject),
    ("tox.ini", lambda p: _section(p, "pytest")),
    ("setup.cfg", lambda p: _section(p, "tool:pytest")),
)


def resolve_path(value: str, base: Path, *, strict_base: bool = True) -> Path:
    """``value`` (``~`` expanded) as an absolute path: as given when absolute, else below
    ``base``; resolved (links followed) when ``strict_base``, as the plugin resolves a flag's
    or the ini file's path; a default stays ``rootdir / value``, as pytest's ``rootpath``."""
    p = Path(os.path.expanduser(str(value)))
    if p.is_absolute():
        return p
    return (base / p).resolve() if strict_base else base / p


# --------------------------------------------------------------------------- the command's flags

#: argparse attribute listing the settings a (sub)command's parser added
BOUND = "_gemmperf_settings"
#: argparse attribute: {setting: predicate(args)} for settings a command uses only sometimes
IN_USE = "_gemmperf_in_use"


@dataclass(frozen=True)
class Origin:
    """Where a setting's value came from: ``flag`` / ``file`` / ``default``, and in words."""

    kind: str
    text: str


def add_cli_option(parser: Any, name: str, *, help: str | None = None,
                   in_use: Callable[[Any], bool] | None = None) -> None:
    """Add setting ``name``'s flag to an argparse parser: its metavar, its help with the
    default stated (``help`` replaces the table's text; one that names its default keeps
    it). The value is filled in after parsing by :func:`resolve_cli`, so ``--help`` reads no
    file. ``in_use(args)``: whether this invocation uses the setting at all (else it never
    makes the command say where its settings came from)."""
    s = BY_NAME[name]
    text = help or s.help
    if "default" not in text:
        text = f"{text} (default: the project's {s.ini}, else {s.shown})"
    parser.add_argument(s.cli, dest=name, default=None, metavar=s.metavar, help=text)
    parser.set_defaults(**{BOUND: (*(parser.get_default(BOUND) or ()), name)})
    if in_use is not None:
        parser.set_defaults(**{IN_USE: {**(parser.get_default(IN_USE) or {}), name: in_use}})


def bound_settings(args: Any) -> tuple[str, ...]:
    """The settings whose flags the chosen (sub)command has."""
    return tuple(getattr(args, BOUND, None) or ())


def resolve_cli(args: Any, project: ProjectConfig) -> dict[str, Origin]:
    """Fill each bound setting of ``args``: the flag as given, else the project file's value,
    else the default; parsed by the setting's parser. Path values from the file follow the
    file's directory and defaults the rootdir (as the plugin resolves them); a flag's path
    stays as typed (relative to the current directory). Returns where each value came from;
    a bad value raises :class:`SettingError` naming the flag or the file and key."""
    origins: dict[str, Origin] = {}
    for name in bound_settings(args):
        s = BY_NAME[name]
        raw = getattr(args, name, None)
        if raw is not None:
            origin = Origin("flag", s.cli or s.flag)
        elif s.ini in project.values:
            raw, origin = project.values[s.ini], Origin("file", f"{s.ini} in {project.path}")
            if isinstance(raw, list):
                raw = " ".join(raw)
        else:
            raw, origin = None, Origin("default", "default")
        if name == "history" and origin.kind == "file" and str(raw).strip().lower() in HISTORY_OFF:
            setattr(args, name, None)  # the project turned it off; a command needing it says so
            origins[name] = origin
            continue
        try:
            value = s.convert(raw)
        except ValueError as exc:
            where = origin.text if origin.kind != "file" else f"{project.path}: {s.ini}"
            raise SettingError(error_text(where, str(exc))) from None
        if s.path and value is not None and origin.kind != "flag" and "://" not in str(value):
            value = str(resolve_path(value, project.root, strict_base=origin.kind == "file"))
        setattr(args, name, value)
        origins[name] = origin
    return origins


def settings_line(args: Any, project: ProjectConfig, origins: Mapping[str, Origin], here: Path) -> str | None:
    """The stderr line naming the project file, when it changed what this invocation does: a
    value it uses came from the file, or a default path was anchored at the file's directory
    rather than ``here``. None otherwise (a command run with flags only stays quiet)."""
    in_use = getattr(args, IN_USE, None) or {}

    def shaped_by_file(name: str, origin: Origin) -> bool:
        if name in in_use and not in_use[name](args):
            return False
        return origin.kind == "file" or (origin.kind == "default" and BY_NAME[name].path
                                         and project.root != here)

    line = project.line()
    return line if line and any(shaped_by_file(n, o) for n, o in origins.items()) else None
