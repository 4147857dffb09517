"""A restore reads no pickles: checkpoint files are Arrow IPC and JSON, so a
restore — from a directory (`restore_from`), after a task failure, after a coordinator crash —
runs with every way to unpickle disabled."""

from __future__ import annotations

import pickle
from pathlib import Path

import cloudpickle
import pytest

from operators import CollectSink
from runtime import FaultPlan
from runtime.api.environment import StreamEnvironment
from runtime.workloads.seeded import CountPerKey, multiset
from vocabulary.fault_plan import CoordinatorCrash, TaskCrash
from vocabulary.options import RestartStrategy

ROWS = [{"id": i, "key": f"k{i % 37}", "when": i * 0.5} for i in range(2000)]
BACKENDS = {"memory": {}, "incremental+merge": dict(state_backend="incremental", file_merging=True)}


def job_env(storage: Path, *, unaligned: bool = False, parallelism: int = 2, **options) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, buffer_size=16)
    env.enable_checkpointing(interval=0.002, storage=str(storage), retained=2, tolerable_failures=100,
                             unaligned=unaligned, **options)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.001))
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return env


def expected():
    env = StreamEnvironment(parallelism=1)
    env.from_collection(ROWS, splits=4).key_by("key").process(CountPerKey(), name="count").sink_to(CollectSink("out"))
    return multiset(env.execute("ref", executor="sim").output("out"))


class Unpickled(AssertionError):
    pass


@pytest.fixture
def no_unpickling(monkeypatch):
    """Every unpickling entry point raises while the test body runs."""

    def refuse(*args, **kwargs):
        raise Unpickled("a restore tried to unpickle checkpoint data")

    class RefusingUnpickler:
        def __init__(self, *args, **kwargs) -> None:
            refuse()

    for module in (pickle, cloudpickle):
        monkeypatch.setattr(module, "loads", refuse, raising=False)
        monkeypatch.setattr(module, "load", refuse, raising=False)
    monkeypatch.setattr(pickle, "Unpickler", RefusingUnpickler)
    with pytest.raises(Unpickled):  # the guard itself works
        pickle.loads(pickle.dumps(1))
    yield


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("unaligned", [False, True])
def test_restoring_reads_no_pickles(tmp_path: Path, backend: str, unaligned: bool, no_unpickling) -> None:
    options = BACKENDS[backend]
    # failovers inside a run: a task crash, then a coordinator crash (recovery from storage)
    faults = FaultPlan.of(TaskCrash(task="count[0]", at=0.016), CoordinatorCrash(at=0.03))
    first = job_env(tmp_path / "a", unaligned=unaligned, **options).execute("job", executor="sim", seed=3,
                                                                           faults=faults)
    assert first.restarts == 2 and None not in first.restored_checkpoints, first.restored_checkpoints
    assert multiset(first.output("out")) == expected()
    # a new run from a checkpoint directory (every state file read), at another parallelism
    env = job_env(tmp_path / "b", parallelism=2 if unaligned else 3, **options)  # channel state: same
    restored = env.restore_from(str(tmp_path / "a")).execute("job", executor="sim", seed=4,
                                                             committer=first.committer)
    assert multiset(restored.output("out")) == expected()
