package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/txlog"
)

// The hanging view (GET /v1/kafka/hanging, the console's page): each partition on which a
// transaction of this instance's ids is left open while Kafka's transaction coordinator
// completed it (kafkatxn/hanging.go), with what the coordinator log says about the records it
// holds and what the recovery loop's repair does about it — the loop's own decision
// (recovery.HangingPlan, H2), read here, never made twice — and the repairs made since this
// process started. Read-only: the repair is the recovery loop's.

// HangingView is the hanging view at one moment.
type HangingView struct {
	Kafka         bool              `json:"kafka"` // the coordinator has brokers
	Hanging       []HangingEntry    `json:"hanging"`
	Repaired      []HangingRepaired `json:"repaired"` // the last repairs, newest first
	RepairedTotal int64             `json:"repaired_total"`
	Warnings      []string          `json:"warnings,omitempty"`
}

// HangingTxn is a hanging transaction as the Kafka pool found it.
type HangingTxn struct {
	TransactionalID  string    `json:"transactional_id"`
	ProducerID       int64     `json:"producer_id"`
	ProducerEpoch    int16     `json:"producer_epoch"`
	CoordinatorEpoch int32     `json:"coordinator_epoch"`
	Topic            string    `json:"topic"`
	Partition        int32     `json:"partition"`
	StartOffset      int64     `json:"start_offset"`
	LastWrite        time.Time `json:"last_write"`
	KafkaState       string    `json:"kafka_state"`
	FoundAt          time.Time `json:"found_at"`
	AgeSeconds       float64   `json:"age_seconds"`
}

// HangingLogTxn is a logged transaction whose records the open transaction holds.
type HangingLogTxn struct {
	ID          string `json:"id"`
	GID         string `json:"gid"`
	State       string `json:"state"`
	FirstOffset int64  `json:"first_offset"`
}

// HangingEntry is a hanging transaction not repaired yet.
type HangingEntry struct {
	HangingTxn
	Status string          `json:"status"` // found, waiting, cannot_repair
	Note   string          `json:"note,omitempty"`
	Log    []HangingLogTxn `json:"log"`
	// Repair is what the next recovery pass does: commit (write the COMMIT marker), abort
	// (the ABORT marker), wait (the log's decision is pending), operator (no marker can be
	// right; an operator must look), unknown (the log could not be read); RepairNote says why.
	Repair     string `json:"repair"`
	RepairNote string `json:"repair_note"`
}

// HangingRepaired is a repair the recovery loop made.
type HangingRepaired struct {
	HangingTxn
	Marker     string    `json:"marker"` // COMMIT or ABORT
	RepairedAt time.Time `json:"repaired_at"`
	// Log is the logged transactions the marker decided (their events record the repair).
	Log []HangingLogTxn `json:"log"`
}

func hangingOf(h kafkatxn.Hanging, now time.Time) HangingTxn {
	return HangingTxn{TransactionalID: h.TransactionalID, ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		CoordinatorEpoch: h.CoordinatorEpoch, Topic: h.Topic, Partition: h.Partition, StartOffset: h.StartOffset,
		LastWrite: h.LastWrite, KafkaState: h.KafkaState, FoundAt: h.FoundAt,
		AgeSeconds: max(0, now.Sub(h.FoundAt).Round(time.Millisecond).Seconds())}
}

// Hanging builds the hanging view. What the log cannot tell is named in the warnings.
func (d *Desk) Hanging(ctx context.Context) *HangingView {
	v := &HangingView{Hanging: []HangingEntry{}, Repaired: []HangingRepaired{}}
	if d.kafka == nil {
		return v
	}
	v.Kafka = true
	now := time.Now() // FoundAt is this process's clock
	for _, h := range d.kafka.HangingTransactions() {
		e := HangingEntry{HangingTxn: hangingOf(h, now), Status: h.Status, Note: h.Note, Log: []HangingLogTxn{}}
		ev, err := recovery.ReadHangingEvidence(ctx, d.log, h)
		if err != nil {
			v.Warnings = append(v.Warnings, fmt.Sprintf("the log's transactions on %s/%d: %v", h.Topic, h.Partition, err))
			e.Repair, e.RepairNote = "unknown", "the coordinator log could not be read; the recovery loop reads it again at its next pass"
			v.Hanging = append(v.Hanging, e)
			continue
		}
		e.Log = logTxns(ev.Txns)
		commit, status, note := recovery.HangingPlan(h, ev)
		switch {
		case status == kafkatxn.HangingWaiting:
			e.Repair, e.RepairNote = "wait", note
		case status != "":
			e.Repair, e.RepairNote = "operator", note
		case commit:
			e.Repair, e.RepairNote = "commit", "the log says the records' transactions committed: the next recovery pass writes the COMMIT marker the broker skipped"
		default:
			e.Repair, e.RepairNote = "abort", "the log says the records' transactions aborted (or were never logged prepared): the next recovery pass writes the ABORT marker"
		}
		v.Hanging = append(v.Hanging, e)
	}
	recent := d.kafka.RecentRepairs()
	for i := len(recent) - 1; i >= 0; i-- {
		rp := recent[i]
		marker := "ABORT"
		if rp.Commit {
			marker = "COMMIT"
		}
		entry := HangingRepaired{HangingTxn: hangingOf(rp.Hanging, rp.At), Marker: marker, RepairedAt: rp.At, Log: []HangingLogTxn{}}
		txns, err := d.log.TransactionsOnPartition(ctx, rp.TransactionalID, rp.ProducerID, rp.Topic, rp.Partition, rp.StartOffset)
		if err != nil {
			v.Warnings = append(v.Warnings, fmt.Sprintf("the log's transactions on %s/%d: %v", rp.Topic, rp.Partition, err))
		} else {
			entry.Log = logTxns(txns)
		}
		v.Repaired = append(v.Repaired, entry)
	}
	v.RepairedTotal = d.kafka.RepairedTotal()
	return v
}

func logTxns(txns []txlog.PartitionTxn) []HangingLogTxn {
	out := make([]HangingLogTxn, 0, len(txns))
	for _, t := range txns {
		out = append(out, HangingLogTxn{ID: t.ID, GID: t.GID, State: string(t.State), FirstOffset: t.FirstOffset})
	}
	return out
}
