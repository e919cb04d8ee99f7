package test

// Records as Kafka carries them (txntype/record.go, P1 and P2), end to end against the broker: what a
// read_committed consumer reads back must be exactly what was sent.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// landed is the committed record the answer's n-th offset names.
func (e *env) landed(r response, n int) *kgo.Record {
	e.t.Helper()
	recs, ok := r.get("kafka", "records").([]any)
	require.True(e.t, ok, "no kafka.records in %s", r.Raw)
	require.Greater(e.t, len(recs), n, "%s", r.Raw)
	off := recs[n].(map[string]any)
	topic := fmt.Sprint(off["topic"])
	got := e.committedRecords(topic)
	key := fmt.Sprintf("%v/%v", off["partition"], off["offset"])
	require.Contains(e.t, got, key, "record %d of %s not read back", n, r.Raw)
	return got[key]
}

func TestRecordsCarryBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	binKey := []byte{0x00, 0x01, 0xff, 0xfe}        // a NUL first, invalid UTF-8
	binValue := []byte{0x00, 0, 0, 0, 7, 'a', 0x80} // a Confluent-framed value starts with 0x00
	at := time.Date(2026, 1, 2, 3, 4, 5, 123e6, time.UTC)
	r := e.post(map[string]any{
		"id": "bytes-1",
		"kafka": []any{
			map[string]any{"topic": e.topic, "partition": 0,
				"key":   map[string]any{"type": "binary", "data": b64(binKey)},
				"value": map[string]any{"type": "binary", "data": b64(binValue)},
				"headers": []any{
					map[string]any{"name": "h", "value": "first"},
					map[string]any{"name": "h", "value_b64": b64([]byte{0x00, 0x01})},
					map[string]any{"name": "empty", "value": ""},
					map[string]any{"name": "null", "value": nil},
					map[string]any{"name": "h", "value": "a\x00b"},
				},
				"timestamp": at.Format(time.RFC3339Nano)},
			map[string]any{"topic": e.topic, "partition": 0,
				"key":       map[string]any{"type": "string", "data": "nul\x00inside"},
				"value":     map[string]any{"type": "json", "data": map[string]any{"total": 10, "items": []any{"a", nil}}},
				"timestamp": at.UnixMilli() + 1},
			map[string]any{"topic": e.topic, "partition": 0, "key": "tomb", "value": nil},
			map[string]any{"topic": e.topic, "partition": 0,
				"key":   map[string]any{"type": "binary", "data": ""},
				"value": map[string]any{"type": "string", "data": ""}},
		},
	})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)

	first := e.landed(r, 0)
	assert.Equal(t, binKey, first.Key)
	assert.Equal(t, binValue, first.Value)
	require.Len(t, first.Headers, 5)
	want := []kgo.RecordHeader{{Key: "h", Value: []byte("first")}, {Key: "h", Value: []byte{0, 1}},
		{Key: "empty", Value: []byte{}}, {Key: "null"}, {Key: "h", Value: []byte("a\x00b")}}
	for i, h := range want {
		assert.Equal(t, h.Key, first.Headers[i].Key, "header %d", i)
		assert.Equal(t, string(h.Value), string(first.Headers[i].Value), "header %d", i)
	}
	assert.Nil(t, first.Headers[3].Value, "a null header value stays null")
	assert.Equal(t, at.UnixMilli(), first.Timestamp.UnixMilli())

	second := e.landed(r, 1)
	assert.Equal(t, "nul\x00inside", string(second.Key))
	assert.JSONEq(t, `{"total":10,"items":["a",null]}`, string(second.Value))
	assert.NotContains(t, string(second.Value), " ", "json is serialized compactly")
	assert.Equal(t, at.UnixMilli()+1, second.Timestamp.UnixMilli())

	tomb := e.landed(r, 2)
	assert.Nil(t, tomb.Value, "a null value is a tombstone")

	empty := e.landed(r, 3)
	assert.NotNil(t, empty.Key)
	assert.Empty(t, empty.Key)
	assert.NotNil(t, empty.Value, "an empty value is not a null one")
	assert.Empty(t, empty.Value)

	// The object form of headers, as written (a Go map would sort its keys).
	p := e.post(`{"id": "bytes-2", "kafka": [{"topic": "` + e.topic + `", "key": "plain", "value": "{\"total\":10}",
		"headers": {"z": "1", "a": "2", "m": "3"}}]}`)
	require.Equal(t, http.StatusOK, p.Status, "%s", p.Raw)
	plain := e.landed(p, 0)
	assert.Equal(t, `{"total":10}`, string(plain.Value))
	require.Len(t, plain.Headers, 3)
	assert.Equal(t, []string{"z", "a", "m"}, []string{plain.Headers[0].Key, plain.Headers[1].Key, plain.Headers[2].Key},
		"the object form keeps the order written")

	// The answer and GET give each record's timestamp with its offset, the same story.
	recs := r.get("kafka", "records").([]any)
	ts := recs[0].(map[string]any)["timestamp"]
	require.NotNil(t, ts, "%s", r.Raw)
	got, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ts))
	require.NoError(t, err)
	assert.Equal(t, at.UnixMilli(), got.UnixMilli())
	g := e.do(http.MethodGet, "/v1/transactions/bytes-1", nil)
	require.Equal(t, http.StatusOK, g.Status)
	assertSameKafka(t, r, g)
	assert.NotContains(t, string(g.Raw), b64(binValue), "the log never stores record values")

	// The same body again: the stored outcome; other bytes under the same id: 422.
	again := e.post(map[string]any{"id": "bytes-1", "kafka": []any{map[string]any{"topic": e.topic, "partition": 0,
		"key": map[string]any{"type": "binary", "data": b64(binKey)}, "value": map[string]any{"type": "binary", "data": b64([]byte{1})}}}})
	assert.Equal(t, http.StatusUnprocessableEntity, again.Status, "%s", again.Raw)
}

