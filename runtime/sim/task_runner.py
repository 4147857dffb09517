"""Running the tasks of a `SimExecutor`: each run is an event, one `Task.step()`, whose records
are charged `CostModel` virtual seconds; the task is busy until then.

With `CostModel.cores` the tasks share that many cores (`CostModel.shared_cores`: a job without
rate-limited sources gets them as fast as the work outside the steps leaves them): a task ready
while every core is busy waits for one, FIFO, and so does the control path's CPU for a completed
checkpoint (`CostModel.checkpoint_cpu`). A rate-limited source with
`CostModel.source_pacing` wakes at most once per pacing interval. With `CostModel.step_target` a
task's steps are sized by a `StepPacer` as on Ray, from their time as the shared cores stretch it.
A task with output waiting for a full buffer is flushed after the job's buffer timeout. A task's
wake-ups, flushes and timers fire `CostModel.lateness` after they are due (a Ray process's timers
are late when it shares the machine's cores). Whatever calls into a task (a step, a
flush, a trigger, a notification) fails the task when it raises, as on Ray.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runtime.core.pacing import StepPacer
from runtime.core.task import Task
from runtime.sim.costs import times_of
from vocabulary.handles import TaskId
from vocabulary.task_metrics import StepTimes

if TYPE_CHECKING:
    from runtime.sim.executor import SimExecutor


class ControlWork:
    """CPU work of the control path waiting for a shared core (hashed by identity)."""

    __slots__ = ("cpu",)

    def __init__(self, cpu: float) -> None:
        self.cpu = cpu


class TaskRunner:
    """When each task of one `SimExecutor` steps, and what its steps cost."""

    def __init__(self, sim: SimExecutor) -> None:
        self.sim = sim
        graph, costs = sim.graph, sim.costs
        #: the sources that read at a rate (`CostModel.source_pacing` paces them)
        self._rate_limited = {t for t in sim.source_ids if graph.vertex(t.vertex).is_rate_limited}
        #: each task's `CostModel.step_rates`, asked once per run (a step asks at every run)
        self._step_rates: dict[TaskId, tuple[float, float, float, float, float]] = {}
        self._busy_until: dict[TaskId, float] = {}
        #: the shared cores (None: a core per task) and CPU a task owes for snapshots taken
        #: outside its steps (charged with its next step)
        self._cores = costs.shared_cores(paced=bool(self._rate_limited))
        self._owed_cpu: dict[TaskId, float] = {}
        self._scheduled: set[TaskId] = set()
        #: when each scheduled run is due (a timer callback that came due runs the task earlier)
        self._run_at: dict[TaskId, float] = {}
        #: the times of every run event of each task still in the event queue (a heap per task)
        self._run_times: dict[TaskId, list[float]] = {}
        self._flush_scheduled: set[TaskId] = set()
        #: paced sources with a wake-up due (`CostModel.source_pacing`)
        self._wake_scheduled: set[TaskId] = set()
        #: records each task handled over the run (across attempts: `TaskCrash` after records)
        self._records: dict[TaskId, int] = {}
        #: each deployed task's step sizes (`CostModel.step_target`)
        self._pacers: dict[TaskId, StepPacer] = {}

    def records_handled(self) -> int:
        """Records the tasks handled over the run, every attempt's."""
        return sum(self._records.values())

    def reset(self) -> None:
        """A new deployment: no task is busy, scheduled or owes CPU; the cores are free."""
        self._busy_until.clear()
        self._owed_cpu.clear()
        if self._cores is not None:
            self._cores.reset()
        self._scheduled.clear()
        self._run_times.clear()
        self._flush_scheduled.clear()
        self._wake_scheduled.clear()
        self._pacers.clear()

    def busy_until(self, task_id: TaskId, until: float) -> None:
        """`task_id` takes no step before `until` (a `TaskStall`)."""
        self._busy_until[task_id] = max(self._busy_until.get(task_id, 0.0), until)

    def owe_cpu(self, task_id: TaskId, sync: float, write: float) -> None:
        """CPU `task_id` spent outside a step on a snapshot (its synchronous part and its write),
        charged with its next step."""
        self._owed_cpu[task_id] = self._owed_cpu.get(task_id, 0.0) + sync + write

    # ------------------------------------------------------------------ scheduling runs

    def schedule_run(self, task_id: TaskId, when: float | None = None) -> None:
        if task_id in self._scheduled:
            return
        sim = self.sim
        self._scheduled.add(task_id)
        at = max(when if when is not None else sim.now, self._busy_until.get(task_id, 0.0))
        self._run_at[task_id] = at
        self._push_run(at, task_id)

    def _push_run(self, at: float, task_id: TaskId) -> None:
        heapq.heappush(self._run_times.setdefault(task_id, []), at)
        self.sim.at(at, lambda: self._run_event(task_id), self.sim.epoch, "run")

    def _run_event(self, task_id: TaskId) -> None:
        times = self._run_times.get(task_id)
        if times:
            heapq.heappop(times)  # the queue pops in time order: this run is its task's earliest
        self._run_task(task_id)

    def wake(self, task_id: TaskId) -> None:
        """A callback of the task's timers came due: run it now, even if a run is scheduled for
        later (a rate-limited source waiting for its next record; that run still happens)."""
        sim = self.sim
        if task_id in self._scheduled and self._run_at.get(task_id, sim.now) > sim.now:
            self._push_run(max(sim.now, self._busy_until.get(task_id, 0.0)), task_id)
            return
        self.schedule_run(task_id)

    def _schedule_wake(self, task: Task, task_id: TaskId) -> None:
        """A paced source (`CostModel.source_pacing`, as on Ray): a wake-up when its next record
        is due, at the earliest `source_pacing` after this step began (with the flush timer the
        step set: the records read then go with the buffer it flushes). Returned credits still run
        it at once, as mail drives a Ray task whatever its wake-up timer."""
        if task_id in self._wake_scheduled:
            return
        sim = self.sim
        self._wake_scheduled.add(task_id)
        ready = task.next_ready_time()
        at = max(ready if ready is not None else sim.now, sim.now + sim.costs.source_pacing) + sim.costs.lateness(task_id)

        def wake() -> None:
            self._wake_scheduled.discard(task_id)
            self.schedule_run(task_id)

        sim.at(at, wake, sim.epoch, "wake")

    # ------------------------------------------------------------------ steps

    def _run_task(self, task_id: TaskId) -> None:
        sim = self.sim
        self._scheduled.discard(task_id)
        task = sim.tasks.get(task_id)
        if task is None:
            return
        busy = self._busy_until.get(task_id, 0.0)
        if busy > sim.now:
            times = self._run_times.get(task_id)
            if times and times[0] <= busy:
                # another run of the task comes by then and steps it: a second one would chase
                # the task's busy time for ever, and every timer that wakes the task adds one
                self._scheduled.add(task_id)
                self._run_at[task_id] = times[0]
                return
            self.schedule_run(task_id, busy)
            return
        cores = self._cores
        if cores is not None and not cores.free(sim.now):
            cores.wait(task_id)  # ready, no core: `_core_freed` runs it (no other run meanwhile)
            self._scheduled.add(task_id)
            return
        pacer = self._pacer(task_id, task) if sim.costs.step_target > 0 else None
        records_out = task.records_out
        try:
            handled = task.step()
        except Exception as exc:  # a user function or protocol error: the task fails
            sim.master.task_failed(task_id, exc)
            return
        emitted = task.records_out - records_out
        sim.channels.send_outputs(task_id)
        rates = self._step_rates.get(task_id)
        if rates is None:
            rates = self._step_rates[task_id] = sim.costs.step_rates(task_id)
        cpu, wait = times_of(rates, handled, emitted)
        self._step_times(task_id).add(handled, cpu, cpu + wait, emitted)
        if pacer is not None and handled:
            pacer.measured(handled, cpu * (cores.sharing(sim.now) if cores is not None else 1.0) + wait)
            task.records_per_step = self._step_limit(task, pacer)
        owed = self._owed_cpu.pop(task_id, 0.0)
        cpu += owed if cores is None else cores.displaced(owed)
        held = cpu
        if cores is not None:
            held = cores.held(cpu)
            sim.at(cores.occupy(sim.now, cpu), self._core_freed, sim.epoch, "cpu")
        self._busy_until[task_id] = sim.now + held + wait
        faults = sim.fault_actions
        if handled:
            sim.metrics.records_in += handled if task.is_source else 0
            records = self._records[task_id] = self._records.get(task_id, 0) + handled
            if faults.check_crash(task_id, records, task.input_ended):
                return
            if task.is_source:
                faults.check_progress()
        elif task.input_ended and faults.check_crash(task_id, self._records.get(task_id, 0), input_ended=True):
            return
        if task.has_work():
            if sim.costs.source_pacing > 0 and task_id in self._rate_limited:
                self._schedule_wake(task, task_id)
            else:
                ready = task.next_ready_time() if (task.is_source and handled == 0) else None
                self.schedule_run(task_id, ready)
        if task.pending_output() and task_id not in self._flush_scheduled:
            self._flush_scheduled.add(task_id)
            sim.at(sim.now + sim.graph.buffer_timeout + sim.costs.lateness(task_id), lambda: self._flush(task_id),
                   sim.epoch, "flush")
        if task.is_finished:
            self.check_done()

    def _pacer(self, task_id: TaskId, task: Task) -> StepPacer:
        """`task_id`'s pacer, new (one record a step until measured) for each deployment."""
        pacer = self._pacers.get(task_id)
        if pacer is None:
            pacer = self._pacers[task_id] = StepPacer(self.sim.graph.buffer_size, self.sim.costs.step_target)
            task.records_per_step = self._step_limit(task, pacer)
        return pacer

    def _step_limit(self, task: Task, pacer: StepPacer) -> int | None:
        """The pacer's limit, within `CostModel.records_per_step` (of input buffers)."""
        fixed = None if task.is_source else self.sim.costs.records_per_step
        limits = [limit for limit in (pacer.limit(), fixed) if limit is not None]
        return min(limits) if limits else None

    def into_task(self, task_id: TaskId, call: Callable[[], Any]) -> bool:
        """`call()`, a call into task `task_id` (user functions and sinks run in it: a flush, a
        trigger's snapshot, a notification); an exception fails the task. Whether it returned."""
        try:
            call()
        except Exception as exc:
            self.sim.master.task_failed(task_id, exc)
            return False
        return True

    def _step_times(self, task_id: TaskId) -> StepTimes:
        tasks = self.sim.metrics.tasks
        name = str(task_id)
        times = tasks.get(name)
        if times is None:
            times = tasks[name] = StepTimes()
        return times

    def _flush(self, task_id: TaskId) -> None:
        self._flush_scheduled.discard(task_id)
        task = self.sim.tasks.get(task_id)
        if task is not None and self.into_task(task_id, task.flush):
            self.sim.channels.send_outputs(task_id)

    def check_done(self) -> None:
        sim = self.sim
        if sim.tasks and all(t.is_finished for t in sim.tasks.values()):
            sim.master.job_finished()
            sim.trace_event("finished")

    # ------------------------------------------------------------------ shared cores

    def _core_freed(self) -> None:
        """A core freed: the tasks that waited longest take the free cores."""
        sim = self.sim
        cores = self._cores
        while cores is not None and cores.free(sim.now):
            task_id = cores.next_waiting()
            if task_id is None:
                return
            if isinstance(task_id, ControlWork):
                sim.at(cores.occupy(sim.now, task_id.cpu), self._core_freed, sim.epoch, "cpu")
            else:
                self._run_task(task_id)  # type: ignore[arg-type]

    def charge_checkpoint_cpu(self) -> None:
        """The control path's CPU for a completed checkpoint (`CostModel.checkpoint_cpu`): it
        takes a core when one is free, else queues with the ready tasks (FIFO, as they do: a
        control path busier than its share cannot starve the job)."""
        sim = self.sim
        cpu = sim.costs.checkpoint_cpu
        if cpu <= 0:
            return
        sim.metrics.service_cpu["control"] = sim.metrics.service_cpu.get("control", 0.0) + cpu
        cores = self._cores
        if cores is None:
            return
        cpu = cores.displaced(cpu)
        if cores.free(sim.now):
            sim.at(cores.occupy(sim.now, cpu), self._core_freed, sim.epoch, "cpu")
        else:
            cores.wait(ControlWork(cpu))

    def control_waiting(self) -> int:
        """Control-path CPU slices waiting for a shared core now."""
        cores = self._cores
        return sum(isinstance(w, ControlWork) for w in cores.queued()) if cores is not None else 0
