package test

// Security and configuration: bearer tokens and roles, the loopback rule, the statement and
// topic allowlists, the YAML file and the precedence of flags > environment > file > defaults,
// Kafka TLS and SASL, and secrets that never reach the logs.

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kpgtx/coordinator/api"
	"github.com/kpgtx/coordinator/service"
)

// sendAs sends a request with "Authorization: Bearer <token>" (no header when token is "") and
// returns the answer and its headers. e.do sends no Authorization header.
func sendAs(t *testing.T, token, method, url, body string) (response, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := response{Status: resp.StatusCode, Raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&r.Body), "body: %s", raw)
	}
	return r, resp.Header
}

// newSecret is a token or password no other test uses.
func newSecret(kind string) string { return kind + "-" + randHex(16) }

const served = -1 // want: anything but 401 and 403

func TestAuthTokensAndRoles(t *testing.T) {
	t.Parallel()
	sub, read, admin, both, wrong := newSecret("sub"), newSecret("read"), newSecret("admin"), newSecret("both"), newSecret("wrong")
	toks, err := api.ParseTokens(fmt.Sprintf("ci:submit:%s;dash:read:%s;ops:admin:%s;svc:submit,read:%s", sub, read, admin, both))
	require.NoError(t, err)
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.Tokens = toks }})
	base := e.srv.URL

	body := func(id string) string { return e.orderBody(id, "") }
	type authCase struct {
		name, token, method, path, body string
		want                            int
	}
	cases := []authCase{
		{"submit without a token", "", "POST", "/v1/transactions", body("a-none"), 401},
		{"submit with an unknown token", wrong, "POST", "/v1/transactions", body("a-wrong"), 401},
		{"submit with a read token", read, "POST", "/v1/transactions", body("a-read"), 403},
		{"submit with a submit token", sub, "POST", "/v1/transactions", body("a-sub"), 200},
		{"submit with submit,read", both, "POST", "/v1/transactions", body("a-both"), 200},
		{"submit with an admin token", admin, "POST", "/v1/transactions", body("a-admin"), 200},
		{"get without a token", "", "GET", "/v1/transactions/a-sub", "", 401},
		{"get with a submit token", sub, "GET", "/v1/transactions/a-sub", "", 403},
		{"get with a read token", read, "GET", "/v1/transactions/a-sub", "", 200},
		{"list with a read token", read, "GET", "/v1/transactions", "", 200},
		{"list with an admin token", admin, "GET", "/v1/transactions?limit=5", "", 200},
		{"recovery without a token", "", "POST", "/v1/recovery/run", "", 401},
		{"recovery with a submit token", sub, "POST", "/v1/recovery/run", "", 403},
		{"recovery with a read token", read, "POST", "/v1/recovery/run", "", 403},
		{"recovery with submit,read", both, "POST", "/v1/recovery/run", "", 403},
		{"recovery with an admin token", admin, "POST", "/v1/recovery/run", "", 200},
		{"escaped path needs admin", sub, "POST", "/v1/%74ransactions", body("a-esc"), 403},
		{"healthz is open", "", "GET", "/healthz", "", 200},
		{"openapi is open", "", "GET", "/openapi.yaml", "", 200},
		{"readyz is open", "", "GET", "/readyz", "", served},
		{"healthz/ is not", "", "GET", "/healthz/", "", 401},
		{"metrics need a token", "", "GET", "/metrics", "", 401},
		{"metrics with a submit token", sub, "GET", "/metrics", "", 403},
		{"metrics with a read token", read, "GET", "/metrics", "", served},
	}
	for _, verb := range []string{"retry", "abort", "resolve"} {
		path := "/v1/transactions/a-sub/" + verb
		cases = append(cases,
			authCase{verb + " without a token", "", "POST", path, `{}`, 401},
			authCase{verb + " with a submit token", sub, "POST", path, `{}`, 403},
			authCase{verb + " with a read token", read, "POST", path, `{}`, 403},
			authCase{verb + " with submit,read", both, "POST", path, `{}`, 403},
			authCase{verb + " with an admin token", admin, "POST", path, `{}`, served})
	}
	for _, tc := range cases {
		r, h := sendAs(t, tc.token, tc.method, base+tc.path, tc.body)
		if tc.want == served {
			assert.NotContains(t, []int{401, 403}, r.Status, "%s: %s", tc.name, r.Raw)
		} else {
			assert.Equal(t, tc.want, r.Status, "%s: %s", tc.name, r.Raw)
		}
		switch r.Status {
		case 401:
			assert.True(t, strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer"), "%s: WWW-Authenticate %q", tc.name, h.Get("WWW-Authenticate"))
			assert.Equal(t, "unauthorized", r.str("error", "class"), tc.name)
			if tc.token != "" {
				assert.Contains(t, h.Get("WWW-Authenticate"), `error="invalid_token"`, tc.name)
			}
		case 403:
			assert.Contains(t, h.Get("WWW-Authenticate"), `error="insufficient_scope"`, tc.name)
			assert.Equal(t, "forbidden", r.str("error", "class"), tc.name)
		}
		if tc.token != "" {
			assert.NotContains(t, string(r.Raw), tc.token, "%s: the answer echoes the token", tc.name)
		}
	}
	// Refused requests ran nothing.
	for _, id := range []string{"a-none", "a-wrong", "a-read", "a-esc"} {
		assert.Equal(t, 0, countRows(t, e.db, id), id)
	}
	for _, id := range []string{"a-sub", "a-both", "a-admin"} {
		assert.Equal(t, 1, countRows(t, e.db, id), id)
	}
	// Other schemes are not bearer tokens.
	req, err := http.NewRequest("GET", base+"/v1/transactions", nil)
	require.NoError(t, err)
	req.SetBasicAuth("dash", read)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 401, resp.StatusCode, "Basic auth with the token as password")
}

