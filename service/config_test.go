package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kpgtx/coordinator/service"
)

// env is a map-backed getenv.
func env(m map[string]string) func(string) string {
	return func(key string) string { return m[key] }
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	c, err := service.Load(env(nil))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", c.Listen)
	assert.Empty(t, c.DatabaseURL)
	assert.Empty(t, c.Databases)
	assert.Empty(t, c.Brokers)
	assert.NotEmpty(t, c.Instance)
	assert.Equal(t, "kpgtx", c.GIDPrefix)
	assert.Equal(t, "kpgtx", c.TxnIDPrefix)
	assert.Equal(t, 32, c.PoolSize)
	assert.Equal(t, 60*time.Second, c.KafkaTxnTimeout)
	assert.Equal(t, 10*time.Second, c.DefaultTimeout)
	assert.Equal(t, 30*time.Second, c.MaxTimeout)
	assert.Equal(t, int64(1<<20), c.MaxBodyBytes)
	assert.Equal(t, 1000, c.MaxStatements)
	assert.Equal(t, 1000, c.MaxRecords)
	assert.Equal(t, int32(64), c.MaxConns)
	assert.Equal(t, service.Defaults(), c)

	// The defaults plus a database are a valid configuration.
	c.DatabaseURL = "postgres://localhost/app"
	require.NoError(t, c.Validate())
	c.Brokers = []string{"localhost:9092"}
	require.NoError(t, c.Validate())
}

func TestLoadOverrides(t *testing.T) {
	t.Parallel()
	c, err := service.Load(env(map[string]string{
		"DATABASE_URL":                  "postgres://db/app",
		"COORDINATOR_LISTEN":            ":9000",
		"COORDINATOR_ALLOW_INSECURE":    "true", // :9000 is beyond loopback and there are no tokens
		"COORDINATOR_ALLOW_PLAINTEXT":   "true", // … nor TLS
		"COORDINATOR_INSTANCE":          "node-1",
		"COORDINATOR_GID_PREFIX":        "abc",
		"KAFKA_TRANSACTIONAL_ID_PREFIX": "tx.app",
		"KAFKA_POOL_SIZE":               "8",
		"KAFKA_TRANSACTION_TIMEOUT":     "2m",
		"COORDINATOR_DEFAULT_TIMEOUT":   "5s",
		"COORDINATOR_MAX_TIMEOUT":       "1m30s",
		"COORDINATOR_MAX_BODY_BYTES":    "4096",
		"COORDINATOR_DB_MAX_CONNS":      "10",
		"COORDINATOR_MAX_STATEMENTS":    "7",
		"COORDINATOR_MAX_RECORDS":       "9",
	}))
	require.NoError(t, err)
	assert.Equal(t, "postgres://db/app", c.DatabaseURL)
	assert.Equal(t, ":9000", c.Listen)
	assert.Equal(t, "node-1", c.Instance)
	assert.Equal(t, "abc", c.GIDPrefix)
	assert.Equal(t, "tx.app", c.TxnIDPrefix)
	assert.Equal(t, 8, c.PoolSize)
	assert.Equal(t, 2*time.Minute, c.KafkaTxnTimeout)
	assert.Equal(t, 5*time.Second, c.DefaultTimeout)
	assert.Equal(t, 90*time.Second, c.MaxTimeout)
	assert.Equal(t, int64(4096), c.MaxBodyBytes)
	assert.Equal(t, int32(10), c.MaxConns)
	assert.Equal(t, 7, c.MaxStatements)
	assert.Equal(t, 9, c.MaxRecords)
	require.NoError(t, c.Validate())
}

func TestLoadBrokers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"localhost:9092", []string{"localhost:9092"}},
		{"a:9092,b:9092", []string{"a:9092", "b:9092"}},
		{" a:9092 , b:9092 ,", []string{"a:9092", "b:9092"}},
		{",,", nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			c, err := service.Load(env(map[string]string{"KAFKA_BROKERS": tt.in}))
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.Brokers)
		})
	}
}

func TestLoadDatabases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want map[string]string
	}{
		{"two", "a=dsn1;b=dsn2", map[string]string{"a": "dsn1", "b": "dsn2"}},
		{"spaces and trailing separator", " a=dsn1 ; b=dsn2 ;", map[string]string{"a": "dsn1", "b": "dsn2"}},
		{"keyword dsn with =", "orders=host=db dbname=orders", map[string]string{"orders": "host=db dbname=orders"}},
		{"url dsn", "x_1=postgres://u:p@h:5432/d?sslmode=disable", map[string]string{"x_1": "postgres://u:p@h:5432/d?sslmode=disable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := service.Load(env(map[string]string{"COORDINATOR_DATABASES": tt.in}))
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.Databases)
		})
	}
}

