package api

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/txntype"
)

// GET /v1/status: a small read-only summary for the console's health strip (and for anyone
// with the read role): who the caller is, the instances registered on the log and their
// leases, this process's recovery passes, its pools, and the in-doubt view's size and oldest
// age (the same reconciliation as GET /v1/transactions?state=in-doubt).

type statusBody struct {
	Instance  string           `json:"instance"`
	Now       time.Time        `json:"now"` // the log database's clock, which ages are measured by
	Caller    statusCaller     `json:"caller"`
	Instances []statusInstance `json:"instances"`
	Recovery  statusRecovery   `json:"recovery"`
	Pools     statusPools      `json:"pools"`
	InDoubt   statusInDoubt    `json:"in_doubt"`
	// Warnings name what could not be read: the figures are partial.
	Warnings []string `json:"warnings,omitempty"`
}

// statusCaller is the caller as the API sees it: the token's name and roles, or "anonymous"
// with every role when the API runs without tokens.
type statusCaller struct {
	Name  string `json:"name"`
	Roles []Role `json:"roles"`
	Auth  bool   `json:"auth"` // the API requires tokens
}

// statusInstance is one instance registered on the log.
type statusInstance struct {
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

type statusRecovery struct {
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

// statusConnPool is one PostgreSQL connection pool of this process.
type statusConnPool struct {
	Max      int32 `json:"max"`
	Total    int32 `json:"total"`
	Acquired int32 `json:"acquired"`
	Idle     int32 `json:"idle"`
}

// statusKafkaPool is this process's pool of Kafka transactional ids.
type statusKafkaPool struct {
	Size        int  `json:"size"`
	Free        int  `json:"free"`
	Leased      int  `json:"leased"`
	Quarantined int  `json:"quarantined"`
	Hanging     int  `json:"hanging"`
	Low         bool `json:"low"`
}

type statusPools struct {
	Log       *statusConnPool           `json:"log,omitempty"`
	Databases map[string]statusConnPool `json:"databases"`
	Kafka     *statusKafkaPool          `json:"kafka,omitempty"`
}

type statusInDoubt struct {
	Count            int            `json:"count"`
	ByIssue          map[string]int `json:"by_issue"`
	OldestAgeSeconds float64        `json:"oldest_age_seconds"`
}

func connPool(p *pgxpool.Pool) statusConnPool {
	st := p.Stat()
	return statusConnPool{Max: st.MaxConns(), Total: st.TotalConns(), Acquired: st.AcquiredConns(), Idle: st.IdleConns()}
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	body := statusBody{Instance: s.recovery.Instance(), Caller: caller(r, len(s.cfg.Tokens) > 0),
		Instances: []statusInstance{}, Pools: statusPools{Databases: map[string]statusConnPool{}},
		InDoubt: statusInDoubt{ByIssue: map[string]int{}}}
	now, err := s.log.Now(ctx)
	if err != nil {
		return fmt.Errorf("%w: the coordinator log: %w", txntype.ErrUnavailable, err)
	}
	body.Now = now
	body.Instances, err = s.instances(ctx, body.Instance)
	if err != nil {
		body.Warnings = append(body.Warnings, err.Error())
	}

	t := s.recovery.Totals()
	body.Recovery = statusRecovery{Passes: s.recovery.Passes(), Failures: s.recovery.Failures(), Resolved: t.Resolved,
		AttemptFailures: t.Failed, Orphans: t.Orphans, Markers: t.Markers, TakenOver: t.TakenOver,
		HangingRepaired: t.HangingRepaired, Healed: t.Healed}

	lp := connPool(s.log.Pool())
	body.Pools.Log = &lp
	if s.deps.SQL != nil {
		for _, name := range s.deps.SQL.Names() {
			if p, err := s.deps.SQL.Pool(name); err == nil {
				body.Pools.Databases[name] = connPool(p)
			}
		}
	}
	if s.deps.Kafka != nil {
		u := s.deps.Kafka.Detail()
		body.Pools.Kafka = &statusKafkaPool{Size: u.Size, Free: u.Free, Leased: u.Leased,
			Quarantined: u.Quarantined, Hanging: u.Hanging, Low: u.Low}
	}

	view, err := s.recovery.InDoubt(ctx)
	if err != nil {
		view = &recovery.InDoubtView{Warnings: []string{fmt.Sprintf("in-doubt view: %v", err)}}
	}
	body.Warnings = append(body.Warnings, view.Warnings...)
	for _, e := range view.Entries {
		body.InDoubt.Count++
		body.InDoubt.ByIssue[e.Issue]++
		body.InDoubt.OldestAgeSeconds = max(body.InDoubt.OldestAgeSeconds, e.AgeSeconds)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
	return nil
}

// instances lists every instance registered on the log, this one first.
func (s *Server) instances(ctx context.Context, self string) ([]statusInstance, error) {
	all, err := s.log.Instances(ctx, "") // "" is no instance's id: every instance
	if err != nil {
		return []statusInstance{}, err
	}
	lease := s.cfg.InstanceLease
	out := make([]statusInstance, 0, len(all))
	for _, in := range all {
		out = append(out, statusInstance{ID: in.ID, Self: in.ID == self, TxnIDPrefix: in.TxnIDPrefix, PoolSize: in.PoolSize,
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

// caller describes the request's caller (set by authenticate).
func caller(r *http.Request, auth bool) statusCaller {
	if !auth {
		return statusCaller{Name: who(r), Roles: []Role{RoleAdmin}}
	}
	roles, _ := r.Context().Value(callerRolesKey{}).([]Role)
	if roles == nil {
		roles = []Role{}
	}
	return statusCaller{Name: who(r), Roles: roles, Auth: true}
}
