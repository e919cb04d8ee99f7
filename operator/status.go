package operator

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kpgtx/coordinator/txntype"
)

// The status (GET /v1/status, the console's health strip): the instances registered on the log
// and their liveness, this process's recovery passes, its pools, and the in-doubt view's size
// and oldest age (the same reconciliation as InDoubt), and the transactions waiting for their
// callers' decisions (X1), which are not in doubt, with the earliest decide_by.

// Status is the summary at one moment of the log's clock.
type Status struct {
	Instance  string     `json:"instance"`
	Now       time.Time  `json:"now"` // the log database's clock, which ages are measured by
	Caller    Caller     `json:"caller"`
	Instances []Instance `json:"instances"`
	Recovery  Recovery   `json:"recovery"`
	Pools     Pools      `json:"pools"`
	InDoubt   InDoubtSum `json:"in_doubt"`
	Waiting   WaitingSum `json:"waiting"`
	// Warnings name what could not be read: the figures are partial.
	Warnings []string `json:"warnings,omitempty"`
}

// Caller is who asks, as the API sees it (filled by the API): the token's name and roles, or
// "anonymous" with every role when the API runs without tokens.
type Caller struct {
	Name  string   `json:"name"`
	Roles []string `json:"roles"`
	Auth  bool     `json:"auth"` // the API requires tokens
}

// Instance is one instance registered on the log.
type Instance struct {
	ID          string `json:"id"`
	Self        bool   `json:"self"`
	TxnIDPrefix string `json:"txn_id_prefix"`
	PoolSize    int    `json:"pool_size"`
	// HeartbeatAgeSeconds: the time since its last heartbeat (database clock); informational.
	HeartbeatAgeSeconds float64 `json:"heartbeat_age_seconds"`
	// LeaseSeconds is this process's COORDINATOR_INSTANCE_LEASE (0 when unknown).
	LeaseSeconds float64 `json:"lease_seconds,omitempty"`
	// Alive: the instance holds its advisory lock (I8), the one test of liveness, which takeover
	// uses too. Expired is its negation, kept for readers of the earlier form.
	Alive   bool `json:"alive"`
	Expired bool `json:"expired"`
}

// Recovery is the recovery loop's counters since this process started.
type Recovery struct {
	Passes          int64 `json:"passes"`
	Failures        int64 `json:"failures"`
	Resolved        int   `json:"resolved"`
	AttemptFailures int   `json:"attempt_failures"`
	Orphans         int   `json:"orphans"`
	Markers         int   `json:"markers"`
	TakenOver       int   `json:"taken_over"`
	HangingRepaired int   `json:"hanging_repaired"`
	Healed          int   `json:"healed"`
	// Deadlines: transactions waiting for their callers that reached decide_by without a
	// decision and were aborted (X4, presumed abort).
	Deadlines int `json:"deadlines"`
}

// ConnPool is one PostgreSQL connection pool of this process.
type ConnPool struct {
	Max      int32 `json:"max"`
	Total    int32 `json:"total"`
	Acquired int32 `json:"acquired"`
	Idle     int32 `json:"idle"`
}

// KafkaPool is this process's pool of Kafka transactional ids.
type KafkaPool struct {
	Size        int  `json:"size"`
	Free        int  `json:"free"`
	Leased      int  `json:"leased"`
	Quarantined int  `json:"quarantined"`
	Hanging     int  `json:"hanging"`
	Low         bool `json:"low"`
}

// Pools are this process's pools.
type Pools struct {
	Log       *ConnPool           `json:"log,omitempty"`
	Databases map[string]ConnPool `json:"databases"`
	Kafka     *KafkaPool          `json:"kafka,omitempty"`
}

// InDoubtSum is the in-doubt view's size by issue and its oldest entry's age. Transactions
// waiting for their callers (issue waiting) are not in doubt: they are counted in WaitingSum.
type InDoubtSum struct {
	Count            int            `json:"count"`
	ByIssue          map[string]int `json:"by_issue"`
	OldestAgeSeconds float64        `json:"oldest_age_seconds"`
}

// WaitingSum is what waits for its callers' commit or rollback (X1): the log's waiting rows
// of every instance and of this one, the earliest decide_by (by the log's clock; past it the
// recovery loop aborts the row, X4), and this instance's bound (COORDINATOR_MAX_WAITING).
type WaitingSum struct {
	Count int `json:"count"` // every instance's
	Self  int `json:"self"`  // this instance's, which Max bounds
	// Max is this instance's COORDINATOR_MAX_WAITING (omitted when not known).
	Max int `json:"max,omitempty"`
	// OldestDecideBy is the earliest decide_by, and DeadlineInSeconds the time from Now to it
	// (negative once reached: the recovery loop is about to abort it); both omitted when
	// nothing waits.
	OldestDecideBy    *time.Time `json:"oldest_decide_by,omitempty"`
	DeadlineInSeconds *float64   `json:"deadline_in_seconds,omitempty"`
}

