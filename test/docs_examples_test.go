package test

// The request examples of README.md, docs/*.md and examples/*/README.md, run as written against
// `coordinator dev`.
//
// Every fenced block that holds a request (a ```json block, or a block with a curl command) is
// marked by an HTML comment on the line before its fence, which GitHub does not render:
//
//	<!-- dev-example: 200 200 -->     run it: one answer per request, in order
//	<!-- dev-example: 409 fenced -->  an answer's status may name the error's class too
//	<!-- dev-example: fragment -->    a part of a request (a field, header entries), not run
//
// A ```json block is a request body, sent to POST /v1/transactions. A shell block is curl
// commands (-s, -X, -H, -d and the URL; nothing else), each sent as curl would send it, to
// the dev instance in place of http://127.0.0.1:8080. The blocks run in the order a reader
// meets them (README.md, then docs/ and examples/ by name), on one dev instance, after the
// request the dev banner shows: what a new user who tries the banner and then the docs sees.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docExample is one marked (or unmarked) fenced block.
type docExample struct {
	file   string
	line   int    // of the opening fence
	lang   string // the fence's info string
	body   string
	marked bool
	expect []expectedAnswer // nil for a fragment
}

type expectedAnswer struct {
	status int
	class  string // the error's class, when the marker names one
}

func (e docExample) String() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

var exampleMarker = regexp.MustCompile(`^<!--\s*dev-example:\s*(.*?)\s*-->$`)

// docExamples reads the fenced blocks of README.md, docs/*.md and examples/*/README.md that
// are request examples.
func docExamples(t *testing.T) []docExample {
	t.Helper()
	files := []string{"../README.md"}
	for _, pattern := range []string{"../docs/*.md", "../examples/*/README.md"} {
		docs, err := filepath.Glob(pattern)
		require.NoError(t, err)
		slices.Sort(docs)
		files = append(files, docs...)
	}
	var out []docExample
	for _, file := range files {
		f, err := os.Open(file)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		var (
			n          int
			prev       string // the last non-blank line before a fence
			inside     bool
			fence      string
			cur        docExample
			bodyLines  []string
			fenceIndex int
		)
		for sc.Scan() {
			n++
			line := sc.Text()
			trimmed := strings.TrimSpace(line)
			if !inside {
				if strings.HasPrefix(trimmed, "```") {
					inside = true
					fenceIndex = strings.Index(line, "```")
					fence = "```"
					cur = docExample{file: strings.TrimPrefix(file, "../"), line: n, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
					if m := exampleMarker.FindStringSubmatch(prev); m != nil {
						cur.marked = true
						cur.expect = parseMarker(t, cur, m[1])
					}
					bodyLines = nil
					continue
				}
				if trimmed != "" {
					prev = trimmed
				}
				continue
			}
			if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimPrefix(trimmed, fence)) == "" {
				inside = false
				cur.body = strings.Join(bodyLines, "\n")
				if cur.lang == "json" || strings.Contains(cur.body, "curl ") || cur.marked {
					out = append(out, cur)
				}
				prev = ""
				continue
			}
			// A fence indented in a list item: its lines carry the same indentation.
			if len(line) >= fenceIndex && strings.TrimSpace(line[:fenceIndex]) == "" {
				line = line[fenceIndex:]
			}
			bodyLines = append(bodyLines, line)
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
		require.False(t, inside, "%s: a fence that is never closed", file)
	}
	return out
}

func parseMarker(t *testing.T, e docExample, spec string) []expectedAnswer {
	t.Helper()
	if spec == "fragment" {
		return nil
	}
	var out []expectedAnswer
	for _, f := range strings.Fields(spec) {
		if status, err := strconv.Atoi(f); err == nil {
			out = append(out, expectedAnswer{status: status})
			continue
		}
		require.NotEmpty(t, out, "%s: marker %q: a class follows a status", e, spec)
		out[len(out)-1].class = f
	}
	require.NotEmpty(t, out, "%s: marker %q: want statuses (200 409 fenced …) or fragment", e, spec)
	return out
}

// curlRequest is one curl command of a shell example.
type curlRequest struct {
	method, url, body string
	headers           [][2]string
}

// shellWords splits shell text into commands of words, as sh would: single quotes literal,
// double quotes with \" \\ \$ \` escapes, a backslash before a newline joins lines, a newline
// or ; ends a command, # starts a comment.
func shellWords(text string) ([][]string, error) {
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		in    bool // a word has begun (an empty quoted word counts)
	)
	end := func() {
		if in {
			words = append(words, word.String())
		}
		word.Reset()
		in = false
	}
	endCmd := func() {
		end()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	rs := []rune(text)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\\' && i+1 < len(rs) && rs[i+1] == '\n':
			i++
		case c == '\\' && i+1 < len(rs):
			i++
			word.WriteRune(rs[i])
			in = true
		case c == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, fmt.Errorf("an unclosed single quote")
			}
			word.WriteString(string(rs[i+1 : j]))
			in = true
			i = j
		case c == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '$' || rs[j] == '`' {
					return nil, fmt.Errorf("a double-quoted string with %q: the examples take no expansions", rs[j])
				}
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("\"\\$`\n", rs[j+1]) {
					j++
					if rs[j] == '\n' {
						continue
					}
				}
				word.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, fmt.Errorf("an unclosed double quote")
			}
			in = true
			i = j
		case c == '#' && !in:
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
			endCmd()
		case c == '\n' || c == ';':
			endCmd()
		case unicode.IsSpace(c):
			end()
		case strings.ContainsRune("$`|&<>(){}", c):
			return nil, fmt.Errorf("%q: the examples are plain commands, without expansions, pipes or redirections", c)
		default:
			word.WriteRune(c)
			in = true
		}
	}
	endCmd()
	return cmds, nil
}

