-- Authentication and audit: API tokens (stored only as a hash) and one audit
-- row per write.

CREATE TABLE tokens (
    name         TEXT PRIMARY KEY,
    -- SHA-256 of the whole secret, hex; the secret itself is never stored.
    secret_hash  TEXT NOT NULL UNIQUE,
    -- JSON array of scopes, e.g. ["read", "produce:sales.*"].
    scopes       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    expires_at   TEXT,
    last_used_at TEXT
);

CREATE TABLE audit (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         TEXT NOT NULL,
    actor      TEXT NOT NULL,
    request_id TEXT NOT NULL,
    action     TEXT NOT NULL,
    method     TEXT NOT NULL,
    path       TEXT NOT NULL,
    dataset    TEXT,
    status     INTEGER NOT NULL
);
CREATE INDEX audit_actor ON audit (actor, id);
CREATE INDEX audit_dataset ON audit (dataset, id);
