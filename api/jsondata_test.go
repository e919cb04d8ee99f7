package api

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/require"
)

// jsonRecordValue sends data as a json-typed value (and key) through the API's decode path
// (the strict walk, encoding/json, the request's validation, which builds the record) and
// returns the bytes of the record's key and value, or the 400.
func jsonRecordValue(t *testing.T, data string) (key, value []byte, err error) {
	t.Helper()
	s := &Server{cfg: Config{MaxBodyBytes: 8 << 20}}
	body := `{"kafka":[{"topic":"t","key":{"type":"json","data":` + data + `},"value":{"type":"JSON","data":` + data + `}}]}`
	r := httptest.NewRequest("POST", "/v1/transactions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	req, err := s.decode(httptest.NewRecorder(), r)
	if err != nil {
		return nil, nil, err
	}
	if err := req.Validate(txntype.Limits{}, func(string) bool { return true }); err != nil {
		return nil, nil, err
	}
	k, ok := req.Kafka[0].Key.Resolved()
	require.True(t, ok, "a json key is resolved once validated")
	v, ok := req.Kafka[0].Value.Resolved()
	require.True(t, ok, "a json value is resolved once validated")
	return k, v, nil
}

// The record's bytes for type json are data's JSON text as written, white space between
// tokens dropped: nulls, numbers (beyond 2^53, trailing zeros, beyond float64), escapes and
// characters all as they were sent.
func TestJSONDataExamples(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":[`, 64) + "null" + strings.Repeat("]}", 64) // 128 levels
	long := strings.Repeat("é☃😀x", 50000)
	cases := []struct {
		name, data, want string
	}{
		{"null in an object", `{"a":null}`, `{"a":null}`},
		{"null itself", `null`, `null`},
		{"nulls at depth", `{"a":[null,{"b":{"c":null}}],"d":null}`, `{"a":[null,{"b":{"c":null}}],"d":null}`},
		{"an integer beyond 2^53", `12345678901234567890`, `12345678901234567890`},
		{"an integer beyond int64, in an object", `{"n":123456789012345678901234567890}`, `{"n":123456789012345678901234567890}`},
		{"a decimal's trailing zero", `1.10`, `1.10`},
		{"beyond float64", `[1e400,-1e400,1E+999]`, `[1e400,-1e400,1E+999]`},
		{"below float64's precision", `0.1000000000000000055511151231257827`, `0.1000000000000000055511151231257827`},
		{"negative zero", `[-0,-0.0,0e0]`, `[-0,-0.0,0e0]`},
		{"white space dropped", " { \"a\" :\t[ 1 ,\n2 ] , \"b\" : { } }\r\n", `{"a":[1,2],"b":{}}`},
		{"empty object and array", `{"o":{},"a":[],"n":[[],[{}]]}`, `{"o":{},"a":[],"n":[[],[{}]]}`},
		{"a surrogate pair escaped", `"\ud83d\ude00"`, `"\ud83d\ude00"`},
		{"an astral character raw", `"😀"`, `"😀"`},
		{"escapes kept", `"a\"b\\c\/d\b\f\n\r\t\u00e9\u2028"`, `"a\"b\\c\/d\b\f\n\r\t\u00e9\u2028"`},
		{"HTML characters not escaped", `"<a href='x'>&</a>"`, `"<a href='x'>&</a>"`},
		{"U+2028 raw", "\"a\u2028b\"", "\"a\u2028b\""},
		{"NUL escaped, in a key too", `{"a\u0000":"\u0000"}`, `{"a\u0000":"\u0000"}`},
		{"key order as written", `{"z":1,"a":2,"m":3}`, `{"z":1,"a":2,"m":3}`},
		{"a long string", `"` + long + `"`, `"` + long + `"`},
		{"nested 128 levels", deep, deep},
		{"scalars", `[true,false,"",0]`, `[true,false,"",0]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, v, err := jsonRecordValue(t, tc.data)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(v))
			require.Equal(t, tc.want, string(k))
		})
	}

	refused := []struct {
		name, data, field, reason string
	}{
		{"nested 129 levels", `[` + deep + `]`, "kafka[0].key.data[0]" + strings.Repeat(`["a"][0]`, 63) + `["a"]`, "nested deeper than 128 levels"},
		{"a duplicate key", `{"a":{"b":null,"b":null}}`, `kafka[0].key.data["a"]["b"]`, "duplicate key"},
		{"a duplicate key, escaped", `{"a":1,"\u0061":2}`, `kafka[0].key.data["a"]`, "duplicate key"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := jsonRecordValue(t, tc.data)
			var inv *txntype.InvalidError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, tc.field, inv.Field)
			require.Contains(t, inv.Reason, tc.reason)
		})
	}
}

// Generated JSON documents come out of the API's decode path as the record's exact bytes:
// the generator writes each document twice, as sent (white space between tokens, at random)
// and as the record must carry it (the same tokens, byte for byte, without the white space).
// The seed is fixed: a failure names the document's number, and reproduces.
func TestJSONDataProperty(t *testing.T) {
	t.Parallel()
	n := 1500
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewPCG(20260501, 7))
	for i := range n {
		var g jsonGen
		g.rng = rng
		g.value(0)
		sent, want := g.sent.String(), g.want.String()
		require.True(t, json.Valid([]byte(sent)), "document %d is not JSON: %s", i, sent)
		k, v, err := jsonRecordValue(t, sent)
		require.NoError(t, err, "document %d: %s", i, sent)
		if string(v) != want || string(k) != want {
			t.Fatalf("document %d changed on its way to the record:\nsent   %s\nwant   %s\nvalue  %s\nkey    %s", i, sent, want, v, k)
		}
	}
}

// jsonGen writes one random JSON document: nulls, booleans, numbers of every form (beyond 2^53,
// beyond float64, trailing zeros, exponents, negative zero), strings of every kind (escapes,
// \u escapes, surrogate pairs escaped and raw, NUL, U+2028, long), empty and deep objects and
// arrays with distinct keys.
type jsonGen struct {
	rng        *rand.Rand
	sent, want strings.Builder
}

// maxGenDepth stays within the walk's bound on data (128 levels).
const maxGenDepth = 40

func (g *jsonGen) tok(s string) {
	g.sent.WriteString(s)
	g.want.WriteString(s)
}

// space writes white space between tokens into what is sent only.
func (g *jsonGen) space() {
	if g.rng.IntN(4) != 0 {
		return
	}
	for range 1 + g.rng.IntN(3) {
		g.sent.WriteByte(" \t\n\r"[g.rng.IntN(4)])
	}
}

func (g *jsonGen) value(depth int) {
	g.space()
	k := g.rng.IntN(10)
	if depth >= maxGenDepth && k >= 7 {
		k = g.rng.IntN(7)
	}
	// A run of nesting, now and then: a chain far deeper than random documents reach.
	if depth == 0 && g.rng.IntN(50) == 0 {
		g.chain()
		return
	}
	switch k {
	case 0:
		g.tok("null")
	case 1:
		g.tok([]string{"true", "false"}[g.rng.IntN(2)])
	case 2, 3:
		g.tok(g.number())
	case 4, 5, 6:
		g.tok(g.str())
	case 7, 8:
		g.object(depth)
	default:
		g.array(depth)
	}
	g.space()
}

// chain is nesting nearly as deep as the walk takes, with nulls along the way.
func (g *jsonGen) chain() {
	levels := 60 + g.rng.IntN(68) // objects and arrays: 2 levels each at most
	levels /= 2
	for range levels {
		g.tok(`{"k":[null,`)
	}
	g.tok(g.number())
	for range levels {
		g.tok("]}")
	}
}

func (g *jsonGen) object(depth int) {
	g.tok("{")
	seen := map[string]bool{}
	n := g.rng.IntN(6)
	if g.rng.IntN(5) == 0 {
		n = 0
	}
	first := true
	for range n {
		key := g.str()
		var decoded string
		if json.Unmarshal([]byte(key), &decoded) != nil || seen[decoded] {
			continue // keys are distinct by what they say (a duplicate is refused)
		}
		seen[decoded] = true
		if !first {
			g.tok(",")
		}
		first = false
		g.space()
		g.tok(key)
		g.space()
		g.tok(":")
		g.value(depth + 1)
	}
	g.space()
	g.tok("}")
}

func (g *jsonGen) array(depth int) {
	g.tok("[")
	n := g.rng.IntN(6)
	if g.rng.IntN(5) == 0 {
		n = 0
	}
	for i := range n {
		if i > 0 {
			g.tok(",")
		}
		g.value(depth + 1)
	}
	g.space()
	g.tok("]")
}

func (g *jsonGen) digits(n int) string {
	var b strings.Builder
	for i := range n {
		d := g.rng.IntN(10)
		if i == 0 && d == 0 && n > 1 {
			d = 1 + g.rng.IntN(9) // no leading zero
		}
		b.WriteByte(byte('0' + d))
	}
	return b.String()
}

func (g *jsonGen) number() string {
	switch g.rng.IntN(10) {
	case 0:
		return []string{"12345678901234567890", "9007199254740993", "-9223372036854775809", "18446744073709551616"}[g.rng.IntN(4)]
	case 1:
		return []string{"1e400", "-1E+999", "1.10", "-0", "-0.0", "0e0", "2.5E-3", "1e-400", "0.1000000000000000055511151231257827"}[g.rng.IntN(9)]
	}
	var b strings.Builder
	if g.rng.IntN(3) == 0 {
		b.WriteByte('-')
	}
	if g.rng.IntN(6) == 0 {
		b.WriteByte('0')
	} else {
		b.WriteString(g.digits(1 + g.rng.IntN(30)))
	}
	if g.rng.IntN(3) == 0 {
		b.WriteByte('.')
		b.WriteString(g.digits(1 + g.rng.IntN(20)))
		if g.rng.IntN(3) == 0 {
			b.WriteByte('0') // a trailing zero, kept
		}
	}
	if g.rng.IntN(4) == 0 {
		b.WriteByte("eE"[g.rng.IntN(2)])
		if s := g.rng.IntN(3); s > 0 {
			b.WriteByte("+-"[s-1])
		}
		b.WriteString(strconv.Itoa(g.rng.IntN(1000)))
	}
	return b.String()
}

// str is a JSON string literal: characters raw or escaped, every kind JSON has.
func (g *jsonGen) str() string {
	var b strings.Builder
	b.WriteByte('"')
	n := g.rng.IntN(12)
	switch g.rng.IntN(30) {
	case 0:
		n = 0
	case 1:
		n = 1000 + g.rng.IntN(20000) // a long string
	}
	for range n {
		switch g.rng.IntN(16) {
		case 0:
			b.WriteString([]string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`}[g.rng.IntN(8)])
		case 1:
			fmt.Fprintf(&b, `\u%04x`, g.rng.IntN(0x20)) // a control character (NUL too), escaped
		case 2:
			r := rune(0x20 + g.rng.IntN(0xd800-0x20)) // any BMP character below the surrogates, escaped
			if g.rng.IntN(2) == 0 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04X`, r)
			}
		case 3:
			r := rune(0x10000 + g.rng.IntN(0x10ffff-0x10000)) // astral: a surrogate pair, escaped
			hi, lo := 0xd800+((r-0x10000)>>10), 0xdc00+((r-0x10000)&0x3ff)
			fmt.Fprintf(&b, `\u%04x\u%04x`, hi, lo)
		case 4:
			b.WriteRune(rune(0x10000 + g.rng.IntN(0x10ffff-0x10000))) // astral, raw
		case 5:
			b.WriteRune([]rune{'é', '☃', '\u2028', '\u2029', '\ufeff', '\ufffd', '<', '>', '&', '\u007f'}[g.rng.IntN(10)])
		case 6:
			r := rune(0xe000 + g.rng.IntN(0xfffe-0xe000)) // BMP above the surrogates, raw
			if utf8.ValidRune(r) {
				b.WriteRune(r)
			}
		default:
			c := byte(0x20 + g.rng.IntN(0x7f-0x20)) // printable ASCII
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
