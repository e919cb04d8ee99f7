package txlog

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SeparateBegins turns off the merging of a flush's Begins into one statement (the baseline of
// BenchmarkBegin).
func (l *Log) SeparateBegins() { l.group.separate = true }

// PreparedBatchSQL and CommittedBatchSQL are the batch writes' statements, for their plans.
var PreparedBatchSQL, CommittedBatchSQL = preparedBatchSQL, committedBatchSQL

// ClaimManySQL is a recovery page's claim, for its plan.
var ClaimManySQL = claimManySQL

// SetGatherWait changes how long a writer may hold a patient Begin (groupCommit.gather).
func (l *Log) SetGatherWait(d time.Duration) { l.group.hold = d }

// SlowWrite sends a write through group commit that takes d in the database: a flush under way.
func (l *Log) SlowWrite(ctx context.Context, d time.Duration) error {
	return l.queryRow(ctx, "SELECT pg_sleep($1::float8)", []any{d.Seconds()}, func(r pgx.Row) error {
		var v any
		return r.Scan(&v)
	})
}

// Pending is how many writes are between do and their answer.
func (l *Log) Pending() int32 { return l.group.pending.Load() }
