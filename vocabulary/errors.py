"""Errors every layer may raise, kept at the bottom so the protocol core need not import the job
result (`runtime/jobmaster/result.py`) to say a failure must not be restarted."""

from __future__ import annotations


class SuppressRestartsError(RuntimeError):
    """A failure no restart can fix (Flink's `SuppressRestartsException`): the executor fails the
    job for good at once instead of restarting it (a restart would hide the problem, or turn it
    into duplicated output)."""
