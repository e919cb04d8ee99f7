package test

// The coordinator's records read back by a client we did not write: Confluent's Python client
// (confluent-kafka, its AvroDeserializer, JSONDeserializer and ProtobufDeserializer) reads what
// a read_committed consumer sees, with the writer schemas it fetches from the registry by the
// ids in the records, and test/reader/read.py prints each record; every field is compared with
// what was sent. Against the registry of schemaRegistryURL (Apicurio Registry in
// scripts/test.sh) and the real broker.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kpgtx/coordinator/service"
)

// readerPython is the Python of the venv scripts/services.sh install-pyclient made.
func readerPython(t *testing.T) string {
	t.Helper()
	if useKfake() {
		t.Skip("the Python client reads back from the real broker (scripts/test.sh's first run); this run is against kfake")
	}
	p := os.Getenv("SCHEMA_READER_PYTHON")
	if p == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("SCHEMA_READER_PYTHON is not set: CI must run scripts/test.sh, which installs Confluent's Python client (bash scripts/services.sh install-pyclient)")
		}
		t.Skip("SCHEMA_READER_PYTHON is not set: `bash scripts/services.sh install-pyclient && eval \"$(bash scripts/services.sh env)\"` installs Confluent's Python client for this test")
	}
	return p
}

// Version 1 of each subject, then version 2 with one more field: a record names version 1
// explicitly, another the latest, and each must decode with its own schema id.
const (
	rbAvroKey = `"string"`
	rbAvroV1  = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"string"},
		{"name":"total","type":"double"},
		{"name":"qty","type":"int"},
		{"name":"seq","type":"long"},
		{"name":"paid","type":"boolean"},
		{"name":"note","type":["null","string"],"default":null},
		{"name":"payload","type":"bytes"},
		{"name":"customer","type":{"type":"record","name":"Customer","fields":[
			{"name":"name","type":"string"},
			{"name":"email","type":["null","string"],"default":null}]}},
		{"name":"shipping","type":["null","Customer"],"default":null},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"attrs","type":{"type":"map","values":"long"}},
		{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
		{"name":"digest","type":{"type":"fixed","name":"Digest","size":4}}`
	rbAvroV2 = rbAvroV1 + `,
		{"name":"currency","type":"string","default":"EUR"}]}`

	rbProtoV1 = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Key { string id = 1; }
message Order {
  message Line { string sku = 1; int32 qty = 2; bytes blob = 3; }
  enum Status { NEW = 0; PAID = 1; }
  string id = 1;
  repeated Line lines = 2;
  optional string note = 3;
  int64 seq = 4;
  bytes payload = 5;
  Status status = 6;
  map<string, int32> attrs = 7;
  google.protobuf.Timestamp at = 8;
  double total = 9;
  bool paid = 10;
`
	rbProtoV2 = rbProtoV1 + "  string currency = 11;\n}\n"

	// Apicurio tells a JSON Schema from an Avro one by its content: an object schema without
	// "properties" or "$schema" is refused ("Failed to discover artifact type from content").
	rbJSONKey = `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`
	rbJSONV1  = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","required":["id","total"],
		"properties":{"id":{"type":"string"},"total":{"type":"number"},"qty":{"type":"integer"},
		"note":{"type":["string","null"]},
		"customer":{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}}},
		"lines":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer"}}}}`
	rbJSONV2 = rbJSONV1 + `,"currency":{"type":"string"}}}`
)

// readback is one record: what the request carries, and what the Python client must print.
type readback struct {
	topic          string
	key, value     any // the request's forms
	headers        any
	wantKey        any // read.py's output: JSON of the decoded key and value
	wantValue      any
	keyID, valueID int    // the schema ids the framing must carry (0: not a schema format)
	valueMessage   string // Protobuf: the message the framing's indexes name
}

