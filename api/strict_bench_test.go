package api

import (
	"reflect"
	"testing"
)

// benchBody is the body scripts/bench.sh sends: one insert and one 100-byte record.
const benchBody = `{"id":"bench-1","sql":[{"statement":"INSERT INTO orders (id, total) VALUES ($1, $2)","args":["bench-1",1]}],` +
	`"kafka":[{"topic":"orders","key":"bench-1","value":"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"}]}`

// BenchmarkCheckJSON is the strict walk of a request body (checkJSON), which runs before every
// request is decoded.
func BenchmarkCheckJSON(b *testing.B) {
	t := reflect.TypeFor[transactionRequest]()
	body := []byte(benchBody)
	b.ReportAllocs()
	for b.Loop() {
		if err := checkJSON(body, t); err != nil {
			b.Fatal(err)
		}
	}
}
