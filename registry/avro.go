package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/linkedin/goavro/v2"
)

// avroSchema encodes with github.com/linkedin/goavro/v2. goavro reads Avro's own JSON
// encoding (NativeFromTextual: unions as {"type": value}, bytes as code points), which is the
// form Confluent's REST Proxy takes for Avro data, and turns it into Avro binary; hamba/avro
// has no reader for that encoding and would need a Go value shaped like the schema.
type avroSchema struct {
	codec *goavro.Codec
	nums  *avroNumbers // the numbers' check (avronumbers.go)
}

// compileAvro compiles text, with the named types it uses from the schemas it references
// (deps) inlined (avrorefs.go).
func compileAvro(text string, deps []dep) (*avroSchema, error) {
	if len(deps) > 0 {
		var err error
		if text, err = composeAvro(text, deps); err != nil {
			return nil, err
		}
	}
	nums := newAvroNumbers(text)
	if nums != nil && nums.strip {
		var err error
		if text, err = stripLogical(text); err != nil {
			return nil, err
		}
	}
	c, err := newCodec(text)
	if err != nil {
		return nil, err
	}
	return &avroSchema{codec: c, nums: nums}, nil
}

// newCodec is goavro.NewCodec, with a panic on a schema it does not expect (a type
// assertion on an attribute it assumed present, as it makes on a second decimal without a
// scale) an error: a schema from the registry must not take the process down.
func newCodec(text string) (c *goavro.Codec, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("goavro cannot compile the schema: %v", r)
		}
	}()
	return goavro.NewCodec(text)
}

// before says whether the data is checked before goavro reads it: goavro takes null for a
// float or a double (as NaN) and 1e999 (as +Inf), and a logical type's convenient forms
// are Avro's JSON only once prepared.
func (a *avroSchema) before() bool {
	return a.nums != nil && (a.nums.floats || a.nums.logical)
}

func (a *avroSchema) encode(data []byte) ([]byte, error) {
	if a.before() {
		var err error
		if data, err = a.nums.prepare(data); err != nil {
			return nil, err
		}
	}
	native, rest, err := a.codec.NativeFromTextual(data)
	if err != nil {
		if a.nums != nil && !a.before() {
			if nerr := a.nums.check(data); nerr != nil {
				return nil, nerr // a number, named with its field
			}
		}
		return nil, a.mismatch(data, err)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, &MismatchError{Reason: "more than one JSON value"}
	}
	payload, err := a.codec.BinaryFromNative(nil, native)
	if err != nil {
		// The value decoded, so it fits the schema; goavro refusing it now is still the
		// data's fault (e.g. an enum symbol checked only when encoding).
		return nil, &MismatchError{Path: avroBinaryPath(err.Error()), Reason: avroReason(err.Error())}
	}
	return payload, nil
}

func (a *avroSchema) decode(payload []byte) ([]byte, error) {
	native, rest, err := a.codec.NativeFromBinary(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: avro payload: %v", ErrMismatch, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: avro payload: %d bytes after the value", ErrMismatch, len(rest))
	}
	return a.codec.TextualFromNative(nil, native)
}

// mismatch names the field a textual decode failed at. goavro's textual errors name the
// object keys from the inside out ("... for key: "price" for key: "items"") but not array
// positions; its binary encoder names record fields and array items from the outside in.
// So the data is also tried, as plain JSON, against the binary encoder: when that fails too
// its path (with array positions) is used, else the keys of the textual error.
func (a *avroSchema) mismatch(data []byte, terr error) error {
	reason := avroReason(terr.Error())
	v, err := avroProbe(data)
	if err != nil {
		return &MismatchError{Reason: "not JSON: " + reason}
	}
	if _, berr := a.codec.BinaryFromNative(nil, v); berr != nil {
		if p := avroBinaryPath(berr.Error()); p != "" {
			return &MismatchError{Path: p, Reason: avroReason(berr.Error())}
		}
	}
	return &MismatchError{Path: avroTextualPath(terr.Error()), Reason: reason}
}

// avroProbe reads data for the binary encoder's probe, its numbers as written
// (json.Decoder.UseNumber): an integer that fits an int64 as one, any other number as the
// float64 nearest it (the numbers' check has refused those a type cannot take).
func avroProbe(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return probeNumbers(v), nil
}

func probeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case string:
		// Bytes and fixed are strings of code points: their bytes, for the binary encoder
		// (which would take a code point beyond 0x7F as its UTF-8 bytes).
		latin, wide := make([]byte, 0, len(x)), false
		for _, r := range x {
			if r > 0xFF {
				return x
			}
			wide = wide || r >= utf8.RuneSelf
			latin = append(latin, byte(r))
		}
		if wide {
			return string(latin)
		}
	case []any:
		for i := range x {
			x[i] = probeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = probeNumbers(x[k])
		}
	}
	return v
}

var (
	avroSegment = regexp.MustCompile(`record "[^"]*" field "([^"]*)"|array item (\d+)|map value for key "([^"]*)"`)
	avroForKey  = regexp.MustCompile(` for key: "([^"]*)"`)
	avroUnknown = regexp.MustCompile(`cannot determine codec: "([^"]*)"`)
)

// avroBinaryPath reads the path out of a goavro binary-encoding error chain.
func avroBinaryPath(msg string) string {
	var b strings.Builder
	for _, m := range avroSegment.FindAllStringSubmatch(msg, -1) {
		switch {
		case m[1] != "":
			appendField(&b, m[1])
		case m[2] != "":
			n, _ := strconv.Atoi(m[2])
			fmt.Fprintf(&b, "[%d]", n-1) // goavro counts items from 1
		case m[3] != "":
			appendField(&b, m[3])
		}
	}
	return b.String()
}

// avroTextualPath reads the keys out of a goavro textual-decoding error chain.
func avroTextualPath(msg string) string {
	keys := avroForKey.FindAllStringSubmatch(msg, -1)
	var b strings.Builder
	for i := len(keys) - 1; i >= 0; i-- {
		appendField(&b, keys[i][1])
	}
	if m := avroUnknown.FindStringSubmatch(msg); m != nil {
		appendField(&b, m[1])
	}
	return b.String()
}

// avroReason keeps the innermost part of a goavro error chain, the part that says what is
// wrong, without the " for key" trail.
func avroReason(msg string) string {
	msg = avroForKey.ReplaceAllString(msg, "")
	if m := avroUnknown.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("field %q is not in the schema", m[1])
	}
	if strings.Contains(msg, avroNoDefault) {
		return "missing, and the schema gives it no default"
	}
	if i := strings.LastIndex(msg, "cannot "); i > 0 {
		msg = msg[i:]
	}
	// The binary encoder speaks of the Go types JSON decodes into.
	return avroWords.Replace(msg)
}

// avroWords turns the Go types of goavro's binary errors into JSON's words.
var avroWords = strings.NewReplacer(
	"cannot encode binary ", "", "cannot decode textual ", "",
	"Go numeric", "a number", "Go bool", "a boolean", "Go nil", "null",
	"received: float64", "received: a number", "received: int64", "received: a number", "received: string", "received: a string",
	"received: bool", "received: a boolean", "received: map[string]interface {}", "received: an object",
	"received: []interface {}", "received: an array", "received: <nil>", "received: null",
	"bytes: expected: string", "string: expected: a string",
)

const avroNoDefault = "schema does not specify default value and no value provided"

func appendField(b *strings.Builder, name string) {
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(name)
}
