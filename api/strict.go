package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kpgtx/coordinator/txntype"
)

// Strict request decoding. encoding/json alone was lenient where a request must not be: it
// matches field names without regard to case, keeps the last of duplicate keys, and lets a
// NUL character through to PostgreSQL (which refuses it deep inside a transaction). Before a
// body is unmarshalled (decodeOptions), checkJSON walks its tokens along the Go type it is
// decoded into and refuses, naming the field by its path (sql[0].args[1]):
//
//   - a key that is not exactly a field's name (a case mismatch says which name was meant);
//   - a key given twice in one object (also in headers);
//   - a value of the wrong JSON type, or null where the field cannot be null (only pointer
//     fields, statement arguments and a typed payload's data can);
//   - an integer field whose number is not an integer of the field's size (1.5, 1e3,
//     9223372036854775808): it is refused, never rounded or wrapped;
//   - a number argument beyond float64 (1e400), which no SQL type takes as a number;
//   - a NUL character in any string or key, except in what a Kafka record carries (its key,
//     value and header values, and any string or key of a typed payload's data:
//     strict_records.go);
//   - nesting deeper than maxDepth.
//
// The body must be declared as JSON (Content-Type application/json, charset utf-8 if any).

// maxDepth bounds the nesting of a request body (statement arguments are scalars; the deepest
// legitimate path is sql[i].args[j]). A typed payload's data, a document of the caller's, has
// its own bound, maxDataDepth, counted from the data.
const maxDepth = 32

// jsonSpace is JSON's white space (RFC 8259, section 2).
const jsonSpace = " \t\n\r"

// errUnsupportedMediaType: the body is not declared as JSON (415); nothing was run.
var errUnsupportedMediaType = errors.New("unsupported media type")

// readJSON reads the body of r strictly into v. optional: a body of no bytes (no Content-Type
// needed) leaves v as it is and reports empty.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) (empty bool, err error) {
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		if err := checkContentType(ct); err != nil {
			return false, err
		}
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), r.ContentLength, s.cfg.MaxBodyBytes)
	if err != nil {
		return false, decodeError(err, s.cfg.MaxBodyBytes)
	}
	// Only a body of no bytes is no body. White space alone is not a JSON document (schemathesis:
	// a body of one space was taken for none, and the action ran); a vertical tab or a form feed
	// (white space to Go, not to JSON) is a malformed body, refused below.
	blank := len(bytes.Trim(body, jsonSpace)) == 0
	switch {
	case len(body) == 0 && optional:
		return true, nil
	case blank && optional:
		return false, &txntype.InvalidError{Field: "body", Reason: "a body of white space only: send no body, or a JSON object"}
	case blank:
		return false, &txntype.InvalidError{Field: "body", Reason: "empty body: expected a JSON object"}
	}
	if ct == "" {
		return false, fmt.Errorf("%w: the body must be sent with Content-Type: application/json", errUnsupportedMediaType)
	}
	if err := checkJSON(body, reflect.TypeOf(v).Elem()); err != nil {
		return false, err
	}
	if err := jsonv2.Unmarshal(body, v, decodeOptions); err != nil {
		return false, decodeError(err, s.cfg.MaxBodyBytes)
	}
	return false, nil
}

// decodeOptions decode a body the strict walk accepted into what encoding/json (with UseNumber
// and DisallowUnknownFields) made of it, at about twice its speed: encoding/json scanned the
// body twice, once to find its end and once to decode it, and a pipeline batch's body was the
// largest part of the coordinator's CPU per record. What differs between the two is left to
// the walk, which runs first and refuses it: a key whose case differs from its field's, a
// duplicate key, trailing data. TestDecodeAsEncodingJSON holds the two to the same results.
var decodeOptions = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	// Invalid UTF-8 becomes U+FFFD, as encoding/json made it.
	jsontext.AllowInvalidUTF8(true),
	// A statement argument's number stays its text (json.Number, as UseNumber gave it): the
	// parameter's type is PostgreSQL's to infer, and a float64 would round a bigint.
	jsonv2.WithUnmarshalers(jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *any) error {
		if dec.PeekKind() != '0' {
			return jsonv2.SkipFunc
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		*v = json.Number(tok.String())
		return nil
	})),
)

