"""Codec: our aggregation encoder and decoder against AWS's ``aws_kinesis_agg``, same records.

1M small user records (100-byte data, 4096 partition keys of 8-9 characters, no explicit hash
key) are

* **encoded** the way a producer does it, one record at a time into aggregates cut at 51,200
  bytes: ours with ``AggregateBuilder`` (``try_add`` and ``encode``, as the producer does),
  theirs with ``RecordAggregator.add_user_record``, which hands back a full ``AggRecord``
  whose ``get_contents()`` gives the bytes;
* **decoded** the way a consumer does it, from the aggregates in the shape boto3's
  ``get_records`` returns (``Data``, ``PartitionKey``, ``SequenceNumber``,
  ``ApproximateArrivalTimestamp``): ours with ``deaggregate_records``, theirs with
  ``iter_deaggregate_records(records, data_format="Boto3")``, both to a list of user records.

Both sides' outputs are checked against each other before anything is timed. Each timing is
repeated, alternating the two libraries, and the best time of each is kept. With 4096 keys
nearly every record of an aggregate (about 440 records) brings a new key into its key table;
a second run, for information, uses 16 keys on 200k records, where the tables stay tiny.

Also for information, the headline decode is timed again with the garbage collector disabled
during each call, on both sides: the difference is what the collections triggered by the
million result objects cost each library (the headline figures keep the collector on).

**Any 1 MiB record** (issue 33's target, 50 ms): each shape of ``bench/hostile.py`` at 1 MiB,
the shapes that make a decoder do the most work per byte, deaggregated as a consumer does it,
with the C decoder (the target) and, for information, the pure-Python one; the row gives the
slowest shape of each.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from aiokpl._core import decoder
from aiokpl.aggregation import AggregateBuilder, deaggregate, deaggregate_records, decode

from .hostile import MIB, hostile_aggregates
from .report import Row, ScenarioResult

RECORDS = 1_000_000
QUICK_RECORDS = 100_000
REPEATS = 3
QUICK_REPEATS = 1
KEYS = 4096
FEW_KEYS = 16  # an information-only variant, on a fifth of the records
DATA_SIZE = 100
MAX_SIZE = 51_200
TARGET = 3.0
ANY_RECORD_TARGET_MS = 50.0  # issue 33: any 1 MiB record, whatever its shape


@contextlib.contextmanager
def _saved_sys_path() -> Iterator[None]:
    """``aws_kinesis_agg`` inserts its own directories into ``sys.path`` on import: undo it."""
    saved = list(sys.path)
    try:
        yield
    finally:
        sys.path[:] = saved


def _import_aws() -> tuple[Any, Any]:
    with _saved_sys_path():
        from aws_kinesis_agg import aggregator, deaggregator
    return aggregator, deaggregator


def _records(n: int, nkeys: int = KEYS) -> tuple[list[str], list[bytes]]:
    keys = [f"key-{i}" for i in range(nkeys)]
    base = bytes(range(256)) * (DATA_SIZE // 256 + 1)
    # Distinct data per record, as in real traffic (the 4-byte prefix is the record's index).
    datas = [i.to_bytes(4, "big") + base[: DATA_SIZE - 4] for i in range(n)]
    return [keys[i % nkeys] for i in range(n)], datas


def encode_ours(keys: list[str], datas: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    builder = AggregateBuilder()
    try_add = builder.try_add
    for key, data in zip(keys, datas, strict=True):
        if not try_add(key, data, None, MAX_SIZE):
            out.append(builder.encode())
            builder.clear()
            try_add(key, data, None, MAX_SIZE)
    if builder.count:
        out.append(builder.encode())
    return out


def encode_aws(aggregator_module: Any, keys: list[str], datas: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    aggregator = aggregator_module.RecordAggregator(max_size=MAX_SIZE)
    add = aggregator.add_user_record
    for key, data in zip(keys, datas, strict=True):
        full = add(key, data)
        if full is not None:
            out.append(full.get_contents()[2])
    last = aggregator.clear_and_get()
    if last is not None:
        out.append(last.get_contents()[2])
    return out


def _boto3_shaped(blobs: list[bytes]) -> list[dict[str, Any]]:
    arrival = datetime(2024, 1, 1, tzinfo=timezone.utc)
    return [
        {
            "Data": blob,
            "PartitionKey": "a",
            "SequenceNumber": str(49 * 10**54 + i),
            "ApproximateArrivalTimestamp": arrival,
        }
        for i, blob in enumerate(blobs)
    ]


def decode_ours(records: list[dict[str, Any]]) -> list[Any]:
    return deaggregate_records(records)


def decode_aws(deaggregator_module: Any, records: list[dict[str, Any]]) -> list[Any]:
    return list(deaggregator_module.iter_deaggregate_records(records, data_format="Boto3"))


def _check(
    keys: list[str],
    datas: list[bytes],
    ours: list[bytes],
    theirs: list[bytes],
    aws_deaggregator: Any,
) -> None:
    """Each library reads back the other's aggregates exactly."""
    expected = list(zip(keys, datas, strict=True))
    read_theirs = [(r.partition_key, r.data) for r in deaggregate_records(_boto3_shaped(theirs))]
    if read_theirs != expected:
        raise RuntimeError("codec: aws_kinesis_agg's aggregates do not decode to the input")
    import base64

    read_ours = [
        (r["kinesis"]["partitionKey"], base64.b64decode(r["kinesis"]["data"]))
        for r in decode_aws(aws_deaggregator, _boto3_shaped(ours))
    ]
    if read_ours != expected:
        raise RuntimeError("codec: our aggregates do not decode to the input with aws_kinesis_agg")


