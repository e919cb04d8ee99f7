-- The coordinator log: one row per global transaction. Recovery reads everything it needs from
-- here (docs/design.md I2, I5): the Kafka ids, the prepared state, the produced offsets, the SQL gids.
CREATE TABLE coordinator_transactions (
    gid              text        PRIMARY KEY,
    request_id       text        NOT NULL UNIQUE,
    request_digest   bytea       NOT NULL,
    instance_id      text        NOT NULL,
    state            text        NOT NULL,
    transactional_id text,
    producer_id      bigint,
    producer_epoch   integer,
    prepared_state   text,
    kafka_records    jsonb       NOT NULL DEFAULT '[]',
    sql_gids         jsonb       NOT NULL DEFAULT '[]',
    sql_results      jsonb       NOT NULL DEFAULT '[]',
    error_participant text,
    error_class      text,
    error_message    text,
    error_sqlstate   text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    prepared_at      timestamptz,
    finished_at      timestamptz,
    CONSTRAINT coordinator_transactions_state_check CHECK (state IN
        ('active', 'prepared', 'committing', 'committed', 'aborted', 'heuristic', 'heuristic_mixed'))
);

-- In-doubt rows are what recovery scans; keep that scan cheap as the table grows.
CREATE INDEX coordinator_transactions_in_doubt
    ON coordinator_transactions (instance_id, state)
    WHERE state IN ('active', 'prepared', 'committing');

CREATE INDEX coordinator_transactions_state_created
    ON coordinator_transactions (state, created_at, gid);

-- Audit trail: every state change of every transaction.
CREATE TABLE coordinator_events (
    id         bigserial   PRIMARY KEY,
    gid        text        NOT NULL,
    state      text        NOT NULL,
    detail     jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX coordinator_events_gid ON coordinator_events (gid, id);

-- The marker table of the default database (other databases get theirs from sqltxn at startup).
-- A marker row is written inside the participant's SQL transaction; after a crash its presence
-- says the prepared transaction committed, its absence that it rolled back (docs/design.md I4).
CREATE TABLE IF NOT EXISTS coordinator_markers (
    gid        text        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