// readBody reads a body whole. A body that declares its length (at most max, which the limit
// middleware reserved for it) is read into one buffer of that size: io.ReadAll builds a large
// body in growing chunks and copies them into a final slice, allocating about twice its bytes,
// garbage that a burst of large bodies turns into resident memory before the collector catches
// up. A body that says nothing of its length is read as before.
func readBody(r io.Reader, declared, max int64) ([]byte, error) {
	if declared <= 0 || declared > max {
		return io.ReadAll(r)
	}
	// bytes.Buffer reads in steps of at least MinRead free bytes: the room for the read that
	// finds the end.
	buf := bytes.NewBuffer(make([]byte, 0, declared+bytes.MinRead))
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// checkContentType accepts application/json, with no charset or utf-8.
func checkContentType(ct string) error {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Errorf("%w: Content-Type %q; the body must be application/json", errUnsupportedMediaType, truncate(ct, 64))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return fmt.Errorf("%w: charset %q; the body must be application/json in UTF-8", errUnsupportedMediaType, truncate(cs, 32))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// checkJSON walks one JSON value along t (see the top of this file) and refuses trailing data.
// It reads with jsontext (the JSON v2 tokenizer, go-json-experiment/json), and a body it
// accepts costs it no allocation per value: strings and numbers are read as raw values into
// one buffer (walker.next), and the path of a value (sql[0].args[1]) is rendered only for an
// error (walker.path). Building every value's path and copying every string had been half the
// walk's time on a pipeline batch of hundreds of statements and records, and the walk a sixth
// of the coordinator's CPU. Duplicate names and invalid UTF-8 are left to the walk and to the
// decode: the walk names the field of a duplicate key, and the decode replaces invalid UTF-8.
func checkJSON(body []byte, t reflect.Type) error {
	w := &walker{dec: jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))}
	if err := w.value(t, 0); err != nil {
		return err
	}
	if _, err := w.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &txntype.InvalidError{Field: "body", Reason: "unexpected data after the JSON object"}
	}
	return nil
}

// walker is one walk: the tokenizer, the path of the value being read as a stack of segments
// (keys copied into one buffer), and the buffer the last string read was unquoted into.
type walker struct {
	dec  *jsontext.Decoder
	segs []segment
	keys []byte
	str  []byte
}

// segment is one step of a path: an array's element, or an object's member, whose key is
// keys[from:to] and is written in the path as style says.
type segment struct {
	style    byte // '.': a struct's field (join); '[': an element (index); 'q': a map's key, Go-quoted; 'j': a key, JSON-quoted
	i        int
	from, to int
}

// item is what walker.next read: its kind and, for a string, its unquoted text, for a number
// its text as written; text is valid until the next read.
type item struct {
	kind jsontext.Kind
	text []byte
}

// next reads the next token. A string is read as its raw value: one without escapes and of
// valid UTF-8 is its own text, any other is unquoted into w.str, as jsontext.Token.String would
// unquote it but without allocating a string. A number is read as written.
func (w *walker) next() (item, error) {
	switch k := w.dec.PeekKind(); k {
	case '"', '0':
		raw, err := w.dec.ReadValue()
		if err != nil {
			return item{}, decodeError(err, 0)
		}
		if k == '0' {
			return item{kind: k, text: raw}, nil
		}
		if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
			return item{kind: k, text: raw[1 : len(raw)-1]}, nil // what unquoting would give
		}
		w.str, _ = jsontext.AppendUnquote(w.str[:0], raw) // as Token.String: invalid UTF-8 as U+FFFD
		return item{kind: k, text: w.str}, nil
	}
	tok, err := w.dec.ReadToken()
	if err != nil {
		return item{}, decodeError(err, 0)
	}
	return item{kind: tok.Kind()}, nil
}

// more reports whether the array or object being read has another element; on a syntax error
// it reports true, and the next read returns the error.
func (w *walker) more() bool {
	k := w.dec.PeekKind()
	return k != ']' && k != '}'
}

// push enters a member (style and its key) or an element (style '[', i); pop(mark) leaves it.
func (w *walker) push(style byte, key []byte, i int) (mark int) {
	mark, from := len(w.segs), len(w.keys)
	w.keys = append(w.keys, key...)
	w.segs = append(w.segs, segment{style: style, i: i, from: from, to: len(w.keys)})
	return mark
}

func (w *walker) pop(mark int) {
	w.keys = w.keys[:w.segs[mark].from]
	w.segs = w.segs[:mark]
}

