package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// adminRoutes mounts the operator API: the in-doubt view (GET /v1/transactions?state=in-doubt,
// admin_view.go) and resolution of one transaction: retry (run the recovery rules now), abort
// (only where it cannot break atomicity) and resolve (an operator's decision on a heuristic
// row, with a reason). Every action is recorded in the transaction's event history with who
// did it (who) and why; refusals are recorded too.
func (s *Server) adminRoutes(r chi.Router) {
	r.Post("/v1/transactions/{id}/retry", s.handle(s.retryTransaction))
	r.Post("/v1/transactions/{id}/abort", s.handle(s.abortTransaction))
	r.Post("/v1/transactions/{id}/resolve", s.handle(s.resolveTransaction))
}

// adminRequest is the body of the admin actions: optional for retry and abort (a reason for
// the record), required for resolve.
type adminRequest struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

// transactionView is a transaction with its event history (GET /v1/transactions/{id} and the
// admin actions' answers).
type transactionView struct {
	*txntype.Transaction
	Events []txntype.Event `json:"events"`
}

// writeTransaction answers with the transaction and its event history.
func (s *Server) writeTransaction(w http.ResponseWriter, r *http.Request, status int, t *txntype.Transaction) error {
	events, err := s.log.Events(r.Context(), t.GID)
	if err != nil {
		return err
	}
	if events == nil {
		events = []txntype.Event{}
	}
	writeJSON(w, status, transactionView{Transaction: t.Public(), Events: events})
	return nil
}

// decodeAdmin reads an admin action's body strictly; an empty body is an empty request.
func (s *Server) decodeAdmin(w http.ResponseWriter, r *http.Request, allowOutcome bool) (adminRequest, error) {
	var in adminRequest
	if _, err := s.readJSON(w, r, &in, true); err != nil {
		return adminRequest{}, err
	}
	if !allowOutcome && in.Outcome != "" {
		return adminRequest{}, &txntype.InvalidError{Field: "outcome", Reason: "only resolve takes an outcome"}
	}
	if err := checkReason(in.Reason); err != nil {
		return adminRequest{}, err
	}
	return in, nil
}

// maxReason bounds an operator's reason (it is stored in the event history).
const maxReason = 2000

// checkReason refuses, before anything happens, a reason the event history could not store or
// a reader could be misled by: the action and its record must not come apart (audit).
func checkReason(reason string) error {
	if !utf8.ValidString(reason) {
		return &txntype.InvalidError{Field: "reason", Reason: "must be valid UTF-8"}
	}
	if n := utf8.RuneCountInString(reason); n > maxReason {
		return &txntype.InvalidError{Field: "reason", Reason: fmt.Sprintf("%d characters, at most %d", n, maxReason)}
	}
	for i, r := range reason {
		if r == '\n' || r == '\t' {
			continue
		}
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r) {
			return &txntype.InvalidError{Field: "reason", Reason: fmt.Sprintf("control character U+%04X at byte %d (only line breaks and tabs are allowed)", r, i)}
		}
	}
	return nil
}

// lookup finds the transaction of the request id in the path (its gid may carry another
// instance's prefix).
func (s *Server) lookup(r *http.Request) (*txntype.Transaction, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	return s.log.Get(r.Context(), id)
}

// retryTransaction runs the recovery rules for one transaction now and returns it.
func (s *Server) retryTransaction(w http.ResponseWriter, r *http.Request) error {
	return s.adminAct(w, r, "retry", func(ctx context.Context, gid, _ string) (*txntype.Transaction, error) {
		return s.operator.Retry(ctx, gid)
	})
}

// abortTransaction aborts one transaction where that cannot break atomicity (operator.Desk.Abort);
// elsewhere it answers 409 saying why.
func (s *Server) abortTransaction(w http.ResponseWriter, r *http.Request) error {
	return s.adminAct(w, r, "abort", func(ctx context.Context, gid, reason string) (*txntype.Transaction, error) {
		return s.operator.Abort(ctx, gid, who(r), reason)
	})
}

// adminAct is the shape of retry and abort: read the optional reason, find the transaction,
// act on it, record the action.
func (s *Server) adminAct(w http.ResponseWriter, r *http.Request, action string,
	act func(ctx context.Context, gid, reason string) (*txntype.Transaction, error)) error {
	req, err := s.decodeAdmin(w, r, false)
	if err != nil {
		return err
	}
	t, err := s.lookup(r)
	if err != nil {
		return err
	}
	before := t.State
	// Audit that cannot be skipped: the request is recorded, with who and why, before anything
	// is touched; if it cannot be recorded nothing happens. The outcome is recorded after it
	// (and a state change an operator caused names the operator in the row itself, written in
	// the same statement as the change).
	requested := txlog.AdminAction{Action: action, By: who(r), Reason: req.Reason, Result: "requested", Previous: before}
	if err := s.log.AdminEvent(r.Context(), t.GID, requested); err != nil {
		return fmt.Errorf("%w: the %s request could not be recorded, so nothing was done: %w", txntype.ErrUnavailable, action, err)
	}
	t, err = act(r.Context(), t.GID, req.Reason)
	return s.finishAdmin(w, r, txlog.AdminAction{Action: action, Reason: req.Reason, Previous: before}, t, err)
}

// resolveTransaction records an operator's decision on a heuristic transaction; the reason is
// required.
func (s *Server) resolveTransaction(w http.ResponseWriter, r *http.Request) error {
	req, err := s.decodeAdmin(w, r, true)
	if err != nil {
		return err
	}
	outcome, ok := txntype.ParseState(req.Outcome)
	if !ok || (outcome != txntype.StateCommitted && outcome != txntype.StateAborted) {
		return &txntype.InvalidError{Field: "outcome", Reason: `required: "committed" or "aborted"`}
	}
	if strings.TrimSpace(req.Reason) == "" {
		return &txntype.InvalidError{Field: "reason", Reason: "required: say why this outcome is right (it is recorded with your name)"}
	}
	t, err := s.lookup(r)
	if err != nil {
		return err
	}
	a := txlog.AdminAction{Action: "resolve", By: who(r), Reason: req.Reason, Outcome: outcome, Previous: t.State}
	t, err = s.operator.Resolve(r.Context(), t.GID, outcome, a)
	if err == nil {
		// Recorded with the state change, in the same statement.
		return s.writeTransaction(w, r, http.StatusOK, t)
	}
	return s.finishAdmin(w, r, a, t, err)
}

// finishAdmin records the action in the event history (also a refusal or a failed attempt)
// and answers with the transaction, or with the error.
func (s *Server) finishAdmin(w http.ResponseWriter, r *http.Request, a txlog.AdminAction, t *txntype.Transaction, err error) error {
	if t == nil {
		return err
	}
	a.By = who(r)
	switch {
	case err == nil:
		a.Result = string(t.State)
	case errors.Is(err, txntype.ErrNotAllowed):
		a.Result, a.Error = "refused", err.Error()
	default:
		a.Result, a.Error = "failed", err.Error()
	}
	if eerr := s.log.AdminEvent(r.Context(), t.GID, a); eerr != nil {
		s.cfg.Logger.Error("admin action not recorded in the event history", "gid", t.GID,
			"action", a.Action, "by", a.By, "result", a.Result, "error", eerr)
	}
	if err != nil {
		return err
	}
	return s.writeTransaction(w, r, http.StatusOK, t)
}
