"""Short, distinguishing labels for GPU kernel names (reports, plots, spreadsheets).

``short_names(names)`` maps every distinct input name to a label of at most
:data:`MAX_LEN` characters such that no two different names share a label. The labels
depend only on the *set* of names given (not their order or repetitions), so one call per
page keeps every label on that page consistent and distinct.

Method, per kind of name:

* **Tensile / hipBLASLt** (``[Prefix_]Cijk_Ailk_Bljk_BBS_..._MT64x32x256_MI16x16x1_..``):
  the name is split at ``_`` (numeric continuation tokens such as the ``8_1`` of
  ``WG32_8_1`` stay with their parameter), each parameter token is keyed by its letter
  prefix (``MT``, ``MI``, ``LDSB``, ``LWPM`` for ``LWPMn1``...). The label is the family
  head (``Cijk_Ailk_Bljk_BBS``), the macro tile ``MT..`` (always: it is how people name a
  GEMM kernel) and then, greedily, the parameters that split the remaining look-alikes
  into the most groups, until every Tensile name is distinct or nothing differs any more.
  Parameters are written in their order in the name.
* **Demangled C++** (``void ns::kernel<4, ns::Functor<float>, std::array<char*, 2ul> >(..)``):
  the function name without return type and namespaces, plus the template arguments that
  differ among the names with the same function name. Arguments are compacted first
  (namespaces, parameter lists, ``operator()() const`` chains dropped; a lambda becomes
  ``λ`` after the function that defines it). A differing argument whose template head is
  shared with another differing name is diffed recursively (``ReduceOp<float,MeanOps>``);
  arguments equal in every name are left out.
* **Anything else**: the name without a ``.kd`` suffix.

Fallback: a label longer than :data:`MAX_LEN` is cut, and labels still shared by several
names get ``~`` plus the first hex digits of the SHA-1 of the full name (more digits when
needed), so distinctness never depends on the heuristics above. Names longer than
:data:`PARSE_LIMIT` are not parsed (cost stays linear in the input size).

Cost: linear in the total length of the distinct names, plus one greedy pass over the
Tensile parameter keys (keys x Tensile names); thousands of names take well under a second.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from typing import Iterable, Sequence
import pandas as pd

__all__ = ["MAX_LEN", "short_names", "short_name_series"]

#: Longest label returned.
MAX_LEN = 48
#: Names longer than this are labelled by prefix + hash without being parsed.
PARSE_LIMIT = 8192
#: Template nesting levels diffed recursively (labels have room for few anyway).
MAX_DEPTH = 6

_TENSILE_HEAD = re.compile(r"C[a-z]+_A[a-z]+_B[a-z]+_[A-Za-z0-9]+")
_KEY = re.compile(r"([A-Za-z]+?)(n?\d.*)?")
_LAMBDA = re.compile(r"::\{lambda\([^{}]*\)#\d+\}")
_OPERATOR_CALL = re.compile(r"::operator\(\)\(\)(?: const)?")
# the look-behind makes a match start only at an identifier's first character: linear time
_QUALIFIER = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*::")
_SPACES = re.compile(r"\s*([<>,*&])\s*")


def _strip_kd(name: str) -> str:
    return name[:-3] if name.endswith(".kd") else name


def _digest(name: str, n: int) -> str:
    return hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:n]


# --------------------------------------------------------------------------- Tensile


def _tensile_split(name: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(head, [(key, token), ...]) of a Tensile/hipBLASLt name, or None if it is not one."""
    base = _strip_kd(name)
    m = _TENSILE_HEAD.match(base)
    if m is None:
        # hipBLASLt sometimes prefixes the Tensile name with one word (``Custom_Cijk_..``)
        first, sep, rest = base.partition("_")
        m2 = _TENSILE_HEAD.match(rest) if sep else None
        if m2 is None or not first.isalnum():
            return None
        head, tail = f"{first}_{m2.group(0)}", rest[m2.end():]
    else:
        head, tail = m.group(0), base[m.end():]
    tokens: list[str] = []
    for tok in tail.split("_"):
        if not tok:
            continue
        if tok.isdigit() and tokens:  # continuation: WG32_8_1, MIWT2_1, TT1_1
            tokens[-1] += "_" + tok
        else:
            tokens.append(tok)
    keyed: list[tuple[str, str]] = []
    seen: dict[str, int] = defaultdict(int)
    for tok in tokens:
        km = _KEY.fullmatch(tok)
        key = km.group(1) if km else tok
        seen[key] += 1
        # AFEM1_AFEM1: a repeated key is a different parameter slot
        keyed.append((key if seen[key] == 1 else f"{key}#{seen[key]}", tok))
    return head, keyed


