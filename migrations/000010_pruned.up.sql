-- What the retention removed that named Kafka records (R3 in docs/design.md): per transactional
-- id and partition, the highest offset of a record of a removed row. The hanging-transaction
-- repair reads it (H2): records no row explains, at or below the mark, may be those of a row
-- the retention removed, and are left to an operator (cannot_repair) instead of aborted; above
-- it, no row was ever removed, so records no row explains were never logged prepared and their
-- transaction can only have aborted. Written by the retention's DELETE itself, in the same
-- statement, so no row is ever gone without its mark. One row per id and partition: bounded by
-- the pool's ids times the partitions they write to.
CREATE TABLE IF NOT EXISTS coordinator_pruned (
    transactional_id text        NOT NULL,
    topic            text        NOT NULL,
    partition        integer     NOT NULL,
    max_offset       bigint      NOT NULL,
    pruned_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (transactional_id, topic, partition)
);
