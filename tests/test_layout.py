"""The package's layout: its import graph (no cycles, a pure core, no test infrastructure in
production), no pipeline stage importing another, no private name used across modules, and a
report of the longest modules and functions (with a ceiling on each, so that none grows without
bound: the line caps of issue 24 became this report with issue 34).

Every module under ``src/aiokpl`` is parsed with :mod:`ast` and every import in it counts:
absolute and relative, at the top, inside functions, and under ``TYPE_CHECKING`` (a cycle of
annotations is still two modules that cannot be understood apart). Docstrings are not code, so
their examples do not count.

An import of ``aiokpl.a.b`` counts as an edge to ``aiokpl.a.b`` only, not to the packages on the
way (``aiokpl``, ``aiokpl.a``), which Python runs first but which only re-export; ``from .a import
b`` counts as an edge to ``aiokpl.a.b`` when that is a module, else to ``aiokpl.a``.

A private name (``_name``, not ``__dunder__``) belongs to the module that defines it: as a
function, class or variable at any depth, as an ``_alias`` it imports, or as an attribute it
assigns on ``self``/``cls``. ``x._name`` (and ``getattr(x, "_name")``, ``vars(x)["_name"]`` ...)
is allowed only in the one module that defines ``_name``; ``self._name`` wherever that module
defines it too (not in a subclass elsewhere). A name no module defines is another library's
private (``argparse._ArgumentGroup``); one that several modules define has no one owner, so it
counts wherever it is used on another object: renaming it, not defining it once more, is the
way out. Module-level helpers may be imported between the modules of one package (the package
is their unit), not from another package, and another library's private modules not at all,
but for the few listed with their reason. A name bound at module or class level to a private
member (``settle = Outcome._settle``, ``from .a import _y as y``) is a reach too, in the owner's
module as well: the alias is what the others use; give the member a public name instead.

The checks are functions of a source tree: ``test_the_checks_catch_*`` run the import checks on
a copy with one bad import added, and the measures' checks on small synthetic packages, and see
each fail.
"""

from __future__ import annotations

import ast
import functools
import shutil
import sys
from collections.abc import Iterator
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

MAX_MODULE_LINES = 1500
"""A ceiling, not a design rule: what a module holds is bounded by its concept (the router, the
SDK boundary), and one concept may take many lines (trio's ``_run.py`` is one in about 3,000),
so lengths are a report (:func:`size_report`, ``python tests/test_layout.py``), read in review.
The ceiling only stops a module from growing without bound: at 1,500 lines (over twice the
longest module today, half trio's ``_run.py``) nobody holds it at once any more, whatever its
concept. Past it, split the module along its concepts (no list of exceptions)."""

MAX_FUNCTION_LINES = 200
"""The functions' ceiling, from ``def`` to the last line, nested functions included: past it a
function is no longer one step a reader follows. The longest today is the producer's start-up
(``_producer.runtime.start``, about 120 lines: every part built with what it needs and pushed
onto the exit stack, in the order the exit undoes them), then constructors and parsers of one
format under 90. As for modules, lengths below it are reported, not judged."""

REPORTED = 10
"""How many of the longest modules and functions the report lists."""

SHARED_PIPELINE_MODULES: dict[str, str] = {
    "aiokpl._pipeline": "the package's docstring: it imports nothing",
    "aiokpl._pipeline.lane_states": "the sender's lane states and their transition table: "
    "pure data the sender steps through, no clock and no other stage",
    "aiokpl._pipeline.ordering": "the ordering policy the router consults (it picks the limiter "
    "and where retried records go): a decision table, not a stage",
    "aiokpl._pipeline.placement": "the placement policy the router consults (where a record "
    "the map does not predict goes, on a stream placed by key or by the service): a decision "
    "table, not a stage",
    "aiokpl._pipeline.requests": "a request queued in the sender and how queued requests "
    "merge: pure data the sender keeps, no clock and no other stage",
    "aiokpl._pipeline.scheduler": "the one timer every stage is given: a clock, not a stage",
    "aiokpl._pipeline.shard_map_logs": "the shard map's log lines (the missing-streams "
    "warning, message caps): formatting, no clock and no other stage",
    "aiokpl._pipeline.shard_limiter": "one shard's bucket, rates and queue (a lane in strict "
    "order): state the limiter keeps, with no clock and no other stage",
    "aiokpl._pipeline.stream": "the router: the one module that knows every stage",
    "aiokpl._pipeline.stream_logs": "the stream's warnings at a readable pace (overload, "
    "refused records): formatting, no clock and no other stage",
}
"""The modules of ``_pipeline`` that are not stages, and why; every other module there is a stage,
and a stage imports no other stage (a new module is a stage until it is named here)."""

PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("aiokpl._core.hashing", "from _md5 import md5"): "CPython's built-in MD5, 280 ns for a "
    "partition key against 490 through OpenSSL, on every put; hashlib.md5 when it is missing",
    (
        "aiokpl.testing._throttling",
        "from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment",
    ): (
        "the WSGI types, for the type checker only (under TYPE_CHECKING: typeshed's module, "
        "never imported at run time); wsgiref.types is 3.11+"
    ),
    (
        "aiokpl.testing._moto_extras",
        "from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment",
    ): "as for aiokpl.testing._throttling",
    (
        "aiokpl.testing._guard",
        "from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment",
    ): "as for aiokpl.testing._throttling",
}
"""Imports of another library's private module, each with the reason (module, import as
written). One listed that is no longer made fails the test too."""

PRIVATE_ALIASES_ALLOWED: dict[tuple[str, str], str] = {}
"""Module- or class-level names that alias a private member, each with the reason (module,
statement as written); one listed that is no longer there fails the test too."""


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


def sources(root: Path) -> dict[str, tuple[Path, ast.Module]]:
    """Every module under ``root``, by name, with its path and its parsed tree."""
    return {
        module_name(root, path): (path, parse(path.read_text()))
        for path in sorted(root.rglob("*.py"))
    }


def module_lengths(root: Path) -> dict[str, int]:
    """Every module's length in lines, by name."""
    return {name: len(path.read_text().splitlines()) for name, (path, _) in sources(root).items()}


@dataclass(frozen=True)
class Function:
    """A function or method: where it starts (``module:line``), its qualified name and length."""

    module: str
    line: int
    name: str
    length: int


