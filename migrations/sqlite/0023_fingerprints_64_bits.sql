-- A mark, no table changed: since this version a request's fingerprint
-- (batches.request_fingerprint and decision_fingerprint) is the first 64
-- bits of its SHA-256, 11 characters (store::records::fingerprint). This
-- version still knows the 128- and 256-bit forms and the bodies written
-- before; a version before it does not know the 64-bit form, and would
-- answer a repeated start or commit with a 409 instead of its replay.
-- batchgate refuses a database holding a migration it does not have, so
-- with this mark an older binary stops at start-up instead.
SELECT 1;
