package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// repairHanging repairs the hanging Kafka transactions the pool found (kafkatxn/hanging.go:
// a broker completed a transaction without writing its marker to a partition), following the
// coordinator log's decision for the records the open transaction holds on that partition:
//
//   - the records belong to transactions the log says committed: a COMMIT marker;
//   - to transactions the log says aborted, or to none (a transaction never logged prepared,
//     whose decision can only be abort, I3): an ABORT marker; "none" only above the retention's
//     mark (H2): records at or below it may be those of a row the retention removed, whose
//     decision the log no longer holds, and are left to an operator (cannot_repair);
//   - to a transaction not decided yet: wait (recovery decides it first; the id stays held);
//   - to transactions with different outcomes, or a heuristic one: cannot be repaired by one
//     marker; held and shown in the in-doubt view for an operator.
//
// The id returns to the pool once nothing of it hangs.
func (l *Loop) repairHanging(ctx context.Context, st *Stats) error {
	if l.kafka == nil {
		return nil
	}
	var errs error
	for _, h := range l.kafka.HangingTransactions() {
		ev, err := ReadHangingEvidence(ctx, l.log, h)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		txns := ev.Txns
		commit, status, note := hangingDecision(h, ev)
		if status == kafkatxn.HangingCannotRepair {
			// A scan's finding may be stale: a marker the broker wrote late closed it since, and
			// an operator must not be sent to repair what is closed (and its id held for it).
			if closed, err := l.kafka.Recheck(ctx, h); err == nil && closed {
				continue
			}
		}
		if status != "" {
			l.kafka.SetHangingNote(h, status, note)
			continue
		}
		if err := l.kafka.Repair(ctx, h, commit); err != nil {
			l.kafka.SetHangingNote(h, kafkatxn.HangingFound, "repair failed, retried: "+err.Error())
			errs = errors.Join(errs, err)
			continue
		}
		st.HangingRepaired++
		l.recordRepair(ctx, h, commit, txns)
	}
	return errs
}

// ActionRepairHanging names a hanging transaction's repair in the event history of the
// transactions whose records it decided.
const ActionRepairHanging = "repair_hanging"

// recordRepair appends the repair's outcome to the event history of every logged transaction
// whose records the marker decided, so a transaction's page says what happened to its records
// on that partition. The marker is written already: a failed append is only logged.
func (l *Loop) recordRepair(ctx context.Context, h kafkatxn.Hanging, commit bool, txns []txlog.PartitionTxn) {
	marker := "ABORT"
	if commit {
		marker = "COMMIT"
	}
	for _, t := range txns {
		err := l.log.AdminEvent(ctx, t.GID, txlog.AdminAction{Action: ActionRepairHanging, By: "recovery (" + l.cfg.Instance + ")",
			Reason: fmt.Sprintf("hanging Kafka transaction on %s/%d from offset %d (producer %d epoch %d of %s): the broker had not written its marker",
				h.Topic, h.Partition, h.StartOffset, h.ProducerID, h.ProducerEpoch, h.TransactionalID),
			Result: marker + " marker written"})
		if err != nil {
			l.cfg.Logger.Warn("hanging transaction repaired; its event not recorded", "gid", t.GID, "error", err)
		}
	}
}

// HangingEvidence is what the log says about the records a hanging transaction holds: the
// logged transactions with records there (txlog.TransactionsOnPartition) and the retention's
// mark on the partition for the id (txlog.PrunedMark, R3).
type HangingEvidence struct {
	Txns []txlog.PartitionTxn
	// Pruned: the retention removed rows of the id with records on the partition, up to offset
	// PrunedTo.
	Pruned   bool
	PrunedTo int64
}

// ReadHangingEvidence reads the log's evidence about a hanging transaction's records.
func ReadHangingEvidence(ctx context.Context, log *txlog.Log, h kafkatxn.Hanging) (HangingEvidence, error) {
	txns, err := log.TransactionsOnPartition(ctx, h.TransactionalID, h.ProducerID, h.Topic, h.Partition, h.StartOffset)
	if err != nil {
		return HangingEvidence{}, err
	}
	ev := HangingEvidence{Txns: txns}
	if unexplained(h, txns) {
		if ev.PrunedTo, ev.Pruned, err = log.PrunedMark(ctx, h.TransactionalID, h.Topic, h.Partition); err != nil {
			return HangingEvidence{}, err
		}
	}
	return ev, nil
}

// unexplained: no logged transaction's records start where the open transaction does, so the
// records from its start offset are no logged prepared transaction's.
func unexplained(h kafkatxn.Hanging, txns []txlog.PartitionTxn) bool {
	return len(txns) == 0 || txns[0].FirstOffset != h.StartOffset
}