// TestAuthOffByDefault: without tokens the API is open, as before (on the loopback address).
func TestAuthOffByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r, _ := sendAs(t, "", "POST", e.srv.URL+"/v1/transactions", e.orderBody("open-1", "sql-only"))
	assert.Equal(t, 200, r.Status, "%s", r.Raw)
	r, _ = sendAs(t, "any-token-at-all-000", "POST", e.srv.URL+"/v1/recovery/run", "")
	assert.Equal(t, 200, r.Status, "%s", r.Raw)
}

// TestListenBeyondLoopbackNeedsTokens: an address other machines reach needs tokens (or
// COORDINATOR_ALLOW_INSECURE) and TLS (or COORDINATOR_ALLOW_PLAINTEXT); loopback needs neither.
func TestListenBeyondLoopbackNeedsTokens(t *testing.T) {
	t.Parallel()
	toks, err := api.ParseTokens("ops:admin:" + newSecret("t"))
	require.NoError(t, err)
	const (
		noAuth  = "no COORDINATOR_TOKENS"
		noTLS   = "over plain HTTP"
		badAddr = "want host:port"
	)
	cases := []struct {
		listen    string
		tokens    bool
		insecure  bool
		tls       bool
		plaintext bool
		refused   []string // what the refusal says; none: accepted
	}{
		{listen: "127.0.0.1:8080"},
		{listen: "localhost:8080"},
		{listen: "[::1]:8080"},
		{listen: "0.0.0.0:8080", refused: []string{noAuth, noTLS}},
		{listen: ":8080", refused: []string{noAuth, noTLS}},
		{listen: "[::]:8080", refused: []string{noAuth, noTLS}},
		{listen: "10.1.2.3:8080", refused: []string{noAuth, noTLS}},
		{listen: "coordinator.example:8080", refused: []string{noAuth, noTLS}},
		{listen: "0.0.0.0:8080", tokens: true, refused: []string{noTLS}},
		{listen: "0.0.0.0:8080", insecure: true, refused: []string{noTLS}},
		{listen: "0.0.0.0:8080", tls: true, refused: []string{noAuth}},
		{listen: "0.0.0.0:8080", plaintext: true, refused: []string{noAuth}},
		{listen: "0.0.0.0:8080", tokens: true, tls: true},
		{listen: "0.0.0.0:8080", tokens: true, plaintext: true},
		{listen: "0.0.0.0:8080", insecure: true, plaintext: true},
		{listen: "8080", refused: []string{badAddr}}, // not host:port
	}
	for _, tc := range cases {
		c := service.Defaults()
		c.DatabaseURL = "postgres://localhost/app"
		c.Listen = tc.listen
		c.AllowInsecure = tc.insecure
		c.AllowPlaintext = tc.plaintext
		if tc.tokens {
			c.Tokens = toks
		}
		if tc.tls {
			c.APITLS = service.APITLS{CertFile: "server.pem", KeyFile: "server.key"}
		}
		err := c.Validate()
		if len(tc.refused) == 0 {
			assert.NoError(t, err, "%+v", tc)
			continue
		}
		require.Error(t, err, "%+v", tc)
		assert.Contains(t, err.Error(), "COORDINATOR_LISTEN", "%+v", tc)
		for _, want := range tc.refused {
			assert.Contains(t, err.Error(), want, "%+v", tc)
		}
		if !slices.Contains(tc.refused, noTLS) {
			assert.NotContains(t, err.Error(), noTLS, "%+v", tc)
		}
		if !slices.Contains(tc.refused, noAuth) {
			assert.NotContains(t, err.Error(), noAuth, "%+v", tc)
		}
	}

	// The binary refuses before it touches anything, and says how to fix it.
	coordinatorBinary(t)
	const unreachable = "DATABASE_URL=postgres://coordinator:sekret@127.0.0.1:1/nowhere?connect_timeout=5"
	listen := "COORDINATOR_LISTEN=0.0.0.0:" + fmt.Sprint(freePort(t))
	code, _, stderr := runCoordinator(t, coordinatorEnv(unreachable, listen), "serve")
	assert.Equal(t, 1, code, stderr)
	for _, w := range []string{"COORDINATOR_LISTEN=0.0.0.0:", "COORDINATOR_TOKENS", "COORDINATOR_ALLOW_INSECURE=true", "other machines",
		"COORDINATOR_TLS_CERT_FILE", "COORDINATOR_ALLOW_PLAINTEXT=true"} {
		assert.Contains(t, stderr, w)
	}
	assert.NotContains(t, stderr, "cannot reach PostgreSQL", "refused before connecting")

	for _, allow := range [][]string{
		{"COORDINATOR_ALLOW_INSECURE=true", "COORDINATOR_ALLOW_PLAINTEXT=true"},
		{"COORDINATOR_TOKENS=ops:admin:" + newSecret("t"), "COORDINATOR_ALLOW_PLAINTEXT=true"},
	} {
		code, _, stderr = runCoordinator(t, coordinatorEnv(append([]string{unreachable, listen}, allow...)...), "serve")
		assert.Equal(t, 1, code, stderr)
		assert.Contains(t, stderr, "cannot reach PostgreSQL", "%s: past the listen check", allow)
		assert.NotContains(t, stderr, "other machines", allow)
	}
	// Tokens alone are not enough: plain HTTP beyond loopback is refused on its own.
	code, _, stderr = runCoordinator(t, coordinatorEnv(unreachable, listen, "COORDINATOR_TOKENS=ops:admin:"+newSecret("t")), "serve")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, noTLS)
	assert.NotContains(t, stderr, noAuth)
}

