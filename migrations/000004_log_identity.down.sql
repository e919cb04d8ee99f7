DROP TABLE IF EXISTS coordinator_log;
