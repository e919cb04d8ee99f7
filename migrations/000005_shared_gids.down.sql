DROP TABLE IF EXISTS coordinator_shared_gids;