def functions(root: Path) -> list[Function]:
    """Every function and method under ``root`` (nested ones too, by qualified name), with its
    length from its ``def`` to its last line."""
    found = []

    def visit(node: ast.AST, module: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    found.append(
                        Function(module, child.lineno, name, child.end_lineno - child.lineno + 1)
                    )
                visit(child, module, f"{name}.")
            else:
                visit(child, module, prefix)

    for module, (_, tree) in sources(root).items():
        visit(tree, module, "")
    return found


def size_problems(root: Path) -> list[str]:
    """Modules over :data:`MAX_MODULE_LINES` and functions over :data:`MAX_FUNCTION_LINES`."""
    problems = [
        f"{name} has {count} lines, over {MAX_MODULE_LINES}: split it along its concepts"
        for name, count in sorted(module_lengths(root).items())
        if count > MAX_MODULE_LINES
    ]
    problems += [
        f"{f.module}:{f.line} {f.name} has {f.length} lines, over {MAX_FUNCTION_LINES}: split "
        "it into named steps"
        for f in functions(root)
        if f.length > MAX_FUNCTION_LINES
    ]
    return problems


def size_report(root: Path, top: int = REPORTED) -> str:
    """The ``top`` longest modules and functions, longest first (ties by name), with the
    number of modules and functions and their median length (the upper one): what a reviewer
    reads to see where the code grows, since length alone says nothing of a module's
    concepts."""
    modules = sorted(module_lengths(root).items(), key=lambda item: (-item[1], item[0]))
    every = sorted(functions(root), key=lambda f: (-f.length, f.module, f.line))

    def median(lengths: list[int]) -> int:
        return sorted(lengths)[len(lengths) // 2]

    lines = [
        f"{len(modules)} modules, median {median([n for _, n in modules])} lines; "
        f"ceiling {MAX_MODULE_LINES}",
        *(f"  {count:5} {name}" for name, count in modules[:top]),
        f"{len(every)} functions, median {median([f.length for f in every])} lines; "
        f"ceiling {MAX_FUNCTION_LINES}",
        *(f"  {f.length:5} {f.module}.{f.name} (line {f.line})" for f in every[:top]),
    ]
    return "\n".join(lines)


def stage_problems(graph: Graph) -> list[str]:
    """Stage modules of ``_pipeline`` that import another stage module (the router wires them)."""
    top = next(iter(graph.modules)).split(".")[0]
    pipeline = f"{top}._pipeline"
    stages = {
        m for m in graph.modules if m.startswith(pipeline + ".") and m not in shared_pipeline(top)
    }
    problems = [
        f"stage {name} imports stage {target}: a stage returns what it produces, the router "
        "(stream) passes it on"
        for name in sorted(stages)
        for target in sorted(graph.edges[name] & stages)
    ]
    problems += [
        f"shared pipeline module {name} is gone: remove it from SHARED_PIPELINE_MODULES"
        for name in sorted(shared_pipeline(top) - graph.modules)
    ]
    return problems


def shared_pipeline(top: str) -> set[str]:
    return {name.replace("aiokpl", top, 1) for name in SHARED_PIPELINE_MODULES}


def is_private(name: str) -> bool:
    """``_name`` (one or more underscores), not ``__dunder__``, not ``_`` alone."""
    return name.startswith("_") and name.strip("_") != "" and not name.endswith("__")


def defined_names(tree: ast.Module) -> set[str]:
    """The private names a module defines: its functions, classes and variables at any depth,
    the names it imports as ``_alias``, and the attributes it assigns on ``self`` or ``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.alias) and node.asname is not None:
            names.add(node.asname)
    return {name for name in names if is_private(name)}


ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "setattr", "hasattr", "delattr", "attrgetter"})
"""Calls that reach an attribute by its name as a string: ``getattr(x, "_name")`` is ``x._name``."""


def private_accesses(tree: ast.Module) -> list[tuple[int, str, str, bool]]:
    """Each use of a private name through an object: ``x._name`` (read, written or deleted),
    ``getattr(x, "_name")`` and its kin, ``vars(x)["_name"]`` and ``x.__dict__["_name"]``, as
    (line, text, name, whether ``x`` is ``self`` or ``cls``)."""

    def own(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id in ("self", "cls")

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            found.append((node.lineno, ast.unparse(node), node.attr, own(node.value)))
        elif isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_FUNCTIONS)
            or (isinstance(node.func, ast.Attribute) and node.func.attr in ATTRIBUTE_FUNCTIONS)
        ):
            # attrgetter("_name") names no object: never one's own.
            mine = bool(node.args) and own(node.args[0])
            found += [
                (node.lineno, ast.unparse(node), arg.value, mine)
                for arg in node.args
                if isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and is_private(arg.value)
            ]
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
            and is_private(node.slice.value)
        ):
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "__dict__":
                found.append((node.lineno, ast.unparse(node), node.slice.value, own(value.value)))
            elif (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "vars"
                and value.args
            ):
                found.append((node.lineno, ast.unparse(node), node.slice.value, own(value.args[0])))
    return found


def is_package_in(name: str, modules: set[str]) -> bool:
    return any(m.startswith(name + ".") for m in modules)


def private_imports(module: str, tree: ast.Module, modules: set[str]) -> list[tuple[int, str]]:
    """Imports of a private name of another package (``from ..a.b import _name``, where
    ``_name`` is not a module) and of another library's private module (``import a._b``,
    ``from _a import b``). The modules of one package may share their underscored module-level
    helpers (``from ._http import _Response``): the package is their unit, as the class is an
    attribute's."""
    top = module.split(".")[0]
    package = module if is_package_in(module, modules) else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {alias.name}")
                for alias in node.names
                if alias.name.split(".")[0] != top
                and any(is_private(part) for part in alias.name.split("."))
            ]
        elif isinstance(node, ast.ImportFrom):
            names = ", ".join(alias.name for alias in node.names)
            if node.level == 0 and (node.module or "").split(".")[0] != top:
                if any(is_private(part) for part in (node.module or "").split(".")):
                    found.append((node.lineno, f"from {node.module} import {names}"))
                continue
            if node.level == 0:
                base = node.module or ""
            else:
                parts = package.split(".")
                kept = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*kept, node.module] if node.module else kept)
            source_package = base if is_package_in(base, modules) else base.rsplit(".", 1)[0]
            found += [
                (node.lineno, f"from {'.' * node.level}{node.module or ''} import {alias.name}")
                for alias in node.names
                if is_private(alias.name)
                and f"{base}.{alias.name}" not in modules  # a private module: fine
                and source_package != package
            ]
    return found


