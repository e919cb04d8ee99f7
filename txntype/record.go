package txntype

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Records as Kafka carries them (docs/records.md). A key or value is a Payload: a plain JSON
// string (UTF-8 text, as it always was), null (a Kafka null; a tombstone for a value), or an
// object with a type, following Confluent REST Proxy v3's produce API:
//
//	{"type": "binary", "data": "<standard base64>"}   exactly these bytes
//	{"type": "string", "data": "text"}                 UTF-8 text
//	{"type": "json", "data": <any JSON>}               the value serialized compactly, once
//	{"type": "avro" | "protobuf" | "jsonschema", "data": <JSON>, "schema_id": N}
//	                                                   (or "subject" [+ "version"]): the
//	                                                   Confluent wire format, by the registry
//
// and, instead of "data", "from": "sql[i].rows[j]" (the row as a JSON object) or
// "sql[i].rows[j].column": a result of an earlier statement of the same request, resolved
// after that statement ran (P2). Headers are a JSON object (name → text, in the order
// written) or an ordered list of {"name", "value" | "value_b64" | "from"} entries (duplicates
// kept). A record's timestamp is RFC 3339 text or epoch milliseconds.
//
// P1: every byte a record carries is decided before anything runs, except the parts that name
// a statement's result: a malformed part is a 400 naming its field, with nothing run.
// P2: a part that names a statement's result is resolved from that statement's result in the
// same transaction, after it ran and before the record is produced; when the result is not
// there the request aborts on both sides (409 naming the record and the reference).

// PayloadType is the form of a key or value.
type PayloadType string

const (
	TypeString     PayloadType = "string"
	TypeBinary     PayloadType = "binary"
	TypeJSON       PayloadType = "json"
	TypeAvro       PayloadType = "avro"
	TypeProtobuf   PayloadType = "protobuf"
	TypeJSONSchema PayloadType = "jsonschema"
)

// Schema says whether the type is encoded against a Schema Registry schema.
func (t PayloadType) Schema() bool {
	return t == TypeAvro || t == TypeProtobuf || t == TypeJSONSchema
}

func (t PayloadType) known() bool {
	switch t {
	case TypeString, TypeBinary, TypeJSON:
		return true
	}
	return t.Schema()
}

// PayloadTypes lists the types, for errors and the API's documentation.
const PayloadTypes = "binary, string, json, avro, protobuf, jsonschema"

// Payload is a record's key or value as the request gives it, and, once resolved, the bytes
// Kafka carries.
type Payload struct {
	Type PayloadType `json:"type"`
	// Data is the JSON value as written (a string of base64 for binary, of text for string);
	// empty for a plain string, which is resolved as it is read.
	Data json.RawMessage `json:"data,omitempty"`
	// SchemaID, or Subject with an optional Version (latest without), name the schema of a
	// schema type; Message names a Protobuf message (the schema's first without).
	SchemaID *int32 `json:"schema_id,omitempty"`
	Subject  string `json:"subject,omitempty"`
	Version  *int32 `json:"version,omitempty"`
	Message  string `json:"message,omitempty"`
	// From names a statement's result the payload is built from, instead of Data (P2).
	From string `json:"from,omitempty"`

	bare     bool   // written as a plain JSON string
	resolved bool   // bytes are what Kafka carries
	bytes    []byte // the encoded payload, once resolved
}

// Text is a payload of UTF-8 text, as a plain JSON string gives it.
func Text(s string) *Payload {
	return &Payload{Type: TypeString, bare: true, resolved: true, bytes: []byte(s)}
}

// Bytes is a binary payload of exactly b.
func Bytes(b []byte) *Payload {
	raw, _ := json.Marshal(b) // standard base64
	return &Payload{Type: TypeBinary, Data: raw, resolved: true, bytes: b}
}

// UnmarshalJSON takes a plain string or a typed object; the checks that name fields are in
// Request.Validate.
func (p *Payload) UnmarshalJSON(b []byte) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) > 0 && b[0] == '"' {
		// Plain text is resolved here, decoded once: the plain path stays as cheap as it was.
		*p = Payload{Type: TypeString, bare: true, resolved: true}
		if lit := b[1 : len(b)-1]; plainLiteral(lit) {
			p.bytes = append([]byte{}, lit...)
			return nil
		}
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		p.bytes = []byte(s)
		return nil
	}
	type plain Payload
	var q plain
	if err := json.Unmarshal(b, &q); err != nil {
		return err
	}
	*p = Payload(q)
	return nil
}

