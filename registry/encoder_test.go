package registry

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kpgtx/coordinator/internal/registrytest"
)

const avroOrder = `{
  "type": "record", "name": "Order", "namespace": "shop.v1",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
      {"name": "id", "type": "string"},
      {"name": "nickname", "type": ["null", "string"], "default": null}
    ]}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
      {"name": "sku", "type": "string"},
      {"name": "price", "type": "double"},
      {"name": "qty", "type": "int"}
    ]}}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}}
  ]
}`

const avroData = `{"id": 7, "customer": {"id": "c1", "nickname": {"string": "Ann"}},
  "items": [{"sku": "a", "price": 1.5, "qty": 2}, {"sku": "b", "price": 2.25, "qty": 1}],
  "status": "PAID"}`

// The first message is not the one encoded, and Item is nested: indexes [1] and [1, 0].
const protoOrder = `syntax = "proto3";
package shop.v1;

message Envelope { string note = 1; }

message Order {
  message Item {
    string sku = 1;
    double price = 2;
    int32 qty = 3;
  }
  message Customer { string id = 1; }
  int64 id = 1;
  Customer customer = 2;
  repeated Item items = 3;
}
`

const protoData = `{"id": "7", "customer": {"id": "c1"},
  "items": [{"sku": "a", "price": 1.5, "qty": 2}, {"sku": "b", "price": 2.25, "qty": 1}]}`

const jsonSchemaOrder = `{
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "customer": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    "items": {"type": "array", "items": {"type": "object",
      "properties": {"sku": {"type": "string"}, "price": {"type": "number", "minimum": 0}},
      "required": ["price"]}}
  },
  "required": ["id"]
}`

const jsonData = `{"id": 7, "customer": {"id": "c1"},
  "items": [{"sku": "a", "price": 1.5}, {"sku": "b", "price": 2.25}]}`

// schemas registers the three test schemas on a registry.
type schemas struct {
	avroSubject, protoSubject, jsonSubject string
	avroID, protoID, jsonID                int
}

