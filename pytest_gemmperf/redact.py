"""Keep secrets out of everything gemmperf writes: point.json, run.json, logs, baselines,
history and reports.

Results and baselines are committed to git and uploaded as CI artifacts, while CI jobs carry
tokens in their environment (``HF_TOKEN``, ``AMD_API_KEY``...) and workloads take them as
arguments (``--token X``). A variable or option whose *name* matches :data:`SECRET_NAME`
(TOKEN, SECRET, KEY, PASSWORD, PASSWD, CREDENTIAL, AUTH, COOKIE, PRIVATE; any case, anywhere in
the name) is recorded as :data:`REDACTED`; in command lines and free text the values of such
variables are also replaced wherever they appear (a token passed as a bare argument). Only what
is recorded is redacted: the workload still receives the real values.

One set of *known values* serves every text: the secret-named variables of this process's
environment, plus every value the run has met since (:func:`remember`: a launch's ``env=`` and
the values of secret-named options in its command line). Whatever a workload prints goes
through :class:`StreamRedactor` on its way to the log, and every record, report, failure
message and JUnit property through :func:`scrub` / :func:`redact_record`, so a token printed
by the workload is hidden wherever its text is shown again.

Stdlib only: ``run/_reaper.py`` loads this file by path in an isolated interpreter.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from typing import Any, Callable, Iterable, Mapping, Sequence

REDACTED = "<redacted>"

#: a name that holds a secret (environment variable, command-line option, ``KEY=VALUE`` key)
SECRET_NAME = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|PRIVATE",
                         re.IGNORECASE)

#: Secret values shorter than this are not searched for inside other text: replacing every "1"
#: or "on" would mangle every record while such values protect nothing; a four-character PIN
#: or password is a secret.
MIN_SCRUB_LEN = 4

#: values of secret-named variables that say how, not what (``TOKENIZERS_PARALLELISM=false``,
#: ``PIP_KEYRING_PROVIDER=auto``): never searched for, or every "false" in a log would go
NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "auto", "disabled", "enabled",
                               "import", "subprocess", REDACTED})

#: record fields (at any depth) holding an environment mapping, a command line, or free text
#: that may quote one (an error message with the failed command)
ENV_FIELDS = frozenset({"env", "env_set"})
COMMAND_FIELDS = frozenset({"command", "resolved_command", "node_commands", "argv", "launcher",
                            "launcher_args"})
TEXT_FIELDS = frozenset({"error", "message"})

# an environment variable's name as a dict key: upper case, so "hw_key" is not one
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
# a quoted value runs to its closing quote, or to the end of an unbalanced text
_QUOTED = r"""'[^']*(?:'|$)|"[^"]*(?:"|$)|(?!--)[^\s'"]+"""


# the patterns of command lines and free text, compiled when the first one is redacted: a
# command that writes only metadata (gemmperf analyze's reports) never needs them

@functools.cache
def _argument_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """One argument as ``--option=VALUE``, as a bare ``--flag``, as ``NAME=VALUE``."""
    return (re.compile(r"(-{1,2}[^=\s]+)=(.*)", re.DOTALL), re.compile(r"-{1,2}[^=\s]+"),
            re.compile(r"([A-Za-z_][\w.-]*)=(.*)", re.DOTALL))


@functools.cache
def _text_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """``NAME=VALUE`` and ``--name VALUE`` in free text (a value quoted or not)."""
    return (re.compile(r"(?<![\w-])(-{0,2}[A-Za-z_][\w.-]*)=(" + _QUOTED + ")"),
            re.compile(r"(?<![\w-])(-{1,2}[A-Za-z_][\w.-]*)(\s+)(" + _QUOTED + ")"))


def is_secret_name(name: Any) -> bool:
    """True when a variable / option / key called ``name`` holds a secret."""
    return bool(SECRET_NAME.search(str(name)))


def is_searchable(value: Any) -> bool:
    """Whether a secret value is searched for in other text (:data:`MIN_SCRUB_LEN`,
    :data:`NOT_SECRET_VALUES`)."""
    v = str(value)
    return len(v) >= MIN_SCRUB_LEN and v.strip().lower() not in NOT_SECRET_VALUES


def _ordered(values: Iterable[str]) -> tuple[str, ...]:
    # longest first: a value containing another is replaced whole
    return tuple(sorted(set(values), key=lambda v: (-len(v), v)))


def secret_values(env: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """Values of ``env``'s secret-named variables (``os.environ`` when None) long enough to
    search for, longest first (a value containing another is replaced whole)."""
    env = os.environ if env is None else env
    return _ordered(str(v) for k, v in env.items() if is_secret_name(k) and is_searchable(v))


def _args(argv: Iterable[Any]) -> list[str]:
    return [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in argv]


def _named_values(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """Each argument as ``(what is kept, the secret value it gives or None)``: ``--token V``
    gives ``("", V)`` for ``V``, ``--api-key=V`` and ``HF_TOKEN=V`` give ``("--api-key=", V)``."""
    option, flag, assignment = _argument_patterns()
    out: list[tuple[str, str | None]] = []
    hide_next = False
    for arg in args:
        if hide_next and not arg.startswith("--"):
            out.append(("", arg))
            hide_next = False
            continue
        opt, assign = option.fullmatch(arg), assignment.fullmatch(arg)
        named = opt if opt and is_secret_name(opt.group(1)) else \
            assign if assign and is_secret_name(assign.group(1)) else None
        # a secret-named flag's value is the next argument, unless that is another long
        # option (a switch such as --no-auth takes none)
        hide_next = named is None and bool(flag.fullmatch(arg)) and is_secret_name(arg)
        out.append((named.group(1) + "=", named.group(2)) if named else (arg, None))
    return out


def argv_secret_values(argv: Any) -> tuple[str, ...]:
    """Values a command line gives to secret-named options and assignments (``--token V``,
    ``--api-key=V``, ``HF_TOKEN=V``, also inside a ``sh -c`` script): the values
    :func:`redact_argv` hides by name, to be searched for in what the workload prints."""
    if argv is None:
        return ()
    if isinstance(argv, str):
        try:
            argv = shlex.split(argv)
        except ValueError:
            return text_secret_values(argv)
    found: list[str] = []
    for kept, value in _named_values(_args(argv)):
        if value is not None:
            found.append(value)
        elif any(c.isspace() for c in kept):
            found.extend(text_secret_values(kept))
    return _ordered(v for v in found if is_searchable(v))


def text_secret_values(text: str) -> tuple[str, ...]:
    """Values of secret-named ``NAME=VALUE`` / ``--name VALUE`` in free text, unquoted."""
    found = [m.group(m.lastindex) for pattern in _text_patterns()
             for m in pattern.finditer(str(text)) if is_secret_name(m.group(1))]
    return _ordered(v for v in (_unquote(f) for f in found) if is_searchable(v))


def _unquote(value: str) -> str:
    quote = value[:1]
    if quote in ("'", '"'):
        inner = value[1:]
        return inner[:-1] if inner.endswith(quote) else inner
    return value


#: values the run has met that the environment does not hold (:func:`remember`)
_KNOWN: set[str] = set()


def remember(values: Iterable[Any]) -> None:
    """Add secret values the run has met (a launch's ``env=``, its command line's secret
    options) to those searched for in every text written or shown from now on."""
    _KNOWN.update(str(v) for v in values if is_searchable(v))


def known_values(extra: Iterable[Any] = ()) -> tuple[str, ...]:
    """Every secret value known to the run: the environment's, those :func:`remember` holds
    and ``extra``, longest first."""
    return _Known(_ordered([*secret_values(), *_KNOWN, *(str(v) for v in extra if is_searchable(v))]))


class _Known(tuple):
    """Values already joined with the environment's and the remembered ones."""


def _values(values: Iterable[str] | None) -> tuple[str, ...]:
    if isinstance(values, _Known):
        return values
    return known_values(() if values is None else values)


@functools.lru_cache(maxsize=64)
def _pattern(values: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(map(re.escape, values))) if values else None


@functools.lru_cache(maxsize=64)
def _bytes_pattern(values: tuple[str, ...]) -> re.Pattern[bytes] | None:
    encoded = _ordered(v.encode("utf-8", "surrogateescape") for v in values)  # type: ignore[arg-type]
    return re.compile(b"|".join(map(re.escape, encoded))) if encoded else None


#: markers tried after :data:`REDACTED`, then three of each of these characters
_OTHER_MARKERS = ("[redacted]", "(redacted)", "***")
_LAST_RESORT = "#*~^|"


def _overlaps(value: Any, marker: Any) -> bool:
    """Could ``value`` appear in a text where ``marker`` replaced something: inside the marker,
    holding it, or straddling its start or its end?"""
    if marker in value or value in marker:
        return True
    return any(value[:k] == marker[-k:] or value[-k:] == marker[:k]
               for k in range(1, min(len(value), len(marker))))


@functools.lru_cache(maxsize=64)
def marker_for(values: tuple[Any, ...]) -> Any:
    """The marker that replaces ``values`` (str or bytes): :data:`REDACTED` unless a value could
    be formed again from it and the text beside it (a value such as ``d>aaa`` after ``d>aaa`` +
    ``aaa``), then the first other marker none can overlap. One regex pass with such a marker
    leaves no value in the text: every match is replaced, and no value can reach into a marker."""
    as_bytes = bool(values) and isinstance(values[0], bytes)
    tried = (REDACTED, *_OTHER_MARKERS) + tuple(c * 3 for c in _LAST_RESORT)
    for m in tried:
        mark = m.encode() if as_bytes else m
        if not any(_overlaps(v, mark) for v in values):
            return mark
    # every candidate overlaps some value: a character no value holds cannot
    used = set(b"".join(values)) if as_bytes else set("".join(values))
    c = next(i for i in range(0x21, 0x110000) if (i if as_bytes else chr(i)) not in used)
    return bytes([c]) * 3 if as_bytes else chr(c) * 3


def scrub(text: str, values: Iterable[str] | None = None) -> str:
    """``text`` with every occurrence of a known secret value (:func:`known_values`, plus
    ``values``) replaced, in one pass over the text (:func:`marker_for`)."""
    vals = tuple(_values(values))
    pattern = _pattern(vals)
    return text if pattern is None else pattern.sub(marker_for(vals), text)


class StreamRedactor:
    """Scrubs a byte stream that arrives in chunks (a workload's output on its way to the log)
    before handing it to ``write``.

    Complete lines are written at once; the end of a line still arriving is held back as far
    as the longest known value reaches, so a secret split between two chunks is still found
    whole. :meth:`close` writes what is held."""

    def __init__(self, write: Callable[[bytes], Any], values: Iterable[str] | None = None) -> None:
        vals = tuple(_values(values))
        self._write = write
        self._pattern = _bytes_pattern(vals)
        encoded = tuple(v.encode("utf-8", "surrogateescape") for v in vals)
        self._marker = marker_for(encoded) if encoded else b""
        self._hold = max((len(v) for v in encoded), default=1) - 1
        self._lines_safe = not any("\n" in v for v in vals)
        self._held = b""

    def feed(self, data: bytes) -> None:
        if self._pattern is None:
            self._write(data)
            return
        buf = self._held + data
        cut = max(0, len(buf) - self._hold)
        if self._lines_safe:  # no value spans a line end: a complete line is safe to write
            cut = max(cut, buf.rfind(b"\n") + 1)
        for m in self._pattern.finditer(buf):
            if m.start() >= cut:
                break
            if m.end() > cut:  # a value across the cut is written whole, later
                cut = m.start()
                break
        self._held = buf[cut:]
        if cut:
            self._write(self._pattern.sub(self._marker, buf[:cut]))

    def close(self) -> None:
        held, self._held = self._held, b""
        if held:
            self._write(held if self._pattern is None else self._pattern.sub(self._marker, held))


def redact_env(env: Mapping[str, Any]) -> dict[str, str]:
    """``env`` with the value of every secret-named variable replaced (names and order kept)."""
    return {str(k): REDACTED if is_secret_name(k) else str(v) for k, v in env.items()}


def comparable_env(env: Mapping[str, Any]) -> dict[str, str]:
    """What two environments are compared on: their redacted form, so a record written with a
    secret's real value and one written with ``<redacted>`` describe the same environment."""
    return dict(sorted(redact_env(env).items()))


def redact_argv(argv: Sequence[Any], values: Iterable[str] | None = None) -> list[str]:
    """A command line as recorded: ``--token X``, ``--api-key=X``, ``HF_TOKEN=X`` (an ``env``
    wrapper's or a ``KEY=VALUE`` argument) and known secret values lose their values."""
    vals = _values(values)
    out: list[str] = []
    for kept, value in _named_values(_args(argv)):
        if value is not None:
            kept += REDACTED
        elif any(c.isspace() for c in kept):  # a script for a shell: sh -c "... --token X"
            kept = redact_text(kept, vals)
        out.append(scrub(kept, vals))
    return out


def _hide_value(m: re.Match) -> str:
    if not is_secret_name(m.group(1)):
        return m.group(0)
    return m.group(1) + (m.group(2) + REDACTED if m.lastindex == 3 else "=" + REDACTED)


def redact_text(text: str, values: Iterable[str] | None = None) -> str:
    """Free text (a log line, an error message, a command line as one string) with the values
    of secret-named ``NAME=VALUE`` / ``--name VALUE`` and of known secrets replaced."""
    assignment, option = _text_patterns()
    text = assignment.sub(_hide_value, str(text))
    text = option.sub(_hide_value, text)
    return scrub(text, _values(values))


def redact_command(command: Any, values: Iterable[str] | None = None) -> Any:
    """A recorded command in its own shape: a string stays a string (split and re-joined when
    it parses as shell words and holds a secret), a list of arguments a list, a list of command lines a list of
    them; None stays None."""
    vals = _values(values)
    if command is None:
        return None
    if isinstance(command, str):
        try:
            parts = shlex.split(command)
        except ValueError:  # unbalanced quotes: not shell words, redact as text
            return redact_text(command, vals)
        hidden = redact_argv(parts, vals)
        return command if hidden == parts else shlex.join(hidden)
    if isinstance(command, (list, tuple)):
        if any(isinstance(c, (list, tuple)) for c in command):
            return [redact_command(c, vals) for c in command]
        return redact_argv(command, vals)
    return redact_text(str(command), vals)


def redact_record(obj: Any, values: Iterable[str] | None = None) -> Any:
    """A JSON-like record (point.json, run.json, baseline metadata, history run_meta, report
    metadata) with every environment mapping, command line and error text redacted, at any
    depth. Everything else (paths, counts, keys such as ``hw_key``) is left as it is."""
    vals = _values(values)
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if k in ENV_FIELDS and isinstance(v, Mapping):
                out[k] = redact_env(v)
            elif k in COMMAND_FIELDS:
                out[k] = redact_command(v, vals)
            elif k in TEXT_FIELDS and isinstance(v, str):
                out[k] = redact_text(v, vals)
            elif isinstance(k, str) and _ENV_NAME.fullmatch(k) and is_secret_name(k) \
                    and isinstance(v, (str, int, float)):
                out[k] = REDACTED  # an environment mapping under a field of another name
            else:
                out[k] = redact_record(v, vals)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_record(v, vals) for v in obj]
    return obj


__all__ = ["COMMAND_FIELDS", "ENV_FIELDS", "MIN_SCRUB_LEN", "NOT_SECRET_VALUES", "REDACTED", "SECRET_NAME",
           "StreamRedactor", "TEXT_FIELDS", "argv_secret_values", "comparable_env", "is_searchable",
           "is_secret_name", "known_values", "redact_argv", "redact_command", "redact_env", "redact_record",
           "redact_text", "remember", "scrub", "secret_values", "text_secret_values"]
