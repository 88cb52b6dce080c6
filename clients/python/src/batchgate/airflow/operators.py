"""``BatchgateBatchOperator``: a Python callable that writes one batch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.python import PythonOperator

from ..batch import DEFAULT_LEASE_SECONDS
from ..models import StartedBatch
from .hooks import BatchgateHook
from .lineage import inputs_from_inlets, inputs_from_ready_answers, merge_inputs

if TYPE_CHECKING:
    from airflow.sdk import Context


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
    ``trigger`` (``retry`` from the second try on), unless ``run_ref`` or
    ``trigger`` say otherwise.

    Lineage comes without typing it: the batch's inputs are the partitions
    every upstream :class:`~batchgate.airflow.sensors.BatchgateReadySensor`
    saw ready, the ``inlets`` that name batchgate datasets
    (:func:`~batchgate.airflow.lineage.batchgate_asset`), and ``inputs``
    (``[{"dataset", "partition"}]``, ``"dataset:partition"``; templated).
    ``record_sensor_inputs=False`` leaves the sensors out. The other
    arguments are those of :meth:`batchgate.BatchgateClient.start_batch`:
    ``allow_unready_inputs``, ``cleaned_batch_ids``, ``repair_id``,
    ``idempotency_key``, ``lease_seconds`` (default 3600, as everywhere;
    heartbeats keep it alive while the task runs).
    """

    template_fields: Sequence[str] = (
        *PythonOperator.template_fields,
        "dataset",
        "partitions",
        "dt",
        "task_name",
        "scope",
        "inputs",
        "cleaned_batch_ids",
        "run_ref",
        "idempotency_key",
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
        inputs: Sequence[Any] | None = None,
        allow_unready_inputs: bool = False,
        cleaned_batch_ids: Sequence[str] | None = None,
        repair_id: int | None = None,
        trigger: str | None = None,
        run_ref: str | None = None,
        idempotency_key: str | None = None,
        record_sensor_inputs: bool = True,
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
        self.inputs = list(inputs) if inputs else []
        self.allow_unready_inputs = allow_unready_inputs
        self.cleaned_batch_ids = list(cleaned_batch_ids) if cleaned_batch_ids else []
        self.repair_id = repair_id
        self.trigger = trigger
        self.run_ref = run_ref
        self.idempotency_key = idempotency_key
        self.record_sensor_inputs = record_sensor_inputs
        self.batchgate_conn_id = batchgate_conn_id

    def _sensor_answers(self, context: Context) -> list[Any]:
        """The ``/ready`` answers the upstream batchgate sensors pushed."""
        from .sensors import BatchgateReadySensor

        ids = [t.task_id for t in self.upstream_list if isinstance(t, BatchgateReadySensor)]
        if not ids:
            return []
        pulled = context["ti"].xcom_pull(task_ids=ids)
        return (
            list(pulled)
            if isinstance(pulled, Iterable) and not isinstance(pulled, Mapping)
            else [pulled]
        )

    def _inputs(self, context: Context) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        """The batch's inputs, and what the sensors saw (with versions)."""
        from .._protocol import input_ref

        seen = (
            inputs_from_ready_answers(self._sensor_answers(context))
            if self.record_sensor_inputs
            else []
        )
        from_inlets = inputs_from_inlets(
            self.inlets or [], self.partitions, lambda t: str(self.render_template(t, context))
        )
        given = [input_ref(i) for i in self.inputs]
        return merge_inputs(given, seen, from_inlets), seen

    def execute(self, context: Context) -> Any:
        ti = context["ti"]
        client = BatchgateHook(self.batchgate_conn_id).get_conn()
        inputs, seen = self._inputs(context)
        with client.batch(
            task=self.task_name or f"{ti.dag_id}.{ti.task_id}",
            dataset=self.dataset,
            dt=self.dt,
            partitions=self.partitions,
            scope=self.scope,
            trigger=self.trigger or _batch_trigger(context),
            run_ref=self.run_ref or context["run_id"],
            lease_seconds=self.lease_seconds,
            idempotency_key=self.idempotency_key,
            inputs=inputs,
            allow_unready_inputs=self.allow_unready_inputs,
            cleaned_batch_ids=self.cleaned_batch_ids,
            repair_id=self.repair_id,
        ) as batch:
            self.log.info("started batch %s (residue: %s)", batch.batch_id, batch.residue)
            _warn_moved_inputs(self.log, batch.started, seen)
            evidence = super().execute({**context, "batch": batch})
            record = batch.commit(**_evidence(evidence))
        self.log.info("batch %s published: %s", record.batch_id, record.partitions)
        return record.raw


def _warn_moved_inputs(log: Any, started: StartedBatch, seen: list[dict[str, Any]]) -> None:
    """Warns when an input moved on between the sensor's look and the start:
    the batch records (and should read) the version current at its start."""
    recorded = {
        (i.get("dataset"), i.get("partition")): i.get("version")
        for i in started.raw.get("inputs") or []
    }
    for s in seen:
        now = recorded.get((s["dataset"], s["partition"]))
        if s.get("version") is not None and now is not None and now != s["version"]:
            log.warning(
                "input %s %s: the sensor saw version %s, the batch records version %s",
                s["dataset"],
                s["partition"],
                s["version"],
                now,
            )


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
