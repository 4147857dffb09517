"""Deleted keyed state stays deleted through incremental and merged checkpoints: a cleared value, a
removed map entry and a key group emptied altogether are gone after a restore (deltas carry
tombstones; an emptied key group has no chain). And merged physical files lay out their segments
right after a new file starts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from checkpoint.io.tools import load_checkpoint, open_checkpoints, read_checkpoint
from operators import CollectSink, KeyedProcessFunction
from runtime import FaultPlan
from runtime.api.environment import StreamEnvironment
from runtime.jobmaster.restore.state_assignment import build_restores
from runtime.jobmaster.result import JobFailedError
from state.key_groups import KeyGroupRange, key_group_for
from state.keyed import KeyedStateBackend
from state.merging import pack_segments
from tests.storage.test_storage_incremental import TASK, make, restore, snap, write
from vocabulary.fault_plan import TaskCrash
from vocabulary.options import RestartStrategy

BACKENDS = {"incremental": {}, "incremental+merge": {"file_merging": True}}


def test_cleared_values_removed_entries_and_emptied_key_groups_stay_deleted() -> None:
    for merging in (False, True):
        writer, storage = make(merging=merging)
        backend = KeyedStateBackend("count", KeyGroupRange(0, 8), 8)
        keys = [f"k{i}" for i in range(40)]
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            backend.value_state("v").update(i)
            backend.map_state("m").put("a", i)
            backend.map_state("m").put("b", -i)
        write(writer, snap(backend, 1))
        writer.notify_checkpoint_complete(TASK, 1)
        emptied = key_group_for("k0", 8)
        for key in keys:
            backend.set_current_key(key)
            if key_group_for(key, 8) == emptied:  # every state of every key of one key group
                backend.value_state("v").clear()
                backend.map_state("m").clear()
            elif int(key[1:]) % 3 == 0:
                backend.value_state("v").clear()
            elif int(key[1:]) % 3 == 1:
                backend.map_state("m").remove("b")
        second = write(writer, snap(backend, 2))
        assert writer.files.history[-1].reused_pieces > 0, "the second checkpoint should be incremental"
        restored = restore(storage, second)
        assert restored == backend.dump(), f"merging={merging}"
        assert not any(key_group_for(k, 8) == emptied for name in restored for k in restored[name])
        assert "k3" not in restored["v"] and "b" not in restored["m"]["k4"] and restored["m"]["k5"]["b"] == -5


class ForgetfulCount(KeyedProcessFunction):
    """Counts per key, remembers the last ids per slot; every 7th record forgets the count, every
    5th forgets a slot, every 11th forgets the key altogether."""

    state_names = ("count", "slots")

    def process_element(self, record, ctx):
        count = ctx.value_state("count", default=0)
        slots = ctx.map_state("slots")
        if record["id"] % 11 == 0:
            count.clear()
            slots.clear()
        elif record["id"] % 7 == 0:
            count.clear()
        elif record["id"] % 5 == 0:
            slots.remove(str((record["id"] // 5) % 3))
        else:
            count.update(count.value() + 1)
            slots.put(str(record["id"] % 3), record["id"])
        yield {"key": ctx.key, "count": count.value(), "slots": len(slots.items())}


ROWS = [{"id": i, "key": f"k{i % 23}"} for i in range(4000)]


def forgetful_env(storage: Path | None, **backend) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, buffer_size=8)
    env.enable_checkpointing(interval=0.0005, storage=str(storage) if storage else None, retained=2,
                             state_backend="incremental" if storage else "memory", **backend)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection(ROWS, splits=1).key_by("key").process(ForgetfulCount(), name="forget") \
        .sink_to(CollectSink("out"))
    return env


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_restore_after_deletes_carries_them(tmp_path: Path, backend: str) -> None:
    reference = forgetful_env(None).execute("job", executor="sim", seed=1)
    with pytest.raises(JobFailedError):
        forgetful_env(tmp_path, **BACKENDS[backend]).execute(
            "job", executor="sim", seed=1, faults=FaultPlan.of(TaskCrash(task="forget[0]", after_records=1500)))
    completed, _ = load_checkpoint(str(tmp_path))
    assert completed.checkpoint_id > 2, "the restored checkpoint should hold deltas"
    restored = forgetful_env(tmp_path, **BACKENDS[backend]).restore_from(str(tmp_path)).execute(
        "job", executor="sim", seed=2)
    assert restored.final_state["forget"] == reference.final_state["forget"]
    assert Counter(map(repr, restored.output("out"))) == Counter(map(repr, reference.output("out")))


def test_segments_after_a_new_physical_file_starts_point_into_it() -> None:
    pieces = [(f"p{i}", bytes([i]) * (10 + i)) for i in range(12)]
    files = pack_segments("count[0]", 4, pieces, max_file_size=40)
    assert len(files) > 3
    data = dict(pieces)
    for file in files:
        assert file.segments[0].offset == 0, file.name
        assert len(file.data) <= 40 or len(file.segments) == 1
        for segment in file.segments:
            assert file.data[segment.offset:segment.offset + segment.length] == data[segment.name], segment
        assert sum(s.length for s in file.segments) == len(file.data)
    assert [s.name for f in files for s in f.segments] == [name for name, _ in pieces]


@pytest.mark.slow
def test_a_job_writing_many_small_merged_files_restores_every_retained_checkpoint(tmp_path: Path) -> None:
    env = forgetful_env(tmp_path, file_merging=True, max_file_size=64)
    with pytest.raises(JobFailedError):
        env.execute("job", executor="sim", seed=1, faults=FaultPlan.of(TaskCrash(task="forget[0]", after_records=1500)))
    merged = [p for p in (tmp_path / "job" / "shared").rglob("*.merged") if not p.name.endswith("-0.merged")]
    assert merged, "pieces should have spilled into second and later physical files"
    storage = open_checkpoints(str(tmp_path))
    ids = [i for i in storage.list_checkpoint_ids("job") if (tmp_path / "job" / f"chk-{i}" / "_metadata").exists()]
    assert len(ids) == 2
    for checkpoint_id in ids:  # each restores as it is (a fallback would hide a bad offset: exactly once still)
        completed = read_checkpoint(storage, "job", checkpoint_id, verify_files=True)
        restores = build_restores(env.get_job_graph("job"), completed, storage)
        assert any(r.keyed_snapshots for r in restores.values())
