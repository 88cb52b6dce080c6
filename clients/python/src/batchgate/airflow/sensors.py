"""``BatchgateReadySensor``: waits until partitions are ready."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout

from ..errors import ServiceUnavailable
from ..models import Readiness
from .hooks import BatchgateHook
from .triggers import BatchgateReadyTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class BatchgateReadySensor(BaseSensorOperator):
    """Succeeds when the partitions are ready in batchgate; returns the ``/ready`` body.

    Ask by ``dataset`` and ``partitions`` (``["dt={{ ds }}"]``; all must be
    ready), or by ``task_name`` and ``dt`` (``{{ ds }}`` by default): ready
    when every partition of that task's latest batch for ``dt`` is. All four
    are templated. The XCom value is the ready answer: each partition's
    version, publishing batch and row count.

    Modes:

    - ``mode="poke"`` (default): asks every ``poke_interval`` seconds, holding
      a worker slot.
    - ``mode="reschedule"``: asks, then frees the slot until the next poke.
    - ``deferrable=True``: asks once, then hands the wait to the triggerer,
      whose :class:`BatchgateReadyTrigger` holds the service's long-poll: the
      sensor wakes the moment the partitions publish, with no polling.

    ``fail_on_rejected=True`` fails the task at once (no retries) when the
    latest batch of a partition is rejected, instead of waiting out
    ``timeout``. An unreachable service counts as not ready (with a warning):
    ``timeout`` still bounds the wait.
    """

    template_fields: Sequence[str] = ("dataset", "partitions", "task_name", "dt")
    ui_color = "#d9f2e6"

    def __init__(
        self,
        *,
        dataset: str | None = None,
        partitions: Sequence[str] | None = None,
        task_name: str | None = None,
        dt: str | None = None,
        batchgate_conn_id: str = BatchgateHook.default_conn_name,
        fail_on_rejected: bool = False,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (dataset is None) == (task_name is None):
            raise ValueError("give either dataset and partitions, or task_name (and dt)")
        if dataset is not None and (not partitions or isinstance(partitions, str)):
            raise ValueError("dataset needs partitions: a non-empty list such as ['dt={{ ds }}']")
        if task_name is not None and partitions:
            raise ValueError("partitions go with dataset; task_name goes with dt")
        if dataset is not None and dt is not None:
            raise ValueError("dt goes with task_name; with dataset, name the partitions")
        self.dataset = dataset
        self.partitions = list(partitions) if partitions else None
        self.task_name = task_name
        self.dt = "{{ ds }}" if task_name is not None and dt is None else dt
        self.batchgate_conn_id = batchgate_conn_id
        self.fail_on_rejected = fail_on_rejected
        self.deferrable = deferrable

    @cached_property
    def hook(self) -> BatchgateHook:
        return BatchgateHook(self.batchgate_conn_id)

    def _query(self) -> dict[str, Any]:
        if self.dataset is not None:
            return {"dataset": self.dataset, "partitions": self.partitions}
        return {"task": self.task_name, "dt": self.dt}

    def _check(self) -> Readiness | None:
        """The ready answer, or ``None`` while not ready; raises on a rejection if asked to."""
        try:
            readiness = self.hook.get_conn().ready(**self._query())
        except ServiceUnavailable as e:
            self.log.warning("batchgate unreachable; counting as not ready: %s", e)
            return None
        if readiness.ready:
            self.log.info("%s ready: %s", readiness.describe(), readiness.partitions)
            return readiness
        if self.fail_on_rejected and readiness.reason == "rejected":
            raise AirflowFailException(
                f"{readiness.describe()}: the latest batch {readiness.batch_id} was rejected"
            )
        self.log.info(
            "%s not ready: %s (batch %s)",
            readiness.describe(),
            readiness.reason,
            readiness.batch_id,
        )
        return None

    def poke(self, context: Context) -> bool | PokeReturnValue:
        readiness = self._check()
        if readiness is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=readiness.body)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        readiness = self._check()
        if readiness is not None:
            return readiness.body
        self.defer(
            trigger=BatchgateReadyTrigger(
                batchgate_conn_id=self.batchgate_conn_id,
                query=self._query(),
                deadline=time.time() + self.timeout,
                fail_on_rejected=self.fail_on_rejected,
                retry_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resumes the deferred sensor with the trigger's event."""
        status, message = event["status"], event["message"]
        if status == "ready":
            self.log.info("%s", message)
            return event["readiness"]
        if status == "rejected":
            raise AirflowFailException(message)
        if status == "timeout":
            raise AirflowSensorTimeout(f"sensor timed out after {self.timeout:g} s: {message}")
        raise AirflowException(message)
