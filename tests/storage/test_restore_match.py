"""`env.restore_from(dir)` into a job that does not match the checkpoint: a clear
`StateMismatchError` before anything runs, unless `allow_non_restored_state` drops the unmatched
state (with a warning); source splits must match even then. Rescaling keeps working."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest

from checkpoint.io.tools import load_checkpoint
from operators import CollectSink, KeyedProcessFunction
from runtime import FaultPlan, JobGraphError, StateMismatchError
from runtime.api.environment import StreamEnvironment
from runtime.jobmaster.committer.collect import CollectCommitter
from runtime.jobmaster.restore.state_assignment import checkpoint_shape
from runtime.jobmaster.result import JobFailedError
from runtime.sim.executor import SimExecutor
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 37}"} for i in range(3000)]


class RenamedCount(KeyedProcessFunction):
    """`CountPerKey` with its state renamed from "count" to "cnt"."""

    def process_element(self, record, ctx):
        count = ctx.value_state("cnt", default=0)
        count.update(count.value() + 1)
        yield {"key": ctx.key, "count": count.value()}


class ComputedName(KeyedProcessFunction):
    """Names its state with a computed value, so the name cannot be read from the code."""

    def __init__(self) -> None:
        self.state = "count"

    def process_element(self, record, ctx):
        count = ctx.value_state(self.state, default=0)
        count.update(count.value() + 1)
        yield {"key": ctx.key, "count": count.value()}


class DeclaredComputedName(ComputedName):
    state_names = ("count",)


BACKENDS = {"memory": {}, "incremental+merge": dict(state_backend="incremental", file_merging=True)}


def job(storage: Path, parallelism: int = 2, *, splits: int | None = 4, rows=ROWS, fn=CountPerKey,
        name: str = "count", sink: str = "out", max_parallelism: int = 128, **options) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, buffer_size=16, max_parallelism=max_parallelism)
    env.enable_checkpointing(interval=0.0005, storage=str(storage), retained=2, tolerable_failures=100, **options)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.001))
    env.from_collection(rows, splits=splits).key_by("key").process(fn(), name=name).sink_to(CollectSink(sink))
    return env


def crashed_run(storage: Path, parallelism: int = 2, splits: int | None = 4, **options) -> CollectCommitter:
    """Run until a task crashes for good after checkpoint 1; return the sinks' external system."""
    env = job(storage, parallelism, splits=splits, **options)
    env.set_restart_strategy(RestartStrategy.no_restart())
    sim = SimExecutor(env.get_job_graph("job"), seed=1, faults=FaultPlan.of(TaskCrash(task="count[0]", at=0.011)))
    with pytest.raises(JobFailedError):
        sim.run()
    assert sim.store.get_latest_checkpoint() is not None, "the crash came before any checkpoint completed"
    return sim.committer


@pytest.fixture(scope="module", params=list(BACKENDS))
def checkpoint(request, tmp_path_factory) -> tuple[Path, CollectCommitter]:
    """A checkpoint of the count job at parallelism 2 with 4 splits (full or incremental keyed
    state), and its external system."""
    storage = tmp_path_factory.mktemp("chk")
    return storage, crashed_run(storage, **BACKENDS[request.param])


def reference() -> list:
    env = StreamEnvironment(parallelism=1)
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return multiset(env.execute("ref", executor="sim").output("out"))


def restore(checkpoint, tmp_path: Path, allow: bool = False, **changes):
    storage, committer = checkpoint
    env = job(tmp_path, **changes).restore_from(str(storage), job_id="job", allow_non_restored_state=allow)
    external = copy.deepcopy(committer)
    return env, external


