package test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kpgtx/coordinator/service"
)

// Browser tests of the operators' pages: the overview's charts under load, the search box and
// the list of every transaction, and the page of hanging Kafka transactions with a hanging
// transaction made in the test and repaired from the page.

// serveOps starts an in-process coordinator on the test's store with an open API (no
// tokens), its recovery loop idle after the startup pass, and the history sampled every
// historyEvery.
func (e *env) serveOps(t *testing.T, historyEvery time.Duration) {
	t.Helper()
	cfg := e.cfg
	cfg.Instance = "a"
	cfg.RecoveryInterval = time.Hour
	cfg.InstanceLease = 2 * time.Hour
	// The longer lease and recovery interval raise the retention's floor above the one
	// newStore chose: the retention follows, or the configuration is refused.
	if cfg.Retention != 0 {
		cfg.Retention = max(cfg.Retention, cfg.RetentionFloor())
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := service.Open(context.Background(), cfg, logger, service.WithHistoryInterval(historyEvery))
	require.NoError(t, err)
	e.svc = svc
	e.srv = httptest.NewServer(svc.Handler())
	loopCtx, stopLoop := context.WithCancel(context.Background())
	svc.Start(loopCtx)
	t.Cleanup(func() {
		stopLoop()
		svc.Recovery.Wait()
		svc.History.Wait()
		e.srv.Close()
		svc.Close()
	})
}

// order is a request writing one row and one record.
func (e *env) opsOrder(id string) map[string]any {
	return map[string]any{"id": id,
		"sql":   []any{map[string]any{"statement": "INSERT INTO orders(id, total) VALUES ($1, 1)", "args": []any{id}}},
		"kafka": []any{map[string]any{"topic": e.topic, "key": id, "value": "{}"}}}
}

// duplicate is a request that aborts (abortable): its row's id is taken.
func (e *env) opsDuplicate(id, taken string) map[string]any {
	return map[string]any{"id": id,
		"sql":   []any{map[string]any{"statement": "INSERT INTO orders(id, total) VALUES ($1, 1)", "args": []any{taken}}},
		"kafka": []any{map[string]any{"topic": e.topic, "key": id, "value": "{}"}}}
}

// chartTotal is how many events the overview's chart counts in its window (the figures'
// data-total, summed).
func chartTotal(b *browser, chart string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf(`Array.from(document.querySelectorAll('#chart-%s .fig')).reduce((n, f) => n + Number(f.dataset.total || 0), 0)`, chart))
}

