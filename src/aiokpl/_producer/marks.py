"""What a record gets as it enters besides its fields: its place in the durable spool, its
identity, its "create" span.

:class:`Marks` marks a record entering a producer that spools, writes identities or gives
each record a "create" span (``Config.tracing="create"``; the intake calls
:meth:`Marks.mark` once the record is stamped, before it is counted): its place in the spool
(``_spooling.Spool.append``), its ``aiokpl.id`` tag (``_core/identity.py``), its span
(``_tracing.Tracing.create``). The record was built with room for them
(``_record.record_classes``). Without any the producer has no marks.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from .._core.config import Config
from .._core.errors import InvalidRecordError
from .._core.identity import IdentityEncoder, alone_size, identity_tag_size, new_producer_id
from .._core.trace_context import split_trace_tags
from .._record import SpooledRecord, TaggedRecord, UserRecord

if TYPE_CHECKING:
    from .._spool import SpoolRecord
    from .._spooling import Spool
    from .._tracing import Tracing

__all__ = ("Marks", "encoder_of")


class Marks:
    """What a record gets at put besides its fields: its place in the spool, its identity.

    A producer has one only when it spools or writes identities; a record that the identity
    would make too large is refused before anything is counted.

    Args:
        config: the producer's settings.
        spool: the producer's spool, open (its producer id is the identities'), or ``None``.
    """

    __slots__ = (
        "_encoder",
        "_encoders",
        "_max_record_size",
        "_next",
        "_tracing",
        "identities",
        "spool",
    )

    def __init__(self, config: Config, spool: Spool | None, tracing: Tracing | None = None) -> None:
        self.spool = spool
        # Only with Config.tracing "create": each record's create span starts as it enters.
        self._tracing = tracing if tracing is not None and tracing.creates else None
        self._max_record_size = config.max_record_size
        self._encoder: IdentityEncoder | None = None
        if config.record_identities:
            # A spool's producer id (a replay then reuses it), or a new id each run.
            self._encoder = (
                encoder_of(spool.producer_id)
                if spool is not None
                else IdentityEncoder(new_producer_id())
            )
        self._encoders: dict[bytes, IdentityEncoder] = {}  # recovered records' producers
        self._next = 0
        self.identities = config.record_identities

    def mark(self, record: UserRecord) -> None:
        """Mark a record entering the producer (stamped, not yet counted): give it its
        identity tag and frame it into the spool, as configured. The record was built by the
        producer's builder (``_record.record_classes``): a ``SpooledRecord`` when it spools,
        else a ``TaggedRecord``. *Mutates* the record.

        Raises:
            InvalidRecordError: the identity tag would take it over ``max_record_size``
                (nothing was changed).
        """
        spool = self.spool
        seq = spool.next_seq if spool is not None else self._next
        user_tags = record.encoded_tags
        encoder = self._encoder
        if encoder is not None:
            identity = encoder.encode_next(seq)
            size = record.size + len(identity)
            tags = user_tags + identity
            self._check_size(
                record.partition_key, size, len(record.data), record.explicit_hash_key, len(tags)
            )
            assert isinstance(record, TaggedRecord)
            record.encoded_tags = tags
            record.size = size
        if self._tracing is not None:  # every check passed: a span started here ends
            assert isinstance(record, TaggedRecord)
            self._tracing.create(record)
        if spool is None:
            self._next = seq + 1
            return
        assert isinstance(record, SpooledRecord)
        spool.append(
            record.stream,
            record.partition_key,
            record.data,
            record.explicit_hash_key,
            # Its trace context after its tags: a record replayed keeps its context too.
            user_tags + record.trace_tags,
            record.last_end,  # its arrival: stamped, and not attempted yet
        )
        record.in_spool(spool, spool.producer_id, seq)

    def replayed(self, spooled: SpoolRecord) -> SpooledRecord:
        """A recovered record, rebuilt with its original identity and trace context (not
        yet stamped; its trace context goes in its aggregate, as it would have, but no "send"
        span links to it: its spans ended with the producer that put it)."""
        tags, trace_tags = split_trace_tags(spooled.encoded_tags)
        if self.identities:
            encoder = self._encoders.get(spooled.producer_id)
            if encoder is None:
                encoder = self._encoders[spooled.producer_id] = encoder_of(spooled.producer_id)
            tags += encoder.encode_next(spooled.sequence_number)
        spool = self.spool
        assert spool is not None
        key = spooled.partition_key
        record = SpooledRecord(
            spooled.stream,
            key,
            spooled.data,
            spooled.explicit_hash_key,
            len(key.encode()) + len(spooled.data) + len(tags),
            tags,
        )
        record.trace_tags = trace_tags
        record.in_spool(spool, spooled.producer_id, spooled.sequence_number)
        return record

    def check_group(self, records: list[UserRecord]) -> None:
        """Check that a ``put_records`` group's records fit with their identities, before any
        is marked (a group is taken whole or not at all).

        Raises:
            InvalidRecordError: one would not fit (the message starts with ``records[i]``).
        """
        if self._encoder is None:
            return
        spool = self.spool
        last = (spool.next_seq if spool is not None else self._next) + len(records)
        extra = identity_tag_size(last)  # the group's longest identity
        for index, record in enumerate(records):
            try:
                self._check_size(
                    record.partition_key,
                    record.size + extra,
                    len(record.data),
                    record.explicit_hash_key,
                    len(record.encoded_tags) + extra,
                )
            except InvalidRecordError as exc:
                raise InvalidRecordError(f"records[{index}]: {exc}") from None

    def _check_size(
        self, key: str, size: int, data_size: int, ehk: str | None, tags_size: int
    ) -> None:
        # Quick: the aggregate of one is at most 2 keys, data, tags and 48 bytes besides (a
        # key is at most 1,024 UTF-8 bytes); exact only near the limit.
        extra = len(ehk) if ehk is not None else 0
        if size + 1024 + 48 + extra <= self._max_record_size:
            return
        alone = alone_size(len(key.encode()), data_size, ehk, tags_size)
        if alone > self._max_record_size:
            raise InvalidRecordError(
                f"data plus partition_key plus tags, with the record's identity tag "
                f"(Config.record_identities), is {alone} bytes sent alone (as an aggregate of "
                f"one), over max_record_size ({self._max_record_size})"
            )


def encoder_of(producer_id: bytes) -> IdentityEncoder:
    """The identity encoder of a spool's producer id (16 bytes, rendered as identities are)."""
    return IdentityEncoder(base64.urlsafe_b64encode(producer_id).rstrip(b"=").decode())