func registerAll(t *testing.T, a *admin) schemas {
	t.Helper()
	var s schemas
	s.avroSubject, s.avroID = a.register("avro", sr.TypeAvro, avroOrder)
	s.protoSubject, s.protoID = a.register("proto", sr.TypeProtobuf, protoOrder)
	s.jsonSubject, s.jsonID = a.register("json", sr.TypeJSON, jsonSchemaOrder)
	return s
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			s := registerAll(t, a)
			enc, err := New(Config{URL: tg.url})
			require.NoError(t, err)
			require.NoError(t, enc.Ping(context.Background()))

			cases := []struct {
				name     string
				format   Format
				ref      Ref
				data     string
				wantID   int
				wantIdx  []byte // the bytes after the schema id, before the payload
				wantBack string
			}{
				{"avro by id", Avro, Ref{ID: s.avroID}, avroData, s.avroID, nil, avroData},
				{"avro by subject", Avro, Ref{Subject: s.avroSubject}, avroData, s.avroID, nil, avroData},
				{"avro by version", Avro, Ref{Subject: s.avroSubject, Version: 1}, avroData, s.avroID, nil, avroData},
				{"avro default", Avro, Ref{ID: s.avroID},
					`{"id": 1, "customer": {"id": "c"}, "items": [], "status": "NEW"}`, s.avroID, nil,
					`{"id": 1, "customer": {"id": "c", "nickname": null}, "items": [], "status": "NEW"}`},
				{"protobuf nested message", Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Order"}, protoData,
					s.protoID, []byte{2, 2}, protoData},
				{"protobuf name without package", Protobuf, Ref{Subject: s.protoSubject, Message: "Order"}, protoData,
					s.protoID, []byte{2, 2}, protoData},
				{"protobuf inner message", Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Order.Item"},
					`{"sku": "z", "price": 3, "qty": 4}`, s.protoID, []byte{4, 2, 0}, `{"sku": "z", "price": 3, "qty": 4}`},
				{"protobuf first message", Protobuf, Ref{ID: s.protoID}, `{"note": "hi"}`,
					s.protoID, []byte{0}, `{"note": "hi"}`},
				{"jsonschema", JSONSchema, Ref{ID: s.jsonID}, jsonData, s.jsonID, nil, jsonData},
				{"jsonschema by subject", JSONSchema, Ref{Subject: s.jsonSubject}, jsonData, s.jsonID, nil, jsonData},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ctx := context.Background()
					b, err := enc.Encode(ctx, c.format, c.ref, []byte(c.data))
					require.NoError(t, err)
					require.GreaterOrEqual(t, len(b), 5+len(c.wantIdx))
					require.Equal(t, byte(0), b[0], "magic byte")
					require.Equal(t, uint32(c.wantID), binary.BigEndian.Uint32(b[1:5]), "schema id")
					require.Equal(t, c.wantIdx, nilIfEmpty(b[5:5+len(c.wantIdx)]), "message indexes")

					id, back, err := enc.Decode(ctx, c.format, b)
					require.NoError(t, err)
					require.Equal(t, c.wantID, id)
					requireJSONEq(t, c.wantBack, string(back))
				})
			}

			t.Run("jsonschema payload is compact", func(t *testing.T) {
				b, err := enc.Encode(context.Background(), JSONSchema, Ref{ID: s.jsonID}, []byte(" {\"id\" : 1 } "))
				require.NoError(t, err)
				require.Equal(t, `{"id":1}`, string(b[5:]))
			})
		})
	}
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func TestEncodeBadInput(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			s := registerAll(t, a)
			enc, err := New(Config{URL: tg.url})
			require.NoError(t, err)

			cases := []struct {
				name     string
				format   Format
				ref      Ref
				data     string
				want     error
				wantPath string // for ErrMismatch
			}{
				{"avro unknown id", Avro, Ref{ID: 987654321}, avroData, ErrUnknownSchema, ""},
				{"avro unknown subject", Avro, Ref{Subject: a.subject("nope")}, avroData, ErrUnknownSchema, ""},
				{"avro unknown version", Avro, Ref{Subject: s.avroSubject, Version: 99}, avroData, ErrUnknownSchema, ""},
				{"avro schema as protobuf", Protobuf, Ref{ID: s.avroID}, protoData, ErrWrongFormat, ""},
				{"avro schema as jsonschema", JSONSchema, Ref{Subject: s.avroSubject}, jsonData, ErrWrongFormat, ""},
				{"avro wrong type in array item", Avro, Ref{ID: s.avroID},
					`{"id": 7, "customer": {"id": "c1"}, "items": [{"sku": "a", "price": 1, "qty": 1}, {"sku": "b", "price": "x", "qty": 1}], "status": "NEW"}`,
					ErrMismatch, "items[1].price"},
				{"avro wrong type in nested record", Avro, Ref{ID: s.avroID},
					`{"id": 7, "customer": {"id": 5}, "items": [], "status": "NEW"}`, ErrMismatch, "customer.id"},
				{"avro missing field", Avro, Ref{ID: s.avroID},
					`{"id": 7, "items": [], "status": "NEW"}`, ErrMismatch, "customer"},
				{"avro unknown enum symbol", Avro, Ref{ID: s.avroID},
					`{"id": 7, "customer": {"id": "c"}, "items": [], "status": "LOST"}`, ErrMismatch, "status"},
				{"avro unknown field", Avro, Ref{ID: s.avroID},
					`{"id": 7, "customer": {"id": "c"}, "items": [], "status": "NEW", "extra": 1}`, ErrMismatch, "extra"},
				{"avro not JSON", Avro, Ref{ID: s.avroID}, `{"id": `, ErrMismatch, ""},
				{"protobuf unknown id", Protobuf, Ref{ID: 987654321}, protoData, ErrUnknownSchema, ""},
				{"protobuf unknown subject", Protobuf, Ref{Subject: a.subject("nope")}, protoData, ErrUnknownSchema, ""},
				{"protobuf unknown message", Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Nope"}, protoData, ErrUnknownSchema, ""},
				{"protobuf schema as avro", Avro, Ref{ID: s.protoID}, avroData, ErrWrongFormat, ""},
				{"protobuf wrong type in array item", Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Order"},
					`{"items": [{"sku": "a"}, {"price": "x"}]}`, ErrMismatch, "items[1].price"},
				{"protobuf wrong type in nested message", Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Order"},
					`{"customer": {"id": 5}}`, ErrMismatch, "customer.id"},
				{"protobuf unknown field", Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Order"},
					`{"id": "1", "customer": {"id": "c", "age": 3}}`, ErrMismatch, "customer.age"},
				{"jsonschema unknown id", JSONSchema, Ref{ID: 987654321}, jsonData, ErrUnknownSchema, ""},
				{"jsonschema unknown version", JSONSchema, Ref{Subject: s.jsonSubject, Version: 5}, jsonData, ErrUnknownSchema, ""},
				{"jsonschema schema as avro", Avro, Ref{ID: s.jsonID}, avroData, ErrWrongFormat, ""},
				{"jsonschema below minimum in array item", JSONSchema, Ref{ID: s.jsonID},
					`{"id": 1, "items": [{"price": 1}, {"price": -1}]}`, ErrMismatch, "items[1].price"},
				{"jsonschema missing required nested", JSONSchema, Ref{ID: s.jsonID},
					`{"id": 1, "customer": {}}`, ErrMismatch, "customer"},
				{"jsonschema wrong type", JSONSchema, Ref{ID: s.jsonID}, `{"id": "one"}`, ErrMismatch, "id"},
				{"jsonschema two values", JSONSchema, Ref{ID: s.jsonID}, `{"id": 1} {"id": 2}`, ErrMismatch, ""},
				{"format unknown", Format("xml"), Ref{ID: s.jsonID}, jsonData, ErrWrongFormat, ""},
				{"ref with id and subject", Avro, Ref{ID: s.avroID, Subject: s.avroSubject}, avroData, ErrUnknownSchema, ""},
				{"ref empty", Avro, Ref{}, avroData, ErrUnknownSchema, ""},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					b, err := enc.Encode(context.Background(), c.format, c.ref, []byte(c.data))
					require.ErrorIs(t, err, c.want, "got %v", err)
					require.Nil(t, b)
					if c.want == ErrMismatch {
						var me *MismatchError
						require.ErrorAs(t, err, &me)
						require.Equal(t, c.wantPath, me.Path, "reason: %s", me.Reason)
						require.NotEmpty(t, me.Reason)
					}
					t.Logf("%v", err)
				})
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	// A port that nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error_code": 50001, "message": "Error in the backend data store"}`))
	}))
	t.Cleanup(failing.Close)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`<html>a proxy's page</html>`))
	}))
	t.Cleanup(garbage.Close)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(forbidden.Close)

	for _, c := range []struct{ name, url string }{
		{"closed port", closed},
		{"5xx", failing.URL},
		{"not the registry API", garbage.URL},
		{"timeout", slow.URL},
		{"credentials refused", forbidden.URL},
	} {
		t.Run(c.name, func(t *testing.T) {
			enc, err := New(Config{URL: c.url, Timeout: 200 * time.Millisecond})
			require.NoError(t, err)
			ctx := context.Background()
			require.ErrorIs(t, enc.Ping(ctx), ErrUnavailable)
			for _, ref := range []Ref{{ID: 1}, {Subject: "orders-value"}, {Subject: "orders-value", Version: 2}} {
				_, err := enc.Encode(ctx, Avro, ref, []byte(avroData))
				require.ErrorIs(t, err, ErrUnavailable, "%s: %v", ref, err)
			}
			_, _, err = enc.Decode(ctx, Avro, []byte{0, 0, 0, 0, 1, 2})
			require.ErrorIs(t, err, ErrUnavailable)
			// Nothing about the failure is cached.
			require.Empty(t, enc.byID)
			require.Empty(t, enc.bySubver)
		})
	}
}

