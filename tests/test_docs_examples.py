"""Every code example in the documentation runs, against the in-process fake.

Sources: ``README.md``, every ``*.md`` under ``docs/``, and the docstrings the API reference
renders (the public modules, every name in their ``__all__``, the public members of those
classes), all found anew on each run, so a new page or public name is covered the moment it
exists. The rules they follow (``docs/contributing.md`` says the same for writers):

* A ```` ```python ```` block is a **complete program**: imports included, nothing defined
  elsewhere. It runs as written, in a fresh module.
* A block whose top level uses ``await``, ``async with`` or ``async for`` runs inside an event
  loop, **once on asyncio and once on trio**. Any other block runs once, as written: it may
  start its own loop (``anyio.run(main)``, ``asyncio.run(main())``, ``trio.run(main)``).
* A block that defines ``test_*`` functions is a **pytest module**: it is written to a file and
  run by pytest in a subprocess, which must report at least one test passed and nothing else.
* A producer built without ``client=`` (as a real application does) gets a
  :class:`~aiokpl.testing.FakeKinesis` in which every stream exists, with 4 shards, instead of
  an aiobotocore client. With ``Config(endpoint_url=...)`` it gets a real client for that
  endpoint (a ``LoopbackKinesis`` the example started, say).
* A ```` ```pycon ```` block is an interactive session, checked with :mod:`doctest`.
* Two markers, each an HTML comment alone on the line just before a fence (invisible on the
  site, plain in the source):

  * ``<!-- docs-test: continue -->``: the block continues the page's previous ``python`` block,
    in the same module namespace, in the same test.
  * ``<!-- docs-test: skip: REASON -->``: the block is not run; the test reports it as skipped
    with REASON, which must be given.

  A marker anywhere else is an error, so none is silently ignored.
* Every fence has a language, from :data:`LANGUAGES`: code that cannot run is not Python
  (```` ```console ```` for shell sessions, ```` ```text ```` for output and diagrams).
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import importlib
import inspect
import re
import subprocess
import sys
import types
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

import aiokpl._kinesis
import aiokpl._producer
from aiokpl import Config
from aiokpl.testing import FakeKinesis

ROOT = Path(__file__).resolve().parent.parent

# Languages a fence may have. Only python and pycon are executed; the others are not Python.
LANGUAGES = frozenset(
    {
        "python",
        "pycon",
        "console",
        "text",
        "mermaid",
        "protobuf",
        "toml",
        "yaml",
        "json",
        "markdown",
    }
)

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")
_SKIP = re.compile(r"skip:\s*(?P<reason>\S.*)")


# Modules whose docstrings the API reference pages render: their examples run too.
PUBLIC_MODULES = ("aiokpl", "aiokpl.aggregation", "aiokpl.testing")


def pages() -> list[Path]:
    """README.md and every page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass
class Source:
    """A text whose fenced blocks are examples: a page, or a docstring the site renders."""

    name: str  # "docs/testing.md", or "aiokpl.testing.FakeKinesis"
    text: str
    filename: str  # for tracebacks: the page's path, or the docstring's qualified name


def page_source(path: Path) -> Source:
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    return Source(name, path.read_text(encoding="utf-8"), str(path))


def docstring_sources() -> list[Source]:
    """The docstrings of every public module, of every name in its ``__all__``, and of the
    public members of the classes among them."""
    found: list[Source] = []

    def add(name: str, obj: object) -> None:
        doc = inspect.getdoc(obj)
        if doc:
            found.append(Source(name, doc, f"<docstring of {name}>"))

    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        add(module_name, module)
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # constants: their docstring is their type's
            add(f"{module_name}.{name}", obj)
            if inspect.isclass(obj):
                for member_name, member in vars(obj).items():
                    if not member_name.startswith("_") and isinstance(
                        member, types.FunctionType | classmethod | staticmethod | property
                    ):
                        add(f"{module_name}.{name}.{member_name}", member)
    return found


def sources() -> list[Source]:
    return [*map(page_source, pages()), *docstring_sources()]


@dataclass
class Block:
    """One fenced block of a page or docstring."""

    origin: Source
    line: int  # 1-based line of the opening fence
    language: str
    source: str
    marker: str | None  # the body of a docs-test marker just before the fence

    @property
    def where(self) -> str:
        return f"{self.origin.name}:{self.line}"


def fenced_blocks(origin: Source) -> list[Block]:
    """Every fenced block of a page, in order, with the marker before it if any.

    Raises:
        ValueError: An unclosed fence, or a marker that is not directly before a fence.
    """
    path = origin.name
    lines = origin.text.splitlines()
    blocks: list[Block] = []
    pending: tuple[int, str] | None = None  # (line, marker body) waiting for its fence
    i = 0
    while i < len(lines):
        text = lines[i]
        opening = _FENCE.match(text)
        if opening is None:
            marker = _MARKER.match(text)
            if pending is not None and text.strip():
                raise ValueError(f"{path}:{pending[0]}: docs-test marker not followed by a fence")
            if marker is not None:
                pending = (i + 1, marker.group("body"))
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        language = opening.group("info").split()[0] if opening.group("info") else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if (
                closing is not None
                and closing.group("fence").startswith(fence)
                and not closing.group("info")
            ):
                break
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        else:
            raise ValueError(f"{path}:{i + 1}: fence never closed")
        marker_body = pending[1] if pending is not None else None
        blocks.append(Block(origin, i + 1, language, "\n".join(body) + "\n", marker_body))
        pending = None
        i = j + 1
    if pending is not None:
        raise ValueError(f"{path}:{pending[0]}: docs-test marker not followed by a fence")
    return blocks