// path renders the path of the value being read: sql[0].args[1], kafka[0].headers["a"].
func (w *walker) path() string {
	var b []byte
	for _, s := range w.segs {
		key := string(w.keys[s.from:s.to])
		switch s.style {
		case '.':
			if len(b) > 0 {
				b = append(b, '.')
			}
			b = append(b, key...)
		case '[':
			b = append(strconv.AppendInt(append(b, '['), int64(s.i), 10), ']')
		case 'q':
			b = append(strconv.AppendQuote(append(b, '['), key), ']')
		case 'j':
			b = append(append(append(b, '['), quote(key)...), ']')
		}
	}
	return string(b)
}

// invalid refuses the value being read (its path; "body" for the top).
func (w *walker) invalid(reason string) error {
	path := w.path()
	if path == "" {
		path = "body"
	}
	return &txntype.InvalidError{Field: path, Reason: reason}
}

// value reads the next value, which is decoded into a t.
func (w *walker) value(t reflect.Type, depth int) error {
	if depth > maxDepth {
		return w.invalid(fmt.Sprintf("nested deeper than %d levels", maxDepth))
	}
	tok, err := w.next()
	if err != nil {
		return err
	}
	if t == rawMessageType {
		// An opaque JSON value (a typed payload's data): any JSON, null included, taken as
		// written; what it may be is the payload type's to say (strict_records.go).
		return w.data(tok, 0)
	}
	kind := tok.kind
	nullable := false
	for t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), true
	}
	if kind == 'n' {
		if nullable || t.Kind() == reflect.Interface {
			return nil
		}
		return w.invalid("must be " + kindName(t) + ", not null")
	}
	if done, err := w.recordPart(t, tok, depth); done {
		return err
	}
	switch t.Kind() {
	case reflect.Interface:
		return w.anyValue(tok, depth)
	case reflect.Struct:
		if kind != '{' {
			return w.invalid("must be an object, not " + jsonKind(kind))
		}
		fields := fieldsOf(t)
		return w.object(depth, '.', func(key []byte) (reflect.Type, string, error) {
			f, ok := fields[string(key)]
			if !ok {
				if exact, ok := fieldByFold(t, string(key)); ok {
					return nil, "", w.invalid(fmt.Sprintf("unknown field; field names are case-sensitive: did you mean %q?", exact))
				}
				return nil, "", w.invalid("unknown field")
			}
			return f.typ, f.name, nil
		}, nil)
	case reflect.Map:
		if kind != '{' {
			return w.invalid("must be an object, not " + jsonKind(kind))
		}
		return w.object(depth, 'q', func(key []byte) (reflect.Type, string, error) {
			return t.Elem(), string(key), nil
		}, nil)
	case reflect.Slice:
		if kind != '[' {
			return w.invalid("must be an array, not " + jsonKind(kind))
		}
		return w.elements(t.Elem(), depth)
	case reflect.String:
		if kind != '"' {
			return w.invalid("must be a string, not " + jsonKind(kind))
		}
		return w.checkString(tok.text)
	case reflect.Bool:
		if kind != 't' && kind != 'f' {
			return w.invalid("must be true or false, not " + jsonKind(kind))
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if kind != '0' {
			return w.invalid("must be an integer, not " + jsonKind(kind))
		}
		bits := t.Bits()
		if _, err := strconv.ParseInt(string(tok.text), 10, bits); err != nil {
			lo, hi := int64(-1)<<(bits-1), int64(1<<(bits-1)-1)
			return w.invalid(fmt.Sprintf("must be an integer from %d to %d, written without fraction or exponent; got %s", lo, hi, truncate(string(tok.text), 40)))
		}
		return nil
	}
	return w.invalid("cannot be decoded") // no request type has other kinds
}

// elements reads the elements of an array whose '[' was read, each decoded into an elem.
func (w *walker) elements(elem reflect.Type, depth int) error {
	for i := 0; w.more(); i++ {
		mark := w.push('[', nil, i)
		if err := w.value(elem, depth+1); err != nil {
			return err
		}
		w.pop(mark)
	}
	_, err := w.next() // ]
	return err
}