def _tensile_labels(parsed: dict[str, tuple[str, list[tuple[str, str]]]]) -> dict[str, str]:
    """Head + MT + greedily chosen differing parameters, for every Tensile name."""
    names = sorted(parsed)
    order: dict[str, int] = {}
    values: list[dict[str, str]] = []
    for n in names:
        d = {}
        for key, tok in parsed[n][1]:
            order.setdefault(key, len(order))
            d[key] = tok
        values.append(d)
    # MT always, then the other parameters greedily (first in name order among the best)
    always = ["MT"] if "MT" in order else []
    rest = [k for k in sorted(order, key=order.__getitem__) if k not in always]
    start = [(parsed[n][0],) + tuple(values[i].get(k, "") for k in always) for i, n in enumerate(names)]
    rows = [tuple(v.get(k, "") for k in rest) for v in values]
    chosen = always + [rest[c] for c in _greedy_columns(rows, list(range(len(rest))), start)]
    keys = sorted(chosen, key=order.__getitem__)
    return {n: "_".join([parsed[n][0]] + [values[i][k] for k in keys if k in values[i]])
            for i, n in enumerate(names)}


# --------------------------------------------------------------------------- C++


def _split_top(s: str, start: int, opener: str) -> int:
    """Index of the first ``opener`` at bracket depth 0 in s[start:], or -1."""
    depth = 0
    for i in range(start, len(s)):
        c = s[i]
        if depth == 0 and c == opener:
            return i
        if c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth = max(depth - 1, 0)
    return -1


def _matching(s: str, i: int) -> int:
    """Index of the bracket closing the one at s[i] (any bracket kind), or len(s)."""
    depth = 0
    for j in range(i, len(s)):
        c = s[j]
        if c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth -= 1
            if depth == 0:
                return j
    return len(s)


def _split_args(s: str) -> list[str]:
    """Top-level comma split of a template argument list."""
    out, depth, cur = [], 0, 0
    for i, c in enumerate(s):
        if c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(s[cur:i].strip())
            cur = i + 1
    tail = s[cur:].strip()
    if tail or out:
        out.append(tail)
    return out


def _drop_calls(s: str) -> str:
    """Remove parameter lists (a ``(`` right after a name or ``>``); keep casts like ``(T)3``."""
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if c == "(" and out and (out[-1][-1:].isalnum() or out[-1][-1:] in "_>"):
            i = _matching(s, i) + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _compact(arg: str) -> str:
    """A template argument without namespaces, parameter lists and spaces around punctuation."""
    s = _OPERATOR_CALL.sub("", arg)
    s = _LAMBDA.sub("λ", s)
    s = re.sub("λ+", "λ", s)
    s = _drop_calls(s)
    s = _QUALIFIER.sub("", s)
    return _SPACES.sub(r"\1", s).strip()


def _top_level_cuts(s: str, sep: str) -> list[int]:
    """Start indices of ``sep`` occurrences at bracket depth 0."""
    out, depth, i, n, k = [], 0, 0, len(s), len(sep)
    while i < n:
        c = s[i]
        if c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth = max(depth - 1, 0)
        elif depth == 0 and s.startswith(sep, i):
            out.append(i)
            i += k
            continue
        i += 1
    return out