// parseCurl reads a curl command's options (the subset the docs use).
func parseCurl(words []string) (curlRequest, error) {
	if len(words) == 0 || words[0] != "curl" {
		return curlRequest{}, fmt.Errorf("not a curl command: %q", words)
	}
	var r curlRequest
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("%s without its value", w)
			}
			i++
			return words[i], nil
		}
		var err error
		switch w {
		case "-s", "--silent", "-S", "--show-error", "-sS":
		case "-X", "--request":
			r.method, err = arg()
		case "-H", "--header":
			var h string
			if h, err = arg(); err == nil {
				k, v, ok := strings.Cut(h, ":")
				if !ok {
					return r, fmt.Errorf("header %q", h)
				}
				r.headers = append(r.headers, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
			}
		case "-d", "--data", "--data-raw", "--data-binary":
			r.body, err = arg()
		default:
			if strings.HasPrefix(w, "-") {
				return r, fmt.Errorf("curl option %s: the test knows -s, -X, -H and -d", w)
			}
			if r.url != "" {
				return r, fmt.Errorf("two URLs: %s and %s", r.url, w)
			}
			r.url = w
		}
		if err != nil {
			return r, err
		}
	}
	if r.method == "" {
		r.method = http.MethodGet
		if r.body != "" {
			r.method = http.MethodPost
		}
	}
	if r.url == "" {
		return r, fmt.Errorf("no URL")
	}
	return r, nil
}

// devDefaultBase is the API address of `coordinator dev` without flags, the one the docs use.
const devDefaultBase = "http://127.0.0.1:8080"

