"""The pure metrics core: the windowed accumulator, the table's levels, granularity and roll-ups,
and CloudWatch batching, all with explicit times."""

from __future__ import annotations

import datetime
from urllib.parse import urlencode

import pytest
from botocore.model import ServiceModel
from botocore.serialize import create_serializer
from hypothesis import given
from hypothesis import strategies as st

from aiokpl._core.metrics import (
    CLOUDWATCH_MAX_BYTES,
    CLOUDWATCH_MAX_DATA,
    METRICS,
    RING_SECONDS,
    MetricsTable,
    MetricStatistics,
    WindowedStatistic,
    cloudwatch_batches,
    cloudwatch_datum,
)

# --- WindowedStatistic ---------------------------------------------------------------------


def test_an_empty_window_has_no_statistics() -> None:
    series = WindowedStatistic()
    assert series.span(-(10**9), 10**9) is None


def test_values_of_one_second_are_summed_with_min_and_max() -> None:
    series = WindowedStatistic()
    series.add(5.0, 100.0)
    series.add(2.0, 100.25)
    series.add_many(3, 30.0, 8.0, 12.0, 100.999)
    assert series.span(100, 101) == (5, 37.0, 2.0, 12.0)


def test_min_and_max_are_taken_across_buckets() -> None:
    series = WindowedStatistic()
    series.add(7.0, 10.5)  # second 10
    series.add(1.0, 11.0)  # second 11
    series.add(9.0, 12.9)  # second 12
    assert series.span(10, 13) == (3, 17.0, 1.0, 9.0)
    assert series.span(11, 12) == (1, 1.0, 1.0, 1.0)
    assert series.span(12, 100) == (1, 9.0, 9.0, 9.0)
    assert series.span(13, 100) is None


def test_the_window_slides_and_old_buckets_are_reused() -> None:
    series = WindowedStatistic()
    series.add(1.0, 0.0)
    series.add(2.0, 1.0)
    # RING_SECONDS later, second 0's slot is taken by a new second: the old value is gone.
    series.add(50.0, float(RING_SECONDS))
    assert series.span(0, 1) is None
    assert series.span(0, RING_SECONDS + 1) == (2, 52.0, 2.0, 50.0)
    # A bucket left over from an earlier lap is not read as part of a later span.
    assert series.span(RING_SECONDS + 1, 2 * RING_SECONDS) is None


@given(
    st.lists(
        st.tuples(st.integers(0, 500), st.floats(-1e6, 1e6, allow_nan=False)),
        min_size=1,
        max_size=60,
    )
)
def test_spans_within_the_ring_match_a_direct_computation(values: list[tuple[int, float]]) -> None:
    values.sort()
    series = WindowedStatistic()
    for second, value in values:
        series.add(value, second + 0.5)
    last = values[-1][0]
    for begin in range(last - RING_SECONDS + 1, last + 1, 7):
        inside = [v for s, v in values if begin <= s <= last]
        expected = (len(inside), sum(inside), min(inside), max(inside)) if inside else None
        got = series.span(begin, last + 1)
        if expected is None:
            assert got is None
        else:
            assert got is not None
            assert got[0] == expected[0]
            assert got[1] == pytest.approx(expected[1], abs=1e-3)
            assert got[2:] == expected[2:]


# --- MetricsTable --------------------------------------------------------------------------


def test_unknown_level_or_granularity_is_refused() -> None:
    with pytest.raises(ValueError, match="level must be 'summary' or 'detailed'; got 'none'"):
        MetricsTable("none", "shard")
    with pytest.raises(ValueError, match="granularity must be one of"):
        MetricsTable("detailed", "region")


def test_summary_level_records_only_summary_metrics() -> None:
    table = MetricsTable("summary", "shard")
    summary = {name for name, (_, level) in METRICS.items() if level == "summary"}
    assert table.names == summary
    assert summary == {
        "UserRecordsPut",
        "KinesisRecordsPut",
        "ErrorsByCode",
        "AllErrors",
        "UserRecordExpired",
        "UserRecordsExpiredUnsent",
        "BufferingTime",
        "SpoolBytes",
        "SpoolFsyncTime",
        "SpoolRecordsRecovered",
        "SpoolBytesLost",
        "ProducerHealth",
    }
    assert table.leaf("RequestTime", "s") is None
    assert table.leaf("UserRecordsPut", "s") is not None
    assert MetricsTable("detailed", "shard").names == set(METRICS)


