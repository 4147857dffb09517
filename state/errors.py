"""Errors raised by the state layer. Each message names the operator, state, key or value at fault."""

from __future__ import annotations


class StateError(Exception):
    """Base class of every error raised by `state`."""


class StateSerializationError(StateError, ValueError):
    """A value (or a whole state column) cannot be carried losslessly in Arrow."""


class StateFormatError(StateError, ValueError):
    """Bytes handed to a decoder are not a valid (or not the expected kind of) state blob."""


class StateAccessError(StateError, RuntimeError):
    """State used wrongly: no current key, a name reused with another kind, a bad name."""


class KeyGroupRangeError(StateAccessError):
    """A key whose key group does not belong to this backend's key-group range."""


class StateRestoreError(StateError):
    """Snapshots that cannot be restored together (other operator, max parallelism, overlap)."""
