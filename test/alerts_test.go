package test

// The operators' deployment files: the Prometheus alert rules (deploy/prometheus), checked
// and unit-tested with promtool (Debian's prometheus package, installed by scripts/test.sh),
// and the Grafana dashboard (deploy/grafana); every series either names must exist on a real
// coordinator: in its /metrics, or among its registry's descriptors (a family with no sample
// yet, such as a counter before its first event, still counts).

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kpgtx/coordinator/history"
)

const (
	alertsFile     = "../deploy/prometheus/alerts.yaml"
	alertTestsFile = "../deploy/prometheus/alerts_test.yaml"
	dashboardFile  = "../deploy/grafana/kpgtx-dashboard.json"
)

// promtoolInstall is the command that provides promtool.
const promtoolInstall = "apt-get update && apt-get install -y --no-install-recommends prometheus"

func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("promtool is not installed: CI must run scripts/test.sh, which installs it (%s)", promtoolInstall)
	}
	t.Skipf("promtool is not installed: `%s` (scripts/test.sh does it) to check the alert rules", promtoolInstall)
	return ""
}

// TestAlertRulesPromtool: promtool check rules accepts the rules, and promtool test rules
// passes their unit tests (each alert fires on the series that should raise it, after its
// "for").
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	promtool := promtoolPath(t)
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", alertTestsFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		t.Logf("promtool %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	}
}

// rulesFile is the part of a Prometheus rules file the tests read.
type rulesFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// dashboard is the part of the Grafana dashboard the tests read.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Query any `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// seriesIn are the metric names an expression names: every kpgtx_* name, and any other name
// written before a selector or a range ({ or [), such as up{…}.
var (
	kpgtxName    = regexp.MustCompile(`\bkpgtx_[a-z0-9_]+`)
	selectorName = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]`)
)

func seriesIn(expr string) []string {
	names := kpgtxName.FindAllString(expr, -1)
	for _, m := range selectorName.FindAllStringSubmatch(expr, -1) {
		names = append(names, m[1])
	}
	return names
}

// prometheusOwn are series Prometheus itself makes, not the coordinator.
var prometheusOwn = []string{"up"}

// exists reports whether a series name is exported: a family's name, or a histogram's
// _bucket, _sum or _count.
func exists(families map[string]bool, name string) bool {
	if families[name] || slices.Contains(prometheusOwn, name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
			return true
		}
	}
	return false
}

func TestAlertsAndDashboardNameRealSeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	// One transaction, so that the per-outcome families have a sample as well.
	require.Equal(t, http.StatusOK, e.post(e.opsOrder("one")).Status)

	resp, err := http.Get(e.srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	scraped, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "parse /metrics")
	families := map[string]bool{}
	for name := range scraped {
		families[name] = true
	}
	for _, name := range e.svc.Metrics.Families() {
		families[name] = true
	}
	for _, name := range []string{"kpgtx_transactions_total", "kpgtx_db_connections", "kpgtx_instance_lock_held",
		"kpgtx_kafka_pool_transactional_ids", "kpgtx_kafka_hanging_transactions"} {
		require.Contains(t, scraped, name, "scraped from a running coordinator")
	}

	var rules rulesFile
	raw, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	named := map[string][]string{} // series → where
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			for _, n := range seriesIn(r.Expr) {
				named[n] = append(named[n], "alert "+r.Alert)
			}
			anchor := strings.ToLower(r.Alert)
			assert.Equal(t, "docs/runbook.md#"+anchor, r.Annotations["runbook"], "%s: its runbook entry", r.Alert)
			assert.Regexp(t, `(?m)^## `+regexp.QuoteMeta(r.Alert)+`$`, runbook(t), "%s: docs/runbook.md has its section", r.Alert)
		}
	}
	require.GreaterOrEqual(t, alerts, 7)

	var dash dashboard
	raw, err = os.ReadFile(dashboardFile)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has a query", p.Title)
		for _, tg := range p.Targets {
			for _, n := range seriesIn(tg.Expr) {
				named[n] = append(named[n], "panel "+p.Title)
			}
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok {
			for _, n := range seriesIn(q) {
				named[n] = append(named[n], "dashboard variable")
			}
		}
	}
	// The console's history is made of the same series.
	for _, n := range history.Metrics {
		named[n] = append(named[n], "the console's history (history.Metrics)")
	}

	var missing []string
	for n, where := range named {
		if !exists(families, n) {
			missing = append(missing, n+" (named by "+strings.Join(where, ", ")+")")
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "series the coordinator does not export")
}

func runbook(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "runbook.md"))
	require.NoError(t, err)
	return string(b)
}
