"""The response-schema check itself: it accepts what batchgate answers and
rejects a body that breaks the spec, through both hooks it is installed with."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from batchgate import BatchgateClient
from batchgate.errors import BatchgateError

from .helpers import DT, MARKER, PARTITION, Names, good
from .response_check import CHECK, ResponseCheck, template_of, violations_of
from .test_client import _Recorder, stand_in  # noqa: F401 (the fixture)


def check(method: str, path: str, status: int, body: Any) -> list[str]:
    return violations_of(method, path, status, body, json.dumps(body))


def test_paths_resolve_to_their_operation_s_template() -> None:
    assert template_of("GET", "/v1/batches") == "/v1/batches"
    assert template_of("GET", "/v1/batches/t-20260824-001") == "/v1/batches/{batch_id}"
    assert template_of("POST", "/v1/batches/b/commit") == "/v1/batches/{batch_id}/commit"
    assert template_of("GET", "/ready?dataset=d") == "/ready"
    assert template_of("GET", "/console/app.js") is None


def test_a_real_answer_passes_and_the_same_answer_broken_is_rejected(
    client: BatchgateClient, names: Names
) -> None:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION])
    record = client.commit(started.batch_id, good(), marker=MARKER)
    path = f"/v1/batches/{started.batch_id}"
    body = client.get_batch(started.batch_id).raw
    assert check("GET", path, 200, body) == []

    unknown_state = copy.deepcopy(body)
    unknown_state["state"] = "half_published"
    found = check("GET", path, 200, unknown_state)
    assert len(found) == 1 and "'half_published' is not one of" in found[0], found

    no_partitions = copy.deepcopy(body)
    del no_partitions["partitions"]
    found = check("GET", path, 200, no_partitions)
    assert len(found) == 1 and "'partitions' is a required property" in found[0], found

    # Deep inside, through $refs: a check's status is the CheckStatus enum.
    bad_check = copy.deepcopy(record.raw)
    bad_check["checks"][0]["status"] = "maybe"
    found = check("POST", f"{path}/commit", 200, bad_check)
    assert len(found) == 1 and "(at /checks/0/status)" in found[0], found

    # The answer of another operation or status is not this one's. (The
    # spec's objects are open: extra fields pass, so a BatchRecord is a Lease.)
    assert check("GET", "/v1/repairs/1", 200, body) != []
    assert check("POST", f"{path}/commit", 422, body) != []


def test_an_undocumented_status_or_a_body_that_is_not_json_is_rejected() -> None:
    found = check("GET", "/v1/batches/b", 418, {"error": {"code": "teapot", "message": "x"}})
    assert len(found) == 1 and "which the spec does not list" in found[0], found

    seen = ResponseCheck()
    seen.serve("http://127.0.0.1:1")
    seen.observe("GET", "http://127.0.0.1:1/v1/batches/b", 200, "<h1>hello</h1>")
    (violation,) = seen.take()
    assert "not JSON" in violation
    # A 204 has no body, as the spec says.
    seen.observe("DELETE", "http://127.0.0.1:1/v1/tokens/t", 204, "")
    assert seen.take() == []


def test_only_the_answers_of_a_served_batchgate_are_checked() -> None:
    check = ResponseCheck()
    bad = json.dumps({"ready": "yes"})
    check.observe("GET", "http://127.0.0.1:1/ready?dataset=d", 200, bad)
    assert (check.take(), sum(check.validated.values())) == ([], 0)

    check.serve("http://127.0.0.1:1")
    check.observe("GET", "http://127.0.0.1:1/ready?dataset=d", 200, bad)
    # "yes" is no boolean, and "dataset" and "partitions" are missing.
    assert len(check.take()) == 3
    assert check.validated == {"GET /ready 200": 1}

    check.retire("http://127.0.0.1:1")
    check.observe("GET", "http://127.0.0.1:1/ready?dataset=d", 200, bad)
    assert check.take() == []


def test_the_requests_hook_catches_a_non_conforming_body(stand_in: str) -> None:  # noqa: F811
    # A stand-in playing batchgate, with a /ready answer the spec forbids.
    body = b'{"ready": true, "dataset": "test.x", "partitions": "all"}'
    _Recorder.answers = [(200, "application/json", body)]
    check = ResponseCheck()
    check.serve(stand_in)
    with BatchgateClient(stand_in) as c:
        c._session().hooks["response"].append(check.requests_hook)
        readiness = c.ready("test.x", [PARTITION])

    assert readiness.ready  # the client itself does not judge
    (violation,) = check.take()
    assert "GET /ready (/ready) answered 200" in violation
    assert "'all' is not of type 'array'" in violation


def test_the_aiohttp_middleware_catches_a_non_conforming_body(stand_in: str) -> None:  # noqa: F811
    aiohttp = pytest.importorskip("aiohttp")
    _Recorder.answers = [(404, "application/json", b'{"ready": false, "reason": "sleepy"}')]
    check = ResponseCheck()
    check.serve(stand_in)

    async def ask() -> str:
        async with aiohttp.ClientSession(middlewares=(check.aiohttp_middleware,)) as session:
            async with session.get(f"{stand_in}/ready", params={"dataset": "d"}) as r:
                return str(await r.text())

    assert json.loads(asyncio.run(ask()))["reason"] == "sleepy"  # the caller still reads it
    violations = check.take()
    assert any("'sleepy' is not one of" in v for v in violations), violations


def test_the_session_s_check_sees_the_client_s_answers(client: BatchgateClient) -> None:
    before = CHECK.validated["GET /ready 404"]
    assert not client.ready("test.never_written", [PARTITION]).ready
    with pytest.raises(BatchgateError):
        client.get_batch("no-such-batch")
    assert CHECK.validated["GET /ready 404"] == before + 1
    assert CHECK.validated["GET /v1/batches/{batch_id} 404"] >= 1
