package registrytest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
)

func TestUnique(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   sr.Schema
		key  string // the attribute that must carry the subject; "" for Protobuf
	}{
		{"avro record", sr.Schema{Type: sr.TypeAvro, Schema: ` {"type": "record", "name": "R", "fields": []}`}, "test_subject"},
		{"avro empty object", sr.Schema{Type: sr.TypeAvro, Schema: `{ }`}, "test_subject"},
		{"json schema", sr.Schema{Type: sr.TypeJSON, Schema: `{"type": "object"}`}, "$comment"},
		{"protobuf", sr.Schema{Type: sr.TypeProtobuf, Schema: "syntax = \"proto3\";\nmessage M {}\n"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := Unique("subject-a", c.in), Unique("subject-b", c.in)
			require.NotEqual(t, a.Schema, b.Schema, "two subjects, two contents")
			if c.key == "" {
				assert.True(t, strings.HasPrefix(a.Schema, c.in.Schema), "%q", a.Schema)
				assert.True(t, strings.HasSuffix(a.Schema, "\n// subject-a\n"), "%q", a.Schema)
				return
			}
			var in, out map[string]any
			require.NoError(t, json.Unmarshal([]byte(c.in.Schema), &in))
			require.NoError(t, json.Unmarshal([]byte(a.Schema), &out), "%s", a.Schema)
			assert.Equal(t, "subject-a", out[c.key])
			delete(out, c.key)
			assert.Equal(t, in, out, "nothing else changed")
		})
	}
	for _, in := range []sr.Schema{{Type: sr.TypeAvro, Schema: `"string"`}, {Type: sr.TypeAvro, Schema: `["null", "long"]`}, {Type: sr.TypeJSON, Schema: `true`}} {
		assert.Equal(t, in, Unique("subject-a", in), "a schema that is not an object is kept: %s", in.Schema)
	}
}
