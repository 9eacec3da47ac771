"""The baseline store's package boundary (docs/ARCHITECTURE.md: sweep -> run -> traces ->
analysis -> gate -> store -> report): ``gate/`` holds statistics only and never imports the
store, and the store never imports the pytest glue or the command-line layer that call it.

Read from the source (every import statement, lazy ones included), so a dependency that only a
rarely taken branch would load is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_gemmperf"

#: what the store's modules must never import: the layers that call it
ABOVE_STORE = ("pytest_gemmperf.plugin", "pytest_gemmperf.pytest_glue", "pytest_gemmperf.commands",
               "pytest_gemmperf.cli", "pytest_gemmperf.report",
               "pytest_gemmperf.shard")


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names (``from a import b`` gives ``a`` and
    ``a.b``: ``b`` may be a submodule)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def modules_of(package: str) -> list[Path]:
    return sorted((PACKAGE / package).glob("*.py"))


def test_store_modules_live_in_the_store_package():
    for name in ("record", "baselines", "transactions", "fs", "hardware", "results", "compare_inputs",
                 "verdicts_file"):
        assert (PACKAGE / "store" / f"{name}.py").is_file(), name
    # no stub or re-export left in gate/: each name is imported from where it lives
    left = {p.stem for p in modules_of("gate")} & {"baseline", "record", "store", "store_txn", "store_fs",
                                                    "results_source", "verdicts_file", "hardware", "load"}
    assert not left


@pytest.mark.parametrize("path", modules_of("gate"), ids=lambda p: p.name)
def test_gate_never_imports_the_store(path):
    assert not [m for m in imported_modules(path) if m.startswith("pytest_gemmperf.store")]


@pytest.mark.parametrize("path", modules_of("store"), ids=lambda p: p.name)
def test_store_never_imports_its_callers(path):
    bad = [m for m in imported_modules(path)
           if any(m == top or m.startswith(top + ".") or m.startswith(top + "_") for top in ABOVE_STORE)]
    assert not bad
