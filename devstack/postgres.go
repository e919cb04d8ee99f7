package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	pgSuperuser     = "postgres"
	pgDatabase      = "coordinator"
	pgReadyTimeout  = 30 * time.Second
	pgStopTimeout   = 10 * time.Second
	pgLogTailLines  = 20
	pgStartAttempts = 3 // only when the port was picked by us and turned out taken
)

// installHint is appended to the error when no PostgreSQL server binaries are found.
const installHint = "install the PostgreSQL server: `sudo apt-get install postgresql` " +
	"(Debian/Ubuntu; the binaries land in /usr/lib/postgresql/<version>/bin), " +
	"or put pg_config or initdb and postgres on PATH"

// Postgres is a throwaway PostgreSQL server in a temporary directory.
type Postgres struct {
	dir     string
	port    int
	logPath string
	logger  *slog.Logger

	cmd      *exec.Cmd
	exited   chan struct{} // closed when the postmaster has exited
	waitErr  error         // valid after exited is closed
	logStart int64         // size of the server log when the postmaster started

	stopOnce sync.Once
	stopErr  error
}

// PostgresOptions configures StartPostgres.
type PostgresOptions struct {
	Port   int          // 0 = pick a free port on 127.0.0.1
	Dir    string       // "" = os.MkdirTemp; a given Dir must be missing or empty (it is removed by Stop)
	Logger *slog.Logger // nil = discard
	// MaxPreparedTransactions is the server's max_prepared_transactions: 0 = 100; negative
	// sets 0, which makes PREPARE TRANSACTION fail (to test how that is refused and reported).
	MaxPreparedTransactions int
	// Path, when set, is the only place server binaries are looked for: a list of directories
	// like PATH (env COORDINATOR_DEV_POSTGRES_PATH for `coordinator dev`). Empty: pg_config and
	// initdb on PATH and /usr/lib/postgresql/*/bin.
	Path string
	// CacheDir keeps the PostgreSQL build fetched when no server binaries are found; "": the
	// user's cache directory (see cacheDir).
	CacheDir string
	// Repository is the Maven repository the build is fetched from; "": MavenCentral.
	Repository string
}

// runAs is the OS identity the PostgreSQL processes run as; nil means the current user.
type runAs struct {
	name     string
	uid, gid uint32
}