@dataclass
class Example:
    """What one test runs: a python block and the blocks that continue it, or a pycon block."""

    blocks: list[Block] = field(default_factory=list)
    skip_reason: str | None = None
    problem: str | None = None  # why the page's blocks could not be collected

    @property
    def first(self) -> Block:
        return self.blocks[0]

    @property
    def kind(self) -> str:
        """``"pycon"``, ``"pytest"``, ``"async"`` (top-level await) or ``"program"``."""
        if self.first.language == "pycon":
            return "pycon"
        if any(_defines_tests(block.source) for block in self.blocks):
            return "pytest"
        if any(_is_async(block) for block in self.blocks):
            return "async"
        return "program"


def _compile(block: Block) -> types.CodeType:
    # Blank lines in front so that line numbers in tracebacks are the page's.
    code: types.CodeType = compile(
        "\n" * block.line + block.source,
        block.origin.filename,
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        dont_inherit=True,
    )
    return code


def _is_async(block: Block) -> bool:
    return bool(_compile(block).co_flags & 0x80)  # inspect.CO_COROUTINE


def _defines_tests(source: str) -> bool:
    tree = ast.parse(source)
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
        for node in tree.body
    )


def examples_of(origin: Source) -> list[Example]:
    """The examples of a page: python blocks grouped with their continuations, pycon blocks.

    Raises:
        ValueError: A block breaks the rules in the module docstring.
    """
    found: list[Example] = []
    last_python: Example | None = None
    for block in fenced_blocks(origin):
        if block.language not in LANGUAGES:
            raise ValueError(
                f"{block.where}: fence language {block.language!r} is not one of "
                f"{sorted(LANGUAGES)}; Python code must be runnable ('python'), anything else "
                "needs its own language ('console', 'text', …)"
            )
        skip_reason = None
        if block.marker is not None:
            if block.language != "python":
                raise ValueError(f"{block.where}: docs-test markers go before python blocks only")
            skip = _SKIP.fullmatch(block.marker)
            if skip is not None:
                skip_reason = skip.group("reason")
            elif block.marker != "continue":
                raise ValueError(
                    f"{block.where}: unknown marker {block.marker!r}; use 'continue' or "
                    "'skip: REASON' (a reason is required)"
                )
        if block.language == "pycon":
            found.append(Example([block]))
        elif block.language == "python":
            if block.marker == "continue":
                if last_python is None:
                    raise ValueError(f"{block.where}: 'continue' with no python block before it")
                if last_python.skip_reason is not None:
                    raise ValueError(f"{block.where}: continues a skipped block")
                last_python.blocks.append(block)
            else:
                last_python = Example([block], skip_reason)
                found.append(last_python)
    return found


def _collect() -> list[Any]:
    params = []
    for origin in sources():
        try:
            examples = examples_of(origin)
            kinds = [example.kind for example in examples]  # compiles every block
        except (ValueError, SyntaxError) as exc:
            # One test that fails with the reason, rather than an error that stops collection
            # of every other page.
            params.append(pytest.param(Example(problem=str(exc)), None, id=origin.name))
            continue
        for example, kind in zip(examples, kinds, strict=True):
            where = example.first.where
            if kind == "async":
                params.extend(
                    pytest.param(example, backend, id=f"{where}-{backend}")
                    for backend in ("asyncio", "trio")
                )
            else:
                params.append(pytest.param(example, None, id=where))
    return params


# -- what examples run against --------------------------------------------------------------


class AnyStreamKinesis(FakeKinesis):
    """A :class:`FakeKinesis` in which any stream a producer writes to exists, with 4 shards."""

    def _ensure(self, name: str | None) -> None:
        if name is None:
            return
        try:
            self.shards(name)
        except ValueError:
            self.add_stream(name, shard_count=4)

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        self._ensure(kwargs.get("StreamName"))
        return await super().list_shards(**kwargs)

    async def put_records(self, **kwargs: Any) -> dict[str, Any]:
        self._ensure(kwargs.get("StreamName"))
        return await super().put_records(**kwargs)


