package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kpgtx/coordinator/client"
)

// The admin client: `coordinator txn list|show|retry|abort|resolve` against the REST API.

const (
	envServerURL     = "COORDINATOR_URL"
	envToken         = "COORDINATOR_TOKEN"
	envCAFile        = "COORDINATOR_CA_FILE"
	defaultServerURL = "http://127.0.0.1:8080"
)

const txnUsage = `Usage:
  coordinator txn list [-state in-doubt|STATE] [-older-than 30s] [-limit N] [-after CURSOR]
  coordinator txn show ID
  coordinator txn retry ID [-reason TEXT]
  coordinator txn abort ID [-reason TEXT]
  coordinator txn resolve ID -outcome committed|aborted -reason TEXT

Every verb takes -server URL (env COORDINATOR_URL, default http://127.0.0.1:8080; https
works), -token TOKEN (env COORDINATOR_TOKEN, sent as "Authorization: Bearer TOKEN"), -ca-file
PEM (env COORDINATOR_CA_FILE: the CA of an https server's certificate), -timeout (default 1m)
and -json (print the server's JSON instead of a table). Flags may come before or after ID.

  list     the in-doubt view by default: log rows not finished (or heuristic), prepared
           PostgreSQL transactions without a log row, and Kafka transactions open on this
           coordinator's transactional ids; issue "waiting": not in doubt, it waits for its
           caller's commit or rollback until its decide_by (abort applies, retry does not);
           -state STATE lists the log's rows of one state
  show     one transaction: its Kafka ids, records, consumer group offsets and event history,
           and, waiting for its caller, until when
  retry    run the recovery rules for it now
  abort    abort it, where that cannot break atomicity (refused otherwise, saying why)
  resolve  record an operator's decision on a heuristic transaction; the reason is required

Exit status: 0 done, 1 the server refused or failed (its message is printed) or cannot be
reached, 2 usage error.
`

// txnClient holds the common flags of the verbs and the API client.
type txnClient struct {
	api     *client.Client
	timeout time.Duration
	json    bool
	stdout  io.Writer
}

func txnCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "coordinator txn: missing verb\n\n"+txnUsage)
		return exitUsage
	}
	verb, rest := args[0], args[1:]
	switch verb {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, txnUsage)
		return exitOK
	case "list", "show", "retry", "abort", "resolve":
	default:
		fmt.Fprintf(stderr, "coordinator txn: unknown verb %q\n\n%s", verb, txnUsage)
		return exitUsage
	}

	fs := flag.NewFlagSet("txn "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &txnClient{stdout: stdout}
	server := fs.String("server", "", "coordinator API base URL (env "+envServerURL+", default "+defaultServerURL+")")
	token := fs.String("token", "", "bearer token (env "+envToken+")")
	caFile := fs.String("ca-file", "", "PEM CA bundle that signed an https server's certificate (env "+envCAFile+"; default: the system's roots)")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "how long to wait for the server")
	fs.BoolVar(&c.json, "json", false, "print the server's JSON")
	var state, olderThan, after, reason, outcome string
	var limit int
	switch verb {
	case "list":
		fs.StringVar(&state, "state", "in-doubt", "in-doubt, or a state: active, prepared, committing, committed, aborted, heuristic, heuristic_mixed")
		fs.StringVar(&olderThan, "older-than", "", "only entries at least this old (30s, 5m, 1h)")
		fs.IntVar(&limit, "limit", 100, "entries per page (1-1000)")
		fs.StringVar(&after, "after", "", "the cursor a previous page printed")
	case "retry", "abort":
		fs.StringVar(&reason, "reason", "", "why (recorded in the event history)")
	case "resolve":
		fs.StringVar(&outcome, "outcome", "", "committed or aborted (required)")
		fs.StringVar(&reason, "reason", "", "why this outcome is right (required; recorded with your name)")
	}
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage of coordinator txn %s:\n", verb)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}

	// Flags before and after the id: parse, take one positional, parse the rest.
	var pos []string
	for {
		help, err := parseFlags(fs, rest)
		if help {
			return exitOK
		}
		if err != nil {
			return fail(stderr, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	var id string
	switch {
	case verb == "list" && len(pos) > 0:
		return fail(stderr, usagef("txn list takes no arguments, got %q", pos))
	case verb != "list" && len(pos) != 1:
		return fail(stderr, usagef("txn %s takes one transaction id, got %d arguments; usage: coordinator txn %s ID", verb, len(pos), verb))
	case verb != "list":
		id = pos[0]
	}

	serverURL := firstNonEmpty(*server, getenv(envServerURL), defaultServerURL)
	if u, err := url.Parse(serverURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail(stderr, usagef("-server %q: want a URL such as %s", serverURL, defaultServerURL))
	}
	opts := []client.Option{client.WithToken(firstNonEmpty(*token, getenv(envToken)))}
	if ca := firstNonEmpty(*caFile, getenv(envCAFile)); ca != "" {
		opts = append(opts, client.WithCAFile(ca))
	}
	api, err := client.New(serverURL, opts...)
	if err != nil {
		return fail(stderr, usagef("%v", err))
	}
	c.api = api
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	switch verb {
	case "list":
		if limit < 1 || limit > 1000 {
			return fail(stderr, usagef("txn list: -limit must be from 1 to 1000"))
		}
		var age time.Duration
		if olderThan != "" {
			d, derr := time.ParseDuration(olderThan)
			if derr != nil || d < 0 {
				return fail(stderr, usagef("txn list: -older-than %q: want a duration such as 30s, 5m or 1h", olderThan))
			}
			age = d
		}
		err = c.list(ctx, state, age, limit, after)
	case "show":
		err = c.action(ctx, verb, id, c.api.Get)
	case "retry", "abort":
		run := func(ctx context.Context, id string) (*client.Transaction, error) { return c.api.Retry(ctx, id, reason) }
		if verb == "abort" {
			run = func(ctx context.Context, id string) (*client.Transaction, error) { return c.api.Abort(ctx, id, reason) }
		}
		err = c.action(ctx, verb, id, run)
	case "resolve":
		if outcome != "committed" && outcome != "aborted" {
			return fail(stderr, usagef("txn resolve: -outcome must be committed or aborted"))
		}
		if strings.TrimSpace(reason) == "" {
			return fail(stderr, usagef("txn resolve: -reason is required: say why this outcome is right"))
		}
		err = c.action(ctx, verb, id, func(ctx context.Context, id string) (*client.Transaction, error) {
			return c.api.Resolve(ctx, id, client.State(outcome), reason)
		})
	}
	if err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// action runs show (GET) or an admin verb (POST) and prints the transaction.
func (c *txnClient) action(ctx context.Context, verb, id string, run func(context.Context, string) (*client.Transaction, error)) error {
	t, err := run(ctx, id)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(t.Raw)
	}
	c.printTransaction(*t, verb)
	return nil
}

func (c *txnClient) printJSON(raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		_, werr := c.stdout.Write(raw)
		return werr
	}
	buf.WriteByte('\n')
	_, err := c.stdout.Write(buf.Bytes())
	return err
}

func (c *txnClient) printTransaction(t client.Transaction, verb string) {
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s:\t%s\n", k, v)
		}
	}
	row("id", t.ID)
	row("state", string(t.State))
	row("waiting", waitingLine(t.Waiting, t.DecideBy, time.Now()))
	if t.DecideBy != nil && !t.Waiting {
		row("decide by", t.DecideBy.Format(time.RFC3339Nano))
	}
	row("gid", t.GID)
	row("instance", t.Instance)
	row("created", t.CreatedAt.Format(time.RFC3339Nano))
	row("updated", t.UpdatedAt.Format(time.RFC3339Nano))
	if t.PreparedAt != nil {
		row("prepared", t.PreparedAt.Format(time.RFC3339Nano))
	}
	if t.FinishedAt != nil {
		row("finished", t.FinishedAt.Format(time.RFC3339Nano))
	}
	if k := t.Kafka; k != nil {
		if k.TransactionalID != "" {
			row("kafka", fmt.Sprintf("%s  producer %d  epoch %d", k.TransactionalID, k.ProducerID, k.ProducerEpoch))
		}
		for _, r := range k.Records {
			rec := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
			if !r.Timestamp.IsZero() {
				rec += "  " + r.Timestamp.Format(time.RFC3339Nano)
			}
			row("record", rec)
		}
	}
	if o := t.KafkaOffsets; o != nil {
		row("group", offsetsGroup(*o))
		if o.After != "" {
			row("after", o.After+"  (the member's batch before: this one commits only after it, O4)")
		}
		for _, p := range o.Offsets {
			// The next offset to read, as GET and the console give it.
			off := fmt.Sprintf("%s/%d next %d", p.Topic, p.Partition, p.Offset)
			if p.Metadata != nil && *p.Metadata != "" {
				off += "  metadata " + strconv.Quote(*p.Metadata)
			}
			row("offset", off)
		}
	}
	for _, g := range t.SQLGIDs {
		row("sql gid", g.Database+": "+g.GID)
	}
	if e := t.Error; e != nil {
		msg := fmt.Sprintf("%s (%s): %s", e.Participant, e.Class, e.Message)
		if e.SQLState != "" {
			msg += " [SQLSTATE " + e.SQLState + "]"
		}
		row("error", msg)
	}
	_ = w.Flush()
	if len(t.Events) == 0 {
		return
	}
	fmt.Fprintln(c.stdout, "\nevents:")
	w = tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tSTATE\tDETAIL")
	for _, e := range t.Events {
		fmt.Fprintf(w, "%s\t%s\t%s\n", e.CreatedAt.Format(time.RFC3339Nano), e.State, eventDetail(e.Detail))
	}
	_ = w.Flush()
}

