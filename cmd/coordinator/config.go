package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kpgtx/coordinator/service"
)

const (
	envLogLevel = service.EnvLogLevel
	envConfig   = service.EnvConfig
)

// printEnv prints the settings' table of `coordinator help` (service.Settings).
func printEnv(w io.Writer) {
	for _, s := range service.Settings {
		fmt.Fprintf(w, "  %-31s %s\n", s.Env, s.PlainHelp())
	}
}

// defineFlags defines on fs the flags of the settings named (by flag name), all with zero
// defaults, so that only flags given on the command line override the environment.
func defineFlags(fs *flag.FlagSet, names ...string) {
	for _, name := range names {
		s, ok := service.LookupFlag(name)
		if !ok {
			panic("coordinator: no setting for flag " + name)
		}
		help := s.PlainHelp() + " (env " + s.Env + ")"
		switch s.Kind {
		case service.KindInt:
			fs.Int(s.Flag, 0, help)
		case service.KindDuration:
			fs.Duration(s.Flag, 0, help)
		default:
			fs.String(s.Flag, "", help)
		}
	}
}

// overlay returns getenv with the flags given on fs in front of it: a flag reads as its
// environment variable. An empty flag value reads as unset.
func overlay(fs *flag.FlagSet, getenv func(string) string) func(string) string {
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		if s, ok := service.LookupFlag(f.Name); ok {
			given[s.Env] = f.Value.String()
		}
	})
	return func(key string) string {
		if v, ok := given[key]; ok {
			return v
		}
		return getenv(key)
	}
}

// without returns getenv with the keys unset.
func without(getenv func(string) string, keys ...string) func(string) string {
	return func(key string) string {
		for _, k := range keys {
			if k == key {
				return ""
			}
		}
		return getenv(key)
	}
}

// parseFlags parses args. -h prints the command's usage (to the FlagSet's usage writer) and
// reports help; a bad flag is a usage error of one line.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) { // Parse has printed the usage
		return true, nil
	}
	if err != nil {
		return false, usagef("%s: %v (see coordinator %s -h)", fs.Name(), err, fs.Name())
	}
	return false, nil
}

// newFlagSet returns a FlagSet that reports errors through parseFlags instead of printing or
// exiting; its Usage prints the synopsis and the flags to out.
func newFlagSet(name, synopsis string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: coordinator %s\n\nFlags:\n", synopsis)
		fs.SetOutput(out)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// logLevel reads COORDINATOR_LOG_LEVEL (or -log-level).
func logLevel(getenv func(string) string) (slog.Level, error) {
	var l slog.Level
	v := getenv(envLogLevel)
	if v == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return l, usagef("log level %q (-log-level, %s): want debug, info, warn or error", v, envLogLevel)
	}
	return l, nil
}

// describeDSN names the server and database of a DSN without its password (or user).
func describeDSN(dsn string) string {
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "(unparseable)"
	}
	host := c.Host
	if strings.HasPrefix(host, "/") { // Unix socket directory
		return fmt.Sprintf("%s/.s.PGSQL.%d/%s", host, c.Port, c.Database)
	}
	return fmt.Sprintf("%s:%d/%s", host, c.Port, c.Database)
}

// withConfigFile puts the YAML file that COORDINATOR_CONFIG (or -config) names under env:
// flags > environment > file > defaults. The file may set every setting but itself. blame
// adds to an error about the settings which of the variables it names the file set.
func withConfigFile(env func(string) string) (layered func(string) string, blame func(error) error, err error) {
	blame = func(err error) error { return err }
	path := env(envConfig)
	if path == "" {
		return env, blame, nil
	}
	var known []string
	for _, s := range service.Settings {
		if s.Env != envConfig {
			known = append(known, s.Env)
		}
	}
	file, err := service.ReadFile(path, known)
	if err != nil {
		return nil, nil, err
	}
	blame = func(err error) error {
		var keys []string
		for _, key := range slices.Sorted(maps.Keys(file)) {
			// Whole words: KAFKA_TLS is not KAFKA_TLS_CA_FILE.
			if env(key) == "" && regexp.MustCompile(`\b`+key+`\b`).MatchString(err.Error()) {
				keys = append(keys, service.FileKey(key))
			}
		}
		if len(keys) == 0 {
			return err
		}
		return fmt.Errorf("%w (set in %s as %s)", err, path, strings.Join(keys, ", "))
	}
	return service.Layer(env, file), blame, nil
}
