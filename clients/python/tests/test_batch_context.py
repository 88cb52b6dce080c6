"""``with client.batch(...)``: start, heartbeat, commit or fail, never a silent success."""

from __future__ import annotations

import time

import pytest

from batchgate import BatchFailed, BatchgateClient, BatchNotCommitted, ChecksFailed

from .helpers import DT, MARKER, PARTITION, Names, bad, good


def kinds(client: BatchgateClient, batch_id: str) -> list[str]:
    events = client.get_batch(batch_id).events
    assert events is not None
    return [e.kind for e in events]


def beats(client: BatchgateClient, batch_id: str) -> int:
    """How many heartbeats the batch got (they are summed up in one event)."""
    events = client.get_batch(batch_id).events
    assert events is not None
    return sum(e.detail["count"] for e in events if e.kind == "heartbeat")


def test_a_committed_block_publishes_and_heartbeats_while_it_runs(
    client: BatchgateClient, names: Names
) -> None:
    with client.batch(names.task, names.dataset, DT, [PARTITION], lease_seconds=3) as b:
        assert b.heartbeat_interval == 1.0
        time.sleep(3.5)
        record = b.commit(good(), marker=MARKER)

    assert record.state == "published"
    assert b.record == record
    events = kinds(client, b.batch_id)
    assert events[0] == "started" and events[-1] == "committed"
    assert events.count("heartbeat") == 1
    assert beats(client, b.batch_id) >= 2
    assert client.ready(names.dataset, [PARTITION]).ready


def test_heartbeats_stop_when_the_block_ends(client: BatchgateClient, names: Names) -> None:
    with client.batch(names.task, names.dataset, DT, [PARTITION], heartbeat_interval=0.2) as b:
        b.commit(good(), marker=MARKER)
    after_exit = (kinds(client, b.batch_id), beats(client, b.batch_id))

    time.sleep(0.6)

    assert (kinds(client, b.batch_id), beats(client, b.batch_id)) == after_exit


def test_an_exception_in_the_block_reports_a_write_failure_and_propagates(
    client: BatchgateClient, names: Names
) -> None:
    with pytest.raises(OSError):
        with client.batch(names.task, names.dataset, DT, [PARTITION]) as b:
            raise OSError("disk full")

    record = client.get_batch(b.batch_id)
    assert record.state == "failed"
    assert record.failure is not None
    assert (record.failure.stage, record.failure.category) == ("write", "unknown")
    assert record.failure.message == "OSError: disk full"
    assert client.ready(names.dataset, [PARTITION]).reason == "failed"


def test_batch_failed_reports_its_stage_and_category(client: BatchgateClient, names: Names) -> None:
    with client.batch(names.task, names.dataset, DT, [PARTITION]) as first:
        first.commit(good(), marker=MARKER)

    with pytest.raises(BatchFailed):
        with client.batch(names.task, names.dataset, DT, [PARTITION]) as b:
            raise BatchFailed("source table empty", stage="read", category="data")

    failure = client.get_batch(b.batch_id).failure
    assert failure is not None
    assert (failure.stage, failure.category, failure.message) == (
        "read",
        "data",
        "source table empty",
    )
    # A failure at read wrote nothing: the earlier version stays ready.
    assert client.ready(names.dataset, [PARTITION]).ready


def test_a_block_that_ends_without_a_commit_fails_the_batch_and_raises(
    client: BatchgateClient, names: Names
) -> None:
    with pytest.raises(BatchNotCommitted) as raised:
        with client.batch(names.task, names.dataset, DT, [PARTITION]) as b:
            pass

    assert raised.value.details["batch_id"] == b.batch_id
    record = client.get_batch(b.batch_id)
    assert record.state == "failed"
    assert record.failure is not None
    assert record.failure.message == "the batch block ended without a commit"


def test_a_rejected_commit_raises_and_is_not_reported_as_a_failure(
    client: BatchgateClient, names: Names
) -> None:
    with pytest.raises(ChecksFailed) as raised:
        with client.batch(names.task, names.dataset, DT, [PARTITION]) as b:
            b.commit(bad(), marker=MARKER)

    assert raised.value.batch.state == "rejected"
    assert client.get_batch(b.batch_id).state == "rejected"
    assert "failed" not in kinds(client, b.batch_id)


def test_the_next_attempt_sees_the_residue_of_a_failed_write(
    client: BatchgateClient, names: Names
) -> None:
    with pytest.raises(RuntimeError):
        with client.batch(names.task, names.dataset, DT, [PARTITION]) as failed:
            raise RuntimeError("executor lost")

    with client.batch(names.task, names.dataset, DT, [PARTITION]) as b:
        residue = [(r.batch_id, r.state) for r in b.residue]
        b.commit(good(), marker=MARKER)

    assert residue == [(failed.batch_id, "failed")]
    assert b.started.seq == 2