// object reads the members of an object whose '{' was read; each member's path is the
// object's with the key in style. field gives a key's type and the name its duplicates are
// found by; read (nil: the strict walk, value) reads a member's value.
func (w *walker) object(depth int, style byte, field func(key []byte) (reflect.Type, string, error),
	read func(ft reflect.Type, name string, depth int) error) error {
	var seen keySet
	for w.more() {
		tok, err := w.next()
		if err != nil {
			return err
		}
		key := tok.text // a key is always a string token
		if bytes.IndexByte(key, 0) >= 0 {
			return w.invalid("a key contains a NUL character (U+0000)")
		}
		mark := w.push(style, key, 0)
		ft, name, err := field(key)
		if err != nil {
			return err
		}
		if !seen.add(name) {
			return w.invalid("duplicate key: each key may appear once")
		}
		if read != nil {
			err = read(ft, name, depth+1)
		} else {
			err = w.value(ft, depth+1)
		}
		if err != nil {
			return err
		}
		w.pop(mark)
	}
	_, err := w.next() // }
	return err
}

// keySet holds the keys of one object read so far. Most objects of a request have a handful
// of keys (a statement, a record): they are looked up in a small array, without the map an
// object used to allocate (a quarter of the walk's allocations on a batch of hundreds); a
// larger object moves to a map.
type keySet struct {
	few  [8]string
	n    int
	many map[string]bool
}

// add records key and reports whether it was new.
func (s *keySet) add(key string) bool {
	if s.many != nil {
		if s.many[key] {
			return false
		}
		s.many[key] = true
		return true
	}
	for _, k := range s.few[:s.n] {
		if k == key {
			return false
		}
	}
	if s.n < len(s.few) {
		s.few[s.n] = key
		s.n++
		return true
	}
	s.many = make(map[string]bool, 2*len(s.few))
	for _, k := range s.few {
		s.many[k] = true
	}
	s.many[key] = true
	return true
}

// anyValue checks a value decoded into an interface (a statement argument): any JSON, with
// no NUL in strings, no duplicate keys, and numbers within float64.
func (w *walker) anyValue(tok item, depth int) error {
	switch tok.kind {
	case '"':
		return w.checkString(tok.text)
	case '0':
		if !withinFloat64(tok.text) {
			v := truncate(string(tok.text), 40)
			return w.invalid(fmt.Sprintf("the number %s is out of range; send it as a string (\"%s\") for a numeric column", v, v))
		}
	case '[':
		return w.elements(anyType, depth)
	case '{':
		return w.object(depth, 'q', func(key []byte) (reflect.Type, string, error) {
			return anyType, string(key), nil
		}, nil)
	}
	return nil
}

// withinFloat64 reports whether the JSON number n is within float64's range. An integer of up
// to 300 digits is (float64 reaches beyond 10^308), without parsing it.
func withinFloat64(n []byte) bool {
	digits := n
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) <= 300 && bytes.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) < 0 {
		return true
	}
	f, err := strconv.ParseFloat(string(n), 64)
	return err == nil && !math.IsInf(f, 0)
}

var anyType = reflect.TypeFor[any]()

func (w *walker) checkString(s []byte) error {
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return w.invalid(fmt.Sprintf("contains a NUL character (U+0000) at byte %d; PostgreSQL and Kafka headers cannot carry it", i))
	}
	return nil
}

// field is a struct field as the walk knows it: its type and its JSON name.
type field struct {
	typ  reflect.Type
	name string
}

// fieldTypes caches, per struct type, its fields by their JSON names: a request walks the
// same few types every time, and looking fields up by reflection on every key was most of
// checkJSON's cost.
var fieldTypes sync.Map // reflect.Type → map[string]field

// fieldsOf gives t's fields by their JSON names (the first field of a name, as encoding/json).
func fieldsOf(t reflect.Type) map[string]field {
	v, ok := fieldTypes.Load(t)
	if !ok {
		m := map[string]field{}
		for i := range t.NumField() {
			f := t.Field(i)
			if n := jsonName(f); n != "" {
				if _, dup := m[n]; !dup {
					m[n] = field{typ: f.Type, name: n}
				}
			}
		}
		v, _ = fieldTypes.LoadOrStore(t, m)
	}
	return v.(map[string]field)
}

// fieldByFold finds the field that encoding/json would match without regard to case.
func fieldByFold(t reflect.Type, key string) (string, bool) {
	for i := range t.NumField() {
		if n := jsonName(t.Field(i)); n != "" && strings.EqualFold(n, key) {
			return n, true
		}
	}
	return "", false
}

func jsonName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch name {
	case "-":
		return ""
	case "":
		return f.Name
	}
	return name
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	}
	return "a value"
}

// jsonKind names a token's kind in an error.
func jsonKind(k jsontext.Kind) string {
	switch k {
	case '[':
		return "an array"
	case '{':
		return "an object"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	}
	return "null"
}