def scope_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that bind a module's or a class's names: those of its body, of the blocks
    in it (``if``, ``try``, ``with``, loops) and of the classes in it, not of functions."""
    for node in body:
        yield node
        if isinstance(node, (ast.ClassDef, ast.With)):
            yield from scope_statements(node.body)
        elif isinstance(node, (ast.If, ast.For, ast.While)):
            yield from scope_statements([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            yield from scope_statements([*node.body, *node.orelse, *node.finalbody])
            for handler in node.handlers:
                yield from scope_statements(handler.body)


def private_aliases(tree: ast.Module) -> list[tuple[int, str]]:
    """Names a module or a class binds to a private member, so that others reach it without
    writing ``_``: ``name = Class._member`` (or ``obj._member``, ``getattr(obj, "_member")``),
    ``name = _imported`` and ``from x import _member as name``. The private stays the owner's,
    wherever the alias is made: in the owner's own module too, since the alias is what others
    import. A module's own ``_helper`` bound to a public name is that helper made public."""
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if is_private(alias.name)
    }

    def reaches(value: ast.expr) -> bool:
        if isinstance(value, ast.Attribute):
            owner = value.value
            return is_private(value.attr) and not (
                isinstance(owner, ast.Name) and owner.id in ("self", "cls")
            )
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            return (
                value.func.id == "getattr"
                and len(value.args) >= 2
                and isinstance(value.args[1], ast.Constant)
                and isinstance(value.args[1].value, str)
                and is_private(value.args[1].value)
            )
        return isinstance(value, ast.Name) and value.id in imported

    found = []
    for node in scope_statements(tree.body):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            if reaches(node.value):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            found += [
                (
                    node.lineno,
                    f"from {'.' * node.level}{node.module or ''} import {alias.name} "
                    f"as {alias.asname}",
                )
                for alias in node.names
                if is_private(alias.name) and alias.asname and not is_private(alias.asname)
            ]
    return found


