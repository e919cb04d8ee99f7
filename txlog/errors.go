package txlog

import "errors"

// ErrStateChanged: the row is no longer in the state the writer last saw; someone else (a
// recovery pass, another instance) moved it. The writer must re-read, never overwrite.
var ErrStateChanged = errors.New("transaction state changed concurrently")
