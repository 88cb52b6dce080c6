-- OpenLineage intake: every RunEvent received at /api/v1/lineage, as sent, and
-- what the intake made of it. `outcome` is NULL until the event has been
-- processed (a row left NULL means processing stopped on a server error).

CREATE TABLE openlineage_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at   TEXT NOT NULL,
    run_id        TEXT,
    event_type    TEXT,
    job_namespace TEXT,
    job           TEXT,
    body          TEXT NOT NULL,
    outcome       TEXT
);
CREATE INDEX openlineage_events_run ON openlineage_events (run_id, id);

-- A run's batches are found by run_ref (the runId) and their Idempotency-Key
-- `openlineage:<runId>:<dataset>`.
CREATE INDEX batches_run_ref ON batches (run_ref);
