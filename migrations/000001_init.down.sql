DROP TABLE IF EXISTS coordinator_events;
DROP TABLE IF EXISTS coordinator_transactions;
DROP TABLE IF EXISTS coordinator_markers;