def _cpp_split(name: str) -> tuple[str, list[str]] | None:
    """(function name, compacted template args) of a demangled C++ name, or None.

    The parameter list is the first ``(`` at depth 0; the declarator is the last
    depth-0 word before it (so a return type such as ``ns::Result<int>`` is skipped), and
    the function is its part after the last depth-0 ``::`` (class scopes are dropped).
    """
    s = name.replace("(anonymous namespace)", "anonymous_namespace").strip()
    if "<" not in s and "(" not in s and ("::" not in s or len(s) <= MAX_LEN):
        return None  # plain or short qualified names (aten::mm) read best as they are
    paren = _split_top(s, 0, "(")
    decl = s[:paren] if paren >= 0 else s
    spaces = _top_level_cuts(decl, " ")
    if spaces:
        decl = decl[spaces[-1] + 1:]
    scopes = _top_level_cuts(decl, "::")
    if scopes:
        decl = decl[scopes[-1] + 2:]
    lt = _split_top(decl, 0, "<")
    func = _strip_kd(decl[:lt] if lt >= 0 else decl)
    if not func:
        return None
    args: list[str] = []
    if lt >= 0:
        args = [_compact(a) for a in _split_args(decl[lt + 1:_matching(decl, lt)])]
    return func, args


def _head_args(v: str) -> tuple[str, list[str] | None]:
    lt = v.find("<")
    if lt <= 0:
        return v, None
    return v[:lt], _split_args(v[lt + 1:_matching(v, lt)])


def _diff_values(vals: list[str], elide: bool, depth: int = 0) -> list[str]:
    """Per-value rendering that tells the differing values apart (values not all equal).

    Recursion into shared template heads stops at :data:`MAX_DEPTH` (the values are then
    shown whole and cut later), which bounds the cost on deeply nested names.
    """
    out = list(vals)
    if depth >= MAX_DEPTH:
        return out
    by_head: dict[str, list[int]] = defaultdict(list)
    parsed = [_head_args(v) for v in vals]
    for i, (h, _) in enumerate(parsed):
        by_head[h].append(i)
    for head, idx in by_head.items():
        group = {vals[i] for i in idx}
        templated = all(parsed[i][1] is not None for i in idx)
        if len(group) == 1:
            # alone under this head: the head already tells it apart
            for i in idx:
                out[i] = head if (templated and len(by_head) > 1) else vals[i]
        elif templated:
            inner = _diff_arglists([parsed[i][1] for i in idx], elide, depth + 1)
            # eliding the head is only safe when no other head is there to tell apart
            shown = "…" if (elide and len(by_head) == 1) else head
            for i, r in zip(idx, inner):
                out[i] = f"{shown}<{r}>"
    return out


def _greedy_columns(rows: list[tuple[str, ...]], cols: list[int],
                    start: list[tuple[str, ...]] | None = None) -> list[int]:
    """Columns (greedily, best splitter first, earlier column on ties) that make rows distinct,
    beyond what the ``start`` signatures (default: none) already tell apart.

    Stops when every row is distinct or no remaining column splits any group further.
    """
    sig: list[tuple[str, ...]] = list(start) if start is not None else [()] * len(rows)
    target = len({s + r for s, r in zip(sig, rows)})
    have, chosen, left = len(set(sig)), [], list(cols)
    while have < target and left:
        best, best_n = None, have
        for c in left:
            cnt = len({s + (r[c],) for s, r in zip(sig, rows)})
            if cnt > best_n:
                best, best_n = c, cnt
        if best is None:
            break
        chosen.append(best)
        left.remove(best)
        sig = [s + (r[best],) for s, r in zip(sig, rows)]
        have = best_n
    return sorted(chosen)


def _diff_arglists(arglists: list[list[str]], elide: bool, depth: int = 0) -> list[str]:
    """Comma-joined renderings of the fewest differing argument positions that tell apart."""
    width = max((len(a) for a in arglists), default=0)
    rows = [tuple(a[p] if p < len(a) else "" for p in range(width)) for a in arglists]
    differing = [p for p in range(width) if len({r[p] for r in rows}) > 1]
    parts: list[list[str]] = [[] for _ in arglists]
    for p in _greedy_columns(rows, differing):
        for i, r in enumerate(_diff_values([row[p] for row in rows], elide, depth)):
            parts[i].append(r)
    return [",".join(p) for p in parts]


