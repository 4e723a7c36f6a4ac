"""aiokpl: an async-native Kinesis producer for asyncio and trio.

The public names live here (and in ``aiokpl.aggregation``, ``aiokpl.tracing``,
``aiokpl.coordination`` and ``aiokpl.testing``); everything in a module whose name starts with
``_`` is private.
"""

from ._blocking.producer import SyncProducer as SyncProducer
from ._core.config import Config as Config
from ._core.errors import AggregationFormatError as AggregationFormatError
from ._core.errors import AiokplError as AiokplError
from ._core.errors import BufferFullError as BufferFullError
from ._core.errors import ConfigError as ConfigError
from ._core.errors import InvalidRecordError as InvalidRecordError
from ._core.errors import InvalidRecordTypeError as InvalidRecordTypeError
from ._core.errors import ProducerClosedError as ProducerClosedError
from ._core.health import Health as Health
from ._core.health import HealthReason as HealthReason
from ._core.metrics import MetricStatistics as MetricStatistics
from ._core.results import Attempt as Attempt
from ._core.results import FailedRecord as FailedRecord
from ._core.results import RecordFailedError as RecordFailedError
from ._core.results import RecordResult as RecordResult
from ._core.statistics import ProducerStatistics as ProducerStatistics
from ._core.statistics import SpoolStatistics as SpoolStatistics
from ._core.statistics import StreamStatistics as StreamStatistics
from ._core.token_bucket import TokenBucket as TokenBucket
from ._metrics.otel import OpenTelemetrySink as OpenTelemetrySink
from ._metrics.prometheus import PrometheusSink as PrometheusSink
from ._metrics.recorder import CloudWatchSink as CloudWatchSink
from ._metrics.recorder import MetricsSink as MetricsSink
from ._outcome import Outcome as Outcome
from ._producer.producer import Producer as Producer
from ._public import present_as_public as _present_as_public
from ._rate_limiter import RateLimiter as RateLimiter
from ._rate_limiter import RateLimiterStatistics as RateLimiterStatistics
from ._spool.writer import SpoolError as SpoolError
from ._version import __version__ as __version__

__all__ = (
    "AggregationFormatError",
    "AiokplError",
    "Attempt",
    "BufferFullError",
    "CloudWatchSink",
    "Config",
    "ConfigError",
    "FailedRecord",
    "Health",
    "HealthReason",
    "InvalidRecordError",
    "InvalidRecordTypeError",
    "MetricStatistics",
    "MetricsSink",
    "OpenTelemetrySink",
    "Outcome",
    "Producer",
    "ProducerClosedError",
    "ProducerStatistics",
    "PrometheusSink",
    "RateLimiter",
    "RateLimiterStatistics",
    "RecordFailedError",
    "RecordResult",
    "SpoolError",
    "SpoolStatistics",
    "StreamStatistics",
    "SyncProducer",
    "TokenBucket",
    "__version__",
)

# Tracebacks and reprs name aiokpl.X, the name to import, not the private module.
_present_as_public(__name__, globals(), __all__)
