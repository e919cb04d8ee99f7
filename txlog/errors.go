package txlog

import (
	"errors"

	"github.com/kpgtx/coordinator/coord"
)

// ErrStateChanged: the row is no longer in the state the writer last saw, or no longer owned by
// the writer's fence (another resolver claimed it, or the writer's instance lost its epoch);
// someone else moved it. The writer must re-read, never overwrite. It matches coord.ErrMovedOn.
var ErrStateChanged = coord.ErrMovedOn

// ErrNotMigrated: the log's schema has no version yet (no migration ran on it).
var ErrNotMigrated = errors.New("the log's schema is not migrated")
