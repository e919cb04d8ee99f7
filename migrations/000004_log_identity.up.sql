-- The log's identity. A log claims its namespace (the gid prefix) in every participant database
-- under this id, so that two logs never share a namespace: each rolls back prepared
-- transactions and deletes marker rows only inside its own (sqltxn.ClaimNamespace).
CREATE TABLE coordinator_log (
    id         text        PRIMARY KEY DEFAULT gen_random_uuid()::text,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO coordinator_log DEFAULT VALUES;
