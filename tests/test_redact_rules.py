"""The redaction rules (redact.py) pinned on hand-made inputs, with no secret known beforehand:
which names are secret, which values are searched for, what a command line, a free text, a
recorded command and a record look like once redacted (exactly: what is not secret comes out
as it went in), and how a byte stream is scrubbed as it arrives in chunks."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from pytest_gemmperf import redact
from pytest_gemmperf.redact import (REDACTED, StreamRedactor, marker_for, argv_secret_values, comparable_env, is_searchable,
                                    is_secret_name, redact_argv, redact_command, redact_env, redact_record,
                                    redact_text, remember, scrub, secret_values, text_secret_values)

R = REDACTED


@pytest.fixture(autouse=True)
def no_secret_known_yet(monkeypatch):
    """Name-based redaction must work alone: a value the environment or an earlier test made
    known would be scrubbed anyway and hide a miss."""
    for name in list(os.environ):
        if is_secret_name(name):
            monkeypatch.delenv(name)
    monkeypatch.setattr(redact, "_KNOWN", set())


# -- names and values ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["HF_TOKEN", "api_key", "MyPassword", "x-auth", "COOKIE_JAR", "PRIVATE_PEM",
                                  "db_passwd", "Credentials", "client_secret", "--api-key"])
def test_a_secret_word_anywhere_in_a_name_in_any_case_makes_it_secret(name):
    assert is_secret_name(name) is True


@pytest.mark.parametrize("name", ["PATH", "model", "n", "HOME", "--out", "batch_size", 3])
def test_other_names_are_not_secret(name):
    assert is_secret_name(name) is False


@pytest.mark.parametrize("value, searched", [
    ("abcd", True), ("1234", True), ("hunter22", True), ("abc", False), ("", False), (12345, True),
    ("true", False), ("False", False), (" auto ", False), ("none", False), ("enabled", False), (R, False),
])
def test_values_are_searched_for_from_four_characters_unless_they_are_a_setting_word(value, searched):
    assert is_searchable(value) is searched


def test_secret_values_of_an_environment_are_the_searchable_values_of_its_secret_names_longest_first():
    env = {"HF_TOKEN": "abcd", "GH_TOKEN": "ghp_12345678", "API_KEY": "wxyz", "PATH": "/usr/bin:/bin",
           "TOKENIZERS_PARALLELISM": "false", "MY_SECRET": "abc", "HOME": "/root"}
    assert secret_values(env) == ("ghp_12345678", "abcd", "wxyz")


def test_secret_values_default_to_this_process_environment(monkeypatch):
    assert secret_values() == ()
    monkeypatch.setenv("GH_TOKEN", "ghp_12345678")
    monkeypatch.setenv("HOME_DIR_NAME", "something")
    assert secret_values() == ("ghp_12345678",)


# -- command lines -------------------------------------------------------------------------------

ARGV = ["python", "run.py", "--token", "tok-1234", "--n", "3", "--api-key=k-5678", "HF_TOKEN=hf_abcd",
        "--password", "pw12", "train.csv", "--sort=key", "SORT_BY=keyring", "--mode", "auth", "--no-auth",
        "--verbose", "plain"]


def test_a_command_line_loses_the_values_of_its_secret_named_options_and_assignments_only():
    assert redact_argv(ARGV) == [
        "python", "run.py", "--token", R, "--n", "3", f"--api-key={R}", f"HF_TOKEN={R}",
        "--password", R, "train.csv", "--sort=key", "SORT_BY=keyring", "--mode", "auth", "--no-auth",
        "--verbose", "plain"]


def test_paths_and_numbers_in_a_command_line_are_recorded_as_text():
    assert redact_argv([Path("/data/run.py"), 3, "--token", 1234567]) == ["/data/run.py", "3", "--token", R]


def test_known_values_are_scrubbed_from_any_argument_and_shell_scripts_redacted_as_text():
    argv = ["sh", "-c", "python x.py --token tok-1234 HF_TOKEN=hf_abcd --n 3", "echo hunter22"]
    assert redact_argv(argv, ["hunter22"]) == [
        "sh", "-c", f"python x.py --token {R} HF_TOKEN={R} --n 3", f"echo {R}"]


def test_the_secret_values_of_a_command_line_are_what_it_gives_secret_names():
    assert argv_secret_values(ARGV) == ("tok-1234", "hf_abcd", "k-5678", "pw12")
    assert argv_secret_values(["run", "--token", "abc", "--n", "1234"]) == ()  # too short; not secret
    assert argv_secret_values(None) == ()
    assert argv_secret_values(["sh", "-c", "python x.py --token tok-1234 HF_TOKEN=hf_abcd"]) == (
        "tok-1234", "hf_abcd")


def test_a_command_string_is_split_as_shell_words_or_read_as_text_when_its_quotes_do_not_balance():
    assert argv_secret_values("run --token 'tok 1234' --n 3") == ("tok 1234",)
    assert argv_secret_values("run --token tok-1234 'oops") == ("tok-1234",)


# -- free text -----------------------------------------------------------------------------------

def test_free_text_loses_secret_named_values_and_keeps_everything_else_exactly():
    text = "run --token tok-1234 --n 3 HF_TOKEN=hf_abcd sort=key --mode auth --sort key_name"
    assert redact_text(text) == f"run --token {R} --n 3 HF_TOKEN={R} sort=key --mode auth --sort key_name"


def test_quoted_values_in_free_text_go_whole_to_their_closing_quote_or_the_end():
    assert redact_text("login --password 'two words' done") == f"login --password {R} done"
    assert redact_text('PASSWORD="pw 1234" next') == f"PASSWORD={R} next"
    assert redact_text("x API_KEY='never closed") == f"x API_KEY={R}"


def test_known_values_are_scrubbed_from_free_text():
    assert redact_text("echo hunter22 --n 3", ["hunter22"]) == f"echo {R} --n 3"


def test_the_secret_values_of_a_text_are_unquoted():
    text = "--sort key_name TOKEN='tok 1234' --auth \"pw 5678\" --n 3 API_KEY='unclosed value"
    assert text_secret_values(text) == ("unclosed value", "tok 1234", "pw 5678")


# -- scrubbing known values ----------------------------------------------------------------------

def test_scrub_replaces_every_known_value_a_longer_one_whole():
    assert scrub("a hunter22 b hunter2222 c", ["hunter22", "hunter2222"]) == f"a {R} b {R} c"
    assert scrub("nothing secret here", []) == "nothing secret here"


def test_scrub_searches_the_values_given_and_those_remembered_and_in_the_environment(monkeypatch):
    monkeypatch.setenv("CI_JOB_TOKEN", "job-tok-1")
    remember(["remembered-1", "abc"])
    assert scrub("job-tok-1 remembered-1 given-1 abc", ["given-1"]) == f"{R} {R} {R} abc"


@pytest.mark.parametrize("value, text", [
    ("d>ab", "d>abab"),  # "<redacted>" ends in "d>": "<redacted>" + "ab" would form "d>ab" again
    ("d>aaa", "d>" + "a" * 15),  # every replacement would form it again
    ("<redac", "x<redac<redac"),  # a value that starts like the marker
    ("[redacted]<red", "[redacted]<red [redacted]<red"),  # overlaps two markers
])
def test_no_value_is_formed_again_by_a_marker_next_to_the_text(value, text):
    out = scrub(text, [value])
    assert value not in out and out != text
    assert marker_for((value,)) != R or value not in f"{R}{text}{R}"


def test_the_marker_is_redacted_unless_a_value_could_reach_into_it():
    assert marker_for(("hunter22",)) == R and marker_for((b"hunter22",)) == R.encode()
    assert marker_for(("d>ab",)) == "[redacted]" and marker_for(("d>ab", "d]ab")) == "(redacted)"
    # every ready marker overlaps a value: three of a character no value holds
    every = ("d>xx", "d]xx", "d)xx", "***x", "###x", "**x*", "~~~x", "^^^x", "|||x")
    m = marker_for(every)
    assert m == "!!!" and marker_for(tuple(v.encode() for v in every)) == b"!!!"
    assert marker_for(every + ("!!!!",)) == '"""'  # the first character none holds
    assert scrub("a d>xx b ***x c", list(every)) == f"a {m} b {m} c"
    assert marker_for(("d>xx", "d]xx", "d)xx", "***x")) == "###"  # three of the next character
    # one character is enough to straddle: a value that starts with the marker's last one
    assert marker_for((">abc",)) == "[redacted]" and marker_for(("abc<",)) == "[redacted]"
    assert scrub(">abcabc", [">abc"]) == "[redacted]abc"


