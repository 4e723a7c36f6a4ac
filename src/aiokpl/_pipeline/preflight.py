"""A stream's opt-in start-up check (``Config.dry_run_check``): ``PutRecords`` with
``DryRun=True`` before its first record is sent.

The service checks such a request as it would a real one (the stream, the caller's
permission, the request's shape), stores nothing and answers ``DryRunOperationException``:
that error is the check's success. Anything else says why records would fail, and is said
once, as a line in the log, before the first record goes: ``AccessDeniedException`` (the
policy lacks ``kinesis:PutRecords``, or a KMS key's) as an error naming the permission, any
other code as a warning. The stream's records wait for the answer as they wait for the first
map (within their deadline: the router's start-up hold), and go whatever it says: the check
informs, it does not refuse.

Why opt-in: the call is billed and limited like any ``PutRecords`` (the service allows one dry
run a second per stream), and a server that does not know ``DryRun`` (moto, kinesalite; not
``aiokpl local``, which answers as the service does) stores its one record, an empty one
under the partition key ``"aiokpl-dry-run"``. The KPL has no such check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from .._core.listings import UnusableAnswer
from .._kinesis import call_control, stream_argument
from .shard_map_logs import brief

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .._kinesis import KinesisClient

__all__ = ("DRY_RUN_PASSED", "Preflight")

logger = logging.getLogger("aiokpl")

DRY_RUN_PASSED = "DryRunOperationException"
"""The answer of a dry run that would have succeeded."""

_DENIED = "AccessDeniedException"
_PROBE = {"Data": b"", "PartitionKey": "aiokpl-dry-run"}


class Preflight:
    """The dry run of one stream.

    Attributes:
        outcome: ``None`` until answered; then the code the dry run came back with
            (:data:`DRY_RUN_PASSED` when records would be taken), or ``"Stored"`` if the server
            ignored ``DryRun`` and stored the probe.
        on_done: called once the dry run has ended, whatever its outcome.
    """

    def __init__(
        self,
        stream: str,
        client: KinesisClient,
        task_group: TaskGroup,
        *,
        request_timeout: float,
        step: Callable[[], AbstractContextManager[None]] = nullcontext,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self.stream = stream
        self._step = step
        self._client = client
        self._task_group = task_group
        self._request_timeout = request_timeout
        self.outcome: str | None = None
        self.on_done = on_done

    def start(self) -> None:
        """Run the dry run, in the background."""
        self._task_group.start_soon(self._run, name=f"aiokpl dry run {self.stream}")

    async def _run(self) -> None:
        try:
            await call_control(
                self._client,
                "put_records",
                self._request_timeout,
                **stream_argument(self.stream),
                Records=[_PROBE],
                DryRun=True,
            )
        except UnusableAnswer as failure:
            self._answered(failure.code, failure.message)
        else:
            self._answered("Stored", "")
        finally:
            if self.on_done is not None:
                with self._step():
                    self.on_done()

    def _answered(self, code: str, message: str) -> None:
        self.outcome = code
        if code == DRY_RUN_PASSED:
            logger.debug("dry run of PutRecords to stream %r: records would be taken", self.stream)
        elif code == _DENIED:
            logger.error(
                "PutRecords is denied for stream %r (%s: %s): every record put to it will "
                "fail. Grant kinesis:PutRecords on the stream (and kms:GenerateDataKey on its "
                "key, if it is encrypted with a customer managed key) to the producer's role.",
                self.stream,
                code,
                brief(message),
            )
        elif code == "Stored":
            logger.warning(
                "the server of stream %r does not know DryRun: it stored the dry run's empty "
                "record (partition key 'aiokpl-dry-run'); turn Config.dry_run_check off for it",
                self.stream,
            )
        else:
            logger.warning(
                "dry run of PutRecords to stream %r failed (%s: %s): records may fail alike",
                self.stream,
                code,
                brief(message),
            )
