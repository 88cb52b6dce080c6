"""``client.changes(after=cursor)``: the change feed for consumers that run
no scheduler, against the real service."""

from __future__ import annotations

from batchgate import BatchgateClient

from .helpers import DT, MARKER, Names, good


def publish(client: BatchgateClient, names: Names, partition: str, rows: int = 100) -> str:
    started = client.start_batch(names.task, names.dataset, DT, [partition])
    client.commit(started.batch_id, good(rows, partition), marker=MARKER)
    return started.batch_id


def test_changes_iterates_the_feed_across_pages_and_resumes_from_a_stored_cursor(
    client: BatchgateClient, names: Names
) -> None:
    parts = [f"dt={DT}/h={h:02d}" for h in range(5)]
    for p in parts:
        publish(client, names, p)
    publish(client, names, parts[0], rows=120)

    seen = list(client.changes(dataset=names.dataset, page_size=2))
    assert [(c["kind"], c["partition"]) for c in seen] == [("published", p) for p in parts] + [
        ("restated", parts[0])
    ]
    assert all(c["dataset"] == names.dataset for c in seen)
    assert len({c["cursor"] for c in seen}) == len(seen)

    # A consumer stored the cursor of the third change, then stopped.
    stored = seen[2]["cursor"]
    assert list(client.changes(after=stored, dataset=names.dataset, page_size=2)) == seen[3:]

    # Caught up: nothing new until something changes; then only the new change.
    last = seen[-1]["cursor"]
    assert list(client.changes(after=last, dataset=names.dataset)) == []
    batch_id = publish(client, names, f"dt={DT}/h=09")
    new = list(client.changes(after=last, dataset=names.dataset))
    assert [(c["kind"], c["batch_id"]) for c in new] == [("published", batch_id)]
