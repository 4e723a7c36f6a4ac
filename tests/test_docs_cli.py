"""The command line reference (``docs/cli.md``) is generated from the parsers into the page, is
current, and misses nothing."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from aiokpl import _cli

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks_cli", ROOT / "docs" / "_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def every_option() -> Iterator[tuple[str, str, argparse.Action]]:
    """``(command, group title, action)`` of every option of every command, help excepted.

    The global options are the top-level parser's: a subcommand's copies are the same options.
    """
    parser = _cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, command_parser in [("aiokpl", parser), *subparsers.choices.items()]:
        for group in command_parser._action_groups:
            if command != "aiokpl" and group.title == "global options":
                continue
            for action in group._group_actions:
                if action.option_strings and not isinstance(action, argparse._HelpAction):
                    assert group.title is not None
                    yield command, group.title, action


def test_every_option_of_every_command_is_in_a_table_of_the_page(hooks: ModuleType) -> None:
    # A new option, or a new group of options, that the page does not show fails here.
    page = PAGE.read_text(encoding="utf-8")
    placed = {
        (words[0], " ".join(words[1:]))
        for match in hooks.MARKER.finditer(page)
        if match.group("kind") == "cli-options"
        for words in [match.group("args").split()]
    }
    missing = sorted(
        f"aiokpl {command} {action.option_strings[-1]} (group {group!r})"
        for command, group, action in every_option()
        if (command, group) not in placed
    )
    assert not missing, f"options in no table of docs/cli.md: {missing}"
    for _, _, action in every_option():  # in the file itself, where a code host shows it
        assert re.search(rf"^\| `{re.escape(action.option_strings[0])}[` ]", page, re.M), action


def test_the_page_holds_its_tables_as_the_parsers_give_them(hooks: ModuleType) -> None:
    # Fails after a change to an option (its help, its default, a new one) until
    # `make docs-tables` has rewritten the page; the docs build refuses the page too.
    page = PAGE.read_text(encoding="utf-8")
    assert hooks.regenerate(page) == page, "docs/cli.md is stale: run make docs-tables"
    assert hooks.on_page_markdown(page) == page
    stale = page.replace("| `--max-buffered-ms MS` | longest", "| `--max-buffered-ms MS` | most")
    assert stale != page
    with pytest.raises(hooks.StaleTablesError, match="make docs-tables"):
        hooks.on_page_markdown(stale)
    assert hooks.regenerate(stale) == page


def test_every_subcommand_has_a_section_a_usage_and_a_row(hooks: ModuleType) -> None:
    page = PAGE.read_text(encoding="utf-8")
    rendered = page
    commands = [name for name in hooks.cli_parsers() if name != "aiokpl"]
    assert commands == ["demo", "local", "put", "tail", "coordinate", "spool"]
    for name in commands:
        assert f"\n## `aiokpl {name}`\n" in page, name
        assert f"<!-- cli-usage: {name} -->" in page, name
        assert f"| [`aiokpl {name}`](#aiokpl-{name}) |" in rendered, name
        assert f"```text\naiokpl {name} [-h]" in rendered, name
    # Every marker has its section, and no count goes stale.
    openings = [m.group("kind") for m in hooks.MARKER.finditer(page)]
    assert len(openings) == page.count("<!-- cli-") > 0
    assert [page.count(f"<!-- /{kind} -->") for kind in set(openings)] == [
        openings.count(kind) for kind in set(openings)
    ]
    assert not re.search(r"\b(two|three|four|five) subcommands\b", page)


def test_rows_carry_the_help_text_with_defaults_filled_in(hooks: ModuleType) -> None:
    table = hooks.render_cli_options("put", "producer")
    assert "| `--max-buffered-ms MS` | longest a record waits to be batched" in table
    assert "(default: 100) |" in table
    assert "%(default)s" not in table
    tail = hooks.render_cli_options("tail", "options")
    assert "| `--data {auto,text,base64}` |" in tail
    assert "| `-q`, `--quiet` |" in tail
    assert "(default: auto)" in tail
    assert "--help" not in tail
    top = hooks.render_cli_options("aiokpl", "global options")
    assert "| `--no-verify-ssl` |" in top
    assert hooks.render_cli_usage("demo").startswith("```text\naiokpl demo [-h] [--count COUNT]")


def test_a_placeholder_naming_nothing_stops_the_build(hooks: ModuleType) -> None:
    for line, message in [
        ("<!-- cli-options: nosuch options -->", "no aiokpl command 'nosuch'"),
        ("<!-- cli-options: put nosuch group -->", "has no argument group 'nosuch group'"),
        ("<!-- cli-usage: nosuch -->", "no aiokpl command"),
        ("<!-- cli-tables: put -->", "unknown placeholder"),
        ("<!-- cli-options: put -->", "unknown placeholder"),
    ]:
        with pytest.raises(hooks.CliDocError, match=message):
            hooks.regenerate(f"# Page\n\n{line}\n")
        with pytest.raises(hooks.CliDocError, match=message):
            hooks.on_page_markdown(f"# Page\n\n{line}\n")
    # Mentioned inside a sentence, a code span or a fenced block, a marker is left alone.
    prose = "Write `<!-- cli-usage: put -->` on a line of its own.\n"
    assert hooks.regenerate(prose) == prose
    fenced = "Text.\n\n```markdown\n<!-- cli-usage: put -->\n```\n\n<!-- cli-usage: demo -->\n"
    rendered = hooks.regenerate(fenced)
    assert rendered.startswith(
        "Text.\n\n```markdown\n<!-- cli-usage: put -->\n```\n\n<!-- cli-usage: demo -->\n\n```text"
    )
    assert "aiokpl demo [-h]" in rendered
    assert rendered.endswith("```\n\n<!-- /cli-usage -->\n")
    assert hooks.regenerate(rendered) == rendered  # a second run changes nothing
    contributing = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    assert hooks.regenerate(contributing) == contributing


def test_a_marker_written_by_hand_gets_its_section_and_leaves_the_next_alone(
    hooks: ModuleType,
) -> None:
    # The first marker has no closing one yet; the second section is complete. Regenerating
    # must not take the second section's closing marker for the first's.
    second = hooks.regenerate("<!-- cli-usage: demo -->\n")
    text = f"<!-- cli-usage: local -->\n\nprose\n\n{second}"
    rendered = hooks.regenerate(text)
    assert rendered.count("<!-- /cli-usage -->") == 2
    assert "\nprose\n" in rendered
    assert rendered.index("aiokpl local [-h]") < rendered.index("prose")


def test_make_docs_tables_rewrites_only_stale_pages(hooks: ModuleType, tmp_path: Path) -> None:
    for name in hooks.PAGES:
        (tmp_path / name).write_text((ROOT / "docs" / name).read_text(encoding="utf-8"))
    assert hooks.write_pages(tmp_path) == []
    cli = tmp_path / "cli.md"
    cli.write_text(cli.read_text().replace("| `--max-buffered-ms MS` | longest", "| x | y"))
    assert hooks.write_pages(tmp_path) == [cli]
    assert cli.read_text() == PAGE.read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^docs-tables:.*\n\t.*docs/_hooks\.py", makefile, re.M)