func TestStatementAndTopicAllowlists(t *testing.T) {
	t.Parallel()
	var topic string
	e := newEnv(t, envOpts{configure: func(c *service.Config) {
		c.Statements = map[string]string{
			"insert_order": "INSERT INTO orders (id, total) VALUES ($1, $2)",
			"set_note":     "UPDATE orders SET note = $2 WHERE id = $1",
		}
		c.Topics = []string{c.GIDPrefix + "-orders"} // the harness's topic
		topic = c.GIDPrefix + "-orders"
	}})
	require.Equal(t, e.topic, topic)
	rec := fmt.Sprintf(`{"topic":%q,"key":"k","value":"v"}`, e.topic)

	bad := []struct {
		name, body, field string
	}{
		{"raw SQL", `{"id":"al-1","sql":[{"statement":"INSERT INTO orders (id, total) VALUES ('al-1', 1)"}]}`, "sql[0].statement"},
		{"raw SQL after a named one", `{"id":"al-2","sql":[{"name":"insert_order","args":["al-2",1]},{"statement":"DELETE FROM orders"}]}`, "sql[1].statement"},
		{"name and SQL", `{"id":"al-3","sql":[{"name":"insert_order","statement":"DELETE FROM orders","args":["al-3",1]}]}`, "sql[0].statement"},
		{"unknown name", `{"id":"al-4","sql":[{"name":"drop_everything"}]}`, "sql[0].name"},
		{"neither", `{"id":"al-5","sql":[{"args":[1]}]}`, "sql[0].name"},
		{"topic not allowed", `{"id":"al-6","sql":[{"name":"insert_order","args":["al-6",1]}],"kafka":[` + rec + `,{"topic":"payments","value":"v"}]}`, "kafka[1].topic"},
		{"topic prefix is not the topic", `{"id":"al-7","kafka":[{"topic":"` + e.topic + `x","value":"v"}]}`, "kafka[0].topic"},
	}
	for _, tc := range bad {
		r := e.post(tc.body)
		assert.Equal(t, 400, r.Status, "%s: %s", tc.name, r.Raw)
		assert.Equal(t, tc.field, r.str("error", "field"), "%s: %s", tc.name, r.Raw)
	}
	for _, id := range []string{"al-1", "al-2", "al-3", "al-6"} {
		assert.Equal(t, 0, countRows(t, e.db, id), "%s: nothing runs", id)
	}

	ok := `{"id":"al-ok","sql":[{"name":"insert_order","args":["al-ok",5]},{"name":"set_note","args":["al-ok","named"]}],"kafka":[` + rec + `]}`
	r := e.post(ok)
	require.Equal(t, 200, r.Status, "%s", r.Raw)
	assert.Equal(t, "committed", r.str("state"))
	var note string
	require.NoError(t, e.db.QueryRow(t.Context(), `SELECT note FROM orders WHERE id = 'al-ok'`).Scan(&note))
	assert.Equal(t, "named", note)

	// The name resolved before the digest: the same request is the same transaction, other
	// arguments are another body.
	again := e.post(ok)
	assert.Equal(t, 200, again.Status, "%s", again.Raw)
	assert.Equal(t, 1, countRows(t, e.db, "al-ok"))
	other := e.post(strings.Replace(ok, `"al-ok",5`, `"al-ok",6`, 1))
	assert.Equal(t, 422, other.Status, "%s", other.Raw)

	// Without an allowlist, a name is refused and SQL text works.
	open := newEnv(t, envOpts{})
	r = open.post(`{"sql":[{"name":"insert_order","args":["x",1]}]}`)
	assert.Equal(t, 400, r.Status, "%s", r.Raw)
	assert.Equal(t, "sql[0].name", r.str("error", "field"))
}

