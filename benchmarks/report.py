"""Shared output for benchmarks: a Markdown table on stdout and a JSON file."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def write_json(path: str, payload: Any) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as fh:
        json.dump(payload, fh, indent=2, default=str)


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[index]


@contextlib.contextmanager
def local_checkpoint_dir() -> Iterator[str]:
    """A fresh local checkpoint directory for one benchmark run, removed afterwards.

    Benchmarks on Ray checkpoint to a local directory, as the embedded default does (`barrierflow
    demo`): with in-memory storage every file write would be one more actor call.
    """
    with tempfile.TemporaryDirectory(prefix="barrierflow-bench-") as path:
        yield path


def median_row(rows: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """The row of the median `key` over repeated runs (the upper one of an even count)."""
    return sorted(rows, key=lambda r: r[key])[len(rows) // 2]


def abort_reasons(aborted: Iterable[Any]) -> dict[str, int]:
    """Aborted checkpoints (`CheckpointStats`) counted per failure reason, sorted by reason."""
    reasons = Counter(c.failure_reason.value if c.failure_reason else "unknown" for c in aborted)
    return dict(sorted(reasons.items()))
