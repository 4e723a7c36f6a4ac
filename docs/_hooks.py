"""The references generated from the code, written into the pages, so they cannot drift from it.

The tables live in the Markdown files themselves, where a code host shows them, between an
opening marker and its closing one, each an HTML comment on a line of its own::

    <!-- cli-options: put records -->

    | option | meaning |
    ...

    <!-- /cli-options -->

``python docs/_hooks.py`` (``make docs-tables``) rewrites what lies between every pair, in the
pages that have them (:data:`PAGES`); a marker without its closing one gets the generated text
and the closing marker after it. ``tests/test_docs_config.py`` and ``tests/test_docs_cli.py``
fail when a page is not what that command would write, and so does the docs build: as an
mkdocs hook, this module refuses a stale page (:class:`StaleTablesError`).

**Configuration.** ``<!-- config-fields -->`` becomes one table row per field of
:class:`aiokpl.Config`, in declaration order, so the reference can never drift from the code
and a new field appears the moment the tables are regenerated:

* **field** and **type**: from :func:`dataclasses.fields`;
* **default**: the field's default (byte sizes that are whole KiB or MiB are shown so);
* **allowed**: the range :mod:`aiokpl._core.config` validates (its ``_RULES`` table), the choices
  of a ``Literal`` type, or else the type alone;
* **KPL**: the KPL option the field corresponds to, taken from the ``(KPL ``Name``)`` note in its
  documentation;
* **meaning**: the field's documentation, which lives in the code as the string literal right
  after the field (the attribute docstring convention mkdocstrings and Sphinx read).

A field without documentation stops the generation and the build (``ConfigDocError``), and
``tests/test_docs_config.py`` fails naming it.

**Command line.** The reference of the ``aiokpl`` command comes from its argparse parsers
(``aiokpl._cli.build_parser``), which also print ``--help``: ``<!-- cli-commands -->`` is the
table of subcommands with their one-line help; ``<!-- cli-usage: COMMAND -->`` the command's
usage as ``--help`` shows it; ``<!-- cli-options: COMMAND GROUP -->`` the table of the options
of one argument group (``records``, ``global options``, …; ``COMMAND`` is ``aiokpl`` for the
top level), each with its help text, defaults filled in. A marker naming a command or group
that does not exist stops the generation (``CliDocError``), and ``tests/test_docs_cli.py`` fails
when an option is in no table of ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import math
import re
from pathlib import Path
from typing import Any

PLACEHOLDER = "<!-- config-fields -->"
CONFIG_SOURCE = Path(__file__).resolve().parent.parent / "src" / "aiokpl" / "_core" / "config.py"

_KPL_NOTE = re.compile(r"\s*\(KPL ``(?P<name>[^`]+)``(?P<rest>[^)]*)\)")
_ROLE = re.compile(r":(?:class|func|meth|attr|data|exc|mod):`~?(?P<target>[^`]+)`")
_KIB = 1024
_MIB = 1024 * _KIB
_GIB = 1024 * _MIB


class ConfigDocError(Exception):
    """A ``Config`` field has no documentation in the code."""


@dataclasses.dataclass(frozen=True)
class FieldDoc:
    """What the reference says about one field."""

    name: str
    type: str
    default: str
    allowed: str
    kpl: str
    meaning: str


def attribute_docs(source: str, class_name: str = "Config") -> dict[str, str]:
    """The attribute docstrings of a class: ``{field: cleaned docstring}``.

    A field is documented by a string literal statement directly after its annotated
    assignment; fields without one are absent from the result.
    """
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            body = node.body
            break
    else:
        raise ConfigDocError(f"class {class_name} not found")
    docs: dict[str, str] = {}
    for statement, following in zip(body, [*body[1:], None], strict=True):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
            and following.value.value.strip()
        ):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _markdown(text: str) -> str:
    """reStructuredText inline markup to Markdown, on one line (a table cell)."""
    text = _ROLE.sub(lambda match: f"`{match.group('target')}`", text)
    text = " ".join(text.replace("``", "`").split())
    # A "|" would end the table cell, except inside a code span, where the table extension
    # leaves it alone (and an escape would show).
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else part.replace("|", "\\|") for part in parts)


def _number(value: float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    value = int(value)
    for unit, size in (("GiB", _GIB), ("MiB", _MIB)):
        if value >= size and value % size == 0:
            return f"{value // size:,} {unit}"
    return f"{value:,}"


def _default(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return f"`{value!r}`"
    if isinstance(value, int | float):
        return _number(value)
    return f"`{value!r}`"


def _allowed(name: str, type_text: str, rules: dict[str, tuple[str, float, float]]) -> str:
    if name in rules:
        kind, low, high = rules[name]
        if kind == "bool":
            return "`True`, `False`"
        if kind == "float" and high == math.inf:
            return "> 0, finite" if low <= math.ulp(0.0) else f"≥ {_number(low)}, finite"
        if kind in ("int", "float"):
            return f"{_number(low)} … {_number(high)}"
        if kind == "str":
            return "a string"
        return "a non-empty string, or `None`"
    # Read from the annotation's text rather than typing.get_type_hints(): annotations may
    # name types imported only under TYPE_CHECKING.
    literal = re.fullmatch(r"Literal\[(?P<args>.*)\]", type_text.strip())
    if literal is not None:
        choices = ast.literal_eval(f"({literal.group('args')},)")
        return ", ".join(f"`{choice!r}`" for choice in choices)
    if type_text.strip() == "bool":
        return "`True`, `False`"
    return "any value of its type"


def field_docs() -> list[FieldDoc]:
    """One :class:`FieldDoc` per ``Config`` field, in declaration order.

    Raises:
        ConfigDocError: A field has no documentation.
    """
    from aiokpl._core import config as config_module

    docs = attribute_docs(CONFIG_SOURCE.read_text(encoding="utf-8"))
    rules = {name: (kind, low, high) for name, kind, low, high in config_module._RULES}
    missing = [f.name for f in dataclasses.fields(config_module.Config) if f.name not in docs]
    if missing:
        raise ConfigDocError(
            "Config fields without documentation (add a string literal right after each "
            f"field in src/aiokpl/_core/config.py): {', '.join(missing)}"
        )
    rows = []
    for f in dataclasses.fields(config_module.Config):
        if f.default is not dataclasses.MISSING:
            default = _default(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = _default(f.default_factory())
        else:
            default = "required"
        doc = docs[f.name]
        note = _KPL_NOTE.search(doc)
        kpl = f"`{note.group('name')}`" if note else "–"
        if note is not None and not note.group("rest").strip():
            doc = doc[: note.start()] + doc[note.end() :]
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        rows.append(
            FieldDoc(
                name=f.name,
                type=_markdown(f"``{type_name}``"),
                default=default,
                allowed=_allowed(f.name, type_name, rules),
                kpl=kpl,
                meaning=_markdown(doc),
            )
        )
    return rows


def render_table() -> str:
    """The Markdown table of every ``Config`` field."""
    lines = [
        "| field | type | default | allowed | KPL | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for row in field_docs():
        lines.append(
            f"| `{row.name}` | {row.type} | {row.default} | {row.allowed} | {row.kpl} "
            f"| {row.meaning} |"
        )
    return "\n".join(lines)


# --- The command line reference -------------------------------------------------------------

CLI_WIDTH = 100
"""Width the usage lines are wrapped to (``--help`` follows the terminal instead)."""


class CliDocError(Exception):
    """A ``cli-`` placeholder names a command, a group or a kind that does not exist."""


def cli_parsers() -> dict[str, argparse.ArgumentParser]:
    """``{"aiokpl": top-level parser, "put": its parser, …}``, subcommands in ``--help`` order."""
    from aiokpl._cli import build_parser

    parser = build_parser()
    parsers = {"aiokpl": parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers.update(action.choices)
    return parsers


def _cli_parser(command: str) -> argparse.ArgumentParser:
    parsers = cli_parsers()
    if command not in parsers:
        raise CliDocError(f"no aiokpl command {command!r}; there are {', '.join(parsers)}")
    return parsers[command]


def _invocation(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ", ".join(f"`{option}`" for option in action.option_strings)
    if action.metavar is not None:
        metavar = str(action.metavar)
    elif action.choices is not None:
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        metavar = action.dest.upper()
    return ", ".join(f"`{option} {metavar}`" for option in action.option_strings)


def _help_text(action: argparse.Action, prog: str) -> str:
    """The option's help as ``--help`` prints it (``%(default)s`` and the like filled in)."""
    text = action.help or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        params["prog"] = prog
        if params.get("choices") is not None:
            params["choices"] = ", ".join(map(str, params["choices"]))
        text = text % params
    return " ".join(text.replace("|", "\\|").split())


