"""The layering of the core, as code: which package may import which.

`LAYERS` lists the core's packages (and top-level modules) from the bottom up; a
module may import its own package and the layers below it, never one above, never
a sibling on its own layer. docs/layout.md draws the same order. Imports under
``if TYPE_CHECKING:`` are annotations, not dependencies, and are not counted.
A second check: no import cycle between the modules of one package (imports made at
module import time; an import inside a function runs later and cannot cycle).

A new package must be placed in `LAYERS` (the test says so), which is the moment to
decide what it may depend on.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

import hidet_framework

ROOT = pathlib.Path(hidet_framework.__file__).parent

# bottom -> top; one entry per layer
LAYERS: list[tuple[str, ...]] = [
    ("_moved_modules",),   # old import paths of moved modules (imports nothing at load)
    ("extension",),        # the plugin seam: hookspecs, registries, pass points, contracts
    ("ir",),               # IR nodes: types, expressions, statements, functions
    ("mapping",),          # the task-mapping and layout algebra
    ("analysis",),         # bounds, the IR evaluator
    ("simplifier",),       # the expression simplifier
    ("lowering",),         # pass manager and lowering passes
    ("backend",),          # codegen and build: the backend contract, C-style printer, build cache
    ("lang",),             # the kernel DSL templates are written in
    ("compute",),          # compute definitions and Tasks
    ("ops",),              # hf.ops: operators from the registry
    ("graph",),            # graph construction and graph passes
    ("frontend",),         # hf.load: model files to graphs through frontend plugins
    ("schedule",),         # ScheduledTask, Template, the auto-scheduler
    ("fusion",),           # partition pass, fused operator, grafts onto scheduled kernels
    ("tuner",),            # candidate search and the tuning cache
    ("runtime",),          # build/bind/run a scheduled task, compiled graph, memory plan
    ("driver",),           # hf.compile
    ("cli",),              # the command line
    ("__main__",),         # python -m hidet_framework
]
LEVEL = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str | None:
    """The layer unit of a core module name (its top-level package or module)."""
    parts = module.split(".")
    if parts[0] != "hidet_framework":
        return None
    return parts[1] if len(parts) > 1 else "(root)"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: pathlib.Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module import time) of every import outside
    TYPE_CHECKING blocks."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, top)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno, top))
            found.extend((f"{target}.{alias.name}", node.lineno, top) for alias in node.names)
        inner = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text()), True)
    return found


def _core_modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _existing(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """`name` if it is a core module, else its longest prefix that is (``from x import f``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges() -> list[tuple[str, str, str, int]]:
    """(importing unit, imported unit, file, line) for imports between different units."""
    modules = _core_modules()
    edges = set()
    for name, path in modules.items():
        src = _unit(name)
        for target, line, _ in _imports(path):
            target = _existing(target, modules)
            dst = target and _unit(target)
            if dst and dst != src and dst != "(root)":
                edges.add((src, dst, str(path.relative_to(ROOT.parent)), line))
    return sorted(edges)


def test_every_core_package_has_a_layer():
    units = {_unit(name) for name in _core_modules()} - {"(root)"}
    missing = sorted(units - set(LEVEL))
    assert not missing, f"place {missing} in LAYERS (tests/test_layering.py) and in docs/layout.md"


def test_imports_only_go_down_the_layers():
    wrong = [f"{file}:{line}: {src} imports {dst}" for src, dst, file, line in import_edges()
             if src != "(root)" and LEVEL.get(dst, -1) >= LEVEL.get(src, -1)]
    assert not wrong, "imports against the layering (docs/layout.md):\n" + "\n".join(sorted(set(wrong)))


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return None


@pytest.mark.parametrize("package", sorted({n.split(".")[1] for n in _core_modules() if n.count(".") >= 2}))
def test_no_import_cycle_inside_a_package(package):
    modules = _core_modules()
    prefix = f"hidet_framework.{package}"
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if not name.startswith(prefix + ".") or path.name == "__init__.py":
            continue
        for target, _, top in _imports(path):
            target = _existing(target, modules)
            if top and target and target.startswith(prefix + ".") and target != name \
                    and modules[target].name != "__init__.py":
                graph.setdefault(name, set()).add(target)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_layering_test_catches_an_upward_import(tmp_path):
    """The checker itself: an IR module importing the driver is reported."""
    fake = tmp_path / "hidet_framework"
    (fake / "ir").mkdir(parents=True)
    (fake / "driver").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "ir" / "__init__.py").write_text("")
    (fake / "driver" / "__init__.py").write_text("def compile(): pass\n")
    (fake / "ir" / "expr.py").write_text("from typing import TYPE_CHECKING\n"
                                         "if TYPE_CHECKING:\n    from hidet_framework.lang import x\n"
                                         "def f():\n    from hidet_framework.driver import compile\n")
    global ROOT
    saved, ROOT = ROOT, fake
    try:
        edges = import_edges()
    finally:
        ROOT = saved
    assert [(s, d, line) for s, d, _, line in edges] == [("ir", "driver", 5)]
    assert LEVEL["driver"] > LEVEL["ir"]
