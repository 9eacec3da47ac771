"""Properties of the redaction functions (redact.py) over random names, values and texts: a
secret value of 4 characters or more that the run knows is never left in what is written, a
secret-named option or assignment loses its value even when nothing else knows it, and what is
not secret comes out as it went in."""

from __future__ import annotations

import os
import re
import shlex

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from pytest_gemmperf import paths, redact
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.redact import (MIN_SCRUB_LEN, REDACTED, StreamRedactor, argv_secret_values, redact_argv,
                                    redact_command, redact_record, redact_text, scrub, secret_values)

SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE")
PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def nothing_known(monkeypatch):
    """Only what a test gives is known: no secret-named variable of this environment, nothing an
    earlier test remembered (a value known that way would hide a name-based miss)."""
    for name in [n for n in os.environ if redact.is_secret_name(n)]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(redact, "_KNOWN", set())


def _case(word: str, flips: list[bool]) -> str:
    return "".join(c.lower() if f else c for c, f in zip(word, flips + [False] * len(word)))


secret_names = st.builds(lambda head, word, flips, tail: head + _case(word, flips) + tail,
                         st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,6}", fullmatch=True),
                         st.sampled_from(SECRET_WORDS), st.lists(st.booleans(), max_size=10),
                         st.from_regex(r"[A-Za-z0-9_]{0,5}", fullmatch=True))
plain_names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(lambda n: not redact.is_secret_name(n))


def _usable(v: str) -> bool:
    # a value inside the marker would be "found" in every redacted text
    return redact.is_searchable(v) and v not in REDACTED and REDACTED not in v


#: any text, as a token or a printed line may hold
secret_values_st = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                           min_size=MIN_SCRUB_LEN, max_size=64).filter(_usable)
#: one shell word that is not an option (what follows ``--token``)
word_values = st.from_regex(r"[A-Za-z0-9_.~+@:/%,=-]{4,64}", fullmatch=True).filter(
    lambda v: _usable(v) and not v.startswith("-"))
#: what a workload prints around them
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


# ------------------------------------------------------------------------------ known values


@PROPS
@given(st.lists(secret_values_st, min_size=1, max_size=6), st.lists(texts, min_size=1, max_size=8),
       st.data())
def test_every_known_value_is_hidden_in_any_text(values, pieces, data):
    text = "".join(p + data.draw(st.sampled_from(values)) for p in pieces)
    out = scrub(text, values)
    assert not [v for v in values if v in out]


@PROPS
@given(st.lists(secret_values_st, min_size=1, max_size=6), texts)
def test_text_without_a_known_value_is_unchanged(values, text):
    assume(not any(v in text for v in values))
    assert scrub(text, values) == text


@PROPS
@given(st.lists(secret_values_st, min_size=1, max_size=5), st.lists(texts, min_size=1, max_size=6),
       st.data())
def test_a_stream_split_anywhere_hides_every_value(values, pieces, data):
    """The workload's output reaches the log in chunks of any size: a value split between two
    chunks is still hidden, and the stream's other bytes are written in order."""
    text = "".join(p + data.draw(st.sampled_from(values)) for p in pieces).encode("utf-8", "surrogateescape")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    written: list[bytes] = []
    stream = StreamRedactor(written.append, values)
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        stream.feed(text[a:b])
    stream.close()
    out = b"".join(written)
    assert not [v for v in values if v.encode("utf-8", "surrogateescape") in out]
    assert out.replace(REDACTED.encode(), b"") == scrub(text.decode("utf-8", "surrogateescape"), values) \
        .encode("utf-8", "surrogateescape").replace(REDACTED.encode(), b"") or REDACTED.encode() in out


@PROPS
@given(st.lists(secret_values_st, min_size=1, max_size=5), st.lists(texts, max_size=6), st.data())
def test_a_stream_without_secrets_is_written_as_it_came(values, pieces, data):
    text = "\n".join(pieces).encode()
    assume(not any(v.encode("utf-8", "surrogateescape") in text for v in values))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    written: list[bytes] = []
    stream = StreamRedactor(written.append, values)
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        stream.feed(text[a:b])
    if not any("\n" in v for v in values):  # complete lines are not held back
        assert b"".join(written).startswith(text[:text.rfind(b"\n") + 1])
    stream.close()
    assert b"".join(written) == text


def test_a_complete_line_is_written_at_once_and_a_split_value_waits():
    written: list[bytes] = []
    stream = StreamRedactor(written.append, ["hunter42"])
    stream.feed(b"step 1 ok\npassword: hun")
    assert b"".join(written).startswith(b"step 1 ok\n") and b"hun" not in b"".join(written)
    stream.feed(b"ter42 accepted\n")
    stream.close()
    assert b"".join(written) == f"step 1 ok\npassword: {REDACTED} accepted\n".encode()


@pytest.mark.parametrize("length, hidden", [(3, False), (4, True), (7, True), (8, True)])
def test_values_of_four_characters_or_more_are_hidden(monkeypatch, length, hidden):
    value = "x9Q~z!kP"[:length]
    monkeypatch.setenv("CI_DEPLOY_TOKEN", value)
    assert (value in secret_values()) is hidden
    assert (scrub(f"login {value} ok") == f"login {REDACTED} ok") is hidden
    redact.remember([value + "_"] if length < MIN_SCRUB_LEN - 1 else [])
    assert (value in redact.known_values()) is hidden


