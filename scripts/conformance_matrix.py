#!/usr/bin/env python3
"""Write docs/rocprofv3-conformance.md: every invocation the rocprofv3 runner builds, run through
AMD's real front end of each release in ../shared/data/rocprofv3/frontend (see
tests/rocprofv3_double/conformance.py). Exit status 1 when a cell does not conform, 2 when the
front ends are absent.

    python scripts/conformance_matrix.py [--check]    # --check: compare instead of writing
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "rocprofv3_double"))

import conformance  # noqa: E402
import realfront  # noqa: E402

DOC = REPO / "docs" / "rocprofv3-conformance.md"


def main(argv: list[str]) -> int:
    if not realfront.available():
        print(realfront.skip_reason(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = {r: realfront.install(r, tmp / "rocm" / r) for r in realfront.releases()}
        text, bad = conformance.document(trees, tmp)
    if "--check" in argv:
        same = DOC.is_file() and DOC.read_text() == text
        print(f"{DOC}: {'current' if same else 'STALE'}; {bad} mismatch(es)")
        return 0 if same and not bad else 1
    DOC.write_text(text)
    print(f"wrote {DOC}: {bad} mismatch(es)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
