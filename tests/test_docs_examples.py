"""Every code example in the documentation runs: as a program, against a local Kinesis.

Sources: ``README.md``, every ``*.md`` under ``docs/``, and the docstrings the API reference
renders (the public modules, every name in their ``__all__``, the public members of those
classes), all found anew on each run, so a new page or public name is covered the moment it
exists. The rules they follow (``docs/contributing.md`` says the same for writers):

* A ```` ```python ```` block of a page is a **complete program**: imports included, nothing
  defined elsewhere, no ``await`` outside a function. It must compile as a file, and it runs
  as written (not wrapped in a function) in a fresh module, once; it starts its own event loop
  (``anyio.run(main)``, ``asyncio.run(main())``, ``trio.run(main)``).
* It runs as a reader runs it after the first steps of ``docs/getting-started.md``:
  ``aiokpl local --stream events:4`` listening (moto's server on 127.0.0.1, here on a free port,
  emptied before each example) and the environment of :func:`local_environment` exported,
  whose ``AWS_ENDPOINT_URL_KINESIS`` sends a producer built without ``client=`` there.
  ``http://127.0.0.1:4567`` (the server's default address) written in an example is that
  server's address.
* A warning of the ``aiokpl`` logger fails the example (unless :data:`EXPECTED_WARNINGS` names
  it): records that fail quietly, in an example that only prints, fail its test all the same.
* Two visible marks, a comment on a block's first line (so a reader sees them, on a code host
  as on the site):

  * ``# Continued from the block above.``: the block continues the page's previous ``python``
    block, in the same module namespace, in the same test.
  * ``# Fragment: WHAT IT NEEDS``: a piece of a program, not one; it must compile as a file
    (an ``await`` goes inside an ``async def``), and is not run.

* A block that defines ``test_*`` functions is a **pytest module**: it is written to a file and
  run by pytest in a subprocess, which must report at least one test passed and nothing else.
* A ```` ```pycon ```` block is an interactive session, checked with :mod:`doctest`.
* One marker, an HTML comment alone on the line just before a fence (invisible on the site,
  plain in the source): ``<!-- docs-test: skip: REASON -->``: the block (a complete program
  still) is not run; the test reports it as skipped with REASON, which must be given. A marker
  anywhere else, or any other marker, is an error, so none is silently ignored.
* Every fence has a language, from :data:`LANGUAGES`: code that cannot run is not Python
  (```` ```console ```` for shell sessions, ```` ```text ```` for output and diagrams).

Docstrings are API reference, not pages, and take neither mark: a block of one whose top level
uses ``await``, ``async with`` or ``async for`` runs inside an event loop, once on asyncio and
once on trio, in the same environment.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import importlib
import inspect
import json
import logging
import re
import subprocess
import sys
import types
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiokpl import Config
from aiokpl._cli.local import _create_streams
from aiokpl._kinesis import create_client
from aiokpl.aggregation import deaggregate
from aiokpl.testing import read_stream
from aiokpl.testing._servers import DUMMY_CREDENTIALS, moto_server

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

CONTINUED = "# Continued from the block above."
"""The first line of a block that continues the page's previous python block."""

_FRAGMENT = re.compile(r"# Fragment: \S")
"""The start of the first line of a block that is a piece of a program: compiled, not run."""

LOCAL_STREAMS = {"events": 4}
"""The streams of the local server, as ``aiokpl local --stream events:4`` creates them (the
command Getting started gives)."""

EXPECTED_WARNINGS = {"docs/results.md": "no-such-stream"}
"""Pages with an example that fails records on purpose, and what its warnings name. Any other
warning of the ``aiokpl`` logger fails the example's test: a record that fails without the
example saying so (a stream the server lacks, an address where nothing listens) warns."""

LOCAL_PORT = 4567
"""``aiokpl local``'s default port: an example's ``http://127.0.0.1:4567`` is the test server."""


