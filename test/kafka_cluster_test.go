package test

// Broker restarts are faults the product must survive: the three-broker cluster with one broker
// killed and restarted under load, and (restart_test.go) the single broker restarted under load,
// where the broker may leave transactions hanging (KAFKA-20734) that the coordinator must find
// and repair. Nothing is excused: every request ends on both sides or on neither.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkHangingRepaired waits until the coordinator holds no hanging transaction (each found one
// was repaired), reports what it found and repaired, and checks that the pool is not low.
func (e *env) checkHangingRepaired(t *testing.T, base string) {
	t.Helper()
	var left []map[string]any
	deadline := time.Now().Add(90 * time.Second)
	for {
		// A scan now, so that hanging transactions are found even if no sign of a restart came.
		call(t, http.MethodPost, base+"/v1/recovery/run", "")
		left = left[:0]
		for _, en := range inDoubtEntries(t, base, "", 100) {
			if en["issue"] == "hanging" {
				left = append(left, en)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	assert.Empty(t, left, "hanging transactions left unrepaired")
	m := scrapeURL(t, base+"/metrics")
	repaired := m.val(t, "kpgtx_kafka_hanging_repaired_total")
	t.Logf("hanging transactions repaired by the coordinator: %v", repaired)
	assert.Zero(t, m.val(t, "kpgtx_kafka_pool_low"), "the pool is not low once everything is resolved")
	assert.Zero(t, m.val(t, "kpgtx_kafka_pool_transactional_ids", "status", "hanging"))
}

// privateCluster is a three-broker KRaft cluster of one test (scripts/services.sh start-cluster
// on a directory and ports of its own).
type privateCluster struct {
	t       *testing.T
	env     []string
	dir     string
	brokers []string
}

func startPrivateCluster(t *testing.T) *privateCluster {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "kpgtx-cluster-")
	require.NoError(t, err)
	ports := map[int]bool{}
	for len(ports) < 6 {
		ports[freePort(t)] = true
	}
	var p []string
	for port := range ports {
		p = append(p, fmt.Sprint(port))
	}
	c := &privateCluster{t: t, dir: dir}
	c.env = append(os.Environ(), "SERVICES_DIR="+dir,
		"CLUSTER_PORTS="+strings.Join(p[:3], ","), "CLUSTER_CONTROLLER_PORTS="+strings.Join(p[3:], ","),
		"CLUSTER_HEAP=384m")
	for _, port := range p[:3] {
		c.brokers = append(c.brokers, "127.0.0.1:"+port)
	}
	t.Cleanup(func() {
		if out, err := c.script("stop-cluster"); err != nil {
			t.Logf("stopping the cluster: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	start := time.Now()
	if out, err := c.script("start-cluster"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the three-broker cluster did not start: %v\n%s", err, out)
		}
		t.Skipf("the three-broker cluster did not start (scripts/services.sh start-cluster): %v\n%s", err, out)
	}
	t.Logf("three brokers up in %s: %v", time.Since(start).Round(time.Millisecond), c.brokers)
	return c
}

func (c *privateCluster) script(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{"../scripts/services.sh"}, args...)...)
	cmd.Env = c.env
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestKafkaClusterBrokerRestart kills one broker of three (SIGKILL) while a coordinator runs
// under load, leaves it down longer than a request's budget, starts it again, and checks every
// request on both sides: with replication factor 3 and min.insync.replicas 2 leadership moves
// and requests keep committing.
func TestKafkaClusterBrokerRestart(t *testing.T) {
	if useKfake() {
		t.Skip("killing a broker needs real ones; this test runs in the real-Kafka pass of scripts/test.sh")
	}
	t.Parallel()
	began := time.Now()
	cl := startPrivateCluster(t)
	e := newStore(t, envOpts{brokers: cl.brokers, replicationFactor: 3})
	n := e.startNode(t, "a", "COORDINATOR_DEFAULT_TIMEOUT=5s")

	l := startRestartLoad(e, n)
	time.Sleep(restartLoadRampUp)
	down := time.Now()
	out, err := cl.script("kill-broker", "2")
	require.NoError(t, err, "%s", out)
	time.Sleep(restartDownFor + 5*time.Second) // longer than a request's budget
	out, err = cl.script("start-broker", "2")
	require.NoError(t, err, "%s", out)
	back := time.Now()
	t.Logf("broker 2 killed at %s, back after %s", down.UTC().Format("15:04:05.000"), back.Sub(down).Round(time.Millisecond))

	l.runUntil(back)
	reqs := l.report(t, down, back)
	okAfter := l.okSince(back)
	select {
	case <-n.p.done:
		require.FailNow(t, "coordinator exited during the test", "%v", n.p.err)
	default:
	}
	assert.Positive(t, okAfter, "the coordinator commits after the broker is back")
	assert.Positive(t, l.okSince(down.Add(restartDownFor))-okAfter, "two brokers of three keep committing")
	assert.Empty(t, l.contradictions, "an id answered both 200 and 409")

	call(t, http.MethodPost, n.base+"/v1/recovery/run", "")
	e.waitResolved(t, restartResolveBound)
	e.checkHangingRepaired(t, n.base)
	c, a := e.verify(t, n.base, reqs)
	t.Logf("%d requests (%d sends), %d committed, %d aborted (or never logged); 1 broker killed and restarted; test took %s",
		len(reqs), l.count(), c, a, time.Since(began).Round(time.Second))
	if t.Failed() {
		e.explainInconsistent(t, reqs)
	}
}
