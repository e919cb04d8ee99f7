package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The GC target is 400 unless GOGC says otherwise (the runtime has then applied it).
func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	tuneGC(func(string) string { return "" })
	assert.Equal(t, defaultGCPercent, debug.SetGCPercent(100), "GOGC unset")

	tuneGC(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	assert.Equal(t, 100, debug.SetGCPercent(100), "GOGC set: left to the runtime")
}
