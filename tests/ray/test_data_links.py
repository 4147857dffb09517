"""Data calls between workers over sockets (`data_transport="socket"`, `runtime.ray.data_links`):
a worker's inbox delivers whole frames in order and only to whoever holds its token; on Ray every
data call between workers goes as a frame, and a job commits every record once through a crash
that kills a worker its peers were sending to, and again on the workers it leaves; the tasks'
reports to the coordinator and its triggers to them go as frames too."""

from __future__ import annotations

import pickle
import socket
import struct
import threading
import time

import pytest
from ray_jobs import expected_counts, pageview_env, pageview_rows

from runtime import FaultPlan, TaskCrash
from runtime.jobmaster.result import CONTROL_FRAMES, CONTROL_ITEM, DATA_FRAMES
from runtime.ray.data_links import DataInbox, _send_frame
from runtime.workloads.seeded import multiset


def _frame(call: object) -> bytes:
    body = pickle.dumps(call, protocol=5)
    return struct.pack("!I", len(body)) + body


def _inbox() -> tuple[DataInbox, list[object], threading.Event]:
    got: list[object] = []
    arrived = threading.Event()

    def deliver(call: object) -> None:
        got.append(call)
        arrived.set()

    return DataInbox(deliver, "127.0.0.1"), got, arrived