def private_problems(root: Path) -> list[str]:
    """Uses of another module's private names: a ``_name`` belongs to the module that defines
    it, so ``x._name`` (``x`` not ``self``/``cls``) is allowed only where every definition of
    ``_name`` in the tree is in the module itself, and ``self._name`` only where the module
    defines ``_name`` (not a base class elsewhere). A name defined nowhere in the tree is
    another library's private; one defined in several modules has no one owner, so it counts."""
    trees = sources(root)
    owners: dict[str, set[str]] = {}
    for module, (_, tree) in trees.items():
        for name in defined_names(tree):
            owners.setdefault(name, set()).add(module)
    problems = []
    for module, (_, tree) in sorted(trees.items()):
        for line, text, name, own in sorted(private_accesses(tree)):
            where = owners.get(name, set())
            if module in where and (own or where == {module}):
                continue
            if not where:
                why = "defined nowhere in the package: another library's private"
            elif module not in where:
                why = "private to " + ", ".join(sorted(where))
            else:
                why = "also defined in " + ", ".join(sorted(where - {module}))
            problems.append(f"{module}:{line} {text}: {why}")
        problems += [
            f"{module}:{line} {text}: another package's or library's private name"
            for line, text in private_imports(module, tree, set(trees))
            if (module, text) not in PRIVATE_IMPORTS_ALLOWED
        ]
        problems += [
            f"{module}:{line} {text}: an alias of a private member is a reach to it: give the "
            "member a public name"
            for line, text in private_aliases(tree)
            if (module, text) not in PRIVATE_ALIASES_ALLOWED
        ]
    aliases = {
        (module, text) for module, (_, tree) in trees.items() for _, text in private_aliases(tree)
    }
    problems += [
        f"{module} no longer has {text!r}: remove it from PRIVATE_ALIASES_ALLOWED"
        for module, text in sorted(PRIVATE_ALIASES_ALLOWED)
        if (module.replace("aiokpl", root.name, 1), text) not in aliases
    ]
    imports = {
        (module, text)
        for module, (_, tree) in trees.items()
        for _, text in private_imports(module, tree, set(trees))
    }
    problems += [
        f"{module} no longer has {text!r}: remove it from PRIVATE_IMPORTS_ALLOWED"
        for module, text in sorted(PRIVATE_IMPORTS_ALLOWED)
        if (module.replace("aiokpl", root.name, 1), text) not in imports
    ]
    return problems


def test_the_graph_is_read_whole() -> None:
    graph = read_graph(SRC)
    assert {"aiokpl", "aiokpl._core.records", "aiokpl._cli", "aiokpl._cli.put"} <= graph.modules
    # Relative (one and two dots), from a package's __init__, under TYPE_CHECKING, in functions.
    assert "aiokpl._core.decoder" in graph.edges["aiokpl._core.records"]
    assert "aiokpl._cli.put" in graph.edges["aiokpl._cli"]
    assert "aiokpl._producer.producer" in graph.edges["aiokpl._cli.put"]
    assert "aiokpl._coordination.coordinator" in graph.edges["aiokpl._pipeline.stream"]
    assert "aiokpl._version" in graph.edges["aiokpl._metrics.otel"]
    assert "anyio" in graph.external["aiokpl._producer.producer"]


def test_no_import_cycles() -> None:
    assert cycle_problems(read_graph(SRC)) == []


def test_no_cycles_between_packages() -> None:
    # Between the packages around the core too: _pipeline, _metrics, _coordination, _cli,
    # testing each depend one way (a two-way need goes through a protocol).
    assert cycles(rooms(read_graph(SRC))) == []


def test_the_package_check_catches_a_cycle_between_packages(tmp_path: Path) -> None:
    root = copy_with(
        tmp_path,
        "_metrics/recorder.py",
        "if TYPE_CHECKING:\n    from .._producer.producer import Producer",
    )
    assert cycles(rooms(read_graph(root))) == [
        ["aiokpl._metrics", "aiokpl._producer", "aiokpl._metrics"]
    ]


def test_the_core_imports_only_the_core_and_the_standard_library() -> None:
    assert core_problems(read_graph(SRC)) == []


def test_production_code_does_not_import_test_infrastructure() -> None:
    assert infrastructure_problems(read_graph(SRC)) == []


def test_no_module_or_function_is_past_the_ceiling() -> None:
    assert size_problems(SRC) == []


