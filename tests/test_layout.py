"""The package's import graph: no cycles, a pure core, and no test infrastructure in production.

Every module under ``src/aiokpl`` is parsed with :mod:`ast` and every import in it counts:
absolute and relative, at the top, inside functions, and under ``TYPE_CHECKING`` (a cycle of
annotations is still two modules that cannot be understood apart). Docstrings are not code, so
their examples do not count.

An import of ``aiokpl.a.b`` counts as an edge to ``aiokpl.a.b`` only, not to the packages on the
way (``aiokpl``, ``aiokpl.a``), which Python runs first but which only re-export; ``from .a import
b`` counts as an edge to ``aiokpl.a.b`` when that is a module, else to ``aiokpl.a``.

The checks are functions of a source tree, so ``test_the_checks_catch_*`` run them on a copy
with one bad import added and see each fail.
"""

from __future__ import annotations

import ast
import functools
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "aiokpl"

KNOWN_CYCLES: dict[frozenset[str], str] = {}
"""Cycles allowed for now, each with the reason and what removes it. A cycle listed here that
no longer exists fails the test too, so the list never outlives its entries."""

TEST_INFRASTRUCTURE = ("aiokpl.testing",)
"""The fake and its HTTP server (the ``aiokpl.testing`` package, submodules included) and the
local servers (moto, kinesalite): for tests and demos."""

MAY_IMPORT_TEST_INFRASTRUCTURE: dict[tuple[str, str], str] = {
    ("aiokpl._cli.demo", "aiokpl.testing._servers"): "`aiokpl demo` starts moto's server locally",
    ("aiokpl._cli.demo", "aiokpl.testing"): "`aiokpl demo` reads the stream back with read_stream",
    ("aiokpl._cli.local", "aiokpl.testing._servers"): "`aiokpl local` serves moto's server",
}
"""Production modules that use the test infrastructure, and why (importer, imported)."""

MAX_MODULE_LINES = 900
"""No module over this many lines: a module past it holds more than one concern."""

KNOWN_LONG_MODULES: dict[str, str] = {}
"""Modules allowed over :data:`MAX_MODULE_LINES` for now, each with the reason and what shortens
it. A module listed here that is no longer over the limit fails the test too."""


@dataclass
class Graph:
    """The import graph of one source tree."""

    modules: set[str] = field(default_factory=set)
    edges: dict[str, set[str]] = field(default_factory=dict)  # aiokpl module -> aiokpl modules
    external: dict[str, set[str]] = field(default_factory=dict)  # module -> top-level names


def module_name(root: Path, path: Path) -> str:
    """``aiokpl._cli.put`` for ``root/_cli/put.py``; a package for its ``__init__.py``."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def parse(source: str) -> ast.Module:
    """Parsed once per distinct text: the copies the self-tests make differ in one file."""
    return ast.parse(source)


def read_graph(root: Path) -> Graph:
    """Parse every module under ``root`` (the ``aiokpl`` package folder) and resolve imports."""
    graph = Graph()
    trees: dict[str, tuple[ast.Module, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(root, path)
        graph.modules.add(name)
        trees[name] = (parse(path.read_text()), path.name == "__init__.py")
    for name, (tree, is_package) in trees.items():
        graph.edges[name] = set()
        graph.external[name] = set()
        package = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add_edge(graph, name, alias.name, ())
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    assert node.module is not None
                    base = node.module
                else:
                    kept = package[: len(package) - (node.level - 1)]
                    base = ".".join([*kept, node.module] if node.module else kept)
                add_edge(graph, name, base, tuple(alias.name for alias in node.names))
        graph.edges[name].discard(name)
    return graph


def add_edge(graph: Graph, importer: str, target: str, names: tuple[str, ...]) -> None:
    """Record ``import target`` (``names`` empty) or ``from target import *names``."""
    top = importer.split(".")[0]
    if target.split(".")[0] != top:
        graph.external[importer].add(target.split(".")[0])
        return
    submodules = {f"{target}.{alias}" for alias in names} & graph.modules
    graph.edges[importer] |= submodules
    if not names or len(submodules) < len(names):
        while target not in graph.modules:  # `import aiokpl.x.attr`: the nearest module
            target = target.rsplit(".", 1)[0]
        graph.edges[importer].add(target)


def cycles(graph: Graph) -> list[list[str]]:
    """Each strongly connected component of more than one module, as one cycle path through it
    (first module repeated at the end), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph.modules):
        if node not in index:
            visit(node)
    return sorted(path_through(graph, component) for component in components)


def path_through(graph: Graph, component: set[str]) -> list[str]:
    """A shortest cycle from the component's first module back to it (breadth-first)."""
    start = min(component)
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.edges[node] & component):
                if target == start:
                    path = [node]
                    while (before := came_from[path[-1]]) is not None:
                        path.append(before)
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - a component has one


