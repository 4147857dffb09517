"""The errors of checkpoint storage (`checkpoint.storage.layout`): every one is a `StorageError`,
an `OSError`; those about one file name it (`StorageFileError.path`). Beside them, the errors the
job master and the coordinator catch from the implementations in `checkpoint/io/`: the HA
services' (`HighAvailabilityError`) and the checkpoint tools' (`CheckpointToolError`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from checkpoint.storage.layout import CheckpointStorage

__all__ = ["BlobNotFoundError", "CheckpointToolError", "CorruptCheckpointError", "HighAvailabilityError",
           "MissingMetadataError", "NoCompletedCheckpointError", "StorageError", "StorageFileError",
           "StorageTimeoutError"]


class StorageError(OSError):
    """Reading or writing checkpoint storage failed (names the path)."""


class BlobNotFoundError(StorageError):
    """No file at the given path."""


class StorageTimeoutError(StorageError):
    """A call to checkpoint storage did not return within its timeout (names the URI)."""


class StorageFileError(StorageError):
    """A `StorageError` about one file: its message is a sentence naming it (not OSError's
    `[Errno message] path` form).

    Attributes:
        path: the offending file.
    """

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):  # keep `path` when pickled (Ray ships exceptions between actors)
        return (type(self), (self.args[0], self.path))


class CorruptCheckpointError(StorageFileError):
    """A checkpoint file is missing, truncated, unparsable or fails its checksum (`path`)."""


class MissingMetadataError(CorruptCheckpointError):
    """A checkpoint directory without its `_metadata`: what every checkpoint that never completed
    leaves (the coordinator writes it last), or a completed one whose metadata was removed."""


class HighAvailabilityError(Exception):
    """The HA backend (ZooKeeper) cannot serve a request: not connected, timed out, or failed."""


class CheckpointToolError(ValueError):
    """The directory, job or checkpoint asked for does not exist or cannot be used."""


class NoCompletedCheckpointError(CheckpointToolError):
    """No checkpoint of the job ever completed: each of its checkpoint directories lacks its
    `_metadata`, which the coordinator writes last (`storage`, `job_id`: where)."""

    def __init__(self, message: str, storage: CheckpointStorage, job_id: str) -> None:
        super().__init__(message)
        self.storage, self.job_id = storage, job_id