def test_the_longest_modules_and_functions_are_reported() -> None:
    # The report, not a limit: `pytest -rP tests/test_layout.py` (or `python
    # tests/test_layout.py`) shows it.
    report = size_report(SRC)
    print(report)
    longest = max(module_lengths(SRC).items(), key=lambda item: item[1])
    assert f"  {longest[1]:5} {longest[0]}" in report.splitlines()


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
            "_producer/producer.py",
            "def fake() -> None:\n    from ..testing import FakeKinesis",
            "aiokpl._producer.producer imports aiokpl.testing, which is test infrastructure",
        ),
        (
            "_cli/put.py",
            "import aiokpl.testing._servers",
            "aiokpl._cli.put imports aiokpl.testing._servers, which is test infrastructure",
        ),
        (
            "_blocking/loop.py",
            "from ..testing._loopback import LoopbackKinesis",
            "aiokpl._blocking.loop imports aiokpl.testing._loopback, which is test infrastructure",
        ),
    ],
)
def test_the_checks_catch_test_infrastructure_in_production(
    tmp_path: Path, module: str, line: str, expected: str
) -> None:
    problems = infrastructure_problems(read_graph(copy_with(tmp_path, module, line)))
    assert problems == [expected]


def synthetic(tmp_path: Path, modules: dict[str, str]) -> Path:
    """A package ``aiokpl`` of just ``modules`` (path under it -> source), with the
    ``__init__.py`` files its folders need: the checks of the measures are proven on these, since
    the real tree's answer changes as the code does."""
    root = tmp_path / "aiokpl"
    for module, source in {"__init__.py": "", **modules}.items():
        path = root / module
        path.parent.mkdir(parents=True, exist_ok=True)
        init = path.parent / "__init__.py"
        if not init.exists():
            init.write_text("")
        path.write_text(source)
    return root


def function_of(name: str, lines: int, indent: str = "") -> str:
    """A function ``name`` of exactly ``lines`` lines, ``def`` included."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}() -> int:\n{body}{indent}    return 0\n"


def test_the_ceiling_catches_a_long_module_function_method_and_nested_one(
    tmp_path: Path,
) -> None:
    limit = MAX_FUNCTION_LINES
    root = synthetic(
        tmp_path,
        {
            "long.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
            "at_limit.py": "x = 1\n" * MAX_MODULE_LINES,
            "a.py": function_of("fits", limit) + function_of("long", limit + 1),
            "b/c.py": "class C:\n"
            + function_of("method", limit + 5, "    ")
            + "    async def outer(self) -> None:\n"
            + function_of("inner", limit + 1, "        ")
            + "\n\n"
            + function_of("short", 3),
        },
    )
    assert size_problems(root) == [
        f"aiokpl.long has {MAX_MODULE_LINES + 1} lines, over {MAX_MODULE_LINES}: split it "
        "along its concepts",
        f"aiokpl.a:{limit + 1} long has {limit + 1} lines, over {limit}: split it into named steps",
        f"aiokpl.b.c:2 C.method has {limit + 5} lines, over {limit}: split it into named steps",
        f"aiokpl.b.c:{limit + 7} C.outer has {limit + 2} lines, over {limit}: split it into "
        "named steps",
        f"aiokpl.b.c:{limit + 8} C.outer.inner has {limit + 1} lines, over {limit}: split it "
        "into named steps",
    ]


def test_the_report_lists_the_longest_first_with_the_counts(tmp_path: Path) -> None:
    root = synthetic(
        tmp_path,
        {
            "a.py": function_of("one", 4) + function_of("two", 9),
            "b/c.py": "class C:\n" + function_of("method", 6, "    ") + "x = 1\n" * 20,
        },
    )
    assert size_report(root, top=2).splitlines() == [
        "4 modules, median 13 lines; ceiling 1500",
        "     27 aiokpl.b.c",
        "     13 aiokpl.a",
        "3 functions, median 6 lines; ceiling 200",
        "      9 aiokpl.a.two (line 5)",
        "      6 aiokpl.b.c.C.method (line 2)",
    ]


def test_the_stage_check_catches_a_stage_importing_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modules = {
        "_pipeline/scheduler.py": "",
        "_pipeline/ordering.py": "from .sender import S\n",
        "_pipeline/placement.py": "",
        "_pipeline/stream_logs.py": "",
        "_pipeline/shard_limiter.py": "",
        "_pipeline/lane_states.py": "",
        "_pipeline/requests.py": "",
        "_pipeline/shard_map_logs.py": "",
        "_pipeline/stream.py": "from .aggregator import A\nfrom .sender import S\n",
        "_pipeline/aggregator.py": "from .scheduler import Scheduler\nfrom .._core import x\n",
        "_pipeline/sender.py": "",
        "_core/x.py": "",
    }
    assert stage_problems(read_graph(synthetic(tmp_path / "good", modules))) == []
    bad = {
        **modules,
        # Under TYPE_CHECKING too; and a new module is a stage until it is named shared.
        "_pipeline/sender.py": (
            "if TYPE_CHECKING:\n    from . import aggregator\nfrom .lane import L\n"
        ),
        "_pipeline/lane.py": "",
    }
    monkeypatch.setitem(SHARED_PIPELINE_MODULES, "aiokpl._pipeline.gone", "why")
    assert stage_problems(read_graph(synthetic(tmp_path / "bad", bad))) == [
        "stage aiokpl._pipeline.sender imports stage aiokpl._pipeline.aggregator: a stage "
        "returns what it produces, the router (stream) passes it on",
        "stage aiokpl._pipeline.sender imports stage aiokpl._pipeline.lane: a stage returns "
        "what it produces, the router (stream) passes it on",
        "shared pipeline module aiokpl._pipeline.gone is gone: remove it from "
        "SHARED_PIPELINE_MODULES",
    ]


PRIVATE_CASES = {
    "owner.py": """\
