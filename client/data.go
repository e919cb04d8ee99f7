package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
)

// Data is a record's key or value (schema Payload): UTF-8 text, exact bytes, JSON, a value
// encoded against a Schema Registry schema, or a statement's result. Make it with Text, Binary,
// JSON, Avro, Protobuf, JSONSchema, Schema or FromResult.
type Data struct {
	Type     string          `json:"type"`
	Data     json.RawMessage `json:"data,omitempty"`
	SchemaID int             `json:"schema_id,omitempty"`
	Subject  string          `json:"subject,omitempty"`
	Version  int             `json:"version,omitempty"`
	Message  string          `json:"message,omitempty"`
	From     string          `json:"from,omitempty"`

	text *string // sent as a plain JSON string
	err  error   // from JSON's marshalling, reported by Submit
}

// Text is UTF-8 text, sent as a plain string (NUL allowed).
func Text(s string) *Data { return &Data{text: &s} }

// Binary is exactly b: any byte, a Confluent-framed value, a compressed blob, a UUID's 16 bytes.
func Binary(b []byte) *Data {
	raw, _ := json.Marshal(base64.StdEncoding.EncodeToString(b))
	return &Data{Type: "binary", Data: raw}
}

// JSON is v serialized compactly as the record's bytes (the server serializes it once). v may
// be nil (the JSON null) and may hold nil anywhere. A number travels as encoding/json writes
// it: a float64 cannot hold every integer beyond 2^53, nor 1.10 as written; give such numbers
// as json.Number, or the whole value as json.RawMessage, and their digits are kept exactly.
// The same holds for Avro, Protobuf, JSONSchema and Schema.
func JSON(v any) *Data {
	raw, err := json.Marshal(v)
	return &Data{Type: "json", Data: raw, err: err}
}

// Avro is v (Avro's JSON form) encoded against the latest schema of subject.
func Avro(subject string, v any) *Data { return Schema("avro", subject, 0, v) }

// Protobuf is v (protobuf's JSON form) encoded as the first message of the latest schema of
// subject; set Message to name another.
func Protobuf(subject string, v any) *Data { return Schema("protobuf", subject, 0, v) }

// JSONSchema is v, checked against the latest schema of subject.
func JSONSchema(subject string, v any) *Data { return Schema("jsonschema", subject, 0, v) }

// Schema is v encoded in format ("avro", "protobuf" or "jsonschema") against subject's version
// (0: the latest). For a schema by id, set SchemaID and leave Subject empty.
func Schema(format, subject string, version int, v any) *Data {
	d := JSON(v)
	d.Type, d.Subject, d.Version = format, subject, version
	return d
}

// FromResult is a result of the request's statement stmt: its row-th row as a JSON object
// (column empty), or that row's column as text (text as is, bytea as its bytes, other values
// as JSON text). The record is produced after the statement ran, in the same transaction; a
// row or column that is not there aborts the request. Change Type for another form ("json",
// "binary", or a schema type with Subject or SchemaID).
func FromResult(stmt, row int, column string) *Data {
	ref := "sql[" + strconv.Itoa(stmt) + "].rows[" + strconv.Itoa(row) + "]"
	if column == "" {
		return &Data{Type: "json", From: ref}
	}
	return &Data{Type: "string", From: ref + "[" + quote(column) + "]"}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// MarshalJSON writes a plain string for Text, the typed object otherwise.
func (d Data) MarshalJSON() ([]byte, error) {
	if d.err != nil {
		return nil, fmt.Errorf("client: JSON data: %w", d.err)
	}
	if d.text != nil {
		return json.Marshal(*d.text)
	}
	type plain Data
	return json.Marshal(plain(d))
}

// UnmarshalJSON reads what MarshalJSON writes: a plain string or the typed object.
func (d *Data) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*d = Data{text: &s}
		return nil
	}
	type plain Data
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*d = Data(p)
	return nil
}

// Header is one record header (the list form's entry); a record's headers keep their order and
// duplicate names. Exactly one of Value (text), ValueB64 (bytes, sent in base64) and From (a
// statement's result) is sent; none is a null value. TextHeader, BinaryHeader and HeaderFrom
// make them.
type Header struct {
	Name     string  `json:"name"`
	Value    *string `json:"value,omitempty"`
	ValueB64 []byte  `json:"value_b64,omitempty"`
	From     string  `json:"from,omitempty"`
}

// TextHeader is a header of UTF-8 text.
func TextHeader(name, value string) Header { return Header{Name: name, Value: &value} }

// BinaryHeader is a header of exactly b (sent in base64).
func BinaryHeader(name string, b []byte) Header {
	if b == nil {
		b = []byte{}
	}
	return Header{Name: name, ValueB64: b}
}

// HeaderFrom is a header whose value is column of row of statement stmt's result (text as is,
// bytea as its bytes, other values as JSON text, NULL as a null value).
func HeaderFrom(name string, stmt, row int, column string) Header {
	return Header{Name: name, From: FromResult(stmt, row, column).From}
}

// MarshalJSON writes exactly one of value, value_b64 and from ("value": null when none).
func (h Header) MarshalJSON() ([]byte, error) {
	e := map[string]any{"name": h.Name}
	switch {
	case h.From != "":
		e["from"] = h.From
	case h.ValueB64 != nil:
		e["value_b64"] = base64.StdEncoding.EncodeToString(h.ValueB64)
	case h.Value != nil:
		e["value"] = *h.Value
	default:
		e["value"] = nil
	}
	return json.Marshal(e)
}
