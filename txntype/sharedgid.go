package txntype

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// sharedMark follows the prefix in a shared gid ("<prefix>_+<instance>+<hex>@<database>"; an
// instance id has no '+').
const sharedMark = "_+"

// SharedGID is a PostgreSQL transaction that holds the work of several requests of a batch.
type SharedGID struct {
	Database string
	GID      string   // the PostgreSQL gid
	Members  []string // the global gids of the requests whose work it holds
}

// IsSharedGID reports whether a PostgreSQL gid is a shared transaction of the coordinator with
// gid prefix prefix.
func IsSharedGID(prefix, sqlGID string) bool { return strings.HasPrefix(sqlGID, prefix+sharedMark) }

// SharedGIDInstance is the instance that ran the batch of a shared gid ("" when the gid does
// not say): the sweep judges an unnamed shared gid of its own instance at once when no batch of
// this process runs it, and another instance's only once it is old (S3).
func SharedGIDInstance(prefix, sqlGID string) string {
	rest, ok := strings.CutPrefix(GlobalGID(sqlGID), prefix+sharedMark)
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(rest, '+'); i > 0 {
		return rest[:i]
	}
	return ""
}

// NewSharedGID is a fresh shared gid of instance on database, under the log's gid prefix.
func NewSharedGID(prefix, instance, database string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + sharedMark + instance + "+" + hex.EncodeToString(b[:]) + "@" + database
}

// GlobalGID strips the "@database" suffix of a PostgreSQL gid.
func GlobalGID(sqlGID string) string {
	if i := strings.LastIndexByte(sqlGID, '@'); i >= 0 {
		return sqlGID[:i]
	}
	return sqlGID
}