// assertSameKafka checks that two answers tell the same story of the Kafka side.
func assertSameKafka(t *testing.T, a, b response) {
	t.Helper()
	ka, _ := json.Marshal(a.get("kafka"))
	kb, _ := json.Marshal(b.get("kafka"))
	assert.JSONEq(t, string(ka), string(kb), "POST and GET disagree on the Kafka side")
}

func TestRecordsIdempotentRetryWithBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	body := map[string]any{"id": "retry-bytes", "kafka": []any{map[string]any{"topic": e.topic,
		"value": map[string]any{"type": "binary", "data": b64([]byte{0, 1, 2})}}}}
	first := e.post(body)
	require.Equal(t, http.StatusOK, first.Status, "%s", first.Raw)
	second := e.post(body)
	require.Equal(t, http.StatusOK, second.Status, "%s", second.Raw)
	assert.Equal(t, first.get("kafka", "records"), second.get("kafka", "records"), "the stored outcome, nothing ran again")
}

// An aborted request's answer and GET name the same Kafka ids: the records were flushed in a
// transaction of the pool's (the statement fails only after a pause), then aborted.
func TestRecordsAbortedAnswerAgreesWithGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r := e.post(map[string]any{"id": "abort-ids",
		"sql": []any{map[string]any{"statement": "SELECT pg_sleep(0.5)"},
			map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('x', 'not a number')"}},
		"kafka": []any{map[string]any{"topic": e.topic, "value": "v"}}})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)
	require.NotEmpty(t, r.str("kafka", "transactional_id"), "the answer names the Kafka transaction: %s", r.Raw)
	g := e.do(http.MethodGet, "/v1/transactions/abort-ids", nil)
	require.Equal(t, http.StatusOK, g.Status)
	assert.Equal(t, "aborted", g.str("state"))
	assertSameKafka(t, r, g)
	assert.Zero(t, e.committedWithKey(""), "nothing of it is visible")
}

