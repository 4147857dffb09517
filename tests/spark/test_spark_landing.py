"""Landing checkpoints with Spark, reading them back, and restoring jobs from landed checkpoints."""

from __future__ import annotations

from collections import Counter

import pytest

from operators import CollectSink, KeyedProcessFunction
from runtime import StreamEnvironment
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.workloads.seeded import multiset
from spark_bridge import LandingError, decode_value, land_checkpoint, landed_checkpoint_ids, read_checkpoint
from spark_bridge.io.landing import resolve_checkpoint, write_state_tables
from spark_bridge.io.state_tables import state_tables
from vocabulary.options import CheckpointingMode

pytestmark = pytest.mark.spark

ROWS = [{"id": i, "app": f"app{(i * 7) % 5}", "region": i % 3, "v": i / 8} for i in range(3000)]


class Profile(KeyedProcessFunction):
    """Value, list and map state under tuple keys: every kind the landed tables must carry."""

    def process_element(self, record, ctx):
        count = ctx.value_state("count", default=0)
        count.update(count.value() + 1)
        recent = ctx.list_state("recent")
        recent.add(record["id"])
        if len(recent.get()) > 3:
            recent.update(recent.get()[-3:])
        ctx.map_state("last_v").put(str(record["id"] % 4), record["v"])
        yield {"app": ctx.key[0], "region": ctx.key[1], "count": count.value()}


def job(storage: str | None, *, unaligned: bool = False, interval: float = 0.002) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=16, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=interval, mode=CheckpointingMode.EXACTLY_ONCE, unaligned=unaligned,
                             storage=storage, retained=1000)
    (env.from_collection(ROWS, splits=2)
     .key_by(lambda r: (r["app"], r["region"]))
     .process(Profile(), name="profile")
     .sink_to(CollectSink("out")))
    return env


def expected_counts() -> dict:
    return dict(Counter((r["app"], r["region"]) for r in ROWS))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One unaligned run whose checkpoints are all retained on the local filesystem."""
    storage = str(tmp_path_factory.mktemp("chk"))
    result = job(storage, unaligned=True).execute("landjob", executor="sim", seed=5)
    return storage, result


@pytest.fixture(scope="module")
def landed_final(spark, finished, tmp_path_factory):
    """The run's last checkpoint landed (the latest by default): its target."""
    storage, result = finished
    target = str(tmp_path_factory.mktemp("landed"))
    assert land_checkpoint(spark, storage, None, target) == result.completed_checkpoints[-1].id
    return target


def test_land_and_read_back_equals_the_state_the_job_reports(spark, finished, landed_final) -> None:
    storage, result = finished
    target = landed_final
    final_id = result.completed_checkpoints[-1].id

    landed = read_checkpoint(spark, target)
    assert landed.checkpoint_id == final_id
    keyed = landed.keyed_state.where("operator = 'profile'").collect()
    state: dict = {}
    for row in keyed:
        key = decode_value(row["key"])
        if row["state_kind"] == "map":
            state.setdefault(row["state_name"], {}).setdefault(key, {})[decode_value(row["map_key"])] = \
                decode_value(row["value"])
        else:
            state.setdefault(row["state_name"], {})[key] = decode_value(row["value"])
    assert state == result.final_state["profile"]
    assert state["count"] == expected_counts()
    # counts are queryable with Spark SQL directly
    total = landed.keyed_state.where("state_name = 'count'").selectExpr("sum(cast(value AS BIGINT))").first()[0]
    assert total == len(ROWS)
    offsets = {r["split"]: r["position"] for r in landed.source_offsets.collect()}
    assert offsets == {"collection-0": 1500, "collection-1": 1500}
    stats = landed.checkpoint_stats.collect()
    assert sorted((r["operator"], r["subtask"]) for r in stats) == \
        [("Source: collection", 0), ("Source: collection", 1), ("profile", 0), ("profile", 1)]
    assert {r["job_id"] for r in stats} == {"landjob"}


