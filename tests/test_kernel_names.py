"""short_names: distinct, short, readable labels for real and synthetic kernel names."""

from __future__ import annotations

import json
import random
import re
import time

import pandas as pd
import pytest

from pytest_gemmperf.analysis.kernel_names import MAX_LEN, short_name_series, short_names
from tests.conftest import shared_file

MT = re.compile(r"_(MT\d+x\d+x\d+)_")


def _check_contract(mapping: dict[str, str], names) -> None:
    uniq = set(names)
    assert set(mapping) == uniq
    assert len(set(mapping.values())) == len(uniq), "two names share a label"
    assert all(0 < len(v) <= MAX_LEN for v in mapping.values())


# --------------------------------------------------------------------------- real data


def test_real_908_all_kernels_distinct_and_short(trace_908):
    names = list(trace_908.dispatches["kernel"].astype(str).unique())
    assert len(names) == 80  # data-catalog 1.1: 80 kernel ids, 44 truncated names
    m = short_names(names)
    _check_contract(m, names)
    # the heuristics alone tell all 80 apart: no label needed the hash fallback
    assert not [v for v in m.values() if "~" in v]
    # the truncated names collide (44 for 80 kernels); the short labels must not
    assert trace_908.dispatches["kernel_short"].nunique() == 44


def test_real_908_gemm_labels_are_head_plus_macro_tile(trace_908):
    d = trace_908.dispatches
    gemm = sorted(d.loc[d["kernel"].astype(str).str.startswith("Cijk_"), "kernel"].astype(str).unique())
    assert len(gemm) == 14
    m = short_names(gemm)
    _check_contract(m, gemm)
    for name in gemm:
        label = m[name]
        head = "_".join(name.split("_")[:4])
        assert label.startswith(head + "_"), (label, head)
        assert MT.search(name + "_").group(1) in label
        assert "~" not in label, f"GEMM label needed the hash fallback: {label}"
    # the case: two Cijk_Ailk_Bljk_BBS GEMMs differing in the macro tile
    labels = set(m.values())
    assert "Cijk_Ailk_Bljk_BBS_MT64x32x256" in labels
    assert "Cijk_Ailk_Bjlk_BBS_MT64x48x256" in labels
    # labels of the GEMMs do not change when the other kernels of the trace are shown too
    everything = short_names(d["kernel"].astype(str).unique())
    assert {everything[n] for n in gemm} == labels


def test_real_908_cpp_labels_name_the_function(trace_908):
    names = list(trace_908.dispatches["kernel"].astype(str).unique())
    m = short_names(names)
    red = {m[n] for n in names if "reduce_kernel<" in n}
    assert red == {"reduce_kernel<128,ReduceOp<MeanOps>>", "reduce_kernel<512,ReduceOp<MeanOps>>",
                   "reduce_kernel<512,ReduceOp<NormTwoOps>>", "reduce_kernel<128,ReduceOp<func_wrapper_t>>",
                   "reduce_kernel<512,ReduceOp<func_wrapper_t>>"}
    assert m["ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"] == "ncclDevKernel_Generic_1"
    gelu = [m[n] for n in names if "vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl" in n]
    assert len(gelu) == 1 and "GeluCUDAKernelImpl" in gelu[0]
    # rocprim's versioned namespaces and the return type are gone
    assert not any("ROCPRIM" in v or v.startswith("void") for v in m.values())


def test_real_pytorch_trace_kernel_names():
    path = shared_file("aorta/smci350-zts-gtu-c6-25_200691.1758927066581847260.pt.trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    names = sorted({e["name"] for e in events if e.get("cat") == "kernel"})
    assert len(names) >= 5
    _check_contract(short_names(names), names)


# --------------------------------------------------------------------------- synthetic


def test_empty_and_single():
    assert short_names([]) == {}
    tensile = ("Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1_"
               "GSU0_ISA950_WS64_WG32_8_1.kd")
    assert short_names([tensile]) == {tensile: "Cijk_Ailk_Bljk_BBS_MT64x32x256"}
    cpp = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)"
    assert short_names([cpp]) == {cpp: "vectorized_elementwise_kernel"}
    assert short_names(["attn_fwd.kd"]) == {"attn_fwd.kd": "attn_fwd"}
    # PyTorch CPU ops keep their namespace: short already, and "mm" alone would be vague
    assert short_names(["aten::mm", "aten::add"]) == {"aten::mm": "aten::mm", "aten::add": "aten::add"}
    # repeated names and missing values
    assert short_names(["a", "a", None, float("nan")]) == {"a": "a"}


def test_tensile_non_mt_difference_is_shown():
    base = "Cijk_Alik_Bljk_HHS_BH_MT128x128x64_MI32x32x8_SN_{}_GSU{}_ISA942_WG32_8_1"
    a, b, c = base.format("LDSB0", 1), base.format("LDSB0", 2), base.format("LDSB1", 1)
    m = short_names([a, b, c])
    _check_contract(m, [a, b, c])
    assert m[a] == "Cijk_Alik_Bljk_HHS_MT128x128x64_LDSB0_GSU1"
    assert m[b] == "Cijk_Alik_Bljk_HHS_MT128x128x64_LDSB0_GSU2"
    assert m[c] == "Cijk_Alik_Bljk_HHS_MT128x128x64_LDSB1_GSU1"
    # numeric continuations stay with their key: WG32_8_1 vs WG32_4_2 is one parameter
    d, e = base.format("LDSB0", 1), base.format("LDSB0", 1).replace("WG32_8_1", "WG32_4_2")
    assert short_names([d, e])[e].endswith("_WG32_4_2")
    # a flag present in one name only (Bias) tells the names apart
    f, g = "Cijk_Ailk_Bljk_S_MT64x64x16_SN", "Cijk_Ailk_Bljk_S_Bias_MT64x64x16_SN"
    assert short_names([f, g]) == {f: "Cijk_Ailk_Bljk_S_MT64x64x16", g: "Cijk_Ailk_Bljk_S_Bias_MT64x64x16"}


