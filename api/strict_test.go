package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkJSON's answers at the level of the tokenizer: malformed and truncated bodies, trailing
// data, and what stays accepted (invalid UTF-8, which encoding/json replaces; escapes; white
// space). test.TestStrictDecoding covers the field rules through the API.
func TestCheckJSON(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[txntype.RequestBody]()
	cases := []struct {
		name   string
		body   string
		field  string // "" when accepted
		reason string // a part of the reason
	}{
		{"the bench body", benchBody, "", ""},
		{"white space around", " \n\t{ \"id\" : \"a\" }\r\n", "", ""},
		{"escaped characters", `{"id":"a\"b\\c\u00e9\ud83d\ude00"}`, "", ""},
		{"invalid UTF-8 in a string", "{\"id\":\"a\xffb\"}", "", ""},
		{"numbers of every form as arguments", `{"sql":[{"statement":"SELECT 1","args":[0,-1,1.5,1e3,-2.5E-3,null,true,{"a":[1]}]}]}`, "", ""},
		{"truncated", `{"sql": [`, "body", "unexpected end"},
		{"truncated in a string", `{"id":"ab`, "body", "unexpected end"},
		{"trailing comma", `{"id":"a",}`, "body", "malformed JSON at byte"},
		{"missing colon", `{"id" "a"}`, "body", "malformed JSON at byte"},
		{"single quotes", `{'id':'a'}`, "body", "malformed JSON at byte"},
		{"a leading zero", `{"timeout_ms":0100}`, "body", "malformed JSON at byte"},
		{"a raw control character", "{\"id\":\"a\x01\"}", "body", "malformed JSON at byte"},
		{"a bad escape", `{"id":"a\x"}`, "body", "malformed JSON at byte"},
		{"trailing data", `{"id":"a"} {}`, "body", "unexpected data after"},
		{"trailing garbage", `{"id":"a"}x`, "body", "unexpected data after"},
		{"not an object", `[1]`, "body", "must be an object, not an array"},
		{"a string for a list", `{"sql":"SELECT 1"}`, "sql", "must be an array, not a string"},
		{"a boolean for a string", `{"id":true}`, "id", "must be a string, not a boolean"},
		{"a number with an exponent for an integer", `{"timeout_ms":1e3}`, "timeout_ms", "without fraction or exponent"},
		{"an escaped NUL in a key", `{"sql":[{"statement":"SELECT 1","args":[{"a\u0000":1}]}]}`, "sql[0].args[0]", "NUL"},
		{"an escaped NUL in an argument", `{"sql":[{"statement":"SELECT 1","args":["\u0000"]}]}`, "sql[0].args[0]", "NUL"},
		{"a duplicate key in an argument", `{"sql":[{"statement":"SELECT 1","args":[{"a":1,"a":2}]}]}`, `sql[0].args[0]["a"]`, "duplicate key"},
		{"an escaped duplicate key", `{"id":"a","\u0069d":"b"}`, "id", "duplicate key"},
		// An object's keys are held in a small array up to 8, then in a map (keySet).
		{"twelve distinct keys", `{"sql":[{"statement":"SELECT 1","args":[` + argObject(12) + `}]}]}`, "", ""},
		{"a duplicate of the third key after twelve", `{"sql":[{"statement":"SELECT 1","args":[` + argObject(12) + `,"k2":0}]}]}`, `sql[0].args[0]["k2"]`, "duplicate key"},
		{"a duplicate of the ninth key after twelve", `{"sql":[{"statement":"SELECT 1","args":[` + argObject(12) + `,"k8":0}]}]}`, `sql[0].args[0]["k8"]`, "duplicate key"},
		{"a duplicate of the eighth key as the ninth", `{"sql":[{"statement":"SELECT 1","args":[` + argObject(8) + `,"k7":0}]}]}`, `sql[0].args[0]["k7"]`, "duplicate key"},
		// A typed payload's data is any JSON value, null included, at any depth.
		{"null as data", `{"kafka":[{"topic":"t","value":{"type":"json","data":null}}]}`, "", ""},
		{"null in data's object", `{"kafka":[{"topic":"t","value":{"type":"json","data":{"a":null}}}]}`, "", ""},
		{"null deep in data", `{"kafka":[{"topic":"t","value":{"type":"avro","schema_id":1,"data":{"a":[{"b":{"c":null}},null]}}}]}`, "", ""},
		{"null as a key's data", `{"kafka":[{"topic":"t","key":{"type":"jsonschema","subject":"s","data":null}}]}`, "", ""},
		{"NUL in data's keys and strings", `{"kafka":[{"topic":"t","value":{"type":"json","data":{"a\u0000":"b\u0000"}}}]}`, "", ""},
		{"numbers in data as written", `{"kafka":[{"topic":"t","value":{"type":"json","data":[12345678901234567890,1.10,1e400,-0]}}]}`, "", ""},
		{"data nested 128 levels", `{"kafka":[{"topic":"t","value":{"type":"json","data":` + strings.Repeat("[", 128) + strings.Repeat("]", 128) + `}}]}`, "", ""},
		{"data nested 129 levels", `{"kafka":[{"topic":"t","value":{"type":"json","data":` + strings.Repeat(`{"a":`, 129) + "1" + strings.Repeat("}", 129) + `}}]}`,
			"kafka[0].value.data" + strings.Repeat(`["a"]`, 128), "nested deeper than 128 levels"},
		{"a duplicate key in data", `{"kafka":[{"topic":"t","value":{"type":"json","data":[{"a":1,"a":null}]}}]}`, `kafka[0].value.data[0]["a"]`, "duplicate key"},
		{"null for a payload's type", `{"kafka":[{"topic":"t","value":{"type":null,"data":1}}]}`, "kafka[0].value.type", "must be a string, not null"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkJSON([]byte(tc.body), typ)
			if tc.field == "" {
				require.NoError(t, err)
				var v txntype.RequestBody
				dec := json.NewDecoder(bytes.NewReader([]byte(tc.body)))
				dec.UseNumber()
				require.NoError(t, dec.Decode(&v), "what the walk accepts, encoding/json decodes")
				return
			}
			var inv *txntype.InvalidError
			require.True(t, errors.As(err, &inv), "%v", err)
			assert.Equal(t, tc.field, inv.Field)
			assert.Contains(t, inv.Reason, tc.reason)
		})
	}
}

// FuzzCheckJSON: the walk accepts only what encoding/json accepts as one JSON value (it is the
// stricter of the two), and it never panics.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{benchBody, `{"id":"a"}`, `{"sql":[{"statement":"x","args":[1,"2",null,[{}]]}]}`,
		`{"kafka":[{"topic":"t","headers":{"a":"b"},"partition":3}]}`, `{"id":"a"} `, `{"timeout_ms":5000}`} {
		f.Add([]byte(s))
	}
	typ := reflect.TypeFor[txntype.RequestBody]()
	f.Fuzz(func(t *testing.T, body []byte) {
		if checkJSON(body, typ) != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("the walk accepted what is not JSON: %q", body)
		}
		var v txntype.RequestBody
		if err := decodeV1(body, &v); err != nil && !strings.Contains(err.Error(), "invalid UTF-8") {
			t.Fatalf("the walk accepted %q, encoding/json refused it: %v", body, err)
		}
	})
}

// argObject is the start of a JSON object with n keys k0…k(n-1), without its closing brace.
func argObject(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	return b.String()
}
