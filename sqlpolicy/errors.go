package sqlpolicy

import "errors"

// ErrRefused is matched by every *Violation.
var ErrRefused = errors.New("statement refused")

// Violation says why a statement may not run.
type Violation struct {
	// What names the construct found ("COMMIT", "SET without LOCAL", …).
	What string
	// Why explains the rule it breaks.
	Why string
}

func (v *Violation) Error() string { return v.What + " is not allowed: " + v.Why }

// Is makes errors.Is(v, ErrRefused) true.
func (v *Violation) Is(target error) bool { return target == ErrRefused }

const (
	whyTxn     = "the coordinator controls the transaction"
	whySession = "it would change the pooled session beyond this transaction"
	whyRole    = "statements run with the coordinator's role settings"
	whyOwn     = "the coordinator's own tables are not for client statements"
	whyMark    = "the coordinator's kpgtx.* settings mark its transaction for its guards"
	whyDynamic = "a statement role is configured, and dynamic SQL could leave it"
)