// checkTimeAxes: every chart's time axis is labelled in UTC on a 24-hour clock, HH:MM or
// HH:MM:SS, each label the UTC time of its tick, with no date or am/pm on the axis (the
// browser runs in another zone, browserZone); the date is said once, over the charts, in UTC.
func checkTimeAxes(t *testing.T, b *browser) {
	t.Helper()
	require.NotZero(t, eval[int](b, `new Date().getTimezoneOffset()`), "the browser runs in %s, not UTC", browserZone)
	type axis struct {
		ID     string    `json:"id"`
		Ticks  []string  `json:"ticks"`
		Splits []float64 `json:"splits"`
	}
	axes := eval[[]axis](b, `Array.from(document.querySelectorAll('.card.chart')).map((c) => ({
		id: c.id, ticks: JSON.parse(c.dataset.xTicks || '[]'), splits: JSON.parse(c.dataset.xSplits || '[]')}))`)
	require.Len(t, axes, 9)
	label := regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$`)
	for _, a := range axes {
		require.NotEmpty(t, a.Ticks, "%s: the time axis has labels", a.ID)
		require.Len(t, a.Splits, len(a.Ticks), a.ID)
		for i, tick := range a.Ticks {
			require.Regexp(t, label, tick, "%s: tick %d is HH:MM or HH:MM:SS, without a date or am/pm", a.ID, i)
			sec := int64(a.Splits[i])
			want := time.Unix(sec, 0).UTC().Format("15:04:05")[:len(tick)]
			assert.Equal(t, want, tick, "%s: tick %d (%d) in UTC", a.ID, i, sec)
		}
	}
	assert.Regexp(t, `^Times in UTC · [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}Z – ([0-9]{4}-[0-9]{2}-[0-9]{2} )?[0-9]{2}:[0-9]{2}:[0-9]{2}Z$`,
		b.text("#overview-window"), "the date once, over the charts")
}

func TestConsoleOverview(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	e := newStore(t, envOpts{})
	e.serveOps(t, 500*time.Millisecond)

	// Load: four clients committing orders until the test has looked (bounded in count).
	var stop atomic.Bool
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000 && !stop.Load(); i++ {
				if r := e.postQuiet(e.opsOrder(fmt.Sprintf("load-%d-%d", w, i))); r.Status == http.StatusOK {
					sent.Add(1)
				}
			}
		}()
	}
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})

	b.navigate(e.srv.URL + "/ui/")
	b.visible("#overview")
	b.until("commits in the chart", `Number(document.querySelector('#chart-commits .fig')?.dataset.total || 0) > 0`)
	b.until("a few samples", `Number(document.getElementById('overview').dataset.samples || 0) >= 4`)
	assert.Positive(t, chartTotal(b, "commits"))
	assert.Equal(t, 0, chartTotal(b, "aborts"), "nothing aborted yet")
	assert.Contains(t, b.text("#chart-latency .figs"), "p99")
	assert.Regexp(t, `leased [0-9]`, b.text("#chart-kafka .figs"))
	assert.Regexp(t, `acquired [0-9]`, b.text("#chart-db .figs"))
	assert.Equal(t, 9, eval[int](b, `document.querySelectorAll('.card.chart canvas').length`), "every chart is drawn")
	checkTimeAxes(t, b)

	// Aborts: duplicates of a committed row's id abort (class abortable); the chart's count
	// rises.
	require.Equal(t, http.StatusOK, e.post(e.opsOrder("taken")).Status)
	for i := range 12 {
		r := e.post(e.opsDuplicate(fmt.Sprintf("dup-%d", i), "taken"))
		require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)
	}
	b.until("the aborts in the chart", `Number(document.querySelector('#chart-aborts .fig[data-series="aborts_abortable_per_second"]')?.dataset.total || 0) >= 12`)
	assert.GreaterOrEqual(t, chartTotal(b, "aborts"), 12)
	assert.Contains(t, b.text("#chart-aborts .figs"), "abortable")
	b.screenshot("overview-under-load")

	// The links to the lists stay one click away.
	b.click("#overview-in-doubt")
	b.until("the in-doubt list", `location.hash === '#/in-doubt' && document.getElementById('filters') !== null`)
	assert.Empty(t, b.Problems(), "the pages reported errors (a CSP violation among them)")
}

func TestConsoleSearch(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	e := newStore(t, envOpts{})
	e.serveOps(t, time.Second)
	for _, id := range []string{"find-me", "also-1", "also-2"} {
		require.Equal(t, http.StatusOK, e.post(e.opsOrder(id)).Status)
	}
	require.Equal(t, http.StatusConflict, e.post(e.opsDuplicate("refused", "find-me")).Status)

	b.navigate(e.srv.URL + "/ui/")
	b.visible("#overview")
	search := func(text string) {
		t.Helper()
		b.do("search "+text, chromedp.SetValue(chromedp.CSS("#search-input"), text), chromedp.Click(chromedp.CSS("#search-go")))
	}
	for _, text := range []string{"find-me", e.prefix + "_find-me", e.prefix + "_find-me@default"} {
		b.setHash("#/")
		search(text)
		b.until("the page of find-me for "+text, `document.getElementById('txn-id')?.textContent === 'find-me'`)
		assert.Equal(t, "committed", b.text("#txn-state"), text)
	}
	// A transaction that committed has no evidence to show: no Evidence card; its record's
	// timestamp stays on one line.
	b.visible("#events")
	assert.Zero(t, eval[int](b, `document.querySelectorAll('#evidence').length`), "no empty Evidence card")
	checkRecordTimes(t, b)
	b.screenshot("committed")
	// One that aborted has its error as evidence.
	b.setHash("#/txn/refused")
	b.until("the page of refused", `document.querySelector('#txn-state .v-aborted') !== null`)
	assert.Contains(t, b.text("#evidence #txn-error"), "duplicate key", "the error that aborted it")
	for _, c := range []struct{ text, says string }{
		{"nope", `No transaction with id "nope".`},
		{"other_find-me", `No transaction with gid "other_find-me"`},
		{"not an id", "neither a transaction id"},
	} {
		search(c.text)
		b.until("the banner for "+c.text, fmt.Sprintf(`(document.getElementById('banner-text')?.textContent || '').includes(%q)`, c.says))
	}

	// Every transaction, whatever its state; filtered by state and age; paged.
	b.click(`#nav a[data-view="list"]`)
	b.until("all transactions", `document.querySelectorAll('tr.entry').length === 4`)
	assert.ElementsMatch(t, []string{"find-me", "also-1", "also-2", "refused"}, b.keys())
	b.setHash("#/list?state=aborted&limit=25")
	b.until("the aborted", `document.querySelectorAll('tr.entry').length === 1`)
	assert.Equal(t, []string{"refused"}, b.keys())
	checkClipped(t, b, `tr[data-key="refused"] td.last-error .clip`)
	b.screenshot("aborted")
	b.setHash("#/list?state=all&older_than=1h&limit=25")
	assert.Equal(t, "No transactions.", b.text("#list-empty"))
	b.setHash("#/list?state=all&limit=3")
	b.until("page 1 of 2", `document.querySelectorAll('tr.entry').length === 3`)
	first := b.keys()
	b.click("#page-next")
	b.until("page 2", `document.getElementById('page-number')?.textContent === 'Page 2' && document.querySelectorAll('tr.entry').length === 1`)
	assert.ElementsMatch(t, []string{"find-me", "also-1", "also-2", "refused"}, append(first, b.keys()...))
	b.screenshot("all-transactions")
	assert.Empty(t, b.Problems())
}