// StartPostgres finds PostgreSQL server binaries, runs initdb and starts the server on 127.0.0.1
// with max_prepared_transactions=100 (see PostgresOptions), max_connections 200 and fsync off,
// waits until it accepts connections, and creates database "coordinator".
//
// Without local server binaries it fetches a PostgreSQL build from Maven Central once
// (fetch.go) and runs that, from the cache, from then on.
//
// When the process runs as root, initdb and postgres run as the "postgres" OS user
// (or "nobody" if there is none), since PostgreSQL refuses to run as root.
// The server runs in its own process group, so a Ctrl-C in the terminal reaches only
// the caller, which should then call Stop.
func StartPostgres(ctx context.Context, opts PostgresOptions) (pg *Postgres, err error) {
	began := time.Now()
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	var as *runAs
	if os.Geteuid() == 0 {
		as, err = unprivilegedUser()
		if err != nil {
			return nil, err
		}
	}

	lookPath, debianGlob := exec.LookPath, "/usr/lib/postgresql/*/bin"
	if opts.Path != "" {
		lookPath, debianGlob = lookIn(opts.Path), ""
	}
	binDir, err := findPostgresBinDir(lookPath, debianGlob)
	if errors.Is(err, errNoServer) {
		cache := opts.CacheDir
		if cache == "" {
			if cache, err = cacheDir(as); err != nil {
				return nil, err
			}
		}
		repo := opts.Repository
		if repo == "" {
			repo = MavenCentral
		}
		binDir, err = fetchPostgres(ctx, repo, cache, as, logger)
	}
	if err != nil {
		return nil, err
	}

	dir, err := makeDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	p := &Postgres{
		dir:     dir,
		logPath: filepath.Join(dir, "postgres.log"),
		logger:  logger,
	}
	initdbLogPath := filepath.Join(dir, "initdb.log")
	defer func() {
		if err != nil {
			// Keep the original error; Stop also removes the directory.
			if stopErr := p.Stop(context.WithoutCancel(ctx)); stopErr != nil {
				logger.Warn("devstack: cleanup after failed postgres start", "error", stopErr)
			}
			pg = nil
		}
	}()

	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		return p, fmt.Errorf("postgres: create data directory: %w", err)
	}
	if as != nil {
		if err := prepareForUser(dir, dataDir, as); err != nil {
			return p, err
		}
	}

	initdbLog, err := os.OpenFile(initdbLogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return p, fmt.Errorf("postgres: create log file: %w", err)
	}
	defer initdbLog.Close()
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return p, fmt.Errorf("postgres: create log file: %w", err)
	}
	defer logFile.Close() // the server holds its own descriptor

	runAsName := "current user"
	if as != nil {
		runAsName = as.name
	}
	logger.Info("devstack: postgres initdb", "bin_dir", binDir, "dir", dir, "run_as", runAsName)

	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", dataDir, "-U", pgSuperuser, "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
	configureChild(initdb, dir, as, initdbLog)
	if err := initdb.Run(); err != nil {
		return p, fmt.Errorf("postgres: initdb: %w%s", err, logTail(initdbLogPath))
	}

	sockDir := dir
	if len(dir)+len("/.s.PGSQL.65535") >= 108 { // sun_path limit; TCP is enough for us
		sockDir = ""
	}

	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return p, err
			}
		}
		err = p.startServer(binDir, dataDir, sockDir, port, maxPrepared(opts.MaxPreparedTransactions), as, logFile)
		if err == nil {
			err = p.waitReady(ctx, dataDir)
		}
		if err == nil {
			break
		}
		if opts.Port != 0 || attempt >= pgStartAttempts || !errors.Is(err, errPortTaken) {
			return p, err
		}
		logger.Warn("devstack: postgres port taken, retrying with another", "port", port, "attempt", attempt)
		if err := p.kill(); err != nil {
			return p, err
		}
	}

	if err := p.createDatabase(ctx); err != nil {
		return p, err
	}
	logger.Info("devstack: postgres ready",
		"port", p.port, "dir", dir, "log", p.logPath, "duration_ms", time.Since(began).Milliseconds())
	return p, nil
}

var errPortTaken = errors.New("port already in use")

// maxPrepared is the max_prepared_transactions of PostgresOptions.MaxPreparedTransactions.
func maxPrepared(opt int) int {
	switch {
	case opt == 0:
		return 100
	case opt < 0:
		return 0
	}
	return opt
}

// startServer starts the postmaster (it is not ready yet).
func (p *Postgres) startServer(binDir, dataDir, sockDir string, port, maxPrepared int, as *runAs, logFile *os.File) error {
	p.logStart = fileSize(p.logPath)
	cmd := exec.Command(filepath.Join(binDir, "postgres"),
		"-D", dataDir,
		"-k", sockDir,
		"-h", "127.0.0.1",
		"-p", strconv.Itoa(port),
		"-c", "max_prepared_transactions="+strconv.Itoa(maxPrepared),
		"-c", "max_connections=200",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
	)
	configureChild(cmd, p.dir, as, logFile)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("postgres: start server: %w", err)
	}
	p.cmd = cmd
	p.port = port
	exited := make(chan struct{})
	p.exited = exited
	go func() {
		p.waitErr = cmd.Wait()
		close(exited)
	}()
	p.logger.Info("devstack: postgres starting", "pid", cmd.Process.Pid, "port", port)
	return nil
}

