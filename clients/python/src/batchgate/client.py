"""The blocking HTTP client for the batchgate service."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import requests

from ._protocol import (
    MAX_WAIT_SECONDS,
    DateLike,
    InputLike,
    QueryParams,
    bearer_headers,
    error_from_response,
    format_dt,
    input_ref,
    readiness_from_response,
    ready_params,
    transport_error,
)
from ._version import __version__
from .batch import BatchRun
from .errors import ChecksFailed, PartitionRejected, ServiceUnavailable, WaitTimeout
from .models import (
    BatchPage,
    BatchRecord,
    Lease,
    PartitionStats,
    Readiness,
    SourceStats,
    StartedBatch,
)

log = logging.getLogger(__name__)

#: Seconds a request may take, unless the client is given another timeout.
DEFAULT_TIMEOUT = 30.0


class BatchgateClient:
    """Talks to one batchgate service.

    ``base_url`` is where the service listens (``http://127.0.0.1:8080``, or a
    URL with a path prefix behind a proxy). ``token``, when given, is sent as
    ``Authorization: Bearer <token>``. ``timeout`` bounds each request in
    seconds; a long-poll gets its wait on top. The client may be shared
    between threads: each thread gets its own connection pool.

    Errors raise :class:`~batchgate.errors.BatchgateError` subclasses that
    carry the service's ``code``, ``message``, ``details`` and HTTP status.
    """

    def __init__(
        self, base_url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._headers = {
            **bearer_headers(token),
            "User-Agent": f"batchgate-python/{__version__}",
        }
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BatchgateClient({self.base_url!r})"

    def __enter__(self) -> BatchgateClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection pools of every thread that used the client."""
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
        for s in sessions:
            s.close()
        self._local = threading.local()

    # -- batches ----------------------------------------------------------

    def start_batch(
        self,
        task: str,
        dataset: str,
        dt: DateLike,
        partitions: Sequence[str],
        *,
        scope: Mapping[str, Any] | None = None,
        trigger: str | None = None,
        run_ref: str | None = None,
        lease_seconds: int | None = None,
        idempotency_key: str | None = None,
        inputs: Sequence[InputLike] | None = None,
        allow_unready_inputs: bool = False,
        cleaned_batch_ids: Sequence[str] | None = None,
        repair_id: int | None = None,
    ) -> StartedBatch:
        """Starts one attempt of ``task`` to write ``partitions`` of ``dataset`` for ``dt``.

        Delete the rows of every batch in the answer's ``residue`` before
        writing. Raises :class:`BatchInProgress` when another batch holds a
        live lease on one of the partitions. With ``idempotency_key`` a retried
        start returns the same batch instead of starting a second one.

        ``inputs`` are the partitions the batch reads, each
        ``{"dataset": ..., "partition": ...}``, a ``(dataset, partition)``
        pair or ``"dataset:partition"``: recorded with their current versions,
        they give lineage, staleness and repairs. An input that is not ready
        refuses the start (:class:`Conflict` ``upstream_not_ready``) unless
        ``allow_unready_inputs``. ``cleaned_batch_ids`` names the residue
        batches whose rows the task deleted (an ``append`` dataset refuses a
        start over residue with ``cleanup_required`` until all are named).
        ``repair_id`` ties the batch to a repair plan (:meth:`create_repair`).
        """
        body: dict[str, Any] = {
            "task": task,
            "dataset": dataset,
            "dt": format_dt(dt),
            "partitions": list(partitions),
        }
        optional = {
            "scope": dict(scope) if scope is not None else None,
            "trigger": trigger,
            "run_ref": run_ref,
            "lease_seconds": lease_seconds,
            "inputs": [input_ref(i) for i in inputs] if inputs else None,
            "allow_unready_inputs": True if allow_unready_inputs else None,
            "cleaned_batch_ids": list(cleaned_batch_ids) if cleaned_batch_ids else None,
            "repair_id": repair_id,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        _, answer = self._call("POST", "/v1/batches", json=body, headers=headers, ok=(200, 201))
        return StartedBatch.from_json(answer)

    def heartbeat(self, batch_id: str) -> Lease:
        """Extends a running batch's lease by its ``lease_seconds`` from now.

        Raises :class:`Conflict` (``batch_not_running``) once the batch is no
        longer running.
        """
        _, answer = self._call("POST", f"/v1/batches/{_segment(batch_id)}/heartbeat")
        return Lease.from_json(answer)

    def commit(
        self,
        batch_id: str,
        partitions: Sequence[PartitionStats],
        *,
        marker: str | None = None,
        source: SourceStats | None = None,
    ) -> BatchRecord:
        """Commits a batch with its evidence; returns the published batch.

        ``partitions`` must be exactly the partitions named at start, each with
        ``rows_written`` and ``row_count`` (and optionally ``distinct_keys``,
        ``null_keys``, ``metrics``). ``marker`` is the completion marker (e.g. a
        ``_SUCCESS`` path); without one ``marker_present`` fails. Raises
        :class:`ChecksFailed` when a blocking check fails: the batch is then
        ``rejected`` and the exception carries its record. Repeating an
        identical commit returns the same answer.
        """
        body: dict[str, Any] = {"partitions": [dict(p) for p in partitions]}
        if marker is not None:
            body["marker"] = marker
        if source is not None:
            body["source"] = dict(source)
        status, answer = self._send("POST", f"/v1/batches/{_segment(batch_id)}/commit", json=body)
        if status == 200:
            return BatchRecord.from_json(answer)
        error = answer.get("error") if isinstance(answer, dict) else None
        if status == 422 and isinstance(error, dict) and error.get("code") == "checks_failed":
            record = {k: v for k, v in answer.items() if k != "error"}
            raise ChecksFailed(
                str(error.get("message", "")),
                batch=BatchRecord.from_json(record),
                details=error.get("details") or {},
            )
        raise error_from_response(status, answer, "")

    def written(self, batch_id: str, partitions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Reports the rows written so far, ``[{"partition", "rows_written"}]``, before a commit."""
        body = {"partitions": [dict(p) for p in partitions]}
        _, answer = self._call("POST", f"/v1/batches/{_segment(batch_id)}/written", json=body)
        return dict(answer)

    def fail(
        self,
        batch_id: str,
        stage: str,
        category: str | None = None,
        message: str | None = None,
    ) -> BatchRecord:
        """Reports that a batch failed at ``stage`` (``read``, ``compute``, ``write``, ``verify``:
        :data:`~batchgate.models.FAIL_STAGES`).

        ``category`` is ``resource``, ``data``, ``logic``, ``partial_write`` or
        ``unknown`` (the default; :data:`~batchgate.models.FAIL_CATEGORIES`). A
        failure at ``read``/``compute`` leaves the earlier version ready; at
        ``write``/``verify`` the partitions are not ready until a later batch
        publishes.
        """
        body: dict[str, Any] = {"stage": stage}
        if category is not None:
            body["category"] = category
        if message is not None:
            body["message"] = message
        _, answer = self._call("POST", f"/v1/batches/{_segment(batch_id)}/fail", json=body)
        return BatchRecord.from_json(answer)

    def get_batch(self, batch_id: str) -> BatchRecord:
        """The whole record of one batch, with its ordered events."""
        _, answer = self._call("GET", f"/v1/batches/{_segment(batch_id)}")
        return BatchRecord.from_json(answer)

    def batches(
        self,
        *,
        task: str | None = None,
        dataset: str | None = None,
        dt: DateLike | None = None,
        state: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> BatchPage:
        """One page of batches matching every given filter, newest first.

        ``since``/``until`` are RFC 3339 times; ``limit`` is at most 500. Pass
        the page's ``next_cursor`` as ``cursor`` for the next page.
        """
        filters = {
            "task": task,
            "dataset": dataset,
            "dt": format_dt(dt) if dt is not None else None,
            "state": state,
            "since": since,
            "until": until,
            "limit": str(limit) if limit is not None else None,
            "cursor": cursor,
        }
        params = [(k, v) for k, v in filters.items() if v is not None]
        _, answer = self._call("GET", "/v1/batches", params=params)
        return BatchPage(
            items=[BatchRecord.from_json(b) for b in answer["items"]],
            next_cursor=answer.get("next_cursor"),
        )

    def batch(
        self,
        task: str,
        dataset: str,
        dt: DateLike,
        partitions: Sequence[str],
        *,
        scope: Mapping[str, Any] | None = None,
        trigger: str | None = None,
        run_ref: str | None = None,
        lease_seconds: int | None = None,
        idempotency_key: str | None = None,
        inputs: Sequence[InputLike] | None = None,
        allow_unready_inputs: bool = False,
        cleaned_batch_ids: Sequence[str] | None = None,
        repair_id: int | None = None,
        heartbeat_interval: float | None = None,
    ) -> BatchRun:
        """A batch as a ``with`` block: start, heartbeat while the body runs, fail on error.

        ::

            with client.batch(task="t", dataset="d.t", dt="2026-08-24",
                              partitions=["dt=2026-08-24"]) as b:
                write(b.batch_id)
                b.commit(partitions=[...], marker="...")

        The block starts the batch on entry and heartbeats in a background
        thread (every third of the lease unless ``heartbeat_interval`` says
        otherwise). If the body raises, the batch is reported failed (stage and
        category from a :class:`BatchFailed`, else ``write``/``unknown``) and
        the exception propagates. If the body ends without ``b.commit(...)``
        the batch is reported failed and :class:`BatchNotCommitted` is raised.
        The other arguments are those of :meth:`start_batch`.
        """
        return BatchRun(
            self,
            dict(
                task=task,
                dataset=dataset,
                dt=dt,
                partitions=partitions,
                scope=scope,
                trigger=trigger,
                run_ref=run_ref,
                lease_seconds=lease_seconds,
                idempotency_key=idempotency_key,
                inputs=inputs,
                allow_unready_inputs=allow_unready_inputs,
                cleaned_batch_ids=cleaned_batch_ids,
                repair_id=repair_id,
            ),
            heartbeat_interval=heartbeat_interval,
        )

    # -- partitions, repairs, alerts, policies ----------------------------

    def partitions(
        self,
        dataset: str,
        *,
        from_dt: DateLike | None = None,
        to_dt: DateLike | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """One page of a dataset's partitions with their standing (``items``, ``next_cursor``)."""
        filters = {
            "dataset": dataset,
            "from": format_dt(from_dt) if from_dt is not None else None,
            "to": format_dt(to_dt) if to_dt is not None else None,
            "limit": str(limit) if limit is not None else None,
            "cursor": cursor,
        }
        params = [(k, v) for k, v in filters.items() if v is not None]
        _, answer = self._call("GET", "/v1/partitions", params=params)
        return dict(answer)

    def invalidate(self, dataset: str, partition: str, reason: str) -> dict[str, Any]:
        """Takes a partition out of service (``/ready`` answers ``invalidated``) until a
        new batch publishes it; downstream partitions built on it become stale."""
        path = f"/v1/partitions/{_segment(dataset)}/{_segment(partition)}/invalidate"
        _, answer = self._call("POST", path, json={"reason": reason})
        return dict(answer)

    def create_repair(
        self, dataset: str, partitions: Sequence[str], action: str, reason: str
    ) -> dict[str, Any]:
        """Plans a repair (``action`` ``rebuild``, ``resume`` or ``compensate``:
        :data:`~batchgate.models.REPAIR_ACTIONS`); returns the plan with its ``id``.
        Start the repairing batches with ``repair_id=plan["id"]``."""
        body = {
            "dataset": dataset,
            "partitions": list(partitions),
            "action": action,
            "reason": reason,
        }
        _, answer = self._call("POST", "/v1/repairs", json=body, ok=(201,))
        return dict(answer)

    def get_repair(self, repair_id: int) -> dict[str, Any]:
        """A repair plan with its progress; ``state`` is ``planned``, ``in_progress`` or
        ``complete`` (:data:`~batchgate.models.REPAIR_STATES`)."""
        _, answer = self._call("GET", f"/v1/repairs/{int(repair_id)}")
        return dict(answer)

    def alerts(
        self,
        *,
        state: str | None = None,
        dataset: str | None = None,
        severity: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """One page of alerts (``items``, ``next_cursor``), open ones unless ``state`` says."""
        filters = {
            "state": state,
            "dataset": dataset,
            "severity": severity,
            "kind": kind,
            "limit": str(limit) if limit is not None else None,
            "cursor": cursor,
        }
        params = [(k, v) for k, v in filters.items() if v is not None]
        _, answer = self._call("GET", "/v1/alerts", params=params)
        return dict(answer)

    def changes(
        self,
        *,
        after: str | None = None,
        dataset: str | None = None,
        page_size: int | None = None,
        follow: bool = False,
        poll_interval: float = 5.0,
    ) -> Iterator[dict[str, Any]]:
        """Iterates the change feed (``published``, ``restated``,
        ``invalidated``, ``stale``, ``fresh_again``:
        :data:`~batchgate.models.CHANGE_KINDS`) in commit order, from the
        change after cursor ``after`` (from the start without it), a page at a
        time.

        Each change carries its ``cursor``: store the cursor of the last
        change you handled and pass it as ``after`` to resume there, after a
        restart too; no change is missed or seen twice. With ``follow`` the
        iterator does not end at the end of the feed but asks again every
        ``poll_interval`` seconds. A cursor into history the service pruned
        raises :class:`~batchgate.errors.BatchgateError` with code
        ``cursor_expired``.
        """
        cursor = after
        while True:
            filters = {
                "after": cursor,
                "dataset": dataset,
                "limit": str(page_size) if page_size is not None else None,
            }
            params = [(k, v) for k, v in filters.items() if v is not None]
            _, answer = self._call("GET", "/v1/changes", params=params)
            items = list(answer["items"])
            for change in items:
                yield dict(change)
                cursor = str(change["cursor"])
            if not items:
                if not follow:
                    return
                time.sleep(poll_interval)

    def put_dataset(
        self,
        dataset: str,
        *,
        tier: str | None = None,
        write_mode: str | None = None,
        unique_key: Sequence[str] | None = None,
        timezone: str | None = None,
        max_volume_change: float | None = None,
        baseline_periods: int | None = None,
        allow_empty: bool | None = None,
        owner: str | None = None,
        max_partitions_per_batch: int | None = None,
        deadline: Mapping[str, Any] | None = None,
        webhook_url: str | None = None,
        airflow_asset: str | None = None,
        partition_key: str | None = None,
        events_url: str | None = None,
    ) -> dict[str, Any]:
        """Replaces a dataset's policy; an argument left out takes its default.

        ``deadline`` is ``{"time": "06:00", "days_after_dt": 1}``.
        ``airflow_asset`` makes each published partition an Airflow asset
        event with the partition key ``partition_key`` renders (a template
        over the partition spec's keys, default ``{dt}``); ``events_url``
        receives every change of the dataset as a CloudEvent.
        """
        fields = {
            "tier": tier,
            "write_mode": write_mode,
            "unique_key": list(unique_key) if unique_key is not None else None,
            "timezone": timezone,
            "max_volume_change": max_volume_change,
            "baseline_periods": baseline_periods,
            "allow_empty": allow_empty,
            "owner": owner,
            "max_partitions_per_batch": max_partitions_per_batch,
            "deadline": dict(deadline) if deadline is not None else None,
            "webhook_url": webhook_url,
            "airflow_asset": airflow_asset,
            "partition_key": partition_key,
            "events_url": events_url,
        }
        body = {k: v for k, v in fields.items() if v is not None}
        _, answer = self._call("PUT", f"/v1/datasets/{_segment(dataset)}", json=body, ok=(200, 201))
        return dict(answer)

    # -- tokens (admin) ---------------------------------------------------

    def create_token(
        self, name: str, scopes: Sequence[str], *, expires_in: str | None = None
    ) -> dict[str, Any]:
        """Makes an API token (``admin``); the answer's ``token`` is the secret, shown once.

        ``scopes`` are ``read``, ``produce:<glob>``, ``operate:<glob>`` or ``admin``;
        ``expires_in`` a lifetime such as ``90d``.
        """
        body: dict[str, Any] = {"name": name, "scopes": list(scopes)}
        if expires_in is not None:
            body["expires_in"] = expires_in
        _, answer = self._call("POST", "/v1/tokens", json=body, ok=(201,))
        return dict(answer)

    def tokens(self) -> dict[str, Any]:
        """The tokens (name, scopes, created, expires, last used; never the secret)."""
        _, answer = self._call("GET", "/v1/tokens")
        return dict(answer)

    def revoke_token(self, name: str) -> None:
        """Revokes a token: it stops working at once, on every replica."""
        status, body = self._send("DELETE", f"/v1/tokens/{_segment(name)}")
        if status != 204:
            raise error_from_response(status, body, "")

    # -- readiness --------------------------------------------------------

    def ready(
        self,
        dataset: str | None = None,
        partitions: Sequence[str] | None = None,
        *,
        task: str | None = None,
        dt: DateLike | None = None,
        wait: float | None = None,
        until_rejected: bool = False,
    ) -> Readiness:
        """Whether ``partitions`` of ``dataset`` (or ``task``'s latest batch for ``dt``) are ready.

        Not ready is an answer, not an error: check ``readiness.ready`` and
        ``readiness.reason``. With ``wait`` (seconds, at most 300) the service
        answers as soon as they are ready, else when the wait is over; with
        ``until_rejected`` also as soon as the latest batch is rejected.
        """
        params = ready_params(
            dataset=dataset,
            partitions=partitions,
            task=task,
            dt=dt,
            wait=wait,
            until_rejected=until_rejected,
        )
        timeout = self.timeout + (wait or 0.0)
        status, answer = self._send("GET", "/ready", params=params, timeout=timeout)
        return readiness_from_response(status, answer, "")

    def wait_ready(
        self,
        dataset: str | None = None,
        partitions: Sequence[str] | None = None,
        *,
        task: str | None = None,
        dt: DateLike | None = None,
        timeout: float,
        fail_on_rejected: bool = False,
        max_slice: float = MAX_WAIT_SECONDS,
        retry_interval: float = 5.0,
    ) -> Readiness:
        """Blocks until the partitions are ready, using the service's long-poll.

        Each request waits up to ``max_slice`` seconds (at most 300) on the
        service, which wakes it the moment a batch publishes: no polling loop.
        Raises :class:`WaitTimeout` after ``timeout`` seconds, and with
        ``fail_on_rejected`` :class:`PartitionRejected` as soon as the latest
        batch is rejected. While the service is unreachable it retries every
        ``retry_interval`` seconds until the timeout.
        """
        if not 0 < max_slice <= MAX_WAIT_SECONDS:
            raise ValueError(f"max_slice must be from 0 to {MAX_WAIT_SECONDS:g} seconds")
        deadline = time.monotonic() + timeout
        last: Readiness | None = None
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                last = self.ready(
                    dataset,
                    partitions,
                    task=task,
                    dt=dt,
                    wait=min(max_slice, remaining),
                    until_rejected=fail_on_rejected,
                )
            except ServiceUnavailable as e:
                if remaining <= 0:
                    raise WaitTimeout(f"gave up after {timeout:g} s: {e}", last) from e
                log.warning("batchgate unreachable, retrying in %g s: %s", retry_interval, e)
                time.sleep(min(retry_interval, remaining))
                continue
            if last.ready:
                return last
            if fail_on_rejected and last.reason == "rejected":
                raise PartitionRejected(last)
            if time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"{last.describe()} not ready after {timeout:g} s (reason: {last.reason})", last
                )

    # -- transport --------------------------------------------------------

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers.update(self._headers)
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: QueryParams | None = None,
        json: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, Any]:
        """Sends one request; returns the status and the decoded JSON body."""
        url = self.base_url + path
        try:
            response = self._session().request(
                method,
                url,
                params=params,
                json=json,
                headers=headers,
                timeout=timeout if timeout is not None else self.timeout,
            )
        except requests.RequestException as e:
            raise transport_error(e, f"{method} {url}") from e
        if response.status_code == 204:
            return 204, None
        try:
            body = response.json()
        except ValueError:
            # Not the service speaking (a proxy's error page, a wrong base URL).
            raise error_from_response(response.status_code, None, response.text) from None
        return response.status_code, body

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: QueryParams | None = None,
        json: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        ok: tuple[int, ...] = (200,),
    ) -> tuple[int, Any]:
        """Sends one request and raises the service's error unless the status is in ``ok``."""
        status, body = self._send(method, path, params=params, json=json, headers=headers)
        if status not in ok:
            raise error_from_response(status, body, "")
        return status, body


def _segment(value: str) -> str:
    return quote(value, safe="")