func TestRecordsReadBackByConfluentPython(t *testing.T) {
	t.Parallel()
	py := readerPython(t)
	url, kind := schemaRegistryURL(t)
	t.Logf("registry: %s (%s)", url, kind)
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.SchemaRegistry.URL = url }})
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	register := func(name string, typ sr.SchemaType, texts ...string) (string, []int) {
		subject := e.prefix + "-rb-" + name
		var ids []int
		for _, text := range texts {
			ids = append(ids, registerSubject(t, cl, subject, sr.Schema{Schema: text, Type: typ}))
		}
		require.Len(t, ids, len(texts))
		if len(ids) == 2 {
			require.NotEqual(t, ids[0], ids[1], "%s: two versions, two ids", subject)
		}
		return subject, ids
	}
	avroKey, avroKeyIDs := register("avro-key", sr.TypeAvro, rbAvroKey)
	avroSubj, avroIDs := register("avro", sr.TypeAvro, rbAvroV1+"]}", rbAvroV2)
	protoSubj, protoIDs := register("proto", sr.TypeProtobuf, rbProtoV1+"}\n", rbProtoV2)
	jsonKey, jsonKeyIDs := register("json-key", sr.TypeJSON, rbJSONKey)
	jsonSubj, jsonIDs := register("json", sr.TypeJSON, rbJSONV1+"}}", rbJSONV2)

	topics := map[string]string{} // format pair -> topic
	for _, f := range []string{"avro:avro", "protobuf:protobuf", "jsonschema:jsonschema", "string:json", "bytes:bytes"} {
		topic := e.prefix + "-rb-" + strings.ReplaceAll(f, ":", "-")
		e.createTopic(topic, 2)
		topics[f] = topic
	}
	tAvro, tProto, tJSON, tPlain, tBin := topics["avro:avro"], topics["protobuf:protobuf"], topics["jsonschema:jsonschema"], topics["string:json"], topics["bytes:bytes"]
	b64s := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	bytesOut := func(b []byte) any { return map[string]any{"$bytes": b64s(b)} }

	avroOrder := func(id string) map[string]any {
		return map[string]any{"id": id, "total": 12.5, "qty": 3, "seq": int64(1) << 40, "paid": true,
			"payload":  "\u0000\u00ff\u0001", // Avro's JSON form of bytes: one code point a byte
			"customer": map[string]any{"name": "Ada", "email": map[string]any{"string": "ada@example.org"}},
			"tags":     []any{"a", "b"}, "attrs": map[string]any{"x": 1, "y": -2},
			"status": "PAID", "digest": "\u00de\u00ad\u00be\u00ef"}
	}
	avroWant := func(id string) map[string]any {
		return map[string]any{"id": id, "total": 12.5, "qty": 3, "seq": int64(1) << 40, "paid": true,
			"payload":  bytesOut([]byte{0, 0xff, 1}),
			"customer": map[string]any{"name": "Ada", "email": "ada@example.org"},
			"tags":     []any{"a", "b"}, "attrs": map[string]any{"x": 1, "y": -2},
			"status": "PAID", "digest": bytesOut([]byte{0xde, 0xad, 0xbe, 0xef})}
	}
	// Latest (version 2): a union with a value, a nested record in a union, the new field's
	// default taken.
	a1, a1w := avroOrder("a-1"), avroWant("a-1")
	a1["note"], a1w["note"] = map[string]any{"string": "gift"}, "gift"
	a1["shipping"], a1w["shipping"] = map[string]any{"shop.Customer": map[string]any{"name": "Bob", "email": nil}}, map[string]any{"name": "Bob", "email": nil}
	a1w["currency"] = "EUR"
	// Version 1 named explicitly: nulls, the optional fields left to their defaults.
	a2, a2w := avroOrder("a-2"), avroWant("a-2")
	a2["note"], a2w["note"] = nil, nil
	a2w["shipping"] = nil
	a2w["customer"] = map[string]any{"name": "Ada", "email": "ada@example.org"}
	// Latest, the new field given.
	a3, a3w := avroOrder("a-3"), avroWant("a-3")
	a3["currency"], a3w["currency"] = "CHF", "CHF"
	a3w["note"], a3w["shipping"] = nil, nil

	protoOrder := map[string]any{"id": "p-1", "seq": "1099511627776", "payload": b64s([]byte{0, 0xff}),
		"status": "PAID", "attrs": map[string]any{"x": 1}, "at": "2026-01-02T03:04:05.123Z", "total": 12.5, "paid": true,
		"note":  "gift",
		"lines": []any{map[string]any{"sku": "a", "qty": 2, "blob": b64s([]byte{7})}, map[string]any{"sku": "b"}}}
	protoOrderWant := map[string]any{"id": "p-1", "seq": "1099511627776", "payload": b64s([]byte{0, 0xff}),
		"status": "PAID", "attrs": map[string]any{"x": 1}, "at": "2026-01-02T03:04:05.123Z", "total": 12.5, "paid": true,
		"note":     "gift",
		"lines":    []any{map[string]any{"sku": "a", "qty": 2, "blob": b64s([]byte{7})}, map[string]any{"sku": "b"}},
		"currency": "CHF"}
	protoOrder["currency"] = "CHF"

	jsonOrder := map[string]any{"id": "j-1", "total": 12.5, "qty": 3, "note": nil,
		"customer": map[string]any{"name": "Ada", "tags": []any{"x"}},
		"lines":    []any{map[string]any{"sku": "a", "qty": 2}}}
	jsonOrder2 := map[string]any{"id": "j-2", "total": 0.25, "note": "n", "currency": "EUR", "lines": []any{}}

	hdrs := []any{
		map[string]any{"name": "h", "value": "first"},
		map[string]any{"name": "h", "value_b64": b64s([]byte{0x00, 0xff})},
		map[string]any{"name": "null", "value": nil},
	}
	hdrsWant := []any{[]any{"h", b64s([]byte("first"))}, []any{"h", b64s([]byte{0x00, 0xff})}, []any{"null", nil}}

	cases := []readback{
		{topic: tAvro, key: map[string]any{"type": "avro", "subject": avroKey, "data": "a-1"},
			value:   map[string]any{"type": "avro", "subject": avroSubj, "data": a1},
			wantKey: "a-1", wantValue: a1w, keyID: avroKeyIDs[0], valueID: avroIDs[1]},
		{topic: tAvro, key: map[string]any{"type": "avro", "schema_id": avroKeyIDs[0], "data": "a-2"},
			value:   map[string]any{"type": "avro", "subject": avroSubj, "version": 1, "data": a2},
			wantKey: "a-2", wantValue: a2w, keyID: avroKeyIDs[0], valueID: avroIDs[0]},
		{topic: tAvro, key: map[string]any{"type": "avro", "subject": avroKey, "data": "a-3"},
			value:   map[string]any{"type": "avro", "schema_id": avroIDs[1], "data": a3},
			wantKey: "a-3", wantValue: a3w, keyID: avroKeyIDs[0], valueID: avroIDs[1]},
		{topic: tAvro, key: map[string]any{"type": "avro", "subject": avroKey, "data": "a-tomb"}, value: nil,
			wantKey: "a-tomb", wantValue: nil, keyID: avroKeyIDs[0]},

		// Protobuf: the file's first message as the key (indexes [0], one 0 byte), the second
		// as the value, a nested message by itself (indexes [1, 0]).
		{topic: tProto, key: map[string]any{"type": "protobuf", "subject": protoSubj, "message": "shop.Key", "data": map[string]any{"id": "p-1"}},
			value:   map[string]any{"type": "protobuf", "subject": protoSubj, "message": "shop.Order", "data": protoOrder},
			wantKey: map[string]any{"id": "p-1"}, wantValue: protoOrderWant, keyID: protoIDs[1], valueID: protoIDs[1], valueMessage: "shop.Order"},
		{topic: tProto, key: map[string]any{"type": "protobuf", "subject": protoSubj, "version": 1, "message": "Key", "data": map[string]any{"id": "p-2"}},
			value: map[string]any{"type": "protobuf", "subject": protoSubj, "version": 1, "message": "Order",
				"data": map[string]any{"id": "p-2", "note": "", "status": "NEW", "seq": 0}},
			// Defaults are not on the wire, but optional's presence is: note "" stays.
			wantKey: map[string]any{"id": "p-2"}, wantValue: map[string]any{"id": "p-2", "note": ""}, keyID: protoIDs[0], valueID: protoIDs[0], valueMessage: "shop.Order"},
		{topic: tProto, key: map[string]any{"type": "protobuf", "schema_id": protoIDs[1], "message": "shop.Key", "data": map[string]any{"id": "p-3"}},
			value:   map[string]any{"type": "protobuf", "schema_id": protoIDs[1], "message": "shop.Order.Line", "data": map[string]any{"sku": "z", "qty": -1}},
			wantKey: map[string]any{"id": "p-3"}, wantValue: map[string]any{"sku": "z", "qty": -1}, keyID: protoIDs[1], valueID: protoIDs[1], valueMessage: "shop.Order.Line"},

		{topic: tJSON, key: map[string]any{"type": "jsonschema", "subject": jsonKey, "data": map[string]any{"id": "j-1"}},
			value:   map[string]any{"type": "jsonschema", "subject": jsonSubj, "version": 1, "data": jsonOrder},
			wantKey: map[string]any{"id": "j-1"}, wantValue: jsonOrder, keyID: jsonKeyIDs[0], valueID: jsonIDs[0]},
		{topic: tJSON, key: map[string]any{"type": "jsonschema", "schema_id": jsonKeyIDs[0], "data": map[string]any{"id": "j-2"}},
			value:   map[string]any{"type": "jsonschema", "subject": jsonSubj, "data": jsonOrder2},
			wantKey: map[string]any{"id": "j-2"}, wantValue: jsonOrder2, keyID: jsonKeyIDs[0], valueID: jsonIDs[1]},
		// The transactional outbox: the inserted row, a NULL column included, against the schema.
		{topic: tJSON, key: map[string]any{"type": "jsonschema", "subject": jsonKey, "from": "sql[0].rows[0]"},
			value:   map[string]any{"type": "jsonschema", "subject": jsonSubj, "from": "sql[0].rows[0]"},
			wantKey: map[string]any{"id": "rb-1", "total": 12.5, "note": nil}, wantValue: map[string]any{"id": "rb-1", "total": 12.5, "note": nil},
			keyID: jsonKeyIDs[0], valueID: jsonIDs[1]},

		{topic: tPlain, key: "k-1", value: map[string]any{"type": "json", "data": map[string]any{"a": nil, "b": []any{1, "x", true}, "c": map[string]any{"d": 1.5}}},
			headers: hdrs, wantKey: "k-1", wantValue: map[string]any{"a": nil, "b": []any{1, "x", true}, "c": map[string]any{"d": 1.5}}},
		{topic: tPlain, key: map[string]any{"type": "string", "data": "k-2"}, value: nil, wantKey: "k-2", wantValue: nil},
		{topic: tBin, key: map[string]any{"type": "binary", "data": b64s([]byte{0, 1, 0xff})}, value: map[string]any{"type": "binary", "data": b64s([]byte{0, 0, 0, 0, 1})},
			wantKey: bytesOut([]byte{0, 1, 0xff}), wantValue: bytesOut([]byte{0, 0, 0, 0, 1})},
	}

	var kafka []any
	for _, c := range cases {
		rec := map[string]any{"topic": c.topic, "key": c.key, "value": c.value}
		if c.headers != nil {
			rec["headers"] = c.headers
		}
		kafka = append(kafka, rec)
	}
	// Avro's JSON form of bytes and fixed is one code point a byte, sent as \u escapes:
	// TestRecordsAvroBytesLiteralCodePoints is the same data with the characters as written.
	r := e.post(asciiJSON(t, map[string]any{"id": "rb-1",
		"sql":   []any{map[string]any{"statement": "INSERT INTO orders (id, total) VALUES ('rb-1', 12.5) RETURNING id, total, note"}},
		"kafka": kafka}))
	require.Equal(t, 200, r.Status, "%s", r.Raw)
	landed, ok := r.get("kafka", "records").([]any)
	require.True(t, ok, "%s", r.Raw)
	require.Len(t, landed, len(cases))

	want := map[string]int{} // topic/partition/offset -> case
	counts := map[string]int{}
	for i, l := range landed {
		m := l.(map[string]any)
		want[fmt.Sprintf("%v/%v/%v", m["topic"], m["partition"], m["offset"])] = i
		counts[fmt.Sprint(m["topic"])]++
	}
	var specs []string
	for f, topic := range topics {
		specs = append(specs, fmt.Sprintf("%s:%s:%d", topic, f, counts[topic]))
	}
	sort.Strings(specs)
	lines := runReader(t, py, url, e.brokers, specs)

	seen := map[int]bool{}
	for _, line := range lines {
		where := fmt.Sprintf("%v/%v/%v", line["topic"], line["partition"], line["offset"])
		i, ok := want[where]
		if !assert.True(t, ok, "read.py printed a record the request did not send: %v", line) {
			continue
		}
		seen[i] = true
		c := cases[i]
		name := fmt.Sprintf("kafka[%d] (%s)", i, where)
		if !assert.Nil(t, line["error"], "%s: Confluent's client could not read it", name) {
			continue
		}
		compareJSON(t, name+".key", c.wantKey, line["key"])
		compareJSON(t, name+".value", c.wantValue, line["value"])
		if c.keyID != 0 {
			compareJSON(t, name+".key_schema_id", c.keyID, line["key_schema_id"])
		}
		if c.valueID != 0 {
			compareJSON(t, name+".value_schema_id", c.valueID, line["value_schema_id"])
		}
		if c.valueMessage != "" {
			compareJSON(t, name+".value_message", c.valueMessage, line["value_message"])
		}
		wantHeaders := c.headersWant(hdrsWant)
		compareJSON(t, name+".headers", wantHeaders, line["headers"])
	}
	for i := range cases {
		assert.True(t, seen[i], "kafka[%d] was not read back by Confluent's client", i)
	}
}

