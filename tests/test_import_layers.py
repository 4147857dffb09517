"""The project's import graph has no cycle and no edge from a lower layer to a higher one.

Built with `ast` from every module of the project packages: module-level and function-level
imports, `import a.b as c`, `from a import b` (b a module or a name), `from . import x`. Imports
under `if TYPE_CHECKING:` never run, so they cannot close an import cycle; they still count for
the layers (naming a higher layer's type is depending on it). A package's `__init__` is a module
of its own (`runtime` is the public API facade); importing `a.b` is an edge to `a.b` only, not to
`a` (Python runs `a/__init__` too, but that is the package's choice, not the importer's).

The layers are data (`LAYERS`, lowest first), one entry per package folder, never a file: a
module belongs to the layer of the longest folder holding it (`"x"` holds module `x` and its
submodules); a project module no folder holds fails the test, so a new module gets a place.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "operators", "checkpoint", "state", "vocabulary", "spark_bridge", "benchmarks")

#: (layer, folders), lowest first: a module may import its own layer and those below it. Each entry
#: is a package folder ("x" holds module `x`, its files and its sub-folders); a module belongs to
#: the longest folder that holds it.
LAYERS: list[tuple[str, list[str]]] = [
    ("vocabulary: ids, options, reasons, ports, metric types, fault plans", ["vocabulary"]),
    ("state", ["state"]),
    # checkpoint/storage: the layout, formats, stores and errors over the `BlobStore` port (pure)
    ("checkpoint", ["checkpoint", "checkpoint.storage"]),
    ("records", ["runtime.records"]),
    ("operators", ["operators"]),
    # sources that read external systems (I/O, so not in the pure `operators`)
    ("connectors", ["runtime.connectors"]),
    ("protocol core", ["runtime.core"]),
    ("job master", ["runtime.jobmaster"]),
    # what touches the outside world for checkpoints (filesystems, ZooKeeper, leases, tools, the
    # files a task snapshot becomes): the job master and the coordinator reach storage only through
    # the ports below (checkpoint/storage); the executors and the API hand them these
    ("checkpoint I/O", ["checkpoint.io"]),
    ("spark bridge I/O", ["spark_bridge.io"]),
    ("executors", ["runtime.sim", "runtime.ray"]),
    # the simulator's invariant checker: an `ExecutionObserver` (runtime.jobmaster.observer) that reads
    # the simulator's state, and the API builds it for `execute(..., invariants=True)`; the rest of
    # runtime.verify (swarm, vopr, shrink) drives jobs through the API, above it
    ("invariant checker", ["runtime.checker"]),
    # `runtime` itself holds only the public facade (`runtime/__init__.py`); `spark_bridge` its
    # facade and `from_spark` (source.py), the API-facing part
    ("api", ["runtime.api", "runtime", "spark_bridge"]),
    ("workloads, verification", ["runtime.workloads", "runtime.calibration", "runtime.verify"]),
    ("benchmarks", ["benchmarks"]),
    ("cli", ["runtime.cli"]),
]


def module_files(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Module name -> file, for every `.py` under the packages (`a/__init__.py` is module `a`)."""
    found = {}
    for package in packages:
        for file in sorted((root / package).rglob("*.py")):
            parts = list(file.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = file
    return found


@functools.cache
def _parse(file: Path) -> ast.Module:
    return ast.parse(file.read_text(), filename=str(file))


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            guarded |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return guarded


def import_edges(modules: dict[str, Path]) -> dict[str, dict[str, tuple[int, bool]]]:
    """module -> {imported project module: (line, type_checking_only)}."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, dict[str, tuple[int, bool]]] = {}
    for module, file in modules.items():
        tree = _parse(file)
        guarded = _type_checking_nodes(tree)
        package = module if file.name == "__init__.py" else module.rpartition(".")[0]
        out = edges.setdefault(module, {})

        def add(target: str | None, node: ast.stmt, out: dict = out, module: str = module,
                guarded: set[int] = guarded) -> None:
            if target is None or target == module:
                return
            typing_only = id(node) in guarded
            seen = out.get(target)
            if seen is None or (seen[1] and not typing_only):  # a real import outranks a typing-only one
                out[target] = (node.lineno, typing_only)

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(resolve(alias.name), node)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    add(submodule if submodule in modules else resolve(source), node)
    return edges


def find_cycle(edges: dict[str, dict[str, tuple[int, bool]]]) -> list[str] | None:
    """One import cycle (first module repeated at the end), ignoring type-checking-only edges."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target, (_, typing_only) in sorted(edges.get(module, {}).items()):
            if typing_only:
                continue
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def layer_of(module: str, layers: list[tuple[str, list[str]]] = LAYERS) -> int | None:
    """Index of the layer of the longest folder holding `module` (`"a"` holds `a` and `a.*`)."""
    best: tuple[int, int] | None = None  # (folder name length, layer)
    for index, (_, folders) in enumerate(layers):
        for folder in folders:
            if (module == folder or module.startswith(folder + ".")) and (best is None or len(folder) > best[0]):
                best = (len(folder), index)
    return None if best is None else best[1]


def folder_problems(root: Path, layers: list[tuple[str, list[str]]] = LAYERS) -> list[str]:
    """Every entry of `layers` is a package folder, and a folder whose sub-folders are split among
    entries names each of its sub-folders (so a new sub-folder gets a place rather than its parent's)."""
    named = [folder for _, folders in layers for folder in folders]
    problems = [f"{folder}: not a package folder (no {folder.replace('.', '/')}/__init__.py)"
                for folder in named if not (root / folder.replace(".", "/") / "__init__.py").is_file()]
    problems += [f"{folder}: named twice" for folder in sorted(set(named)) if named.count(folder) > 1]
    for folder in sorted(set(named)):
        if not any(other.startswith(folder + ".") for other in named):
            continue
        for init in sorted((root / folder.replace(".", "/")).glob("*/__init__.py")):
            sub = f"{folder}.{init.parent.name}"
            if not any(sub == other or sub.startswith(other + ".") for other in named if other != folder):
                problems.append(f"{sub}: a sub-folder of {folder}, whose other sub-folders have layers of "
                                "their own: name it in LAYERS")
    return problems


def layer_problems(edges: dict[str, dict[str, tuple[int, bool]]], modules: dict[str, Path],
                   layers: list[tuple[str, list[str]]] = LAYERS) -> list[str]:
    problems = [f"{name}: no layer in LAYERS matches it" for name in sorted(edges)
                if layer_of(name, layers) is None]
    for source, targets in sorted(edges.items()):
        low = layer_of(source, layers)
        for target, (line, _) in sorted(targets.items()):
            high = layer_of(target, layers)
            if low is not None and high is not None and high > low:
                problems.append(f"{modules[source].relative_to(ROOT)}:{line}: {source} ({layers[low][0]}) "
                                f"imports {target} ({layers[high][0]}), a higher layer")
    return problems


def _pure_entries() -> list[tuple[str, set[str]]]:
    spec = importlib.util.spec_from_file_location("_pure_imports", ROOT / "tests" / "test_pure_imports.py")
    assert spec is not None and spec.loader is not None
    pure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pure)
    return pure.PURE


