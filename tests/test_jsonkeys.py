"""The repeated-key scan (pytest_gemmperf/jsonkeys.py) against the stdlib parser's own view of
each object: random documents (escapes, whitespace, braces and colons inside strings, keys that
differ only in digits) and arrays of same-shaped records, which the scan checks through one
record (``uniform``), must give exactly the repeats ``object_pairs_hook`` sees, and no other."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pytest_gemmperf import jsonkeys
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json

FIX = Path(__file__).parent / "fixtures" / "rocprof_json" / "v7_two_processes_counters_results.json"
KEYS = ["a", "b", "x1", "x2", "dur", "long_key_aaaaaaaaa_1", "long_key_aaaaaaaaa_2", "{", "}",
        '"', ":", "\\", "é", "😀", "", " ", "kernel_dispatch"]
SCALARS = [1, 2.5, None, True, "x", '{"a":1,"a":2}', '\\"', "}{", '"a":', "]", "x1", "\\\\"]


class Obj:
    """An object as written: its pairs in order, a key possibly twice."""

    def __init__(self, pairs: list) -> None:
        self.pairs = pairs


def repeats(text: str) -> bool:
    found = []

    def hook(pairs):
        keys = [k for k, _ in pairs]
        found.extend(k for k in keys if keys.count(k) > 1)
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return bool(found)


def gen(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 5 or r < 0.3:
        return rng.choice(SCALARS + KEYS)
    if r < 0.55:
        return [gen(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if r < 0.65:  # an array of records that often share one shape
        shape = [rng.choice(KEYS) for _ in range(rng.randint(1, 3))]
        records = [Obj([(k, rng.randint(0, 10 ** rng.randint(0, 6))) for k in shape])
                   for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.3:  # one record differs: a key added, possibly one it already has
            records[rng.randrange(len(records))].pairs.append((rng.choice(shape + KEYS), 1))
        return Obj([("kernel_dispatch", records)])
    return Obj([(rng.choice(KEYS), gen(rng, depth + 1)) for _ in range(rng.randint(0, 4))])


def render(rng: random.Random, v, compact: bool) -> str:
    if isinstance(v, Obj):
        colon = ":" if compact else rng.choice([":", ": ", " :", " : \n "])
        comma = "," if compact else rng.choice([",", ", ", ",\n  "])
        return "{" + comma.join(render_key(rng, k, compact) + colon + render(rng, x, compact)
                                for k, x in v.pairs) + "}"
    if isinstance(v, list):
        return "[" + ",".join(render(rng, x, compact) for x in v) + "]"
    return json.dumps(v, ensure_ascii=rng.random() < 0.5)


def render_key(rng: random.Random, key: str, compact: bool) -> str:
    if key and not compact and rng.random() < 0.2:  # spelled with escapes
        return '"' + "".join("\\u%04x" % ord(c) if ord(c) < 0x10000 and rng.random() < 0.5
                             else json.dumps(c)[1:-1] for c in key) + '"'
    return json.dumps(key, ensure_ascii=rng.random() < 0.5)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("compact", [True, False], ids=["compact", "spaced"])
def test_scan_finds_exactly_the_parsers_repeats(seed, compact):
    rng = random.Random(seed)
    for _ in range(150):
        doc = gen(rng)
        text = render(rng, doc if isinstance(doc, Obj) else Obj([("root", doc)]), compact)
        data = text.encode()
        expected = repeats(text)
        for uniform in ((), ("kernel_dispatch",)):
            hit = jsonkeys.find_repeated_key(data, uniform)
            assert (hit is not None) == expected, (text, uniform, hit)


def _dispatches(records: list[str]) -> bytes:
    return ('{"tool":{"n":1,"kernel_dispatch":[' + ",".join(records) + '],"after":{"k":1}}}').encode()


RECORD = '{"size":184,"correlation_id":{"internal":%d,"external":0},"start":%d,"grid":{"x":%d}}'


def _uniform(n: int = 50) -> list[str]:
    return [RECORD % (i, 10 ** 13 + i, i % 7) for i in range(n)]


def test_uniform_records_are_checked_through_one_and_cleared():
    data = _dispatches(_uniform())
    rest = jsonkeys._without_uniform_arrays(data, ("kernel_dispatch",))
    assert rest == b'{"tool":{"n":1,"kernel_dispatch":[],"after":{"k":1}}}'
    assert jsonkeys.find_repeated_key(data, ("kernel_dispatch",)) is None


@pytest.mark.parametrize("case,records,key,record_index", [
    ("one record repeats a key", lambda r: r[:7] + [r[7].replace('"size":184', '"size":184,"size":1')] + r[8:],
     "size", 7),
    ("every record repeats it", lambda r: [x.replace('"grid":{"x":', '"grid":{"x":1,"x":') for x in r],
     "x", 0),
    ("keys that differ in digits, then a real repeat",
     lambda r: [x.replace('"start"', '"x1":1,"x2"') for x in r[:3]] + [r[3].replace('"start"', '"x1":1,"x1"')],
     "x1", 3),
])
def test_a_repeat_inside_uniform_records_is_found_where_written(case, records, key, record_index):
    data = _dispatches(records(_uniform()))
    hit = jsonkeys.find_repeated_key(data, ("kernel_dispatch",))
    assert hit is not None and hit.key == key, case
    assert hit.path.startswith(f"$.tool.kernel_dispatch[{record_index}]"), hit.path
    assert hit == jsonkeys.find_repeated_key(data), "same answer as the scan of every key"


@pytest.mark.parametrize("case,records", [
    ("keys that differ only in digits", lambda r: [x.replace('"start"', '"x1":1,"x2"') for x in r]),
    ("a bracket inside a string", lambda r: [x.replace('"size":184', '"size":"a]b"') for x in r]),
    ("records of other shapes", lambda r: r + ['{"other":1}']),
    ("an escape elsewhere", lambda r: r + ['{"s":"\\"q\\""}']),
])
def test_uniform_lookalikes_are_not_refused(case, records):
    assert jsonkeys.find_repeated_key(_dispatches(records(_uniform())), ("kernel_dispatch",)) is None, case


def test_rocprof_reader_refuses_a_repeat_in_compact_dispatch_records(tmp_path):
    doc = json.loads(FIX.read_text())
    compact = json.dumps(doc, separators=(",", ":"))
    ok = tmp_path / "1234_results.json"
    ok.write_text(compact)
    assert len(read_rocprof_json(ok).dispatches) > 0
    dispatch = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][1]
    written = json.dumps(dispatch, separators=(",", ":"))
    assert compact.count(written) == 1
    bad = tmp_path / "5678_results.json"
    bad.write_text(compact.replace(written, written[:-1] + ',"end_timestamp":1}'))
    with pytest.raises(GemmperfInputError) as ei:
        read_rocprof_json(bad)
    text = str(ei.value)
    assert "'end_timestamp'" in text and "twice" in text and "kernel_dispatch[1]" in text, text


def test_nested_named_arrays_cost_one_pass():
    """Each try reads up to the first "]": tried at every level of a nesting, the tries would
    cost the depth squared (minutes here); a name inside a tried span is left to the full scan."""
    import time

    depth = 50_000
    data = ('{"kernel_dispatch":[' * depth + '{"a":1,"a":2}' + "]}" * depth).encode()
    t0 = time.process_time()
    hit = jsonkeys.find_repeated_key(data, ("kernel_dispatch",))
    assert hit is not None and hit.key == "a"
    assert time.process_time() - t0 < 10
