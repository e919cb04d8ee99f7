package txlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kpgtx/coordinator/txntype"
)

// Log is the coordinator log in PostgreSQL. Every write is one autocommit statement (one
// fsync) that updates the transaction row and appends to the event history together.
type Log struct {
	pool  *pgxpool.Pool
	group *groupCommit // nil: every write is its own statement
	obs   Observer     // nil: no measurements
}

var _ txntype.Log = (*Log)(nil)

// Options tune a Log.
type Options struct {
	// GroupCommit batches the state writes of concurrent transactions (groupCommit).
	GroupCommit bool
	// Observer receives write latencies and group-commit batch sizes (metrics); nil: none.
	Observer Observer
}

// Observer receives the log's measurements. Calls must be cheap and never block.
type Observer interface {
	// ObserveLogWrite reports one state write as its writer waited for it (group-commit
	// queueing included).
	ObserveLogWrite(d time.Duration)
	// ObserveLogBatch reports one group commit: how many writes it carried and how long the
	// database took.
	ObserveLogBatch(writes int, d time.Duration)
}

// New returns a Log on the pool. The schema must be migrated (Migrate). Close stops its
// writers.
func New(pool *pgxpool.Pool, opts Options) *Log {
	l := &Log{pool: pool, obs: opts.Observer}
	if opts.GroupCommit {
		l.group = newGroupCommit(pool, opts.Observer)
	}
	return l
}

// Close stops the group-commit writers (the pool is the caller's).
func (l *Log) Close() {
	if l.group != nil {
		l.group.close()
	}
}

// queryRow runs one state write, through group commit when it is on.
func (l *Log) queryRow(ctx context.Context, sql string, args []any, scan func(pgx.Row) error) error {
	return l.queryRowMerged(ctx, sql, args, nil, scan)
}

// queryRowMerged is queryRow for a Begin, which group commit may merge with the other Begins
// of its flush (mergeBegins).
func (l *Log) queryRowMerged(ctx context.Context, sql string, args []any, begin *beginRow, scan func(pgx.Row) error) error {
	if l.obs != nil {
		defer l.observeWrite(time.Now())
	}
	if l.group == nil {
		return onConn(ctx, l.pool, func(c *pgxpool.Conn) error { return scan(c.QueryRow(ctx, sql, args...)) })
	}
	return l.group.do(ctx, sql, args, begin, scan)
}

func (l *Log) observeWrite(start time.Time) { l.obs.ObserveLogWrite(time.Since(start)) }

// Pool is the log's connection pool.
func (l *Log) Pool() *pgxpool.Pool { return l.pool }

const columns = `gid, request_id, request_digest, instance_id, state, transactional_id, producer_id,
	producer_epoch, prepared_state, kafka_records, sql_gids, sql_results, error_participant,
	error_class, error_message, error_sqlstate, created_at, updated_at, prepared_at, finished_at,
	owner_instance, owner_epoch, one_phase, kafka_offsets, decide_by`

// fenced is the condition every state write carries (parameters $o: instance, $e: epoch): the
// writer's instance still holds the epoch of its lock. A process whose lock was taken by
// another (takeover) or re-claimed by itself has an older epoch and writes nothing.
func fenced(o, e int) string {
	return fmt.Sprintf(`EXISTS (SELECT 1 FROM coordinator_instances i WHERE i.instance_id = $%d AND i.epoch = $%d)`, o, e)
}

// Prepared stores the Kafka ids, the prepared state, the offsets and the SQL gids with state
// prepared, durably, before any phase-2 call (I2).
func (l *Log) Prepared(ctx context.Context, t *txntype.Transaction) error {
	return l.prepared(ctx, t, txntype.StatePrepared, "")
}

