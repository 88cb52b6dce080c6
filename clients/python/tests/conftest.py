"""Runs the real batchgate binary for the tests.

The binary is ``$BATCHGATE_BIN``, else ``target/debug/batchgate`` of the
repository (``cargo build --bin batchgate``). One service on a fresh SQLite
registry and authentication required (``--auth required``, the bootstrap
token ``helpers.TOKEN``) serves the whole session; each test names its own tasks and
datasets, so tests do not see each other's batches.
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

import pytest
import requests

from batchgate import BatchgateClient

from .helpers import TOKEN, Names, Service

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
        yield Service(base_url, port, log), proc
    finally:
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
