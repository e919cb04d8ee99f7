package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/txlog"
)

// stateInDoubt is the pseudo-state of GET /v1/transactions?state=in-doubt: the reconciled view
// of the log, pg_prepared_xacts and Kafka's open transactions.
const stateInDoubt = "in-doubt"

// Issues of the in-doubt view: why an entry is listed.
const (
	issueInDoubt   = "in_doubt"   // a log row active, prepared or committing, not in flight
	issueHeuristic = "heuristic"  // heuristic or heuristic_mixed: an operator must decide
	issueOrphan    = "orphan"     // prepared in PostgreSQL with our prefix, no log row
	issueLeftover  = "leftover"   // prepared in PostgreSQL, its log row is final
	issueKafkaOpen = "kafka_open" // Kafka has a transaction open on one of our ids, no in-doubt row, not in use
	issueHanging   = "hanging"    // a partition holds a transaction of ours open that Kafka's coordinator completed
)

// Sources of an entry's evidence.
const (
	sourceLog      = "log"
	sourcePostgres = "postgres"
	sourceKafka    = "kafka"
)

// foreignGrace: a row or a Kafka transaction of another instance younger than this may be a
// request in flight there (a request runs at most COORDINATOR_MAX_TIMEOUT, 30 s by default);
// this process cannot ask, so such entries wait this long before they are listed.
const foreignGrace = 30 * time.Second

// inDoubtEntry is one item of the in-doubt view.
type inDoubtEntry struct {
	ID         string       `json:"id,omitempty"`
	GID        string       `json:"gid,omitempty"`
	State      coord.State  `json:"state,omitempty"` // the log's; absent without a log row
	Issue      string       `json:"issue"`
	Sources    []string     `json:"sources"`
	Instance   string       `json:"instance,omitempty"`
	Since      time.Time    `json:"since"`
	AgeSeconds float64      `json:"age_seconds"`
	Actions    []string     `json:"actions"`
	Hint       string       `json:"hint"`
	Log        *logInfo     `json:"log,omitempty"`
	Postgres   []pgInfo     `json:"postgres,omitempty"`
	Kafka      *kafkaInfo   `json:"kafka,omitempty"`
	Hanging    *hangingInfo `json:"hanging,omitempty"`

	key string // unique, for ordering and the cursor
}

