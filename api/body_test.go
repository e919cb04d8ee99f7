package api

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadBody: a body is read whole whether or not it declares its length, and one that
// declares it is read into one buffer, not built in growing chunks and copied (io.ReadAll
// allocates about twice a large body's bytes, in some twenty slices for a mebibyte).
//
// Not parallel: testing.AllocsPerRun refuses to run beside other tests.
func TestReadBody(t *testing.T) {
	const max = 2 << 20
	body := bytes.Repeat([]byte("0123456789abcdef"), (1<<20)/16)
	cases := []struct {
		name      string
		body      []byte
		declared  int64
		maxAllocs float64 // per read, the reader's own allocation included
	}{
		{"declared", body, int64(len(body)), 2},
		{"declared, small", []byte(`{"id":"a"}`), 10, 2},
		{"not declared", body, -1, 64},
		{"declared beyond the bound", body, max + 1, 64},
		{"declared longer than sent", body[:100], int64(len(body)), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := readBody(bytes.NewReader(c.body), c.declared, max)
			require.NoError(t, err)
			require.Equal(t, c.body, got)
			allocs := testing.AllocsPerRun(5, func() {
				if _, err := readBody(bytes.NewReader(c.body), c.declared, max); err != nil {
					t.Fatal(err)
				}
			})
			require.LessOrEqual(t, allocs, c.maxAllocs)
		})
	}
	t.Run("io.ReadAll, for comparison", func(t *testing.T) {
		allocs := testing.AllocsPerRun(5, func() { _, _ = io.ReadAll(bytes.NewReader(body)) })
		require.Greater(t, allocs, 2.0, "the declared case above must be a saving")
	})
}
