package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Client talks to one coordinator. It is safe for concurrent use.
type Client struct {
	base        *url.URL
	token       string
	hc          *http.Client
	maxAttempts int
	minBackoff  time.Duration
	maxBackoff  time.Duration
	poll        time.Duration
	maxPoll     time.Duration
	maxBody     int64
	retryWindow time.Duration
	// pause waits between attempts and between polls; sleep, unless a test needs to act
	// exactly while the client waits.
	pause func(ctx context.Context, d time.Duration) error
	// now is the clock of the retry window (time.Now; a test's clock moves with pause).
	now func() time.Time
}

// Option configures New.
type Option func(*Client) error

// WithToken sends "Authorization: Bearer token" on every request.
func WithToken(token string) Option {
	return func(c *Client) error { c.token = token; return nil }
}

// WithHTTPClient uses hc instead of a client of New's own (which has no overall timeout:
// every call is bounded by its context).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient(nil)")
		}
		c.hc = hc
		return nil
	}
}

// WithTLSConfig uses cfg for https URLs (a CA of its own, a client certificate for mutual
// TLS). It replaces the transport of the HTTP client, so give it before WithHTTPClient's
// client only if that client's transport is an *http.Transport.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *Client) error {
		t, ok := c.hc.Transport.(*http.Transport)
		if c.hc.Transport == nil {
			t, ok = http.DefaultTransport.(*http.Transport), true
		}
		if !ok {
			return errors.New("client: WithTLSConfig needs an *http.Transport")
		}
		t = t.Clone()
		t.TLSClientConfig = cfg.Clone()
		hc := *c.hc
		hc.Transport = t
		c.hc = &hc
		return nil
	}
}

// WithCAFile trusts the PEM certificates in path (and only them) for https URLs.
func WithCAFile(path string) Option {
	return func(c *Client) error {
		cfg, err := TLSConfigWithCA(path)
		if err != nil {
			return err
		}
		return WithTLSConfig(cfg)(c)
	}
}

// TLSConfigWithCA returns a TLS configuration that trusts the PEM certificates in path.
func TLSConfigWithCA(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("client: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client: CA file %s: no PEM certificate in it", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// WithRetries sets how many times a request is sent at most when the server answers 429 (and,
// for Submit, 503 or the connection fails): attempts ≥ 1; the default is 5.
func WithRetries(attempts int) Option {
	return func(c *Client) error {
		if attempts < 1 {
			return fmt.Errorf("client: WithRetries(%d): at least 1", attempts)
		}
		c.maxAttempts = attempts
		return nil
	}
}

// DefaultRetryWindow bounds how long after an id was first sent it may be sent again
// (WithRetryWindow).
const DefaultRetryWindow = time.Hour

// WithRetryWindow sets how long after an id was first sent Submit (and RunPipeline) may send
// it again: past it, a resend would fail with ErrRetryWindow instead (default
// DefaultRetryWindow). The server remembers an id, and runs it at most once, for at least its
// retention retry window (COORDINATOR_RETRY_WINDOW, default 1h); an id sent again after the
// server forgot it would run as a new transaction. So d must not exceed the server's setting.
func WithRetryWindow(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("client: WithRetryWindow(%s): must be positive", d)
		}
		c.retryWindow = d
		return nil
	}
}

// WithBackoff sets the pause before sending again when the server gives no Retry-After: min
// doubles per attempt up to max (defaults 100ms and 5s). A Retry-After is honoured as it is,
// capped at max.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) error {
		if min <= 0 || max < min {
			return fmt.Errorf("client: WithBackoff(%s, %s): want 0 < min <= max", min, max)
		}
		c.minBackoff, c.maxBackoff = min, max
		return nil
	}
}

// WithPollInterval sets how often Submit asks for an in-doubt transaction's outcome: first
// after d, then at growing intervals up to 10 d (default 200ms).
func WithPollInterval(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("client: WithPollInterval(%s): must be positive", d)
		}
		c.poll, c.maxPoll = d, 10*d
		return nil
	}
}

// New returns a client of the coordinator at baseURL ("http://127.0.0.1:8080", or https).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host:port", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	c := &Client{
		base:        u,
		hc:          &http.Client{},
		maxAttempts: 5,
		minBackoff:  100 * time.Millisecond,
		maxBackoff:  5 * time.Second,
		poll:        200 * time.Millisecond,
		maxPoll:     2 * time.Second,
		maxBody:     64 << 20,
		retryWindow: DefaultRetryWindow,
		pause:       sleep,
		now:         time.Now,
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// NewID returns a fresh idempotency id (32 hex digits), as Submit does when the request has
// none. Keep it to send the same request again after a failure that left the outcome unknown.
func NewID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// call is one request's sending policy.
type call struct {
	method string
	path   string // with the query
	body   any    // nil: no body; encodedBody: sent as it is; anything else: encoded as JSON
	// retry503: also send again after 503 and failed connections (Submit: the id makes that
	// safe). 429 is always retried: nothing was run.
	retry503 bool
	// outcomes: 202, 409 and 503 may carry the transaction, returned with the *Error, and 202
	// is not a success (POST /v1/transactions).
	outcomes bool
	// since is when the call's id was first sent: no resend after the retry window (zero: the
	// call sends no id, and only its attempts bound it).
	since time.Time
}

