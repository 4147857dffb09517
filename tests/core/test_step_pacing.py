"""`StepPacer`: how many records a task actor's next step takes, so a step lasts about
`STEP_TARGET` of wall time whatever a record costs (plain Python: no Ray needed).

What the actor relies on: before it knows what a record costs, a step takes one record (a first
buffer of slow records as one step would hold the task's lock 51 s for 256 records of 0.2 s);
a slow function keeps steps at one record; a cheap one gets whole buffers; the cost is a decaying
average, so one cheap step among slow ones does not let the next take a buffer."""

from __future__ import annotations

from runtime.core.pacing import STEP_TARGET, StepPacer

BUFFER = 256


def test_a_fresh_pacer_takes_one_record_per_step() -> None:
    assert StepPacer(BUFFER).limit() == 1


def test_slow_records_go_one_per_step_cheap_ones_in_whole_buffers() -> None:
    slow = StepPacer(BUFFER)
    for _ in range(20):
        slow.measured(records=1, seconds=1.0)  # a 1 s/record function
        assert slow.limit() == 1
    cheap = StepPacer(BUFFER)
    records = 1
    for _ in range(10):
        cheap.measured(records=records, seconds=records * 2e-6)  # 2 us a record
        records = cheap.limit() or BUFFER
    assert cheap.limit() is None  # no limit: whole buffers


def test_steps_are_sized_to_the_target_in_between() -> None:
    pacer = StepPacer(BUFFER)
    for _ in range(30):
        pacer.measured(records=4, seconds=4 * 1e-4)  # 0.1 ms a record
    assert pacer.limit() == round(STEP_TARGET / 1e-4)


def test_one_cheap_step_among_slow_ones_does_not_open_the_gate() -> None:
    pacer = StepPacer(BUFFER)
    for _ in range(10):
        pacer.measured(records=1, seconds=0.2)
    pacer.measured(records=1, seconds=1e-6)  # a cache hit between model calls
    assert pacer.limit() == 1


def test_zero_records_measure_nothing() -> None:
    pacer = StepPacer(BUFFER)
    pacer.measured(records=0, seconds=5.0)  # an event, a barrier: no record to price
    assert pacer.limit() == 1
