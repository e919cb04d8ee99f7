package txlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kpgtx/coordinator/txntype"
)

// PreparedBatch logs every member of a shared Kafka transaction prepared with the batch's ids,
// each row with its own record offsets, SQL gids and results: one statement in one database
// transaction, so one commit and one WAL flush for the batch (B2, coord/batch.go).
//
// All or nothing: every row must still be active and owned by its writer at the epoch it
// started with, and that epoch must still be its instance's (fencing, as update). If any row
// fails a condition the transaction is rolled back, nothing changes, and the error matches
// txntype.ErrMovedOn: then no member is prepared and the batch's Kafka transaction may be
// aborted. Any other error leaves the outcome unknown. On success each t is updated.
//
// shared are the PostgreSQL transactions that hold several members' work: each is registered
// with its members in the same transaction (S2, coord/sharedsql.go). A registration or a
// sweep's tombstone of the same gid already there refuses the whole write the same way.
//
// A member with RowDeferred joined with no row (S8, coord/joined.go): its row is inserted
// prepared, fenced like Begin, and a row of its request id or gid already there refuses the
// whole write. The rows updated are the write's anchor: each was active before the shared
// transactions were created, so a late write lands only while every one of them is still
// active, and then every tombstone of its shared transactions is still there (the tombstone
// rule, S3). A write of deferred rows alone has no anchor and is not sent.
func (l *Log) PreparedBatch(ctx context.Context, ts []*txntype.Transaction, shared []txntype.SharedGID) error {
	if len(ts) == 0 {
		return nil
	}
	if l.obs != nil {
		defer l.observeWrite(time.Now())
	}
	ids := ts[0].Kafka
	if ids == nil {
		return errors.New("txlog: prepared batch without Kafka ids")
	}
	var upd, ins preparedRows
	for _, t := range ts {
		if t.Kafka == nil || t.Kafka.KafkaIDs != ids.KafkaIDs {
			return fmt.Errorf("txlog: prepared batch: %s does not carry the batch's Kafka ids", t.GID)
		}
		rows := &upd
		if t.RowDeferred {
			rows = &ins
		}
		if err := rows.add(t); err != nil {
			return err
		}
	}
	if len(upd.gids) == 0 {
		return fmt.Errorf("txlog: prepared batch of %d: every row deferred, no anchor (S8)", len(ts))
	}
	// BEGIN, the rows, the registrations and COMMIT in one round trip: each statement refuses
	// itself when its condition fails (every row changed, every gid registered anew), and then
	// the server skips the rest, COMMIT included. The connection, left in the failed
	// transaction, is not reused (pgxpool destroys it).
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(preparedBatchSQL, upd.gids, upd.owners, upd.epochs, upd.recs, upd.sqlGIDs, upd.results,
		ids.TransactionalID, ids.ProducerID, ids.ProducerEpoch, ids.PreparedState)
	if len(ins.gids) > 0 {
		b.Queue(insertPreparedSQL, ins.gids, ins.owners, ins.epochs, ins.recs, ins.sqlGIDs, ins.results,
			ids.TransactionalID, ids.ProducerID, ids.ProducerEpoch, ids.PreparedState,
			ins.requestIDs, ins.digests, ins.onePhase, ins.instances)
	}
	if err := queueRegistrations(b, shared); err != nil {
		return err
	}
	b.Queue("COMMIT")
	n := len(upd.gids)
	var stamps, inserted map[string][2]time.Time
	err := func() error {
		br := l.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, _ := br.Query()
		var err error
		if stamps, err = readStamps(rows); err != nil {
			return asRefused(err, fmt.Sprintf("prepared batch of %d: a row moved on or is no longer owned", n))
		}
		if len(stamps) != n {
			return fmt.Errorf("txlog: prepared batch of %d: %d rows changed, yet the statement did not refuse itself", n, len(stamps))
		}
		if len(ins.gids) > 0 {
			rows, _ := br.Query()
			if inserted, err = readStamps(rows); err != nil {
				return asRefused(err, fmt.Sprintf("prepared batch: %d deferred rows: a request id was logged already, or the instance no longer holds its epoch", len(ins.gids)))
			}
			if len(inserted) != len(ins.gids) {
				return fmt.Errorf("txlog: prepared batch: %d of %d deferred rows inserted, yet the statement did not refuse itself", len(inserted), len(ins.gids))
			}
		}
		for _, g := range shared {
			if _, err := br.Exec(); err != nil {
				return asRefused(err, fmt.Sprintf("shared transaction %s is registered or tombstoned already", g.GID))
			}
		}
		return readCommit(br, "prepared batch")
	}()
	if err != nil {
		if errors.Is(err, ErrStateChanged) {
			return err
		}
		return fmt.Errorf("txlog: prepared batch: %w", asLogRefused(err))
	}
	for _, t := range ts {
		st, ok := stamps[t.GID]
		if !ok {
			st = inserted[t.GID]
			t.CreatedAt, t.RowDeferred = st[0], false
		}
		t.State, t.UpdatedAt = txntype.StatePrepared, st[0]
		t.PreparedAt = &st[1]
		t.NoteDetailLogged()
	}
	return nil
}

