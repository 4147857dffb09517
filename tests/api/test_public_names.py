"""`from runtime import X` works for every public name, lazily: the facade loads a name's module
on first use, and the names type checkers read (its `TYPE_CHECKING` imports) are the ones it serves."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import runtime

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", runtime.__all__)
def test_every_public_name_imports_from_runtime(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from runtime import {name}", namespace)
    defined_in = importlib.import_module(runtime._MODULE_OF[name])
    assert namespace[name] is getattr(defined_in, name)
    assert name in dir(runtime)


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from runtime import *", namespace)
    assert set(runtime.__all__) <= set(namespace)


def test_the_type_checking_imports_name_what_the_facade_serves() -> None:
    tree = ast.parse((ROOT / "runtime" / "__init__.py").read_text())
    guarded = [node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)]
    assert len(guarded) == 1
    imported = {alias.name: stmt.module for stmt in guarded[0].body if isinstance(stmt, ast.ImportFrom)
                for alias in stmt.names}
    assert imported == runtime._MODULE_OF
    assert sorted(runtime.__all__) == sorted(imported)
    assert len(runtime.__all__) == len(set(runtime.__all__))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="'NoSuchThing'"):
        runtime.NoSuchThing  # noqa: B018
    with pytest.raises(ImportError, match="NoSuchThing"):
        exec("from runtime import NoSuchThing", {})


def test_importing_the_core_does_not_load_the_api() -> None:
    code = ("import sys, runtime.core.task; "
            "print(sorted(m for m in sys.modules if m.startswith(('runtime.api', 'runtime.jobmaster'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
