"""BatchgateReadySensor in poke, reschedule and deferrable mode, in a real Airflow."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from batchgate import BatchgateClient, ChecksFailed

from ..helpers import DT, MARKER, PARTITION, bad, good
from .conftest import Airflow, utc

MODES = ["poke", "reschedule", "deferrable"]
TRIGGER = "batchgate.airflow.triggers.BatchgateReadyTrigger"


def assert_waited(airflow: Airflow, dag_id: str, mode: str, decided_at: str) -> None:
    """The sensor was running, and had found the partition not ready, before the batch decided."""
    ti = airflow.task_instance(dag_id)
    if mode == "reschedule":
        assert airflow.reschedules(ti) >= 1
    else:
        assert utc(ti["start_date"]) < utc(decided_at) <= utc(ti["end_date"])
    if mode == "deferrable":
        assert airflow.trigger_classpath(ti) == TRIGGER
    else:
        assert airflow.trigger_classpath(ti) is None


@pytest.mark.parametrize("mode", MODES)
def test_a_sensor_waits_until_the_partition_publishes(
    airflow: Airflow, client: BatchgateClient, mode: str
) -> None:
    dag_id = f"bg_consumer_{mode}"
    started = client.start_batch("bg_publisher", f"airflow.consumed_{mode}", DT, [PARTITION])
    publisher = airflow.when_started(
        dag_id, lambda: client.commit(started.batch_id, good(), marker=MARKER)
    )

    dag_run = airflow.run(dag_id)

    publisher.join()
    assert dag_run.state == "success"
    decided_at = client.get_batch(started.batch_id).decided_at
    assert decided_at is not None
    assert_waited(airflow, dag_id, mode, decided_at)
    answer = airflow.xcom(dag_id, "wait")
    assert answer["ready"] is True
    assert answer["partitions"][0]["batch_id"] == started.batch_id
    if mode == "deferrable":
        # Its only retry timer is 60 s: waking within seconds is the long-poll's doing.
        end = utc(airflow.task_instance(dag_id)["end_date"])
        assert end - utc(decided_at) < timedelta(seconds=10)


def test_a_sensor_by_task_and_dt_waits_for_the_tasks_latest_batch(
    airflow: Airflow, client: BatchgateClient
) -> None:
    def publish() -> None:
        started = client.start_batch("bg_upstream.load", "airflow.by_task", DT, [PARTITION])
        client.commit(started.batch_id, good(), marker=MARKER)

    publisher = airflow.when_started("bg_consumer_by_task", publish)

    dag_run = airflow.run("bg_consumer_by_task")

    publisher.join()
    assert dag_run.state == "success"
    answer = airflow.xcom("bg_consumer_by_task", "wait")
    assert (answer["task"], answer["dt"], answer["dataset"]) == (
        "bg_upstream.load",
        DT,
        "airflow.by_task",
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_sensor_fails_fast_when_the_latest_batch_is_rejected(
    airflow: Airflow, client: BatchgateClient, mode: str
) -> None:
    dag_id = f"bg_rejected_{mode}"
    started = client.start_batch("bg_publisher", f"airflow.rejected_{mode}", DT, [PARTITION])

    def reject() -> None:
        with pytest.raises(ChecksFailed):
            client.commit(started.batch_id, bad(), marker=MARKER)

    rejecter = airflow.when_started(dag_id, reject)
    begun = time.monotonic()

    dag_run = airflow.run(dag_id)

    elapsed = time.monotonic() - begun
    rejecter.join()
    assert dag_run.state == "failed"
    assert airflow.task_instance(dag_id)["state"] == "failed"
    decided_at = client.get_batch(started.batch_id).decided_at
    assert decided_at is not None
    assert_waited(airflow, dag_id, mode, decided_at)
    # The sensor's timeout is 120 s; it failed on the rejection, not on the timeout.
    assert elapsed < 60, elapsed


@pytest.mark.parametrize("mode", MODES)
def test_a_sensor_on_a_partition_never_published_times_out(
    airflow: Airflow, client: BatchgateClient, mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    dag_id = f"bg_never_{mode}"
    begun = time.monotonic()

    dag_run = airflow.run(dag_id, limit=60)

    elapsed = time.monotonic() - begun
    assert dag_run.state == "failed"
    assert airflow.task_instance(dag_id)["state"] == "failed"
    assert elapsed >= 3, elapsed
    assert "AirflowSensorTimeout" in capfd.readouterr().out
    assert client.ready(f"airflow.never_{mode}", [PARTITION]).reason == "no_batch"
