"""Producer DAGs: the operator and the decorator start, commit or fail a batch."""

from __future__ import annotations

from batchgate import BatchgateClient

from ..helpers import DT, PARTITION
from .conftest import Airflow


def test_a_producer_dag_publishes_its_batch(airflow: Airflow, client: BatchgateClient) -> None:
    dag_run = airflow.run("bg_producer")

    assert dag_run.state == "success"
    [batch] = client.batches(dataset="airflow.orders").items
    assert batch.state == "published"
    assert batch.task == "bg_producer.write_orders"
    assert (batch.dt, batch.trigger, batch.run_ref) == (DT, "manual", dag_run.run_id)
    assert [(p.partition, p.row_count, p.version) for p in batch.partitions] == [(PARTITION, 42, 1)]
    assert client.ready("airflow.orders", [PARTITION]).ready
    returned = airflow.xcom("bg_producer", "write_orders")
    assert (returned["batch_id"], returned["state"]) == (batch.batch_id, "published")


def test_a_rejected_commit_fails_the_producer_task(
    airflow: Airflow, client: BatchgateClient
) -> None:
    dag_run = airflow.run("bg_producer_rejected")

    assert dag_run.state == "failed"
    assert airflow.task_instance("bg_producer_rejected", "write")["state"] == "failed"
    [batch] = client.batches(dataset="airflow.rejected").items
    assert batch.state == "rejected"
    assert [c.name for c in batch.checks if c.status == "fail"] == ["rows_match_written"]
    readiness = client.ready("airflow.rejected", [PARTITION])
    assert (readiness.ready, readiness.reason) == (False, "rejected")


def test_a_failing_callable_reports_its_stage_and_category(
    airflow: Airflow, client: BatchgateClient
) -> None:
    dag_run = airflow.run("bg_producer_failing")

    assert dag_run.state == "failed"
    [batch] = client.batches(dataset="airflow.failing").items
    assert batch.state == "failed"
    assert batch.failure is not None
    assert (batch.failure.stage, batch.failure.category, batch.failure.message) == (
        "read",
        "data",
        "source partition is empty",
    )