// checkClipped: a list's long text (an error, a hint) is cut by the width the table leaves it,
// not after a few words: on a wide page (newBrowser's 1440px) it shows more than 40 characters,
// or all of it, ends in an ellipsis where it is cut, and its title holds the whole text; the
// table fits the page.
func checkClipped(t *testing.T, b *browser, sel string) {
	t.Helper()
	type cell struct {
		Text     string  `json:"text"`
		Title    string  `json:"title"`
		Client   float64 `json:"client"`
		Scroll   float64 `json:"scroll"`
		Overflow string  `json:"overflow"`
		Wider    float64 `json:"wider"`
	}
	c := eval[cell](b, fmt.Sprintf(`(() => {
		const el = document.querySelector(%q);
		return {text: el.textContent, title: el.title, client: el.clientWidth, scroll: el.scrollWidth,
			overflow: getComputedStyle(el).textOverflow, wider: document.documentElement.scrollWidth - innerWidth};
	})()`, sel))
	require.Greater(t, len(c.Text), 40, "an error longer than 40 characters: %q", c.Text)
	assert.Equal(t, c.Text, c.Title, "the whole error on hover")
	assert.Equal(t, "ellipsis", c.Overflow)
	shown := len(c.Text)
	if c.Scroll > c.Client {
		shown = int(float64(len(c.Text)) * c.Client / c.Scroll)
	}
	assert.Greater(t, shown, 40, "about %d of the error's %d characters are shown (%.0fpx of %.0fpx)", shown, len(c.Text), c.Client, c.Scroll)
	assert.LessOrEqual(t, c.Wider, 0.0, "the table fits the page")
}

