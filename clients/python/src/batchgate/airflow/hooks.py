"""The ``batchgate`` connection type and its hook."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from ..client import DEFAULT_TIMEOUT, BatchgateClient

if TYPE_CHECKING:
    from airflow.sdk import Connection


def connection_endpoint(conn: Connection) -> tuple[str, str | None]:
    """The base URL and token a connection names.

    The host is either a bare host name, completed by the scheme (the
    connection's ``schema`` field, ``http`` by default) and ``port``, or a whole
    URL (``https://gateway.internal/batchgate``), used as it is. The password,
    if any, is the bearer token.
    """
    host = (conn.host or "").strip()
    if not host:
        raise ValueError(f"connection {conn.conn_id!r} names no host")
    if "://" in host:
        base_url = host
    else:
        base_url = f"{conn.schema or 'http'}://{host}"
        if conn.port:
            base_url += f":{conn.port}"
    return base_url, conn.password or None


class BatchgateHook(BaseHook):
    """Gives a :class:`~batchgate.BatchgateClient` for a ``batchgate`` connection.

    ``AIRFLOW_CONN_BATCHGATE_DEFAULT='batchgate://batchgate.internal:8080'``
    (``batchgate://:TOKEN@host:443/https`` for TLS and a token) or the same
    fields in the UI: host, port, scheme (``http``/``https``), token.
    """

    conn_name_attr = "batchgate_conn_id"
    default_conn_name = "batchgate_default"
    conn_type = "batchgate"
    hook_name = "batchgate"

    def __init__(
        self, batchgate_conn_id: str = default_conn_name, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        super().__init__()
        self.batchgate_conn_id = batchgate_conn_id
        self.timeout = timeout
        self._client: BatchgateClient | None = None

    def get_conn(self) -> BatchgateClient:
        """The client for this connection (made once per hook)."""
        if self._client is None:
            base_url, token = connection_endpoint(self.get_connection(self.batchgate_conn_id))
            self._client = BatchgateClient(base_url, token=token, timeout=self.timeout)
        return self._client

    async def aget_endpoint(self) -> tuple[str, str | None]:
        """The base URL and token, looked up without blocking the event loop (for triggers)."""
        conn = await asyncio.to_thread(self.get_connection, self.batchgate_conn_id)
        return connection_endpoint(conn)

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login", "extra"],
            "relabeling": {"schema": "Scheme", "password": "Token"},
            "placeholders": {
                "host": "batchgate.internal, or a URL such as https://gateway.internal/batchgate",
                "port": "8080",
                "schema": "http or https (default http)",
                "password": "bearer token, if the service sits behind an authenticating proxy",
            },
        }