def test_no_import_cycle() -> None:
    modules = module_files(ROOT)
    cycle = find_cycle(import_edges(modules))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_layers_name_folders_only() -> None:
    problems = folder_problems(ROOT)
    assert not problems, "LAYERS:\n" + "\n".join(problems)


def test_no_module_imports_a_higher_layer() -> None:
    modules = module_files(ROOT)
    problems = layer_problems(import_edges(modules), modules)
    assert not problems, "layering broken:\n" + "\n".join(problems)


def test_pure_modules_import_only_modules_free_of_io_frameworks() -> None:
    """Agrees with tests/test_pure_imports.py: what a pure module imports (transitively, within the
    project) imports no framework that module may not import either."""
    modules = module_files(ROOT)
    edges = import_edges(modules)
    problems = []
    for rel, forbidden in _pure_entries():
        start = rel.removesuffix(".py").replace("/", ".")
        roots = [m for m in modules if m == start or m.startswith(start + ".")]
        seen: dict[str, str] = {m: m for m in roots}  # module -> the pure module that reaches it
        todo = list(roots)
        while todo:
            module = todo.pop()
            for target, (_, typing_only) in edges[module].items():
                if not typing_only and target not in seen:
                    seen[target] = seen[module]
                    todo.append(target)
        for module, via in sorted(seen.items()):
            tree = _parse(modules[module])
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
                for name in names:
                    if name.split(".")[0] in forbidden and module != via:
                        problems.append(f"{via} (pure) reaches {module}, which imports {name} (line {node.lineno})")
    assert not problems, "\n".join(problems)


def test_the_graph_sees_every_import_form(tmp_path: Path) -> None:
    pkg = tmp_path / "runtime"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import low\n")
    (pkg / "sub" / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runtime.top import Top\n"
        "def later():\n    import runtime.mid as m\n    return m\n")
    (pkg / "mid.py").write_text("from .sub.low import later\nfrom runtime import top\n")
    (pkg / "top.py").write_text("from runtime.sub import low\n")
    modules = module_files(tmp_path, ["runtime"])
    edges = import_edges(modules)
    assert edges["runtime.sub"] == {"runtime.sub.low": (1, False)}
    assert edges["runtime.sub.low"] == {"runtime.top": (3, True), "runtime.mid": (5, False)}
    assert edges["runtime.mid"] == {"runtime.sub.low": (1, False), "runtime.top": (2, False)}
    cycle = find_cycle(edges)
    assert cycle == ["runtime.mid", "runtime.sub.low", "runtime.mid"]
    layers = [("low", ["runtime.sub"]), ("high", ["runtime"])]
    problems = layer_problems(edges, {m: ROOT / "x.py" for m in modules}, layers)
    assert any("runtime.sub.low (low) imports runtime.top (high)" in p for p in problems)
    assert any("runtime.sub.low (low) imports runtime.mid (high)" in p for p in problems)


def test_layers_refuse_a_file_and_an_unnamed_sub_folder(tmp_path: Path) -> None:
    for folder in ("runtime", "runtime/api", "runtime/core", "runtime/extra"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "runtime" / "core" / "graph.py").write_text("")
    layers = [("low", ["runtime.core.graph"]), ("core", ["runtime.core"]), ("api", ["runtime.api", "runtime"])]
    assert folder_problems(tmp_path, layers) == [
        "runtime.core.graph: not a package folder (no runtime/core/graph/__init__.py)",
        "runtime.extra: a sub-folder of runtime, whose other sub-folders have layers of their own: name it in LAYERS",
    ]
    assert folder_problems(tmp_path, [("core", ["runtime.core"]), ("api", ["runtime.api", "runtime"]),
                                      ("extra", ["runtime.extra"])]) == []
