package api

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/kpgtx/coordinator/txntype"
)

// The strict walk of a Kafka record's parts (txntype/record.go). Kafka carries bytes, so a NUL
// character is refused nowhere in what a record carries: a plain-string key or value, a typed
// payload's data, a header's value (the log never stores any of it). The shapes are checked
// here, naming the field; what the values mean (base64, a type's data, a reference, a
// timestamp's text) is checked by coord's Request.Validate.

var (
	payloadType    = reflect.TypeFor[txntype.Payload]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	headersType    = reflect.TypeFor[txntype.Headers]()
	timestampType  = reflect.TypeFor[txntype.Timestamp]()
)

// headerEntryType is the list form of one header (txntype.HeaderEntry).
var headerEntryType = reflect.TypeFor[txntype.HeaderEntry]()

// recordPart walks the value tok starts when t is one of a record's parts; done is false for
// any other type (and a payload object, walked as the struct it is).
func (w *walker) recordPart(t reflect.Type, tok item, depth int) (done bool, err error) {
	kind := tok.kind
	switch t {
	case payloadType:
		switch kind {
		case '"':
			return true, nil // UTF-8 text; NUL allowed
		case '{':
			return false, nil // {"type", "data", ...}: the struct's fields
		}
		return true, w.invalid(`must be a string, an object with "type" and "data", or null, not ` + jsonKind(kind))
	case timestampType:
		if kind != '"' && kind != '0' {
			return true, w.invalid("must be RFC 3339 text or epoch milliseconds, not " + jsonKind(kind))
		}
		return true, nil
	case headersType:
		switch kind {
		case '{':
			return true, w.object(depth, 'j', func(key []byte) (reflect.Type, string, error) {
				return nil, string(key), nil
			}, w.headerText)
		case '[':
			for i := 0; w.more(); i++ {
				mark := w.push('[', nil, i)
				if err := w.headerEntry(depth + 1); err != nil {
					return true, err
				}
				w.pop(mark)
			}
			_, err := w.next() // ]
			return true, err
		}
		return true, w.invalid("must be an object of name → text, or an array of {name, value | value_b64 | from}, not " + jsonKind(kind))
	}
	return false, nil
}

// headerText reads the value of one header of the object form: text, NUL allowed.
func (w *walker) headerText(reflect.Type, string, int) error {
	tok, err := w.next()
	if err != nil {
		return err
	}
	if tok.kind != '"' {
		return w.invalid("must be a string, not " + jsonKind(tok.kind))
	}
	return nil
}

// headerEntry reads one entry of the list form.
func (w *walker) headerEntry(depth int) error {
	tok, err := w.next()
	if err != nil {
		return err
	}
	if tok.kind != '{' {
		return w.invalid("must be an object {name, value | value_b64 | from}, not " + jsonKind(tok.kind))
	}
	fields := fieldsOf(headerEntryType)
	return w.object(depth, '.', func(key []byte) (reflect.Type, string, error) {
		f, ok := fields[string(key)]
		if !ok {
			return nil, "", w.invalid("unknown field; a header entry has name, value, value_b64 or from")
		}
		ft := f.typ
		if f.name != "value" && ft.Kind() == reflect.Pointer {
			ft = ft.Elem() // only a value may be null
		}
		return ft, f.name, nil
	}, func(ft reflect.Type, name string, depth int) error {
		if name == "value" || name == "name" {
			return w.text(ft)
		}
		return w.value(ft, depth)
	})
}

// text reads a string (or null where ft is a pointer) in which NUL is allowed.
func (w *walker) text(ft reflect.Type) error {
	tok, err := w.next()
	if err != nil {
		return err
	}
	switch tok.kind {
	case '"':
		return nil
	case 'n':
		if ft.Kind() == reflect.Pointer {
			return nil
		}
	}
	return w.invalid("must be a string, not " + jsonKind(tok.kind))
}

// maxDataDepth bounds the nesting of a typed payload's data, counted from the data (a scalar
// is level 0): deep enough for any document a record is made of, shallow enough that walking
// it (and encoding/json after) stays cheap.
const maxDataDepth = 128

// data reads a typed payload's data, which tok starts: any JSON value, taken as written (the
// record's bytes for type json, the encoder's input for a schema type). null is a value like
// any other, at the top or at any depth: what a type makes of it is the type's to say (binary
// and string need a string; a schema says where null fits). NUL is allowed in strings and
// keys (Kafka carries bytes); a key given twice in one object is refused, and nesting is
// bounded by maxDataDepth. Numbers are not read as numbers: the bytes are kept as written.
func (w *walker) data(tok item, depth int) error {
	switch tok.kind {
	case '[':
		if depth >= maxDataDepth {
			return w.invalid(fmt.Sprintf("nested deeper than %d levels", maxDataDepth))
		}
		for i := 0; w.more(); i++ {
			mark := w.push('[', nil, i)
			next, err := w.next()
			if err != nil {
				return err
			}
			if err := w.data(next, depth+1); err != nil {
				return err
			}
			w.pop(mark)
		}
		_, err := w.next() // ]
		return err
	case '{':
		if depth >= maxDataDepth {
			return w.invalid(fmt.Sprintf("nested deeper than %d levels", maxDataDepth))
		}
		var seen keySet
		for w.more() {
			k, err := w.next()
			if err != nil {
				return err
			}
			mark := w.push('j', k.text, 0) // a key is always a string token
			if !seen.add(string(k.text)) {
				return w.invalid("duplicate key: each key may appear once")
			}
			next, err := w.next()
			if err != nil {
				return err
			}
			if err := w.data(next, depth+1); err != nil {
				return err
			}
			w.pop(mark)
		}
		_, err := w.next() // }
		return err
	}
	return nil // a string, a number, true, false or null
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
