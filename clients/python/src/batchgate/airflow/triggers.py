"""The deferrable sensor's trigger: waits on the service's long-poll.

Each request is ``/ready?…&wait=<≤300>``: the service holds it and answers
the moment the partitions publish, so a waiting sensor costs the service an
idle connection and no database polling, and costs the triggerer no timer
loop. With ``aiohttp`` (installed with Airflow's HTTP provider) requests are
truly asynchronous and cancel at once; without it each request runs on a
worker thread with ``requests``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

from airflow.triggers.base import BaseTrigger, TriggerEvent

from .._protocol import (
    MAX_WAIT_SECONDS,
    bearer_headers,
    readiness_from_response,
    ready_params,
    transport_error,
)
from ..client import DEFAULT_TIMEOUT, BatchgateClient
from ..errors import BatchgateError, ServiceUnavailable
from ..models import Readiness
from .hooks import BatchgateHook

try:
    import aiohttp
except ImportError:  # an Airflow without the HTTP provider: requests on a worker thread
    aiohttp = None  # type: ignore[assignment]


class BatchgateReadyTrigger(BaseTrigger):
    """Fires once the partitions are ready, rejected (if asked), or the deadline passes.

    ``query`` is ``{"dataset": …, "partitions": […]}`` or ``{"task": …, "dt": …}``.
    ``deadline`` is a Unix time: the trigger gives up there on its own, so a
    sensor's timeout holds even where the triggerer's own timeout is not
    applied. While the service is unreachable it retries every
    ``retry_interval`` seconds.

    Events: ``{"status": "ready" | "rejected" | "timeout" | "error",
    "message": str, "readiness": <the /ready body> | None}``.
    """

    def __init__(
        self,
        *,
        batchgate_conn_id: str,
        query: dict[str, Any],
        deadline: float,
        fail_on_rejected: bool = False,
        retry_interval: float = 30.0,
        max_slice: float = MAX_WAIT_SECONDS,
    ) -> None:
        super().__init__()
        ready_params(**query)  # refuse a malformed question before deferring on it
        self.batchgate_conn_id = batchgate_conn_id
        self.query = query
        self.deadline = deadline
        self.fail_on_rejected = fail_on_rejected
        self.retry_interval = retry_interval
        self.max_slice = max_slice

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "batchgate_conn_id": self.batchgate_conn_id,
                "query": self.query,
                "deadline": self.deadline,
                "fail_on_rejected": self.fail_on_rejected,
                "retry_interval": self.retry_interval,
                "max_slice": self.max_slice,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        base_url, token = await BatchgateHook(self.batchgate_conn_id).aget_endpoint()
        transport: _Transport = (
            _AiohttpTransport(base_url, token) if aiohttp else _ThreadTransport(base_url, token)
        )
        try:
            yield TriggerEvent(await self._wait(transport))
        finally:
            await transport.close()

    async def _wait(self, transport: _Transport) -> dict[str, Any]:
        last: Readiness | None = None
        while True:
            remaining = max(0.0, self.deadline - time.time())
            wait = min(self.max_slice, remaining)
            try:
                readiness = await transport.ready(self.query, wait, self.fail_on_rejected)
            except ServiceUnavailable as e:
                if remaining <= 0:
                    return _event("timeout", f"gave up waiting: {e}", last)
                self.log.warning(
                    "batchgate unreachable, retrying in %g s: %s", self.retry_interval, e
                )
                await asyncio.sleep(min(self.retry_interval, remaining))
                continue
            except BatchgateError as e:
                return _event("error", str(e), last)
            if readiness.ready:
                return _event("ready", f"{readiness.describe()} ready", readiness)
            if self.fail_on_rejected and readiness.reason == "rejected":
                return _event(
                    "rejected",
                    f"{readiness.describe()}: the latest batch {readiness.batch_id} was rejected",
                    readiness,
                )
            last = readiness
            self.log.info("%s not ready yet: %s", readiness.describe(), readiness.reason)
            if time.time() >= self.deadline:
                return _event(
                    "timeout",
                    f"{readiness.describe()} not ready (reason: {readiness.reason})",
                    last,
                )


def _event(status: str, message: str, readiness: Readiness | None) -> dict[str, Any]:
    return {
        "status": status,
        "message": message,
        "readiness": readiness.body if readiness is not None else None,
    }


class _Transport(Protocol):
    """How the trigger sends one ``/ready`` request."""

    async def ready(
        self, query: dict[str, Any], wait: float, until_rejected: bool
    ) -> Readiness: ...

    async def close(self) -> None: ...


class _AiohttpTransport:
    def __init__(self, base_url: str, token: str | None) -> None:
        self._url = base_url.rstrip("/") + "/ready"
        self._session = aiohttp.ClientSession(headers=bearer_headers(token))

    async def ready(self, query: dict[str, Any], wait: float, until_rejected: bool) -> Readiness:
        params = ready_params(**query, wait=wait, until_rejected=until_rejected)
        timeout = aiohttp.ClientTimeout(total=DEFAULT_TIMEOUT + wait)
        try:
            async with self._session.get(self._url, params=params, timeout=timeout) as r:
                status, text = r.status, await r.text()
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise transport_error(e, f"GET {self._url}") from e
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        return readiness_from_response(status, body, text)

    async def close(self) -> None:
        await self._session.close()


class _ThreadTransport:
    def __init__(self, base_url: str, token: str | None) -> None:
        self._client = BatchgateClient(base_url, token=token)

    async def ready(self, query: dict[str, Any], wait: float, until_rejected: bool) -> Readiness:
        return await asyncio.to_thread(
            self._client.ready, **query, wait=wait, until_rejected=until_rejected
        )

    async def close(self) -> None:
        self._client.close()
