"""Lineage without typing it: a producer downstream of a sensor, with an inlet."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from batchgate import BatchRun
from batchgate.airflow.lineage import batchgate_asset
from batchgate.airflow.sensors import BatchgateReadySensor

with DAG("bg_lineage", schedule=None, start_date=datetime(2026, 1, 1)) as bg_lineage:
    wait_up = BatchgateReadySensor(
        task_id="wait_up",
        dataset="airflow.lineage_up",
        partitions=["dt={{ ds }}"],
        poke_interval=1,
        timeout=60,
    )

    @task.batchgate_batch(
        dataset="airflow.lineage_down",
        partitions=["dt={{ ds }}"],
        inlets=[batchgate_asset("airflow.lineage_dim", ["dt={{ ds }}"])],
    )
    def write_down(ds: str | None = None, batch: BatchRun | None = None) -> dict[str, Any]:
        return {
            "marker": f"s3://warehouse/lineage_down/dt={ds}/_SUCCESS",
            "partitions": [{"partition": f"dt={ds}", "rows_written": 7, "row_count": 7}],
        }

    wait_up >> write_down()
