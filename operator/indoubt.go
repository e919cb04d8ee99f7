package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// The in-doubt view reconciles what the log, every database's pg_prepared_xacts and Kafka's
// open (and hanging) transactions say about this coordinator's transactions, and says for each
// entry which admin actions apply and what recovery will do with it (doc.go, State Model). The
// API renders it (GET /v1/transactions?state=in-doubt, the console's status).

// Issues of the in-doubt view: why an entry is listed.
const (
	IssueInDoubt   = "in_doubt"   // a log row active, prepared or committing, not in flight
	IssueWaiting   = "waiting"    // a log row waiting for its caller's decision until decide_by: not in doubt
	IssueHeuristic = "heuristic"  // heuristic or heuristic_mixed: an operator must decide
	IssueOrphan    = "orphan"     // prepared in PostgreSQL with our prefix, no log row
	IssueLeftover  = "leftover"   // prepared in PostgreSQL, its log row is final
	IssueKafkaOpen = "kafka_open" // Kafka has a transaction open on one of our ids, no in-doubt row, not in use
	IssueHanging   = "hanging"    // a partition holds a transaction of ours open that Kafka's coordinator completed
)

// Sources of an entry's evidence.
const (
	SourceLog      = "log"
	SourcePostgres = "postgres"
	SourceKafka    = "kafka"
)

// foreignGrace: a row or a Kafka transaction of another instance younger than this may be a
// request in flight there (a request runs at most COORDINATOR_MAX_TIMEOUT, 30 s by default);
// this process cannot ask, so such entries wait this long before they are listed.
const foreignGrace = 30 * time.Second

// InDoubtEntry is one item of the in-doubt view.
type InDoubtEntry struct {
	ID         string         `json:"id,omitempty"`
	GID        string         `json:"gid,omitempty"`
	State      txntype.State  `json:"state,omitempty"` // the log's; absent without a log row
	Issue      string         `json:"issue"`
	Sources    []string       `json:"sources"`
	Instance   string         `json:"instance,omitempty"`
	Since      time.Time      `json:"since"`
	AgeSeconds float64        `json:"age_seconds"`
	Actions    []string       `json:"actions"`
	Hint       string         `json:"hint"`
	Log        *LogInfo       `json:"log,omitempty"`
	Postgres   []PostgresInfo `json:"postgres,omitempty"`
	Kafka      *KafkaInfo     `json:"kafka,omitempty"`
	Hanging    *HangingInfo   `json:"hanging,omitempty"`

	Key string `json:"-"` // unique: orders entries of the same Since, and names one in a cursor
}

