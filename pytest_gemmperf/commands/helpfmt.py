"""``--help`` as a user reads it: plain text from reST docstrings, every default shown.

The subcommands take their descriptions from their module docstrings, which are written for
Sphinx/readers of the code (````gemmperf analyze````, ``:func:`x```). :class:`HelpFormatter`
renders them for a terminal:

* reST inline markup becomes plain text: a ````literal```` and a role ``:func:`name``` become
  ```literal``` / ```name``` (single backticks, as in Markdown), ``**strong**`` loses its stars;
* paragraphs are re-wrapped one by one and ``* item`` lists keep one bullet per item (argparse's
  default formatter would run them all into one paragraph);
* an option's help gains ``(default: X)`` unless it already names its default, or the default is
  nothing to show (None, a flag's False/True, an empty list).

:class:`GemmperfParser` uses it by default, and sub-parsers inherit the parser class, so every
``gemmperf <cmd> [<sub>] --help`` goes through it. :func:`command_description` turns a module
docstring whose first paragraph is a synopsis (````gemmperf analyze PATH...````) into a
description: argparse prints the usage line already.
"""

from __future__ import annotations

import argparse
import functools
import re
import textwrap

_BULLET = ("* ", "- ")
_SYNOPSIS = re.compile(r"^``gemmperf\b[^`]*``:?\s*", re.S)


@functools.cache
def _markup() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """reST roles, literals and strong text: compiled when help is first shown (a command that
    runs shows none)."""
    return (re.compile(r":[A-Za-z]+(?::[A-Za-z]+)?:`~?([^`]+)`"), re.compile(r"``(.+?)``", re.S),
            re.compile(r"\*\*(.+?)\*\*", re.S))


def plain(text: str) -> str:
    """reST inline markup -> plain terminal text (see the module docstring)."""
    role, literal, strong = _markup()
    text = role.sub(lambda m: f"`{m[1]}`", text)
    text = literal.sub(lambda m: f"`{m[1]}`", text)
    return strong.sub(lambda m: m[1], text)


def command_description(doc: str | None) -> str | None:
    """A subcommand's description from its module docstring: a leading synopsis span
    (````gemmperf x ...````, usage already says it) is dropped and what follows it starts
    with a capital; text without a synopsis is kept as written (``gemmperf 0.1.0``, the
    ``--version`` line, goes through the same formatter)."""
    if not doc:
        return None
    doc = textwrap.dedent(doc).strip()
    rest = _SYNOPSIS.sub("", doc, count=1).lstrip()
    if not rest:
        return None
    return rest if rest == doc else rest[0].upper() + rest[1:]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter with reST stripped, paragraphs and bullet lists kept, defaults shown."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # a description that still opens with its synopsis (usage prints it) loses it here
        text = command_description(text) or ""
        blocks = []
        for para in re.split(r"\n\s*\n", plain(textwrap.dedent(text)).strip()):
            lines = [ln.strip() for ln in para.splitlines() if ln.strip()]
            if not lines:
                continue
            items: list[str] = []
            lead: list[str] = []
            for ln in lines:
                if ln.startswith(_BULLET):
                    items.append(ln[2:])
                elif items:
                    items[-1] += " " + ln  # continuation of the bullet above
                else:
                    lead.append(ln)
            out = []
            if lead:
                out.append(textwrap.fill(" ".join(lead), width, initial_indent=indent,
                                         subsequent_indent=indent))
            out += [textwrap.fill(it, width, initial_indent=indent + "* ",
                                  subsequent_indent=indent + "  ") for it in items]
            blocks.append("\n".join(out))
        return "\n\n".join(blocks)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return super()._split_lines(plain(text), width)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text.lower()
                or default is None or default is argparse.SUPPRESS
                or isinstance(default, bool) or default == [] or "%(default)" in text):
            return action.help
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class GemmperfParser(argparse.ArgumentParser):
    """ArgumentParser whose help goes through :class:`HelpFormatter` (sub-parsers too:
    ``add_subparsers`` creates them with the parent's class)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
