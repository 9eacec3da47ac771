"""Mutation check of one module: do its tests notice when its code is changed?

Each mutant is the module with one small change a wrong edit could make: a comparison negated
(``<`` -> ``>=``) or moved across its boundary (``<`` -> ``<=``), ``and`` <-> ``or``, ``&`` <->
``|`` (numpy masks), a ``not`` or ``~`` removed, a ``raise`` replaced by ``pass``, a number
changed (``n`` -> ``n + 1``, ``n`` -> ``0``), ``True`` <-> ``False``, a returned value replaced by
``None`` or negated. Every mutant is written over a copy of the checkout in a temporary folder
(the working tree is never touched) and the given test files run against it (``python -m pytest
-x``) under a timeout. A mutant is *killed* when a test fails (or the run times out), *survived*
when every test passes.

Only the tests that execute the mutated lines are run, fastest first: one traced run of the test
files first records which test executes which line of the module (``sys.settrace``, in process;
code the tests run in a subprocess is not seen) and how long each test takes. A mutant on a line
no test executed in process (or one executed while modules are imported) runs every given test.

The score is killed / (mutants - equivalent). ``--equivalent FILE`` lists the mutants judged
equivalent (no test can tell them from the module: same behaviour), one per line, ``ID reason``;
a listed id that no longer matches a mutant is reported as stale. Ids are
``scope/kind/from/to/n`` (``n``: the occurrence of that change in that function), so they stay
valid while other functions of the module change.

Usage::

    python scripts/mutation_check.py pytest_gemmperf/gate/headline.py \\
        --tests tests/test_headline.py tests/test_headline_rules.py \\
        --equivalent scripts/mutation_equivalent/headline.txt --jobs 1 --timeout 120

Exit status 0 when the score reaches ``--min-score`` (default 0: report only), 1 below it, 2 on
bad input (a module that does not parse, tests that fail on the unmutated module).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

NEGATE = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq,
          ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
OP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.In: "in", ast.NotIn: "not_in", ast.Is: "is", ast.IsNot: "is_not", ast.And: "and",
           ast.Or: "or", ast.BitAnd: "&", ast.BitOr: "|"}


class CheckError(Exception):
    """Bad input: one line for the user."""


@dataclass
class Mutant:
    id: str
    line: int
    before: str
    after: str
    source: str  # the whole mutated module
    lines: tuple[int, int]  # first and last line the change covers
    status: str = "pending"  # killed, survived, timeout, equivalent
    seconds: float = 0.0
    tests_run: int = 0
    reason: str = ""


@dataclass
class _Site:
    """One place to mutate: a path to the node in the tree and how to change it."""

    path: list
    kind: str
    frm: str
    to: str
    scope: str
    apply: object  # callable(node) -> replacement node (or None to keep the node, changed in place)
    line: int = 0
    end_line: int = 0
    extra: dict = field(default_factory=dict)


def _num_text(v) -> str:
    return repr(v)


def _find_sites(tree: ast.Module) -> list[_Site]:
    """Every mutation of the module, in source order."""
    sites: list[_Site] = []
    skip_ids: set[int] = set()

    # never mutate annotations, decorators (``dataclass(frozen=True)``) or __all__
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for d in node.decorator_list:
                skip_ids.update(id(n) for n in ast.walk(d))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs,
                      node.args.vararg, node.args.kwarg]:
                if a is not None and a.annotation is not None:
                    skip_ids.update(id(n) for n in ast.walk(a.annotation))
            if node.returns is not None:
                skip_ids.update(id(n) for n in ast.walk(node.returns))
        if isinstance(node, ast.AnnAssign):
            skip_ids.update(id(n) for n in ast.walk(node.annotation))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            skip_ids.update(id(n) for n in ast.walk(node))

    def visit(node: ast.AST, path: list, scope: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = node.name if scope == "<module>" else f"{scope}.{node.name}"
        elif isinstance(node, ast.Lambda):
            scope = f"{scope}.<lambda>"
        if id(node) not in skip_ids:
            for s in _sites_of(node, path, scope):
                s.line = getattr(node, "lineno", 0)
                s.end_line = getattr(node, "end_lineno", s.line) or s.line
                sites.append(s)
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST):
                        visit(child, path + [(name, i)], scope)
            elif isinstance(value, ast.AST):
                visit(value, path + [(name, None)], scope)

    visit(tree, [], "<module>")
    return sites


def _sites_of(node: ast.AST, path: list, scope: str) -> list[_Site]:
    out: list[_Site] = []
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for table in (NEGATE, BOUNDARY):
                new = table.get(type(op))
                if new is None:
                    continue

                def apply(n, i=i, new=new):
                    n.ops[i] = new()
                    return None
                out.append(_Site(path, "cmp", OP_TEXT[type(op)], OP_TEXT[new], scope, apply))
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And

        def apply(n, new=new):
            n.op = new()
            return None
        out.append(_Site(path, "boolop", OP_TEXT[type(node.op)], OP_TEXT[new], scope, apply))
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
        new = ast.BitOr if isinstance(node.op, ast.BitAnd) else ast.BitAnd

        def apply(n, new=new):
            n.op = new()
            return None
        out.append(_Site(path, "bitop", OP_TEXT[type(node.op)], OP_TEXT[new], scope, apply))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert)):
        frm = "not" if isinstance(node.op, ast.Not) else "~"
        out.append(_Site(path, "unary", frm, "-", scope, lambda n: n.operand))
    elif isinstance(node, ast.Raise):
        out.append(_Site(path, "raise", "raise", "pass", scope, lambda n: ast.Pass()))
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        out.append(_Site(path, "bool", str(node.value), str(not node.value), scope,
                         lambda n: ast.Constant(not n.value)))
    elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        v = node.value
        out.append(_Site(path, "num", _num_text(v), _num_text(v + 1), scope,
                         lambda n: ast.Constant(n.value + 1)))
        if v != 0:
            out.append(_Site(path, "num", _num_text(v), _num_text(type(v)(0)), scope,
                             lambda n: ast.Constant(type(n.value)(0))))
    elif isinstance(node, ast.Return) and node.value is not None:
        value = node.value
        if not (isinstance(value, ast.Constant) and value.value is None):
            out.append(_Site(path, "return", "value", "None", scope,
                             lambda n: ast.Return(ast.Constant(None))))
        boolish = (isinstance(value, (ast.Compare, ast.BoolOp))
                   or (isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not))
                   or (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                       and value.func.id == "bool"))
        if boolish:
            out.append(_Site(path, "return", "value", "not", scope,
                             lambda n: ast.Return(ast.UnaryOp(ast.Not(), n.value))))
    return out


def _resolve(tree: ast.AST, path: list) -> tuple[ast.AST, ast.AST | None, tuple | None]:
    parent, node, step = None, tree, None
    for name, i in path:
        parent, step = node, (name, i)
        value = getattr(node, name)
        node = value[i] if i is not None else value
    return node, parent, step


def _segment(src_lines: list[str], node: ast.AST) -> str:
    seg = ast.get_source_segment("".join(src_lines), node) or ast.unparse(node)
    return " ".join(seg.split())


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def make_mutants(path: Path) -> list[Mutant]:
    """Every mutant of the module at ``path``; the working tree is not touched."""
    src = path.read_text()
    try:
        tree = ast.parse(src, filename=str(path))
    except SyntaxError as e:
        raise CheckError(f"{path}: does not parse: {e.msg} (line {e.lineno})") from None
    src_lines = src.splitlines(keepends=True)
    sites = _find_sites(tree)
    seen: dict[tuple, int] = {}
    mutants: list[Mutant] = []
    for s in sites:
        key = (s.scope, s.kind, s.frm, s.to)
        seen[key] = seen.get(key, 0) + 1
        mid = f"{s.scope}/{s.kind}/{s.frm}/{s.to}/{seen[key]}"
        t = copy.deepcopy(tree)
        node, parent, step = _resolve(t, s.path)
        before = _segment(src_lines, node)
        repl = s.apply(node)
        if repl is not None:
            name, i = step
            if i is None:
                setattr(parent, name, repl)
            else:
                getattr(parent, name)[i] = repl
            shown = repl
        else:
            shown = node
        ast.fix_missing_locations(t)
        after = " ".join(ast.unparse(shown).split())
        mutants.append(Mutant(mid, s.line, _short(before), _short(after), _splice(src, tree, s, t),
                              (s.line, s.end_line)))
    return mutants


def _splice(src: str, tree: ast.Module, site: _Site, mutated: ast.Module) -> str:
    """The mutated module: the original text with only the changed node rewritten (comments and
    line numbers kept), checked against the mutated tree; the whole tree unparsed otherwise."""
    node, _, _ = _resolve(tree, site.path)
    new_node, _, _ = _resolve(mutated, site.path)
    lines = src.splitlines(keepends=True)
    try:
        start = sum(len(x) for x in lines[: node.lineno - 1]) + len(
            lines[node.lineno - 1].encode()[: node.col_offset].decode())
        end = sum(len(x) for x in lines[: node.end_lineno - 1]) + len(
            lines[node.end_lineno - 1].encode()[: node.end_col_offset].decode())
        text = ast.unparse(new_node)
        if not isinstance(node, ast.stmt):
            text = f"({text})"
        out = src[:start] + text + src[end:]
        if ast.dump(ast.parse(out)) == ast.dump(mutated):
            return out
    except (SyntaxError, AttributeError, TypeError, IndexError, UnicodeDecodeError):
        pass
    return ast.unparse(mutated) + "\n"


# ---------------------------------------------------------------------------------------------
# running the tests

TRACER = r'''
"""Records which test executes which line of one module (written by mutation_check.py)."""
import json, os, sys, threading, time
import pytest

_TARGET = os.environ["MUTATION_TARGET"]
_OUT = os.environ["MUTATION_TRACE_OUT"]
_current = ["<import>"]
_hits = {}
_durations = {}


def _local(frame, event, arg):
    if event == "line":
        _hits.setdefault(frame.f_lineno, set()).add(_current[0])
    return _local


def _global(frame, event, arg):
    if frame.f_code.co_filename == _TARGET:
        _hits.setdefault(frame.f_lineno, set()).add(_current[0])
        return _local
    return None


sys.settrace(_global)
threading.settrace(_global)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    t0 = time.perf_counter()
    yield
    _durations[item.nodeid] = time.perf_counter() - t0
    _current[0] = "<between>"


def pytest_sessionfinish(session):
    sys.settrace(None)
    with open(_OUT, "w") as f:
        json.dump({"hits": {str(k): sorted(v) for k, v in _hits.items()},
                   "durations": _durations}, f)
'''


RUNNER = r"""
# Runs pytest once per request in a forked child (written by mutation_check.py): the package and
# the libraries it needs are imported once here; a child swaps the mutated module's code into
# the loaded objects, so a mutant costs its tests, not an interpreter's start-up.
import importlib, json, os, pkgutil, resource, signal, sys, time, types