import argparse

class Owner:
    _shared = 0

    def __init__(self) -> None:
        self._state = 1
        self._lock = None

    def same_module(self, other: "Owner") -> int:
        return other._state + self._state + self.__class__.__name__.count("_")

    def ambiguous(self, other: "Owner") -> object:
        return other._lock

def _helper() -> None: ...

settle = Owner._shared
helper = _helper
got = getattr(Owner, "_shared", None)

class Alias:
    shared: int = Owner._shared

    def local(self) -> int:
        shared = Owner._shared
        return shared
""",
    "elsewhere.py": """\
import operator
from .owner import Owner

class Sub(Owner):
    def __init__(self) -> None:
        self._lock = None

    def inherited(self) -> int:
        return self._state

def reach(owner: Owner) -> object:
    owner._state = 2
    return (
        getattr(owner, "_state"),
        operator.attrgetter("_shared"),
        vars(owner)["_state"],
        owner.__dict__["_state"],
        argparse_group(),
    )

def argparse_group() -> object:
    import argparse
    return argparse._ArgumentGroup
""",
    "pkg/a.py": "def _shared_in_package() -> None: ...\n",
    "pkg/b.py": """\
from ._a_module_named_privately import x
from .a import _shared_in_package
from .a import _shared_in_package as shared_in_package
if x:
    again = _shared_in_package
with open(__file__):
    pass
try:
    pass
except ImportError:
    fallback = _shared_in_package
""",
    "pkg/_a_module_named_privately.py": "x = 1\n",
    "other/c.py": """\
