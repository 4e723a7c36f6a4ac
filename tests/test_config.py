"""Config: defaults, validation messages, secrets kept out of repr."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from aiokpl import Config, ConfigError
from aiokpl._kinesis import tls_verify

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_defaults_match_the_spec() -> None:
    config = Config()
    assert config.region is None
    assert config.aggregation_enabled is True
    assert config.aggregation_max_count == 4_294_967_295
    assert config.aggregation_max_size == 51_200
    assert config.collection_max_count == 500
    assert config.collection_max_size == 5 * 1024 * 1024
    assert config.record_max_buffered_time_ms == 100
    assert config.record_ttl_ms == 30_000
    assert config.rate_limit_records_per_sec_per_shard == 1000.0
    assert config.rate_limit_bytes_per_sec_per_shard == 1_048_576.0
    assert config.drain_interval_ms == 25
    assert config.fail_if_throttled is False
    assert config.max_outstanding_records == 100_000
    assert config.max_outstanding_bytes == 256 * 1024 * 1024
    assert config.max_record_size == 1024 * 1024
    assert (config.request_timeout_ms, config.connect_timeout_ms) == (6000, 6000)
    assert config.max_connections == 24
    assert config.http_backend == "auto"
    assert config.verify_ssl is True
    assert config.ordering == "aggregate"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("aggregation_max_size", 63, "aggregation_max_size must be 64 … 1,048,576; got 63"),
        ("aggregation_max_size", 1024 * 1024 + 1, "aggregation_max_size must be 64 … 1,048,576"),
        ("aggregation_max_count", 0, "aggregation_max_count must be 1 … 4,294,967,295; got 0"),
        ("collection_max_count", 501, "collection_max_count must be 1 … 500; got 501"),
        ("collection_max_size", 1000, "collection_max_size must be 52,224 … 10,485,760; got 1000"),
        ("record_max_buffered_time_ms", -1, "record_max_buffered_time_ms must be 0 …"),
        ("record_ttl_ms", 99, "record_ttl_ms must be 100 …"),
        (
            "rate_limit_records_per_sec_per_shard",
            0.0,
            "rate_limit_records_per_sec_per_shard must be at least 1 and finite; got 0.0",
        ),
        (
            "rate_limit_records_per_sec_per_shard",
            0.5,
            "rate_limit_records_per_sec_per_shard must be at least 1 and finite; got 0.5",
        ),
        (
            "rate_limit_bytes_per_sec_per_shard",
            math.inf,
            "rate_limit_bytes_per_sec_per_shard must be at least 1 and finite",
        ),
        (
            "rate_limit_bytes_per_sec_per_shard",
            math.nan,
            "rate_limit_bytes_per_sec_per_shard must be at least 1 and finite; got nan",
        ),
        ("drain_interval_ms", 0, "drain_interval_ms must be 1 … 1,000"),
        ("max_outstanding_records", 0, "max_outstanding_records must be 1 …"),
        ("max_record_size", 10 * 1024 * 1024 + 1, "max_record_size must be 1 … 10,485,760"),
        ("request_timeout_ms", 50, "request_timeout_ms must be 100 … 600,000"),
        ("connect_timeout_ms", 300_001, "connect_timeout_ms must be 100 … 300,000"),
        ("max_connections", 0, "max_connections must be 1 … 256; got 0"),
        (
            "http_backend",
            "curl",
            "http_backend must be one of 'auto', 'aiohttp', 'httpx'; got 'curl'",
        ),
        ("region", "", "region must not be empty"),
        ("ordering", "strict", "ordering must be one of 'aggregate', 'shard'; got 'strict'"),
        ("ordering", None, "ordering must be one of 'aggregate', 'shard'; got None"),
    ],
)
def test_out_of_range_values_name_the_field_and_range(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Config(**{field: value})  # type: ignore[arg-type]
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_connections", "24", "max_connections must be an int, not str"),
        ("max_connections", 24.0, "max_connections must be an int, not float"),
        ("max_connections", True, "max_connections must be an int, not bool"),
        ("rate_limit_records_per_sec_per_shard", "1000", "must be an float, not str"),
        ("aggregation_enabled", 1, "aggregation_enabled must be a bool, not int"),
        ("region", 5, "region must be a str or None, not int"),
    ],
)
def test_wrong_types(field: str, value: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        Config(**{field: value})  # type: ignore[arg-type]


def test_strict_ordering_per_shard_is_opt_in() -> None:
    assert Config(ordering="shard").ordering == "shard"
    assert repr(Config(ordering="shard")) == "Config(ordering='shard')"


def test_int_rates_are_accepted() -> None:
    assert (
        Config(rate_limit_records_per_sec_per_shard=500).rate_limit_records_per_sec_per_shard == 500
    )


def test_cross_field_rules() -> None:
    with pytest.raises(
        ConfigError, match=r"max_outstanding_bytes \(1000\) must be at least max_record_size"
    ):
        Config(max_outstanding_bytes=1000)
    with pytest.raises(ConfigError, match="must be given together"):
        Config(aws_access_key_id="AKIDEXAMPLE")


def test_ca_bundle_is_a_path_used_with_verification_only(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    # Not looked for on disk yet: the producer's start does that (tls_verify).
    assert Config(ca_bundle=bundle).ca_bundle == bundle
    with pytest.raises(TypeError, match=r"ca_bundle must be a str or an os\.PathLike"):
        Config(ca_bundle=b"ca.pem")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ca_bundle must not be empty"):
        Config(ca_bundle="")
    with pytest.raises(ConfigError, match="ca_bundle is given with verify_ssl=False"):
        Config(ca_bundle=bundle, verify_ssl=False)


def test_botocore_finds_the_bundle_unless_one_is_given(tmp_path: Path) -> None:
    # verify=None is what makes botocore read AWS_CA_BUNDLE and the profile's ca_bundle.
    assert tls_verify(Config()) is None
    assert tls_verify(Config(verify_ssl=False)) is False
    bundle = tmp_path / "ca.pem"
    with pytest.raises(ConfigError, match="ca_bundle: no such file"):
        tls_verify(Config(ca_bundle=bundle))
    bundle.write_text("")
    assert tls_verify(Config(ca_bundle=bundle)) == str(bundle)


@pytest.mark.parametrize(
    ("changes", "margin"),
    [
        # Default buffered time 100 ms: grace min(50, 20) ms plus a 25 ms drain interval.
        ({"record_ttl_ms": 100}, 45),
        ({"record_ttl_ms": 145}, 45),
        ({"record_ttl_ms": 30_000, "record_max_buffered_time_ms": 60_000}, 75),
        ({"record_ttl_ms": 125, "aggregation_enabled": False}, 25),
        ({"record_ttl_ms": 200, "record_max_buffered_time_ms": 0, "drain_interval_ms": 200}, 200),
    ],
)
def test_a_ttl_no_record_could_be_sent_within_is_refused(
    changes: dict[str, object], margin: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        Config(**changes)  # type: ignore[arg-type]
    message = str(caught.value)
    ttl = changes["record_ttl_ms"]
    buffered = changes.get("record_max_buffered_time_ms", 100)
    assert message.startswith(
        f"record_ttl_ms ({ttl}) must be greater than record_max_buffered_time_ms ({buffered}) "
        f"plus {margin} ms"
    )


def test_the_smallest_ttl_that_can_deliver_is_accepted() -> None:
    assert Config(record_ttl_ms=146).record_ttl_ms == 146
    assert Config(record_ttl_ms=126, aggregation_enabled=False).record_ttl_ms == 126
    assert Config(record_ttl_ms=100, record_max_buffered_time_ms=10).record_ttl_ms == 100


def test_repr_hides_credentials() -> None:
    config = Config(
        region="eu-west-1",
        aws_access_key_id="AKIDEXAMPLE123",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG",
        aws_session_token="FwoGZXIvYXdzEBYaD",
    )
    for text in (repr(config), str(config), f"{config}", repr([config])):
        assert "AKIDEXAMPLE123" not in text
        assert "wJalrXUtnFEMI" not in text
        assert "FwoGZXIvYXdzEBYaD" not in text
    assert repr(config) == (
        "Config(region='eu-west-1', aws_access_key_id='***', "
        "aws_secret_access_key='***', aws_session_token='***')"
    )
    assert repr(Config()) == "Config()"


def test_frozen_and_replace_revalidates() -> None:
    config = Config(region="us-east-1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.region = "x"  # type: ignore[misc]
    changed = config.replace(max_connections=8)
    assert changed.max_connections == 8
    assert changed.region == "us-east-1"
    with pytest.raises(ConfigError, match="max_connections"):
        config.replace(max_connections=0)
    with pytest.raises(TypeError):
        Config("us-east-1")  # type: ignore[call-arg]  # keyword-only


def test_every_field_is_documented() -> None:
    # The page's table is generated from Config at build time by docs/_hooks.py, from the
    # documentation beside each field; tests/test_docs_config.py tests the generator and fails
    # for a field without documentation. Here: the page keeps the line the hook replaces.
    page = (DOCS / "configuration.md").read_text()
    assert page.count("<!-- config-fields -->") == 1
