"""moto's Kinesis model, used directly by the local servers (:mod:`aiokpl.testing._servers`,
:mod:`aiokpl.testing._throttling`): finding a request's stream (and whether moto knows its
region) as moto would, placing its records on shards (by key as moto does, or at random on an
``AUTO`` stream, which moto knows nothing of), telling whether its records can be handed to the
model as they are, keeping a stream's record distribution strategy, and mending the model's one
cost that grows with what it stores.

A stream's ``RecordDistributionStrategy`` lives on moto's ``Stream`` object itself (the
attribute :data:`_DISTRIBUTION`), so it goes with the stream when the stream is deleted or
moto's state is reset; it takes effect only while the stream is on-demand, as on the service.

moto is imported inside the functions: it is an optional dependency (the ``local`` extra).
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping
from typing import Any

__all__ = (
    "AUTO",
    "DISTRIBUTIONS",
    "USER_PARTITION_KEY",
    "MissingKey",
    "distribution_of",
    "find_stream",
    "is_auto",
    "mend_shards",
    "on_demand",
    "place",
    "set_distribution",
    "storable",
    "unknown_region",
)

AUTO = "AUTO"
USER_PARTITION_KEY = "USER_PARTITION_KEY"
DISTRIBUTIONS = (AUTO, USER_PARTITION_KEY)
"""The values of ``RecordDistributionStrategy``, in the API model's order."""

_DISTRIBUTION = "aiokpl_record_distribution"
_ACCESS_KEY = re.compile(r"Credential=([^/,]+)/")
_MAX_HASH_KEY = 2**128 - 1


class MissingKey(Exception):
    """A record without a partition key, for a stream that places records by key."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


def find_stream(environ: Mapping[str, Any], body: Mapping[str, Any]) -> Any:
    """moto's ``Stream`` the request names (``StreamName`` or ``StreamARN`` of ``body``).

    The backend is found as moto finds it for the request: the account from
    ``MOTO_ACCOUNT_ID``, else the ``x-moto-account-id`` header, else the access key; the
    region from the signature's credential scope. ``environ`` is the request's WSGI
    environment.

    Raises:
        Exception: moto's own error (``ResourceNotFoundException``: no such stream).
    """
    from moto.kinesis.models import kinesis_backends

    account, region = _account_and_region(environ)
    return kinesis_backends[account][region].describe_stream(
        stream_arn=body.get("StreamARN"), stream_name=body.get("StreamName")
    )


def _account_and_region(environ: Mapping[str, Any]) -> tuple[str, str]:
    """The account and region moto serves a request in (see :func:`find_stream`)."""
    from moto.iam.models import get_account_id_from

    authorization = str(environ.get("HTTP_AUTHORIZATION", ""))
    account = os.environ.get("MOTO_ACCOUNT_ID") or environ.get("HTTP_X_MOTO_ACCOUNT_ID")
    if not account:
        found = _ACCESS_KEY.search(authorization)
        account = get_account_id_from(found.group(1) if found else "AKIAEXAMPLE")
    scope = authorization.split(",")[0].split("/")
    region = scope[2] if "AWS4" in authorization and len(scope) >= 3 else "us-east-1"
    return str(account), region


def unknown_region(environ: Mapping[str, Any]) -> str | None:
    """The region a request is signed for, if moto has no Kinesis there (it would raise
    ``KeyError`` deep in its backend, answered as an HTML 500 with a traceback logged)."""
    from moto.kinesis.models import kinesis_backends
    from moto.settings import allow_unknown_region

    account, region = _account_and_region(environ)
    if region in kinesis_backends[account] or allow_unknown_region():
        return None
    return region


def distribution_of(stream: Any) -> str:
    """The record distribution strategy set on moto's ``stream`` (``USER_PARTITION_KEY`` unless
    set), whatever its capacity mode."""
    return str(getattr(stream, _DISTRIBUTION, USER_PARTITION_KEY))


def set_distribution(stream: Any, strategy: str) -> None:
    """Keep ``strategy`` on moto's ``stream``."""
    setattr(stream, _DISTRIBUTION, strategy)


def on_demand(stream: Any) -> bool:
    """Whether moto's ``stream`` is in on-demand capacity mode."""
    return bool(stream.stream_mode.get("StreamMode") == "ON_DEMAND")


def is_auto(stream: Any) -> bool:
    """Whether the server, not the records' keys, places ``stream``'s records: an on-demand
    stream whose strategy is ``AUTO``."""
    return getattr(stream, _DISTRIBUTION, None) == AUTO and on_demand(stream)


def place(
    stream: Any, records: list[Mapping[str, Any]], auto: bool, placement: random.Random
) -> list[str] | None:
    """The shard id of each record, or ``None`` when moto finds no shard for one (it then
    answers the request itself).

    By key as moto places them (``Stream.get_shard_for_key``), or, on an ``AUTO`` stream, each
    on an open shard drawn from ``placement`` (one draw per record), its keys ignored but
    checked as moto checks them.

    Raises:
        MissingKey: A record has no partition key and the stream is not ``AUTO``.
        Exception: moto's own error for a key it refuses.
    """
    from moto.kinesis.exceptions import InvalidArgumentError

    if auto:
        for record in records:
            key: Any = record.get("PartitionKey")
            explicit: Any = record.get("ExplicitHashKey")
            if key is not None and (not isinstance(key, str) or len(key) > 256):
                raise InvalidArgumentError("partition_key")
            if explicit is not None and (
                not isinstance(explicit, str)
                or not explicit.isdecimal()
                or int(explicit) > _MAX_HASH_KEY
            ):
                raise InvalidArgumentError("explicit_hash_key")
        shards = [shard.shard_id for shard in stream.shards.values() if shard.is_open]
        return [shards[placement.randrange(len(shards))] for _ in records]
    placed = []
    for index, record in enumerate(records):
        key = record.get("PartitionKey")
        if key is None:
            raise MissingKey(index)
        shard = stream.get_shard_for_key(key, record.get("ExplicitHashKey"))
        if shard is None:
            return None
        placed.append(shard.shard_id)
    return placed


def storable(records: list[Mapping[str, Any]], *, keyless: bool = False) -> bool:
    """Whether moto's model can be given these records as they are (the fast path): data
    and partition keys are strings (a partition key may be missing if ``keyless``: an
    ``AUTO`` stream), hash keys strings if given. Anything else goes through moto's whole
    request handling, which answers it as moto does."""
    for record in records:
        key = record.get("PartitionKey")
        explicit = record.get("ExplicitHashKey")
        if not (
            isinstance(record.get("Data"), str)
            and (isinstance(key, str) or (keyless and key is None))
            and (explicit is None or isinstance(explicit, str))
        ):
            return False
    return True


def mend_shards() -> None:
    """Give moto's ``Shard`` constant-time first and last sequence numbers.

    Its records are a dict keyed by sequence number, inserted in increasing order (each is
    the last plus one), so the first and last keys are the smallest and largest; moto copies
    every key into a list to find them, once per record stored. Same answers, read from the
    dict's ends. Idempotent.
    """
    from moto.kinesis.models import Shard

    def get_min_sequence_number(self: Any) -> int:
        return next(iter(self.records), 0)

    def get_max_sequence_number(self: Any) -> int:
        return next(reversed(self.records), 0)

    Shard.get_min_sequence_number = get_min_sequence_number  # type: ignore[method-assign]
    Shard.get_max_sequence_number = get_max_sequence_number  # type: ignore[method-assign]
