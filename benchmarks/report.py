"""Shared output for benchmarks: the common flags, a Markdown table and a JSON file.

Every benchmark (`python -m benchmarks.<name>`) takes the same three flags, added and resolved
here (`add_output_arguments`, `parse_args`):

* `--out DIR`: where its table (`<name>.md`), JSON (`<name>.json`) and plots go (default
  `bench-out`);
* `--json PATH`: the JSON somewhere else (a directory is an error, not a crash);
* `--quick`: smaller runs; a size given with `add_sized_argument` defaults to its quick value.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_OUT = "bench-out"
_SIZED = "_sized_"


def add_output_arguments(parser: argparse.ArgumentParser, name: str, *, quick_help: str = "smaller, faster runs",
                         json_help: str | None = None) -> None:
    """Add `--out DIR`, `--json PATH` and `--quick` (see the module docstring); `name` is the
    file stem of the benchmark's outputs."""
    parser.add_argument("--out", metavar="DIR", default=DEFAULT_OUT, type=_directory,
                        help=f"directory for the table ({name}.md), the JSON and any plots (default {DEFAULT_OUT})")
    parser.add_argument("--json", metavar="PATH", default=None, type=_json_file,
                        help=json_help or f"write the JSON here instead (default OUT/{name}.json)")
    parser.add_argument("--quick", action="store_true", help=quick_help)


def at_least_one(text: str) -> int:
    """argparse type of `--repeat`: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--repeat must be an integer >= 1, got {text!r}")
    return value


def _directory(text: str) -> str:
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"must be a directory, got the file {text!r}")
    return text


def _json_file(text: str) -> str:
    if os.path.isdir(text) or text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(
            f"must be a file path, got the directory {text!r} (--out DIR names the output directory)")
    return text


def add_sized_argument(parser: argparse.ArgumentParser, flag: str, *, full: Any, quick: Any, type: Any = int,
                       help: str) -> None:
    """A size option whose default depends on `--quick` (resolved by `parse_args`)."""
    dest = flag.lstrip("-").replace("-", "_")
    parser.add_argument(flag, type=type, default=None, help=f"{help} (default {full}; {quick} with --quick)")
    parser.set_defaults(**{_SIZED + dest: (full, quick)})


@dataclass(frozen=True)
class BenchOutput:
    """Where a benchmark writes: `out_dir/<name>.md` and the JSON at `json_path`."""

    name: str
    out_dir: str
    json_path: str

    @property
    def table_path(self) -> str:
        return os.path.join(self.out_dir, f"{self.name}.md")

    def write(self, payload: Any, table: str | None = None) -> list[str]:
        """Write the JSON (and the Markdown `table`); returns the paths written."""
        os.makedirs(self.out_dir, exist_ok=True)
        write_json(self.json_path, payload)
        files = [self.json_path]
        if table is not None:
            with open(self.table_path, "w") as fh:
                fh.write(table.rstrip("\n") + "\n")
            files.append(self.table_path)
        return files


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)` (a directory as `--json`, a file as `--out` exit 2 naming the
    flag), then sizes from `add_sized_argument` default to their quick or full value."""
    args = parser.parse_args(argv)
    for key in [k for k in vars(args) if k.startswith(_SIZED)]:
        full, quick = getattr(args, key)
        delattr(args, key)
        dest = key[len(_SIZED):]
        if getattr(args, dest) is None:
            setattr(args, dest, quick if args.quick else full)
    return args


def output_of(args: argparse.Namespace, name: str) -> BenchOutput:
    """The outputs of a benchmark parsed by `parse_args`; `name` is the file stem."""
    return BenchOutput(name, args.out, args.json or os.path.join(args.out, f"{name}.json"))


def load_line(before: Sequence[float]) -> str:
    """The line under a table: the load average `before` (`os.getloadavg()`) the runs and now, and the cores."""
    return f"load average {before[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} cores"


def write_with_plot(args: argparse.Namespace, name: str, payload: Any, table: str,
                    plot: Callable[[str], None]) -> None:
    """Print `table`, write it and the JSON `payload` (`output_of(args, name)`), draw `plot(path)`
    to OUT/<name>.png, and print what was written."""
    print(table)
    out = output_of(args, name)
    files = out.write(payload, table)
    png = os.path.join(out.out_dir, f"{name}.png")
    plot(png)
    print("wrote", ", ".join([*files, png]))


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


def spread(rows: Iterable[dict[str, Any]], field: str) -> list[float] | None:
    """[min, max] of `field` over the rows whose status is ok and that have it; None below two."""
    values = [r[field] for r in rows if r.get("status") == "ok" and r.get(field) is not None]
    return [min(values), max(values)] if len(values) > 1 else None


def median_row(rows: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """The row of the median `key` over repeated runs (the upper one of an even count)."""
    return sorted(rows, key=lambda r: r[key])[len(rows) // 2]


def abort_reasons(aborted: Iterable[Any]) -> dict[str, int]:
    """Aborted checkpoints (`CheckpointStats`) counted per failure reason, sorted by reason."""
    reasons = Counter(c.failure_reason.value if c.failure_reason else "unknown" for c in aborted)
    return dict(sorted(reasons.items()))
