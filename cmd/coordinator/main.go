// Command coordinator runs the two-phase-commit coordinator for PostgreSQL and Apache Kafka.
//
//	coordinator serve               the service, configured by the environment and flags
//	coordinator dev                 the service on a throwaway PostgreSQL and an in-process Kafka
//	coordinator migrate up|down     apply or revert the coordinator log's schema
//	coordinator txn list|show|retry|abort|resolve   in-doubt transactions, via the REST API
//
// Run `coordinator help` for the flags and the environment variables.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// Exit statuses.
const (
	exitOK    = 0 // clean shutdown
	exitError = 1 // the configuration was refused, a dependency failed, or the server failed
	exitUsage = 2 // the command line is wrong or nothing is configured
)

func main() {
	tuneGC(os.Getenv)
	// The first SIGINT/SIGTERM starts a graceful shutdown; once it is under way the default
	// handling is restored, so a second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run dispatches to the subcommand and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "serve":
		return serveCommand(ctx, rest, stderr, getenv)
	case "dev":
		return devCommand(ctx, rest, stdout, stderr, getenv)
	case "migrate":
		return migrateCommand(ctx, rest, stdout, stderr, getenv)
	case "txn":
		return txnCommand(ctx, rest, stdout, stderr, getenv)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "coordinator", version())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return exitOK
		}
		// `help serve` is `serve -h`.
		if _, ok := commands[rest[0]]; ok {
			return run(ctx, []string{rest[0], "-h"}, stdout, stdout, getenv)
		}
		fmt.Fprintf(stderr, "coordinator: unknown command %q\n\n", rest[0])
		usage(stderr)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "coordinator: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
}

// commands are the subcommands that have flags of their own.
var commands = map[string]bool{"serve": true, "dev": true, "migrate": true, "txn": true}

func usage(w io.Writer) {
	fmt.Fprint(w, `coordinator: atomic writes across PostgreSQL and Apache Kafka (two-phase commit)

Usage:
  coordinator serve [flags]                run the coordinator; configured by the environment,
                                           flags override it
  coordinator dev [flags]                  try it out: a throwaway PostgreSQL and an in-process
                                           Kafka, removed again on exit; nothing to configure
  coordinator migrate [flags] up|down      apply or revert the coordinator log's schema
                                           (serve applies it by itself at startup)
  coordinator txn list|show|retry|abort|resolve [flags] [ID]
                                           operate on in-doubt transactions through a running
                                           coordinator's API (coordinator help txn)
  coordinator version                      print the version
  coordinator help [command]               this text, or a command's flags

Environment:
`)
	printEnv(w)
	fmt.Fprint(w, `
Exit status: 0 after a clean shutdown (SIGINT or SIGTERM), 1 when the configuration is refused or
a dependency or the server fails, 2 for a usage error or when nothing is configured.
`)
}

// version is the module version and VCS revision the binary was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " (" + rev + modified + ")"
	}
	return v
}

// errUsage marks errors of the command line (exit status 2).
var errUsage = errors.New("usage")

// fail prints the error as "coordinator: <error>" and returns the matching exit status.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "coordinator: %v\n", err)
	if errors.Is(err, errUsage) {
		return exitUsage
	}
	return exitError
}

// usageError is a command-line error; its message is printed without the "usage" marker.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}
