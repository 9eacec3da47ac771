"""``gemmperf compare``'s candidate labels: by default distinct whatever the paths are named (the
shortest trailing part of each path no other ends in, numbered where two read alike), so that
the report and verdicts.csv tell candidates apart; a label the user repeats is one clear error."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gemmperf.cli import main
from pytest_gemmperf.commands.compare_impl import path_labels
from test_compare import make_side
from test_gate_slim_samples import _tree

NAMES = st.sampled_from(["run", "tables", "a", "b", "run (2)", "..", "x y", "ü"])
PATHS = st.lists(st.builds(lambda root, parts: ("/" if root else "") + "/".join(parts),
                           st.booleans(), st.lists(NAMES, min_size=1, max_size=4)), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(PATHS)
def test_path_labels_are_distinct_trailing_parts(paths):
    labels = path_labels(paths)
    assert len(labels) == len(paths) and len(set(labels)) == len(labels)

    def trailing(label: str, path: str) -> bool:
        parts = Path(path).parts
        return any(Path(*parts[-k:]) == Path(label) for k in range(1, len(parts) + 1))

    for i, (path, label) in enumerate(zip(paths, labels)):
        if not trailing(label, path):  # numbered: a trailing part another path reads alike
            head, _, n = label.rpartition(" (")
            assert n.endswith(")") and int(n[:-1]) >= 2 and trailing(head, path), label
            assert any(Path(q).parts == Path(path).parts for q in paths[:i]) or head in labels, label
    # names that differ are the labels as they were
    names = [Path(p).name for p in paths]
    if len(set(names)) == len(names) and all(names):
        assert labels == names


def test_path_labels_examples():
    assert path_labels(["x/a/run", "x/b/run"]) == ["a/run", "b/run"]
    assert path_labels(["a/tables", "b/tables", "c"]) == ["a/tables", "b/tables", "c"]
    assert path_labels(["x/b/run", "y/b/run", "b/run"]) == ["x/b/run", "y/b/run", "b/run"]
    assert path_labels(["run", "run", "run (2)"]) == ["run", "run (3)", "run (2)"]
    assert path_labels(["p/run", "p/run/"]) == ["run", "run (2)"]


def _sides(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A baseline and two candidates whose directories share their final name (``tables``)."""
    return tuple(_tree("tables", tmp_path / side, seed) for seed, side in enumerate(("base", "a", "b")))


def test_candidates_of_one_name_get_a_report(tmp_path, capsys):
    base, a, b = _sides(tmp_path)
    assert a.name == b.name == "tables"
    out = tmp_path / "out"
    rc = main(["compare", str(base), str(a), str(b), "--out", str(out), "--jobs", "1"])
    err = capsys.readouterr().err
    assert rc in (0, 1, 4), err
    assert "report not written" not in err
    assert (out / "report.html").is_file()
    assert set(pd.read_csv(out / "verdicts.csv")["label"]) == {"a/tables", "b/tables"}
    # the same candidate twice: numbered
    rc = main(["compare", str(base), str(a), str(a), "--out", str(out), "--jobs", "1", "--no-report"])
    assert rc in (0, 1, 4)
    assert set(pd.read_csv(out / "verdicts.csv")["label"]) == {"tables", "tables (2)"}


def test_a_repeated_label_is_one_error(tmp_path, capsys):
    base, a, b = _sides(tmp_path)
    rc = main(["compare", str(base), str(a), str(b), "--labels", "x", "x", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--labels: 'x' given for more than one candidate" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "verdicts.csv").exists()


def test_benchmark_json_of_path_labels(tmp_path, capsys):
    """Labels with a path separator (or named ``base``) give one JSON file per candidate beside
    FILE-base.json, none written over another."""
    make_side("b", 1).to_parquet(tmp_path / "base.parquet")
    for i, d in enumerate(("a", "b")):
        (tmp_path / d).mkdir()
        make_side("c", 2 + i).to_parquet(tmp_path / d / "s.parquet")
    bench = tmp_path / "bench" / "bench.json"
    bench.parent.mkdir()
    rc = main(["compare", str(tmp_path / "base.parquet"), str(tmp_path / "a" / "s.parquet"),
               str(tmp_path / "b" / "s.parquet"), "--out", str(tmp_path / "out"), "--benchmark-json", str(bench)])
    assert rc in (0, 1, 4), capsys.readouterr().err
    assert sorted(p.name for p in bench.parent.iterdir()) == ["bench-a_s.parquet.json", "bench-b_s.parquet.json",
                                                             "bench-base.json"]
    rc = main(["compare", str(tmp_path / "base.parquet"), str(tmp_path / "a" / "s.parquet"),
               str(tmp_path / "b" / "s.parquet"), "--labels", "base", "x", "--out", str(tmp_path / "out"),
               "--benchmark-json", str(bench)])
    assert rc in (0, 1, 4)
    assert {"bench-base (2).json", "bench-x.json"} <= {p.name for p in bench.parent.iterdir()}
