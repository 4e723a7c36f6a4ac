"""Test doubles for code that uses aiokpl, or any Kinesis client.

* :class:`FakeKinesis`: an in-process Kinesis Data Streams service with the methods of an
  aiobotocore Kinesis client; pass it wherever a client goes (``Producer(config, client=fake)``),
  then read back what landed (:meth:`FakeKinesis.stored_records`, :class:`StoredRecord`,
  :meth:`FakeKinesis.shards`, :class:`FakeShard`), throttle shards, reshard the stream, or
  script failures (:class:`FaultPlan`, :meth:`FakeKinesis.fail_requests` …). Every call is
  logged as a :class:`Request`.
* :class:`LoopbackKinesis`: the same fake served over real HTTP on 127.0.0.1, for a real
  aiobotocore (or boto3) client, with the faults that live in HTTP: 5xx responses, connection
  resets, slow responses and malformed bodies (:class:`HttpFaultPlan`), counted in
  :class:`LoopbackStatistics`.
* :func:`read_stream`: every record of every shard of a stream, from any client that speaks the
  Kinesis API (the fake, moto's server, kinesalite); :func:`read_as_kcl` reads it as a KCL
  consumer does, keeping each KPL aggregate whole or dropping it whole by the hash keys inside
  it (:func:`deaggregate_as_kcl`, the same rule over records already read).

What the fake models faithfully:

* **routing**: a record goes to the open shard whose hash-key range contains its explicit hash
  key, or else the MD5 of its partition key (big-endian, 0 … 2**128 - 1); new streams split the
  key space evenly, exactly as ``CreateStream`` does;
* **sequence numbers**: decimal strings of a fixed 56 digits without leading zeros, strictly
  increasing in the order records are stored, so string order is numeric order;
* **ListShards pagination**: ``ShardFilter`` types, ``MaxResults`` (default 1000, at most
  10000), ``NextToken`` valid for 300 seconds and only alone (with ``MaxResults`` at most): with
  ``StreamName``, ``StreamARN``, ``ShardFilter``, ``ExclusiveStartShardId`` or
  ``StreamCreationTimestamp`` it is an ``InvalidArgumentException``, as on the service;
* **DescribeStream pagination**: ``Limit`` 1 … 10000 (default 100), yet at most 100 shards a
  page, as the service answers; ``HasMoreShards`` says more remain, and the next page starts
  after ``ExclusiveStartShardId`` (shard id order); closed shards are listed, with their
  ending sequence numbers, as by the service (which lists them until they pass retention);
* **IAM denials**: :meth:`FakeKinesis.deny` makes an operation fail with
  ``AccessDeniedException`` until :meth:`FakeKinesis.allow`, as a policy without the
  permission does;
* **validation**: 1 … 500 records, partition keys of 1 … 256 UTF-16 code units, explicit hash keys
  in range, records within the stream's maximum record size (partition key plus data, 1 MiB
  unless raised), requests within 5 MiB; model constraints answer ``ValidationException``, the
  service's own rules ``InvalidArgumentException``; unknown streams and shards
  ``ResourceNotFoundException``;
* **throttling** (per stream, opt-in): every shard has an exact token bucket of records per
  second and bytes (partition key plus data) per second, 1000 and 1 MiB by default, holding
  ``burst_seconds`` of each; a record that does not fit fails with
  ``ProvisionedThroughputExceededException`` and is not stored, and the clock is
  ``anyio.current_time`` so under a virtual clock the limit is exact;
* **resharding**: ``SplitShard`` and ``MergeShards`` close their parents (which keep their
  records and get an ending sequence number) and open children with the next shard ids;
  ``GetRecords`` at the end of a closed shard returns no ``NextShardIterator`` and lists the
  ``ChildShards``; shard iterators expire after 300 seconds;
* **stream ARNs, one region, one account**: every call takes ``StreamARN`` as it takes
  ``StreamName``; the streams live in the fake's region and account, seen as through a client
  of that region: an ARN outside the service's pattern is a ``ValidationException``, one of
  another region ``ResourceNotFoundException``, one of another account
  ``AccessDeniedException`` (no resource policy grants it);
* **capacity modes**: a stream is ``PROVISIONED`` or ``ON_DEMAND`` (``DescribeStreamSummary``,
  ``DescribeStream``), with the same per-shard limits; :meth:`FakeKinesis.auto_reshard` stands
  in for the service's own scaling of an on-demand stream: it splits the hottest shard (and
  now and then merges the coldest pair) every few seconds of the fake's clock under load;
* **record distribution**: an on-demand stream's ``RecordDistributionStrategy`` is
  ``USER_PARTITION_KEY`` (by key, the default) or ``AUTO`` (``CreateStream``,
  ``UpdateStreamRecordDistributionStrategy``, :meth:`FakeKinesis.set_record_distribution`;
  a provisioned stream refuses it with ``InvalidArgumentException``; the summary of an
  on-demand stream shows it). On ``AUTO`` the partition key and explicit hash key are ignored
  and each record goes to an open shard drawn at random from the fake's seeded generator
  (``placement_seed``); a record may come without a partition key (refused on other streams
  with ``ValidationException``, read back without ``PartitionKey``), and ``PutRecord`` refuses
  ``SequenceNumberForOrdering``. ``DryRun=True`` on a write or a read checks the request and
  answers ``DryRunOperationException``, storing nothing; ``StreamId`` is accepted and ignored.

What it does not model: persistence (everything lives in this object), retention (records
never expire, so the trim horizon is the first record), enhanced fan-out
(``SubscribeToShard``, consumers), encryption, tags, the service's exact on-demand scaling
rules, resource policies (other accounts), transitional stream states (creating, deleting and
resharding are instantaneous), read throughput limits, and control-plane and account limits.
Where botocore itself refuses a request before sending it (a parameter of the wrong type,
missing or unknown), the fake raises ``TypeError``; like botocore's ``ParamValidationError`` it
is not a ``ClientError``.

Every call is logged in :attr:`FakeKinesis.requests`, passes exactly one checkpoint (or sleeps
:attr:`FakeKinesis.latency` seconds) before doing anything, so concurrent callers interleave as
they do with real I/O, then fails if its operation is denied (:meth:`FakeKinesis.deny`), then
consumes the earliest scripted fault that applies to it (faults may be scoped to one
stream), then the random ones of :attr:`FakeKinesis.faults`.
"""

from __future__ import annotations

from .._public import present_as_public as _present_as_public
from ._fake import FakeKinesis as FakeKinesis
from ._fake import Request as Request
from ._faults import FaultPlan as FaultPlan
from ._http_faults import HttpFaultPlan as HttpFaultPlan
from ._kcl import deaggregate_as_kcl as deaggregate_as_kcl
from ._kcl import read_as_kcl as read_as_kcl
from ._loopback import LoopbackKinesis as LoopbackKinesis
from ._loopback import LoopbackStatistics as LoopbackStatistics
from ._read import read_stream as read_stream
from ._streams import FakeShard as FakeShard
from ._streams import StoredRecord as StoredRecord

__all__ = (
    "FakeKinesis",
    "FakeShard",
    "FaultPlan",
    "HttpFaultPlan",
    "LoopbackKinesis",
    "LoopbackStatistics",
    "Request",
    "StoredRecord",
    "deaggregate_as_kcl",
    "read_as_kcl",
    "read_stream",
)

# Tracebacks and reprs name aiokpl.testing.X, the name to import, not the private module.
_present_as_public(__name__, globals(), __all__)
