"""Flink beside barrierflow (`benchmarks.peers`): what the PyFlink child processes run and what
the driver reads back from Flink's log.

Child side (the PyFlink venv): every job runs on a `RestCluster`, a MiniCluster in PyFlink's JVM
whose REST endpoint stays up after the job, and the child records the job's checkpoint
statistics from it (`FlinkJob.record`, `benchmarks.flink_rest`) before closing it. Driver side:
the task switches and completed checkpoints in the Flink log (`flink_task_span`,
`flink_checkpoints`) and the recorded statistics (`read_recorded`).
"""

from __future__ import annotations

import array
import glob
import json
import os
import re
import sys
import time
from datetime import datetime
from typing import Any

from benchmarks.peer_rows import INTERVAL_MS, KEYS, PARALLELISM
from benchmarks.report import percentile

#: where a child records its job's checkpoint statistics, in its work directory
CHECKPOINTS_FILE = "flink-checkpoints.json"
#: where a child's job writes its checkpoints, in its work directory
CHECKPOINT_DIR = "flink-checkpoint-data"
#: checkpoints the REST endpoint keeps in its history (Flink's default is 10)
CHECKPOINT_HISTORY = 100_000

_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_TASK_SWITCH = re.compile(r"taskmanager\.Task\s+\[\] - (.+?) \(\d+/\d+\)#\d+ \(\S+\) switched from (\w+) to (\w+)\.")
_COMPLETED = re.compile(r"Completed checkpoint (\d+) for job \S+ \((\d+) bytes, checkpointDuration=(\d+) ms")
_FAILED_CP = re.compile(r"Failed to trigger or complete checkpoint (\d+) for job")
_EXCEPTION = re.compile(r"CheckpointException: ([^.]*(?:\.[^.\s][^.]*)*)")


def log_lines(log_dir: str) -> list[str]:
    lines: list[str] = []
    for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))):
        with open(path, errors="replace") as fh:
            lines += fh.read().splitlines()
    return lines


