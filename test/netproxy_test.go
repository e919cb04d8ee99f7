package test

// A TCP proxy between the coordinator binary and one service (PostgreSQL or Kafka), through which
// the network-fault tests inject latency, cut connections and partition the network. It is
// toxiproxy's own proxy and fault ("toxic") code, run in the test process as a library: the
// faults are the ones toxiproxy users know, and no proxy protocol is hand-written here. Only the
// coordinator connects through it; the tests' own checks connect to the services directly.

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// toxiServer is the toxiproxy server state the proxies of this test process belong to (its HTTP
// API is not started: the tests drive the proxies directly).
var toxiServer = sync.OnceValue(func() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
})

// netProxy is one proxy: the coordinator connects to addr, the proxy to upstream.
type netProxy struct {
	t        testing.TB
	name     string
	addr     string
	upstream string
	p        *toxiproxy.Proxy

	mu     sync.Mutex
	toxics int // toxics added so far (names are unique)
}

// newNetProxy starts a proxy on a free port of 127.0.0.1 in front of upstream; it stops at the
// end of the test.
func newNetProxy(t testing.TB, name, upstream string) *netProxy {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := toxiproxy.NewProxy(toxiServer(), name, addr, upstream)
	require.NoError(t, p.Start(), "start the %s proxy on %s", name, addr)
	t.Cleanup(p.Stop)
	return &netProxy{t: t, name: name, addr: addr, upstream: upstream, p: p}
}

// port is the proxy's listening port.
func (np *netProxy) port() int { return portOf(np.t, np.addr) }

// toxic adds a toxic of typ to one stream ("upstream": coordinator to service, "downstream":
// service to coordinator) with the attributes, affecting each connection with probability
// toxicity, and returns its name (for remove).
func (np *netProxy) toxic(typ, stream string, toxicity float64, attrs string) string {
	np.t.Helper()
	np.mu.Lock()
	np.toxics++
	name := fmt.Sprintf("%s_%s_%d", typ, stream, np.toxics)
	np.mu.Unlock()
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":%g,"attributes":%s}`, name, typ, stream, toxicity, attrs)
	_, err := np.p.Toxics.AddToxicJson(strings.NewReader(body))
	require.NoError(np.t, err, "add toxic %s", body)
	return name
}

// both adds the toxic to both streams and returns the names.
func (np *netProxy) both(typ string, toxicity float64, attrs string) []string {
	return []string{np.toxic(typ, "upstream", toxicity, attrs), np.toxic(typ, "downstream", toxicity, attrs)}
}

// remove takes toxics away. Removing a "timeout" toxic closes the connections it held (toxiproxy
// closes them: their data was dropped); removing a "latency" toxic delivers what it held.
func (np *netProxy) remove(names ...string) {
	np.t.Helper()
	for _, n := range names {
		require.NoError(np.t, np.p.Toxics.RemoveToxic(context.Background(), n), "remove toxic %s", n)
	}
}

// disable closes the listener and every connection through the proxy (a reset on both sides);
// connection attempts are refused until enable.
func (np *netProxy) disable() { np.p.Stop() }

// enable listens again on the same address.
func (np *netProxy) enable() {
	np.t.Helper()
	require.NoError(np.t, np.p.Start(), "restart the %s proxy", np.name)
}

// clear removes every toxic and makes sure the proxy listens (the end of a fault).
func (np *netProxy) clear() {
	np.p.Toxics.ResetToxics(context.Background())
	if !np.p.Enabled {
		np.enable()
	}
}

// proxiedDSN is dsn with its host and port replaced by the proxy's.
func proxiedDSN(t testing.TB, dsn string, np *netProxy) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Host = np.addr
	return u.String()
}

// dsnHostPort is the host:port of a DSN.
func dsnHostPort(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(host, port)
}

// tcpPeers counts the established TCP connections of process pid by remote port, read from
// /proc: which services the process really talks to, and through which ports.
func tcpPeers(t testing.TB, pid int) map[int]int {
	t.Helper()
	fs, err := procfs.NewDefaultFS()
	require.NoError(t, err)
	p, err := fs.Proc(pid)
	require.NoError(t, err)
	targets, err := p.FileDescriptorTargets()
	require.NoError(t, err)
	inodes := map[uint64]bool{}
	for _, tg := range targets {
		var inode uint64
		if _, err := fmt.Sscanf(tg, "socket:[%d]", &inode); err == nil {
			inodes[inode] = true
		}
	}
	lines, err := fs.NetTCP()
	require.NoError(t, err)
	if six, err := fs.NetTCP6(); err == nil { // absent without IPv6
		lines = append(lines, six...)
	}
	const established = 1
	out := map[int]int{}
	for _, l := range lines {
		if l.St == established && inodes[l.Inode] {
			out[int(l.RemPort)]++
		}
	}
	return out
}

// requireRoutedThrough checks that process pid talks to every proxy and never to a port it must
// reach only through a proxy.
func requireRoutedThrough(t testing.TB, pid int, proxies []*netProxy, direct []int) {
	t.Helper()
	peers := tcpPeers(t, pid)
	for _, np := range proxies {
		require.Positive(t, peers[np.port()], "the coordinator has no connection through the %s proxy (%s); its peers by port: %v", np.name, np.addr, peers)
	}
	for _, port := range direct {
		require.Zero(t, peers[port], "the coordinator connects to port %d directly, around the proxy; its peers by port: %v", port, peers)
	}
	t.Logf("the coordinator's TCP connections by remote port: %v", peers)
}