// TestDocsExamples runs every request example of README.md and docs/*.md against `coordinator
// dev` and checks each answers with the status its marker documents.
func TestDocsExamples(t *testing.T) {
	t.Parallel()
	examples := docExamples(t)
	var unmarked []string
	for _, e := range examples {
		if !e.marked {
			unmarked = append(unmarked, e.String())
		}
	}
	require.Empty(t, unmarked, "request examples without a <!-- dev-example: … --> marker (docs_examples_test.go says how)")
	runnable := 0
	for _, e := range examples {
		if e.expect != nil {
			runnable++
		}
	}
	require.GreaterOrEqual(t, runnable, 4, "the README's and docs' examples were found")

	d := startDev(t)
	// First what the banner offers, as a new user would try it before the docs.
	b := parseBanner(t, d.banner)
	first := call(t, http.MethodPost, b.postURL, b.postBody)
	require.Equal(t, http.StatusOK, first.Status, "the banner's request: %s", first.Raw)

	for _, e := range examples {
		if e.expect == nil {
			continue
		}
		var reqs []curlRequest
		switch {
		case e.lang == "json":
			reqs = []curlRequest{{method: http.MethodPost, url: devDefaultBase + "/v1/transactions", body: e.body,
				headers: [][2]string{{"Content-Type", "application/json"}}}}
		default:
			cmds, err := shellWords(e.body)
			require.NoError(t, err, "%s", e)
			for _, words := range cmds {
				r, err := parseCurl(words)
				require.NoError(t, err, "%s", e)
				reqs = append(reqs, r)
			}
		}
		require.Len(t, reqs, len(e.expect), "%s: one answer in the marker per request", e)
		for i, r := range reqs {
			require.True(t, strings.HasPrefix(r.url, devDefaultBase+"/"), "%s: the URL %s is not dev mode's %s", e, r.url, devDefaultBase)
			url := d.base + strings.TrimPrefix(r.url, devDefaultBase)
			got := sendCurl(t, r, url)
			t.Logf("%s request %d: %s %s → %d %s", e, i, r.method, r.url, got.Status, got.Raw)
			want := e.expect[i]
			if assert.Equal(t, want.status, got.Status, "%s request %d (%s %s): %s", e, i, r.method, r.url, got.Raw) && want.class != "" {
				assert.Equal(t, want.class, got.str("error", "class"), "%s request %d: %s", e, i, got.Raw)
			}
		}
	}
}

// sendCurl sends what curl would for r, to url.
func sendCurl(t *testing.T, r curlRequest, url string) response {
	t.Helper()
	var rd io.Reader
	if r.body != "" {
		rd = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, url, rd)
	require.NoError(t, err)
	if r.body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // curl's default for -d
	}
	for _, h := range r.headers {
		req.Header.Set(h[0], h[1])
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := response{Status: resp.StatusCode, Raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &out.Body), "body: %s", raw)
	}
	return out
}

// TestShellWords pins down the shell subset the examples are read with.
func TestShellWords(t *testing.T) {
	t.Parallel()
	cmds, err := shellWords("curl -s -X POST http://h/x -H 'A: b' -d '{\n  \"k\": \"$1\"\n}'\ncurl -s http://h/y \\\n  -H \"C: \\\"d\\\"\" # a comment\n")
	require.NoError(t, err)
	assert.Equal(t, [][]string{
		{"curl", "-s", "-X", "POST", "http://h/x", "-H", "A: b", "-d", "{\n  \"k\": \"$1\"\n}"},
		{"curl", "-s", "http://h/y", "-H", `C: "d"`},
	}, cmds)
	for _, bad := range []string{"curl 'open", "curl $URL", "curl x | jq", `curl "$HOME"`} {
		_, err := shellWords(bad)
		assert.Error(t, err, bad)
	}
	r, err := parseCurl(cmds[0])
	require.NoError(t, err)
	assert.Equal(t, curlRequest{method: "POST", url: "http://h/x", body: "{\n  \"k\": \"$1\"\n}", headers: [][2]string{{"A", "b"}}}, r)
	r, err = parseCurl([]string{"curl", "-d", "x", "http://h"})
	require.NoError(t, err)
	assert.Equal(t, "POST", r.method)
	_, err = parseCurl([]string{"curl", "-k", "http://h"})
	assert.Error(t, err)
}
