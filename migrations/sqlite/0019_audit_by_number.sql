-- Fewer stored bytes per batch (issue 14): the audit log's new rows name
-- their actor, action, method and dataset by number (`audit_names`, each
-- text stored once), so its two indexes hold two integers per row instead
-- of a name and an integer, and their time is microseconds since
-- 1970-01-01 UTC (an integer: 8 bytes where the text took 27). A batch's
-- start and commit write two audit rows.
--
-- The rows written before stay in `audit`, which nothing writes any more:
-- the log is read from both tables (store::tokens::audit_page_sql), so no
-- table is rewritten. `audit_log` numbers its rows on from `audit`'s last
-- id, so ids keep their order across the two and cursors stay valid.
-- AUTOINCREMENT: a number is never given twice, not even one whose insert
-- was rolled back (an instance may have seen it).
CREATE TABLE audit_names (
    id   INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE
);

CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    -- Microseconds since 1970-01-01 UTC.
    at         INTEGER NOT NULL,
    -- audit_names.id of each.
    actor      INTEGER NOT NULL,
    action     INTEGER NOT NULL,
    method     INTEGER NOT NULL,
    dataset    INTEGER,
    status     INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    path       TEXT NOT NULL
);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_dataset ON audit_log (dataset, id);

INSERT INTO sqlite_sequence (name, seq) SELECT 'audit_log', seq FROM sqlite_sequence WHERE name = 'audit';