def cli_option_actions(command: str, group: str) -> list[argparse.Action]:
    """The options (``--help`` excepted) of one argument group of one command."""
    parser = _cli_parser(command)
    groups = {g.title: g for g in parser._action_groups}
    if group not in groups:
        raise CliDocError(
            f"aiokpl {command} has no argument group {group!r}; it has "
            + ", ".join(repr(title) for title in groups)
        )
    return [
        action
        for action in groups[group]._group_actions
        if action.option_strings
        and action.help is not argparse.SUPPRESS
        and not isinstance(action, argparse._HelpAction)
    ]


def render_cli_options(command: str, group: str) -> str:
    """The Markdown table of one argument group's options: option and meaning."""
    prog = _cli_parser(command).prog
    lines = ["| option | meaning |", "|---|---|"]
    for action in cli_option_actions(command, group):
        lines.append(f"| {_invocation(action)} | {_help_text(action, prog)} |")
    return "\n".join(lines)


def render_cli_usage(command: str) -> str:
    """A command's usage line as ``--help`` prints it, in a text block."""
    parser = _cli_parser(command)
    formatter = argparse.HelpFormatter(parser.prog, width=CLI_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, "")
    return f"```text\n{formatter.format_help().strip()}\n```"


def render_cli_commands() -> str:
    """The Markdown table of the subcommands, with the help ``aiokpl --help`` gives each."""
    parser = cli_parsers()["aiokpl"]
    lines = ["| command | what it does |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                meaning = _help_text(choice, parser.prog)
                lines.append(f"| [`aiokpl {choice.dest}`](#aiokpl-{choice.dest}) | {meaning} |")
    return "\n".join(lines)


def render_cli_placeholder(kind: str, args: str) -> str:
    """What one ``cli-`` placeholder stands for.

    Raises:
        CliDocError: an unknown kind, command or group.
    """
    words = args.split()
    if kind == "commands" and not words:
        return render_cli_commands()
    if kind == "usage" and len(words) == 1:
        return render_cli_usage(words[0])
    if kind == "options" and len(words) >= 2:
        return render_cli_options(words[0], " ".join(words[1:]))
    raise CliDocError(f"unknown placeholder <!-- cli-{kind}: {args} -->")


_FENCE = re.compile(r"^[ \t]*(```|~~~)")

MARKER = re.compile(
    r"^<!-- (?P<kind>config-fields|cli-[a-z]+)(?::[ \t]*(?P<args>[^\n]*?))?[ \t]*-->$", re.M
)
"""An opening marker, on a line of its own: ``<!-- config-fields -->``, ``<!-- cli-commands -->``,
``<!-- cli-usage: COMMAND -->`` or ``<!-- cli-options: COMMAND GROUP -->`` (``COMMAND`` is
``aiokpl`` for the top-level parser, ``GROUP`` an argument group's title as ``--help`` shows
it)."""

DOCS = Path(__file__).resolve().parent
PAGES = ("configuration.md", "cli.md")
"""The pages under ``docs/`` with generated tables (``make docs-tables`` rewrites them)."""


class StaleTablesError(Exception):
    """A page's generated tables are not what the code gives: run ``make docs-tables``."""


def _closing(kind: str) -> str:
    """The closing marker of a section: ``<!-- /cli-options -->`` after ``cli-options``."""
    return f"<!-- /{kind} -->"


def _section_end(lines: list[str], start: int, closing: str) -> int | None:
    """The index of the line after ``closing`` when it comes before any other opening marker,
    else ``None`` (a marker written by hand, whose section is yet to be generated)."""
    for index in range(start, len(lines)):
        text = lines[index].rstrip("\n")
        if text == closing:
            return index + 1
        if MARKER.match(text):
            return None
    return None


def render_marker(kind: str, args: str) -> str:
    """What the section after one opening marker holds.

    Raises:
        CliDocError: an unknown ``cli-`` kind, command or group.
        ConfigDocError: a ``Config`` field without documentation.
    """
    if kind == "config-fields":
        return render_table()
    return render_cli_placeholder(kind.removeprefix("cli-"), args)


def regenerate(markdown: str) -> str:
    """``markdown`` with every generated section written anew from the code.

    Markers inside fenced code blocks are text, shown as they are (the contributing page does).
    """
    lines = markdown.splitlines(keepends=True)
    out: list[str] = []
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        opening = _FENCE.match(line)
        if fence is not None:
            out.append(line)
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            continue
        if opening is not None:
            fence = opening.group(1)
            out.append(line)
            continue
        marker = MARKER.match(line.rstrip("\n"))
        if marker is None:
            out.append(line)
            continue
        kind = marker.group("kind")
        closing = _closing(kind)
        end = _section_end(lines, i, closing)
        if end is not None:  # skip the old section, closing marker included
            i = end
        body = render_marker(kind, marker.group("args") or "")
        out.append(f"{line.rstrip(chr(10))}\n\n{body}\n\n{closing}\n")
    return "".join(out)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs event: refuse a page whose generated tables are stale; else leave it as it is.

    Raises:
        StaleTablesError: the page is not what ``make docs-tables`` would write.
    """
    if regenerate(markdown) != markdown:
        page = kwargs.get("page")
        name = getattr(getattr(page, "file", None), "src_path", "a page")
        raise StaleTablesError(
            f"{name}: its generated tables are stale (the code changed): run make docs-tables"
        )
    return markdown


def write_pages(docs: Path = DOCS) -> list[Path]:
    """Rewrite the generated sections of :data:`PAGES`; returns the pages that changed."""
    changed = []
    for name in PAGES:
        path = docs / name
        text = path.read_text(encoding="utf-8")
        new = regenerate(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(DOCS.parent / "src"))  # the tree's aiokpl, not an installed one
    for path in write_pages():
        print(f"rewrote {path.relative_to(DOCS.parent)}")
