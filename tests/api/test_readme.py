"""Every Python block of the README runs as written (in order, one namespace, as a reader pastes
them), and a `print(...)  # value  (explanation)` line prints `value` ("..." matches anything)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PRINT = re.compile(r"^print\((.*)\)\s+#\s*(.+)$")


def python_blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def test_readme_has_python_examples() -> None:
    assert len(python_blocks()) >= 2


def test_every_python_block_runs_and_prints_what_its_comments_say() -> None:
    namespace: dict = {"__name__": "readme"}
    for number, block in enumerate(python_blocks(), 1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"README.md python block {number}", "exec"), namespace)  # noqa: S102
        printed = out.getvalue().splitlines()
        expected = [PRINT.match(line.strip()) for line in block.splitlines()]
        expected = [m.group(2) for m in expected if m]
        assert len(printed) == len(expected), (number, printed)
        for line, comment in zip(printed, expected):
            value = comment.split("  ", 1)[0].strip()
            pattern = re.escape(value).replace(re.escape("..."), ".*")
            assert re.fullmatch(pattern, line), (number, line, comment)
