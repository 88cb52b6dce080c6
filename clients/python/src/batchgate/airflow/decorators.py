"""``@task.batchgate_batch``: the TaskFlow form of :class:`BatchgateBatchOperator`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.decorator import DecoratedOperator, task_decorator_factory

from .operators import BatchgateBatchOperator

if TYPE_CHECKING:
    from airflow.sdk.bases.decorator import TaskDecorator


class _BatchgateDecoratedOperator(DecoratedOperator, BatchgateBatchOperator):
    custom_operator_name = "@task.batchgate_batch"
    template_fields: Sequence[str] = BatchgateBatchOperator.template_fields

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Sequence[Any] | None,
        op_kwargs: dict[str, Any] | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            kwargs_to_upstream={
                "python_callable": python_callable,
                "op_args": op_args,
                "op_kwargs": op_kwargs,
            },
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            **kwargs,
        )


def batchgate_batch(
    python_callable: Callable[..., Any] | None = None, **kwargs: Any
) -> TaskDecorator:
    """Wraps a function into a :class:`BatchgateBatchOperator` task.

    ::

        @task.batchgate_batch(dataset="dws.orders", partitions=["dt={{ ds }}"])
        def write_orders(ds=None, batch=None):
            rows = load(ds, batch.batch_id)
            return {"marker": f"s3://warehouse/dws/orders/dt={ds}/_SUCCESS",
                    "partitions": [{"partition": f"dt={ds}",
                                    "rows_written": rows, "row_count": rows}]}

    (also importable as ``from batchgate.airflow.decorators import batchgate_batch``).
    A ``batch`` parameter needs the default ``None``, as TaskFlow requires of
    values the task receives at run time.
    """
    return task_decorator_factory(
        python_callable=python_callable,
        decorated_operator_class=_BatchgateDecoratedOperator,
        **kwargs,
    )
