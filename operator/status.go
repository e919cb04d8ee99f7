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
// and oldest age (the same reconciliation as InDoubt).

// Status is the summary at one moment of the log's clock.
type Status struct {
	Instance  string     `json:"instance"`
	Now       time.Time  `json:"now"` // the log database's clock, which ages are measured by
	Caller    Caller     `json:"caller"`
	Instances []Instance `json:"instances"`
	Recovery  Recovery   `json:"recovery"`
	Pools     Pools      `json:"pools"`
	InDoubt   InDoubtSum `json:"in_doubt"`
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

// InDoubtSum is the in-doubt view's size by issue and its oldest entry's age.
type InDoubtSum struct {
	Count            int            `json:"count"`
	ByIssue          map[string]int `json:"by_issue"`
	OldestAgeSeconds float64        `json:"oldest_age_seconds"`
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
		HangingRepaired: t.HangingRepaired, Healed: t.Healed}

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
		st.InDoubt.Count++
		st.InDoubt.ByIssue[e.Issue]++
		st.InDoubt.OldestAgeSeconds = max(st.InDoubt.OldestAgeSeconds, e.AgeSeconds)
	}
	return st, nil
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
