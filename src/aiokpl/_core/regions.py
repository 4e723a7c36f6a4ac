"""Whether a region is one AWS has, judged from botocore's partitions, pure.

botocore sends a client of any region to ``kinesis.<region>.<suffix>``, whatever the region
says: a typo (``us-east-11``) fails only when the first request cannot resolve that name, and
every record then expires after ``record_ttl_ms``. The producer judges its own client's region
at start, from botocore's ``partitions.json`` (given here as data):

* an endpoint outside AWS (a host under none of the partitions' DNS suffixes: a local server, a
  proxy) takes any region: nothing is said;
* a region botocore knows (a region of any partition): nothing is said;
* a region botocore does not know that has the shape of a partition's regions (its
  ``regionRegex``): :data:`UNKNOWN`, a warning. New regions appear before every botocore knows
  them, and such a region works once it exists;
* a region of no partition's shape: :data:`NOT_A_REGION`, an error: no AWS endpoint can have
  that name (botocore would send it to the ``aws`` partition's suffix all the same).

Both name the nearest regions botocore knows.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ("NOT_A_REGION", "UNKNOWN", "RegionProblem", "region_problem")

UNKNOWN = "unknown"
NOT_A_REGION = "not_a_region"


class RegionProblem(NamedTuple):
    """What is wrong with a region: ``kind`` (:data:`UNKNOWN` or :data:`NOT_A_REGION`) and
    a message naming it, its endpoint and the nearest known regions."""

    kind: str
    message: str


def _under(host: str, suffix: str) -> bool:
    return host == suffix or host.endswith("." + suffix)


def region_problem(
    region: str, host: str, partitions: Sequence[Mapping[str, Any]], botocore_version: str = ""
) -> RegionProblem | None:
    """What is wrong with ``region`` for a client sending to ``host``, if anything.

    Args:
        region: the client's region.
        host: the host of the client's endpoint URL.
        partitions: the ``partitions`` list of botocore's ``partitions.json``.
        botocore_version: named in the warning (an older botocore knows fewer regions).
    """
    suffixes = {
        suffix
        for partition in partitions
        for key in ("dnsSuffix", "dualStackDnsSuffix")
        if (suffix := partition.get("outputs", {}).get(key))
    }
    if not any(_under(host.lower(), suffix) for suffix in suffixes):
        return None  # not an AWS endpoint: a local server takes any region
    known = sorted({name for partition in partitions for name in partition.get("regions", {})})
    if region in known:
        return None
    near = difflib.get_close_matches(region, known, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(name) for name in near)}?)" if near else ""
    shaped = any(
        re.match(partition.get("regionRegex", r"(?!)"), region) for partition in partitions
    )
    if shaped:
        known_by = f"botocore {botocore_version}" if botocore_version else "botocore"
        return RegionProblem(
            UNKNOWN,
            f"region {region!r} is not one {known_by} knows{hint}: requests go to {host}, "
            "which fails if the region does not exist. A region newer than botocore works; "
            "update botocore to have it known",
        )
    return RegionProblem(
        NOT_A_REGION,
        f"region {region!r} is not an AWS region: it has the shape of no partition's "
        f"regions{hint}, and requests would go to {host}, which cannot exist. Set "
        "Config.region (or AWS_DEFAULT_REGION) to a region such as 'us-east-1', or "
        "Config.endpoint_url to a server of your own",
    )
