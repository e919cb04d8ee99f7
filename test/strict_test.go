package test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStrictDecoding: every rule of strict request decoding refuses with 400 (415 for the
// content type) naming the field, and nothing of any refused request runs.
func TestStrictDecoding(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ins := func(id string) string {
		return fmt.Sprintf(`{"statement":"INSERT INTO orders (id, total) VALUES ($1, 1)","args":[%q]}`, id)
	}
	rec := fmt.Sprintf(`{"topic":%q,"key":"k","value":"v"}`, e.topic)
	cases := []struct {
		name  string
		body  string
		field string
	}{
		{"field name in another case", `{"SQL":[` + ins("c1") + `]}`, "SQL"},
		{"nested field name in another case", `{"sql":[{"Statement":"SELECT 1"}]}`, "sql[0].Statement"},
		{"duplicate key", `{"sql":[` + ins("d1") + `],"sql":[` + ins("d2") + `]}`, "sql"},
		{"duplicate nested key", `{"sql":[{"statement":"SELECT 1","statement":"SELECT 2"}]}`, "sql[0].statement"},
		{"duplicate header", `{"kafka":[{"topic":"` + e.topic + `","headers":{"h":"1","h":"2"}}]}`, `kafka[0].headers["h"]`},
		{"timeout far beyond int64", `{"sql":[` + ins("t1") + `],"timeout_ms":99999999999999999999999999}`, "timeout_ms"},
		{"timeout 1e400", `{"sql":[` + ins("t2") + `],"timeout_ms":1e400}`, "timeout_ms"},
		{"timeout with a fraction", `{"sql":[` + ins("t3") + `],"timeout_ms":1500.5}`, "timeout_ms"},
		{"timeout below the minimum", `{"sql":[` + ins("t4") + `],"timeout_ms":1}`, "timeout_ms"},
		{"timeout a string", `{"sql":[` + ins("t5") + `],"timeout_ms":"5000"}`, "timeout_ms"},
		{"partition beyond int32", `{"kafka":[{"topic":"` + e.topic + `","partition":2147483648}]}`, "kafka[0].partition"},
		{"partition with a fraction", `{"kafka":[{"topic":"` + e.topic + `","partition":0.5}]}`, "kafka[0].partition"},
		{"argument 1e400", `{"sql":[{"statement":"SELECT $1::numeric","args":[1e400]}]}`, "sql[0].args[0]"},
		{"NUL in a statement", `{"sql":[{"statement":"SELECT 1\u0000"}]}`, "sql[0].statement"},
		{"NUL in an argument", `{"sql":[{"statement":"SELECT $1::text","args":["a\u0000b"]}]}`, "sql[0].args[0]"},
		// A record's key, value and header values carry NUL (Kafka carries bytes:
		// TestRecordsCarryBytes); a header name of the object form does not (the list form's may).
		{"NUL in a header name", `{"kafka":[{"topic":"` + e.topic + `","headers":{"h\u0000":"v"}}]}`, "kafka[0].headers"},
		{"NUL in a payload type", `{"kafka":[{"topic":"` + e.topic + `","key":{"type":"string\u0000","data":"k"}}]}`, "kafka[0].key.type"},
		{"NUL in the id", `{"id":"a\u0000","sql":[` + ins("n1") + `]}`, "id"},
		{"null list", `{"sql":null,"kafka":[` + rec + `]}`, "sql"},
		{"null statement", `{"sql":[{"statement":null}]}`, "sql[0].statement"},
		{"topic with a slash", `{"kafka":[{"topic":"a/b"}]}`, "kafka[0].topic"},
		{"topic dot", `{"kafka":[{"topic":"."}]}`, "kafka[0].topic"},
		{"topic dot dot", `{"kafka":[{"topic":".."}]}`, "kafka[0].topic"},
		{"topic too long", `{"kafka":[{"topic":"` + strings.Repeat("t", 250) + `"}]}`, "kafka[0].topic"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(tc.body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Raw)
			assert.Equal(t, "invalid_request", r.str("error", "class"), "%s", r.Raw)
			assert.Equal(t, tc.field, r.str("error", "field"), "%s", r.Raw)
			assert.NotEmpty(t, r.str("error", "message"))
		})
	}

	// Nesting is bounded.
	r := e.post(`{"sql":[{"statement":"SELECT $1","args":[` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `]}]}`)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Raw)
	assert.True(t, strings.HasPrefix(r.str("error", "field"), "sql[0].args[0][0]"), "%s", r.Raw)
	assert.Contains(t, r.str("error", "message"), "nested deeper")

	// A case mismatch says which name was meant.
	r = e.post(`{"Kafka":[` + rec + `]}`)
	assert.Contains(t, r.str("error", "message"), `did you mean "kafka"`)

	// The content type: JSON only.
	types := []struct {
		contentType string
		status      int
	}{
		{"", http.StatusUnsupportedMediaType},
		{"text/plain", http.StatusUnsupportedMediaType},
		{"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"application/json; charset=latin1", http.StatusUnsupportedMediaType},
		{"application/json; charset=UTF-8", http.StatusOK},
		{"application/json", http.StatusOK},
	}
	for i, tc := range types {
		t.Run("content type "+tc.contentType, func(t *testing.T) {
			id := fmt.Sprintf("ct-%d", i)
			req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/transactions", strings.NewReader(`{"id":"`+id+`","sql":[`+ins(id)+`]}`))
			require.NoError(t, err)
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			raw, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode, "%s", raw)
			if tc.status == http.StatusUnsupportedMediaType {
				assert.Contains(t, string(raw), "application/json")
				assert.Zero(t, countRows(t, e.db, id), "nothing ran")
			}
		})
	}

	// Nothing of the refused requests ran.
	var rows, logged int
	require.NoError(t, e.db.QueryRow(t.Context(), "SELECT count(*) FROM orders WHERE id NOT LIKE 'ct-%'").Scan(&rows))
	require.NoError(t, e.db.QueryRow(t.Context(), "SELECT count(*) FROM coordinator_transactions WHERE request_id NOT LIKE 'ct-%'").Scan(&logged))
	assert.Zero(t, rows)
	assert.Zero(t, logged)
	assert.Empty(t, e.preparedLeft())
}

