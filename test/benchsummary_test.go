package test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchSummary checks scripts/bench-summary.awk, which turns the benchmark rounds of
// scripts/bench.sh into the table the performance goals are read from: the medians of each
// figure, and every round's own ratios with their median.
func TestBenchSummary(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("awk"); err != nil {
		t.Fatalf("awk is needed by scripts/bench.sh: %v", err)
	}
	line := func(variant string, c int, txn, p50 float64) string {
		return fmt.Sprintf("BenchmarkThroughput/%s/c=%d-2 \t 100 \t 5000 ns/op \t %g p50-ms \t %g txn/s", variant, c, p50, txn)
	}
	tests := []struct {
		name   string
		input  []string
		want   []string // lines of the output, whitespace collapsed
		absent []string
	}{{
		name: "ratios are paired by round, whatever the order within it",
		input: []string{
			line("coordinator", 16, 900, 9), line("dual-write", 16, 1000, 7),
			// the second round runs the variants in the reverse order
			line("dual-write", 16, 2000, 5), line("coordinator", 16, 1000, 10),
			line("coordinator", 16, 800, 11), line("dual-write", 16, 1000, 8),
		},
		want: []string{
			"(each figure: the median of 3 rounds)",
			// the ratio of the medians: 900 / 1000
			"coordinator 16 900 10.00",
			"coordinator 16 txn/s over dual-write: 0.90 0.50 0.80 median 0.80",
		},
		absent: []string{"dual-write 16 txn/s over"},
	}, {
		name: "an even number of rounds takes the mean of the middle two",
		input: []string{
			line("coordinator", 1, 200, 4), line("inline-2pc-logged", 1, 400, 2), line("dual-write", 1, 800, 1),
			line("dual-write", 1, 800, 1), line("inline-2pc-logged", 1, 400, 2.5), line("coordinator", 1, 200, 3),
		},
		want: []string{
			"coordinator 1 p50 over inline-2pc-logged: 2.00 1.20 median 1.60",
			"coordinator 1 txn/s over dual-write: 0.25 0.25 median 0.25",
		},
	}, {
		name: "a row missing from a round has no ratios by round",
		input: []string{
			line("coordinator-100x", 1, 100, 8), line("by-hand-100x", 1, 400, 2),
			line("by-hand-100x", 1, 400, 2),
		},
		want:   []string{"(each figure: the median of 2 rounds)"},
		absent: []string{"coordinator-100x 1 txn/s over", "coordinator-100x 1 p50 over"},
	}, {
		name:   "one round has no ratios by round",
		input:  []string{line("coordinator", 16, 900, 9), line("dual-write", 16, 1000, 7)},
		want:   []string{"coordinator 16 900 9.00 0.00 0.90"},
		absent: []string{"by round", "median of"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("awk", "-f", "../scripts/bench-summary.awk")
			cmd.Stdin = strings.NewReader(strings.Join(tt.input, "\n") + "\n")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			var lines []string
			for l := range strings.Lines(string(out)) {
				lines = append(lines, strings.Join(strings.Fields(l), " "))
			}
			got := strings.Join(lines, "\n")
			for _, w := range tt.want {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, w)
				}
				require.Truef(t, found, "no line starts with %q in:\n%s", w, got)
			}
			for _, a := range tt.absent {
				require.NotContainsf(t, got, a, "in:\n%s", got)
			}
		})
	}
}
