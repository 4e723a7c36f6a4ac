"""The public surface: ``__all__`` is pinned, documented, and the pure core stays pure."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import aiokpl
import aiokpl.aggregation
import aiokpl.coordination
import aiokpl.testing
import aiokpl.tracing

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "src" / "aiokpl" / "_core"
DOCS = ROOT / "docs"

# Modules the pure core must never import: no event loop, no AWS SDK, no clock.
FORBIDDEN = {
    "anyio",
    "trio",
    "asyncio",
    "sniffio",
    "botocore",
    "aiobotocore",
    "boto3",
    "time",
    "aiohttp",
    "httpx",
}


def test_all_is_pinned() -> None:
    assert set(aiokpl.__all__) == {
        "AggregationFormatError",
        "AiokplError",
        "Attempt",
        "BufferFullError",
        "CloudWatchSink",
        "Config",
        "ConfigError",
        "FailedRecord",
        "Health",
        "HealthReason",
        "InvalidRecordError",
        "InvalidRecordTypeError",
        "MetricStatistics",
        "MetricsSink",
        "OpenTelemetrySink",
        "Outcome",
        "Producer",
        "ProducerClosedError",
        "ProducerStatistics",
        "PrometheusSink",
        "RateLimiter",
        "RateLimiterStatistics",
        "RecordFailedError",
        "RecordResult",
        "SpoolError",
        "SpoolStatistics",
        "StreamStatistics",
        "SyncProducer",
        "TokenBucket",
        "__version__",
    }
    for name in aiokpl.__all__:
        assert hasattr(aiokpl, name), name
    for module in (aiokpl.aggregation, aiokpl.testing, aiokpl.coordination, aiokpl.tracing):
        for name in module.__all__:
            assert hasattr(module, name), name
    assert set(aiokpl.coordination.__all__) == {
        "Coordination",
        "CoordinationStore",
        "DynamoDBStore",
        "S3Store",
        "run_summarizer",
    }
    assert set(aiokpl.tracing.__all__) == {
        "STATE_KEY",
        "TRACE_KEY",
        "TraceContext",
        "context_tags",
        "process_span",
        "trace_context",
    }


def test_every_public_name_is_documented() -> None:
    text = "\n".join(page.read_text() for page in DOCS.rglob("*.md"))
    for name in aiokpl.__all__:
        if name == "__version__":
            continue
        assert f"aiokpl.{name}" in text, f"aiokpl.{name} is not in docs/"
    for name in aiokpl.aggregation.__all__:
        assert name in text, f"aiokpl.aggregation.{name} is not in docs/"
    for name in aiokpl.testing.__all__:
        assert name in text, f"aiokpl.testing.{name} is not in docs/"
    for name in aiokpl.coordination.__all__:
        assert f"aiokpl.coordination.{name}" in text, f"aiokpl.coordination.{name} not in docs/"
    for name in aiokpl.tracing.__all__:
        assert f"aiokpl.tracing.{name}" in text, f"aiokpl.tracing.{name} is not in docs/"


def test_pure_core_imports_no_event_loop_sdk_or_clock() -> None:
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) >= 7
    for path in modules:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_pure_core_loads_without_anyio_or_botocore() -> None:
    # Load every core module with the package's __init__ bypassed, and check what got imported.
    code = f"""
import importlib, sys, types
pkg = types.ModuleType("aiokpl"); pkg.__path__ = [{str(ROOT / "src" / "aiokpl")!r}]
sys.modules["aiokpl"] = pkg
for name in {sorted(p.stem for p in CORE.glob("*.py") if p.stem != "__init__")!r}:
    importlib.import_module("aiokpl._core." + name)
bad = sorted(m for m in sys.modules if m.split(".")[0] in {sorted(FORBIDDEN - {"time"})!r})
print(bad)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_test_the_guarantees_page_cites_exists() -> None:
    import re

    page = (DOCS / "guarantees.md").read_text()
    cited = re.findall(r"`(tests/[\w/]+\.py|…)::(\w+)`", page)
    assert len(cited) >= 20
    current = None
    for path, name in cited:
        current = current if path == "…" else path
        assert current is not None
        source = (ROOT / current).read_text()
        assert re.search(rf"def {name}\(", source), f"{current}::{name} is cited but does not exist"
    for path in re.findall(r"`(tests/[\w/]+\.py)`", page):
        assert (ROOT / path).exists(), path
