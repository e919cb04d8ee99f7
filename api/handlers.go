package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/go-chi/chi/v5"
	"github.com/go-json-experiment/json/jsontext"
	"go.opentelemetry.io/otel/trace"

	"github.com/kpgtx/coordinator/coord"
	"github.com/kpgtx/coordinator/history"
	"github.com/kpgtx/coordinator/kafkatxn"
	"github.com/kpgtx/coordinator/operator"
	"github.com/kpgtx/coordinator/recovery"
	"github.com/kpgtx/coordinator/sqltxn"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// OpenAPI is the API's specification (OpenAPI 3.1), served at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Config tunes the HTTP layer.
type Config struct {
	MaxBodyBytes int64
	// MaxInFlight and MaxBodyMemory bound the requests served at once and the bytes their
	// bodies hold (limits.go); 0: no bound.
	MaxInFlight   int
	MaxBodyMemory int64
	Logger        *slog.Logger
	Tokens        []Token // bearer tokens (auth.go); none: the API is open
	// Tracer opens every request's span (trace.go); nil: no traces.
	Tracer trace.Tracer
}

// Deps are the services the handlers use. SQL and Kafka serve the admin views (Kafka is nil
// without brokers).
type Deps struct {
	Coord    *coord.Coordinator
	Log      *txlog.Log
	Recovery *recovery.Loop
	Operator *operator.Desk // the operator's views and actions (admin.go, admin_view.go, console_*.go)
	SQL      *sqltxn.Databases
	Kafka    *kafkatxn.Pool
	Metrics  Metrics          // metrics.go: /metrics and request metrics; nil: none
	History  *history.Sampler // GET /v1/history (console_history.go); nil: an empty history
}

// Server holds the handlers' dependencies.
type Server struct {
	cfg      Config
	coord    *coord.Coordinator
	log      *txlog.Log
	recovery *recovery.Loop
	operator *operator.Desk
	deps     Deps

	inFlight   atomic.Int64 // requests being served (limits.go)
	bodyMemory atomic.Int64 // bytes reserved by their bodies
	refusalLog *logLimiter  // refused requests (auth, overload) are logged at this rate
}

// NewServer returns the API's handlers.
func NewServer(cfg Config, d Deps) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{cfg: cfg, coord: d.Coord, log: d.Log, recovery: d.Recovery, operator: d.Operator, deps: d,
		refusalLog: newLogLimiter(10, 10*time.Second)}
}

// Handler returns the router: middleware (auth.go, metrics), the transaction API (this file),
// the admin API (admin.go), health (health.go) and the web console (console.go).
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	for _, mw := range s.middleware() {
		r.Use(mw)
	}
	r.Post("/v1/transactions", s.handle(s.createTransaction))
	r.Get("/v1/transactions", s.handle(s.listTransactions))
	r.Get("/v1/transactions/{id}", s.handle(s.getTransaction))
	r.Post("/v1/transactions/{id}/commit", s.handle(s.commitTransaction))     // decide.go
	r.Post("/v1/transactions/{id}/rollback", s.handle(s.rollbackTransaction)) // decide.go
	r.Post("/v1/recovery/run", s.handle(s.runRecovery))
	r.Get("/v1/status", s.handle(s.status))         // console_status.go
	r.Get("/v1/history", s.handle(s.history))       // console_history.go
	r.Get("/v1/kafka/hanging", s.handle(s.hanging)) // console_hanging.go
	s.adminRoutes(r)
	s.healthRoutes(r)
	s.consoleRoutes(r) // console.go
	r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(OpenAPI)
	})
	return r
}