// preparedRows are the arguments of preparedBatchSQL or insertPreparedSQL, one entry a row.
type preparedRows struct {
	gids, owners, recs, sqlGIDs, results, requestIDs, instances []string
	epochs                                                      []int64
	digests                                                     [][]byte
	onePhase                                                    []bool
}

func (p *preparedRows) add(t *txntype.Transaction) error {
	r, g, s, err := marshal3(t.Kafka.Records, t.SQLGIDs, t.SQL)
	if err != nil {
		return err
	}
	p.gids, p.owners, p.epochs = append(p.gids, t.GID), append(p.owners, t.Owner), append(p.epochs, t.OwnerEpoch)
	p.recs, p.sqlGIDs, p.results = append(p.recs, string(r)), append(p.sqlGIDs, string(g)), append(p.results, string(s))
	p.requestIDs, p.digests, p.onePhase = append(p.requestIDs, t.ID), append(p.digests, t.Digest), append(p.onePhase, t.OnePhase)
	p.instances = append(p.instances, t.Instance)
	return nil
}

// insertPreparedSQL inserts the rows of the members that joined with no row (S8), prepared
// with the batch's ids ($1..$10 as preparedBatchSQL, $11 request ids, $12 digests, $13
// one-phase, $14 instances), each fenced on its owner's epoch as beginSQL is. It arbitrates on every unique
// index, as beginSQL does, and refuses itself unless every row was inserted: a request id
// logged meanwhile (another instance's run of it) must not be taken over. Its history derives
// from its stamps (derived_events): created and prepared at the same moment.
var insertPreparedSQL = `
WITH x AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],
            $11::text[], $12::bytea[], $13::boolean[], $14::text[])
        AS x(gid, owner, epoch, recs, sql_gids, results, request_id, digest, one_phase, instance)
    WHERE EXISTS (SELECT 1 FROM coordinator_instances i WHERE i.instance_id = x.owner AND i.epoch = x.epoch)
), ins AS (
    INSERT INTO coordinator_transactions (gid, request_id, request_digest, instance_id, state,
        owner_instance, owner_epoch, one_phase, transactional_id, producer_id, producer_epoch,
        prepared_state, kafka_records, sql_gids, sql_results, prepared_at)
    SELECT gid, request_id, digest, instance, '` + string(txntype.StatePrepared) + `', owner, epoch, one_phase,
        $7, $8, $9, $10, recs::jsonb, sql_gids::jsonb, results::jsonb, now() FROM x
    ORDER BY request_id -- one order of keys for every writer, as beginSQL
    ON CONFLICT DO NOTHING
    RETURNING gid, updated_at, prepared_at
)
SELECT gid, updated_at, prepared_at FROM ins
UNION ALL SELECT NULL, NULL, NULL WHERE ` + refuseUnless("(SELECT count(*) FROM ins) = cardinality($1::text[])") + ` IS NULL`