def local_environment(endpoint: str) -> dict[str, str]:
    """What Getting started tells a reader to export to run every example on ``endpoint``.

    ``AWS_ENDPOINT_URL`` (every other service) keeps anything else an example might call on
    127.0.0.1 too: tests never talk to AWS.
    """
    return {
        "AWS_ENDPOINT_URL_KINESIS": endpoint,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": DUMMY_CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": DUMMY_CREDENTIALS["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": DUMMY_CREDENTIALS["region"],
    }


# Modules whose docstrings the API reference pages render: their examples run too.
PUBLIC_MODULES = ("aiokpl", "aiokpl.aggregation", "aiokpl.testing", "aiokpl.tracing")


def pages() -> list[Path]:
    """README.md and every page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass
class Source:
    """A text whose fenced blocks are examples: a page, or a docstring the site renders."""

    name: str  # "docs/testing.md", or "aiokpl.testing.FakeKinesis"
    text: str
    filename: str  # for tracebacks: the page's path, or the docstring's qualified name
    page: bool = True  # a page's python blocks are programs; a docstring's may await at top level


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
            found.append(Source(name, doc, f"<docstring of {name}>", page=False))

    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        add(module_name, module)
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # constants: their docstring is their type's
            add(f"{module_name}.{name}", obj)
            if inspect.isclass(obj):
                # Members inherited from aiokpl's own bases too (FakeKinesis's API methods live
                # in a base class), each once, as the class sees it.
                own = [c for c in obj.__mro__ if c.__module__.split(".")[0] == "aiokpl"]
                members = {k: v for c in reversed(own) for k, v in vars(c).items()}
                for member_name, member in members.items():
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

    @property
    def first_line(self) -> str:
        return self.source.split("\n", 1)[0].strip()

    @property
    def continued(self) -> bool:
        return self.first_line == CONTINUED

    @property
    def fragment(self) -> bool:
        return _FRAGMENT.match(self.first_line) is not None


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
        """``"pycon"``, ``"fragment"``, ``"pytest"``, ``"async"`` (a docstring's top-level
        await) or ``"program"``."""
        if self.first.language == "pycon":
            return "pycon"
        if self.first.fragment:
            _compile(self.first)  # not run, but Python all the same
            return "fragment"
        if any(_defines_tests(block.source) for block in self.blocks):
            return "pytest"
        if any(_is_async(block) for block in self.blocks):
            return "async"
        return "program"


def _compile(block: Block) -> types.CodeType:
    """The block compiled as a file; a docstring's block may use a top-level ``await``.

    Raises:
        SyntaxError: A page's block does not compile as a file (a top-level ``await``, say).
    """
    # Blank lines in front so that line numbers in tracebacks are the page's.
    text = "\n" * block.line + block.source
    if not block.origin.page:
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    else:
        flags = 0
        try:
            compile(text, block.origin.filename, "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise SyntaxError(
                f"{block.where}: a python block must compile as a file ({exc.msg}, line "
                f"{exc.lineno}): make it a complete program (an `async def main()` run by "
                "`anyio.run(main)`), or a fragment whose first line is `# Fragment: ...` and "
                "whose awaits are inside an `async def`"
            ) from None
    code: types.CodeType = compile(
        text, block.origin.filename, "exec", flags=flags, dont_inherit=True
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
            if skip is None:
                hint = (
                    f"; a block that continues the one above says so on its first line: "
                    f"{CONTINUED!r}"
                    if block.marker == "continue"
                    else ""
                )
                raise ValueError(
                    f"{block.where}: unknown marker {block.marker!r}; the only one is "
                    f"'skip: REASON' (a reason is required){hint}"
                )
            skip_reason = skip.group("reason")
        if block.language == "pycon":
            found.append(Example([block]))
        elif block.language == "python":
            if block.continued:
                if last_python is None:
                    raise ValueError(f"{block.where}: continues no python block before it")
                if last_python.skip_reason is not None or skip_reason is not None:
                    raise ValueError(f"{block.where}: a skipped block cannot be continued")
                if last_python.first.fragment:
                    raise ValueError(f"{block.where}: a fragment cannot be continued")
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


@pytest.fixture(scope="module")
def local_server() -> Iterator[str]:
    """moto's server, as ``aiokpl local`` runs it, on a free 127.0.0.1 port."""
    with moto_server() as endpoint:
        yield endpoint


def _config(endpoint: str) -> Config:
    return Config(
        endpoint_url=endpoint,
        region=DUMMY_CREDENTIALS["region"],
        aws_access_key_id=DUMMY_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=DUMMY_CREDENTIALS["aws_secret_access_key"],
    )


def _reset(endpoint: str) -> None:
    """Empty the server, then create :data:`LOCAL_STREAMS` as ``aiokpl local`` does."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.loads(response.read()) == {"status": "ok"}
    streams = list(LOCAL_STREAMS.items())
    anyio.run(_create_streams, endpoint, DUMMY_CREDENTIALS["region"], streams)


def stored_data(endpoint: str, stream: str) -> list[bytes]:
    """The data of every user record stored in ``stream`` on the server, deaggregated."""

    async def read() -> list[bytes]:
        async with create_client(_config(endpoint)) as client:
            records = await read_stream(client, stream)
        return [user.data for _, record in records for user in deaggregate(record)]

    return anyio.run(read)


@pytest.fixture
def local_kinesis(local_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The server, emptied, with its streams, and the environment pointing at it."""
    _reset(local_server)
    for name, value in local_environment(local_server).items():
        monkeypatch.setenv(name, value)
    return local_server


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


def _on_server(block: Block, endpoint: str) -> Block:
    """``block`` with ``aiokpl local``'s default address replaced by the test server's."""
    source = block.source.replace(f"http://127.0.0.1:{LOCAL_PORT}", endpoint)
    return Block(block.origin, block.line, block.language, source, block.marker)


async def _run_async(blocks: list[Block], namespace: dict[str, Any]) -> None:
    for block in blocks:
        result = eval(_compile(block), namespace)
        if result is not None:  # a coroutine: the block has a top-level await
            await result


# -- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize(("example", "backend"), _collect())
def test_example_runs(
    example: Example,
    backend: str | None,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if example.problem is not None:
        pytest.fail(example.problem, pytrace=False)
    if example.skip_reason is not None:
        pytest.skip(f"{example.first.where}: {example.skip_reason}")
    kind = example.kind
    if kind == "fragment":
        return  # compiled as a file by kind; a fragment is not a program to run
    if kind == "pycon":
        block = example.first
        test = doctest.DocTestParser().get_doctest(
            block.source, {}, block.where, block.origin.filename, block.line
        )
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert test.examples, f"{block.where}: no >>> lines"
        assert runner.failures == 0, f"{block.where}: doctest failed (output above)"
        return
    endpoint: str = request.getfixturevalue("local_kinesis")
    blocks = [_on_server(block, endpoint) for block in example.blocks]
    if kind == "pytest":
        assert len(blocks) == 1, "a pytest module cannot continue or be continued"
        _run_pytest_module(blocks[0], tmp_path)
    elif kind == "async":
        assert backend is not None
        with _module() as namespace:
            anyio.run(_run_async, blocks, namespace, backend=backend)
    else:
        with _module() as namespace:
            for block in blocks:
                exec(_compile(block), namespace)
    warnings = [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.WARNING and record.name.startswith("aiokpl")
    ]
    expected = EXPECTED_WARNINGS.get(example.first.origin.name)
    unexpected = [text for text in warnings if expected is None or expected not in text]
    assert not unexpected, f"{example.first.where}: aiokpl warned: {unexpected}"


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
        f"```python\nx = 1\n```\n\n```python\n{CONTINUED}\nassert x == 1\n```\n"
        "\n```python\nimport anyio\nanyio.run(f)\n```\n"
        "\n1. item\n\n    ```python\n    y = 2\n    ```\n",
    )
    found = examples_of(page)
    assert [[b.line for b in e.blocks] for e in found] == [[1, 5], [10], [17]]
    assert [e.kind for e in found] == ["program", "program", "program"]
    assert found[2].first.source == "y = 2\n"


def test_a_page_block_must_compile_as_a_file(tmp_path: Path) -> None:
    # The same code is an error on a page and an example to run on both loops in a docstring.
    text = "```python\nimport anyio\nawait anyio.sleep(0)\n```\n"
    (example,) = examples_of(_page(tmp_path, text))
    with pytest.raises(SyntaxError, match=r"page.md:1: a python block must compile as a file"):
        _ = example.kind
    (example,) = examples_of(Source("aiokpl.X", text, "<docstring of aiokpl.X>", page=False))
    assert example.kind == "async"
    # Collected, the page is one failing test that says why.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys.modules[__name__], "sources", lambda: [_page(tmp_path, text)])
        (param,) = _collect()
    assert "compile as a file" in param.values[0].problem


def test_a_fragment_is_compiled_not_run(tmp_path: Path) -> None:
    fragment = "# Fragment: inside a function with an open producer.\n"
    page = _page(
        tmp_path,
        f"```python\n{fragment}async def put(producer):\n    await producer.flush()\n```\n",
    )
    (example,) = examples_of(page)
    assert example.kind == "fragment"
    page = _page(tmp_path, f"```python\n{fragment}await producer.flush()\n```\n")
    (example,) = examples_of(page)
    with pytest.raises(SyntaxError, match="compile as a file"):
        _ = example.kind
    # "Fragment" anywhere else is only a comment: the block runs.
    page = _page(tmp_path, "```python\nx = 1  # Fragment: no\n```\n")
    assert [e.kind for e in examples_of(page)] == ["program"]


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
        ("<!-- docs-test: skip: x -->\n\ntext\n```python\nx\n```\n", "not followed by a fence"),
        ("<!-- docs-test: continue -->\n```python\nx\n```\n", CONTINUED),
        (f"```python\n{CONTINUED}\nx\n```\n", "continues no python block"),
        (
            f"<!-- docs-test: skip: x -->\n```python\nx\n```\n```python\n{CONTINUED}\n```\n",
            "a skipped block cannot be continued",
        ),
        (
            f"```python\n# Fragment: x\n```\n```python\n{CONTINUED}\n```\n",
            "a fragment cannot be continued",
        ),
        ("<!-- docs-test: skip: x -->\n```text\nx\n```\n", "before python blocks only"),
        ("```python\nx\n", "never closed"),
        ("text\n<!-- docs-test: skip: x -->\n", "not followed by a fence"),
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


def test_a_program_runs_against_the_local_server(local_kinesis: str) -> None:
    # What the examples rely on: a producer built without client=, as Getting started's
    # first program builds it, writes to the local server through AWS_ENDPOINT_URL_KINESIS.
    from aiokpl import Producer

    async def main() -> None:
        async with Producer(Config()) as producer:
            outcome = await producer.put_record(stream="events", partition_key="k", data=b"x")
        assert (await outcome).success

    anyio.run(main)
    assert stored_data(local_kinesis, "events") == [b"x"]
    # Each example starts from an empty server.
    _reset(local_kinesis)
    assert stored_data(local_kinesis, "events") == []