def cycle_problems(graph: Graph) -> list[str]:
    found = cycles(graph)
    problems = [
        "import cycle: " + " -> ".join(path)
        for path in found
        if frozenset(path) not in KNOWN_CYCLES
    ]
    present = {frozenset(path) for path in found}
    problems += [
        f"known cycle {' <-> '.join(sorted(known))} is gone: remove it from KNOWN_CYCLES"
        for known in KNOWN_CYCLES
        if known not in present
    ]
    return problems


def room_of(module: str, packages: set[str]) -> str:
    """The package directly under ``aiokpl`` that holds ``module`` (or the module itself)."""
    parts = module.split(".")
    room = ".".join(parts[:2])
    return room if room in packages else module


def rooms(graph: Graph) -> Graph:
    """The graph with every subpackage of ``aiokpl`` collapsed into one node: the layout as a
    reader sees it, one room per concern."""
    packages = {
        m
        for m in graph.modules
        if m.count(".") == 1 and any(other.startswith(m + ".") for other in graph.modules)
    }
    collapsed = Graph()
    for module in graph.modules:
        room = room_of(module, packages)
        collapsed.modules.add(room)
        targets = {room_of(t, packages) for t in graph.edges.get(module, ())} - {room}
        collapsed.edges.setdefault(room, set()).update(targets)
    return collapsed


def core_problems(graph: Graph) -> list[str]:
    top = next(iter(graph.modules)).split(".")[0]
    core = f"{top}._core"
    problems = []
    for name in sorted(graph.modules):
        if name != core and not name.startswith(core + "."):
            continue
        for target in sorted(graph.edges[name]):
            if target != core and not target.startswith(core + "."):
                problems.append(f"{name} imports {target}, outside _core")
        for external in sorted(graph.external[name]):
            if external not in sys.stdlib_module_names:
                problems.append(f"{name} imports {external}, not the standard library")
    return problems


def infrastructure_problems(graph: Graph) -> list[str]:
    def is_infrastructure(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in TEST_INFRASTRUCTURE)

    problems = []
    for name in sorted(graph.modules):
        if is_infrastructure(name):
            continue
        for target in sorted(graph.edges[name]):
            if is_infrastructure(target) and (name, target) not in MAY_IMPORT_TEST_INFRASTRUCTURE:
                problems.append(f"{name} imports {target}, which is test infrastructure")
    problems += [
        f"{name} no longer imports {target}: remove it from MAY_IMPORT_TEST_INFRASTRUCTURE"
        for name, target in MAY_IMPORT_TEST_INFRASTRUCTURE
        if target not in graph.edges.get(name, set())
    ]
    return problems


def size_problems(root: Path) -> list[str]:
    """Modules over :data:`MAX_MODULE_LINES` lines, and known long modules that are not."""
    lines = {
        module_name(root, path): len(path.read_text().splitlines())
        for path in sorted(root.rglob("*.py"))
    }
    problems = [
        f"{name} has {count} lines, over {MAX_MODULE_LINES}: split it by concern"
        for name, count in sorted(lines.items())
        if count > MAX_MODULE_LINES and name not in KNOWN_LONG_MODULES
    ]
    problems += [
        f"known long module {name} is {lines[name]} lines now: remove it from KNOWN_LONG_MODULES"
        if name in lines
        else f"known long module {name} is gone: remove it from KNOWN_LONG_MODULES"
        for name in sorted(KNOWN_LONG_MODULES)
        if lines.get(name, 0) <= MAX_MODULE_LINES
    ]
    return problems


def test_the_graph_is_read_whole() -> None:
    graph = read_graph(SRC)
    assert {"aiokpl", "aiokpl._core.records", "aiokpl._cli", "aiokpl._cli.put"} <= graph.modules
    # Relative (one and two dots), from a package's __init__, under TYPE_CHECKING, in functions.
    assert "aiokpl._core.decoder" in graph.edges["aiokpl._core.records"]
    assert "aiokpl._cli.put" in graph.edges["aiokpl._cli"]
    assert "aiokpl._producer" in graph.edges["aiokpl._cli.put"]
    assert "aiokpl._coordination.coordinator" in graph.edges["aiokpl._pipeline.stream"]
    assert "aiokpl._version" in graph.edges["aiokpl._metrics.otel"]
    assert "anyio" in graph.external["aiokpl._producer"]


def test_no_import_cycles() -> None:
    assert cycle_problems(read_graph(SRC)) == []


def test_no_cycles_between_packages() -> None:
    # Between the packages around the core too: _pipeline, _metrics, _coordination, _cli,
    # testing each depend one way (a two-way need goes through a protocol).
    assert cycles(rooms(read_graph(SRC))) == []


