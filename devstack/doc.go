// Package devstack is an embedded development stack: a throwaway PostgreSQL
// server and an in-process Kafka.
//
// It backs `coordinator dev`, which must work on a fresh machine with nothing
// configured. [StartPostgres] runs initdb and a postmaster from the locally
// installed PostgreSQL server binaries, or, when there are none, from a
// PostgreSQL build fetched once from Maven Central and cached (fetch.go), in a
// temporary directory (as an unprivileged user when running as root, because
// PostgreSQL refuses to run as root) with max_prepared_transactions enabled,
// so the coordinator can use PREPARE TRANSACTION. [StartKafka] runs a kfake cluster in this process with
// transactions and pre-created topics.
//
// Both are for development and tests only: durability is switched off
// (fsync=off) and all data is removed on Stop. The PostgreSQL part needs a
// Unix system (it is tested on Linux; it builds on macOS and the BSDs).
package devstack