// offsetsGroup is the consumer group line of a transaction's kafka_offsets: the group, and the
// member and generation that fence the commit (or "unfenced").
func offsetsGroup(o client.OffsetCommit) string {
	s := o.GroupID
	if o.GenerationID == nil || *o.GenerationID < 0 {
		return s + "  unfenced"
	}
	s += fmt.Sprintf("  generation %d  member %s", *o.GenerationID, o.MemberID)
	if o.GroupInstanceID != nil && *o.GroupInstanceID != "" {
		s += "  instance " + *o.GroupInstanceID
	}
	return s
}

// eventDetail renders an event's detail on one line: an admin action as "abort by alice
// (reason) → aborted", a state change's error as "class: message".
func eventDetail(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var d struct {
		Action, By, Reason, Result, Error, Outcome string
		Class, Message                             string
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return string(raw)
	}
	if d.Action != "" {
		s := d.Action + " by " + d.By
		if d.Outcome != "" {
			s += " as " + d.Outcome
		}
		if d.Reason != "" {
			s += " (" + d.Reason + ")"
		}
		s += " → " + d.Result
		if d.Error != "" {
			s += ": " + d.Error
		}
		return s
	}
	if d.Class != "" || d.Message != "" {
		return d.Class + ": " + d.Message
	}
	return string(raw)
}

