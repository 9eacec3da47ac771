"""Sweep declaration: Cartesian expansion, point ids, environment mapping, overrides."""

from __future__ import annotations

import importlib

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
