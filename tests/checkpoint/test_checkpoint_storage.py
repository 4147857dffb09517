from __future__ import annotations

import os
import pickle

import pytest
from ckpt_testkit import FailingBlobStore

from checkpoint.completed import CompletedCheckpoint
from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.storage import storage_from_uri
from checkpoint.storage.layout import (
    BlobNotFoundError,
    CheckpointStorage,
    CorruptCheckpointError,
    MemoryBlobStore,
    StorageError,
    checksum_matches,
    compute_checksum,
)
from vocabulary.handles import StateHandle, TaskAcknowledgement, TaskId

JOB = "job-1"
A, B = TaskId("src", 0), TaskId("sink", 0)


@pytest.fixture(params=["memory", "fs"])
def blob_store(request, tmp_path):
    return MemoryBlobStore() if request.param == "memory" else FsBlobStore(str(tmp_path / "chk"))


@pytest.fixture
def storage(blob_store) -> CheckpointStorage:
    return CheckpointStorage(blob_store, root="root")


def completed_with_files(storage: CheckpointStorage, checkpoint_id: int = 3) -> CompletedCheckpoint:
    acks = {}
    for task in (A, B):
        handle = storage.write_task_file(JOB, checkpoint_id, f"{task}/keyed.arrow", f"state of {task}".encode())
        acks[task] = TaskAcknowledgement(
            task, checkpoint_id, {"keyed": (handle,)}, state_bytes=handle.size, persisted_bytes=7,
            alignment_time=0.25, unaligned=task == B,
        )
    return CompletedCheckpoint(JOB, checkpoint_id, 1.5, 2.75, acks, {"mode": "EXACTLY_ONCE", "unaligned": False})


def flip_byte(blob_store, path: str, position: int, mask: int = 0x01) -> None:
    data = bytearray(blob_store.get(path))
    data[position] ^= mask
    blob_store.put(path, bytes(data))


# -- blob stores --


def test_blob_store_put_get_list_delete(blob_store) -> None:
    blob_store.put("a/b/one", b"1")
    blob_store.put("a/b/two", b"22")
    blob_store.put("a/c", b"333")
    blob_store.put("a/b/one", b"111")  # replace
    assert blob_store.get("a/b/one") == b"111"
    assert blob_store.list("a/b/") == ["a/b/one", "a/b/two"]
    assert blob_store.list("a/") == ["a/b/one", "a/b/two", "a/c"]
    assert blob_store.list("a/b/t") == ["a/b/two"]
    assert blob_store.list("zzz/") == []
    assert blob_store.exists("a/c") and not blob_store.exists("a/d")
    blob_store.delete("a/b/one")
    blob_store.delete("a/b/one")  # idempotent
    assert not blob_store.exists("a/b/one")
    with pytest.raises(BlobNotFoundError, match="a/b/one"):
        blob_store.get("a/b/one")


@pytest.mark.parametrize("bad", ["", "/abs", "a//b", "a/../b", "a/", "./a"])
def test_blob_store_rejects_bad_paths(blob_store, bad) -> None:
    with pytest.raises(ValueError, match="invalid storage path"):
        blob_store.put(bad, b"x")


def test_fs_blob_store_writes_through_temp_file_and_prunes_dirs(tmp_path) -> None:
    base = tmp_path / "base"
    store = FsBlobStore(str(base))
    store.put("x/y/z.bin", b"data")
    assert sorted(os.listdir(base / "x" / "y")) == ["z.bin"]  # no temp file left behind
    (base / "x" / "y" / ".z.bin.tmp-deadbeef").write_bytes(b"half")  # a crashed writer's leftover
    assert store.list("x/") == ["x/y/z.bin"]
    os.remove(base / "x" / "y" / ".z.bin.tmp-deadbeef")
    store.delete("x/y/z.bin")
    assert os.listdir(base) == []  # empty directories pruned up to the base


def test_fs_blob_store_accepts_file_uri(tmp_path) -> None:
    store = FsBlobStore(f"file://{tmp_path}/u")
    store.put("k", b"v")
    assert (tmp_path / "u" / "k").read_bytes() == b"v"