// plainLiteral reports whether a JSON string literal's contents are its text as they stand: no
// escape, no control character, only ASCII (anything else is left to encoding/json, which also
// replaces invalid UTF-8 as it always did).
func plainLiteral(lit []byte) bool {
	for _, c := range lit {
		if c == '\\' || c < 0x20 || c >= 0x80 || c == '"' {
			return false
		}
	}
	return true
}

// MarshalJSON writes the payload as it was given (the idempotency digest reads it).
func (p Payload) MarshalJSON() ([]byte, error) {
	if p.bare {
		if plainLiteral(p.bytes) {
			out := make([]byte, 0, len(p.bytes)+2)
			return append(append(append(out, '"'), p.bytes...), '"'), nil
		}
		return json.Marshal(string(p.bytes))
	}
	type plain Payload
	return json.Marshal(plain(p))
}

// Resolved reports whether the payload's bytes are known, and returns them.
func (p *Payload) Resolved() ([]byte, bool) { return p.bytes, p.resolved }

// Resolve sets the bytes Kafka carries.
func (p *Payload) Resolve(b []byte) { p.bytes, p.resolved = b, true }

// NamedPart is a record's key or value, with the name the request gave it.
type NamedPart struct {
	Name    string
	Payload *Payload
}

// Parts are the record's key and value that are present.
func (r *Record) Parts() []NamedPart {
	var ps []NamedPart
	if r.Key != nil {
		ps = append(ps, NamedPart{"key", r.Key})
	}
	if r.Value != nil {
		ps = append(ps, NamedPart{"value", r.Value})
	}
	return ps
}

// Header is one record header. Value nil is a null header value.
type Header struct {
	Name  string
	Value []byte
	// From names a statement's result the value is built from (P2); Value is set once resolved.
	From string

	form headerForm // how the request wrote the value (the digest keeps it)
	raw  string     // value_b64 as written
	bad  string     // why a list entry breaks the list form's rules (Validate names it)
	done bool       // From is resolved into Value
}

// FromResult reports whether the header's value names a statement's result (P2).
func (h *Header) FromResult() bool { return h.form == headerFrom }

// Resolve sets the value built from the statement's result the header names (nil: null).
func (h *Header) Resolve(v []byte) { h.Value, h.done = v, true }

type headerForm uint8

const (
	headerText headerForm = iota // "value": text
	headerNull                   // "value": null
	headerB64                    // "value_b64"
	headerFrom                   // "from"
	headerMap                    // an entry of the object form
)

// Headers are a record's headers in order; duplicate names are kept.
type Headers []Header

// TextHeaders are headers of UTF-8 text values, in the order given (name, value, name, …).
func TextHeaders(kv ...string) Headers {
	h := make(Headers, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, Header{Name: kv[i], Value: []byte(kv[i+1])})
	}
	return h
}

// HeaderEntry is the list form of one header: {name, value | value_b64 | from} (the
// API's strict walk reads its fields by these names).
type HeaderEntry struct {
	Name     *string `json:"name"`
	Value    *string `json:"value,omitempty"`
	ValueB64 *string `json:"value_b64,omitempty"`
	From     *string `json:"from,omitempty"`
	null     bool
}

// UnmarshalJSON takes the object form (name → text, in the order written) or the list form.
// The list form's rules (a name, at most one of value, value_b64 and from) are checked by
// Request.Validate, which names the entry.
func (h *Headers) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var hs Headers
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			var v string
			if err := dec.Decode(&v); err != nil {
				return err
			}
			hs = append(hs, Header{Name: k.(string), Value: []byte(v), form: headerMap})
		}
		*h = hs
		return nil
	case json.Delim('['):
		var entries []json.RawMessage
		if err := json.Unmarshal(b, &entries); err != nil {
			return err
		}
		hs := make(Headers, 0, len(entries))
		for _, raw := range entries {
			var e HeaderEntry
			if err := json.Unmarshal(raw, &e); err != nil {
				return err
			}
			hs = append(hs, e.header(raw))
		}
		*h = hs
		return nil
	case nil:
		*h = nil
		return nil
	}
	return fmt.Errorf("headers must be an object or an array")
}

