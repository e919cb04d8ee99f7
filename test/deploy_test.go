package test

// The deployment files, checked without a Docker engine: the Dockerfile (a small line parser),
// .dockerignore, and docker-compose.yml (YAML), against the facts the coordinator needs and
// against the settings it actually reads (`coordinator help`).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kpgtx/coordinator/service"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
	line int
}

// stage is one FROM ... section.
type stage struct {
	image, name string
	instrs      []instruction
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// env is the stage's ENV, in both forms (KEY=value ... and KEY value).
func (s stage) env() map[string]string {
	m := map[string]string{}
	for _, in := range s.all("ENV") {
		if !strings.Contains(strings.Fields(in.args)[0], "=") {
			k, v, _ := strings.Cut(in.args, " ")
			m[k] = strings.TrimSpace(v)
			continue
		}
		for _, kv := range strings.Fields(in.args) {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = strings.Trim(v, `"`)
		}
	}
	return m
}

// parseDockerfile reads the instructions by stage; global ARG defaults are substituted into
// FROM lines. Stage 0 holds what comes before the first FROM.
func parseDockerfile(t *testing.T, path string) (stages []stage, args map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	args = map[string]string{}
	stages = []stage{{}}
	sc := bufio.NewScanner(f)
	var cur strings.Builder
	start, n := 0, 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 {
			start = n
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
		} else if strings.HasPrefix(line, "#") { // comment lines inside a continuation
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		text := cur.String()
		cur.Reset()
		cmd, rest, _ := strings.Cut(text, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(rest), line: start}
		switch in.cmd {
		case "FROM":
			// FROM [--platform=...] image [AS name]
			var f []string
			for _, w := range strings.Fields(os.Expand(in.args, func(k string) string { return args[k] })) {
				if !strings.HasPrefix(w, "--") {
					f = append(f, w)
				}
			}
			require.NotEmpty(t, f, "line %d: FROM without an image", in.line)
			s := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		case "ARG":
			if len(stages) == 1 {
				k, v, _ := strings.Cut(in.args, "=")
				args[k] = v
			}
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
	}
	require.NoError(t, sc.Err())
	require.Zero(t, cur.Len(), "the Dockerfile ends inside a continuation line")
	require.Greater(t, len(stages), 1, "no FROM in the Dockerfile")
	return stages[1:], args
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages, args := parseDockerfile(t, "../Dockerfile")
	require.GreaterOrEqual(t, len(stages), 2, "multi-stage: a build stage and a small runtime stage")
	final := stages[len(stages)-1]

	// The build: a static binary of ./cmd/coordinator.
	var build *stage
	for i := range stages[:len(stages)-1] {
		for _, run := range stages[i].all("RUN") {
			if strings.Contains(run.args, "go build") && strings.Contains(run.args, "./cmd/coordinator") {
				build = &stages[i]
				// The runtime image has no libc: either no cgo at all, or a fully static link
				// (the statement parser, libpg_query, needs cgo).
				noCgo := stages[i].env()["CGO_ENABLED"] == "0" || strings.Contains(run.args, "CGO_ENABLED=0")
				static := strings.Contains(run.args, "-linkmode external") && strings.Contains(run.args, `-extldflags "-static"`) &&
					strings.Contains(run.args, "netgo") && strings.Contains(run.args, "osusergo")
				assert.True(t, noCgo || static, "line %d: go build must be static (CGO_ENABLED=0, or cgo with -linkmode external -extldflags \"-static\" and the netgo,osusergo tags): the runtime image has no libc", run.line)
			}
		}
	}
	require.NotNil(t, build, "no stage runs go build ./cmd/coordinator")
	assert.True(t, strings.HasPrefix(build.image, "golang:"), "build stage image %q", build.image)
	require.NotEmpty(t, build.name, "the build stage needs a name for COPY --from")

	// The Go version matches go.mod's go directive (the golang image does not fetch another).
	if v, ok := args["GO_VERSION"]; ok {
		assert.Equal(t, goDirective(t), v, "ARG GO_VERSION vs go.mod")
	}

	// The runtime stage: small, the binary from the build stage, non-root, port 8080.
	assert.Regexp(t, `^(gcr\.io/distroless/static[^:]*|alpine)(:|@|$)`, final.image, "runtime image")
	copies := final.all("COPY")
	require.NotEmpty(t, copies)
	assert.Contains(t, copies[0].args, "--from="+build.name)
	users := final.all("USER")
	require.NotEmpty(t, users, "the final stage sets no USER: it would run as root")
	user := users[len(users)-1].args
	uid, gid, _ := strings.Cut(user, ":")
	for _, id := range []string{uid, gid} {
		if id == "" {
			continue
		}
		n, err := strconv.Atoi(id)
		require.NoError(t, err, "USER %q: numeric, so that runAsNonRoot can check it", user)
		assert.NotZero(t, n, "USER %q is root", user)
	}
	var exposed []string
	for _, e := range final.all("EXPOSE") {
		exposed = append(exposed, strings.Fields(e.args)...)
	}
	assert.True(t, slices.Contains(exposed, "8080") || slices.Contains(exposed, "8080/tcp"), "EXPOSE %v", exposed)

	entry := final.all("ENTRYPOINT")
	require.NotEmpty(t, entry)
	var argv []string
	require.NoError(t, json.Unmarshal([]byte(entry[len(entry)-1].args), &argv), "ENTRYPOINT in exec form")
	require.NotEmpty(t, argv)
	assert.Contains(t, copies[0].args, argv[0], "ENTRYPOINT runs the copied binary")
	if cmd := final.all("CMD"); len(cmd) > 0 {
		assert.Contains(t, cmd[len(cmd)-1].args, "serve")
	}

	// Every variable the image sets is a setting the coordinator reads, and the image's own
	// settings pass validation (with tokens, which it cannot bake in).
	help := helpVariables(t)
	envs := final.env()
	for k := range envs {
		assert.Contains(t, help, k, "the image sets %s, which the coordinator does not read", k)
	}
	if l := envs["COORDINATOR_LISTEN"]; l != "" {
		_, port, err := net.SplitHostPort(l)
		require.NoError(t, err)
		assert.Contains(t, exposed, port, "COORDINATOR_LISTEN's port is exposed")
	}
}

func goDirective(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(raw)
	require.NotNil(t, m, "go.mod has no go directive")
	return string(m[1])
}

func TestDockerignore(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../.dockerignore")
	require.NoError(t, err)
	var patterns []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	ignored := func(path string) bool {
		out := false
		for _, p := range patterns {
			neg := strings.HasPrefix(p, "!")
			p = strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/")
			match := false
			for _, cand := range []string{path, filepath.Base(path)} {
				if ok, _ := filepath.Match(strings.TrimPrefix(p, "**/"), cand); ok {
					match = true
				}
			}
			if strings.HasPrefix(path, p+"/") { // a directory and what is under it
				match = true
			}
			if match {
				out = !neg
			}
		}
		return out
	}
	for _, p := range []string{".git", ".env", "coordinator", "test/harness_test.go", "api/auth_test.go"} {
		assert.True(t, ignored(p), "%s goes into the build context", p)
	}
	// What the build needs, including the embedded files.
	for _, p := range []string{"go.mod", "go.sum", "cmd/coordinator/main.go", "api/openapi.yaml", "api/auth.go",
		"migrations/000001_init.up.sql", "devstack/kafka.go"} {
		assert.False(t, ignored(p), "%s is left out of the build context", p)
	}
}

// composeFile is the part of docker-compose.yml the test reads. Fields that compose accepts in
// two forms (list or mapping, string or list) are decoded by hand.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image           string         `yaml:"image"`
	Build           any            `yaml:"build"`
	Command         any            `yaml:"command"`
	Environment     any            `yaml:"environment"`
	DependsOn       any            `yaml:"depends_on"`
	Healthcheck     map[string]any `yaml:"healthcheck"`
	Ports           []string       `yaml:"ports"`
	StopGracePeriod string         `yaml:"stop_grace_period"`
}

// interpolate applies compose's ${VAR:-default} (the default), ${VAR:?message} (required:
// the given sample) and ${VAR} (empty), as `docker compose config` would with nothing set.
func interpolate(t *testing.T, s string, required map[string]string) string {
	t.Helper()
	re := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}`)
	out := re.ReplaceAllStringFunc(s, func(m string) string {
		sub := re.FindStringSubmatch(m)
		switch {
		case strings.HasSuffix(sub[2], "-"):
			return sub[3]
		case strings.HasSuffix(sub[2], "?"):
			v, ok := required[sub[1]]
			require.True(t, ok, "compose requires %s; the test has no sample value for it", sub[1])
			return v
		}
		return ""
	})
	assert.NotContains(t, strings.ReplaceAll(out, "$$", ""), "$", "uninterpolated variable in %q", s)
	return out
}

func (s composeService) env(t *testing.T, required map[string]string) map[string]string {
	t.Helper()
	m := map[string]string{}
	switch e := s.Environment.(type) {
	case map[string]any:
		for k, v := range e {
			m[k] = interpolate(t, fmt.Sprint(v), required)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			m[k] = interpolate(t, v, required)
		}
	}
	return m
}

func (s composeService) command() []string {
	switch c := s.Command.(type) {
	case string:
		return strings.Fields(c)
	case []any:
		var out []string
		for _, a := range c {
			out = append(out, fmt.Sprint(a))
		}
		return out
	}
	return nil
}

// dependsOn returns the condition of each dependency ("service_started" for the list form).
func (s composeService) dependsOn() map[string]string {
	m := map[string]string{}
	switch d := s.DependsOn.(type) {
	case []any:
		for _, name := range d {
			m[fmt.Sprint(name)] = "service_started"
		}
	case map[string]any:
		for name, v := range d {
			cond := "service_started"
			if o, ok := v.(map[string]any); ok && o["condition"] != nil {
				cond = fmt.Sprint(o["condition"])
			}
			m[name] = cond
		}
	}
	return m
}

func TestDockerCompose(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c))
	// Sample values for what compose requires the operator to set.
	required := map[string]string{"COORDINATOR_TOKENS": "me:admin:" + randHex(24)}

	find := func(prefix string) (string, composeService) {
		for name, s := range c.Services {
			if strings.HasPrefix(s.Image, prefix) {
				return name, s
			}
		}
		require.FailNow(t, "no service", "with an image %s*", prefix)
		return "", composeService{}
	}
	kafkaName, kafka := find("apache/kafka:")
	pgName, pg := find("postgres:")
	var coordName string
	var coord composeService
	for name, s := range c.Services {
		if s.Build != nil {
			coordName, coord = name, s
		}
	}
	require.NotEmpty(t, coordName, "no service builds the coordinator")
	require.Len(t, c.Services, 3, "postgres, kafka, coordinator")

	// Kafka 4.x, KRaft on one node, with a transaction state log that one node can serve.
	assert.Regexp(t, `^apache/kafka:4\.`, kafka.Image)
	kenv := kafka.env(t, required)
	roles := strings.Split(kenv["KAFKA_PROCESS_ROLES"], ",")
	assert.ElementsMatch(t, []string{"broker", "controller"}, roles, "KAFKA_PROCESS_ROLES")
	assert.NotEmpty(t, kenv["KAFKA_NODE_ID"])
	assert.Contains(t, kenv["KAFKA_CONTROLLER_QUORUM_VOTERS"], kenv["KAFKA_NODE_ID"]+"@"+kafkaName+":")
	assert.Equal(t, "1", kenv["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"])
	assert.Equal(t, "1", kenv["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"])
	assert.Equal(t, "1", kenv["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"])
	assert.NotEmpty(t, kafka.Healthcheck["test"], "kafka healthcheck")

	// PostgreSQL with prepared transactions.
	cmd := pg.command()
	var mpt int
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, "max_prepared_transactions="); ok {
			mpt, err = strconv.Atoi(v)
			require.NoError(t, err)
		}
	}
	assert.Positive(t, mpt, "postgres command %v: -c max_prepared_transactions=N with N > 0", cmd)
	assert.NotEmpty(t, pg.Healthcheck["test"], "postgres healthcheck")
	penv := pg.env(t, required)

	// The coordinator: after both are healthy, pointed at them.
	deps := coord.dependsOn()
	assert.Equal(t, "service_healthy", deps[pgName], "depends_on %s", pgName)
	assert.Equal(t, "service_healthy", deps[kafkaName], "depends_on %s", kafkaName)
	cenv := coord.env(t, required)

	db, err := url.Parse(cenv["DATABASE_URL"])
	require.NoError(t, err, "DATABASE_URL")
	assert.Equal(t, pgName, db.Hostname(), "DATABASE_URL host")
	assert.Equal(t, penv["POSTGRES_USER"], db.User.Username())
	pw, _ := db.User.Password()
	assert.Equal(t, penv["POSTGRES_PASSWORD"], pw)
	assert.Equal(t, "/"+penv["POSTGRES_DB"], db.Path)

	advertised := kenv["KAFKA_ADVERTISED_LISTENERS"]
	for _, b := range strings.Split(cenv["KAFKA_BROKERS"], ",") {
		host, port, err := net.SplitHostPort(b)
		require.NoError(t, err, "KAFKA_BROKERS %q", b)
		assert.Equal(t, kafkaName, host, "KAFKA_BROKERS host")
		assert.Contains(t, advertised, "://"+kafkaName+":"+port, "KAFKA_BROKERS %s is an advertised listener", b)
	}

	// Every variable set for the coordinator is one it reads.
	help := helpVariables(t)
	for k := range cenv {
		assert.Contains(t, help, k, "compose sets %s for the coordinator, which it does not read", k)
	}

	// The coordinator's settings (with the image's) are valid, the security rule included: it
	// listens beyond loopback, so it needs tokens or an explicit COORDINATOR_ALLOW_INSECURE.
	stages, _ := parseDockerfile(t, "../Dockerfile")
	image := stages[len(stages)-1].env()
	cfg, err := service.Load(func(k string) string {
		if v, ok := cenv[k]; ok {
			return v
		}
		return image[k]
	})
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	host, port, err := net.SplitHostPort(cfg.Listen)
	require.NoError(t, err)
	assert.False(t, service.IsLoopback(host), "inside a container the API must listen beyond loopback to be published")
	assert.True(t, len(cfg.Tokens) > 0 || cfg.AllowInsecure)
	published := false
	for _, p := range coord.Ports {
		published = published || strings.HasSuffix(p, ":"+port)
	}
	assert.True(t, published, "the coordinator's port %s is published: %v", port, coord.Ports)

	// docker stop waits longer than the coordinator's graceful shutdown.
	if slices.Contains(help, "COORDINATOR_SHUTDOWN_TIMEOUT") {
		grace, err := time.ParseDuration(coord.StopGracePeriod)
		require.NoError(t, err, "stop_grace_period %q (compose's default 10s is shorter than the shutdown bound)", coord.StopGracePeriod)
		code, stdout, _ := runCoordinator(t, coordinatorEnv(), "help")
		require.Equal(t, 0, code)
		m := regexp.MustCompile(`COORDINATOR_SHUTDOWN_TIMEOUT .*\(default (\S+)\)`).FindStringSubmatch(stdout)
		require.NotNil(t, m, "the default of COORDINATOR_SHUTDOWN_TIMEOUT")
		bound, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		if v := cenv["COORDINATOR_SHUTDOWN_TIMEOUT"]; v != "" {
			bound, err = time.ParseDuration(v)
			require.NoError(t, err)
		}
		assert.Greater(t, grace, bound, "stop_grace_period vs COORDINATOR_SHUTDOWN_TIMEOUT")
	}
}
