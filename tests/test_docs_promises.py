"""The README and the docs say what is true today: no stale promises, no wrong install command.

A page that calls something "still to come" goes stale the day it comes (the README once
called metrics and the blocking API upcoming long after both had shipped). Every line of the
README and of ``docs/`` that speaks of the future in one of the phrases below fails the test,
unless it is on :data:`ALLOWED`, a short list of reviewed lines, each with the reason it is
not a promise. An entry that no longer matches any line fails too, so the list stays short.

The install check: until 1.0.0 is published on PyPI, ``pip install aiokpl`` installs another
project's 0.2.0 (see ``docs/contributing.md``, "Versions and releases"), so no page may tell a
reader to install ``aiokpl`` by name from the index. Relax it when 1.0.0 is out.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent

UPCOMING = re.compile(
    r"still to come|\bto come\b|coming soon|\bin progress\b|\bnot yet\b|\byet to\b|"
    r"\bno (equivalent|support|api|option)\w* yet\b|\bwill (add|support)\b|"
    r"will be (added|supported|available|implemented|done)|"
    r"\bplanned\b|\bupcoming\b|\bin (a|the) future\b|\bfuture (release|version)s?\b|"
    r"(?<!as )\bsoon\b|\bTODO\b|\bTBD\b|\bFIXME\b",
    re.IGNORECASE,
)
"""Phrases that promise something for later."""

ALLOWED: tuple[tuple[str, str, str], ...] = (
    (
        "docs/producer.md",
        "records not yet\n",
        "a record's state at cancellation (not delivered when it happened), not a promise",
    ),
    (
        "docs/producer.md",
        "if not yet resolved",
        "what Outcome.result() does with an unresolved record, not a promise",
    ),
    (
        "docs/getting-started.md",
        "not yet delivered fail with code",
        "a record's state at cancellation, not a promise",
    ),
    (
        "docs/metrics.md",
        "records put to the stream and not yet resolved",
        "what the UserRecordsPending metric counts, not a promise",
    ),
)
"""``(page, text of the line, why it is no promise)``: the reviewed exceptions."""


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def lines_of(page: Path) -> list[tuple[int, str]]:
    return list(enumerate(page.read_text(encoding="utf-8").splitlines(keepends=True), start=1))


def allowed_entry(page: Path, line: str) -> tuple[str, str, str] | None:
    relative = page.relative_to(ROOT).as_posix()
    for entry in ALLOWED:
        if entry[0] == relative and entry[1] in line:
            return entry
    return None


def test_no_page_promises_anything_as_upcoming() -> None:
    found = []
    for page in pages():
        for number, line in lines_of(page):
            if UPCOMING.search(line) and allowed_entry(page, line) is None:
                found.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, (
        "a page speaks of something as upcoming; say what is true today, or add the line to "
        "ALLOWED with the reason it is no promise:\n" + "\n".join(found)
    )


def test_every_allowed_line_still_exists_and_has_a_reason() -> None:
    for page_name, text, reason in ALLOWED:
        page = ROOT / page_name
        matches = [
            line for _, line in lines_of(page) if text in line and UPCOMING.search(line) is not None
        ]
        assert len(matches) == 1, f"{page_name}: {text!r} matches {len(matches)} flagged lines"
        assert len(reason) > 20, reason


def test_the_phrases_are_caught() -> None:
    for promise in (
        "Metrics and a blocking API are still to come.",
        "Both come with the dead-letter support (in progress)",
        "| `addAdditionalMetricsDimension` | *absent* | no equivalent yet |",
        "This is planned for 1.1.",
        "A fuller CLI is coming soon.",
        "Trio support will be added later.",
        "Not yet implemented.",
    ):
        assert UPCOMING.search(promise), promise
    for fact in (
        "The limiter never stalls a shard.",
        "Yet another option",
        "It returns as soon as the record is buffered.",
        "No summary yet: ceilings stay.",
    ):
        assert not UPCOMING.search(fact), fact


# `pip install` arguments that would take `aiokpl` from the index by its name.
INDEX_NAME = re.compile(r"aiokpl(\[[^\]]*\])?([<>=!~].*)?", re.IGNORECASE)

INSTALL_ALLOWED = (
    ("README.md", "does not install this project", "the warning against that very command"),
    ("docs/index.md", "installs an earlier, unrelated library", "the same warning"),
    ("docs/getting-started.md", "installs another library", "the same warning, as a heading"),
    (
        "docs/getting-started.md",
        "keeps the",
        "explains that, with aiokpl installed, adding an extra by name keeps it (checked by hand "
        "with pip 23.2: it adds the extra's packages only)",
    ),
)


def index_installs(text: str) -> list[str]:
    """The ``pip install`` commands in ``text`` that name ``aiokpl`` for the index to resolve."""
    found = []
    for match in re.finditer(r"pip install ([^\n`]*)", text):
        try:
            words = shlex.split(match.group(1), comments=True)
        except ValueError:
            words = match.group(1).split()
        if any(INDEX_NAME.fullmatch(word) for word in words):
            found.append(" ".join(["pip install", *words]))
    return found


def test_no_page_installs_aiokpl_from_the_index_by_name() -> None:
    found: list[str] = []
    for page in pages():
        for number, line in lines_of(page):
            relative = page.relative_to(ROOT).as_posix()
            if any(p == relative and text in line for p, text, _ in INSTALL_ALLOWED):
                continue
            found.extend(f"{relative}:{number}: {c}" for c in index_installs(line))
    assert not found, (
        "`pip install aiokpl` installs another project's 0.2.0 until 1.0.0 is published; "
        "install from the source tree or a wheel:\n" + "\n".join(found)
    )


def test_install_commands_are_recognised() -> None:
    assert index_installs("$ pip install aiokpl            # asyncio") == ["pip install aiokpl"]
    assert index_installs("`pip install 'aiokpl[otel]'`. For each") == ["pip install aiokpl[otel]"]
    assert index_installs("pip install -U 'aiokpl>=1.0'") == ["pip install -U aiokpl>=1.0"]
    for fine in (
        "$ pip install .",
        "$ pip install '.[trio]' boto3",
        "$ pip install dist/aiokpl-*.whl",
        "$ pip install 'aiokpl[trio] @ git+https://github.com/aiokpl/aiokpl'",
        "pip install aiokpl-agg",
    ):
        assert index_installs(fine) == [], fine


# An address of this project: its name in a URL's host or path.
PROJECT_URL = re.compile(r"https?://[^\s)`'\"<>\]]*aiokpl[^\s)`'\"<>\]]*", re.IGNORECASE)

# Where the project's addresses would be given, besides the pages.
ADDRESS_FILES = ("CHANGELOG.md", "mkdocs.yml", "pyproject.toml")


def _package_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "package_check", ROOT / "tests" / "package_check.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_page_names_an_address_of_the_project_it_cannot_vouch_for() -> None:
    # github.com/aiokpl/aiokpl was named in the install instructions, pyproject.toml and
    # mkdocs.yml, and does not exist. An address of the project may be named once it is real,
    # and listed in VOUCHED_URLS (tests/package_check.py).
    vouched = _package_check().vouched
    found: list[str] = []
    for path in [*pages(), *(ROOT / name for name in ADDRESS_FILES)]:
        relative = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for url in PROJECT_URL.findall(line):
                if not vouched(url):
                    found.append(f"{relative}:{number}: {url}")
    assert not found, "addresses the project cannot vouch for:\n" + "\n".join(found)


def test_project_addresses_are_recognised() -> None:
    assert PROJECT_URL.findall("$ git clone https://github.com/aiokpl/aiokpl && cd aiokpl") == [
        "https://github.com/aiokpl/aiokpl"
    ]
    assert PROJECT_URL.findall("repo_url: https://aiokpl.example.org/") == [
        "https://aiokpl.example.org/"
    ]
    assert PROJECT_URL.findall("[anyio](https://anyio.readthedocs.io)") == []