// prepared stores what Prepared stores, moving the row to state to; set adds assignments
// (parameters from $12 on, args).
func (l *Log) prepared(ctx context.Context, t *txntype.Transaction, to txntype.State, set string, args ...any) error {
	ks := t.Kafka
	if ks == nil {
		ks = &txntype.KafkaState{}
	}
	var tid *string
	var pid *int64
	var epoch *int16
	var pstate *string
	if t.Kafka != nil {
		tid, pid, epoch, pstate = &ks.TransactionalID, &ks.ProducerID, &ks.ProducerEpoch, &ks.PreparedState
	}
	recs, gids, results, err := marshal3(ks.Records, t.SQLGIDs, t.SQL)
	if err != nil {
		return err
	}
	offsets, err := marshalOffsets(t.KafkaOffsets)
	if err != nil {
		return err
	}
	err = l.update(ctx, t, to, "now()", `
    transactional_id = $4, producer_id = $5, producer_epoch = $6, prepared_state = $7,
    kafka_records = $8, sql_gids = $9, sql_results = $10, prepared_at = now(), kafka_offsets = $11`+set,
		append([]any{tid, pid, epoch, pstate, recs, gids, results, offsets}, args...)...)
	if err == nil {
		t.NoteDetailLogged()
	}
	return err
}

// Transition moves the transaction to state to, storing its SQL gids, results and error. The
// row keeps what Prepared stored.
func (l *Log) Transition(ctx context.Context, t *txntype.Transaction, to txntype.State) error {
	return l.transition(ctx, t, to, time.Time{})
}

// Committed is Transition to committed, stamped at (zero: now()): the time the request's answer
// said, which went before this write (coord/finals.go).
func (l *Log) Committed(ctx context.Context, t *txntype.Transaction, at time.Time) error {
	return l.transition(ctx, t, txntype.StateCommitted, at)
}

func (l *Log) transition(ctx context.Context, t *txntype.Transaction, to txntype.State, at time.Time) error {
	var recs []txntype.RecordOffset
	if t.Kafka != nil {
		recs = t.Kafka.Records
	}
	// The results and records a write before this one stored, unchanged since, are not sent
	// again: a pipeline batch's hundreds of each would be encoded, parsed and written a second
	// time for nothing ('[]' and NULL keep the row's).
	logged, sqlResults := t.DetailLogged(), t.SQL
	if logged {
		recs, sqlResults = nil, nil
	}
	recsJSON, gids, results, err := marshal3(recs, t.SQLGIDs, sqlResults)
	if err != nil {
		return err
	}
	var resultsArg any = results
	if logged {
		resultsArg = nil // NULL: the row's
	}
	var ep, ec, em, es *string
	if e := t.Error; e != nil {
		class := string(e.Class)
		ep, ec, em, es = &e.Participant, &class, &e.Message, nilIfEmpty(e.SQLState)
	}
	finished := to.Final()
	// The Kafka ids the request used, when it got that far, are kept with the outcome (a row
	// aborted before prepared names the transaction its records were in, as its answer did); a
	// prepared row keeps the ids it was prepared with.
	var tid *string
	var pid *int64
	var epoch *int16
	var pstate *string
	if k := t.Kafka; k != nil && k.TransactionalID != "" {
		ps := k.PreparedState
		if ps == "" {
			ps = k.KafkaIDs.PreparedState()
		}
		tid, pid, epoch, pstate = &k.TransactionalID, &k.ProducerID, &k.ProducerEpoch, &ps
	}
	err = l.update(ctx, t, to, "COALESCE($12::timestamptz, now())", `
    kafka_records = CASE WHEN $4::jsonb = '[]'::jsonb THEN kafka_records ELSE $4 END,
    sql_gids = $5, sql_results = COALESCE($6::jsonb, sql_results), error_participant = $7, error_class = $8,
    error_message = $9, error_sqlstate = $10,
    finished_at = CASE WHEN $11 THEN COALESCE($12::timestamptz, now()) ELSE finished_at END,
    transactional_id = COALESCE(transactional_id, $13), producer_id = COALESCE(producer_id, $14),
    producer_epoch = COALESCE(producer_epoch, $15), prepared_state = COALESCE(prepared_state, $16)`,
		recsJSON, gids, resultsArg, ep, ec, em, es, finished, stampArg(at), tid, pid, epoch, pstate)
	if err == nil && !logged {
		t.NoteDetailLogged()
	}
	return err
}

