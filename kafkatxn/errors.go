package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Sentinels of this package.
var (
	// ErrPoolExhausted: no transactional.id was free within the request's budget. Retriable: the
	// pool is sized for the offered concurrency (docs/design.md).
	ErrPoolExhausted = errors.New("no transactional id free in the pool")
	// ErrTimeoutTooLarge: the configured transaction timeout exceeds the broker's
	// transaction.max.timeout.ms; every InitProducerId would fail.
	ErrTimeoutTooLarge = errors.New("transaction timeout exceeds the broker's transaction.max.timeout.ms")

	errUnknownTopic = kerr.UnknownTopicOrPartition
)

// classify turns a franz-go or Kafka error into a txntype.Failure with its KIP-1050 group. It is
// the one place where Kafka errors get their meaning; every retry rule is written here.
func classify(err error) *txntype.Failure {
	if err == nil {
		return nil
	}
	f := &txntype.Failure{Participant: txntype.ParticipantKafka, Err: err}
	var ke *kerr.Error
	switch {
	case errors.Is(err, ErrPoolExhausted), errors.Is(err, ErrRestartCheck):
		// The caller may retry; nothing was started.
		f.Class, f.Unavailable = txntype.ClassRetriable, true
	case errors.Is(err, txntype.ErrKafkaAborted):
		f.Class = txntype.ClassAbortable
	case errors.Is(err, errMixedWriters):
		// The producer was re-initialised mid-transaction (a broker or coordinator move): this
		// transaction cannot commit whole, nothing of it was prepared, a new attempt may succeed.
		f.Class = txntype.ClassRetriable
	case errors.As(err, &ke):
		f.Class = classifyCode(ke)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, kgo.ErrRecordTimeout),
		errors.Is(err, kgo.ErrRecordRetries):
		// Out of time inside the budget: this transaction cannot commit, the producer is fine.
		// (Checked before isConnError: context.DeadlineExceeded is also a net.Error.)
		f.Class = txntype.ClassAbortable
	case isConnError(err):
		// The broker is unreachable: nothing can have been committed by us; safe to retry.
		f.Class, f.Unavailable = txntype.ClassRetriable, true
	case errors.Is(err, kgo.ErrAborting), errors.Is(err, context.Canceled):
		f.Class = txntype.ClassAbortable
	default:
		f.Class = txntype.ClassAbortable
	}
	return f
}

// classifyCode maps a Kafka error code to its KIP-1050 group.
func classifyCode(ke *kerr.Error) txntype.Class {
	switch ke {
	case kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.TransactionCoordinatorFenced,
		kerr.InvalidProducerIDMapping, kerr.UnknownProducerID:
		// Application-recoverable: someone else initialised our transactional.id (or the broker
		// lost our producer state). Abort, recreate the producer, and find out why.
		return txntype.ClassFenced
	case kerr.TopicAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed,
		kerr.ClusterAuthorizationFailed, kerr.InvalidTransactionTimeout, kerr.UnsupportedVersion,
		kerr.UnsupportedForMessageFormat, kerr.SaslAuthenticationFailed, kerr.InvalidConfig,
		kerr.UnsupportedCompressionType, kerr.InvalidRequiredAcks:
		// Invalid configuration: retrying cannot help.
		return txntype.ClassInvalidConfig
	case kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord,
		kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.InvalidTopicException,
		kerr.TransactionAbortable, kerr.InvalidTxnState, kerr.InvalidTimestamp,
		kerr.CorruptMessage:
		// Abortable: this transaction cannot commit; the producer stays usable after an abort.
		return txntype.ClassAbortable
	}
	if ke.Retriable || ke == kerr.ConcurrentTransactions {
		// (CONCURRENT_TRANSACTIONS is not flagged retriable by Kafka, but it only means the
		// previous transaction on the id is still completing.)
		// Retriable: kgo retried inside the budget already (leader moves, NOT_ENOUGH_REPLICAS,
		// coordinator loading); the request as a whole may be retried by the caller.
		return txntype.ClassRetriable
	}
	return txntype.ClassAbortable
}

// unacknowledged classifies a flush that ran out of time: the brokers did not acknowledge the
// records within the request's budget, which in practice means Kafka is down or unreachable.
// Nothing was prepared, so the caller may retry (503): retriable and Unavailable.
func unacknowledged(err error) *txntype.Failure {
	f := classify(err)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrRecordTimeout) {
		f.Class, f.Unavailable = txntype.ClassRetriable, true
	}
	return f
}

