"""What every `barrierflow` sub-command shares: the house error format (`UsageError`, `Parser`),
the option value parsers, and the console it prints to."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console

console = Console()


class UsageError(Exception):
    """A bad command line: printed as one `barrierflow: error: ...` line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse with the house error format: one line, naming the command, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.partition(" ")[2]
        hint = f" (see: {self.prog} --help)"
        self.exit(2, f"barrierflow: error: {command + ': ' if command else ''}{message}{hint}\n")


def number(kind: type, minimum: float, unit: str, *, inclusive: bool) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {unit}, got {text!r}") from None
        if value < minimum or (value == minimum and not inclusive):
            bound = ">=" if inclusive else ">"
            raise argparse.ArgumentTypeError(f"must be {bound} {minimum:g} ({unit}), got {text!r}")
        return value

    return parse


seconds = number(float, 0, "a number of seconds", inclusive=False)
positive = number(int, 1, "a whole number", inclusive=True)
count = number(int, 0, "a whole number", inclusive=True)
#: `run --mode`: the guarantee
RUN_MODES = ("exactly-once", "at-least-once")


def run_mode(text: str) -> str:
    from checkpoint.modes import parse_mode
    from vocabulary.options import InvalidOptionError

    try:
        return parse_mode(text, accepted=RUN_MODES).name
    except InvalidOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None


def slow_task(text: str) -> tuple[str, float]:
    task, sep, factor = text.rpartition("=")
    try:
        value = float(factor)
    except ValueError:
        value = -1.0
    if not sep or not task or value <= 0:
        raise argparse.ArgumentTypeError(f"expected TASK=FACTOR (a task or vertex name and a factor > 0, "
                                         f"e.g. count[1]=3), got {text!r}")
    return task, value


#: checkpoint interval `run` uses when it enables checkpointing and no --interval is given (seconds)
DEFAULT_INTERVAL = 0.1
