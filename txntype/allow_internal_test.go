package txntype

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A record's topic is refused before anything runs unless it is a legal Kafka topic name, and
// an allowlist entry is checked by the same rule.
func TestTopicNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		topic string
		ok    bool
	}{
		{"orders", true},
		{"Orders.v2_eu-1", true},
		{strings.Repeat("a", 249), true},
		{strings.Repeat("a", 250), false},
		{"", false},
		{".", false},
		{"..", false},
		{"...", true},
		{"orders events", false},
		{"orders/eu", false},
		{"ordérs", false},
		{"orders\x00", false},
		{"orders*", false},
	}
	for _, tc := range tests {
		err := Limits{}.allowTopic("kafka[0]", tc.topic)
		if tc.ok {
			assert.NoError(t, err, "%q", tc.topic)
		} else {
			assert.ErrorContains(t, err, "not a Kafka topic name", "%q", tc.topic)
		}
	}
	assert.NoError(t, CheckAllowedTopic("orders-*"))
	assert.NoError(t, CheckAllowedTopic("*"))
	assert.Error(t, CheckAllowedTopic("orders/*"))
}
