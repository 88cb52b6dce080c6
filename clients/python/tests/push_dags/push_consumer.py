"""The consumer DAG of the push acceptance test: one run per partition key
of the asset batchgate emits events for (README "Push instead of polling")."""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import Asset, PartitionedAssetTimetable, dag, task

ASSET = os.environ.get("BATCHGATE_PUSH_ASSET", "dws.order_detail")


@dag(
    dag_id="push_consumer",
    schedule=PartitionedAssetTimetable(assets=Asset(ASSET)),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
)
def push_consumer():
    @task
    def consume(**context):
        run = context["dag_run"]
        print("consuming partition", run.partition_key)

    consume()


push_consumer()