import pytest
import pytest_gemmperf

for info in pkgutil.walk_packages(pytest_gemmperf.__path__, "pytest_gemmperf."):
    if not info.name.endswith("__main__"):
        try:
            importlib.import_module(info.name)
        except ImportError:
            pass
# pytest rewrites the asserts of every module of a plugin's distribution it imports: import them
# here, once (hypothesis's plugin imports all of hypothesis at the end of each session)
from importlib.metadata import entry_points

for ep in entry_points(group="pytest11"):
    try:
        importlib.import_module(ep.module)
    except Exception:
        pass
try:
    import hypothesis
except ImportError:
    pass


def _patch_function(old, new):
    old.__code__ = new.__code__
    old.__defaults__ = new.__defaults__
    old.__kwdefaults__ = new.__kwdefaults__
    for oc, nc in zip(old.__closure__ or (), new.__closure__ or ()):
        try:
            oc.cell_contents = nc.cell_contents
        except ValueError:  # an empty cell
            pass


def _patch_class(old, new):
    for name, value in vars(new).items():
        if name in ("__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"):
            continue
        cur = vars(old).get(name)
        if isinstance(value, types.FunctionType) and isinstance(cur, types.FunctionType):
            _patch_function(cur, value)
        elif isinstance(value, property) and isinstance(cur, property):
            for o, n in ((cur.fget, value.fget), (cur.fset, value.fset)):
                if o is not None and n is not None:
                    _patch_function(o, n)
        elif isinstance(value, (staticmethod, classmethod)) and type(cur) is type(value):
            _patch_function(cur.__func__, value.__func__)
        elif isinstance(value, type) and isinstance(cur, type) and value.__module__ == new.__module__:
            _patch_class(cur, value)
        else:
            try:
                setattr(old, name, _old_classes(value))
            except (AttributeError, TypeError):
                pass


