package sqltxn

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// statements is one database's part of a request as one round trip: every statement queued is
// sent in one pipeline with a single sync point, as pgx sends a Batch in QueryExecModeExec
// (the extended protocol, parameters as text of a type the server infers, results as text,
// no describe round trip), with one difference: a text queued more than once is parsed once,
// as a named statement, and then only bound and executed: the parse of a statement is paid once
// per round trip, not once per use (docs/design.md, "Client SQL"). The guard after every client statement is such
// a text, and so is a client statement sent many times with other arguments (a pipeline
// batch's hundred inserts); their parameters and answers are the same either way, since a
// statement parsed without parameter types gets the types the server infers, named or not.
//
// The named statements live until the connection's DISCARD ALL, which every connection gets
// before it returns to the pool (Run); their names are the coordinator's (stmtName), and the
// next request on the connection parses its own again.
type statements struct {
	items []queued
	// round tells apart the named statements of the round trips one session makes before its
	// DISCARD ALL (RunShared sends one more after a member's failure, whose own named
	// statements may have been parsed).
	round int
}

type queued struct {
	sql  string
	args []any
}

// Queue adds a statement and its arguments (as pgx.Batch.Queue).
func (s *statements) Queue(sql string, args ...any) {
	s.items = append(s.items, queued{sql: sql, args: args})
}

// stmtName is the name of the round's i-th repeated text.
func stmtName(round, i int) string { return "kpgtx_r" + strconv.Itoa(round) + "_s" + strconv.Itoa(i) }

// send sends every queued statement, then a sync; the answers are read in order from the
// returned results, which must be closed. An argument that cannot be encoded sends nothing:
// every read answers that error, as pgx's batch does.
func (s *statements) send(ctx context.Context, conn *pgx.Conn) *stmtResults {
	count := make(map[string]int, len(s.items))
	for _, q := range s.items {
		count[q.sql]++
	}
	// Every parameter is text (Build without a statement description), so no formats are
	// sent. Build reuses its buffers: the values are copied into one arena, and sliced once
	// every statement is encoded.
	var (
		eqb    pgx.ExtendedQueryBuilder
		arena  = make([]byte, 0, 512) // never nil: an empty value sliced from it is not NULL
		spans  []valueSpan
		counts = make([]int, len(s.items))
	)
	for i, q := range s.items {
		if err := eqb.Build(conn.TypeMap(), nil, q.args); err != nil {
			return &stmtResults{err: err}
		}
		for _, v := range eqb.ParamValues {
			spans = append(spans, valueSpan{start: len(arena), end: len(arena) + len(v), null: v == nil})
			arena = append(arena, v...)
		}
		counts[i] = len(eqb.ParamValues)
	}
	all := make([][]byte, len(spans))
	for j, sp := range spans {
		if !sp.null {
			all[j] = arena[sp.start:sp.end:sp.end]
		}
	}
	r := &stmtResults{conn: conn, parsed: make([]bool, len(s.items))}
	r.p = conn.PgConn().StartPipeline(ctx)
	names := map[string]string{}
	for i, q := range s.items {
		values := all[:counts[i]:counts[i]]
		all = all[counts[i]:]
		if count[q.sql] < 2 {
			r.p.SendQueryParams(q.sql, values, nil, nil, nil)
			continue
		}
		name, ok := names[q.sql]
		if !ok {
			name = stmtName(s.round, len(names))
			names[q.sql] = name
			r.p.SendPrepare(name, q.sql, nil)
			r.parsed[i] = true
		}
		r.p.SendQueryPrepared(name, values, nil, nil)
	}
	r.p.SendPipelineSync()
	if err := r.p.Flush(); err != nil {
		r.err = err
	}
	return r
}

// valueSpan is one encoded parameter in send's arena; null: SQL NULL (no bytes at all).
type valueSpan struct {
	start, end int
	null       bool
}

// batchResults are the answers of a round trip, read in order (as pgx.BatchResults).
type batchResults interface {
	Exec() (pgconn.CommandTag, error)
	Query() (pgx.Rows, error)
	Close() error
}

// sendStatements is Databases.send: s sent with its repeated texts parsed once.
func sendStatements(ctx context.Context, conn *pgx.Conn, s *statements) batchResults {
	return s.send(ctx, conn)
}

// stmtResults reads the answers of a sent statements, one per queued statement, in order.
type stmtResults struct {
	conn   *pgx.Conn
	p      *pgconn.Pipeline
	parsed []bool // item i's text was parsed right before it: its description comes first
	next   int
	err    error // the first failure: every later read answers it (the server skipped the rest)
	closed bool
}

// Exec reads the next statement's answer.
func (r *stmtResults) Exec() (pgconn.CommandTag, error) {
	rr, err := r.reader()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := rr.Close()
	if err != nil {
		r.err = err
	}
	return tag, err
}

// Query reads the next statement's answer as rows (decoded as pgx decodes them).
func (r *stmtResults) Query() (pgx.Rows, error) {
	rr, err := r.reader()
	if err != nil {
		return nil, err
	}
	return &stmtRows{Rows: pgx.RowsFromResultReader(r.conn.TypeMap(), rr), r: r}, nil
}

// reader is the next statement's result reader, after its text's description when it was
// parsed there.
func (r *stmtResults) reader() (*pgconn.ResultReader, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.next >= len(r.parsed) {
		return nil, errors.New("sqltxn: no more statements to read")
	}
	i := r.next
	r.next++
	if r.parsed[i] {
		if _, err := r.get(); err != nil {
			return nil, err
		}
	}
	res, err := r.get()
	if err != nil {
		return nil, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		r.err = fmt.Errorf("sqltxn: statement %d: unexpected pipeline result %T", i, res)
		return nil, r.err
	}
	return rr, nil
}

func (r *stmtResults) get() (any, error) {
	res, err := r.p.GetResults()
	if err == nil && res == nil {
		err = errors.New("sqltxn: the pipeline's results ended early")
	}
	if err != nil {
		r.err = err
	}
	return res, err
}

// Close reads what is left up to the sync point and ends the pipeline; its error is the
// first failure seen, as pgx's BatchResults.Close answers.
func (r *stmtResults) Close() error {
	if r.p == nil || r.closed {
		return r.err
	}
	r.closed = true
	err := r.p.Close()
	if r.err != nil {
		return r.err
	}
	return err
}

// stmtRows are a statement's rows; an error reading them is the results' failure too.
type stmtRows struct {
	pgx.Rows
	r *stmtResults
}

func (s *stmtRows) Close() {
	s.Rows.Close()
	if err := s.Rows.Err(); err != nil && s.r.err == nil {
		s.r.err = err
	}
}
