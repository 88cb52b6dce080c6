"""Producer DAGs: tasks that write a batch through batchgate."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from batchgate import BatchFailed, BatchRun
from batchgate.airflow.operators import BatchgateBatchOperator

START = datetime(2026, 1, 1)


def evidence(partition: str, rows_written: int, row_count: int) -> dict[str, Any]:
    return {
        "marker": f"s3://warehouse/{partition}/_SUCCESS",
        "partitions": [
            {"partition": partition, "rows_written": rows_written, "row_count": row_count}
        ],
    }


with DAG("bg_producer", schedule=None, start_date=START) as bg_producer:

    @task.batchgate_batch(dataset="airflow.orders", partitions=["dt={{ ds }}"])
    def write_orders(ds: str | None = None, batch: BatchRun | None = None) -> dict[str, Any]:
        assert batch is not None and batch.batch_id.startswith("bg_producer.write_orders-")
        return evidence(f"dt={ds}", 42, 42)

    write_orders()


def write_short(ds: str, batch: BatchRun) -> dict[str, Any]:
    # 100 rows written, 90 in the table: rows_match_written fails.
    return evidence(f"dt={ds}", 100, 90)


with DAG("bg_producer_rejected", schedule=None, start_date=START) as bg_producer_rejected:
    BatchgateBatchOperator(
        task_id="write",
        dataset="airflow.rejected",
        partitions=["dt={{ ds }}"],
        python_callable=write_short,
    )


def read_fails() -> dict[str, Any]:
    raise BatchFailed("source partition is empty", stage="read", category="data")


with DAG("bg_producer_failing", schedule=None, start_date=START) as bg_producer_failing:
    BatchgateBatchOperator(
        task_id="write",
        dataset="airflow.failing",
        partitions=["dt={{ ds }}"],
        python_callable=read_fails,
    )
