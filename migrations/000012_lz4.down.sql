DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_settings
               WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE coordinator_transactions
            ALTER COLUMN kafka_records SET COMPRESSION DEFAULT,
            ALTER COLUMN sql_results SET COMPRESSION DEFAULT,
            ALTER COLUMN kafka_offsets SET COMPRESSION DEFAULT;
    END IF;
END $$;
