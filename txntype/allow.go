package txntype

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/kpgtx/coordinator/sqlpolicy"
)

// Allowlists (Limits.Statements, Limits.Topics). When an operator configures named statements,
// a request may run only those: it refers to a statement by name and the name resolves to the
// configured text before anything else looks at the request (validation, the idempotency
// digest, the participants), so a named request is exactly the request with that SQL text.
// When topics are configured, records may go to those topics only.

var statementName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// CheckAllowedStatement checks one entry of a statement allowlist as Validate would check the
// statement of a request, so that a bad entry is refused at startup rather than per request.
func CheckAllowedStatement(name, text string) error {
	if !statementName.MatchString(name) {
		return fmt.Errorf("statement name %q: 1-64 characters of [A-Za-z0-9_.-]", name)
	}
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("statement %q: empty SQL", name)
	}
	if err := sqlpolicy.Check(text, sqlpolicy.Options{}); err != nil {
		return fmt.Errorf("statement %q: %w", name, err)
	}
	return nil
}

// CheckAllowedTopic checks one entry of a topic allowlist: a topic name, or a prefix followed
// by "*".
func CheckAllowedTopic(pattern string) error {
	if pattern == "*" {
		return nil
	}
	if !topicChars(strings.TrimSuffix(pattern, "*")) {
		return fmt.Errorf("topic %q: a topic name of [A-Za-z0-9._-] (at most 249), or a prefix followed by *", pattern)
	}
	return nil
}

// topicChars reports whether s is 1 to 249 characters of [A-Za-z0-9._-], Kafka's topic
// alphabet. A loop, not a regular expression: every record of a request is checked, and a
// pipeline batch has hundreds (the regular expression was 3 % of the coordinator's CPU).
func topicChars(s string) bool {
	if len(s) == 0 || len(s) > 249 {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// resolveStatement turns a named statement into its configured text (and refuses what the
// allowlist does not allow). field is "sql[i]".
func (l Limits) resolveStatement(field string, s *Statement) error {
	if len(l.Statements) == 0 {
		if s.Name != "" {
			return Invalid(field+".name", "this coordinator has no named statements configured (COORDINATOR_STATEMENTS); send the SQL text as statement")
		}
		return nil
	}
	if s.Statement != "" {
		return Invalid(field+".statement", `SQL text is not accepted here: this coordinator runs only its configured statements; refer to one by name ({"name": "...", "args": [...]})`)
	}
	if s.Name == "" {
		return Invalid(field+".name", "must name one of the configured statements")
	}
	text, ok := l.Statements[s.Name]
	if !ok {
		return Invalid(field+".name", fmt.Sprintf("unknown statement %q", s.Name))
	}
	s.Statement, s.Name = text, ""
	return nil
}

// allowTopic refuses a topic that is not a legal Kafka topic name (Kafka's own rule: 1-249
// characters of [A-Za-z0-9._-], not "." or ".."), before anything runs, and a topic outside
// the allowlist. field is "kafka[i]".
func (l Limits) allowTopic(field, topic string) error {
	if !topicChars(topic) || topic == "." || topic == ".." {
		return Invalid(field+".topic", "not a Kafka topic name: 1-249 characters of [A-Za-z0-9._-], not \".\" or \"..\"")
	}
	if len(l.Topics) == 0 {
		return nil
	}
	for _, t := range l.Topics {
		if t == topic || strings.HasSuffix(t, "*") && strings.HasPrefix(topic, strings.TrimSuffix(t, "*")) {
			return nil
		}
	}
	return Invalid(field+".topic", fmt.Sprintf("topic %q is not allowed on this coordinator (COORDINATOR_TOPICS)", topic))
}
