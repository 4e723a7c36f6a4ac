"""The port a ``SyncProducer`` enters records through, into the producer it hosts on its loop.

A :class:`~aiokpl.SyncProducer` checks each record in its caller's thread (with an
:class:`~aiokpl._admission.Admission` of the same config as the async producer's: the record
comes back built) and hands the record over to its loop, which enters it as it is, without
checking it again: through a :class:`ProducerPort` (``aiokpl._producer.producer.port_of``), the same
:meth:`~aiokpl._intake.Intake.enter` as the async put paths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._core.errors import InvalidRecordError
from .._core.results import Attempt

if TYPE_CHECKING:
    from .._record import UserRecord
    from .intake import Intake

__all__ = ("ProducerPort",)


@dataclass(frozen=True, slots=True)
class ProducerPort:
    """What :class:`aiokpl.SyncProducer` needs of a running producer beyond its public API.

    Attributes:
        intake: the producer's way in.
        flush_now: send everything buffered (of a stream, or all) without waiting.
    """

    intake: Intake
    flush_now: Callable[[str | None], None]

    def put(self, record: UserRecord, hash_key: int, *, force: bool = False) -> UserRecord | None:
        """Enter ``record`` (checked in a caller's thread); ``None`` (nothing entered) when
        there is no room, unless ``force``.

        With ``Config.record_identities``, a record may not fit with its identity tag; it
        cannot be refused in its caller's thread any more: it fails ``"InvalidRecord"`` here.
        """
        intake = self.intake
        if not force and not intake.has_room(record.size):
            return None
        try:
            return intake.enter(record, hash_key)
        except InvalidRecordError as exc:
            record.add_attempt(Attempt(0.0, 0.0, 0.0, False, "InvalidRecord", str(exc)))
            record.resolve()
            return record

    async def put_when_room(self, record: UserRecord, hash_key: int) -> UserRecord:
        """:meth:`put`, once there is room (while failure callbacks hold records)."""
        await self.intake.wait_for_room(record.size)
        put = self.put(record, hash_key, force=True)
        assert put is not None
        return put