def test_a_value_counts_towards_its_stream_and_global_series() -> None:
    table = MetricsTable("detailed", "shard")
    for shard, value in (("shard-1", 1.0), ("shard-1", 3.0), ("shard-2", 10.0)):
        series = table.leaf("UserRecordsDataPut", "a", shard)
        assert series is not None
        series.add(value, 5.0)
    other = table.leaf("UserRecordsDataPut", "b", "shard-1")
    assert other is not None
    other.add(100.0, 5.5)
    got = {(m.stream, m.shard_id): (m.count, m.sum, m.min, m.max) for m in table.collect(5, 6)}
    assert got == {
        (None, None): (4, 114.0, 1.0, 100.0),
        ("a", None): (3, 14.0, 1.0, 10.0),
        ("a", "shard-1"): (2, 4.0, 1.0, 3.0),
        ("a", "shard-2"): (1, 10.0, 10.0, 10.0),
        ("b", None): (1, 100.0, 100.0, 100.0),
        ("b", "shard-1"): (1, 100.0, 100.0, 100.0),
    }


@pytest.mark.parametrize(
    ("granularity", "series"),
    [
        ("global", [(None, None)]),
        ("stream", [(None, None), ("a", None)]),
        ("shard", [(None, None), ("a", None), ("a", "shard-1")]),
    ],
)
def test_granularity_drops_finer_dimensions(
    granularity: str, series: list[tuple[str | None, str | None]]
) -> None:
    table = MetricsTable("summary", granularity)
    leaf = table.leaf("UserRecordsPut", "a", "shard-1")
    assert leaf is not None
    leaf.add(1.0, 0.0)
    assert [(m.stream, m.shard_id) for m in table.collect(0, 1)] == series


def test_errors_by_code_keep_the_code_at_every_granularity() -> None:
    table = MetricsTable("summary", "global")
    leaf = table.leaf("ErrorsByCode", "a", "shard-1", "Boom")
    assert leaf is not None
    leaf.add(1.0, 0.0)
    [stats] = table.collect(0, 1)
    assert (stats.error_code, stats.stream, stats.shard_id) == ("Boom", None, None)
    assert stats.dimensions == (("ErrorCode", "Boom"),)


def test_collect_filters_by_name_sorts_and_skips_empty_series() -> None:
    table = MetricsTable("detailed", "stream")
    for name, stream in (("RequestTime", "b"), ("RequestTime", "a"), ("AllErrors", "a")):
        leaf = table.leaf(name, stream)
        assert leaf is not None
        leaf.add(2.0, 1.0)
    assert table.leaf("UserRecordsPut", "a") is not None  # created, never written
    names = [(m.name, m.stream) for m in table.collect(0, 2)]
    assert names == [
        ("AllErrors", None),
        ("AllErrors", "a"),
        ("RequestTime", None),
        ("RequestTime", "a"),
        ("RequestTime", "b"),
    ]
    assert [(m.name, m.stream) for m in table.collect(0, 2, "AllErrors")] == names[:2]
    assert table.collect(2, 3) == []


def test_window_is_the_last_seconds_including_the_current_one() -> None:
    table = MetricsTable("summary", "global")
    leaf = table.leaf("BufferingTime")
    assert leaf is not None
    leaf.add(1.0, 100.2)
    leaf.add(2.0, 159.9)
    leaf.add(4.0, 160.1)
    assert [m.count for m in table.window(160.5, 60)] == [2]  # seconds 101 … 160
    assert [m.sum for m in table.window(160.5, 1)] == [4.0]
    assert [m.sum for m in table.window(158.5, 60)] == [1.0]  # seconds 99 … 158
    assert table.window(230.0, 60) == []


def test_statistics_values_mean_and_dimensions() -> None:
    stats = MetricStatistics(
        name="ErrorsByCode",
        unit="Count",
        count=4,
        sum=6.0,
        min=1.0,
        max=3.0,
        stream="s",
        shard_id="shardId-000000000001",
        error_code="Boom",
    )
    assert stats.mean == 1.5
    assert stats.dimensions == (
        ("ErrorCode", "Boom"),
        ("StreamName", "s"),
        ("ShardId", "shardId-000000000001"),
    )
    assert MetricStatistics("AllErrors", "Count", 1, 0.0, 0.0, 0.0).dimensions == ()