#: the mutant's classes -> the loaded ones that stay (and run the mutant's code)
_KEPT = {}


def _old_classes(value):
    # a registry the mutant's class body filled (yaml's add_representer: {class: function}) is
    # keyed by the mutant's classes, while the module keeps making instances of the loaded ones
    if isinstance(value, dict) and any(isinstance(k, type) and k in _KEPT for k in value):
        return {(_KEPT.get(k, k) if isinstance(k, type) else k): v for k, v in value.items()}
    return value


def mutate(name, path):
    # the module's objects stay (every reference to them, instances of its classes, registries
    # keep working) and run the mutant's code; its plain values are replaced everywhere they
    # were imported by name
    mod = sys.modules[name]
    ns = {"__name__": name, "__file__": mod.__file__, "__package__": mod.__package__,
          "__spec__": mod.__spec__, "__builtins__": mod.__dict__["__builtins__"]}
    exec(compile(open(path).read(), path, "exec"), ns)
    _KEPT.update({new: mod.__dict__[key] for key, new in ns.items()
                  if isinstance(new, type) and isinstance(mod.__dict__.get(key), type)
                  and new.__module__ == name and mod.__dict__[key] is not new})
    plain = {}
    for key, new in ns.items():
        old = mod.__dict__.get(key, new)
        if old is new or key.startswith("__"):
            continue
        if isinstance(new, types.FunctionType) and isinstance(old, types.FunctionType):
            _patch_function(old, new)
        elif isinstance(new, type) and isinstance(old, type) and new.__module__ == name:
            _patch_class(old, new)
        else:
            mod.__dict__[key] = new
            plain[key] = (old, new)
    for other in list(sys.modules.values()):
        d = getattr(other, "__dict__", None)
        if other is mod or not isinstance(d, dict):
            continue
        for key, (old, new) in plain.items():
            if d.get(key) is old:
                d[key] = new


