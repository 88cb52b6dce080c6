"""BatchgateClient against the real service: results, errors and waiting."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from batchgate import (
    BatchgateClient,
    BatchgateError,
    BatchInProgress,
    ChecksFailed,
    Conflict,
    InvalidRequest,
    NotFound,
    PartitionRejected,
    ServiceUnavailable,
    WaitTimeout,
)

from .helpers import DT, MARKER, PARTITION, TOKEN, Names, Service, bad, good, later


def publish(client: BatchgateClient, names: Names, rows: int = 100) -> str:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION])
    client.commit(started.batch_id, good(rows), marker=MARKER)
    return started.batch_id


def test_a_start_returns_the_batch_id_and_attempt(client: BatchgateClient, names: Names) -> None:
    started = client.start_batch(
        names.task, names.dataset, DT, [PARTITION], run_ref="manual__1", trigger="manual"
    )

    assert started.batch_id == f"{names.task}-20260824-001"
    assert started.seq == 1
    assert started.state == "running"
    assert started.residue == []
    record = client.get_batch(started.batch_id)
    assert (record.trigger, record.run_ref, record.dt) == ("manual", "manual__1", DT)
    assert record.events is not None and [e.kind for e in record.events] == ["started"]


def test_a_commit_publishes_and_the_partition_becomes_ready(
    client: BatchgateClient, names: Names
) -> None:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION])
    assert client.ready(names.dataset, [PARTITION]).reason == "running"

    record = client.commit(
        started.batch_id, good(100), marker=MARKER, source={"row_count": 100, "metrics": {}}
    )

    assert record.state == "published"
    assert record.marker == MARKER
    assert [(p.partition, p.version, p.row_count) for p in record.partitions] == [
        (PARTITION, 1, 100)
    ]
    assert all(c.status in ("pass", "skipped") for c in record.checks)
    by_partition = client.ready(names.dataset, [PARTITION])
    assert by_partition.ready and by_partition.reason is None
    assert by_partition.partitions[0]["version"] == 1
    assert by_partition.partitions[0]["batch_id"] == started.batch_id
    by_task = client.ready(task=names.task, dt=DT)
    assert by_task.ready and by_task.body["latest_batch_id"] == started.batch_id


def test_a_partition_never_written_is_not_ready(client: BatchgateClient, names: Names) -> None:
    readiness = client.ready(names.dataset, [PARTITION])

    assert not readiness.ready
    assert readiness.reason == "no_batch"
    assert readiness.partition == PARTITION


def test_a_rejected_commit_raises_checks_failed_with_the_batch(
    client: BatchgateClient, names: Names
) -> None:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION])

    with pytest.raises(ChecksFailed) as raised:
        client.commit(started.batch_id, bad(), marker=MARKER)

    error = raised.value
    assert (error.status, error.code) == (422, "checks_failed")
    assert error.batch.batch_id == started.batch_id
    assert error.batch.state == "rejected"
    assert [(c.name, c.partition) for c in error.failed_checks] == [
        ("rows_match_written", PARTITION)
    ]
    assert error.details["failed_checks"] == ["rows_match_written"]
    assert "rows_match_written" in str(error)
    assert client.ready(names.dataset, [PARTITION]).reason == "rejected"


def test_a_start_over_a_running_batch_raises_batch_in_progress(
    client: BatchgateClient, names: Names
) -> None:
    first = client.start_batch(names.task, names.dataset, DT, [PARTITION])

    with pytest.raises(BatchInProgress) as raised:
        client.start_batch(names.task, names.dataset, DT, [PARTITION])

    assert isinstance(raised.value, Conflict)
    assert (raised.value.status, raised.value.code) == (409, "batch_in_progress")
    assert raised.value.details["batch_id"] == first.batch_id


def test_an_idempotency_key_makes_a_retried_start_return_the_same_batch(
    client: BatchgateClient, names: Names
) -> None:
    first = client.start_batch(names.task, names.dataset, DT, [PARTITION], idempotency_key="k-1")
    again = client.start_batch(names.task, names.dataset, DT, [PARTITION], idempotency_key="k-1")

    assert again.batch_id == first.batch_id


def test_invalid_input_raises_invalid_request_naming_the_field(
    client: BatchgateClient, names: Names
) -> None:
    with pytest.raises(InvalidRequest) as raised:
        client.start_batch(names.task, names.dataset, DT, ["dt 2026-08-24"])

    assert raised.value.status == 422
    assert raised.value.code == "invalid_partition"
    assert raised.value.details["field"] == "partitions[0]"


def test_an_unknown_batch_raises_not_found(client: BatchgateClient) -> None:
    with pytest.raises(NotFound) as raised:
        client.get_batch("nope-20260824-001")

    assert (raised.value.status, raised.value.code) == (404, "batch_not_found")


def test_heartbeat_extends_the_lease_until_the_batch_is_decided(
    client: BatchgateClient, names: Names
) -> None:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION], lease_seconds=60)
    time.sleep(1.1)

    lease = client.heartbeat(started.batch_id)

    assert lease.state == "running"
    assert lease.lease_expires_at > started.lease_expires_at
    client.commit(started.batch_id, good(), marker=MARKER)
    with pytest.raises(Conflict) as raised:
        client.heartbeat(started.batch_id)
    assert raised.value.code == "batch_not_running"


def test_fail_records_stage_and_category_and_a_second_decision_conflicts(
    client: BatchgateClient, names: Names
) -> None:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION])

    record = client.fail(started.batch_id, stage="compute", category="data", message="bad input")

    assert record.state == "failed"
    assert record.failure is not None
    assert (record.failure.stage, record.failure.category, record.failure.message) == (
        "compute",
        "data",
        "bad input",
    )
    with pytest.raises(Conflict) as raised:
        client.commit(started.batch_id, good(), marker=MARKER)
    assert raised.value.code == "already_decided"


def test_batches_lists_newest_first_with_filters_and_pages(
    client: BatchgateClient, names: Names
) -> None:
    ids = [publish(client, names) for _ in range(3)]

    first = client.batches(task=names.task, limit=2)
    second = client.batches(task=names.task, limit=2, cursor=first.next_cursor)
    published = client.batches(dataset=names.dataset, dt=DT, state="published")

    assert [b.batch_id for b in first.items] == ids[:0:-1]
    assert first.next_cursor is not None
    assert [b.batch_id for b in second.items] == ids[:1]
    assert second.next_cursor is None
    assert [b.batch_id for b in published.items] == [ids[2]]
    assert first.items[0].events is None


def test_wait_ready_returns_as_soon_as_a_batch_publishes(
    client: BatchgateClient, names: Names
) -> None:
    publisher = later(1.0, lambda: publish(client, names))
    begun = time.monotonic()

    readiness = client.wait_ready(names.dataset, [PARTITION], timeout=30)

    elapsed = time.monotonic() - begun
    publisher.join()
    assert readiness.ready
    assert readiness.partitions[0]["version"] == 1
    assert 0.9 < elapsed < 10, elapsed


def test_wait_ready_by_task_and_dt(client: BatchgateClient, names: Names) -> None:
    publisher = later(0.5, lambda: publish(client, names))

    readiness = client.wait_ready(task=names.task, dt=DT, timeout=30)

    publisher.join()
    assert readiness.ready and readiness.body["task"] == names.task


def test_wait_ready_times_out_with_the_last_answer(client: BatchgateClient, names: Names) -> None:
    client.start_batch(names.task, names.dataset, DT, [PARTITION])
    begun = time.monotonic()

    with pytest.raises(WaitTimeout) as raised:
        client.wait_ready(names.dataset, [PARTITION], timeout=1.5, max_slice=0.5)

    elapsed = time.monotonic() - begun
    assert 1.5 <= elapsed < 10, elapsed
    assert raised.value.readiness is not None
    assert raised.value.readiness.reason == "running"
    assert isinstance(raised.value, TimeoutError)


def test_wait_ready_fails_fast_on_a_rejection_when_asked(
    client: BatchgateClient, names: Names
) -> None:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION])

    def reject() -> None:
        with pytest.raises(ChecksFailed):
            client.commit(started.batch_id, bad(), marker=MARKER)

    publisher = later(1.0, reject)
    begun = time.monotonic()

    with pytest.raises(PartitionRejected) as raised:
        client.wait_ready(names.dataset, [PARTITION], timeout=60, fail_on_rejected=True)

    elapsed = time.monotonic() - begun
    publisher.join()
    assert elapsed < 10, elapsed
    assert raised.value.readiness.batch_id == started.batch_id
    assert raised.value.code == "rejected"


def test_wait_ready_without_fail_on_rejected_waits_out_a_rejection(
    client: BatchgateClient, names: Names
) -> None:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION])
    with pytest.raises(ChecksFailed):
        client.commit(started.batch_id, bad(), marker=MARKER)

    with pytest.raises(WaitTimeout) as raised:
        client.wait_ready(names.dataset, [PARTITION], timeout=1)

    assert raised.value.readiness is not None
    assert raised.value.readiness.reason == "rejected"


def test_ready_refuses_an_ambiguous_question(client: BatchgateClient, names: Names) -> None:
    with pytest.raises(ValueError):
        client.ready(names.dataset, [PARTITION], task=names.task, dt=DT)
    with pytest.raises(ValueError):
        client.ready(names.dataset, PARTITION)
    with pytest.raises(ValueError):
        client.ready(names.dataset, [PARTITION], wait=301)


def test_an_unreachable_service_raises_service_unavailable() -> None:
    with socket.socket() as bound_not_listening:
        bound_not_listening.bind(("127.0.0.1", 0))
        port = bound_not_listening.getsockname()[1]
        client = BatchgateClient(f"http://127.0.0.1:{port}", timeout=2)
        with pytest.raises(ServiceUnavailable) as raised:
            client.ready("test.x", [PARTITION])

    assert raised.value.code == "unreachable"
    assert raised.value.status is None


# -- what goes over the wire, seen by a stand-in server -----------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the next canned response and records the headers."""

    answers: list[tuple[int, str, bytes]] = []
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.seen.append(dict(self.headers))
        status, content_type, body = self.answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    _Recorder.answers, _Recorder.seen = [], []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_token_is_sent_as_a_bearer_header(stand_in: str) -> None:
    body = json.dumps({"ready": False, "reason": "no_batch"}).encode()
    _Recorder.answers = [(404, "application/json", body)]

    BatchgateClient(stand_in, token="s3cret").ready("test.x", [PARTITION])

    assert _Recorder.seen[0]["Authorization"] == "Bearer s3cret"