// P2: a record built from the statements' results, the transactional outbox in one request.
func TestRecordsFromResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	_, err := e.db.Exec(context.Background(), `CREATE TABLE shipments (id bigserial PRIMARY KEY, order_id text NOT NULL,
		payload bytea, created date NOT NULL DEFAULT '2026-12-03')`)
	require.NoError(t, err)
	r := e.post(map[string]any{"id": "outbox-1",
		"sql": []any{
			map[string]any{"statement": "INSERT INTO shipments (order_id, payload) VALUES ($1, '\\x00ff'::bytea) RETURNING id, order_id, created", "args": []any{"o-1"}},
			map[string]any{"statement": "SELECT payload, order_id || '!' AS shout FROM shipments WHERE order_id = $1", "args": []any{"o-1"}},
		},
		"kafka": []any{map[string]any{"topic": e.topic,
			"key":   map[string]any{"type": "string", "from": "sql[0].rows[0].id"},
			"value": map[string]any{"type": "json", "from": "sql[0].rows[0]"},
			"headers": []any{
				map[string]any{"name": "order", "from": "sql[0].rows[0].order_id"},
				map[string]any{"name": "payload", "from": `sql[1].rows[0]["payload"]`},
			}},
			map[string]any{"topic": e.topic,
				"value": map[string]any{"type": "binary", "from": "sql[1].rows[0].payload"}},
		}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	var id int64
	require.NoError(t, e.db.QueryRow(context.Background(), "SELECT id FROM shipments WHERE order_id = 'o-1'").Scan(&id))

	rec := e.landed(r, 0)
	assert.Equal(t, fmt.Sprint(id), string(rec.Key), "the generated id, known only after the insert")
	assert.JSONEq(t, fmt.Sprintf(`{"id":%d,"order_id":"o-1","created":"2026-12-03T00:00:00Z"}`, id), string(rec.Value))
	require.Len(t, rec.Headers, 2)
	assert.Equal(t, "o-1", string(rec.Headers[0].Value))
	assert.Equal(t, []byte{0x00, 0xff}, rec.Headers[1].Value, "bytea as its bytes")
	assert.Equal(t, []byte{0x00, 0xff}, e.landed(r, 1).Value)
}

// P2 on the shared paths: many requests at once share Kafka transactions (and would share SQL
// transactions but for their references); each record carries its own request's row.
func TestRecordsFromResultsShared(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	_, err := e.db.Exec(context.Background(), `CREATE TABLE events (seq bigserial PRIMARY KEY, name text NOT NULL)`)
	require.NoError(t, err)
	const n = 24
	var wg sync.WaitGroup
	answers := make([]response, n)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("ev-%d", i)
			body := map[string]any{"id": name,
				"sql": []any{map[string]any{"statement": "INSERT INTO events (name) VALUES ($1) RETURNING seq, name", "args": []any{name}}},
				"kafka": []any{map[string]any{"topic": e.topic, "key": name,
					"value": map[string]any{"type": "json", "from": "sql[0].rows[0]"}}}}
			switch i % 4 {
			case 0: // a plain member rides with them
				body["kafka"] = []any{map[string]any{"topic": e.topic, "key": name, "value": "plain"}}
			case 1: // a reference to a row that is not there: this member alone aborts
				body["kafka"] = []any{map[string]any{"topic": e.topic, "key": name,
					"value": map[string]any{"type": "json", "from": "sql[0].rows[1]"}}}
			}
			answers[i] = e.postQuiet(body)
		})
	}
	wg.Wait()
	seqs := map[string]int64{}
	rows, err := e.db.Query(context.Background(), "SELECT name, seq FROM events")
	require.NoError(t, err)
	for rows.Next() {
		var name string
		var seq int64
		require.NoError(t, rows.Scan(&name, &seq))
		seqs[name] = seq
	}
	require.NoError(t, rows.Err())
	got := e.committedRecords(e.topic)
	byKey := map[string]*kgo.Record{}
	for _, rec := range got {
		byKey[string(rec.Key)] = rec
	}
	for i, a := range answers {
		name := fmt.Sprintf("ev-%d", i)
		if i%4 == 1 {
			require.Equal(t, http.StatusConflict, a.Status, "%s: %s", name, a.Raw)
			assert.NotContains(t, seqs, name, "%s: its row is rolled back", name)
			assert.NotContains(t, byKey, name, "%s: no record", name)
			continue
		}
		require.Equal(t, http.StatusOK, a.Status, "%s: %s", name, a.Raw)
		rec, ok := byKey[name]
		require.True(t, ok, "record of %s", name)
		if i%4 == 0 {
			assert.Equal(t, "plain", string(rec.Value))
			continue
		}
		assert.JSONEq(t, fmt.Sprintf(`{"seq":%d,"name":%q}`, seqs[name], name), string(rec.Value), name)
	}
	e.settled()
	assert.Positive(t, e.sharedRows(t), "no request shared a Kafka transaction: the shared path was not exercised")
	assert.Empty(t, e.preparedLeft())
}

