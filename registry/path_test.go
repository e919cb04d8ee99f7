package registry

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPathAt(t *testing.T) {
	for _, c := range []struct {
		name string
		data string
		at   string // the text whose first byte is the offset
		want string
	}{
		{"top-level member value", `{"id": "x"}`, `"x"`, "id"},
		{"top-level member name", `{"id": 1, "extra": 2}`, `"extra"`, "extra"},
		{"nested", `{"customer": {"id": 5}}`, `5`, "customer.id"},
		{"array item member", `{"items": [{"p": 1}, {"p": "x"}]}`, `"x"`, "items[1].p"},
		{"array item", `{"tags": ["a", 7]}`, `7`, "tags[1]"},
		{"numeric member name", `{"m": {"0": true}}`, `true`, "m.0"},
		{"top-level value", `42`, `42`, ""},
		{"multi-line", "{\n  \"a\": {\n    \"b\": null\n  }\n}", `null`, "a.b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			off := strings.Index(c.data, c.at)
			require.GreaterOrEqual(t, off, 0)
			require.Equal(t, c.want, pathAt([]byte(c.data), off))
		})
	}
}

func TestOffsetOf(t *testing.T) {
	data := []byte("{\n  \"é\": \"x\"\n}")
	// Line 2, column 8 (runes): the opening quote of "x".
	require.Equal(t, strings.Index(string(data), `"x"`), offsetOf(data, 2, 8))
	require.Equal(t, len(data), offsetOf(data, 9, 1))
}

func TestAvroPaths(t *testing.T) {
	bin := `cannot encode binary record "shop.v1.Order" field "items": value does not match its schema: ` +
		`cannot encode binary array item 2: map[price:x]: cannot encode binary record "shop.v1.Item" field "price": ` +
		`value does not match its schema: cannot encode binary double: expected: Go numeric; received: string`
	require.Equal(t, "items[1].price", avroBinaryPath(bin))
	require.Equal(t, "double: expected: a number; received: a string", avroReason(bin))

	text := `cannot decode textual record "shop.v1.Order": cannot decode textual record "shop.v1.Customer": ` +
		`cannot decode textual map: cannot determine codec: "age" for key: "customer"`
	require.Equal(t, "customer.age", avroTextualPath(text))
	require.Equal(t, `field "age" is not in the schema`, avroReason(text))
}