// topicsUnrecorded classifies a failed Config.RecordTopics: the coordinator's own log did not
// take the topics, and nothing was produced, so the caller may retry (503): retriable and
// Unavailable, as a failed log write before anything ran.
func topicsUnrecorded(topics []string, err error) *txntype.Failure {
	return &txntype.Failure{Participant: txntype.ParticipantCoordinator, Class: txntype.ClassRetriable, Unavailable: true,
		Err: fmt.Errorf("recording topics %v for the hanging-transaction scans: %w", topics, err)}
}

// endTxnRetriable lists the EndTxn answers that a resend with the same ids may turn into a
// clear outcome. kgo itself only retries coordinator moves; CONCURRENT_TRANSACTIONS (the
// previous transaction on the id is still completing) must be retried by us.
func endTxnRetriable(err error) bool {
	switch {
	case errors.Is(err, kerr.ConcurrentTransactions), errors.Is(err, kerr.CoordinatorLoadInProgress),
		errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.NotCoordinator),
		errors.Is(err, kerr.RequestTimedOut), errors.Is(err, kerr.NetworkException):
		return true
	}
	return isConnError(err)
}

// endTxnAbortAsked reports the EndTxn(commit) answers that ask the client to abort:
// INVALID_TXN_STATE (the transaction is no longer ongoing at this epoch: Kafka may have aborted
// it on timeout, or the id may have moved on) and TRANSACTION_ABORTABLE (the broker wants the
// client to abort). Neither says that Kafka aborted this transaction (they are the abortable
// class, an instruction, not an outcome), so neither is ever counted as an abort by itself:
// confirmAbort asks Kafka what became of the transaction (endtxn.go). PRODUCER_FENCED is not here
// either: on transactions v2 it also answers a late commit after the id was reused; it goes to
// the outcome oracle (I7).
func endTxnAbortAsked(err error) bool {
	return errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.TransactionAbortable)
}

// errAbortUnconfirmed: Kafka asked for an abort, and what it reports of the transaction does
// not confirm one. The outcome is unknown; it is classified fenced when the id has moved on
// (recovery then reads the records back, I7) and retriable while the transaction is still open.
var errAbortUnconfirmed = errors.New("kafka asked for an abort but does not confirm one")

// producerBroken reports errors after which the kgo client must be recreated before the id
// serves another transaction.
func producerBroken(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return classifyCode(ke) == txntype.ClassFenced || ke == kerr.OperationNotAttempted
	}
	return err != nil
}

func isConnError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, kgo.ErrClientClosed)
}

// groupError classifies a refused offset commit of oc's group: the error names the group, and
// its participant is the group's coordinator (txntype.ParticipantKafkaGroup) where the group
// refused it.
//
//   - fenced (KIP-447, KIP-848): the member is no longer the one the group knows (a rebalance
//     moved on: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH,
//     FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND for a generation of a group that is gone,
//     REBALANCE_IN_PROGRESS): the caller drops its batch and rejoins;
//   - invalid configuration: GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED (an ACL),
//     INVALID_GROUP_ID;
//   - anything else (the transaction's own errors: a fenced producer, an abortable
//     transaction, a timeout) keeps the class classify gives it, with the group named.
func groupError(oc *txntype.OffsetCommit, err error) *txntype.Failure {
	err = fmt.Errorf("offsets of consumer group %q: %w", oc.GroupID, err)
	f := classify(err)
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return f
	}
	switch ke {
	case kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.FencedInstanceID, kerr.StaleMemberEpoch,
		kerr.FencedMemberEpoch, kerr.GroupIDNotFound, kerr.RebalanceInProgress:
		f.Participant, f.Class = txntype.ParticipantKafkaGroup, txntype.ClassFenced
	case kerr.GroupAuthorizationFailed, kerr.TopicAuthorizationFailed, kerr.InvalidGroupID:
		f.Participant, f.Class = txntype.ParticipantKafkaGroup, txntype.ClassInvalidConfig
	case kerr.OffsetMetadataTooLarge, kerr.InvalidCommitOffsetSize, kerr.UnknownTopicOrPartition:
		f.Participant, f.Class = txntype.ParticipantKafkaGroup, txntype.ClassAbortable
	}
	return f
}

// groupRetriable lists the answers to TxnOffsetCommit and AddOffsetsToTxn that a resend with
// the same ids may turn into a clear one: the group's or the transaction's coordinator moving
// or loading, and the previous transaction on the id still completing.
func groupRetriable(err error) bool {
	switch {
	case errors.Is(err, kerr.CoordinatorLoadInProgress), errors.Is(err, kerr.CoordinatorNotAvailable),
		errors.Is(err, kerr.NotCoordinator), errors.Is(err, kerr.ConcurrentTransactions),
		errors.Is(err, kerr.RequestTimedOut), errors.Is(err, kerr.NetworkException),
		errors.Is(err, kerr.UnstableOffsetCommit):
		return true
	}
	return isConnError(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}
