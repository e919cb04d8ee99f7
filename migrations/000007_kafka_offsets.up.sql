-- A consumer group's offsets committed by a transaction's Kafka transaction (coord.OffsetCommit):
-- logged with prepared, with the ids of the transaction that commits them; NULL: none.
ALTER TABLE coordinator_transactions ADD COLUMN kafka_offsets jsonb;