func TestParseDatabasesInvalid(t *testing.T) {
	t.Parallel()
	tests := []string{
		"a",
		"=dsn",
		"a=",
		"A=dsn",
		"my-db=dsn",
		strings.Repeat("a", 33) + "=dsn",
		"a=dsn1;b",
	}
	for _, in := range tests {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			_, err := service.ParseDatabases(in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "COORDINATOR_DATABASES")

			_, err = service.Load(env(map[string]string{"COORDINATOR_DATABASES": in}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "COORDINATOR_DATABASES")
		})
	}
}

func TestLoadBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key, value string
	}{
		{"KAFKA_POOL_SIZE", "many"},
		{"KAFKA_POOL_SIZE", "1.5"},
		{"COORDINATOR_MAX_BODY_BYTES", "1MB"},
		{"COORDINATOR_DB_MAX_CONNS", "x"},
		{"COORDINATOR_MAX_STATEMENTS", "ten"},
		{"COORDINATOR_MAX_RECORDS", "1e3"},
		{"KAFKA_TRANSACTION_TIMEOUT", "60"},
		{"COORDINATOR_DEFAULT_TIMEOUT", "soon"},
		{"COORDINATOR_MAX_TIMEOUT", "30 s"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			_, err := service.Load(env(map[string]string{tt.key: tt.value}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.key)
			assert.Contains(t, err.Error(), tt.value)
		})
	}
}

func TestLoadReportsEveryBadValue(t *testing.T) {
	t.Parallel()
	_, err := service.Load(env(map[string]string{
		"KAFKA_POOL_SIZE":         "x",
		"COORDINATOR_MAX_TIMEOUT": "y",
	}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "KAFKA_POOL_SIZE")
	assert.Contains(t, err.Error(), "COORDINATOR_MAX_TIMEOUT")
}

func validConfig() service.Config {
	c := service.Defaults()
	c.DatabaseURL = "postgres://localhost/app"
	c.Instance = "node-1"
	c.Brokers = []string{"localhost:9092"}
	return c
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(c *service.Config)
		setting string // "" means valid
	}{
		{"valid", func(*service.Config) {}, ""},
		{"valid without brokers and a long timeout", func(c *service.Config) {
			c.Brokers = nil
			c.MaxTimeout = 2 * time.Minute
		}, ""},
		{"valid extra databases", func(c *service.Config) { c.Databases = map[string]string{"orders": "dsn"} }, ""},
		{"missing DATABASE_URL", func(c *service.Config) { c.DatabaseURL = "" }, "DATABASE_URL"},
		{"write timeout below the budget", func(c *service.Config) { c.WriteTimeout = c.MaxTimeout }, "COORDINATOR_WRITE_TIMEOUT"},
		{"read timeout below the header timeout", func(c *service.Config) { c.ReadTimeout = time.Second; c.ReadHeaderTimeout = 2 * time.Second }, "COORDINATOR_READ_TIMEOUT"},
		{"idle timeout zero", func(c *service.Config) { c.IdleTimeout = 0 }, "COORDINATOR_IDLE_TIMEOUT"},
		{"no requests in flight", func(c *service.Config) { c.MaxInFlight = 0 }, "COORDINATOR_MAX_IN_FLIGHT"},
		{"body memory below one body", func(c *service.Config) { c.MaxBodyMemory = c.MaxBodyBytes - 1 }, "COORDINATOR_MAX_BODY_MEMORY"},
		{"GID prefix with a colon", func(c *service.Config) { c.GIDPrefix = "a:b" }, "COORDINATOR_GID_PREFIX"},
		{"GID prefix with a quote", func(c *service.Config) { c.GIDPrefix = "a'b" }, "COORDINATOR_GID_PREFIX"},
		{"empty GID prefix", func(c *service.Config) { c.GIDPrefix = "" }, "COORDINATOR_GID_PREFIX"},
		{"GID prefix too long", func(c *service.Config) { c.GIDPrefix = strings.Repeat("a", 33) }, "COORDINATOR_GID_PREFIX"},
		{"instance with a space", func(c *service.Config) { c.Instance = "node 1" }, "COORDINATOR_INSTANCE"},
		{"empty instance", func(c *service.Config) { c.Instance = "" }, "COORDINATOR_INSTANCE"},
		{"transactional id prefix with a slash", func(c *service.Config) { c.TxnIDPrefix = "a/b" }, "KAFKA_TRANSACTIONAL_ID_PREFIX"},
		{"pool size 0", func(c *service.Config) { c.PoolSize = 0 }, "KAFKA_POOL_SIZE"},
		{"pool size too large", func(c *service.Config) { c.PoolSize = 1025 }, "KAFKA_POOL_SIZE"},
		{"kafka timeout below 1s", func(c *service.Config) {
			c.KafkaTxnTimeout = 500 * time.Millisecond
			c.Brokers = nil
		}, "KAFKA_TRANSACTION_TIMEOUT"},
		{"max timeout equal to kafka timeout", func(c *service.Config) { c.MaxTimeout = c.KafkaTxnTimeout }, "COORDINATOR_MAX_TIMEOUT"},
		{"max timeout above kafka timeout", func(c *service.Config) {
			c.KafkaTxnTimeout = 20 * time.Second
			c.MaxTimeout = 30 * time.Second
		}, "KAFKA_TRANSACTION_TIMEOUT"},
		{"default timeout 0", func(c *service.Config) { c.DefaultTimeout = 0 }, "COORDINATOR_DEFAULT_TIMEOUT"},
		{"default above max", func(c *service.Config) { c.DefaultTimeout = 40 * time.Second }, "COORDINATOR_MAX_TIMEOUT"},
		{"default database name", func(c *service.Config) { c.Databases = map[string]string{"default": "dsn"} }, "COORDINATOR_DATABASES"},
		{"body limit too small", func(c *service.Config) { c.MaxBodyBytes = 100 }, "COORDINATOR_MAX_BODY_BYTES"},
		{"no statements", func(c *service.Config) { c.MaxStatements = 0 }, "COORDINATOR_MAX_STATEMENTS"},
		{"no records", func(c *service.Config) { c.MaxRecords = 0 }, "COORDINATOR_MAX_RECORDS"},
		{"retention 0 keeps everything", func(c *service.Config) { c.Retention = 0 }, ""},
		{"retention below a minute", func(c *service.Config) { c.Retention = 30 * time.Second }, "COORDINATOR_RETENTION"},
		{"retention below the marker age", func(c *service.Config) { c.Retention, c.MarkerAge = time.Hour, 2*time.Hour }, "COORDINATOR_RETENTION"},
		{"retention below its floor", func(c *service.Config) { c.Retention = 2 * time.Hour }, "below its floor"},
		{"retention at its floor", func(c *service.Config) { c.Retention = c.RetentionFloor() }, ""},
		{"no retry window", func(c *service.Config) { c.RetryWindow = 0 }, "COORDINATOR_RETRY_WINDOW"},
		{"retention interval too short", func(c *service.Config) { c.RetentionInterval = time.Millisecond }, "COORDINATOR_RETENTION_INTERVAL"},
		{"negative retention", func(c *service.Config) { c.Retention = -time.Hour }, "COORDINATOR_RETENTION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.setting == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.setting)
		})
	}
}