func connPool(p *pgxpool.Pool) ConnPool {
	st := p.Stat()
	return ConnPool{Max: st.MaxConns(), Total: st.TotalConns(), Acquired: st.AcquiredConns(), Idle: st.IdleConns()}
}

// Status builds the summary. Only the log's clock is required; what else cannot be read is
// named in the warnings. Caller is left for the API to fill.
func (d *Desk) Status(ctx context.Context) (*Status, error) {
	st := &Status{Instance: d.cfg.Instance, Instances: []Instance{}, Pools: Pools{Databases: map[string]ConnPool{}},
		InDoubt: InDoubtSum{ByIssue: map[string]int{}}}
	now, err := d.log.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: the coordinator log: %w", txntype.ErrUnavailable, err)
	}
	st.Now = now
	st.Instances, err = d.instances(ctx)
	if err != nil {
		st.Warnings = append(st.Warnings, err.Error())
	}

	t := d.loop.Totals()
	st.Recovery = Recovery{Passes: d.loop.Passes(), Failures: d.loop.Failures(), Resolved: t.Resolved,
		AttemptFailures: t.Failed, Orphans: t.Orphans, Markers: t.Markers, TakenOver: t.TakenOver,
		HangingRepaired: t.HangingRepaired, Healed: t.Healed, Deadlines: t.Deadlines}
	st.Waiting, err = d.waiting(ctx, now)
	if err != nil {
		st.Warnings = append(st.Warnings, err.Error())
	}

	lp := connPool(d.log.Pool())
	st.Pools.Log = &lp
	if d.sql != nil {
		for _, name := range d.sql.Names() {
			if p, err := d.sql.Pool(name); err == nil {
				st.Pools.Databases[name] = connPool(p)
			}
		}
	}
	if d.kafka != nil {
		u := d.kafka.Detail()
		st.Pools.Kafka = &KafkaPool{Size: u.Size, Free: u.Free, Leased: u.Leased,
			Quarantined: u.Quarantined, Hanging: u.Hanging, Low: u.Low}
	}

	view, err := d.InDoubt(ctx)
	if err != nil {
		view = &InDoubtView{Warnings: []string{fmt.Sprintf("in-doubt view: %v", err)}}
	}
	st.Warnings = append(st.Warnings, view.Warnings...)
	for _, e := range view.Entries {
		if e.Issue == IssueWaiting {
			continue // not in doubt: counted in st.Waiting, from the log
		}
		st.InDoubt.Count++
		st.InDoubt.ByIssue[e.Issue]++
		st.InDoubt.OldestAgeSeconds = max(st.InDoubt.OldestAgeSeconds, e.AgeSeconds)
	}
	return st, nil
}

// waiting sums the waiting rows (every instance's, and this one's) at now, the log's clock.
func (d *Desk) waiting(ctx context.Context, now time.Time) (WaitingSum, error) {
	w := WaitingSum{Max: d.cfg.MaxWaiting}
	all, err := d.log.WaitingStats(ctx, "") // "": every instance
	if err != nil {
		return w, fmt.Errorf("waiting transactions: %w", err)
	}
	w.Count, w.OldestDecideBy = all.Count, all.Oldest
	if all.Oldest != nil {
		in := all.Oldest.Sub(now).Round(time.Millisecond).Seconds()
		w.DeadlineInSeconds = &in
	}
	if all.Count == 0 {
		return w, nil
	}
	self, err := d.log.WaitingStats(ctx, d.cfg.Instance)
	if err != nil {
		return w, fmt.Errorf("waiting transactions of %s: %w", d.cfg.Instance, err)
	}
	w.Self = self.Count
	return w, nil
}

// instances lists every instance registered on the log, this one first.
func (d *Desk) instances(ctx context.Context) ([]Instance, error) {
	all, err := d.log.Instances(ctx, "") // "" is no instance's id: every instance
	if err != nil {
		return []Instance{}, err
	}
	self, lease := d.cfg.Instance, d.cfg.InstanceLease
	out := make([]Instance, 0, len(all))
	for _, in := range all {
		out = append(out, Instance{ID: in.ID, Self: in.ID == self, TxnIDPrefix: in.TxnIDPrefix, PoolSize: in.PoolSize,
			HeartbeatAgeSeconds: max(0, in.Silent.Round(time.Millisecond).Seconds()),
			LeaseSeconds:        lease.Seconds(), Alive: in.Locked, Expired: !in.Locked})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Self != out[j].Self {
			return out[i].Self
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