func TestAllowlistSettingsValidated(t *testing.T) {
	t.Parallel()
	base := func() service.Config {
		c := service.Defaults()
		c.DatabaseURL = "postgres://localhost/app"
		return c
	}
	cases := map[string]func(*service.Config){
		"transaction control": func(c *service.Config) { c.Statements = map[string]string{"end_it": "COMMIT"} },
		"empty SQL":           func(c *service.Config) { c.Statements = map[string]string{"nothing": "  "} },
		"bad name":            func(c *service.Config) { c.Statements = map[string]string{"no spaces": "SELECT 1"} },
		"no statements":       func(c *service.Config) { c.Statements = map[string]string{} },
		"bad topic":           func(c *service.Config) { c.Topics = []string{"orders", "bad topic"} },
		"star inside":         func(c *service.Config) { c.Topics = []string{"a*b"} },
	}
	for name, mutate := range cases {
		c := base()
		mutate(&c)
		err := c.Validate()
		require.Error(t, err, name)
		assert.Regexp(t, `COORDINATOR_(STATEMENTS|TOPICS)`, err.Error(), name)
	}
	c := base()
	c.Statements = map[string]string{"insert_order": "/* ok */ INSERT INTO orders VALUES ($1)"}
	c.Topics = []string{"orders", "audit.*"}
	assert.NoError(t, c.Validate())

	// The variables' text forms.
	got, err := service.Load(func(k string) string {
		return map[string]string{
			"COORDINATOR_STATEMENTS": `{"a": "SELECT 1", "b": "SELECT $1"}`,
			"COORDINATOR_TOPICS":     "orders, audit.*",
		}[k]
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "SELECT 1", "b": "SELECT $1"}, got.Statements)
	assert.Equal(t, []string{"orders", "audit.*"}, got.Topics)
	_, err = service.Load(func(k string) string {
		if k == "COORDINATOR_STATEMENTS" {
			return "insert_order=INSERT"
		}
		return ""
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "COORDINATOR_STATEMENTS")
}

// startingLine returns the fields of the "coordinator starting" log line.
func startingLine(t *testing.T, stderr string) map[string]any {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "coordinator starting" {
			return line
		}
	}
	require.FailNow(t, "no startup line", "stderr:\n%s", stderr)
	return nil
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// The database in these files is unreachable: serve logs its configuration, then fails.
const unreachableDSN = "postgres://coordinator:sekret@127.0.0.1:1/nowhere?connect_timeout=5"

func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	coordinatorBinary(t)
	dir := t.TempDir()
	fileA := writeFile(t, dir, "a.yaml", `
# every layer sets some of these
database_url: `+unreachableDSN+`
instance: from-file
gid_prefix: file
kafka_pool_size: 5
max_timeout: 20s
tokens:
  - {name: filetoken, roles: [read], token: `+newSecret("f")+`}
`)
	fileB := writeFile(t, dir, "b.yaml", "database_url: "+unreachableDSN+"\nkafka_pool_size: 7\n")

	env := coordinatorEnv("COORDINATOR_CONFIG="+fileA, "COORDINATOR_INSTANCE=from-env", "COORDINATOR_GID_PREFIX=env")
	code, _, stderr := runCoordinator(t, env, "serve", "-gid-prefix", "flag")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "cannot reach PostgreSQL")
	line := startingLine(t, stderr)
	assert.Equal(t, "flag", line["gid_prefix"], "flag > environment > file")
	assert.Equal(t, "from-env", line["instance"], "environment > file")
	assert.EqualValues(t, 5, line["kafka_pool_size"], "file > default")
	assert.Equal(t, "20s", line["max_timeout"], "file > default")
	assert.Equal(t, "127.0.0.1:8080", line["listen"], "default")
	assert.Equal(t, []any{"filetoken:read"}, line["tokens"], "tokens from the file")

	// -config over COORDINATOR_CONFIG.
	code, _, stderr = runCoordinator(t, env, "serve", "-config", fileB)
	assert.Equal(t, 1, code, stderr)
	line = startingLine(t, stderr)
	assert.EqualValues(t, 7, line["kafka_pool_size"])
	assert.Equal(t, "from-env", line["instance"])
	assert.Equal(t, []any{"(none: no authentication)"}, line["tokens"])

	// A variable in the environment replaces the file's value whole (lists are not merged).
	code, _, stderr = runCoordinator(t, append(env, "COORDINATOR_TOKENS=envtoken:admin:"+newSecret("e")), "serve")
	assert.Equal(t, 1, code, stderr)
	assert.Equal(t, []any{"envtoken:admin"}, startingLine(t, stderr)["tokens"])
	assert.NotContains(t, stderr, "sekret")
}

