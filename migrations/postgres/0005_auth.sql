-- Authentication and audit: API tokens (stored only as a hash) and one audit
-- row per write. Same tables and columns as the SQLite schema.

CREATE TABLE tokens (
    name         TEXT PRIMARY KEY,
    -- SHA-256 of the whole secret, hex; the secret itself is never stored.
    secret_hash  TEXT NOT NULL UNIQUE,
    -- JSON array of scopes, e.g. ["read", "produce:sales.*"].
    scopes       JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ
);

CREATE TABLE audit (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL,
    actor      TEXT NOT NULL,
    request_id TEXT NOT NULL,
    action     TEXT NOT NULL,
    method     TEXT NOT NULL,
    path       TEXT NOT NULL,
    dataset    TEXT,
    status     BIGINT NOT NULL
);
CREATE INDEX audit_actor ON audit (actor, id);
CREATE INDEX audit_dataset ON audit (dataset, id);