for line in sys.stdin:
    req = json.loads(line)
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        # a CPU-time limit, not a wall-clock one, so a loaded machine does not kill slow mutants
        resource.setrlimit(resource.RLIMIT_CPU, (int(req["cpu_s"]), int(req["cpu_s"]) + 5))
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            if req.get("module"):
                mutate(req["module"], req["path"])
            rc = int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", *req["args"]]))
        except BaseException:
            rc = 1  # the mutant breaks the import of its module
        os._exit(rc)
    status = None
    while time.perf_counter() - t0 < req["wall_s"]:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(st)
            break
        time.sleep(0.02)
    if status is None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    sys.stdout.write(json.dumps({"rc": status, "seconds": time.perf_counter() - t0}) + "\n")
    sys.stdout.flush()
"""


class _Runner:
    """One forking runner (:data:`RUNNER`) in a copy of the checkout."""

    def __init__(self, workdir: Path) -> None:
        (workdir / "_mutation_runner.py").write_text(RUNNER)
        self.workdir = workdir
        self.proc = subprocess.Popen([sys.executable, "_mutation_runner.py"], cwd=workdir,
                                     env=dict(os.environ, PYTHONPATH=str(workdir)), text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, args: list[str], cpu_s: float, module: str = "", path: str = "") -> tuple[str, float]:
        """('passed' | 'failed' | 'timeout', seconds) of one pytest session, with the loaded
        module ``module`` running the code of the file ``path`` (when given): a timeout past
        ``cpu_s`` seconds of CPU time, or twenty times that of wall time."""
        req = {"args": args, "cpu_s": max(1.0, cpu_s), "wall_s": 20 * max(1.0, cpu_s), "module": module,
               "path": path}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise CheckError(f"the test runner in {self.workdir} stopped")
        res = json.loads(line)
        rc = res["rc"]
        # pytest: 1 tests failed, 2 interrupted (an import the mutant broke), 3 internal error;
        # SIGXCPU: past the CPU-time limit
        status = ("timeout" if rc is None or rc in (-signal.SIGXCPU, -signal.SIGKILL) else "passed" if rc == 0 else "failed" if rc in (1, 2, 3)
                  else f"error{rc}")
        return status, res["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def _copy_checkout(dest: Path) -> None:
    """The checkout's files (tracked and untracked-not-ignored), without .git and caches."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                         capture_output=True, check=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = REPO / rel
        if not src.is_file():
            continue
        d = dest / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, d)


