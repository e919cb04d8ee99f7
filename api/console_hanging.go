package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/txlog"
)

// GET /v1/kafka/hanging: the console's page of hanging Kafka transactions (kafkatxn/hanging.go):
// each partition on which a transaction of this instance's ids is left open while Kafka's
// transaction coordinator completed it, with what the coordinator log says about the records
// it holds and what the recovery loop's repair does (recovery.HangingPlan), and the repairs
// made since this process started. Read-only: the repair is the recovery loop's (POST
// /v1/recovery/run runs a pass now).

type hangingBody struct {
	Kafka         bool              `json:"kafka"` // the coordinator has brokers
	Hanging       []hangingEntry    `json:"hanging"`
	Repaired      []hangingRepaired `json:"repaired"` // the last repairs, newest first
	RepairedTotal int64             `json:"repaired_total"`
	Warnings      []string          `json:"warnings,omitempty"`
}

type hangingTxn struct {
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

// hangingLogTxn is a logged transaction whose records the open transaction holds.
type hangingLogTxn struct {
	ID          string `json:"id"`
	GID         string `json:"gid"`
	State       string `json:"state"`
	FirstOffset int64  `json:"first_offset"`
}

type hangingEntry struct {
	hangingTxn
	Status string          `json:"status"` // found, waiting, cannot_repair
	Note   string          `json:"note,omitempty"`
	Log    []hangingLogTxn `json:"log"`
	// Repair is what the next recovery pass does: commit (write the COMMIT marker), abort
	// (the ABORT marker), wait (the log's decision is pending), operator (no marker can be
	// right; an operator must look), unknown (the log could not be read); RepairNote says why.
	Repair     string `json:"repair"`
	RepairNote string `json:"repair_note"`
}

type hangingRepaired struct {
	hangingTxn
	Marker     string    `json:"marker"` // COMMIT or ABORT
	RepairedAt time.Time `json:"repaired_at"`
	// Log is the logged transactions the marker decided (their events record the repair).
	Log []hangingLogTxn `json:"log"`
}

func hangingOf(h kafkatxn.Hanging, now time.Time) hangingTxn {
	return hangingTxn{TransactionalID: h.TransactionalID, ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		CoordinatorEpoch: h.CoordinatorEpoch, Topic: h.Topic, Partition: h.Partition, StartOffset: h.StartOffset,
		LastWrite: h.LastWrite, KafkaState: h.KafkaState, FoundAt: h.FoundAt,
		AgeSeconds: max(0, now.Sub(h.FoundAt).Round(time.Millisecond).Seconds())}
}

func (s *Server) hanging(w http.ResponseWriter, r *http.Request) error {
	body := hangingBody{Hanging: []hangingEntry{}, Repaired: []hangingRepaired{}}
	if s.deps.Kafka != nil {
		body.Kafka = true
		now := time.Now() // FoundAt is this process's clock
		for _, h := range s.deps.Kafka.HangingTransactions() {
			e := hangingEntry{hangingTxn: hangingOf(h, now), Status: h.Status, Note: h.Note, Log: []hangingLogTxn{}}
			ev, err := recovery.ReadHangingEvidence(r.Context(), s.log, h)
			if err != nil {
				body.Warnings = append(body.Warnings, fmt.Sprintf("the log's transactions on %s/%d: %v", h.Topic, h.Partition, err))
				e.Repair, e.RepairNote = "unknown", "the coordinator log could not be read; the recovery loop reads it again at its next pass"
				body.Hanging = append(body.Hanging, e)
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
			body.Hanging = append(body.Hanging, e)
		}
		recent := s.deps.Kafka.RecentRepairs()
		for i := len(recent) - 1; i >= 0; i-- {
			rp := recent[i]
			marker := "ABORT"
			if rp.Commit {
				marker = "COMMIT"
			}
			entry := hangingRepaired{hangingTxn: hangingOf(rp.Hanging, rp.At), Marker: marker, RepairedAt: rp.At, Log: []hangingLogTxn{}}
			txns, err := s.log.TransactionsOnPartition(r.Context(), rp.TransactionalID, rp.ProducerID, rp.Topic, rp.Partition, rp.StartOffset)
			if err != nil {
				body.Warnings = append(body.Warnings, fmt.Sprintf("the log's transactions on %s/%d: %v", rp.Topic, rp.Partition, err))
			} else {
				entry.Log = logTxns(txns)
			}
			body.Repaired = append(body.Repaired, entry)
		}
		body.RepairedTotal = s.deps.Kafka.RepairedTotal()
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
	return nil
}

func logTxns(txns []txlog.PartitionTxn) []hangingLogTxn {
	out := make([]hangingLogTxn, 0, len(txns))
	for _, t := range txns {
		out = append(out, hangingLogTxn{ID: t.ID, GID: t.GID, State: string(t.State), FirstOffset: t.FirstOffset})
	}
	return out
}
