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
    (
        "0 foundation",
        (
            "firn.errors",
            "firn.logs",
            "firn.units",
            "firn.settings",
            "firn.sensors",
            "firn.readable",
            "firn.signals",
        ),
    ),
    ("1 model", ("firn.model",)),
    ("2a edge clients", ("firn.io", "firn.postgres", "firn.events")),
    ("2b catalog and broker", ("firn.catalog", "firn.kafka")),
    ("2c observability", ("firn.observability",)),
    ("3a engine", ("firn.engine",)),
    ("3b publication", ("firn.iceberg",)),
    ("4a API", ("firn.api",)),
    ("4b Spark and the package", ("firn.spark", "firn")),
    ("5a services and dashboard", ("firn_services", "firn.dashboard")),
    ("5b commands", ("firn.commands",)),
    ("5c command line", ("firn.cli", "firn.__main__")),
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


def test_no_edge_client_reports_to_prometheus_directly() -> None:
    """Postgres and Kafka clients report through ``firn.sensors``; the catalog hands
    its events to an ``EventSink``: neither knows the floors above them."""
    for module, targets in import_graph().items():
        if module.startswith(("firn.postgres", "firn.kafka", "firn.catalog", "firn.io")):
            assert not [t for t in targets if t.startswith("firn.observability")], module
        if module.startswith("firn.catalog"):
            assert not [t for t in targets if t.startswith("firn.kafka")], module


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


def folder_of(module: str, modules: dict[str, Path]) -> str:
    """The room a module stands in at folder level: its package's folder, or itself
    for a module of the top folder (``firn.errors``, ``firn_services.runtime``),
    which is a room of its own beside the sub-packages."""
    path = modules[module]
    if path.name == "__init__.py":
        return module
    package = module.rsplit(".", 1)[0]
    return module if package in PACKAGES else package


def test_no_circle_of_folders() -> None:
    modules = firn_modules()
    folders: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        here = folder_of(module, modules)
        reached = {folder_of(t, modules) for t in targets} - {here}
        # The package face (``firn/__init__.py``) hands on what it imports.
        folders.setdefault(here, set()).update(
            f for f in reached if not (here in PACKAGES and f.startswith(here + "."))
        )
    assert find_cycle(folders) is None


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
