"""Public classes report the public module that exports them, not the private one they live in.

A traceback, a ``repr`` of a type or an error message names a class as ``module.qualname``:
``aiokpl.ConfigError``, which a user can import and look up, rather than
``aiokpl._core.errors.ConfigError``, a module that is no part of the API. Pickling finds the
class there too, since the public module exports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ("present_as_public",)


def present_as_public(module: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Set ``__module__`` to ``module`` on the classes among ``names`` in ``namespace``.

    A class already presented by another public module (``AggregationFormatError``, exported
    by ``aiokpl`` and ``aiokpl.aggregation``) keeps the first: only a private module's name
    (a ``_`` part) is replaced. ``aiokpl`` itself replaces any.
    """
    for name in names:
        value = namespace[name]
        if not isinstance(value, type):
            continue
        current = value.__module__.split(".")
        if module == "aiokpl" or any(part.startswith("_") for part in current):
            value.__module__ = module