# -- byte streams --------------------------------------------------------------------------------

def _stream(values, chunks):
    written: list[bytes] = []
    r = StreamRedactor(written.append, values)
    for c in chunks:
        r.feed(c)
    before_close = b"".join(written)
    r.close()
    return before_close, b"".join(written)


STREAM = b"start tok-1234-abcd mid\nend ABCD tok-1234-abcd\nlast ABCD"


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_a_secret_split_between_two_chunks_is_found_whole(cut):
    _, out = _stream(["tok-1234-abcd", "ABCD"], [STREAM[:cut], STREAM[cut:]])
    assert out == STREAM.replace(b"tok-1234-abcd", R.encode()).replace(b"ABCD", R.encode())


def test_a_stream_fed_byte_by_byte_is_scrubbed():
    _, out = _stream(["tok-1234-abcd", "ABCD"], [STREAM[i:i + 1] for i in range(len(STREAM))])
    assert out == STREAM.replace(b"tok-1234-abcd", R.encode()).replace(b"ABCD", R.encode())


def test_complete_lines_are_written_at_once_and_only_the_reach_of_the_longest_value_is_held():
    before, out = _stream(["tok-1234-abcd"], [b"0123456789ABCDEF"])  # 13-byte value: 12 held
    assert before == b"0123"
    before, out = _stream(["tok-1234-abcd"], [b"0123456789ABCDEF", b"line end\n"])
    assert before == out == b"0123456789ABCDEFline end\n"


