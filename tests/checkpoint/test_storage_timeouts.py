"""Checkpoint storage that cannot be reached fails within seconds, naming the URI:
every call to a remote filesystem is bounded by `storage_timeout`. No network here: an
S3 endpoint on a closed local port fails fast, one on a port that accepts but never answers hangs,
and a `gs://` URI cannot be reached at all — each must end within the bound."""

from __future__ import annotations

import threading
import time

import pyarrow.fs as pafs
import pytest

from checkpoint.io.fs_blob_store import FsBlobStore
from checkpoint.io.storage import storage_from_uri
from checkpoint.storage.layout import StorageError, StorageTimeoutError
from operators import CollectSink
from runtime.api.environment import StreamEnvironment
from vocabulary.options import DEFAULT_STORAGE_TIMEOUT, CheckpointConfig, InvalidOptionError

BOUND = 15.0  # seconds: generous, the timeouts below are 1-2 s


def s3(port: int) -> str:
    return f"s3://bucket/chk?endpoint_override=127.0.0.1:{port}&scheme=http"


def timed_failure(fn) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(StorageError) as info:
        fn()
    return info.value, time.monotonic() - started


@pytest.mark.slow
def test_an_s3_endpoint_that_never_answers_times_out_naming_the_uri(silent_port: int) -> None:
    uri = s3(silent_port)
    error, elapsed = timed_failure(lambda: FsBlobStore(uri, timeout=1.0))
    assert isinstance(error, StorageTimeoutError)
    assert uri in str(error) and "did not answer within 1 s" in str(error) and "storage_timeout" in str(error)
    assert elapsed < BOUND


@pytest.mark.slow
def test_an_s3_endpoint_on_a_closed_port_fails_naming_the_uri(closed_port: int) -> None:
    uri = s3(closed_port)
    error, elapsed = timed_failure(lambda: storage_from_uri(uri, timeout=2.0))
    assert uri in str(error) and str(closed_port) in str(error)
    assert elapsed < BOUND


@pytest.mark.slow
def test_a_gs_uri_without_network_fails_within_the_timeout() -> None:
    # regression: blocked > 200 s (GCS retries for 15 minutes by default)
    error, elapsed = timed_failure(lambda: storage_from_uri("gs://b/x", timeout=1.0))
    assert "gs://b/x" in str(error)
    assert elapsed < BOUND


class HangingHandler(pafs.FileSystemHandler):
    """A remote filesystem whose calls block until released (a store that stops answering)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def _hang(self, what: str) -> None:
        self.calls.append(what)
        self.release.wait(30)
        raise OSError(f"{what}: connection reset")

    def get_type_name(self) -> str:
        return "hanging"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths):
        self._hang("stat")

    def get_file_info_selector(self, selector):
        self._hang("list")

    def create_dir(self, path, recursive):
        if self.calls or path != "base":
            self._hang("mkdir")

    def delete_file(self, path):
        self._hang("delete")

    def move(self, src, dest):
        self._hang("move")

    def open_input_file(self, path):
        self._hang("read")

    def open_output_stream(self, path, metadata):
        self._hang("write")

    def copy_file(self, src, dest):
        self._hang("copy")

    def delete_dir(self, path):
        self._hang("rmdir")

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self._hang("rmdir")

    def delete_root_dir_contents(self):
        self._hang("rmdir")

    def open_append_stream(self, path, metadata):
        self._hang("append")

    def open_input_stream(self, path):
        self._hang("read")

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other


@pytest.mark.slow
@pytest.mark.parametrize("call", ["put", "get", "delete", "exists", "list"])
def test_every_call_to_a_store_that_stops_answering_is_bounded(call: str) -> None:
    handler = HangingHandler()
    store = FsBlobStore("base", timeout=0.5, filesystem=pafs.PyFileSystem(handler))
    args = {"put": ("job/chk-1/_metadata", b"x"), "list": ("job/",)}.get(call, ("job/chk-1/_metadata",))
    try:
        error, elapsed = timed_failure(lambda: getattr(store, call)(*args))
    finally:
        handler.release.set()
    assert isinstance(error, StorageTimeoutError) and "'base' did not answer within 0.5 s" in str(error)
    assert elapsed < 5.0 and handler.calls


def test_local_directories_are_called_directly_and_the_default_is_ten_seconds(tmp_path) -> None:
    assert DEFAULT_STORAGE_TIMEOUT == 10.0 and CheckpointConfig().storage_timeout == DEFAULT_STORAGE_TIMEOUT
    local = FsBlobStore(str(tmp_path / "chk"))
    assert local.timeout == DEFAULT_STORAGE_TIMEOUT and not local._bounded
    main = threading.get_ident()
    seen = []
    local._fs = type("Spy", (), {"__getattr__": lambda self, name: (seen.append(threading.get_ident()),
                                                                     getattr(pafs.LocalFileSystem(), name))[1]})()
    local.put("a/b", b"1")
    assert local.get("a/b") == b"1" and set(seen) == {main}
    with pytest.raises(InvalidOptionError, match="storage_timeout"):
        CheckpointConfig(storage_timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        FsBlobStore(str(tmp_path), timeout=-1)


@pytest.mark.slow
def test_a_job_whose_storage_never_answers_fails_within_seconds_naming_it(silent_port: int) -> None:
    uri = s3(silent_port)
    env = StreamEnvironment(parallelism=1)
    env.enable_checkpointing(interval=0.01, storage=uri, storage_timeout=1.0)
    env.from_collection([{"a": 1}]).sink_to(CollectSink("out"))
    error, elapsed = timed_failure(lambda: env.execute("job", executor="sim"))
    assert uri in str(error) and "did not answer" in str(error)
    assert elapsed < BOUND
