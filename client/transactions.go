package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Submit runs one atomic SQL + Kafka write (operation createTransaction) and returns the
// committed transaction, or an *Error: ErrAborted (both sides rolled back; the error names
// the participant and SQLSTATE), ErrInvalid, ErrConflict, ErrUnavailable or ErrOverloaded once
// the retries are spent, ErrInDoubt when ctx ends before the outcome is known (or
// ErrHeuristic), or an error matching ErrRetryWindow when the id's retry window passed first.
//
// An empty req.ID is filled with NewID. Answers 429 and 503 (nothing was left prepared) and
// failed connections are sent again with the same id and body, after the server's
// Retry-After, at most WithRetries times and within the retry window (WithRetryWindow): the id
// makes that safe, since the server runs a request id once and answers a repeat with the
// stored outcome, for as long as it remembers the id. On 202 (outcome not known within the
// time budget) Submit polls the transaction until it is committed, aborted or heuristic, or
// until ctx ends; a transaction the server has no row of after 202 (nothing of it was logged)
// is sent again, as after 503.
//
// A request with Decision DecisionExternal is answered once prepared, with the transaction
// waiting (Transaction.Waiting); Prepare sends such requests and returns what Commit and
// Rollback need.
func (c *Client) Submit(ctx context.Context, req TransactionRequest) (*Transaction, error) {
	if req.ID == "" {
		req.ID = NewID()
	}
	return c.submit(ctx, req, c.now())
}

// submit is Submit of an id first sent at since.
func (c *Client) submit(ctx context.Context, req TransactionRequest, since time.Time) (*Transaction, error) {
	return c.sendUntil(ctx, req.ID, req, since, committed)
}

// committed is Submit's end of polling: the transaction committed.
func committed(t *Transaction) bool { return t.State == StateCommitted }

// sendUntil sends body, the request with the id id, first sent at since, as Submit does,
// polling an answer 202 until done.
func (c *Client) sendUntil(ctx context.Context, id string, body any, since time.Time, done func(*Transaction) bool) (*Transaction, error) {
	for sent := 1; ; sent++ {
		a, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/transactions", body: body, retry503: true, outcomes: true, since: since})
		if err == nil {
			return transactionOf(a)
		}
		var e *Error
		if errors.As(err, &e) && e.Status == http.StatusAccepted && e.Err == nil &&
			(e.Transaction == nil || !e.Transaction.State.Heuristic()) {
			t, werr := c.waitFor(ctx, id, done)
			if !errors.Is(werr, ErrNotFound) || sent >= c.maxAttempts {
				return t, werr
			}
			// In doubt, and then no row: nothing of it was logged (the row's insert did not
			// land, or the run of the id in flight logged nothing). Safe to send again.
			if c.now().Sub(since) > c.retryWindow {
				return nil, c.windowError(since, werr)
			}
			continue
		}
		if e != nil {
			return nil, err
		}
		return nil, fmt.Errorf("transaction %s: %w", id, err)
	}
}

// Wait polls the transaction until its outcome is known and returns it as Submit does: the
// committed transaction, or an *Error matching ErrAborted, ErrHeuristic, or ErrInDoubt (with
// ctx's error) when ctx ends first.
//
// A transaction that waits for its caller's decision (Prepare) is polled until it is decided
// (Commit, Rollback) or its DecideBy passes and it is aborted.
func (c *Client) Wait(ctx context.Context, id string) (*Transaction, error) {
	return c.waitFor(ctx, id, committed)
}

// waitFor polls the transaction until done(t), and returns it; a final or heuristic state
// that is not done is an *Error: 409 for a final one (ErrAborted, or ErrDecided for a commit),
// 202 for a heuristic one (ErrHeuristic); ErrInDoubt with ctx's error when ctx ends first.
func (c *Client) waitFor(ctx context.Context, id string, done func(*Transaction) bool) (*Transaction, error) {
	interval := c.poll
	var last *Transaction
	var lastErr error
	for {
		t, err := c.Get(ctx, id)
		switch {
		case err == nil:
			last, lastErr = t, nil
			switch {
			case done(t):
				return t, nil
			case t.State.Final():
				return nil, outcomeError(http.StatusConflict, t, 0)
			case t.State.Heuristic():
				return nil, outcomeError(statusOfOutcome(t.State), t, 0)
			}
		case errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) ||
			errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrForbidden):
			return nil, err
		default: // unreachable or busy: ask again
			lastErr = err
		}
		if err := c.pause(ctx, interval); err != nil {
			e := &Error{Status: http.StatusAccepted, Transaction: last, Message: "outcome not known yet", Err: err}
			if lastErr != nil {
				e.Err = errors.Join(err, lastErr)
			}
			if last != nil {
				e.Message = "outcome not known yet (last seen " + string(last.State) + ")"
			}
			return nil, e
		}
		interval = min(interval*3/2, c.maxPoll)
	}
}

// Get returns one transaction with its event history (operation getTransaction).
func (c *Client) Get(ctx context.Context, id string) (*Transaction, error) {
	return c.transactionCall(ctx, http.MethodGet, id, "", nil)
}

// Retry runs the recovery rules for the transaction now (operation retryTransaction, role
// admin); reason (optional) is recorded in its history.
func (c *Client) Retry(ctx context.Context, id, reason string) (*Transaction, error) {
	return c.transactionCall(ctx, http.MethodPost, id, "retry", adminBody(reason))
}

// Abort aborts the transaction where that cannot break atomicity (operation
// abortTransaction); elsewhere the answer is ErrNotAllowed, saying why.
func (c *Client) Abort(ctx context.Context, id, reason string) (*Transaction, error) {
	return c.transactionCall(ctx, http.MethodPost, id, "abort", adminBody(reason))
}

// Resolve records an operator's outcome (StateCommitted or StateAborted) for a heuristic
// transaction (operation resolveTransaction); the reason is required.
func (c *Client) Resolve(ctx context.Context, id string, outcome State, reason string) (*Transaction, error) {
	return c.transactionCall(ctx, http.MethodPost, id, "resolve", ResolveRequest{Outcome: outcome, Reason: reason})
}

// Status is the coordinator's summary (operation getStatus): instances and their leases,
// recovery passes, pools and the in-doubt count; Raw keeps the whole answer.
type Status struct {
	Instance  string    `json:"instance"`
	Now       time.Time `json:"now"`
	Instances []struct {
		ID                  string  `json:"id"`
		Self                bool    `json:"self"`
		HeartbeatAgeSeconds float64 `json:"heartbeat_age_seconds"`
		Alive               bool    `json:"alive"`
		Expired             bool    `json:"expired"`
	} `json:"instances"`
	InDoubt struct {
		Count            int            `json:"count"`
		ByIssue          map[string]int `json:"by_issue"`
		OldestAgeSeconds float64        `json:"oldest_age_seconds"`
	} `json:"in_doubt"`
	Warnings []string        `json:"warnings,omitempty"`
	Raw      json.RawMessage `json:"-"`
}

// Status reads the coordinator's summary (operation getStatus; the read role).
func (c *Client) Status(ctx context.Context) (*Status, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/status"})
	if err != nil {
		return nil, err
	}
	var s Status
	if err := decode(a, &s); err != nil {
		return nil, err
	}
	s.Raw = a.body
	return &s, nil
}

// RunRecovery runs one recovery pass now (operation runRecovery).
func (c *Client) RunRecovery(ctx context.Context) (*RecoveryResult, error) {
	a, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/recovery/run"})
	if err != nil {
		return nil, err
	}
	var r RecoveryResult
	return &r, decode(a, &r)
}

func adminBody(reason string) any {
	if reason == "" {
		return nil
	}
	return AdminRequest{Reason: reason}
}

func (c *Client) transactionCall(ctx context.Context, method, id, action string, body any) (*Transaction, error) {
	path := "/v1/transactions/" + url.PathEscape(id)
	if action != "" {
		path += "/" + action
	}
	a, err := c.do(ctx, call{method: method, path: path, body: body})
	if err != nil {
		return nil, err
	}
	return transactionOf(a)
}

