package api

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/kpgtx/coordinator/operator"
	"github.com/kpgtx/coordinator/txlog"
	"github.com/kpgtx/coordinator/txntype"
)

// stateInDoubt is the pseudo-state of GET /v1/transactions?state=in-doubt: the reconciled view
// of the log, pg_prepared_xacts and Kafka's open transactions.
const stateInDoubt = "in-doubt"

type inDoubtResponse struct {
	Transactions []*operator.InDoubtEntry `json:"transactions"`
	Next         string                   `json:"next,omitempty"`
	// Warnings name the sources that could not be read: the view is partial.
	Warnings []string `json:"warnings,omitempty"`
}

// parseOlderThan reads the older_than parameter (a Go duration such as 30s or 5m).
func parseOlderThan(q url.Values) (time.Duration, error) {
	v := q.Get("older_than")
	if v == "" {
		return 0, nil
	}
	if !olderThanPattern.MatchString(v) {
		return 0, &txntype.InvalidError{Field: "older_than", Reason: fmt.Sprintf("%q is not whole seconds or a duration such as 30s, 5m or 1h", truncate(v, 40))}
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil // plain seconds; at most 9 digits, no overflow
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, &txntype.InvalidError{Field: "older_than", Reason: fmt.Sprintf("%q: %v", truncate(v, 40), err)}
	}
	return d, nil
}

// OlderThanPattern is the form of older_than (the OpenAPI document gives the same pattern):
// whole seconds, or a Go duration without sign.
const OlderThanPattern = `^([0-9]{1,9}|([0-9]{1,12}(\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h))+)$`

var olderThanPattern = regexp.MustCompile(OlderThanPattern)

// listInDoubt answers GET /v1/transactions?state=in-doubt: newest first (by since), paged.
func (s *Server) listInDoubt(w http.ResponseWriter, r *http.Request, olderThan time.Duration, limit int, after string) error {
	var afterAt time.Time
	var afterKey string
	if after != "" {
		at, key, err := txlog.DecodeCursor(after)
		if err != nil {
			return err
		}
		afterAt, afterKey = at, key
	}
	view, err := s.operator.InDoubt(r.Context())
	if err != nil {
		return err
	}
	resp := inDoubtResponse{Transactions: []*operator.InDoubtEntry{}, Warnings: view.Warnings}
	for _, e := range view.Entries {
		if olderThan > 0 && e.AgeSeconds < olderThan.Seconds() {
			continue
		}
		if after != "" && !e.After(afterAt, afterKey) {
			continue
		}
		if len(resp.Transactions) == limit {
			last := resp.Transactions[limit-1]
			resp.Next = txlog.EncodeCursor(last.Since, last.Key)
			break
		}
		resp.Transactions = append(resp.Transactions, e)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
