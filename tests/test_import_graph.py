"""The package's import graph: no circles, no upward imports, no hidden imports.

Walks every module of ``pytest_gemmperf`` with ``ast`` (top-level and function-local imports,
relative forms included), so an import moved inside a function still counts as an edge: a
circle held apart only by call-time imports is still a circle. The layer order is the one
written in ``docs/ARCHITECTURE.md``; a second check keeps that page's module map equal to the
tree.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pytest_gemmperf"
PACKAGE_DIR = ROOT / PACKAGE
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"

# Layers, lowest first; a module may import its own layer and the layers below it.
# Kept equal to the "Layers" section of docs/ARCHITECTURE.md (test_layer_order_documented).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("version", "collector", "blas_threads", "numbers", "errors", "paths", "safe_io", "jsonsafe", "redact", "textsafe", "config", "workdir",
                    "jsonkeys", "run.results")),
    ("sweep", ("sweep",)),
    ("traces", ("traces",)),
    ("run", ("run",)),
    ("analysis", ("analysis",)),
    ("gate", ("gate",)),
    ("store", ("store",)),
    ("history", ("history",)),
    ("report", ("report",)),
    ("pytest glue", ("plugin", "pytest_glue", "shard")),
    ("cli", ("cli", "commands", "api")),
)

LAZY_COMMENT = re.compile(r"#\s*lazy\b")
# The CLI's start-up imports are being reworked in cli.py / commands/ (what `gemmperf --help`
# loads); their comments land with that work. Remove this exemption then.
LAZY_CHECK_PENDING: tuple[str, ...] = ()


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    local: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".")
    drop = node.level - 1 if is_package else node.level
    base = base[: len(base) - drop]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The package module an imported name lives in (``a.b.c`` -> ``a.b`` when c is a name)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per session: the graph's three checks read the same
    tree of every module."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def imports_of(source: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    tree = _tree(path)
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(source, alias.name, child.lineno, local))
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(source, is_package, child)
                for alias in child.names:
                    full = f"{base}.{alias.name}" if base else alias.name
                    # "from pkg import mod" names a module; "from mod import name" names the module.
                    found.append(Import(source, full if full in modules else base, child.lineno,
                                        local))
            if not isinstance(child, (ast.Import, ast.ImportFrom)):
                visit(child, inner)

    visit(tree, False)
    return found


def _is_type_checking(path: Path) -> set[int]:
    """Lines inside ``if TYPE_CHECKING:`` blocks (annotations only; not run, not an edge)."""
    lines: set[int] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


@functools.cache
def all_imports() -> tuple[Import, ...]:
    """Every import of the package, read once per session (the tree does not change while
    the tests run)."""
    modules = package_modules()
    out: list[Import] = []
    for name, path in modules.items():
        skip = _is_type_checking(path)
        out.extend(i for i in imports_of(name, path, modules) if i.line not in skip)
    return tuple(out)


def package_edges(parents: bool = True) -> dict[str, set[str]]:
    """Module -> the package modules it imports; ``parents``: also the packages whose
    ``__init__`` the import runs (edges for the circle check, not design dependencies)."""
    modules = package_modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in all_imports():
        target = _known(imp.target, modules)
        if target is None or target == imp.source:
            continue
        graph[imp.source].add(target)
        if not parents:
            continue
        # Importing a.b.c runs a/__init__ and a/b/__init__ first.
        parent = target.rpartition(".")[0]
        while parent and parent != PACKAGE:
            if parent != imp.source and not imp.source.startswith(parent + "."):
                graph[imp.source].add(parent)
            parent = parent.rpartition(".")[0]
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_cycle_in(comp, graph) for comp in components]


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A concrete circle through the component's first module (breadth-first, shortest)."""
    start = component[0]
    members = set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    return component


def layer_of(module: str) -> int:
    rel = module.removeprefix(PACKAGE).lstrip(".")
    best, best_len = None, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (rel == prefix or rel.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = rank, len(prefix)
    if best is None:
        raise AssertionError(f"{module}: in no layer of LAYERS / docs/ARCHITECTURE.md")
    return best


def test_no_import_cycles():
    cycles = find_cycles(package_edges())
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_upward_imports():
    graph = package_edges(parents=False)
    wrong = []
    for source, targets in sorted(graph.items()):
        if source == PACKAGE:
            continue
        for target in sorted(targets):
            if target == PACKAGE:
                continue
            if layer_of(target) > layer_of(source):
                wrong.append(f"{source} ({LAYERS[layer_of(source)][0]}) imports {target} "
                             f"({LAYERS[layer_of(target)][0]})")
    assert not wrong, "imports from a lower layer to a higher one:\n" + "\n".join(wrong)


def test_function_local_imports_say_why():
    modules = package_modules()
    hidden = []
    for imp in all_imports():
        if not imp.local or imp.source.startswith(LAZY_CHECK_PENDING):
            continue
        lines = modules[imp.source].read_text(encoding="utf-8").splitlines()
        here = lines[imp.line - 1]
        before = lines[imp.line - 2] if imp.line >= 2 else ""
        if not (LAZY_COMMENT.search(here) or LAZY_COMMENT.search(before)):
            hidden.append(f"{modules[imp.source].relative_to(ROOT)}:{imp.line}: {imp.target}")
    hidden = sorted(set(hidden))
    assert not hidden, ("function-local imports without a '# lazy: why' comment:\n"
                        + "\n".join(hidden))


def test_find_cycles_names_the_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_function_local_and_relative_imports_are_edges(tmp_path):
    modules = {f"{PACKAGE}.x": tmp_path / "x.py", f"{PACKAGE}.y": tmp_path / "y.py",
               f"{PACKAGE}.sub": tmp_path / "sub" / "__init__.py",
               f"{PACKAGE}.sub.z": tmp_path / "sub" / "z.py"}
    src = tmp_path / "x.py"
    src.write_text("def f():\n    from . import y\n    from .sub.z import thing\n")
    found = imports_of(f"{PACKAGE}.x", src, modules)
    assert [(i.target, i.local) for i in found] == [(f"{PACKAGE}.y", True),
                                                   (f"{PACKAGE}.sub.z", True)]


# --- the module map in docs/ARCHITECTURE.md ------------------------------------------------------

def documented_modules() -> set[str]:
    """Module paths named in the map: ``  name.py`` lines, nested under ``dir/`` headings."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split("```", 2)[1]
    found: set[str] = set()
    dirs: dict[int, str] = {}
    for line in block.splitlines():
        m = re.match(r"^(\s*)(\S+)", line)
        if not m:
            continue
        indent, name = len(m.group(1)), m.group(2)
        for level in [k for k in dirs if k >= indent]:
            del dirs[level]
        prefix = "/".join(dirs[k] for k in sorted(dirs))
        if name.endswith("/"):
            dirs[indent] = name.rstrip("/")
        elif name.endswith(".py"):
            found.add(f"{prefix}/{name}" if prefix else name)
    return found


def test_architecture_lists_every_module():
    tree = {p.relative_to(ROOT).as_posix() for p in PACKAGE_DIR.rglob("*.py")}
    documented = documented_modules()
    missing = sorted(tree - documented)
    stale = sorted(documented - tree)
    assert not missing, "modules missing from docs/ARCHITECTURE.md: " + ", ".join(missing)
    assert not stale, "docs/ARCHITECTURE.md lists modules not in the tree: " + ", ".join(stale)


def test_layer_order_documented():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    order = " → ".join(name for name, _ in LAYERS)
    assert order in text, f"docs/ARCHITECTURE.md should state the layer order: {order}"
