package txntype

import "fmt"

// FaultPoint names a step boundary of the protocol where a test can make the process exit
// abruptly (COORDINATOR_FAULT, test-only), to prove that recovery resolves every crash point.
type FaultPoint string

const (
	FaultAfterSQLWork        FaultPoint = "after_sql_work"        // statements ran; PREPARE sent (or held for the row), answer unread
	FaultAfterPrepare        FaultPoint = "after_prepare"         // the database(s) prepared
	FaultAfterKafkaFlush     FaultPoint = "after_kafka_flush"     // records flushed and acknowledged
	FaultAfterLogPrepared    FaultPoint = "after_log_prepared"    // prepared durable (I2), EndTxn not sent
	FaultAfterEndTxn         FaultPoint = "after_endtxn"          // Kafka committed, SQL still prepared
	FaultDecidedBeforePhase2 FaultPoint = "decided_before_phase2" // answered at the decision (D1), SQL still prepared
	FaultAfterCommitPrepared FaultPoint = "after_commit_prepared" // both committed, log says prepared
	FaultBeforeFinalLog      FaultPoint = "before_final_log"      // about to log committed
)

// The same step boundaries reached by a shared Kafka transaction only (batch.go): its leader
// passes both the plain point and this one, so a test can make sure the crash lands in a batch.
const (
	FaultSharedAfterSQLPrepare  FaultPoint = "shared_after_sql_prepare" // a shared SQL transaction prepared, nothing produced
	FaultSharedAfterKafkaFlush  FaultPoint = "shared_after_kafka_flush"
	FaultSharedAfterLogPrepared FaultPoint = "shared_after_log_prepared"
	FaultSharedAfterEndTxn      FaultPoint = "shared_after_endtxn"
)

// The step boundaries of a transaction its caller decides (X1-X4): its waiting write, and
// the decision's steps, in whichever instance takes the decision.
const (
	FaultAfterLogWaiting        FaultPoint = "after_log_waiting"         // waiting durable (X1), the caller not answered
	FaultAfterDecision          FaultPoint = "after_decision"            // the decision's write landed (X2-X4), nothing sent
	FaultDecisionAfterEndTxn    FaultPoint = "decision_after_endtxn"     // Kafka ended by the logged ids, SQL still prepared
	FaultDecisionBeforeFinalLog FaultPoint = "decision_before_final_log" // both sides ended, the final state not logged
)

// ExternalFaultPoints lists the fault points of transactions their callers decide.
var ExternalFaultPoints = []FaultPoint{FaultAfterLogWaiting, FaultAfterDecision, FaultDecisionAfterEndTxn, FaultDecisionBeforeFinalLog}

// FaultPoints lists every fault point of every request in protocol order.
var FaultPoints = []FaultPoint{FaultAfterSQLWork, FaultAfterPrepare, FaultAfterKafkaFlush,
	FaultAfterLogPrepared, FaultAfterEndTxn, FaultDecidedBeforePhase2, FaultAfterCommitPrepared, FaultBeforeFinalLog}

// SharedFaultPoints lists the fault points reached in shared Kafka transactions only.
var SharedFaultPoints = []FaultPoint{FaultSharedAfterSQLPrepare, FaultSharedAfterKafkaFlush, FaultSharedAfterLogPrepared, FaultSharedAfterEndTxn}

// ParseFaultPoint accepts the names above.
func ParseFaultPoint(s string) (FaultPoint, error) {
	all := append(append(append([]FaultPoint{}, FaultPoints...), SharedFaultPoints...), ExternalFaultPoints...)
	for _, p := range all {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown fault point %q; one of %v", s, all)
}
