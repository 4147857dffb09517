"""Records of mixed types in jobs on the simulator: one rule whatever the buffer size.

A field keeps one Arrow type per stream (`runtime/records/record_types.py`). A check by Arrow's
inference alone would fail only when the two values shared a network buffer (`buffer_size=1`
passing and 256 failing, naming the wrong record), let a chained sink take `object()` on the
simulator, and turn `[0.5, True]` into `[0.5, 1.0]` in one buffer. The same error, naming
operator, field, types and record, comes at every buffer size, through the network or into a
chained sink.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators import CollectSink
from runtime import RecordTypeError, StreamEnvironment
from runtime.jobmaster.result import JobFailedError
from vocabulary.options import RestartStrategy

N = 40
BUFFER_SIZES = [1, 3, 256]
#: "network": the records leave the task that made them; "chained": they go into a sink in it
SHAPES = ["network", "chained"]


def job(fn: Any, *, buffer_size: int, shape: str, parallelism: int = 3) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, buffer_size=buffer_size, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.005)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=1, delay=0.001))
    source = env.from_collection([{"i": i} for i in range(N)], splits=1).set_parallelism(1)
    shaped = source.map(fn, name="shape").set_parallelism(1)
    if shape == "network":
        shaped = shaped.rebalance().map(lambda r: r, name="after")
    shaped.sink_to(CollectSink("out"))
    return env


def failure(fn: Any, **kwargs: Any) -> RecordTypeError:
    with pytest.raises(JobFailedError) as info:
        job(fn, **kwargs).execute("types", executor="sim", seed=1)
    assert isinstance(info.value.cause, RecordTypeError), info.value
    return info.value.cause


def int_or_str(r: dict[str, Any]) -> dict[str, Any]:
    """Strings at 7 and 11: with rebalance they go to different channels (11 comes first on its own)."""
    return {"i": r["i"], "x": "s" if r["i"] in (7, 11) else r["i"]}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("buffer_size", BUFFER_SIZES)
def test_int_and_str_in_one_field_fail_alike_at_every_buffer_size(shape: str, buffer_size: int) -> None:
    error = failure(int_or_str, buffer_size=buffer_size, shape=shape)
    assert str(error) == (
        "records emitted by operator 'shape': field 'x' is string in record {'i': 7, 'x': 's'}, but int64 in "
        "earlier records; a field keeps one Arrow type per stream (None fits any type, ints widen to floats)"
    )
    assert error.field == "x" and error.record == {"i": 7, "x": "s"}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("buffer_size", [1, 256])
def test_a_value_arrow_cannot_hold_is_rejected_naming_operator_field_and_record(shape: str, buffer_size: int) -> None:
    """A chained sink refuses `object()` on the simulator as on Ray, at every buffer size."""
    bad = object()
    error = failure(lambda r: {"i": r["i"], "x": bad if r["i"] == 9 else 1}, buffer_size=buffer_size, shape=shape)
    assert str(error).startswith(
        f"records emitted by operator 'shape': field 'x' of record {{'i': 9, 'x': {bad!r}}} holds {bad!r} (object), "
        "which Arrow cannot hold (ArrowInvalid: Could not convert"
    ), error
    assert error.field == "x" and error.record["i"] == 9


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("buffer_size", [1, 256])
def test_a_bool_among_floats_is_not_coerced_silently(shape: str, buffer_size: int) -> None:
    error = failure(lambda r: {"x": True if r["i"] == 5 else 0.5}, buffer_size=buffer_size, shape=shape)
    assert "field 'x' is bool in record {'x': True}, but double in earlier records;" in str(error)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("buffer_size", [1, 256])
def test_an_int_beyond_int64_is_rejected_at_every_buffer_size(shape: str, buffer_size: int) -> None:
    error = failure(lambda r: {"i": r["i"], "n": 2**70 if r["i"] == 13 else 1}, buffer_size=buffer_size, shape=shape)
    assert f"field 'n' of record {{'i': 13, 'n': {2**70}}} holds {2**70} (int), which does not fit in int64" in str(error)


def test_a_huge_offending_record_is_cut_short_in_the_message() -> None:
    big = "y" * 10_000_000
    error = failure(lambda r: {"i": r["i"], "x": big if r["i"] == 3 else r["i"]}, buffer_size=256, shape="chained")
    message = str(error)
    assert len(message) < 1_000, len(message)
    assert "field 'x' is string in record {'i': 3, 'x': 'yyy" in message
    assert f"... (2 fields, {len(repr(error.record)):,} characters)" in message


MIXES = {
    # what worked before the rule and keeps working: numbers mixed, None, records with fields missing
    "ints and floats": lambda r: {"i": r["i"], "x": r["i"] + 0.5 if r["i"] % 4 == 0 else r["i"]},
    "None values": lambda r: {"i": r["i"], "x": None if r["i"] % 3 else f"v{r['i']}"},
    "fields missing": lambda r: {"i": r["i"]} if r["i"] % 3 else {"i": r["i"], "x": [r["i"]], "y": {"a": 1}},
    "all None first": lambda r: {"i": r["i"], "x": None if r["i"] < 20 else r["i"]},
}


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("buffer_size", [1, 256])
def test_mixes_the_rule_allows_still_run(mix: str, shape: str, buffer_size: int) -> None:
    fn = MIXES[mix]
    result = job(fn, buffer_size=buffer_size, shape=shape).execute("types", executor="sim", seed=1)
    out = sorted(result.output("out"), key=lambda r: r["i"])
    expected = [fn({"i": i}) for i in range(N)]
    # equal values; a record lacking a field may come back with None there (Arrow is columnar)
    assert [{k: v for k, v in r.items() if v is not None} for r in out] == \
        [{k: v for k, v in r.items() if v is not None} for r in expected]


def nested(depth: int) -> list[Any]:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def deep_at_7(r: dict[str, Any]) -> dict[str, Any]:
    """Field "deep": a list nested 2,000 levels deep in record 7 (Python's repr and pickle give up
    at ~1,000), 3 levels elsewhere."""
    return {"i": r["i"], "deep": nested(2000 if r["i"] == 7 else 3)}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_record_nested_too_deep_fails_naming_operator_field_and_record(shape: str) -> None:
    """A record error, not Python's RecursionError ("maximum recursion depth exceeded in
    comparison") here or a PicklingError on Ray (`tests/ray/test_ray_failures.py`)."""
    error = failure(deep_at_7, buffer_size=256, shape=shape)
    assert str(error).startswith("records emitted by operator 'shape': field 'deep' of record {"), str(error)
    assert "'i': 7" in str(error) and "[[[[[[[[...]]]]]]]]" in str(error), str(error)  # (a shallow repr)
    assert "which is nested more than 100 levels deep (lists and dicts within one another)" in str(error), str(error)
    assert error.field == "deep" and error.record["i"] == 7 and len(str(error)) < 1000
    assert job(lambda r: {"i": r["i"], "deep": nested(100)}, buffer_size=256, shape=shape).execute(
        "types", executor="sim", seed=1).output("out")[0]["deep"] == nested(100)
