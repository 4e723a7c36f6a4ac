"""aiokpl: an async-native Kinesis producer for asyncio and trio.

The public names live here; everything in a module whose name starts with ``_`` is private.
"""

from ._core.config import Config as Config
from ._core.errors import AggregationFormatError as AggregationFormatError
from ._core.errors import AiokplError as AiokplError
from ._core.errors import BufferFullError as BufferFullError
from ._core.errors import ConfigError as ConfigError
from ._core.errors import InvalidRecordError as InvalidRecordError
from ._core.errors import InvalidRecordTypeError as InvalidRecordTypeError
from ._core.errors import ProducerClosedError as ProducerClosedError
from ._core.errors import RecordFailedError as RecordFailedError
from ._core.results import Attempt as Attempt
from ._core.results import RecordResult as RecordResult
from ._version import __version__ as __version__

__all__ = (
    "AggregationFormatError",
    "AiokplError",
    "Attempt",
    "BufferFullError",
    "Config",
    "ConfigError",
    "InvalidRecordError",
    "InvalidRecordTypeError",
    "ProducerClosedError",
    "RateLimiter",
    "RateLimiterStatistics",
    "RecordFailedError",
    "RecordResult",
    "TokenBucket",
    "__version__",
)