def test_a_shorter_value_across_the_held_part_waits_whole_and_one_before_it_is_written_replaced():
    # the 11-byte value holds 10 bytes back: the cut falls inside "ABCD", which waits whole
    before, out = _stream(["ABCD", "LONGSECRET1"], [b"xxABCDyyyyyyyy"])
    assert before == b"xx" and out == b"xx" + R.encode() + b"yyyyyyyy"
    # here "ABCD" ends right at the cut: it is complete, so it goes out at once, replaced
    before, out = _stream(["ABCD", "LONGSECRET1"], [b"xxABCD" + b"y" * 10])
    assert before == b"xx" + R.encode() and out == before + b"y" * 10


def test_a_value_spanning_lines_is_held_across_the_line_end():
    before, out = _stream(["abc\ndefg"], [b"xx abc\n", b"defg yy\n"])
    assert b"abc" not in before and out == b"xx " + R.encode() + b" yy\n"


def test_with_no_value_known_a_stream_passes_through_at_once():
    before, out = _stream([], [b"abc", b"def\n"])
    assert before == out == b"abcdef\n"


# -- environments, recorded commands, records -----------------------------------------------------

def test_a_recorded_environment_keeps_names_and_order_and_loses_secret_values():
    env = {"PATH": "/bin", "HF_TOKEN": "x", "N": 3}
    assert list(redact_env(env).items()) == [("PATH", "/bin"), ("HF_TOKEN", R), ("N", "3")]
    assert list(comparable_env(env).items()) == [("HF_TOKEN", R), ("N", "3"), ("PATH", "/bin")]
    assert comparable_env(env) == comparable_env({**env, "HF_TOKEN": R})


def test_a_recorded_command_keeps_its_shape():
    assert redact_command(None) is None
    quoted = 'python run.py --name "a b" --n 3'
    assert redact_command(quoted) is quoted  # nothing secret: its own quoting kept
    assert redact_command("python run.py --token tok-1234 --n 3") == f"python run.py --token '{R}' --n 3"
    assert redact_command("run --token tok-1234 'oops") == f"run --token {R} 'oops"
    assert redact_command(["run", "--token", "tok-1234"]) == ["run", "--token", R]
    assert redact_command(("run", "HF_TOKEN=hf_abcd")) == ["run", f"HF_TOKEN={R}"]
    assert redact_command([["a", "--token", "tok-1234"], ["b", "--n", "3"]]) == [["a", "--token", R], ["b", "--n", "3"]]
    assert redact_command(PurePosixPath("tool --token tok-1234")) == f"tool --token {R}"


def test_a_record_is_redacted_at_any_depth_and_the_rest_left_as_it_is():
    rec = {
        "env": {"HF_TOKEN": "hf_abcd", "N": 3}, "env_set": ["HF_TOKEN"],
        "command": "run --token tok-1234", "argv": ["run", "--api-key=k-5678"],
        "error": "failed: --password pw-9876", "message": 5,
        "runs": [{"env": {"GH_TOKEN": "gh_abcd"}}, {"error": "HF_TOKEN=hf_abcd failed"}],
        "meta": {"API_KEY": "abcd", "hw_key": "gfx942", "Api_Key": "mixed case is no variable",
                 "PRIVATE": {"nested": 1}, "points": {"p1": {"n": 3, "ratio": 1.5, "ok": True}}},
        "path": "/runs/auth=basic/out", "n": 3,
    }
    assert redact_record(rec) == {
        "env": {"HF_TOKEN": R, "N": "3"}, "env_set": ["HF_TOKEN"],
        "command": f"run --token '{R}'", "argv": ["run", f"--api-key={R}"],
        "error": f"failed: --password {R}", "message": 5,
        "runs": [{"env": {"GH_TOKEN": R}}, {"error": f"HF_TOKEN={R} failed"}],
        "meta": {"API_KEY": R, "hw_key": "gfx942", "Api_Key": "mixed case is no variable",
                 "PRIVATE": {"nested": 1}, "points": {"p1": {"n": 3, "ratio": 1.5, "ok": True}}},
        "path": "/runs/auth=basic/out", "n": 3,
    }
    assert redact_record(("a", 1)) == ["a", 1] and redact_record(7) == 7
