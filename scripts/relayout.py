"""Move modules into layer sub-packages so the folders show the layers (issue 21, item 6).

    python3 scripts/relayout.py [--dry-run] [--keep]

Run once, from the repository root, on a clean work tree, after every branch is merged. It:

1. `git mv`s each file or folder of `MOVES` (a listed path that does not exist is reported and
   skipped; a module nobody listed stays where it is and is reported, so the lead can place it);
2. rewrites every reference to a moved module in the tracked text files: in Python, the import
   statements (`from runtime.sim import swarm` is split by the new home of each name), string
   literals and comments — never other code, where `checkpoint.storage` may be an attribute of a
   variable; in Markdown, TOML, shell and the rest, every dotted name (`runtime.sim.vopr`,
   `python -m ...`, `runtime.cli:main`) and every path (`runtime/task.py`, `runtime/barriers/`);
3. writes the layer rules of `tests/test_import_layers.py` for the new names (`NEW_LAYERS`);
4. creates each new package's `__init__.py` (keeping one that exists, e.g. `runtime/jobmaster/`);
5. runs `ruff check --fix` (import order) and `ruff check`.

It then deletes itself and its test (`--keep` keeps them): its map describes the layout it replaces. Nothing is
committed; review `git status` / `git diff -M --stat` and commit.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

#: (old path, new path): a module or a whole folder
MOVES: list[tuple[str, str]] = [
    # the protocol core: messages, barriers, gate, the task and its parts, channels
    ("runtime/errors.py", "runtime/core/errors.py"),
    ("runtime/ports.py", "runtime/core/ports.py"),
    ("runtime/histogram.py", "runtime/core/histogram.py"),
    ("runtime/task_metrics.py", "runtime/core/task_metrics.py"),
    ("runtime/record_types.py", "runtime/core/record_types.py"),
    ("runtime/messages.py", "runtime/core/messages.py"),
    ("runtime/spilling.py", "runtime/core/spilling.py"),
    ("runtime/barriers", "runtime/core/barriers"),
    ("runtime/input_gate.py", "runtime/core/input_gate.py"),
    ("runtime/debloat.py", "runtime/core/debloat.py"),
    ("runtime/partitioners.py", "runtime/core/partitioners.py"),
    ("runtime/links.py", "runtime/core/links.py"),
    ("runtime/graph.py", "runtime/core/graph.py"),
    ("runtime/operator_chain.py", "runtime/core/operator_chain.py"),
    ("runtime/record_writer.py", "runtime/core/record_writer.py"),
    ("runtime/subtask_checkpoint.py", "runtime/core/subtask_checkpoint.py"),
    ("runtime/task.py", "runtime/core/task.py"),
    # the job master (the jobmaster branch creates runtime/jobmaster/: these join it)
    ("runtime/faults.py", "runtime/jobmaster/faults.py"),
    ("runtime/fault_schedule.py", "runtime/jobmaster/fault_schedule.py"),
    ("runtime/fault_storage.py", "runtime/jobmaster/fault_storage.py"),
    ("runtime/restart.py", "runtime/jobmaster/restart.py"),
    ("runtime/result.py", "runtime/jobmaster/result.py"),
    ("runtime/restore_match.py", "runtime/jobmaster/restore_match.py"),
    ("runtime/restore.py", "runtime/jobmaster/restore.py"),
    ("runtime/channel_rescale.py", "runtime/jobmaster/channel_rescale.py"),
    ("runtime/durable_committer.py", "runtime/jobmaster/durable_committer.py"),
    ("runtime/progress.py", "runtime/jobmaster/progress.py"),
    # verification on the simulator (the invariant checker stays in runtime/sim/: the executor runs it)
    ("runtime/sim/swarm.py", "runtime/verify/swarm.py"),
    ("runtime/sim/shrink.py", "runtime/verify/shrink.py"),
    ("runtime/sim/vopr.py", "runtime/verify/vopr.py"),
    # the user API and the command line
    ("runtime/api.py", "runtime/api/environment.py"),
    ("runtime/cli.py", "runtime/api/cli.py"),
    # checkpoint/: the pure coordination stays; storage, HA services and tools go to checkpoint/io/
    ("checkpoint/storage.py", "checkpoint/io/storage.py"),
    ("checkpoint/store.py", "checkpoint/io/store.py"),
    ("checkpoint/cleanup.py", "checkpoint/io/cleanup.py"),
    ("checkpoint/tools.py", "checkpoint/io/tools.py"),
    ("checkpoint/recovery.py", "checkpoint/io/recovery.py"),
    ("checkpoint/ha_store.py", "checkpoint/io/ha_store.py"),
    ("checkpoint/ha_memory.py", "checkpoint/io/ha_memory.py"),
    ("checkpoint/ha_services.py", "checkpoint/io/ha_services.py"),
    ("checkpoint/zookeeper.py", "checkpoint/io/zookeeper.py"),
    ("checkpoint/zookeeper_server.py", "checkpoint/io/zookeeper_server.py"),
    ("runtime/state_files.py", "checkpoint/io/state_files.py"),
    ("runtime/snapshot_writer.py", "checkpoint/io/snapshot_writer.py"),
]

#: docstrings of the packages the move creates (an existing `__init__.py` is kept)
PACKAGES: dict[str, str] = {
    "runtime/core": "The protocol core (pure): messages, barrier handlers, the input gate, the task and its parts\n"
                    "(operator chain, record writer, subtask checkpoints), partitioners, spilling, debloating.\n"
                    "Imports nothing above it: no job master, executor, API or CLI; no ray/pyspark/kazoo.",
    "runtime/jobmaster": "The job master: deployment, attempts, restart strategy, failover, fault plans, restore\n"
                         "and rescale planning, the job result. Executor-neutral and pure.",
    "runtime/verify": "Verification on the simulator: swarm testing, shrinking, the VOPR-style runner.",
    "runtime/api": "The user API (`environment`: StreamEnvironment, DataStream) and the `barrierflow` command line\n"
                   "(`cli`). The names users import are re-exported by the `runtime` package.",
    "checkpoint/io": "Checkpoint storage and high availability: blob stores and the checkpoint layout, completed-\n"
                     "checkpoint stores, cleanup and tools, recovery modes, ZooKeeper (the only kazoo import),\n"
                     "the simulator's in-memory HA services, and the files a task snapshot is written as.",
}

#: `LAYERS` of tests/test_import_layers.py after the move (lowest first)
NEW_LAYERS = '''LAYERS: list[tuple[str, list[str]]] = [
    ("ids, options, ports", [
        "checkpoint.handles", "checkpoint.reasons", "checkpoint.options", "runtime.core.ports",
        "runtime.core.errors", "runtime.core.histogram", "runtime.core.task_metrics", "runtime.core.debloat", "runtime.jobmaster.faults",
        "runtime.core.links",
    ]),
    ("state", ["state"]),
    # checkpoint/io/state_files, snapshot_writer: how a task snapshot becomes files in checkpoint storage
    ("checkpoint", ["checkpoint"]),
    ("records", ["runtime.core.record_types", "runtime.core.messages", "runtime.core.spilling"]),
    ("operators", ["operators"]),
    ("protocol core", ["runtime.core"]),
    ("job master", ["runtime.jobmaster", "spark_bridge"]),
    ("executors", ["runtime.sim", "runtime.ray"]),
    # `runtime/__init__` is the public API facade; `spark_bridge/__init__` re-exports its source
    ("api", ["runtime.__init__", "runtime.api", "spark_bridge.__init__", "spark_bridge.source"]),
    ("workloads, verification", ["runtime.workloads", "runtime.calibration", "runtime.verify"]),
    ("benchmarks", ["benchmarks"]),
    ("cli", ["runtime.api.cli"]),
]'''
LAYERS_BLOCK = re.compile(r"^LAYERS: list\[tuple\[str, list\[str\]\]\] = \[\n.*?^\]", re.M | re.S)

TEXT_SUFFIXES = {".py", ".md", ".toml", ".sh", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".rst", ".json"}
SELF = "scripts/relayout.py"
SELF_TEST = "tests/test_relayout.py"
#: not rewritten: this script, and the draft of the new layout docs (written in the new names)
SKIP = {SELF, SELF_TEST, "docs/layout-after-relayout.md"}


def module_of(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def dotted_map(moves: list[tuple[str, str]]) -> dict[str, str]:
    return {module_of(old): module_of(new) for old, new in moves}


def _alternation(names: list[str]) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


class Rewriter:
    """Rewrites module references of the old layout to the new one."""

    def __init__(self, moves: list[tuple[str, str]]) -> None:
        self.modules = dotted_map(moves)
        self.paths = {old: new for old, new in moves}
        # a dotted name: not part of a longer one (`x.runtime.api`, `runtime.api2`)
        self._dotted = re.compile(rf"(?<![\w.])({_alternation(list(self.modules))})(?![\w])")
        self._path = re.compile(rf"(?<![\w/.-])({_alternation(list(self.paths))})(?![\w])")

    def rename(self, module: str) -> str:
        """The new name of `module` (or of the moved module it is inside)."""
        return self._dotted.sub(lambda m: self.modules[m.group(1)], module) if module else module

    def text(self, text: str) -> str:
        """Dotted names and paths in free text."""
        text = self._path.sub(lambda m: self.paths[m.group(1)], text)
        return self._dotted.sub(lambda m: self.modules[m.group(1)], text)

    def _import_from(self, node: ast.ImportFrom, indent: str) -> str | None:
        """`from pkg import a, b` split by where each name now lives (a moved submodule or not)."""
        if node.level or not node.module:
            return None
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            renamed = self.rename(full)
            home = renamed.rpartition(".")[0] if renamed != full else self.rename(node.module)
            groups.setdefault(home, []).append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
        if list(groups) == [node.module]:
            return None
        lines = []
        for home, names in groups.items():
            line = f"{indent}from {home} import {', '.join(names)}"
            if len(line) > 100:
                line = f"{indent}from {home} import (\n" + "".join(f"{indent}    {n},\n" for n in names) + f"{indent})"
            lines.append(line)
        return "\n".join(lines)

    def python(self, source: str) -> str:
        """Import statements, string literals and comments of a Python file."""
        lines = source.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))

        def at(line: int, col: int) -> int:  # tokenize: a column in characters
            return offsets[line - 1] + col

        def at_byte(line: int, col: int) -> int:  # ast: a column in UTF-8 bytes
            return offsets[line - 1] + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8"))

        edits: list[tuple[int, int, str]] = []
        tree = ast.parse(source)
        import_spans = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                start = at_byte(node.lineno, node.col_offset)
                end = at_byte(node.end_lineno or node.lineno, node.end_col_offset or 0)
                import_spans.append((start, end))
                old = source[start:end]
                new = self._import_from(node, "") if isinstance(node, ast.ImportFrom) else None
                if new is not None:
                    indent = source[offsets[node.lineno - 1]:start]
                    new = new.replace("\n", "\n" + indent)
                else:
                    new = self._dotted.sub(lambda m: self.modules[m.group(1)], old)
                if new != old:
                    edits.append((start, end, new))
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.STRING, tokenize.COMMENT):
                start, end = at(*token.start), at(*token.end)
                if any(s <= start < e for s, e in import_spans):
                    continue
                new = self.text(token.string)
                if new != token.string:
                    edits.append((start, end, new))
        for start, end, new in sorted(edits, reverse=True):
            source = source[:start] + new + source[end:]
        return source


def git(*args: str, capture: bool = False) -> str:
    done = subprocess.run(["git", *args], check=True, text=True, capture_output=capture)
    return done.stdout if capture else ""


def unplaced_modules(root: Path, moves: list[tuple[str, str]]) -> list[str]:
    """Modules directly in runtime/ and checkpoint/ that no move names (they stay put)."""
    listed = {old for old, _ in moves}
    keep = {"runtime/__init__.py", "checkpoint/__init__.py", "checkpoint/handles.py", "checkpoint/reasons.py",
            "checkpoint/options.py", "checkpoint/modes.py", "checkpoint/ids.py", "checkpoint/completed.py",
            "checkpoint/pending.py", "checkpoint/stats.py", "checkpoint/coordinator.py"}
    found = []
    for folder in ("runtime", "checkpoint"):
        for path in sorted((root / folder).glob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel not in listed and rel not in keep:
                found.append(rel)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="print the moves, change nothing")
    parser.add_argument("--keep", action="store_true", help="keep this script afterwards")
    args = parser.parse_args(argv)
    root = Path(git("rev-parse", "--show-toplevel", capture=True).strip())
    if Path.cwd().resolve() != root.resolve():
        parser.error(f"run from the repository root ({root})")
    moves = [(old, new) for old, new in MOVES if (root / old).exists()]
    for old, new in MOVES:
        if not (root / old).exists():
            print(f"skip: {old} does not exist" + (" (already moved?)" if (root / new).exists() else ""))
        elif (root / new).exists():
            parser.error(f"{new} exists already: cannot move {old} there")
    for path in unplaced_modules(root, MOVES):
        print(f"note: {path} is in no move: it stays where it is (place it in MOVES or leave it)")
    if args.dry_run:
        for old, new in moves:
            print(f"{old} -> {new}")
        return 0
    if git("status", "--porcelain", "--untracked-files=no", capture=True).strip():
        parser.error("the work tree has uncommitted changes: commit or discard them first")

    for old, new in moves:
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        git("mv", old, new)
    for package, doc in PACKAGES.items():
        init = root / package / "__init__.py"
        if (root / package).is_dir() and not init.exists():
            init.write_text(f'"""{doc}\n"""\n')
            git("add", init.relative_to(root).as_posix())

    rewriter = Rewriter(moves)
    changed = 0
    for rel in git("ls-files", capture=True).splitlines():
        path = root / rel
        if rel in SKIP or path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        try:
            old = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewriter.python(old) if path.suffix == ".py" else rewriter.text(old)
        if rel == "tests/test_import_layers.py":
            new, count = LAYERS_BLOCK.subn(NEW_LAYERS, new)
            if count != 1:
                print(f"warning: {rel}: LAYERS block not found; update it by hand", file=sys.stderr)
        if new != old:
            path.write_text(new)
            changed += 1
    print(f"moved {len(moves)} paths, rewrote {changed} files")

    subprocess.run([sys.executable, "-m", "ruff", "check", "--fix", "-q", "."], check=False)
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "."], check=False)
    if not args.keep:
        git("rm", "-q", "-f", SELF, SELF_TEST)
    git("add", "-A")
    print("done: review `git diff --cached -M --stat`, run the tests, commit" if lint.returncode == 0
          else "ruff reports problems above: fix them before committing")
    return lint.returncode


if __name__ == "__main__":
    sys.exit(main())
