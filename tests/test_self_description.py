"""The code speaks of itself: no tracked file (code, comments, help texts, docs, tests,
benchmarks) points to a tracker's issue or a work session, narrates a change, or cites a design
file outside the repository; the rules live in `docs/semantics.md`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: what a reader of a fresh clone cannot follow (written in pieces so this file passes its own scan)
FORBIDDEN = re.compile("|".join([
    r"\biss" r"ue [0-9]", r"\bsess" r"ion [0-9]",  # a tracker's issue, a work session
    r"DES" r"IGN §", r"DES" r"IGN\.md", r"PLAT" r"FORM\.md", r"\bse" r"ed[ -]00[0-9]\b",  # documents outside the repository
    r"(before|after) th" r"is change",  # history narration
]), re.IGNORECASE)


def tracked_files() -> list[Path]:
    done = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, timeout=60)
    assert done.returncode == 0, f"`git ls-files` failed in {REPO}: {done.stderr.decode(errors='replace')}"
    return [REPO / name for name in done.stdout.decode().split("\0") if name]


def hits(text: str) -> list[str]:
    """`line: text` of each line of `text` with a forbidden reference."""
    return [f"{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1) if FORBIDDEN.search(line)]


def test_the_pattern_finds_what_it_forbids_and_passes_plain_text() -> None:
    forbidden = ["see iss" "ue 38", "(sess" "ion 9)", "DES" "IGN §4", "the DES" "IGN.md file", "seed 0" "03",
                 "the seed-0" "01 job", "slower befo" "re this change"]
    assert all(hits(line) for line in forbidden), [line for line in forbidden if not hits(line)]
    assert not hits("an issue with 3 nodes; the session timeout; seed 7; seed=1003; the design")


def test_no_tracked_file_cites_an_issue_a_session_or_an_outside_document() -> None:
    found = []
    for path in tracked_files():
        if not path.is_file():
            continue  # tracked, deleted in the working tree
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        found += [f"{path.relative_to(REPO)}:{hit}" for hit in hits(data.decode(errors="replace"))]
    assert not found, "say what the code does in its own words (docs/semantics.md for the rules):\n" + \
        "\n".join(found)
