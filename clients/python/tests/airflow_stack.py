"""A whole Airflow (api-server, scheduler, dag-processor; SimpleAuthManager)
on 127.0.0.1, for the push acceptance test.

Everything is configured through ``AIRFLOW__…`` variables in the child
processes' environment; the processes run from the test virtualenv's
``airflow`` script. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

DAGS = Path(__file__).resolve().parent / "push_dags"
USER = "batchgate"
PASSWORD = "push-test-password"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Watchdog:
    """Ends the test run if it outlives ``seconds``: kills the process groups
    it was told of, then the interpreter (a hung Airflow must not hang CI)."""

    def __init__(self, seconds: float) -> None:
        self.pids: list[int] = []
        self._timer = threading.Timer(seconds, self._fire, args=(seconds,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, seconds: float) -> None:
        sys.stderr.write(
            f"\n*** watchdog: the push acceptance test ran over {seconds:.0f} s; killing it\n"
        )
        for pid in self.pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        sys.stderr.flush()
        os._exit(3)

    def cancel(self) -> None:
        self._timer.cancel()


class AirflowStack:
    """Airflow 3 processes in a temporary ``AIRFLOW_HOME``."""

    def __init__(self, home: Path, asset: str, watchdog: Watchdog | None = None) -> None:
        self.home = home
        self.watchdog = watchdog
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self._token: str | None = None
        dags = home / "dags"
        dags.mkdir(parents=True, exist_ok=True)
        for f in DAGS.glob("*.py"):
            shutil.copy(f, dags / f.name)
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({USER: PASSWORD}))
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__API__WORKERS": "1",
            # One signing key for every process (and for the api-server after a restart).
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            # A few task slots: the machine is small, and the DAG's task is tiny.
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
            "BATCHGATE_PUSH_ASSET": asset,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        for k in (
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ):
            self.env.pop(k, None)
        self.airflow = str(Path(sys.executable).parent / "airflow")

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.home / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [self.airflow, *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if self.watchdog is not None:
            self.watchdog.pids.append(self.procs[name].pid)

    def start(self, timeout: float = 150) -> None:
        subprocess.run(
            [self.airflow, "db", "migrate"],
            env=self.env,
            check=True,
            timeout=120,
            stdout=(self.home / "migrate.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.start_api()
        self._spawn("scheduler", "scheduler")
        self._spawn("dag-processor", "dag-processor")
        self.wait_api(timeout)

    def start_api(self) -> None:
        self._spawn("api-server", "api-server", "--port", str(self.port), "--host", "127.0.0.1")

    def stop_api(self) -> None:
        self._stop("api-server")

    def wait_api(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(
                        f"airflow {name} exited with {p.returncode}:\n{self.log(name)}"
                    )
            try:
                if requests.get(f"{self.base_url}/api/v2/version", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                log = self.log("api-server")
                raise RuntimeError(f"airflow api-server did not answer within {timeout}s:\n{log}")
            time.sleep(0.5)

    def token(self) -> str:
        if self._token is None:
            r = requests.post(
                f"{self.base_url}/auth/token",
                json={"username": USER, "password": PASSWORD},
                timeout=30,
            )
            r.raise_for_status()
            self._token = str(r.json()["access_token"])
        return self._token

    def api(self, method: str, path: str, **kw) -> requests.Response:
        """One call with the test's JWT; a busy api-server gets three tries."""
        for attempt in range(3):
            try:
                headers = {"Authorization": f"Bearer {self.token()}"}
                r = requests.request(
                    method, f"{self.base_url}{path}", headers=headers, timeout=30, **kw
                )
                if r.status_code == 401 and attempt < 2:
                    self._token = None
                    continue
                # Airflow's own metadata database (SQLite here) can be busy while
                # the scheduler writes: a read answered 500 is asked again.
                if method == "GET" and r.status_code >= 500 and attempt < 2:
                    time.sleep(1)
                    continue
                return r
            except requests.RequestException:
                if attempt == 2:
                    raise
                time.sleep(2)
        raise AssertionError("unreachable")

    def log(self, name: str) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def _stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)

    def stop(self) -> None:
        for name in list(self.procs):
            self._stop(name)
