"""The HTTP contract shared by the blocking client and the async Airflow trigger.

Building the ``/ready`` query and turning a status and body into a result or
an exception lives here once, whichever library sent the request.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Union

from .errors import (
    BatchgateError,
    BatchInProgress,
    Conflict,
    InvalidRequest,
    NotFound,
    ServerError,
    ServiceUnavailable,
)
from .models import Readiness

#: The longest ``/ready?wait=`` the service accepts, in seconds.
MAX_WAIT_SECONDS = 300.0

DateLike = Union[str, datetime.date]
QueryParams = list[tuple[str, str]]
#: A partition a batch reads: ``{"dataset", "partition"}``, a ``(dataset,
#: partition)`` pair, or ``"dataset:partition"``.
InputLike = Union[Mapping[str, Any], tuple[str, str], str]


def input_ref(value: InputLike) -> dict[str, str]:
    """An input as the service takes it, ``{"dataset", "partition"}``."""
    if isinstance(value, str):
        # Dataset names may hold ":", partitions may not begin with one: split
        # at the last ":" before the partition's first "=".
        key_end = value.find("=")
        at = value.rfind(":", 0, key_end if key_end >= 0 else len(value))
        if at <= 0 or at + 1 >= len(value):
            raise ValueError(f"expected 'dataset:partition', got {value!r}")
        return {"dataset": value[:at], "partition": value[at + 1 :]}
    if isinstance(value, tuple):
        dataset, partition = value
        return {"dataset": str(dataset), "partition": str(partition)}
    return {"dataset": str(value["dataset"]), "partition": str(value["partition"])}


def format_dt(dt: DateLike) -> str:
    """A data date as the service spells it, ``YYYY-MM-DD``."""
    if isinstance(dt, datetime.datetime):
        return dt.date().isoformat()
    if isinstance(dt, datetime.date):
        return dt.isoformat()
    return dt


def format_seconds(seconds: float) -> str:
    """Seconds as a short decimal (``300``, ``2.5``), as ``wait=`` takes them."""
    return f"{round(seconds, 3):g}"


def ready_params(
    *,
    dataset: str | None = None,
    partitions: Sequence[str] | None = None,
    task: str | None = None,
    dt: DateLike | None = None,
    wait: float | None = None,
    until_rejected: bool = False,
) -> QueryParams:
    """The ``/ready`` query: by ``dataset`` and ``partitions``, or by ``task`` and ``dt``.

    ``wait`` (seconds, at most 300) makes it a long-poll; ``until_rejected``
    lets that long-poll answer early when the latest batch is rejected.
    """
    if (dataset is None) == (task is None):
        raise ValueError("ask either by dataset and partitions, or by task and dt")
    params: QueryParams = []
    if dataset is not None:
        if not partitions or isinstance(partitions, str):
            raise ValueError("partitions must be a non-empty list of partition specs")
        params.append(("dataset", dataset))
        params.extend(("partition", p) for p in partitions)
    else:
        if dt is None or partitions:
            raise ValueError("asking by task takes dt and no partitions")
        params.append(("task", str(task)))
        params.append(("dt", format_dt(dt)))
    if wait is not None:
        if not 0 <= wait <= MAX_WAIT_SECONDS:
            raise ValueError(f"wait must be from 0 to {MAX_WAIT_SECONDS:g} seconds")
        params.append(("wait", format_seconds(wait)))
        if until_rejected:
            params.append(("until", "ready_or_rejected"))
    return params


def error_from_response(status: int, body: Any, text: str) -> BatchgateError:
    """The exception for an error answer, from the service's error body when it has one."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code: str = error["code"]
        message = str(error.get("message", ""))
        details = error.get("details") if isinstance(error.get("details"), dict) else {}
    else:
        # Not the service's own answer (a proxy, a load balancer): keep what it said.
        code = f"http_{status}"
        message = text.strip()[:500] or f"HTTP {status}"
        details = {}
    cls: type[BatchgateError]
    if code == "batch_in_progress":
        cls = BatchInProgress
    elif status == 409:
        cls = Conflict
    elif status == 404:
        cls = NotFound
    elif status in (400, 413, 422):
        cls = InvalidRequest
    elif status in (502, 503, 504):
        cls = ServiceUnavailable
    elif status >= 500:
        cls = ServerError
    else:
        cls = BatchgateError
    return cls(message, code=code, details=details, status=status)


def readiness_from_response(status: int, body: Any, text: str) -> Readiness:
    """A ``/ready`` answer: 200 ready, 404 ``"ready": false`` not ready, else an error."""
    if isinstance(body, dict) and "ready" in body and status in (200, 404):
        return Readiness.from_json(body)
    raise error_from_response(status, body, text)


def transport_error(exc: BaseException, what: str) -> ServiceUnavailable:
    """The exception for a request that got no answer at all."""
    return ServiceUnavailable(
        f"{what}: {type(exc).__name__}: {exc}", code="unreachable", details={}, status=None
    )


def bearer_headers(token: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers
