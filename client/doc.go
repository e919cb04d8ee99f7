// Package client is a Go client of the coordinator's REST API (api/openapi.yaml): submit an
// atomic SQL + Kafka write, learn its outcome, list and operate on transactions.
//
// Its types mirror the API's schemas field for field; a test checks them, and that every
// operation of the spec has a method, against api/openapi.yaml.
//
// # Submitting
//
// [Client.Submit] sends a [TransactionRequest] with an idempotency id (generated when the
// request has none). The server runs an id once, so the client may send the same request
// again wherever that is safe and useful: after 429 (nothing was run), 503 (a dependency was
// down and nothing was left prepared) and failed connections, after the server's Retry-After
// and at most [WithRetries] times. When the outcome is not known within the request's time
// budget (202), Submit polls the transaction until it is committed or aborted, or ctx ends
// (and sends it again when the server then has no row of it: nothing of it was logged).
//
// # Prepare now, decide later
//
// [Client.Prepare] runs phase 1 only ("decision": "external"): every participant prepares
// and the transaction waits, invisible, for its caller's decision until [Prepared.DecideBy],
// after which the coordinator aborts it. [Prepared.Commit] (with the prepared_state the
// answer gave) or [Prepared.Rollback] decides; a process that kept only the id and the
// prepared_state decides with [Client.Commit] and [Client.Rollback]. Both are idempotent, sent
// again after 429, 503 and failed connections, and poll on 202, as Submit does. For a step of
// a saga, a workflow engine or a transaction manager that decides the outcome.
//
// # Retry window
//
// The server runs an id once only while it remembers the id: at least its retention retry
// window (the server's setting COORDINATOR_RETRY_WINDOW, default 1h). An id sent again after
// the server forgot it runs as a new transaction. So the client sends an id again only within
// its own retry window after the id's first send ([WithRetryWindow], default
// [DefaultRetryWindow], 1h), and stops with [ErrRetryWindow] past it, the outcome unknown.
// The client's window must not exceed the server's COORDINATOR_RETRY_WINDOW. [Client.RunPipeline]
// keeps to the same window for each batch's id.
//
// # Errors
//
// Every answer other than a success is an [*Error] carrying the status, the error's class,
// the field at fault, the participant and SQLSTATE, and the transaction when the answer has
// one. errors.Is tells the cases apart: [ErrAborted] (409, both sides rolled back),
// [ErrInDoubt] (202, the outcome is not known yet), [ErrInvalid] (400: nothing was run, fix
// the request), [ErrConflict] (422: the id was used with another body), [ErrDecided] (409:
// a rollback after the commit was taken), [ErrNotAllowed],
// [ErrNotFound], [ErrUnavailable], [ErrOverloaded], [ErrUnauthorized], [ErrForbidden],
// [ErrRetryWindow].
//
// # Operating
//
// [Client.ListInDoubt] (and [Client.AllInDoubt], an iterator over every page) is the
// in-doubt view; [Client.List] and [Client.All] list the log by state; [Client.Retry],
// [Client.Abort], [Client.Resolve] and [Client.RunRecovery] are the operator actions.
//
// # Connections
//
// [WithToken] sends a bearer token; [WithCAFile] or [WithTLSConfig] set up https with a CA of
// your own (or mutual TLS); [WithHTTPClient] brings an http.Client of your own.
package client
