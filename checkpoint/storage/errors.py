"""The errors of checkpoint storage (`checkpoint.storage.layout`): every one is a `StorageError`,
an `OSError`; those about one file name it (`StorageFileError.path`)."""

from __future__ import annotations

__all__ = ["BlobNotFoundError", "CorruptCheckpointError", "MissingMetadataError", "StorageError",
           "StorageFileError", "StorageTimeoutError"]


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
