-- Store the history that rows written since the up migration derive, then drop the column.
INSERT INTO coordinator_events (gid, state, created_at)
SELECT gid, 'active', created_at FROM coordinator_transactions t
WHERE derived_events
  AND NOT EXISTS (SELECT 1 FROM coordinator_events e WHERE e.gid = t.gid AND e.state = 'active' AND e.created_at = t.created_at)
UNION ALL
SELECT gid, 'prepared', prepared_at FROM coordinator_transactions t
WHERE derived_events AND prepared_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM coordinator_events e WHERE e.gid = t.gid AND e.state = 'prepared' AND e.created_at = t.prepared_at)
UNION ALL
SELECT gid, 'committed', finished_at FROM coordinator_transactions t
WHERE derived_events AND state = 'committed' AND finished_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM coordinator_events e WHERE e.gid = t.gid AND e.state = 'committed' AND e.created_at = t.finished_at);
ALTER TABLE coordinator_transactions DROP COLUMN derived_events;