// Avro's JSON encoding of bytes and fixed maps each code point U+0000..U+00FF to one byte,
// however the JSON writes the character: "\u00ff" and "ÿ" are the same string. goavro's
// textual decoder alone takes a character written as itself as its UTF-8 bytes (ÿ would become
// c3 bf); registry/avro.go reads the code points first, and Confluent's reader must get one byte
// per character.
func TestRecordsAvroBytesLiteralCodePoints(t *testing.T) {
	t.Parallel()
	py := readerPython(t)
	url, _ := schemaRegistryURL(t)
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.SchemaRegistry.URL = url }})
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	subject := e.prefix + "-rb-bytes"
	registerSubject(t, cl, subject, sr.Schema{Type: sr.TypeAvro,
		Schema: `{"type":"record","name":"B","fields":[{"name":"b","type":"bytes"},{"name":"f","type":{"type":"fixed","name":"F","size":2}}]}`})
	r := e.post(map[string]any{"kafka": []any{map[string]any{"topic": e.topic, "partition": 0,
		"value": map[string]any{"type": "avro", "subject": subject, "data": map[string]any{"b": "\u00de\u00ff", "f": "\u00e9A"}}}}})
	require.Equal(t, 200, r.Status, "%s", r.Raw)
	lines := runReader(t, py, url, e.brokers, []string{e.topic + ":bytes:avro:1"})
	require.Len(t, lines, 1)
	compareJSON(t, "value", map[string]any{"b": map[string]any{"$bytes": "3v8="}, "f": map[string]any{"$bytes": "6UE="}}, lines[0]["value"])
}

