"""A pass-through recorder between Airflow's OpenLineage provider and batchgate.

The OpenLineage client does not read the answers it gets and batchgate has no
endpoint that lists the events it stored, so the tests put this recorder in
front of the real service: every body the provider posts is forwarded as is
to ``{upstream}{path}`` (with the provider's ``Authorization`` header) and
kept with the status and answer batchgate gave.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple


class Exchange(NamedTuple):
    """One posted event and batchgate's answer to it."""

    path: str
    body: dict[str, Any]
    status: int
    answer: Any

    @property
    def job(self) -> str | None:
        job = self.body.get("job")
        return job.get("name") if isinstance(job, dict) else None

    @property
    def event_type(self) -> str | None:
        return self.body.get("eventType")


class LineageRecorder:
    def __init__(self) -> None:
        self.upstream: str | None = None
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, out = recorder._forward(self.path, raw, self.headers.get("Authorization"))
                try:
                    answer: Any = json.loads(out) if out else None
                except ValueError:
                    answer = out.decode(errors="replace")
                with recorder._lock:
                    recorder._exchanges.append(Exchange(self.path, json.loads(raw), status, answer))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def _forward(self, path: str, raw: bytes, authorization: str | None) -> tuple[int, bytes]:
        if self.upstream is None:
            return 503, b'{"error": "no upstream batchgate yet"}'
        # The provider's own credentials go through: the service checks them.
        headers = {"Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        request = urllib.request.Request(
            self.upstream + path, data=raw, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def exchanges(self, where: Callable[[Exchange], bool] = lambda e: True) -> list[Exchange]:
        with self._lock:
            return [e for e in self._exchanges if where(e)]

    def wait_for(
        self, where: Callable[[Exchange], bool], count: int = 1, timeout: float = 30
    ) -> list[Exchange]:
        """The matching exchanges once there are ``count`` of them (some are posted late)."""
        deadline = time.monotonic() + timeout
        while len(found := self.exchanges(where)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(found)} of {count} expected OpenLineage events after {timeout:g} s; "
                    f"got {[(e.event_type, e.job) for e in self.exchanges()]}"
                )
            time.sleep(0.1)
        return found

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
