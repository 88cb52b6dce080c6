"""Acceptance of issue 13 ("Push, not poll") against a real Airflow 3.3.2
(api-server, scheduler, dag-processor; SimpleAuthManager, batchgate signing
in with a username and password) and the real batchgate binary, all on
127.0.0.1. The consumer DAG (tests/push_dags/push_consumer.py, the one in
the README) is scheduled with ``PartitionedAssetTimetable`` on the dataset's
asset:

1. it gets one run with ``partition_key`` 2026-08-24 once that partition
   publishes, and none while the batch runs or after a rejection;
2. a second run after a restatement, whose asset event's ``extra`` says so;
3. with Airflow's api-server stopped during a publish and started again,
   exactly one run.

A watchdog ends the module after 6 minutes whatever happens; every wait is
bounded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
import requests

from batchgate import BatchgateClient, ChecksFailed

from .airflow_stack import PASSWORD, USER, AirflowStack, Watchdog
from .conftest import batchgate_service
from .helpers import MARKER, bad, good

ASSET = "bg_push.order_detail"
DATASET = "dws.order_detail_push"
DAG = "push_consumer"
KEY = "2026-08-24"
QUIET = 4.0  # seconds batchgate gets to (wrongly) send something

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


class Pusher(NamedTuple):
    client: BatchgateClient
    base_url: str
    log: Path


@pytest.fixture(scope="module")
def watchdog() -> Iterator[Watchdog]:
    dog = Watchdog(360)
    yield dog
    dog.cancel()


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory, watchdog: Watchdog) -> Iterator[AirflowStack]:
    stack = AirflowStack(tmp_path_factory.mktemp("airflow"), ASSET, watchdog)
    try:
        stack.start()
        wait_for(
            f"DAG {DAG} to be parsed",
            lambda: stack.api("GET", f"/api/v2/dags/{DAG}").status_code == 200,
        )
        r = stack.api("PATCH", f"/api/v2/dags/{DAG}", json={"is_paused": False})
        assert r.status_code == 200, r.text
        yield stack
    except BaseException:
        for name in ("api-server", "scheduler", "dag-processor"):
            print(f"--- airflow {name} log ---\n{stack.log(name)}")
        raise
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def pusher(
    airflow: AirflowStack, tmp_path_factory: pytest.TempPathFactory, watchdog: Watchdog
) -> Iterator[Pusher]:
    flags = [
        "--scan-interval",
        "500ms",
        "--webhook-backoff",
        "1s",
        "--airflow-url",
        airflow.base_url,
    ]
    flags += ["--airflow-username", USER, "--airflow-password", PASSWORD]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHGATE_")}
    env.update({"RUST_LOG": "info,sqlx=warn", "NO_PROXY": "127.0.0.1,localhost"})
    with batchgate_service(tmp_path_factory.mktemp("batchgate-push"), flags, env) as (svc, proc):
        watchdog.pids.append(proc.pid)
        try:
            with BatchgateClient(svc.base_url, timeout=10) as client:
                client.put_dataset(DATASET, airflow_asset=ASSET)
                yield Pusher(client, svc.base_url, svc.log)
        except BaseException:
            print(f"--- batchgate log ---\n{svc.log.read_text()[-6000:]}")
            raise


def runs(airflow: AirflowStack, key: str) -> list[dict[str, Any]]:
    r = airflow.api("GET", f"/api/v2/dags/{DAG}/dagRuns", params={"limit": 100})
    assert r.status_code == 200, r.text
    return [run for run in r.json()["dag_runs"] if run.get("partition_key") == key]


def asset_events(airflow: AirflowStack, key: str) -> list[dict[str, Any]]:
    assets = airflow.api("GET", "/api/v2/assets", params={"name_pattern": ASSET}).json()["assets"]
    (asset_id,) = [a["id"] for a in assets if a["name"] == ASSET]
    r = airflow.api(
        "GET", "/api/v2/assets/events", params={"asset_id": asset_id, "order_by": "timestamp"}
    )
    assert r.status_code == 200, r.text
    return [e for e in r.json()["asset_events"] if e.get("partition_key") == key]


def publish(client: BatchgateClient, dt: str, rows: int) -> str:
    started = client.start_batch("push_producer", DATASET, dt, [f"dt={dt}"])
    client.commit(started.batch_id, good(rows, f"dt={dt}"), marker=MARKER)
    return started.batch_id


def test_1_a_publish_schedules_one_run_and_a_running_or_rejected_batch_none(
    airflow: AirflowStack, pusher: Pusher
) -> None:
    client = pusher.client
    running = client.start_batch("push_producer", DATASET, KEY, [f"dt={KEY}"])
    time.sleep(QUIET)
    assert runs(airflow, KEY) == [] and asset_events(airflow, KEY) == [], "nothing while it runs"
    with pytest.raises(ChecksFailed):
        client.commit(running.batch_id, bad(f"dt={KEY}"), marker=MARKER)
    time.sleep(QUIET)
    assert runs(airflow, KEY) == [] and asset_events(airflow, KEY) == [], (
        "nothing after a rejection"
    )

    batch_id = publish(client, KEY, 100)
    (run,) = wait_for("a run for 2026-08-24", lambda: runs(airflow, KEY))
    assert run["run_type"] == "asset_triggered"
    (event,) = asset_events(airflow, KEY)
    assert event["extra"]["batch_id"] == batch_id
    assert (event["extra"]["version"], event["extra"]["row_count"]) == (1, 100)
    assert "restatement" not in event["extra"]
    time.sleep(QUIET)
    assert len(runs(airflow, KEY)) == 1, "exactly one run"


def test_2_a_restatement_schedules_a_second_run_whose_extra_says_so(
    airflow: AirflowStack, pusher: Pusher
) -> None:
    batch_id = publish(pusher.client, KEY, 120)
    wait_for("a second run for 2026-08-24", lambda: len(runs(airflow, KEY)) == 2)
    events = asset_events(airflow, KEY)
    assert len(events) == 2
    extra = events[-1]["extra"]
    assert extra["batch_id"] == batch_id
    assert (extra["restatement"], extra["version"]) == (True, 2)
    assert (extra["superseded_version"], extra["superseded_row_count"], extra["row_count"]) == (
        1,
        100,
        120,
    )
    time.sleep(QUIET)
    assert len(runs(airflow, KEY)) == 2


def test_3_with_the_api_server_down_during_the_publish_exactly_one_run(
    airflow: AirflowStack, pusher: Pusher
) -> None:
    key = "2026-08-25"
    airflow.stop_api()
    batch_id = publish(pusher.client, key, 80)

    def failed_attempt() -> bool:
        answer = requests.get(
            f"{pusher.base_url}/v1/deliveries",
            params={"target": "airflow", "state": "pending"},
            timeout=5,
        )
        items = answer.json()["items"]
        return any(d["attempts"] >= 1 and d["partition"] == f"dt={key}" for d in items)

    wait_for("batchgate to fail to reach Airflow", failed_attempt, timeout=30)
    airflow.start_api()
    airflow.wait_api(120)
    (run,) = wait_for("a run for 2026-08-25", lambda: runs(airflow, key), timeout=120)
    assert run["run_type"] == "asset_triggered"
    time.sleep(QUIET)
    assert len(runs(airflow, key)) == 1, "exactly one run"
    events = asset_events(airflow, key)
    assert [e["extra"]["batch_id"] for e in events] == [batch_id]
    sent = requests.get(
        f"{pusher.base_url}/v1/deliveries",
        params={"target": "airflow", "state": "delivered"},
        timeout=5,
    )
    assert any(d["partition"] == f"dt={key}" and d["attempts"] >= 2 for d in sent.json()["items"])