# --------------------------------------------------------------------------- mismatches


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.parametrize("splits", [3, 8])
def test_another_number_of_splits_is_an_error_even_when_dropping_state(checkpoint, tmp_path, splits, allow) -> None:
    env, external = restore(checkpoint, tmp_path, allow, splits=splits)
    before = {s: external.transactions(s) for s in ("out",)}
    with pytest.raises(StateMismatchError, match=(
            r"checkpoint 1 does not match this job: source 'Source: collection' read splits 'collection-0', "
            rf"'collection-1', 'collection-2', 'collection-3' \(4\) in the checkpoint but has splits "
            rf"'collection-0', .*'collection-{splits - 1}' \({splits}\) in this job .*cannot fix this")) as caught:
        env.execute("job", executor="sim", seed=2, committer=external)
    assert not caught.value.droppable
    assert {s: external.transactions(s) for s in ("out",)} == before  # failed before anything ran


def test_an_offset_past_the_end_of_its_split_is_an_error(checkpoint, tmp_path) -> None:
    env, external = restore(checkpoint, tmp_path, rows=ROWS[:40])  # 10 records per split
    with pytest.raises(StateMismatchError, match=r"source 'Source: collection' read split 'collection-0' up to "
                                                 r"record \d+ in the checkpoint but the split has 10 records"):
        env.execute("job", executor="sim", seed=2, committer=external)


def test_a_renamed_operator_is_named(checkpoint, tmp_path) -> None:
    env, external = restore(checkpoint, tmp_path, name="tally")
    with pytest.raises(StateMismatchError, match=(
            r"checkpoint 1 does not match this job: it has state for operator 'count' \(keyed state 'count'; "
            r"operator state 'pending' of 'Sink: out' \(chain position 1\)\) which this job does not have "
            r"\(its operators: 'Source: collection', 'tally'\).*allow_non_restored_state=True")) as caught:
        env.execute("job", executor="sim", seed=2, committer=external)
    assert caught.value.droppable and caught.value.checkpoint_id == 1


def test_a_renamed_chained_sink_is_named(checkpoint, tmp_path) -> None:
    """The sink's pending transactions are operator state under its name: a rename lost them."""
    env, external = restore(checkpoint, tmp_path, sink="sink")
    with pytest.raises(StateMismatchError, match=(
            r"operator 'count' has operator state 'pending' of chained operator 'Sink: out' \(chain position 1\) "
            r"which this job's chain does not have \(it has: 'count' \(chain position 0\), 'Sink: sink' "
            r"\(chain position 1\)\)")):
        env.execute("job", executor="sim", seed=2, committer=external)


def test_a_renamed_keyed_state_is_named(checkpoint, tmp_path) -> None:
    env, external = restore(checkpoint, tmp_path, fn=RenamedCount)
    with pytest.raises(StateMismatchError, match=(
            r"checkpoint 1 does not match this job: operator 'count' has keyed state 'count' in the checkpoint "
            r"which this job's operator does not use \(it uses 'cnt'\)")):
        env.execute("job", executor="sim", seed=2, committer=external)


def test_another_max_parallelism_is_an_error(checkpoint, tmp_path) -> None:
    env, external = restore(checkpoint, tmp_path, True, max_parallelism=64)
    with pytest.raises(StateMismatchError, match=r"operator 'count' has keyed state in 128 key groups "
                                                 r"\(max_parallelism\) but this job has 64"):
        env.execute("job", executor="sim", seed=2, committer=external)


def test_a_computed_state_name_asks_for_a_declaration(checkpoint, tmp_path) -> None:
    env, external = restore(checkpoint, tmp_path, fn=ComputedName)
    with pytest.raises(StateMismatchError, match=(
            r"operator 'count' has keyed state 'count' in the checkpoint which this job's operator does not use "
            r"\(it uses none\); it also names keyed state by computed values \(ComputedName.process_element "
            r"line \d+\): if it uses 'count', declare every name with `state_names = \(...\)`")):
        env.execute("job", executor="sim", seed=2, committer=external)


# --------------------------------------------------------------------------- matching restores


def test_declared_state_names_restore_exactly_once(checkpoint, tmp_path) -> None:
    env, external = restore(checkpoint, tmp_path, fn=DeclaredComputedName)
    result = env.execute("job", executor="sim", seed=2, committer=external)
    assert multiset(result.output("out")) == reference()