// handle adapts a handler that returns an error: the error becomes a status via statusTable.
func (s *Server) handle(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// writeError answers err with the status and class statusTable gives it: every error answer
// of the API, from handlers and middlewares alike, is written here.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, class := statusOf(err)
	if retryLater(status) {
		// Nothing was left prepared: the same request may be sent again, after a pause.
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	var oe *txntype.OutcomeError
	if errors.As(err, &oe) && oe.Txn != nil {
		// 409/202/503 with the transaction: its error says which participant and why.
		writeJSON(w, status, oe.Txn.Public())
		return
	}
	body := errorBody{Error: errorDetail{Class: class, Message: err.Error()}}
	var ie *txntype.InvalidError
	if errors.As(err, &ie) {
		body.Error.Field, body.Error.Message = ie.Field, ie.Reason
	}
	if serverError(status) {
		s.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "error", err)
	}
	writeJSON(w, status, body)
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Class   string `json:"class"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (s *Server) createTransaction(w http.ResponseWriter, r *http.Request) error {
	req, err := s.decode(w, r)
	if err != nil {
		return err
	}
	traceRequest(r, req.ID)
	t, err := s.coord.Execute(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t.Public())
	return nil
}

// MinTimeoutMS is the smallest timeout_ms accepted (txntype.MinTimeoutMS).
const MinTimeoutMS = txntype.MinTimeoutMS

// decode reads the body strictly (strict.go): unknown or mis-cased fields, duplicate keys,
// wrong types, numbers out of range, NUL characters, trailing data and oversized bodies are
// refused with the field named, before anything runs.
func (s *Server) decode(w http.ResponseWriter, r *http.Request) (txntype.Request, error) {
	var in txntype.RequestBody
	if _, err := s.readJSON(w, r, &in, false); err != nil {
		return txntype.Request{}, err
	}
	return in.Request()
}

func decodeError(err error, limit int64) error {
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var tokenErr *jsontext.SyntacticError
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: the limit is %d bytes", errBodyTooLarge, limit)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return &txntype.InvalidError{Field: field, Reason: fmt.Sprintf("must be %s, not %s", typeName(typeErr), typeErr.Value)}
	case errors.As(err, &syntaxErr):
		return &txntype.InvalidError{Field: "body", Reason: fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, err)}
	case errors.Is(err, io.EOF):
		return &txntype.InvalidError{Field: "body", Reason: "empty body: expected a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &txntype.InvalidError{Field: "body", Reason: "malformed JSON: unexpected end"}
	case errors.As(err, &tokenErr): // from the strict walk (checkJSON)
		reason := "syntax error"
		if tokenErr.Err != nil {
			reason = tokenErr.Err.Error()
		}
		return &txntype.InvalidError{Field: "body", Reason: fmt.Sprintf("malformed JSON at byte %d: %s", tokenErr.ByteOffset, reason)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return &txntype.InvalidError{Field: strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), Reason: "unknown field"}
	}
	return &txntype.InvalidError{Field: "body", Reason: err.Error()}
}

func typeName(e *json.UnmarshalTypeError) string {
	switch e.Type.String() {
	case "*string", "string":
		return "a string"
	case "*int64", "*int32", "int64", "int32":
		return "an integer"
	case "map[string]string":
		return "an object of strings"
	}
	return "of type " + e.Type.String()
}

// pathID is the {id} of the path, percent-decoded exactly once. chi matches the escaped path
// when it differs from the decoded one (r.URL.RawPath is set: "a%2Fb") and then gives the
// parameter still escaped; otherwise net/http has decoded it already.
func pathID(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if r.URL.RawPath != "" {
		dec, err := url.PathUnescape(id)
		if err != nil {
			return "", &txntype.InvalidError{Field: "id", Reason: "malformed percent-encoding"}
		}
		id = dec
	}
	if !txntype.ValidID(id) {
		// No transaction can have such an id: refused before any lookup (a NUL or a control
		// character would otherwise reach PostgreSQL).
		return "", &txntype.InvalidError{Field: "id", Reason: "not a transaction id: 1-128 characters of [A-Za-z0-9._:-]"}
	}
	return id, nil
}

func (s *Server) getTransaction(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	t, err := s.coord.Get(r.Context(), id)
	if err != nil {
		return err
	}
	return s.writeTransaction(w, r, http.StatusOK, t) // with its event history (admin.go)
}

type listResponse struct {
	Transactions []*txntype.Transaction `json:"transactions"`
	Next         string                 `json:"next,omitempty"`
}

// listParams are the query parameters of GET /v1/transactions.
var listParams = []string{"state", "limit", "after", "older_than"}

// checkQuery refuses a parameter given twice, given empty, or holding a NUL or another control
// character: each has one meaning, and an empty one is a mistake rather than "unset".
func checkQuery(q url.Values, names ...string) error {
	for _, name := range names {
		vs, ok := q[name]
		switch {
		case !ok:
		case len(vs) > 1:
			return &txntype.InvalidError{Field: name, Reason: "given more than once"}
		case vs[0] == "":
			return &txntype.InvalidError{Field: name, Reason: "empty: leave it out instead"}
		case strings.ContainsFunc(vs[0], unicode.IsControl):
			return &txntype.InvalidError{Field: name, Reason: "contains a control character"}
		}
	}
	return nil
}

func (s *Server) listTransactions(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := checkQuery(q, listParams...); err != nil {
		return err
	}
	var state txntype.State
	if v := q.Get("state"); v != "" && v != stateInDoubt {
		st, ok := txntype.ParseState(v)
		if !ok {
			return &txntype.InvalidError{Field: "state", Reason: fmt.Sprintf("unknown state %q", v)}
		}
		state = st
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return &txntype.InvalidError{Field: "limit", Reason: "must be an integer from 1 to 1000"}
		}
		limit = n
	}
	olderThan, err := parseOlderThan(q)
	if err != nil {
		return err
	}
	if q.Get("state") == stateInDoubt { // the reconciled view (admin_view.go)
		return s.listInDoubt(w, r, olderThan, limit, q.Get("after"))
	}
	page, err := s.log.ListOlder(r.Context(), state, olderThan, limit, q.Get("after"))
	if err != nil {
		return err
	}
	if page.Transactions == nil {
		page.Transactions = []*txntype.Transaction{}
	}
	for i, t := range page.Transactions {
		page.Transactions[i] = t.Public()
	}
	writeJSON(w, http.StatusOK, listResponse{Transactions: page.Transactions, Next: page.Next})
	return nil
}

// runRecovery runs one recovery pass now and reports what it did.
func (s *Server) runRecovery(w http.ResponseWriter, r *http.Request) error {
	st, err := s.recovery.RunOnce(r.Context())
	body := map[string]any{"resolved": st.Resolved, "failed": st.Failed, "orphans": st.Orphans,
		"markers": st.Markers, "taken_over": st.TakenOver, "deadlines": st.Deadlines}
	if err != nil {
		body["error"] = err.Error()
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// retryAfterSeconds is the Retry-After of 429 and 503 answers.
const retryAfterSeconds = "1"

// writeJSON answers v as JSON with its Content-Length. The answer is encoded whole before it is
// sent: a streamed answer past net/http's 2 KB buffer went out chunked, in several writes (a
// pipeline batch's answer holds a result and an offset for each of its hundreds of statements
// and records; BenchmarkWriteJSON).
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := answerBuffers.Get().(*bytes.Buffer)
	defer putAnswerBuffer(buf)
	_ = json.NewEncoder(buf).Encode(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// answerBuffers keeps writeJSON's buffers; one grown past maxPooledAnswer by a large answer is
// left to the collector rather than kept.
var answerBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledAnswer = 1 << 20

func putAnswerBuffer(buf *bytes.Buffer) {
	if buf.Cap() > maxPooledAnswer {
		return
	}
	buf.Reset()
	answerBuffers.Put(buf)
}
