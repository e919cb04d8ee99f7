package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// buildExample builds examples/pipeline into the test's temporary directory.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pipeline")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/pipeline")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./examples/pipeline:\n%s", out)
	return bin
}

// TestOffsetsChaos: 20,000 orders on 6 partitions go through the coordinator by three members
// of examples/pipeline, while members are SIGKILLed and restarted (rebalances) and the
// coordinator is SIGKILLed and restarted. Afterwards every order is exactly once in the table
// and once in the output topic (read_committed), the group's offsets are the input's end
// offsets, and nothing is left prepared or in doubt.
func TestOffsetsChaos(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	if testing.Short() {
		t.Skip("the chaos run takes minutes")
	}
	e := newStore(t, envOpts{})
	p := newPipelineEnv(e, 20000, 6)
	bin := buildExample(t)

	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base := "http://" + listen
	startCoord := func() *proc {
		c := startCoordinator(t, e.binaryEnv("a", listen), "serve")
		waitHealthy(t, c, base, 60*time.Second)
		return c
	}
	startMember := func() *proc {
		return startBinary(t, bin, coordinatorEnv(), "-coordinator", base, "-brokers", strings.Join(e.brokers, ","),
			"-group", p.group, "-in", p.in, "-out", p.out, "-table", p.table, "-max-poll", "50", "-session-timeout", "6s")
	}
	kill := func(pr *proc) {
		_ = pr.cmd.Process.Signal(syscall.SIGKILL)
		<-pr.done
	}
	coord := startCoord()
	members := []*proc{startMember(), startMember(), startMember()}

	// The chaos: a member killed and restarted every 0.7 s, the coordinator every third round,
	// until the input is consumed (after 15 rounds the members run in peace).
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rounds, memberKills, coordKills := 0, 0, 0
	for !p.done(ctx) {
		require.NoError(t, ctx.Err(), "the pipeline did not consume its input; %d rows so far", len(p.rows()))
		time.Sleep(700 * time.Millisecond)
		if rounds >= 15 {
			continue
		}
		rounds++
		i := rand.IntN(len(members))
		kill(members[i])
		memberKills++
		if rounds%3 == 0 {
			kill(coord)
			coordKills++
			coord = startCoord()
		}
		members[i] = startMember()
		for j, m := range members {
			select {
			case <-m.done:
				require.Failf(t, "a member stopped on its own", "member %d: %v\n%s", j, m.err, m.stderr.String())
			default:
			}
		}
	}
	for _, m := range members {
		m.signal(syscall.SIGTERM)
		<-m.done
	}
	e.waitResolved(t, 60*time.Second)
	t.Logf("%d orders, %d member kills, %d coordinator kills", p.n, memberKills, coordKills)
	require.GreaterOrEqual(t, coordKills, 1, "the input was consumed before the coordinator was killed: slow the members down")
	p.checkExactlyOnce(t)
}
