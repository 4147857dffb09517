"""Markers keep the tiers honest: a test that starts Ray, Spark, ZooKeeper or moto's S3 server
carries that component's marker (so `-m "not ray"` starts no Ray) and is `slow` (so
`scripts/test.sh --fast` starts none of them). Pure: reads the test modules, starts nothing."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from resource_markers import RESOURCE_FIXTURES, needs_serial, needs_slow, unmarked_resource_uses

TESTS = Path(__file__).resolve().parent


@dataclass
class FakeItem:
    nodeid: str
    fixturenames: list[str]
    markers: list[str] = field(default_factory=list)

    def iter_markers(self, name: str | None = None):
        return [getattr(pytest.mark, m) for m in self.markers if name in (None, m)]


def test_a_component_fixture_without_its_marker_is_named() -> None:
    items = [FakeItem("a.py::ray_ok", ["ray_session"], ["ray"]),
             FakeItem("a.py::ray_bare", ["tmp_path", "ray_session"]),
             FakeItem("b.py::spark_as_ray", ["spark"], ["ray"]),
             FakeItem("c.py::zk", ["zk_server"], ["zookeeper"]),
             FakeItem("c.py::s3", ["s3_server"]),
             FakeItem("d.py::pure", ["tmp_path"])]
    assert unmarked_resource_uses(items) == [
        "a.py::ray_bare uses the fixture ray_session but is not marked @pytest.mark.ray",
        "b.py::spark_as_ray uses the fixture spark but is not marked @pytest.mark.spark",
        "c.py::s3 uses the fixture s3_server but is not marked @pytest.mark.s3"]


@pytest.mark.parametrize("marker", sorted(set(RESOURCE_FIXTURES.values())))
def test_a_component_marker_makes_a_test_slow(marker: str) -> None:
    assert needs_slow(FakeItem("t", [], [marker]))
    assert not needs_slow(FakeItem("t", [], ["timeout"]))


@pytest.mark.parametrize("marker", sorted(set(RESOURCE_FIXTURES.values())))
def test_a_component_marker_makes_a_test_run_alone(marker: str) -> None:
    assert needs_serial(FakeItem("t", [], [marker]))
    assert needs_serial(FakeItem("t", [], ["serial"]))
    assert not needs_serial(FakeItem("t", [], ["slow"]))


def ray_starts(tree: ast.Module) -> list[int]:
    """Lines that start Ray in this process: `executor="ray"`, `ensure_ray(...)`, `ray.init(...)` —
    except inside `pytest.raises` (a job the API refuses before it starts), in a function that
    puts a stand-in for `runtime.ray.executor` into `sys.modules`, and in `replace(...)` (a copy of
    a record that says it came from Ray starts nothing)."""
    exempt: set[int] = set()
    for node in ast.walk(tree):
        refused = isinstance(node, ast.With) and any(
            isinstance(i.context_expr, ast.Call) and ast.unparse(i.context_expr.func) == "pytest.raises"
            for i in node.items)
        stand_in = isinstance(node, ast.FunctionDef) and any(
            isinstance(n, ast.Call) and ast.unparse(n.func).endswith("setitem")
            and "'runtime.ray.executor'" in ast.unparse(n) for n in ast.walk(node))
        if refused or stand_in:
            exempt |= {id(n) for n in ast.walk(node)}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in exempt:
            continue
        name = ast.unparse(node.func)
        if name.split(".")[-1] == "replace":
            continue
        ray_executor = any(k.arg == "executor" and isinstance(k.value, ast.Constant) and k.value.value == "ray"
                           for k in node.keywords)
        if ray_executor or name.endswith("ensure_ray") or name == "ray.init":
            lines.append(node.lineno)
    return lines


def fixture_uses(tree: ast.Module) -> dict[str, int]:
    """Component fixtures the module's functions take as arguments: fixture -> first line."""
    uses: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in node.args.args:
                if arg.arg in RESOURCE_FIXTURES:
                    uses.setdefault(arg.arg, node.lineno)
    return uses


def missing_markers(source: str) -> list[str]:
    """What a test module starts without the matching marker anywhere in it."""
    tree = ast.parse(source)
    marked = set(re.findall(r"\bmark\.(\w+)", source))
    missing = [f"line {line}: uses the fixture {fixture} but has no @pytest.mark.{RESOURCE_FIXTURES[fixture]}"
               for fixture, line in fixture_uses(tree).items() if RESOURCE_FIXTURES[fixture] not in marked]
    if "ray" not in marked:
        missing += [f"line {line}: starts Ray but has no @pytest.mark.ray" for line in ray_starts(tree)]
    return missing


def test_the_scan_sees_each_way_to_start_a_component() -> None:
    assert missing_markers("def test_a(ray_session):\n    pass\n")
    assert missing_markers("def test_a(tmp_path):\n    env.execute('job', executor='ray')\n")
    assert missing_markers("def test_a():\n    ensure_ray()\n")
    assert missing_markers("@pytest.fixture\ndef job(spark):\n    pass\n")
    assert not missing_markers("import pytest\n@pytest.mark.ray\ndef test_a(ray_session):\n    pass\n")
    assert not missing_markers("pytestmark = pytest.mark.zookeeper\ndef test_a(zk_server):\n    pass\n")
    assert not missing_markers("def test_a():\n    with pytest.raises(JobGraphError):\n"
                               "        env.execute('job', executor='ray', slots_per_worker=0)\n")
    assert not missing_markers("def test_a(result):\n    copy = replace(result, executor='ray')\n")
    assert not missing_markers("def test_a(monkeypatch):\n"
                               "    monkeypatch.setitem(sys.modules, 'runtime.ray.executor', fake)\n"
                               "    env.execute('job', executor='ray')\n")


def test_every_test_module_that_starts_a_component_carries_its_marker() -> None:
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 100, modules
    missing = [f"{path.relative_to(TESTS)} {what}" for path in modules for what in missing_markers(path.read_text())]
    assert not missing, "\n".join(missing)