// asciiJSON is v as JSON with every character above U+007F written as a \u escape (Go's
// encoder writes them as UTF-8).
func asciiJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var b strings.Builder
	for _, r := range string(raw) {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			r -= 0x10000
			fmt.Fprintf(&b, "\\u%04x\\u%04x", 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		}
	}
	return []byte(b.String())
}

func (c readback) headersWant(listed []any) []any {
	if c.headers == nil {
		return []any{}
	}
	return listed
}

// runReader runs test/reader/read.py and returns its lines, each a JSON object.
func runReader(t *testing.T, py, registryURL string, brokers []string, specs []string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	script, err := filepath.Abs(filepath.Join("reader", "read.py"))
	require.NoError(t, err)
	args := append([]string{"-W", "ignore", script, "--bootstrap", strings.Join(brokers, ","),
		"--registry", registryURL, "--timeout", "90"}, specs...)
	cmd := exec.CommandContext(ctx, py, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("read.py %s: %s", strings.Join(specs, " "), time.Since(start).Round(time.Millisecond))
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Logf("read.py stderr:\n%s", s)
	}
	require.NoError(t, err, "read.py; stdout:\n%s", stdout.String())
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(l))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&m), "read.py line %q", l)
		t.Logf("read back: %s", l)
		out = append(out, m)
	}
	return out
}

