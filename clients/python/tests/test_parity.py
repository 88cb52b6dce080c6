"""Every request field of the API is a parameter of the client method that
sends it: a field added to ``openapi/openapi.json`` fails this test until
the client takes it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from batchgate import BatchgateClient
from batchgate.models import NOT_READY_REASONS, Readiness

from .parity import request_fields, schema

#: The method that sends each operation; OpenLineage events are posted by
#: OpenLineage producers, not through this client.
METHODS: dict[tuple[str, str], list[Callable[..., Any]]] = {
    ("post", "/v1/batches"): [BatchgateClient.start_batch, BatchgateClient.batch],
    ("post", "/v1/batches/{batch_id}/commit"): [BatchgateClient.commit],
    ("post", "/v1/batches/{batch_id}/fail"): [BatchgateClient.fail],
    ("post", "/v1/batches/{batch_id}/written"): [BatchgateClient.written],
    ("put", "/v1/datasets/{dataset}"): [BatchgateClient.put_dataset],
    ("post", "/v1/partitions/{dataset}/{partition}/invalidate"): [BatchgateClient.invalidate],
    ("post", "/v1/repairs"): [BatchgateClient.create_repair],
    ("post", "/v1/tokens"): [BatchgateClient.create_token],
}
NOT_SENT_BY_THE_CLIENT = {("post", "/api/v1/lineage")}


def test_every_request_field_is_a_client_parameter() -> None:
    missing = []
    checked = 0
    for method, path, fields in request_fields():
        if (method, path) in NOT_SENT_BY_THE_CLIENT:
            continue
        functions = METHODS.get((method, path))
        if functions is None:
            missing.append(f"{method.upper()} {path}: no client method sends it")
            continue
        for function in functions:
            params = inspect.signature(function).parameters
            for field in fields:
                checked += 1
                if field not in params:
                    missing.append(f"{method.upper()} {path}: {function.__name__} has no {field}")
    assert not missing, "\n".join(missing)
    assert checked > 30


def test_the_not_ready_reasons_are_the_spec_s() -> None:
    reasons = schema("NotReadyReason")["enum"]
    assert list(NOT_READY_REASONS) == reasons
    doc = " ".join((Readiness.__doc__ or "").split())
    for reason in reasons:
        assert f"``{reason}``" in doc, f"Readiness's docstring does not name {reason}"
