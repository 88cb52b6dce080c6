"""``with client.batch(...) as b:``: a batch's lifecycle around a block of code."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .errors import BatchFailed, BatchgateError, BatchNotCommitted, ChecksFailed, Conflict
from .models import BatchRecord, PartitionStats, Residue, SourceStats, StartedBatch

if TYPE_CHECKING:
    from .client import BatchgateClient

log = logging.getLogger(__name__)

#: The lease the service gives a batch started without ``lease_seconds``.
DEFAULT_LEASE_SECONDS = 3600

#: Longest failure message sent; a traceback-sized message helps nobody in a registry row.
MAX_MESSAGE_CHARS = 2000


class BatchRun:
    """One started batch, used as a context manager (see :meth:`BatchgateClient.batch`)."""

    def __init__(
        self,
        client: BatchgateClient,
        start: dict[str, Any],
        *,
        heartbeat_interval: float | None = None,
    ) -> None:
        self._client = client
        self._start = start
        lease = start.get("lease_seconds") or DEFAULT_LEASE_SECONDS
        self.heartbeat_interval = (
            heartbeat_interval if heartbeat_interval is not None else max(1.0, lease / 3)
        )
        self._started: StartedBatch | None = None
        self._heartbeat: _Heartbeat | None = None
        self._decided = False
        self.record: BatchRecord | None = None
        """The published batch, once :meth:`commit` succeeded."""

    @property
    def started(self) -> StartedBatch:
        """The start's answer: batch id, attempt number, lease and residue."""
        if self._started is None:
            raise RuntimeError("the batch has not started: use it in a `with` block")
        return self._started

    @property
    def batch_id(self) -> str:
        return self.started.batch_id

    @property
    def residue(self) -> list[Residue]:
        """Earlier attempts that may have left rows behind: delete their rows before writing."""
        return self.started.residue

    def commit(
        self,
        partitions: Sequence[PartitionStats],
        *,
        marker: str | None = None,
        source: SourceStats | None = None,
    ) -> BatchRecord:
        """Commits the batch with its evidence (see :meth:`BatchgateClient.commit`).

        Raises :class:`ChecksFailed` if the service rejects it; the batch is
        then decided and the block does not report a failure on top.
        """
        try:
            record = self._client.commit(self.batch_id, partitions, marker=marker, source=source)
        except ChecksFailed:
            self._decided = True
            raise
        self._decided = True
        self.record = record
        return record

    def __enter__(self) -> BatchRun:
        self._started = self._client.start_batch(**self._start)
        self._heartbeat = _Heartbeat(self._client, self.batch_id, self.heartbeat_interval)
        self._heartbeat.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self._decided:
            return
        if exc is None:
            message = "the batch block ended without a commit"
            self._client.fail(self.batch_id, stage="write", category="unknown", message=message)
            raise BatchNotCommitted(
                f"batch {self.batch_id}: {message}; it was reported failed",
                code="not_committed",
                details={"batch_id": self.batch_id},
            )
        if isinstance(exc, BatchFailed):
            stage, category, message = exc.stage, exc.category, exc.message
        else:
            stage, category, message = "write", "unknown", f"{type(exc).__name__}: {exc}"
        try:
            self._client.fail(
                self.batch_id, stage=stage, category=category, message=message[:MAX_MESSAGE_CHARS]
            )
        except BatchgateError as report_error:
            # The body's own exception is what the caller needs to see.
            log.error("could not report batch %s failed: %s", self.batch_id, report_error)


class _Heartbeat(threading.Thread):
    """Extends the batch's lease every ``interval`` seconds until stopped."""

    def __init__(self, client: BatchgateClient, batch_id: str, interval: float) -> None:
        super().__init__(name=f"batchgate-heartbeat-{batch_id}", daemon=True)
        # Its own client, so the connection pool goes away with the thread.
        self._client = type(client)(client.base_url, client.token, client.timeout)
        self._batch_id = batch_id
        self._interval = interval
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopping.wait(self._interval):
                try:
                    self._client.heartbeat(self._batch_id)
                except Conflict as e:
                    log.warning(
                        "batch %s is no longer running; heartbeats stop: %s", self._batch_id, e
                    )
                    return
                except BatchgateError as e:
                    log.warning("heartbeat of batch %s failed; retrying: %s", self._batch_id, e)
        finally:
            self._client.close()

    def stop(self) -> None:
        self._stopping.set()
        self.join()