def _wait_closed(sock: socket.socket) -> bool:
    """Whether the inbox closed the connection (within 5 s)."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_inbox_delivers_the_frames_of_a_connection_with_its_token_whole_and_in_order() -> None:
    inbox, got, _ = _inbox()
    try:
        calls = [("count[0]", "push", (7, 0, seq, [b"x" * (seq * 1000)])) for seq in range(50)]
        with socket.create_connection(inbox.address) as sock:
            stream = inbox.token + b"".join(_frame(c) for c in calls)
            for i in range(0, len(stream), 997):  # frames cut anywhere arrive whole
                sock.sendall(stream[i:i + 997])
            deadline = time.monotonic() + 10
            while len(got) < len(calls) and time.monotonic() < deadline:
                time.sleep(0.01)
        assert got == calls and inbox.frames == len(calls)
    finally:
        inbox.close()


def test_a_connection_without_the_token_is_closed_and_delivers_nothing() -> None:
    inbox, got, _ = _inbox()
    try:
        with socket.create_connection(inbox.address) as sock:
            sock.sendall(b"\0" * 32 + _frame(("count[0]", "push", (7, 0, 0, []))))
            assert _wait_closed(sock), "the inbox kept a connection that did not send its token"
        with socket.create_connection(inbox.address) as sock:
            sock.sendall(inbox.token[:10])  # a token cut short, then the sender goes away
        time.sleep(0.2)
        assert got == [] and inbox.frames == 0
    finally:
        inbox.close()


def test_a_frame_cut_short_by_a_dying_sender_is_not_delivered_and_what_came_before_is() -> None:
    inbox, got, arrived = _inbox()
    try:
        whole, cut = _frame(("count[0]", "push", (7, 0, 0, []))), _frame(("count[0]", "push", (7, 0, 1, [])))
        with socket.create_connection(inbox.address) as sock:
            sock.sendall(inbox.token + whole + cut[:len(cut) // 2])
        assert arrived.wait(5)
        time.sleep(0.2)
        assert got == [("count[0]", "push", (7, 0, 0, []))]
    finally:
        inbox.close()


class _ShortWrites:
    """A socket whose every write takes at most `most` bytes, as a full send buffer may."""

    def __init__(self, most: int) -> None:
        self.most, self.written = most, bytearray()

    def sendmsg(self, buffers: tuple[bytes, ...]) -> int:
        return self.send(b"".join(buffers))

    def send(self, data: bytes) -> int:
        self.written += bytes(data[:self.most])
        return min(len(data), self.most)

    def sendall(self, data: bytes) -> None:
        data = memoryview(data)
        while data:
            data = data[self.send(data):]


@pytest.mark.parametrize("most", [1, 3, 4, 5, 1000, 10**6])
def test_a_frame_written_in_pieces_arrives_whole_after_its_header(most: int) -> None:
    sock, frame = _ShortWrites(most), b"".join(bytes([i % 251]) for i in range(3000))
    _send_frame(sock, struct.pack("!I", len(frame)), frame)  # type: ignore[arg-type]
    assert bytes(sock.written) == struct.pack("!I", len(frame)) + frame


def test_an_unknown_data_transport_is_named() -> None:
    with pytest.raises(ValueError, match="data_transport must be one of 'ray', 'socket', got 'tcp'"):
        pageview_env(pageview_rows(10)).execute("bad-transport", executor="ray", data_transport="tcp")


@pytest.mark.ray
def test_every_data_call_between_workers_goes_as_a_frame_and_a_crash_loses_or_repeats_nothing(no_idle_workers) -> None:
    rows = pageview_rows(4_000)
    first = pageview_env(rows).execute("sockets-1", executor="ray")  # sockets: the default
    # the second job runs on the workers the first left (their inboxes stay open), and a crash
    # kills the worker of count[1], which the other worker was sending to
    crash = FaultPlan.of(TaskCrash(task="count[1]", after_records=900))
    second = pageview_env(rows).execute("sockets-2", executor="ray", data_transport="socket", faults=crash)
    assert first.restarts == 0 and second.restarts == 1, (first.failures, second.failures)
    for result in (first, second):
        assert multiset(result.output("pv")) == expected_counts(rows), "a record committed twice or lost"
        calls = result.metrics.worker_calls
        assert len(calls) == 2, calls
        for worker, received in calls.items():
            data = received.get("push", 0) + received.get("add_credits", 0)
            assert data > 0 and received.get(DATA_FRAMES) == data, f"{worker}: a data call went through Ray: {received}"
        # the tasks' reports (acknowledgements, "source finished") come to the coordinator as frames
        coordinator = result.metrics.coordinator_calls
        assert coordinator["report"] > 0 and coordinator["report frames"] == coordinator["report"], coordinator
        # and the coordinator's triggers come to the workers as frames; its notifications, which
        # it waits for, as Ray calls
        triggers = sum(received.get(CONTROL_ITEM + "trigger_source", 0) for received in calls.values())
        assert triggers > 0 and coordinator["control frames"] > 0, coordinator
        received_frames = sum(received.get(CONTROL_FRAMES, 0) for received in calls.values())
        # (the crashed worker's count goes with it, and what was sent to it while it died is dropped)
        assert 0 < received_frames <= coordinator["control frames"], (received_frames, coordinator)
    assert sum(r.get(CONTROL_FRAMES, 0) for r in first.metrics.worker_calls.values()) == \
        first.metrics.coordinator_calls["control frames"], first.metrics.worker_calls


@pytest.mark.ray
def test_with_ray_calls_as_the_data_transport_no_data_call_goes_as_a_frame(no_idle_workers) -> None:
    rows = pageview_rows(2_000)
    result = pageview_env(rows).execute("ray-calls", executor="ray", data_transport="ray")
    assert multiset(result.output("pv")) == expected_counts(rows)
    for worker, received in result.metrics.worker_calls.items():
        assert received.get("push", 0) > 0 and DATA_FRAMES not in received, f"{worker}: {received}"
    coordinator = result.metrics.coordinator_calls
    assert coordinator["report"] > 0 and "report frames" not in coordinator and "control frames" not in coordinator


class _Answer:
    def __init__(self, answer: object) -> None:
        self.answer = answer

    def remote(self) -> object:
        return self.answer


class _Actor:
    """An actor handle whose `data_address.remote()` "ref" is what `ray.get` is told to answer."""

    def __init__(self) -> None:
        self.data_address = _Answer("address")


def test_a_link_to_a_worker_slow_to_tell_its_address_raises_rather_than_drop_what_is_sent(monkeypatch) -> None:
    """A live worker that does not answer in time (a busy or starting process) must not lose the
    frames sent meanwhile: a channel's last frame has no later one to show the gap."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    from runtime.ray.data_links import DataLink, DataLinkError

    inbox, got, arrived = _inbox()
    answers: list[object] = [GetTimeoutError("not ready"), (*inbox.address, inbox.token)]

    def get(ref: object, timeout: float | None = None) -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(ray, "get", get)
    link = DataLink(_Actor())
    with pytest.raises(DataLinkError, match="did not tell its data address"):
        link.send(("count[0]", "push", ("end of partition",)))
    link.send(("count[0]", "push", ("end of partition",)))  # answered now: no reconnect delay
    assert arrived.wait(5) and got == [("count[0]", "push", ("end of partition",))]

    # a worker that died: what is sent to it is dropped, as a Ray call to it is, and nothing raises
    answers[:] = [RayActorError()]
    dead = DataLink(_Actor())
    dead.send(("count[1]", "push", ("end of partition",)))
    assert got == [("count[0]", "push", ("end of partition",))]
    inbox.close()