def _log_time(line: str) -> float | None:
    m = _LOG_TIME.match(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None


def flink_task_span(lines: list[str]) -> tuple[float, float] | None:
    """(first source subtask INITIALIZING->RUNNING, last subtask RUNNING->FINISHED), from the log."""
    starts, ends = [], []
    for line in lines:
        m = _TASK_SWITCH.search(line)
        if not m:
            continue
        when = _log_time(line)
        if m.group(1).startswith("Source") and (m.group(2), m.group(3)) == ("INITIALIZING", "RUNNING"):
            starts.append(when)
        elif (m.group(2), m.group(3)) == ("RUNNING", "FINISHED"):
            ends.append(when)
    if not starts or not ends:
        return None
    return min(starts), max(ends)


def flink_checkpoints(lines: list[str]) -> dict[str, Any]:
    """Completed checkpoints (count, duration p50/p99/max in ms, largest size) and failed ones by reason."""
    durations, sizes, failed = [], [], {}
    for i, line in enumerate(lines):
        m = _COMPLETED.search(line)
        if m:
            sizes.append(int(m.group(2)))
            durations.append(float(m.group(3)))
            continue
        f = _FAILED_CP.search(line)
        if f and f.group(1) not in failed:  # the same failure can be logged twice
            why = "unknown"
            for follow in lines[i + 1:i + 3]:
                e = _EXCEPTION.search(follow)
                if e:
                    why = re.sub(r"\s*[0-9a-f]{32}(_[0-9a-f]{32})?(_\d+)+\.?", " <task>", e.group(1)).strip()
                    break
            failed[f.group(1)] = why
    reasons: dict[str, int] = {}
    for why in failed.values():
        reasons[why] = reasons.get(why, 0) + 1
    durations.sort()
    return {"completed": len(durations), "aborted": len(failed), "reasons": reasons,
            "p50": percentile(durations, 50), "p99": percentile(durations, 99), "max": percentile(durations, 100),
            "bytes": max(sizes) if sizes else None}


# ---------------------------------------------------------------------------- PyFlink (child side)


def flink_config(mode: str, checkpoint_dir: str) -> Any:
    """The job's configuration in `mode` (PyFlink `Configuration`), its checkpoints written as files
    under `checkpoint_dir`, as barrierflow writes its own: Flink's default keeps them in the
    JobManager's memory and fails every checkpoint above 5 MB (a job with growing state, such as
    NexMark q7's join, then restarts for ever)."""
    from pyflink.common import Configuration

    config = Configuration()
    config.set_string("python.execution-mode", "process")
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    config.set_string("parallelism.default", str(PARALLELISM))
    if mode != "none":
        config.set_string("execution.checkpointing.interval", f"{INTERVAL_MS} ms")
        config.set_string("execution.checkpointing.mode",
                          "AT_LEAST_ONCE" if mode == "at-least-once" else "EXACTLY_ONCE")
        config.set_string("execution.checkpointing.unaligned.enabled", str(mode == "unaligned").lower())
        config.set_string("execution.checkpointing.storage", "filesystem")
        config.set_string("execution.checkpointing.dir", "file://" + os.path.abspath(checkpoint_dir))
    return config


def _stream_env(mode: str, config: Any, remote: bool) -> tuple[Any, dict[str, Any]]:
    """A StreamExecutionEnvironment for `mode` with `config` (`remote`: submitting to the cluster
    `config` names, else PyFlink's local executor), and the checkpoint settings it really has."""
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.java_gateway import get_gateway

    if remote:
        # constructed, not `get_execution_environment`: that one makes a LocalStreamEnvironment, which
        # sets `execution.target` to local whatever the configuration says
        environments = get_gateway().jvm.org.apache.flink.streaming.api.environment
        env = StreamExecutionEnvironment(environments.StreamExecutionEnvironment(config._j_configuration))
    else:
        env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(PARALLELISM)
    if mode != "none":  # also set through the API, in case the config keys are not picked up
        env.enable_checkpointing(INTERVAL_MS, CheckpointingMode.AT_LEAST_ONCE if mode == "at-least-once"
                                 else CheckpointingMode.EXACTLY_ONCE)
        if mode == "unaligned":
            env.get_checkpoint_config().enable_unaligned_checkpoints()
    checkpoints = env.get_checkpoint_config()
    return env, {"checkpointing": checkpoints.is_checkpointing_enabled(),
                 "mode": str(checkpoints.get_checkpointing_mode()),
                 "unaligned": checkpoints.is_unaligned_checkpoints_enabled(),
                 "interval_ms": checkpoints.get_checkpoint_interval() if mode != "none" else None}


class RestCluster:
    """A Flink MiniCluster in PyFlink's JVM whose REST endpoint (127.0.0.1, a free port) outlives
    the job. PyFlink's local executor starts a MiniCluster per job and closes it, REST endpoint
    included, the moment the job ends, so the checkpoint statistics of a short job could not be
    read; this one is started by the child and closed once they are. It is the cluster the local
    executor would start (one TaskManager with `PARALLELISM` slots, the job's configuration, in the
    same JVM); jobs reach it through its REST endpoint (`execution.target` remote)."""

    def __init__(self, config: Any) -> None:
        from pyflink.java_gateway import get_gateway

        jvm = get_gateway().jvm
        conf = jvm.org.apache.flink.configuration.Configuration(config._j_configuration)
        for key, value in (("rest.bind-address", "127.0.0.1"), ("rest.address", "127.0.0.1"),
                           ("rest.bind-port", "0"), ("web.checkpoints.history", str(CHECKPOINT_HISTORY))):
            conf.setString(key, value)
        minicluster = jvm.org.apache.flink.runtime.minicluster
        settings = minicluster.MiniClusterConfiguration.Builder().setConfiguration(conf) \
            .setNumTaskManagers(1).setNumSlotsPerTaskManager(PARALLELISM).build()
        self._cluster = minicluster.MiniCluster(settings)
        self._cluster.start()
        self.port = int(self._cluster.getRestAddress().get().getPort())
        self.url = f"http://127.0.0.1:{self.port}"

    def client_config(self, config: Any) -> Any:
        """`config` submitting jobs to this cluster."""
        config.set_string("execution.target", "remote")
        config.set_string("rest.address", "127.0.0.1")
        config.set_string("rest.port", str(self.port))
        return config

    def close(self) -> None:
        self._cluster.close()


class FlinkJob:
    """A child's Flink job: its environment (`env`, configured by `config`) on a `RestCluster`,
    the checkpoint settings it has (`effective`); `record(job_id)` writes the job's checkpoint
    statistics (`flink_rest.read_checkpoints`) to `work`/`CHECKPOINTS_FILE` once it has ended.
    `rest=False`: on PyFlink's local executor instead, recording nothing (`pyflink-udf`: its Python
    UDF workers returned no stamps, 0 of 20,000, when the job went to a `RestCluster`)."""

    def __init__(self, mode: str, work: str, *, rest: bool = True) -> None:
        self.mode, self.work = mode, work
        checkpoints = os.path.join(work, CHECKPOINT_DIR)
        self.cluster = RestCluster(flink_config(mode, checkpoints)) if rest else None
        try:
            config = flink_config(mode, checkpoints)
            self.config = self.cluster.client_config(config) if self.cluster else config
            self.env, self.effective = _stream_env(mode, self.config, remote=self.cluster is not None)
        except BaseException:
            self.close()
            raise

    def wait(self, result: Any) -> None:
        """Wait for the end of the job a statement started (its `TableResult`) and record it."""
        job_id = str(result.get_job_client().get_job_id())
        result.wait()
        self.record(job_id)

    def record(self, job_id: str) -> None:
        from benchmarks.flink_rest import read_checkpoints

        if self.mode == "none" or self.cluster is None:  # no checkpoints (Flink answers 404) or no REST
            return
        doc = read_checkpoints(self.cluster.url, job_id)
        with open(os.path.join(self.work, CHECKPOINTS_FILE), "w") as fh:
            json.dump(doc, fh)

    def __enter__(self) -> FlinkJob:
        return self

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_recorded(work: str) -> dict[str, Any] | None:
    """The checkpoint figures (`flink_rest.checkpoint_figures`) of the job a child recorded in
    `work`; None when it recorded none (a run without checkpoints)."""
    from benchmarks.flink_rest import checkpoint_figures

    path = os.path.join(work, CHECKPOINTS_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return checkpoint_figures(json.load(fh))


def child_pyflink_udf(mode: str, records: int, work: str) -> dict[str, Any]:
    """PyFlink DataStream job with Python UDFs at max rate; stamps go to `work`/stamps."""
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.datastream import KeyedProcessFunction
    from pyflink.datastream.connectors import Sink
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.datastream.state import ValueStateDescriptor
    from pyflink.java_gateway import get_gateway

    stamp_dir = os.path.join(work, "stamps")
    os.makedirs(stamp_dir, exist_ok=True)
    keys = KEYS

    class Count(KeyedProcessFunction):
        def open(self, runtime_context: Any) -> None:
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
            self.path = os.path.join(stamp_dir, f"{runtime_context.get_index_of_this_subtask()}-{os.getpid()}.bin")
            self.stamps = array.array("d")

        def process_element(self, value: Any, ctx: Any) -> Any:
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            self.stamps.append(value[1])
            self.stamps.append(time.time())
            yield value[0], n

        def close(self) -> None:  # inline (not peer_rows.write_stamps): the UDF worker need not import benchmarks
            with open(self.path + ".part", "wb") as fh:
                self.stamps.tofile(fh)
            os.replace(self.path + ".part", self.path)

    with FlinkJob(mode, work, rest=False) as job:
        discard = Sink(get_gateway().jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink())
        (
            job.env.from_source(NumberSequenceSource(0, records - 1), WatermarkStrategy.no_watermarks(), "seq")
            .map(lambda i: (f"app{i % keys}", time.time()), output_type=Types.TUPLE([Types.STRING(), Types.DOUBLE()]))
            .key_by(lambda r: r[0], key_type=Types.STRING())
            .process(Count(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
            .sink_to(discard)
        )
        result = job.env.execute(f"pyflink-udf-{mode}")
        job.record(str(result.get_job_id()))
        return {"stamps": stamp_dir, "effective": job.effective}


def child_flink_sql(mode: str, records: int, work: str) -> dict[str, Any]:
    """Flink SQL `GROUP BY` count from `datagen` into `blackhole`."""
    from pyflink.table import EnvironmentSettings, StreamTableEnvironment

    with FlinkJob(mode, work) as job:
        settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(job.config).build()
        table_env = StreamTableEnvironment.create(job.env, settings)
        table_env.execute_sql(
            f"CREATE TABLE src (app INT) WITH ('connector' = 'datagen', 'number-of-rows' = '{records}', "
            f"'rows-per-second' = '1000000000', "
            f"'fields.app.kind' = 'random', 'fields.app.min' = '0', 'fields.app.max' = '{KEYS - 1}')"
        )
        table_env.execute_sql("CREATE TABLE snk (app INT, cnt BIGINT) WITH ('connector' = 'blackhole')")
        job.wait(table_env.execute_sql("INSERT INTO snk SELECT app, COUNT(*) FROM src GROUP BY app"))
        return {"effective": job.effective}

