"""The benchmark harness still runs (figures are not asserted: they are measured, not tested)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.integration
def test_quick_benchmark_runs_and_reports_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    text = json.dumps(report)
    for scenario in ("pipeline", "metrics", "codec", "saturation", "latency", "memory", "sync"):
        assert scenario in text, scenario
