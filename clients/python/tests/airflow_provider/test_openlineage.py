"""Airflow's OpenLineage provider posting to the real batchgate ``/api/v1/lineage``.

The DAGs (``dags/openlineage.py``) run under ``dag.test()`` with the provider's
HTTP transport pointed at the service through a pass-through recorder
(``lineage_recorder.py``: batchgate lists no stored events, and the
OpenLineage client ignores the answers, so the recorder keeps each body with
batchgate's status and answer).

What the provider sends here (apache-airflow-providers-openlineage 2.20.3,
openlineage-python 1.54.0, Airflow 3.3.2, with ``dag.test()``):

* a task-level START and COMPLETE (or FAIL) for job ``<dag_id>.<task_id>``,
  whose ``outputs``/``inputs`` are the task's declared ``Table`` outlets and
  inlets, without dataset facets (no ``outputStatistics``), and whose run
  facets are ``airflow``, ``nominalTime`` (start and end both the logical
  date, with offset), ``parent``, ``processing_engine``, ``tags``,
  ``unknownSourceAttribute`` (plus ``errorMessage`` on FAIL);
* a DAG-level COMPLETE (or FAIL) for job ``<dag_id>`` with no outputs, posted
  from a background pool, possibly after ``dag.test()`` has returned;
* no DAG-level START under ``dag.test()``.

So batchgate starts a batch at the task START, cannot commit it at COMPLETE
(no row count: the answer says so in ``warnings`` and the batch stays
``running``), and fails it at FAIL.

``fixtures/openlineage_captured_start.json`` and
``fixtures/openlineage_captured_complete.json`` are the START and COMPLETE
bodies of ``bg_ol_producer.write`` captured by this module's first test
(recorder's ``Exchange.body``, pretty-printed, ids and times as captured)
with the versions above; regenerate them with
``BATCHGATE_CAPTURE_OPENLINEAGE=1 clients/python/run_tests.sh -k openlineage``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from batchgate import BatchgateClient

from ..helpers import DT
from .conftest import LOGICAL_DATE, Airflow
from .lineage_recorder import Exchange, LineageRecorder

FIXTURES = Path(__file__).parent / "fixtures"
NAMESPACE = "batchgate"


def of(job: str, event_type: str) -> Callable[[Exchange], bool]:
    return lambda e: (e.job, e.event_type) == (job, event_type)


def outputs(e: Exchange) -> list[tuple[str, str]]:
    return [(o["namespace"], o["name"]) for o in e.body.get("outputs", [])]


def assert_all_answered(lineage: LineageRecorder, dag_id: str) -> None:
    mine = lineage.exchanges(lambda e: (e.job or "").split(".")[0] == dag_id)
    assert mine
    for e in mine:
        assert e.path == "/api/v1/lineage"
        assert e.status == 200, (e.body.get("eventType"), e.answer)
        assert e.answer["accepted"] is True
        assert e.answer["run_id"] == e.body["run"]["runId"]


def test_a_task_start_starts_a_batch_its_complete_cannot_commit(
    airflow: Airflow, lineage: LineageRecorder, client: BatchgateClient
) -> None:
    dag_run = airflow.run("bg_ol_producer")
    assert dag_run.state == "success"

    [start] = lineage.wait_for(of("bg_ol_producer.write", "START"))
    [complete] = lineage.wait_for(of("bg_ol_producer.write", "COMPLETE"))
    [dag_complete] = lineage.wait_for(of("bg_ol_producer", "COMPLETE"))
    assert lineage.exchanges(of("bg_ol_producer", "START")) == []
    assert_all_answered(lineage, "bg_ol_producer")

    run_id = start.body["run"]["runId"]
    assert complete.body["run"]["runId"] == run_id
    for e in (start, complete):
        assert outputs(e) == [(NAMESPACE, "airflow.ol_orders")]
        assert [(i["namespace"], i["name"]) for i in e.body["inputs"]] == [
            (NAMESPACE, "airflow.ol_source")
        ]
        assert [o.get("facets", {}) for o in e.body["outputs"]] == [{}]
        nominal = e.body["run"]["facets"]["nominalTime"]
        assert nominal["nominalStartTime"] == LOGICAL_DATE.isoformat()
        assert nominal["nominalEndTime"] == LOGICAL_DATE.isoformat()
    assert dag_complete.body["run"]["runId"] != run_id
    assert dag_complete.body.get("outputs", []) == []

    # START: one batch for the output, for the logical date, no warnings.
    [started] = start.answer["batches"]
    assert (started["dataset"], started["state"]) == ("airflow.ol_orders", "running")
    assert start.answer["warnings"] == []
    # COMPLETE: no outputStatistics, so nothing to check a commit against.
    assert [(b["batch_id"], b["state"]) for b in complete.answer["batches"]] == [
        (started["batch_id"], "running")
    ]
    [warning] = complete.answer["warnings"]
    assert "is not committed and stays running" in warning
    assert "neither outputStatistics nor dataQualityMetrics gives a rowCount" in warning
    # The DAG-level COMPLETE names no output and started nothing.
    assert dag_complete.answer["batches"] == []
    assert dag_complete.answer["warnings"] == [
        f"run {dag_complete.body['run']['runId']} started no batch (its START never came "
        "or named no usable output): nothing to commit"
    ]

    [batch] = client.batches(task="bg_ol_producer.write").items
    assert batch.batch_id == started["batch_id"]
    assert (batch.dataset, batch.state, batch.dt, batch.run_ref) == (
        "airflow.ol_orders",
        "running",
        DT,
        run_id,
    )
    assert [p.partition for p in batch.partitions] == [f"dt={DT}"]

    if os.environ.get("BATCHGATE_CAPTURE_OPENLINEAGE"):
        FIXTURES.mkdir(exist_ok=True)
        for name, e in (("start", start), ("complete", complete)):
            path = FIXTURES / f"openlineage_captured_{name}.json"
            path.write_text(json.dumps(e.body, indent=2, sort_keys=True) + "\n")


def test_the_captured_fixtures_match_what_the_provider_sends(
    airflow: Airflow, lineage: LineageRecorder
) -> None:
    """The saved bodies have the shape of today's events (keys and facets, not ids)."""
    live = {
        "start": lineage.wait_for(of("bg_ol_producer.write", "START"))[0].body,
        "complete": lineage.wait_for(of("bg_ol_producer.write", "COMPLETE"))[0].body,
    }
    for name, body in live.items():
        saved = json.loads((FIXTURES / f"openlineage_captured_{name}.json").read_text())
        assert saved["eventType"] == body["eventType"]
        assert sorted(saved) == sorted(body)
        assert sorted(saved["run"]["facets"]) == sorted(body["run"]["facets"])
        assert sorted(saved["job"]["facets"]) == sorted(body["job"]["facets"])
        assert outputs(Exchange("", saved, 0, None)) == outputs(Exchange("", body, 0, None))


