"""The Flink Java peer's driver side (`benchmarks.flink_java`), without a JVM."""

from __future__ import annotations

import shutil

import pytest

from benchmarks import flink_java

#: a trimmed `/jobs/<id>/checkpoints` response of the Java job (Flink 2.3 MiniCluster, aligned)
HISTORY = {
    "counts": {"restored": 0, "total": 5, "in_progress": 1, "completed": 2, "failed": 2},
    "summary": {"checkpointed_size": {"min": 6064, "max": 6064, "avg": 6064, "p50": 6064.0, "p99": 6064.0},
                "end_to_end_duration": {"min": 117, "max": 265, "avg": 191, "p50": 191.0, "p99": 265.0}},
    "history": [{"id": 5, "status": "IN_PROGRESS"},
                {"id": 4, "status": "FAILED", "failure_message": "Checkpoint Coordinator is suspending."},
                {"id": 3, "status": "COMPLETED"},
                {"id": 2, "status": "FAILED", "failure_message": "Checkpoint Coordinator is suspending."}],
}


def test_checkpoint_columns_come_from_the_rest_summary() -> None:
    stats = flink_java.checkpoint_stats(HISTORY)
    assert stats == {"completed": 2, "aborted": 2, "reasons": {"Checkpoint Coordinator is suspending.": 2},
                     "p50": 191.0, "p99": 265.0, "max": 265, "bytes": 6064}


def test_no_checkpoints_leave_the_duration_columns_empty() -> None:
    assert flink_java.checkpoint_stats(None) is None
    empty = {"counts": {"completed": 0, "failed": 1}, "summary": {"end_to_end_duration": {"p50": 0}}, "history": []}
    assert flink_java.checkpoint_stats(empty)["p50"] is None


def test_a_missing_jdk_or_pyflink_is_a_named_error_not_a_row(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    with pytest.raises(flink_java.FlinkJavaMissing, match="PyFlink is not installed"):
        flink_java.pyflink_lib(None)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "javac" else "/usr/bin/" + tool)
    with pytest.raises(flink_java.FlinkJavaMissing, match="'javac' is not on PATH"):
        flink_java.build(str(tmp_path), str(tmp_path / "classes"))


def test_a_repeated_peer_row_reports_medians_and_every_run() -> None:
    from benchmarks.peer_rows import failed, repeats_row
    from benchmarks.peer_rows import row as peer_row

    runs = [peer_row("flink-java", "aligned", throughput=t, latencies_ms=[1.0, float(t) / 1e5], checkpoints={"p50": c})
            for t, c in ((900_000, 70.0), (1_300_000, 38.0), (1_000_000, 148.0))]
    row = repeats_row([*runs, failed("flink-java", "aligned", "boom")])
    assert row["status"] == "ok" and row["throughput"] == 1_000_000 and row["checkpoint_duration_p50"] == 70.0
    assert [r["throughput"] for r in row["runs"]] == [900_000, 1_300_000, 1_000_000, None]
    assert repeats_row([failed("flink-java", "none", "boom")])["status"].startswith("failed: boom")