func TestCaching(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			a := newAdmin(t, tg.url)
			s := registerAll(t, a)
			url, requests := counting(t, tg.url)

			t.Run("one round trip per schema under concurrency", func(t *testing.T) {
				enc, err := New(Config{URL: url})
				require.NoError(t, err)
				before := requests.Load()
				var wg sync.WaitGroup
				errs := make(chan error, 64)
				for range 32 {
					wg.Add(2)
					go func() {
						defer wg.Done()
						_, err := enc.Encode(context.Background(), Avro, Ref{ID: s.avroID}, []byte(avroData))
						errs <- err
					}()
					go func() {
						defer wg.Done()
						_, err := enc.Encode(context.Background(), Protobuf, Ref{Subject: s.protoSubject, Message: "shop.v1.Order"}, []byte(protoData))
						errs <- err
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				require.Equal(t, int64(2), requests.Load()-before, "one fetch by id, one by subject")
			})

			t.Run("latest is asked again after the TTL, ids never", func(t *testing.T) {
				// CacheTTL negative: the subject's latest version is asked every time.
				enc, err := New(Config{URL: url, CacheTTL: -1})
				require.NoError(t, err)
				ctx := context.Background()
				_, err = enc.Encode(ctx, JSONSchema, Ref{Subject: s.jsonSubject}, []byte(jsonData))
				require.NoError(t, err)
				before := requests.Load()
				_, err = enc.Encode(ctx, JSONSchema, Ref{Subject: s.jsonSubject}, []byte(jsonData))
				require.NoError(t, err)
				_, err = enc.Encode(ctx, JSONSchema, Ref{Subject: s.jsonSubject, Version: 1}, []byte(jsonData))
				require.NoError(t, err)
				_, err = enc.Encode(ctx, JSONSchema, Ref{Subject: s.jsonSubject, Version: 1}, []byte(jsonData))
				require.NoError(t, err)
				_, err = enc.Encode(ctx, JSONSchema, Ref{ID: s.jsonID}, []byte(jsonData))
				require.NoError(t, err)
				require.Equal(t, int64(2), requests.Load()-before, "latest once more, version 1 once, the id none")
			})

			t.Run("a new latest version is used after the TTL", func(t *testing.T) {
				// "$schema": Apicurio tells a JSON schema without "properties" from its "$schema".
				subject, _ := a.register("evolving", sr.TypeJSON, `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`)
				enc, err := New(Config{URL: url, CacheTTL: -1})
				require.NoError(t, err)
				ctx := context.Background()
				_, err = enc.Encode(ctx, JSONSchema, Ref{Subject: subject}, []byte(`{"a": "x"}`))
				require.NoError(t, err)
				_, err = registrytest.Create(ctx, a.cl, subject, sr.Schema{Type: sr.TypeJSON,
					Schema: `{"type": "object", "properties": {"a": {"type": "integer"}}}`})
				require.NoError(t, err)
				_, err = enc.Encode(ctx, JSONSchema, Ref{Subject: subject}, []byte(`{"a": "x"}`))
				var me *MismatchError
				require.ErrorAs(t, err, &me)
				require.Equal(t, "a", me.Path)
			})
		})
	}
}

