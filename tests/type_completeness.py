"""``make typecompleteness``: the typing of the public API, measured as a type checker sees it.

Usage: ``python tests/type_completeness.py PYRIGHT MINIMUM``. Runs ``PYRIGHT --verifytypes aiokpl
--ignoreexternal`` (pyright, from npm) against the ``aiokpl`` this interpreter imports, prints
every symbol pyright finds ambiguous or unknown, and exits 1 when the completeness score (the
share of public symbols whose types are fully known, in %) is below ``MINIMUM``, or when the
package claims types it does not ship: the ``Typing :: Typed`` classifier in ``pyproject.toml``
and the ``py.typed`` marker go together (PEP 561).

``--ignoreexternal``: botocore and aiobotocore ship no type information, so the public
signatures that pass their clients through (``client=``) would count as unknown whatever this
package declares.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_pyright(pyright: str) -> dict[str, Any]:
    """pyright's ``--verifytypes`` report, as JSON, for the ``aiokpl`` of this interpreter."""
    # pyright finds the packages of the first `python` on PATH: this interpreter's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    finished = subprocess.run(
        [pyright, "--verifytypes", "aiokpl", "--ignoreexternal", "--outputjson"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    try:
        report: dict[str, Any] = json.loads(finished.stdout)
    except json.JSONDecodeError:
        sys.exit(f"pyright failed (status {finished.returncode}):\n{finished.stderr}")
    return report


def problems(report: dict[str, Any], minimum: float) -> list[str]:
    """What is wrong: pyright's errors, a score below ``minimum``, a claim without a marker."""
    completeness = report["typeCompleteness"]
    diagnostics = [
        (symbol["name"], diagnostic)
        for symbol in completeness.get("symbols", [])
        for diagnostic in symbol.get("diagnostics", [])
    ]
    diagnostics += [("", diagnostic) for diagnostic in report.get("generalDiagnostics", [])]
    found = [
        f"{d.get('file', '?')}:{d['range']['start']['line'] + 1}: {name}: "
        + " ".join(d["message"].split())
        for name, d in diagnostics
        if d.get("severity") == "error"
    ]
    score = 100 * completeness["completenessScore"]
    if score < minimum:
        found.append(f"type completeness {score:.1f}% is below the floor, {minimum:g}%")
    classified = "Typing :: Typed" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    marked = bool(completeness.get("pyTypedPath"))
    if classified != marked:
        found.append(
            "the 'Typing :: Typed' classifier and the py.typed marker go together: "
            f"classifier {'present' if classified else 'absent'}, py.typed "
            f"{'found' if marked else 'not found'}"
        )
    return found


def main(argv: list[str]) -> int:
    pyright, minimum = argv[0], float(argv[1])
    report = run_pyright(pyright)
    completeness = report["typeCompleteness"]
    exported = completeness["exportedSymbolCounts"]
    print(
        f"pyright {report['version']} --verifytypes aiokpl: type completeness "
        f"{100 * completeness['completenessScore']:.1f}% (floor {minimum:g}%) of "
        f"{sum(exported.values())} exported symbols and "
        f"{sum(completeness['otherSymbolCounts'].values())} they refer to; "
        f"py.typed at {completeness.get('pyTypedPath') or 'nowhere'}"
    )
    found = problems(report, minimum)
    for problem in found:
        print(problem)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
