"""moto's Kinesis model, used directly by the local servers (:mod:`aiokpl.testing._servers`,
:mod:`aiokpl.testing._throttling`): finding a request's stream and shards as moto would,
telling whether its records can be handed to the model as they are, and mending the model's
one cost that grows with what it stores.

moto is imported inside the functions: it is an optional dependency (the ``local`` extra).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

__all__ = ("locate", "mend_shards", "storable")

_ACCESS_KEY = re.compile(r"Credential=([^/,]+)/")


def locate(
    environ: Mapping[str, Any], body: Mapping[str, Any], records: list[Mapping[str, Any]]
) -> tuple[Any, list[str]] | None:
    """``(moto's stream, the shard id of each record)`` as moto sees them, or ``None`` when
    moto cannot place every record (it then answers the request itself). ``environ`` is the
    request's WSGI environment.

    The backend is found as moto finds it for the request: the account from
    ``MOTO_ACCOUNT_ID``, else the ``x-moto-account-id`` header, else the access key; the
    region from the signature's credential scope.
    """
    from moto.iam.models import get_account_id_from
    from moto.kinesis.models import kinesis_backends

    authorization = str(environ.get("HTTP_AUTHORIZATION", ""))
    account = os.environ.get("MOTO_ACCOUNT_ID") or environ.get("HTTP_X_MOTO_ACCOUNT_ID")
    if not account:
        found = _ACCESS_KEY.search(authorization)
        account = get_account_id_from(found.group(1) if found else "AKIAEXAMPLE")
    scope = authorization.split(",")[0].split("/")
    region = scope[2] if "AWS4" in authorization and len(scope) >= 3 else "us-east-1"
    try:
        stream = kinesis_backends[str(account)][region].describe_stream(
            stream_arn=body.get("StreamARN"), stream_name=body.get("StreamName")
        )
        shards = []
        for record in records:
            key: Any = record.get("PartitionKey")
            explicit: Any = record.get("ExplicitHashKey")
            shard = stream.get_shard_for_key(key, explicit)
            if shard is None:
                return None
            shards.append(shard.shard_id)
    except Exception:  # moto's own errors: let moto answer the request
        return None
    return stream, shards


def storable(records: list[Mapping[str, Any]]) -> bool:
    """Whether moto's model can be given these records as they are (the fast path): data
    and partition keys are strings, hash keys strings if given. Anything else goes through
    moto's whole request handling, which answers it as moto does."""
    for record in records:
        explicit = record.get("ExplicitHashKey")
        if not (
            isinstance(record.get("Data"), str)
            and isinstance(record.get("PartitionKey"), str)
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
