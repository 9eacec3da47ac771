"""Sweep points: axes, their Cartesian product, readable point ids and each point's environment.

A test declares its sweep with :func:`sweep`, which returns a pytest mark; the plugin expands the
mark into one test item per point (``test_x[ch28-th256]``). Axes the plugin knows:

* ``channels`` (id ``ch``) -> ``NCCL_MIN_NCHANNELS`` and ``NCCL_MAX_NCHANNELS`` (both, so the
  value is the channel count, not just a cap as in the aorta sweep script);
* ``threads`` (id ``th``) -> ``RCCL_THREADS_PER_BLOCK`` and ``NCCL_NTHREADS``;
* ``kernels`` -> regexes selecting the gated (and counter-profiled) kernels; not part of the id.

Every point also gets ``HSA_ENABLE_SDMA=0`` (copies as blit kernels, as the aorta sweep does)
unless the sweep's ``env`` overrides it. Any other keyword declares a user axis; give it an
:class:`Axis` to say which environment variables it sets.

Values are validated where they enter, never at run time: ``channels`` and ``threads`` take
positive integers; a user axis may declare ``type=`` (``int``, ``float``, ``bool``, ``str`` or
any converter) and ``validate=`` (a predicate). Declared values are checked when ``@sweep``
runs (import time), command-line and ini overrides before collection (the plugin turns the
``ValueError`` into one ``pytest.UsageError`` line). :func:`invalid_env` is the last check:
a point whose environment holds a malformed count (``OMP_NUM_THREADS=abc``) is never recorded
as a baseline.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, Union

from pytest_gemmperf.paths import MAX_NAME_BYTES

if TYPE_CHECKING:
    import pytest

MARK_NAME = "gemmperf_sweep"

#: Set for every point unless a sweep's ``env`` overrides it.
BASE_ENV: dict[str, str] = {"HSA_ENABLE_SDMA": "0"}

#: Point id used when a test declares no axes.
DEFAULT_POINT_ID = "default"

EnvMapping = Union[str, Sequence[str], Mapping[str, str], Callable[[Any], Mapping[str, str]]]
Scalar = Union[int, float, str, bool]

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._+]+")
#: a label used in ids as written: no separator, no leading dot, short enough to read
_LABEL_PLAIN = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,63}")
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_+]+")
_LABEL_KEEP = 32


@dataclass(frozen=True)
class Axis:
    """One sweep axis.

    ``env`` says which variables a value sets: a variable name or a list of names (each gets
    ``str(value)``), a mapping ``{VAR: template}`` with ``{value}`` placeholders, or a callable
    ``value -> {VAR: str}``. ``abbr`` is the id prefix (default: the axis name).

    ``type`` converts each value (declared or given on the command line, where values arrive
    as text): ``int`` accepts integers and integer text only (``2.5`` and ``True`` are errors,
    not truncated), ``float`` finite numbers, ``bool`` booleans and ``true/false/1/0/yes/no``,
    any other callable is applied and may raise ``ValueError``/``TypeError``. ``validate`` is
    a predicate on the converted value (false or an exception rejects it); ``describe`` names
    what is expected in the error message (e.g. ``"a power of two"``).
    """

    values: tuple[Scalar, ...]
    env: EnvMapping = ()
    abbr: str | None = None
    type: Callable[[Any], Any] | None = None
    validate: Callable[[Any], Any] | None = None
    describe: str | None = None

    def __init__(self, values: Iterable[Scalar] | Scalar, env: EnvMapping = (),
                 abbr: str | None = None, *, type: Callable[[Any], Any] | None = None,
                 validate: Callable[[Any], Any] | None = None,
                 describe: str | None = None) -> None:
        vals = _as_values(values)
        if type is not None and not callable(type):
            raise TypeError(f"Axis type must be callable, got {type!r}")
        if validate is not None and not callable(validate):
            raise TypeError(f"Axis validate must be callable, got {validate!r}")
        object.__setattr__(self, "values", vals)
        object.__setattr__(self, "env", env)
        object.__setattr__(self, "abbr", abbr)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "validate", validate)
        object.__setattr__(self, "describe", describe)

    def checked(self, name: str, values: Iterable[Scalar] | Scalar | None = None) -> "Axis":
        """This axis with ``values`` (default: its own) converted and validated.

        Raises ``ValueError`` naming the axis, the value and what was expected."""
        vals = self.values if values is None else _as_values(values)
        if not vals:
            raise ValueError(f"sweep axis {name!r} has no values")
        out = []
        for v in vals:
            out.append(self._check_one(name, v))
        if len(set(out)) != len(out):
            raise ValueError(f"sweep axis {name!r}: duplicate values in {list(vals)}")
        return replace(self, values=tuple(out))

    def _check_one(self, name: str, value: Scalar) -> Scalar:
        expected = self.describe or _TYPE_WORDS.get(self.type, "a valid value")
        try:
            v = _convert(value, self.type)
            ok = True if self.validate is None else self.validate(v)
        except (ValueError, TypeError, ArithmeticError) as exc:
            detail = str(exc)
            raise ValueError(f"sweep axis {name!r}: {value!r} is not {expected}"
                             + (f" ({detail})" if detail and self.type not in _TYPE_WORDS else "")) from None
        if not ok:
            raise ValueError(f"sweep axis {name!r}: {value!r} is not {expected}")
        if not isinstance(v, (str, int, float, bool)):
            raise ValueError(f"sweep axis {name!r}: type {self.type!r} turned {value!r} into "
                             f"{v!r}; values must be numbers, strings or booleans")
        return v

    def env_for(self, value: Scalar) -> dict[str, str]:
        env = self.env
        if callable(env):
            return {str(k): str(v) for k, v in dict(env(value)).items()}
        if isinstance(env, str):
            return {env: _env_str(value)}
        if isinstance(env, Mapping):
            return {str(k): str(t).format(value=_env_str(value)) for k, t in env.items()}
        return {str(k): _env_str(value) for k in env}


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: axis values (declaration order), kernel regexes, environment."""

    id: str
    axes: tuple[tuple[str, Scalar], ...] = ()
    kernels: tuple[str, ...] = ()
    env_items: tuple[tuple[str, str], ...] = tuple(BASE_ENV.items())

    @property
    def values(self) -> dict[str, Scalar]:
        return dict(self.axes)

    @property
    def env(self) -> dict[str, str]:
        """Variables this point sets (on top of the inherited environment)."""
        return dict(self.env_items)

    def __getitem__(self, axis: str) -> Scalar:
        return self.values[axis]

    def get(self, axis: str, default: Any = None) -> Any:
        return self.values.get(axis, default)

    def kernel_pattern(self) -> re.Pattern | None:
        """One compiled alternation of the kernel regexes, or None when all kernels count."""
        if not self.kernels:
            return None
        return re.compile("|".join(f"(?:{k})" for k in self.kernels))

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "axes": self.values, "kernels": list(self.kernels), "env": self.env}


