"""Keep secrets out of everything gemmperf writes: point.json, run.json, logs, baselines,
history and reports.

Results and baselines are committed to git and uploaded as CI artifacts, while CI jobs carry
tokens in their environment (``HF_TOKEN``, ``AMD_API_KEY``...) and workloads take them as
arguments (``--token X``). A variable or option whose *name* matches :data:`SECRET_NAME`
(TOKEN, SECRET, KEY, PASSWORD, PASSWD, CREDENTIAL, AUTH, COOKIE, PRIVATE; any case, anywhere in
the name) is recorded as :data:`REDACTED`; in command lines and free text the values of such
variables are also replaced wherever they appear (a token passed as a bare argument). Only what
is recorded is redacted: the workload still receives the real values.

Stdlib only: ``run/_reaper.py`` loads this file by path in an isolated interpreter.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Iterable, Mapping, Sequence

REDACTED = "<redacted>"

#: a name that holds a secret (environment variable, command-line option, ``KEY=VALUE`` key)
SECRET_NAME = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|PRIVATE",
                         re.IGNORECASE)

#: Secret values shorter than this are not searched for inside other text: replacing every "1"
#: or "true" would mangle the record while such values protect nothing.
MIN_SCRUB_LEN = 8

#: record fields (at any depth) holding an environment mapping, a command line, or free text
#: that may quote one (an error message with the failed command)
ENV_FIELDS = frozenset({"env", "env_set"})
COMMAND_FIELDS = frozenset({"command", "resolved_command", "node_commands", "argv", "launcher",
                            "launcher_args"})
TEXT_FIELDS = frozenset({"error"})

# an environment variable's name as a dict key: upper case, so "hw_key" is not one
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_OPTION = re.compile(r"(-{1,2}[^=\s]+)=(.*)", re.DOTALL)
_FLAG = re.compile(r"-{1,2}[^=\s]+")
_ASSIGNMENT = re.compile(r"([A-Za-z_][\w.-]*)=(.*)", re.DOTALL)
_QUOTED = r"""'[^']*'|"[^"]*"|(?!--)[^\s'"]+"""
_TEXT_ASSIGNMENT = re.compile(r"(?<![\w-])(-{0,2}[A-Za-z_][\w.-]*)=(" + _QUOTED + ")")
_TEXT_OPTION = re.compile(r"(?<![\w-])(-{1,2}[A-Za-z_][\w.-]*)(\s+)(" + _QUOTED + ")")


def is_secret_name(name: Any) -> bool:
    """True when a variable / option / key called ``name`` holds a secret."""
    return bool(SECRET_NAME.search(str(name)))


def secret_values(env: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """Values of ``env``'s secret-named variables (``os.environ`` when None) long enough to
    search for, longest first (a value containing another is replaced whole)."""
    env = os.environ if env is None else env
    found = {str(v) for k, v in env.items() if is_secret_name(k) and len(str(v)) >= MIN_SCRUB_LEN}
    return tuple(sorted(found, key=lambda v: (-len(v), v)))


def _values(values: Iterable[str] | None) -> tuple[str, ...]:
    return secret_values() if values is None else tuple(values)


def scrub(text: str, values: Iterable[str] | None = None) -> str:
    """``text`` with every occurrence of a known secret value replaced."""
    for v in _values(values):
        if v and v in text:
            text = text.replace(v, REDACTED)
    return text


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
    hide_next = False
    for raw in argv:
        arg = os.fspath(raw) if isinstance(raw, os.PathLike) else str(raw)
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        opt, assign = _OPTION.fullmatch(arg), _ASSIGNMENT.fullmatch(arg)
        if opt and is_secret_name(opt.group(1)):
            arg = f"{opt.group(1)}={REDACTED}"
        elif assign and is_secret_name(assign.group(1)):
            arg = f"{assign.group(1)}={REDACTED}"
        elif _FLAG.fullmatch(arg) and is_secret_name(arg):
            # the value is the next argument, unless that is another long option (a switch
            # such as --no-auth takes none)
            hide_next = True
        elif any(c.isspace() for c in arg):  # a script for a shell: sh -c "... --token X"
            arg = redact_text(arg, vals)
        out.append(scrub(arg, vals))
    return out


def _hide_value(m: re.Match) -> str:
    if not is_secret_name(m.group(1)):
        return m.group(0)
    return m.group(1) + (m.group(2) + REDACTED if m.lastindex == 3 else "=" + REDACTED)


def redact_text(text: str, values: Iterable[str] | None = None) -> str:
    """Free text (a log line, an error message, a command line as one string) with the values
    of secret-named ``NAME=VALUE`` / ``--name VALUE`` and of known secrets replaced."""
    text = _TEXT_ASSIGNMENT.sub(_hide_value, str(text))
    text = _TEXT_OPTION.sub(_hide_value, text)
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


__all__ = ["COMMAND_FIELDS", "ENV_FIELDS", "MIN_SCRUB_LEN", "REDACTED", "SECRET_NAME", "TEXT_FIELDS",
           "comparable_env", "is_secret_name", "redact_argv", "redact_command", "redact_env",
           "redact_record", "redact_text", "scrub", "secret_values"]