// TestConsoleHanging makes a hanging transaction on a kfake of the test's own: a committed
// transaction whose partition still reports it open (DescribeProducers answered as a broker
// that skipped the marker would) while Kafka's coordinator has completed it. The page shows it
// with its ids, what the log says (committed) and the repair (a COMMIT marker); run from the
// page, the repair writes the marker (WriteTxnMarkers, answered as the broker would), the
// partition closes, and the transaction's event history records it.
func TestConsoleHanging(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	e := newStore(t, envOpts{brokers: cluster.ListenAddrs()})
	e.serveOps(t, time.Second)

	r := e.post(e.opsOrder("hung"))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	tid := r.str("kafka", "transactional_id")
	pid, err := strconv.ParseInt(r.str("kafka", "producer_id"), 10, 64)
	require.NoError(t, err)
	epoch, err := strconv.ParseInt(r.str("kafka", "producer_epoch"), 10, 16)
	require.NoError(t, err)
	recs := r.get("kafka", "records").([]any)
	require.Len(t, recs, 1)
	rec := recs[0].(map[string]any)
	partition, err := strconv.ParseInt(fmt.Sprint(rec["partition"]), 10, 32)
	require.NoError(t, err)
	offset, err := strconv.ParseInt(fmt.Sprint(rec["offset"]), 10, 64)
	require.NoError(t, err)

	var repaired atomic.Bool
	var markers atomic.Int32
	describeProducers(cluster, func(topic string, p int32, sp *kmsg.DescribeProducersResponseTopicPartition) {
		if topic == e.topic && int64(p) == partition && !repaired.Load() {
			sp.ActiveProducers = append(sp.ActiveProducers, openProducer(pid, int32(epoch), offset))
		}
	})
	cluster.ControlKey(int16(kmsg.WriteTxnMarkers), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		rq := req.(*kmsg.WriteTxnMarkersRequest)
		resp := rq.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		for _, m := range rq.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, mt := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = mt.Topic
				for _, p := range mt.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition = p
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
			if m.ProducerID == pid && m.Committed {
				markers.Add(1)
				repaired.Store(true)
			}
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The scan looks only at ids no request holds: wait until the commit gave its id back.
	require.Eventually(t, func() bool { return e.svc.Kafka.Detail().Leased == 0 }, time.Minute, 20*time.Millisecond,
		"the committed request's transactional id is returned to the pool")
	require.NoError(t, e.svc.Kafka.Scan(ctx))
	require.Len(t, e.svc.Kafka.HangingTransactions(), 1, "the scan found it hanging")

	b.navigate(e.srv.URL + "/ui/#/hanging")
	row := fmt.Sprintf(`tr.entry[data-key="%s/%s/%d"] `, tid, e.topic, partition)
	b.visible(row)
	assert.Equal(t, tid, b.text(row+"td.id"))
	assert.Equal(t, fmt.Sprintf("%d · %d", pid, epoch), b.text(row+"td.producer"))
	assert.Equal(t, fmt.Sprintf("%s/%d from offset %d", e.topic, partition, offset), b.text(row+"td.where"))
	assert.Regexp(t, `^[0-9]+s$`, b.text(row+"td.age"))
	assert.NotEmpty(t, b.text(row+"td.kafka-state"))
	assert.Regexp(t, `^hung\s+committed\s+@`+strconv.FormatInt(offset, 10)+`$`, b.text(row+"td.log"), "what the log says")
	assert.Equal(t, "found", b.text(row+"td.status"))
	assert.Contains(t, b.text(row+"td.repair"), "writes the COMMIT marker")
	b.screenshot("hanging")

	// The overview links to it.
	b.setHash("#/")
	b.until("the overview's hanging count", `document.getElementById('overview-hanging')?.textContent === 'Hanging Kafka transactions: 1'`)

	b.setHash("#/hanging")
	b.click("#hanging-run")
	b.until("the repair", `document.querySelector('#hanging-empty') !== null && document.querySelector('tr.repaired') !== null`)
	assert.Equal(t, int32(1), markers.Load(), "one COMMIT marker written")
	assert.Equal(t, "COMMIT", b.text(`tr.repaired td.marker`))
	assert.Contains(t, b.text("#hanging-repaired h2"), "(1)")
	b.screenshot("hanging-repaired")

	// The repair is in the transaction's event history.
	b.click(`tr.repaired a.txn-link`)
	b.until("the page of hung", `document.getElementById('txn-id')?.textContent === 'hung'`)
	assert.Contains(t, b.text("#events"), "repair_hanging → COMMIT marker written")
	assert.Contains(t, b.text("#events"), fmt.Sprintf("%s/%d from offset %d", e.topic, partition, offset))
	assert.Empty(t, b.Problems())
}
