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

// FaultPoints lists every fault point of every request in protocol order.
var FaultPoints = []FaultPoint{FaultAfterSQLWork, FaultAfterPrepare, FaultAfterKafkaFlush,
	FaultAfterLogPrepared, FaultAfterEndTxn, FaultDecidedBeforePhase2, FaultAfterCommitPrepared, FaultBeforeFinalLog}

// SharedFaultPoints lists the fault points reached in shared Kafka transactions only.
var SharedFaultPoints = []FaultPoint{FaultSharedAfterSQLPrepare, FaultSharedAfterKafkaFlush, FaultSharedAfterLogPrepared, FaultSharedAfterEndTxn}

// ParseFaultPoint accepts the names above.
func ParseFaultPoint(s string) (FaultPoint, error) {
	for _, p := range append(FaultPoints, SharedFaultPoints...) {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown fault point %q; one of %v", s, append(FaultPoints, SharedFaultPoints...))
}
