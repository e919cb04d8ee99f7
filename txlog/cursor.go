package txlog

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kpgtx/coordinator/txntype"
)

// A cursor is the (created_at, gid) of the last row of a page, opaque to callers.
func encodeCursor(at time.Time, gid string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + gid))
}

func decodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if at, gid, ok := strings.Cut(string(b), "|"); ok {
			t, perr := time.Parse(time.RFC3339Nano, at)
			// The gid goes into a query: a NUL or invalid UTF-8 (PostgreSQL refuses both) means
			// the cursor was not ours.
			if perr == nil && utf8.ValidString(gid) && !strings.ContainsRune(gid, 0) && t.Year() >= 1 && t.Year() <= 9999 {
				return t, gid, nil
			}
		}
	}
	return time.Time{}, "", fmt.Errorf("%w", &txntype.InvalidError{Field: "after", Reason: "not a cursor from a previous page"})
}
