"""The README's command table lists `calibrate`, `whatif` and `bench` with the options they have."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from runtime.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def _options(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    return {flag for action in parser._actions for flag in action.option_strings
            if flag.startswith("--") and flag not in ("--help", "--debug", "--no-plots", "--no-progress", "--peers",
                                                      "--json", "--output")}


@pytest.mark.parametrize("command", ["calibrate", "whatif", "bench"])
def test_the_command_table_row_names_every_option(command: str) -> None:
    rows = [line for line in README.read_text().splitlines() if line.startswith(f"| `barrierflow {command} ")]
    assert rows, f"no README command table row for barrierflow {command}"
    row = rows[0].split(" | ")[0]
    missing = sorted(flag for flag in _options(command) if flag not in row)
    assert not missing, f"README's row for {command} lacks {missing}"
    for flag in [w.strip("`[]|,") for w in row.split() if w.strip("`[").startswith("--")]:
        assert flag.split("\\")[0] in _options(command) | {"--json", "--output"}, f"{command}: README names {flag}"