// HangingPlan is what the recovery loop's next pass does about a hanging transaction, given the
// log's evidence: write the COMMIT marker (commit) or the ABORT marker when status is "",
// otherwise nothing yet, for the reason in note (status waiting or cannot_repair). The operator's
// hanging view shows it (operator.Desk.Hanging).
func HangingPlan(h kafkatxn.Hanging, ev HangingEvidence) (commit bool, status, note string) {
	return hangingDecision(h, ev)
}

// hangingDecision applies repairHanging's rules: the marker to write (commit), or a status and a
// note saying why none is written now.
//
// H2, absence is evidence only above the mark: records no logged transaction explains are read
// as "never logged prepared" (their transaction was never decided, so it can only abort, I3)
// only when the retention removed no row of the id with records on the partition at or after
// the open transaction's start (R3's mark is below it). Rows are removed by the retention alone,
// and the mark is written in the removal's own statement, so above the mark a missing row is a
// row never written; at or below it, the row may have been removed, and its decision with it:
// the repair then writes nothing and tells the operator what is known (cannot_repair). R2 keeps
// that case from arising (a row stays while a transaction holding its records is open); H2
// keeps a one-sided outcome from following if it does.
func hangingDecision(h kafkatxn.Hanging, ev HangingEvidence) (commit bool, status, note string) {
	txns := ev.Txns
	where := fmt.Sprintf("%s/%d from offset %d (producer %d of %s)", h.Topic, h.Partition, h.StartOffset, h.ProducerID, h.TransactionalID)
	var commits, aborts, waiting, heuristic []string
	if unexplained(h, txns) {
		if ev.Pruned && ev.PrunedTo >= h.StartOffset {
			return false, kafkatxn.HangingCannotRepair, fmt.Sprintf("the open transaction on %s holds records that no row of the log explains, and the retention removed rows of %s with records on this partition up to offset %d: the records may belong to a removed row, whose decision the log no longer holds. Find the outcome (the records' payload, the SQL side), then write the marker by hand (kafka-transactions.sh abort, for an abort)",
				where, h.TransactionalID, ev.PrunedTo)
		}
		aborts = append(aborts, fmt.Sprintf("records from offset %d never logged prepared", h.StartOffset))
	}
	for _, t := range txns {
		switch t.State {
		case txntype.StateCommitted:
			commits = append(commits, t.ID)
		case txntype.StateAborted:
			aborts = append(aborts, t.ID)
		case txntype.StateHeuristic, txntype.StateHeuristicMixed:
			heuristic = append(heuristic, t.ID)
		default:
			waiting = append(waiting, t.ID+" ("+string(t.State)+")")
		}
	}
	switch {
	case len(heuristic) > 0:
		return false, kafkatxn.HangingCannotRepair, fmt.Sprintf("the open transaction on %s holds records of %s, which an operator must decide first; then write the marker by hand (kafka-transactions.sh abort, for an abort)",
			where, strings.Join(heuristic, ", "))
	case len(commits) > 0 && len(aborts) > 0:
		return false, kafkatxn.HangingCannotRepair, fmt.Sprintf("the open transaction on %s holds records of transactions that committed (%s) and of others that aborted (%s): one marker decides them all, so no marker can be right; repair the data by hand",
			where, strings.Join(commits, ", "), strings.Join(aborts, ", "))
	case len(waiting) > 0:
		return false, kafkatxn.HangingWaiting, fmt.Sprintf("the open transaction on %s holds records of %s, not decided yet: recovery decides first, then the marker follows", where, strings.Join(waiting, ", "))
	}
	return len(commits) > 0, "", ""
}

// healQuarantine returns to the pool every quarantined id that no transaction in doubt names
// any more, once no request can still be running with it (QuarantineGrace): a quarantine whose
// release was missed (an id left quarantined before its row named it, a failed
// re-initialisation, a restart of Kafka while it was released) never leaks. The new client's
// InitProducerId aborts what may still be open on the id, which only a transaction never
// logged prepared can be (I3, I6).
func (l *Loop) healQuarantine(ctx context.Context, st *Stats) error {
	if l.kafka == nil {
		return nil
	}
	var errs error
	for id, since := range l.kafka.QuarantinedSince() {
		if time.Since(since) < l.cfg.QuarantineGrace {
			continue
		}
		busy, err := l.log.TransactionalIDInDoubt(ctx, id)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		if busy {
			continue
		}
		if err := l.kafka.Unquarantine(ctx, id); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		st.Healed++
	}
	return errs
}