def test_a_failing_task_fails_the_batch_its_start_started(
    airflow: Airflow, lineage: LineageRecorder, client: BatchgateClient
) -> None:
    dag_run = airflow.run("bg_ol_producer_failing")
    assert dag_run.state == "failed"

    [start] = lineage.wait_for(of("bg_ol_producer_failing.write", "START"))
    [fail] = lineage.wait_for(of("bg_ol_producer_failing.write", "FAIL"))
    [dag_fail] = lineage.wait_for(of("bg_ol_producer_failing", "FAIL"))
    assert lineage.exchanges(of("bg_ol_producer_failing.write", "COMPLETE")) == []
    assert_all_answered(lineage, "bg_ol_producer_failing")

    assert outputs(start) == outputs(fail) == [(NAMESPACE, "airflow.ol_failing")]
    error = fail.body["run"]["facets"]["errorMessage"]
    assert "source partition is empty" in error["message"]

    [started] = start.answer["batches"]
    assert (started["dataset"], started["state"]) == ("airflow.ol_failing", "running")
    assert [(b["batch_id"], b["state"]) for b in fail.answer["batches"]] == [
        (started["batch_id"], "failed")
    ]
    assert fail.answer["warnings"] == []
    # The emission policy keeps the other test DAGs quiet.
    assert {(e.job or "").split(".")[0] for e in lineage.exchanges()} <= {
        "bg_ol_producer",
        "bg_ol_producer_failing",
    }
    assert dag_fail.answer["batches"] == []
    assert dag_fail.answer["warnings"] == [
        f"run {dag_fail.body['run']['runId']} started no batch: nothing to fail"
    ]

    [batch] = client.batches(task="bg_ol_producer_failing.write").items
    assert (batch.batch_id, batch.dataset, batch.state, batch.dt) == (
        started["batch_id"],
        "airflow.ol_failing",
        "failed",
        DT,
    )
    assert batch.failure is not None
    assert "source partition is empty" in (batch.failure.message or "")
