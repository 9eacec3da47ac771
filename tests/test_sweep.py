"""Sweep declaration: Cartesian expansion, point ids, environment mapping, overrides."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from pytest_gemmperf import Axis, sweep

sw = importlib.import_module("pytest_gemmperf.sweep")


def spec(mark):
    return sw.spec_of(mark.mark)


def test_channels_threads_product_ids_and_env():
    pts = spec(sweep(channels=[28, 56], threads=[256, 512], kernels=[r"^Cijk_", "gemm"])).points()
    assert [p.id for p in pts] == ["ch28-th256", "ch28-th512", "ch56-th256", "ch56-th512"]
    p = pts[1]
    assert p.values == {"channels": 28, "threads": 512}
    assert p.env == {"NCCL_MIN_NCHANNELS": "28", "NCCL_MAX_NCHANNELS": "28",
                     "RCCL_THREADS_PER_BLOCK": "512", "NCCL_NTHREADS": "512", "HSA_ENABLE_SDMA": "0"}
    assert p.kernels == (r"^Cijk_", "gemm")
    assert p.kernel_pattern().search("Cijk_Ailk_Bljk") and not p.kernel_pattern().search("ncclDevKernel")


def test_declaration_order_sets_id_order():
    pts = spec(sweep(threads=[256], channels=[28])).points()
    assert [p.id for p in pts] == ["th256-ch28"]


def test_user_axis_with_abbreviation_env_template_and_callable():
    algo = Axis(["Ring", "Tree"], env={"NCCL_ALGO": "{value}"}, abbr="algo")
    size = Axis([1, 4], env=lambda mb: {"MSG_BYTES": str(mb * 2**20)}, abbr="mb")
    pts = spec(sweep(channels=[56], threads=[512], algo=algo, size=size)).points()
    assert pts[0].id == "ch56-th512-algoRing-mb1"
    assert pts[-1].env["NCCL_ALGO"] == "Tree" and pts[-1].env["MSG_BYTES"] == str(4 * 2**20)


def test_plain_list_user_axis_uses_upper_case_name():
    pts = spec(sweep(nccl_proto=["LL", "Simple"])).points()
    assert [p.id for p in pts] == ["nccl_protoLL", "nccl_protoSimple"]
    assert pts[0].env["NCCL_PROTO"] == "LL"


def test_builtin_axis_env_can_be_remapped_keeping_abbreviation():
    pts = spec(sweep(threads=Axis([1, 2], env=["OMP_NUM_THREADS"]))).points()
    assert [p.id for p in pts] == ["th1", "th2"]
    assert pts[1].env == {"OMP_NUM_THREADS": "2", "HSA_ENABLE_SDMA": "0"}


def test_constant_env_overrides_base_env():
    pts = spec(sweep(channels=[28], env={"HSA_ENABLE_SDMA": 1, "X": True})).points()
    assert pts[0].env["HSA_ENABLE_SDMA"] == "1" and pts[0].env["X"] == "1"


def test_no_axes_gives_default_point():
    pts = spec(sweep(kernels="gemm")).points()
    assert [p.id for p in pts] == ["default"] and pts[0].kernels == ("gemm",)
    assert sw.SweepSpec().points()[0].env == {"HSA_ENABLE_SDMA": "0"}


def test_overrides_replace_declared_axes_only():
    s = spec(sweep(channels=[28, 42, 56, 70], threads=[256, 512], kernels=["gemm"]))
    o = s.with_overrides({"channels": [28], "threads": [256], "algo": ["Ring"]}, kernels=["^Cijk_"])
    pts = o.points()
    assert [p.id for p in pts] == ["ch28-th256"]
    assert pts[0].kernels == ("^Cijk_",)
    assert len(s.points()) == 8  # the declared spec is unchanged


def test_parse_values_and_axis_override():
    assert sw.parse_values("28, 56") == [28, 56]
    assert sw.parse_values(["1.5", "Ring"]) == [1.5, "Ring"]
    assert sw.parse_axis_override("algo=Ring,Tree") == ("algo", ["Ring", "Tree"])
    with pytest.raises(ValueError):
        sw.parse_axis_override("algo")
    with pytest.raises(ValueError):
        sw.parse_values(" , ")


def test_unsafe_values_are_sanitized_in_ids_but_not_in_env():
    pts = spec(sweep(shape=Axis(["4096x4096/bf16"], env="SHAPE"))).points()
    assert pts[0].id == "shape4096x4096_bf16"
    assert pts[0].env["SHAPE"] == "4096x4096/bf16"


@pytest.mark.parametrize("kwargs, message", [
    ({"channels": []}, "no values"),
    ({"channels": [28, 28]}, "duplicate"),
    ({"kernels": ["(unclosed"]}, "invalid"),
    ({"size": Axis(["a/b", "a_b"], env="S")}, "same point id"),
])
def test_bad_declarations_raise_at_import_time(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sweep(**kwargs)


def test_non_scalar_values_rejected():
    with pytest.raises(TypeError):
        sweep(channels=[[28]])


def test_point_accessors_and_json():
    p = spec(sweep(channels=[28], kernels=["gemm"])).points()[0]
    assert p["channels"] == 28 and p.get("threads", 0) == 0
    assert p.to_json() == {"id": "ch28", "axes": {"channels": 28}, "kernels": ["gemm"], "env": p.env}


# ---------------------------------------------------------------------------------------------
# validated declarations (issue 10, item 6)


@pytest.mark.parametrize("axis, bad", [
    ("channels", "x"), ("channels", 0), ("channels", -4), ("channels", 2.5), ("channels", True),
    ("threads", "abc"), ("threads", "256.0"), ("threads", ""),
])
def test_builtin_axes_take_positive_integers(axis, bad):
    with pytest.raises(ValueError, match=rf"sweep axis '{axis}': .* is not a positive integer"):
        sweep(**{axis: [bad]})
    with pytest.raises(ValueError, match="is not a positive integer"):
        sw.check_builtin_values(axis, [bad])
    s = spec(sweep(**{axis: [1]}))
    with pytest.raises(ValueError, match="is not a positive integer"):
        s.with_overrides({axis: [bad]})


def test_builtin_axis_text_values_become_integers():
    assert sw.check_builtin_values("threads", ["256", "+512"]) == [256, 512]
    # remapped to another variable, the axis still validates (and may narrow further)
    even = Axis([2, 4], env=["OMP_NUM_THREADS"], validate=lambda v: v % 2 == 0, describe="even")
    s = spec(sweep(threads=even))
    assert [p.id for p in s.points()] == ["th2", "th4"]
    with pytest.raises(ValueError, match="'threads': 3 is not even"):
        s.with_overrides({"threads": [3]})
    with pytest.raises(ValueError, match="'threads': -2 is not even"):
        s.with_overrides({"threads": [-2]})  # the built-in positivity still applies


def test_user_axis_type_and_validator():
    pow2 = Axis([1, 2], env="SIZE", type=int, validate=lambda v: v & (v - 1) == 0,
                describe="a power of two")
    s = spec(sweep(size=pow2))
    assert [p.id for p in s.with_overrides({"size": ["4", 8]}).points()] == ["size4", "size8"]
    for bad in (3, "abc", 2.0):
        with pytest.raises(ValueError, match=f"sweep axis 'size': {bad!r} is not a power of two"):
            s.with_overrides({"size": [bad]})
    ratio = spec(sweep(r=Axis([0.5], env="R", type=float)))
    assert ratio.with_overrides({"r": ["0.25"]}).points()[0].env["R"] == "0.25"
    with pytest.raises(ValueError, match="is not a finite number"):
        ratio.with_overrides({"r": ["nan"]})
    flag = spec(sweep(fast=Axis([True], env="FAST", type=bool)))
    assert flag.with_overrides({"fast": ["no"]}).points()[0].env["FAST"] == "0"
    with pytest.raises(ValueError, match="is not a boolean"):
        flag.with_overrides({"fast": ["maybe"]})
    # any converter; its own message is kept
    algo = spec(sweep(algo=Axis(["Ring"], env="NCCL_ALGO", type=_algo)))
    with pytest.raises(ValueError, match=r"'algo': 'Tre' is not a valid value \(unknown algorithm"):
        algo.with_overrides({"algo": ["Tre"]})
    # declared values are checked at import time too, and converted values collide as such
    with pytest.raises(ValueError, match="is not a power of two"):
        sweep(size=Axis([3], env="SIZE", type=int, validate=lambda v: v & (v - 1) == 0,
                        describe="a power of two"))
    with pytest.raises(ValueError, match="duplicate"):
        sweep(n=Axis(["1", 1], env="N", type=int))
    with pytest.raises(TypeError):
        Axis([1], type="int")


def _algo(v):
    if v not in ("Ring", "Tree"):
        raise ValueError(f"unknown algorithm {v!r}")
    return v


def test_invalid_env():
    assert sw.invalid_env({"OMP_NUM_THREADS": "8", "NCCL_NTHREADS": "256", "HSA_ENABLE_SDMA": "0",
                           "OTHER": "abc"}) == []
    bad = sw.invalid_env({"OMP_NUM_THREADS": "abc", "NCCL_MIN_NCHANNELS": "0",
                          "RCCL_THREADS_PER_BLOCK": "2.5", "HSA_ENABLE_SDMA": "yes"})
    assert bad == ["NCCL_MIN_NCHANNELS='0' is not a positive integer",
                   "RCCL_THREADS_PER_BLOCK='2.5' is not a positive integer",
                   "OMP_NUM_THREADS='abc' is not a positive integer",
                   "HSA_ENABLE_SDMA='yes' is not 0 or 1"]


# --- the plugin: bad values are one usage-error line, before anything runs -------------------

SWEEP_TEST = '''
import pathlib
from pytest_gemmperf import Axis, sweep

@sweep(channels=[28], threads=[256],
       size=Axis([1, 2], env="SIZE", type=int, validate=lambda v: v & (v - 1) == 0,
                 describe="a power of two"))
def test_x(gemmperf_point):
    with open("ran.txt", "a") as fh:
        fh.write(gemmperf_point.id + "\\n")
'''


PLUGIN_ARGS = [] if any(ep.value == "pytest_gemmperf.plugin" for ep in entry_points(group="pytest11")) \
    else ["-p", "pytest_gemmperf.plugin"]


def _run_pytest(tmp_path, *args, ini: str | None = None, xdist: bool = False):
    (tmp_path / "test_x.py").write_text(SWEEP_TEST)
    if ini:
        (tmp_path / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
    return subprocess.run([sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider",
                           *(["-n", "2"] if xdist else ["-p", "no:xdist"]), "-q",
                           "--gemmperf-results-dir=res", "test_x.py", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def _run_inprocess(pytester, *args, ini: str | None = None) -> subprocess.CompletedProcess:
    """The session of :func:`_run_pytest` in this process (pytester), as the same result."""
    pytester.makepyfile(test_x=SWEEP_TEST)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    # the outer session imported the plugin before the repository was on sys.path: an inner
    # session that finds it there would warn that it cannot assertion-rewrite it
    r = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                                     "-W", "ignore::pytest.PytestAssertRewriteWarning",
                                     "--gemmperf-results-dir=res", "test_x.py", *args)
    return subprocess.CompletedProcess(list(args), int(r.ret), "\n".join(r.outlines), "\n".join(r.errlines))


# the first case runs in a real pytest process (what reaches a user's terminal); the others
# refuse other values on the same path and run in this process
@pytest.mark.slow  # real and in-process pytest sessions
@pytest.mark.parametrize("args, ini, message", [
    (["--gemmperf-threads", "abc"], None,
     "--gemmperf-threads: sweep axis 'threads': 'abc' is not a positive integer"),
    (["--gemmperf-channels", "x"], None,
     "--gemmperf-channels: sweep axis 'channels': 'x' is not a positive integer"),
    (["--gemmperf-channels", "28,0"], None, "'channels': 0 is not a positive integer"),
    (["--gemmperf-kernels", "["], None, "--gemmperf-kernels: kernel regex '[' is invalid"),
    (["--gemmperf-axis", "threads=2.5"], None, "--gemmperf-axis: sweep axis 'threads': 2.5 is not"),
    ([], "gemmperf_threads = 64,abc", "gemmperf_threads (ini): sweep axis 'threads': 'abc' is not"),
    (["--gemmperf-axis", "size=3"], None,
     "gemmperf axis override: test_x.py::test_x: sweep axis 'size': 3 is not a power of two"),
    (["--gemmperf-axis", "size=abc"], None, "sweep axis 'size': 'abc' is not a power of two"),
])
def test_bad_values_are_one_usage_error_line(tmp_path, pytester, args, ini, message):
    if args == ["--gemmperf-threads", "abc"]:
        r, where = _run_pytest(tmp_path, *args, ini=ini), tmp_path
    else:
        r, where = _run_inprocess(pytester, *args, ini=ini), pytester.path
    assert r.returncode == 4, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("ERROR: ") and message in lines[0], lines[0]
    assert "Traceback" not in r.stdout + r.stderr
    assert not (where / "ran.txt").exists() and not (where / "res").exists()


def test_good_overrides_run(pytester):  # in this process: the overrides need no process boundary
    r = _run_inprocess(pytester, "--gemmperf-threads", "64,128", "--gemmperf-axis", "size=4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted((pytester.path / "ran.txt").read_text().split()) == ["ch28-th128-size4",
                                                                      "ch28-th64-size4"]


# --- a point run with a malformed environment never becomes a baseline -----------------------

from test_plugin import FAKE, gp  # noqa: E402,F401  (the plugin fixture with its CPU stand-in)

pytest_plugins = ["pytester"]

BAD_ENV_TEST = f"""
import sys
from pytest_gemmperf import sweep