// stampArg is a stamp as a statement argument: NULL when zero (the server's now()).
func stampArg(at time.Time) *time.Time {
	if at.IsZero() {
		return nil
	}
	return &at
}

// update sets state, updated_at (the expression stamp) and the extra assignments (parameters
// from $4) and appends the event, in one statement. It is a compare-and-set on the state the
// caller last saw (t.State) and on the row's owner (t.Owner at t.OwnerEpoch, which must still
// be that instance's epoch): a row that moved on meanwhile, or that a resolver claimed
// (recovery racing a live request, a takeover, a process that lost its lock), is not
// overwritten.
func (l *Log) update(ctx context.Context, t *txntype.Transaction, to txntype.State, stamp, set string, args ...any) error {
	var updated, prepared, finished, decideBy *time.Time
	o, e := 4+len(args), 5+len(args)
	err := l.queryRow(ctx, `
WITH upd AS (
    UPDATE coordinator_transactions SET state = $2, updated_at = `+stamp+`, `+set+`
    WHERE gid = $1 AND state = $3 AND owner_instance = $`+fmt.Sprint(o)+` AND owner_epoch = $`+fmt.Sprint(e)+`
      AND `+fenced(o, e)+`
    RETURNING gid, state, updated_at, prepared_at, finished_at, error_class, error_message, derived_events, decide_by
), ev AS (
    INSERT INTO coordinator_events (gid, state, detail, created_at)
    SELECT gid, state, CASE WHEN error_class IS NULL THEN NULL
        ELSE jsonb_build_object('class', error_class, 'message', error_message) END, updated_at
    FROM upd
    WHERE NOT (derived_events AND state IN ('prepared', 'committed') AND error_class IS NULL)
)
SELECT updated_at, prepared_at, finished_at, decide_by FROM upd`,
		append(append([]any{t.GID, string(to), string(t.State)}, args...), t.Owner, t.OwnerEpoch), func(row pgx.Row) error {
			return row.Scan(&updated, &prepared, &finished, &decideBy)
		})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("txlog: %s -> %s: %w", t.GID, to, ErrStateChanged)
	}
	if err != nil {
		return fmt.Errorf("txlog: %s -> %s: %w", t.GID, to, asLogRefused(err))
	}
	t.State = to
	t.UpdatedAt = *updated
	t.PreparedAt, t.FinishedAt, t.DecideBy = prepared, finished, decideBy
	return nil
}

// Get returns the transaction with the request id.
func (l *Log) Get(ctx context.Context, id string) (*txntype.Transaction, error) {
	return l.getBy(ctx, "request_id", id)
}

// getBy reads one transaction by a unique column (gid or request_id).
func (l *Log) getBy(ctx context.Context, column, value string) (*txntype.Transaction, error) {
	t, err := scan(l.pool.QueryRow(ctx, `SELECT `+columns+` FROM coordinator_transactions WHERE `+column+` = $1`, value))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", txntype.ErrNotFound, value)
	}
	if err != nil {
		return nil, fmt.Errorf("txlog: get %s %q: %w", column, value, err)
	}
	return t, nil
}

