package txntype

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// legacyDigest is Digest as it was first written: the records as they are, every payload
// through Payload.MarshalJSON. Digest must give its bytes for every request, as a digest logged
// by one version is compared with a retry's by the next (a retry after an upgrade gets the
// stored outcome, not a conflict).
func legacyDigest(r *Request) []byte { return digestOf(r, r.Kafka) }

// decodeBody reads a body as the API does (numbers kept as their text).
func decodeBody(body string) (Request, error) {
	var in RequestBody
	d := json.NewDecoder(strings.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&in); err != nil {
		return Request{}, err
	}
	return in.Request()
}

// decodeRequest is decodeBody for a body the test requires to be accepted.
func decodeRequest(t testing.TB, body string) Request {
	t.Helper()
	r, err := decodeBody(body)
	require.NoError(t, err, body)
	return r
}

// digestBodies are requests whose payloads take every path of the digest's encoding, with
// the digest each had when it was first logged (legacyDigest).
var digestBodies = []struct{ name, body, golden string }{
	{"plain", `{"sql":[{"statement":"INSERT INTO t VALUES ($1, $2)","args":["a",1]}],` +
		`"kafka":[{"topic":"t","key":"k","value":"v"}]}`, "c362fee50e841e9c728ec39482cd3d62bbaba7e17c441492fed8488ebee30091"},
	{"html and controls", `{"kafka":[{"topic":"t","key":"<a&b>","value":"line\nbreak\u0001\u007f \"q\" \\"}]}`, "5c273e9429e3e2ef88ef6c4e75c65954c02c6c5d9976f1a1a5361499e61b6818"},
	{"non-ASCII", `{"kafka":[{"topic":"t","key":"é\u2028\u2029😀","value":"\ud800 lone"}]}`, "d0efa2312c820528a3e0e64155d581e979b561b912b4ac4aee339cb8f6bec719"},
	{"nulls", `{"kafka":[{"topic":"t","key":null,"value":null}]}`, "0234105ae2e1936acccb6d0354e71211206abddbd730baa6f60df08975853195"},
	{"typed", `{"kafka":[{"topic":"t","partition":2,"key":{"type":"string","data":"k<"},` +
		`"value":{"type":"json","data":{"b":[1,2.50,"<x>"],"a":null}},` +
		`"headers":{"h":"v","i":"<w>"},"timestamp":1700000000000}]}`, "11c81ba332f54a03776091e091ffd149188befd3b2a003575eeb3e1a8814dd49"},
	{"binary and schema", `{"kafka":[{"topic":"t","key":{"type":"binary","data":"AAEC"},` +
		`"value":{"type":"avro","subject":"s","version":3,"data":{"f":1}}}]}`, "4d34ea3c29683d1a15fd96df05b178cad88ef857d1c7602f5312a828217f896b"},
	{"from a result", `{"sql":[{"statement":"INSERT INTO t VALUES (1) RETURNING id"}],` +
		`"kafka":[{"topic":"t","key":{"type":"string","from":"sql[0].rows[0].id"},"value":"v"}]}`, "afcb7d9de412ddb9e798143d5c6df89456fb1edc83a818c0d1608d9ec9ce26c0"},
	{"empty lists", `{"sql":[{"statement":"SELECT 1"}],"kafka":[]}`, "f64246fc98f2e37a1c0b5f039a54c00a17bddadc1d61d47cf319b93995a631ed"},
	{"decided by its caller", `{"sql":[{"statement":"SELECT 1"}],"decision":"external","decide_within_ms":5000}`, "02ee6c79856945fd72eb6cf847fd2552f319a1c535eefca1d26b6638ec427e4b"},
}

// A request's digest never changes from one version to the next: a retry sent after an
// upgrade must match the digest its first attempt logged.
func TestDigestKeepsItsBytes(t *testing.T) {
	t.Parallel()
	for _, tt := range digestBodies {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := decodeRequest(t, tt.body)
			assert.Equal(t, tt.golden, hex.EncodeToString(r.Digest()))
			assert.Equal(t, legacyDigest(&r), r.Digest())
		})
	}
}

// A payload made in code (Text) may hold bytes no JSON body gives; they are encoded as the
// legacy encoding did (invalid UTF-8 replaced).
func TestDigestOfTextMadeInCode(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"\xff<\xfe>", "a\u2028b", "\x00\x1f\x7f", ""} {
		r := Request{Kafka: []Record{{Topic: "t", Key: Text(text), Value: Text(text + "v")}}}
		assert.Equal(t, legacyDigest(&r), r.Digest(), "%q", text)
	}
}

// FuzzDigestKeepsItsBytes: any key, value and header text gives the legacy digest.
func FuzzDigestKeepsItsBytes(f *testing.F) {
	f.Add("k", "v", false)
	f.Add("<a&b>", `line\nbreak\u0000`, true)
	f.Add("é\u2028\xff", `\ud800 \u2029`, false)
	f.Add("\u007f\\", `\"`, true)
	f.Fuzz(func(t *testing.T, key, value string, typed bool) {
		k, err := json.Marshal(key)
		require.NoError(t, err)
		v := `"` + value + `"` // as written: escapes in value are the body's own
		if !json.Valid([]byte(v)) {
			return
		}
		if typed {
			v = `{"type":"string","data":` + v + `}`
		}
		body := `{"kafka":[{"topic":"t","key":` + string(k) + `,"value":` + v + `,"headers":{"h":` + string(k) + `}}]}`
		r, err := decodeBody(body)
		if err != nil {
			return
		}
		assert.Equal(t, legacyDigest(&r), r.Digest(), body)
	})
}

// BenchmarkDigest compares Digest with legacyDigest, in the same run, on a pipeline batch's
// shape: 100 inserts and 100 records of a plain key and a 100-byte plain value.
func BenchmarkDigest(b *testing.B) {
	stmts, recs := make([]string, 100), make([]string, 100)
	for i := range 100 {
		stmts[i] = fmt.Sprintf(`{"statement":"INSERT INTO orders (id, total) VALUES ($1, $2)","args":["o-%d",%d]}`, i, i)
		recs[i] = fmt.Sprintf(`{"topic":"orders","key":"o-%d","value":"%s"}`, i, strings.Repeat("v", 100))
	}
	body := `{"sql":[` + strings.Join(stmts, ",") + `],"kafka":[` + strings.Join(recs, ",") + `]}`
	r := decodeRequest(b, body)
	for _, d := range []struct {
		name   string
		digest func(*Request) []byte
	}{{"legacy", legacyDigest}, {"digest", (*Request).Digest}} {
		b.Run(d.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d.digest(&r)
			}
		})
	}
}
