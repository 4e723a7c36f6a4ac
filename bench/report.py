"""The results: one row per figure, printed as one table and written as one JSON file."""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ("Row", "ScenarioResult", "format_table", "write_json")

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


@dataclass
class Row:
    """One line of the table.

    Attributes:
        scenario: the scenario's name, e.g. ``"pipeline/asyncio"``.
        figure: what was measured, with the measured values.
        target: the target it is held to (or what it is compared with, for information).
        ratio: the ratio the target is about (``None`` when there is none).
        ratio_of: what the ratio divides, e.g. ``"pipeline/bare"``.
        ok: ``True`` pass, ``False`` fail, ``None`` information only.
    """

    scenario: str
    figure: str
    target: str
    ratio: float | None = None
    ratio_of: str = ""
    ok: bool | None = None

    @property
    def verdict(self) -> str:
        return "info" if self.ok is None else "pass" if self.ok else "FAIL"


@dataclass
class ScenarioResult:
    """What one scenario hands back: its rows, its raw figures, how long it took."""

    name: str
    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None


def _ratio_text(row: Row) -> str:
    if row.ratio is None:
        return ""
    value = row.ratio
    text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {row.ratio_of}".rstrip()


def format_table(results: list[ScenarioResult]) -> str:
    """The rows of every scenario as one plain-text table."""
    header = ("scenario", "figure", "target", "ratio", "result")
    lines = [
        (row.scenario, row.figure, row.target, _ratio_text(row), row.verdict)
        for result in results
        for row in result.rows
    ]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]

    def fmt(cells: tuple[str, ...]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(line) for line in lines)])


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover - not on Linux
        load = (float("nan"),) * 3
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in load],
    }


def write_json(path: Path, results: list[ScenarioResult], meta: dict[str, Any]) -> None:
    """Write every row and every raw figure to ``path`` (its directory is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "rows": [
            {**asdict(row), "verdict": row.verdict} for result in results for row in result.rows
        ],
        "scenarios": {
            result.name: {
                "seconds": round(result.seconds, 2),
                "error": result.error,
                "details": result.details,
            }
            for result in results
        },
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