def _pytest(workdir: Path, args: list[str], timeout: float, extra_env: dict | None = None
            ) -> tuple[str, float, str]:
    """('passed' | 'failed' | 'timeout', seconds, output tail) of one pytest run in ``workdir``."""
    env = dict(os.environ, PYTHONPATH=str(workdir), **(extra_env or {}))
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", time.perf_counter() - t0, ""
    text = out.decode(errors="replace")
    return ("passed" if proc.returncode == 0 else "failed"), time.perf_counter() - t0, text[-3000:]


def _drop_bytecode(module: Path) -> None:
    cache = module.parent / "__pycache__"
    for p in cache.glob(module.stem + ".*.pyc") if cache.is_dir() else ():
        p.unlink()


def _load_equivalent(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    if not path.is_file():
        raise CheckError(f"{path}: no such equivalent-mutants file")
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        mid, _, reason = line.partition(" ")
        if not reason.strip():
            raise CheckError(f"{path}:{n}: {mid} has no reason (write 'ID reason')")
        out[mid] = reason.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("module", help="the module's file, e.g. pytest_gemmperf/gate/headline.py")
    ap.add_argument("--tests", nargs="+", required=True, help="test files that check the module")
    ap.add_argument("--equivalent", type=Path, help="file of equivalent mutant ids ('ID reason')")
    ap.add_argument("--jobs", type=int, default=1, help="mutants tested at once (default 1)")
    ap.add_argument("--timeout", type=float, default=0,
                    help="CPU seconds per mutant (default: 20 + 3x the traced time of the tests it "
                         "runs); twenty times that in wall time")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--only", nargs="+", default=(), help="test only these mutant ids")
    ap.add_argument("--all-tests", action="store_true",
                    help="run every given test for every mutant (not only those covering its lines)")
    ap.add_argument("--json", type=Path, help="also write every mutant's result here")
    ap.add_argument("--min-score", type=float, default=0.0, help="exit 1 below this score (percent)")
    a = ap.parse_args(argv)
    try:
        return _run(a)
    except CheckError as e:
        print(f"mutation_check: {e}", file=sys.stderr)
        return 2


def _run(a: argparse.Namespace) -> int:
    module = Path(a.module).resolve()
    if not module.is_file() or REPO not in module.parents:
        raise CheckError(f"{a.module}: not a file of this checkout ({REPO})")
    rel = module.relative_to(REPO)
    tests = []
    for t in a.tests:
        p = Path(t).resolve()
        if not p.is_file() or REPO not in p.parents:
            raise CheckError(f"{t}: not a test file of this checkout")
        tests.append(str(p.relative_to(REPO)))
    equivalent = _load_equivalent(a.equivalent)
    mutants = make_mutants(module)
    if a.only:
        unknown = sorted(set(a.only) - {m.id for m in mutants})
        if unknown:
            raise CheckError(f"no such mutant: {', '.join(unknown)}")
        mutants = [m for m in mutants if m.id in set(a.only)]
    if a.list:
        for m in mutants:
            print(f"{m.id:50s} line {m.line:4d}  {m.before}  ->  {m.after}")
        return 0
    stale = sorted(set(equivalent) - {m.id for m in make_mutants(module)})

    tmp = Path(tempfile.mkdtemp(prefix="mutation-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        jobs = max(1, a.jobs)
        work = [tmp / f"w{i}" for i in range(jobs)]
        _copy_checkout(work[0])
        for w in work[1:]:
            shutil.copytree(work[0], w)
        # the module as the mutants see it: must pass unmutated
        (work[0] / "_mutation_trace.py").write_text(TRACER)
        trace_out = tmp / "trace.json"
        t0 = time.perf_counter()
        status, secs, text = _pytest(work[0], ["-p", "_mutation_trace", *tests], 3600,
                                     {"MUTATION_TARGET": str(work[0] / rel),
                                      "MUTATION_TRACE_OUT": str(trace_out)})
        if status != "passed":
            raise CheckError(f"the tests fail on the unmutated module:\n{text}")
        trace = json.loads(trace_out.read_text())
        hits = {int(k): set(v) for k, v in trace["hits"].items()}
        durations: dict[str, float] = trace["durations"]
        print(f"{rel}: {len(mutants)} mutants; tests {' '.join(tests)} pass unmutated in "
              f"{time.perf_counter() - t0:.0f} s (traced)", flush=True)

        todo = [m for m in mutants if m.id not in equivalent]
        for m in mutants:
            if m.id in equivalent:
                m.status, m.reason = "equivalent", equivalent[m.id]

        def selection(m: Mutant) -> list[str]:
            covering: set[str] = set()
            for ln in range(m.lines[0], m.lines[1] + 1):
                covering |= hits.get(ln, set())
            if a.all_tests or not covering or covering & {"<import>", "<between>"}:
                return tests
            return sorted(covering, key=lambda n: (durations.get(n, 0.0), n))

        modname = ".".join(rel.with_suffix("").parts)
        free = [_Runner(w) for w in work]
        runners = list(free)
        # the unmutated module swapped in the same way must pass, or the swap is not faithful
        status, _ = free[0].run(tests, 3600, modname, str(work[0] / rel))
        if status != "passed":
            raise CheckError(f"the tests fail when {modname} is reloaded in place ({status}); "
                             "use a subprocess per mutant instead")

        def test_one(m: Mutant) -> Mutant:
            r = free.pop()
            try:
                target = r.workdir / rel
                target.write_text(m.source)
                _drop_bytecode(target)
                sel = selection(m)
                argfile = r.workdir / "_mutation_args.txt"
                argfile.write_text("\n".join(sel) + "\n")
                # CPU seconds; the traced run's wall times are slower than a plain run's CPU
                limit = a.timeout or 20.0 + 3 * sum(durations.get(t, secs) for t in sel)
                status, m.seconds = r.run([f"@{argfile.name}"], limit, modname, str(target))
                m.tests_run = len(sel)
                m.status = {"failed": "killed", "passed": "survived"}.get(status, status)
            finally:
                (r.workdir / rel).write_text(module.read_text())
                _drop_bytecode(r.workdir / rel)
                free.append(r)
            return m

        done = 0
        with ThreadPoolExecutor(jobs) as pool:
            for m in pool.map(test_one, todo):
                done += 1
                print(f"[{done}/{len(todo)}] {m.status:8s} {m.seconds:5.1f}s {m.tests_run:3d} tests  {m.id}  "
                      f"(line {m.line}: {m.before} -> {m.after})", flush=True)
        for r in runners:
            r.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    return _report(rel, mutants, stale, a)


def _report(rel: Path, mutants: list[Mutant], stale: list[str], a: argparse.Namespace) -> int:
    count = {s: sum(m.status == s for m in mutants) for s in ("killed", "survived", "timeout", "equivalent")}
    errors = [m for m in mutants if m.status.startswith("error")]
    for m in errors:
        print(f"could not test {m.id} (pytest exit {m.status[5:]}): not counted as killed")
    judged = len(mutants) - count["equivalent"]
    killed = count["killed"] + count["timeout"]
    score = 100.0 * killed / judged if judged else 100.0
    survivors = [m for m in mutants if m.status == "survived"]
    if survivors:
        print("\nsurvived:")
        for m in sorted(survivors, key=lambda m: m.line):
            print(f"  line {m.line:4d}  {m.id}\n             {m.before}  ->  {m.after}")
    for s in stale:
        print(f"stale equivalent id (no such mutant now): {s}")
    print(f"\n| module | mutants | killed | timed out | survived | equivalent | score |")
    print(f"|---|---:|---:|---:|---:|---:|---:|")
    print(f"| {rel} | {len(mutants)} | {count['killed']} | {count['timeout']} | {count['survived']} | "
          f"{count['equivalent']} | {score:.0f} % |")
    if a.json:
        a.json.write_text(json.dumps([{k: v for k, v in m.__dict__.items() if k != "source"}
                                      for m in mutants], indent=1))
    return 1 if score < a.min_score else 0


if __name__ == "__main__":
    sys.exit(main())
