"""Flink's per-checkpoint figures from its REST API (`benchmarks.flink_rest`): what a row's
alignment, start delay and byte columns are made of, from documents shaped as Flink 2.3 answers
(`/jobs/<id>/checkpoints` history entries, `/checkpoints/details/<id>/subtasks/<vertex>` subtasks)."""

from __future__ import annotations

import pytest

from benchmarks.flink_rest import checkpoint_figures


def subtask(index: int, *, alignment: int, start_delay: int, persisted: int = 0) -> dict:
    return {"index": index, "status": "completed", "start_delay": start_delay, "end_to_end_duration": 20,
            "checkpointed_size": 1000, "alignment": {"buffered": 0, "processed": 0, "persisted": persisted,
                                                      "duration": alignment},
            "checkpoint": {"sync": 1, "async": 3}, "unaligned_checkpoint": persisted > 0}


def checkpoint(id_: int, tasks: dict, *, persisted: int = 0, size: int = 5000,
               path: str = "<checkpoint-not-externally-addressable>") -> dict:
    return {"id": id_, "checkpoint_type": "CHECKPOINT", "end_to_end_duration": 30, "checkpointed_size": size,
            "persisted_data": persisted, "processed_data": 0, "alignment_buffered": 0, "external_path": path,
            "tasks": tasks}


def test_each_checkpoint_counts_its_longest_subtask_alignment_and_start_delay() -> None:
    doc = {"counts": {"completed": 3, "failed": 1}, "checkpoints": [
        checkpoint(1, {"Source: events": [subtask(0, alignment=0, start_delay=1), subtask(1, alignment=0, start_delay=2)],
                       "Window join": [subtask(0, alignment=7, start_delay=4), subtask(1, alignment=3, start_delay=9)]}),
        checkpoint(2, {"Source: events": [subtask(0, alignment=0, start_delay=1)],
                       "Window join": [subtask(0, alignment=2, start_delay=3), subtask(1, alignment=11, start_delay=5)]},
                   persisted=4096, size=9000, path="file:/tmp/work/flink-checkpoint-data/job/chk-2"),
        # the sources had finished (bounded input): they report nothing to the last checkpoint
        checkpoint(3, {"Source: events": [{"index": 0, "status": "pending_or_failed"}],
                       "Window join": [subtask(0, alignment=0, start_delay=6), subtask(1, alignment=1, start_delay=2)]},
                   size=7000),
    ]}
    figures = checkpoint_figures(doc)
    assert (figures["rest_checkpoints_completed"], figures["rest_checkpoints_read"]) == (3, 3)
    # alignments 7, 11, 1; start delays 9, 5, 6
    assert (figures["alignment_time_p50"], figures["alignment_time_p99"], figures["alignment_time_max"]) == (7, 11, 11)
    assert (figures["start_delay_p50"], figures["start_delay_max"]) == (6, 9)
    assert (figures["persisted_bytes"], figures["persisted_bytes_p50"]) == (4096, 0)
    assert figures["checkpointed_bytes_p50"] == 7000
    assert figures["checkpoints_in_files"] == 1  # the others stayed in the JobManager's memory


def test_no_completed_checkpoint_leaves_the_columns_empty() -> None:
    figures = checkpoint_figures({"counts": {"completed": 0}, "checkpoints": []})
    assert figures["rest_checkpoints_read"] == 0 and figures["alignment_time_p50"] is None
    assert figures["persisted_bytes"] is None and figures["checkpoints_in_files"] == 0


def test_a_checkpoint_without_figures_or_with_a_bad_one_is_named() -> None:
    silent = checkpoint(4, {"Sink": [{"index": 0, "status": "pending_or_failed"}]})
    with pytest.raises(ValueError, match="Flink checkpoint 4: completed, but no subtask reported"):
        checkpoint_figures({"counts": {"completed": 1}, "checkpoints": [silent]})
    negative = checkpoint(5, {"Sink": [subtask(0, alignment=-1, start_delay=0)]})
    with pytest.raises(ValueError, match="Flink checkpoint 5: field 'duration'"):
        checkpoint_figures({"counts": {"completed": 1}, "checkpoints": [negative]})