@dataclass(frozen=True)
class SweepSpec:
    """What ``@sweep(...)`` declared: named axes in declaration order, kernels, constant env."""

    axes: tuple[tuple[str, Axis], ...] = ()
    kernels: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())

    def with_overrides(self, values: Mapping[str, Sequence[Scalar]] | None = None,
                       kernels: Sequence[str] | None = None) -> "SweepSpec":
        """Replace the values of declared axes (command line / ini); unknown names are ignored,
        because one session's overrides apply to every test and not every test has every axis."""
        values = values or {}
        axes = tuple((name, ax.checked(name, values[name]) if name in values else ax)
                     for name, ax in self.axes)
        kern = self.kernels if not kernels else _check_kernels(kernels)
        return SweepSpec(axes=axes, kernels=kern, env=self.env)

    def points(self) -> list[SweepPoint]:
        """The Cartesian product of the axes, first axis outermost; ids are unique."""
        if not self.axes:
            return [SweepPoint(DEFAULT_POINT_ID, (), self.kernels, _merge_env({}, self.env))]
        names = [n for n, _ in self.axes]
        out: list[SweepPoint] = []
        seen: dict[str, tuple] = {}
        for combo in itertools.product(*(ax.values for _, ax in self.axes)):
            env: dict[str, str] = {}
            tokens = []
            for (name, ax), value in zip(self.axes, combo):
                env.update(ax.env_for(value))
                tokens.append(f"{_label_token(ax.abbr or name)}{_id_token(value)}")
            pid = _bounded_id("-".join(tokens))
            if pid in seen:
                raise ValueError(f"sweep values {seen[pid]} and {combo} give the same point id {pid!r}")
            seen[pid] = combo
            out.append(SweepPoint(pid, tuple(zip(names, combo)), self.kernels,
                                  _merge_env(env, self.env)))
        return out