def test_relanding_replaces_partitions_and_never_duplicates(spark, finished, tmp_path) -> None:
    storage, result = finished
    target = str(tmp_path / "landed")
    ids = [c.id for c in result.completed_checkpoints]
    first, last = ids[len(ids) // 2], ids[-1]
    land_checkpoint(spark, storage, first, target)
    land_checkpoint(spark, storage, last, target)
    before = {n: read_checkpoint(spark, target, first)[n].count() for n in ("keyed_state", "checkpoint_stats")}
    land_checkpoint(spark, f"{storage}/landjob/chk-{first}", first, target)  # again, via the chk dir
    land_checkpoint(spark, f"{storage}/landjob", first, target)  # and via the job dir
    after = read_checkpoint(spark, target, first)
    assert {n: after[n].count() for n in before} == before
    assert after.keyed_state.distinct().count() == before["keyed_state"]
    assert landed_checkpoint_ids(spark, target) == [first, last]  # the other checkpoint untouched
    assert read_checkpoint(spark, target).checkpoint_id == last


def test_unaligned_channel_state_is_landed_with_its_payload(spark, finished, tmp_path) -> None:
    storage, result = finished
    with_channels = [c.id for c in result.completed_checkpoints if c.persisted_bytes > 0]
    assert with_channels, "the unaligned run should persist in-flight data in some checkpoint"
    target = str(tmp_path / "landed")
    land_checkpoint(spark, storage, with_channels[0], target)
    channels = read_checkpoint(spark, target, with_channels[0]).channel_state.collect()
    assert channels and all(r["records"] > 0 and r["buffers"] > 0 and r["payload"] for r in channels)
    stats = read_checkpoint(spark, target, with_channels[0]).checkpoint_stats
    assert stats.selectExpr("sum(persisted_bytes)").first()[0] == \
        next(c.persisted_bytes for c in result.completed_checkpoints if c.id == with_channels[0])


def test_restore_from_landed_equals_restore_from_native(spark, finished, tmp_path) -> None:
    storage, result = finished
    # a checkpoint in the middle of the run, with in-flight channel state when there is one
    middle = [c for c in result.completed_checkpoints if 0 < c.id < result.completed_checkpoints[-1].id]
    candidates = [c for c in middle if c.persisted_bytes > 0]
    assert candidates, "the unaligned run should persist in-flight data in its middle checkpoints"
    chosen = candidates[len(candidates) // 2].id
    target = str(tmp_path / "landed")
    land_checkpoint(spark, storage, chosen, target)

    def external_system_as_of_chosen() -> CollectCommitter:
        """The sink's external system as it was at `chosen`: its transactions up to there staged
        (the restore commits the ones `chosen` still had pending)."""
        committer = CollectCommitter()
        for txn in result.committer.transactions("out"):
            if txn.rsplit("/", 1)[1].isdigit() and int(txn.rsplit("/", 1)[1]) <= chosen:
                committer.stage("out", txn, result.committer.records("out", txn))
        return committer

    native = job(None, unaligned=True).execute(
        "landjob", executor="sim", seed=9, restore_from=resolve_checkpoint(storage, chosen),
        committer=external_system_as_of_chosen())
    from_landed = job(None, unaligned=True).restore_from_landed(spark, target, chosen).execute(
        "landjob", executor="sim", seed=9, committer=external_system_as_of_chosen())
    assert multiset(from_landed.output("out")) == multiset(native.output("out"))
    assert from_landed.final_state == native.final_state
    assert from_landed.final_state["profile"]["count"] == expected_counts()
    assert native.metrics.records_in < len(ROWS)  # it really resumed instead of starting over
    assert min(c.id for c in from_landed.checkpoints) > chosen  # ids continue after the restored one


def test_automatic_landing_lands_every_completed_checkpoint(spark, tmp_path) -> None:
    target = str(tmp_path / "auto")
    env = job(None, interval=0.01)  # in-memory checkpoint storage, retained=1000
    env.land_checkpoints_to(spark, target)
    result = env.execute("autojob", executor="sim", seed=3)
    completed = [c.id for c in result.completed_checkpoints]
    assert landed_checkpoint_ids(spark, target) == completed
    last = read_checkpoint(spark, target)
    assert last.checkpoint_id == completed[-1]
    count = last.keyed_state.where("state_name = 'count'").selectExpr("sum(cast(value AS BIGINT))").first()[0]
    assert count == len(ROWS)


def test_landing_errors_are_clear(spark, finished, tmp_path) -> None:
    storage, _ = finished
    target = str(tmp_path / "landed")
    with pytest.raises(LandingError, match="no landed checkpoints"):
        read_checkpoint(spark, target)
    with pytest.raises(LandingError, match="checkpoint 999999 of job 'landjob' has no metadata"):
        land_checkpoint(spark, storage, 999999, target)
    land_checkpoint(spark, storage, None, target)
    with pytest.raises(LandingError, match="checkpoint 999999 is not landed"):
        read_checkpoint(spark, target, 999999)
    other = job(str(tmp_path / "other")).execute("otherjob", executor="sim", seed=1)
    assert other.completed_checkpoints
    with pytest.raises(LandingError, match="holds checkpoints of job 'landjob'"):
        land_checkpoint(spark, str(tmp_path / "other"), None, target)


def test_each_keyed_state_lands_in_its_natural_spark_types(spark, finished, landed_final) -> None:
    storage, result = finished
    landed = read_checkpoint(spark, landed_final)
    types = {name: dict(landed.state(name).dtypes) for name in ("count", "recent", "last_v")}
    assert types["count"] == {"checkpoint_id": "bigint", "subtask": "int", "key_group": "int",
                              "key": "struct<_1:string,_2:bigint>", "value": "bigint"}
    assert types["recent"]["value"] == "array<bigint>"
    assert (types["last_v"]["map_key"], types["last_v"]["value"]) == ("string", "double")
    counts = landed.state("count", operator="profile")
    assert {(r["key"]["_1"], r["key"]["_2"]): r["value"] for r in counts.collect()} == \
        result.final_state["profile"]["count"]
    counts.createOrReplaceTempView("counts")  # queried as written: no JSON, no casts
    app0 = spark.sql("SELECT sum(value) FROM counts WHERE key._1 = 'app0'").first()[0]
    assert app0 == sum(n for (app, _), n in expected_counts().items() if app == "app0")
    recent = {(r["key"]["_1"], r["key"]["_2"]): list(r["value"]) for r in landed.state("recent").collect()}
    assert recent == result.final_state["profile"]["recent"]
    with pytest.raises(LandingError, match="no operator holds a keyed state 'nope'; its keyed states: 'count' "
                       r"\(operator 'profile'\), 'last_v' \(operator 'profile'\), 'recent' \(operator 'profile'\)"):
        landed.state("nope")
    with pytest.raises(LandingError, match="no landed state 'count' of operator 'nope'.*its keyed states: 'count'"):
        landed.state("count", operator="nope")
    completed, files = resolve_checkpoint(storage)  # landing again replaces, never duplicates
    write_state_tables(completed.checkpoint_id, state_tables(completed, files.read_task_file), landed_final)
    assert read_checkpoint(spark, landed_final).state("count").count() == len(expected_counts())


def test_pending_timers_land_like_any_keyed_state(spark, tmp_path) -> None:
    from checkpoint.io.tools import open_checkpoints, pending_timers
    from runtime import FaultPlan, JobFailedError, TaskCrash
    from runtime.workloads.event_time import build_event_time_job, event_rows
    from vocabulary.options import RestartStrategy

    storage, target = str(tmp_path / "chk"), str(tmp_path / "landed")
    env = StreamEnvironment(parallelism=2, buffer_size=8, credits=2, buffer_timeout=0.001)
    env.enable_checkpointing(interval=0.002, storage=storage)
    env.set_auto_watermark_interval(0.001)
    env.set_restart_strategy(RestartStrategy.no_restart())
    build_event_time_job(env, event_rows(600), splits=3)
    with pytest.raises(JobFailedError):  # left with timers pending in its last checkpoint
        env.execute("et", executor="sim", seed=4, faults=FaultPlan.of(TaskCrash(task="buckets[0]", after_records=250)))
    checkpoint_id = land_checkpoint(spark, storage, None, target)
    pending = pending_timers(open_checkpoints(storage), "et", checkpoint_id)
    expected = sum(counts.get("_timer_state/event_user-timers", 0) for task, counts in pending.items()
                   if task.startswith("buckets"))
    assert expected > 0
    timers = read_checkpoint(spark, target).state("_timer_state/event_user-timers", operator="buckets")
    assert timers.count() == expected
    # map key (timestamp, namespace): bucket ends (..99) and probes (..49), no namespace
    assert {(row.map_key._1 % 100, row.map_key._2) for row in timers.collect()} <= {(99, None), (49, None)}
