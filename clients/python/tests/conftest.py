"""Runs the real batchgate binary for the tests.

The binary is ``$BATCHGATE_BIN``, else ``target/debug/batchgate`` of the
repository (``cargo build --bin batchgate``). One service on a fresh SQLite
registry and authentication required (``--auth required``, the bootstrap
token ``helpers.TOKEN``) serves the whole session; each test names its own tasks and
datasets, so tests do not see each other's batches.

Every answer a ``BatchgateClient`` gets from a batchgate service started
here is checked against ``openapi/openapi.json`` (``response_check.CHECK``,
a response hook on the client's ``requests`` sessions): a body the spec does
not describe, or a status it does not list, fails the test that received it,
and a session that started the service but checked no answer fails too.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from batchgate import BatchgateClient

from .helpers import TOKEN, Names, Service
from .response_check import CHECK

REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary() -> Path:
    path = Path(os.environ.get("BATCHGATE_BIN") or REPO / "target" / "debug" / "batchgate")
    if not path.is_file():
        raise RuntimeError(
            f"batchgate binary not found at {path}: run `cargo build --bin batchgate` "
            "in the repository or set BATCHGATE_BIN"
        )
    return path


@contextlib.contextmanager
def batchgate_service(
    workdir: Path, flags: list[str], env: dict[str, str]
) -> Iterator[tuple[Service, subprocess.Popen[bytes]]]:
    """The binary serving a fresh SQLite registry in ``workdir`` on a free
    port of 127.0.0.1 with ``flags``, healthy within 30 s; stopped on exit."""
    port = _free_port()
    log = workdir / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(_binary()),
                "serve",
                "--db",
                f"sqlite://{workdir}/r.db",
                "--listen",
                f"127.0.0.1:{port}",
                *flags,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"batchgate exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if requests.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"batchgate did not become healthy:\n{log.read_text()}")
            time.sleep(0.05)
        CHECK.serve(base_url)
        yield Service(base_url, port, log), proc
    finally:
        CHECK.retire(base_url)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def service() -> Iterator[Service]:
    workdir = Path(tempfile.mkdtemp(prefix="batchgate-py-service-"))
    env = {**os.environ, "RUST_LOG": "warn", "BATCHGATE_BOOTSTRAP_TOKEN": TOKEN}
    with batchgate_service(workdir, ["--auth", "required"], env) as (svc, _):
        yield svc


@pytest.fixture
def client(service: Service) -> Iterator[BatchgateClient]:
    with BatchgateClient(service.base_url, token=TOKEN, timeout=10) as c:
        yield c


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Names:
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", request.node.name).strip("_")[:80]
    return Names(task=f"t_{slug}", dataset=f"test.{slug}")


# -- the response-schema check ------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _check_responses() -> Iterator[None]:
    """Adds ``CHECK``'s response hook to every ``requests`` session a client opens."""
    opened = BatchgateClient._session

    def checked(self: BatchgateClient) -> requests.Session:
        session = opened(self)
        if CHECK.requests_hook not in session.hooks["response"]:
            session.hooks["response"].append(CHECK.requests_hook)
        return session

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BatchgateClient, "_session", checked)
        yield


def _fail_on_violations(when: str) -> None:
    found = CHECK.take()
    if found:
        pytest.fail(
            f"response-schema check ({when}): {len(found)} answer(s) of batchgate do not "
            "match openapi/openapi.json:\n" + "\n".join(found),
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Fails the test whose fixtures received a non-conforming answer while setting up."""
    yield
    _fail_on_violations("setting up the test")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fails the test whose body received a non-conforming answer."""
    yield
    _fail_on_violations("in the test")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Fails the test whose fixtures received a non-conforming answer while tearing down
    (or a background thread of it, such as a batch's heartbeat, after its body ended)."""
    yield
    _fail_on_violations("tearing down the test")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A session that ran batchgate but checked no answer checked nothing: fail it."""
    if CHECK.started and not sum(CHECK.validated.values()):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nresponse-schema check: a batchgate service ran but no answer was checked")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if CHECK.started:
        terminalreporter.write_line(
            f"response-schema check: {sum(CHECK.validated.values())} answers of batchgate "
            f"validated against openapi/openapi.json "
            f"({len(CHECK.validated)} operation/status pairs)"
        )
