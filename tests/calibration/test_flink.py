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


def queued(doc: dict, *, backpressured: float = 1000, queue: float = 250_000) -> dict:
    """`doc` with the sources' queue metrics: backpressured, `queue` bytes queued, 25 B a record."""
    doc = copy.deepcopy(doc)
    doc["segment_size"], doc["buffer_timeout_ms"] = 32768, 100
    for sub in doc["vertices"][0]["subtasks"]:
        sub.update(backPressuredTimeMsPerSecond=backpressured, outputQueueSize=queue, outputQueueLength=11,
                   numBytesOutPerSecond=25 * sub["numRecordsOutPerSecond"])
    for sub in doc["vertices"][1]["subtasks"]:
        sub.update(backPressuredTimeMsPerSecond=0, outputQueueSize=0, numRecordsOutPerSecond=0, numBytesOutPerSecond=0)
    return doc


def test_backpressured_queues_give_what_a_channel_holds_ahead_of_a_barrier() -> None:
    profile = profile_from_flink(queued(DOC))
    # the queued bytes plus one buffer (the one the barrier finishes, the one being read), 25 B a record
    assert profile.in_flight_records == pytest.approx((250_000 + 32768) / 25)
    assert profile.buffer_timeout == pytest.approx(0.1)
    assert profile.calibrated["record_bytes"] == 25 and profile.calibrated["segment_size"] == 32768
    # producers that are not held by backpressure say nothing about a full queue
    assert profile_from_flink(queued(DOC, backpressured=100)).in_flight_records == 0
    # a document recorded without queue metrics reads as before: no channel term
    assert profile_from_flink(DOC).in_flight_records == 0


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("segment_size"), "flink.json: field 'segment_size' is missing"),
    (lambda d: d["vertices"][0]["subtasks"][1].pop("numBytesOutPerSecond"),
     r"flink.json: vertices\[0\].subtasks\[1\]: field 'numBytesOutPerSecond' is missing"),
    (lambda d: d["vertices"][0]["subtasks"][0].update(outputQueueSize="full"),
     r"vertices\[0\].subtasks\[0\]: field 'outputQueueSize': expected a number >= 0, got 'full'"),
    (lambda d: d["vertices"][0]["subtasks"][0].pop("backPressuredTimeMsPerSecond"),
     "field 'backPressuredTimeMsPerSecond' is missing"),
    (lambda d: d.update(buffer_timeout_ms=-1), "flink.json: field 'buffer_timeout_ms': expected a number >= 0"),
])
def test_bad_queue_metrics_name_the_field(edit: object, message: str) -> None:
    doc = queued(DOC)
    edit(doc)  # type: ignore[operator]
    with pytest.raises(ProfileError, match=message):
        profile_from_flink(doc, "flink.json")


def test_bad_documents_name_the_field() -> None:
    doc = copy.deepcopy(DOC)
    doc["checkpoints"][0]["tasks"]["count"][1]["start_delay"] = "soon"
    with pytest.raises(ProfileError, match=r"checkpoints\[0\].tasks.count\[1\]: field 'start_delay'"):
        profile_from_flink(doc, "flink.json")
    with pytest.raises(ProfileError, match="flink.json: field 'vertices' must be a list"):
        profile_from_flink({"checkpoints": []}, "flink.json")


def _fixture(name: str) -> dict:
    import json
    import pathlib

    path = pathlib.Path(__file__).parent / "fixtures" / f"flink_java_backpressure_{name}.json"
    return json.loads(path.read_text())


def test_live_aligned_backpressure_wait_is_not_taken_for_transport() -> None:
    # recorded from benchmarks/flink_java/PageView.java (Flink 2.3, one slow key subtask): the
    # aligned barrier's ~1 s wait behind in-flight data shows as the slow subtask's start delay
    doc = _fixture("aligned")
    assert min(c["tasks"]["KeyedProcess -> Sink: Writer"][1]["start_delay"] for c in doc["checkpoints"]) > 600
    profile = profile_from_flink(doc)
    assert profile.latency_max < 0.01  # the fast barrier trip, a few ms (the median took ~0.4 s)


def test_live_rates_from_few_records_give_no_cost() -> None:
    # recorded before the metric cache was refreshed often: stale readings of the fast subtasks
    profile = profile_from_flink(_fixture("unaligned_no_queues"))
    # only the slow subtask ran 1,000+ records/s in the sample: its cost is the vertex's
    slow = profile.steps["KeyedProcess -> Sink: Writer"].per_record
    assert 25e-6 <= slow <= 60e-6  # the subtask spins 25 us per record
    # subtasks that saw ~1 record/s in the sample (stale REST metrics) are left out, not 1 ms a record
    assert all(step.per_record < 1e-4 for step in profile.steps.values())


