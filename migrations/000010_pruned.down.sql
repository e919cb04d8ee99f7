DROP TABLE IF EXISTS coordinator_pruned;
