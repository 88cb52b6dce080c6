"""Evidence builders shared by the tests."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from batchgate import PartitionStats

DT = "2026-08-24"
PARTITION = f"dt={DT}"


def good(rows: int = 100, partition: str = PARTITION) -> list[PartitionStats]:
    """Evidence that passes every check."""
    return [{"partition": partition, "rows_written": rows, "row_count": rows}]


def bad(partition: str = PARTITION) -> list[PartitionStats]:
    """Evidence that fails ``rows_match_written``: the table holds fewer rows than were written."""
    return [{"partition": partition, "rows_written": 100, "row_count": 90}]


MARKER = "s3://warehouse/test/_SUCCESS"

#: The service runs with ``--auth required``; this is its
#: ``BATCHGATE_BOOTSTRAP_TOKEN``, the token every test client, the Airflow
#: connection and the OpenLineage transport send.
TOKEN = "bgt_pytest_" + secrets.token_hex(16)


class Service(NamedTuple):
    """The batchgate service the session runs."""

    base_url: str
    port: int
    log: Path


class Names(NamedTuple):
    """A task and a dataset no other test uses."""

    task: str
    dataset: str


class later(threading.Thread):
    """Runs ``action`` on a thread after ``seconds``; ``join`` re-raises what it raised."""

    def __init__(self, seconds: float, action: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self._seconds, self._action = seconds, action
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        time.sleep(self._seconds)
        try:
            self._action()
        except BaseException as e:  # handed to the test's thread by join()
            self._error = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self._error is not None:
            raise self._error