// TestPathIDs: ids in the path are percent-decoded once (by the router) and matched exactly;
// an id no transaction can have is 400, never 500.
func TestPathIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, id := range []string{"plain-1", "with:colon", "dots.and_under"} {
		r := e.post(fmt.Sprintf(`{"id":%q,"sql":[{"statement":"SELECT 1"}]}`, id))
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	}
	get := func(rawPath string) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, e.srv.URL, nil)
		require.NoError(t, err)
		req.URL.Opaque = rawPath // sent exactly as written
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return response{Status: resp.StatusCode, Raw: raw}
	}
	cases := []struct {
		path   string
		status int
	}{
		{"/v1/transactions/plain-1", http.StatusOK},
		{"/v1/transactions/with:colon", http.StatusOK},
		{"/v1/transactions/with%3Acolon", http.StatusOK},           // decoded once: with:colon
		{"/v1/transactions/with%253Acolon", http.StatusBadRequest}, // decoded once: with%3Acolon, not an id
		{"/v1/transactions/plain%2D1", http.StatusOK},
		{"/v1/transactions/PLAIN-1", http.StatusNotFound}, // exact: case matters
		{"/v1/transactions/nope", http.StatusNotFound},
		{"/v1/transactions/a%00b", http.StatusBadRequest},
		{"/v1/transactions/a%0Ab", http.StatusBadRequest},
		{"/v1/transactions/a%1Bb", http.StatusBadRequest},
		{"/v1/transactions/a%2Fb", http.StatusBadRequest},
		{"/v1/transactions/" + strings.Repeat("a", 129), http.StatusBadRequest},
		{"/v1/transactions/%FF", http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			r := get(tc.path)
			assert.Equal(t, tc.status, r.Status, "%s", r.Raw)
		})
	}
	// The admin actions read the id the same way.
	r := e.do(http.MethodPost, "/v1/transactions/"+url.PathEscape("a\x00b")+"/retry", nil)
	assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Raw)
	assert.Equal(t, "id", r.str("error", "field"))
	// Their body is optional: only a body of no bytes is no body (the unknown id is then the
	// answer); anything else, white space alone included, is a malformed body, refused before
	// the id is looked up.
	for _, body := range []string{"\x0b", "\x0c", " \x0b\n", "\u00a0", "\x00", " ", " \r\n\t"} {
		for _, action := range []string{"retry", "abort"} {
			r := e.do(http.MethodPost, "/v1/transactions/no-such-id/"+action, body)
			assert.Equal(t, http.StatusBadRequest, r.Status, "%s %q: %s", action, body, r.Raw)
			assert.Equal(t, "body", r.str("error", "field"), "%s %q", action, body)
		}
	}
	r = e.do(http.MethodPost, "/v1/transactions/no-such-id/retry", "")
	assert.Equal(t, http.StatusNotFound, r.Status, "%s", r.Raw)
	r = e.do(http.MethodPost, "/v1/transactions/no-such-id/retry", nil)
	assert.Equal(t, http.StatusNotFound, r.Status, "%s", r.Raw)

	// List parameters: given twice, empty or with control characters, and cursors that are
	// not ours, are 400.
	for _, q := range []string{"state=active&state=aborted", "older_than=", "after=", "after=AA", "after=" + url.QueryEscape("MjAyNi0wMS0wMVQwMDowMDowMFp8YQBi"),
		"older_than=" + url.QueryEscape("-5s"), "older_than=99999999999", "limit=0", "state=" + url.QueryEscape("a\x00")} {
		r := e.do(http.MethodGet, "/v1/transactions?"+q, nil)
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", q, r.Raw)
	}
}