// eventsSQL is a transaction's history ($1 its gid): the stored events and, for a row with
// derived_events, the normal path's steps read from the row's stamps, which the writes of those
// steps no longer store (migration 000006): active at created_at, prepared at prepared_at,
// committed at finished_at. A step is derived only when no stored event of that state carries
// the same stamp (the history of a row written before, or an operator's decision that is itself
// stored with its detail). Oldest first; at one instant, active first and committed last.
const eventsSQL = `
WITH t AS (
    SELECT gid, state, created_at, prepared_at, finished_at FROM coordinator_transactions
    WHERE gid = $1 AND derived_events
), e AS (
    SELECT id, state, detail, created_at FROM coordinator_events WHERE gid = $1
), derived AS (
    SELECT 'active' AS state, created_at, 0 AS rank FROM t
    UNION ALL SELECT 'prepared', prepared_at, 0 FROM t WHERE prepared_at IS NOT NULL
    UNION ALL SELECT 'committed', finished_at, 2 FROM t WHERE state = 'committed' AND finished_at IS NOT NULL
)
SELECT state, detail, created_at FROM (
    SELECT state, detail, created_at, 1 AS rank, id FROM e
    UNION ALL
    SELECT d.state, NULL, d.created_at, d.rank, 0 FROM derived d
    WHERE NOT EXISTS (SELECT 1 FROM e WHERE e.state = d.state AND e.created_at = d.created_at)
) h
ORDER BY created_at, rank, id`

