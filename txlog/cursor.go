package txlog

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/kpgtx/coordinator/coord"
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
			if perr == nil {
				return t, gid, nil
			}
		}
	}
	return time.Time{}, "", fmt.Errorf("%w", &coord.InvalidError{Field: "after", Reason: "not a cursor from a previous page"})
}
