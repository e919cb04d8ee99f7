package sqltxn

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
)

// memberSavepoint is the savepoint around one request's statements in a shared transaction.
const memberSavepoint = "kpgtx_member"

// RunShared executes several requests' statements on one database as one transaction with one
// marker row and one PREPARE TRANSACTION gid (docs/batching.md section 12). Each request runs
// inside a savepoint; after its statements the session's settings are reset (RESET ALL, before
// the last statement's guard, as in Run), its deferred constraints are checked (SET CONSTRAINTS
// ALL IMMEDIATE, so that a failing one fails that request alone, and a request that deferred
// constraints cannot let the next one commit what would fail alone), and the enter statement
// marks the transaction and sets the statement role again, so that nothing a request's SET
// LOCAL or set_config changed reaches the next request's statements. Every
// client statement is followed by its guard, as in Run.
//
// Everything is pipelined in one round trip. When a request's statement fails, PostgreSQL
// skips the rest of the round trip: the transaction is rolled back to that request's savepoint
// (removing all of its work, and nothing else), the request is reported excluded, and the
// requests after it are sent again in the next round trip. A guard that finds the connection
// outside the transaction is a confinement breach: what the requests before it did may be
// committed (each is reported with txntype.ErrConfinementBreach), the requests after it never
// ran, and the connection is discarded. Any failure of the transaction itself (its marker, its
// PREPARE, the connection) is SharedRun.Err, and the session is rolled back as in Run.
func (d *Databases) RunShared(ctx context.Context, database string, members [][]txntype.Statement, gid string, afterWork func()) txntype.SharedRun {
	out := txntype.SharedRun{Results: make([][]txntype.SQLResult, len(members)), Excluded: make([]error, len(members))}
	db, err := d.db(database)
	if err != nil {
		out.Err = classify(database, err)
		return out
	}
	for i, stmts := range members {
		if len(stmts) == 0 {
			out.Err = classify(database, fmt.Errorf("member %d: %w", i, errEmpty))
			return out
		}
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		out.Err = classify(database, fmt.Errorf("acquire connection: %w", err))
		return out
	}
	discard, resetDone := false, false
	defer func() { d.reset(ctx, conn, database, discard, resetDone) }()

	s := &sharedRound{d: d, db: db, database: database, members: members, gid: gid, out: &out}
	for round, first := 0, true; ; round, first = round+1, false {
		b := s.batch(first)
		b.round = round
		br := d.send(ctx, conn.Conn(), b)
		failed, err := s.read(br, first, afterWork)
		switch {
		case err == nil:
			// PREPARE answered: the outcome is known whatever the reset answers.
			resetDone = d.readReset(br, database)
			discard = !resetDone
			return out
		case failed >= 0 && !errors.Is(err, txntype.ErrConfinementBreach):
			// One request's statement failed: undo it alone and go on with the rest.
			_ = br.Close()
			out.Excluded[failed] = classify(database, err)
			_, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+memberSavepoint+
				"; RELEASE SAVEPOINT "+memberSavepoint, pgx.QueryExecModeSimpleProtocol)
			if rerr == nil {
				s.next = failed + 1
				continue
			}
			err = fmt.Errorf("roll back to the savepoint of member %d: %w", failed, rerr)
		default:
			_ = br.Close()
		}
		if errors.Is(err, txntype.ErrConfinementBreach) {
			discard = true
			d.logger.Error("a client statement left the coordinator's shared transaction; connection discarded",
				"database", database, "gid", gid, "error", err)
		}
		d2, gone := d.endFailed(ctx, conn, db, database)
		discard = d2 || discard
		if !gone {
			err = fmt.Errorf("%w: %w", txntype.ErrPrepareMayLand, err)
		}
		out.Err = classify(database, err)
		return out
	}
}

// sharedRound builds and reads one round trip of RunShared, from member next on.
type sharedRound struct {
	d        *Databases
	db       *database
	database string
	members  [][]txntype.Statement
	gid      string
	next     int
	out      *txntype.SharedRun
}

func (s *sharedRound) enter(b *statements) { queueAs(b, enterStmts, s.d.role) }

