"""DAGs whose tasks declare their output tables as manual OpenLineage lineage.

``outlets=[Table(...)]`` is the OpenLineage provider's manual lineage: a
PythonOperator's extractor finds no datasets itself, so the provider reports
the declared inlets and outlets, a ``Table`` as namespace ``cluster`` and name
``database.name``. Only these DAGs emit events: the session runs the
provider with an ``emission_policy`` that emits for ``bg_ol_…`` DAGs only.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.common.compat.lineage.entities import Table
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

START = datetime(2026, 1, 1)


def write_orders() -> int:
    return 42


def write_failing() -> int:
    raise RuntimeError("source partition is empty")


with DAG("bg_ol_producer", schedule=None, start_date=START) as bg_ol_producer:
    PythonOperator(
        task_id="write",
        python_callable=write_orders,
        inlets=[Table(database="airflow", cluster="batchgate", name="ol_source")],
        outlets=[Table(database="airflow", cluster="batchgate", name="ol_orders")],
    )


with DAG("bg_ol_producer_failing", schedule=None, start_date=START) as bg_ol_producer_failing:
    PythonOperator(
        task_id="write",
        python_callable=write_failing,
        outlets=[Table(database="airflow", cluster="batchgate", name="ol_failing")],
    )
