// Package kafkatxn is the Kafka participant: a pool of transactional producers (one kgo client
// per transactional.id, ids stable per coordinator instance), begin/produce/flush with offsets,
// the prepared state (transactionalId, producerId, epoch), commit, abort, and finishing a
// transaction by its ids alone with a raw EndTxn.
//
// # State Model
//
// An id is free (in the pool), leased (serving one global transaction), or quarantined (its
// transaction is in doubt; never handed out by this pool again, I1). A leased producer whose
// client saw fencing or an unclear EndTxn is marked broken and recreated before reuse; the new
// client's InitProducerId aborts whatever was left open on the id, which is allowed only for an
// id that is not quarantined (I6).
//
// # Failure Handling
//
// Every Kafka error is classified once, in errors.go, into the KIP-1050 groups: retriable,
// abortable, fenced (application-recoverable) and invalid configuration. kgo's Flush answers nil
// even when records failed, so every record's promise is checked before a transaction counts
// as prepared. Topics and partitions are checked before a transaction begins, so an unknown topic
// fails in milliseconds instead of after metadata retries. EndTxn answers
// CONCURRENT_TRANSACTIONS and coordinator moves are retried here. Outcomes come from evidence
// only: INVALID_TXN_STATE and TRANSACTION_ABORTABLE to a commit ask the client to abort, they do
// not say that Kafka aborted, so Kafka's transaction state is read (DescribeTransactions) and an
// abort is counted only when it reports this very transaction aborted (endtxn.go:
// confirmAbort); otherwise the outcome is unknown and recovery reads the records back.
// PRODUCER_FENCED is ambiguous (on transactions v2 it also answers a late commit after the id
// was reused) and is never taken as an abort. Before a transaction counts as prepared, every
// record must have been written by the producer id and epoch about to be logged (txn.go:
// checkWriters): a producer re-initialised mid-transaction would commit only part of it.
package kafkatxn