// Existing returns those of ids that have a row (S8).
func (l *Log) Existing(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := l.pool.Query(ctx, `SELECT request_id FROM coordinator_transactions WHERE request_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("txlog: existing request ids: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("txlog: existing request ids: %w", err)
	}
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}

// CommittedBatch logs several prepared transactions committed in one statement and one commit
// (the members of a shared Kafka transaction whose phase 2 is done; their offsets, gids and
// results were stored by PreparedBatch). Each row is its own compare-and-set on state
// prepared, its owner and its epoch, as update: done[i] says whether ts[i] was written (and
// updated); a row that moved on is left to its writer's own path. err != nil: the outcome of
// every write is unknown. at stamps every row's updated_at and finished_at (zero: now()): the
// time the members' answers said, which went before this write (coord/finals.go).
func (l *Log) CommittedBatch(ctx context.Context, ts []*txntype.Transaction, at time.Time) (done []bool, err error) {
	done = make([]bool, len(ts))
	if len(ts) == 0 {
		return done, nil
	}
	if l.obs != nil {
		defer l.observeWrite(time.Now())
	}
	gids, owners := make([]string, len(ts)), make([]string, len(ts))
	epochs := make([]int64, len(ts))
	for i, t := range ts {
		gids[i], owners[i], epochs[i] = t.GID, t.Owner, t.OwnerEpoch
	}
	rows, err := l.pool.Query(ctx, committedBatchSQL, gids, owners, epochs, stampArg(at))
	if err == nil {
		var stamps map[string][2]time.Time
		if stamps, err = readStamps(rows); err == nil {
			for i, t := range ts {
				if st, ok := stamps[t.GID]; ok {
					t.State, t.UpdatedAt, t.FinishedAt = txntype.StateCommitted, st[0], &st[1]
					done[i] = true
				}
			}
		}
	}
	if err != nil {
		return done, fmt.Errorf("txlog: committed batch: %w", err)
	}
	return done, nil
}

// preparedBatchSQL moves the members of a shared Kafka transaction from active to prepared
// ($1..$6 as batchUpdateSQL, $7..$10 the batch's Kafka ids), refusing itself unless every row
// changed (PreparedBatch).
var preparedBatchSQL = batchUpdateSQL(txntype.StateActive, txntype.StatePrepared,
	"$4::text[], $5::text[], $6::text[]", "recs, sql_gids, results", "now()", `
        transactional_id = $7, producer_id = $8, producer_epoch = $9, prepared_state = $10,
        kafka_records = x.recs::jsonb, sql_gids = x.sql_gids::jsonb, sql_results = x.results::jsonb,
        prepared_at = now()`, "prepared_at") + `
UNION ALL SELECT NULL, NULL, NULL WHERE ` + refuseUnless("(SELECT count(*) FROM upd) = cardinality($1::text[])") + ` IS NULL`

// committedBatchSQL moves prepared rows to committed, stamped $4 (NULL: now()) (CommittedBatch).
var committedBatchSQL = batchUpdateSQL(txntype.StatePrepared, txntype.StateCommitted, "", "",
	"COALESCE($4::timestamptz, now())", "finished_at = COALESCE($4::timestamptz, now())", "finished_at")

// batchUpdateSQL is one statement moving many rows from one state to another, each row its own
// compare-and-set, as update does for one: the row must be in state from and owned by its
// writer ($2) at the epoch it started with ($3), which must still be that instance's (fencing).
// $1 are the gids; extraArrays are more unnest arguments (from $4) named extraNames, readable as
// x.<name> in set. Each row changed gets its event, unless its history derives it from the
// row's stamps (derived_events, Events: to is prepared or committed); the statement returns
// gid, updated_at and the stamp column.
//
// Each row is reached by its primary key, whatever the table's statistics say: the state the
// rows must be in comes from the materialized input (x.from_state), not as a constant, so the
// planner cannot scan the indexes on state instead. Those indexes keep an entry for every row
// version that was ever active or prepared until a vacuum removes it; with a constant, a plan
// made on statistics that saw few prepared rows scanned them all, and every batch write grew
// with the rows written since the last vacuum (TestBatchUpdateReachesRowsByKey).
func batchUpdateSQL(from, to txntype.State, extraArrays, extraNames, updated, set, stamp string) string {
	if extraArrays != "" {
		extraArrays, extraNames = ", "+extraArrays, ", "+extraNames
	}
	return `
WITH input AS MATERIALIZED (
    SELECT x.*, '` + string(from) + `'::text AS from_state
    FROM unnest($1::text[], $2::text[], $3::bigint[]` + extraArrays + `)
        AS x(gid, owner, epoch` + extraNames + `)
), upd AS (
    UPDATE coordinator_transactions t SET state = '` + string(to) + `', updated_at = ` + updated + `, ` + set + `
    FROM input x
    WHERE t.gid = x.gid AND t.state = x.from_state AND t.owner_instance = x.owner AND t.owner_epoch = x.epoch
      AND EXISTS (SELECT 1 FROM coordinator_instances i WHERE i.instance_id = x.owner AND i.epoch = x.epoch)
    RETURNING t.gid, t.updated_at, t.` + stamp + `, t.derived_events
), ev AS (
    INSERT INTO coordinator_events (gid, state) SELECT gid, '` + string(to) + `' FROM upd WHERE NOT derived_events
)
SELECT gid, updated_at, ` + stamp + ` FROM upd`
}

// readStamps reads batchUpdateSQL's answer: gid → (updated_at, the stamp column).
func readStamps(rows pgx.Rows) (map[string][2]time.Time, error) {
	defer rows.Close()
	out := map[string][2]time.Time{}
	for rows.Next() {
		var gid string
		var ts [2]time.Time
		if err := rows.Scan(&gid, &ts[0], &ts[1]); err != nil {
			return nil, err
		}
		out[gid] = ts
	}
	return out, rows.Err()
}
