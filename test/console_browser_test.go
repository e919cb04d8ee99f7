package test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Browser tests drive a headless Chromium (Debian's package, installed by scripts/test.sh)
// through the DevTools protocol with chromedp.

// chromiumInstall is the command that provides the browser.
const chromiumInstall = "apt-get update && apt-get install -y chromium"

// browserZone is the browser's time zone (UTC+05:45): the console shows every time in UTC
// whatever the operator's zone, which the tests check from a zone that is not UTC.
const browserZone = "Asia/Kathmandu"

// chromiumPath finds the browser. In CI a missing browser is a failure; elsewhere the test is
// skipped with the command that installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("chromium is not installed: CI must run scripts/test.sh, which installs it (%s)", chromiumInstall)
	}
	t.Skipf("chromium is not installed: `%s` (scripts/test.sh does it) to run the browser tests", chromiumInstall)
	return ""
}

// browser is one headless Chromium with a fresh profile (one tab), used by a test or one of
// its subtests (in), and what its pages wrote to the console.
type browser struct {
	t   *testing.T
	ctx context.Context
	log *pageLog
}

// pageLog collects uncaught exceptions and errors other than failed requests.
type pageLog struct {
	mu       sync.Mutex
	problems []string
}

// in is the same browser for the subtest t: its failures stop t, not its parent.
func (b *browser) in(t *testing.T) *browser { return &browser{t: t, ctx: b.ctx, log: b.log} }

// newBrowser starts Chromium for the test and closes it at the end. The flags keep it from
// reaching out to the network on its own (the test machines have none to reach).
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	profile := t.TempDir() // removed after the browser has stopped (cleanups run last-in first-out)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1440, 1000),
		// A zone neither UTC nor a whole hour from it: a time the console shows in the
		// browser's zone instead of UTC differs from UTC in its hour and its minutes.
		chromedp.Env("TZ="+browserZone),
	)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx, log: &pageLog{}}
	require.NoError(t, chromedp.Do(ctx), "start chromium (%s)", path)
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return // the browser stopped
			}
			// A request the server refused (401, 403, 409) is logged by the browser as a
			// network error: the tests cause those on purpose. Anything else at error level
			// (a Content-Security-Policy violation among them) is a defect of the page.
			if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source != "network") {
				b.log.mu.Lock()
				b.log.problems = append(b.log.problems, fmt.Sprintf("%s %s (%s:%d)", m.Type, m.Text, m.URL, m.Line+1))
				b.log.mu.Unlock()
			}
		}
	}()
	return b
}

// Problems returns what the pages reported so far.
func (b *browser) Problems() []string {
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	return append([]string(nil), b.log.problems...)
}

// stepTimeout bounds one step against a hung page (not a speed assertion: a step that takes
// this long is stuck).
const stepTimeout = 60 * time.Second

// do runs the steps; a failure stops the test, with a screenshot of the page as it was.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	_ = browserRun(b, what, chromedp.Steps(steps...))
}

// browserRun runs one action for its value; a failure stops the test with a screenshot.
func browserRun[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.screenshot("failed")
		require.NoError(b.t, err, what)
	}
	return v
}

// visible waits until an element matching sel is visible.
func (b *browser) visible(sel string) {
	b.t.Helper()
	b.do("wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
}

// click clicks the element matching sel once it is visible.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.do("click "+sel, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
}

// text is the text of the first element matching sel, once it is visible.
func (b *browser) text(sel string) string {
	b.t.Helper()
	b.visible(sel)
	return strings.TrimSpace(browserRun(b, "read "+sel, chromedp.Text(chromedp.CSS(sel))))
}

// eval evaluates a JavaScript expression in the page (awaiting a promise) and decodes it.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	return browserRun(b, "evaluate "+js, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// texts are the texts of every element matching sel (none: empty).
func (b *browser) texts(sel string) []string {
	b.t.Helper()
	return eval[[]string](b, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map((n) => n.textContent.trim())`, sel))
}

// hasAttr reports whether the first element matching sel has the attribute.
func (b *browser) hasAttr(sel, name string) bool {
	b.t.Helper()
	b.visible(sel)
	return browserRun(b, "read "+sel+" "+name, chromedp.AttributeValue(chromedp.CSS(sel), name)).Exists
}

// navigate loads a URL in the tab.
func (b *browser) navigate(url string) {
	b.t.Helper()
	b.do("navigate to "+url, chromedp.Navigate(url))
}

// artifactsDir is where the tests keep their screenshots: $ARTIFACTS_DIR, else test/artifacts
// (ignored by git).
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = "artifacts"
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// screenshot saves the whole page as <test>-<kafka>-<name>.png in the artifacts directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	kafka := "kafka"
	if useKfake() {
		kafka = "kfake"
	}
	file := filepath.Join(artifactsDir(b.t), fmt.Sprintf("%s-%s-%s.png", strings.ReplaceAll(b.t.Name(), "/", "_"), kafka, name))
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	abs, _ := filepath.Abs(file)
	b.t.Logf("screenshot: %s", abs)
}

// crossSitePage serves, from another origin, a page whose form posts to target as soon as it
// loads, as a hostile site would (text/plain: a form may send it without a preflight).
func crossSitePage(t *testing.T, target string) string {
	t.Helper()
	page := `<!doctype html><html><body><form id="f" method="post" enctype="text/plain" action="` + target + `">` +
		`<input type="hidden" name='{"reason":"forged","x":"' value='"}'></form>` +
		`<script>document.getElementById("f").submit()</script></body></html>`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
