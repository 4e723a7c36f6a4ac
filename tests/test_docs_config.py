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


def test_the_configuration_page_holds_the_table(
    hooks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page.count(hooks.PLACEHOLDER) == 1
    assert page.count("<!-- /config-fields -->") == 1
    # In the file itself, where a code host shows it: every field has its row.
    for f in dataclasses.fields(Config):
        assert re.search(rf"^\| `{f.name}` \|", page, flags=re.M), f.name
    assert hooks.regenerate(page) == page, "docs/configuration.md is stale: run make docs-tables"
    assert hooks.on_page_markdown(page) == page
    assert hooks.regenerate("no placeholder here") == "no placeholder here"
    assert "docs/_hooks.py" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    # A field whose documentation changes makes the page stale, for the test and the build.
    source = hooks.CONFIG_SOURCE.read_text(encoding="utf-8")
    changed = source.replace("How long a record may take", "How long, at most, a record may take")
    assert changed != source
    copy = tmp_path / "config.py"
    copy.write_text(changed, encoding="utf-8")
    monkeypatch.setattr(hooks, "CONFIG_SOURCE", copy)
    assert "How long, at most, a record may take" in hooks.regenerate(page)
    with pytest.raises(hooks.StaleTablesError, match="make docs-tables"):
        hooks.on_page_markdown(page)


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


# The 22 fields of aiokpl 0.2.0's Config (/work/shared/aiokpl-0.2.0-api.md, section 2.4). 0.2.0
# checked none of them: any value of any type was taken (tried in a scratch virtualenv).
AIOKPL_02_FIELDS = frozenset(
    {
        "region",
        "aggregation_enabled",
        "aggregation_max_count",
        "aggregation_max_size",
        "record_max_buffered_time_ms",
        "record_ttl_ms",
        "collection_max_count",
        "collection_max_size",
        "rate_limit_records_per_sec_per_shard",
        "rate_limit_bytes_per_sec_per_shard",
        "drain_interval_ms",
        "fail_if_throttled",
        "retry_deadline_ms",
        "max_outstanding_records",
        "endpoint_url",
        "verify_ssl",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "metrics_level",
        "metrics_sink",
        "metrics_upload_interval_ms",
    }
)
MIGRATION_02 = ROOT / "docs" / "migrating-from-aiokpl-0.2.md"


def _paragraph(page: str, start: str) -> str:
    """The paragraph of ``page`` that begins with ``start``."""
    found = page.index(start)
    return page[found : page.find("\n\n", found)]


def test_the_02_migration_page_names_every_setting_0_2_0_lacked() -> None:
    # `ordering` was once missing from this list.
    listed = set(
        re.findall(r"`(\w+)`", _paragraph(MIGRATION_02.read_text(), "Settings 0.2.0 did not have"))
    )
    new = {f.name for f in dataclasses.fields(Config)} - AIOKPL_02_FIELDS
    assert new <= listed, sorted(new - listed)
    assert listed <= {f.name for f in dataclasses.fields(Config)}, sorted(listed)


def test_the_02_migration_page_lists_every_check_0_2_0_did_not_make() -> None:
    # Every range or type Config checks, on a field 0.2.0 had, is a row of the page's table:
    # 0.2.0 code may pass a value that is refused now (metrics_upload_interval_ms=500 was).
    from aiokpl._core import config as config_module

    page = MIGRATION_02.read_text()
    table = page[page.index("### Every setting is checked now") :]
    table = table[: table.index("\n\n", table.index("| setting |"))]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    checked = {name for name, kind, _, _ in config_module._RULES if kind in ("int", "float")}
    checked |= {name for name, kind, _, _ in config_module._RULES if kind == "bool"}
    missing = sorted((checked & AIOKPL_02_FIELDS) - named)
    assert not missing, f"checks 0.2.0 did not make, missing from the page's table: {missing}"
    # Its examples are the values the page says are refused: each is refused, in fact.
    for bad in ({"metrics_upload_interval_ms": 500}, {"collection_max_count": 1000}):
        with pytest.raises(ConfigError):
            Config(**bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="positional"):
        Config("us-east-1")  # type: ignore[call-arg]
