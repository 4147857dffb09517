"""The protocol core stays pure (`docs/semantics.md`, "Pure protocol logic"): no ray/pyspark/kazoo; handlers and gate also no
time/random. Scans imports with `ast` and names the offending file and line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NEVER = {"ray", "pyspark", "kazoo"}
NO_CLOCK_OR_DICE = NEVER | {"time", "random"}

#: (path relative to the repo, forbidden top-level modules); directories are scanned recursively
PURE = [
    ("runtime/core/barriers", NO_CLOCK_OR_DICE),
    ("runtime/core/input_gate.py", NO_CLOCK_OR_DICE),
    ("runtime/records/messages.py", NEVER),
    ("runtime/core/task.py", NEVER),
    ("runtime/core/operator_chain.py", NEVER),
    ("runtime/core/record_writer.py", NEVER),
    ("runtime/core/subtask_checkpoint.py", NEVER),
    ("vocabulary/histogram.py", NO_CLOCK_OR_DICE),
    ("vocabulary/ports.py", NEVER),
    ("runtime/jobmaster/restore/match.py", NEVER),
    ("runtime/jobmaster/restore/channel_rescale.py", NEVER),
    ("runtime/jobmaster/lifecycle/restart.py", NEVER | {"time"}),  # time comes in as arguments, dice from a seeded rng
    ("runtime/jobmaster/faults/schedule.py", NEVER | {"time"}),  # the executors pass their time in; dice from the plan's seed
    ("runtime/jobmaster/master.py", NEVER | {"time"}),  # time from the injected clock, timers
    ("runtime/jobmaster/gateway.py", NEVER | {"time"}),
    # the parts both executors share: time is passed in or comes from the injected clock (they
    # reach `vocabulary.fault_plan`, whose plans draw from their own seed)
    ("runtime/jobmaster/faults/actions.py", NEVER | {"time"}),
    ("runtime/jobmaster/faults/counts.py", NEVER | {"time"}),
    ("runtime/jobmaster/coordination/coordinators.py", NO_CLOCK_OR_DICE),
    ("runtime/jobmaster/lifecycle/progress.py", NO_CLOCK_OR_DICE),
    ("runtime/jobmaster/lifecycle/watchdog.py", NO_CLOCK_OR_DICE),
    ("runtime/jobmaster/lifecycle/attempt_boundary.py", NO_CLOCK_OR_DICE),
    ("runtime/jobmaster/coordination/control_plane.py", NEVER | {"time"}),  # faults come from the plan's seeded schedule
    ("runtime/jobmaster/coordination/completions.py", NO_CLOCK_OR_DICE),
    ("runtime/jobmaster/coordination/task_reports.py", NEVER | {"time"}),  # faults come from the plan's seeded schedule
    # the coordinator and the parts it delegates to: time comes from the injected clock and timers
    ("checkpoint/coordinator.py", NO_CLOCK_OR_DICE),
    ("checkpoint/coordinator_gateway.py", NO_CLOCK_OR_DICE),
    ("checkpoint/periodic_trigger.py", NO_CLOCK_OR_DICE),
    ("checkpoint/final_checkpoint.py", NO_CLOCK_OR_DICE),
    ("checkpoint/failure_manager.py", NO_CLOCK_OR_DICE),
    ("checkpoint/lease.py", NO_CLOCK_OR_DICE | {"os", "socket"}),  # who may write a job directory: decided purely
    ("checkpoint/pending.py", NEVER),
    # checkpoint storage's layout, formats and stores: all I/O goes through the `BlobStore` port
    ("checkpoint/storage", NO_CLOCK_OR_DICE),
    ("state", NEVER),
    ("operators", NEVER),
]
#: must exist: the rest may not have been written yet
REQUIRED = {"runtime/core/barriers", "runtime/core/input_gate.py", "runtime/records/messages.py", "vocabulary/ports.py"}


def imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) in {"__import__", "import_module"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, node.lineno))
    return found


def violations(root: Path, entries: list[tuple[str, set[str]]]) -> list[str]:
    out = []
    for rel, forbidden in entries:
        path = root / rel
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
        for file in files:
            tree = ast.parse(file.read_text(), filename=str(file))
            for module, line in imported_modules(tree):
                top = module.split(".")[0]
                if top in forbidden:
                    out.append(f"{file.relative_to(root)}:{line} imports {module}")
    return out


def test_pure_modules_import_no_io_frameworks_clock_or_randomness() -> None:
    for rel in sorted(REQUIRED):
        assert (ROOT / rel).exists(), f"{rel} is missing"
    problems = violations(ROOT, PURE)
    assert not problems, "impure imports in the pure core:\n" + "\n".join(problems)


def test_the_scanner_names_file_and_line(tmp_path: Path) -> None:
    handlers = next(rel for rel, forbidden in PURE if forbidden == NO_CLOCK_OR_DICE and "." not in rel)
    pkg = tmp_path / handlers  # the barrier handlers' folder, wherever the layout puts it
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text(
        "import os\nimport time\nfrom ray.util import queue\nimport importlib\n"
        "importlib.import_module('kazoo')\nfrom . import sibling\n"
    )
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "ok.py").write_text("import random\n")  # allowed outside handlers
    assert violations(tmp_path, PURE) == [
        f"{handlers}/bad.py:2 imports time",
        f"{handlers}/bad.py:3 imports ray.util",
        f"{handlers}/bad.py:5 imports kazoo",
    ]
