"""``BatchgateBatchOperator``: a Python callable that writes one batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.python import PythonOperator

from .hooks import BatchgateHook

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Lease the operator asks for. Heartbeats keep a long task's lease alive, so a
#: short lease costs nothing while the task runs; it matters when the worker is
#: killed: a retry (after Airflow's default 300 s ``retry_delay``) finds the lease
#: expired and can start, instead of meeting ``batch_in_progress``.
DEFAULT_LEASE_SECONDS = 300

_EVIDENCE_KEYS = frozenset({"partitions", "marker", "source"})


class BatchgateBatchOperator(PythonOperator):
    """Runs ``python_callable`` inside a batchgate batch and commits what it returns.

    Before the callable runs, the operator starts a batch (task
    ``task_name``, default ``<dag_id>.<task_id>``; ``dataset``; ``dt``,
    default ``{{ ds }}``; ``partitions``; all templated) and heartbeats while
    it runs. A callable parameter named ``batch`` receives the
    :class:`~batchgate.BatchRun`: ``batch.batch_id`` to tag rows,
    ``batch.residue`` to delete what earlier attempts left behind.

    The callable returns the commit evidence, the body of a commit::

        {"marker": "s3://…/_SUCCESS",
         "partitions": [{"partition": "dt=2026-08-24", "rows_written": 10, "row_count": 10}],
         "source": {"row_count": 10}}            # optional

    The task succeeds when the batch publishes (the XCom value is the batch
    record) and fails when the service rejects it (``ChecksFailed``, naming
    the failed checks). If the callable raises, the batch is reported failed
    (raise :class:`~batchgate.BatchFailed` to choose the stage and category)
    and the task fails with the callable's exception.

    The batch records the run id as ``run_ref`` and the run type as
    ``trigger`` (``retry`` from the second try on).
    """

    template_fields: Sequence[str] = (
        *PythonOperator.template_fields,
        "dataset",
        "partitions",
        "dt",
        "task_name",
        "scope",
    )

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        dataset: str,
        partitions: Sequence[str],
        dt: str = "{{ ds }}",
        task_name: str | None = None,
        scope: Mapping[str, Any] | None = None,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        batchgate_conn_id: str = BatchgateHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(python_callable=python_callable, **kwargs)
        if not partitions or isinstance(partitions, str):
            raise ValueError("partitions must be a non-empty list such as ['dt={{ ds }}']")
        self.dataset = dataset
        self.partitions = list(partitions)
        self.dt = dt
        self.task_name = task_name
        self.scope = dict(scope) if scope is not None else None
        self.lease_seconds = lease_seconds
        self.batchgate_conn_id = batchgate_conn_id

    def execute(self, context: Context) -> Any:
        ti = context["ti"]
        client = BatchgateHook(self.batchgate_conn_id).get_conn()
        with client.batch(
            task=self.task_name or f"{ti.dag_id}.{ti.task_id}",
            dataset=self.dataset,
            dt=self.dt,
            partitions=self.partitions,
            scope=self.scope,
            trigger=_batch_trigger(context),
            run_ref=context["run_id"],
            lease_seconds=self.lease_seconds,
        ) as batch:
            self.log.info("started batch %s (residue: %s)", batch.batch_id, batch.residue)
            evidence = super().execute({**context, "batch": batch})
            record = batch.commit(**_evidence(evidence))
        self.log.info("batch %s published: %s", record.batch_id, record.partitions)
        return record.raw


def _evidence(value: Any) -> dict[str, Any]:
    """The callable's return value, checked to be a commit body."""
    if not isinstance(value, Mapping) or "partitions" not in value:
        raise TypeError(
            "the batch callable must return the commit evidence, a dict with 'partitions' "
            f"(and 'marker', 'source'); it returned {type(value).__name__}"
        )
    unknown = set(value) - _EVIDENCE_KEYS
    if unknown:
        raise TypeError(f"unknown keys in the commit evidence: {sorted(unknown)}")
    return dict(value)


def _batch_trigger(context: Context) -> str:
    """Why the batch runs, in batchgate's words, from the Airflow run."""
    if context["ti"].try_number > 1:
        return "retry"
    run_type = context["dag_run"].run_type
    run_type = getattr(run_type, "value", run_type)
    return run_type if run_type in ("scheduled", "manual", "backfill") else "scheduled"