// P2: a reference to a result that is not there aborts on both sides with a 409 naming the
// record and the reference.
func TestRecordsFromMissingResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tests := []struct {
		name, from, want string
	}{
		{"no row returned", "sql[0].rows[0]", "returned 0 rows"},
		{"no such column", "sql[1].rows[0].nope", `no column "nope"`},
		{"row out of range", "sql[1].rows[3]", "returned 1 rows"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("ref-%d", i)
			r := e.post(map[string]any{"id": id,
				"sql": []any{
					map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}},
					map[string]any{"statement": "SELECT id FROM orders WHERE id = $1", "args": []any{id}},
				},
				"kafka": []any{map[string]any{"topic": e.topic, "key": id, "value": map[string]any{"type": "json", "from": tt.from}}}})
			require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)
			msg := r.str("error", "message")
			assert.Contains(t, msg, "kafka[0].value")
			assert.Contains(t, msg, tt.from)
			assert.Contains(t, msg, tt.want)
			assert.Equal(t, 0, countRows(t, e.db, id), "nothing committed")
			assert.Zero(t, e.committedWithKey(id))
		})
	}
	assert.Empty(t, e.preparedLeft())
}

// P1: malformed record parts are refused with 400 naming the field, nothing run.
func TestRecordsBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tests := []struct {
		name   string
		record map[string]any
		field  string
	}{
		{"malformed base64", map[string]any{"value": map[string]any{"type": "binary", "data": "a*=="}}, "kafka[0].value.data"},
		{"base64 without padding", map[string]any{"value": map[string]any{"type": "binary", "data": "AAE"}}, "kafka[0].value.data"},
		{"unknown type", map[string]any{"value": map[string]any{"type": "xml", "data": "x"}}, "kafka[0].value.type"},
		{"no type", map[string]any{"value": map[string]any{"data": "x"}}, "kafka[0].value.type"},
		{"binary data not a string", map[string]any{"key": map[string]any{"type": "binary", "data": 12}}, "kafka[0].key.data"},
		{"string data an object", map[string]any{"value": map[string]any{"type": "string", "data": map[string]any{}}}, "kafka[0].value.data"},
		{"no data", map[string]any{"value": map[string]any{"type": "json"}}, "kafka[0].value.data"},
		{"data and from", map[string]any{"value": map[string]any{"type": "json", "data": 1, "from": "sql[0].rows[0]"}}, "kafka[0].value"},
		{"unknown field", map[string]any{"value": map[string]any{"type": "json", "data": 1, "schema": "x"}}, "kafka[0].value.schema"},
		{"from points forward", map[string]any{"value": map[string]any{"type": "json", "from": "sql[1].rows[0]"}}, "kafka[0].value.from"},
		{"from malformed", map[string]any{"value": map[string]any{"type": "json", "from": "rows[0]"}}, "kafka[0].value.from"},
		{"value a number", map[string]any{"value": 12}, "kafka[0].value"},
		{"header with value and value_b64", map[string]any{"headers": []any{map[string]any{"name": "h", "value": "a", "value_b64": "AA=="}}}, "kafka[0].headers[0]"},
		{"header without name", map[string]any{"headers": []any{map[string]any{"value": "a"}}}, "kafka[0].headers[0]"},
		{"header bad base64", map[string]any{"headers": []any{map[string]any{"name": "h", "value_b64": "%%"}}}, "kafka[0].headers[0].value_b64"},
		{"header unknown field", map[string]any{"headers": []any{map[string]any{"name": "h", "val": "a"}}}, "kafka[0].headers[0].val"},
		{"headers a string", map[string]any{"headers": "h=1"}, "kafka[0].headers"},
		{"timestamp text", map[string]any{"timestamp": "yesterday"}, "kafka[0].timestamp"},
		{"timestamp negative", map[string]any{"timestamp": -1}, "kafka[0].timestamp"},
		{"timestamp fraction", map[string]any{"timestamp": 1.5}, "kafka[0].timestamp"},
		{"schema type without registry or id", map[string]any{"value": map[string]any{"type": "avro", "data": map[string]any{}}}, "kafka[0].value.schema_id"},
		{"schema id and subject", map[string]any{"value": map[string]any{"type": "avro", "data": 1, "schema_id": 1, "subject": "s"}}, "kafka[0].value"},
		{"version without subject", map[string]any{"value": map[string]any{"type": "protobuf", "data": 1, "schema_id": 1, "version": 2}}, "kafka[0].value.version"},
		{"schema id on json", map[string]any{"value": map[string]any{"type": "json", "data": 1, "schema_id": 1}}, "kafka[0].value"},
		{"schema type from a result without a registry", map[string]any{"value": map[string]any{"type": "avro", "subject": "s", "from": "sql[0].rows[0]"}}, "kafka[0].value.type"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("bad-%d", i)
			rec := map[string]any{"topic": e.topic}
			for k, v := range tt.record {
				rec[k] = v
			}
			r := e.post(map[string]any{"id": id,
				"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ($1, 1)", "args": []any{id}}},
				"kafka": []any{rec}})
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Raw)
			assert.Equal(t, tt.field, r.str("error", "field"), "%s", r.Raw)
			assert.Equal(t, 0, countRows(t, e.db, id))
			g := e.do(http.MethodGet, "/v1/transactions/"+id, nil)
			assert.Equal(t, http.StatusNotFound, g.Status, "nothing logged: %s", g.Raw)
		})
	}
	assert.Empty(t, e.preparedLeft())
}