// LogInfo is the log row, with its recovery bookkeeping.
type LogInfo struct {
	*txntype.Transaction
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// MarshalJSON shows the row as the transaction API shows it (txntype.Transaction.Public): a
// row its caller decides says so, and while it waits it is prepared with waiting true. The
// entry's own state keeps the log's word, waiting, which the view's logic reads.
func (l LogInfo) MarshalJSON() ([]byte, error) {
	type plain LogInfo // without this method
	p := plain(l)
	p.Transaction = l.Transaction.Public()
	return json.Marshal(p)
}

// PostgresInfo is a prepared transaction found in pg_prepared_xacts.
type PostgresInfo struct {
	Database   string    `json:"database"`
	GID        string    `json:"gid"`
	PreparedAt time.Time `json:"prepared_at"`
}

// KafkaInfo is what Kafka reports about a transaction open on one of our transactional ids.
type KafkaInfo struct {
	TransactionalID string     `json:"transactional_id"`
	ProducerID      int64      `json:"producer_id"`
	ProducerEpoch   int16      `json:"producer_epoch"`
	State           string     `json:"state"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	TimeoutMS       int64      `json:"timeout_ms,omitempty"`
	// Owner is the instance whose pool the id belongs to ("" when no registered instance's).
	Owner       string `json:"owner,omitempty"`
	Quarantined bool   `json:"quarantined"`

	own bool // the id is in this instance's pool
}

// HangingInfo is a hanging transaction (kafkatxn/hanging.go): the broker completed it without
// writing its marker to this partition; its id is held out of the pool until it is repaired.
type HangingInfo struct {
	TransactionalID  string    `json:"transactional_id"`
	ProducerID       int64     `json:"producer_id"`
	ProducerEpoch    int16     `json:"producer_epoch"`
	Topic            string    `json:"topic"`
	Partition        int32     `json:"partition"`
	StartOffset      int64     `json:"start_offset"`
	LastWrite        time.Time `json:"last_write"`
	KafkaState       string    `json:"kafka_state"`
	Status           string    `json:"status"`
	Note             string    `json:"note,omitempty"`
	CoordinatorEpoch int32     `json:"coordinator_epoch"`
}

// InDoubtView is the reconciled view at one moment of the log's clock.
type InDoubtView struct {
	Now     time.Time
	Entries []*InDoubtEntry // newest first (InDoubtEntry.After)
	// Warnings name the sources that could not be read: the view is partial.
	Warnings []string
}

// After reports whether e comes after the position (at, key) in the view's order: newest
// first by Since, then by Key descending. Paging resumes after a cursor with it.
func (e *InDoubtEntry) After(at time.Time, key string) bool {
	if !e.Since.Equal(at) {
		return e.Since.Before(at)
	}
	return e.Key < key
}

// InDoubt builds the reconciled view. A source that cannot be read is named in the warnings;
// the log is required.
func (d *Desk) InDoubt(ctx context.Context) (*InDoubtView, error) {
	now, err := d.log.Now(ctx)
	if err != nil {
		return nil, err
	}
	self := d.cfg.Instance
	var warnings []string
	byGID := map[string]*InDoubtEntry{}
	var entries []*InDoubtEntry

	// The log: rows not final (and not in flight), and heuristic rows.
	rows, err := d.log.InDoubt(ctx)
	if err != nil {
		return nil, err
	}
	var live []string // non-final rows: re-checked below, they may have moved on meanwhile
	for _, row := range rows {
		if d.coord.InFlight(row.GID) {
			continue
		}
		// A waiting row of another instance is listed at once: it is durable, and whoever
		// decides it does so with one conditional write (X2-X4), from any instance.
		if row.Instance != self && !row.State.Final() && row.State != txntype.StateWaiting && now.Sub(row.UpdatedAt) < foreignGrace {
			continue
		}
		e := &InDoubtEntry{ID: row.ID, GID: row.GID, State: row.State, Sources: []string{SourceLog},
			Instance: row.Instance, Since: row.UpdatedAt, Key: row.GID,
			Log: &LogInfo{Transaction: row.Transaction, Attempts: row.Attempts, LastError: row.LastError}}
		e.Issue = IssueInDoubt
		switch {
		case row.State.Final():
			e.Issue = IssueHeuristic
		case row.State == txntype.StateWaiting:
			// Not in doubt: it waits for its caller until decide_by, and recovery leaves it
			// alone until then (no attempt is scheduled).
			e.Issue = IssueWaiting
			live = append(live, row.GID)
		default:
			next := row.NextAttemptAt
			e.Log.NextAttemptAt = &next
			live = append(live, row.GID)
		}
		byGID[row.GID] = e
		entries = append(entries, e)
	}
	if len(live) > 0 {
		states, err := d.log.States(ctx, live)
		if err != nil {
			return nil, err
		}
		for _, gid := range live {
			if states[gid] != byGID[gid].State {
				delete(byGID, gid)
			}
		}
		entries = slices.DeleteFunc(entries, func(e *InDoubtEntry) bool { return byGID[e.GID] != e })
	}

	// PostgreSQL: prepared gids with our prefix, on every configured database.
	prefix := d.cfg.GIDPrefix + "_"
	var unknown []string
	var shared []sqltxn.PreparedXact
	pending := map[string][]sqltxn.PreparedXact{}
	if d.sql != nil {
		dbs := d.sql.Names()
		sort.Strings(dbs)
		for _, db := range dbs {
			prepared, err := d.sql.PreparedXacts(ctx, db, prefix)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("postgres %q: %v", db, err))
				continue
			}
			for _, p := range prepared {
				g := p.GID
				if txntype.IsSharedGID(d.cfg.GIDPrefix, g) {
					shared = append(shared, p)
					continue
				}
				global := g
				if i := strings.LastIndexByte(g, '@'); i >= 0 {
					global = g[:i]
				}
				if e := byGID[global]; e != nil {
					e.addPostgres(p)
					continue
				}
				if _, seen := pending[global]; !seen {
					unknown = append(unknown, global)
				}
				pending[global] = append(pending[global], p)
			}
		}
	}
	more, err := d.sharedInDoubt(ctx, now, shared, byGID)
	if err != nil {
		return nil, err
	}
	entries = append(entries, more...)
	if len(unknown) > 0 {
		states, err := d.log.States(ctx, unknown)
		if err != nil {
			return nil, err
		}
		for _, global := range unknown {
			st, known := states[global]
			if known && !st.Final() {
				continue // in flight here, or young in another instance, or moved on meanwhile
			}
			e := &InDoubtEntry{ID: strings.TrimPrefix(global, prefix), GID: global, Key: global, Issue: IssueOrphan}
			if known {
				e.State, e.Issue = st, IssueLeftover
				if st == txntype.StateHeuristic || st == txntype.StateHeuristicMixed {
					continue // listed with its row
				}
			}
			for _, p := range pending[global] {
				e.addPostgres(p)
			}
			e.Since = e.Postgres[0].PreparedAt
			for _, p := range e.Postgres {
				if p.PreparedAt.Before(e.Since) {
					e.Since = p.PreparedAt
				}
			}
			entries = append(entries, e)
		}
	}

	// Kafka: transactions open on ids with our prefix.
	if d.kafka != nil {
		open, err := d.kafka.OpenTransactions(ctx)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("kafka: %v", err))
		}
		var instances []txlog.Instance
		if len(open) > 0 {
			instances, err = d.log.Instances(ctx, self)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("instances: %v", err))
			}
		}
		byTID := map[string]*InDoubtEntry{}
		for _, e := range entries {
			if e.Log != nil && e.Log.Kafka != nil && e.Log.Kafka.TransactionalID != "" && e.State != txntype.StateActive {
				byTID[e.Log.Kafka.TransactionalID] = e
			}
		}
		for _, o := range open {
			k := &KafkaInfo{TransactionalID: o.TransactionalID, ProducerID: o.ProducerID, ProducerEpoch: o.ProducerEpoch,
				State: o.State, TimeoutMS: o.Timeout.Milliseconds(), Quarantined: o.Quarantined}
			if !o.StartedAt.IsZero() {
				at := o.StartedAt
				k.StartedAt = &at
			}
			if o.Owned {
				k.Owner, k.own = self, true
			} else {
				k.Owner = ownerOf(o.TransactionalID, instances)
			}
			if e := byTID[o.TransactionalID]; e != nil && e.Log.Kafka.ProducerID == o.ProducerID {
				e.Kafka = k
				e.Sources = append(e.Sources, SourceKafka)
				continue
			}
			if o.InUse {
				continue // a request of this process runs it
			}
			if !o.Owned && !o.StartedAt.IsZero() && time.Since(o.StartedAt) < foreignGrace {
				continue // may be in flight in another instance
			}
			e := &InDoubtEntry{Issue: IssueKafkaOpen, Sources: []string{SourceKafka}, Instance: k.Owner,
				Kafka: k, Key: "kafka:" + o.TransactionalID, Since: now}
			if k.StartedAt != nil {
				e.Since = *k.StartedAt
			}
			entries = append(entries, e)
		}
	}

	// Kafka: hanging transactions of this instance's ids, held out of the pool.
	if d.kafka != nil {
		for _, h := range d.kafka.HangingTransactions() {
			entries = append(entries, &InDoubtEntry{Issue: IssueHanging, Sources: []string{SourceKafka}, Instance: self,
				Since: h.FoundAt, Key: fmt.Sprintf("hanging:%s/%s/%d", h.TransactionalID, h.Topic, h.Partition),
				Hanging: &HangingInfo{TransactionalID: h.TransactionalID, ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
					Topic: h.Topic, Partition: h.Partition, StartOffset: h.StartOffset, LastWrite: h.LastWrite,
					KafkaState: h.KafkaState, Status: h.Status, Note: h.Note, CoordinatorEpoch: h.CoordinatorEpoch}})
		}
	}

	for _, e := range entries {
		e.AgeSeconds = max(0, now.Sub(e.Since).Round(time.Millisecond).Seconds())
		e.Actions, e.Hint = advice(e, now)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[j].After(entries[i].Since, entries[i].Key) })
	return &InDoubtView{Now: now, Entries: entries, Warnings: warnings}, nil
}

func (e *InDoubtEntry) addPostgres(p sqltxn.PreparedXact) {
	if !slices.Contains(e.Sources, SourcePostgres) {
		e.Sources = append(e.Sources, SourcePostgres)
	}
	e.Postgres = append(e.Postgres, PostgresInfo{Database: p.Database, GID: p.GID, PreparedAt: p.PreparedAt})
	sort.Slice(e.Postgres, func(i, j int) bool { return e.Postgres[i].Database < e.Postgres[j].Database })
}

// ownerOf names the registered instance whose pool holds the transactional id.
func ownerOf(id string, instances []txlog.Instance) string {
	for _, in := range instances {
		rest, ok := strings.CutPrefix(id, in.TxnIDPrefix+"-"+in.ID+"-")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 && n < in.PoolSize {
			return in.ID
		}
	}
	return ""
}

// advice says which admin actions apply to an entry, and what will happen to it, at now (the
// log's clock).
func advice(e *InDoubtEntry, now time.Time) ([]string, string) {
	switch e.Issue {
	case IssueWaiting:
		return []string{"abort"}, WaitingNote(e.Log.DecideBy, now)
	case IssueInDoubt:
		switch e.State {
		case txntype.StateActive:
			return []string{"retry", "abort"}, "not prepared: presumed abort; the recovery loop rolls it back, retry or abort does it now"
		case txntype.StateAborting:
			if e.Log != nil && e.Log.OnePhase {
				return []string{"retry"}, "claimed by a resolver: its one-phase COMMIT's answer was lost; the marker decides (present: committed, absent: fenced and aborted); retry does it now"
			}
			return []string{"retry", "abort"}, "claimed by a resolver: the outcome is abort; the recovery loop rolls the participants back, retry or abort does it now"
		case txntype.StatePrepared:
			if e.Kafka != nil {
				return []string{"retry"}, "prepared and still open in Kafka: Kafka decides, and its decision is commit; retry commits both sides now, abort is refused"
			}
			return []string{"retry", "abort"}, "prepared: Kafka decides; retry re-sends EndTxn(commit) and follows Kafka's answer; abort is granted only if Kafka has aborted it"
		case txntype.StateCommitting:
			return []string{"retry"}, "the decision was commit: the recovery loop commits the SQL side, retry does it now"
		}
	case IssueHeuristic:
		if e.State == txntype.StateHeuristicMixed {
			return []string{"resolve"}, "a participant ended against the decision (resolved by hand?): repair the data, then resolve with an outcome and a reason"
		}
		return []string{"resolve"}, "the coordinator could not decide the outcome: check both sides, then resolve with an outcome and a reason"
	case IssueOrphan:
		return []string{}, "prepared with our prefix but no log row: the recovery loop rolls it back (POST /v1/recovery/run does it now)"
	case IssueLeftover:
		return []string{}, fmt.Sprintf("the log says %s: the recovery loop finishes the prepared gid the same way", e.State)
	case IssueKafkaOpen:
		k := e.Kafka
		switch {
		case k.Quarantined:
			return []string{}, "the id is quarantined: a request of this process left it in doubt before prepared; the recovery loop resolves that request and re-initialises the id, which aborts this transaction"
		case k.own:
			return []string{}, "no request runs it: Kafka aborts it after its timeout, and the pool aborts it when it next uses the id; if it reappears, another producer is using this coordinator's transactional id"
		case k.Owner != "":
			return []string{}, fmt.Sprintf("an id of instance %q: that instance (or a takeover of it) re-initialises the id, which aborts this transaction; Kafka aborts it after its timeout", k.Owner)
		}
		return []string{}, "no registered instance owns this id: another producer uses this coordinator's transactional-id prefix; Kafka aborts it after its timeout"
	case IssueHanging:
		h := e.Hanging
		switch h.Status {
		case "waiting":
			return []string{}, h.Note
		case "cannot_repair":
			return []string{}, h.Note + ". Kafka's Admin API writes only ABORT markers (kafka-transactions.sh abort); a COMMIT marker can only be written with the WriteTxnMarkers request itself, which this coordinator sends when the log says committed"
		}
		return []string{}, "a broker completed this transaction without writing its marker to the partition (KAFKA-20734); the id is held out of the pool and the recovery loop writes the marker the coordinator log's decision asks for (COMMIT when the records' transaction committed, ABORT otherwise)" + noteSuffix(h.Note)
	}
	return []string{}, ""
}

// WaitingNote says what becomes of a transaction waiting for its caller (X1) with decide_by
// decideBy, at now (the log's clock): it waits until decide_by, and past it the recovery loop
// aborts it (X4, presumed abort). It is not in doubt either way.
func WaitingNote(decideBy *time.Time, now time.Time) string {
	if decideBy == nil {
		return "waiting for its caller's commit or rollback: not in doubt; abort aborts it now"
	}
	at := decideBy.UTC().Format(time.RFC3339)
	if !now.Before(*decideBy) {
		return fmt.Sprintf("deadline reached (decide_by %s) without its caller's decision; recovery aborts it (presumed abort) at its next pass, abort does it now", at)
	}
	return fmt.Sprintf("waiting for its caller's commit or rollback until %s (in %s): not in doubt; without a decision by then recovery aborts it (presumed abort); abort aborts it now, retry and resolve do not apply",
		at, decideBy.Sub(now).Round(time.Second))
}

func noteSuffix(note string) string {
	if note == "" {
		return ""
	}
	return "; last: " + note
}