// waitReady polls until the server accepts connections and checks that it is ours.
// It reports errPortTaken when the port is served by someone else.
func (p *Postgres) waitReady(ctx context.Context, dataDir string) error {
	ctx, cancel := context.WithTimeout(ctx, pgReadyTimeout)
	defer cancel()
	var lastErr error
	for {
		attemptCtx, attemptCancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attemptCtx, p.dsnFor("postgres"))
		attemptCancel()
		if err == nil {
			// With a given port, another server may answer there while ours fails to bind.
			var served string
			err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&served)
			_ = conn.Close(context.WithoutCancel(ctx))
			if err != nil {
				return fmt.Errorf("postgres: query data_directory: %w", err)
			}
			if filepath.Clean(served) != filepath.Clean(dataDir) {
				return fmt.Errorf("postgres: 127.0.0.1:%d is served by another PostgreSQL server (data directory %s): %w",
					p.port, served, errPortTaken)
			}
			return nil
		}
		lastErr = err
		select {
		case <-p.exited:
			if log, _ := readFrom(p.logPath, p.logStart); bytes.Contains(log, []byte("could not bind")) ||
				bytes.Contains(log, []byte("could not create any TCP/IP sockets")) {
				return fmt.Errorf("postgres: server exited at start, 127.0.0.1:%d: %w (%v)%s",
					p.port, errPortTaken, p.waitErr, p.logTail())
			}
			return fmt.Errorf("postgres: server exited at start (%v)%s", p.waitErr, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("postgres: not ready after %s: %w (last error: %w)%s",
				pgReadyTimeout, ctx.Err(), lastErr, p.logTail())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// createDatabase creates the coordinator database.
func (p *Postgres) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.dsnFor("postgres"))
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgDatabase); err != nil {
		return fmt.Errorf("postgres: create database %s: %w", pgDatabase, err)
	}
	return nil
}

// DSN returns the connection string of the "coordinator" database, e.g.
// postgres://postgres@127.0.0.1:PORT/coordinator?sslmode=disable.
func (p *Postgres) DSN() string { return p.dsnFor(pgDatabase) }

func (p *Postgres) dsnFor(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", pgSuperuser, p.port, db)
}

// Stop shuts the server down (fast shutdown: SIGINT; SIGKILL after 10 s or when ctx ends)
// and removes its directory. It is idempotent; later calls return the first call's result.
func (p *Postgres) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { p.stopErr = p.stop(ctx) })
	return p.stopErr
}

func (p *Postgres) stop(ctx context.Context) error {
	var errs []error
	if p.cmd != nil {
		pid := p.cmd.Process.Pid
		select {
		case <-p.exited:
		default:
			p.logger.Info("devstack: postgres stopping", "pid", pid)
			if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
				errs = append(errs, fmt.Errorf("postgres: signal server: %w", err))
			}
			timer := time.NewTimer(pgStopTimeout)
			select {
			case <-p.exited:
			case <-timer.C:
				p.logger.Warn("devstack: postgres did not stop in time, killing it", "pid", pid)
			case <-ctx.Done():
				p.logger.Warn("devstack: postgres stop cancelled, killing it", "pid", pid)
			}
			timer.Stop()
		}
		if err := p.kill(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, fmt.Errorf("postgres: remove %s: %w", p.dir, err))
	}
	p.logger.Info("devstack: postgres stopped", "dir", p.dir)
	return errors.Join(errs...)
}

// kill SIGKILLs the server's process group (the postmaster and its backends, see Setpgid)
// unless the postmaster has exited, and waits for the postmaster.
func (p *Postgres) kill() error {
	if p.cmd == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("postgres: kill process group: %w", err)
	}
	<-p.exited
	return nil
}

