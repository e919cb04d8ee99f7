package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestLogLimiter: at most burst lines per period; the first line after a suppression says how
// many were dropped.
func TestLogLimiter(t *testing.T) {
	t.Parallel()
	l := newLogLimiter(3, time.Hour)
	for i := range 3 {
		ok, dropped := l.allow()
		assert.True(t, ok, "line %d", i)
		assert.Zero(t, dropped)
	}
	for range 5 {
		ok, _ := l.allow()
		assert.False(t, ok, "beyond the burst")
	}
	l.start = l.start.Add(-time.Hour) // the next period
	ok, dropped := l.allow()
	assert.True(t, ok)
	assert.Equal(t, 5, dropped)
}
