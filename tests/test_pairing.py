"""Kernel swap pairing (gate/pairing.py) and how the gate reports a paired swap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.gate.compare import GateConfig, compare
from pytest_gemmperf.gate.pairing import Swap, kernel_family, pair_swaps
from pytest_gemmperf.gate.samples import compact_samples
from pytest_gemmperf.gate.headline import format_verdict_table

T1 = ("Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1_AFC0_AFEM1_ASEM1_CLR1_"
      "CADS0_DTLA0_DTLB0_EPS0_GRVWA8_GRVWB8_ISA950")
T2 = T1.replace("MT64x32x256", "MT64x48x256").replace("LDSB1", "LDSB0")
T_OTHER_LAYOUT = T1.replace("Ailk_Bljk", "Alik_Bjlk")


def test_family_keys_keep_letters_and_drop_tile_numbers():
    assert kernel_family(T1) == kernel_family(T2)
    assert kernel_family(T1) != kernel_family(T_OTHER_LAYOUT)  # another transpose: another problem
    assert kernel_family("void at::native::f<float, 4>(int)") == kernel_family("void at::native::f<float, 8>(int)")
    assert kernel_family("void at::native::f<float, 4>(int)") != kernel_family("void at::native::g<float, 4>(int)")
    assert kernel_family("elementwise_kernel_12") is None  # no structure: numbers may be anything


def test_pairs_by_family_then_slot_and_leaves_the_rest():
    swaps = pair_swaps({T1: 25.0, "old_copy": 3.0}, {T2: 25.0, T_OTHER_LAYOUT: 25.0, "new_copy": 3.0})
    assert Swap(T1, T2, "family") in swaps
    # T_OTHER_LAYOUT has no missing partner of its family; two kernels are left on the new
    # side, so the slot rule (exactly one each) pairs nothing more
    assert len(swaps) == 1
    swaps = pair_swaps({T1: 25.0, "old_copy": 3.0}, {T2: 25.0, "new_copy": 3.0})
    assert Swap("old_copy", "new_copy", "slot") in swaps and len(swaps) == 2


def test_family_pair_needs_compatible_dispatch_counts_and_slot_needs_known_equal_counts():
    assert pair_swaps({T1: 25.0}, {T2: 8.0}) == []  # not the same call: 25 vs 8 per process
    assert pair_swaps({"a": 10.0}, {"b": 10.5}) == [Swap("a", "b", "slot")]
    assert pair_swaps({"a": 10.0}, {"b": 14.0}) == []
    assert pair_swaps({"a": float("nan")}, {"b": 10.0}) == []


def test_roles_pair_first_and_override_names():
    roles = {"x": "aten::mm [[64, 64], [64, 64]]", "y": "aten::mm [[64, 64], [64, 64]]"}
    assert pair_swaps({"x": 5.0, T1: 5.0}, {"y": 5.0, T2: 5.0}, roles) == [Swap("x", "y", "role"),
                                                                         Swap(T1, T2, "family")]


def side(tag: str, seed: int, kernels: dict[str, tuple[float, int]], units: int = 4,
         scale: dict | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frames = []
    for u in range(units):
        a = rng.normal(0, 0.01)
        for name, (base, n) in kernels.items():
            v = base * (1 + (scale or {}).get(name, 0.0)) * np.exp(a + rng.normal(0, 0.003) + 0.02 * rng.standard_normal(n))
            frames.append(pd.DataFrame({"point": "p", "kernel": name, "metric": "dur_ns",
                                        "unit": f"{tag}/{u}", "value": v}))
    return pd.concat(frames, ignore_index=True)


KERNELS = {f"k{i:02d}": (1e4 * (i + 1), 40) for i in range(12)} | {T1: (5e5, 25)}


@pytest.mark.parametrize("slower, verdict", [(0.30, "regression"), (0.0, "unchanged")])
def test_a_swapped_gemm_is_gated_as_one_row(slower, verdict):
    b = side("b", 1, KERNELS)
    cand_kernels = {k: v for k, v in KERNELS.items() if k != T1} | {T2: KERNELS[T1]}
    c = side("c", 2, cand_kernels, scale={T2: slower})
    v = compare(compact_samples(b), compact_samples(c))
    r = v[(v["kernel"] == T1) & (v["metric"] == "dur_ns")].iloc[0]
    assert r["verdict"] == verdict
    assert r["note"].startswith(f"swapped: {T1} -> {T2} (same family)")
    assert r["ratio"] == pytest.approx(1 + slower, abs=0.02)
    assert T2 not in set(v["kernel"])
    shown = format_verdict_table(v[v["kernel"] == T1], 3).splitlines()[1]
    assert shown.startswith(verdict) and " -> " in shown


def test_unpaired_kernels_stay_new_and_missing_and_the_policy_decides():
    b = side("b", 1, KERNELS)
    c = side("c", 2, {k: v for k, v in KERNELS.items() if k != T1} | {"brand_new": (1e3, 3)})
    v = compare(b, c)
    verdicts = dict(zip(v["kernel"], v["verdict"]))
    assert verdicts[T1] == "missing" and verdicts["brand_new"] == "new"
    assert not (v["verdict"] == "regression").any()  # default policy "warn": reported, passes
    v = compare(b, c, GateConfig(unpaired="fail"))
    assert set(v.loc[v["kernel"].isin([T1, "brand_new"]), "verdict"]) == {"regression"}
    with pytest.raises(ValueError, match="unpaired"):
        compare(b, c, GateConfig(unpaired="sometimes"))


def test_role_column_pairs_kernels_a_trace_links_to_the_same_op():
    b = side("b", 1, KERNELS)
    c = side("c", 2, {k: v for k, v in KERNELS.items() if k != T1} | {"hipblaslt_gemm_xyz": (5e5 * 1.3, 25)})
    b["role"] = np.where(b["kernel"] == T1, "aten::mm [[4096, 4096]]", "")
    c["role"] = np.where(c["kernel"] == "hipblaslt_gemm_xyz", "aten::mm [[4096, 4096]]", "")
    v = compare(b, c)
    r = v[(v["kernel"] == T1) & (v["metric"] == "dur_ns")].iloc[0]
    assert r["verdict"] == "regression" and "(same role)" in r["note"]
