"""`CostProfile`: the simulator's cost model as a JSON file a person can read and edit.

Every number is in seconds (or seconds per record / per byte) and was measured by `barrierflow
calibrate` (`runtime.calibration.fit`) unless someone edited it. Layout:

    {"format": "barrierflow-profile/1",
     "calibrated": {...what was run, where, and the machine's load...},
     "cores": 2,
     "steps": {"default": {"per_step": s, "per_record": s, "wait_per_record": s,
                           "per_emitted": s, "timer_lateness": s},
               "count[1]": {...}, ...},                  # a task or vertex name -> its own costs
     "transport": {"latency_min": s, "latency_max": s},  # one data call, sender to receiver
     "control": {"trigger_delay": s, "trigger_delay_quantiles": [s, ...], "ack_delay": s,
                 "ack_delay_quantiles": [s, ...], "finalize": s, "checkpoint_cpu": s},
     "snapshot": {"sync_latency": s, "sync_per_byte": s, "write_latency": s, "write_latency_max": s,
                  "write_per_byte": s,                  # write_latency_max 0: every write write_latency
                  "write_cpu": s, "write_cpu_per_byte": s},  # the write's CPU, taken from its task
     "channels": {"in_flight_records": n, "buffer_timeout": s, "source_pacing": s, "step_target": s},
     "machine": {"machine_cores": n, "background_cores": n, "saturated_background_cores": n}}

`channels` is what a backpressured channel holds ahead of an aligned barrier (records) and the
job's buffer timeout; 0 = not measured (a prediction keeps the job's own network settings). A
profile read from Flink has them (`runtime.calibration.flink`); `runtime.calibration.predict`
turns them into the simulator's buffers. `source_pacing`: a rate-limited source reads at most
once per this long (`CostModel.source_pacing`; a Ray calibration sets the job's buffer timeout,
Ray's sources wake no more often; 0: whenever a record is due, as the simulator's own).
A `steps` entry's `timer_lateness`: its task's timers fire this long after they are due (measured
on Ray; 0: when due). `step_target`: a task's steps are sized to last about this long, as the Ray executor sizes them
(`CostModel.step_target`; a Ray calibration sets Ray's target; 0: whole buffers, as the
simulator's own).

`machine` is the machine the calibration ran on: its cores and the cores' worth of CPU its tasks
spent outside their steps (on Ray: call handling), in the rate-limited calibration run
(`background_cores`) and in the full-speed one (`saturated_background_cores`; 0: not measured,
the rate-limited run's). `cores` is what is left for the steps in the rate-limited run, rounded;
a prediction of the job at full speed gives the steps what the full-speed work leaves of the
machine, as cores slowed by that work (`CostModel.shared_cores`). A step's elapsed time, which
sizes paced steps, is reckoned on the whole machine, where the work outside the steps wants the
cores too (`CostModel.machine_cores`, `background_cores`; 0: the steps' `cores` and no such work).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.sim.costs import StepCost

FORMAT = "barrierflow-profile/1"

#: JSON group -> the `CostProfile` fields it holds (all numbers >= 0)
GROUPS: dict[str, tuple[str, ...]] = {
    "transport": ("latency_min", "latency_max"),
    "control": ("trigger_delay", "trigger_delay_quantiles", "ack_delay", "ack_delay_quantiles", "finalize",
                "checkpoint_cpu"),
    "snapshot": ("sync_latency", "sync_per_byte", "write_latency", "write_latency_max", "write_per_byte",
                 "write_cpu", "write_cpu_per_byte"),
    "channels": ("in_flight_records", "buffer_timeout", "source_pacing", "step_target"),
    "machine": ("machine_cores", "background_cores", "saturated_background_cores"),
}
STEP_FIELDS = ("per_step", "per_record", "wait_per_record", "per_emitted", "timer_lateness")
#: fields that hold a list of seconds (ascending) rather than one number
LIST_FIELDS = frozenset({"trigger_delay_quantiles", "ack_delay_quantiles"})


class ProfileError(ValueError):
    """A profile file or document that cannot be read; the message names the file and field."""


@dataclass
class CostProfile:
    """The cost model terms (see the module docstring for units and the JSON layout)."""

    steps: dict[str, StepCost] = field(default_factory=lambda: {"default": StepCost(2e-5, 2e-6)})
    cores: int | None = None
    latency_min: float = 0.0002
    latency_max: float = 0.002
    trigger_delay: float = 0.0005
    ack_delay: float = 0.0005
    #: the acknowledgement delay's 0th..100th percentiles at equal steps (empty: always
    #: `ack_delay`); a prediction draws each acknowledgement's delay from them
    ack_delay_quantiles: list[float] = field(default_factory=list)
    #: the same for a source's trigger delay (empty: always `trigger_delay`)
    trigger_delay_quantiles: list[float] = field(default_factory=list)
    #: coordinator time from the last acknowledgement to the completed checkpoint (metadata
    #: write): the simulated coordinator completes at once, so predictions add it to durations
    finalize: float = 0.0
    #: CPU of the control path (coordinator, committer) per completed checkpoint, taken from the
    #: cores the tasks share when the checkpoint completes (`CostModel.checkpoint_cpu`)
    checkpoint_cpu: float = 0.0
    sync_latency: float = 0.0
    sync_per_byte: float = 0.0
    write_latency: float = 0.002
    write_per_byte: float = 1 / 200e6
    #: above `write_latency`: each write's latency is uniform between the two (0: fixed)
    write_latency_max: float = 0.0
    #: CPU of a write (serialising and writing), fixed and per byte (`CostModel.write_cpu`)
    write_cpu: float = 0.0
    write_cpu_per_byte: float = 0.0
    #: records a backpressured channel holds ahead of an aligned barrier (0: not measured)
    in_flight_records: float = 0.0
    #: the job's buffer timeout in seconds (0: not measured)
    buffer_timeout: float = 0.0
    #: a rate-limited source reads at most once per this many seconds (`CostModel.source_pacing`)
    source_pacing: float = 0.0
    #: a step is sized to last about this many seconds (`CostModel.step_target`; 0: whole buffers)
    step_target: float = 0.0
    #: the calibration machine's cores (0: `cores`) and the cores' worth of CPU outside the steps
    #: (`CostModel.machine_cores`, `background_cores`)
    machine_cores: float = 0.0
    background_cores: float = 0.0
    #: the cores' worth of CPU outside the steps at full speed (0: not measured, `background_cores`)
    saturated_background_cores: float = 0.0
    #: what was run to measure it (free-form: job, executor, load average, seconds)
    calibrated: dict[str, Any] = field(default_factory=dict)

    def step_entry(self, task: str) -> str:
        """The `steps` entry that holds `task`'s costs ("vertex[i]"): its own, its vertex's
        ("vertex") or "default", as the simulator looks them up."""
        vertex = task.rpartition("[")[0] or task
        return task if task in self.steps else vertex if vertex in self.steps else "default"

    def step_cost(self, task: str) -> StepCost:
        """`task`'s step costs (`step_entry`; zero when there is no default)."""
        return self.steps.get(self.step_entry(task), StepCost(0.0, 0.0))

    # ------------------------------------------------------------------ the simulator's terms

    def cost_model(self, **overrides: Any) -> Any:
        """The simulator's `CostModel` of this profile (`overrides`: its other fields)."""
        from runtime.sim.costs import CostModel

        default = self.steps.get("default", StepCost(0.0, 0.0))
        return CostModel(per_step=default.per_step, per_record=default.per_record,
                         task_costs={k: v for k, v in self.steps.items() if k != "default"},
                         cores=self.cores, sync_latency=self.sync_latency, sync_per_byte=self.sync_per_byte,
                         write_cpu=self.write_cpu, write_cpu_per_byte=self.write_cpu_per_byte,
                         checkpoint_cpu=self.checkpoint_cpu, source_pacing=self.source_pacing,
                         step_target=self.step_target, machine_cores=self.machine_cores or None,
                         background_cores=self.background_cores,
                         saturated_background_cores=self.saturated_background_cores or None,
                         timer_lateness=default.timer_lateness, **overrides)

    def network(self, **overrides: Any) -> Any:
        """The simulator's `NetworkOptions` of this profile (`overrides`: e.g. `link_delays`)."""
        from runtime.sim.network import NetworkOptions

        return NetworkOptions(delay_min=self.latency_min, delay_max=self.latency_max,
                              control_delay=self.trigger_delay, ack_delay=self.ack_delay,
                              ack_delay_quantiles=tuple(self.ack_delay_quantiles),
                              trigger_delay_quantiles=tuple(self.trigger_delay_quantiles),
                              write_latency=self.write_latency,
                              write_latency_max=self.write_latency_max if self.write_latency_max > 0 else None,
                              write_bandwidth=1 / self.write_per_byte if self.write_per_byte > 0 else math.inf,
                              **overrides)

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"format": FORMAT, "calibrated": dict(self.calibrated), "cores": self.cores,
                               "steps": {name: {f: getattr(c, f) for f in STEP_FIELDS} for name, c in self.steps.items()}}
        for group, names in GROUPS.items():
            doc[group] = {name: list(getattr(self, name)) if name in LIST_FIELDS else getattr(self, name)
                          for name in names}
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str = "profile") -> CostProfile:
        """Read a document `to_json` wrote (possibly edited). Raises ProfileError naming `where`
        (the file) and the field."""
        if not isinstance(doc, dict):
            raise ProfileError(f"{where}: expected a JSON object, got {type(doc).__name__}")
        known = {"format", "calibrated", "cores", "steps", *GROUPS}
        for key in doc:
            if key not in known:
                raise ProfileError(f"{where}: unknown field {key!r} (known: {', '.join(sorted(known))})")
        if doc.get("format", FORMAT) != FORMAT:
            raise ProfileError(f"{where}: field 'format': expected {FORMAT!r}, got {doc['format']!r}")
        values: dict[str, Any] = {}
        for group, names in GROUPS.items():
            section = doc.get(group, {})
            if not isinstance(section, dict):
                raise ProfileError(f"{where}: field {group!r}: expected an object, got {section!r}")
            for key, value in section.items():
                if key not in names:
                    raise ProfileError(f"{where}: unknown field '{group}.{key}' (known: {', '.join(names)})")
                values[key] = _seconds_list(value, f"{group}.{key}", where) if key in LIST_FIELDS \
                    else _seconds(value, f"{group}.{key}", where)
        cores = doc.get("cores")
        if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int) or cores < 1):
            raise ProfileError(f"{where}: field 'cores': expected a whole number >= 1 or null, got {cores!r}")
        steps_doc = doc.get("steps", {"default": {"per_step": 2e-5, "per_record": 2e-6}})
        if not isinstance(steps_doc, dict) or not steps_doc:
            raise ProfileError(f"{where}: field 'steps': expected an object of task or vertex name -> costs, "
                               f"got {steps_doc!r}")
        steps = {}
        for name, entry in steps_doc.items():
            if not isinstance(entry, dict):
                raise ProfileError(f"{where}: field 'steps.{name}': expected an object, got {entry!r}")
            for key in entry:
                if key not in STEP_FIELDS:
                    raise ProfileError(f"{where}: unknown field 'steps.{name}.{key}' (known: {', '.join(STEP_FIELDS)})")
            for key in ("per_step", "per_record"):
                if key not in entry:
                    raise ProfileError(f"{where}: field 'steps.{name}.{key}' is missing")
            if name == "default" and entry.get("wait_per_record"):
                raise ProfileError(f"{where}: field 'steps.default.wait_per_record': only a task or vertex entry "
                                   "can have off-CPU time")
            steps[name] = StepCost(*(_seconds(entry.get(k, 0.0), f"steps.{name}.{k}", where) for k in STEP_FIELDS))
        calibrated = doc.get("calibrated", {})
        if not isinstance(calibrated, dict):
            raise ProfileError(f"{where}: field 'calibrated': expected an object, got {calibrated!r}")
        profile = cls(steps=steps, cores=cores, calibrated=dict(calibrated), **values)
        if 0 < profile.write_latency_max < profile.write_latency:
            raise ProfileError(f"{where}: field 'snapshot.write_latency_max' ({profile.write_latency_max}) is below "
                               f"'snapshot.write_latency' ({profile.write_latency}) (0: every write takes it)")
        if 0 < profile.machine_cores < 1:
            raise ProfileError(f"{where}: field 'machine.machine_cores': expected 0 (the steps' cores) or a number "
                               f">= 1, got {profile.machine_cores!r}")
        if profile.latency_max < profile.latency_min:
            raise ProfileError(f"{where}: field 'transport.latency_max' ({profile.latency_max}) is below "
                               f"'transport.latency_min' ({profile.latency_min})")
        return profile

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CostProfile:
        """Read a profile file. Raises ProfileError naming the file (and the field)."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ProfileError(f"{path}: cannot read the profile: {exc.strerror or exc}") from exc
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{path}: not JSON: {exc}") from exc
        return cls.from_json(doc, str(path))


def _seconds(value: Any, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ProfileError(f"{where}: field {name!r}: expected a number >= 0, got {value!r}")
    return float(value)


def _seconds_list(value: Any, name: str, where: str) -> list[float]:
    if not isinstance(value, list) or len(value) == 1:
        raise ProfileError(f"{where}: field {name!r}: expected a list of >= 2 numbers (or an empty list), got {value!r}")
    seconds = [_seconds(v, name, where) for v in value]
    if seconds != sorted(seconds):
        raise ProfileError(f"{where}: field {name!r}: the quantiles must be ascending, got {value!r}")
    return seconds
