-- Fewer stored bytes per batch (issue 14): the audit log's new rows name
-- their actor, action, method and dataset by number (`audit_names`, each
-- text stored once), so its two indexes hold two integers per row instead
-- of a name and an integer. A batch's start and commit write two audit rows.
-- Same tables and columns as the SQLite schema (whose `at` is an integer).
--
-- The rows written before stay in `audit`, which nothing writes any more:
-- the log is read from both tables (store::tokens::audit_page_sql), so no
-- table is rewritten. `audit_log` takes its ids from `audit`'s sequence, so
-- ids keep their order across the two (even while a replica of the
-- version before still writes `audit`) and cursors stay valid.
CREATE TABLE audit_names (
    id   INTEGER GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);

CREATE TABLE audit_log (
    id         BIGINT PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL,
    -- audit_names.id of each.
    actor      INTEGER NOT NULL,
    action     INTEGER NOT NULL,
    method     INTEGER NOT NULL,
    dataset    INTEGER,
    status     SMALLINT NOT NULL,
    request_id TEXT NOT NULL,
    path       TEXT NOT NULL
);
-- `audit_log` depends on `audit`'s sequence from here on: whoever drops
-- `audit` one day gives `audit_log` a sequence of its own first.
DO $$
BEGIN
    EXECUTE format('ALTER TABLE audit_log ALTER COLUMN id SET DEFAULT nextval(%L)', pg_get_serial_sequence('audit', 'id'));
END
$$;
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_dataset ON audit_log (dataset, id);