// findPostgresBinDir returns the directory holding initdb and postgres:
// `pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
func findPostgresBinDir(lookPath func(string) (string, error), debianGlob string) (string, error) {
	hasServer := func(dir string) bool {
		return isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres"))
	}
	if pgConfig, err := lookPath("pg_config"); err == nil {
		// pg_config may come from libpq-dev without the server; then fall through.
		if out, err := exec.Command(pgConfig, "--bindir").Output(); err == nil {
			if dir := strings.TrimSpace(string(out)); hasServer(dir) {
				return dir, nil
			}
		}
	}
	var dirs []string
	if debianGlob != "" {
		dirs, _ = filepath.Glob(debianGlob)
	}
	slices.SortFunc(dirs, func(a, b string) int { return compareVersions(versionOf(a), versionOf(b)) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if hasServer(dirs[i]) {
			return dirs[i], nil
		}
	}
	if initdb, err := lookPath("initdb"); err == nil {
		if resolved, err := filepath.EvalSymlinks(initdb); err == nil {
			if dir := filepath.Dir(resolved); hasServer(dir) {
				return dir, nil
			}
		}
		if dir := filepath.Dir(initdb); hasServer(dir) {
			return dir, nil
		}
	}
	return "", errNoServer
}

// errNoServer: no local PostgreSQL server binaries; StartPostgres then fetches a build.
var errNoServer = errors.New("postgres: PostgreSQL server binaries (initdb, postgres) not found; " + installHint)

// lookIn is exec.LookPath over the directories of path (a PATH-like list) only.
func lookIn(path string) func(string) (string, error) {
	return func(name string) (string, error) {
		for _, dir := range filepath.SplitList(path) {
			if p := filepath.Join(dir, name); dir != "" && isExecutable(p) {
				return p, nil
			}
		}
		return "", fmt.Errorf("%s not found in %s", name, path)
	}
}

// versionOf extracts "15" from /usr/lib/postgresql/15/bin.
func versionOf(binDir string) string { return filepath.Base(filepath.Dir(binDir)) }

// compareVersions compares dotted numeric versions ("9.6" < "15"); non-numeric parts compare as 0.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// unprivilegedUser returns the OS user PostgreSQL runs as when we are root.
func unprivilegedUser() (*runAs, error) {
	var lookupErrs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			lookupErrs = append(lookupErrs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			lookupErrs = append(lookupErrs, fmt.Errorf("user %s: unusable uid %q gid %q", name, u.Uid, u.Gid))
			continue
		}
		return &runAs{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("postgres: running as root, but found no unprivileged user to run PostgreSQL as "+
		"(create one with `useradd --system postgres`, or run as a normal user): %w", errors.Join(lookupErrs...))
}

// makeDir creates a temporary directory, or checks that the given one is missing or empty
// (Stop removes it, so it must hold nothing else).
func makeDir(dir string) (string, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "coordinator-pg-")
		if err != nil {
			return "", fmt.Errorf("postgres: create temporary directory: %w", err)
		}
		return d, nil
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("postgres: directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("postgres: create directory: %w", err)
		}
	case err != nil:
		return "", fmt.Errorf("postgres: directory: %w", err)
	case len(entries) > 0:
		return "", fmt.Errorf("postgres: directory %s is not empty (it is removed on Stop, so it must be empty or missing)", dir)
	}
	return dir, nil
}

// prepareForUser hands dir and dataDir to the user and checks that the user can reach dir.
func prepareForUser(dir, dataDir string, as *runAs) error {
	for _, d := range []string{dir, dataDir} {
		if err := os.Chown(d, int(as.uid), int(as.gid)); err != nil {
			return fmt.Errorf("postgres: chown %s to %s: %w", d, as.name, err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("postgres: chmod %s: %w", dir, err)
	}
	for parent := filepath.Dir(dir); ; parent = filepath.Dir(parent) {
		if !traversable(parent, as) {
			return fmt.Errorf("postgres: directory %s is not reachable by user %s (%s is not searchable); "+
				"use a directory under /tmp (set TMPDIR or PostgresOptions.Dir)", dir, as.name, parent)
		}
		if parent == filepath.Dir(parent) {
			return nil
		}
	}
}

// traversable reports whether the user may search (x) the directory, by its permission bits.
func traversable(path string, as *runAs) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true // cannot tell; let initdb report it
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == as.uid:
		return perm&0o100 != 0
	case st.Gid == as.gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// configureChild sets identity, environment, working directory, output and process group of a child.
func configureChild(cmd *exec.Cmd, dir string, as *runAs, logFile *os.File) {
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = childEnv(dir)
	// Own process group: a Ctrl-C in the terminal goes to us only; we then stop the server cleanly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	if as != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: as.uid, Gid: as.gid}
	}
}

// childEnv is our environment without PG* and locale variables, with HOME set to dir.
func childEnv(dir string) []string {
	env := []string{"HOME=" + dir, "LC_ALL=C"}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") || strings.HasPrefix(name, "LC_") || name == "LANG" || name == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("postgres: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns the last lines of the server log, formatted for appending to an error.
func (p *Postgres) logTail() string { return logTail(p.logPath) }

// logTail returns the last lines of a log file, formatted for appending to an error.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > pgLogTailLines {
		lines = lines[len(lines)-pgLogTailLines:]
	}
	return "\n--- " + path + " (last lines) ---\n" + strings.Join(lines, "\n")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(path string, offset int64) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil || offset > int64(len(data)) {
		return nil, err
	}
	return data[offset:], nil
}