def test_live_aligned_document_reads_without_cost_outliers() -> None:
    # this sample's readings were stale (427 records/s and 49 ms busy on the slow subtask): no cost
    profile = profile_from_flink(_fixture("aligned_no_queues"))
    assert all(step.per_record < 1e-4 for step in profile.steps.values())
    assert profile.in_flight_records == 0  # recorded without queue metrics


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_live_documents_give_the_channels_and_the_write_spread(mode: str) -> None:
    doc = _fixture(mode)
    profile = profile_from_flink(doc)
    sources = doc["vertices"][0]["subtasks"]
    assert all(s["backPressuredTimeMsPerSecond"] > 500 and s["outputQueueSize"] > 0 for s in sources)
    # Flink's records carry a tag and a timestamp: ~25 bytes on the wire for an (int, double)
    assert 24 <= profile.calibrated["record_bytes"] <= 26
    queued = sorted(s["outputQueueSize"] for s in sources)
    assert profile.in_flight_records == pytest.approx((sum(queued) / 2 + 32768) / profile.calibrated["record_bytes"],
                                                      rel=1e-3)
    assert profile.buffer_timeout == pytest.approx(0.1)  # Flink's default, the job sets none
    assert profile.write_latency_max > profile.write_latency  # the subtasks' writes spread


def test_collect_reads_a_rest_endpoint_into_a_document(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import json
    import urllib.request

    from runtime.calibration import flink

    def source(at: int) -> dict:  # cumulative counters grow; the queue gauges move around
        return {"accumulateBusyTimeMs": 150 * at, "numRecordsIn": 0, "numRecordsOut": 30000 * at,
                "numBytesOut": 750000 * at, "accumulateBackPressuredTimeMs": 450 * at,
                "Shuffle.Netty.Output.Buffers.outputQueueSize": [250000, 260000, 240000, 262000, 10][at],
                "Shuffle.Netty.Output.Buffers.outputQueueLength": 11}

    def count(at: int) -> dict:
        return {"accumulateBusyTimeMs": 500 * at, "numRecordsIn": 10000 * at, "numBytesIn": 250000 * at,
                "accumulateIdleTimeMs": 0, "Shuffle.Netty.Input.Buffers.inputQueueLength": 21}

    readings = iter([reading for at in range(flink.GAUGE_READINGS) for reading in (source(at), count(at))])
    sub = subtask(2, 0, 1, 10, 3, 1000)
    answers = {"/jobs/j": {"name": "pv", "vertices": [{"id": "s", "name": "Source: gen", "parallelism": 1},
                                                      {"id": "c", "name": "count", "parallelism": 1}]},
               "/jobs/j/checkpoints": {"history": [{"id": 7, "status": "COMPLETED", "end_to_end_duration": 20,
                                                    "checkpointed_size": 2000, "persisted_data": 0},
                                                   {"id": 6, "status": "FAILED"}]},
               "/jobs/j/checkpoints/details/7/subtasks/s": {"subtasks": [sub]},
               "/jobs/j/checkpoints/details/7/subtasks/c": {"subtasks": [sub]},
               "/jobs/j/jobmanager/config": [{"key": "taskmanager.memory.segment-size", "value": "16 kb"},
                                             {"key": "taskmanager.memory.network.max", "value": "64 mb"}]}
    asked = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        path = url.removeprefix("http://127.0.0.1:1")
        if "/metrics?get=" in path:
            asked.append(path.partition("?get=")[2].split(","))
            return io.BytesIO(json.dumps([{"id": k, "value": str(v)} for k, v in next(readings).items()]).encode())
        return io.BytesIO(json.dumps(answers[path]).encode())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(flink.time, "sleep", lambda s: None)
    clock = iter(float(at) for at in range(flink.GAUGE_READINGS))
    monkeypatch.setattr(flink.time, "monotonic", lambda: next(clock))
    doc = flink.collect_flink_rest("http://127.0.0.1:1", "j", checkpoints=5)
    assert "Shuffle.Netty.Output.Buffers.outputQueueSize" in asked[0] and "numBytesOut" in asked[0]
    assert doc["sources"] == ["Source: gen"] and len(doc["checkpoints"]) == 1
    assert doc["checkpoints"][0]["checkpointed_size"] == 2000 and doc["checkpoints"][0]["persisted_data"] == 0
    gen, counted = doc["vertices"][0]["subtasks"][0], doc["vertices"][1]["subtasks"][0]
    assert gen["numRecordsOutPerSecond"] == 30000 and gen["numBytesOutPerSecond"] == 750000  # over 4 s
    assert gen["backPressuredTimeMsPerSecond"] == 450 and gen["busyTimeMsPerSecond"] == 150
    assert gen["outputQueueSize"] == 250000  # the median reading
    assert counted["busyTimeMsPerSecond"] == 500 and counted["inputQueueLength"] == 21
    assert doc["segment_size"] == 16 * 1024 and doc["buffer_timeout_ms"] == 100.0  # Flink's default
    profile = profile_from_flink(doc)
    assert profile.steps["count"].per_record == pytest.approx(0.5 / 10000)
    assert profile.in_flight_records == 0  # 450 ms/s backpressured: below BACKPRESSURED, no queue term


def test_flink_sizes_and_durations() -> None:
    from runtime.calibration.flink import duration_ms, memory_bytes

    assert memory_bytes("32 kb", 0) == 32768 and memory_bytes("1mb", 0) == 1 << 20 and memory_bytes("4096", 0) == 4096
    assert memory_bytes(None, 7.0) == 7.0
    assert duration_ms("100 ms", 0) == 100 and duration_ms("1 s", 0) == 1000 and duration_ms(None, 100) == 100
    with pytest.raises(ProfileError, match="cannot read '32 lightyears' as a memory size"):
        memory_bytes("32 lightyears", 0)