def test_fs_blob_store_bad_location_is_a_storage_error(tmp_path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StorageError, match="file"):
        FsBlobStore(str(tmp_path / "file" / "sub"))
    with pytest.raises(StorageError, match="nosuchscheme"):
        FsBlobStore("nosuchscheme://x/y")


def test_failing_blob_store_fails_writes_on_demand() -> None:
    inner = MemoryBlobStore()
    store = FailingBlobStore(inner)
    store.put("ok", b"1")
    store.fail_writes(2, matching="_metadata")
    store.put("x/data", b"2")  # not matching
    for _ in range(2):
        with pytest.raises(StorageError, match="injected write failure for y/_metadata"):
            store.put("y/_metadata", b"3")
    store.put("y/_metadata", b"3")
    store.fail_writes()
    with pytest.raises(StorageError):
        store.put("z", b"4")
    store.heal()
    store.put("z", b"4")
    assert store.num_failed_writes == 3
    assert inner.list("") == ["ok", "x/data", "y/_metadata", "z"]
    assert store.get("z") == b"4" and store.exists("ok")


# -- checksums --


def test_only_the_sha256_digest_written_here_is_accepted() -> None:
    data = b"hello"
    digest = compute_checksum(data)
    assert len(digest) == 64 and checksum_matches(data, digest)
    assert not checksum_matches(b"hellO", digest)
    # regression: a weak CRC-32 (which anyone can forge for crafted bytes) was accepted
    for other in ("crc32:3610a686", "3610a686", "sha256:" + digest, digest.upper(),
                  "md5:5d41402abc4b2a76b9719d911017c592", "", None):
        assert not checksum_matches(data, other), other


# -- layout, task files and metadata --


def test_layout(storage) -> None:
    assert storage.metadata_path(JOB, 3) == "root/job-1/chk-3/_metadata"
    assert storage.task_owned_dir(JOB, 3) == "root/job-1/chk-3/taskowned"
    assert storage.shared_dir(JOB) == "root/job-1/shared"
    with pytest.raises(ValueError, match="job_id"):
        storage.checkpoint_dir("a/b", 1)
    with pytest.raises(ValueError, match="checkpoint_id"):
        storage.checkpoint_dir(JOB, 0)
    with pytest.raises(ValueError, match="task file name"):
        storage.write_task_file(JOB, 1, "../escape", b"")


def test_task_file_round_trip(storage) -> None:
    handle = storage.write_task_file(JOB, 4, "src[0]/keyed.arrow", b"\x00\x01payload")
    assert handle.path == "root/job-1/chk-4/taskowned/src[0]/keyed.arrow"
    assert handle.size == 9 and handle.checksum == compute_checksum(b"\x00\x01payload")
    assert storage.read_task_file(handle) == b"\x00\x01payload"


def test_task_file_segment_is_verified_on_its_own(storage) -> None:
    whole = storage.write_shared_file(JOB, "merged-1", b"aaaaBBBBcc")
    segment = StateHandle(whole.path, 4, compute_checksum(b"BBBB"), offset=4, length=4)
    assert storage.read_task_file(segment) == b"BBBB"
    too_long = StateHandle(whole.path, 20, compute_checksum(b"BBBB"), offset=4, length=20)
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        storage.read_task_file(too_long)


def test_flipped_byte_in_task_file_is_detected(storage, blob_store) -> None:
    handle = storage.write_task_file(JOB, 4, "t/state", b"some state bytes")
    flip_byte(blob_store, handle.path, 5)
    with pytest.raises(CorruptCheckpointError) as info:
        storage.read_task_file(handle)
    assert handle.path in str(info.value) and info.value.path == handle.path


def test_truncated_or_missing_task_file_is_corrupt(storage, blob_store) -> None:
    handle = storage.write_task_file(JOB, 4, "t/state", b"some state bytes")
    blob_store.put(handle.path, b"some state")
    with pytest.raises(CorruptCheckpointError, match=r"chk-4/taskowned/t/state has 10 bytes, expected 16"):
        storage.read_task_file(handle)
    blob_store.delete(handle.path)
    with pytest.raises(CorruptCheckpointError, match=r"chk-4/taskowned/t/state is missing"):
        storage.read_task_file(handle)