func (s *sharedRound) batch(first bool) *statements {
	b := &statements{}
	if first {
		b.Queue("BEGIN")
		s.enter(b)
	}
	for _, stmts := range s.members[s.next:] {
		b.Queue("SAVEPOINT " + memberSavepoint)
		// As in Run. The member's deferred constraints are checked at its end (queueClient's
		// SET CONSTRAINTS ALL IMMEDIATE), and the next member starts with every constraint
		// immediate: a member that deferred them (SET CONSTRAINTS, inside a function) must not
		// let the next one commit what would fail alone. The next one fails at worst, and runs
		// again alone.
		queueClient(b, stmts, s.d.role)
		b.Queue("RESET ALL")
		// The last statement's guard and the enter statement in one: the guard's expression
		// comes first in the target list, which PostgreSQL evaluates in order, so it checks the
		// member's transaction and role before the enter statement marks it again.
		queueAs(b, guardEnterStmts, s.d.role)
		// Released, not left open for the next member's to nest in: a RELEASE costs the server
		// about a microsecond, while a visibility check of the transaction's own rows walks
		// every open level (docs/decisions.md).
		b.Queue("RELEASE SAVEPOINT " + memberSavepoint)
	}
	// The marker row is the coordinator's: the transaction stops counting as a client's (the
	// last member's enter statement marked it again), and goes back to the session's own role.
	if s.d.role != "" {
		b.Queue("SELECT " + leaveSQL + ", pg_catalog.set_config('role', 'none', true)")
	} else {
		b.Queue("SELECT " + leaveSQL)
	}
	b.Queue("INSERT INTO "+s.db.markers+" (gid) VALUES ($1)", s.gid)
	b.Queue("PREPARE TRANSACTION " + quoteGID(s.gid))
	b.Queue("DISCARD ALL") // skipped by the server when anything before it failed
	return b
}

// read reads one round trip's answers up to PREPARE's. failed is the member whose statement
// (or savepoint step) failed, or -1 when the error is the transaction's own.
func (s *sharedRound) read(br batchResults, first bool, afterWork func()) (failed int, err error) {
	if first {
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return -1, fmt.Errorf("begin: %w", err)
			}
		}
	}
	for i := s.next; i < len(s.members); i++ {
		if _, err := br.Exec(); err != nil {
			return -1, fmt.Errorf("savepoint of member %d: %w", i, err)
		}
		stmts := s.members[i]
		res := make([]txntype.SQLResult, len(stmts))
		lastTag := ""
		for j := range stmts {
			r, tag, err := readOne(br, s.database)
			if err != nil {
				return i, fmt.Errorf("statement %d: %w", j, err)
			}
			res[j], lastTag = r, tag
			if err := readGuard(br, j, tag, j == len(stmts)-1); err != nil {
				return i, s.failed(i, err)
			}
		}
		if _, err := br.Exec(); err != nil {
			return i, fmt.Errorf("end of member %d: reset its settings: %w", i, err)
		}
		if _, err := br.Exec(); err != nil { // the last statement's guard, then enter
			return i, s.failed(i, guardError(len(stmts)-1, lastTag, err))
		}
		if _, err := br.Exec(); err != nil { // RELEASE
			return i, fmt.Errorf("end of member %d: %w", i, err)
		}
		s.out.Results[i] = res
	}
	if afterWork != nil {
		afterWork()
	}
	if _, err := br.Exec(); err != nil {
		return -1, fmt.Errorf("leave the client's part: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return -1, fmt.Errorf("marker row: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return -1, err
	}
	return -1, nil
}

// failed is member i's failure err, recorded as a breach when it is one.
func (s *sharedRound) failed(i int, err error) error {
	if errors.Is(err, txntype.ErrConfinementBreach) {
		return s.breach(i, err)
	}
	return err
}

// breach records a confinement breach by member i: every member whose work was in the
// transaction when it was ended shares the breach; the later ones never ran.
func (s *sharedRound) breach(i int, err error) error {
	for j := 0; j <= i; j++ {
		if s.out.Excluded[j] == nil {
			s.out.Results[j] = nil
			s.out.Excluded[j] = fmt.Errorf("member %d of a shared transaction: %w", i, err)
		}
	}
	return err
}
