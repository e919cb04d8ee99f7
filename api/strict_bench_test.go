package api

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kpgtx/coordinator/txntype"
)

// benchBody is the body scripts/bench.sh sends: one insert and one 100-byte record.
const benchBody = `{"id":"bench-1","sql":[{"statement":"INSERT INTO orders (id, total) VALUES ($1, $2)","args":["bench-1",1]}],` +
	`"kafka":[{"topic":"orders","key":"bench-1","value":"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"}]}`

// BenchmarkCheckJSON is the strict walk of a request body (checkJSON), which runs before every
// request is decoded.
func BenchmarkCheckJSON(b *testing.B) {
	t := reflect.TypeFor[txntype.RequestBody]()
	body := []byte(benchBody)
	b.ReportAllocs()
	for b.Loop() {
		if err := checkJSON(body, t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRecord is a request's decoding on the coordinator (the strict walk, the decode
// and the record checks of Validate) for the bench body's 100-byte value as a plain string, as
// binary (base64) and as JSON: typed values must not slow the plain path.
func BenchmarkDecodeRecord(b *testing.B) {
	bin := make([]byte, 100)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	bodies := []struct{ name, value string }{
		{"text", `"` + strings.Repeat("v", 100) + `"`},
		{"binary", `{"type":"binary","data":"` + base64.StdEncoding.EncodeToString(bin) + `"}`},
		{"json", `{"type":"json","data":{"order":"o-1","total":10,"note":"` + strings.Repeat("n", 64) + `"}}`},
	}
	t := reflect.TypeFor[txntype.RequestBody]()
	for _, bb := range bodies {
		body := []byte(`{"id":"bench-1","sql":[{"statement":"INSERT INTO orders (id, total) VALUES ($1, $2)","args":["bench-1",1]}],` +
			`"kafka":[{"topic":"orders","key":"bench-1","value":` + bb.value + `}]}`)
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := checkJSON(body, t); err != nil {
					b.Fatal(err)
				}
				var in txntype.RequestBody
				if err := jsonv2.Unmarshal(body, &in, decodeOptions); err != nil {
					b.Fatal(err)
				}
				req := txntype.Request{ID: in.ID, SQL: in.SQL, Kafka: in.Kafka}
				if err := req.Validate(txntype.Limits{}, func(string) bool { return true }); err != nil {
					b.Fatal(err)
				}
				_ = req.Digest()
			}
		})
	}
}

// manyBody is a pipeline batch's body: 100 inserts and 100 records of 100 bytes.
func manyBody() []byte {
	var sb strings.Builder
	sb.WriteString(`{"id":"bench-1","sql":[`)
	for i := range 100 {
		fmt.Fprintf(&sb, `{"statement":"INSERT INTO orders (id, total) VALUES ($1, $2)","args":["bench-1-%d",%d]},`, i, i)
	}
	sb.WriteString(`{"statement":"SELECT 1"}],"kafka":[`)
	for i := range 100 {
		fmt.Fprintf(&sb, `{"topic":"orders","key":"bench-1-%d","value":"%s"},`, i, strings.Repeat("v", 100))
	}
	sb.WriteString(`{"topic":"orders","value":null}]}`)
	return []byte(sb.String())
}

// BenchmarkCheckJSONMany is the strict walk of a pipeline batch's body, against reading its
// tokens alone with the same tokenizer (the baseline): what the walk adds is its checks.
func BenchmarkCheckJSONMany(b *testing.B) {
	body := manyBody()
	t := reflect.TypeFor[txntype.RequestBody]()
	b.Run("tokens", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dec := jsontext.NewDecoder(bytes.NewBuffer(body))
			for {
				if _, err := dec.ReadToken(); err != nil {
					if err != io.EOF {
						b.Fatal(err)
					}
					break
				}
			}
		}
	})
	b.Run("walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkJSON(body, t); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeMany is the decode of a pipeline batch's body, 100 inserts and 100 records,
// after the walk: as encoding/json decoded it (the baseline) and with decodeOptions.
func BenchmarkDecodeMany(b *testing.B) {
	body := manyBody()
	for _, v := range []struct {
		name   string
		decode func([]byte, any) error
	}{
		{"encoding-json", decodeV1},
		{"decodeOptions", func(body []byte, v any) error { return jsonv2.Unmarshal(body, v, decodeOptions) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var in txntype.RequestBody
				if err := v.decode(body, &in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
