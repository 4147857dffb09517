"""A profile from Flink REST responses (`runtime.calibration.flink`), on a document shaped as
Flink's REST API answers (durations in ms)."""

from __future__ import annotations

import copy

import pytest

from runtime.calibration.flink import profile_from_flink
from runtime.calibration.profile import ProfileError


def subtask(start: float, align: float, sync: float, write: float, ack: float, size: int) -> dict:
    return {"index": 0, "status": "completed", "start_delay": start, "alignment": {"duration": align},
            "checkpoint": {"sync": sync, "async": write}, "checkpointed_size": size,
            "end_to_end_duration": start + align + sync + write + ack}


DOC = {
    "job": "backpressure",
    "sources": ["Source: generator"],
    "vertices": [
        {"name": "Source: generator", "parallelism": 2, "subtasks": [
            {"busyTimeMsPerSecond": 200, "numRecordsInPerSecond": 0, "numRecordsOutPerSecond": 40000},
            {"busyTimeMsPerSecond": 200, "numRecordsInPerSecond": 0, "numRecordsOutPerSecond": 40000}]},
        {"name": "count", "parallelism": 2, "subtasks": [
            {"busyTimeMsPerSecond": 100, "numRecordsInPerSecond": 40000},
            {"busyTimeMsPerSecond": 1000, "numRecordsInPerSecond": 40000}]},  # the slow subtask
    ],
    "checkpoints": [
        {"end_to_end_duration": 432, "tasks": {
            "Source: generator": [subtask(2, 0, 1, 10, 3, 1000), subtask(2, 0, 1, 10, 3, 1000)],
            "count": [subtask(12, 5, 1, 12, 3, 2000), subtask(12, 400, 1, 12, 3, 2000)]}},
        {"end_to_end_duration": 440, "tasks": {
            "Source: generator": [subtask(2, 0, 1, 10, 3, 1000), subtask(2, 0, 1, 10, 3, 1000)],
            "count": [subtask(12, 5, 1, 12, 3, 2000), subtask(12, 408, 1, 12, 3, 2000)]}},
    ],
}


def test_vertex_metrics_and_checkpoint_phases_make_a_profile() -> None:
    profile = profile_from_flink(DOC)
    assert profile.steps["count"].per_record == pytest.approx(0.1 / 40000)  # busy s per record
    assert profile.steps["count[1]"].per_record == pytest.approx(1.0 / 40000)  # the outlier keeps its own
    assert profile.steps["Source: generator"].per_record == pytest.approx(0.2 / 40000)
    assert profile.trigger_delay == pytest.approx(0.002)
    assert profile.ack_delay == pytest.approx(0.003)
    assert profile.latency_max == pytest.approx(0.02)  # 10 ms downstream: uniform 0-20 ms
    assert profile.write_latency == pytest.approx(0.008) and profile.write_per_byte == pytest.approx(2e-3 / 1000)
    assert profile.finalize == pytest.approx(0.004)  # 432 - 428 and 440 - 436 ms
    assert profile.calibrated["executor"] == "flink"


def test_bad_documents_name_the_field() -> None:
    doc = copy.deepcopy(DOC)
    doc["checkpoints"][0]["tasks"]["count"][1]["start_delay"] = "soon"
    with pytest.raises(ProfileError, match=r"checkpoints\[0\].tasks.count\[1\]: field 'start_delay'"):
        profile_from_flink(doc, "flink.json")
    with pytest.raises(ProfileError, match="flink.json: field 'vertices' must be a list"):
        profile_from_flink({"checkpoints": []}, "flink.json")


def _fixture(mode: str) -> dict:
    import json
    import pathlib

    path = pathlib.Path(__file__).parent / "fixtures" / f"flink_java_backpressure_{mode}.json"
    return json.loads(path.read_text())


def test_live_aligned_backpressure_wait_is_not_taken_for_transport() -> None:
    # recorded from benchmarks/flink_java/PageView.java (Flink 2.3, one slow key subtask): the
    # aligned barrier's ~700 ms wait behind in-flight data shows as the slow subtask's start delay
    doc = _fixture("aligned")
    assert max(s["start_delay"] for c in doc["checkpoints"] for s in c["tasks"]["KeyedProcess -> Sink: Writer"]) > 600
    profile = profile_from_flink(doc)
    assert profile.latency_max < 0.01  # the fast barrier trip, a few ms (the median took ~0.4 s)


def test_live_rates_from_few_records_give_no_cost() -> None:
    profile = profile_from_flink(_fixture("unaligned"))
    # only the slow subtask ran 1,000+ records/s in the sample: its cost is the vertex's
    slow = profile.steps["KeyedProcess -> Sink: Writer"].per_record
    assert 25e-6 <= slow <= 60e-6  # the subtask spins 25 us per record
    # subtasks that saw ~1 record/s in the sample (stale REST metrics) are left out, not 1 ms a record
    assert all(step.per_record < 1e-4 for step in profile.steps.values())


def test_live_aligned_document_reads_without_cost_outliers() -> None:
    # this sample's readings were stale (427 records/s and 49 ms busy on the slow subtask): no cost
    profile = profile_from_flink(_fixture("aligned"))
    assert all(step.per_record < 1e-4 for step in profile.steps.values())


def test_collect_reads_a_rest_endpoint_into_a_document(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import json
    import urllib.request

    from runtime.calibration import flink

    readings = iter([{"accumulateBusyTimeMs": 0, "numRecordsIn": 0, "numRecordsOut": 0},
                     {"accumulateBusyTimeMs": 0, "numRecordsIn": 0, "numRecordsOut": 0},
                     {"accumulateBusyTimeMs": 300, "numRecordsIn": 0, "numRecordsOut": 60000},
                     {"accumulateBusyTimeMs": 1000, "numRecordsIn": 40000, "numRecordsOut": 0}])
    sub = subtask(2, 0, 1, 10, 3, 1000)
    answers = {"/jobs/j": {"name": "pv", "vertices": [{"id": "s", "name": "Source: gen", "parallelism": 1},
                                                      {"id": "c", "name": "count", "parallelism": 1}]},
               "/jobs/j/checkpoints": {"history": [{"id": 7, "status": "COMPLETED", "end_to_end_duration": 20},
                                                   {"id": 6, "status": "FAILED"}]},
               "/jobs/j/checkpoints/details/7/subtasks/s": {"subtasks": [sub]},
               "/jobs/j/checkpoints/details/7/subtasks/c": {"subtasks": [sub]}}

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        path = url.removeprefix("http://127.0.0.1:1")
        if "/metrics?get=" in path:
            return io.BytesIO(json.dumps([{"id": k, "value": str(v)} for k, v in next(readings).items()]).encode())
        return io.BytesIO(json.dumps(answers[path]).encode())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(flink.time, "sleep", lambda s: None)
    clock = iter([0.0, 2.0])
    monkeypatch.setattr(flink.time, "monotonic", lambda: next(clock))
    doc = flink.collect_flink_rest("http://127.0.0.1:1", "j", checkpoints=5)
    assert doc["sources"] == ["Source: gen"] and len(doc["checkpoints"]) == 1
    assert doc["vertices"][0]["subtasks"][0]["numRecordsOutPerSecond"] == 30000  # over the 2 s sample
    assert doc["vertices"][1]["subtasks"][0]["busyTimeMsPerSecond"] == 500
    assert profile_from_flink(doc).steps["count"].per_record == pytest.approx(0.5 / 20000)