// logInfo is the log row, with its recovery bookkeeping.
type logInfo struct {
	*coord.Transaction
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// pgInfo is a prepared transaction found in pg_prepared_xacts.
type pgInfo struct {
	Database   string    `json:"database"`
	GID        string    `json:"gid"`
	PreparedAt time.Time `json:"prepared_at"`
}

// kafkaInfo is what Kafka reports about a transaction open on one of our transactional ids.
type kafkaInfo struct {
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

// hangingInfo is a hanging transaction (kafkatxn/hanging.go): the broker completed it without
// writing its marker to this partition; its id is held out of the pool until it is repaired.
type hangingInfo struct {
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

type inDoubtResponse struct {
	Transactions []*inDoubtEntry `json:"transactions"`
	Next         string          `json:"next,omitempty"`
	// Warnings name the sources that could not be read: the view is partial.
	Warnings []string `json:"warnings,omitempty"`
}

// parseOlderThan reads the older_than parameter (a Go duration such as 30s or 5m).
func parseOlderThan(q url.Values) (time.Duration, error) {
	v := q.Get("older_than")
	if v == "" {
		return 0, nil
	}
	if !olderThanPattern.MatchString(v) {
		return 0, &coord.InvalidError{Field: "older_than", Reason: fmt.Sprintf("%q is not whole seconds or a duration such as 30s, 5m or 1h", truncate(v, 40))}
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil // plain seconds; at most 9 digits, no overflow
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, &coord.InvalidError{Field: "older_than", Reason: fmt.Sprintf("%q: %v", truncate(v, 40), err)}
	}
	return d, nil
}

// OlderThanPattern is the form of older_than (the OpenAPI document gives the same pattern):
// whole seconds, or a Go duration without sign.
const OlderThanPattern = `^([0-9]{1,9}|([0-9]{1,12}(\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h))+)$`

var olderThanPattern = regexp.MustCompile(OlderThanPattern)

// listInDoubt answers GET /v1/transactions?state=in-doubt: newest first (by since), paged.
func (s *Server) listInDoubt(w http.ResponseWriter, r *http.Request, olderThan time.Duration, limit int, after string) error {
	var afterAt time.Time
	var afterKey string
	if after != "" {
		at, key, err := txlog.DecodeCursor(after)
		if err != nil {
			return err
		}
		afterAt, afterKey = at, key
	}
	entries, warnings, err := s.inDoubt(r.Context())
	if err != nil {
		return err
	}
	resp := inDoubtResponse{Transactions: []*inDoubtEntry{}, Warnings: warnings}
	for _, e := range entries {
		if olderThan > 0 && e.AgeSeconds < olderThan.Seconds() {
			continue
		}
		if after != "" && !before(e.Since, e.key, afterAt, afterKey) {
			continue
		}
		if len(resp.Transactions) == limit {
			last := resp.Transactions[limit-1]
			resp.Next = txlog.EncodeCursor(last.Since, last.key)
			break
		}
		resp.Transactions = append(resp.Transactions, e)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// before orders entries newest first: (since, key) descending.
func before(at time.Time, key string, than time.Time, thanKey string) bool {
	if !at.Equal(than) {
		return at.Before(than)
	}
	return key < thanKey
}

// inDoubt builds the reconciled view, sorted newest first. A source that cannot be read is
// named in the warnings; the log is required.
func (s *Server) inDoubt(ctx context.Context) ([]*inDoubtEntry, []string, error) {
	now, err := s.log.Now(ctx)
	if err != nil {
		return nil, nil, err
	}
	self := s.recovery.Instance()
	var warnings []string
	byGID := map[string]*inDoubtEntry{}
	var entries []*inDoubtEntry

	// The log: rows not final (and not in flight), and heuristic rows.
	rows, err := s.log.InDoubt(ctx)
	if err != nil {
		return nil, nil, err
	}
	var live []string // non-final rows: re-checked below, they may have moved on meanwhile
	for _, row := range rows {
		if s.coord.InFlight(row.GID) {
			continue
		}
		if row.Instance != self && !row.State.Final() && now.Sub(row.UpdatedAt) < foreignGrace {
			continue
		}
		e := &inDoubtEntry{ID: row.ID, GID: row.GID, State: row.State, Sources: []string{sourceLog},
			Instance: row.Instance, Since: row.UpdatedAt, key: row.GID,
			Log: &logInfo{Transaction: row.Transaction, Attempts: row.Attempts, LastError: row.LastError}}
		e.Issue = issueInDoubt
		if row.State.Final() {
			e.Issue = issueHeuristic
		} else {
			next := row.NextAttemptAt
			e.Log.NextAttemptAt = &next
			live = append(live, row.GID)
		}
		byGID[row.GID] = e
		entries = append(entries, e)
	}
	if len(live) > 0 {
		states, err := s.log.States(ctx, live)
		if err != nil {
			return nil, nil, err
		}
		for _, gid := range live {
			if states[gid] != byGID[gid].State {
				delete(byGID, gid)
			}
		}
		entries = slices.DeleteFunc(entries, func(e *inDoubtEntry) bool { return byGID[e.GID] != e })
	}

	// PostgreSQL: prepared gids with our prefix, on every configured database.
	prefix := s.coord.GID("")
	var unknown []string
	pending := map[string][]pgInfo{}
	if s.deps.SQL != nil {
		dbs := s.deps.SQL.Names()
		sort.Strings(dbs)
		for _, db := range dbs {
			prepared, err := s.preparedXacts(ctx, db, prefix)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("postgres %q: %v", db, err))
				continue
			}
			for _, p := range prepared {
				g := p.GID
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
	if len(unknown) > 0 {
		states, err := s.log.States(ctx, unknown)
		if err != nil {
			return nil, nil, err
		}
		for _, global := range unknown {
			st, known := states[global]
			if known && !st.Final() {
				continue // in flight here, or young in another instance, or moved on meanwhile
			}
			e := &inDoubtEntry{ID: strings.TrimPrefix(global, prefix), GID: global, key: global, Issue: issueOrphan}
			if known {
				e.State, e.Issue = st, issueLeftover
				if st == coord.StateHeuristic || st == coord.StateHeuristicMixed {
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
	if s.deps.Kafka != nil {
		open, err := s.deps.Kafka.OpenTransactions(ctx)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("kafka: %v", err))
		}
		var instances []txlog.Instance
		if len(open) > 0 {
			instances, err = s.log.Instances(ctx, self)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("instances: %v", err))
			}
		}
		byTID := map[string]*inDoubtEntry{}
		for _, e := range entries {
			if e.Log != nil && e.Log.Kafka != nil && e.Log.Kafka.TransactionalID != "" && e.State != coord.StateActive {
				byTID[e.Log.Kafka.TransactionalID] = e
			}
		}
		for _, o := range open {
			k := &kafkaInfo{TransactionalID: o.TransactionalID, ProducerID: o.ProducerID, ProducerEpoch: o.ProducerEpoch,
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
				e.Sources = append(e.Sources, sourceKafka)
				continue
			}
			if o.InUse {
				continue // a request of this process runs it
			}
			if !o.Owned && !o.StartedAt.IsZero() && time.Since(o.StartedAt) < foreignGrace {
				continue // may be in flight in another instance
			}
			e := &inDoubtEntry{Issue: issueKafkaOpen, Sources: []string{sourceKafka}, Instance: k.Owner,
				Kafka: k, key: "kafka:" + o.TransactionalID, Since: now}
			if k.StartedAt != nil {
				e.Since = *k.StartedAt
			}
			entries = append(entries, e)
		}
	}

	// Kafka: hanging transactions of this instance's ids, held out of the pool.
	if s.deps.Kafka != nil {
		for _, h := range s.deps.Kafka.HangingTransactions() {
			entries = append(entries, &inDoubtEntry{Issue: issueHanging, Sources: []string{sourceKafka}, Instance: self,
				Since: h.FoundAt, key: fmt.Sprintf("hanging:%s/%s/%d", h.TransactionalID, h.Topic, h.Partition),
				Hanging: &hangingInfo{TransactionalID: h.TransactionalID, ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
					Topic: h.Topic, Partition: h.Partition, StartOffset: h.StartOffset, LastWrite: h.LastWrite,
					KafkaState: h.KafkaState, Status: h.Status, Note: h.Note, CoordinatorEpoch: h.CoordinatorEpoch}})
		}
	}

	for _, e := range entries {
		e.AgeSeconds = max(0, now.Sub(e.Since).Round(time.Millisecond).Seconds())
		e.Actions, e.Hint = advice(e)
	}
	sort.Slice(entries, func(i, j int) bool {
		return before(entries[j].Since, entries[j].key, entries[i].Since, entries[i].key)
	})
	return entries, warnings, nil
}

// preparedXacts lists the database's prepared transactions whose gid starts with prefix and
// ends with "@<database>" (this coordinator's, on this database), with the server's prepare
// time (stable from one call to the next, which paging needs).
func (s *Server) preparedXacts(ctx context.Context, db, prefix string) ([]pgInfo, error) {
	pool, err := s.deps.SQL.Pool(db)
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT gid, prepared FROM pg_prepared_xacts
WHERE database = current_database() AND starts_with(gid, $1) AND gid LIKE $2`,
		prefix, "%@"+strings.NewReplacer(`\`, `\\`, "_", `\_`, "%", `\%`).Replace(db))
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgInfo, error) {
		p := pgInfo{Database: db}
		err := r.Scan(&p.GID, &p.PreparedAt)
		return p, err
	})
}

func (e *inDoubtEntry) addPostgres(p pgInfo) {
	if !slices.Contains(e.Sources, sourcePostgres) {
		e.Sources = append(e.Sources, sourcePostgres)
	}
	e.Postgres = append(e.Postgres, p)
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

// advice says which admin actions apply to an entry, and what will happen to it.
func advice(e *inDoubtEntry) ([]string, string) {
	switch e.Issue {
	case issueInDoubt:
		switch e.State {
		case coord.StateActive:
			return []string{"retry", "abort"}, "not prepared: presumed abort; the recovery loop rolls it back, retry or abort does it now"
		case coord.StateAborting:
			if e.Log != nil && e.Log.OnePhase {
				return []string{"retry"}, "claimed by a resolver: its one-phase COMMIT's answer was lost; the marker decides (present: committed, absent: fenced and aborted); retry does it now"
			}
			return []string{"retry", "abort"}, "claimed by a resolver: the outcome is abort; the recovery loop rolls the participants back, retry or abort does it now"
		case coord.StatePrepared:
			if e.Kafka != nil {
				return []string{"retry"}, "prepared and still open in Kafka: Kafka decides, and its decision is commit; retry commits both sides now, abort is refused"
			}
			return []string{"retry", "abort"}, "prepared: Kafka decides; retry re-sends EndTxn(commit) and follows Kafka's answer; abort is granted only if Kafka has aborted it"
		case coord.StateCommitting:
			return []string{"retry"}, "the decision was commit: the recovery loop commits the SQL side, retry does it now"
		}
	case issueHeuristic:
		if e.State == coord.StateHeuristicMixed {
			return []string{"resolve"}, "a participant ended against the decision (resolved by hand?): repair the data, then resolve with an outcome and a reason"
		}
		return []string{"resolve"}, "the coordinator could not decide the outcome: check both sides, then resolve with an outcome and a reason"
	case issueOrphan:
		return []string{}, "prepared with our prefix but no log row: the recovery loop rolls it back (POST /v1/recovery/run does it now)"
	case issueLeftover:
		return []string{}, fmt.Sprintf("the log says %s: the recovery loop finishes the prepared gid the same way", e.State)
	case issueKafkaOpen:
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
	case issueHanging:
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

func noteSuffix(note string) string {
	if note == "" {
		return ""
	}
	return "; last: " + note
}