def sweep(*, kernels: str | Sequence[str] | None = None, env: Mapping[str, Any] | None = None,
          **axes: Iterable[Scalar] | Axis) -> pytest.MarkDecorator:
    """Declare the sweep points of a test; use as a decorator or as ``pytestmark``.

    ``@sweep(channels=[28, 56], threads=[256, 512], kernels=[r"^Cijk_", r"gemm"])`` gives the
    items ``[ch28-th256]``, ``[ch28-th512]``, ``[ch56-th256]``, ``[ch56-th512]``. Axes keep the
    order they are written in; ``channels`` and ``threads`` use the RCCL/NCCL mapping unless an
    :class:`Axis` with its own ``env`` is given; other axes need an :class:`Axis` (or a list, then
    the variable is the axis name upper-cased). ``env`` sets constant variables on every point.
    """
    declared: list[tuple[str, Axis]] = []
    for name, spec in axes.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"sweep axis name {name!r} is not an identifier")
        builtin = BUILTIN_AXES.get(name)
        if isinstance(spec, Axis):
            ax = spec
            if builtin is not None:
                # a built-in axis stays a positive integer whatever env it is mapped to; an
                # own validate narrows it further
                ax = Axis(ax.values, env=ax.env if ax.env != () else builtin.env,
                          abbr=ax.abbr or builtin.abbr, type=builtin.type,
                          validate=_both(builtin.validate, ax.validate),
                          describe=ax.describe or builtin.describe)
        elif builtin is not None:
            ax = replace(builtin, values=_as_values(spec))
        else:
            ax = Axis(spec, env=name.upper())
        declared.append((name, ax.checked(name)))
    kern = _check_kernels([kernels] if isinstance(kernels, str) else (kernels or ()))
    const_env = tuple((str(k), _env_str(v)) for k, v in (env or {}).items())
    spec = SweepSpec(axes=tuple(declared), kernels=kern, env=const_env)
    spec.points()  # fail at import time on colliding ids, not at collection of each item
    # lazy: keeps gemmperf --help fast (the package imports this module; a test file has pytest)
    import pytest

    return pytest.mark.gemmperf_sweep(spec=spec)


def parse_values(text: str | Sequence[str]) -> list[Scalar]:
    """``"28,56"`` -> ``[28, 56]``; numbers become int/float, the rest stays a string."""
    items = text.split(",") if isinstance(text, str) else [t for part in text for t in part.split(",")]
    out: list[Scalar] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        out.append(_parse_scalar(item))
    if not out:
        raise ValueError(f"no values in {text!r}")
    return out


