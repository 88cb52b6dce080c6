"""Exceptions raised by the batchgate client.

Every error the service answers is ``{"error": {"code", "message", "details"}}``;
the exception carries those fields and the HTTP status, so callers can match on
the stable ``code`` rather than on message text.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import BatchRecord, CheckResult, Readiness


class BatchgateError(Exception):
    """Base class of every error this package raises."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "client_error",
        details: dict[str, Any] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}
        self.status = status

    def __str__(self) -> str:
        where = f"HTTP {self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.message}"


class InvalidRequest(BatchgateError):
    """The service refused the request as malformed or invalid (400, 413, 422).

    ``details["field"]`` names the offending field when the service knows it.
    """


class NotFound(BatchgateError):
    """No such batch, dataset or route (404 outside ``/ready``)."""


class Conflict(BatchgateError):
    """The request contradicts the registry's state (409), e.g. ``already_decided``."""


class BatchInProgress(Conflict):
    """Another batch holds a live lease on one of the partitions (409 ``batch_in_progress``).

    ``details`` name that batch: ``batch_id``, ``partitions``, ``lease_expires_at``.
    """


class ServerError(BatchgateError):
    """The service failed (5xx); the registry is as it was before the request."""


class ServiceUnavailable(ServerError):
    """The service could not be reached, timed out, or answered 502/503/504.

    Safe to retry: nothing was changed, or (for commit and fail, which are
    idempotent) repeating the identical request returns the same answer.
    """


class ChecksFailed(BatchgateError):
    """A commit was rejected (422 ``checks_failed``): the batch is now ``rejected``.

    ``batch`` is the full batch record with every check; ``failed_checks`` the
    checks whose status is ``fail``.
    """

    def __init__(
        self,
        message: str,
        *,
        batch: BatchRecord,
        code: str = "checks_failed",
        details: dict[str, Any] | None = None,
        status: int | None = 422,
    ) -> None:
        super().__init__(message, code=code, details=details, status=status)
        self.batch = batch

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.batch.checks if c.status == "fail"]

    def __str__(self) -> str:
        # The failed checks, once each, with what was observed and expected;
        # the service's message says the same in other words.
        failed = self.failed_checks
        lines = [f"batch {self.batch.batch_id} rejected: {len(failed)} check(s) failed"]
        for c in failed:
            place = f" {c.partition}" if c.partition is not None else ""
            lines.append(
                f"  {c.name}{place}: observed {_show(c.observed)}, "
                f"expected {_show(c.expected)}: {c.message}"
            )
        return "\n".join(lines)


def _show(value: Any) -> str:
    """A check's observed or expected value as JSON would show it."""
    return json.dumps(value, ensure_ascii=False)


class BatchFailed(Exception):
    """Raise inside ``client.batch(...)`` to report a failure with its stage and category.

    ``stage`` is where the task stopped (``read``, ``compute``, ``write``,
    ``verify``: :data:`~batchgate.models.FAIL_STAGES`): a failure at
    ``read``/``compute`` wrote nothing and leaves the earlier version ready.
    ``category`` is ``resource``, ``data``, ``logic``, ``partial_write`` or
    ``unknown`` (:data:`~batchgate.models.FAIL_CATEGORIES`).
    """

    def __init__(self, message: str, *, stage: str = "write", category: str = "unknown") -> None:
        super().__init__(message)
        self.message = message
        self.stage = stage
        self.category = category


class BatchNotCommitted(BatchgateError):
    """A ``client.batch(...)`` block ended without committing; the batch was reported failed."""


class PartitionRejected(BatchgateError):
    """``wait_ready(fail_on_rejected=True)`` saw the latest batch of a partition rejected."""

    def __init__(self, readiness: Readiness) -> None:
        super().__init__(
            f"{readiness.describe()}: the latest batch was rejected",
            code="rejected",
            details=readiness.body,
            status=404,
        )
        self.readiness = readiness


class WaitTimeout(BatchgateError, TimeoutError):
    """``wait_ready`` gave up: the partitions were not ready within its timeout."""

    def __init__(self, message: str, readiness: Readiness | None) -> None:
        super().__init__(
            message,
            code="timeout",
            details=readiness.body if readiness is not None else {},
            status=None,
        )
        self.readiness = readiness
