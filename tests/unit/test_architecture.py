"""The layering of docs/architecture.md, held against the code: every import of a
Firn module runs down the floors or stays on its own, and no modules import each
other in a circle (also not through a function-level or TYPE_CHECKING import)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"firn": ROOT / "shared" / "firn", "firn_services": ROOT / "services"}

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("firn.errors", "firn.logs", "firn.units", "firn.settings")),
    ("model", ("firn.model",)),
    (
        "storage and catalog",
        (
            "firn.io",
            "firn.postgres",
            "firn.catalog",
            "firn.events",
            "firn.kafka",
            "firn.observability",
        ),
    ),
    ("engine", ("firn.engine", "firn.iceberg")),
    ("api", ("firn.api", "firn.spark", "firn")),
    (
        "services and cli",
        ("firn.cli", "firn.commands", "firn.dashboard", "firn.__main__", "firn_services"),
    ),
]
"""Lowest first; a module belongs to the layer of its longest matching prefix."""


def layer_of(module: str) -> int:
    best, depth = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = index, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} is in no layer of docs/architecture.md")
    return best


def module_name(package: str, path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((package, *parts))


def firn_modules() -> dict[str, Path]:
    return {
        module_name(package, path, root): path
        for package, root in PACKAGES.items()
        for path in sorted(root.rglob("*.py"))
    }


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The Firn modules ``path`` imports, wherever the import statement stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                # ``from firn.model import tree`` imports the module firn.model.tree.
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    modules = firn_modules()
    known = set(modules)
    return {name: imports_of(path, known) for name, path in modules.items()}


def test_every_module_has_a_layer() -> None:
    for module in firn_modules():
        layer_of(module)


def test_no_import_runs_up_a_layer() -> None:
    upward = [
        f"{importer} ({LAYERS[layer_of(importer)][0]}) imports {imported} "
        f"({LAYERS[layer_of(imported)][0]})"
        for importer, targets in import_graph().items()
        for imported in sorted(targets)
        if layer_of(imported) > layer_of(importer)
    ]
    assert upward == []


def test_model_imports_only_the_foundation() -> None:
    graph = import_graph()
    for module, targets in graph.items():
        if layer_of(module) == 1:
            assert {layer_of(t) for t in targets} <= {0, 1}, (module, targets)


def test_events_are_payloads_only() -> None:
    """Event models are what every edge passes around: they know no client,
    connection or repository (``firn.kafka.publisher`` publishes them)."""
    edges = ("firn.io", "firn.postgres", "firn.catalog", "firn.kafka")
    for module, targets in import_graph().items():
        if module.startswith("firn.events"):
            reached = [t for t in targets if t.startswith(edges)]
            assert reached == [], module


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports, as the modules around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_no_circle_of_imports() -> None:
    graph = import_graph()
    # A package's __init__ that re-exports its modules is not a circle of its own.
    for module in list(graph):
        graph[module] = {t for t in graph[module] if not module.startswith(t + ".")}
    assert find_cycle(graph) is None


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ],
)
def test_the_circle_finder_finds_circles(
    graph: dict[str, set[str]], expected: list[str] | None
) -> None:
    assert find_cycle(graph) == expected


def test_an_upward_import_is_seen(tmp_path: Path) -> None:
    model_file = tmp_path / "bad.py"
    model_file.write_text("def f():\n    from firn.api.table import Table\n")
    imported = imports_of(model_file, {"firn.api.table"})
    assert imported == {"firn.api.table"}
    assert layer_of("firn.api.table") > layer_of("firn.model.bad")
