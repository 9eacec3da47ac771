"""scripts/mutation_check.py: the mutants it makes (each a one-place change that compiles, with an
id that survives edits elsewhere), its equivalent-mutants file, and its refusals. The run of
the tests against each mutant is the tool's job on real modules (docs/testing.md)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "mutation_check.py"


@pytest.fixture(scope="module")
def mc():
    spec = importlib.util.spec_from_file_location("mutation_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutation_check"] = mod
    spec.loader.exec_module(mod)
    yield mod
    del sys.modules["mutation_check"]


SOURCE = '''"""doc"""
from __future__ import annotations

LIMIT: int = 3
__all__ = ["f", "g"]


def f(x: int = 2, *, flag: bool = True) -> bool:
    # a comment that must stay
    if not x < LIMIT and flag:
        raise ValueError("too big")
    return x >= 0 or x in (1, 2)


class C:
    def g(self, a):
        return ~a & (a | 1)
'''


def mutants_of(mc, tmp_path, source=SOURCE):
    p = tmp_path / "m.py"
    p.write_text(source)
    return {m.id: m for m in mc.make_mutants(p)}


def test_every_kind_of_mutant_is_made_once_per_place(mc, tmp_path):
    ms = mutants_of(mc, tmp_path)
    assert sorted(ms) == sorted([
        "<module>/num/3/4/1", "<module>/num/3/0/1",
        "f/num/2/3/1", "f/num/2/0/1", "f/bool/True/False/1",
        "f/boolop/and/or/1", "f/unary/not/-/1", "f/cmp/</>=/1", "f/cmp/</<=/1",
        "f/raise/raise/pass/1",
        "f/return/value/None/1", "f/return/value/not/1", "f/boolop/or/and/1",
        "f/cmp/>=/</1", "f/cmp/>=/>/1", "f/num/0/1/1", "f/cmp/in/not_in/1",
        "f/num/1/2/1", "f/num/1/0/1", "f/num/2/3/2", "f/num/2/0/2",
        "C.g/return/value/None/1", "C.g/bitop/&/|/1", "C.g/unary/~/-/1", "C.g/bitop/|/&/1",
        "C.g/num/1/2/1", "C.g/num/1/0/1",
    ])
    # annotations, __all__ and the docstring are left alone
    assert not [m for m in ms.values() if "int" in m.before or m.before.startswith("[")]


def test_a_mutant_changes_its_place_only_and_keeps_comments_and_lines(mc, tmp_path):
    original = ast.dump(ast.parse(SOURCE))
    for m in mutants_of(mc, tmp_path).values():
        tree = ast.parse(m.source)  # every mutant compiles
        assert ast.dump(tree) != original, m.id
        assert m.source.count("\n") == SOURCE.count("\n"), m.id
        assert "# a comment that must stay" in m.source, m.id
    ms = mutants_of(mc, tmp_path)
    assert "if not x >= LIMIT and flag:" in ms["f/cmp/</>=/1"].source.replace("(", "").replace(")", "")
    assert "        pass\n" in ms["f/raise/raise/pass/1"].source
    assert ms["f/raise/raise/pass/1"].line == 11
    assert "return None" in ms["C.g/return/value/None/1"].source


def test_ids_stay_when_another_function_changes(mc, tmp_path):
    before = {k: (m.before, m.after) for k, m in mutants_of(mc, tmp_path).items() if k.startswith("C.g/")}
    edited = SOURCE.replace("    return x >= 0", "    y = 5 > 4\n    return x >= 0")
    after = {k: (m.before, m.after) for k, m in mutants_of(mc, tmp_path, edited).items() if k.startswith("C.g/")}
    assert before == after


def test_the_equivalent_file_needs_a_reason_per_id(mc, tmp_path):
    f = tmp_path / "eq.txt"
    f.write_text("# comment\n\nf/num/2/3/1  the default is never used\n")
    assert mc._load_equivalent(f) == {"f/num/2/3/1": "the default is never used"}
    f.write_text("f/num/2/3/1\n")
    with pytest.raises(mc.CheckError, match=r"eq.txt:1: f/num/2/3/1 has no reason"):
        mc._load_equivalent(f)
    with pytest.raises(mc.CheckError, match="no such equivalent-mutants file"):
        mc._load_equivalent(tmp_path / "absent.txt")


def test_bad_input_is_one_line_and_exit_2(mc, tmp_path, capsys):
    assert mc.main(["README.md", "--tests", "tests/test_mutation_check.py", "--only", "x"]) == 2
    assert "README.md: does not parse" in capsys.readouterr().err
    assert mc.main([str(tmp_path / "m.py"), "--tests", "tests/test_mutation_check.py"]) == 2
    assert "not a file of this checkout" in capsys.readouterr().err
    assert mc.main(["pytest_gemmperf/gate/verdict.py", "--tests", "tests/nope.py"]) == 2
    assert "tests/nope.py: not a test file of this checkout" in capsys.readouterr().err
    assert mc.main(["pytest_gemmperf/gate/verdict.py", "--tests", "tests/test_mutation_check.py",
                    "--only", "no/such/id"]) == 2
    assert "no such mutant: no/such/id" in capsys.readouterr().err


def test_list_names_every_mutant_of_a_real_module(mc, capsys):
    assert mc.main(["pytest_gemmperf/gate/verdict.py", "--tests", "tests/test_verdict_rules.py", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(mc.make_mutants(REPO / "pytest_gemmperf" / "gate" / "verdict.py")) > 20
    assert any(line.startswith("shorten_kernel/cmp/<=/>/1") and "len(name) > width" in line for line in out)


REGISTRY = '''import yaml


class Flow(dict):
    """dumped on one line"""


class Dumper(yaml.SafeDumper):
    pass


Dumper.add_representer(Flow, lambda d, m: d.represent_mapping("tag:yaml.org,2002:map", list(m.items()),
                                                                flow_style=True))


def dump(x):
    return yaml.dump({"a": Flow(x)}, Dumper=Dumper)
'''


def test_the_in_place_swap_keeps_a_registry_keyed_by_the_modules_classes(mc, tmp_path, monkeypatch):
    # yaml's add_representer fills a dict keyed by the class: the mutant's run of the module makes
    # a new Flow, while the loaded module keeps making instances of the old one
    helpers = mc.RUNNER[mc.RUNNER.index("def _patch_function"):mc.RUNNER.index("for line in sys.stdin")]
    ns = {"types": types, "sys": sys}
    exec(helpers, ns)
    (tmp_path / "swap_demo.py").write_text(REGISTRY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "swap_demo", raising=False)
    demo = importlib.import_module("swap_demo")
    try:
        assert demo.dump({"b": 1}) == "a: {b: 1}\n"
        ns["mutate"]("swap_demo", str(tmp_path / "swap_demo.py"))  # unmutated: the same behaviour
        assert demo.dump({"b": 1}) == "a: {b: 1}\n"
        (tmp_path / "mutant.py").write_text(REGISTRY.replace("flow_style=True", "flow_style=False"))
        ns["mutate"]("swap_demo", str(tmp_path / "mutant.py"))  # the mutant's representer runs
        assert demo.dump({"b": 1}) == "a:\n  b: 1\n"
    finally:
        sys.modules.pop("swap_demo", None)
