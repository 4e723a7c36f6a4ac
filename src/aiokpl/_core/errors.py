"""The exceptions aiokpl raises.

One base class, :class:`AiokplError`, and subclasses that say whose fault a problem is:

* *you closed it*: :class:`ProducerClosedError`;
* *you are going faster than the producer can absorb*: :class:`BufferFullError`;
* *your input is wrong* (checked locally, before anything is sent): :class:`InvalidRecordError`,
  :class:`InvalidRecordTypeError`, :class:`ConfigError`; they are also ``ValueError`` /
  ``TypeError`` so code that catches the built-in kinds keeps working;
* *Kinesis (or the network) rejected it*: ``RecordFailedError``, raised only when you ask for
  it with ``RecordResult.raise_for_failure``; it lives beside the result it carries, in
  ``results.py`` (so this module imports nothing, and ``results`` imports this one);
* *bytes that are not a KPL aggregate*: :class:`AggregationFormatError`.

Record failures are data, not exceptions: the producer never raises because a record failed;
its :class:`~aiokpl.RecordResult` says so.
"""

__all__ = (
    "AggregationFormatError",
    "AiokplError",
    "BufferFullError",
    "ConfigError",
    "InvalidRecordError",
    "InvalidRecordTypeError",
    "ProducerClosedError",
)


class AiokplError(Exception):
    """Base class of every exception aiokpl defines.

    Catch it to handle anything aiokpl raises on purpose; programming errors in your own code
    (and bugs in ours) still surface as ordinary exceptions.
    """


class ProducerClosedError(AiokplError, RuntimeError):
    """Raised by ``put_record`` once the producer has been closed (its ``async with`` exited).

    The producer cannot be restarted: create a new one. Records put before the close are not
    affected; each of their outcomes resolves normally. It is a ``RuntimeError`` too (using a
    closed object is a state error), so code written for aiokpl 0.2.0, which raised a plain
    ``RuntimeError``, keeps catching it.
    """


class BufferFullError(AiokplError):
    """Raised by ``put_record_nowait`` when accepting the record would exceed
    ``Config.max_outstanding_records`` or ``Config.max_outstanding_bytes`` (and by
    ``SyncProducer.put_record`` when no room came within its ``timeout``).

    Use ``await put_record(...)`` to wait for room instead, or retry later. The producer is
    unaffected and nothing was enqueued.
    """


class InvalidRecordError(AiokplError, ValueError):
    """Raised synchronously by ``put_record`` for a value Kinesis would reject.

    The message names the field and the limit (for example a partition key longer than 256
    characters, or data plus key larger than ``max_record_size``). Nothing was enqueued and the
    producer keeps working: fix the record and put it again.
    """


class InvalidRecordTypeError(AiokplError, TypeError):
    """Raised synchronously by ``put_record`` for an argument of the wrong type.

    For example a partition key that is not ``str`` or data that is not bytes-like. Nothing was
    enqueued and the producer keeps working.
    """


class ConfigError(AiokplError, ValueError):
    """Raised when a :class:`~aiokpl.Config` is built with a value outside its allowed range.

    The message names the field, the value given and the allowed range.
    """


class AggregationFormatError(AiokplError, ValueError):
    """Raised by :func:`aiokpl.aggregation.decode` for bytes that are not a valid KPL aggregate.

    That is: the magic prefix is missing, the MD5 digest does not match, or the protobuf body is
    malformed. :func:`aiokpl.aggregation.deaggregate` does not raise it for a missing prefix or
    a bad digest: like AWS's deaggregators, it passes such a blob through as one record.
    """
