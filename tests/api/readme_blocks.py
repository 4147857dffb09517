"""The README's code blocks as a reader runs them (`test_readme.py`), and a runner that executes
one section's python blocks in a fresh process on a chosen executor:

    python tests/api/readme_blocks.py "Restore and rescale" ray

runs, in the current folder, every python block before that section as written (they define what
the section uses, as a reader pasted them), then the section's blocks with `executor="sim"` read
as `executor="ray"`; each `print(...)  # value (explanation)` line must print `value` ("..."
matches anything). Exit code 0: every block ran and printed what its comments say.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BLOCK = re.compile(r"(?:<!--\s*(not run|file):\s*(.*?)\s*-->\n)?```(python|bash)\n(.*?)```", re.S)
HEADING = re.compile(r"^## (.+)$", re.M)
PRINT = re.compile(r"^print\((.*)\)\s+#\s*(.+)$")
#: how the README's python examples name their executor
AS_WRITTEN = 'executor="sim"'


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, marker (`not run`, `file` or None), the marker's text, the
    code and the `## ` section it is in."""

    language: str
    marker: str | None
    marker_text: str
    code: str
    section: str


def blocks(language: str, text: str | None = None) -> list[Block]:
    """Every `language` block of the README (or of `text`), in order."""
    text = README.read_text() if text is None else text
    headings = [(m.start(), m.group(1).strip()) for m in HEADING.finditer(text)]
    found = []
    for m in BLOCK.finditer(text):
        if m[3] != language:
            continue
        section = next((title for start, title in reversed(headings) if start < m.start()), "")
        found.append(Block(m[3], m[1] or None, m[2] or "", m[4], section))
    return found


def python_blocks() -> list[Block]:
    """The python blocks a reader runs (files they save are not among them)."""
    return [b for b in blocks("python") if b.marker != "file"]


def on_executor(code: str, executor: str) -> str:
    """`code` with its executor (`executor="sim"`) replaced by `executor`."""
    return code.replace(AS_WRITTEN, f'executor="{executor}"')


def run_python(code: str, namespace: dict, where: str) -> None:
    """Execute `code` in `namespace`; every `print(...)  # value` line must print `value`.

    Raises:
        AssertionError: naming `where`, the line printed and the comment it should match.
    """
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), namespace)  # noqa: S102
    printed = out.getvalue().splitlines()
    expected = [m.group(2) for m in (PRINT.match(line.strip()) for line in code.splitlines()) if m]
    assert len(printed) == len(expected), (where, printed)
    for line, comment in zip(printed, expected):
        value = comment.split("  ", 1)[0].strip()
        pattern = re.escape(value).replace(re.escape("..."), ".*")
        assert re.fullmatch(pattern, line), (where, line, comment)


def run_section(section: str, executor: str) -> None:
    """Run the python blocks before `section` as written, then `section`'s on `executor`.

    Raises:
        AssertionError: a block printed something else, or the section names no executor to change.
    """
    every = python_blocks()
    mine = [i for i, b in enumerate(every) if b.section == section]
    assert mine, f"README has no python block in section {section!r}"
    assert any(AS_WRITTEN in every[i].code for i in mine), f"section {section!r} runs nothing on {AS_WRITTEN}"
    namespace: dict = {"__name__": "readme"}
    try:
        for number, block in enumerate(every[: mine[-1] + 1], 1):
            code = on_executor(block.code, executor) if block.section == section else block.code
            run_python(code, namespace, f"README.md python block {number} ({block.section})")
    finally:  # a Spark session the blocks started
        if "spark" in namespace:
            namespace["spark"].stop()


if __name__ == "__main__":
    sys.path.append(str(REPO))  # this checkout, as `tests/api/cli_launcher.py` runs the CLI
    run_section(sys.argv[1], sys.argv[2])