def test_the_package_check_catches_a_cycle_between_packages(tmp_path: Path) -> None:
    root = copy_with(
        tmp_path, "_metrics/recorder.py", "if TYPE_CHECKING:\n    from .._producer import Producer"
    )
    assert cycles(rooms(read_graph(root))) == [
        ["aiokpl._metrics", "aiokpl._producer", "aiokpl._metrics"]
    ]


def test_the_core_imports_only_the_core_and_the_standard_library() -> None:
    assert core_problems(read_graph(SRC)) == []


def test_production_code_does_not_import_test_infrastructure() -> None:
    assert infrastructure_problems(read_graph(SRC)) == []


def test_no_module_is_over_the_line_limit() -> None:
    assert size_problems(SRC) == []


def copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the package with ``line`` appended to ``module`` (a path under it)."""
    root = tmp_path / "aiokpl"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__"))
    with (root / module).open("a") as file:
        file.write(f"\n\n{line}\n")
    return root


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        (
            "_outcome.py",
            "if TYPE_CHECKING:\n    from ._record import UserRecord",
            "import cycle: aiokpl._outcome -> aiokpl._record -> aiokpl._outcome",
        ),
        (
            "_core/results.py",
            "def late() -> None:\n    from .records import KinesisRecord",
            "import cycle: aiokpl._core.records -> aiokpl._core.results -> aiokpl._core.records",
        ),
        (
            "_cli/options.py",
            "from . import put",
            "import cycle: aiokpl._cli.options -> aiokpl._cli.put -> aiokpl._cli.options",
        ),
    ],
)
def test_the_checks_catch_a_cycle_and_name_its_path(
    tmp_path: Path, module: str, line: str, expected: str
) -> None:
    assert cycle_problems(read_graph(copy_with(tmp_path, module, line))) == [expected]


def test_the_checks_allow_a_known_cycle_and_catch_one_that_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(KNOWN_CYCLES, frozenset({"aiokpl._outcome", "aiokpl._record"}), "why")
    line = "if TYPE_CHECKING:\n    from ._record import UserRecord"
    assert cycle_problems(read_graph(copy_with(tmp_path / "cycle", "_outcome.py", line))) == []
    assert cycle_problems(read_graph(copy_with(tmp_path / "none", "_version.py", ""))) == [
        "known cycle aiokpl._outcome <-> aiokpl._record is gone: remove it from KNOWN_CYCLES"
    ]


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        (
            "_core/shards.py",
            "def shell() -> None:\n    from .. import _kinesis",
            "aiokpl._core.shards imports aiokpl._kinesis, outside _core",
        ),
        (
            "_core/hashing.py",
            "import sortedcontainers",
            "aiokpl._core.hashing imports sortedcontainers, not the standard library",
        ),
        (
            "_core/backoff.py",
            "from aiokpl._record import UserRecord",
            "aiokpl._core.backoff imports aiokpl._record, outside _core",
        ),
    ],
)
def test_the_checks_catch_an_impure_core(
    tmp_path: Path, module: str, line: str, expected: str
) -> None:
    assert core_problems(read_graph(copy_with(tmp_path, module, line))) == [expected]


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        (
            "_producer.py",
            "def fake() -> None:\n    from .testing import FakeKinesis",
            "aiokpl._producer imports aiokpl.testing, which is test infrastructure",
        ),
        (
            "_cli/put.py",
            "import aiokpl.testing._servers",
            "aiokpl._cli.put imports aiokpl.testing._servers, which is test infrastructure",
        ),
        (
            "_sync.py",
            "from .testing._loopback import LoopbackKinesis",
            "aiokpl._sync imports aiokpl.testing._loopback, which is test infrastructure",
        ),
    ],
)
def test_the_checks_catch_test_infrastructure_in_production(
    tmp_path: Path, module: str, line: str, expected: str
) -> None:
    problems = infrastructure_problems(read_graph(copy_with(tmp_path, module, line)))
    assert problems == [expected]


def test_the_checks_catch_a_long_module_and_a_known_one_that_is_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_with(tmp_path, "_version.py", "\n" * MAX_MODULE_LINES)
    monkeypatch.setitem(KNOWN_LONG_MODULES, "aiokpl._outcome", "why")
    monkeypatch.setitem(KNOWN_LONG_MODULES, "aiokpl._gone", "why")
    problems = size_problems(root)
    count = len((root / "_version.py").read_text().splitlines())
    outcome = len((root / "_outcome.py").read_text().splitlines())
    assert problems == [
        f"aiokpl._version has {count} lines, over {MAX_MODULE_LINES}: split it by concern",
        "known long module aiokpl._gone is gone: remove it from KNOWN_LONG_MODULES",
        f"known long module aiokpl._outcome is {outcome} lines now: remove it from "
        "KNOWN_LONG_MODULES",
    ]
