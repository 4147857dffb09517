"""`state/` is pure: no runtime/operators imports, no clocks, randomness or I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

STATE_DIR = Path(__file__).resolve().parents[2] / "state"
FORBIDDEN_MODULES = {"runtime", "operators", "ray", "pyspark", "kazoo", "time", "random", "os", "io",
                     "pathlib", "socket", "subprocess", "pickle", "shutil", "tempfile", "datetime"}
FORBIDDEN_CALLS = {"open", "eval", "exec", "__import__"}


def _files() -> list[Path]:
    files = sorted(STATE_DIR.rglob("*.py"))
    assert len(files) >= 7
    return files


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.name)
def test_module_is_pure(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {node.func.id}"
            continue
        else:
            continue
        assert not roots & FORBIDDEN_MODULES, f"{path.name}:{node.lineno} imports {roots & FORBIDDEN_MODULES}"