// compareJSON compares want (Go values) with got (decoded with UseNumber) field by field, each
// difference reported with its path.
func compareJSON(t *testing.T, path string, want, got any) {
	t.Helper()
	raw, err := json.Marshal(want)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var w any
	require.NoError(t, dec.Decode(&w))
	for _, d := range jsonDiff(path, w, got) {
		t.Error(d)
	}
}

func jsonDiff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object %v, got %#v", path, w, got)}
		}
		var out []string
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			wv, wok := w[k]
			gv, gok := g[k]
			switch {
			case !gok:
				out = append(out, fmt.Sprintf("%s.%s: missing, want %v", path, k, wv))
			case !wok:
				out = append(out, fmt.Sprintf("%s.%s: not sent, read back as %v", path, k, gv))
			default:
				out = append(out, jsonDiff(path+"."+k, wv, gv)...)
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, w, got)}
		}
		var out []string
		for i := range w {
			out = append(out, jsonDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	case json.Number:
		g, ok := got.(json.Number)
		if ok && g == w {
			return nil
		}
		// 12.5 and 12.50, 3 and 3.0: equal as numbers.
		wf, err1 := w.Float64()
		if ok {
			if gf, err2 := g.Float64(); err1 == nil && err2 == nil && wf == gf && !strings.ContainsAny(string(w)+string(g), "eE") && len(string(w)) < 16 {
				return nil
			}
		}
		return []string{fmt.Sprintf("%s: want %s, got %#v", path, w, got)}
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: want %#v, got %#v", path, want, got)}
		}
		return nil
	}
}
