"""The README and docs pages are acted on as written: every command line they show uses options
that exist (`gemmperf ... --help`, `pytest --help`), and every relative link leads to a file."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from pytest_gemmperf.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
_INLINE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _command_lines(text: str) -> list[str]:
    """Every line of a fenced block, and every inline code span, that runs gemmperf or pytest."""
    lines = []
    for block in _FENCE.findall(text):
        for line in block.splitlines():
            line = re.sub(r"^\s*(- )?(run: )?", "", line)
            lines.append(line.split(" # ")[0].split("  #")[0])
    lines += _INLINE.findall(_FENCE.sub("", text))
    return [ln for ln in lines if re.search(r"(^|[\s(])(gemmperf|pytest) ", ln)]


def _tokens(line: str) -> list[str]:
    try:
        return shlex.split(line.replace("${{", "X").replace("}}", "X"))
    except ValueError:  # an unbalanced quote in prose: split on blanks
        return line.split()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _gemmperf_options(tokens: list[str]) -> tuple[str, set[str], list[str]]:
    """The subcommand path the tokens name, the options it accepts, and the options used."""
    parser = build_parser()
    path = ["gemmperf"]
    used = []
    for tok in tokens:
        subs = _subparsers(parser)
        if tok in subs and not used:
            parser = subs[tok]
            path.append(tok)
        elif tok.startswith("--") and "*" not in tok:
            used.append(tok.split("=", 1)[0])
    accepted = {s for a in parser._actions for s in a.option_strings}
    return " ".join(path), accepted, used


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_command_lines_use_options_that_exist(page: Path, pytest_help: str) -> None:
    bad = []
    for line in _command_lines(page.read_text(encoding="utf-8")):
        tokens = _tokens(line)
        for i, tok in enumerate(tokens):
            rest = tokens[i + 1:]
            if tok == "gemmperf":
                where, accepted, used = _gemmperf_options(rest)
                bad += [f"{where} {opt}  ({line})" for opt in used if opt not in accepted]
            elif tok == "pytest":
                used = [t.split("=", 1)[0] for t in rest if t.startswith("--") and "*" not in t]
                bad += [f"pytest {opt}  ({line})" for opt in used
                        if not re.search(rf"(^|[\s,]){re.escape(opt)}([\s=,]|$)", pytest_help, re.M)]
    assert not bad, f"{page.name}: options that do not exist:\n" + "\n".join(bad)


def test_every_gemmperf_pytest_option_named_in_prose_exists(pytest_help: str) -> None:
    named = set()
    for page in PAGES:
        named |= set(re.findall(r"--gemmperf-[a-z0-9-]*[a-z0-9]", page.read_text(encoding="utf-8")))
    missing = sorted(o for o in named if not re.search(rf"{re.escape(o)}\b", pytest_help))
    assert not missing, f"named in the docs, unknown to pytest --help: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_lead_to_files(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (page.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_readme_is_short_enough_to_act_on() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