// answer is a response read in full.
type answer struct {
	status     int
	body       []byte
	retryAfter time.Duration
}

// do sends the call, with retries, and returns a 2xx answer, or an *Error, or a transport error.
func (c *Client) do(ctx context.Context, k call) (answer, error) {
	var payload []byte
	switch b := k.body.(type) {
	case nil:
	case encodedBody:
		payload = b
	default:
		var err error
		if payload, err = json.Marshal(k.body); err != nil {
			return answer{}, fmt.Errorf("client: encode the request: %w", err)
		}
	}
	for attempt := 1; ; attempt++ {
		a, err := c.once(ctx, k.method, k.path, payload)
		retry := false
		switch {
		case err != nil:
			retry = k.retry503 && ctx.Err() == nil
		case a.status == http.StatusTooManyRequests:
			retry = true
		case a.status == http.StatusServiceUnavailable:
			retry = k.retry503
		}
		if !retry || attempt >= c.maxAttempts {
			if err != nil {
				return answer{}, err
			}
			if a.status/100 == 2 && !(k.outcomes && a.status == http.StatusAccepted) {
				return a, nil
			}
			return a, c.errorOf(a, k.outcomes)
		}
		wait := c.backoff(attempt, a.retryAfter)
		if !k.since.IsZero() && c.now().Sub(k.since)+wait > c.retryWindow {
			last := err
			if last == nil {
				last = c.errorOf(a, k.outcomes)
			}
			return a, c.windowError(k.since, last)
		}
		if err := c.pause(ctx, wait); err != nil {
			if a.status != 0 {
				e := c.errorOf(a, k.outcomes)
				e.Err = err
				return a, e
			}
			return answer{}, err
		}
	}
}

// once sends one request and reads the answer.
func (c *Client) once(ctx context.Context, method, path string, payload []byte) (answer, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return answer{}, fmt.Errorf("client: %w", err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("cannot reach the coordinator at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody))
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return answer{status: resp.StatusCode, body: body, retryAfter: retryAfter(resp.Header.Get("Retry-After"))}, nil
}

// errorOf reads a non-2xx (or 202) answer into an *Error.
func (c *Client) errorOf(a answer, outcomes bool) *Error {
	if outcomes && (a.status == http.StatusConflict || a.status == http.StatusAccepted || a.status == http.StatusServiceUnavailable) {
		var t Transaction
		if err := unmarshalAnswer(a.body, &t); err == nil && t.ID != "" && t.State != "" {
			t.Raw = a.body
			return outcomeError(a.status, &t, a.retryAfter)
		}
	}
	e := &Error{Status: a.status, RetryAfter: a.retryAfter}
	var b errorBody
	if err := unmarshalAnswer(a.body, &b); err == nil && b.Error.Message != "" {
		e.Class, e.Field, e.Message = b.Error.Class, b.Error.Field, b.Error.Message
		return e
	}
	e.Message = strings.TrimSpace(string(a.body))
	if e.Message == "" {
		e.Message = "(no body)"
	}
	return e
}

// backoff is the pause before attempt+1: the server's Retry-After, or a doubling pause with
// jitter; both at most maxBackoff.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, c.maxBackoff)
	}
	d := float64(c.minBackoff) * math.Pow(2, float64(attempt-1))
	d = min(d, float64(c.maxBackoff))
	return time.Duration(d/2 + mrand.Float64()*d/2)
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// decode reads a 2xx answer's JSON into v.
func decode(a answer, v any) error {
	if err := unmarshalAnswer(a.body, v); err != nil {
		return fmt.Errorf("client: unexpected answer (status %d): %w", a.status, err)
	}
	return nil
}

// unmarshalAnswer reads an answer's JSON into v exactly as encoding/json's Unmarshal does, with
// go-json-experiment's implementation of it (v1 semantics on the v2 engine): a pipeline batch's
// answer carries a result and an offset for each of its hundreds of statements and records,
// and encoding/json took twice as long and 25 times the allocations to read it
// (BenchmarkDecodeAnswer). TestDecodeAnswerAsEncodingJSON holds the two to the same values.
func unmarshalAnswer(body []byte, v any) error { return jsonv1.Unmarshal(body, v) }

// encodedBody is a request body encoded beforehand (a pipeline batch's, as its polls were
// transformed: pipeline_merge.go), sent as it is.
type encodedBody []byte

// windowError stops the resends of an id first sent at since: the retry window passed (or
// would, before the next send). last is the last answer.
func (c *Client) windowError(since time.Time, last error) error {
	return fmt.Errorf("%w (first sent %s ago, window %s; last answer: %w)",
		ErrRetryWindow, c.now().Sub(since).Round(time.Millisecond), c.retryWindow, last)
}
