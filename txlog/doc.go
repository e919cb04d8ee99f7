// Package txlog is the coordinator log in PostgreSQL (pgx): one row per global transaction with
// everything recovery needs (state, transactionalId, producerId, epoch, the "pid:epoch" prepared
// state, the produced offsets, the SQL gids, error class and message, timestamps) and an
// append-only event table with every state change.
//
// # State Model
//
// Rows move active → prepared | committing → committed | aborted (or heuristic states), and
// active → aborting when a resolver claims them; the states are defined in package coord. Each
// write is one autocommit statement that updates the row and appends the event together, so a
// row and its history never disagree. Each write is also a compare-and-set on the state, the
// owner (owner_instance, owner_epoch) and on the owner's instance still holding that epoch
// (coordinator_instances.epoch, bumped by BumpEpoch whenever the instance's lock is taken):
// a writer that lost its row or its lock writes nothing (ErrStateChanged, txntype.ErrMovedOn).
// Claim is a resolver's first write: it makes the row its own.
//
// # Failure Handling
//
// A write that fails returns an error and leaves the previous state; the coordinator then treats
// the transaction as in doubt (it never assumes a write it could not confirm), unless the error
// proves nothing was written: txntype.ErrLogRefused (the server rolled it back) or
// txntype.ErrLogUnsent (it never reached the server: no connection could be had, pgx sent
// nothing, the log was closed). The schema is
// managed by golang-migrate from the embedded migrations package, in the connection's
// search_path schema.
package txlog