// Events returns the transaction's state history, oldest first (eventsSQL).
func (l *Log) Events(ctx context.Context, gid string) ([]txntype.Event, error) {
	rows, err := l.pool.Query(ctx, eventsSQL, gid)
	if err != nil {
		return nil, fmt.Errorf("txlog: events of %s: %w", gid, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (txntype.Event, error) {
		var e txntype.Event
		var detail []byte
		err := r.Scan(&e.State, &detail, &e.CreatedAt)
		if len(detail) > 0 {
			e.Detail = json.RawMessage(detail)
		}
		return e, err
	})
}

// Page is one page of a listing, and the cursor for the next.
type Page struct {
	Transactions []*txntype.Transaction
	Next         string
}

// List returns transactions, newest first, optionally of one state. after is the cursor of the
// previous page ("" for the first).
func (l *Log) List(ctx context.Context, state txntype.State, limit int, after string) (Page, error) {
	return l.ListOlder(ctx, state, 0, limit, after)
}

// ListOlder is List with an age filter: only rows whose last state change (updated_at) is at
// least olderThan ago, by database time (0: no filter).
func (l *Log) ListOlder(ctx context.Context, state txntype.State, olderThan time.Duration, limit int, after string) (Page, error) {
	var afterAt *time.Time
	var afterGID string
	if after != "" {
		at, gid, err := decodeCursor(after)
		if err != nil {
			return Page{}, err
		}
		afterAt, afterGID = &at, gid
	}
	// Only the filters in use are in the statement: each combination is a statement of its own,
	// whose cached plan serves it (with "$1 = '' OR state = $1" one generic plan served all,
	// and it could walk the whole (created_at, gid) index backwards for a rare state).
	args := []any{limit + 1}
	where := "TRUE"
	if state != "" {
		args = append(args, string(state))
		where += fmt.Sprintf(" AND state = $%d", len(args))
	}
	if afterAt != nil {
		args = append(args, *afterAt, afterGID)
		where += fmt.Sprintf(" AND (created_at, gid) < ($%d, $%d)", len(args)-1, len(args))
	}
	if olderThan > 0 {
		// In microseconds, PostgreSQL's resolution: a Go duration's text, such as "3µs", is
		// not an interval PostgreSQL reads.
		args = append(args, olderThan.Microseconds())
		where += fmt.Sprintf(" AND updated_at <= now() - $%d::bigint * interval '1 microsecond'", len(args))
	}
	rows, err := l.pool.Query(ctx, `SELECT `+columns+` FROM coordinator_transactions
WHERE `+where+`
ORDER BY created_at DESC, gid DESC
LIMIT $1`, args...)
	if err != nil {
		return Page{}, fmt.Errorf("txlog: list: %w", err)
	}
	defer rows.Close()
	var p Page
	for rows.Next() {
		t, err := scan(rows)
		if err != nil {
			return Page{}, fmt.Errorf("txlog: list: %w", err)
		}
		p.Transactions = append(p.Transactions, t)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("txlog: list: %w", err)
	}
	if len(p.Transactions) > limit {
		p.Transactions = p.Transactions[:limit]
		last := p.Transactions[limit-1]
		p.Next = encodeCursor(last.CreatedAt, last.GID)
	}
	return p, nil
}

// InDoubtTransactionalIDs lists the transactional ids of this instance's transactions that are
// not final: they stay quarantined until recovery resolves them (I1).
func (l *Log) InDoubtTransactionalIDs(ctx context.Context, instance string) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT DISTINCT transactional_id FROM coordinator_transactions
WHERE instance_id = $1 AND state IN ('waiting', 'prepared', 'committing', 'aborting') AND transactional_id IS NOT NULL`, instance)
	if err != nil {
		return nil, fmt.Errorf("txlog: in-doubt ids: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func scan(row pgx.Row) (*txntype.Transaction, error) {
	var (
		t                   txntype.Transaction
		tid, pstate         *string
		pid                 *int64
		epoch               *int16
		recs, gids, results []byte
		ep, ec, em, es      *string
		koffsets            []byte
	)
	err := row.Scan(&t.GID, &t.ID, &t.Digest, &t.Instance, &t.State, &tid, &pid, &epoch, &pstate,
		&recs, &gids, &results, &ep, &ec, &em, &es, &t.CreatedAt, &t.UpdatedAt, &t.PreparedAt, &t.FinishedAt,
		&t.Owner, &t.OwnerEpoch, &t.OnePhase, &koffsets, &t.DecideBy)
	if err != nil {
		return nil, err
	}
	if koffsets != nil {
		if err := json.Unmarshal(koffsets, &t.KafkaOffsets); err != nil {
			return nil, fmt.Errorf("kafka_offsets: %w", err)
		}
	}
	var offsets []txntype.RecordOffset
	if err := json.Unmarshal(recs, &offsets); err != nil {
		return nil, fmt.Errorf("kafka_records: %w", err)
	}
	if tid != nil || len(offsets) > 0 {
		t.Kafka = &txntype.KafkaState{Records: offsets}
		if tid != nil {
			t.Kafka.TransactionalID = *tid
		}
		if pid != nil && epoch != nil {
			t.Kafka.ProducerID, t.Kafka.ProducerEpoch = *pid, *epoch
		}
		if pstate != nil {
			t.Kafka.PreparedState = *pstate
		}
	}
	if err := json.Unmarshal(gids, &t.SQLGIDs); err != nil {
		return nil, fmt.Errorf("sql_gids: %w", err)
	}
	// Numbers stay exact (json.Number): a stored RETURNING value beyond float64 must not make
	// the transaction, or a list page that holds it, unreadable.
	dec := json.NewDecoder(bytes.NewReader(results))
	dec.UseNumber()
	if err := dec.Decode(&t.SQL); err != nil {
		return nil, fmt.Errorf("sql_results: %w", err)
	}
	if ec != nil {
		t.Error = &txntype.ErrorDetail{Class: txntype.Class(*ec)}
		if ep != nil {
			t.Error.Participant = *ep
		}
		if em != nil {
			t.Error.Message = *em
		}
		if es != nil {
			t.Error.SQLState = *es
		}
	}
	return &t, nil
}

func marshal3(recs []txntype.RecordOffset, gids []txntype.SQLGID, results []txntype.SQLResult) ([]byte, []byte, []byte, error) {
	if recs == nil {
		recs = []txntype.RecordOffset{}
	}
	if gids == nil {
		gids = []txntype.SQLGID{}
	}
	if results == nil {
		results = []txntype.SQLResult{}
	}
	a, err := json.Marshal(recs)
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := json.Marshal(gids)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := json.Marshal(results)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sql results are not JSON-encodable: %w", err)
	}
	return a, b, c, nil
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// marshalOffsets is the kafka_offsets column's value: NULL without offsets.
func marshalOffsets(o *txntype.OffsetCommit) (*string, error) {
	if o == nil {
		return nil, nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("kafka offsets: %w", err)
	}
	s := string(b)
	return &s, nil
}
