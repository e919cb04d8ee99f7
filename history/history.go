package history

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Defaults of Options.
const (
	DefaultInterval = 5 * time.Second
	DefaultWindow   = time.Hour
)

// Options tune the sampler.
type Options struct {
	Interval time.Duration // between two samples; 0: DefaultInterval
	Window   time.Duration // how far back the history goes; 0: DefaultWindow
	Logger   *slog.Logger
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Sampler gathers the registry every Interval and keeps the last Window of samples.
type Sampler struct {
	reg  prometheus.Gatherer
	opts Options
	done chan struct{}

	mu      sync.Mutex
	last    *reading // the previous reading, that rates are measured from
	samples []Sample // a ring of cap samples; next is where the next one goes
	next    int
	full    bool
}

// New returns a sampler of reg; Start runs it.
func New(reg prometheus.Gatherer, opts Options) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Window < opts.Interval {
		opts.Window = opts.Interval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	n := int(opts.Window / opts.Interval)
	return &Sampler{reg: reg, opts: opts, done: make(chan struct{}), samples: make([]Sample, n)}
}

// Interval and Window are the sampler's settings.
func (s *Sampler) Interval() time.Duration { return s.opts.Interval }

// Window is how far back the history goes.
func (s *Sampler) Window() time.Duration { return s.opts.Window }

// Start takes a first reading at once, then one every Interval, until ctx is done (Wait).
func (s *Sampler) Start(ctx context.Context) {
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.opts.Interval)
		defer t.Stop()
		s.Sample()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.Sample()
			}
		}
	}()
}

// Wait returns once the loop Start began has stopped.
func (s *Sampler) Wait() { <-s.done }

// Sample takes one reading now and, from the second on, adds a sample (the rates since the
// previous reading). A registry that cannot be gathered whole still gives what it gathered.
func (s *Sampler) Sample() {
	families, err := s.reg.Gather()
	if err != nil {
		s.opts.Logger.Debug("history: gathering the metrics was incomplete", "error", err)
	}
	r := read(families, s.opts.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && r.at.After(s.last.at) {
		s.samples[s.next] = sampleOf(s.last, r)
		s.next = (s.next + 1) % len(s.samples)
		s.full = s.full || s.next == 0
	}
	s.last = r
}

// Samples are the samples kept, oldest first.
func (s *Sampler) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		return append([]Sample(nil), s.samples[:s.next]...)
	}
	return append(append([]Sample(nil), s.samples[s.next:]...), s.samples[:s.next]...)
}

// Sample is what happened in one interval (rates per second) and the gauges at its end. A
// figure that the registry did not export (no Kafka, a log query that failed) is NaN.
type Sample struct {
	At      time.Time
	Seconds float64 // the interval's length

	Commits    float64            // transactions committed per second
	Aborts     float64            // aborted per second, every class
	AbortsBy   map[string]float64 // aborted per second by error class
	InDoubt    float64            // answered 202 (left to recovery) per second
	Heuristic  float64            // ended heuristic per second
	LatencyP50 float64            // seconds; NaN when no transaction ended in the interval
	LatencyP99 float64

	NotFinal        float64 // the log's transactions not final (every state)
	OldestAgeSec    float64 // the oldest of them
	HeuristicRows   float64 // the log's rows waiting for an operator
	RecoveryPasses  float64 // passes per second
	RecoveryResolve float64 // transactions resolved per second
	RecoveryFailed  float64 // failed passes per second

	KafkaSize, KafkaFree, KafkaLeased, KafkaQuarantined, KafkaHanging float64
	DBAcquired, DBMax                                                 float64
}

// reading is one gather of the registry, reduced to what the samples need.
type reading struct {
	at         time.Time
	outcomes   map[[2]string]float64 // (state, class) → count
	latency    histogram
	notFinal   float64
	oldest     float64
	heuristic  float64
	passes     float64
	resolved   float64
	failures   float64
	kafka      map[string]float64 // status → ids; "size"
	dbAcquired float64
	dbMax      float64
	has        map[string]bool // the families present
}

type histogram struct {
	count   float64
	bounds  []float64
	buckets []float64 // cumulative
}