def _best(function: Callable[[], Any], samples: list[float]) -> Any:
    start = time.perf_counter()
    out = function()
    samples.append(time.perf_counter() - start)
    return out


def _without_collector(function: Callable[[], Any]) -> Callable[[], Any]:
    """``function`` with the cyclic garbage collector disabled while it runs (information only:
    neither library does this, and the headline figures keep the collector on)."""

    def run() -> Any:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return function()
        finally:
            if enabled:
                gc.enable()

    return run


def _measure(
    n: int, nkeys: int, repeats: int, aws: tuple[Any, Any], collector_off: bool = False
) -> dict[str, Any]:
    """Time both codecs on ``n`` records over ``nkeys`` keys; the best of ``repeats`` each.

    With ``collector_off``, both decoders are also timed with the garbage collector disabled.
    """
    aws_aggregator, aws_deaggregator = aws
    keys, datas = _records(n, nkeys)

    # Correctness first, on a slice (the aws decoder's output is large).
    check = min(n, 20_000)
    _check(
        keys[:check],
        datas[:check],
        encode_ours(keys[:check], datas[:check]),
        encode_aws(aws_aggregator, keys[:check], datas[:check]),
        aws_deaggregator,
    )

    times: dict[str, list[float]] = {k: [] for k in ("encode_ours", "encode_aws")}
    times.update({k: [] for k in ("decode_ours", "decode_aws", "decode_raw_ours")})
    if collector_off:
        times.update({k: [] for k in ("decode_ours_gc_off", "decode_aws_gc_off")})
    ours: list[bytes] = []
    theirs: list[bytes] = []
    for _ in range(repeats):
        ours = _best(lambda: encode_ours(keys, datas), times["encode_ours"])
        theirs = _best(lambda: encode_aws(aws_aggregator, keys, datas), times["encode_aws"])
    shaped = _boto3_shaped(ours)
    for _ in range(repeats):
        out = _best(lambda: decode_ours(shaped), times["decode_ours"])
        if len(out) != n:
            raise RuntimeError(f"codec: decoded {len(out)} records, expected {n}")
        del out
        out = _best(lambda: decode_aws(aws_deaggregator, shaped), times["decode_aws"])
        if len(out) != n:
            raise RuntimeError(f"codec: aws decoded {len(out)} records, expected {n}")
        del out
        _best(lambda: [decode(blob) for blob in ours], times["decode_raw_ours"])
        if collector_off:
            _best(_without_collector(lambda: decode_ours(shaped)), times["decode_ours_gc_off"])
            _best(
                _without_collector(lambda: decode_aws(aws_deaggregator, shaped)),
                times["decode_aws_gc_off"],
            )
    best = {k: min(v) for k, v in times.items()}
    return {
        "records": n,
        "keys": nkeys,
        "repeats": repeats,
        "aggregates_ours": len(ours),
        "aggregates_aws": len(theirs),
        "best_seconds": best,
        "samples_seconds": times,
        "records_per_second": {k: n / v for k, v in best.items()},
    }


@contextlib.contextmanager
def _decoding_with(parse_body: Callable[..., Any], records: Callable[..., Any]) -> Iterator[None]:
    """Decode with the given implementation (the C or the Python one) for the block."""
    saved = decoder.parse_body, decoder.records
    decoder.parse_body, decoder.records = parse_body, records
    try:
        yield
    finally:
        decoder.parse_body, decoder.records = saved


