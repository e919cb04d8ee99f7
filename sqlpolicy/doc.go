// Package sqlpolicy decides which client SQL statements may run inside the coordinator's
// transaction. It classifies a statement with PostgreSQL's own grammar (libpg_query, the server's
// parser as a library), never by looking at keywords, so a comment glued to a keyword, a form
// feed or an unusual case cannot change what it sees.
//
// # State Model
//
// Check is a pure function of the statement text; results are kept in a bounded cache keyed
// by that text (statements are usually parameterised and repeat).
//
// # What is refused (invariant I13: client input is confined)
//
//   - anything that ends, prepares or splits the transaction: BEGIN, START TRANSACTION, COMMIT,
//     END, ROLLBACK, ABORT, SAVEPOINT, RELEASE, ROLLBACK TO, PREPARE TRANSACTION, COMMIT
//     PREPARED, ROLLBACK PREPARED, anywhere in the tree;
//   - session state that would outlive the transaction on a pooled connection: SET without
//     LOCAL, RESET, DISCARD, LISTEN, UNLISTEN, PREPARE/DEALLOCATE of named statements, LOAD,
//     cursors WITH HOLD, temporary tables, views and sequences, set_config(…, false), session
//     advisory locks;
//   - role and trigger switches in any form: SET [LOCAL] ROLE, SET [LOCAL] SESSION
//     AUTHORIZATION, session_replication_role (also through set_config);
//   - the coordinator's own kpgtx.* settings (SET LOCAL, set_config), which mark the client's
//     part of the transaction for the guards and the coordinator's tables' triggers;
//   - the coordinator's own tables (every relation named coordinator_*), and the functions
//     that signal other backends (the coordinator's own sessions among them);
//   - more than one statement in one entry, an empty statement, a NUL character, and text the
//     parser cannot parse (fail closed: what cannot be classified does not run).
//
// With Options.Confined (a statement role is configured) DO blocks and CALL are refused too:
// dynamic SQL could leave the role with SET ROLE NONE, which PostgreSQL allows any session.
//
// # Failure Handling
//
// Check returns a *Violation (matching ErrRefused) that says what was found and why it is
// refused; callers turn it into a 400 naming the statement's index. This is the first line of
// defence; sqltxn keeps a second one at the protocol level (a guard after every statement
// checks that the connection is still inside the coordinator's transaction).
package sqlpolicy
