"""Text a terminal shows without obeying it: what records hold never drives the terminal.

A stream's records, partition keys and tags are anyone's bytes. Written raw to a terminal, some
characters are commands to it rather than text: the C0 controls (ESC starts an escape
sequence), DEL, the C1 controls (U+009B is CSI and U+009D OSC, the 8-bit forms of ``ESC [`` and
``ESC ]``: they move the cursor, rewrite the window's title, set the clipboard, make links), and
the bidirectional formatting characters, which reorder how a line is shown so that it reads as
something else ("Trojan Source", CVE-2021-42574). Lone surrogates are not characters at all,
and cannot even be encoded to print. :data:`UNSAFE` is all of them.

:func:`json_line` writes a value as one line of JSON with those as ``\\uXXXX`` escapes, which
any JSON reader decodes to the same value; every other character is kept as it is, so text in
any script stays readable (``ensure_ascii=True`` would escape all of it). ``aiokpl tail``
writes its records so, whether its output is a terminal or a pipe (a pipe often ends in one:
``| head``, ``| less -R``, a log file shown later). ``aiokpl spool dump`` escapes everything
that is not printable ASCII (``ascii()``, ``json.dumps(ensure_ascii=True)``), which is safe too.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ("UNSAFE", "json_line")

UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f"  # C0 controls, DEL, C1 controls
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional marks, embeddings, isolates
    "\u2028\u2029"  # line and paragraph separators: a new line to some terminals and viewers
    "\ud800-\udfff]"  # lone surrogates
)
"""The characters a terminal would obey, or cannot show, rather than print."""


def _escaped(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def json_line(value: Any) -> str:
    """``value`` as one line of JSON (no newline), the :data:`UNSAFE` characters escaped as
    ``\\uXXXX`` (inside JSON strings, the only place they can be: the same value once read)."""
    return UNSAFE.sub(_escaped, json.dumps(value, ensure_ascii=False))