@sweep(threads=[1], kernels=[r"^aten::mm$"])
def test_gpsweep(gemmperf):
    result = gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "20"], repeats=2,
                              env={{"OMP_NUM_THREADS": "abc"}})
    gemmperf.assert_no_regression(result)
"""


def test_invalid_environment_is_never_a_baseline(gp, pytester):
    pytester.makepyfile(test_gpsweep=BAD_ENV_TEST)
    out = gp()
    out.assert_outcomes(failed=1)
    out.stdout.fnmatch_lines(["*test_gpsweep[[]th1[]]: not recorded as a baseline: invalid "
                              "environment: OMP_NUM_THREADS='abc' is not a positive integer*"])
    # the store holds no record (its lock directory may exist)
    assert not [p for p in (gp.path / "base").rglob("*")
                if p.is_file() and ".locks" not in p.relative_to(gp.path / "base").parts]


@pytest.mark.slow  # a real pytest process with two xdist workers
def test_bad_user_axis_override_under_xdist_is_one_clean_error(tmp_path):
    """xdist workers collect, the controller cannot end the session for them: the error is a
    collection error that shows its one line (no INTERNALERROR, no traceback), nothing runs,
    and the controller ends with the usage-error status (4) as without xdist."""
    pytest.importorskip("xdist")
    r = _run_pytest(tmp_path, "--gemmperf-axis", "size=3", xdist=True)
    assert r.returncode == 4, r.stdout + r.stderr
    text = r.stdout + r.stderr
    assert "gemmperf axis override: test_x.py::test_x: sweep axis 'size': 3 is not a power of two" in text
    assert "INTERNALERROR" not in text and "Traceback" not in text
    assert not (tmp_path / "ran.txt").exists()