func (c *txnClient) list(ctx context.Context, state string, olderThan time.Duration, limit int, after string) error {
	opts := client.ListOptions{State: client.State(state), Limit: limit, After: after, OlderThan: olderThan}
	var inDoubt *client.InDoubtPage
	var page *client.Page
	var err error
	var raw []byte
	if state == string(client.InDoubt) {
		inDoubt, err = c.api.ListInDoubt(ctx, opts)
		if inDoubt != nil {
			raw = inDoubt.Raw
		}
	} else {
		page, err = c.api.List(ctx, opts)
		if page != nil {
			raw = page.Raw
		}
	}
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(raw)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	var next string
	var warnings []string
	var n int
	if inDoubt != nil {
		next, warnings, n = inDoubt.Next, inDoubt.Warnings, len(inDoubt.Entries)
		if n > 0 {
			fmt.Fprintln(w, "ID\tSTATE\tISSUE\tSOURCES\tAGE\tINSTANCE\tACTIONS\tEVIDENCE")
		}
		for _, e := range inDoubt.Entries {
			id := e.ID
			if id == "" && e.Kafka != nil {
				id = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, dash(string(e.State)), e.Issue,
				strings.Join(e.Sources, ","), age(e.AgeSeconds), dash(e.Instance),
				dash(strings.Join(e.Actions, ",")), evidence(e))
		}
	} else {
		next, n = page.Next, len(page.Transactions)
		if n > 0 {
			fmt.Fprintln(w, "ID\tSTATE\tUPDATED\tINSTANCE\tKAFKA\tERROR")
		}
		for _, t := range page.Transactions {
			kafka := "-"
			if t.Kafka != nil && t.Kafka.TransactionalID != "" {
				kafka = fmt.Sprintf("%s %d:%d", t.Kafka.TransactionalID, t.Kafka.ProducerID, t.Kafka.ProducerEpoch)
			}
			errMsg := "-"
			if t.Error != nil {
				errMsg = t.Error.Participant + ": " + t.Error.Message
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.State, t.UpdatedAt.Format(time.RFC3339),
				dash(t.Instance), kafka, oneLine(errMsg, 80))
		}
	}
	_ = w.Flush()
	if n == 0 {
		fmt.Fprintf(c.stdout, "no %s transactions\n", state)
	}
	for _, wmsg := range warnings {
		fmt.Fprintf(c.stdout, "warning: %s\n", wmsg)
	}
	if next != "" {
		fmt.Fprintf(c.stdout, "more: coordinator txn list -state %s -after %s\n", state, next)
	}
	return nil
}

// waitingLine is what a transaction waiting for its caller's decision waits for, until when
// (by now, this machine's clock), or "" when it does not wait.
func waitingLine(waiting bool, decideBy *time.Time, now time.Time) string {
	if !waiting {
		return ""
	}
	if decideBy == nil {
		return "for its caller's commit or rollback (not in doubt)"
	}
	at := decideBy.UTC().Format(time.RFC3339)
	if !now.Before(*decideBy) {
		return "deadline reached (decide_by " + at + ") without its caller's decision: recovery aborts it (presumed abort)"
	}
	return "for its caller's commit or rollback until " + at + " (in " + age(decideBy.Sub(now).Seconds()) + "; not in doubt: then recovery aborts it)"
}

// evidence summarises where an in-doubt entry was found.
func evidence(e client.InDoubtEntry) string {
	var parts []string
	if e.Issue == "waiting" && e.Log != nil && e.Log.DecideBy != nil {
		parts = append(parts, "waiting for its caller until "+e.Log.DecideBy.UTC().Format(time.RFC3339))
	}
	for _, p := range e.Postgres {
		parts = append(parts, "pg "+p.Database+" "+p.GID)
	}
	if k := e.Kafka; k != nil {
		s := fmt.Sprintf("kafka %s %d:%d %s", k.TransactionalID, k.ProducerID, k.ProducerEpoch, k.State)
		if k.Quarantined {
			s += " (quarantined)"
		}
		parts = append(parts, s)
	}
	if e.Log != nil && e.Log.Attempts > 0 {
		parts = append(parts, fmt.Sprintf("%d attempts, last: %s", e.Log.Attempts, oneLine(e.Log.LastError, 60)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-1] + "…"
	}
	return s
}

func age(secs float64) string {
	d := time.Duration(secs * float64(time.Second))
	if d < time.Hour {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
