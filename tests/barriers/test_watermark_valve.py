"""`StatusWatermarkValve`: Flink's rules, one scripted test each, and random inputs against a
reference model that derives alignment instead of keeping it (an active channel counts once its
watermark reached the last output)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.core.watermark_valve import StatusWatermarkValve
from runtime.records.messages import Watermark, WatermarkStatus

IDLE, ACTIVE = WatermarkStatus(True), WatermarkStatus(False)


def W(t: float) -> Watermark:  # noqa: N802 - reads like the event
    return Watermark(t)


def test_nothing_is_output_before_every_channel_delivered_a_watermark():
    valve = StatusWatermarkValve(3)
    assert valve.input_watermark(0, 5) == []
    assert valve.input_watermark(2, 7) == []
    assert valve.input_watermark(1, 6) == [W(5)]


def test_the_minimum_never_goes_backwards_and_lower_watermarks_are_ignored():
    valve = StatusWatermarkValve(2)
    valve.input_watermark(0, 5)
    assert valve.input_watermark(1, 8) == [W(5)]
    assert valve.input_watermark(0, 3) == []  # below the channel's own: ignored
    assert valve.input_watermark(0, 9) == [W(8)]
    assert valve.input_watermark(1, 8) == []
    assert valve.last_output == 8


def test_an_idle_channel_leaves_the_minimum():
    valve = StatusWatermarkValve(2)
    valve.input_watermark(0, 10)
    assert valve.input_status(1, IDLE) == [W(10)]
    assert valve.input_watermark(1, 50) == []  # watermarks of an idle channel are ignored
    assert valve.input_watermark(0, 12) == [W(12)]


def test_a_channel_back_from_idle_counts_once_it_caught_up():
    valve = StatusWatermarkValve(2)
    valve.input_watermark(0, 3)
    valve.input_watermark(1, 3)
    valve.input_status(1, IDLE)
    valve.input_watermark(0, 20)
    assert valve.input_status(1, ACTIVE) == []
    assert valve.input_watermark(0, 25) == [W(25)]  # channel 1 (at 3) does not pull it back
    assert valve.input_watermark(1, 24) == []  # still behind: not aligned yet
    assert valve.input_watermark(1, 30) == []  # aligned now; the minimum is channel 0's 25
    assert valve.input_watermark(0, 40) == [W(30)]


def test_all_idle_flushes_the_maximum_then_goes_idle_and_active_again():
    valve = StatusWatermarkValve(2)
    valve.input_watermark(0, 4)
    valve.input_watermark(1, 9)
    assert valve.input_status(1, IDLE) == []  # it did not hold the minimum back
    assert valve.input_status(0, IDLE) == [W(9), IDLE]
    assert valve.input_watermark(0, 50) == []  # the whole valve is idle
    assert valve.input_status(0, ACTIVE) == [ACTIVE]
    assert valve.input_watermark(0, 50) == [W(50)]


def test_an_ended_channel_counts_as_plus_infinity():
    valve = StatusWatermarkValve(2)
    valve.input_watermark(0, 7)
    assert valve.end_of_partition(1) == [W(7)]
    assert valve.end_of_partition(0) == [W(math.inf)]


def test_bad_channel_count_is_refused():
    with pytest.raises(ValueError, match="num_channels"):
        StatusWatermarkValve(0)


class Model:
    """The valve's rules with alignment derived: an active channel whose watermark is at or above
    the last output is in the minimum."""

    def __init__(self, n: int) -> None:
        self.wm = [-math.inf] * n
        self.idle = [False] * n
        self.last = -math.inf
        self.valve_idle = False

    def _minimum(self) -> list:
        candidates = [w for w, idle in zip(self.wm, self.idle) if not idle and w >= self.last]
        if candidates and min(candidates) > self.last:
            self.last = min(candidates)
            return [W(self.last)]
        return []

    def watermark(self, ch: int, t: float) -> list:
        if self.valve_idle or self.idle[ch] or t <= self.wm[ch]:
            return []
        self.wm[ch] = t
        return self._minimum()

    def status(self, ch: int, idle: bool) -> list:
        if idle and not self.idle[ch]:
            was_holding = self.wm[ch] == self.last
            self.idle[ch] = True
            if all(self.idle):
                out = []
                if was_holding and max(self.wm) > self.last:
                    self.last = max(self.wm)
                    out.append(W(self.last))
                self.valve_idle = True
                return [*out, IDLE]
            return self._minimum() if was_holding else []
        if not idle and self.idle[ch]:
            self.idle[ch] = False
            if self.valve_idle:
                self.valve_idle = False
                return [ACTIVE]
        return []


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("wm"), st.integers(0, 3), st.integers(-5, 40)),
        st.tuples(st.just("status"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("end"), st.integers(0, 3), st.just(0)),
    ),
    max_size=60,
)


@pytest.mark.slow
@settings(max_examples=300)
@given(n=st.integers(1, 4), ops=_OPS)
def test_valve_agrees_with_the_reference_model(n, ops):
    valve, model = StatusWatermarkValve(n), Model(n)
    emitted: list[float] = []
    for kind, ch, value in ops:
        ch %= n
        if kind == "wm":
            got, want = valve.input_watermark(ch, value), model.watermark(ch, value)
        elif kind == "status":
            got, want = valve.input_status(ch, WatermarkStatus(value)), model.status(ch, value)
        else:
            got = valve.end_of_partition(ch)
            want = model.status(ch, False) + model.watermark(ch, math.inf)
        assert got == want, (kind, ch, value)
        emitted += [e.timestamp for e in got if isinstance(e, Watermark)]
    assert emitted == sorted(set(emitted)), "watermarks went backwards or repeated"


@settings(max_examples=200)
@given(n=st.integers(1, 4), ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30)), max_size=40))
def test_without_idleness_the_output_is_every_rise_of_the_minimum(n, ops):
    valve = StatusWatermarkValve(n)
    highest = [-math.inf] * n
    last = -math.inf
    for ch, t in ops:
        ch %= n
        out = valve.input_watermark(ch, t)
        highest[ch] = max(highest[ch], t)
        expected = [W(min(highest))] if min(highest) > last else []
        assert out == expected
        last = max(last, min(highest))


def test_an_operator_with_two_inputs_gets_the_lower_of_their_watermarks():
    from runtime.core.task_time import TaskTime
    from vocabulary.ports import ManualClock, ManualTimers

    clock = ManualClock()
    # channels 0 and 1 feed input 0, channel 2 input 1 (`JobEdge.input_index`)
    time = TaskTime(clock, ManualTimers(clock), lambda: None, channel_inputs=[0, 0, 1], watermarks=True,
                    interval=0.2)
    assert time.on_input(0, W(5)) == [] and time.on_input(1, W(7)) == []  # input 1 has none yet
    assert time.on_input(2, W(3)) == [W(3)]
    assert time.on_input(2, W(9)) == [W(5)]
    assert time.on_input(2, IDLE) == []  # input 1 idle: input 0 (at 5) alone
    assert time.on_input(0, W(20)) == [W(7)] and time.on_input(1, W(20)) == [W(20)]
    assert time.on_input(0, IDLE) == [] and time.on_input(1, IDLE) == [IDLE]  # both inputs idle
    assert time.on_input(2, ACTIVE) == [ACTIVE]