def _any_record(repeats: int) -> dict[str, dict[str, float]]:
    """Milliseconds to deaggregate each hostile 1 MiB shape, best of ``repeats``, per decoder."""
    implementations = {"python": (decoder.parse_body_python, decoder.records_python)}
    if decoder.NATIVE is not None:
        implementations["c"] = (decoder.NATIVE.parse_body, decoder.NATIVE.records)
    found: dict[str, dict[str, float]] = {name: {} for name in implementations}
    for shape, blob in hostile_aggregates(MIB).items():
        record = {"Data": blob, "PartitionKey": "p", "SequenceNumber": "1"}
        for name, implementation in implementations.items():
            samples: list[float] = []
            with _decoding_with(*implementation):
                for _ in range(repeats):
                    _best(functools.partial(deaggregate, record), samples)
            found[name][shape] = min(samples) * 1000
    return found


def _any_record_row(found: dict[str, dict[str, float]]) -> Row:
    def slowest(name: str) -> tuple[str, float]:
        return max(found[name].items(), key=lambda item: item[1])

    python_shape, python_ms = slowest("python")
    if "c" not in found:
        return Row(
            "codec/any 1 MiB record",
            f"the C decoder is not in use (not built, or AIOKPL_NO_EXTENSIONS is set); the "
            f"pure-Python decoder's slowest {python_ms:.0f} ms ({python_shape})",
            f"≤ {ANY_RECORD_TARGET_MS:g} ms",
            python_ms / ANY_RECORD_TARGET_MS,
            "of limit",
            False,
        )
    shape, ms = slowest("c")
    return Row(
        "codec/any 1 MiB record",
        f"slowest of {len(found['c'])} shapes: {ms:.1f} ms ({shape}); the pure-Python decoder's "
        f"slowest {python_ms:.0f} ms ({python_shape})",
        f"≤ {ANY_RECORD_TARGET_MS:g} ms",
        ms / ANY_RECORD_TARGET_MS,
        "of limit",
        ms <= ANY_RECORD_TARGET_MS,
    )


def _rate(per_second: float) -> str:
    if per_second >= 1e6:
        return f"{per_second / 1e6:.2f}M rec/s"
    return f"{per_second / 1000:,.0f}k rec/s"


def run(quick: bool = False, http: bool = False) -> ScenarioResult:
    n = QUICK_RECORDS if quick else RECORDS
    repeats = QUICK_REPEATS if quick else REPEATS
    result = ScenarioResult("codec")
    aws = _import_aws()
    headline = _measure(n, KEYS, repeats, aws, collector_off=True)
    # How the comparison moves with the number of distinct keys per aggregate: information.
    few = _measure(n // 5, FEW_KEYS, max(1, repeats - 1), aws)
    any_record = _any_record(repeats)
    result.details = {
        "data_size": DATA_SIZE,
        "aggregate_max_size": MAX_SIZE,
        "headline": headline,
        "few_keys": few,
        "any_1_mib_record_ms": any_record,
    }
    for variant, measured in (("", headline), (f" ({FEW_KEYS} keys)", few)):
        rates = measured["records_per_second"]
        for what in ("encode", "decode"):
            mine, theirs = rates[f"{what}_ours"], rates[f"{what}_aws"]
            extra = (
                f"; {measured['aggregates_ours']} vs {measured['aggregates_aws']} aggregates"
                if what == "encode"
                else f"; raw decode() {_rate(rates['decode_raw_ours'])}"
            )
            result.rows.append(
                Row(
                    f"codec/{what}{variant}",
                    f"{measured['records']:,} records over {measured['keys']} keys: "
                    f"ours {_rate(mine)}, aws_kinesis_agg {_rate(theirs)}{extra}",
                    f"≥ {TARGET:g}× aws_kinesis_agg" if not variant else "info",
                    mine / theirs,
                    "ours/aws speed",
                    mine / theirs >= TARGET if not variant else None,
                )
            )
    # Information: how much of each decoder's time is the garbage collector's. Both build a
    # million tracked objects (our NamedTuples, which CPython never untracks; their dicts of
    # dicts), so both pay for the collections they trigger over an ever larger heap.
    rates, best = headline["records_per_second"], headline["best_seconds"]
    per_record = {k: v / headline["records"] * 1e9 for k, v in best.items()}
    result.rows.append(
        Row(
            "codec/decode (collector off)",
            f"the same decode, gc disabled during each timed call: ours "
            f"{_rate(rates['decode_ours_gc_off'])}, aws_kinesis_agg "
            f"{_rate(rates['decode_aws_gc_off'])}; the collector costs ours "
            f"{per_record['decode_ours'] - per_record['decode_ours_gc_off']:,.0f} ns, aws "
            f"{per_record['decode_aws'] - per_record['decode_aws_gc_off']:,.0f} ns per record",
            "info",
            rates["decode_ours_gc_off"] / rates["decode_aws_gc_off"],
            "ours/aws speed",
            None,
        )
    )
    result.rows.append(_any_record_row(any_record))
    return result
