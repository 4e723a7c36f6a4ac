"""Read and write the KPL aggregation format, on its own, without a producer.

The producer packs many small user records into one Kinesis record (an *aggregate*) in the
format of the C++ Kinesis Producer Library, so that any KPL-aware consumer (the KCL, AWS's
``aws_kinesis_agg`` deaggregators, Lambda with a deaggregation library) reads them back. This
module is that format, for consumers and for tests:

* ``deaggregate`` / ``deaggregate_records``: split the records a consumer receives
  (from ``get_records``, or a Lambda Kinesis event) into user records, passing records that
  are not aggregates through unchanged (a record stored without a partition key, on an
  ``AUTO`` stream, with ``partition_key=None``); with ``shard=``, dropping the user records
  outside that shard's hash key range, as the KCL does;
* ``decode`` / ``is_aggregated``: the same on raw bytes, strictly;
* ``encode`` and ``AggregateBuilder``: build aggregates yourself;
* ``Tag``: a user record's tag (the format's ``Record.tags``), as ``put_record(tags=...)``
  writes and ``deaggregate`` returns them;
* ``Deduper``: drops the copies of user records it has already seen, by the producer identity
  in their tags (``identity_tag``, ``identity_of``; the ``aiokpl.id`` tag), in bounded memory,
  with an optional ``DeduperStore`` (``JsonFileStore``) for consumers that restart.

Example:
    ```python
    from aiokpl.aggregation import deaggregate_records

    def process(partition_key: str | None, data: bytes) -> None: ...

    def handler(event, context):  # an AWS Lambda function reading a Kinesis stream
        for record in deaggregate_records(event):
            process(record.partition_key, record.data)
    ```
"""

from __future__ import annotations

from ._core.deaggregation import deaggregate as deaggregate
from ._core.deaggregation import deaggregate_records as deaggregate_records
from ._core.decoder import decode as decode
from ._core.decoder import is_aggregated as is_aggregated
from ._core.encoder import AggregateBuilder as AggregateBuilder
from ._core.encoder import encode as encode
from ._core.errors import AggregationFormatError as AggregationFormatError
from ._core.identity import IDENTITY_KEY as IDENTITY_KEY
from ._core.identity import Identity as Identity
from ._core.identity import IdentityTagError as IdentityTagError
from ._core.identity import identity_of as identity_of
from ._core.identity import identity_tag as identity_tag
from ._core.identity import new_producer_id as new_producer_id
from ._core.wire import FRAMING_OVERHEAD as FRAMING_OVERHEAD
from ._core.wire import MAGIC as MAGIC
from ._core.wire import DeaggregatedRecord as DeaggregatedRecord
from ._core.wire import Record as Record
from ._core.wire import Tag as Tag
from ._core.wire import Tags as Tags
from ._dedupe import Deduper as Deduper
from ._dedupe import DeduperStatistics as DeduperStatistics
from ._dedupe import DeduperStore as DeduperStore
from ._dedupe import JsonFileStore as JsonFileStore
from ._dedupe import Verdict as Verdict
from ._public import present_as_public as _present_as_public

__all__ = (
    "FRAMING_OVERHEAD",
    "IDENTITY_KEY",
    "MAGIC",
    "AggregateBuilder",
    "AggregationFormatError",
    "DeaggregatedRecord",
    "Deduper",
    "DeduperStatistics",
    "DeduperStore",
    "Identity",
    "IdentityTagError",
    "JsonFileStore",
    "Record",
    "Tag",
    "Tags",
    "Verdict",
    "deaggregate",
    "deaggregate_records",
    "decode",
    "encode",
    "identity_of",
    "identity_tag",
    "is_aggregated",
    "new_producer_id",
)

# Tracebacks and reprs name aiokpl.aggregation.X, the name to import, not the private module.
_present_as_public(__name__, globals(), __all__)
