DROP TABLE IF EXISTS coordinator_topics;
