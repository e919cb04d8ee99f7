package txlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/txlog"
)

// TestRecentTopics: the topics recorded within the period come back, each once, whatever the
// log's rows; recording again refreshes a topic.
func TestRecentTopics(t *testing.T) {
	t.Parallel()
	l, pool := newLogWith(t, txlog.Options{})
	ctx := context.Background()
	require.NoError(t, l.RecordTopics(ctx, []string{"orders", "payments", "orders"}))
	_, err := pool.Exec(ctx, `INSERT INTO coordinator_topics (topic, seen_at) VALUES ('old', now() - interval '2 days')`)
	require.NoError(t, err)
	topics, err := l.RecentTopics(ctx, 24*time.Hour)
	require.NoError(t, err)
	assert.Equal(t, []string{"orders", "payments"}, topics)

	require.NoError(t, l.RecordTopics(ctx, []string{"old"}))
	topics, err = l.RecentTopics(ctx, 24*time.Hour)
	require.NoError(t, err)
	assert.Equal(t, []string{"old", "orders", "payments"}, topics, "recorded again: recent")
}

// TestTopicsMigrationSeedsFromRows: upgrading a log (000009) records the topics of the rows of
// the last day, so a restart right after the upgrade still scans them.
func TestTopicsMigrationSeedsFromRows(t *testing.T) {
	t.Parallel()
	l, pool := newLogWith(t, txlog.Options{})
	ctx := context.Background()
	_, err := pool.Exec(ctx, `DROP TABLE coordinator_topics;
UPDATE coordinator_schema_migrations SET version = 8`)
	require.NoError(t, err)
	for i, r := range []struct{ records, age string }{
		{`[{"topic": "orders", "partition": 0, "offset": 1}, {"topic": "audit", "partition": 1, "offset": 7}]`, "1 hour"},
		{`[{"topic": "orders", "partition": 2, "offset": 3}]`, "2 hours"},
		{`[{"topic": "stale", "partition": 0, "offset": 1}]`, "3 days"},
		{`[]`, "1 minute"},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO coordinator_transactions (gid, request_id, request_digest, instance_id,
    state, owner_instance, owner_epoch, kafka_records, sql_gids, created_at, updated_at)
VALUES ('p_m' || $1::int, 'm' || $1::int, '\x01', 'a', 'committed', 'a', 1, $2::jsonb, '[]', now() - $3::interval, now())`,
			i, r.records, r.age)
		require.NoError(t, err)
	}
	require.NoError(t, txlog.Migrate(ctx, l, "up"))
	topics, err := l.RecentTopics(ctx, 24*time.Hour)
	require.NoError(t, err)
	assert.Equal(t, []string{"audit", "orders"}, topics)
}