func TestConfigFileRefusals(t *testing.T) {
	t.Parallel()
	coordinatorBinary(t)
	dir := t.TempDir()
	db := "database_url: " + unreachableDSN + "\n"
	cases := []struct {
		name, file string
		want       []string
	}{
		{"unknown key", db + "pool_sise: 3\n", []string{`unknown setting "pool_sise"`, "line 2"}},
		{"variable name as key", "DATABASE_URL: x\n", []string{`unknown setting "DATABASE_URL"`, `did you mean "database_url"`}},
		{"flag name as key", db + "pool-size: 3\n", []string{`unknown setting "pool-size"`}},
		{"the file itself", db + "config: other.yaml\n", []string{`unknown setting "config"`}},
		{"not an integer", db + "kafka_pool_size: many\n", []string{`KAFKA_POOL_SIZE="many"`, "not an integer", "as kafka_pool_size)"}},
		{"out of range", db + "kafka_pool_size: 0\n", []string{"KAFKA_POOL_SIZE=0"}},
		{"not a duration", db + "max_timeout: 30\n", []string{`COORDINATOR_MAX_TIMEOUT="30"`}},
		{"not a boolean", db + "kafka_tls: maybe\n", []string{`KAFKA_TLS="maybe"`}},
		{"list for a single value", db + "listen: [a, b]\n", []string{"listen: want a single value"}},
		{"mapping for a single value", db + "instance: {a: b}\n", []string{"instance: want a single value"}},
		{"bad token", db + "tokens: [\"ci:write:" + newSecret("bad") + "\"]\n", []string{"COORDINATOR_TOKENS", "entry 1: an unknown role"}},
		{"token field misspelt", db + "tokens: [{name: ci, role: [read], token: " + newSecret("bad") + "}]\n", []string{"tokens: item 1", "{name, roles, token}"}},
		{"statement with COMMIT", db + "statements: {finish: COMMIT}\n", []string{"COORDINATOR_STATEMENTS", "COMMIT is not allowed"}},
		{"given twice", db + "instance: a\ninstance: b\n", []string{`"instance" is given twice`}},
		{"not YAML", db + "listen: [\n", []string{"not valid YAML"}},
		{"not a mapping", "- a\n- b\n", []string{"want a mapping of settings"}},
		{"TLS file without TLS", db + "kafka_brokers: [127.0.0.1:1]\nkafka_tls_ca_file: /nonexistent\n", []string{"KAFKA_TLS_CA_FILE is set but KAFKA_TLS is not true"}},
		{"SASL without a password", db + "kafka_brokers: 127.0.0.1:1\nkafka_sasl_mechanism: scram-sha-256\nkafka_sasl_user: u\n", []string{"KAFKA_SASL_MECHANISM=SCRAM-SHA-256 needs KAFKA_SASL_USER and KAFKA_SASL_PASSWORD"}},
		{"unknown SASL mechanism", db + "kafka_brokers: 127.0.0.1:1\nkafka_sasl_mechanism: GSSAPI\n", []string{`KAFKA_SASL_MECHANISM="GSSAPI"`}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, dir, fmt.Sprintf("c%d.yaml", i), tc.file)
			code, stdout, stderr := runCoordinator(t, coordinatorEnv(), "serve", "-config", path)
			assert.Equal(t, 1, code, "stderr:\n%s", stderr)
			for _, w := range tc.want {
				assert.Contains(t, stderr, w)
			}
			assert.NotContains(t, stderr, "cannot reach PostgreSQL", "refused before connecting")
			assert.NotContains(t, stderr+stdout, "sekret")
			assert.NotContains(t, stderr+stdout, "bad-", "a token was printed")
		})
	}
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCoordinator(t, coordinatorEnv("COORDINATOR_CONFIG="+filepath.Join(dir, "nope.yaml")), "serve")
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "configuration file")
		assert.Contains(t, stderr, "nope.yaml")
	})
}