def test_cpp_nested_templates_and_special_characters():
    names = [
        "void ns::inner::gemm_kernel<ns::Tile<128, 64>, float, ns::Epi<ns::Relu<float>, 2> >(float const*, float&)",
        "void ns::inner::gemm_kernel<ns::Tile<128, 64>, float, ns::Epi<ns::Gelu<float>, 2> >(float const*, float&)",
        "void ns::inner::gemm_kernel<ns::Tile<64, 64>, float, ns::Epi<ns::Relu<float>, 2> >(float const*, float&)",
        "ns::Result<int> ns::other::cmp_kernel<(ns::Op)3, std::less<void> >(int*, int&&)",
        "ns::Result<int> ns::other::cmp_kernel<(ns::Op)3, std::greater<void> >(int*, int&&)",
    ]
    m = short_names(names)
    _check_contract(m, names)
    assert m[names[0]] == "gemm_kernel<Tile<128>,Epi<Relu>>"
    assert m[names[1]] == "gemm_kernel<Tile<128>,Epi<Gelu>>"
    assert m[names[2]] == "gemm_kernel<Tile<64>,Epi<Relu>>"
    assert m[names[3]] == "cmp_kernel<less>"
    assert m[names[4]] == "cmp_kernel<greater>"


def test_lambdas_and_anonymous_namespaces():
    names = [
        "void at::native::(anonymous namespace)::k<at::native::foo(at::Tensor&)::{lambda()#1}::operator()() const"
        "::{lambda(float)#1}, 4>(int)",
        "void at::native::(anonymous namespace)::k<at::native::bar(at::Tensor&)::{lambda(float)#2}, 4>(int)",
    ]
    assert short_names(names) == {names[0]: "k<fooλ>", names[1]: "k<barλ>"}


def test_fallback_hash_for_overloads_and_long_names():
    # same function and template args, different parameter lists: only a hash can tell them apart
    a, b = "void k<float>(int)", "void k<float>(long)"
    m = short_names([a, b])
    _check_contract(m, [a, b])
    assert re.fullmatch(r"k~[0-9a-f]{6}", m[a]) and re.fullmatch(r"k~[0-9a-f]{6}", m[b])
    # plain names longer than MAX_LEN sharing their first MAX_LEN characters
    long1, long2 = "x" * 100 + "1", "x" * 100 + "2"
    _check_contract(short_names([long1, long2]), [long1, long2])


def test_hostile_huge_name_is_cheap():
    huge = "void k<" + "A<" * 50_000 + "int" + ">" * 50_000 + ">(int)"
    # deep nesting under the parse limit, differing at the bottom: no recursion blow-up
    deep = "void k<" + "A<" * 2000 + "int" + ">" * 2000 + ">(int)"
    deep2 = deep.replace("int>", "float>", 1)
    # one 8000-character identifier (the qualifier regex only starts at identifier starts: linear)
    ident, ident2 = "void k<" + "x" * 8000 + ">(int)", "void k<y" + "x" * 7999 + ">(int)"
    t0 = time.perf_counter()
    _check_contract(short_names([deep, deep2]), [deep, deep2])
    _check_contract(short_names([ident, ident2, "void k<int>(int)"]), [ident, ident2, "void k<int>(int)"])
    assert time.perf_counter() - t0 < 2.0
    flat = "Cijk_Ailk_Bljk_S_" + "_".join(f"X{i}" for i in range(200_000))
    t0 = time.perf_counter()
    m = short_names([huge, flat, "void k<int>(int)"])
    assert time.perf_counter() - t0 < 2.0
    _check_contract(m, [huge, flat, "void k<int>(int)"])


def test_order_independent_and_thousands_of_names():
    rng = random.Random(7)
    names = [f"Cijk_Ailk_Bljk_BBS_BH_MT{rng.choice([16, 32, 64, 128])}x{rng.choice([16, 32, 64])}x{k}"
             f"_MI16x16x1_LDSB{rng.randint(0, 1)}_GSU{rng.randint(0, 3)}_ISA950_WG32_8_1"
             for k in range(2000)]
    names += [f"void ns::kern<{i % 7}, ns::F<float, {i}> >(int)" for i in range(2000)]
    t0 = time.perf_counter()
    m = short_names(names)
    elapsed = time.perf_counter() - t0
    _check_contract(m, names)
    assert elapsed < 5.0  # 2 shared CPUs; ~0.2 s when the machine is quiet
    shuffled = names[:]
    rng.shuffle(shuffled)
    assert short_names(shuffled) == m


def test_series_helper_maps_every_row():
    s = pd.Series(["void k<int>(int)", "void k<float>(int)", None, "void k<int>(int)"], dtype="category")
    out = short_name_series(s)
    assert out.tolist()[:2] == ["k<int>", "k<float>"] and pd.isna(out.iloc[2]) and out.iloc[3] == "k<int>"


@pytest.mark.parametrize("bad", ["", " ", "<", ">>>", "(", "::", "Cijk_Ailk_Bljk_"])
def test_degenerate_names_still_get_distinct_labels(bad):
    names = [bad, "ok"]
    _check_contract(short_names(names), names)