@pytest.fixture(autouse=True)
def _fake_default_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Producers that would open an aiobotocore client to AWS get a fake instead."""
    real = aiokpl._kinesis.create_client

    @contextlib.asynccontextmanager
    async def create_client(config: Config) -> AsyncIterator[Any]:
        if config.endpoint_url is not None:
            async with real(config) as client:
                yield client
        else:
            yield AnyStreamKinesis()

    monkeypatch.setattr(aiokpl._producer, "create_client", create_client)


@contextlib.contextmanager
def _module() -> Iterator[dict[str, Any]]:
    """A fresh module, registered in ``sys.modules`` while the example runs (dataclasses and
    pydantic look their module up there)."""
    module = types.ModuleType("docs_example")
    sys.modules[module.__name__] = module
    try:
        yield module.__dict__
    finally:
        del sys.modules[module.__name__]


async def _run_async(blocks: list[Block], namespace: dict[str, Any]) -> None:
    for block in blocks:
        result = eval(_compile(block), namespace)
        if result is not None:  # a coroutine: the block has a top-level await
            await result


# -- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize(("example", "backend"), _collect())
def test_example_runs(example: Example, backend: str | None, tmp_path: Path) -> None:
    if example.problem is not None:
        pytest.fail(example.problem, pytrace=False)
    if example.skip_reason is not None:
        pytest.skip(f"{example.first.where}: {example.skip_reason}")
    kind = example.kind
    if kind == "pycon":
        block = example.first
        test = doctest.DocTestParser().get_doctest(
            block.source, {}, block.where, block.origin.filename, block.line
        )
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert test.examples, f"{block.where}: no >>> lines"
        assert runner.failures == 0, f"{block.where}: doctest failed (output above)"
    elif kind == "pytest":
        assert len(example.blocks) == 1, "a pytest module cannot continue or be continued"
        _run_pytest_module(example.first, tmp_path)
    elif kind == "async":
        assert backend is not None
        with _module() as namespace:
            anyio.run(_run_async, example.blocks, namespace, backend=backend)
    else:
        with _module() as namespace:
            for block in example.blocks:
                exec(_compile(block), namespace)


def _run_pytest_module(block: Block, tmp_path: Path) -> None:
    module = tmp_path / "test_docs_example.py"
    module.write_text(block.source, encoding="utf-8")
    command = [sys.executable, "-m", "pytest", str(module), "-q", "-p", "no:cacheprovider"]
    process = subprocess.run(
        [*command, "-W", "error"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary = process.stdout.strip().splitlines()[-1] if process.stdout.strip() else ""
    assert process.returncode == 0, f"{block.where}:\n{process.stdout}\n{process.stderr}"
    assert re.fullmatch(r"\d+ passed in [\d.]+s", summary), (
        f"{block.where}: expected only passing tests, got {summary!r}"
    )


def test_every_page_is_collected() -> None:
    """New pages are picked up by globbing; this pins that the glob sees the site."""
    found = {path.relative_to(ROOT).as_posix() for path in pages()}
    assert {"README.md", "docs/index.md", "docs/getting-started.md"} <= found
    documented = {source.name for source in docstring_sources()}
    assert {"aiokpl.Producer", "aiokpl.testing.FakeKinesis", "aiokpl.RateLimiter.acquire"} <= (
        documented
    )
    runnable = [example for origin in sources() for example in examples_of(origin)]
    assert sum(example.skip_reason is None for example in runnable) >= 20


# -- the collector's own rules ---------------------------------------------------------------


def _page(tmp_path: Path, text: str) -> Source:
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return page_source(path)


def test_blocks_are_grouped_with_their_continuations(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "```python\nx = 1\n```\n\n<!-- docs-test: continue -->\n```python\nassert x == 1\n```\n"
        "\n```python\nawait f()\n```\n"
        "\n1. item\n\n    ```python\n    y = 2\n    ```\n",
    )
    found = examples_of(page)
    assert [[b.line for b in e.blocks] for e in found] == [[1, 6], [10], [16]]
    assert [e.kind for e in found] == ["program", "async", "program"]
    assert found[2].first.source == "y = 2\n"


def test_a_skip_needs_a_reason(tmp_path: Path) -> None:
    page = _page(tmp_path, "<!-- docs-test: skip: needs the network -->\n```python\nx\n```\n")
    (example,) = examples_of(page)
    assert example.skip_reason == "needs the network"
    page = _page(tmp_path, "<!-- docs-test: skip -->\n```python\nx\n```\n")
    with pytest.raises(ValueError, match="unknown marker"):
        examples_of(page)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("```\nprint(1)\n```\n", "fence language ''"),
        ("```py\nprint(1)\n```\n", "fence language 'py'"),
        ("<!-- docs-test: continue -->\n\ntext\n```python\nx\n```\n", "not followed by a fence"),
        ("<!-- docs-test: continue -->\n```python\nx\n```\n", "no python block before it"),
        ("<!-- docs-test: continue -->\n```text\nx\n```\n", "before python blocks only"),
        ("```python\nx\n", "never closed"),
        ("text\n<!-- docs-test: continue -->\n", "not followed by a fence"),
    ],
)
def test_rule_breaking_pages_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        examples_of(_page(tmp_path, text))


def test_pytest_modules_and_pycon_sessions_are_recognised(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "```python\nasync def test_x():\n    pass\n```\n\n```pycon\n>>> 1 + 1\n2\n```\n",
    )
    assert [e.kind for e in examples_of(page)] == ["pytest", "pycon"]
