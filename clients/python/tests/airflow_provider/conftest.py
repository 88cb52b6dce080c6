"""A real Airflow 3, in this process, against the real batchgate service.

Follows the recipe checked on this machine: every ``AIRFLOW__…`` variable is
set before Airflow is first imported (it reads its configuration then), the
metadata database is migrated with ``airflow db migrate``, DAG files live in
a temporary DAGS_FOLDER and are imported with importlib, ``dag.test()`` runs
on the main thread and the test asserts the run's state (``dag.test()`` does
not raise when a task fails). ``dag.test()`` runs a deferred task's trigger
inline and does not apply the sensor's timeout to it, so each run has its own
watchdog.

The deferrable trigger's own ``aiohttp`` session gets the response-schema
check too (``response_check.CHECK`` as an ``aiohttp`` client middleware), as
the client's ``requests`` sessions do in the top ``conftest.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from ..helpers import DT, TOKEN, Service, later
from ..response_check import CHECK
from .lineage_recorder import LineageRecorder

HOME = Path(tempfile.mkdtemp(prefix="batchgate-airflow-"))
DAGS_FOLDER = HOME / "dags"
shutil.copytree(Path(__file__).parent / "dags", DAGS_FOLDER)
#: Where the OpenLineage provider posts (its configuration is cached at first
#: use, so it is set here); the ``lineage`` fixture points it at the service.
LINEAGE = LineageRecorder()
os.environ.update(
    {
        "AIRFLOW_HOME": str(HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        # Only the OpenLineage test DAGs (bg_ol_…) emit OpenLineage events.
        "AIRFLOW__OPENLINEAGE__EMISSION_POLICY": json.dumps(
            [
                {"scope": {}, "controls": {"emit": False}},
                {
                    "scope": {"dag_id": "bg_ol_.*"},
                    "match_mode": "regex",
                    "controls": {"emit": True},
                },
            ]
        ),
        # The service requires a token: the transport sends it as a bearer.
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {
                "type": "http",
                "url": LINEAGE.url,
                "endpoint": "api/v1/lineage",
                "auth": {"type": "api_key", "apiKey": TOKEN},
            }
        ),
    }
)

from airflow.sdk import DAG  # noqa: E402  (configuration first)

from batchgate.airflow import triggers  # noqa: E402


class _CheckedAiohttp:
    """``aiohttp`` as the trigger sees it, with ``CHECK`` on every session it opens."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def ClientSession(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (aiohttp's name)
        middlewares = (*kwargs.pop("middlewares", ()), CHECK.aiohttp_middleware)
        return self._real.ClientSession(*args, middlewares=middlewares, **kwargs)


@pytest.fixture(scope="session", autouse=True)
def _check_trigger_responses() -> Iterator[None]:
    assert triggers.aiohttp is not None, "the Airflow test environment ships aiohttp"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(triggers, "aiohttp", _CheckedAiohttp(triggers.aiohttp))
        yield


#: The logical date of every test run: ``{{ ds }}`` is the helpers' ``DT``.
LOGICAL_DATE = datetime.fromisoformat(DT).replace(tzinfo=timezone.utc)


class WatchdogExpired(BaseException):
    """A run outlived its watchdog (a BaseException: Airflow's task loop swallows Exception)."""


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise WatchdogExpired(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def utc(timestamp: str) -> datetime:
    """An Airflow (naive UTC) or batchgate (RFC 3339) timestamp as an aware datetime."""
    timestamp = re.sub(r"(\.\d{6})\d+", r"\1", timestamp.replace("Z", "+00:00"))
    parsed = datetime.fromisoformat(timestamp)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


class Airflow:
    """Runs the test DAGs and reads what Airflow recorded about them."""

    def __init__(self, dags: dict[str, DAG]) -> None:
        self.dags = dags

    def run(self, dag_id: str, *, limit: float = 120) -> Any:
        """Runs the DAG once with ``dag.test()``; returns its DagRun."""
        with watchdog(limit):
            return self.dags[dag_id].test(logical_date=LOGICAL_DATE)

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(f"file:{HOME / 'airflow.db'}?mode=ro", uri=True, timeout=10)
        db.row_factory = sqlite3.Row
        return db

    def task_instance(self, dag_id: str, task_id: str = "wait") -> dict[str, Any]:
        with self._db() as db:
            row = db.execute(
                "SELECT * FROM task_instance WHERE dag_id = ? AND task_id = ?", (dag_id, task_id)
            ).fetchone()
        assert row is not None, f"no task instance {dag_id}.{task_id}"
        return dict(row)

    def xcom(self, dag_id: str, task_id: str) -> Any:
        with self._db() as db:
            row = db.execute(
                "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value'",
                (dag_id, task_id),
            ).fetchone()
        assert row is not None, f"no XCom from {dag_id}.{task_id}"
        return json.loads(row["value"])

    def reschedules(self, ti: dict[str, Any]) -> int:
        with self._db() as db:
            row = db.execute("SELECT count(*) FROM task_reschedule WHERE ti_id = ?", (ti["id"],))
            return int(row.fetchone()[0])

    def trigger_classpath(self, ti: dict[str, Any]) -> str | None:
        if ti["trigger_id"] is None:
            return None
        with self._db() as db:
            row = db.execute("SELECT classpath FROM trigger WHERE id = ?", (ti["trigger_id"],))
            return str(row.fetchone()[0])

    def when_started(
        self, dag_id: str, action: Callable[[], object], *, task_id: str = "wait"
    ) -> later:
        """Runs ``action`` on a thread 1.5 s after the task started (its first check is done)."""

        def wait_then_act() -> None:
            deadline = time.monotonic() + 90
            while self._start_date(dag_id, task_id) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{dag_id}.{task_id} never started")
                time.sleep(0.1)
            time.sleep(1.5)
            action()

        return later(0, wait_then_act)

    def _start_date(self, dag_id: str, task_id: str) -> str | None:
        with self._db() as db:
            row = db.execute(
                "SELECT start_date FROM task_instance WHERE dag_id = ? AND task_id = ?",
                (dag_id, task_id),
            ).fetchone()
        return None if row is None else row["start_date"]


def _load_dags() -> dict[str, DAG]:
    dags: dict[str, DAG] = {}
    for path in sorted(DAGS_FOLDER.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"batchgate_test_dags_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        dags.update({d.dag_id: d for d in vars(module).values() if isinstance(d, DAG)})
    return dags


@pytest.fixture(scope="session")
def airflow(service: Service) -> Airflow:
    migrate = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if migrate.returncode != 0:
        pytest.fail(f"airflow db migrate failed:\n{migrate.stdout}\n{migrate.stderr}")
    # Read by Airflow at each connection lookup, so it may be set after import.
    # The connection's password is the token.
    os.environ["AIRFLOW_CONN_BATCHGATE_DEFAULT"] = f"batchgate://:{TOKEN}@127.0.0.1:{service.port}"
    return Airflow(_load_dags())


@pytest.fixture(scope="session")
def lineage(service: Service) -> Iterator[LineageRecorder]:
    """What the OpenLineage provider posted to the real service, with its answers."""
    LINEAGE.upstream = service.base_url
    yield LINEAGE
    LINEAGE.close()
