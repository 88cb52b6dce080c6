-- OpenLineage intake. Same tables and columns as the SQLite schema, in native types.

CREATE TABLE openlineage_events (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at   TIMESTAMPTZ NOT NULL,
    run_id        TEXT,
    event_type    TEXT,
    job_namespace TEXT,
    job           TEXT,
    body          JSONB NOT NULL,
    outcome       JSONB
);
CREATE INDEX openlineage_events_run ON openlineage_events (run_id, id);

CREATE INDEX batches_run_ref ON batches (run_ref);
