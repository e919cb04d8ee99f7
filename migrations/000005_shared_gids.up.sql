-- PostgreSQL transactions shared by several requests of a batch (docs/batching.md section 12).
-- A row is written by the batch's prepared write, in the same transaction that logs its members
-- prepared, and names the members whose work the shared transaction holds (S2). The orphan
-- sweep writes a row with no members, a tombstone, before it rolls back a shared transaction
-- that no row names: the primary key then refuses a late prepared write of that batch (S3).
CREATE TABLE coordinator_shared_gids (
    gid        text        PRIMARY KEY,
    members    text[]      NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
