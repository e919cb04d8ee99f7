ALTER TABLE coordinator_transactions DROP COLUMN kafka_offsets;
