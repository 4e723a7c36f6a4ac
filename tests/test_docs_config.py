"""The configuration reference is generated from ``Config`` and documents every field."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from aiokpl import Config, ConfigError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_field_is_documented_in_the_code(hooks: ModuleType) -> None:
    # Fails, naming the fields, when someone adds a Config field without its docstring.
    rows = hooks.field_docs()
    assert [row.name for row in rows] == [f.name for f in dataclasses.fields(Config)]
    for row in rows:
        assert len(row.meaning) > 20, row


def test_a_field_without_documentation_stops_the_build(
    hooks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = hooks.CONFIG_SOURCE.read_text(encoding="utf-8")
    undocumented, count = re.subn(
        r'(    drain_interval_ms: int = \d+\n)    """.*?"""\n', r"\1", source, flags=re.S
    )
    assert count == 1
    copy = tmp_path / "config.py"
    copy.write_text(undocumented, encoding="utf-8")
    monkeypatch.setattr(hooks, "CONFIG_SOURCE", copy)
    with pytest.raises(hooks.ConfigDocError, match=r": drain_interval_ms$"):
        hooks.field_docs()
    with pytest.raises(hooks.ConfigDocError):
        hooks.on_page_markdown(f"# Configuration\n\n{hooks.PLACEHOLDER}\n")


def test_rows_show_type_default_range_and_kpl_name(hooks: ModuleType) -> None:
    rows = {row.name: row for row in hooks.field_docs()}
    size = rows["aggregation_max_size"]
    assert (size.type, size.default, size.allowed, size.kpl) == (
        "`int`",
        "51,200",
        "64 … 1 MiB",
        "`AggregationMaxSize`",
    )
    assert "(KPL" not in size.meaning  # the note moved to its own column
    assert "exactly as sent" in size.meaning
    assert rows["max_outstanding_bytes"].default == "256 MiB"
    assert rows["max_outstanding_bytes"].allowed == "1 … 64 GiB"
    assert rows["rate_limit_records_per_sec_per_shard"].allowed == "≥ 1, finite"
    assert rows["rate_limit_records_per_sec_per_shard"].kpl == "`RateLimit`"
    assert rows["http_backend"].allowed == "`'auto'`, `'aiohttp'`, `'httpx'`"
    assert rows["verify_ssl"].allowed == "`True`, `False`"
    assert rows["region"].type == "`str | None`"  # a pipe in a code span stays as it is
    assert rows["region"].default == "`None`"
    assert rows["region"].allowed == "a non-empty string, or `None`"
    assert rows["drain_interval_ms"].kpl == "–"
    # reStructuredText markup becomes Markdown; nothing breaks the table's cells.
    for row in rows.values():
        assert "``" not in row.meaning, row
        assert ":class:" not in row.meaning, row
        assert "\n" not in row.meaning


def test_a_field_is_said_to_take_none_only_when_it_does(hooks: ModuleType) -> None:
    # The table once offered `None` for metrics_namespace, which raises TypeError.
    for row in hooks.field_docs():
        try:
            Config(**{row.name: None})  # type: ignore[arg-type]
        except (TypeError, ConfigError):
            assert "None" not in row.allowed, row
    rows = {row.name: row for row in hooks.field_docs()}
    assert rows["metrics_namespace"].allowed == "a string"


def test_the_configuration_page_gets_the_table(hooks: ModuleType) -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page.count(hooks.PLACEHOLDER) == 1
    rendered = hooks.on_page_markdown(page)
    assert hooks.PLACEHOLDER not in rendered
    for f in dataclasses.fields(Config):
        assert re.search(rf"^\| `{f.name}` \|", rendered, flags=re.M), f.name
    assert hooks.on_page_markdown("no placeholder here") == "no placeholder here"
    assert "docs/_hooks.py" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_attribute_docs_pairs_each_field_with_the_string_after_it(hooks: ModuleType) -> None:
    source = '''
class Config:
    """Class docstring."""

    a: int = 1
    """Documented
    on two lines."""

    b: int = 2
    c: int = 3
    """Only c."""

    def method(self) -> None:
        """Not a field."""
'''
    assert hooks.attribute_docs(source) == {"a": "Documented\non two lines.", "c": "Only c."}
    assert hooks._markdown("``a | b`` or c | d") == "`a | b` or c \\| d"
    with pytest.raises(hooks.ConfigDocError, match="class Config not found"):
        hooks.attribute_docs("x = 1\n")


# Every option of the KPL's KinesisProducerConfiguration (awslabs/amazon-kinesis-producer,
# java/.../KinesisProducerConfiguration.java: its properties and setters), plus those of older
# releases' default_config.properties and ReturnUserRecordOnFailure.
KPL_OPTIONS = (
    "AdditionalMetricsDimension",
    "AggregationEnabled",
    "AggregationMaxCount",
    "AggregationMaxSize",
    "AwsAccessKeyId",
    "AwsSecretKey",
    "CaCertFile",
    "CaCertPath",
    "CloudwatchEndpoint",
    "CloudwatchPort",
    "CollectionMaxCount",
    "CollectionMaxSize",
    "ConnectTimeout",
    "CredentialsProvider",
    "CredentialsRefreshDelay",
    "CustomEndpoint",
    "EnableCoreDumps",
    "FailIfThrottled",
    "GlueSchemaRegistryConfiguration",
    "GlueSchemaRegistryCredentialsProvider",
    "GlueSchemaRegistryPropertiesFilePath",
    "KinesisEndpoint",
    "KinesisPort",
    "LogLevel",
    "MaxConnections",
    "MetricsCredentialsProvider",
    "MetricsGranularity",
    "MetricsLevel",
    "MetricsNamespace",
    "MetricsUploadDelay",
    "MinConnections",
    "NativeExecutable",
    "Port",
    "ProxyHost",
    "ProxyPassword",
    "ProxyPort",
    "ProxyUserName",
    "RateLimit",
    "RecordMaxBufferedTime",
    "RecordTtl",
    "Region",
    "RequestTimeout",
    "ReturnUserRecordOnFailure",
    "StsEndpoint",
    "StsPort",
    "TempDirectory",
    "ThreadPoolSize",
    "ThreadingModel",
    "UserRecordTimeoutInMillis",
    "VerifyCertificate",
)


def test_the_migration_page_maps_every_kpl_option() -> None:
    page = (ROOT / "docs" / "migrating-from-kpl.md").read_text(encoding="utf-8")
    option_rows = [line for line in page.splitlines() if line.startswith("| `")]
    for option in KPL_OPTIONS:
        rows = [row for row in option_rows if re.search(rf"`(set|add)?{option}\b", row)]
        assert rows, f"the KPL option {option} is not mapped"
        # Each row says what to use instead, or why there is nothing.
        assert all(row.count("|") >= 4 for row in rows), rows