// A record larger than its topic takes is a 400 naming it, not a failed Kafka transaction.
func TestRecordsOverTopicLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	small := e.prefix + "-small"
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	require.NoError(t, err)
	defer cl.Close()
	limit := "2000"
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &limit}, small)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	require.Eventually(t, func() bool { // a topic just created takes a moment to be everywhere
		d, err := kadm.NewClient(cl).ListTopics(context.Background(), small)
		return err == nil && d[small].Err == nil && len(d[small].Partitions) == 1
	}, 30*time.Second, 50*time.Millisecond)
	big := b64([]byte(strings.Repeat("x", 3000)))
	r := e.post(map[string]any{"id": "too-big", "kafka": []any{
		map[string]any{"topic": small, "value": "fits"},
		map[string]any{"topic": small, "value": map[string]any{"type": "binary", "data": big}}}})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Raw)
	assert.Equal(t, "kafka[1]", r.str("error", "field"))
	assert.Contains(t, r.str("error", "message"), "2000")
	ok := e.post(map[string]any{"id": "fits", "kafka": []any{map[string]any{"topic": small, "value": strings.Repeat("y", 1500)}}})
	assert.Equal(t, http.StatusOK, ok.Status, "%s", ok.Raw)

	// A record built from a result is checked once resolved: the request aborts (409).
	d := e.post(map[string]any{"id": "too-big-derived",
		"sql":   []any{map[string]any{"statement": "SELECT repeat('z', 3000) AS v"}},
		"kafka": []any{map[string]any{"topic": small, "value": map[string]any{"type": "string", "from": "sql[0].rows[0].v"}}}})
	require.Equal(t, http.StatusConflict, d.Status, "%s", d.Raw)
	assert.Contains(t, d.str("error", "message"), "kafka[0]")
	assert.Empty(t, e.preparedLeft())
}
