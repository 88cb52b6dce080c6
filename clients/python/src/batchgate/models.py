"""Typed views of the service's JSON bodies.

Results are frozen dataclasses built from the response body; each keeps the
body it came from in ``raw`` (``body`` for readiness), so fields the service
adds later are not lost. Timestamps stay RFC 3339 strings as the service
sends them; data dates are ``YYYY-MM-DD`` strings.

The closed sets of values the service answers with (a batch's state, a
check's status, why ``/ready`` says not ready, …) are ``Literal`` types here,
each with a tuple of its values; each is the enum of the same name in the
service's OpenAPI document (the tests check that they agree, in order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, get_args

#: Where a batch is in its life (the spec's ``BatchState``).
BatchState = Literal["running", "published", "rejected", "failed", "abandoned", "superseded"]
BATCH_STATES: tuple[BatchState, ...] = get_args(BatchState)

#: A commit check's outcome (``CheckStatus``): ``fail`` only when it blocks.
CheckStatus = Literal["pass", "warn", "fail", "skipped"]
CHECK_STATUSES: tuple[CheckStatus, ...] = get_args(CheckStatus)

#: The commit checks, in the order they run (``CheckName``).
CheckName = Literal[
    "marker_present",
    "partitions_complete",
    "rows_match_written",
    "unique_keys",
    "null_keys",
    "non_empty",
    "volume_vs_baseline",
    "source_reconciliation",
]
CHECK_NAMES: tuple[CheckName, ...] = get_args(CheckName)

#: What happened to a batch, as its history lists it (``EventKind``).
EventKind = Literal[
    "started",
    "heartbeat",
    "written",
    "committed",
    "failed",
    "abandoned",
    "superseded",
    "fail_after_publish",
]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)

#: Where a failing task stopped (``FailStage``).
FailStage = Literal["read", "compute", "write", "verify"]
FAIL_STAGES: tuple[FailStage, ...] = get_args(FailStage)

#: What kind of failure a task reports (``FailCategory``).
FailCategory = Literal["resource", "data", "logic", "partial_write", "unknown"]
FAIL_CATEGORIES: tuple[FailCategory, ...] = get_args(FailCategory)

#: Why a batch ran (``Trigger``).
Trigger = Literal["scheduled", "retry", "backfill", "repair", "manual"]
TRIGGERS: tuple[Trigger, ...] = get_args(Trigger)

#: A readiness change, as the change feed lists it (``ChangeKind``).
ChangeKind = Literal["published", "restated", "invalidated", "stale", "fresh_again"]
CHANGE_KINDS: tuple[ChangeKind, ...] = get_args(ChangeKind)

#: What a repair does (``RepairActionName``).
RepairAction = Literal["rebuild", "resume", "compensate"]
REPAIR_ACTIONS: tuple[RepairAction, ...] = get_args(RepairAction)

#: Where a repair plan is (``RepairState``).
RepairState = Literal["planned", "in_progress", "complete"]
REPAIR_STATES: tuple[RepairState, ...] = get_args(RepairState)

#: Why ``/ready`` says not ready (``NotReadyReason``).
NotReadyReason = Literal[
    "no_batch",
    "running",
    "rejected",
    "failed",
    "abandoned",
    "invalidated",
    "stale_upstream",
    "unavailable",
    "shutting_down",
]
NOT_READY_REASONS: tuple[NotReadyReason, ...] = get_args(NotReadyReason)


class _PartitionStatsRequired(TypedDict):
    partition: str
    rows_written: int
    row_count: int


class PartitionStats(_PartitionStatsRequired, total=False):
    """What a task reports for one partition it wrote (the commit's evidence)."""

    distinct_keys: int
    null_keys: int
    metrics: dict[str, float]


class SourceStats(TypedDict, total=False):
    """Counts taken from the source the batch read, for ``source_reconciliation``."""

    row_count: int
    metrics: dict[str, float]


@dataclass(frozen=True)
class Residue:
    """An earlier attempt that may have left rows behind: delete them before writing."""

    batch_id: str
    state: BatchState
    partitions: list[str]

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Residue:
        return cls(body["batch_id"], body["state"], list(body["partitions"]))


@dataclass(frozen=True)
class StartedBatch:
    """The answer to a start: the new batch id and the residue to clean up."""

    batch_id: str
    seq: int
    state: BatchState
    lease_expires_at: str
    residue: list[Residue]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> StartedBatch:
        return cls(
            batch_id=body["batch_id"],
            seq=body["seq"],
            state=body["state"],
            lease_expires_at=body["lease_expires_at"],
            residue=[Residue.from_json(r) for r in body["residue"]],
            raw=body,
        )


@dataclass(frozen=True)
class Lease:
    """A running batch's lease after a heartbeat."""

    batch_id: str
    state: BatchState
    lease_expires_at: str

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Lease:
        return cls(body["batch_id"], body["state"], body["lease_expires_at"])


@dataclass(frozen=True)
class CheckResult:
    """One commit check's outcome; ``status`` is one of :data:`CHECK_STATUSES`
    (``pass``, ``warn``, ``fail`` or ``skipped``)."""

    name: CheckName
    status: CheckStatus
    partition: str | None
    observed: Any
    expected: Any
    message: str
    blocking: bool

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> CheckResult:
        return cls(
            name=body["name"],
            status=body["status"],
            partition=body.get("partition"),
            observed=body.get("observed"),
            expected=body.get("expected"),
            message=body["message"],
            blocking=body["blocking"],
        )


@dataclass(frozen=True)
class BatchPartition:
    """One partition of a batch, with what the batch reported for it."""

    partition: str
    status: BatchState
    rows_written: int | None
    row_count: int | None
    distinct_keys: int | None
    null_keys: int | None
    metrics: dict[str, float] | None
    version: int | None
    finish_time: str | None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> BatchPartition:
        return cls(
            partition=body["partition"],
            status=body["status"],
            rows_written=body.get("rows_written"),
            row_count=body.get("row_count"),
            distinct_keys=body.get("distinct_keys"),
            null_keys=body.get("null_keys"),
            metrics=body.get("metrics"),
            version=body.get("version"),
            finish_time=body.get("finish_time"),
        )


@dataclass(frozen=True)
class Failure:
    """What a failed batch reported."""

    stage: FailStage
    category: FailCategory | None
    message: str | None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Failure:
        return cls(body["stage"], body.get("category"), body.get("message"))


@dataclass(frozen=True)
class Event:
    """One entry of a batch's history: ``kind`` is one of :data:`EVENT_KINDS`
    (``started``, ``heartbeat``, ``written``, ``committed``, ``failed``,
    ``abandoned``, ``superseded``, ``fail_after_publish``)."""

    kind: EventKind
    at: str
    detail: Any

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Event:
        return cls(body["kind"], body["at"], body.get("detail"))


@dataclass(frozen=True)
class BatchRecord:
    """A batch: its request, state, partitions, checks and (read one at a time) events.

    ``state`` is one of :data:`BATCH_STATES` (``running``, ``published``,
    ``rejected``, ``failed``, ``abandoned`` or ``superseded``); ``trigger`` one
    of :data:`TRIGGERS`. ``events`` is ``None`` in listings.
    """

    batch_id: str
    task: str
    dataset: str
    dt: str
    seq: int
    state: BatchState
    trigger: Trigger
    run_ref: str | None
    scope: dict[str, Any] | None
    lease_seconds: int
    lease_expires_at: str
    started_at: str
    decided_at: str | None
    partitions: list[BatchPartition]
    marker: str | None
    checks: list[CheckResult]
    failure: Failure | None
    superseded_by: str | None
    events: list[Event] | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> BatchRecord:
        failure = body.get("failure")
        events = body.get("events")
        return cls(
            batch_id=body["batch_id"],
            task=body["task"],
            dataset=body["dataset"],
            dt=body["dt"],
            seq=body["seq"],
            state=body["state"],
            trigger=body["trigger"],
            run_ref=body.get("run_ref"),
            scope=body.get("scope"),
            lease_seconds=body["lease_seconds"],
            lease_expires_at=body["lease_expires_at"],
            started_at=body["started_at"],
            decided_at=body.get("decided_at"),
            partitions=[BatchPartition.from_json(p) for p in body["partitions"]],
            marker=body.get("marker"),
            checks=[CheckResult.from_json(c) for c in body["checks"]],
            failure=Failure.from_json(failure) if failure is not None else None,
            superseded_by=body.get("superseded_by"),
            events=[Event.from_json(e) for e in events] if events is not None else None,
            raw=body,
        )


@dataclass(frozen=True)
class BatchPage:
    """One page of ``GET /v1/batches``, newest first; pass ``next_cursor`` for the next."""

    items: list[BatchRecord]
    next_cursor: str | None


@dataclass(frozen=True)
class Readiness:
    """An answer of ``/ready``.

    Ready: ``partitions`` lists each partition's published version
    (``partition``, ``version``, ``batch_id``, ``row_count``, ``published_at``).
    Not ready: ``reason`` is one of :data:`NOT_READY_REASONS` (``no_batch``,
    ``running``, ``rejected``, ``failed``, ``abandoned``, ``invalidated``,
    ``stale_upstream``, ``unavailable``, ``shutting_down``); ``partition`` and
    ``batch_id`` name the first partition that is not ready and the batch
    that decides it, and ``partitions`` gives each asked-for partition's state.
    """

    ready: bool
    reason: NotReadyReason | None
    dataset: str | None
    partition: str | None
    batch_id: str | None
    partitions: list[dict[str, Any]]
    body: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Readiness:
        return cls(
            ready=bool(body.get("ready")),
            reason=body.get("reason"),
            dataset=body.get("dataset"),
            partition=body.get("partition"),
            batch_id=body.get("batch_id"),
            partitions=list(body.get("partitions") or []),
            body=body,
        )

    def describe(self) -> str:
        """What was asked about, for messages: the dataset and partition, or the task and dt."""
        if "task" in self.body:
            return f"task {self.body['task']} dt {self.body.get('dt')}"
        if self.partition is not None:
            return f"{self.dataset} {self.partition}"
        return str(self.dataset)
