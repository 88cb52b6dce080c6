"""Every request field of the API is a parameter of the client method that
sends it: a field added to ``openapi/openapi.json`` fails this test until
the client takes it. Every closed set of values the client declares is the
spec's enum of the same name, and each docstring that lists one lists all of
it. (Response bodies are checked against the spec in every test that talks
to the service: ``response_check.py``.)"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from batchgate import BatchFailed, BatchgateClient, models
from batchgate.models import NOT_READY_REASONS, BatchRecord, CheckResult, Event, Readiness

from .parity import SPEC_PATH, request_fields, schema

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


#: Each value set of ``batchgate.models`` and the spec's enum it is.
ENUMS: dict[str, tuple[str, ...]] = {
    "BatchState": models.BATCH_STATES,
    "CheckName": models.CHECK_NAMES,
    "CheckStatus": models.CHECK_STATUSES,
    "EventKind": models.EVENT_KINDS,
    "FailStage": models.FAIL_STAGES,
    "FailCategory": models.FAIL_CATEGORIES,
    "Trigger": models.TRIGGERS,
    "ChangeKind": models.CHANGE_KINDS,
    "RepairActionName": models.REPAIR_ACTIONS,
    "RepairState": models.REPAIR_STATES,
    "NotReadyReason": NOT_READY_REASONS,
}


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_each_value_set_of_the_models_is_the_spec_s_enum(name: str) -> None:
    assert list(ENUMS[name]) == schema(name)["enum"]


def test_every_enum_of_the_models_is_listed_here() -> None:
    declared = {n for n, v in vars(models).items() if n.isupper() and isinstance(v, tuple)}
    checked = {n for n, v in vars(models).items() if any(v is t for t in ENUMS.values())}
    assert declared == checked, f"not checked against the spec: {sorted(declared - checked)}"


#: Docstrings (and the README) that list every value of an enum.
DOCUMENTED: list[tuple[str, str, str]] = [
    (f.__qualname__, f.__doc__ or "", enum)
    for f, enum in [
        (Readiness, "NotReadyReason"),
        (BatchRecord, "BatchState"),
        (CheckResult, "CheckStatus"),
        (Event, "EventKind"),
        (BatchgateClient.fail, "FailStage"),
        (BatchgateClient.fail, "FailCategory"),
        (BatchFailed, "FailStage"),
        (BatchFailed, "FailCategory"),
        (BatchgateClient.create_repair, "RepairActionName"),
        (BatchgateClient.get_repair, "RepairState"),
        (BatchgateClient.changes, "ChangeKind"),
    ]
]
README = (SPEC_PATH.parents[1] / "clients" / "python" / "README.md").read_text()


DOCUMENTED += [("README", README, "NotReadyReason"), ("README", README, "ChangeKind")]


@pytest.mark.parametrize(
    "where, text, enum", DOCUMENTED, ids=[f"{where}-{enum}" for where, _, enum in DOCUMENTED]
)
def test_a_docstring_that_lists_an_enum_names_every_value(where: str, text: str, enum: str) -> None:
    text = " ".join(text.split())
    quote = "`" if where == "README" else "``"
    missing = [v for v in schema(enum)["enum"] if f"{quote}{v}{quote}" not in text]
    assert not missing, f"{where} lists {enum} without {missing}"