@pytest.mark.parametrize("value", ["false", "True", "auto", "none"])
def test_a_switch_value_of_a_secret_named_variable_is_not_searched_for(monkeypatch, value):
    # TOKENIZERS_PARALLELISM=false is in every Hugging Face CI job: "false" must survive
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", value)
    assert secret_values() == ()
    assert scrub(f"use_cache={value}") == f"use_cache={value}"


def test_a_remembered_value_is_hidden_in_later_texts():
    redact.remember(["pw-7Hq~", "abc", "false"])  # too short and a switch: not remembered
    assert redact.known_values() == ("pw-7Hq~",)
    assert scrub("login pw-7Hq~ abc false") == f"login {REDACTED} abc false"
    assert redact_record({"error": "got pw-7Hq~"}) == {"error": f"got {REDACTED}"}


# ------------------------------------------------------------------------------ by name


@PROPS
@given(secret_names, word_values, st.sampled_from(["--{n} {v}", "--{n}={v}", "-{n} {v}", "{n}={v}"]))
def test_a_secret_named_option_loses_its_value_though_nothing_else_knows_it(name, value, form):
    """The value is in neither the environment nor the known values: only its name marks it."""
    assume(value not in f"python w.py --n 3 --{name}")
    argv = ["python", "w.py", "--n", "3", *form.format(n=name, v=value).split(" ")]
    hidden = redact_argv(argv)
    assert value not in " ".join(hidden) and REDACTED in hidden[-1]
    assert hidden[:4] == ["python", "w.py", "--n", "3"]
    assert value in argv_secret_values(argv)
    line = shlex.join(argv)
    for as_text in (redact_text(line), redact_command(line), redact_command(["sh", "-c", line])[-1]):
        assert value not in as_text and "--n 3" in as_text


@PROPS
@given(st.lists(st.tuples(plain_names, word_values), min_size=1, max_size=6))
def test_options_that_are_not_secret_keep_their_values(pairs):
    argv = ["python", "w.py"]
    for name, value in pairs:
        argv += [f"--{name}", value]
    argv += [f"{pairs[0][0].upper()}={pairs[0][1]}", f"--{pairs[-1][0]}={pairs[-1][1]}"]
    assert redact_argv(argv) == argv
    assert redact_command(argv) == argv
    assert redact_command(shlex.join(argv)) == shlex.join(argv)
    assert redact_text(shlex.join(argv)) == shlex.join(argv)
    assert argv_secret_values(argv) == ()


@pytest.mark.parametrize("argv", [["w.py", "--n", "3", "--steps", "10"], ["w.py", "-n", "3"],
                                  ["w.py", "--batch-size=64", "DEBUG=1"], ["w.py", "--no-auth", "--n", "3"]])
def test_arguments_after_ordinary_flags_survive(argv):
    assert redact_argv(argv) == argv
    assert redact_command(" ".join(argv)) == " ".join(argv)
    assert redact_text("ran " + " ".join(argv)) == "ran " + " ".join(argv)


def test_a_secret_named_switch_does_not_hide_the_next_option():
    assert redact_argv(["w.py", "--use-auth", "--n", "3"]) == ["w.py", "--use-auth", "--n", "3"]


@pytest.mark.parametrize("command", [
    'python w.py --token Zq7-secret-v "unbalanced',
    "python w.py 'unbalanced --password Zq7-secret-v",
    'python w.py --token "Zq7-secret-v and more',
    "HF_TOKEN=Zq7-secret-v python w.py 'x",
])
def test_a_command_string_with_unbalanced_quotes_is_still_redacted(command):
    with pytest.raises(ValueError):
        shlex.split(command)
    hidden = redact_command(command)
    assert "Zq7-secret-v" not in hidden and REDACTED in hidden and hidden.startswith("python w.py") \
        or hidden.startswith("HF_TOKEN=")
    assert "Zq7-secret-v" in argv_secret_values(command) or "Zq7-secret-v and more" in argv_secret_values(command)


@PROPS
@given(secret_names, word_values, st.integers(0, 3))
def test_a_secret_in_a_list_of_mappings_is_hidden(name, value, depth):
    env_name = re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
    assume(value.upper() not in env_name and value not in "rank 1: Ring gfx942 NCCL_ALGO hw_key")
    nodes: object = [{"env": {name: value, "NCCL_ALGO": "Ring"}},
                     {"command": ["python", "w.py", f"--{name}", value]},
                     {env_name: value, "hw_key": "gfx942"},
                     {"error": f"rank 1: {env_name}={value} refused"}]
    for _ in range(depth):
        nodes = [{"nodes": nodes}]
    record = {"run": {"nodes": nodes}}
    hidden = redact_record(record)
    assert value not in repr(hidden) and repr(hidden).count(REDACTED) == 4
    assert "Ring" in repr(hidden) and "gfx942" in repr(hidden)


# ------------------------------------------------------------------------------ paths


def test_removing_a_whole_root_is_refused(tmp_path):
    (tmp_path / "run" / "point").mkdir(parents=True)
    (tmp_path / "run" / "point" / "point.json").write_text("{}")
    with pytest.raises(GemmperfInputError, match="whole root"):
        paths.remove_tree(tmp_path)
    assert (tmp_path / "run" / "point" / "point.json").is_file()
    paths.remove_tree(tmp_path, "run", "point")
    assert not (tmp_path / "run" / "point").exists() and (tmp_path / "run").is_dir()