def test_metadata_round_trip(storage) -> None:
    completed = completed_with_files(storage)
    path = storage.write_metadata(completed)
    assert path == "root/job-1/chk-3/_metadata"
    read = storage.read_metadata(path)
    assert read == completed
    assert read.metadata_path == path
    assert read.acks[B].unaligned and read.state_bytes == completed.state_bytes
    assert read.persisted_bytes == 14
    assert [storage.read_task_file(h) for h in read.state_handles()] == [b"state of sink[0]", b"state of src[0]"]


def test_flipped_byte_in_metadata_is_detected(storage, blob_store) -> None:
    path = storage.write_metadata(completed_with_files(storage))
    size = len(blob_store.get(path))
    flip_byte(blob_store, path, size // 2)
    with pytest.raises(CorruptCheckpointError) as info:
        storage.read_metadata(path)
    assert path in str(info.value) and info.value.path == path


def test_every_single_bit_flip_in_metadata_is_detected() -> None:
    blob_store = MemoryBlobStore()
    storage = CheckpointStorage(blob_store)
    completed = completed_with_files(storage)
    path = storage.write_metadata(completed)
    original = blob_store.get(path)
    for position in range(len(original)):
        for mask in (0x01, 0x20, 0x80):
            corrupted = bytearray(original)
            corrupted[position] ^= mask
            blob_store.put(path, bytes(corrupted))
            with pytest.raises(CorruptCheckpointError, match="_metadata"):
                storage.read_metadata(path)
    blob_store.put(path, original)
    assert storage.read_metadata(path) == completed


def test_missing_metadata_and_misplaced_metadata(storage, blob_store) -> None:
    with pytest.raises(CorruptCheckpointError, match=r"chk-9/_metadata is missing"):
        storage.read_metadata(storage.metadata_path(JOB, 9))
    path = storage.write_metadata(completed_with_files(storage, 3))
    blob_store.put(storage.metadata_path(JOB, 5), blob_store.get(path))
    with pytest.raises(CorruptCheckpointError, match="describes checkpoint 3"):
        storage.read_metadata(storage.metadata_path(JOB, 5))


def test_metadata_must_be_json_representable(storage) -> None:
    completed = CompletedCheckpoint(JOB, 1, 0.0, 1.0, {}, {"bad": object()})
    with pytest.raises(ValueError, match="checkpoint 1 metadata is not JSON-representable"):
        storage.write_metadata(completed)


def test_list_and_discard_checkpoints(storage) -> None:
    for checkpoint_id in (2, 10, 3):
        storage.write_metadata(completed_with_files(storage, checkpoint_id))
    storage.write_shared_file(JOB, "sst-1", b"shared")
    storage.write_task_file("other-job", 7, "x", b"")
    assert storage.list_checkpoint_ids(JOB) == [2, 3, 10]
    deleted = storage.discard_checkpoint(JOB, 3, keep=["root/job-1/chk-3/taskowned/sink[0]/keyed.arrow"])
    assert deleted[0] == "root/job-1/chk-3/_metadata"  # metadata goes first
    assert storage.list_checkpoint_files(JOB, 3) == ["root/job-1/chk-3/taskowned/sink[0]/keyed.arrow"]
    storage.discard_checkpoint(JOB, 10)
    assert storage.list_checkpoint_ids(JOB) == [2, 3]
    assert storage.blob_store.exists("root/job-1/shared/sst-1")


def test_storage_from_uri(tmp_path) -> None:
    assert isinstance(storage_from_uri(None).blob_store, MemoryBlobStore)
    assert isinstance(storage_from_uri("memory://").blob_store, MemoryBlobStore)
    fs = storage_from_uri(str(tmp_path / "d"))
    fs.write_task_file(JOB, 1, "f", b"x")
    assert (tmp_path / "d" / JOB / "chk-1" / "taskowned" / "f").read_bytes() == b"x"


def test_corrupt_checkpoint_error_pickles_with_its_path() -> None:
    error = pickle.loads(pickle.dumps(CorruptCheckpointError("bad file a/b", "a/b")))
    assert isinstance(error, StorageError) and error.path == "a/b" and str(error) == "bad file a/b"