// TestSettingsTable: every variable service.Load reads is in the settings table that drives
// `coordinator help` (and so may be set in the file), and the table has no row nothing reads.
func TestSettingsTable(t *testing.T) {
	t.Parallel()
	help := helpVariables(t)
	var read []string
	_, _ = service.Load(func(k string) string { read = append(read, k); return "" })
	for _, k := range read {
		assert.Contains(t, help, k, "service.Load reads %s but `coordinator help` does not list it", k)
	}
	for _, k := range help {
		if k == "COORDINATOR_CONFIG" || k == "COORDINATOR_LOG_LEVEL" { // read by the command itself
			continue
		}
		assert.Contains(t, read, k, "`coordinator help` lists %s but service.Load does not read it", k)
	}
}

var helpLine = regexp.MustCompile(`^  ([A-Z][A-Z0-9_]+)\s`)

// helpVariables lists the variables of `coordinator help` (the settings table).
func helpVariables(t *testing.T) []string {
	t.Helper()
	code, stdout, stderr := runCoordinator(t, coordinatorEnv(), "help")
	require.Equal(t, 0, code, stderr)
	_, env, ok := strings.Cut(stdout, "\nEnvironment:\n")
	require.True(t, ok, "no Environment section in:\n%s", stdout)
	var vars []string
	for _, l := range strings.Split(env, "\n") {
		if m := helpLine.FindStringSubmatch(l); m != nil {
			vars = append(vars, m[1])
		}
	}
	require.Contains(t, vars, "DATABASE_URL")
	return vars
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client certificate.
type testPKI struct {
	server                    tls.Certificate
	pool                      *x509.CertPool
	caFile, certFile, keyFile string
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kpgtx test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(serial int64, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		return der, key
	}
	srvDER, srvKey := issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	cliDER, cliKey := issue(3, &x509.Certificate{Subject: pkix.Name{CommonName: "coordinator"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	pemFile := func(name, typ string, der []byte) string {
		return writeFile(t, dir, name, string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})))
	}
	keyDER, err := x509.MarshalECPrivateKey(cliKey)
	require.NoError(t, err)
	p := testPKI{
		server:   tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey},
		pool:     x509.NewCertPool(),
		caFile:   pemFile("ca.pem", "CERTIFICATE", caDER),
		certFile: pemFile("client.pem", "CERTIFICATE", cliDER),
		keyFile:  pemFile("client-key.pem", "EC PRIVATE KEY", keyDER),
	}
	p.pool.AddCert(ca)
	return p
}

