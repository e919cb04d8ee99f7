-- The Kafka topics the coordinator's transactions write to, each with when an instance last
-- recorded it: after a restart, the hanging-transaction scans look at the topics recorded within
-- the last day (kafkatxn/hanging.go). Reading them from the log's rows instead scanned every row
-- of that day, which grows with the load (1.7 s for 0.7 million rows; a day at a few thousand
-- requests a second is hundreds of millions), and startup waited for it. An instance records a
-- topic before it first produces to it, and again at most hourly (kafkatxn.Config.RecordTopics).
-- The rows of the last day seed the table, so that no topic of them is lost by the upgrade.
CREATE TABLE IF NOT EXISTS coordinator_topics (
    topic   text PRIMARY KEY,
    seen_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO coordinator_topics (topic, seen_at)
SELECT r->>'topic', max(t.created_at)
FROM coordinator_transactions t, jsonb_array_elements(t.kafka_records) r
WHERE t.created_at > now() - interval '1 day' AND t.kafka_records <> '[]' AND r->>'topic' IS NOT NULL
GROUP BY 1
ON CONFLICT (topic) DO NOTHING;