def test_an_answer_that_is_not_the_services_keeps_its_status_and_text(stand_in: str) -> None:
    _Recorder.answers = [(502, "text/html", b"<h1>Bad Gateway</h1>")]

    with pytest.raises(ServiceUnavailable) as raised:
        BatchgateClient(stand_in).ready("test.x", [PARTITION])

    assert (raised.value.status, raised.value.code) == (502, "http_502")
    assert "Bad Gateway" in raised.value.message
    assert isinstance(raised.value, BatchgateError)


def test_a_rejection_names_each_failed_check_once_with_observed_and_expected(
    client: BatchgateClient, names: Names
) -> None:
    started = client.start_batch(names.task, names.dataset, DT, [PARTITION])

    with pytest.raises(ChecksFailed) as raised:
        client.commit(started.batch_id, bad(), marker=MARKER)

    text = str(raised.value)
    assert text.startswith(f"batch {started.batch_id} rejected: 1 check(s) failed\n"), text
    assert f"  rows_match_written {PARTITION}: observed 90, expected 100: " in text, text
    assert text.count("rows_match_written") == 1, text
    assert text.count("rejected") == 1, text


def test_every_start_field_reaches_the_batch(client: BatchgateClient, names: Names) -> None:
    upstream = f"{names.dataset}_up"
    with client.batch(
        task=f"{names.task}_up", dataset=upstream, dt=DT, partitions=[PARTITION]
    ) as b:
        b.commit(good(5), marker=MARKER)
    client.put_dataset(names.dataset, write_mode="append")
    plan = client.create_repair(upstream, [PARTITION], "rebuild", "re-extract")

    # An unready input refuses the start unless allowed.
    with pytest.raises(Conflict) as refused:
        client.start_batch(names.task, names.dataset, DT, [PARTITION], inputs=["no.such:dt=1"])
    assert refused.value.code == "upstream_not_ready"
    first = client.start_batch(
        names.task,
        names.dataset,
        DT,
        [PARTITION],
        inputs=[("no.such", "dt=1")],
        allow_unready_inputs=True,
    )
    client.written(first.batch_id, [{"partition": PARTITION, "rows_written": 3}])
    client.fail(first.batch_id, stage="write")

    with pytest.raises(Conflict) as refused:
        client.start_batch(names.task, names.dataset, DT, [PARTITION])
    assert refused.value.code == "cleanup_required"
    started = client.start_batch(
        names.task,
        names.dataset,
        DT,
        [PARTITION],
        inputs=[{"dataset": upstream, "partition": PARTITION}],
        cleaned_batch_ids=[first.batch_id],
        repair_id=plan["id"],
        trigger="repair",
    )
    record = client.get_batch(started.batch_id).raw
    assert [(i["dataset"], i["partition"], i["version"]) for i in record["inputs"]] == [
        (upstream, PARTITION, 1)
    ]
    assert record["repair_id"] == plan["id"]
    first_record = client.get_batch(first.batch_id).raw
    assert first_record["allow_unready_inputs"] is True