// TestSecretsNeverLogged runs the binary with every kind of secret planted — DSN passwords
// (file and environment), API tokens (file), the Kafka SASL password (environment), against an
// in-process Kafka that requires mutual TLS and SASL/SCRAM — at debug level, sends accepted and
// refused requests (a wrong token among them), and checks that no secret reaches its output.
// A second run with a wrong SASL password checks the failure path.
func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	coordinatorBinary(t)
	dsn := needEnv(t, "DATABASE_URL")
	prefix := "s" + randHex(5)
	db := createSchema(t, dsn, prefix)
	dbURL, dbPW := withPassword(t, dsnWithSchema(t, dsn, prefix))
	otherURL, otherPW := withPassword(t, strings.Replace(dsnWithSchema(t, dsn, prefix), "postgres@", "postgres:"+newSecret("pw2")+"@", 1))
	sub, read, admin, wrong := newSecret("sub"), newSecret("read"), newSecret("admin"), newSecret("wrong")
	saslPW := newSecret("sasl")

	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	topic := prefix + "-orders"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "coordinator", saslPW),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.server}, ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs: pki.pool, MinVersion: tls.VersionTLS12}))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)

	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base := "http://" + listen
	cfgFile := writeFile(t, dir, "coordinator.yaml", fmt.Sprintf(`
database_url: %q
listen: %s
instance: secrets
gid_prefix: %s
kafka_transactional_id_prefix: %s
kafka_pool_size: 2
log_level: debug
tokens:
  - ci:submit:%s
  - {name: dash, roles: [read], token: %s}
  - {name: ops, roles: [admin], token: %s}
kafka_tls: true
kafka_tls_ca_file: %s
kafka_tls_cert_file: %s
kafka_tls_key_file: %s
`, dbURL, listen, prefix, prefix, sub, read, admin, pki.caFile, pki.certFile, pki.keyFile))
	env := coordinatorEnv(
		"COORDINATOR_CONFIG="+cfgFile,
		"COORDINATOR_DATABASES=other="+otherURL,
		"KAFKA_BROKERS="+strings.Join(cluster.ListenAddrs(), ","),
		"KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"KAFKA_SASL_USER=coordinator",
		"KAFKA_SASL_PASSWORD="+saslPW,
	)
	secrets := map[string]string{"DSN password": dbPW, "second DSN password": otherPW, "submit token": sub,
		"read token": read, "admin token": admin, "wrong token": wrong, "SASL password": saslPW}

	p := startCoordinator(t, env, "serve")
	waitHealthy(t, p, base, 60*time.Second)
	order := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"sql":[{"statement":"INSERT INTO orders (id, total) VALUES ($1, 1)","args":[%q]},`+
			`{"database":"other","statement":"SELECT 1"}],"kafka":[{"topic":%q,"key":%q,"value":"v"}]}`, id, id, topic, id)
	}
	steps := []struct {
		token, method, path, body string
		want                      int
	}{
		{wrong, "POST", "/v1/transactions", order("s-wrong"), 401},
		{"", "POST", "/v1/transactions", order("s-none"), 401},
		{read, "POST", "/v1/transactions", order("s-read"), 403},
		{sub, "POST", "/v1/transactions", order("s-1"), 200},
		{sub, "POST", "/v1/transactions", `{"id":"s-2","sql":[{"statement":"SELECT 1/0"}],"kafka":[{"topic":"` + topic + `","value":"v"}]}`, 409},
		{read, "GET", "/v1/transactions/s-1", "", 200},
		{sub, "POST", "/v1/recovery/run", "", 403},
		{admin, "POST", "/v1/recovery/run", "", 200},
	}
	for _, s := range steps {
		r, _ := sendAs(t, s.token, s.method, base+s.path, s.body)
		assert.Equal(t, s.want, r.Status, "%s %s: %s", s.method, s.path, r.Raw)
	}
	assert.Equal(t, 1, countRows(t, db, "s-1"))
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exitCode(20*time.Second))

	out := p.stdout.String() + p.stderr.String()
	for what, s := range secrets {
		assert.NotContains(t, out, s, "the %s was written to the output", what)
	}
	line := startingLine(t, p.stderr.String())
	assert.Equal(t, []any{"ci:submit", "dash:read", "ops:admin"}, line["tokens"])
	assert.Equal(t, true, line["kafka_tls"])
	assert.Equal(t, "SCRAM-SHA-512", line["kafka_sasl_mechanism"])
	assert.Contains(t, out, "request refused", "refusals are logged (without the token)")

	// A wrong SASL password: startup fails, and neither password is printed.
	badPW := newSecret("badsasl")
	badEnv := append(slices.Clone(env), "KAFKA_SASL_PASSWORD="+badPW, "COORDINATOR_CLAIM_WAIT=1s")
	code, stdout, stderr := runCoordinator(t, badEnv, "serve")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, `KAFKA_SASL_MECHANISM=SCRAM-SHA-512 as KAFKA_SASL_USER="coordinator"`, "the failure names the login")
	for _, s := range []string{badPW, saslPW, dbPW, otherPW, sub, read, admin} {
		assert.NotContains(t, stdout+stderr, s)
	}
}

// TestConfigRedacted: the configuration's String, fmt verbs and slog forms hide every secret.
func TestConfigRedacted(t *testing.T) {
	t.Parallel()
	dbPW, otherPW, tok, saslPW := newSecret("db"), newSecret("other"), newSecret("tok"), newSecret("sasl")
	toks, err := api.ParseTokens("ci:submit:" + tok)
	require.NoError(t, err)
	c := service.Defaults()
	c.DatabaseURL = "postgres://app:" + dbPW + "@db:5432/app?sslmode=require"
	c.Databases = map[string]string{"billing": "host=db user=app password='" + otherPW + "' dbname=billing"}
	c.Tokens = toks
	c.KafkaSASL = service.KafkaSASL{Mechanism: "PLAIN", User: "u", Password: api.Secret(saslPW)}

	var js, text bytes.Buffer
	slog.New(slog.NewJSONHandler(&js, nil)).Info("config", "config", c)
	slog.New(slog.NewTextHandler(&text, nil)).Info("config", "config", c, "ptr", &c)
	outs := []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprintf("%+v", &c), js.String(), text.String()}
	for _, out := range outs {
		for _, s := range []string{dbPW, otherPW, tok, saslPW} {
			assert.NotContains(t, out, s)
		}
	}
	assert.Contains(t, c.String(), "postgres://app:REDACTED@db:5432/app")
	assert.Contains(t, c.String(), "ci:submit")
	assert.Contains(t, js.String(), `"kafka_sasl_password":"[REDACTED]"`)
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	cases := map[string]string{ // DSN → the part that must stay
		"postgres://u:pw-1-secret@h:5432/db?sslmode=disable":                         "postgres://u:REDACTED@h:5432/db?sslmode=disable",
		"postgresql://u:p%40ss-secret@h/db":                                          "postgresql://u:REDACTED@h/db",
		"postgres://u:p@ss-secret@h/db":                                              "postgres://u:REDACTED@h/db",
		"postgres://u@h/db?password=q-secret&sslpassword=k-secret&x=1":               "postgres://u@h/db?password=REDACTED&sslpassword=REDACTED&x=1",
		"postgres://h1:5432,h2:5432/db?user=u&password=m-secret":                     "postgres://h1:5432,h2:5432/db?user=u&password=REDACTED",
		"host=h user=u password=kw-secret dbname=d":                                  "host=h user=u password=REDACTED dbname=d",
		`host=h password='q w\' x-secret' dbname=d`:                                  "host=h password=REDACTED dbname=d",
		"host=h PASSWORD = spaced-secret dbname=d":                                   "host=h PASSWORD=REDACTED dbname=d",
		"postgres://u@h/db":                                                          "postgres://u@h/db",
		"host=h sslpassword=keypw-secret sslkey=/k.pem":                              "host=h sslpassword=REDACTED sslkey=/k.pem",
		"postgres://coordinator:sekret-secret@127.0.0.1:1/nowhere?connect_timeout=5": "postgres://coordinator:REDACTED@127.0.0.1:1/nowhere?connect_timeout=5",
	}
	for in, want := range cases {
		got := service.RedactDSN(in)
		assert.Equal(t, want, got, in)
		assert.NotContains(t, got, "secret", in)
	}
}