from ..pkg.a import _shared_in_package
from .. import owner
from concurrent.futures._base import FINISHED
import _md5
""",
}


PRIVATE_PROBLEMS = [
    "aiokpl.elsewhere:9 self._state: private to aiokpl.owner",
    "aiokpl.elsewhere:12 owner._state: private to aiokpl.owner",
    "aiokpl.elsewhere:14 getattr(owner, '_state'): private to aiokpl.owner",
    "aiokpl.elsewhere:15 operator.attrgetter('_shared'): private to aiokpl.owner",
    "aiokpl.elsewhere:16 vars(owner)['_state']: private to aiokpl.owner",
    "aiokpl.elsewhere:17 owner.__dict__['_state']: private to aiokpl.owner",
    "aiokpl.elsewhere:23 argparse._ArgumentGroup: defined nowhere in the package: another "
    "library's private",
    "aiokpl.other.c:1 from ..pkg.a import _shared_in_package: another package's or "
    "library's private name",
    "aiokpl.other.c:3 from concurrent.futures._base import FINISHED: another package's or "
    "library's private name",
    "aiokpl.other.c:4 import _md5: another package's or library's private name",
    "aiokpl.owner:14 other._lock: also defined in aiokpl.elsewhere",
    *(
        f"{where} {text}: an alias of a private member is a reach to it: give the member a "
        "public name"
        for where, text in [
            ("aiokpl.owner:18", "settle = Owner._shared"),
            ("aiokpl.owner:20", "got = getattr(Owner, '_shared', None)"),
            ("aiokpl.owner:23", "shared: int = Owner._shared"),
            ("aiokpl.pkg.b:3", "from .a import _shared_in_package as shared_in_package"),
            ("aiokpl.pkg.b:5", "again = _shared_in_package"),
            ("aiokpl.pkg.b:11", "fallback = _shared_in_package"),
        ]
    ),
]
"""What the private check finds in :data:`PRIVATE_CASES`: each way across modules, once, and
each alias of a private member (at module or class level, in the owner's module too); none of
the same-module uses, the package-internal imports, the dunders, a module's own helper made
public (``helper = _helper``) or a function's local name."""


def test_the_private_check_catches_each_way_across_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "PRIVATE_IMPORTS_ALLOWED", {})
    monkeypatch.setattr(sys.modules[__name__], "PRIVATE_ALIASES_ALLOWED", {})
    assert private_problems(synthetic(tmp_path, PRIVATE_CASES)) == PRIVATE_PROBLEMS


def test_the_private_check_allows_a_listed_import_and_catches_one_that_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed = {("aiokpl.other.c", "import _md5"): "why", ("aiokpl.gone", "import _x"): "why"}
    monkeypatch.setattr(sys.modules[__name__], "PRIVATE_IMPORTS_ALLOWED", allowed)
    monkeypatch.setattr(sys.modules[__name__], "PRIVATE_ALIASES_ALLOWED", {})
    md5 = "aiokpl.other.c:4 import _md5: another package's or library's private name"
    assert private_problems(synthetic(tmp_path, PRIVATE_CASES)) == [
        *(problem for problem in PRIVATE_PROBLEMS if problem != md5),
        "aiokpl.gone no longer has 'import _x': remove it from PRIVATE_IMPORTS_ALLOWED",
    ]


@pytest.mark.parametrize(
    ("module", "line", "text"),
    [
        (
            "_producer/health.py",
            "forget = Connectivity._forget",
            "forget = Connectivity._forget",
        ),
        (
            "_spooling.py",
            "class Woken:\n    wake = Spool._wake_durable",
            "wake = Spool._wake_durable",
        ),
        (
            "_spool/writer.py",
            "from .format import _HEADER as HEADER",
            "from .format import _HEADER as HEADER",
        ),
    ],
)
def test_the_private_check_catches_an_alias_planted_in_the_tree(
    tmp_path: Path, module: str, line: str, text: str
) -> None:
    root = copy_with(tmp_path, module, line)
    at = len((root / module).read_text().splitlines())  # the alias is the planted last line
    name = module_name(root, root / module)
    assert private_problems(root) == [
        f"{name}:{at} {text}: an alias of a private member is a reach to it: give the member a "
        "public name"
    ]


def test_the_private_check_allows_a_listed_alias_and_catches_one_that_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = ("aiokpl._producer.health", "forget = Connectivity._forget")
    monkeypatch.setitem(PRIVATE_ALIASES_ALLOWED, gone, "why")
    assert private_problems(SRC) == [
        "aiokpl._producer.health no longer has 'forget = Connectivity._forget': remove it from "
        "PRIVATE_ALIASES_ALLOWED"
    ]


def test_no_stage_imports_another_stage() -> None:
    assert stage_problems(read_graph(SRC)) == []


def test_no_private_names_are_used_across_modules() -> None:
    assert private_problems(SRC) == []


if __name__ == "__main__":
    print(size_report(SRC, top=int(sys.argv[1]) if len(sys.argv) > 1 else REPORTED))
