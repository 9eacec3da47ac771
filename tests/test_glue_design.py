"""The pytest glue's design: one package, composition instead of mixins, a one-direction gate step.

Read from the source with ``ast`` (which classes derive from which, who reaches into the
session object) and from real pytester sessions of a two-point CPU sweep (the order of the gate
step's stages, how often a gated point's ``point.json`` is written once its workload is done).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from gemmperf_pytester_support import gp  # noqa: F401 - the fixture
import pytest_gemmperf.plugin  # noqa: F401 - the whole glue loaded before the inner sessions
from pytest_gemmperf.run import results as run_results

try:
    from pytest_gemmperf.pytest_glue import gate_step
except ImportError:  # the layout before the glue package: the tests below fail on it
    gate_step = None

pytest_plugins = ["pytester"]
# no test here reads report.html / report.xlsx (conftest.py: without_session_reports)
pytestmark = pytest.mark.usefixtures("without_session_reports")

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "pytest_gemmperf"
GLUE_DIR = PACKAGE_DIR / "pytest_glue"
#: the glue's modules, and where the earlier layout kept them (so the checks read both)
GLUE_MODULES = ("hooks", "options", "session", "point", "gate_step", "reruns", "plan", "progress",
                "shard_hooks", "benchmark_json", "history", "summary")
OLD_GLUE = ("session.py", "session_gate.py", "session_reruns.py", "session_point.py", "session_plan.py",
            "session_benchmark.py", "progress.py", "shard_hooks.py", "history/pytest_side.py")

#: pytest's own fields of its session, which a plugin is meant to set
PYTEST_SESSION_FIELDS = ("exitstatus", "shouldstop", "shouldfail")
#: the gate step's stages, in the order they must run
STAGES = ("validate", "samples", "compare", "confirm", "verdicts", "write_point_json", "record_history",
          "save_baseline")
SLUG = "test_gpsweep.py__test_gpsweep"
POINTS = ("ch28-th256", "ch56-th256")


def glue_files() -> list[Path]:
    files = [PACKAGE_DIR / "plugin.py", *sorted(GLUE_DIR.rglob("*.py"))]
    files += [PACKAGE_DIR / name for name in OLD_GLUE if (PACKAGE_DIR / name).is_file()]
    return [f for f in files if f.is_file()]


def package_classes() -> dict[str, ast.ClassDef]:
    """Every class the package defines, by name."""
    out: dict[str, ast.ClassDef] = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, node)
    return out


def _is_exception(name: str, classes: dict[str, ast.ClassDef], seen: frozenset = frozenset()) -> bool:
    if name.endswith(("Error", "Exception", "Interrupt")) or name in ("Exception", "BaseException"):
        return True
    node = classes.get(name)
    if node is None or name in seen:
        return False
    return any(_is_exception(ast.unparse(b).rpartition(".")[2], classes, seen | {name}) for b in node.bases)


def test_the_glue_is_one_package():
    missing = [m for m in GLUE_MODULES if not (GLUE_DIR / f"{m}.py").is_file()]
    assert not missing, f"pytest_gemmperf/pytest_glue/ lacks {missing}"
    left = [name for name in OLD_GLUE if (PACKAGE_DIR / name).is_file()]
    assert not left, f"glue modules left outside pytest_glue/: {left}"
    plugin = ast.parse((PACKAGE_DIR / "plugin.py").read_text(encoding="utf-8"))
    defined = [n.name for n in plugin.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert not defined, f"plugin.py only exposes the hooks; it defines {defined}"


def test_no_glue_class_is_made_of_mixins():
    """A glue class derives from no other gemmperf class (exceptions aside): collaborators are
    held, not inherited."""
    classes = package_classes()
    mixed = []
    for path in glue_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                name = ast.unparse(base).rpartition(".")[2]
                if name in classes and not _is_exception(name, classes):
                    mixed.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}({name})")
    assert not mixed, "glue classes inheriting gemmperf classes:\n" + "\n".join(mixed)


def _mentions_session(node: ast.AST) -> bool:
    return any(isinstance(n, (ast.Name, ast.Attribute))
               and "session" in (n.id if isinstance(n, ast.Name) else n.attr).lower()
               for n in ast.walk(node)) or "stash[" in ast.unparse(node)


def test_no_gemmperf_state_is_attached_to_or_fished_from_a_session():
    """No ``getattr(session, ...)`` / ``setattr`` / ``hasattr`` / ``session.x = ...`` from
    outside the session's own class: what a point needs is handed to it."""
    found = []
    for path in glue_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                    and node.args and _mentions_session(node.args[0])):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if (isinstance(t, ast.Attribute) and t.attr not in PYTEST_SESSION_FIELDS
                            and not (isinstance(t.value, ast.Name) and t.value.id == "self")
                            and _mentions_session(t.value)):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(t)} = ...")
    assert not found, "gemmperf state attached to / read off a session object:\n" + "\n".join(found)


def _count_point_json_writes(monkeypatch) -> list[tuple[str, str]]:
    """(point, status) of every point.json write, through whichever module holds the writer."""
    original = run_results.write_point_json
    writes: list[tuple[str, str]] = []

    def counting(point_dir, record):
        writes.append((Path(point_dir).name, str(dict(record).get("status"))))
        return original(point_dir, record)

    monkeypatch.setattr(run_results, "write_point_json", counting)
    for name, module in list(sys.modules.items()):
        if name.startswith("pytest_gemmperf") and getattr(module, "write_point_json", None) is original:
            monkeypatch.setattr(module, "write_point_json", counting)
    return writes


def _spy_on_stages(monkeypatch) -> list[tuple[str, str]]:
    """(point, stage) of every top-level stage call of the gate step, in call order."""
    calls: list[tuple[str, str]] = []
    depth = [0]
    for stage in STAGES:
        original = getattr(gate_step.GateStep, stage)

        def spy(self, *args, _stage=stage, _original=original, **kwargs):
            if depth[0] == 0:
                calls.append((self.point.id, _stage))
            depth[0] += 1
            try:
                return _original(self, *args, **kwargs)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(gate_step.GateStep, stage, spy)
    return calls


def test_a_gated_point_runs_its_stages_in_one_direction_and_writes_point_json_once(gp, monkeypatch):
    """Two sessions of a two-point sweep: the first records the baselines, the second compares.
    Once a point's workload is done (point.json ``complete``), the gate writes point.json once,
    with every field it adds; the stages run validate -> samples -> compare -> confirm ->
    verdicts -> point.json -> history -> baseline (no comparison stages when recording)."""
    writes = _count_point_json_writes(monkeypatch)
    calls = _spy_on_stages(monkeypatch) if gate_step is not None else []
    for results in ("r1", "r2"):
        writes.clear()
        calls.clear()
        gp("--gemmperf-confirm", "0", results=results).assert_outcomes(passed=2)
        for point in POINTS:
            done = [s for p, s in writes if p == point and s == run_results.COMPLETE]
            # one by the runner when the workload ended, one by the gate step
            assert len(done) == 2, (results, point, writes)
            record = json.loads((gp.path / results / SLUG / point / "point.json").read_text())
            assert record["status"] == "complete" and record["warmup"] == 0 and "threshold" in record
            assert ("verdicts" in record) == (results == "r2"), record
        assert gate_step is not None, "no pytest_gemmperf.pytest_glue.gate_step"
        for point in POINTS:
            order = tuple(s for p, s in calls if p == point)
            expected = STAGES if results == "r2" else tuple(
                s for s in STAGES if s not in ("compare", "confirm", "verdicts"))
            assert order == expected, (results, point, order)
