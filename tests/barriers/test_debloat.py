"""`vocabulary.debloat`: the throughput meter and the buffer size a task announces (pure, time injected)."""

from __future__ import annotations

import pytest

from runtime import StreamEnvironment
from vocabulary.debloat import (
    BufferDebloatConfig,
    BufferDebloater,
    BufferDebloatError,
    ThroughputMeter,
)


def test_idle_time_is_not_throughput() -> None:
    meter = ThroughputMeter()
    meter.consumed(100, now=0.0)
    meter.idle(now=0.01)  # 100 records in 10 ms of work
    meter.consumed(100, now=1.0)  # then idle for ~1 s: not counted
    assert meter.rate(now=1.01) == pytest.approx(200 / 0.02)
    assert meter.rate(now=1.01) == pytest.approx(200 / 0.02)  # nothing measured since: the last rate


def test_size_converges_to_target_times_throughput_over_the_buffers() -> None:
    config = BufferDebloatConfig(target=0.01, period=0.01, samples=10)
    debloater = BufferDebloater(config, max_buffer_size=256, num_buffers=16)
    announced = []
    now = 0.0
    for _ in range(400):  # 24,000 records/s, always busy
        now += 0.001
        size = debloater.consumed(24, now)
        if size is not None:
            announced.append(size)
    # 24,000/s x 10 ms = 240 records over 16 buffers = 15 per buffer (within the 25 % threshold)
    assert 12 <= debloater.buffer_size <= 19
    assert announced == sorted(announced, reverse=True) and announced[0] < 256
    # each announced change is at least 25 % of the previous size
    assert all(b <= 0.75 * a + 1 for a, b in zip([256, *announced], announced))


def test_size_grows_back_when_throughput_rises_and_stays_within_bounds() -> None:
    debloater = BufferDebloater(BufferDebloatConfig(samples=2, min_buffer_size=4), max_buffer_size=100, num_buffers=4)
    for _ in range(20):
        debloater.recalculate(throughput=10.0)
    assert debloater.buffer_size == 4  # the minimum
    sizes = [debloater.recalculate(throughput=1e9) for _ in range(20)]
    assert debloater.buffer_size == 100  # the job's buffer size is the upper bound
    grown = [s for s in sizes if s is not None]
    assert all(b <= 2 * a for a, b in zip([4, *grown], grown))  # at most doubling per step


def test_bad_options_name_the_option() -> None:
    with pytest.raises(BufferDebloatError, match="target must be a number of seconds > 0, got 0"):
        BufferDebloatConfig(target=0).validate()
    with pytest.raises(BufferDebloatError, match="min_buffer_size must be an integer >= 1"):
        StreamEnvironment().set_buffer_debloating(min_buffer_size=0)
    with pytest.raises(BufferDebloatError, match="threshold must be a fraction"):
        StreamEnvironment().set_buffer_debloating(threshold=1.5)
    env = StreamEnvironment().set_buffer_debloating(target=0.02)
    assert env.buffer_debloat == BufferDebloatConfig(target=0.02)
    assert env.set_buffer_debloating(False).buffer_debloat is None
