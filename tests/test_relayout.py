"""scripts/relayout.py rewrites references to moved modules, and only those (deleted with the script
once it ran)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("relayout", ROOT / "scripts" / "relayout.py")
assert _spec is not None and _spec.loader is not None
relayout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(relayout)

MOVES = [("runtime/task.py", "runtime/core/task.py"), ("runtime/barriers", "runtime/core/barriers"),
         ("runtime/sim/vopr.py", "runtime/verify/vopr.py"), ("runtime/api.py", "runtime/api/environment.py"),
         ("checkpoint/storage.py", "checkpoint/io/storage.py")]


def test_python_imports_strings_and_comments_are_rewritten_but_not_code() -> None:
    source = '''"""See `runtime/task.py` and runtime.barriers.aligner."""
from runtime.api import StreamEnvironment
from runtime.sim import executor, vopr as v
from runtime.barriers import (
    BarrierAligner,
)
import checkpoint.storage as cs


def f(checkpoint):
    from runtime.task import Task  # was runtime/task.py
    return checkpoint.storage, "python -m runtime.sim.vopr", runtime.apiary, Task
'''
    out = relayout.Rewriter(MOVES).python(source)
    assert out == '''"""See `runtime/core/task.py` and runtime.core.barriers.aligner."""
from runtime.api.environment import StreamEnvironment
from runtime.sim import executor
from runtime.verify import vopr as v
from runtime.core.barriers import BarrierAligner
import checkpoint.io.storage as cs


def f(checkpoint):
    from runtime.core.task import Task  # was runtime/core/task.py
    return checkpoint.storage, "python -m runtime.verify.vopr", runtime.apiary, Task
'''


def test_free_text_paths_and_dotted_names() -> None:
    rewriter = relayout.Rewriter(MOVES)
    text = ("barrierflow = \"runtime.api:main\"\n`runtime/barriers/aligner.py`, tests/runtime/task.py, "
            "checkpoint.storage_from_uri, checkpoint.storage.StorageError\n")
    assert rewriter.text(text) == (
        "barrierflow = \"runtime.api.environment:main\"\n`runtime/core/barriers/aligner.py`, "
        "tests/runtime/task.py, checkpoint.storage_from_uri, checkpoint.io.storage.StorageError\n")


def test_every_move_is_a_real_module_or_folder_and_lands_in_a_layer() -> None:
    from test_import_layers import layer_of

    for old, new in relayout.MOVES:
        assert old.endswith(".py") == new.endswith(".py"), (old, new)
    new_layers = {}
    exec(relayout.NEW_LAYERS, new_layers)  # the rules the script writes into test_import_layers
    for _, new in relayout.MOVES:
        module = relayout.module_of(new)
        assert layer_of(module, new_layers["LAYERS"]) is not None, f"{module}: no layer after the move"
