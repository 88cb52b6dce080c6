"""Lineage without typing it, in a real Airflow: the sensors a producer waited
on and its batchgate inlets become its batch's inputs, so a repair upstream
makes its partition stale."""

from __future__ import annotations

from batchgate import BatchgateClient

from ..helpers import DT, MARKER, PARTITION, good
from .conftest import Airflow


def test_a_producer_records_what_its_sensors_saw_and_a_repair_upstream_makes_it_stale(
    airflow: Airflow, client: BatchgateClient
) -> None:
    for dataset in ("airflow.lineage_up", "airflow.lineage_dim"):
        with client.batch(
            task=f"load_{dataset}", dataset=dataset, dt=DT, partitions=[PARTITION]
        ) as b:
            b.commit(good(10), marker=MARKER)

    dag_run = airflow.run("bg_lineage")

    assert dag_run.state == "success"
    [batch] = client.batches(dataset="airflow.lineage_down").items
    assert batch.state == "published"
    inputs = sorted((i["dataset"], i["partition"], i["version"]) for i in batch.raw["inputs"])
    assert inputs == [
        ("airflow.lineage_dim", PARTITION, 1),  # the inlet
        ("airflow.lineage_up", PARTITION, 1),  # what the sensor saw
    ]
    assert client.ready("airflow.lineage_down", [PARTITION]).ready

    # Repair the upstream: plan, rebuild in a batch naming the plan.
    plan = client.create_repair("airflow.lineage_up", [PARTITION], "rebuild", "re-extracted")
    downstream = [(d["dataset"], d["partition"]) for d in plan["downstream"]]
    assert downstream == [("airflow.lineage_down", PARTITION)]
    with client.batch(
        task="load_airflow.lineage_up",
        dataset="airflow.lineage_up",
        dt=DT,
        partitions=[PARTITION],
        trigger="repair",
        repair_id=plan["id"],
    ) as b:
        b.commit(good(11), marker=MARKER)

    readiness = client.ready("airflow.lineage_down", [PARTITION])
    assert (readiness.ready, readiness.reason) == (False, "stale_upstream")
    progress = client.get_repair(plan["id"])
    assert progress["state"] == "in_progress"
    assert progress["progress"]["downstream"][0]["state"] == "stale_upstream"