func TestDecodeBadInput(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			s := registerAll(t, newAdmin(t, tg.url))
			enc, err := New(Config{URL: tg.url})
			require.NoError(t, err)
			ctx := context.Background()
			good, err := enc.Encode(ctx, Protobuf, Ref{ID: s.protoID, Message: "shop.v1.Order"}, []byte(protoData))
			require.NoError(t, err)
			header := func(id int, rest ...byte) []byte {
				return append([]byte{0, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}, rest...)
			}
			for _, c := range []struct {
				name   string
				format Format
				b      []byte
				want   error
			}{
				{"too short", Avro, []byte{0, 0, 1}, ErrMismatch},
				{"no magic byte", Avro, []byte{1, 0, 0, 0, 1, 2}, ErrMismatch},
				{"unknown id", Avro, header(987654321, 2), ErrUnknownSchema},
				{"wrong format", Avro, good, ErrWrongFormat},
				{"message index not in the schema", Protobuf, header(s.protoID, 2, 14), ErrMismatch},
				{"protobuf payload cut", Protobuf, good[:len(good)-3], ErrMismatch},
				{"avro payload cut", Avro, header(s.avroID, 14), ErrMismatch},
				{"jsonschema payload not JSON", JSONSchema, header(s.jsonID, '{'), ErrMismatch},
			} {
				t.Run(c.name, func(t *testing.T) {
					_, _, err := enc.Decode(ctx, c.format, c.b)
					require.ErrorIs(t, err, c.want, "got %v", err)
				})
			}
		})
	}
}
