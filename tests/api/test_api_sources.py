"""Sources: splits, assignment, seek/replay exactness, rate limiting on a manual clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import CollectionSource, GeneratorSource, OperatorError, SourceSplit
from operators.sources import assign_splits
from vocabulary.ports import ManualClock


def read_all(reader, batch=3):
    out = []
    while not reader.finished():
        chunk = reader.read(batch)
        assert chunk, "an unlimited reader that is not finished must make progress"
        out.extend(chunk)
    return out


def test_collection_splits_are_contiguous_and_balanced():
    src = CollectionSource([{"i": i} for i in range(10)], splits=3)
    splits = src.splits()
    assert [(s.split_id, s.index, s.start, s.end) for s in splits] == [
        ("collection-0", 0, 0, 4), ("collection-1", 1, 4, 7), ("collection-2", 2, 7, 10)
    ]
    assert src.splits() == splits  # deterministic


def test_collection_more_splits_than_rows_leaves_empty_splits():
    src = CollectionSource([{"i": 0}], splits=3)
    readers = [src.reader(s, ManualClock()) for s in src.splits()]
    assert [r.finished() for r in readers] == [False, True, True]
    assert readers[1].read(10) == []


def test_assign_splits_by_index_modulo_parallelism():
    splits = [SourceSplit(f"s{i}", i) for i in range(5)]
    assert [s.index for s in assign_splits(splits, 2, 0)] == [0, 2, 4]
    assert [s.index for s in assign_splits(splits, 2, 1)] == [1, 3]
    assert assign_splits(splits, 8, 7) == []
    with pytest.raises(ValueError, match="subtask 2 is not in range"):
        assign_splits(splits, 2, 2)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), splits=st.integers(1, 6), parallelism=st.integers(1, 4))
def test_every_row_read_exactly_once_over_all_subtasks(n, splits, parallelism):
    rows = [{"i": i} for i in range(n)]
    src = CollectionSource(rows, splits=splits)
    out = []
    for subtask in range(parallelism):
        for split in assign_splits(src.splits(), parallelism, subtask):
            out.extend(read_all(src.reader(split, ManualClock())))
    assert sorted(r["i"] for r in out) == list(range(n))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 30), cut=st.integers(0, 30), batch=st.integers(1, 7))
def test_collection_seek_replays_exactly_the_rest(n, cut, batch):
    rows = [{"i": i} for i in range(n)]
    src = CollectionSource(rows, splits=1)
    split = src.splits()[0]
    full = read_all(src.reader(split, ManualClock()), batch)
    cut = min(cut, n)
    reader = src.reader(split, ManualClock())
    reader.seek(cut)
    assert reader.position == cut
    assert read_all(reader, batch) == full[cut:]


def test_collection_records_are_copies_so_mutation_cannot_change_a_replay():
    rows = [{"i": 0}]
    src = CollectionSource(rows)
    split = src.splits()[0]
    first = src.reader(split, ManualClock()).read(1)[0]
    first["i"] = 99
    assert src.reader(split, ManualClock()).read(1) == [{"i": 0}]


def test_seek_out_of_range_is_an_error_naming_the_split():
    src = CollectionSource([{"i": 0}, {"i": 1}])
    reader = src.reader(src.splits()[0], ManualClock())
    with pytest.raises(ValueError, match="cannot seek split 'collection-0' to position 3"):
        reader.seek(3)
    with pytest.raises(ValueError, match="position -1"):
        reader.seek(-1)


def test_collection_rejects_non_dict_rows_and_bad_splits():
    with pytest.raises(TypeError, match="row 1 is a list"):
        CollectionSource([{"a": 1}, [1, 2]])
    with pytest.raises(ValueError, match="splits must be an integer >= 1, got 0"):
        CollectionSource([], splits=0)


def test_collection_columns_union_in_first_seen_order():
    assert CollectionSource([{"a": 1, "b": 2}, {"c": 3, "a": 4}]).columns() == ["a", "b", "c"]


# ------------------------------------------------------------------ generator


def test_generator_unlimited_rate_emits_count_records_interleaved_over_splits():
    src = GeneratorSource(count=7, splits=3, timestamp_field=None)
    assert [s.end for s in src.splits()] == [3, 2, 2]
    got = {s.index: [r["i"] for r in read_all(src.reader(s, ManualClock()))] for s in src.splits()}
    assert got == {0: [0, 3, 6], 1: [1, 4], 2: [2, 5]}


def test_generator_fn_and_created_at_stamp_from_task_clock():
    clock = ManualClock(5.0)
    src = GeneratorSource(count=2, fn=lambda i: {"v": i * 10})
    reader = src.reader(src.splits()[0], clock)
    assert reader.read(10) == [{"v": 0, "created_at": 5.0}, {"v": 10, "created_at": 5.0}]
    assert reader.finished()


def test_generator_records_are_stamped_copies_even_when_fn_shares_one_dict():
    shared = {"v": 0}

    def fn(i):
        shared["v"] = i
        return shared

    clock = ManualClock(2.0)
    src = GeneratorSource(count=3, fn=fn, splits=1)
    assert src.reader(src.splits()[0], clock).read(3) == [
        {"v": 0, "created_at": 2.0}, {"v": 1, "created_at": 2.0}, {"v": 2, "created_at": 2.0}]
    assert shared == {"v": 2}  # not stamped
    unstamped = GeneratorSource(count=3, fn=lambda i: {"v": i}, timestamp_field=None, splits=1)
    assert unstamped.reader(unstamped.splits()[0], clock).read(3) == [{"v": 0}, {"v": 1}, {"v": 2}]
    plain = GeneratorSource(count=2, splits=1)
    assert plain.reader(plain.splits()[0], clock).read(2) == [{"i": 0, "created_at": 2.0}, {"i": 1, "created_at": 2.0}]


def test_generator_rate_limits_with_manual_clock():
    clock = ManualClock(100.0)
    src = GeneratorSource(count=5, rate=2.0, timestamp_field=None)  # one record every 0.5 s
    reader = src.reader(src.splits()[0], clock)
    assert [r["i"] for r in reader.read(10)] == [0]  # record 0 is due at the start
    assert reader.read(10) == []
    assert reader.next_ready_time() == pytest.approx(100.5)
    clock.set(reader.next_ready_time())  # exactly at the due time: due (no float round-off miss)
    assert [r["i"] for r in reader.read(10)] == [1]
    clock.advance(1.2)  # 101.7: records 2, 3 due (101.0, 101.5)
    assert [r["i"] for r in reader.read(10)] == [2, 3]
    clock.advance(10)
    assert [r["i"] for r in reader.read(1)] == [4]
    assert reader.finished() and reader.next_ready_time() is None


def test_generator_rate_is_shared_by_splits():
    clock = ManualClock()
    src = GeneratorSource(count=100, rate=10.0, splits=2, timestamp_field=None)  # 5/s per split
    readers = [src.reader(s, clock) for s in src.splits()]
    clock.advance(1.0)
    assert [len(r.read(100)) for r in readers] == [6, 6]  # records due at 0, 0.2, ..., 1.0


def test_generator_rate_and_duration_make_a_deterministic_record_budget():
    src = GeneratorSource(rate=10.0, duration=1.05, splits=3, timestamp_field=None)
    assert src.total_records() == 10
    assert sum(s.end for s in src.splits()) == 10


def test_generator_seek_resumes_pace_from_now():
    clock = ManualClock()
    src = GeneratorSource(count=10, rate=1.0, timestamp_field=None)
    reader = src.reader(src.splits()[0], clock)
    clock.advance(50)
    reader.seek(4)
    assert [r["i"] for r in reader.read(10)] == [4]
    assert reader.next_ready_time() == pytest.approx(51.0)


def test_generator_duration_without_rate_uses_the_clock():
    clock = ManualClock()
    src = GeneratorSource(duration=2.0, timestamp_field=None)
    reader = src.reader(src.splits()[0], clock)
    assert len(reader.read(4)) == 4 and not reader.finished()
    clock.advance(2.0)
    assert reader.finished() and reader.read(4) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": -1}, "count must be an integer >= 0"),
        ({"rate": 0}, "rate must be a number > 0"),
        ({"duration": -1.0}, "duration must be a number >= 0"),
        ({"splits": 0}, "splits must be an integer >= 1"),
        ({"fn": 3}, "fn must be callable"),
        ({"rows_fn": 3}, "rows_fn must be callable"),
        ({"fn": str, "rows_fn": list}, "give one of fn"),
        ({"read_ahead": 0}, "read_ahead must be an integer >= 1, got 0"),
        ({"read_ahead": True}, "read_ahead must be an integer >= 1"),
    ],
)
def test_generator_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GeneratorSource(**kwargs)


def test_generator_fn_errors_name_the_source_and_index():
    src = GeneratorSource(count=3, fn=lambda i: {"x": 1 / (i - 1)})
    reader = src.reader(src.splits()[0], ManualClock())
    with pytest.raises(OperatorError, match="'Source: generator' failed on record 1: ZeroDivisionError"):
        reader.read(3)
    src = GeneratorSource(count=1, fn=lambda i: i)
    with pytest.raises(OperatorError, match="returned int 0, expected a dict"):
        src.reader(src.splits()[0], ManualClock()).read(1)


def test_generator_rows_fn_builds_the_records_of_an_index_array_stamped_and_replayable():
    src = GeneratorSource(count=10, splits=2, rows_fn=lambda idx: [{"i": int(i), "sq": int(i * i)} for i in idx])
    clock = ManualClock()
    reader = src.reader(src.splits()[1], clock)
    assert reader.read(2) == [{"i": 1, "sq": 1, "created_at": 0.0}, {"i": 3, "sq": 9, "created_at": 0.0}]
    reader.seek(4)
    assert reader.read(5) == [{"i": 9, "sq": 81, "created_at": 0.0}] and reader.finished()


def test_generator_rows_fn_errors_name_the_source_and_the_indices():
    src = GeneratorSource(count=3, rows_fn=lambda idx: [{"i": 1}])
    with pytest.raises(OperatorError, match=r"'Source: generator' failed on record '<indices 0..2>': "
                                            r"TypeError\('rows_fn returned a list of 1, expected a list of 3 dicts"):
        src.reader(src.splits()[0], ManualClock()).read(3)
    src = GeneratorSource(count=3, rows_fn=lambda idx: 1 / 0)
    with pytest.raises(OperatorError, match="ZeroDivisionError"):
        src.reader(src.splits()[0], ManualClock()).read(3)


def _columns(idx):
    return {"i": idx, "sq": idx * idx}


def _rows(idx):
    return [{"i": int(i), "sq": int(i * i)} for i in idx]


@settings(max_examples=150, deadline=None)
@given(count=st.integers(0, 40), splits=st.integers(1, 3), read_ahead=st.integers(1, 12), vectorised=st.booleans(),
       steps=st.lists(st.tuples(st.integers(1, 9), st.none() | st.integers(0, 40)), max_size=12))
def test_generator_read_ahead_hands_out_what_reading_exactly_would(count, splits, read_ahead, vectorised, steps):
    """Whatever the reads and seeks, a reader that builds ahead hands out the records, stamps
    included, that one building only what is read does; it builds them in fewer calls."""
    calls = {"exact": 0, "ahead": 0}

    def counted(fn, who):
        def build(idx):
            calls[who] += 1
            return fn(idx)
        return build

    fns = {"batch_fn": _columns} if vectorised else {"rows_fn": _rows}
    exact = GeneratorSource(count=count, splits=splits, **{k: counted(f, "exact") for k, f in fns.items()})
    ahead = GeneratorSource(count=count, splits=splits, read_ahead=read_ahead,
                            **{k: counted(f, "ahead") for k, f in fns.items()})
    for split in exact.splits():
        clock = ManualClock()
        readers = [exact.reader(split, clock), ahead.reader(split, clock)]
        for n, seek in steps:
            if seek is not None and seek <= (split.end or 0):
                for reader in readers:
                    reader.seek(seek)
            got = [reader.read(n) for reader in readers]
            if vectorised:
                got = [g.to_pylist() if len(g) else [] for g in got]
            assert got[0] == got[1], (split, n, seek)
            assert readers[0].position == readers[1].position and readers[0].finished() == readers[1].finished()
            clock.advance(0.5)
    assert calls["ahead"] <= calls["exact"]


def test_generator_read_ahead_builds_a_block_per_call_and_never_hands_out_a_record_before_it_is_due():
    calls = []
    src = GeneratorSource(count=100, rate=10.0, read_ahead=32, stamp="due",
                          rows_fn=lambda idx: calls.append(idx.tolist()) or _rows(idx))
    clock = ManualClock()
    reader = src.reader(src.splits()[0], clock)
    handed, early = [], []
    for _ in range(42):
        for record in reader.read(256):
            handed.append((record["i"], record["created_at"]))
            if record["created_at"] > clock.now():
                early.append(record)
        clock.advance(0.25)
    # 10 records a second: 100 records, each handed out once it was due, in order
    assert handed == [(i, i / 10) for i in range(100)] and not early
    # built 32 at a time (the last block cut at the split's end), not a call per read
    assert len(calls) == 4 and all(len(c) == 32 or c[-1] == 99 for c in calls), calls


def test_generator_read_ahead_hands_out_each_built_record_once():
    src = GeneratorSource(count=10, read_ahead=10, timestamp_field=None, rows_fn=_rows)
    reader = src.reader(src.splits()[0], ManualClock())
    first = reader.read(3)
    first[0]["i"] = -1  # a downstream operator may change what it was given
    reader.seek(0)
    assert reader.read(3) == _rows(range(3)) and reader.read(20) == _rows(range(3, 10))


def test_expected_records_for_fault_placement():
    assert CollectionSource([{"i": 0}] * 5, splits=2).expected_records() == 5
    assert GeneratorSource(count=7).expected_records() == 7
    assert GeneratorSource(rate=4.0, duration=2.0).expected_records() == 8
    assert GeneratorSource().expected_records() == 0  # unbounded: unknown