def test_default_splits_keep_the_checkpoints_count_when_rescaling(tmp_path) -> None:
    """`from_collection(rows)` has one split per subtask: restored at parallelism 3, the job keeps
    the checkpoint's 2 splits (3 would move every offset onto other records)."""
    committer = crashed_run(tmp_path, parallelism=2, splits=None)
    env = job(tmp_path / "second", 3, splits=None).restore_from(str(tmp_path), job_id="job")
    result = env.execute("job", executor="sim", seed=2, committer=committer)
    assert multiset(result.output("out")) == reference()


# --------------------------------------------------------------------------- allow_non_restored_state


def test_allow_non_restored_state_drops_a_renamed_state_with_a_warning(checkpoint, tmp_path, caplog) -> None:
    env, external = restore(checkpoint, tmp_path, True, fn=RenamedCount)
    with caplog.at_level(logging.WARNING, logger="runtime.jobmaster.restore.state_assignment"):
        result = env.execute("job", executor="sim", seed=2, committer=external)
    warnings = [r.getMessage() for r in caplog.records if "allow_non_restored_state" in r.getMessage()]
    assert len(warnings) == 1 and "checkpoint 1" in warnings[0] and \
        "operator 'count' has keyed state 'count'" in warnings[0], warnings
    # the old state is gone (not carried into new checkpoints); the new one counts only what
    # was read after the checkpoint, every record exactly once
    assert set(result.final_state["count"]) == {"cnt"}
    completed, storage = load_checkpoint(str(checkpoint[0]), job_id="job")
    read_before = sum(checkpoint_shape(completed, storage).vertices["Source: collection"].splits.values())
    assert 0 < read_before < len(ROWS)
    assert sum(result.final_state["count"]["cnt"].values()) == len(ROWS) - read_before


def test_allow_non_restored_state_drops_a_removed_operator_with_a_warning(checkpoint, tmp_path, caplog) -> None:
    env, external = restore(checkpoint, tmp_path, True, name="tally")
    with caplog.at_level(logging.WARNING, logger="runtime.jobmaster.restore.state_assignment"):
        result = env.execute("job", executor="sim", seed=2, committer=external)
    assert any("dropped the state this job does not use: it has state for operator 'count'" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert set(result.final_state) == {"tally"}


# --------------------------------------------------------------------------- declarations


def test_state_names_must_be_strings() -> None:
    class Malformed(KeyedProcessFunction):
        state_names = "count"  # a str, not a collection of names

        def process_element(self, record, ctx):
            yield record

    env = StreamEnvironment()
    with pytest.raises(JobGraphError, match=r"process 'p': Malformed.state_names must be a collection of non-empty "
                                            r"str .*got 'count'"):
        env.from_collection(ROWS).key_by("key").process(Malformed(), name="p")


def _helper_state(ctx):
    return ctx.value_state("from_helper")


class Mixed(KeyedProcessFunction):
    def open(self, ctx):
        self.kinds = ctx.map_state("kinds")  # state objects made in open() count too

    def process_element(self, record, ctx):
        ctx.list_state(name="recent").add(record["id"])
        bump = lambda: ctx.value_state("total", 0)  # noqa: E731 - nested code is scanned too
        bump().update(1)
        _helper_state(ctx)  # outside the class: not seen
        yield record


def test_keyed_state_names_are_read_from_the_functions_code() -> None:
    from operators.keyed import KeyedProcessOperator

    declared = KeyedProcessOperator(Mixed(), lambda r: r["key"]).declared_state()
    assert declared.keyed == {"kinds", "recent", "total"} and declared.computed == ()
    computed = KeyedProcessOperator(ComputedName(), lambda r: r["key"]).declared_state()
    assert computed.keyed == set() and len(computed.computed) == 1
    assert KeyedProcessOperator(DeclaredComputedName(), lambda r: r["key"]).declared_state().keyed == {"count"}
