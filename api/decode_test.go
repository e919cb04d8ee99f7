package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/require"
)

// decodeV1 is how a body was decoded before decodeOptions: encoding/json with UseNumber and
// DisallowUnknownFields, after the walk.
func decodeV1(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	return dec.Decode(v)
}

// requireDecodesAsV1 checks that a body the walk accepts decodes into T as encoding/json
// decoded it: the same values, unexported fields included (a payload's resolved bytes, a
// header's written form, which the digest reads), or an error from both.
func requireDecodesAsV1[T any](t *testing.T, body []byte) {
	t.Helper()
	if checkJSON(body, reflect.TypeFor[T]()) != nil {
		return
	}
	var was, is T
	errWas := decodeV1(body, &was)
	errIs := jsonv2.Unmarshal(body, &is, decodeOptions)
	if errWas != nil || errIs != nil {
		require.Equal(t, errWas != nil, errIs != nil, "encoding/json: %v; now: %v; body %q", errWas, errIs, body)
		return
	}
	require.True(t, reflect.DeepEqual(was, is), "body %q:\nencoding/json %#v\nnow           %#v", body, was, is)
}

// decodeCorpus are request bodies the walk accepts, each a form a field may take.
var decodeCorpus = []string{
	benchBody,
	`{"id":"a","timeout_ms":5000,"answer":"decided"}`,
	`{"id":"a","decision":"external","decide_within_ms":60000}`,
	`{"id":"a\"b\\c\u00e9\ud83d\ude00\n\t/"}`,
	"{\"id\":\"a\xffb\xc3\x28c\xed\xa0\x80d\"}",
	"{\"sql\":[{\"statement\":\"SELECT $1\xfe\",\"args\":[\"x\xff\",{\"k\xff\":\"v\xfe\"}]}]}",
	`{"sql":[{"database":"other","statement":"SELECT 1","args":[0,-1,1.5,1e3,-2.5E-3,null,true,false,"s"]}]}`,
	`{"sql":[{"statement":"SELECT 1","args":[12345678901234567890123,-0,0.000001,1E+300]}]}`,
	`{"sql":[{"statement":"SELECT 1","args":[{"a":[1,2.5,{"b":null}],"c":"d"},[[]],{}]}]}`,
	`{"sql":[{"name":"insert_order","args":["x",1]}],"kafka":[]}`,
	`{"sql":[],"kafka":[{"topic":"t","key":null,"value":null}]}`,
	`{"kafka":[{"topic":"t","partition":3,"key":"k","value":"v\u0000w\u00e9"}]}`,
	"{\"kafka\":[{\"topic\":\"t\",\"value\":\"a\xffb\"}]}",
	`{"kafka":[{"topic":"t","value":{"type":"binary","data":"AAEC/w=="}}]}`,
	`{"kafka":[{"topic":"t","value":{"type":"string","data":"text"}}]}`,
	`{"kafka":[{"topic":"t","value":{"type":"json","data":{"a":[1,2.50,null,{"b":"c"}],"n":1e400}}}]}`,
	`{"kafka":[{"topic":"t","key":{"type":"avro","schema_id":7,"data":{"f":1}},"value":{"type":"protobuf","subject":"s","version":2,"message":"M","data":{}}}]}`,
	`{"kafka":[{"topic":"t","value":{"type":"json","from":"sql[0]"}}]}`,
	`{"kafka":[{"topic":"t","headers":{"a":"b","c":"d\u0000"}}]}`,
	`{"kafka":[{"topic":"t","headers":[{"name":"a","value":"b"},{"name":"c","value_b64":"AAE="},{"name":"d","from":"sql[0].rows[0]"}]}]}`,
	`{"kafka":[{"topic":"t","headers":[{"name":"a"},{"name":"b","value":"x","value_b64":"AA=="}]}]}`,
	`{"kafka":[{"topic":"t","timestamp":1700000000000},{"topic":"t","timestamp":"2026-01-02T03:04:05.678Z"},{"topic":"t","timestamp":null}]}`,
	`{"kafka":[{"topic":"t","value":"v"}],"kafka_offsets":{"group_id":"g","generation_id":3,"member_id":"m","group_instance_id":"i",` +
		`"offsets":[{"topic":"in","partition":0,"offset":42,"metadata":"x"},{"topic":"in","partition":1,"offset":7}],"after":"prev"}}`,
	`{"kafka_offsets":{"group_id":"g","generation_id":null,"group_instance_id":null,"offsets":[]}}`,
	` {"id" : "a" } `,
}

// TestDecodeAsEncodingJSON: the decode of a body (decodeOptions) gives what encoding/json gave,
// for every form of every field and for each body type readJSON serves.
func TestDecodeAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, body := range decodeCorpus {
		require.NoError(t, checkJSON([]byte(body), reflect.TypeFor[txntype.RequestBody]()), "the corpus is of accepted bodies: %q", body)
		requireDecodesAsV1[txntype.RequestBody](t, []byte(body))
	}
	many := `{"id":"m","sql":[` + strings.Repeat(`{"statement":"INSERT INTO t VALUES ($1, $2)","args":["a",1]},`, 99) +
		`{"statement":"INSERT INTO t VALUES ($1, $2)","args":["z",2]}],"kafka":[` +
		strings.Repeat(`{"topic":"t","key":"k","value":"v"},`, 99) + `{"topic":"t","key":"k","value":"last"}]}`
	requireDecodesAsV1[txntype.RequestBody](t, []byte(many))
	for _, body := range []string{`{"outcome":"commit","reason":"checked by hand"}`, `{}`, `{"reason":"r\u00e9\xff"}`} {
		requireDecodesAsV1[adminRequest](t, []byte(body))
	}
	for _, body := range []string{`{"prepared_state":"12:3"}`, `{"prepared_state":null}`, `{}`} {
		requireDecodesAsV1[commitBody](t, []byte(body))
	}
	requireDecodesAsV1[rollbackBody](t, []byte(`{}`))
}

// FuzzDecodeAsEncodingJSON: whatever the walk accepts decodes as encoding/json decoded it.
func FuzzDecodeAsEncodingJSON(f *testing.F) {
	for _, body := range decodeCorpus {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		requireDecodesAsV1[txntype.RequestBody](t, body)
	})
}
