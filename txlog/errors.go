package txlog

import "github.com/kpgtx/coordinator/coord"

// ErrStateChanged: the row is no longer in the state the writer last saw, or no longer owned by
// the writer's fence (another resolver claimed it, or the writer's instance lost its epoch);
// someone else moved it. The writer must re-read, never overwrite. It matches coord.ErrMovedOn.
var ErrStateChanged = coord.ErrMovedOn