func read(families []*dto.MetricFamily, at time.Time) *reading {
	r := &reading{at: at, outcomes: map[[2]string]float64{}, kafka: map[string]float64{}, has: map[string]bool{}}
	for _, f := range families {
		name := f.GetName()
		r.has[name] = true
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := value(m)
			switch name {
			case MetricTransactions:
				r.outcomes[[2]string{labels["state"], labels["class"]}] += v
			case MetricPhaseDuration:
				if labels["phase"] == "total" && m.GetHistogram() != nil {
					h := m.GetHistogram()
					r.latency.count = float64(h.GetSampleCount())
					for _, b := range h.GetBucket() {
						r.latency.bounds = append(r.latency.bounds, b.GetUpperBound())
						r.latency.buckets = append(r.latency.buckets, float64(b.GetCumulativeCount()))
					}
				}
			case MetricInDoubt:
				r.notFinal += v
			case MetricInDoubtAge:
				r.oldest = v
			case MetricHeuristic:
				r.heuristic += v
			case MetricRecoveryPasses:
				r.passes = v
			case MetricRecoveryResolved:
				r.resolved = v
			case MetricRecoveryFailures:
				r.failures = v
			case MetricKafkaIDs:
				r.kafka[labels["status"]] = v
			case MetricKafkaSize:
				r.kafka["size"] = v
			case MetricDBConnections:
				if labels["state"] == "acquired" {
					r.dbAcquired += v
				}
			case MetricDBConnectionsMax:
				r.dbMax += v
			}
		}
	}
	return r
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// sampleOf is the interval from a to b.
func sampleOf(a, b *reading) Sample {
	secs := b.at.Sub(a.at).Seconds()
	rate := func(x, y float64) float64 { return math.Max(0, y-x) / secs }
	s := Sample{At: b.at, Seconds: secs, AbortsBy: map[string]float64{}}
	for k, v := range b.outcomes {
		d := rate(a.outcomes[k], v)
		switch state, class := k[0], k[1]; state {
		case "committed":
			s.Commits += d
		case "aborted":
			s.Aborts += d
			s.AbortsBy[class] += d
		case "heuristic", "heuristic_mixed":
			s.Heuristic += d
		default: // active, prepared, committing: answered 202, left to recovery
			s.InDoubt += d
		}
	}
	s.LatencyP50 = quantile(0.5, a.latency, b.latency)
	s.LatencyP99 = quantile(0.99, a.latency, b.latency)
	gauge := func(family string, v float64) float64 {
		if !b.has[family] {
			return math.NaN()
		}
		return v
	}
	s.NotFinal = gauge(MetricInDoubt, b.notFinal)
	s.OldestAgeSec = gauge(MetricInDoubtAge, b.oldest)
	s.HeuristicRows = gauge(MetricHeuristic, b.heuristic)
	s.RecoveryPasses = rate(a.passes, b.passes)
	s.RecoveryResolve = rate(a.resolved, b.resolved)
	s.RecoveryFailed = rate(a.failures, b.failures)
	s.KafkaSize = gauge(MetricKafkaSize, b.kafka["size"])
	s.KafkaFree = gauge(MetricKafkaIDs, b.kafka["free"])
	s.KafkaLeased = gauge(MetricKafkaIDs, b.kafka["leased"])
	s.KafkaQuarantined = gauge(MetricKafkaIDs, b.kafka["quarantined"])
	s.KafkaHanging = gauge(MetricKafkaIDs, b.kafka["hanging"])
	s.DBAcquired = gauge(MetricDBConnections, b.dbAcquired)
	s.DBMax = gauge(MetricDBConnectionsMax, b.dbMax)
	return s
}

// quantile estimates the q-quantile of the observations between two readings of a cumulative
// histogram, interpolating linearly inside the bucket as Prometheus's histogram_quantile does.
// NaN: nothing was observed between them.
func quantile(q float64, a, b histogram) float64 {
	n := b.count - a.count
	if n <= 0 || len(b.bounds) == 0 {
		return math.NaN()
	}
	delta := func(i int) float64 {
		d := b.buckets[i]
		if i < len(a.buckets) && len(a.buckets) == len(b.buckets) {
			d -= a.buckets[i]
		}
		return d
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for i, upper := range b.bounds {
		c := delta(i)
		if c >= rank {
			if c == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(c-below)
		}
		lower, below = upper, c
	}
	// Beyond the largest bound: the largest bound is all that can be said.
	return b.bounds[len(b.bounds)-1]
}
