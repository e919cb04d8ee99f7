package metrics

import (
	"regexp"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// register registers collectors on the registry and remembers them (Families).
func (m *Metrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.collMu.Lock()
	defer m.collMu.Unlock()
	m.collectors = append(m.collectors, cs...)
}

// descName reads a descriptor's fully-qualified name: prometheus.Desc has no accessor, and its
// String is documented as the way to show it.
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Families lists the names of every metric family registered, from the collectors'
// descriptors: a family counts whether or not it has a sample yet (a counter vector before its
// first event, the in-doubt gauges while the log does not answer). The deployment's alert
// rules and dashboard may name only these (test/alerts_test.go).
func (m *Metrics) Families() []string {
	m.collMu.Lock()
	cs := append([]prometheus.Collector(nil), m.collectors...)
	m.collMu.Unlock()
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	seen := map[string]bool{}
	for d := range ch {
		if sm := descName.FindStringSubmatch(d.String()); sm != nil {
			seen[sm[1]] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
