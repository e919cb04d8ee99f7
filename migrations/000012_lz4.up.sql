-- A pipeline batch's prepared write stores hundreds of record offsets and SQL results in one row,
-- tens of kilobytes of jsonb that PostgreSQL compresses into TOAST on every such write. lz4
-- compresses them in about two thirds of pglz's time (docs/decisions.md). Only a server built
-- with lz4 (PostgreSQL 14 or later, --with-lz4) offers it; any other keeps pglz. The change is
-- to the table's metadata only: rows written before stay pglz, and both are read alike.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_settings
               WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE coordinator_transactions
            ALTER COLUMN kafka_records SET COMPRESSION lz4,
            ALTER COLUMN sql_results SET COMPRESSION lz4,
            ALTER COLUMN kafka_offsets SET COMPRESSION lz4;
    END IF;
END $$;
