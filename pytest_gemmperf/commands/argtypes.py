"""argparse value types shared by the subcommands (errors read as argparse's own)."""

from __future__ import annotations

import argparse
from typing import Callable


def int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}")
        return n
    return parse


non_negative = int_at_least(0)
positive = int_at_least(1)


def add_allow_partial(parser: argparse.ArgumentParser) -> None:
    """``--allow-partial``: the one flag, with one wording, by which a command reads an
    interrupted run (its complete points only) or traces of which part could not be read."""
    parser.add_argument("--allow-partial", action="store_true",
                        help="read an interrupted run's complete points only (and traces with "
                             "unreadable files) instead of refusing them")