def parse_axis_override(text: str) -> tuple[str, list[Scalar]]:
    """``"algo=Ring,Tree"`` -> ``("algo", ["Ring", "Tree"])`` (``--gemmperf-axis``)."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"expected NAME=V1,V2 but got {text!r}")
    return name.strip(), parse_values(values)


def spec_of(marker: pytest.Mark | None) -> SweepSpec:
    """The SweepSpec of a ``gemmperf_sweep`` mark (an empty spec when there is none)."""
    if marker is None:
        return SweepSpec(env=())
    spec = marker.kwargs.get("spec")
    if not isinstance(spec, SweepSpec):
        raise TypeError("use @pytest_gemmperf.sweep(...) rather than a bare gemmperf_sweep mark")
    return spec


def check_builtin_values(name: str, values: Sequence[Scalar]) -> list[Scalar]:
    """Validate override values of a built-in axis (``channels``, ``threads``) on their own,
    before any test is collected; raises ``ValueError``."""
    return list(BUILTIN_AXES[name].checked(name, values).values)


def check_kernels(kernels: Iterable[str]) -> tuple[str, ...]:
    """Compile each kernel regex once; ``ValueError`` naming the first invalid one."""
    return _check_kernels(kernels)


#: variables that hold counts: a point whose environment gives one of them anything but a
#: positive integer ran with a configuration nobody meant (the library silently ignores or
#: misreads it), so its numbers must not become a baseline
COUNT_VARS = ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "RCCL_THREADS_PER_BLOCK",
              "NCCL_NTHREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: variables that are switches (0/1)
SWITCH_VARS = ("HSA_ENABLE_SDMA",)


def invalid_env(env: Mapping[str, Any]) -> list[str]:
    """Problems of a point's environment, one phrase each (empty when it is valid): count
    variables (:data:`COUNT_VARS`) must be positive integers, switches (:data:`SWITCH_VARS`)
    ``0`` or ``1``."""
    problems = []
    for var in COUNT_VARS:
        if var in env and not re.fullmatch(r"\s*\+?0*[1-9][0-9]{0,8}\s*", str(env[var])):
            problems.append(f"{var}={str(env[var])!r} is not a positive integer")
    for var in SWITCH_VARS:
        if var in env and str(env[var]).strip() not in ("0", "1"):
            problems.append(f"{var}={str(env[var])!r} is not 0 or 1")
    return problems


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_TYPE_WORDS: dict[Any, str] = {int: "an integer", float: "a finite number", bool: "a boolean",
                               str: "a string"}


def _convert(value: Scalar, kind: Callable[[Any], Any] | None) -> Any:
    """``value`` as ``kind`` (strict for int/float/bool, see :class:`Axis`)."""
    if kind is None or kind is str:
        return value if kind is None else str(value)
    if kind is int:
        if isinstance(value, bool):
            raise TypeError("a boolean")
        if isinstance(value, int):
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            return int(value)
        raise ValueError("not an integer")
    if kind is float:
        if isinstance(value, bool):
            raise TypeError("a boolean")
        v = float(value)
        if not math.isfinite(v):
            raise ValueError("not finite")
        return v
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError("not a boolean")
    return kind(value)


def _positive(v: Any) -> bool:
    return v > 0


def _both(a: Callable[[Any], Any] | None, b: Callable[[Any], Any] | None):
    if a is None or b is None:
        return a or b
    return lambda v: a(v) and b(v)


def _parse_scalar(item: str) -> Scalar:
    for conv in (int, float):
        try:
            return conv(item)
        except ValueError:
            pass
    return item


def _as_values(values: Iterable[Scalar] | Scalar) -> tuple[Scalar, ...]:
    if isinstance(values, (str, int, float, bool)):
        return (values,)
    vals = tuple(values)
    for v in vals:
        if not isinstance(v, (str, int, float, bool)):
            raise TypeError(f"sweep values must be numbers or strings, got {v!r}")
    if len(set(vals)) != len(vals):
        raise ValueError(f"duplicate sweep values in {list(vals)}")
    return vals


def _env_str(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _id_token(value: Scalar) -> str:
    """A value as its id token: unsafe characters cleaned to ``_``. A value with non-ASCII
    text gets a digest of the original too, so ``日本`` and ``中文`` (both cleaned away) stay
    distinct points; ASCII values keep the ids they always had."""
    text = _env_str(value)
    tok = _ID_UNSAFE.sub("_", text).strip("_")
    if not text.isascii():
        return f"{tok}_{_digest(text)}"
    return tok or "_"


def _label_token(label: Any) -> str:
    """An axis label (abbreviation or name) as the prefix of its id tokens.

    A point id is a directory name, so the label must not carry a separator, ``..``, NUL or a
    leading dot into it. A plain label is kept as written (ids stay what they always were);
    any other is cleaned like a value and gets a digest of the original, so two labels that
    clean alike (``a/b``, ``a:b``, ``é``, ``ü``) still give distinct ids."""
    text = str(label)
    if _LABEL_PLAIN.fullmatch(text):
        return text
    cleaned = _LABEL_UNSAFE.sub("_", text).strip("_")[:_LABEL_KEEP]
    return f"{cleaned or 'axis'}_{_digest(text)}"


def _bounded_id(pid: str) -> str:
    """``pid``, shortened to fit one file-system name (with a digest of the whole id, so
    long ids stay distinct)."""
    if len(pid.encode()) <= MAX_NAME_BYTES:
        return pid
    return f"{pid[:MAX_NAME_BYTES - 9]}-{_digest(pid)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _check_kernels(kernels: Iterable[str]) -> tuple[str, ...]:
    out = []
    for k in kernels:
        if not isinstance(k, str):
            raise TypeError(f"kernel regexes must be strings, got {k!r}")
        try:
            re.compile(k)
        except re.error as exc:
            raise ValueError(f"kernel regex {k!r} is invalid: {exc}") from None
        out.append(k)
    return tuple(out)


def _merge_env(axis_env: Mapping[str, str], const_env: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    env = dict(BASE_ENV)
    env.update(dict(const_env))
    env.update(axis_env)
    return tuple(sorted(env.items()))


#: Environment mapping and id prefix of the axes the plugin knows.
BUILTIN_AXES: dict[str, Axis] = {
    "channels": Axis((), env=("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"), abbr="ch", type=int,
                     validate=_positive, describe="a positive integer"),
    "threads": Axis((), env=("RCCL_THREADS_PER_BLOCK", "NCCL_NTHREADS"), abbr="th", type=int,
                    validate=_positive, describe="a positive integer"),
}
