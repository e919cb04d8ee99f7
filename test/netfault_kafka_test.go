package test

// Network faults between the coordinator and Kafka. A Kafka client connects to the address the
// broker advertises, not to the one it was given, so a proxy in front of a broker is only really
// in the path when the broker advertises the proxy: the test starts a private broker
// (scripts/services.sh, its own ports and data directory, the cached jars) whose client listener
// is advertised as the proxy's address, and whose second listener (advertised as itself) serves
// the broker's own traffic and the test's checks. That every connection of the coordinator to
// Kafka crosses the proxy is checked from its sockets.
//
// Reproduce one class (with the services of scripts/services.sh):
//
//	go test ./test -run 'TestNetFaultKafka/partition' -count=1 -v

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/service"
)

// proxiedBroker is a private single broker whose clients reach it through proxy.
type proxiedBroker struct {
	t      *testing.T
	dir    string
	env    []string
	proxy  *netProxy
	port   int      // the client listener, behind the proxy
	direct []string // the second listener, for the test's own clients
}

func startProxiedBroker(t *testing.T) *proxiedBroker {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "kpgtx-netfault-")
	require.NoError(t, err)
	b := &proxiedBroker{t: t, dir: dir, port: freePort(t)}
	controller, internal := freePort(t), freePort(t)
	b.proxy = newNetProxy(t, "kafka", fmt.Sprintf("127.0.0.1:%d", b.port))
	b.direct = []string{fmt.Sprintf("127.0.0.1:%d", internal)}
	b.env = append(os.Environ(), "SERVICES_DIR="+dir,
		fmt.Sprintf("KAFKA_PORT=%d", b.port),
		fmt.Sprintf("KAFKA_CONTROLLER_PORT=%d", controller),
		fmt.Sprintf("KAFKA_INTERNAL_PORT=%d", internal),
		"KAFKA_ADVERTISED="+b.proxy.addr,
		"KAFKA_HEAP=512m")
	t.Cleanup(func() {
		if t.Failed() {
			if log, err := os.ReadFile(filepath.Join(dir, "kafka", "server.log")); err == nil {
				lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
				t.Logf("--- last lines of the broker's log:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
		// A throwaway broker: killed, its data removed.
		if out, err := b.script("crash-kafka"); err != nil {
			t.Logf("stopping the private broker: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	start := time.Now()
	if out, err := b.script("start-kafka"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the private broker did not start: %v\n%s", err, out)
		}
		t.Skipf("the private broker did not start (scripts/services.sh start-kafka): %v\n%s", err, out)
	}
	t.Logf("private broker up in %s: clients reach it through the proxy %s, the test directly at %s",
		time.Since(start).Round(time.Millisecond), b.proxy.addr, b.direct[0])

	// A client given the proxy is told the proxy's address for the broker, so it stays behind it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.proxy.addr))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	require.NoError(t, err)
	require.Len(t, md.Brokers, 1)
	require.Equal(t, b.proxy.addr, fmt.Sprintf("%s:%d", md.Brokers[0].Host, md.Brokers[0].Port),
		"the broker advertises the proxy to clients that come through it")
	return b
}

func (b *proxiedBroker) script(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "../scripts/services.sh", cmd)
	c.Env = b.env
	c.WaitDelay = 10 * time.Second
	out, err := c.CombinedOutput()
	return string(out), err
}

// kafkaNetKinds is the Kafka test's mix: two-phase requests with one record or records on three
// partitions, Kafka only, SQL only, and failing ones.
var kafkaNetKinds = []netKind{
	{name: "order", dbs: []string{"default"}, records: 1},
	{name: "kafka-only", records: 1},
	{name: "order", dbs: []string{"default"}, records: 1},
	{name: "fail", dbs: []string{"default"}, records: 1, fails: true},
	{name: "spread", dbs: []string{"default"}, records: 3},
	{name: "order", dbs: []string{"default"}, records: 1},
	{name: "sql-only", dbs: []string{"default"}},
	{name: "kafka-spread", records: 3},
}

// TestNetFaultKafka runs each fault class in turn against one private broker behind a proxy,
// each with its own coordinator, schema and topic.
func TestNetFaultKafka(t *testing.T) {
	if useKfake() {
		t.Skip("the proxied broker is a real one; this test runs in the real-Kafka pass of scripts/test.sh")
	}
	t.Parallel()
	b := startProxiedBroker(t)
	for _, class := range []string{"latency", "cuts", "partition"} {
		t.Run(class, func(t *testing.T) {
			testNetFaultKafka(t, b, class)
		})
	}
}

func testNetFaultKafka(t *testing.T, b *proxiedBroker, class string) {
	began := time.Now()
	np := b.proxy
	np.clear()
	e := newStore(t, envOpts{brokers: b.direct, configure: func(c *service.Config) { c.Brokers = []string{np.addr} }})
	e.createNetTables(t)
	// S8 on (off by default): its batches span two databases, where a deferred member alone on
	// one must run alone, its row first.
	n := e.startNode(t, "a", "COORDINATOR_DEFAULT_TIMEOUT="+netBudget.String(), "COORDINATOR_DEFER_ROWS=true")

	l := startFaultLoad(e, n, kafkaNetKinds)
	time.Sleep(1500 * time.Millisecond)
	// Every connection to Kafka goes through the proxy, none to either listener of the broker
	// (checked again after the faults).
	routed := func() {
		requireRoutedThrough(t, n.p.cmd.Process.Pid, []*netProxy{np}, []int{b.port, portOf(t, b.direct[0])})
	}
	routed()

	scope := []*netProxy{np}
	switch class {
	case "latency":
		injectLatency(l, scope, 10*time.Second)
	case "cuts":
		injectCuts(l, scope, 12*time.Second)
	case "partition":
		for _, variant := range partitionVariants {
			injectPartition(l, scope, variant, netPartition)
			time.Sleep(4 * time.Second)
		}
	}
	tally := l.conclude(t, routed)
	e.checkHangingRepaired(t, n.base)
	t.Logf("Kafka %s: %s; test took %s", class, tally, time.Since(began).Round(time.Second))
}