def test_invalidate_and_alerts(client: BatchgateClient, names: Names) -> None:
    with client.batch(task=names.task, dataset=names.dataset, dt=DT, partitions=[PARTITION]) as b:
        b.commit(good(5), marker=MARKER)
    client.invalidate(names.dataset, PARTITION, "bad extract")
    assert client.ready(names.dataset, [PARTITION]).reason == "invalidated"
    listed = client.partitions(names.dataset)
    assert [p["invalidated_reason"] for p in listed["items"]] == ["bad extract"]
    assert isinstance(client.alerts(dataset=names.dataset)["items"], list)


def test_the_service_requires_the_token_the_client_sends(service: Service, names: Names) -> None:
    # The session's service runs with --auth required.
    for token in (None, "bgt_not_a_token"):
        with BatchgateClient(service.base_url, token=token, timeout=10) as stranger:
            with pytest.raises(BatchgateError) as refused:
                stranger.start_batch(names.task, names.dataset, DT, [PARTITION])
            assert (refused.value.status, refused.value.code) == (401, "unauthenticated")
    with BatchgateClient(service.base_url, token=TOKEN, timeout=10) as holder:
        started = holder.start_batch(names.task, names.dataset, DT, [PARTITION])
        holder.commit(started.batch_id, good(), marker=MARKER)
        assert holder.ready(names.dataset, [PARTITION]).ready


def test_an_admin_makes_lists_and_revokes_tokens(client: BatchgateClient, names: Names) -> None:
    made = client.create_token(names.task, ["read"], expires_in="1d")
    with BatchgateClient(client.base_url, token=made["token"], timeout=10) as reader:
        assert not reader.ready(names.dataset, [PARTITION]).ready  # read: allowed
        with pytest.raises(BatchgateError) as refused:
            reader.start_batch(names.task, names.dataset, DT, [PARTITION])
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        assert names.task in [t["name"] for t in client.tokens()["items"]]
        client.revoke_token(names.task)
        with pytest.raises(BatchgateError) as revoked:
            reader.ready(names.dataset, [PARTITION])
        assert revoked.value.status == 401