// R4: the retention's floor is twice the sum of the retry window and every delay the
// coordinator relies on; it follows those settings, so shortening them shortens it, and a
// refusal names the floor, its terms and why.
func TestRetentionFloor(t *testing.T) {
	t.Parallel()
	c := validConfig()
	want := 2 * (time.Hour + c.MaxTimeout + c.FinishTimeout + c.KafkaTxnTimeout + c.MarkerAge + c.InstanceLease +
		c.RecoveryInterval + service.HangingScanEvery)
	require.Equal(t, want, c.RetentionFloor(), "the defaults' floor")
	assert.Less(t, c.RetentionFloor(), service.Defaults().Retention, "the default retention is above its floor")

	c.Retention = c.RetentionFloor() - time.Second
	err := c.Validate()
	require.Error(t, err)
	for _, s := range []string{"COORDINATOR_RETENTION=", "below its floor of " + c.RetentionFloor().String(), "COORDINATOR_RETRY_WINDOW=1h0m0s",
		"COORDINATOR_MAX_TIMEOUT=", "KAFKA_TRANSACTION_TIMEOUT=", "runs the request again"} {
		assert.Contains(t, err.Error(), s)
	}

	// A test's shorter settings give a shorter floor.
	c.RetryWindow, c.MaxTimeout, c.DefaultTimeout, c.FinishTimeout = time.Second, 5*time.Second, 5*time.Second, time.Second
	c.KafkaTxnTimeout, c.MarkerAge = 10*time.Second, time.Second
	short := c.RetentionFloor()
	assert.Less(t, short, 5*time.Minute)
	c.Retention = short
	require.NoError(t, c.Validate())
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.DatabaseURL = ""
	c.PoolSize = 0
	c.GIDPrefix = "a-b"
	err := c.Validate()
	require.Error(t, err)
	for _, s := range []string{"DATABASE_URL", "KAFKA_POOL_SIZE", "COORDINATOR_GID_PREFIX"} {
		assert.Contains(t, err.Error(), s)
	}
}
