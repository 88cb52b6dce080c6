"""The provider's registration, the hook's connection, and the trigger on its own."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from airflow.providers_manager import ProvidersManager
from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

from batchgate import BatchgateClient
from batchgate.airflow import triggers
from batchgate.airflow.hooks import BatchgateHook
from batchgate.airflow.sensors import BatchgateReadySensor
from batchgate.airflow.triggers import BatchgateReadyTrigger

from ..helpers import DT, MARKER, PARTITION, Names, good, later
from .conftest import Airflow


def test_airflow_discovers_the_provider_through_its_entry_point() -> None:
    runtime = ProvidersManagerTaskRuntime()

    assert "batchgate" in ProvidersManager().providers
    assert runtime.hooks["batchgate"] is not None
    assert runtime.hooks["batchgate"].hook_class_name == "batchgate.airflow.hooks.BatchgateHook"
    assert "batchgate_batch" in runtime.taskflow_decorators


@pytest.mark.parametrize(
    ("uri", "base_url", "token"),
    [
        ("batchgate://bg.internal:8080", "http://bg.internal:8080", None),
        (
            "batchgate://:tok-123@bg.internal:8443/https",
            "https://bg.internal:8443",
            "tok-123",
        ),
        (
            '{"conn_type": "batchgate", "host": "https://gw.internal/batchgate"}',
            "https://gw.internal/batchgate",
            None,
        ),
    ],
)
def test_the_hook_builds_the_client_from_the_connection(
    monkeypatch: pytest.MonkeyPatch, uri: str, base_url: str, token: str | None
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BG_UNDER_TEST", uri)

    client = BatchgateHook("bg_under_test").get_conn()

    assert (client.base_url, client.token) == (base_url, token)
    assert asyncio.run(BatchgateHook("bg_under_test").aget_endpoint()) == (base_url, token)


def test_the_sensor_refuses_an_ambiguous_question() -> None:
    with pytest.raises(ValueError):
        BatchgateReadySensor(task_id="both", dataset="d.t", partitions=["dt=1"], task_name="t")
    with pytest.raises(ValueError):
        BatchgateReadySensor(task_id="neither")
    with pytest.raises(ValueError):
        BatchgateReadySensor(task_id="one_string", dataset="d.t", partitions="dt=1")
    with pytest.raises(ValueError):
        BatchgateReadySensor(task_id="dt_by_dataset", dataset="d.t", partitions=["a=1"], dt="x")


# -- the trigger, run outside a DAG ------------------------------------------


def first_event(trigger: BatchgateReadyTrigger) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(run(), timeout=60))


def trigger_for(names: Names, *, seconds: float, **kwargs: Any) -> BatchgateReadyTrigger:
    return BatchgateReadyTrigger(
        batchgate_conn_id="batchgate_default",
        query={"dataset": names.dataset, "partitions": [PARTITION]},
        deadline=time.time() + seconds,
        **kwargs,
    )


@pytest.fixture(params=["aiohttp", "thread"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test with aiohttp, and again as in an Airflow without it (requests on a thread)."""
    assert vars(triggers)["aiohttp"] is not None, "the Airflow test environment ships aiohttp"
    if request.param == "thread":
        monkeypatch.setattr(triggers, "aiohttp", None)
    return str(request.param)


def test_the_trigger_serializes_to_its_import_path_and_arguments(names: Names) -> None:
    trigger = trigger_for(names, seconds=60, fail_on_rejected=True, retry_interval=5)

    classpath, kwargs = trigger.serialize()

    assert classpath == "batchgate.airflow.triggers.BatchgateReadyTrigger"
    assert BatchgateReadyTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_the_trigger_fires_when_the_partition_publishes(
    airflow: Airflow, client: BatchgateClient, names: Names, transport: str
) -> None:
    def publish() -> None:
        started = client.start_batch(names.task, names.dataset, DT, [PARTITION])
        client.commit(started.batch_id, good(), marker=MARKER)

    publisher = later(1.0, publish)
    begun = time.monotonic()

    event = first_event(trigger_for(names, seconds=30, retry_interval=60))

    elapsed = time.monotonic() - begun
    publisher.join()
    assert event["status"] == "ready"
    assert event["readiness"]["partitions"][0]["version"] == 1
    assert 0.9 < elapsed < 10, elapsed


def test_the_trigger_gives_up_at_its_deadline(
    airflow: Airflow, names: Names, transport: str
) -> None:
    begun = time.monotonic()

    event = first_event(trigger_for(names, seconds=1.5))

    assert 1.5 <= time.monotonic() - begun < 10
    assert event["status"] == "timeout"
    assert event["readiness"]["reason"] == "no_batch"


def test_the_trigger_retries_an_unreachable_service_until_its_deadline(
    airflow: Airflow, names: Names, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    with socket.socket() as bound_not_listening:
        bound_not_listening.bind(("127.0.0.1", 0))
        port = bound_not_listening.getsockname()[1]
        monkeypatch.setenv("AIRFLOW_CONN_BG_DOWN", f"batchgate://127.0.0.1:{port}")
        trigger = BatchgateReadyTrigger(
            batchgate_conn_id="bg_down",
            query={"dataset": names.dataset, "partitions": [PARTITION]},
            deadline=time.time() + 1.5,
            retry_interval=0.2,
        )

        event = first_event(trigger)

    assert event["status"] == "timeout"
    assert "unreachable" in event["message"]


def test_the_trigger_reports_a_refused_question_as_an_error(
    airflow: Airflow, transport: str
) -> None:
    trigger = BatchgateReadyTrigger(
        batchgate_conn_id="batchgate_default",
        query={"dataset": "not a dataset name", "partitions": [PARTITION]},
        deadline=time.time() + 30,
    )

    event = first_event(trigger)

    assert event["status"] == "error"
    assert "422" in event["message"]