def _cpp_labels(parsed: dict[str, tuple[str, list[str]]]) -> dict[str, str]:
    """Function name + differing template arguments, diffed within each function name."""
    by_func: dict[str, list[str]] = defaultdict(list)
    for n in sorted(parsed):
        by_func[parsed[n][0]].append(n)
    out: dict[str, str] = {}
    for func, group in by_func.items():
        if len(group) == 1:
            out[group[0]] = func
            continue
        arglists = [parsed[n][1] for n in group]
        for elide in (False, True):
            diffs = _diff_arglists(arglists, elide)
            # one cut of the function name for the whole group keeps its labels aligned
            widest = max(map(len, diffs))
            labels = [_fit(func, d, widest) for d in diffs]
            if max(map(len, labels)) <= MAX_LEN:
                break
        out.update(zip(group, labels))
    return out


def _fit(func: str, diff: str, widest: int) -> str:
    """``func<diff>``; a long function name gives way to the arguments (they tell apart)."""
    if not diff:
        return func
    room = MAX_LEN - widest - 2
    if len(func) > room:
        keep = max(room, 12)
        func = func[:keep - 1] + "…"
    free = MAX_LEN - len(func) - 2
    if len(diff) > free:
        # the innermost (last) differences are the most specific: keep the head and the tail
        head = free // 3
        diff = diff[:head] + "…" + diff[len(diff) - (free - head - 1):]
    return f"{func}<{diff}>"


# --------------------------------------------------------------------------- public


def _unique(labels: dict[str, str]) -> dict[str, str]:
    """Cut to MAX_LEN and add hash suffixes until no two names share a label."""
    out = {n: (lab if len(lab) <= MAX_LEN else lab[:MAX_LEN - 1] + "…") for n, lab in labels.items()}
    digits = 6
    while True:
        owners: dict[str, list[str]] = defaultdict(list)
        for n, lab in out.items():
            owners[lab].append(n)
        clashes = [ns for ns in owners.values() if len(ns) > 1]
        if not clashes:
            return out
        for ns in clashes:
            for n in ns:
                tag = "~" + _digest(n, digits)
                out[n] = labels[n][:MAX_LEN - len(tag)] + tag
        digits += 2
        if digits > 40:  # identical SHA-1 prefixes for 40 digits: only identical names
            raise AssertionError("short_names: distinct names with equal SHA-1")


def short_names(names: Sequence[str] | Iterable[str]) -> dict[str, str]:
    """Map each distinct name in ``names`` to a short label, distinct among them.

    Pure and deterministic: the result depends only on the set of names. Labels are at
    most :data:`MAX_LEN` characters. Non-string entries (NaN/None) are skipped.
    """
    uniq = sorted({n for n in names if isinstance(n, str)})
    tensile: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    cpp: dict[str, tuple[str, list[str]]] = {}
    labels: dict[str, str] = {}
    for n in uniq:
        if len(n) > PARSE_LIMIT:
            labels[n] = _strip_kd(n)[:MAX_LEN]
            continue
        t = _tensile_split(n)
        if t is not None:
            tensile[n] = t
            continue
        c = _cpp_split(n)
        if c is not None:
            cpp[n] = c
        else:
            labels[n] = _strip_kd(n.strip())
    labels.update(_tensile_labels(tensile))
    labels.update(_cpp_labels(cpp))
    # a blank label cannot be seen in a table; the hash pass still tells blanks apart
    labels = {n: (lab if lab.strip() else "(unnamed)") for n, lab in labels.items()}
    return _unique(labels)


def short_name_series(names):
    """``short_names`` applied to a pandas Series/Categorical (one call per distinct name)."""
    s = pd.Series(names)
    mapping = short_names(pd.unique(s.dropna()))
    return s.map(mapping)
