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
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

import pytest

MARK_NAME = "gemmperf_sweep"

#: Set for every point unless a sweep's ``env`` overrides it.
BASE_ENV: dict[str, str] = {"HSA_ENABLE_SDMA": "0"}

#: Point id used when a test declares no axes.
DEFAULT_POINT_ID = "default"

EnvMapping = Union[str, Sequence[str], Mapping[str, str], Callable[[Any], Mapping[str, str]]]
Scalar = Union[int, float, str, bool]

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._+]+")


@dataclass(frozen=True)
class Axis:
    """One sweep axis.

    ``env`` says which variables a value sets: a variable name or a list of names (each gets
    ``str(value)``), a mapping ``{VAR: template}`` with ``{value}`` placeholders, or a callable
    ``value -> {VAR: str}``. ``abbr`` is the id prefix (default: the axis name).
    """

    values: tuple[Scalar, ...]
    env: EnvMapping = ()
    abbr: str | None = None

    def __init__(self, values: Iterable[Scalar] | Scalar, env: EnvMapping = (),
                 abbr: str | None = None) -> None:
        vals = _as_values(values)
        object.__setattr__(self, "values", vals)
        object.__setattr__(self, "env", env)
        object.__setattr__(self, "abbr", abbr)

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
        axes = tuple((name, replace(ax, values=_as_values(values[name])) if name in values else ax)
                     for name, ax in self.axes)
        for name, ax in axes:
            if not ax.values:
                raise ValueError(f"sweep axis {name!r} has no values")
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
                tokens.append(f"{ax.abbr or name}{_id_token(value)}")
            pid = "-".join(tokens)
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
                ax = Axis(ax.values, env=ax.env if ax.env != () else builtin.env,
                          abbr=ax.abbr or builtin.abbr)
        elif builtin is not None:
            ax = replace(builtin, values=_as_values(spec))
        else:
            ax = Axis(spec, env=name.upper())
        if not ax.values:
            raise ValueError(f"sweep axis {name!r} has no values")
        declared.append((name, ax))
    kern = _check_kernels([kernels] if isinstance(kernels, str) else (kernels or ()))
    const_env = tuple((str(k), _env_str(v)) for k, v in (env or {}).items())
    spec = SweepSpec(axes=tuple(declared), kernels=kern, env=const_env)
    spec.points()  # fail at import time on colliding ids, not at collection of each item
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
    tok = _ID_UNSAFE.sub("_", _env_str(value)).strip("_")
    return tok or "_"


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
    "channels": Axis((), env=("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"), abbr="ch"),
    "threads": Axis((), env=("RCCL_THREADS_PER_BLOCK", "NCCL_NTHREADS"), abbr="th"),
}