func transactionOf(a answer) (*Transaction, error) {
	var t Transaction
	if err := decode(a, &t); err != nil {
		return nil, err
	}
	t.Raw = a.body
	return &t, nil
}

// InDoubt is ListOptions.State for the in-doubt view (ListInDoubt).
const InDoubt State = "in-doubt"

// ListOptions select a page of transactions (operation listTransactions).
type ListOptions struct {
	// State lists the log's rows in that state; empty: all. List refuses InDoubt: use
	// ListInDoubt.
	State State
	// Limit is the page size, 1-1000; 0: the server's default (100).
	Limit int
	// After is the Next cursor of the previous page.
	After string
	// OlderThan keeps only entries at least this old; 0: all.
	OlderThan time.Duration
}

func (o ListOptions) query(state State) string {
	q := url.Values{}
	if state != "" {
		q.Set("state", string(state))
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.OlderThan != 0 {
		q.Set("older_than", o.OlderThan.String())
	}
	return "/v1/transactions?" + q.Encode()
}

// List returns one page of the log's transactions, newest first; Page.Next is the cursor of
// the next one (or use All).
func (c *Client) List(ctx context.Context, opts ListOptions) (*Page, error) {
	if opts.State == InDoubt {
		return nil, errors.New("client: List with state in-doubt: use ListInDoubt")
	}
	a, err := c.do(ctx, call{method: http.MethodGet, path: opts.query(opts.State)})
	if err != nil {
		return nil, err
	}
	var p Page
	if err := decode(a, &p); err != nil {
		return nil, err
	}
	p.Raw = a.body
	return &p, nil
}

// ListInDoubt returns one page of the in-doubt view: the log reconciled with every database's
// prepared transactions and Kafka's open ones (opts.State is ignored).
func (c *Client) ListInDoubt(ctx context.Context, opts ListOptions) (*InDoubtPage, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: opts.query(InDoubt)})
	if err != nil {
		return nil, err
	}
	var p InDoubtPage
	if err := decode(a, &p); err != nil {
		return nil, err
	}
	p.Raw = a.body
	return &p, nil
}

// All iterates over every transaction List selects, page after page from opts.After. It
// stops after yielding an error.
func (c *Client) All(ctx context.Context, opts ListOptions) iter.Seq2[Transaction, error] {
	return func(yield func(Transaction, error) bool) {
		for {
			p, err := c.List(ctx, opts)
			if err != nil {
				yield(Transaction{}, err)
				return
			}
			for _, t := range p.Transactions {
				if !yield(t, nil) {
					return
				}
			}
			if p.Next == "" {
				return
			}
			opts.After = p.Next
		}
	}
}

// AllInDoubt iterates over the whole in-doubt view, page after page.
func (c *Client) AllInDoubt(ctx context.Context, opts ListOptions) iter.Seq2[InDoubtEntry, error] {
	return func(yield func(InDoubtEntry, error) bool) {
		for {
			p, err := c.ListInDoubt(ctx, opts)
			if err != nil {
				yield(InDoubtEntry{}, err)
				return
			}
			for _, e := range p.Entries {
				if !yield(e, nil) {
					return
				}
			}
			if p.Next == "" {
				return
			}
			opts.After = p.Next
		}
	}
}

// Health reports whether the server answers /healthz (operation healthz).
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/healthz"})
	return err
}

// Ready runs the server's readiness checks (operation readyz). When a check failed the
// readiness is returned with an *Error (503) naming it.
func (c *Client) Ready(ctx context.Context) (*Readiness, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/readyz"})
	var r Readiness
	var e *Error
	if err != nil && !(errors.As(err, &e) && e.Status == http.StatusServiceUnavailable) {
		return nil, err
	}
	if derr := decode(a, &r); derr != nil {
		return nil, errors.Join(err, derr)
	}
	if e != nil {
		e.Message = fmt.Sprintf("not ready: %v", r.Failed)
	}
	return &r, err
}

// OpenAPI returns the server's API specification, YAML (operation getOpenAPI).
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/openapi.yaml"})
	return a.body, err
}

// Metrics returns the server's Prometheus metrics, text format (operation metrics).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/metrics"})
	return a.body, err
}
