"""`OutputChannels` (no Ray needed: the receivers are stand-ins recording their pushes)."""

from __future__ import annotations

import time

import pytest

from runtime.ray.channels import OutputChannels


class _Push:
    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name

    def remote(self, epoch: int, channel: int, seq: int, payloads: list) -> None:
        self.log.append((self.name, epoch, channel, seq, list(payloads)))


class _Receiver:
    local = False

    def __init__(self, log: list, name: str) -> None:
        self.push = _Push(log, name)


def test_a_delayed_link_holds_each_batch_and_sends_in_order_when_due() -> None:
    log: list = []
    timers: list = []
    routes = {0: (_Receiver(log, "a"), 3), 1: (_Receiver(log, "b"), 0)}
    out = OutputChannels(routes, epoch=2, delay=0.05, schedule=lambda d, cb: timers.append((d, cb)))
    out.send([(0, "x1"), (1, "y1"), (0, "x2")])
    out.send([(0, "x3")])
    assert log == [] and [d for d, _ in timers] == [0.05]  # one timer for the oldest batch
    time.sleep(0.06)
    timers.pop()[1]()
    assert log == [("a", 2, 3, 0, ["x1", "x2"]), ("b", 2, 0, 0, ["y1"]), ("a", 2, 3, 2, ["x3"])]
    assert timers == []


def test_a_batch_not_yet_due_waits_for_the_next_timer() -> None:
    log: list = []
    timers: list = []
    out = OutputChannels({0: (_Receiver(log, "a"), 0)}, epoch=0, delay=0.2,
                         schedule=lambda d, cb: timers.append((d, cb)))
    out.send([(0, "first")])
    time.sleep(0.21)
    out.send([(0, "second")])  # due 0.2 s from now
    timers.pop()[1]()
    assert [entry[4] for entry in log] == [["first"]]
    (delay, release), = timers
    assert 0.15 < delay <= 0.2
    with pytest.raises(ValueError, match="a delay needs a schedule function"):
        OutputChannels({}, epoch=0, delay=0.1)


def test_without_a_delay_sends_at_once() -> None:
    log: list = []
    out = OutputChannels({0: (_Receiver(log, "a"), 1)}, epoch=0)
    out.send([(0, "p")])
    assert log == [("a", 0, 1, 0, ["p"])] and out.calls == 1


class _Credits:
    def __init__(self, log: list) -> None:
        self.log = log

    def remote(self, epoch: int, credits: dict, buffer_size: int | None) -> None:
        self.log.append((epoch, credits, buffer_size))


class _Sender:
    local = False

    def __init__(self, log: list) -> None:
        self.add_credits = _Credits(log)


def test_returned_credits_carry_the_buffer_size_the_receiver_asks_for() -> None:
    from runtime.ray.channels import InputChannels

    log: list = []
    sender = _Sender(log)
    inputs = InputChannels({0: ("up[0]", sender, 1), 1: ("up[0]", sender, 2)}, "down[0]", epoch=3, threshold=2)
    inputs.consumed(0)
    inputs.return_credits(17)
    assert log == []  # below the threshold
    inputs.consumed(0)
    inputs.consumed(1)
    inputs.return_credits(17)
    assert log == [(3, {1: 2, 2: 1}, 17)]


def test_a_delay_spike_holds_one_channel_fifo_and_leaves_the_others_alone() -> None:
    """`ChannelDelay` on Ray: what is sent on the spiked channel in its window waits `extra` s,
    what follows on it queues behind (FIFO, contiguous sequence numbers); another channel and
    what is sent after the window go at once."""
    log: list = []
    timers: list = []
    routes = {0: (_Receiver(log, "a"), 0), 1: (_Receiver(log, "b"), 0)}
    out = OutputChannels(routes, epoch=0, schedule=lambda d, cb: timers.append((d, cb)))
    now = time.time()
    out.spike(0, now, now + 0.05, 0.1)
    out.send([(0, "a1"), (1, "b1")])
    assert log == [("b", 0, 0, 0, ["b1"])]  # channel 1 not affected
    time.sleep(0.06)  # the window is over: a2 is not delayed itself, but queues behind a1
    out.send([(0, "a2"), (1, "b2")])
    assert log[-1] == ("b", 0, 0, 1, ["b2"]) and all(entry[0] == "b" for entry in log)
    time.sleep(0.05)
    for _, release in list(timers):
        release()
    assert [entry for entry in log if entry[0] == "a"] == [("a", 0, 0, 0, ["a1"]), ("a", 0, 0, 1, ["a2"])]