// TestStatusesTellTheTruth: a statement the client got wrong is the client's error (409 with
// the participant and sqlstate), never 503 "safe to retry".
func TestStatusesTellTheTruth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cases := []struct {
		name     string
		body     string
		sqlstate string
	}{
		{"too few arguments", `{"sql":[{"statement":"INSERT INTO orders (id, total) VALUES ($1, $2)","args":["few"]}]}`, "08P01"},
		{"too many arguments", `{"sql":[{"statement":"SELECT 1","args":[1,2]}]}`, "08P01"},
		{"bad number text", `{"sql":[{"statement":"SELECT $1::int","args":["abc"]}]}`, "22P02"},
		{"unknown table", `{"sql":[{"statement":"SELECT * FROM no_such_table"}]}`, "42P01"},
		{"type mismatch", `{"sql":[{"statement":"SELECT 1 + 'x'::text"}]}`, "42883"},
		{"statement timeout", `{"sql":[{"statement":"SELECT set_config('statement_timeout', '1', true)"},{"statement":"SELECT pg_sleep(1)"}]}`, "57014"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(tc.body)
			require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)
			assert.Equal(t, "aborted", r.str("state"))
			assert.Equal(t, "sql:default", r.str("error", "participant"), "%s", r.Raw)
			assert.Equal(t, "abortable", r.str("error", "class"), "%s", r.Raw)
			assert.Equal(t, tc.sqlstate, r.str("error", "sqlstate"), "%s", r.Raw)
		})
	}
	assert.Empty(t, e.preparedLeft())
}

// TestPoolWaitBounded: the wait for a transactional id is bounded by the request's budget and
// answered 503 with Retry-After; nothing is left prepared and the row is aborted.
func TestPoolWaitBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{poolSize: 1})
	marker := "pool_" + randHex(4)
	done := make(chan response, 1)
	go func() {
		done <- e.postQuiet(fmt.Sprintf(`{"id":"holder","sql":[{"statement":"SELECT pg_sleep(3), '%s'"}],"kafka":[{"topic":%q,"key":"holder","value":"v"}],"timeout_ms":20000}`, marker, e.topic))
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, leased, _ := e.svc.Kafka.Usage()
		if leased == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the first request never leased the id")
		time.Sleep(10 * time.Millisecond)
	}

	r, h := sendAs(t, "", http.MethodPost, e.srv.URL+"/v1/transactions", fmt.Sprintf(`{"id":"waiter","sql":[{"statement":"INSERT INTO orders (id, total) VALUES ('waiter', 1)"}],"kafka":[{"topic":%q,"key":"waiter","value":"v"}],"timeout_ms":300}`, e.topic))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Raw)
	assert.NotEmpty(t, h.Get("Retry-After"))
	assert.Equal(t, "aborted", r.str("state"))
	assert.Equal(t, "retriable", r.str("error", "class"))
	assert.Contains(t, r.str("error", "message"), "no transactional id free")
	assert.Zero(t, countRows(t, e.db, "waiter"))

	holder := <-done
	assert.Equal(t, http.StatusOK, holder.Status, "%s", holder.Raw)
	assert.Empty(t, e.preparedLeft())
}

// TestOlderThanUnits: every unit older_than documents is read, also below PostgreSQL's
// resolution (found by schemathesis: "3µs" reached PostgreSQL as an interval it cannot read).
func TestOlderThanUnits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r := e.post(`{"id":"aged","sql":[{"statement":"SELECT 1"}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	for _, v := range []string{"79ns", "3us", "3µs", "1ms", "0s", "0", "1.5h", "1h30m", "90"} {
		for _, state := range []string{"", "&state=committed", "&state=in-doubt"} {
			q := "/v1/transactions?older_than=" + url.QueryEscape(v) + state
			r := e.do(http.MethodGet, q, nil)
			assert.Equal(t, http.StatusOK, r.Status, "%s: %s", q, r.Raw)
		}
	}
}