// header turns a list entry into a Header; an entry breaking the list form's rules says why,
// for Validate to name.
func (e HeaderEntry) header(raw json.RawMessage) Header {
	var h Header
	if e.Name != nil {
		h.Name = *e.Name
	}
	n := 0
	if e.Value != nil {
		n++
		h.Value, h.form = []byte(*e.Value), headerText
	} else if bytes.Contains(raw, []byte(`"value"`)) {
		// "value": null decodes to a nil pointer; the key was there.
		n++
		h.form = headerNull
	}
	if e.ValueB64 != nil {
		n++
		h.form, h.raw = headerB64, *e.ValueB64
	}
	if e.From != nil {
		n++
		h.form, h.From = headerFrom, *e.From
	}
	switch {
	case e.Name == nil:
		h.bad = "name: required"
	case n != 1:
		h.bad = "exactly one of value, value_b64 and from is required"
	}
	return h
}

// MarshalJSON writes the list form (the digest reads it; the object form is written as the
// list it is equivalent to).
func (h Headers) MarshalJSON() ([]byte, error) {
	type entry struct {
		Name     string  `json:"name"`
		Value    *string `json:"value,omitempty"`
		ValueB64 string  `json:"value_b64,omitempty"`
		From     string  `json:"from,omitempty"`
	}
	es := make([]entry, len(h))
	for i, x := range h {
		es[i].Name = x.Name
		switch {
		case x.form == headerFrom:
			es[i].From = x.From
		case x.form == headerB64:
			es[i].ValueB64 = x.raw
		case x.Value != nil:
			s := string(x.Value)
			es[i].Value = &s
		}
	}
	return json.Marshal(es)
}

// Timestamp is a record's timestamp: RFC 3339 text or epoch milliseconds.
type Timestamp struct {
	raw json.RawMessage
	at  time.Time
	ok  bool
}

// At is a timestamp at t (milliseconds: Kafka's resolution).
func At(t time.Time) *Timestamp {
	ms := t.UnixMilli()
	return &Timestamp{raw: json.RawMessage(strconv.FormatInt(ms, 10)), at: time.UnixMilli(ms), ok: true}
}

// Time is the timestamp once Validate checked it.
func (t *Timestamp) Time() time.Time { return t.at }

func (t *Timestamp) UnmarshalJSON(b []byte) error {
	t.raw = append(json.RawMessage(nil), bytes.TrimSpace(b)...)
	return nil
}

func (t Timestamp) MarshalJSON() ([]byte, error) {
	if t.ok {
		return []byte(strconv.FormatInt(t.at.UnixMilli(), 10)), nil
	}
	return t.raw, nil
}

// parse checks the written form: RFC 3339 text or non-negative epoch milliseconds.
func (t *Timestamp) parse() error {
	if t.ok {
		return nil
	}
	raw := string(t.raw)
	if strings.HasPrefix(raw, `"`) {
		var s string
		if err := json.Unmarshal(t.raw, &s); err != nil {
			return fmt.Errorf("not a JSON string")
		}
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("%q is not RFC 3339 text (2026-01-02T15:04:05.123Z) or epoch milliseconds", truncateText(s, 40))
		}
		if at.UnixMilli() < 0 || at.Year() > 9999 {
			return fmt.Errorf("%q is before 1970 or after 9999", truncateText(s, 40))
		}
		t.at, t.ok = time.UnixMilli(at.UnixMilli()), true
		return nil
	}
	ms, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || ms < 0 || ms > maxTimestampMS {
		return fmt.Errorf("%s is not epoch milliseconds from 0 to %d, nor RFC 3339 text", truncateText(raw, 40), int64(maxTimestampMS))
	}
	t.at, t.ok = time.UnixMilli(ms), true
	return nil
}

// maxTimestampMS is 9999-12-31T23:59:59.999Z.
const maxTimestampMS = 253402300799999

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