# --- CloudWatch ----------------------------------------------------------------------------

WHEN = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def _stats(i: int, dimension_size: int = 10) -> MetricStatistics:
    return MetricStatistics(
        name="UserRecordsPut",
        unit="Count",
        count=3,
        sum=2.0,
        min=0.0,
        max=1.0,
        stream="s" * dimension_size,
        shard_id=f"shardId-{i:012d}",
    )


def test_a_datum_is_a_statistic_set_with_unit_and_dimensions() -> None:
    assert cloudwatch_datum(_stats(7, 1), WHEN) == {
        "MetricName": "UserRecordsPut",
        "Dimensions": [
            {"Name": "StreamName", "Value": "s"},
            {"Name": "ShardId", "Value": "shardId-000000000007"},
        ],
        "Timestamp": WHEN,
        "StatisticValues": {"SampleCount": 3.0, "Sum": 2.0, "Minimum": 0.0, "Maximum": 1.0},
        "Unit": "Count",
    }


def test_batches_hold_at_most_1000_data_in_order() -> None:
    data = [cloudwatch_datum(_stats(i), WHEN) for i in range(2500)]
    batches = cloudwatch_batches(data, "KinesisProducerLibrary")
    assert [len(batch) for batch in batches] == [1000, 1000, 500]
    assert [datum for batch in batches for datum in batch] == data
    assert CLOUDWATCH_MAX_DATA == 1000
    assert cloudwatch_batches([], "ns") == []


def _query_body_size(namespace: str, batch: list[dict[str, object]]) -> int:
    """The exact size of the request body botocore's query serializer makes for ``batch``."""
    import botocore.session

    loader = botocore.session.get_session().get_component("data_loader")
    model = ServiceModel(loader.load_service_model("cloudwatch", "service-2"), "cloudwatch")
    operation = model.operation_model("PutMetricData")
    request = create_serializer("query").serialize_to_request(
        {"Namespace": namespace, "MetricData": batch}, operation
    )
    # The query protocol gives a dict that botocore form-encodes as the body.
    return len(urlencode(request["body"], doseq=True).encode())


def test_batches_stay_under_the_request_size_limit_as_botocore_serializes_them() -> None:
    # Long dimension values (stream names of 128 characters, escaped ones) make the size
    # limit bind before the count limit.
    long_stream = "é" * 120 + "-x_y.z"
    data = [
        cloudwatch_datum(
            MetricStatistics(
                "ErrorsByCode",
                "Count",
                1,
                1.0,
                1.0,
                1.0,
                long_stream,
                f"shardId-{i:012d}",
                "E" * 200,
            ),
            WHEN,
        )
        for i in range(1500)
    ]
    small = cloudwatch_batches(data, "KinesisProducerLibrary", max_bytes=200_000)
    assert len(small) > 2
    for batch in small:
        assert _query_body_size("KinesisProducerLibrary", batch) <= 200_000
    for batch in cloudwatch_batches(data, "KinesisProducerLibrary"):
        assert len(batch) <= CLOUDWATCH_MAX_DATA
        assert _query_body_size("KinesisProducerLibrary", batch) <= CLOUDWATCH_MAX_BYTES


def test_a_datum_larger_than_the_limit_still_goes_alone() -> None:
    data = [cloudwatch_datum(_stats(i), WHEN) for i in range(3)]
    assert cloudwatch_batches(data, "ns", max_bytes=10) == [[d] for d in data]


def test_prune_drops_only_series_without_values_in_the_ring() -> None:
    table = MetricsTable("summary", "shard")
    old = table.leaf("UserRecordsPut", "s", "shardId-000000000001")
    recent = table.leaf("UserRecordsPut", "s", "shardId-000000000002")
    assert old is not None
    assert recent is not None
    old.add(1, 10.0)
    recent.add(1, 10.0)
    recent.add(1, 70.0)
    assert table.prune(73.9) == 0  # second 10 is still in the ring (64 s)
    assert table.prune(74.0) == 1
    assert table.leaf("UserRecordsPut", "s", "shardId-000000000002") is recent
    assert [m.shard_id for m in table.window(74.0, 60) if m.shard_id] == ["shardId-000000000002"]
    table.leaf("AllErrors", "s")  # never given a value: nothing to keep
    assert table.prune(74.0) == 1
